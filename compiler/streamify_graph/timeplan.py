"""How a graph streams over time: the mode, frames per step, and the time state.

* ``prefix``: a graph with a recurrence (loop or unrolled cell), or one
  whose time axis is open or given with ``--time-axis`` and reaches the
  output; step m = the graph on frames 0..t, t the step's last frame.
* ``window``: a graph without recurrence whose input has a fixed window of
  W frames on its (guessed or given) time axis and whose outputs have no
  time axis (reduced by Mean/Max or flattened by a Reshape): a sliding
  window. Nodes that cannot stream incrementally (``SAME`` padding in time,
  padding at the window's ends, misaligned strides) switch the whole graph
  to the exact fallback (``recompute_program``: a ring buffer of the last
  W-1 input frames and the whole graph on the window each step).
* ``stateless``: one whole inference per step (no time axis; a graph with a
  time-like input where nothing streams; or ``fixed_window="whole"``).

``plan_stream`` runs the replay once in a scratch graph (discovery): it
finds the frames per step a stride needs (``NeedFrames``, retried with more
frames) and the ring buffers and counters the time rules ask for, which it
registers in the ``StateRegistry`` after the loop states.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .. import stream_choice
from ..program import InputInfo, ProgramSignature, StepProgram, StreamInfo, TensorInfo
from ..streamify_keras import MAX_FRAMES_PER_STEP
from ..streamify_keras.time_meta import NeedFrames
from .graphdef import Fail
from .ring import TimePlan
from .state import StateRegistry

FIXED_WINDOW_CHOICES = stream_choice.CHOICES


class NotAWindow(Fail):
    """A window attempt found nothing to stream over a window (``why``)."""


@dataclass
class Planned:
    plan: TimePlan
    rows: list = field(default_factory=list)  # the report's "layers"
    first_valid_step: int = 0
    broadcasts: bool = False  # a per-step input's value broadcast over a sequence
    # frames each output returns a step, and how late (StreamInfo's)
    output_frames: tuple = ()
    output_latency: tuple = ()


def choose_mode(g, shape, a: int | None, explicit_axis: bool, fixed_window: str,
                dtype: str = "float32") -> tuple[str, str]:
    """("prefix" | "window" | "stateless", why) before any replay (see the
    module doc; ``fixed_window`` "auto" follows ``stream_choice``)."""
    if fixed_window not in FIXED_WINDOW_CHOICES:
        raise Fail(f"fixed_window must be one of {FIXED_WINDOW_CHOICES}, got {fixed_window!r}")
    if g.loops and fixed_window == "whole":
        raise Fail(f"--whole-window: the graph runs its recurrence in a loop "
                   f"('{next(iter(g.loops))}'), which tfaot builds only as a stream (one "
                   "frame a step, the state kept between steps; reset() before a window "
                   "gives the window's outputs; IREE cannot compile such a loop whole): "
                   "build it without --whole-window, which needs the loop to run forward in "
                   "time (a bidirectional RNN's graph cannot be built either way; its Keras "
                   "file builds as a window)")
    if g.loops or g.unrolled:
        return "prefix", "the graph has a recurrence (a time loop or an unrolled cell)"
    if a is None or not 0 <= a < len(shape):
        return "stateless", "the input has no time axis"
    if shape[a] is None:  # an open time axis (axis 0 without loops: a batch)
        if explicit_axis or a != 0:
            if fixed_window == "whole":
                raise Fail(f"--whole-window needs a fixed length, and axis {a} of the input "
                           "is open: give its shape with --inputs NAME:SHAPE, or build "
                           "without --whole-window, which streams the graph where its "
                           "ops allow")
            return "prefix", f"axis {a} of the input is open"
        return "stateless", "the input's only open axis is the batch"
    choice = stream_choice.choose(fixed_window, shape, dtype, axis_given=explicit_axis)
    if shape[a] > 1 and choice.fixed_window == "stream" and (explicit_axis or time_like(shape)):
        return "window", choice.why
    return ("prefix" if explicit_axis else "stateless"), choice.why


def time_like(shape) -> bool:
    """A batch-1 input with more than one axis of size > 1 (a window of frames)."""
    return len(shape) >= 3 and sum(1 for d in shape[1:] if d is None or d > 1) >= 2


def keeps_time(loaded, inp, full, a: int) -> bool:
    """Whether a graph output seems to keep the time axis (then it is no window
    model). The replay knows for sure; this is for graphs whose replay
    stopped at a node that cannot stream incrementally."""
    import tensorflow as tf

    shape = [None if d == a else s for d, s in enumerate(full)]
    try:
        with tf.Graph().as_default():
            x = tf.compat.v1.placeholder(tf.as_dtype(inp.dtype), shape)
            ys = tf.graph_util.import_graph_def(loaded.graph_def,
                                                input_map={f"{inp.name}:0": x},
                                                return_elements=list(loaded.outputs), name="")
    except Exception:  # noqa: BLE001 - a graph that needs its fixed length everywhere
        return False
    # An unknown dimension, or a frame-like axis between batch and features
    # (TensorFlow's reshapes often carry the fixed length as a constant).
    return any(y.shape.rank is None or None in y.shape.as_list()[1:] or
               any(d > 1 for d in y.shape.as_list()[1:-1]) for y in ys)


def step_shape(full, a: int, frames: int) -> tuple[int, ...]:
    """The time input's step shape: one frame (axis dropped) or ``frames`` frames."""
    if frames == 1:
        return tuple(s for d, s in enumerate(full) if d != a)
    return tuple(frames if d == a else s for d, s in enumerate(full))


