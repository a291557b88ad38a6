"""Streamify stage for Keras models: turn the time loop into a step function.

The functional graph is replayed on one step's chunk of frames
(``replay.Replay``): recurrent layers become one call of their cell per
frame, with the state as argument and result; per-time-step layers run as
they are; convolution, pooling, padding, cropping, Flatten and global
pooling over time follow their rule in ``time_rules.RULES`` (ring buffers,
all ordinary state). The result is a pure function
``(x_t, *states) -> (y_t, *new_states)`` and a ``StreamInfo`` saying how
steps relate to the original model's time axis:

* ``prefix`` (a recurrent model, or any model with an open time axis):
  after step m the output is the original model on frames 0..(m+1)P-1
  (its last output frame), P = frames per step (the product of the time
  strides; 1 without strides); conv front ends produce once their
  receptive field is full (``first_valid_step``).
* ``window`` (input (batch, W, ...) with W fixed, no recurrence, the time
  axis reduced by Flatten / global pooling): a sliding window; after step m
  the output is the model on the W frames that end ``delay`` frames before
  the step's last frame ((-W) mod P, to line the window up with the
  strides). Layers that cannot be computed incrementally (``same`` or
  ``causal`` padding in time, padding at the window's ends, misaligned
  strides) switch the whole model to the exact fallback: a ring buffer of
  the last W-1 input frames and a whole-window inference per step
  (``recompute`` in StreamInfo). ``fixed_window="whole"``: one
  whole-window inference per step (``stateless``).
* ``stateless``: no time axis, or an image (``stream_choice``); step = one
  inference.

``fixed_window="auto"`` (the default) takes "stream" or "whole" by the
input's rank (``stream_choice``); the report's "choice" says which and why.
"""
from __future__ import annotations

import contextlib
import dataclasses
import re

import numpy as np

from .. import stream_choice
from ..errors import NeedsFixedLength, TfaotError, first_line
from ..program import InputInfo, ProgramSignature, StateInfo, StepProgram, StreamInfo, TensorInfo
from . import time_rules
from .layer_kinds import ELEMENTWISE_OPS, NOT_STREAMABLE, PER_STEP_LAYERS  # noqa: F401
from .replay import Replay
from .time_meta import SEQ, VEC, NeedFrames, NotIncremental, Streamed, layer_error  # noqa: F401

FIXED_WINDOW_CHOICES = stream_choice.CHOICES
MAX_FRAMES_PER_STEP = 65536


def streamify_keras(model, source: str, fmt: str, *, fixed_window: str = "auto") -> StepProgram:
    """Build the step program of a loaded Keras model.

    ``fixed_window``: for a model with a fixed window and no recurrence,
    "stream" streams it frame by frame as a sliding window, "whole" builds
    one whole-window inference per step, "auto" (default) chooses by the
    input's rank (``stream_choice``).
    """
    _scope_safe_names(model)
    _check_lookups(model, source)
    plan = _plan(model, source, fixed_window)
    with _unrolled_rnns(model):  # a whole-window RNN: no TensorList loop to import
        if plan["mode"] == "recompute":
            return _recompute_program(model, source, fmt, plan)
        return _streamed_program(model, source, fmt, plan)


def _scope_safe_names(model) -> None:
    """Renames the layers whose names TensorFlow refuses as name scopes (a
    space, '?', a leading '_': Keras accepts them), which Keras opens for
    every layer it calls while tfaot traces the step: 'my output' becomes
    'my_output' (with a number where that name is taken), in the state
    names too."""
    layers = list(model._flatten_layers(include_self=True, recursive=True))
    taken = {layer.name for layer in layers}
    for layer in layers:
        name = layer.name
        if re.fullmatch(r"[A-Za-z0-9.][A-Za-z0-9_.\-]*", name):
            continue
        base = re.sub(r"[^A-Za-z0-9_.\-]", "_", name)
        base = base if re.match(r"[A-Za-z0-9.]", base) else f"L{base}"
        new, k = base, 1
        while new in taken:
            new, k = f"{base}_{k}", k + 1
        taken.add(new)
        try:
            layer.name = new
        except AttributeError:  # tf_keras: a read-only property over _name
            layer._name = new


