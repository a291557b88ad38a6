"""TensorFlow's outputs for a Keras model, step by step as a built library
streams it: the whole sequence (prefix mode), each window (window mode), one
inference per step; the random inputs verify feeds; the reference masks
(which steps a stream defines)."""
from __future__ import annotations

import numpy as np

from ..errors import TfaotError


def undefined_steps(shape) -> np.ma.MaskedArray:
    """A reference with every step undefined yet (masked); a builder assigns
    the steps the stream defines (a full window, a conv front end's warm-up
    over). The mask, not NaN, says which steps to skip: a model whose output
    is NaN must be compared, not skipped."""
    return np.ma.masked_all(shape, np.float32)


def defined_steps(want) -> np.ndarray:
    """Which steps of a reference (plain, or from ``undefined_steps``) are defined."""
    mask = np.ma.getmaskarray(want).reshape(len(want), -1)
    return ~mask.any(axis=1)


def nan_filled(want) -> np.ndarray:
    """A reference as a plain array with NaN at the undefined steps (the
    public form of the reference functions)."""
    return np.ma.filled(want, np.nan) if np.ma.isMaskedArray(want) else want


def _output(y) -> np.ndarray:
    """A model call's output as an array: Keras returns a model's one named
    output in a dict (output_heads makes a model per output)."""
    if isinstance(y, (dict, list, tuple)):
        import tensorflow as tf

        y = tf.nest.flatten(y)[0]
    return np.asarray(y)


def pad_time(x: np.ndarray, length: int) -> np.ndarray:
    pad = np.zeros((x.shape[0], length - x.shape[1], *x.shape[2:]), x.dtype)
    return np.concatenate([x, pad], axis=1)


def output_heads(model, count: int) -> list:
    """One single-output model per output of ``model`` (the model itself if it has one)."""
    if count == 1:
        return [model]
    k = _keras_module(model)
    inputs = model.inputs[0] if len(model.inputs) == 1 else model.inputs
    return [k.Model(inputs, model.outputs[i]) for i in range(count)]


def random_inputs(rng, shape, dtype, high: int | None, floats_are_ids: bool = False
                  ) -> np.ndarray:
    """Test inputs: normal floats, random booleans, or integer ids in
    [0, high) (token inputs; floats too with ``floats_are_ids`` and a
    ``high``: id_limits; ``high`` None: no table the ids index, so uint8
    pixels take all 256 values and other integers 0 and 1)."""
    if np.dtype(dtype) == np.bool_:
        # (normal floats cast to bool are all True: the check said nothing)
        return rng.integers(0, 2, size=shape).astype(dtype)
    if not np.issubdtype(dtype, np.integer) and not (floats_are_ids and high is not None):
        return rng.normal(size=shape).astype(dtype)
    if high is None:
        # (0 and 1 only made a uint8 image model's outputs almost constant)
        high = 256 if np.dtype(dtype) == np.uint8 else 2
    return rng.integers(0, high, size=shape).astype(dtype)


def with_masked_frames(model, xs: list, rng, share: float = 0.125) -> list:
    """``xs`` (one array per input, features last) with about ``share`` of
    the frames of each input a Masking layer reads set to its mask_value:
    random normal frames never equal it, and a library that mishandled the
    masked frames passed (a masked Bidirectional's backward half)."""
    import keras

    out = list(xs)
    for layer in model._flatten_layers():
        if not isinstance(layer, keras.layers.Masking):
            continue
        for i, model_input in enumerate(model.inputs):
            if layer._inbound_nodes and any(
                    t is model_input for t in layer._inbound_nodes[0].input_tensors):
                x = np.array(out[i], copy=True)
                x[rng.random(x.shape[:-1]) < share] = layer.mask_value
                out[i] = x
    return out


def embedding_rows(model) -> int | None:
    """The smallest Embedding's input_dim, so random token ids stay in range;
    None without one (``random_inputs`` picks by the dtype)."""
    import keras

    dims = [layer.input_dim for layer in model._flatten_layers()
            if isinstance(layer, keras.layers.Embedding)]
    return min(dims) if dims else None


