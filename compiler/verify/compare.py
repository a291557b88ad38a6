"""Verify stage: the built library against TensorFlow running the original model.

A random input sequence goes through TensorFlow on the whole sequence (the
original model, not our step program) and through the built .so one step
at a time via the ctypes harness; the report gives the max abs error.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import TfaotError
from .graph import GraphReference, build_cut, feedback_reference, token_limit  # noqa: F401


@dataclass
class VerifyResult:
    output: str
    steps: int
    max_abs_error: float  # over the steps where both sides are finite
    tolerance: float
    unit: str = "steps"  # what ``steps`` counts
    # The first place where one side is NaN or Inf and the other is not (or
    # a different non-finite value): a failure whatever the tolerance.
    mismatch: str | None = None
    # Steps where both sides hold the same NaN/Inf (TensorFlow's output is
    # not finite there, and the library agrees), and the first of them.
    nonfinite_steps: int = 0
    first_nonfinite: str | None = None

    @property
    def ok(self) -> bool:
        return self.mismatch is None and bool(self.max_abs_error <= self.tolerance)

    def describe(self) -> str:
        """The one line `tfaot verify` prints for this output."""
        line = (f"{self.output}: max abs error {self.max_abs_error:.3g} over {self.steps} "
                f"{self.unit} (tolerance {self.tolerance:g}): {'ok' if self.ok else 'FAIL'}")
        if self.mismatch:
            line += f": {self.mismatch}"
        if self.nonfinite_steps:
            line += (f" (NaN/Inf in both TensorFlow and the library at {self.nonfinite_steps} "
                     f"of them, first at {self.first_nonfinite})")
        return line


class ErrorTally:
    """The comparison of one output, step by step.

    Finite pairs give the abs error. A NaN or Inf on one side only is a
    mismatch (Python's ``max(0.0, nan)`` is 0.0 and numpy's max of a NaN is
    NaN, so non-finite values are told apart here instead of inside a max):
    the first one is kept, with its step. The same NaN/Inf on both sides
    agrees with TensorFlow; those steps are counted and reported.
    """

    def __init__(self):
        self.max_abs_error = 0.0
        self.steps = 0
        self.mismatch: str | None = None
        self.nonfinite_steps = 0
        self.first_nonfinite: str | None = None

    def add(self, where: str, got, want) -> None:
        """Compares one step's output; ``where`` names the step in messages."""
        got = np.asarray(got, np.float64).ravel()
        want = np.asarray(want, np.float64).ravel()
        self.steps += 1
        finite = np.isfinite(got) & np.isfinite(want)
        if finite.any():
            self.max_abs_error = max(self.max_abs_error,
                                     float(np.abs(got[finite] - want[finite]).max()))
        same = (np.isnan(got) & np.isnan(want)) | (np.isinf(got) & (got == want))
        differ = ~finite & ~same
        if differ.any() and self.mismatch is None:
            k = int(np.flatnonzero(differ)[0])
            self.mismatch = (f"at {where} the library gives {got[k]:.6g} where TensorFlow "
                             f"gives {want[k]:.6g} (element {k})")
        if same.any():
            self.nonfinite_steps += 1
            self.first_nonfinite = self.first_nonfinite or where

    def result(self, output: str, tol: float, steps: int | None = None,
               unit: str = "steps") -> VerifyResult:
        return VerifyResult(output, self.steps if steps is None else steps,
                            self.max_abs_error, tol, unit, self.mismatch,
                            self.nonfinite_steps, self.first_nonfinite)


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


#: Default tolerance by the library's matvec weight dtype (--weights-dtype):
#: f32 rounding, or the half-width weights' (measured errors: f16 <= 8e-4,
#: bf16 <= 7.2e-3 on the benchmark models). int8: each product carries the
#: rounding of its weight (half of 1/127 of its row's largest) and of its
#: input (half of 1/127 of the vector's largest), i.e. a relative error up
#: to about 1/127 of a matvec's largest terms, carried through the model;
#: measured: see docs/performance.md (int8 weights).
DEFAULT_TOLERANCE = {"f32": 1e-5, "f16": 1e-3, "bf16": 1e-2, "int8": 5e-2}
#: Keras models that compute in half precision (mixed precision policies):
#: TensorFlow's own outputs carry that rounding (f16: 2^-11 relative per op,
#: bf16: 2^-8), so a library that matches them can only match that closely
#: (an LSTM(16) under mixed_float16: 5.7e-4).
COMPUTE_DTYPE_TOLERANCE = {"float16": 5e-3, "bfloat16": 5e-2}


