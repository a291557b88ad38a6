"""The time meta of the values a replay carries (replay.py's docstring):
which frames of the sequence a chunk holds (``Seq``), a value with its
meta (``Streamed``), and the replay's ways of stopping: a strided layer
that needs more frames a step (``NeedFrames``), a layer that cannot be
streamed (``NotIncremental``, ``layer_error``). The graph streamifier
keeps the same records (streamify_graph).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

from ..errors import TfaotError

SEQ, VEC = "seq", "vec"
STEP_CAP = 65536.0  # the step counter saturates here (exact in float32)


@dataclass(frozen=True)
class Seq:
    """Which frames of a sequence a streamed chunk holds.

    At step m (0-based) the chunk holds frames ``[m*n - delay, m*n - delay + n)``
    of the sequence, numbered as in the reference (the original model on
    the prefix, or on the window); frames with a negative number come from
    before the stream started. The reference's last frame at step m is
    frame ``(m+1)*n + end``; ``length`` is the sequence's length in the
    whole-window model (window mode only). ``dirty``: frames with a negative
    number, when emitted, may be non-zero (so padding and recurrent layers
    must mask them).
    """

    n: int
    delay: int
    end: int
    length: int | None = None
    dirty: bool = False

    @property
    def lag(self) -> int:
        """How many frames the chunk's last frame is past the reference's last."""
        return -1 - self.delay - self.end

    @property
    def first_step(self) -> int:
        """The first step at which the reference has a last frame."""
        return max(0, math.ceil(-self.end / self.n) - 1)

    def late_why(self) -> str:
        """Why a value that needs the last frame has none here (``lag < 0``)."""
        late = -self.lag
        return (f"its input's last {late} frame{'s' * (late > 1)} read input frames still to "
                "come (padding='same' in time, or a transposed convolution, before it: those "
                "frames come late); use padding='causal' or 'valid' in time")

    def final(self) -> "Seq":
        """The record of the frames a step can return as final: where the
        reference runs past the chunk (``lag < 0``: a transposed
        convolution's last frames, sums of frames to come), its last frame
        moved back to the chunk's."""
        return replace(self, end=self.end + min(0, self.lag))


class Streamed:
    """A value flowing through the replayed graph, with its time meta.
    ``constant``: a VEC computed from the model's inputs that are not
    sequences alone (a conditioning vector), the same at every time step of
    the model's sequence; a VEC from a sequence (a last output, a pooled
    one) is not."""

    __slots__ = ("value", "meta", "seq", "valid_from", "constant", "unpadded")

    def __init__(self, value, meta: str, seq: Seq | None = None, valid_from: int = 0,
                 constant: bool = False, unpadded=None):
        self.value = value
        self.meta = meta
        self.seq = seq
        self.valid_from = valid_from if seq is None else max(valid_from, seq.first_step)
        self.constant = constant
        # (x, pads) where ``value`` is ``tf.pad(x, pads)`` with no pad in time:
        # a windowed layer can keep x's frames and pad its window instead
        self.unpadded = unpadded


class NeedFrames(Exception):
    """A strided layer needs the step to consume more frames; replay again."""

    def __init__(self, frames: int):
        super().__init__(frames)
        self.frames = frames


class NotIncremental(Exception):
    """A layer that cannot be streamed incrementally (window mode falls back)."""

    def __init__(self, op, reason: str):
        super().__init__(f"layer '{op.name}' ({type(op).__name__}) {reason}")
        self.layer = op.name


def per_step_seq(seq: Seq | None) -> Seq | None:
    """A per-step layer may map zeros to non-zeros (a bias), so emitted
    frames from before the stream become dirty."""
    if seq is None or seq.dirty or seq.delay <= 0:
        return seq
    return replace(seq, dirty=True)


def layer_error(op, reason: str) -> TfaotError:
    return TfaotError(f"layer '{op.name}' ({type(op).__name__}) {reason}")