def _streamed_program(model, source: str, fmt: str, plan: dict) -> StepProgram:
    import tensorflow as tf

    discover = plan["replay"]
    # a per-step input whose value went into the sequence: one value a stream
    x_specs = [dataclasses.replace(x, held=True) if discover.broadcasts and not x.streamed else x
               for x in plan["x_specs"]]
    states = tuple(discover.new_states)
    count = len(x_specs)

    def pure_step(*args):
        xs, state_values = list(args[:count]), list(args[count:])
        replay = Replay(plan["mode"], state_values, rules=time_rules.RULES,
                        frames=plan["frames"], window=plan["window"], delay=plan["delay"])
        ys = [_float32_output(replay.output(y, i)) for i, y in enumerate(
            replay.run_model(model, xs, all_outputs=True, streamed=plan["streamed"]))]
        return (*ys, *replay.new_values)

    # (argument names are TensorFlow's, not the API's: "x_t", "x_t1", ...)
    arg_specs = [tf.TensorSpec(x.shape, x.dtype, name="x_t" if i == 0 else f"x_t{i}")
                 for i, x in enumerate(x_specs)]
    arg_specs += [tf.TensorSpec(s.shape, tf.float32) for s in states]
    concrete = tf.function(pure_step, input_signature=arg_specs,
                           autograph=False).get_concrete_function()
    out_specs = _output_specs(model, plan["y0"])
    signature = ProgramSignature(tuple(x_specs), out_specs, states)
    stream = plan["stream"]
    report = _report(model, fmt, stream, discover.layer_rows, signature,
                     whole=plan["window"] is not None and stream.mode == "stateless")
    report["choice"] = stream_choice.note(stream, plan["why"])
    return StepProgram(source, fmt, signature, concrete, report, stream, owner=model)


def stream_info(model, source: str = "model", fixed_window: str = "auto") -> StreamInfo:
    """The StreamInfo a build of ``model`` gets (discovery only, no tracing)."""
    return _plan(model, source, fixed_window)["stream"]


# --------------------------------------------------------------------------
# planning: which mode, how many frames per step


def _plan(model, source: str, fixed_window: str) -> dict:
    if fixed_window not in FIXED_WINDOW_CHOICES:
        raise TfaotError(f"fixed_window must be one of {FIXED_WINDOW_CHOICES}, "
                         f"got {fixed_window!r}")
    step_input_specs(model, source)  # the model-level checks
    requested = fixed_window
    choice = _stream_choice(model, fixed_window)
    fixed_window, why = choice.fixed_window, choice.why
    window = fixed_window_length(model)
    if is_streaming(model) and fixed_window != "whole":
        mode = "prefix"
    elif window is not None and fixed_window == "stream":
        mode = "window"
    else:
        mode = "stateless"
        if fixed_window == "stream":  # (the note said "because asked with --stream")
            why = (f"--stream was asked, but input {_shape_text(time_input_shape(model))} "
                   "has no time axis to stream over (a float input streams over axis 1 "
                   "of (batch, time, features))")
    frames = 1
    while True:
        delay = (-window) % frames if mode == "window" else 0
        replay = Replay(mode, None, rules=time_rules.RULES, frames=frames, window=window,
                        delay=delay)
        x_specs = step_inputs(model, mode, frames)
        streamed = [x.streamed for x in x_specs]
        try:
            ys, y0 = _discover(replay, model, x_specs, streamed)
        except NeedFrames as more:
            frames *= more.frames
            if frames > MAX_FRAMES_PER_STEP:
                raise TfaotError(f"{source}: the time strides need more than "
                                 f"{MAX_FRAMES_PER_STEP} frames per step") from None
            continue
        except NotIncremental as reason:
            window = window or _fixed_length(model)
            if window is None:
                raise NeedsFixedLength(f"{reason}; give the input a fixed length "
                                       f"(keras.Input((W, ...))) and it builds as a fixed "
                                       f"window: recomputed each step where the model "
                                       f"returns one value per window, one whole inference "
                                       f"per step where every frame reaches the output (or "
                                       f"with --whole-window)", str(reason)) from None
            if fixed_window != "stream":
                raise TfaotError(str(reason)) from None
            if _time_reaches_output(model, window):
                # e.g. a Bidirectional tagger: one whole inference per step
                mode = "stateless"
                why = ("--stream was asked, but " if requested == "stream" else "") + \
                    f"{reason}, and the time axis reaches the output"
                continue
            return _recompute_plan(model, source, window, str(reason), why)
        if mode == "window" and any(y.meta == SEQ for y in ys):
            # The time axis reaches the output: not a window model (a
            # sequence to sequence model, say); one whole inference per step.
            mode = "stateless"
            why = "the time axis reaches the output (no window to slide)"
            continue
        break
    length = time_length(model) or None
    if mode == "stateless":
        stream = StreamInfo()
    else:
        # (an output upsampled in time, or a branch without another's
        # strides, returns its n frames a step; one whose last frames are
        # sums of frames to come, its final ones, late: Replay.output)
        seqs = [y.seq if y.meta == SEQ else None for y in ys]
        stream = StreamInfo(
            mode=mode, time_axis=1, fixed_length=int(length) if length is not None else None,
            frames_per_step=frames, window=window if mode == "window" else None,
            first_valid_step=max(max(int(y.valid_from), q.final().first_step if q else 0)
                                 for y, q in zip(ys, seqs)), delay=delay,
            output_frames=tuple(q.n if q else 1 for q in seqs),
            output_latency=tuple(max(0, -q.lag) if q else 0 for q in seqs))
    return {"mode": mode, "replay": replay, "y0": y0, "x_specs": x_specs, "frames": frames,
            "streamed": streamed, "window": window, "delay": delay, "stream": stream,
            "why": why}


