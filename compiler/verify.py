"""Verify stage: the built library against TensorFlow running the original model.

A random input sequence goes through TensorFlow on the whole sequence (the
original model, not our step program) and through the built .so one step
at a time via the ctypes harness; the report gives the max abs error.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .errors import TfaotError


@dataclass
class VerifyResult:
    output: str
    steps: int
    max_abs_error: float
    tolerance: float

    @property
    def ok(self) -> bool:
        return bool(self.max_abs_error <= self.tolerance)


def verify(model_path: str, lib_dir: Path, *, steps: int, seed: int, tol: float,
           graph_options=None) -> list[VerifyResult]:
    from . import harness
    from .load import load_model

    lib = harness.load(lib_dir)
    rng = np.random.default_rng(seed)
    loaded = load_model(model_path)
    if loaded.keras_model is not None:
        _check_input_shape(loaded.keras_model, lib, model_path, lib_dir)
        xs = rng.normal(size=(steps, *lib.input_shape)).astype(np.float32)
        want = keras_reference(loaded.keras_model, xs)
    else:
        reference = GraphReference(loaded, graph_options)
        reference.check_library(lib, lib_dir)
        xs = rng.normal(size=(reference.steps(steps), *lib.input_shape)).astype(np.float32)
        want = reference.outputs(xs)
    got = np.stack([lib.step(x) for x in xs])[-len(want):]
    if got.shape != want.shape:
        raise TfaotError(f"{lib_dir}: the library returns {got.shape[1:]} per step but "
                         f"{model_path} gives {want.shape[1:]}; was it built from this model?")
    error = float(np.abs(got.astype(np.float64) - want).max())
    name = lib.manifest["outputs"][0]["name"]
    return [VerifyResult(name, len(want), error, tol)]


def _check_input_shape(model, lib, model_path, lib_dir) -> None:
    from .streamify_keras import step_input_spec

    expected = step_input_spec(model, str(model_path)).shape
    if tuple(expected) != tuple(lib.input_shape):
        raise TfaotError(f"{lib_dir}: the library takes {tuple(lib.input_shape)} per step but "
                         f"{model_path} takes {tuple(expected)}; was it built from this model?")


def keras_reference(model, xs: np.ndarray) -> np.ndarray:
    """Keras outputs for each step of ``xs`` (steps, 1, features...)."""
    from .streamify_keras import is_streaming

    if not is_streaming(model):
        return np.stack([np.asarray(model(x)) for x in xs])
    return keras_sequence_reference(model, np.swapaxes(xs, 0, 1))


def keras_sequence_reference(model, x: np.ndarray) -> np.ndarray:
    """What step t must return: Keras on the whole sequence x[:, :t+1].

    For a return_sequences output that is full[:, t]. For a last-output
    model, calling Keras once per prefix is slow (a retrace per length), so
    a twin whose recurrent layers return sequences gives every prefix at
    once; it is checked against true prefix calls at a few t and dropped
    for per-prefix calls if it disagrees.
    """
    full = np.asarray(model(x))
    if full.ndim == 3:
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


def _sequence_twin(model):
    """A copy of ``model`` whose last-output recurrent layers return sequences."""
    import keras

    def clone(layer):
        config = layer.get_config()
        if isinstance(layer, keras.layers.RNN):
            config["return_sequences"] = True
        return layer.__class__.from_config(config)

    twin = keras.models.clone_model(model, clone_function=clone)
    twin.set_weights(model.get_weights())
    return twin


class GraphReference:
    """TensorFlow running an original frozen graph / SavedModel on whole sequences."""

    def __init__(self, loaded, graph_options):
        from .load_graph import load_graph
        from .pipeline import GraphOptions
        from .streamify_graph import streamify_graph_model

        options = graph_options or GraphOptions()
        # The streamer's analysis says where the time axis is and whether
        # the sequence length is fixed in the graph.
        program = streamify_graph_model(loaded.path, loaded.format, options)
        self.report = program.report
        self.step_input = program.signature.inputs[0].shape
        self.step_output = program.signature.outputs[0].shape
        graph = load_graph(loaded.path, options.inputs, options.outputs, options.time_axis)
        self._run = _session_runner(graph)
        self.source = loaded.path

    @property
    def time_axis(self) -> int:
        return self.report["input"]["time_axis"]

    def check_library(self, lib, lib_dir) -> None:
        if tuple(self.step_input) != tuple(lib.input_shape):
            raise TfaotError(f"{lib_dir}: the library takes {tuple(lib.input_shape)} per step "
                             f"but {self.source} takes {tuple(self.step_input)}; was it built "
                             "from this model?")

    def steps(self, wanted: int) -> int:
        """The sequence length to test: a graph with a fixed length gets exactly that."""
        if self.report.get("stateless") or self.report.get("dynamic_time", True):
            return wanted
        return int(self.report["input"]["shape"][self.time_axis])

    def outputs(self, xs: np.ndarray) -> np.ndarray:
        """Reference per step; only the last step for fixed-length last-output graphs."""
        if self.report.get("stateless"):
            return np.stack([self._run(x) for x in xs])
        seq = np.moveaxis(xs, 0, self.time_axis)
        full = np.asarray(self._run(seq))
        if full.ndim == len(self.step_output) + 1:
            return self._per_step(full, len(xs))
        if not self.report.get("dynamic_time", True):
            return full[None]  # the graph only ever saw the whole fixed-length sequence
        return np.stack([self._run(np.take(seq, range(t + 1), axis=self.time_axis))
                         for t in range(len(xs))])

    def _per_step(self, full: np.ndarray, steps: int) -> np.ndarray:
        for axis in range(full.ndim):
            rest = full.shape[:axis] + full.shape[axis + 1:]
            if full.shape[axis] == steps and tuple(rest) == tuple(self.step_output):
                return np.moveaxis(full, axis, 0)
        raise TfaotError(f"{self.source}: cannot find the time axis of the output "
                         f"{full.shape} (step output {tuple(self.step_output)})")


def _session_runner(graph):
    """A function running the first output of a frozen graph in a TF1 session."""
    import tensorflow as tf

    g = tf.Graph()
    with g.as_default():
        tf.graph_util.import_graph_def(graph.graph_def, name="")
    session = tf.compat.v1.Session(graph=g)
    feed = f"{graph.inputs[0].name}:0"
    fetch = graph.outputs[0]
    return lambda x: session.run(fetch, {feed: x})
