"""Load stage for graph formats: frozen GraphDefs and SavedModels.

Every graph format ends up as one *frozen* ``GraphDef`` (weights are
``Const`` nodes) plus the names of its input placeholder(s) and output
tensors; ``streamify_graph`` works on that.

* frozen GraphDef: binary ``.pb`` or text ``.pbtxt``, told apart by content
  (a text proto parses as text, anything else is tried as binary).
* SavedModel v1 and v2: compiler/frontend/load_saved_model.py freezes the serving
  signature into such a GraphDef.

Both are then cut to their inputs and outputs by compiler/frontend/graph_cut.py
(``graph_def_to_loaded``); this module reads the file and the
``--inputs``/``--outputs`` specs.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from ..errors import TfaotError
# LoadedGraph and graph_def_to_loaded live in graph_cut.py (which
# load_saved_model.py uses too); they are importable from here as before.
from .graph_cut import LoadedGraph, _fmt_shape, graph_def_to_loaded
from .inline_calls import inline_compiled_calls

__all__ = ["GraphOptions", "LoadedGraph", "graph_def_to_loaded", "load_graph",
           "parse_input_specs", "parse_output_specs", "read_graph_def"]

@dataclass
class GraphOptions:
    """Overrides for graph formats (frozen GraphDef, SavedModel)."""

    inputs: str | None = None  # "NAME:D0xD1x...,..."
    outputs: str | None = None  # "NAME,..."
    time_axis: int | None = None
    state: str | None = None  # "IN=OUT,...": state the graph's caller feeds back
    signature: str | None = None  # a SavedModel's signature (default: serving_default)


def load_graph(path: str | os.PathLike, inputs: Sequence[str] | str | None = None,
               outputs: Sequence[str] | str | None = None,
               time_axis: int | None = None, signature: str | None = None,
               state_inputs: tuple[str, ...] = ()) -> LoadedGraph:
    """Load a frozen GraphDef (.pb/.pbtxt) or a SavedModel folder (v1 or v2).

    ``inputs``: ``NAME:SHAPE`` strings (``"x:1x100x40"``, ``"x:1,?,40"``; a
    comma-separated string of several is accepted too); ``outputs``: node or
    tensor names; ``time_axis``: the time axis of the (first) input;
    ``signature``: which signature of a SavedModel (default: serving_default);
    ``state_inputs``: the inputs of the --state pairs (a frozen graph's
    placeholder_with_default among them becomes an input: graph_cut).
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

        loaded = load_saved_model(path, input_specs, output_specs, signature, state_inputs,
                                  time_axis)
    else:
        if signature is not None:
            raise TfaotError(f"--signature {signature}: {path} is a frozen graph, which has "
                             "no signatures (only SavedModel folders do)")
        graph_def, text = read_graph_def(path)
        graph_def = inline_compiled_calls(graph_def)
        loaded = graph_def_to_loaded(graph_def, path, "graphdef", input_specs, output_specs,
                                     state_inputs=state_inputs)
        loaded.details["text_format"] = text
    _check_fft_lengths(loaded.graph_def, path)
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


#: TensorFlow's real FFTs; their second input is fft_length.
_REAL_FFT_OPS = {"RFFT", "IRFFT", "RFFT2D", "IRFFT2D", "RFFT3D", "IRFFT3D"}


def _check_fft_lengths(graph_def, path: Path) -> None:
    """IREE lowers an FFT of a power-of-two length only (a tf.signal.stft
    of 40 samples failed inside iree-compile): say so before any stage
    runs, naming the node, and how to do without it; except for a 1-D real
    FFT that lower/dft.py writes out (tf.signal.dct's of 80 for 40 mel
    bins, frames of 400 samples)."""
    from tensorflow.python.framework import tensor_util

    from ..lower.dft import compiles, is_power_of_two

    nodes = {n.name: n for n in graph_def.node}
    for node in graph_def.node:
        if node.op not in _REAL_FFT_OPS or len(node.input) < 2:
            continue
        length = nodes.get(node.input[1].split(":")[0].lstrip("^"))
        if length is None or length.op != "Const":
            continue
        lengths = [int(n) for n in tensor_util.MakeNdarray(length.attr["value"].tensor).ravel()]
        if node.op in ("RFFT", "IRFFT") and compiles(lengths[0]):
            continue  # (lower/dft.py writes out the others)
        bad = [n for n in lengths if not is_power_of_two(n)]
        if bad:
            what = ("a 1-D real FFT of a length whose DFT matrices are too big"
                    if node.op in ("RFFT", "IRFFT") else
                    "an FFT over more than one axis of a length other than a power of two")
            raise TfaotError(
                f"{path}: node '{node.name}' ({node.op}) is an FFT of length {bad[0]}, "
                f"{what}; IREE compiles FFTs of power-of-two lengths only: cut the front end "
                "off with --inputs at the tensor the network starts from (the firmware "
                "computes the features), or give the frames a power-of-two FFT length")


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
    if path.name == "saved_model.pb" and (path.parent / "variables").is_dir():
        # (a SavedModel's MetaGraphs, not a GraphDef: it did not parse as one)
        raise TfaotError(f"{path}: this is a SavedModel's saved_model.pb; give the "
                         f"SavedModel's folder instead: tfaot build {path.parent}")
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