def _discover(replay: Replay, model, x_specs, streamed) -> tuple[list, list]:
    """Replays the model once to find its states and outputs: traced on
    TensorSpecs, so no tensor of the input's size (a whole window of a big
    input) is ever made. Returns the replayed outputs (Streamed, with their
    time meta) and the step outputs (symbolic; their shapes are what counts)."""
    import tensorflow as tf

    found = {}

    def trace(*xs):
        ys = replay.run_model(model, list(xs), all_outputs=True, streamed=streamed)
        found["ys"] = ys
        found["y0"] = [replay.output(y, i) for i, y in enumerate(ys)]
        return found["y0"]

    specs = [tf.TensorSpec(x.shape, x.dtype) for x in x_specs]
    tf.function(trace, autograph=False).get_concrete_function(*specs)
    return found["ys"], found["y0"]


def _stream_choice(model, requested: str) -> stream_choice.Choice:
    """Stream or one inference per step, and why (``stream_choice``)."""
    shape = time_input_shape(model)
    if requested == "whole" and _has_dynamic_time(model):
        # (asked for and not done, the build gave a stream with exit 0)
        raise NeedsFixedLength(f"--whole-window needs a fixed length, and axis 1 of input "
                               f"{_shape_text(shape)} is open: give the input its length "
                               "(keras.Input((T, ...))), or build without --whole-window, "
                               "which streams the model where its layers allow",
                               "--whole-window was asked")
    if _has_recurrent_layer(model):
        if requested == "whole" and _fixed_length(model) is not None:
            return stream_choice.Choice("whole", "asked with --whole-window")
        return stream_choice.Choice("stream", "the model has recurrent layers")
    if _has_dynamic_time(model):
        return stream_choice.Choice("stream", f"axis 1 of input {_shape_text(shape)} is open")
    streams = input_streams(model)
    tensor = model.inputs[streams.index(True) if True in streams else 0]
    dtype = getattr(tensor.dtype, "name", str(tensor.dtype))
    return stream_choice.choose(requested, shape, dtype)


def _shape_text(shape) -> str:
    return "(" + ", ".join(str(d) for d in shape) + ")"


def _time_reaches_output(model, window: int) -> bool:
    return any(len(o.shape) >= 3 and o.shape[1] == window for o in model.outputs)


def _step_shape(shape, mode: str, frames: int) -> tuple[int, ...]:
    features = tuple(int(d) for d in shape[2:])
    if mode == "stateless":
        return (1, *(int(d) for d in shape[1:]))
    return (1, *features) if frames == 1 else (1, frames, *features)


def _recompute_plan(model, source, window: int, reason: str, why: str) -> dict:
    stream = StreamInfo(mode="window", time_axis=1, fixed_length=window, frames_per_step=1,
                        window=window, first_valid_step=window - 1, delay=0, recompute=reason)
    return {"mode": "recompute", "window": window, "stream": stream, "reason": reason,
            "x_specs": step_inputs(model, "window", 1), "why": why}


