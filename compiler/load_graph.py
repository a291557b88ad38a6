"""Load stage for graph formats: frozen GraphDefs and SavedModels.

Every graph format ends up as one *frozen* ``GraphDef`` (weights are
``Const`` nodes) plus the names of its input placeholder(s) and output
tensors; ``streamify_graph`` works on that.

* frozen GraphDef: binary ``.pb`` or text ``.pbtxt``, told apart by content
  (a text proto parses as text, anything else is tried as binary).
* SavedModel v1 and v2: compiler/load_saved_model.py freezes the serving
  signature into such a GraphDef.

Inputs are the ``Placeholder`` nodes (the dangling
``unused_control_flow_input*`` ones that freezing leaves behind are
ignored) or the signature inputs; outputs are the nodes nothing consumes or
the signature outputs. Both can be overridden: ``--inputs`` may name any
tensor (``Mfcc``, ``Mfcc:0``), and the graph is then cut there (a Placeholder
takes its place; an audio front end before it is dropped); only what the
outputs need is kept. A string input (``wav_data`` -> DecodeWav -> ...) is
refused with the tensor to cut at.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from .errors import TfaotError
from .graphdef import FLOAT_TYPES, NON_DATA_TYPES, consumers_of, node_of, out_dtype

# Node types that are never a model output even if nothing consumes them.
_NOT_OUTPUTS = {"NoOp", "Assert", "Placeholder", "Const", "VarHandleOp", "VariableV2",
                "SaveV2", "RestoreV2", "Enter", "Exit", "NextIteration", "LoopCond",
                "TensorListReserve", "EmptyTensorList", "TensorArrayV3", "TensorListFromTensor"}
_UNUSED_CF_INPUT = re.compile(r"(^|/)unused_control_flow_input(_\d+)?$")


@dataclass
class GraphOptions:
    """Overrides for graph formats (frozen GraphDef, SavedModel)."""

    inputs: str | None = None  # "NAME:D0xD1x...,..."
    outputs: str | None = None  # "NAME,..."
    time_axis: int | None = None
    state: str | None = None  # "IN=OUT,...": state the graph's caller feeds back
    signature: str | None = None  # a SavedModel's signature (default: serving_default)


@dataclass
class GraphInput:
    """One input placeholder of the graph (its full, sequence shape)."""

    name: str  # node name, no ":0"
    dtype: str  # numpy dtype name
    shape: tuple[int | None, ...] | None  # None for an unknown rank / dim
    time_axis: int | None = None  # None: chosen by streamify_graph

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "dtype": self.dtype,
                "shape": None if self.shape is None else list(self.shape),
                "time_axis": self.time_axis}


@dataclass
class LoadedGraph:
    """A frozen graph and its interface, as ``streamify_graph`` needs it."""

    path: Path  # the model path, for messages
    format: str  # "graphdef" or "savedmodel"
    graph_def: Any  # tf.compat.v1.GraphDef, frozen
    inputs: list[GraphInput]
    outputs: list[str]  # tensor names, "node:0"
    output_names: list[str]  # user-facing names (signature keys or node names)
    details: dict[str, Any] = field(default_factory=dict)


# --------------------------------------------------------------------------
# Public entry points


def load_graph(path: str | os.PathLike, inputs: Sequence[str] | str | None = None,
               outputs: Sequence[str] | str | None = None,
               time_axis: int | None = None, signature: str | None = None) -> LoadedGraph:
    """Load a frozen GraphDef (.pb/.pbtxt) or a SavedModel folder (v1 or v2).

    ``inputs``: ``NAME:SHAPE`` strings (``"x:1x100x40"``, ``"x:1,?,40"``; a
    comma-separated string of several is accepted too); ``outputs``: node or
    tensor names; ``time_axis``: the time axis of the (first) input;
    ``signature``: which signature of a SavedModel (default: serving_default).
    """
    from .tfenv import quiet_tensorflow

    quiet_tensorflow()
    path = Path(path)
    if not path.exists():
        raise TfaotError(f"{path}: no such file or directory")
    input_specs = parse_input_specs(inputs, path)
    output_specs = parse_output_specs(outputs)
    if path.is_dir():
        if not ((path / "saved_model.pb").is_file() or (path / "saved_model.pbtxt").is_file()):
            raise TfaotError(f"{path}: a folder, but not a SavedModel (no saved_model.pb inside)")
        from .load_saved_model import load_saved_model

        loaded = load_saved_model(path, input_specs, output_specs, signature)
    else:
        if signature is not None:
            raise TfaotError(f"--signature {signature}: {path} is a frozen graph, which has "
                             "no signatures (only SavedModel folders do)")
        graph_def, text = read_graph_def(path)
        loaded = graph_def_to_loaded(graph_def, path, "graphdef", input_specs, output_specs)
        loaded.details["text_format"] = text
    if time_axis is not None:
        if not loaded.inputs:
            raise TfaotError(f"{path}: --time-axis given but the graph has no input")
        inp = loaded.inputs[0]
        rank = None if inp.shape is None else len(inp.shape)
        if rank is not None and not -rank <= time_axis < rank:
            raise TfaotError(f"{path}: time axis {time_axis} is out of range for input "
                             f"'{inp.name}' of shape {_fmt_shape(inp.shape)}")
        inp.time_axis = time_axis % rank if rank else time_axis
    return loaded


def read_graph_def(path: Path):
    """Read a GraphDef, text or binary (detected from the content)."""
    import tensorflow as tf
    from google.protobuf import message, text_format

    try:
        data = path.read_bytes()
    except OSError as e:
        raise TfaotError(f"{path}: cannot read: {e.strerror}") from None
    if not data:
        raise TfaotError(f"{path}: the file is empty")
    graph_def = tf.compat.v1.GraphDef()
    if _looks_like_text(data):
        try:
            text_format.Parse(data.decode("utf-8"), graph_def)
        except (text_format.ParseError, UnicodeDecodeError) as e:
            raise TfaotError(f"{path}: not a valid text GraphDef (.pbtxt): {e}") from None
        _check_nonempty(graph_def, path)
        return graph_def, True
    try:
        graph_def.ParseFromString(data)
    except (message.DecodeError, RuntimeError, ValueError) as e:
        raise TfaotError(f"{path}: not a valid GraphDef: cannot parse it as a binary "
                         f"protobuf ({e}); the file may be truncated or not a model") from None
    _check_nonempty(graph_def, path)
    # A random byte string can parse as a protobuf with garbage fields; a
    # real GraphDef has nodes with an op and a name.
    for node in graph_def.node:
        if not node.op or not node.name:
            raise TfaotError(f"{path}: not a valid GraphDef: a node without an op or name "
                             "(the file may be truncated or not a model)")
    return graph_def, False


def graph_def_to_loaded(graph_def, path: Path, fmt: str, input_specs=None,
                        output_specs=None, details: dict | None = None) -> LoadedGraph:
    """Find the inputs/outputs of an in-memory frozen GraphDef and cut it to them.

    ``input_specs`` may name any tensor (``NAME`` or ``NAME:INDEX``), not only
    a Placeholder: the graph is cut there (a Placeholder takes the tensor's
    place) and everything that only fed it is dropped. Nodes the outputs do
    not need are dropped too. The graph as given stays in
    ``details["source_graph_def"]`` with the tensors to feed in it, so that a
    reference can run the original graph.
    """
    import tensorflow as tf

    nodes = {n.name: n for n in graph_def.node}
    consumed = set()
    for n in graph_def.node:
        for i in n.input:
            consumed.add(node_of(i))
    if output_specs:
        outputs = []
        for name in output_specs:
            node_name, _, idx = name.partition(":")
            if node_name not in nodes:
                raise TfaotError(f"{path}: output node '{node_name}' is not in the graph")
            outputs.append(f"{node_name}:{idx or 0}")
        output_names = [o.partition(":")[0] for o in output_specs]
    else:
        outs = [n for n in graph_def.node
                if n.name not in consumed and n.op not in _NOT_OUTPUTS
                and not n.op.startswith("Save") and not n.op.startswith("Restore")
                and out_dtype(n) not in NON_DATA_TYPES]
        if len(outs) > 1:
            # Unused final loop values (the Identity nodes tf.while_loop adds
            # in the loop's scope) are not outputs when there is anything else.
            rest = [n for n in outs if not _reads_loop_result(n, nodes)]
            outs = rest or outs
        if not outs:
            raise TfaotError(f"{path}: cannot find the graph's output: every node is "
                             "consumed by another (give them with --outputs NAME,...)")
        outputs = [f"{n.name}:0" for n in outs]
        output_names = [n.name for n in outs]
    details = dict(details or {})
    details["source_graph_def"] = graph_def
    inputs: list[GraphInput] = []
    feeds: list[str] = []
    cut_info: list[dict] = []
    if input_specs:
        cuts = []
        for name, shape in input_specs:
            node_name, _, idx = name.partition(":")
            node = nodes.get(node_name)
            if node is None:
                raise TfaotError(f"{path}: input node '{node_name}' is not in the graph")
            cuts.append((node, int(idx or 0), shape))
        graph_def, inputs, cut_info = _cut(graph_def, path, cuts, outputs)
        feeds = [c["tensor"] for c in cut_info]
    else:
        graph_def, dropped = _prune(graph_def, outputs)
        if dropped:
            details["pruned_nodes"] = dropped
        consumed = {node_of(i) for n in graph_def.node for i in n.input if i[:1] != "^"}
        data = _data_needed(graph_def, outputs)
        for n in graph_def.node:
            if n.op in ("Placeholder", "PlaceholderV2") and not _UNUSED_CF_INPUT.search(n.name):
                if n.name not in consumed or n.name not in data:
                    continue  # dangling placeholder (freezing leftovers)
                inputs.append(GraphInput(n.name, tf.dtypes.as_dtype(n.attr["dtype"].type).name,
                                         _placeholder_shape(n)))
                feeds.append(f"{n.name}:0")
        if not inputs:
            raise TfaotError(f"{path}: the graph has no input: no Placeholder node found "
                             "(give one with --inputs NAME:SHAPE)")
        non_numeric = [i for i in inputs if i.dtype in ("string", "variant", "resource")]
        if non_numeric:
            raise TfaotError(_front_end_message(graph_def, path, non_numeric[0]))
    details["feeds"] = feeds
    if cut_info:
        details["cut"] = cut_info
    return LoadedGraph(path, fmt, graph_def, inputs, outputs, output_names, details)


# Ops that decode or preprocess raw data before a network (an audio or image front end).
FRONT_END_OPS = {"DecodeWav", "AudioSpectrogram", "Mfcc", "DecodeRaw", "DecodeJpeg",
                 "DecodePng", "DecodeImage", "DecodeBmp", "DecodeGif", "DecodeAndCropJpeg",
                 "DecodeCSV", "ParseExample", "ParseExampleV2", "ParseSingleExample",
                 "StringToNumber", "DecodeBase64", "DecodeCompressed", "DecodePaddedRaw",
                 "DecodeProtoV2", "StringSplit", "StringSplitV2", "Substr"}


def _prune(graph_def, outputs: list[str]):
    """Keep only what ``outputs`` need, through data and control inputs (v1 loops put
    nodes in their frame by control edges). Returns (graph_def, number of dropped nodes)."""
    import tensorflow as tf

    needed = _reachable(graph_def, outputs, control=True)
    if len(needed) == len(graph_def.node):
        return graph_def, 0
    out = tf.compat.v1.GraphDef()
    out.versions.CopyFrom(graph_def.versions)
    out.library.CopyFrom(graph_def.library)
    out.node.extend(n for n in graph_def.node if n.name in needed)
    return out, len(graph_def.node) - len(needed)


def _data_needed(graph_def, outputs: list[str]) -> set[str]:
    """The nodes ``outputs`` need through data inputs alone."""
    return _reachable(graph_def, outputs, control=False)


def _reachable(graph_def, outputs: list[str], *, control: bool) -> set[str]:
    """The nodes ``outputs`` read, transitively (through control inputs too if ``control``)."""
    nodes = {n.name: n for n in graph_def.node}
    needed: set[str] = set()
    work = [node_of(o) for o in outputs]
    while work:
        u = work.pop()
        if u in needed or u not in nodes:
            continue
        needed.add(u)
        work.extend(node_of(i) for i in nodes[u].input if control or not i.startswith("^"))
    return needed


def _tensor_facts(graph_def, tensors: list[str]):
    """(dtype name, static shape or None) of each tensor, from TensorFlow's shape inference."""
    import tensorflow as tf

    g = tf.Graph()
    try:
        with g.as_default():
            tf.graph_util.import_graph_def(graph_def, name="")
    except Exception:
        return {}
    facts = {}
    for t in tensors:
        try:
            tensor = g.get_tensor_by_name(t)
        except (KeyError, ValueError):
            continue
        shape = None if tensor.shape.rank is None else tuple(tensor.shape.as_list())
        facts[t] = (tensor.dtype.name, shape)
    return facts


