"""A convolution whose filter only picks its patch's samples becomes the copy it is.

The streamifier writes ``tf.signal.frame`` over a sequence of open length
as a convolution with the identity as filter (streamify_graph/
signal_frames.py): a ring buffer then streams it. In the step, output
position ``p`` of that convolution is the ``L`` samples of the window from
``p * S`` on: computed, each costs ``L * L`` multiply-adds, and the filter
``L x L`` floats in flash (an STFT of 400-sample frames: 160,000 and 640
KB), where a slice of the window is the same value. A step of several
frames (YAMNet's 48 STFT frames per patch) has a slice per position,
concatenated. Only convolutions along one axis, with at most
``MAX_POSITIONS`` output positions, no padding or dilation, and a filter
that is exactly the identity over the patch (``f[k, j] = 1`` where ``j =
k``, per channel for a depthwise one) are rewritten.
"""
from __future__ import annotations

import numpy as np


#: The most output positions written as slices (one op each).
MAX_POSITIONS = 512


def copies_for_patch_filters(mlir_text: str) -> tuple[str, int]:
    """Rewrites qualifying ``stablehlo.convolution`` ops; returns the text
    and how many were rewritten."""
    from .mlir_import import rewrite_each_op

    return rewrite_each_op(mlir_text, "stablehlo.convolution",
                           lambda op: _is_patch_copy(op) and _replace(op))


def _is_patch_copy(op) -> bool:
    g = _geometry(op)
    if (g is None or (g.batch, g.ow, g.iw, g.kw) != (1, 1, 1, 1) or g.sh < 1
            or not 1 <= g.oh <= MAX_POSITIONS or any(sum(p) for p in g.pad) or g.dh != 1):
        return False
    taps = g.kh
    if g.depthwise:  # weights [taps, c * taps]: channel c's output j is its tap j
        want = np.tile(np.eye(taps, dtype=np.float32), (1, g.c))
    else:  # weights [n, taps]
        want = np.eye(taps, dtype=np.float32) if g.c == 1 else None
    return want is not None and g.weights.shape == want.shape and np.array_equal(g.weights, want)


def _replace(op) -> bool:
    """``op`` (1, H, 1, C) -> (1, P, 1, C * taps) becomes, for each output
    position p, the ``taps`` rows of its input from ``p * stride`` on,
    channel-major; the positions concatenated."""
    from .kernel_calls import retire

    from iree.compiler import ir

    x = op.operands[0]
    x_type = ir.RankedTensorType(x.type)
    y_type = ir.RankedTensorType(op.results[0].type)
    channels, positions = x_type.shape[3], y_type.shape[1]
    taps = y_type.shape[3] // channels
    stride = _geometry(op).sh
    with ir.InsertionPoint(op), op.location:
        one = ir.RankedTensorType.get([1, 1, 1, channels * taps], x_type.element_type)
        parts = [_patch(x, p * stride, taps, channels, one) for p in range(positions)]
        y = parts[0] if positions == 1 else ir.Operation.create(
            "stablehlo.concatenate", results=[y_type], operands=parts,
            attributes={"dimension": ir.IntegerAttr.get(ir.IntegerType.get_signless(64), 1)}
        ).results[0]
    retire(op, 1, y)
    return True


def _geometry(op):
    """The constant convolution's geometry (microkernel.constant_conv), or None."""
    from .microkernel import constant_conv

    return constant_conv(op, min_weights=0)


def _patch(x, start: int, taps: int, channels: int, one_type):
    """Rows ``start .. start + taps`` of ``x`` (1, H, 1, C) as (1, 1, 1, C *
    taps), channel c's taps together."""
    from iree.compiler import ir

    f32 = ir.RankedTensorType(x.type).element_type
    rows = ir.Operation.create(
        "stablehlo.slice", results=[ir.RankedTensorType.get([1, taps, 1, channels], f32)],
        operands=[x], attributes={
            "start_indices": ir.DenseI64ArrayAttr.get([0, start, 0, 0]),
            "limit_indices": ir.DenseI64ArrayAttr.get([1, start + taps, 1, channels]),
            "strides": ir.DenseI64ArrayAttr.get([1, 1, 1, 1])}).results[0]
    if channels > 1:  # (1, taps, 1, C) -> (1, 1, C, taps): channel c's taps together
        rows = ir.Operation.create(
            "stablehlo.transpose",
            results=[ir.RankedTensorType.get([1, 1, channels, taps], f32)], operands=[rows],
            attributes={"permutation": ir.DenseI64ArrayAttr.get([0, 2, 3, 1])}).results[0]
    return ir.Operation.create("stablehlo.reshape", results=[one_type],
                               operands=[rows]).results[0]