def compute_dtype_tolerance(model) -> float:
    """The tolerance the coarsest compute dtype of ``model``'s layers needs."""
    dtypes = {str(getattr(layer, "compute_dtype", "float32")) for layer in model.layers}
    return max((COMPUTE_DTYPE_TOLERANCE.get(d, 0.0) for d in dtypes), default=0.0)


def default_tolerance(lib, keras_model) -> float:
    """--tol's default: the library's weight dtype's, or the Keras model's
    compute dtype's when that is coarser."""
    tol = DEFAULT_TOLERANCE.get(lib.manifest.get("weights_dtype", "f32"), 1e-5)
    return max(tol, compute_dtype_tolerance(keras_model)) if keras_model is not None else tol


def verify(model_path: str, lib_dir: Path, *, steps: int, seed: int, tol: float | None,
           graph_options=None) -> list[VerifyResult]:
    from . import harness
    from .process import run_sequence
    from ..frontend.load import load_model

    lib = harness.load(lib_dir, init=False)  # run_sequence inits (maybe in a child process)
    rng = np.random.default_rng(seed)
    graph_options = build_cut(lib, graph_options)
    loaded = load_model(model_path, graph_options)
    if tol is None:
        tol = default_tolerance(lib, loaded.keras_model)
    if lib.streams > 1:
        return _verify_streams(loaded, lib, rng, steps, tol, model_path, lib_dir)
    if loaded.keras_model is None:
        limit = token_limit(loaded.graph.graph_def)
        if lib.manifest.get("state_feedback"):
            xs = [random_inputs(rng, (steps, *shape), dt, limit)
                  for shape, dt in zip(lib.input_shapes, lib.input_dtypes)]
            return _compare(lib, lib_dir, model_path, run_sequence(lib, xs),
                            feedback_reference(loaded.graph, lib, xs), tol)
        references = [GraphReference(loaded, lib, lib_dir, index=i)
                      for i in range(len(lib.output_shapes))]
        if all(r.fixed_last_output for r in references):
            return _verify_fixed_length(references, lib, rng, limit, steps, tol)
    xs, wants = _inputs_and_references(loaded, lib, rng, steps, model_path, lib_dir)
    return _compare(lib, lib_dir, model_path, run_sequence(lib, xs), wants, tol)


def _inputs_and_references(loaded, lib, rng, steps: int, model_path, lib_dir):
    """Random inputs for ``steps`` steps of ``lib`` (one array per input,
    (steps, *step input i)) and TensorFlow's outputs on them, per output."""
    if loaded.keras_model is None:
        limit = token_limit(loaded.graph.graph_def)
        references = [GraphReference(loaded, lib, lib_dir, index=i)
                      for i in range(len(lib.output_shapes))]
        xs = [random_inputs(rng, (references[0].steps(steps), *shape), dt, limit)
              for shape, dt in zip(lib.input_shapes, lib.input_dtypes)]
        if not references[0].stateless:
            # A per-step input may reach a loop body; the graph on the whole
            # sequence sees one value, so every step gets the same one.
            xs = [x if s else np.repeat(x[:1], len(x), axis=0)
                  for x, s in zip(xs, lib.input_streamed)]
        return xs, [reference.outputs(xs, masked=True) for reference in references]
    model = loaded.keras_model
    stream = library_stream(lib, model, model_path)
    _check_input_shape(model, lib, model_path, lib_dir, stream)
    fixed = fixed_time_length(model) if stream.mode == "prefix" else None
    if fixed is not None:
        steps = min(steps, fixed)  # the model defines only its T steps
    elif stream.mode == "window":
        steps += stream.first_valid_step  # ``steps`` compared ones
    if steps <= stream.first_valid_step:
        raise TfaotError(f"{lib_dir}: outputs are valid from step {stream.first_valid_step} "
                         f"on; verify it with --steps {stream.first_valid_step + 100}")
    # One array per input, (steps, *step input i): a streamed input's
    # frames, or the value a per-step input takes at each step.
    xs = [random_inputs(rng, (steps, *shape), dt, _embedding_rows(model))
          for shape, dt in zip(lib.input_shapes, lib.input_dtypes)]
    # The reference is the file's own framework: Keras 2 files run in
    # Keras 2 (tf_keras), not in the Keras 3 model the build used.
    reference_model = keras_reference_model(loaded)
    if len(xs) == 1:
        wants = [keras_reference(head, xs[0], stream=stream, step_output=shape, masked=True)
                 for head, shape in zip(_output_heads(reference_model, len(lib.output_shapes)),
                                        lib.output_shapes)]
    else:
        wants = keras_multi_input_reference(reference_model, xs, lib.input_streamed,
                                            stream, lib.output_shapes)
    return xs, wants


