"""Grouped convolutions as one convolution per group, concatenated.

A convolution with ``groups`` between 1 and its input channels (Keras'
``Conv2D(groups=g)``, ResNeXt's and RegNet's 3 x 3 layers, ShuffleNet's
1 x 1 ones) is a ``stablehlo.convolution`` with ``feature_group_count``
g, which tfaot's convolution kernel does not take (it takes one group,
and the depthwise kernel one input channel a group) and IREE runs in
generic code: two grouped 3 x 3 layers on a 28 x 28 x 128 image (32 and 4
groups) took 16.2 ms, 17 times LiteRT. Group i reads input channels
``i*c .. (i+1)*c`` and writes output channels ``i*n .. (i+1)*n``, so the
op is g convolutions of channel slices with slices of the kernel, their
results concatenated: the same products, each in a convolution the
kernel takes.

Taken: a constant kernel, the channels-last layouts the TF import writes
(``[b, 0, 1, f]x[0, 1, i, o]->[b, 0, 1, f]`` and the 1-D form), more than
one input channel a group, f32.
"""
from __future__ import annotations

import re

import numpy as np

from .conv_epilogue import attr_ints

#: The layouts the TF import writes for Conv2D and Conv1D, by spatial axes.
_LAYOUTS = {"[b, 0, 1, f]x[0, 1, i, o]->[b, 0, 1, f]": 2, "[b, 0, f]x[0, i, o]->[b, 0, f]": 1}
_LAYOUT = re.compile(r"#stablehlo\.conv<(.*)>")


def groups_as_convs(mlir_text: str) -> tuple[str, int]:
    """Rewrites the qualifying grouped convolutions; returns the text and
    how many were rewritten."""
    from .mlir_import import rewrite_planned

    return rewrite_planned(mlir_text, "feature_group_count", _groups, _split)


def _groups(op) -> tuple[int] | None:
    """(the group count,) of a convolution this stage takes, else None."""
    from iree.compiler import ir

    if op.operation.name != "stablehlo.convolution" or len(op.operands) != 2:
        return None
    attrs = {a: str(op.attributes[a]) for a in op.attributes}
    layout = _LAYOUT.fullmatch(attrs.get("dimension_numbers", ""))
    groups = attr_ints(attrs.get("feature_group_count", "1"))[0]
    f_op = op.operands[1].owner
    if (layout is None or layout[1] not in _LAYOUTS or groups <= 1
            or attrs.get("batch_group_count", "1 : i64") != "1 : i64"
            or not isinstance(f_op, ir.OpView) or f_op.operation.name != "stablehlo.constant"):
        return None
    x_type = ir.RankedTensorType(op.operands[0].type)
    f_type = ir.RankedTensorType(op.operands[1].type)
    y_type = ir.RankedTensorType(op.results[0].type)
    c_in, c_group, n_out = x_type.shape[-1], f_type.shape[-2], f_type.shape[-1]
    if (c_group <= 1 or c_in != groups * c_group or n_out % groups
            or not (x_type.has_static_shape and y_type.has_static_shape)
            or any(str(t.element_type) != "f32" for t in (x_type, f_type, y_type))):
        return None
    return (groups,)


def _split(op, groups: int) -> None:
    from iree.compiler import ir

    x = op.operands[0]
    x_type = ir.RankedTensorType(x.type)
    y_type = ir.RankedTensorType(op.results[0].type)
    f_op = op.operands[1].owner
    kernel = np.array(ir.DenseElementsAttr(f_op.attributes["value"]), dtype=np.float32)
    c_group, n_group = kernel.shape[-2], kernel.shape[-1] // groups
    attributes = {a: op.attributes[a] for a in op.attributes}
    attributes["feature_group_count"] = ir.IntegerAttr.get(ir.IntegerType.get_signless(64), 1)
    f32 = y_type.element_type
    rank = x_type.rank
    parts = []
    with ir.InsertionPoint(op), op.location:
        for g in range(groups):
            start = [0] * (rank - 1) + [g * c_group]
            limit = list(x_type.shape[:-1]) + [(g + 1) * c_group]
            piece = ir.Operation.create(
                "stablehlo.slice",
                results=[ir.RankedTensorType.get(limit[:-1] + [c_group], f32)], operands=[x],
                attributes={"start_indices": ir.DenseI64ArrayAttr.get(start),
                            "limit_indices": ir.DenseI64ArrayAttr.get(limit),
                            "strides": ir.DenseI64ArrayAttr.get([1] * rank)}).results[0]
            weights = np.ascontiguousarray(kernel[..., g * n_group:(g + 1) * n_group])
            w_type = ir.RankedTensorType.get(list(weights.shape), f32)
            w = ir.Operation.create("stablehlo.constant", results=[w_type], attributes={
                "value": ir.DenseElementsAttr.get(weights, type=w_type)}).results[0]
            parts.append(ir.Operation.create(
                "stablehlo.convolution",
                results=[ir.RankedTensorType.get(list(y_type.shape[:-1]) + [n_group], f32)],
                operands=[piece, w], attributes=attributes).results[0])
        y = ir.Operation.create(
            "stablehlo.concatenate", results=[y_type], operands=parts,
            attributes={"dimension": ir.IntegerAttr.get(ir.IntegerType.get_signless(64),
                                                        rank - 1)}).results[0]
    op.results[0].replace_all_uses_with(y)
    op.operation.erase()