def _recompute_program(model, source: str, fmt: str, plan: dict) -> StepProgram:
    """The exact fallback: a ring buffer of the last W-1 frames of each
    streamed input and the whole model on the window at every step (the
    other inputs take their value of the step)."""
    import tensorflow as tf

    window, x_specs = plan["window"], plan["x_specs"]
    # (states are float32: token ids ride in them exactly, below 2**24; the
    # initial value is a view of one zero: no memory until the size check passed)
    states = tuple(
        StateInfo("window/frames" if i == 0 else f"window{i}/frames", "float32",
                  (1, window - 1, *x.shape[1:]),
                  initial=np.broadcast_to(np.float32(0), (1, window - 1, *x.shape[1:])),
                  layer="")
        for i, x in enumerate(x_specs) if x.streamed and window > 1)
    count = len(x_specs)

    def pure_step(*args):
        xs, buffers = list(args[:count]), list(args[count:])
        new_buffers = []
        for i, spec in enumerate(x_specs):
            if spec.streamed:
                frames = tf.expand_dims(tf.cast(xs[i], tf.float32), 1)
                if buffers:
                    frames = tf.concat([buffers.pop(0), frames], axis=1)
                    new_buffers.append(frames[:, 1:])
                xs[i] = tf.cast(frames, spec.dtype)
        y = model(xs[0] if count == 1 else xs, training=False)
        ys = tuple(y) if isinstance(y, (list, tuple)) else (y,)
        return (*(_float32_output(y) for y in ys), *new_buffers)

    arg_specs = [tf.TensorSpec(x.shape, x.dtype, name="x_t" if i == 0 else f"x_t{i}")
                 for i, x in enumerate(x_specs)]
    arg_specs += [tf.TensorSpec(s.shape, s.dtype) for s in states]
    try:
        concrete = tf.function(pure_step, input_signature=arg_specs,
                               autograph=False).get_concrete_function()
    except Exception as e:  # the model's own code (a Lambda, a custom layer) failed
        raise TfaotError(f"{source}: the model fails when run on its window: "
                         f"{first_line(e)}") from None
    outs = len(concrete.structured_outputs) - len(states)
    outputs = _output_specs(model, concrete.structured_outputs[:outs])
    signature = ProgramSignature(tuple(x_specs), outputs, states)
    rows = [{"name": layer.name, "type": type(layer).__name__, "role": "whole window"}
            for layer in getattr(model, "layers", []) if type(layer).__name__ != "InputLayer"]
    report = _report(model, fmt, plan["stream"], rows, signature)
    report["choice"] = stream_choice.note(plan["stream"], plan["why"])
    return StepProgram(source, fmt, signature, concrete, report, plan["stream"], owner=model)


def _output_keys(model) -> list[str] | None:
    """The keys of a model's dict of named outputs, in ``model.outputs``'
    order (Keras flattens the dict by key), else None."""
    import keras

    struct = getattr(model, "_outputs_struct", None)  # (Keras 3's Functional)
    if not isinstance(struct, dict) or not all(isinstance(k, str) for k in struct):
        return None
    keys = keras.tree.flatten({key: key for key in struct})
    return keys if len(keys) == len(model.outputs) else None


def _float32_output(y):
    """A step output as the C API gives it: floats as float32 (a
    mixed_float16 model's float16 head, a float64 layer; IREE computes
    float64 as float32 anyway), integers and booleans (an argmax) as they
    are. The signature said float32 for every output, and any other dtype
    failed in iree-compile with a result type mismatch."""
    import tensorflow as tf

    return tf.cast(y, tf.float32) if y.dtype.is_floating and y.dtype != tf.float32 else y


def _output_dtype(value) -> str:
    """The step output's dtype name (see ``_float32_output``)."""
    return "float32" if value.dtype.is_floating else value.dtype.name


def _output_specs(model, values) -> tuple[TensorInfo, ...]:
    """The step outputs: "y_t" for a one-output model; else one per model
    output, named after its key in a dict of named outputs, or the Keras
    output tensor ("y_t" + index if unnamed)."""
    values = list(values)
    return tuple(TensorInfo(name, _output_dtype(v), tuple(int(d) for d in v.shape))
                 for name, v in zip(output_names(model, len(values)), values))