def id_limits(model, dtypes) -> list[int | None]:
    """Per input of those ``dtypes``, the ids ``random_inputs`` draws below
    (``embedding_rows``): an integer input's, and a float input's where it
    is the model's only one (a Sequential model's Embedding first, built on
    float input: normal floats cast to negative ids, which TensorFlow
    refuses); None for floats beside other inputs (features)."""
    rows = embedding_rows(model)
    return [rows if np.issubdtype(np.dtype(dt), np.integer) or len(dtypes) == 1 else None
            for dt in dtypes]


def library_stream(lib, model, model_path):
    """The library's StreamInfo: from its manifest, else re-derived from the
    model (a build whose step takes the whole window is stateless)."""
    from ..program import StreamInfo
    from ..streamify_keras import fixed_window_length, stream_info

    if lib.manifest.get("stream"):
        return StreamInfo.from_json(lib.manifest["stream"])
    window = fixed_window_length(model)
    if window is not None and len(lib.input_shape) >= 2 and lib.input_shape[1] == window \
            and tuple(lib.input_shape[1:]) == tuple(model.inputs[0].shape[1:]):
        return StreamInfo()
    return stream_info(model, str(model_path))


def check_input_shape(model, lib, model_path, lib_dir, stream=None) -> None:
    from ..streamify_keras import step_input_specs, step_inputs, time_length

    specs = step_input_specs(model, str(model_path))  # also the model-level checks
    expected = [tuple(spec.shape) for spec in specs]
    if stream is not None and time_length(model) is not False:
        expected = [tuple(spec.shape) for spec in
                    step_inputs(model, stream.mode, stream.frames_per_step)]
    got = [tuple(shape) for shape in lib.input_shapes]
    if expected != got:
        show = (lambda shapes: shapes[0] if len(shapes) == 1 else shapes)  # noqa: E731
        raise TfaotError(f"{lib_dir}: the library takes {show(got)} per step but "
                         f"{model_path} takes {show(expected)}; was it built from this model?")
    # (a sliding window of another length takes the same frames per step)
    length = time_length(model)
    built_for = stream.fixed_length if stream is not None else None
    if length and built_for and length != built_for:
        raise TfaotError(f"{lib_dir}: the library was built for a window of {built_for} "
                         f"frames but {model_path} takes {length}; was it built from this "
                         "model?")


def keras_reference_model(loaded, keep_stateful: bool = False):
    """The model to take reference outputs from: the file read by the
    framework that wrote it (tf_keras for a Keras 2 ``.h5`` or ``.keras``),
    a subclassed model or custom blocks as the file defines them; its
    stateful recurrent layers made stateless unless ``keep_stateful``."""
    import warnings

    from ..frontend import keras2

    # A model whose inputs are a one-input list (keras.applications built
    # on input_tensor=) called with the tensor itself: Keras warns that the
    # structure differs, and computes the same.
    warnings.filterwarnings("ignore", message="The structure of `inputs` doesn't match",
                            category=UserWarning)
    if keras2.is_keras2_file(loaded.path, loaded.format):
        model = keras2.load_reference(loaded.path, loaded.format)
    elif loaded.keras_original is not None:  # the user's own calls, not their trace
        model = loaded.keras_original
    else:
        model = loaded.keras_model
    return model if keep_stateful else _without_stateful_layers(model)


def has_stateful_layers(model) -> bool:
    """Whether ``model`` has a recurrent layer with ``stateful=True``."""
    layers = getattr(model, "_flatten_layers", lambda: [])()
    return any(getattr(layer, "stateful", False) for layer in layers)


