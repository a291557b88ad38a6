"""``tf.signal.overlap_and_add`` over a sequence of open length, written as
the transposed convolution it is.

A speech enhancer that works on frames (DTLN, a learned decoder: frames of
``L`` samples every ``S``) returns a waveform by overlap-add: sample ``j``
of frame ``t`` is added to output sample ``t*S + j``. TensorFlow writes it
as a pad, reshapes, a transpose and a sum over ``ceil(L/S)`` segments of
the frames, sized by the number of frames, which a stream never knows. It
is a transposed convolution over time with ``L`` taps, stride ``S`` and the
identity as filter, which streams (transposed.py): a ring buffer of
``(L - 1) // S`` frames, a step's frame giving ``S`` finished samples; the
last ``L - S`` samples of a whole-sequence run, partial sums that frames to
come complete, are past the stream's end.

An overlap-add is recognised by what it computes, as signal_frames.py
recognises frames: a name scope named ``overlap_and_add`` (TensorFlow's)
that reads one tensor ``(batch, frames, L)`` (or ``(frames, L)``) of open
length and gives one ``(batch, samples)``, and on two test inputs gives
exactly their overlap-add for some ``S``, is replaced.
"""
from __future__ import annotations

import numpy as np

from .signal_frames import replaced_scopes, scope_io, without_control_inputs

#: Test frame counts: two that give different lengths for any step.
_PROBE_FRAMES = (7, 12)


class _OverlapAdd:
    """A recognised overlap-add: its scope, input, output, frame length and step."""

    def __init__(self, scope: str, x, y, length: int, step: int):
        self.scope, self.x, self.y, self.length, self.step = scope, x, y, length, step


def overlap_adds_as_convolutions(graph_def):
    """``graph_def`` with each overlap-add over an open time axis written as a
    transposed convolution (module docstring), and how many were."""
    import tensorflow as tf

    scopes = sorted({_scope_of(n.name) for n in graph_def.node} - {None})
    if not scopes:
        return graph_def, 0
    g = tf.Graph()
    try:
        with g.as_default():
            tf.graph_util.import_graph_def(without_control_inputs(graph_def), name="")
    except Exception:  # noqa: BLE001 - a broken graph: the streamifier names its fault
        return graph_def, 0
    found = [f for f in (_overlap_add(g, scope) for scope in scopes) if f is not None]
    if not found:
        return graph_def, 0
    return replaced_scopes(graph_def, found, _as_transposed_convolution, "tfaot_ola"), len(found)


def _scope_of(name: str) -> str | None:
    """The ``.../overlap_and_add[_N]`` scope a node's name is in, else None."""
    parts = name.split("/")
    for i, part in enumerate(parts[:-1]):
        if part == "overlap_and_add" or (part.startswith("overlap_and_add_")
                                         and part[16:].isdigit()):
            return "/".join(parts[:i + 1])
    return None


def _overlap_add(g, scope: str) -> _OverlapAdd | None:
    """The overlap-add of name scope ``scope``, or None (module docstring)."""
    import tensorflow as tf

    io = scope_io(g, scope)
    if io is None:
        return None
    x, y = io
    shape = x.shape
    if x.dtype != np.float32 or shape.rank not in (2, 3) or y.shape.rank != shape.rank - 1 \
            or shape[-2] is not None or shape[-1] is None:
        return None
    length, found = int(shape[-1]), None
    for count in _PROBE_FRAMES:
        # (small integers: every sum exact in float32, whatever its order)
        frames = np.random.default_rng(count).integers(-64, 64, (1, count, length))
        frames = frames.astype(np.float32)
        try:
            with tf.compat.v1.Session(graph=g) as sess:
                got = sess.run(y, {x: frames if shape.rank == 3 else frames[0]})
        except Exception:  # noqa: BLE001 - not an overlap-add this pass knows
            return None
        got = got if shape.rank == 3 else got[None]
        step, extra = divmod(got.shape[-1] - length, count - 1)
        if extra or step < 1 or (found is not None and step != found) or \
                not np.array_equal(got, _numpy_overlap_add(frames, step)):
            return None
        found = step
    return _OverlapAdd(scope, x, y, length, found)


def _numpy_overlap_add(frames: np.ndarray, step: int) -> np.ndarray:
    """numpy's overlap-add of ``frames`` (batch, count, length)."""
    batch, count, length = frames.shape
    out = np.zeros((batch, (count - 1) * step + length), frames.dtype)
    for t in range(count):
        out[:, t * step:t * step + length] += frames[:, t]
    return out


def _as_transposed_convolution(holder, f: _OverlapAdd):
    """The overlap-add of ``holder`` (batch, frames, L) or (frames, L) as a
    transposed convolution with the identity filter over (batch, time, 1, L)."""
    import tensorflow as tf

    x = holder if f.x.shape.rank == 3 else tf.expand_dims(holder, 0)
    eye = np.eye(f.length, dtype=np.float32)[:, None, None, :]  # [L, 1, 1 out, L in]
    batch, count = tf.shape(x)[0], tf.shape(x)[1]
    sizes = tf.stack([batch, (count - 1) * f.step + f.length, 1, 1])
    y = tf.nn.conv2d_transpose(x[:, :, None, :], eye, sizes, [1, f.step, 1, 1], "VALID")
    y = tf.reshape(y, [batch, -1])
    return y if f.x.shape.rank == 3 else y[0]
