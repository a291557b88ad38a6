"""Image resizes TensorFlow's converter cannot lower, as two matrix products.

``tf.image.resize`` with ``method="area"``, ``"bicubic"``, ``"lanczos3"``,
``"lanczos5"``, ``"gaussian"`` or ``"mitchellcubic"``, or with
``antialias=True`` (Keras' ``Resizing`` layer too), is a TensorFlow op
(``ResizeArea``, ``ResizeBicubic``, ``ScaleAndTranslate``) that the
lowering to StableHLO leaves as it is: a model with one was refused ("has
no StableHLO lowering"). For images of a fixed size each of them is
linear and separable: every output pixel is a weighted sum of input rows,
then of input columns, with weights that depend only on the sizes and the
op's attributes. So ``y = A_h . x . A_w^T`` per image and channel, and
the matrices are the op itself, run once by TensorFlow on the basis
vectors of each axis with the other axis of size one (which the op maps
to itself): exact by construction, with TensorFlow's own edge handling.
The two products are ``stablehlo.einsum`` ops (made ``dot_general`` by
einsum.py) on constants of ``H' x H`` and ``W' x W`` floats.
"""
from __future__ import annotations

import numpy as np

from .legality import new_op

#: TensorFlow resize ops that are linear for a fixed size, by their op name
LINEAR_RESIZES = ("tf.ResizeArea", "tf.ResizeBicubic", "tf.ScaleAndTranslate")


def resizes_as_products(func_op) -> int:
    """Rewrite ``func_op``'s linear resizes of static shape; returns how many."""
    from iree.compiler import ir

    count = 0
    for op in list(func_op.regions[0].blocks[0].operations):
        op = op.operation
        if op.name not in LINEAR_RESIZES:
            continue
        images = ir.RankedTensorType(op.operands[0].type)
        out = ir.RankedTensorType(op.results[0].type)
        if not (images.has_static_shape and out.has_static_shape) or images.rank != 4:
            continue
        axes = _axis_matrices(op, images.shape, out.shape)
        if axes is None:
            continue
        _rewrite(op, *axes)
        count += 1
    return count


def _axis_matrices(op, in_shape, out_shape):
    """(A_h, A_w) for the resize ``op``, or None where its attributes are not
    known here (a scale or translation that is not a constant)."""
    attrs = op.attributes
    _, h, w, _ = in_shape
    _, h2, w2, _ = out_shape
    if op.name == "tf.ScaleAndTranslate":
        scale, translation = (_constant(op.operands[i]) for i in (2, 3))
        if scale is None or translation is None:
            return None
        kernel = str(attrs["kernel_type"]).strip('"') if "kernel_type" in attrs else "lanczos3"
        antialias = _flag(attrs, "antialias", True)

        def run(basis, size, axis):
            import tensorflow as tf

            s, t = np.ones(2, np.float32), np.zeros(2, np.float32)
            s[axis], t[axis] = scale[axis], translation[axis]
            return tf.raw_ops.ScaleAndTranslate(images=basis, size=size, scale=s, translation=t,
                                                kernel_type=kernel, antialias=antialias)
    else:
        flags = {"align_corners": _flag(attrs, "align_corners", False)}
        if op.name == "tf.ResizeBicubic":
            flags["half_pixel_centers"] = _flag(attrs, "half_pixel_centers", False)

        def run(basis, size, axis):
            import tensorflow as tf

            resize = tf.raw_ops.ResizeArea if op.name == "tf.ResizeArea" else \
                tf.raw_ops.ResizeBicubic
            return resize(images=basis, size=size, **flags)

    # channel c of the basis is the unit vector c along the axis
    rows = run(np.eye(h, dtype=np.float32).reshape(1, h, 1, h), [h2, 1], 0)
    cols = run(np.eye(w, dtype=np.float32).reshape(1, 1, w, w), [1, w2], 1)
    return (np.asarray(rows, np.float32).reshape(h2, h),
            np.asarray(cols, np.float32).reshape(w2, w))


def _flag(attrs, name: str, default: bool) -> bool:
    """A boolean attribute of an op (``attrs``: its attributes), else ``default``."""
    return str(attrs[name]) == "true" if name in attrs else default


def _constant(value):
    """The value of a constant operand, else None."""
    owner = value.owner
    if owner.name not in ("stablehlo.constant", "tf.Const") or "value" not in owner.attributes:
        return None
    return np.array(owner.attributes["value"], np.float32).reshape(-1)


def _rewrite(op, rows: np.ndarray, cols: np.ndarray) -> None:
    from iree.compiler import ir

    images = op.operands[0]
    out = ir.RankedTensorType(op.results[0].type)
    f32 = ir.F32Type.get()
    n, h, w, c = ir.RankedTensorType(images.type).shape
    with ir.InsertionPoint(op), op.location:
        if str(ir.RankedTensorType(images.type).element_type) != "f32":
            images = new_op("stablehlo.convert",
                             ir.RankedTensorType.get([n, h, w, c], f32), [images])
        tall = new_op("stablehlo.einsum", ir.RankedTensorType.get([n, rows.shape[0], w, c], f32),
                       [_matrix(rows), images], {"einsum_config": ir.StringAttr.get("kh,nhwc->nkwc")})
        y = new_op("stablehlo.einsum", ir.RankedTensorType.get(out.shape, f32),
                    [_matrix(cols), tall], {"einsum_config": ir.StringAttr.get("lw,nkwc->nklc")})
        if str(out.element_type) != "f32":
            y = new_op("stablehlo.convert", out, [y])
    op.results[0].replace_all_uses_with(y)
    op.erase()


def _matrix(values: np.ndarray):
    from iree.compiler import ir

    kind = ir.RankedTensorType.get(list(values.shape), ir.F32Type.get())
    attr = ir.DenseElementsAttr.get(np.ascontiguousarray(values, np.float32), type=kind)
    return new_op("stablehlo.constant", kind, [], {"value": attr})
