"""What TensorFlow's lowering to StableHLO left that is not StableHLO.

Its pipeline keeps ops it cannot lower *silently* (and iree-compile then
crashes), so the import checks every op (``check_legality``): an op outside
the allowed dialects is an error naming the TF op type and node, with a
hint where the cause is known (--streams' batched forms, an audio front
end). Constants its pipeline made after lowering its own are made StableHLO
first (``constants_as_stablehlo``). The small op builders the rewrites
share live here too (``new_op``, ``new_tensor_op``, ``new_constant``,
``new_slice``).
"""
from __future__ import annotations

import re

import numpy as np

from ..errors import TfaotError


def all_ops(module):
    """Every op of ``module`` (or of any op), nested ones included, outer ones first."""
    pending = [module.operation]
    while pending:
        op = pending.pop()
        yield op
        pending += [inner.operation for region in reversed(op.regions)
                    for block in reversed(region.blocks)
                    for inner in reversed(list(block.operations))]


def new_op(name: str, result_type, operands: list, attributes: dict | None = None):
    """The result of a new one-result op ``name``, created at the current
    insertion point (the caller's ``ir.InsertionPoint`` and location)."""
    from iree.compiler import ir

    return ir.Operation.create(name, results=[result_type], operands=operands,
                               attributes=attributes or {}).results[0]


def new_tensor_op(name: str, shape: list[int], element_type, operands: list, **attributes):
    """``new_op`` whose result is a tensor of ``shape`` and ``element_type``."""
    from iree.compiler import ir

    return new_op(name, ir.RankedTensorType.get(list(shape), element_type), operands, attributes)


def new_constant(values: np.ndarray, element_type):
    """A new ``stablehlo.constant`` of ``values`` (their shape; f32 or i64 data)."""
    from iree.compiler import ir

    kind = ir.RankedTensorType.get(list(values.shape), element_type)
    return new_op("stablehlo.constant", kind, [],
                  {"value": ir.DenseElementsAttr.get(np.ascontiguousarray(values), type=kind)})


def new_slice(x, start: list[int], limit: list[int], strides: list[int] | None = None):
    """A new ``stablehlo.slice`` of ``x``, its result's shape from the bounds."""
    from iree.compiler import ir

    strides = strides or [1] * len(start)
    shape = [-(-(hi - lo) // s) for lo, hi, s in zip(start, limit, strides)]
    return new_tensor_op("stablehlo.slice", shape, ir.RankedTensorType(x.type).element_type, [x],
                         start_indices=ir.DenseI64ArrayAttr.get(list(start)),
                         limit_indices=ir.DenseI64ArrayAttr.get(list(limit)),
                         strides=ir.DenseI64ArrayAttr.get(list(strides)))


def constants_as_stablehlo(module) -> int:
    """TensorFlow's ``tf.Const`` ops left after its lowering, made
    ``stablehlo.constant`` ops of the same value; returns how many. Its
    pipeline folds some ops into a constant after it has lowered the
    constants: --streams' batched form of a class token (pfor's Tile of a
    weight broadcast over the streams) was refused as "'tf.Const' has no
    StableHLO lowering"."""
    from iree.compiler import ir

    leftover = [op for op in all_ops(module)
                if op.name == "tf.Const" and "value" in op.attributes and len(op.results) == 1]
    for op in leftover:
        with ir.InsertionPoint(op), op.location:
            constant = new_op("stablehlo.constant", op.results[0].type, [],
                              {"value": op.attributes["value"]})
        op.results[0].replace_all_uses_with(constant)
        op.erase()
    return len(leftover)


def check_legality(module, source: str, allowed: set[str]) -> None:
    """Raise naming every op outside the ``allowed`` dialects (the message is
    cut after about 600 characters)."""
    bad = [_describe_illegal(op.name, op.location) for op in all_ops(module)
           if op.name.split(".", 1)[0] not in allowed]
    if bad:
        shown = "; ".join(dict.fromkeys(bad))  # unique, in order
        # (--streams: TensorFlow's vectorization wrote the step's ops in
        # batched forms, under its 'pfor' scope, of which not all lower)
        hint = ("; these are the batched forms of ops that TensorFlow wrote for --streams "
                "(the model builds with one stream)" if "/pfor/" in shown else
                _front_end_hint(module) or _post_processing_hint(shown))
        raise TfaotError(f"{source}: {len(bad)} op(s) have no StableHLO lowering: "
                         f"{_shorten(shown)}{hint}")


def _front_end_hint(module) -> str:
    """Where an audio front end (AudioSpectrogram, Mfcc) is what does not
    lower: the cut that leaves it to the firmware."""
    from ..frontend.graph_cut import FRONT_END_OPS

    found = [(tf_type, node) for tf_type, node in (_tf_origin(str(op.location))
                                                   for op in all_ops(module))
             if tf_type in FRONT_END_OPS and node]
    if not found:
        return ""
    tf_type, node = next((f for f in found if f[0] == "Mfcc"), found[-1])
    return (f"; they are the model's front end: compute its features in the firmware and "
            f"build the network after it, e.g. --inputs {node}:SHAPE (the {tf_type} "
            "node's output, with the shape it has)")


#: A detection model's post-processing, which TensorFlow does not lower.
_NMS = re.compile(r"TF op (\w*NonMaxSuppression\w*)")


def _post_processing_hint(shown: str) -> str:
    """Where non-max suppression is what does not lower: the cut before it."""
    found = _NMS.search(shown)
    if found is None:
        return ""
    return (f"; {found[1]} is a detection model's post-processing: build the network up to "
            "the boxes and scores it reads (--outputs NAME,NAME) and select the boxes in the "
            "application")


def _describe_illegal(op_name: str, location) -> str:
    tf_type, node = _tf_origin(str(location))
    where = f" (TF op {tf_type}, node '{node}')" if node else ""
    return f"'{op_name}'{where}"


def _tf_origin(location: str) -> tuple[str | None, str | None]:
    """Find the TF op type and node name in a debug location.

    With show_debug_info the importer fuses ``loc("OpType:")`` with
    ``loc("node/name"(callsite...))`` for each op.
    """
    op_type = re.search(r'"([A-Za-z0-9_]+):"', location)
    # the node: a call-site name ("node"(...)) or the first quoted name that
    # is not an op type ("Type:")
    call_site = re.search(r'"([^":]+)"\(', location)
    names = [n for n in re.findall(r'"([^"]*)"', location) if n and not n.endswith(":")]
    node = call_site.group(1) if call_site else (names[0] if names else None)
    return (op_type.group(1) if op_type else None, node)


def _shorten(text: str, limit: int = 600) -> str:
    return text if len(text) <= limit else text[:limit] + " ..."