def _verify_streams(loaded, lib, rng, steps: int, tol: float, model_path,
                    lib_dir) -> list[VerifyResult]:
    """A --streams N library: N different input sequences, one per stream,
    stepped together; each stream's outputs against TensorFlow on its own."""
    from .process import run_sequence

    if loaded.keras_model is None and lib.manifest.get("state_feedback"):
        raise TfaotError(f"{lib_dir}: verify of a --streams build covers Keras models and "
                         "graphs with their loops streamed; verify a --streams 1 build of "
                         "this graph")
    one = OneStream(lib)
    cases = [_inputs_and_references(loaded, one, rng, steps, model_path, lib_dir)
             for _ in range(lib.streams)]
    # (steps, N, *step input) per input: stream i's frames in row i
    xs = [np.stack([xs_i[k] for xs_i, _ in cases], axis=1) for k in range(len(cases[0][0]))]
    steps_out = run_sequence(lib, xs)
    tallies = [ErrorTally() for _ in lib.output_shapes]
    for i, (_, wants) in enumerate(cases):
        for k, want in enumerate(wants):
            got = np.stack([y[k][i] for y in steps_out])[-len(want):]
            first = len(steps_out) - len(want)
            values = np.ma.getdata(want)
            for m in np.flatnonzero(defined_steps(want)):
                tallies[k].add(f"stream {i} step {first + m}", got[m], values[m])
    unit = f"steps of {lib.streams} streams"
    return [tally.result(lib.manifest["outputs"][k]["name"], tol, unit=unit)
            for k, tally in enumerate(tallies)]


class OneStream:
    """One stream's view of a --streams N library (shapes without the streams
    axis), for the code that makes one stream's inputs and references."""

    def __init__(self, lib):
        self._lib = lib
        self.manifest = dict(lib.manifest)
        for key in ("inputs", "outputs"):
            self.manifest[key] = [dict(t, shape=t["shape"][1:]) for t in lib.manifest[key]]
        self.input_shapes = [s[1:] for s in lib.input_shapes]
        self.output_shapes = [s[1:] for s in lib.output_shapes]
        self.input_specs = [(n, dt, s[1:]) for n, dt, s in lib.input_specs]
        self.output_specs = [(n, dt, s[1:]) for n, dt, s in lib.output_specs]
        self.input_shape, self.output_shape = self.input_shapes[0], self.output_shapes[0]
        self.streams = 1

    def __getattr__(self, name):
        return getattr(self._lib, name)


def _compare(lib, lib_dir, model_path, steps_out, wants, tol) -> list[VerifyResult]:
    results = []
    for i, want in enumerate(wants):
        got = np.stack([y[i] for y in steps_out])[-len(want):]
        if got.shape != want.shape:
            raise TfaotError(f"{lib_dir}: the library returns {got.shape[1:]} per step but "
                             f"{model_path} gives {want.shape[1:]}; was it built from this "
                             "model?")
        first = len(steps_out) - len(want)  # the library's number of ``want``'s step 0
        defined = defined_steps(want)
        if not defined.any():
            raise TfaotError(f"{lib_dir}: no step of {len(steps_out)} has a reference "
                             "output (the window is not full yet); use more --steps")
        tally = ErrorTally()
        values = np.ma.getdata(want)
        for m in np.flatnonzero(defined):
            tally.add(f"step {first + m}", got[m], values[m])
        results.append(tally.result(lib.manifest["outputs"][i]["name"], tol))
    return results


