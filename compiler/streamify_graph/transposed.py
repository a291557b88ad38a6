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

from ..streamify_keras.time_rules import transposed_plan
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
    if _is_overlap_add(s, padding):
        with s.em_scope():  # (signal_ola.py's; a copy per sample, not L products)
            frames = window[:, :, 0, :]
            y = tf.reshape(tf.signal.overlap_and_add(frames, stride)[:, :sizes[s.a]], sizes)
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


def _is_overlap_add(s: SeqOp, padding: str) -> bool:
    """Whether the op is an overlap-add: NHWC, time on axis 1 of (batch,
    time, 1, L), the identity as filter [L, 1, 1, L], padding 'valid', no
    dilation (signal_ola.py writes ``tf.signal.overlap_and_add`` so)."""
    if s.op != "Conv2DBackpropInput" or s.a != 1 or padding != "valid" or \
            (s.node.attr["data_format"].s or b"NHWC") != b"NHWC":
        return False
    try:
        taps = s.const(1)
    except Exception:  # noqa: BLE001 - a filter computed at run time: a convolution
        return False
    length = taps.shape[0]
    return taps.shape == (length, 1, 1, length) and \
        np.array_equal(taps[:, 0, 0, :], np.eye(length, dtype=taps.dtype))
