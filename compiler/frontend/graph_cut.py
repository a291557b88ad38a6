"""A frozen GraphDef cut to its inputs and outputs (the load stage's last
step for every graph format: frozen GraphDefs and SavedModels).

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

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import TfaotError
from .graphdef import FLOAT_TYPES, NON_DATA_TYPES, consumers_of, node_of, out_dtype

# Node types that are never a model output even if nothing consumes them.
_NOT_OUTPUTS = {"NoOp", "Assert", "Placeholder", "Const", "VarHandleOp", "VariableV2",
                "SaveV2", "RestoreV2", "Enter", "Exit", "NextIteration", "LoopCond",
                "TensorListReserve", "EmptyTensorList", "TensorArrayV3", "TensorListFromTensor"}
_UNUSED_CF_INPUT = re.compile(r"(^|/)unused_control_flow_input(_\d+)?$")


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


def graph_def_to_loaded(graph_def, path: Path, fmt: str, input_specs=None,
                        output_specs=None, details: dict | None = None,
                        state_inputs: tuple[str, ...] = (),
                        state_initial: dict | None = None) -> LoadedGraph:
    """Find the inputs/outputs of an in-memory frozen GraphDef and cut it to them.

    ``input_specs`` may name any tensor (``NAME`` or ``NAME:INDEX``), not only
    a Placeholder: the graph is cut there (a Placeholder takes the tensor's
    place) and everything that only fed it is dropped. Nodes the outputs do
    not need are dropped too. The graph as given stays in
    ``details["source_graph_def"]`` with the tensors to feed in it, so that a
    reference can run the original graph. Without ``input_specs``, a
    ``placeholder_with_default`` is an input where it is a state fed back
    (``_state_defaults``; ``state_inputs``: the inputs --state names), else
    its default is used. ``state_initial``: the values state inputs start
    from where not zeros (a SavedModel's variables: variable_state.py).
    """
    import tensorflow as tf

    from .channels_last import channels_last

    graph_def, _ = channels_last(graph_def)  # (TensorFlow runs NCHW only on GPUs)
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
                raise TfaotError(f"{path}: output node '{node_name}' is not in the graph"
                                 + _did_you_mean(node_name, nodes))
            outputs.append(f"{node_name}:{idx or 0}")
        _check_output_indices(graph_def, path, [o for o in outputs if not o.endswith(":0")])
        output_names = [o.partition(":")[0] for o in output_specs]
    else:
        outs = [n for n in graph_def.node
                if n.name not in consumed and n.op not in _NOT_OUTPUTS
                and not n.op.startswith("Save") and not n.op.startswith("Restore")
                and out_dtype(n) not in NON_DATA_TYPES]
        if len(outs) > 1:
            # Unused final loop values (the Identity nodes tf.while_loop adds
            # in the loop's scope) and cond pivots are not outputs when there
            # is anything else.
            rest = [n for n in outs
                    if not _reads_loop_result(n, nodes) and not _cond_pivot(n, nodes)]
            outs = rest or outs
        if len(outs) > 1:
            # Nor are constants left unread (an unpruned TF1 graph keeps
            # tf.signal's frame counts and mel matrix pieces): an output
            # computes from an input.
            fed = _reachable(graph_def, [f"{n.name}:0" for n in outs], control=False)
            from_inputs = _fed_by_placeholders(graph_def, fed)
            outs = [n for n in outs if n.name in from_inputs] or outs
        if not outs:
            raise TfaotError(f"{path}: cannot find the graph's output: every node is "
                             "consumed by another (give them with --outputs NAME,...)")
        outputs = [f"{n.name}:0" for n in outs]
        output_names = [n.name for n in outs]
    graph_def, loop_states = _loop_initial_states(graph_def, output_names, state_inputs,
                                                  state_initial or {})
    if loop_states and input_specs:
        input_specs = [(n, sh) for n, sh in input_specs if node_of(n) not in loop_states]
    details = dict(details or {})
    details["source_graph_def"] = graph_def
    if loop_states:
        details["loop_initial_states"] = loop_states
    inputs: list[GraphInput] = []
    feeds: list[str] = []
    cut_info: list[dict] = []
    if input_specs:
        cuts = []
        for name, shape in input_specs:
            node_name, _, idx = name.partition(":")
            node = nodes.get(node_name)
            if node is None:
                raise TfaotError(f"{path}: input node '{node_name}' is not in the graph"
                                 + _did_you_mean(node_name, nodes))
            cuts.append((node, int(idx or 0), shape))
        graph_def, inputs, cut_info = _cut(graph_def, path, cuts, outputs)
        inputs = _read_inputs(graph_def, path, inputs, details)
        feeds = [c["tensor"] for c in cut_info]
        if cut_info:  # the reference feeds the source graph at the cuts
            source = tf.compat.v1.GraphDef()
            source.CopyFrom(details["source_graph_def"])
            _drop_unfed_control_edges(source, {i.name for i in inputs} |
                                      {node_of(t) for t in feeds})
            details["source_graph_def"] = source
    else:
        graph_def = _state_defaults(graph_def, output_names, state_inputs)
        graph_def, dropped = _prune(graph_def, outputs)
        if dropped:
            details["pruned_nodes"] = dropped
        consumed = {node_of(i) for n in graph_def.node for i in n.input if i[:1] != "^"}
        data = data_needed(graph_def, outputs)
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
    # Checked for a cut too: a SavedModel's signature inputs and --inputs
    # come that way (a string signature input reached the probe and crashed).
    non_numeric = [i for i in inputs if i.dtype in ("string", "variant", "resource")]
    if non_numeric:
        raise TfaotError(_front_end_message(graph_def, path, non_numeric[0]))
    details["feeds"] = feeds
    if cut_info:
        details["cut"] = cut_info
    return LoadedGraph(path, fmt, graph_def, inputs, outputs, output_names, details)


def _read_inputs(graph_def, path: Path, inputs: list, details: dict) -> list:
    """The inputs some output reads: one none reads (a SavedModel step's
    sample-rate input, which Silero VAD's signature has) is pruned from the
    graph, and was fed to it at the first run; ``details["unused_inputs"]``
    names them (the build says so)."""
    present = {n.name for n in graph_def.node}
    unused = [i.name for i in inputs if i.name not in present]
    if unused and len(unused) == len(inputs):
        raise TfaotError(f"{path}: no output reads any of the inputs "
                         f"({', '.join(unused)})")
    if unused:
        details["unused_inputs"] = unused
    return [i for i in inputs if i.name in present]


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


def data_needed(graph_def, outputs: list[str]) -> set[str]:
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


def _fed_by_placeholders(graph_def, names: set[str]) -> set[str]:
    """The nodes of ``names`` that read a Placeholder, transitively through
    data inputs (the rest compute from constants alone)."""
    readers: dict[str, list[str]] = {}
    for n in graph_def.node:
        if n.name in names:
            for i in n.input:
                if not i.startswith("^"):
                    readers.setdefault(node_of(i), []).append(n.name)
    work = [n.name for n in graph_def.node
            if n.name in names and n.op in ("Placeholder", "PlaceholderV2")]
    fed: set[str] = set()
    while work:
        name = work.pop()
        if name not in fed:
            fed.add(name)
            work.extend(readers.get(name, ()))
    return fed


def _check_output_indices(graph_def, path: Path, tensors: list[str]) -> None:
    """Each ``node:k`` (k > 0) of --outputs names an output the node has."""
    if not tensors:
        return
    facts = _tensor_facts(graph_def, tensors)
    nodes = {n.name: n for n in graph_def.node}
    for t in tensors:
        if facts is not None and t not in facts:
            node, _, k = t.partition(":")
            raise TfaotError(f"{path}: output '{t}': node '{node}' (op {nodes[node].op}) "
                             f"has no output {k}")


def _tensor_facts(graph_def, tensors: list[str]):
    """(dtype name, static shape or None) of each tensor the graph has, from
    TensorFlow's shape inference; None where TensorFlow cannot import the graph."""
    import tensorflow as tf

    g = tf.Graph()
    try:
        with g.as_default():
            tf.graph_util.import_graph_def(graph_def, name="")
    except Exception:
        return None
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
    facts = _tensor_facts(graph_def, tensors) or {}
    replace: dict[str, str] = {}  # "node:idx" -> placeholder name
    new_nodes = []
    inputs, info = [], []
    shaped: dict[str, tuple] = {}  # a placeholder given a shape -> that shape
    for (node, idx, shape), tensor in zip(cuts, tensors):
        if node.op in ("Placeholder", "PlaceholderV2") and idx == 0:
            dtype = tf.dtypes.as_dtype(node.attr["dtype"].type).name
            inputs.append(GraphInput(node.name, dtype,
                                     shape if shape is not None else _placeholder_shape(node)))
            if shape is not None:
                shaped[node.name] = shape
            continue
        if tensor not in facts:
            raise TfaotError(f"{path}: input '{tensor}': node '{node.name}' (op {node.op}) "
                             f"has no output {idx} (or TensorFlow cannot import the graph); "
                             f"'{node.name}:{idx}' names output {idx}: a rank-1 shape is "
                             f"written {node.name}:0:{idx}")
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
    graph_def = _with_shapes(graph_def, shaped)
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
    _drop_unfed_control_edges(rewired, {i.name for i in inputs})
    before = {n.name for n in graph_def.node}
    gd, _ = _prune(rewired, outputs)
    kept = {n.name for n in gd.node}
    data = data_needed(gd, outputs)
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


def _did_you_mean(name: str, nodes) -> str:
    """The nodes whose name ends in ``/name`` (a SavedModel's nodes sit in
    the scopes of its calls: ``StatefulPartitionedCall/.../features``)."""
    near = sorted(n for n in nodes if n.endswith("/" + name))
    if not near:
        return ""
    return "; did you mean " + " or ".join(f"'{n}'" for n in near[:3]) + "?"


def _drop_unfed_control_edges(graph_def, fed: set[str]) -> None:
    """Drop the control edges from nodes that run only once a graph input
    the cut leaves unfed is given (``fed``: the nodes given a value). They
    order nothing the cut graph runs, but would keep that input wanted: a
    SavedModel's inlined call orders its body after its arguments
    (``input_control_node``), the whole waveform among them where the cut
    drops the front end. A data edge from such a node stays (the cut's
    check names the input it needs)."""
    readers: dict[str, list] = {}
    for n in graph_def.node:
        for i in n.input:
            readers.setdefault(node_of(i), []).append(n)
    todo = [n.name for n in graph_def.node
            if n.op in ("Placeholder", "PlaceholderV2") and n.name not in fed]
    unfed = set(todo)
    while todo:  # every node that reads (data or control) an unfed one
        for n in readers.get(todo.pop(), []):
            if n.name not in unfed and n.name not in fed:
                unfed.add(n.name)
                todo.append(n.name)
    for n in graph_def.node:
        kept = [i for i in n.input if not (i.startswith("^") and node_of(i) in unfed)]
        if len(kept) != len(n.input):
            n.input[:] = kept


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
    facts = (_tensor_facts(graph_def, [tensor]) or {}).get(tensor)
    shape = "SHAPE" if facts is None or facts[1] is None else _fmt_shape(facts[1])
    return (msg + f": cut the graph where the network starts, e.g. --inputs "
            f"{suggestion}:{shape} (the first float tensor after the front end)")


def _reads_loop_result(node, nodes) -> bool:
    """An Identity that tf.while_loop adds in the loop's scope for a result."""
    if node.op != "Identity" or not node.input:
        return False
    src = nodes.get(node_of(node.input[0]))
    return src is not None and src.op in ("While", "StatelessWhile") and \
        node.name.startswith(src.name + "/")


def _cond_pivot(node, nodes) -> bool:
    """The Identity of a Switch's output that a TF1 tf.cond adds for each
    branch (cond/switch_t, cond/switch_f): unread where a branch has no
    constants, it was taken for an output."""
    if node.op != "Identity" or not node.input:
        return False
    src = nodes.get(node_of(node.input[0]))
    return src is not None and src.op in ("Switch", "RefSwitch")


def _with_shapes(graph_def, shapes: dict[str, tuple]):
    """``graph_def`` with the placeholders of ``shapes`` given those shapes
    (--inputs NAME:SHAPE on a placeholder): every later stage sees them, a
    fused LSTM's unrolling too (it saw the graph's open length)."""
    import tensorflow as tf

    def shaped(node):
        node.attr["shape"].shape.CopyFrom(tf.TensorShape(list(shapes[node.name])).as_proto())

    return _edited(graph_def, set(shapes), shaped)


def _state_defaults(graph_def, outputs: list[str], named: tuple[str, ...]):
    """``graph_def`` with each ``placeholder_with_default`` that is a state
    fed back made a Placeholder: one --state names, or one whose name pairs
    with an output's (``previous_state_h`` -> ``new_state_h``:
    state_feedback.named_like_state). A one-step graph written that way
    lost its state without a word: its inputs folded to their defaults (the
    zeros a first step starts from), the state outputs mere outputs. Other
    defaults (a Keras learning phase, a dropout rate) stay constants."""
    from ..streamify_graph.state_feedback import named_like_state

    def promoted(node):
        node.op = "Placeholder"
        del node.input[:]

    chosen = {n.name for n in graph_def.node if n.op == "PlaceholderWithDefault"
              and (n.name in named or named_like_state(n.name, outputs))}
    return _edited(graph_def, chosen, promoted)


#: the nodes that take a loop variable's initial value
_LOOP_ENTRIES = ("Enter", "RefEnter", "While", "StatelessWhile")


def _loop_initial_states(graph_def, outputs: list[str], named: tuple[str, ...],
                         initial: dict):
    """``graph_def`` with each state input (one --state names, or one whose
    name pairs with an output's) that only sets a time loop's initial state
    made a constant, zeros or its value in ``initial``, and the names of
    those inputs. A TF1 dynamic_rnn fed
    ``previous_state_c`` or a Keras recurrent layer's ``initial_state``
    input, exported: such a loop was refused ("the initial value of state
    ... depends on the input"). Streamed, the loop's state is the stream's,
    from that constant at reset (a stateful Keras RNN: the saved value of
    its state variable); its final value, an output, is the state after
    each step."""
    import numpy as np
    import tensorflow as tf

    from ..streamify_graph.state_feedback import named_like_state

    users: dict[str, list] = {}
    for n in graph_def.node:
        for i in n.input:
            if not i.startswith("^"):
                users.setdefault(node_of(i), []).append(n)

    def sets_initial_value(user) -> bool:
        # (an Enter of a constant holds a value every iteration reads)
        return user.op in _LOOP_ENTRIES and not (user.op == "Enter"
                                                 and user.attr["is_constant"].b)

    def feeds_loops_only(name: str, depth: int = 0) -> bool:
        found = users.get(name, [])
        return bool(found) and depth < 8 and all(
            sets_initial_value(u) or u.op == "Identity" and feeds_loops_only(u.name, depth + 1)
            for u in found)

    chosen = {}
    for n in graph_def.node:
        if n.op not in ("Placeholder", "PlaceholderWithDefault") or not (
                n.name in named or named_like_state(n.name, outputs)):
            continue
        shape = _placeholder_shape(n)
        if shape is None or any(d is None for d in shape[1:]) or not feeds_loops_only(n.name):
            continue
        dtype = tf.dtypes.as_dtype(n.attr["dtype"].type)
        chosen[n.name] = np.asarray(initial[n.name], dtype.as_numpy_dtype) \
            if n.name in initial else \
            np.zeros([1 if d is None else d for d in shape], dtype.as_numpy_dtype)
    if chosen and _one_block_a_call(graph_def, set(chosen)):
        return graph_def, []

    def zeros(node):
        value = chosen[node.name]
        node.op = "Const"
        del node.input[:]
        dtype = node.attr["dtype"].type
        node.attr.clear()
        node.attr["dtype"].type = dtype
        node.attr["value"].tensor.CopyFrom(tf.make_tensor_proto(value))

    return _edited(graph_def, set(chosen), zeros), sorted(chosen)


def _one_block_a_call(graph_def, state_inputs: set[str]) -> bool:
    """Whether every data input (a Placeholder besides ``state_inputs``) has
    a fixed shape without a time axis: a step that takes one block a call
    (DTLN's), whose loops run over an axis the graph makes and run once
    (streamify_graph/single_pass.py). Their state inputs stay the state fed
    back, not the loop's own."""
    import tensorflow as tf

    from ..stream_choice import one_block_a_call

    data = [n for n in graph_def.node if n.op in ("Placeholder", "PlaceholderWithDefault")
            and n.name not in state_inputs]
    return bool(data) and all(
        one_block_a_call(_placeholder_shape(n), tf.dtypes.as_dtype(n.attr["dtype"].type).name)
        for n in data)


def _edited(graph_def, names: set[str], edit):
    """A copy of ``graph_def`` with ``edit(node)`` done to each node of
    ``names``; ``graph_def`` itself when there are none."""
    import tensorflow as tf

    if not names:
        return graph_def
    copy = tf.compat.v1.GraphDef()
    copy.CopyFrom(graph_def)
    for node in copy.node:
        if node.name in names:
            edit(node)
    return copy


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
