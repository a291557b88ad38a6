"""Whether a model without recurrence streams over time or runs one whole
inference per step: the default rule, shared by Keras models and graphs.

The input's rank says what the model was trained on:

* (batch, time, features), or token ids (batch, time): a sequence; a model
  with a fixed window streams as a sliding window over axis 1 (also when it
  reshapes the frames to rank 4 itself, as keyword spotters do);
* (batch, time, H, W, C): a sequence of images; streams over axis 1;
* (batch, H, W, C) with H and W fixed, float or uint8: an image; one
  inference per step.

A model with recurrent layers (or loops, or an unrolled cell) always
streams, and so does one whose axis 1 is open: those choices are made by the
streamifiers before this rule is asked. ``--stream`` and ``--whole-window``
(and, for graphs, ``--time-axis``) override the rule.
"""
from __future__ import annotations

from dataclasses import dataclass

#: ``fixed_window`` settings: "auto" applies the rule below.
CHOICES = ("auto", "stream", "whole")
FLAG = {"stream": "--stream", "whole": "--whole-window"}


@dataclass(frozen=True)
class Choice:
    fixed_window: str  # "stream" or "whole"
    why: str  # a clause for the build's note: "input (None, 49, 40) is (batch, time, ...)"


def choose(requested: str, shape, dtype: str, *, axis_given: bool = False) -> Choice:
    """What a fixed-window model without recurrence does (``requested`` is
    one of CHOICES; ``shape`` the time input's, batch first)."""
    if requested not in CHOICES:
        raise ValueError(f"fixed_window must be one of {CHOICES}, got {requested!r}")
    shown = _shape_text(shape)
    if requested != "auto":
        return Choice(requested, f"asked with {FLAG[requested]}")
    if axis_given:
        return Choice("stream", "its time axis was given with --time-axis")
    if not has_time_rank(shape, dtype):
        return Choice("whole", f"input {shown} has no time axis")
    if is_image(shape, dtype):
        return Choice("whole", f"input {shown} is an image (batch and 3 image axes) and the "
                               "model has no recurrence that streams; --stream to stream it "
                               "over axis 1")
    what = {2: "(batch, time) token ids", 3: "(batch, time, features)",
            5: "(batch, time, H, W, C)"}.get(len(shape), f"of rank {len(shape)}")
    return Choice("stream", f"input {shown} is {what}")


def has_time_rank(shape, dtype: str) -> bool:
    """Whether the input's rank leaves room for a time axis: (batch, time,
    features) floats or more, (batch, time) token ids or more."""
    return len(shape) >= (3 if _is_float(dtype) else 2)


def one_block_a_call(shape, dtype: str) -> bool:
    """An input of fixed shape, its batch too, without room for a time axis
    (``has_time_rank``): a step that takes one block a call (DTLN's (1,
    512)); its loops run over axes the graph makes (streamify_graph/
    single_pass.py). (An open axis 0 of a frozen graph's (None, F) input may
    be time: a tf.scan over it; a stateful layer's batch is fixed.)"""
    return shape is not None and None not in tuple(shape) and not has_time_rank(shape, dtype)


def is_image(shape, dtype: str) -> bool:
    """A float or uint8 input (batch, H, W, C) with H and W fixed (uint8:
    raw pixels, as image SavedModels and graphs often take them; such an
    input was streamed over its rows as a sliding window)."""
    return (len(shape) == 4 and (_is_float(dtype) or str(dtype) == "uint8")
            and all(d is not None for d in shape[1:3]))


def _is_float(dtype) -> bool:
    return str(dtype).startswith(("float", "bfloat", "half"))


def _shape_text(shape) -> str:
    return "(" + ", ".join("None" if d is None else str(int(d)) for d in shape) + ")"


def note(stream, why: str, input_name: str = "") -> str:
    """One line: how the build streams and why (``stream`` a StreamInfo)."""
    of = f" of input '{input_name}'" if input_name else ""
    if stream.mode == "window":
        how = (f"streams as a sliding window of {stream.window} frames{of} (time axis "
               f"{stream.time_axis}), "
               + (f"recomputing the whole window every step ({stream.recompute})"
                  if stream.recompute else f"{stream.frames_per_step} per step"))
        return f"{how}, because {why}; --whole-window for one whole inference per step"
    if stream.mode == "prefix":
        frames = stream.frames_per_step
        return (f"streams over axis {stream.time_axis}{of}, {frames} frame"
                f"{'s' if frames > 1 else ''} per step, because {why}{_latency(stream)}")
    return f"one whole inference per step, because {why}"


def _latency(stream) -> str:
    """The outputs a step returns late, said (their header's OUTPUTi_LATENCY)."""
    late = [(i, n) for i, n in enumerate(stream.output_latency) if n]
    if not late:
        return ""
    which = ", ".join(f"output {i} {n} frame{'s' if n > 1 else ''}" for i, n in late)
    return (f"; late: {which} (a frame there reads input frames to come: padding='same' "
            "or a transposed convolution in time)")