def _verify_fixed_length(references, lib, rng, limit: int, steps: int,
                         tol: float) -> list[VerifyResult]:
    """A graph of fixed length T that returns one output (a keyword spotter's
    softmax after its T frames) defines the stream only at its last frame:
    several sequences of T frames, each from a fresh init, are compared
    there (enough of them to cover about ``steps`` steps)."""
    from .process import run_sequence

    st = references[0].stream
    length, p = st.fixed_length, st.frames_per_step
    per_sequence = -(-length // p)
    sequences = max(8, -(-steps // per_sequence))
    tallies = [ErrorTally() for _ in references]
    for k in range(sequences):
        xs = [random_inputs(rng, (per_sequence, *shape), dt, limit)
              for shape, dt in zip(lib.input_shapes, lib.input_dtypes)]
        xs = [x if s else np.repeat(x[:1], len(x), axis=0)
              for x, s in zip(xs, lib.input_streamed)]
        ys = run_sequence(lib, xs)
        for i, ref in enumerate(references):
            want, step = ref.fixed_output(xs, rng)
            tallies[i].add(f"step {step} of sequence {k}", ys[step][i], want)
    return [tally.result(lib.manifest["outputs"][i]["name"], tol,
                         unit=f"sequences of {length} frames")
            for i, tally in enumerate(tallies)]


def keras_multi_input_reference(model, xs: list, streamed: list, stream,
                                step_outputs) -> list[np.ndarray]:
    """What each step of a several-input model must return, per output:
    ``(steps, *step output)``, masked where not defined (``undefined_steps``).

    Step m is the model on the streamed inputs' frames 0..(m+1)P-1 (prefix;
    padded with zeros to T for a fixed-length model, which a causal stream
    cannot tell from the prefix), on the window ending ``delay`` frames
    before them (window), or on step m's input (stateless), with the
    per-step inputs' values of step m. One model call per step: the values
    of the per-step inputs change every step.
    """
    steps, p = len(xs[0]), stream.frames_per_step
    frames = [(x[:, 0] if p > 1 else x).reshape(1, steps * p, *x.shape[2 + (p > 1):])
              if s and stream.mode != "stateless" else None for x, s in zip(xs, streamed)]
    fixed = fixed_time_length(model) if stream.mode == "prefix" else None
    wants = [undefined_steps((steps, *shape)) for shape in step_outputs]
    import tensorflow as tf

    # Traced once for any length (eager Keras calls are ~15x slower).
    call = tf.function(lambda args: model(args, training=False), reduce_retracing=True)
    for m in range(stream.first_valid_step, steps):
        end = (m + 1) * p
        if stream.mode == "window":
            start, end = end - stream.delay - stream.window, end - stream.delay
            if start < 0:
                continue
        else:
            start = 0
        args = [x[m] if f is None else f[:, start:end] for x, f in zip(xs, frames)]
        if fixed is not None:
            if end > fixed:
                break
            args = [a if f is None else _pad_time(a, fixed) for a, f in zip(args, frames)]
        ys = call(args)
        ys = list(ys) if isinstance(ys, (list, tuple)) else [ys]
        for want, y, shape in zip(wants, ys, step_outputs):
            y = np.asarray(y)
            if y.ndim == len(shape) + 1:  # the output keeps the time axis
                want[m] = y[:, end - start - 1]
            elif fixed is None or end == fixed:
                want[m] = y
    return wants


def _pad_time(x: np.ndarray, length: int) -> np.ndarray:
    pad = np.zeros((x.shape[0], length - x.shape[1], *x.shape[2:]), x.dtype)
    return np.concatenate([x, pad], axis=1)


def _output_heads(model, count: int) -> list:
    """One single-output model per output of ``model`` (the model itself if it has one)."""
    if count == 1:
        return [model]
    k = _keras_module(model)
    inputs = model.inputs[0] if len(model.inputs) == 1 else model.inputs
    return [k.Model(inputs, model.outputs[i]) for i in range(count)]


def random_inputs(rng, shape, dtype, high: int) -> np.ndarray:
    """Test inputs: normal floats, or integer ids in [0, high) (token inputs)."""
    if np.issubdtype(dtype, np.integer):
        return rng.integers(0, high, size=shape).astype(dtype)
    return rng.normal(size=shape).astype(dtype)


def _embedding_rows(model) -> int:
    """The smallest Embedding's input_dim, so random token ids stay in range."""
    import keras

    dims = [layer.input_dim for layer in model._flatten_layers()
            if isinstance(layer, keras.layers.Embedding)]
    return min(dims) if dims else 2


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


def _check_input_shape(model, lib, model_path, lib_dir, stream=None) -> None:
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


def keras_reference_model(loaded):
    """The model to take reference outputs from: the file read by the
    framework that wrote it (tf_keras for a Keras 2 ``.h5`` or ``.keras``)."""
    from ..frontend import keras2

    if keras2.is_keras2_file(loaded.path, loaded.format):
        return _without_stateful_layers(keras2.load_reference(loaded.path, loaded.format))
    return _without_stateful_layers(loaded.keras_model)


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
    twin.set_weights(model.get_weights())
    return twin


def fixed_time_length(model) -> int | None:
    """T for a model whose input has a fixed time length (batch, T, ...)."""
    from ..streamify_keras import time_length

    return time_length(model) or None


def keras_reference(model, xs: np.ndarray, *, streaming: bool | None = None,
                    stream=None, step_output: tuple[int, ...] | None = None,
                    masked: bool = False) -> np.ndarray:
    """Keras outputs for each step of ``xs`` (steps, *step input shape).

    ``model`` is a Keras 3 or a Keras 2 (tf_keras) model; for the latter
    pass ``streaming`` (found on the Keras 3 twin of the file) or ``stream``
    (the library's StreamInfo). With ``stream``, steps whose reference is not
    defined are NaN (see ``keras_stream_reference``), or with ``masked``
    masked (a NaN there is then the model's own output).
    """
    from ..streamify_keras import is_streaming

    if stream is not None:
        if stream.mode == "stateless":
            return np.stack([np.asarray(model(x)) for x in xs])
        p = stream.frames_per_step
        frames = xs[:, 0] if p > 1 else xs  # (steps, P, F...) or (steps, 1, F...)
        frames = frames.reshape(1, len(xs) * p, *frames.shape[2:])
        want = keras_stream_reference(model, frames, stream, step_output)
        return want if masked else nan_filled(want)
    if streaming is None:
        streaming = is_streaming(model)
    if not streaming:
        return np.stack([np.asarray(model(x)) for x in xs])
    return keras_sequence_reference(model, np.swapaxes(xs, 0, 1))


def keras_sequence_reference(model, x: np.ndarray) -> np.ndarray:
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
        return _fixed_time_reference(model, x, fixed)
    full = np.asarray(model(x))
    out_shape = tuple(model.outputs[0].shape)
    if full.ndim == 3 or (len(out_shape) >= 3 and out_shape[1] is None):  # keeps time
        return np.stack([full[:, t] for t in range(x.shape[1])])
    steps = x.shape[1]
    try:
        twin = np.asarray(_sequence_twin(model)(x))
        per_step = np.stack([twin[:, t] for t in range(steps)])
    except Exception:  # a layer after the recurrent one needs 2-D input
        per_step = None
    for t in sorted({0, 9 % steps, steps // 2, steps - 1}):
        prefix = np.asarray(model(x[:, : t + 1]))
        if per_step is None or np.abs(per_step[t] - prefix).max() > 1e-6:
            return np.stack([np.asarray(model(x[:, : s + 1])) for s in range(steps)])
    return per_step


def keras_stream_reference(model, frames: np.ndarray, stream,
                           step_output: tuple[int, ...] | None = None) -> np.ndarray:
    """What each step must return for the input stream ``frames`` (1, N, ...):
    ``(N // P, *step output)``, masked where the reference is not defined.

    * window: the model on the ``window`` frames ending ``delay`` frames
      before the step's last frame;
    * prefix: the model on frames 0..(m+1)P-1 (its last output frame).

    ``step_output``: the library's step output shape (tells whether the
    model's output keeps a time axis); guessed from the model if absent.
    """
    p = stream.frames_per_step
    steps = frames.shape[1] // p
    if stream.mode == "window":
        return _window_reference(model, frames, stream, steps)
    if p == 1 and stream.first_valid_step == 0:
        return keras_sequence_reference(model, frames)
    return _prefix_reference(model, frames, stream, steps, step_output)


def _window_reference(model, frames, stream, steps: int) -> np.ndarray:
    p, w, d = stream.frames_per_step, stream.window, stream.delay
    valid = [m for m in range(steps) if (m + 1) * p - d - w >= 0]
    windows = np.stack([frames[0, (m + 1) * p - d - w:(m + 1) * p - d] for m in valid])
    batch = 1 if model.inputs[0].shape[0] is not None else 64
    outs = np.concatenate([np.asarray(model(windows[i:i + batch]))
                           for i in range(0, len(windows), batch)])
    want = undefined_steps((steps, 1, *outs.shape[1:]))
    want[valid] = outs[:, None]
    return want


def _prefix_reference(model, frames, stream, steps: int, step_output) -> np.ndarray:
    """Prefix references for streams with several frames per step or a conv
    front end: one run of an open-time, sequence-returning twin, checked
    against true prefix runs at a few steps (per-prefix runs otherwise)."""
    p, first = stream.frames_per_step, stream.first_valid_step
    fixed = fixed_time_length(model)

    def prefix_call(m):
        y = np.asarray(model(frames[:, :(m + 1) * p]))
        return y[:, -1] if _has_time(model, y, step_output) else y

    checkable = [m for m in range(first, steps) if fixed is None or (m + 1) * p == fixed]
    want = None
    try:
        twin = _sequence_twin(model, open_time=fixed is not None)
        seq = np.asarray(twin(frames))
        prev = np.asarray(twin(frames[:, :-p]))
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


def _twin_matches(model, twin, frames, step_output) -> bool:
    y = np.asarray(model(frames))
    y = y[:, -1] if _has_time(model, y, step_output) else y
    return np.abs(np.asarray(twin(frames))[:, -1] - y).max() <= 1e-6


def _has_time(model, y, step_output) -> bool:
    """Whether a model output ``y`` keeps a time axis."""
    if step_output is not None:
        return y.ndim == len(step_output) + 1
    out = tuple(model.outputs[0].shape)
    return len(out) >= 3 and (out[1] is None or len(out) == 3)


def _fixed_time_reference(model, x: np.ndarray, length: int) -> np.ndarray:
    """Reference for a model whose input is (batch, T, ...) with T fixed.

    The model itself only runs on exactly T steps, so it runs on x padded
    (or cut) to T. A sequence output gives steps t < T directly (streamed
    models are causal: padding after step t cannot change it). A last
    output (Keras on x[:, :t+1]) and steps beyond T need an open-time twin:
    the same layers and weights with input (batch, None, ...), whose
    recurrent layers return sequences; it must agree with the model itself
    on the T steps, else only what the model gives is compared.
    """
    steps = x.shape[1]
    x_model = _pad_time(x, length) if steps < length else x[:, :length]
    full = np.asarray(model(x_model))
    sequence_output = full.ndim == 3 and full.shape[1] == length
    if sequence_output and steps <= length:
        return np.stack([full[:, t] for t in range(steps)])
    try:
        twin = np.asarray(_sequence_twin(model, open_time=True)(
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
            f"the model takes exactly {length} time steps and has no open-time twin "
            f"to compare other lengths with; verify it with --steps {length}")
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
        return layer.__class__.from_config(config)

    if isinstance(model, k.Sequential) and _has_layers_after_last_output(model, k):
        return _sequential_twin(model, k, clone, open_time)
    kwargs = {}
    if open_time:
        shape = tuple(model.inputs[0].shape)
        kwargs["input_tensors"] = k.Input(batch_shape=(shape[0], None, *shape[2:]))
    twin = k.models.clone_model(model, clone_function=clone, **kwargs)
    twin.set_weights(model.get_weights())
    return twin


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
    twin.set_weights(model.get_weights())
    return twin
