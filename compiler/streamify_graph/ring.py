"""The time state of the graph replay: ring buffers and the step counter.

A streaming convolution, pooling, padding or window reduction keeps frames
between steps (``buffer``); padding and recurrent loops need to know which
frames come from before the stream started (``frame_numbers``, from a step
counter). Every such tensor is ordinary streaming state: the first replay
(discovery) meets them in order and records them with their initial value
(``found``), the caller registers them in the ``StateRegistry``, and the
traced replay takes their values from the step's state arguments.

``TimePlan`` says how a step relates to the original graph's time axis, as
the Keras streamifier's ``Replay`` does: ``frames`` input frames per step,
mode "prefix" or "window" (the last ``window`` frames, ending ``delay``
frames before the step's last one).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Hashable

import numpy as np

from ..streamify_keras.time_meta import STEP_CAP, Seq
from .graphdef import Fail


@dataclass(frozen=True)
class TimePlan:
    mode: str  # "prefix" | "window"
    frames: int = 1  # input frames per step
    window: int | None = None  # W (mode "window")
    delay: int = 0  # frames between the window's end and the step's last frame
    dynamic: bool = False  # prefix over a time axis of unknown length

    def input_seq(self) -> Seq:
        """The record of the step input's chunk."""
        length = self.window if self.mode == "window" else None
        return Seq(self.frames, 0, -1 - self.delay, length)

    @property
    def window_first_step(self) -> int:
        """The first step whose window lies inside the stream."""
        if self.mode != "window":
            return 0
        return max(0, math.ceil((self.window + self.delay) / self.frames) - 1)


class TimeState:
    """Ring buffers and the step counter of one replay (see the module doc)."""

    def __init__(self, plan: TimePlan, state_inputs: dict, new_states: dict,
                 discovering: bool):
        self.plan = plan
        self.state_inputs = state_inputs
        self.new_states = new_states
        self.discovering = discovering
        self.found: list[tuple[Hashable, np.ndarray, str, str]] = []  # key, initial, layer, kind
        self._counter = None

    def take(self, key: Hashable, initial: np.ndarray, layer: str, kind: str):
        """This step's value of state ``key`` (its initial value while discovering)."""
        import tensorflow as tf

        if key in self.state_inputs:
            return self.state_inputs[key]
        if not self.discovering:
            raise Fail(f"internal: state {key!r} was not found by the discovery replay")
        self.found.append((key, initial, layer, kind))
        value = tf.constant(initial)
        self.state_inputs[key] = value
        return value

    def buffer(self, key: Hashable, value, keep: int, axis: int, layer: str):
        """``concat(last keep frames before value's chunk, value)`` along ``axis``;
        the buffer's new value is the last ``keep`` frames of that."""
        import tensorflow as tf

        if keep <= 0:
            return value
        shape = [int(d) for d in value.shape]
        shape[axis] = keep
        old = self.take(key, np.zeros(shape, value.dtype.as_numpy_dtype), layer, "buf")
        cat = tf.concat([old, value], axis=axis)
        self.new_states[key] = take_frames(cat, axis, -keep, None)
        return cat

    def ring(self, key: Hashable, value, keep: int, axis: int, layer: str,
             positions: list[int] | None = None):
        """A circular buffer of the last ``keep`` frames before ``value``'s
        chunk along ``axis`` (streamify_keras/circular.py): returns its rows,
        in no order, or with ``positions`` the frames there of the buffer
        followed by the chunk (circular.taps); its new value has the chunk's
        newest frames over the oldest rows, and its last row says where the
        next write goes."""
        from ..streamify_keras import circular

        shape = [int(d) for d in value.shape]
        shape[axis] = keep + 1
        buffer = self.take(key, np.zeros(shape, value.dtype.as_numpy_dtype), layer, "buf")
        # (read before the write: IREE then writes the buffer in place)
        out = (circular.rows(buffer, axis) if positions is None
               else circular.taps(buffer, value, positions, axis))
        self.new_states[key] = circular.write(buffer, value, axis)
        return out

    def step_index(self):
        """m, the number of the current step (saturating), a float scalar."""
        import tensorflow as tf

        if self._counter is None:
            key = ("stream", "step")
            count = self.take(key, np.zeros((1,), np.float32), "stream", "step")
            self.new_states[key] = tf.minimum(count + 1.0, STEP_CAP)
            self._counter = count[0]
        return self._counter

    def frame_numbers(self, seq: Seq):
        """The numbers of the chunk's frames (float vector of length n)."""
        import tensorflow as tf

        m = self.step_index()
        return m * float(seq.n) - float(seq.delay) + tf.range(seq.n, dtype=tf.float32)

    def started(self, seq: Seq, axis: int, rank: int):
        """1.0 for the chunk's frames from the stream, 0.0 for those from before
        it, shaped to broadcast along ``axis`` of a rank-``rank`` tensor."""
        import tensorflow as tf

        keep = tf.cast(self.frame_numbers(seq) >= 0.0, tf.float32)
        shape = [1] * rank
        shape[axis] = seq.n
        return tf.reshape(keep, shape)

    def clean(self, value, axis: int, seq: Seq):
        """``value`` with frames from before the stream set to zero, and its record."""
        if not seq.dirty or seq.delay <= 0:
            return value, replace(seq, dirty=False)
        keep = self.started(seq, axis, len(value.shape))
        return value * keep, replace(seq, dirty=False)

    def frame_at_lag(self, key: Hashable, value, axis: int, seq: Seq, layer: str,
                     count: int = 1):
        """(tensor, index) such that the tensor's frame ``index`` along ``axis``
        is the reference's last frame, ``seq.lag`` frames before the chunk's
        last, with the ``count - 1`` frames before it there too."""
        cat = self.buffer(key, value, seq.lag + count - seq.n, axis, layer)
        return cat, int(cat.shape[axis]) - 1 - seq.lag

    def window_of(self, key: Hashable, value, axis: int, seq: Seq, layer: str):
        """The reference's ``seq.length`` frames (window mode) along ``axis``."""
        need = seq.length + seq.lag
        cat = self.buffer(key, value, need - seq.n, axis, layer)
        first = int(cat.shape[axis]) - need
        return take_frames(cat, axis, first, first + seq.length), max(0, need - seq.n)


def take_frames(value, axis: int, start: int, stop: int | None):
    """``value[..., start:stop, ...]`` along ``axis``."""
    index: list[Any] = [slice(None)] * len(value.shape)
    index[axis] = slice(start, stop)
    return value[tuple(index)]