def plan_stream(mode: str, *, window: int | None, dynamic: bool, replay, arg_specs,
                states: StateRegistry) -> Planned:
    """Discovery (see the module doc). ``replay(plan, discovering, args)`` runs
    the Emitter and returns it; ``arg_specs(plan)`` gives the step inputs'
    (shape, dtype) for a plan. Raises NotAWindow (a window attempt whose
    outputs keep the time axis) and NotIncremental (window: the fallback)."""
    import tensorflow as tf

    frames = 1
    while True:
        delay = (-window) % frames if mode == "window" else 0
        plan = TimePlan(mode, frames, window if mode == "window" else None, delay, dynamic)
        with tf.Graph().as_default():
            args = [tf.zeros(shape, dtype) for shape, dtype in arg_specs(plan)]
            args += [tf.constant(s.initial) for s in states.infos]
            try:
                em = replay(plan, True, args)
            except NeedFrames as more:
                frames *= more.frames
                if frames > MAX_FRAMES_PER_STEP:
                    raise Fail(f"the time strides need more than {MAX_FRAMES_PER_STEP} "
                               "frames per step") from None
                continue
        break
    if mode == "window" and any(m.kind == "seq" for m in em.output_metas):
        raise NotAWindow("the time axis reaches the output")
    for key, initial, layer, kind in em.time.found:
        states.add(key, initial, layer=layer, kind=kind)
    # (an output faster than the steps, a branch without another's strides,
    # returns its n frames a step; one past the input's end, late: replay's
    # _last_frame)
    seqs = [m.frames if m.kind == "seq" else None for m in em.output_metas]
    return Planned(plan, em.rows, em.first_valid_step, em.broadcasts,
                   tuple(f.n if f else 1 for f in seqs),
                   tuple(max(0, -f.lag) if f else 0 for f in seqs))


def stream_info(planned: Planned | None, a, dynamic: bool, shape,
                frame_end_pads=()) -> StreamInfo:
    """``frame_end_pads``: the Pad nodes of the frame ops cut with
    ``pad_end`` (signal_frames.py), end pads as the plan's are."""
    if planned is None:
        return StreamInfo()
    plan = planned.plan
    return StreamInfo(mode=plan.mode, time_axis=a,
                      fixed_length=None if dynamic else int(shape[a]),
                      frames_per_step=plan.frames, window=plan.window,
                      first_valid_step=planned.first_valid_step, delay=plan.delay,
                      end_pads=tuple(frame_end_pads) + tuple(
                          r["name"] for r in planned.rows if r["role"] == "end pad"),
                      output_frames=planned.output_frames,
                      output_latency=planned.output_latency)


