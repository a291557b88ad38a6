"""Pooling windows become elementwise ops on strided slices.

IREE's CPU code for ``stablehlo.reduce_window`` pooled the CNN's streamed
frames (2x37x28 -> 2x18x28, window 2) in about 3 µs, 5% of the streamed
step (bench/bench_streaming.py), and failed to compile an Inception block's
``AveragePooling2D(3, strides=1, padding="same")`` on 35 x 35 x 192 ("exceeded
stack allocation limit of 32768 bytes"). A window of a few elements is
the maximum (or sum) of that many strided slices of the input: plain
elementwise work, which IREE fuses with the ops around it (the ReLU before,
the copy into the ring buffer after). A window of more than ``MAX_WINDOW``
elements is the maximum of the maxima along one axis, then along the next:
a pass of slices per axis (an SPP block's 13 x 13 pool, 26 slices for
169). Padding is a ``stablehlo.pad`` with the init value first, which is
what the window reads there.

With tfaot's micro-kernels, the windows over channels-last images that are
padded or large go to the pooling kernel first (lower/pool_kernel.py);
this rewrite takes what remains, and all of them in builds without the
kernels (GPU targets leave every window to IREE: lower/passes.py).

Taken: windows of at most ``MAX_WINDOW`` elements along each axis, without
dilation, whose body is one ``maximum`` (init -inf) or ``add`` (init 0):
max and average pooling as TensorFlow imports them (average pooling
divides the sum afterwards). The result is the same up to the order of
additions in a sum. A window over a constant of one value (a 'same'
average pooling's counts of the elements inside the image) is computed
here: a constant of the axes it varies along, broadcast.
"""
from __future__ import annotations

import itertools

import numpy as np

from .conv_epilogue import attr_ints, scalar_constant
from .legality import new_constant, new_op, new_slice, new_tensor_op

#: Windows of at most this many elements are one pass of slices; longer
#: ones a pass per axis, and longer than this along an axis stay one
#: reduce_window.
MAX_WINDOW = 16
#: The body ops taken, with the init value that changes no result.
_NEUTRAL = {"stablehlo.maximum": float("-inf"), "stablehlo.add": 0.0}


def unroll_small_pools(mlir_text: str) -> tuple[str, int]:
    """Rewrites qualifying ``stablehlo.reduce_window`` ops; returns the text
    and how many were rewritten."""
    from .mlir_import import rewrite_each_op

    def rewrite(op) -> bool:
        plan = _small_pool(op)
        if plan is None:
            return False
        if scalar_constant(op.operands[0]) is not None:
            _replace_by_constant(op, *plan)
        else:
            _replace(op, *plan)
        return True

    return rewrite_each_op(mlir_text, "stablehlo.reduce_window", rewrite)


def _small_pool(op):
    """(body op name, window, strides, (low, high) padding per axis) of a
    reduce_window this stage takes, else None."""
    from iree.compiler import ir

    if op.operation.name != "stablehlo.reduce_window" or len(op.operands) != 2:
        return None
    attrs = {a: op.attributes[a] for a in op.attributes}
    window = list(ir.DenseI64ArrayAttr(attrs["window_dimensions"]))
    strides = list(ir.DenseI64ArrayAttr(attrs["window_strides"])) if "window_strides" in attrs \
        else [1] * len(window)
    for name in ("base_dilations", "window_dilations"):
        if name in attrs and any(v != 1 for v in ir.DenseI64ArrayAttr(attrs[name])):
            return None
    pads = attr_ints(str(attrs["padding"])) if "padding" in attrs else []
    pads = list(zip(pads[0::2], pads[1::2])) if pads else [(0, 0)] * len(window)
    block = op.operation.regions[0].blocks[0]
    body = list(block.operations)
    if (max(window) > MAX_WINDOW or len(pads) != len(window) or min(min(p) for p in pads) < 0
            or len(body) != 2 or body[0].operation.name not in _NEUTRAL
            or set(body[0].operands) != set(block.arguments)
            or str(ir.RankedTensorType(op.operands[0].type).element_type) != "f32"
            or not ir.RankedTensorType(op.operands[0].type).has_static_shape):
        return None
    kind = body[0].operation.name
    init = scalar_constant(op.operands[1])
    if init is None or init != _NEUTRAL[kind]:
        return None
    return kind, window, strides, pads


