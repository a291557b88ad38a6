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
    xs = rng.normal(size=(steps, *lib.input_shape)).astype(np.float32)
    loaded = load_model(model_path)
    if loaded.keras_model is not None:
        _check_input_shape(loaded.keras_model, lib, model_path, lib_dir)
        want = keras_reference(loaded.keras_model, xs)
    else:
        want = graph_reference(loaded, xs, graph_options)
    got = np.stack([lib.step(x) for x in xs])
    if got.shape != want.shape:
        raise TfaotError(f"{lib_dir}: the library returns {got.shape[1:]} per step but "
                         f"{model_path} gives {want.shape[1:]}; was it built from this model?")
    error = float(np.abs(got.astype(np.float64) - want).max())
    name = lib.manifest["outputs"][0]["name"]
    return [VerifyResult(name, steps, error, tol)]


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


def graph_reference(loaded, xs: np.ndarray, graph_options) -> np.ndarray:
    try:
        from .streamify_graph import reference_outputs
    except ImportError:
        raise TfaotError(f"{loaded.path}: verifying {loaded.format} models is not "
                         "supported yet") from None
    return reference_outputs(loaded.path, loaded.format, xs, graph_options)