def _cut(graph_def, path: Path, cuts, outputs: list[str]):
    """Replace each cut tensor by a Placeholder; drop what only fed them."""
    import tensorflow as tf

    nodes = {n.name: n for n in graph_def.node}
    tensors = [f"{node.name}:{idx}" for node, idx, _ in cuts]
    facts = _tensor_facts(graph_def, tensors)
    replace: dict[str, str] = {}  # "node:idx" -> placeholder name
    new_nodes = []
    inputs, info = [], []
    for (node, idx, shape), tensor in zip(cuts, tensors):
        if node.op in ("Placeholder", "PlaceholderV2") and idx == 0:
            dtype = tf.dtypes.as_dtype(node.attr["dtype"].type).name
            inputs.append(GraphInput(node.name, dtype,
                                     shape if shape is not None else _placeholder_shape(node)))
            continue
        if tensor not in facts:
            raise TfaotError(f"{path}: input '{tensor}': node '{node.name}' (op {node.op}) "
                             f"has no output {idx} (or TensorFlow cannot import the graph)")
        dtype, static_shape = facts[tensor]
        if shape is None:
            shape = static_shape
        if static_shape is not None and shape is not None:
            if len(shape) != len(static_shape) or any(
                    a is not None and b is not None and a != b
                    for a, b in zip(shape, static_shape)):
                raise TfaotError(f"{path}: input '{tensor}' has shape "
                                 f"{_fmt_shape(static_shape)} in the graph, not "
                                 f"{_fmt_shape(shape)}")
            shape = tuple(a if a is not None else b for a, b in zip(shape, static_shape))
        ph_name = node.name if idx == 0 else f"{node.name}_output{idx}"
        while ph_name in nodes and ph_name != node.name:
            ph_name += "_"
        replace[tensor] = ph_name
        ph = tf.compat.v1.NodeDef(name=ph_name, op="Placeholder")
        ph.attr["dtype"].type = tf.as_dtype(dtype).as_datatype_enum
        if shape is not None:
            ph.attr["shape"].shape.CopyFrom(
                tf.TensorShape([None if d is None else d for d in shape]).as_proto())
        new_nodes.append(ph)
        inputs.append(GraphInput(ph_name, dtype, None if shape is None else tuple(shape)))
        info.append({"tensor": tensor, "placeholder": ph_name, "op": node.op,
                     "dtype": dtype, "shape": None if shape is None else list(shape)})
    if not replace:
        gd, _ = _prune(graph_def, outputs)
        return gd, inputs, []
    cut_nodes = {node_of(t) for t in replace}
    rewired = tf.compat.v1.GraphDef()
    rewired.versions.CopyFrom(graph_def.versions)
    rewired.library.CopyFrom(graph_def.library)
    rewired.node.extend(new_nodes)
    ph_names = {p.name for p in new_nodes}
    for n in graph_def.node:
        if n.name in ph_names:
            continue  # its place is taken by the placeholder of the same name
        c = rewired.node.add()
        c.CopyFrom(n)
        ins = []
        for i in n.input:
            if i.startswith("^"):
                if node_of(i) not in cut_nodes:
                    ins.append(i)
                continue
            node, _, k = i.partition(":")
            ins.append(replace.get(f"{node}:{k or 0}", i))
        c.input[:] = ins
    before = {n.name for n in graph_def.node}
    gd, _ = _prune(rewired, outputs)
    kept = {n.name for n in gd.node}
    data = _data_needed(gd, outputs)
    for n in gd.node:
        if n.op in ("Placeholder", "PlaceholderV2") and n.name in data and \
                n.name not in {i.name for i in inputs} and \
                not _UNUSED_CF_INPUT.search(n.name):
            raise TfaotError(f"{path}: after the cut at {', '.join(tensors)} the output(s) "
                             f"still need the graph input '{n.name}'; cut there too or "
                             "choose other --inputs")
    dropped = sorted(before - kept)
    dropped_ops = sorted({nodes[d].op for d in dropped})
    for c in info:
        c["dropped_nodes"] = len(dropped)
        c["dropped_ops"] = dropped_ops
    used = {node_of(i) for n in gd.node for i in n.input}
    for inp in inputs:
        if inp.name not in used and not any(o.startswith(inp.name + ":") for o in outputs):
            raise TfaotError(f"{path}: input '{inp.name}' does not feed the output(s) "
                             f"{', '.join(outputs)}")
    return gd, inputs, info


