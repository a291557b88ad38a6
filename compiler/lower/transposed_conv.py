"""Transposed convolutions as one ordinary convolution and an interleave.

TensorFlow lowers ``Conv2DBackpropInput`` (Keras' ``Conv2DTranspose``, a
U-Net's up-convolution, an autoencoder's or a GAN's decoder, a
``Conv1DTranspose`` across features) to a ``stablehlo.convolution`` whose
input is dilated by the stride (``lhs_dilate``): the input with s - 1 zeros
between its pixels, which IREE materialises and convolves, s^2 times the
multiply-adds on zeros. ``Conv2DTranspose(32, 2, strides=2)`` on a
32 x 32 x 64 image took 16.4 ms a step on x86-64 (8.4 M multiply-adds) and
a 2.4 MB context.

Per spatial axis with dilation d, low padding lo and a kernel of k taps
(already reversed by the lowering), output m of the op reads
``xd[m + a - lo] * K[a]`` where ``xd`` holds x at multiples of d. Output
m' = m - lo = n*d - r (r in [0, d)) reads only taps a = r + u*d:

    y[lo + n*d - r] = sum_u x[n + u] * K[r + u*d],   u < Q = ceil(k / d)

an ordinary convolution of x with Q taps per phase r; the d phases side by
side as output channels. So the op is one stride-1 convolution of x (Q x Q
taps per 2-D phase, zeros where r + u*d >= k), its channels (phase h,
phase w, channel) interleaved into the pixels (a reshape, a transpose and a
reshape: depth-to-space), and a slice to the op's output: exactly the
products of the op, without the zeros, in a convolution tfaot's kernel
takes. Block n holds outputs n*d - d + 1 .. n*d, phase r = d - 1 - j at
place j of the block.

A 3-D transposed convolution (``Conv3DTranspose``: a volumetric U-Net's
up-convolution, a video decoder) is split the same way along its three
axes: a 3-D convolution of d_0 * d_1 * d_2 phases, which ``conv3d`` then
writes as 2-D ones for tfaot's kernel. ``Conv3DTranspose(16, 2, strides=2)``
on 4 x 14 x 14 x 32 took 44 times LiteRT's time in IREE's generic code.

Taken: a constant kernel, input and output ``[b, 0, 1, f]`` (or the 1-D
``[b, 0, f]``, or the 3-D ``[b, 0, 1, 2, f]``), kernel ``[0, 1, (2,) i, o]``
or ``[0, 1, (2,) o, i]``, stride 1, no kernel dilation, one feature group,
f32.
"""
from __future__ import annotations

import numpy as np

from .conv_epilogue import attr_ints, constant_kernel, constant_kernel_conv, conv_dims
from .legality import new_constant, new_slice, new_tensor_op

#: the data layouts taken (input and output alike), by their spatial axes
_LAYOUTS = {("b", "0", "1", "2", "f"): 3, ("b", "0", "1", "f"): 2, ("b", "0", "f"): 1}


def dilated_inputs_as_phases(mlir_text: str) -> tuple[str, int]:
    """Rewrites the qualifying input-dilated convolutions; returns the text
    and how many were rewritten."""
    from .mlir_import import rewrite_planned

    return rewrite_planned(mlir_text, "lhs_dilate", _plan, _replace)


def _plan(op):
    """(kernel as [0, 1, (2,) i, o] (the 1-D form as 2-D), dilation, low
    padding, spatial axes) of an op this stage takes, else None."""
    attrs = constant_kernel_conv(op)
    dims = conv_dims(attrs.get("dimension_numbers", "")) if attrs else None
    if dims is None or dims[0] != dims[2] or tuple(dims[0]) not in _LAYOUTS:
        return None
    spatial = _LAYOUTS[tuple(dims[0])]
    kernel_dims = dims[1]
    lhs = attr_ints(attrs.get("lhs_dilation", ""))
    if (not lhs or max(lhs) == 1 or any(v != 1 for v in attr_ints(attrs.get("rhs_dilation", "")))
            or any(v != 1 for v in attr_ints(attrs.get("window_strides", "")))
            or kernel_dims[:spatial] != [str(a) for a in range(spatial)]
            or attrs.get("feature_group_count", "1 : i64") != "1 : i64"):
        return None
    kernel = constant_kernel(op)
    if kernel_dims[spatial:] == ["o", "i"]:
        kernel = np.swapaxes(kernel, -1, -2)
    pad = attr_ints(attrs.get("padding", "")) or [0] * (2 * spatial)
    if spatial == 1:  # the 2-D form with one row
        kernel, lhs, pad = kernel[None], [1, *lhs], [0, 0, *pad]
    return kernel, lhs, pad[0::2], spatial


