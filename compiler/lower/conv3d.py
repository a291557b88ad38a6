"""3-D convolutions as a sum of 2-D ones, one per tap along the first axis.

A ``Conv3D`` (a video model's C3D or (2+1)D layers, the Conv3D after Keras'
next-frame ConvLSTM, a volumetric segmenter) is a 3-D
``stablehlo.convolution``, which tfaot's kernels do not take and IREE runs
in generic code: two ``Conv3D(32, 3, padding="same")`` on 8 x 28 x 28 x 16
took 314 ms, 17 times LiteRT. Along the first spatial axis (time, depth)
the kernel has k_d taps; output frame t reads input frames t*s + a*d - lo
for a < k_d. So the op is the sum over the taps a of a 2-D convolution of
the frames that tap reads (a strided slice of the input, padded with zeros
along that axis first, its frames as a batch of images) with the kernel's
slice a: the same products, in 2-D convolutions the kernel takes.

Taken: a constant kernel, the layout ``[b, 0, 1, 2, f]x[0, 1, 2, i, o]->
[b, 0, 1, 2, f]`` the TF import writes, one feature group, no input
dilation, f32.
"""
from __future__ import annotations

import re

import numpy as np

from .conv_epilogue import attr_ints, constant_kernel, constant_kernel_conv
from .legality import new_constant, new_slice, new_tensor_op

_LAYOUT = "#stablehlo.conv<[b, 0, 1, 2, f]x[0, 1, 2, i, o]->[b, 0, 1, 2, f]>"
_LAYOUT_2D = "#stablehlo.conv<[b, 0, 1, f]x[0, 1, i, o]->[b, 0, 1, f]>"


def convs_3d_as_2d(mlir_text: str) -> tuple[str, int]:
    """Rewrites the qualifying 3-D convolutions; returns the text and how
    many were rewritten."""
    from .mlir_import import rewrite_planned

    return rewrite_planned(mlir_text, "[b, 0, 1, 2, f]", _geometry, _split)


def _geometry(op):
    """(strides, dilations, (low, high) paddings) per spatial axis of a
    convolution this stage takes, else None."""
    attrs = constant_kernel_conv(op)
    if (attrs is None or re.sub(r"\s+", " ", attrs.get("dimension_numbers", "")) != _LAYOUT
            or attrs.get("feature_group_count", "1 : i64") != "1 : i64"
            or any(v != 1 for v in attr_ints(attrs.get("lhs_dilation", "")))):
        return None
    strides = attr_ints(attrs.get("window_strides", "")) or [1, 1, 1]
    dilations = attr_ints(attrs.get("rhs_dilation", "")) or [1, 1, 1]
    pads = attr_ints(attrs.get("padding", "")) or [0] * 6
    if min(pads) < 0:
        return None
    return strides, dilations, list(zip(pads[0::2], pads[1::2]))


def _split(op, strides: list[int], dilations: list[int], pads) -> None:
    from iree.compiler import ir

    x = op.operands[0]
    y_type = ir.RankedTensorType(op.results[0].type)
    n, depth, h, w, c = ir.RankedTensorType(x.type).shape
    _, out_depth, out_h, out_w, out_c = y_type.shape
    kernel = constant_kernel(op)
    f32 = y_type.element_type
    i64 = ir.IntegerType.get_signless(64)

    def make(name, shape, operands, **attributes):
        return new_tensor_op(name, shape, f32, operands, **attributes)

    with ir.InsertionPoint(op), op.location:
        lo, hi = pads[0]
        if lo or hi:
            zero = new_constant(np.zeros((), np.float32), f32)
            depth += lo + hi
            x = make("stablehlo.pad", [n, depth, h, w, c], [x, zero],
                     edge_padding_low=ir.DenseI64ArrayAttr.get([0, lo, 0, 0, 0]),
                     edge_padding_high=ir.DenseI64ArrayAttr.get([0, hi, 0, 0, 0]),
                     interior_padding=ir.DenseI64ArrayAttr.get([0] * 5))
        total = None
        for tap in range(kernel.shape[0]):
            first = tap * dilations[0]
            frames = new_slice(x, [0, first, 0, 0, 0],
                               [n, first + (out_depth - 1) * strides[0] + 1, h, w, c],
                               [1, strides[0], 1, 1, 1])
            images = make("stablehlo.reshape", [n * out_depth, h, w, c], [frames])
            y = make("stablehlo.convolution", [n * out_depth, out_h, out_w, out_c],
                     [images, new_constant(kernel[tap], f32)],
                     dimension_numbers=ir.Attribute.parse(_LAYOUT_2D),
                     window_strides=ir.DenseI64ArrayAttr.get(strides[1:]),
                     rhs_dilation=ir.DenseI64ArrayAttr.get(dilations[1:]),
                     padding=ir.DenseElementsAttr.get(np.array(pads[1:], np.int64)),
                     feature_group_count=ir.IntegerAttr.get(i64, 1),
                     batch_group_count=ir.IntegerAttr.get(i64, 1))
            y = make("stablehlo.reshape", list(y_type.shape), [y])
            total = y if total is None else make("stablehlo.add", list(y_type.shape), [total, y])
    op.results[0].replace_all_uses_with(total)
    op.operation.erase()
