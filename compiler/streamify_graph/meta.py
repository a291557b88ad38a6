"""The time meta of a tensor: what the replay at T=1 knows about its time axis.

``static``: no time dependence. ``static_t``: static, but computed from the
shape of a sequence tensor: in the T=1 graph it has its T=1 value, right for
shapes and list sizes, wrong as data. ``seq``: has a time axis, each step
depends on its own step only. ``step``: no time axis, depends on the steps
so far (the last output, a final state). ``item``: time step k alone, from an
unrolled per-step map that must be stacked back whole. ``list_in`` /
``list_out`` / ``list_done`` / ``ta`` / ``ta_flow``: sequence lists.
``dead``: cannot be used (``why`` says why).

Streaming convolutions (``time_rules.py``) give a ``seq`` tensor a chunk
record ``frames`` (the Keras streamifier's ``Seq``: how many frames the
step holds and which ones; None for one frame, the current one) and, between
``SpaceToBatchND`` and ``BatchToSpaceND``, the pending dilations ``s2b``.
``valid_from`` is the first step at which the value is defined (a
conv front end's receptive field, a window not yet full).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Meta:
    kind: str  # static | static_t | seq | step | item | list_in | list_out | list_done |
    #            ta | ta_flow | dead
    axis: int | None = None  # seq: the time axis; item: T
    key: str | None = None  # lists: identity; item: the step index
    mode: str = ""  # list_done: "seq" (one item per step) or "last"
    why: str = ""  # dead: why it cannot be used
    frames: Any = None  # seq: the chunk record (streamify_keras.time_meta.Seq), None = 1 frame
    valid_from: int = 0  # seq / step: the first step at which it is defined
    # seq, inside a SpaceToBatchND pair: (stage "in" | "out", time dilation,
    # time padding's start, ((other axis, block), ...))
    s2b: tuple | None = None
    # step: computed from per-step inputs (and constants) alone, not from a
    # sequence: one value for the whole sequence in the graph, so it may
    # broadcast over a sequence's frames (a conditioning vector)
    held: bool = False

    def __str__(self):  # (in messages: what the tensor is, in the user's terms)
        if self.kind == "seq":
            return f"a sequence over axis {self.axis}"
        if self.kind == "item":
            return f"time step {self.key} alone"
        if self.kind == "step":
            return "one value a step, from the frames so far"
        if self.kind in ("static", "static_t"):
            return "the same every step"
        return self.kind


STATIC = Meta("static")
STATIC_T = Meta("static_t")
STEP = Meta("step")
HELD = Meta("step", held=True)
STATIC_KINDS = {"static", "static_t"}
LIST_KINDS = {"list_in", "list_out", "list_done", "ta", "ta_flow"}


def seq(axis: int, frames: Any = None, valid_from: int = 0) -> Meta:
    return Meta("seq", axis=axis, frames=frames, valid_from=valid_from)


def step(valid_from: int = 0) -> Meta:
    """A per-step value (no time axis), defined from step ``valid_from`` on."""
    return STEP if not valid_from else Meta("step", valid_from=valid_from)