def output_names(model, count: int) -> list[str]:
    """The names of a model's ``count`` step outputs: "y_t" for one; else
    each output's key in a dict of named outputs, or its Keras layer's
    name ("y_t" + index if unnamed)."""
    if count == 1:
        return ["y_t"]
    names, seen = [], set()
    keys = _output_keys(model)
    for i in range(count):
        tensor = model.outputs[i] if i < len(model.outputs) else None
        history = getattr(tensor, "_keras_history", None)
        name = keys[i] if keys else getattr(history[0], "name", None) if history else None
        name = name or f"y_t{i}"
        if name in seen:
            name = f"{name}_{i}"
        seen.add(name)
        names.append(name)
    return names


# --------------------------------------------------------------------------
# model-level checks


def step_input_specs(model, source: str) -> list[InputInfo]:
    """Checks the model's inputs; returns the step inputs of a one-frame step
    (of a whole inference for a model without a time axis), model input order."""
    streaming = is_streaming(model)
    streams = input_streams(model) if streaming else [False] * len(model.inputs)
    if streaming and len(model.inputs) > 1 and not any(streams):
        raise TfaotError(
            f"{source}: none of the model's {len(model.inputs)} inputs has a time axis "
            "(batch, time, features...) to stream over")
    names = input_names(model)
    specs = []
    for tensor, streamed, name in zip(model.inputs, streams, names):
        shape = tuple(tensor.shape)
        dtype = str(tensor.dtype)
        what = "input" if len(model.inputs) == 1 else f"input '{name}'"
        if dtype not in INPUT_DTYPES:
            raise TfaotError(f"{source}: {what} dtype is {dtype}; supported: "
                             f"{', '.join(INPUT_DTYPES)} (integers: token ids into an Embedding)")
        _check_batch(model, shape[0])
        if streaming and len(model.inputs) == 1 and len(shape) < 2:
            raise TfaotError(
                f"{source}: a recurrent model needs input (batch, time, features...), "
                f"got {shape}")
        feature_dims = shape[2:] if streamed else shape[1:]
        if len(shape) >= 3 and shape[1] is not None and None in shape[2:]:
            raise TfaotError(_open_axis_not_time(source, what, shape))
        if any(d is None for d in feature_dims):
            raise TfaotError(
                f"{source}: {what} shape {shape} has unknown feature dimensions; "
                "tfaot needs static shapes apart from batch and time: give them with "
                f"--inputs {_sizes_example(tensor, shape, streamed)}")
        specs.append(InputInfo(name, dtype, (1, *(int(d) for d in feature_dims)),
                               streamed=streamed))
    return specs


def _sizes_example(tensor, shape: tuple, streamed: bool) -> str:
    """An --inputs NAME:SHAPE for ``tensor`` (frontend/keras_inputs.py), its
    open axes as letters (an image's H and W), a streamed time axis '?'
    (not an image's height: a rank-4 input is taken as an image)."""
    from ..frontend.keras_inputs import input_layer_name

    name = input_layer_name(tensor)
    letters = {4: "NHWC", 5: "NTHWC" if streamed else "NDHWC"}.get(
        len(shape), "N" + "S" * (len(shape) - 1))
    sizes = ["1" if axis == 0 else "?" if streamed and axis == 1 and len(shape) != 4 else
             letters[axis] if d is None else str(d) for axis, d in enumerate(shape)]
    return f"{name}:{'x'.join(sizes)}"


def _open_axis_not_time(source: str, what: str, shape: tuple) -> str:
    """A fixed axis 1 and an open later one: a channels_first model (time
    last), which was told it had "unknown feature dimensions"."""
    axis = shape.index(None, 2)
    return (f"{source}: {what} shape {shape} is open on axis {axis}, not on axis 1: tfaot "
            "streams a Keras model over axis 1, (batch, time, features...), so a "
            "channels_first model (time last) does not stream; give it channels_last "
            "input, or give the input a fixed length and build it with --whole-window "
            "(one whole inference per step)")


def step_input_spec(model, source: str) -> InputInfo:
    """The first of ``step_input_specs`` (one-input callers)."""
    return step_input_specs(model, source)[0]


def step_inputs(model, mode: str, frames: int) -> list[InputInfo]:
    """The step inputs of a build in ``mode`` with ``frames`` per step: a
    streamed input takes (1, features...) or (1, frames, features...), the
    others (and every input of a stateless build) their whole value."""
    streams = input_streams(model) if mode != "stateless" else [False] * len(model.inputs)
    specs = []
    for tensor, streamed, name in zip(model.inputs, streams, input_names(model)):
        shape = tuple(tensor.shape)
        step = _step_shape(shape, mode, frames) if streamed else \
            (1, *(int(d) for d in shape[1:]))
        specs.append(InputInfo(name, str(tensor.dtype), step, streamed=streamed))
    return specs