def _replace(op, kind: str, window: list[int], strides: list[int], pads) -> None:
    """``op`` becomes ``kind`` folded over strided slices (a pass for the
    whole window or one per axis: _passes) of its input padded with the
    init value."""
    from iree.compiler import ir

    x = op.operands[0]
    f32 = ir.RankedTensorType(x.type).element_type
    shape = list(ir.RankedTensorType(x.type).shape)
    out_shape = list(ir.RankedTensorType(op.results[0].type).shape)
    rank = len(shape)
    with ir.InsertionPoint(op), op.location:
        if any(lo or hi for lo, hi in pads):
            shape = [n + lo + hi for n, (lo, hi) in zip(shape, pads)]
            x = new_tensor_op("stablehlo.pad", shape, f32, [x, op.operands[1]],
                              edge_padding_low=ir.DenseI64ArrayAttr.get([p[0] for p in pads]),
                              edge_padding_high=ir.DenseI64ArrayAttr.get([p[1] for p in pads]),
                              interior_padding=ir.DenseI64ArrayAttr.get([0] * rank))
        for axes in _passes(window, strides):
            result = None
            for offsets in itertools.product(*(range(window[a]) for a in axes)):
                start, limit, step = [0] * rank, list(shape), [1] * rank
                for axis, offset in zip(axes, offsets):
                    start[axis], step[axis] = offset, strides[axis]
                    limit[axis] = offset + (out_shape[axis] - 1) * strides[axis] + 1
                piece = new_slice(x, start, limit, step)
                result = piece if result is None else new_op(kind, piece.type, [result, piece])
            x = result
            shape = [out_shape[a] if a in axes else n for a, n in enumerate(shape)]
    op.results[0].replace_all_uses_with(x)
    op.operation.erase()


def _passes(window: list[int], strides: list[int]) -> list[list[int]]:
    """The axes each pass of slices covers: all of them in one pass where
    the window has at most MAX_WINDOW elements, else one axis a pass."""
    axes = [a for a, (w, s) in enumerate(zip(window, strides)) if w > 1 or s > 1]
    if int(np.prod([window[a] for a in axes])) <= MAX_WINDOW:
        return [axes] if axes else []
    return [[a] for a in axes]


def _replace_by_constant(op, kind: str, window: list[int], strides: list[int], pads) -> None:
    """``op`` over a constant of one value v: v times the count of the window's
    elements inside the input (a sum), or v where that count is not 0 (a
    maximum), as a constant along the axes where it varies, broadcast."""
    from iree.compiler import ir

    value = scalar_constant(op.operands[0])
    shape = list(ir.RankedTensorType(op.operands[0].type).shape)
    out_type = ir.RankedTensorType(op.results[0].type)
    counts = np.ones([1] * len(shape), np.float32)
    for axis, (n, w, s, (lo, _)) in enumerate(zip(shape, window, strides, pads)):
        starts = np.arange(out_type.shape[axis]) * s - lo
        inside = (np.clip(starts + w, 0, n) - np.clip(starts, 0, n)).astype(np.float32)
        if (inside == inside[0]).all():  # the same along this axis: not a dimension of its own
            inside = inside[:1]
        counts = counts * inside.reshape([-1 if a == axis else 1 for a in range(len(shape))])
    values = counts * np.float32(value) if kind == "stablehlo.add" else \
        np.where(counts > 0, np.float32(value), np.float32("-inf")).astype(np.float32)
    with ir.InsertionPoint(op), op.location:
        small = new_constant(values, out_type.element_type)
        full = new_op("stablehlo.broadcast_in_dim", out_type, [small], {
            "broadcast_dimensions": ir.DenseI64ArrayAttr.get(list(range(len(shape))))})
    op.results[0].replace_all_uses_with(full)
    op.operation.erase()