def _front_end_message(graph_def, path: Path, inp: GraphInput) -> str:
    """Why a string input cannot be streamed, and where to cut the graph instead."""
    nodes = {n.name: n for n in graph_def.node}
    consumers = consumers_of(graph_def)
    order = [n.name for n in graph_def.node]
    pos = {name: k for k, name in enumerate(order)}
    # Forward from the input, in graph order.
    seen, work = set(), [inp.name]
    while work:
        u = work.pop()
        for c in consumers.get(u, []):
            if c not in seen:
                seen.add(c)
                work.append(c)
    downstream = sorted(seen, key=lambda n: pos.get(n, 0))
    chain = [n for n in downstream if nodes[n].op in FRONT_END_OPS]
    suggestion = None
    float_nodes = [n for n in downstream if out_dtype(nodes[n]) in FLOAT_TYPES
                   or nodes[n].op in ("Mfcc", "AudioSpectrogram", "DecodeWav")]
    if chain:
        last = chain[-1]
        suggestion = last
    elif float_nodes:
        suggestion = float_nodes[0]
    what = f"input '{inp.name}' is a {inp.dtype} placeholder"
    if chain:
        what += " feeding a front end (" + " -> ".join(
            dict.fromkeys(nodes[n].op for n in chain)) + ")"
    msg = f"{path}: {what}; tfaot streams numeric tensors only"
    if suggestion is None:
        return msg + ": cut the graph where the network starts with --inputs NAME:SHAPE"
    tensor = f"{suggestion}:0"
    facts = _tensor_facts(graph_def, [tensor]).get(tensor)
    shape = "SHAPE" if facts is None or facts[1] is None else _fmt_shape(facts[1])
    return (msg + f": cut the graph where the network starts, e.g. --inputs "
            f"{suggestion}:{shape} (the first float tensor after the front end)")