def keras_stateful_reference(model, xs: list, length: int, step_outputs) -> list:
    """What each step must return for a model with stateful recurrent layers
    (input (1, T, ...), T = ``length``), per output ``(steps, *step
    output)``, masked where not defined: the model called on consecutive
    T-frame chunks of the streamed inputs ``xs`` ((steps, 1, ...) each), its
    state carried from call to call as Keras does, from ``reset_states``.
    A sequence output defines every step, a last output each chunk's last."""
    import tensorflow as tf

    for layer in model._flatten_layers():
        if getattr(layer, "stateful", False) and hasattr(layer, "reset_states"):
            layer.reset_states()
    steps = len(xs[0])
    frames = [x.reshape(1, steps, *x.shape[2:]) for x in xs]
    wants = [undefined_steps((steps, *shape)) for shape in step_outputs]
    for start in range(0, steps - length + 1, length):
        chunk = [f[:, start:start + length] for f in frames]
        ys = tf.nest.flatten(model(chunk if len(chunk) > 1 else chunk[0], training=False))
        for want, y, shape in zip(wants, ys, step_outputs):
            y = np.asarray(y)
            if y.ndim == len(shape) + 1:  # the output keeps the time axis
                want[start:start + length] = np.swapaxes(y, 0, 1)
            else:
                want[start + length - 1] = y
    return wants


def _without_stateful_layers(model):
    """``model``, with stateful recurrent layers made stateless: every
    reference call must start from the initial state (as the stream does
    after init), not from where the previous call left it."""
    k = _keras_module(model)
    layers = list(getattr(model, "_flatten_layers", lambda: [])())
    if not any(getattr(layer, "stateful", False) for layer in layers):
        return model

    def clone(layer):
        config = layer.get_config()
        if isinstance(layer, k.layers.RNN):
            config["stateful"] = False
        return layer.__class__.from_config(config)

    twin = k.models.clone_model(model, clone_function=clone)
    _copy_weights(model, twin)
    return twin


def _copy_weights(model, twin) -> None:
    """``model``'s weights into its rebuilt ``twin``. A preprocessing layer
    fitted with ``adapt()`` (Normalization) holds its statistics as weights
    but computes with tensors it derives from them in ``finalize_state()``,
    which Keras calls as it loads a file and ``set_weights`` does not: the
    twin normalized with mean 0 and variance 1, and verify failed a correct
    library."""
    twin.set_weights(model.get_weights())
    for layer in getattr(twin, "_flatten_layers", lambda: [])():
        if callable(getattr(layer, "finalize_state", None)):
            layer.finalize_state()


def fixed_time_length(model) -> int | None:
    """T for a model whose input has a fixed time length (batch, T, ...)."""
    from ..streamify_keras import time_length

    return time_length(model) or None


def keras_reference(model, xs: np.ndarray, *, streaming: bool | None = None,
                    stream=None, step_output: tuple[int, ...] | None = None,
                    masked: bool = False, frames_out: int = 1,
                    latency: int = 0) -> np.ndarray:
    """Keras outputs for each step of ``xs`` (steps, *step input shape).

    ``model`` is a Keras 3 or a Keras 2 (tf_keras) model; for the latter
    pass ``streaming`` (found on the Keras 3 twin of the file) or ``stream``
    (the library's StreamInfo). With ``stream``, steps whose reference is not
    defined are NaN (see ``keras_stream_reference``), or with ``masked``
    masked (a NaN there is then the model's own output). ``frames_out``:
    the frames the output returns a step (StreamInfo.frames_of), and
    ``latency`` how late (StreamInfo.latency_of).
    """
    from ..streamify_keras import is_streaming

    if stream is not None:
        if stream.mode == "stateless":
            return _each_input(model, xs)
        p = stream.frames_per_step
        frames = xs[:, 0] if p > 1 else xs  # (steps, P, F...) or (steps, 1, F...)
        frames = frames.reshape(1, len(xs) * p, *frames.shape[2:])
        want = keras_stream_reference(model, frames, stream, step_output, frames_out, latency)
        return want if masked else nan_filled(want)
    if streaming is None:
        streaming = is_streaming(model)
    if not streaming:
        return _each_input(model, xs)
    return keras_sequence_reference(model, np.swapaxes(xs, 0, 1))