def mode_text(stream: StreamInfo, base: str) -> str:
    """The report's "mode" line."""
    if stream.recompute:
        return (f"graph streamed as a sliding window, recomputed (step = the whole graph on the "
                f"last {stream.window} frames; {stream.recompute})")
    if stream.mode == "window":
        return (f"graph streamed as a sliding window (step m = the graph on the last "
                f"{stream.window} frames)")
    return base


def window_note(stream: StreamInfo, input_name: str, why: str = "") -> str:
    return stream_choice.note(stream, why or "its input has a fixed window of frames",
                              input_name)


# --------------------------------------------------------------------------
# the exact fallback


def recompute_program(loaded, inp, full, a: int, reason: str) -> StepProgram:
    """A ring buffer of the last W-1 frames and the whole graph on the window
    of W frames at every step (mode "window", ``recompute`` = ``reason``)."""
    import tensorflow as tf

    if len(loaded.inputs) != 1:
        raise Fail(f"{reason}; the whole-window fallback takes one input, the graph has "
                   f"{len(loaded.inputs)}")
    window = int(full[a])
    frame = step_shape(full, a, 1)
    buffer_shape = tuple(window - 1 if d == a else s for d, s in enumerate(full))
    states = StateRegistry()
    if window > 1:
        states.add(("window", "frames"), np.zeros(buffer_shape, np.dtype(inp.dtype)),
                   layer=inp.name, kind="win")

    graph_def = _without_control_edges_from(loaded.graph_def, inp.name)

    def pure_step(x_t, *buffer):
        frames = tf.expand_dims(x_t, a)
        if buffer:
            frames = tf.concat([buffer[0], frames], axis=a)
        ys = tf.graph_util.import_graph_def(graph_def, input_map={f"{inp.name}:0": frames},
                                            return_elements=list(loaded.outputs), name="window")
        if not buffer:
            return tuple(ys)
        index = [slice(None)] * len(full)
        index[a] = slice(1, None)
        return (*ys, frames[tuple(index)])

    specs = [tf.TensorSpec(frame, tf.as_dtype(inp.dtype), name="x_t")] + states.specs()
    cf = tf.function(pure_step, input_signature=specs, autograph=False).get_concrete_function()
    count = len(loaded.outputs)
    outputs = tuple(TensorInfo(name, t.dtype.name, tuple(int(d or 1) for d in t.shape))
                    for name, t in zip(loaded.output_names, cf.structured_outputs[:count]))
    sig = ProgramSignature((InputInfo(inp.name, inp.dtype, frame),), outputs, states.infos)
    stream = StreamInfo(mode="window", time_axis=a, fixed_length=window, frames_per_step=1,
                        window=window, first_valid_step=window - 1, delay=0, recompute=reason)
    report = {"mode": mode_text(stream, ""), "stream": stream.to_json(),
              "input": {**inp.to_json(), "time_axis": a, "probed_shape": list(full)},
              "stateless": False, "loops": [],
              "layers": [{"name": inp.name, "type": "Placeholder", "role": "whole window",
                          "buffer": window - 1, "window": window}],
              "stream_notes": [window_note(stream, inp.name)]}
    return StepProgram(source=str(loaded.path), format=loaded.format, signature=sig,
                       pure_step=cf, report=report, stream=stream)


def _without_control_edges_from(graph_def, name: str):
    """``graph_def`` without control edges from node ``name``: a Keras 3
    export orders its frozen weights after its input so, and imported with
    the input mapped to the window, those edges kept an unfed copy of the
    input placeholder in the step (TensorFlow could not freeze it)."""
    import tensorflow as tf

    edge = f"^{name}"
    if not any(edge in n.input for n in graph_def.node):
        return graph_def
    copy = tf.compat.v1.GraphDef()
    copy.CopyFrom(graph_def)
    for n in copy.node:
        if edge in n.input:
            n.input[:] = [i for i in n.input if i != edge]
    return copy
