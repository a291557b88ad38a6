"""Import stage, TF dialect: bilinear resizes as two gathers a side and their lerps.

``tf.image.resize(method="bilinear")`` (Keras' ``UpSampling2D(interpolation=
"bilinear")`` and ``Resizing``, a segmentation model's decoder, a feature
pyramid) is the op ``ResizeBilinear``. TensorFlow's lowering to StableHLO
gathers a 3 x 3 patch of every channel for every output pixel and
contracts it with a weight tensor: nine times the output in a temporary.
A 48 x 48 x 16 -> 96 x 96 x 16 upsampling took 4.9 ms a step and a
7.2 MB context on x86-64; a DeepLab-style model (three such resizes)
needed 7.0 MB where its layers' outputs add up to 6.1 MB.

Each output pixel reads two input columns and two input rows, with
weights that depend only on the sizes and the op's flags. So the op is,
per axis, two gathers of constant indices and a lerp between them, first
across the width, then across the height, in the order and arithmetic of
TensorFlow's CPU kernel (resize_bilinear_op.cc):

    top = tl + (tr - tl) * x_lerp;  bottom = bl + (br - bl) * x_lerp
    out = top + (bottom - top) * y_lerp

where, for output index i, in = (i + 0.5) * scale - 0.5 with half-pixel
centers, else i * scale; scale = (in - 1) / (out - 1) with align_corners
(out > 1), else in / out; lower = max(floor(in), 0), upper = min(ceil(in),
size - 1), lerp = in - floor(in), all in float32. An axis the op maps to
itself is left out; where every output of an axis reads one row (lower ==
upper) its second gather and lerp are left out (equal but for an infinite
input, where TensorFlow's lerp gives NaN). Static shapes only: a resize of
a dynamic size is left to the lowering.
"""
from __future__ import annotations

import numpy as np

from .legality import new_op
from .tf_dialect import const, flag, rewrite_ops, tensor


def resize_bilinear_as_gathers(tf_text: str) -> tuple[str, int]:
    """``tf_text`` with each static ``tf.ResizeBilinear`` rewritten; returns
    the text (unchanged when nothing matched) and how many were rewritten."""
    if "tf.ResizeBilinear" not in tf_text:
        return tf_text, 0

    def rewrite(op) -> bool:
        if _static_4d(op):
            _rewrite(op)
            return True
        return False

    return rewrite_ops(tf_text, "tf.ResizeBilinear", rewrite)


def _static_4d(op) -> bool:
    from iree.compiler import ir

    images, out = (ir.RankedTensorType(v.type) for v in (op.operands[0], op.results[0]))
    return (images.has_static_shape and out.has_static_shape and images.rank == 4
            and str(out.element_type) == "f32")


def axis_taps(in_size: int, out_size: int, align_corners: bool,
              half_pixel_centers: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(lower, upper, lerp) per output index of one axis, as TensorFlow's CPU
    kernel computes them."""
    f32 = np.float32
    if align_corners and out_size > 1:
        scale = f32(in_size - 1) / f32(out_size - 1)
    else:
        scale = f32(in_size) / f32(out_size)
    i = np.arange(out_size, dtype=f32)
    at = (i + f32(0.5)) * scale - f32(0.5) if half_pixel_centers else i * scale
    floor = np.floor(at)
    lower = np.maximum(floor, 0).astype(np.int32)
    upper = np.minimum(np.ceil(at), in_size - 1).astype(np.int32)
    return lower, upper, (at - floor).astype(f32)


def _rewrite(op) -> None:
    from iree.compiler import ir

    images = op.operands[0]
    in_shape = list(ir.RankedTensorType(images.type).shape)
    out_shape = list(ir.RankedTensorType(op.results[0].type).shape)
    align = flag(op, "align_corners", False)
    half = flag(op, "half_pixel_centers", False)
    with ir.InsertionPoint(op), op.location:
        x = images
        if str(ir.RankedTensorType(x.type).element_type) != "f32":
            x = new_op("tf.Cast", ir.RankedTensorType.get(in_shape, ir.F32Type.get()), [x],
                       {"Truncate": ir.BoolAttr.get(False)})
        shape = in_shape
        for axis in (2, 1):  # across the width first, as TensorFlow's kernel
            taps = axis_taps(in_shape[axis], out_shape[axis], align, half)
            x, shape = _lerp_along(x, shape, axis, *taps)
    op.results[0].replace_all_uses_with(x)
    op.erase()


def _lerp_along(x, shape: list[int], axis: int, lower, upper, lerp):
    """``x`` resized along ``axis`` by the taps, and its new shape."""
    if len(lower) == shape[axis] and (lower == np.arange(shape[axis])).all() \
            and (upper == lower).all():
        return x, shape
    shape = shape[:axis] + [len(lower)] + shape[axis + 1:]
    kind = tensor(shape, x.type)
    axis_value = const(np.array(axis, np.int32))
    low = new_op("tf.GatherV2", kind, [x, const(lower), axis_value], {"batch_dims": _i64(0)})
    if (upper == lower).all():
        return low, shape
    high = new_op("tf.GatherV2", kind, [x, const(upper), axis_value], {"batch_dims": _i64(0)})
    weight = const(lerp.reshape([len(lerp) if a == axis else 1 for a in range(4)]))
    step = new_op("tf.Mul", kind, [new_op("tf.Sub", kind, [high, low]), weight])
    return new_op("tf.AddV2", kind, [low, step]), shape


def _i64(value: int):
    from iree.compiler import ir

    return ir.IntegerAttr.get(ir.IntegerType.get_signless(64), value)