def input_names(model) -> list[str]:
    """The step inputs' names: "x_t" for a one-input model (as before several
    inputs existed); else each Input layer's name ("x_t" + index if unnamed)."""
    if len(model.inputs) == 1:
        return ["x_t"]
    names, seen = [], set()
    for i, tensor in enumerate(model.inputs):
        history = getattr(tensor, "_keras_history", None)
        name = getattr(history[0], "name", None) if history else None
        name = name or getattr(tensor, "name", None) or f"x_t{i}"
        if name in seen:
            name = f"{name}_{i}"
        seen.add(name)
        names.append(name)
    return names


def input_streams(model) -> list[bool]:
    """Which inputs carry the model's time axis (axis 1): every input of a
    one-input model; with several, those of rank >= 3 (token ids: >= 2) whose
    axis 1 has the time length (unknown if any input's is, else the longest).
    The others have no time axis: a conditioning vector, given every step."""
    if len(model.inputs) == 1:
        return [True]
    shapes = [tuple(t.shape) for t in model.inputs]
    ranked = [len(s) >= (3 if getattr(t.dtype, "name", str(t.dtype)) == "float32" else 2)
              for s, t in zip(shapes, model.inputs)]
    lengths = [s[1] for s, r in zip(shapes, ranked) if r]
    if not lengths:
        return [False] * len(shapes)
    time = None if None in lengths else max(lengths)
    return [r and s[1] == time for s, r in zip(shapes, ranked)]


def time_input_shape(model) -> tuple:
    """The shape of the first input with the time axis (the model's input
    if it has one)."""
    streams = input_streams(model)
    index = streams.index(True) if True in streams else 0
    return tuple(model.inputs[index].shape)


def time_length(model) -> int | None | bool:
    """The time input's axis 1: its length, None if open, False if the input
    has no time axis (rank < 3, but for a waveform (batch, None) of samples;
    token ids: rank < 2)."""
    streams = input_streams(model)
    tensor = model.inputs[streams.index(True) if True in streams else 0]
    shape = tuple(tensor.shape)
    tokens = getattr(tensor.dtype, "name", str(tensor.dtype)) != "float32"
    if len(shape) < 2 or (len(shape) == 2 and not tokens and shape[1] is not None):
        return False
    return None if shape[1] is None else int(shape[1])


#: Keras layers that look their inputs up in a TensorFlow hash table
LOOKUP_LAYERS = ("IntegerLookup", "StringLookup", "TextVectorization")


def _check_lookups(model, source: str) -> None:
    """A hash-table lookup has no StableHLO lowering: said naming the layer
    (streamed, the build failed deep in the lowering on a ConcatV2)."""
    for layer in _all_layers(model):
        kind = type(layer).__name__
        if kind in LOOKUP_LAYERS:
            raise TfaotError(
                f"{source}: layer '{layer.name}' ({kind}) looks its inputs up in a hash table, "
                "which TensorFlow's converter to StableHLO cannot lower; map the values to "
                "their indices before the model (in the firmware: a table of the vocabulary) "
                "and build the model from the layer after it")


def _check_batch(model, batch) -> None:
    if batch in (None, 1):
        return
    for layer in _all_layers(model):
        if getattr(layer, "stateful", False):
            raise TfaotError(
                f"layer '{layer.name}' ({type(layer).__name__}) is stateful=True "
                f"with batch size {batch}; tfaot streams batch 1 only: make the model again "
                "on keras.Input(batch_shape=(1, ...)) and copy its weights "
                f"(set_weights), then build that file (--streams {batch} for {batch} "
                "independent streams)")


#: Step input dtypes: float features, or integer token ids (into an Embedding).
INPUT_DTYPES = ("float32", "int32", "int64", "uint8")  # (uint8: an image's pixels)


def is_streaming(model) -> bool:
    """True if the model streams with prefix semantics: it has a recurrent
    layer or an input whose axis 1 (time) is of unknown length."""
    return _has_recurrent_layer(model) or _has_dynamic_time(model)


def _fixed_length(model) -> int | None:
    return time_length(model) or None


