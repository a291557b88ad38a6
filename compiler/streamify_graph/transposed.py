"""The sequence rule of a transposed convolution over time (graph ops).

``Conv2DBackpropInput`` / ``Conv3DBackpropInputV2`` with time among the
spatial axes of their ``out_backprop`` (what Keras' Conv1DTranspose /
Conv2DTranspose / Conv3DTranspose write, and ``tf.signal.overlap_and_add``
once signal_ola.py has rewritten it): the graph twin of
``streamify_keras.time_rules.TransposedRule``, with the same plan
(``transposed_plan``): a ring buffer of ``(k - 1) // s`` input frames, a
step's n frames giving n * s output frames. The op's ``input_sizes`` (the
output shape, computed from the sequence's length in the graph) is
replaced by the window's.
"""
from __future__ import annotations

import numpy as np

from ..streamify_keras.time_rules import transposed_frames, transposed_plan
from .meta import STATIC_KINDS, seq
from .ring import take_frames
from .seq_op import SeqOp, rule
from .time_rules import spatial_axes, time_params, emit_with, mode, refuse

TRANSPOSED_OPS = ("Conv2DBackpropInput", "Conv3DBackpropInputV2")


@rule(*TRANSPOSED_OPS)
def _transposed(s: SeqOp):
    import tensorflow as tf

    if s.k0 != 2 or s.metas[1].kind not in STATIC_KINDS:
        s.unsupported()  # (time in the filter, or in the output sizes only)
    spatial = spatial_axes(s)
    if s.a not in spatial:
        s.fail(f"works across the time axis {s.a} (its channel axis)")
    k, stride, dil, padding = time_params(s, spatial)
    plan = transposed_plan(k, stride, dil, padding, s.frames, mode(s), refuse(s))
    full_out = s.em.full_shape(f"{s.node.name}:0")
    if full_out is None or any(d is None for i, d in enumerate(full_out) if i != s.a):
        s.fail("cannot find its output's shape")
    keep, n = plan.get("keep", 0), s.frames.n
    x, _ = s.em.time.clean(s.x, s.a, s.frames)
    window = s.em.time.buffer((s.node.name, "frames"), x, keep, s.a, s.node.name)
    sizes = [int(d) for d in full_out]
    sizes[s.a] = (keep + n) * stride + (max(k - stride, 0) if padding == "valid" else 0)
    taps = _one_dimensional_filter(s, sizes)
    if taps is not None:  # (products and their overlap-add, as the Keras rule's)
        with s.em_scope():
            frames = tf.reshape(window, (1, -1, taps.shape[1]))
            y = _overlap_added(frames, stride) if _is_identity(taps) else \
                transposed_frames(frames, taps, stride)
            y = tf.reshape(y[:, :sizes[s.a]], sizes)
    else:
        with s.em_scope():
            sizes = tf.constant(np.array(sizes, np.int32))
        (y,) = emit_with(s, {0: sizes, 2: window})[:1]
    # (the window's output frames from keep*s on have all their taps in it)
    y = take_frames(y, s.a, keep * stride, (keep + n) * stride)
    out = plan["out"]
    s.em.row(s.node, "time conv" if stride == 1 else "time upsampling", buffer=keep,
             kernel=k, stride=stride, dilation=dil, delay=out.delay)
    s.set([y], [seq(s.a, out)])


def _one_dimensional_filter(s: SeqOp, sizes: list[int]):
    """The filter as (k, Cin, Cout) where the op is a transposed
    convolution over time alone (NHWC, time on H or W and the other 1, as
    Keras writes Conv1DTranspose: (batch, 1, time, C); a constant filter,
    1 wide across; stride and dilation 1 across): what
    ``transposed_frames`` computes; else None."""
    at = s.node.attr
    across = 3 - s.a  # (the other spatial axis)
    if s.op != "Conv2DBackpropInput" or s.a not in (1, 2) or sizes[across] != 1 or \
            (at["data_format"].s or b"NHWC") != b"NHWC" or \
            list(at["strides"].list.i)[across] != 1 or \
            any(d != 1 for d in at["dilations"].list.i):
        return None
    try:
        taps = s.const(1)
    except Exception:  # noqa: BLE001 - a filter computed at run time
        return None
    if taps.ndim != 4 or taps.shape[across - 1] != 1 or taps.dtype != np.float32:
        return None
    return np.ascontiguousarray(np.transpose(np.squeeze(taps, across - 1), (0, 2, 1)))


def _is_identity(taps: np.ndarray) -> bool:
    """Whether the (k, Cin, Cout) filter is the identity of L = k = Cin taps
    to one output channel: ``tf.signal.overlap_and_add`` as signal_ola.py
    writes it."""
    return taps.shape == (taps.shape[0], taps.shape[0], 1) and \
        np.array_equal(taps[:, :, 0], np.eye(taps.shape[0], dtype=taps.dtype))


def _overlap_added(frames, stride: int):
    """The overlap-add of ``frames`` (1, W, L) as (1, samples, 1): a copy
    per sample, not the L products of the identity filter."""
    import tensorflow as tf

    return tf.signal.overlap_and_add(frames, stride)[:, :, None]
