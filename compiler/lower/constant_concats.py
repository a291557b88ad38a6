"""A concatenation with constant parts, as zeros in their place plus a constant.

iree-compile's inline-dynamic host program loses the buffer of a constant
that is copied whole into part of a tensor (docs/notes/iree-notes.md 1.4):
a vision transformer's class token, a learned vector concatenated before
the patches, was a null buffer at emit and the build was refused. Here
each constant operand of a ``stablehlo.concatenate`` that also has a
computed one is replaced by zeros (a splat, which IREE fills), and the
constants are added after it as one constant of the result's shape, zero
elsewhere: an elementwise dispatch that holds that constant itself. Since
``x + 0 = x`` and ``0 + c = c`` the values are the concatenation's (but
for a -0.0, which becomes +0.0).
"""
from __future__ import annotations

import numpy as np

#: element types rewritten (numbers that add exactly with zero)
_TYPES = {"f32": np.float32, "i32": np.int32, "i64": np.int64}


def constants_added_to_concats(mlir_text: str) -> tuple[str, int]:
    """Rewrites each qualifying concatenation; returns the text and how many were."""
    from .mlir_import import rewrite_each_op

    return rewrite_each_op(mlir_text, "stablehlo.concatenate", _rewrite)


def _constant_value(value):
    """The array of a non-splat ``stablehlo.constant`` ``value``, else None."""
    from iree.compiler import ir

    owner = value.owner
    if not isinstance(owner, ir.OpView) or owner.operation.name != "stablehlo.constant":
        return None
    attr = ir.DenseElementsAttr(owner.attributes["value"])
    if attr.is_splat:
        return None
    value_type = ir.RankedTensorType(value.type)
    return np.array(attr, dtype=_TYPES[str(value_type.element_type)]).reshape(value_type.shape)


def _rewrite(op) -> bool:
    from iree.compiler import ir

    if op.operation.name != "stablehlo.concatenate":
        return False
    result_type = ir.RankedTensorType(op.results[0].type)
    element = str(result_type.element_type)
    if element not in _TYPES or not result_type.has_static_shape:
        return False
    parts = [_constant_value(v) for v in op.operands]
    if all(p is None for p in parts) or all(p is not None for p in parts):
        return False  # (nothing constant, or all of it: IREE folds that)
    axis = ir.IntegerAttr(op.attributes["dimension"]).value
    total = np.zeros(result_type.shape, _TYPES[element])
    operands, offset = [], 0
    with ir.InsertionPoint(op), op.location:
        for value, part in zip(op.operands, parts):
            length = ir.RankedTensorType(value.type).shape[axis]
            if part is None:
                operands.append(value)
            else:
                index = [slice(None)] * total.ndim
                index[axis] = slice(offset, offset + length)
                total[tuple(index)] = part
                zero = ir.DenseElementsAttr.get_splat(
                    ir.RankedTensorType(value.type),
                    ir.FloatAttr.get(result_type.element_type, 0.0) if element == "f32"
                    else ir.IntegerAttr.get(result_type.element_type, 0))
                operands.append(ir.Operation.create(
                    "stablehlo.constant", results=[value.type],
                    attributes={"value": zero}).results[0])
            offset += length
        joined = ir.Operation.create("stablehlo.concatenate", results=[result_type],
                                     operands=operands,
                                     attributes={"dimension": op.attributes["dimension"]})
        constants = ir.Operation.create(
            "stablehlo.constant", results=[result_type],
            attributes={"value": ir.DenseElementsAttr.get(np.ascontiguousarray(total))})
        summed = ir.Operation.create("stablehlo.add", results=[result_type],
                                     operands=[joined.results[0], constants.results[0]])
    op.results[0].replace_all_uses_with(summed.results[0])
    op.operation.erase()  # (the constants it used go in iree-compile's cleanup)
    return True
