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

from .conv_epilogue import attr_ints, constant_kernel, constant_kernel_conv
from .legality import new_constant, new_slice, new_tensor_op

#: The layouts the TF import writes for Conv2D and Conv1D.
_LAYOUTS = ("[b, 0, 1, f]x[0, 1, i, o]->[b, 0, 1, f]", "[b, 0, f]x[0, i, o]->[b, 0, f]")
_LAYOUT = re.compile(r"#stablehlo\.conv<(.*)>")


def groups_as_convs(mlir_text: str) -> tuple[str, int]:
    """Rewrites the qualifying grouped convolutions; returns the text and
    how many were rewritten."""
    from .mlir_import import rewrite_planned

    return rewrite_planned(mlir_text, "feature_group_count", _groups, _split)


def _groups(op) -> tuple[int] | None:
    """(the group count,) of a convolution this stage takes, else None."""
    from iree.compiler import ir

    attrs = constant_kernel_conv(op)
    layout = _LAYOUT.fullmatch(attrs.get("dimension_numbers", "")) if attrs else None
    if layout is None or layout[1] not in _LAYOUTS:
        return None
    groups = attr_ints(attrs.get("feature_group_count", "1"))[0]
    c_in = ir.RankedTensorType(op.operands[0].type).shape[-1]
    c_group, n_out = ir.RankedTensorType(op.operands[1].type).shape[-2:]
    if groups <= 1 or c_group <= 1 or c_in != groups * c_group or n_out % groups:
        return None
    return (groups,)


def _split(op, groups: int) -> None:
    from iree.compiler import ir

    x = op.operands[0]
    x_type = ir.RankedTensorType(x.type)
    y_type = ir.RankedTensorType(op.results[0].type)
    kernel = constant_kernel(op)
    c_group, n_group = kernel.shape[-2], kernel.shape[-1] // groups
    attributes = {a: op.attributes[a] for a in op.attributes}
    attributes["feature_group_count"] = ir.IntegerAttr.get(ir.IntegerType.get_signless(64), 1)
    f32 = y_type.element_type
    rank = x_type.rank
    parts = []
    with ir.InsertionPoint(op), op.location:
        for g in range(groups):
            piece = new_slice(x, [0] * (rank - 1) + [g * c_group],
                              list(x_type.shape[:-1]) + [(g + 1) * c_group])
            w = new_constant(kernel[..., g * n_group:(g + 1) * n_group], f32)
            parts.append(new_tensor_op("stablehlo.convolution",
                                       list(y_type.shape[:-1]) + [n_group], f32, [piece, w],
                                       **attributes))
        y = new_tensor_op("stablehlo.concatenate", list(y_type.shape), f32, parts,
                          dimension=ir.IntegerAttr.get(ir.IntegerType.get_signless(64),
                                                       rank - 1))
    op.results[0].replace_all_uses_with(y)
    op.operation.erase()