@contextlib.contextmanager
def _unrolled_rnns(model):
    """Recurrent layers run whole (a whole-window build or fallback) unroll
    their loop while traced: TensorFlow's MLIR import cannot lower the
    TensorList while loop Keras writes (tf-import-notes)."""
    from keras.src import backend

    layers = [x for layer in _all_layers(model)
              for x in (layer, getattr(layer, "forward_layer", None),
                        getattr(layer, "backward_layer", None)) if x is not None]
    rnns = [x for x in layers if hasattr(x, "unroll") and not x.unroll]
    for layer in rnns:
        layer.unroll = True
    keras_rnn = backend.rnn
    backend.rnn = _backward_masks_reversed(keras_rnn)
    try:
        yield
    finally:
        backend.rnn = keras_rnn
        for layer in rnns:
            layer.unroll = False


def _backward_masks_reversed(keras_rnn):
    """Keras's backend ``rnn`` with its unrolled loop's output mask fixed.

    Unrolled, go_backwards with a mask and zero_output_for_mask (the
    backward half of a masked Bidirectional returning sequences) zeroes the
    outputs where the mask *in input order* is off, while the outputs come
    in reversed order (keras 3.15, backend/tensorflow/rnn.py): a frame
    masked at t zeroed output t, not T-1-t, and the unrolled model was off
    at both. Its loop alone (outputs repeat the last one where masked, with
    the mask reversed) is right: zeros go where the reversed mask is off.
    """
    import tensorflow as tf

    def rnn(step_function, inputs, initial_states, go_backwards=False, mask=None,
            constants=None, unroll=False, input_length=None, time_major=False,
            zero_output_for_mask=False, return_all_outputs=True):
        fix = (unroll and go_backwards and mask is not None and zero_output_for_mask
               and not time_major)  # (Keras's RNN layers: never time-major)
        last, outputs, states = keras_rnn(
            step_function, inputs, initial_states, go_backwards=go_backwards, mask=mask,
            constants=constants, unroll=unroll, input_length=input_length,
            time_major=time_major, zero_output_for_mask=zero_output_for_mask and not fix,
            return_all_outputs=return_all_outputs)
        if not fix:
            return last, outputs, states
        keep = tf.reverse(tf.cast(mask, tf.bool), [1])  # (batch, time) in output order
        last = tf.where(tf.reshape(keep[:, -1], [-1] + [1] * (last.shape.rank - 1)),
                        last, tf.zeros_like(last))
        if return_all_outputs:
            keep = tf.reshape(keep, [*keep.shape] + [1] * (outputs.shape.rank - 2))
            outputs = tf.where(keep, outputs, tf.zeros_like(outputs))
        return last, outputs, states

    return rnn


def fixed_window_length(model) -> int | None:
    """W for a candidate fixed-window model: input (batch, W, features...) with
    W fixed and no recurrent layer (whether the time axis is reduced inside
    the model is found by the replay)."""
    length = time_length(model)
    return length if length and not is_streaming(model) else None


def _all_layers(model):
    for layer in getattr(model, "layers", []):
        yield layer
        yield from _all_layers(layer)
        inner = getattr(layer, "layer", None)  # TimeDistributed, Bidirectional
        if inner is not None:
            yield inner


def _has_recurrent_layer(model) -> bool:
    import keras

    return any(isinstance(layer, keras.layers.RNN) for layer in _all_layers(model))


def _has_dynamic_time(model) -> bool:
    return time_length(model) is None


# --------------------------------------------------------------------------
# report

_MODE_TEXT = {
    "prefix": "streaming (step m = the model on frames 0..t, t the step's last frame)",
    "window": "streaming sliding window (step m = the model on the last {window} frames)",
    "stateless": "stateless (step = one whole inference)",
}


def _report(model, fmt, stream: StreamInfo, layer_rows, signature: ProgramSignature,
            whole: bool = False):
    mode = _MODE_TEXT[stream.mode].format(window=stream.window)
    if stream.recompute:
        mode = (f"streaming sliding window, recomputed (step = the whole model on the last "
                f"{stream.window} frames; {stream.recompute})")
    elif whole:
        mode += "; whole-window build (the whole fixed window per step)"
    return {
        "format": fmt,
        "mode": mode,
        "stream": stream.to_json(),
        "layers": layer_rows,
        "parameters": int(model.count_params()),
        **signature.to_json(),
    }