def phase_geometry(size: int, taps: int, d: int, lo: int, out: int) -> dict:
    """Along one axis: the input slice and padding of the phase
    convolution, its taps per phase, and where the op's output starts in
    the interleaved blocks."""
    q = -(-taps // d)
    first = -(-(-lo) // d)  # ceil(-lo / d): the block that holds output 0
    last = -(-(out - 1 - lo) // d)
    return {"q": q, "blocks": last - first + 1, "start": max(first, 0),
            "stop": min(last + q, size), "pad": (max(-first, 0), max(last + q - size, 0)),
            "crop": -lo - first * d + d - 1}


def phase_kernel(kernel: np.ndarray, dilation: list[int], taps: list[int]) -> np.ndarray:
    """(Q_0, .., Q_n, i, d_0 * .. * d_n * o): phase (j_0, .., j_n)'s kernel
    in output channels ((j_0 * d_1 + j_1) * .. + j_n) * o + c, from
    ``kernel`` (k_0, .., k_n, i, o)."""
    spatial = len(dilation)
    c_in, c_out = kernel.shape[-2:]
    padded = np.zeros((*(q * d for q, d in zip(taps, dilation)), c_in, c_out), np.float32)
    padded[tuple(slice(k) for k in kernel.shape[:spatial])] = kernel
    # tap a = r + u*d with r = d - 1 - j: index [u, r] of the (Q, d) split,
    # the r axes reversed to count j
    split = padded.reshape(*(n for pair in zip(taps, dilation) for n in pair), c_in, c_out)
    split = split[tuple(slice(None, None, -1 if a % 2 else 1) for a in range(2 * spatial))]
    order = [*range(0, 2 * spatial, 2), 2 * spatial, *range(1, 2 * spatial, 2), 2 * spatial + 1]
    return np.ascontiguousarray(split.transpose(order)).reshape(
        *taps, c_in, int(np.prod(dilation)) * c_out)


def _replace(op, kernel: np.ndarray, dilation: list[int], lo: list[int], spatial: int) -> None:
    from iree.compiler import ir

    x = op.operands[0]
    y_type = ir.RankedTensorType(op.results[0].type)
    x_shape = list(ir.RankedTensorType(x.type).shape)
    y_shape = list(y_type.shape)
    if spatial == 1:
        x_shape.insert(1, 1), y_shape.insert(1, 1)
    axes_count = max(spatial, 2)
    axes = range(axes_count)
    n, c_in, c_out = x_shape[0], x_shape[-1], y_shape[-1]
    geometry = [phase_geometry(x_shape[1 + a], kernel.shape[a], dilation[a], lo[a], y_shape[1 + a])
                for a in axes]
    weights = phase_kernel(kernel, dilation, [g["q"] for g in geometry])
    blocks = [g["blocks"] for g in geometry]
    f32 = y_type.element_type
    i64 = ir.IntegerType.get_signless(64)
    letters = ", ".join(map(str, axes))
    layout = f"#stablehlo.conv<[b, {letters}, f]x[{letters}, i, o]->[b, {letters}, f]>"

    def make(name, shape, operands, **attributes):
        return new_tensor_op(name, shape, f32, operands, **attributes)

    with ir.InsertionPoint(op), op.location:
        if spatial == 1:
            x = make("stablehlo.reshape", x_shape, [x])
        if any(g["start"] or g["stop"] != x_shape[1 + a] for a, g in zip(axes, geometry)):
            x = new_slice(x, [0, *(g["start"] for g in geometry), 0],
                          [n, *(g["stop"] for g in geometry), c_in])
        z = make("stablehlo.convolution", [n, *blocks, int(np.prod(dilation)) * c_out],
                 [x, new_constant(weights, f32)],
                 dimension_numbers=ir.Attribute.parse(layout),
                 padding=ir.DenseElementsAttr.get(np.array([g["pad"] for g in geometry], np.int64)),
                 feature_group_count=ir.IntegerAttr.get(i64, 1),
                 batch_group_count=ir.IntegerAttr.get(i64, 1))
        # depth-to-space: [n, blocks.., phases.., c] -> [n, (block, phase).., c]
        z = make("stablehlo.reshape", [n, *blocks, *dilation, c_out], [z])
        interleaved = [0, *(i for a in axes for i in (1 + a, 1 + axes_count + a)),
                       1 + 2 * axes_count]
        z = make("stablehlo.transpose", [n, *(v for a in axes for v in (blocks[a], dilation[a])),
                                         c_out], [z],
                 permutation=ir.DenseI64ArrayAttr.get(interleaved))
        z = make("stablehlo.reshape", [n, *(b * d for b, d in zip(blocks, dilation)), c_out], [z])
        crop = [g["crop"] for g in geometry]
        y = new_slice(z, [0, *crop, 0], [n, *(c + size for c, size in zip(crop, y_shape[1:-1])),
                                         c_out])
        if spatial == 1:
            y = make("stablehlo.reshape", list(y_type.shape), [y])
    op.results[0].replace_all_uses_with(y)
    op.operation.erase()