def parse_input_specs(inputs, path=None) -> list[tuple[str, tuple | None]] | None:
    """``"x:1x100x40"`` / ``["x:1,?,40", "y"]`` -> ``[("x", (1, None, 40)), ...]``.

    An item is ``NAME``, ``NAME:SHAPE``, ``NAME:INDEX`` or ``NAME:INDEX:SHAPE``;
    NAME may be any node (the graph is cut there), INDEX its output (a bare
    number after the name is an index, ``Split:1``, never a rank-1 shape).
    """
    if inputs is None:
        return None
    if isinstance(inputs, str):
        # "a:1x2x3,b:4x5"; a piece that is only a dimension ("x:1,?,40")
        # continues the previous item.
        items = []
        for piece in inputs.split(","):
            piece = piece.strip()
            if items and re.fullmatch(r"\?|-?\d+|None", piece) and ":" in items[-1]:
                items[-1] += "," + piece
            elif piece:
                items.append(piece)
    else:
        items = list(inputs)
    where = f"{path}: " if path else ""
    specs = [_parse_input_item(item.strip(), where) for item in items]
    _refuse_duplicates([name for name, _ in specs], "--inputs")
    return specs


def _parse_input_item(item: str, where: str) -> tuple[str, tuple | None]:
    """NAME, NAME:INDEX, NAME:SHAPE or NAME:INDEX:SHAPE; a bare number after
    the name is an output index ("Split:1"), not a rank-1 shape."""
    parts = item.split(":")
    name, shape_text = parts[0], None
    if len(parts) in (2, 3) and re.fullmatch(r"\d+", parts[1]):
        name = parts[0] if parts[1] == "0" else f"{parts[0]}:{parts[1]}"
        shape_text = parts[2] if len(parts) == 3 else None
    elif len(parts) == 2:
        shape_text = parts[1]
    elif len(parts) > 2:
        raise TfaotError(f"{where}bad input spec '{item}': expected NAME[:INDEX][:SHAPE] "
                         "like x:1x100x40 or Mfcc:0:1x49x10")
    if not name:
        raise TfaotError(f"{where}bad input spec '{item}': the tensor name is missing")
    if shape_text is None:
        return name, None
    return name, _parse_shape(shape_text, item, where)