def _each_input(model, xs: np.ndarray) -> np.ndarray:
    """The model on each of ``xs`` (one whole input each), traced once: a
    Bidirectional tagger's eager calls took 0.66 s each (200 steps: 2 minutes
    of `tfaot verify`)."""
    call = any_length_call(model)
    return np.stack([call(x) for x in xs])


def keras_sequence_reference(model, x: np.ndarray,
                             step_output: tuple[int, ...] | None = None) -> np.ndarray:
    """What step t must return: Keras on the whole sequence x[:, :t+1].

    For a return_sequences output that is full[:, t]. For a last-output
    model, calling Keras once per prefix is slow (a retrace per length), so
    a twin whose recurrent layers return sequences gives every prefix at
    once; it is checked against true prefix calls at a few t and dropped
    for per-prefix calls if it disagrees. A model with a fixed time length
    T is run on T steps (see ``_fixed_time_reference``).
    """
    fixed = fixed_time_length(model)
    if fixed is not None:
        return _fixed_time_reference(model, x, fixed, step_output)
    full = _output(model(x))
    if _has_time(model, full, step_output):  # (the step's shape says: a last output
        return np.stack([full[:, t] for t in range(x.shape[1])])  # reshaped to (1, n) not)
    steps = x.shape[1]
    try:
        twin = _output(_sequence_twin(model)(x))
        per_step = np.stack([twin[:, t] for t in range(steps)])
    except Exception:  # a layer after the recurrent one needs 2-D input
        per_step = None
    call = any_length_call(model)
    for t in sorted({0, 9 % steps, steps // 2, steps - 1}):
        prefix = call(x[:, : t + 1])
        if per_step is None or np.abs(per_step[t] - prefix).max() > 1e-6:
            return np.stack([call(x[:, : s + 1]) for s in range(steps)])
    return per_step


def _traced(model):
    """``model`` traced once for inputs of any time length (a relaxed
    shape): eager Keras calls are ~15x slower, and one per prefix took
    minutes for 200 steps (a ConvLSTM2D, an LSTM returning its state)."""
    import tensorflow as tf

    return tf.function(lambda args: model(args, training=False), reduce_retracing=True)


def any_length_call(model, every_output: bool = False):
    """``model`` (``_traced``) on an input of any time length, as an array
    (``every_output``: a list of arrays, one per output); a model that
    cannot be traced so is called eagerly. Each new trace's first result
    is checked against an eager call: traced for an open time axis, Keras
    3's TimeDistributed after a convolution over time, or after a
    recurrent layer in a model of several inputs, returned one frame where
    eager Keras returns all."""
    import tensorflow as tf

    traced, traces = _traced(model), 0
    arrays = (lambda y: [np.asarray(v) for v in tf.nest.flatten(y)]) if every_output \
        else _output
    same = (lambda a, b: len(a) == len(b) and all(map(_same, a, b))) if every_output \
        else _same

    def call(v):
        nonlocal traced, traces
        if traced is not None:
            try:
                got = arrays(traced(v))
            except Exception:  # noqa: BLE001 - a layer that needs static shapes
                traced = None
            else:
                if traced.experimental_get_tracing_count() == traces:
                    return got
                traces = traced.experimental_get_tracing_count()
                eager = arrays(model(v, training=False))
                if same(got, eager) or same(got, arrays(_graph_call(model, v))):
                    return got
                traced = None
                return eager
        return arrays(model(v, training=False))

    return call


def _graph_call(model, v):
    """``model`` on ``v`` in a graph traced for ``v``'s shapes, as
    ``predict()`` runs it. Where eager Keras differs from the trace, this
    tells whose fault it is: eager Keras casts a Resizing layer's floats
    back to its integer input's dtype (a uint8 camera frame: values
    rounded, overshoots wrapped), where its declared output, predict() and
    every graph keep floats."""
    import tensorflow as tf

    return tf.function(lambda args: model(args, training=False))(v)


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    """The same shape and values to float rounding (NaN where the other has NaN)."""
    return a.shape == b.shape and np.allclose(a, b, rtol=1e-5, atol=1e-6, equal_nan=True)


def keras_stream_reference(model, frames: np.ndarray, stream,
                           step_output: tuple[int, ...] | None = None,
                           frames_out: int = 1, latency: int = 0) -> np.ndarray:
    """What each step must return for the input stream ``frames`` (1, N, ...):
    ``(N // P, *step output)``, masked where the reference is not defined.

    * window: the model on the ``window`` frames ending ``delay`` frames
      before the step's last frame;
    * prefix: the model on frames 0..(m+1)P-1 (its last output frame, or
      its last ``frames_out`` for an output with several frames a step;
      with a ``latency``, those ending that many frames before its last).

    ``step_output``: the library's step output shape (tells whether the
    model's output keeps a time axis); guessed from the model if absent.
    """
    p = stream.frames_per_step
    steps = frames.shape[1] // p
    if frames_out > 1 or latency:
        return _chunk_reference(model, frames, stream, steps, frames_out, latency)
    if stream.mode == "window":
        return _window_reference(model, frames, stream, steps)
    if p == 1 and stream.first_valid_step == 0:
        return keras_sequence_reference(model, frames, step_output)
    return _prefix_reference(model, frames, stream, steps, step_output)


def _window_reference(model, frames, stream, steps: int) -> np.ndarray:
    p, w, d = stream.frames_per_step, stream.window, stream.delay
    valid = [m for m in range(steps) if (m + 1) * p - d - w >= 0]
    windows = np.stack([frames[0, (m + 1) * p - d - w:(m + 1) * p - d] for m in valid])
    batch = 1 if model.inputs[0].shape[0] is not None else 64
    call = any_length_call(model)
    outs = np.concatenate([call(windows[i:i + batch]) for i in range(0, len(windows), batch)])
    want = undefined_steps((steps, 1, *outs.shape[1:]))
    want[valid] = outs[:, None]
    return want


def _prefix_reference(model, frames, stream, steps: int, step_output) -> np.ndarray:
    """Prefix references for streams with several frames per step or a conv
    front end: one run of an open-time, sequence-returning twin, checked
    against true prefix runs at a few steps (per-prefix runs otherwise)."""
    p, first = stream.frames_per_step, stream.first_valid_step
    fixed = fixed_time_length(model)

    call = any_length_call(model)

    def prefix_call(m):
        y = call(frames[:, :(m + 1) * p])
        return y[:, -1] if _has_time(model, y, step_output) else y

    checkable = [m for m in range(first, steps) if fixed is None or (m + 1) * p == fixed]
    want = None
    try:
        twin = _sequence_twin(model, open_time=fixed is not None)
        seq = _output(twin(frames))
        prev = _output(twin(frames[:, :-p]))
        rate = seq.shape[1] - prev.shape[1]
        want = undefined_steps((steps, *seq.shape[:1], *seq.shape[2:]))
        for m in range(first, steps):
            index = seq.shape[1] - 1 - (steps - 1 - m) * rate
            if index >= 0:
                want[m] = seq[:, index]
        probes = sorted({checkable[0], checkable[len(checkable) // 2], checkable[-1]}) \
            if checkable else []
        if probes:
            if any(np.abs(want[m] - prefix_call(m)).max() > 1e-6 for m in probes):
                want = None
        elif fixed is None or frames.shape[1] < fixed or not _twin_matches(
                model, twin, frames[:, :fixed], step_output):
            # (a fixed length that no step ends on: the twin is checked on it)
            want = None
    except Exception:  # noqa: BLE001 - no usable twin: per-prefix calls below
        want = None
    if want is None:
        outs = {m: prefix_call(m) for m in checkable}
        if not outs:
            raise TfaotError("no step of this stream has a reference output; use more --steps")
        sample = next(iter(outs.values()))
        want = undefined_steps((steps, *sample.shape))
        for m, y in outs.items():
            want[m] = y
    return want


def _chunk_reference(model, frames, stream, steps: int, count: int,
                     latency: int = 0) -> np.ndarray:
    """Prefix references of an output with ``count`` frames a step (upsampled
    in time) and ``latency`` frames late: at step m, the ``count`` frames
    ending ``latency`` frames before the last of the model on frames
    0..(m+1)P-1. The stream is causal, so those are frames of the model's
    output on the whole stream (padded to T for a fixed length), ``count`` a
    step, the last step's ending ``latency`` before its end; a few prefix
    calls (long enough to have those frames final) check that, else each
    step is its own prefix call."""
    p, first = stream.frames_per_step, stream.first_valid_step
    fixed = fixed_time_length(model)
    total = steps if fixed is None else fixed // p  # the step the whole run ends on
    call = any_length_call(model)
    seq = call(frames if fixed is None else pad_time(frames[:, :fixed], fixed))
    want = undefined_steps((steps, *seq.shape[:1], *([count] if count > 1 else []),
                            *seq.shape[2:]))

    def frames_at(y, end):
        return y[:, end - count:end] if count > 1 else y[:, end - 1]

    def prefix(m):
        return call(frames[:, :(m + 1) * p] if fixed is None
                    else pad_time(frames[:, :(m + 1) * p], fixed))

    checked = [m for m in range(first, min(steps, total))
               if seq.shape[1] - (total - m) * count - latency >= 0]
    for m in checked:
        want[m] = frames_at(seq, seq.shape[1] - (total - 1 - m) * count - latency)
    later = -(-latency // count)  # steps after m whose prefix has m's frames final

    def final(m):  # step m's frames, from a prefix call
        y = prefix(m + later)
        return frames_at(y, y.shape[1] - later * count - latency)

    probes = {checked[0], checked[len(checked) // 2], checked[-1]} if checked else set()
    probes = sorted(m for m in probes if m + later < steps)
    if fixed is None and any(np.abs(want[m] - final(m)).max() > 1e-6 for m in probes):
        for m in checked:
            want[m] = final(m) if m + later < steps else np.ma.masked
    return want


def _twin_matches(model, twin, frames, step_output) -> bool:
    y = _output(model(frames))
    y = y[:, -1] if _has_time(model, y, step_output) else y
    return np.abs(_output(twin(frames))[:, -1] - y).max() <= 1e-6


def _has_time(model, y, step_output) -> bool:
    """Whether a model output ``y`` keeps a time axis."""
    if step_output is not None:
        return y.ndim == len(step_output) + 1
    out = tuple(model.outputs[0].shape)
    return len(out) >= 3 and (out[1] is None or len(out) == 3)


def _fixed_time_reference(model, x: np.ndarray, length: int,
                          step_output: tuple[int, ...] | None = None) -> np.ndarray:
    """Reference for a model whose input is (batch, T, ...) with T fixed.

    The model itself only runs on exactly T steps, so it runs on x padded
    (or cut) to T. A sequence output gives steps t < T directly (streamed
    models are causal: padding after step t cannot change it). A last
    output (Keras on x[:, :t+1]) and steps beyond T need an open-time twin:
    the same layers and weights with input (batch, None, ...), whose
    recurrent layers return sequences; it must agree with the model itself
    on the T steps, else only what the model gives is compared.
    ``step_output``, the library's step output shape, tells a sequence
    output from a last output whose axis 1 happens to be T long (a
    forecaster of T steps over a window of T frames).
    """
    steps = x.shape[1]
    x_model = pad_time(x, length) if steps < length else x[:, :length]
    full = _output(model(x_model))
    sequence_output = full.ndim == 3 and full.shape[1] == length if step_output is None \
        else full.ndim == len(step_output) + 1
    if sequence_output and steps <= length:
        return np.stack([full[:, t] for t in range(steps)])
    try:
        twin = _output(_sequence_twin(model, open_time=True)(
            x if steps >= length else x_model))
    except Exception:
        twin = None
    # a twin whose output lost the time axis (pooling over all of it) is no
    # stepwise reference
    time_axis = twin is not None and twin.ndim == full.ndim + (0 if sequence_output else 1) \
        and twin.shape[1] >= length
    if time_axis:
        if sequence_output:
            agrees = np.abs(twin[:, :length] - full).max() <= 1e-6
        else:
            agrees = np.abs(twin[:, length - 1] - full).max() <= 1e-6
        if agrees:
            return np.stack([twin[:, t] for t in range(steps)])
    # No usable twin: only what the model itself defines, its T steps.
    if steps != length:
        raise TfaotError(
            f"the model takes exactly {length} time steps, and a copy of it open in "
            f"time (to compare {steps} steps) did not compute what it computes; verify "
            f"it with --steps {length}")
    if sequence_output:
        return np.stack([full[:, t] for t in range(length)])
    return full[None]  # a last output: only the last step is defined


def _keras_module(model):
    """keras (Keras 3) or tf_keras (Keras 2), whichever built ``model``."""
    if type(model).__module__.startswith("tf_keras"):
        import tf_keras

        return tf_keras
    import keras

    return keras


def _sequence_twin(model, open_time: bool = False):
    """A copy of ``model`` whose last-output recurrent layers return sequences
    (and, with ``open_time``, whose input takes any number of time steps)."""
    k = _keras_module(model)

    def clone(layer):
        config = layer.get_config()
        if isinstance(layer, k.layers.RNN):
            config["return_sequences"] = True
        if open_time and isinstance(layer, k.layers.Reshape):
            config["target_shape"] = _open_time_target(layer)
        return layer.__class__.from_config(config)

    if isinstance(model, k.Sequential) and _has_layers_after_last_output(model, k):
        return _sequential_twin(model, k, clone, open_time)
    kwargs = {}
    if open_time:
        shape = tuple(model.inputs[0].shape)
        kwargs["input_tensors"] = k.Input(batch_shape=(shape[0], None, *shape[2:]))
    twin = k.models.clone_model(model, clone_function=clone, **kwargs)
    _copy_weights(model, twin)
    return twin


def _open_time_target(layer) -> tuple:
    """A Reshape's target for any time length: Reshape((T, -1)) of a
    fixed-length model keeps T frames of one step's features each."""
    from ..streamify_keras.reshape_target import layer_time_length, per_step_target

    target = tuple(layer.target_shape)
    time = layer_time_length(layer)
    if time is None or target[0] != time:
        return target
    per_step = tuple(layer.input.shape[2:])
    if None in per_step:
        return target
    rest = per_step_target(target, time, per_step)
    return target if -1 in rest else (-1, *rest)


def _has_layers_after_last_output(model, k) -> bool:
    """A last-output recurrent layer followed by others (ConvLSTM -> Flatten)."""
    seen = False
    for layer in model.layers:
        if seen and not isinstance(layer, k.layers.RNN):
            return True
        seen = seen or (isinstance(layer, k.layers.RNN) and not layer.return_sequences)
    return False


def _sequential_twin(model, k, clone, open_time: bool):
    """The twin of a Sequential model: layers after a last-output recurrent
    layer see one more (time) axis, so each runs per step (TimeDistributed):
    a Flatten after a ConvLSTM would otherwise flatten time as well."""
    shape = tuple(model.inputs[0].shape)
    layers, after = [], False
    for layer in model.layers:
        recurrent = isinstance(layer, k.layers.RNN)
        twin_layer = clone(layer)
        layers.append(k.layers.TimeDistributed(twin_layer) if after and not recurrent
                      else twin_layer)
        after = after or (recurrent and not layer.return_sequences)
    time = None if open_time else shape[1]
    twin = k.Sequential([k.Input(batch_shape=(shape[0], time, *shape[2:])), *layers])
    _copy_weights(model, twin)
    return twin
