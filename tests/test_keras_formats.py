"""Keras file formats: .keras, Keras 3 .h5, Keras 2 .h5 (time_major shim)."""
from pathlib import Path

import numpy as np
import pytest

import keras_models
from reference import compile_with_iree, run_steps
from tfaot.errors import TfaotError
from tfaot.frontend.load import load_model
from tfaot.lower.mlir_import import import_program
from tfaot.streamify_keras import streamify_keras
from tfaot.verify import keras_sequence_reference

FIXTURES = Path(__file__).parent / "fixtures"


def _stream_file(path):
    loaded = load_model(path)
    program = streamify_keras(loaded.keras_model, str(path), loaded.format)
    return loaded, compile_with_iree(import_program(program))


@pytest.mark.parametrize("suffix,fmt", [(".keras", "keras"), (".h5", "h5")])
def test_keras3_files(tmp_path, suffix, fmt):
    model = keras_models.build("gru_reset_before_last")
    path = tmp_path / f"model{suffix}"
    model.save(path)
    loaded, module = _stream_file(path)
    assert loaded.format == fmt
    x = np.random.default_rng(1).normal(size=(1, 100, keras_models.F)).astype(np.float32)
    err = np.abs(run_steps(module, x) - keras_sequence_reference(model, x)).max()
    print(f"{suffix}: max abs error {err:.3g}")
    assert err <= 1e-5


def test_keras2_h5_against_keras2_outputs():
    """Reference outputs were written by Keras 2 itself (tests/fixtures)."""
    ref = np.load(FIXTURES / "keras2_lstm_gru_ref.npz")
    loaded, module = _stream_file(FIXTURES / "keras2_lstm_gru.h5")
    assert loaded.format == "h5"
    err = np.abs(run_steps(module, ref["x"]) - ref["y"]).max()
    print(f"keras2 .h5: max abs error {err:.3g}")
    assert err <= 1e-5


def test_format_detected_from_content(tmp_path):
    model = keras_models.build("simple_rnn_last")
    model.save(tmp_path / "m.keras")
    renamed = tmp_path / "m.bin"
    (tmp_path / "m.keras").rename(renamed)
    assert load_model(renamed).format == "keras"


@pytest.mark.parametrize("suffix", [".keras", ".h5"])
def test_keras_suffix_on_another_kind_of_file(tmp_path, suffix):
    """A .keras or .h5 file that is neither a zip archive nor HDF5 is named
    as such (it was taken for a GraphDef)."""
    path = tmp_path / f"m{suffix}"
    path.write_bytes(b"not a model at all\n" * 4)
    with pytest.raises(TfaotError, match=rf"m\{suffix}: not a Keras \{suffix} file"):
        load_model(path)


def test_unknown_custom_layer_is_named(tmp_path):
    """Keras names an unregistered class deep in its message; the error
    names it (not only Keras' generic first line)."""
    import keras

    class Doubler(keras.layers.Layer):  # not registered: the file holds its config only
        def call(self, x):
            return x * 2.0

    x = keras.Input((None, 3))
    keras.Model(x, Doubler(name="double_it")(x)).save(tmp_path / "custom.keras")
    with pytest.raises(TfaotError, match="the class 'Doubler', which Keras does not know"):
        load_model(tmp_path / "custom.keras")