def _parse_shape(shape_text: str, item: str, where: str) -> tuple:
    """"1x100x40" / "1,?,40" -> (1, None, 40); every dimension a positive
    length or ? (an empty one, "1x3x", is a typo, not a rank-2 shape)."""
    dims = re.split(r"[x,\s]+", shape_text.strip().strip("[]() "))
    shape = []
    for d in dims:
        if d in ("?", "None", "none"):
            shape.append(None)
        elif re.fullmatch(r"\d+", d) and int(d) > 0:
            shape.append(int(d))
        else:
            why = "a dimension of length 0 holds no data" if re.fullmatch(r"0+", d) else \
                f"'{d}' is not a dimension" if d else "a dimension is missing"
            raise TfaotError(f"{where}bad input spec '{item}': {why}; expected NAME:SHAPE "
                             "like x:1x100x40 (? for an unknown dimension)")
    return tuple(shape)


def _refuse_duplicates(names: list[str], flag: str, key=lambda name: name) -> None:
    """A name given twice is a typo; taking either silently hides it.
    ``key``: what makes two names the same tensor ("y" and "y:0")."""
    seen = set()
    for name in names:
        if key(name) in seen:
            raise TfaotError(f"{flag}: '{name}' is given twice")
        seen.add(key(name))


def parse_output_specs(outputs) -> list[str] | None:
    if outputs is None:
        return None
    if isinstance(outputs, str):
        outputs = [o for o in outputs.split(",")]
    out = [o.strip() for o in outputs if o.strip()]
    _refuse_duplicates(out, "--outputs", key=lambda o: o if ":" in o else o + ":0")
    return out or None


# --------------------------------------------------------------------------
# SavedModel


# --------------------------------------------------------------------------
# helpers


def _reads_loop_result(node, nodes) -> bool:
    """An Identity that tf.while_loop adds in the loop's scope for a result."""
    if node.op != "Identity" or not node.input:
        return False
    src = nodes.get(node_of(node.input[0]))
    return src is not None and src.op in ("While", "StatelessWhile") and \
        node.name.startswith(src.name + "/")


def _looks_like_text(data: bytes) -> bool:
    head = data[:4096]
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError:
        # A multi-byte character cut at 4096 is fine; real binary is not.
        try:
            text = head[:-4].decode("utf-8")
        except UnicodeDecodeError:
            return False
    if "\x00" in text:
        return False
    stripped = text.lstrip()
    return bool(re.match(r"(#|node\s*[{<]|library\s*[{<]|versions\s*[{<]|[a-z_]+\s*[:{<])",
                         stripped))


def _check_nonempty(graph_def, path: Path) -> None:
    if len(graph_def.node) == 0:
        raise TfaotError(f"{path}: not a valid GraphDef: it contains no nodes")


def _placeholder_shape(node) -> tuple[int | None, ...] | None:
    if "shape" not in node.attr:
        return None
    shp = node.attr["shape"].shape
    if shp.unknown_rank:
        return None
    return tuple(None if d.size < 0 else int(d.size) for d in shp.dim)


def _fmt_shape(shape) -> str:
    if shape is None:
        return "<unknown>"
    return "x".join("?" if d is None else str(d) for d in shape)
