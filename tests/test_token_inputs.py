"""Token ids (int32) into an embedding: through the built .so, against TensorFlow."""
import subprocess
import sys

import numpy as np
import pytest

import graph_models as gm
from tfaot import harness


def _token_graph(lower_control_flow: bool):
    """Keras Embedding(50, 8) -> GRU(6) -> Dense(3), frozen as a TF graph with int32 ids."""
    import keras
    import tensorflow as tf
    from tensorflow.python.framework.convert_to_constants import (
        convert_variables_to_constants_v2,
    )

    keras.utils.set_random_seed(6)
    model = keras.Sequential([keras.Input((None,), dtype="int32"), keras.layers.Embedding(50, 8),
                              keras.layers.GRU(6, return_sequences=True), keras.layers.Dense(3)])
    cf = tf.function(lambda v: model(v)).get_concrete_function(
        tf.TensorSpec((1, None), tf.int32, name="x"))
    return convert_variables_to_constants_v2(
        cf, lower_control_flow=lower_control_flow).graph.as_graph_def()


@pytest.mark.parametrize("lower_control_flow",
                         [False, pytest.param(True, marks=pytest.mark.slow)])
def test_int32_token_graph_builds_and_matches(lower_control_flow, tmp_path):
    gd = _token_graph(lower_control_flow)
    path = tmp_path / "tok.pb"
    path.write_bytes(gd.SerializeToString())
    out = tmp_path / "lib"
    proc = subprocess.run([sys.executable, "-m", "tfaot", "build", str(path), "-o", str(out),
                           "-q"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "int32_t" in (out / "tok.h").read_text()
    lib = harness.load(out)
    assert lib.input_dtype == np.int32 and tuple(lib.input_shape) == (1,)
    ids = np.random.default_rng(0).integers(0, 50, (1, 120)).astype(np.int32)
    want = gm.run_graph_def(gd, "x", "Identity:0", ids)[0]
    got = np.stack([lib.step(ids[:, t]) for t in range(ids.shape[1])])[:, 0]
    assert np.abs(got - want).max() <= 1e-5
    verify = subprocess.run([sys.executable, "-m", "tfaot", "verify", str(path), str(out),
                             "--steps", "100"], capture_output=True, text=True)
    assert verify.returncode == 0, verify.stdout + verify.stderr
    assert "over 100 steps" in verify.stdout


def test_keras_embedding_model_streams_token_ids(tmp_path):
    """Keras Embedding -> GRU(return_sequences) -> Dense: one int32 id per step."""
    import keras

    keras.utils.set_random_seed(3)
    model = keras.Sequential([keras.Input((None,), dtype="int32", batch_size=1),
                              keras.layers.Embedding(30, 8),
                              keras.layers.GRU(12, return_sequences=True),
                              keras.layers.Dense(4)])
    path = tmp_path / "ktok.keras"
    model.save(path)
    out = tmp_path / "lib"
    proc = subprocess.run([sys.executable, "-m", "tfaot", "build", str(path), "-o", str(out),
                           "-q"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    lib = harness.load(out)
    assert lib.input_dtype == np.int32 and tuple(lib.input_shape) == (1,)
    ids = np.random.default_rng(1).integers(0, 30, (1, 110)).astype(np.int32)
    want = np.asarray(model(ids))[0]
    got = np.stack([lib.step(ids[:, t]) for t in range(ids.shape[1])])[:, 0]
    assert np.abs(got - want).max() <= 1e-5
    verify = subprocess.run([sys.executable, "-m", "tfaot", "verify", str(path), str(out),
                             "--steps", "100"], capture_output=True, text=True)
    assert verify.returncode == 0, verify.stdout + verify.stderr


@pytest.mark.parametrize("head", ["embedding", "reshape"])
def test_a_float_value_per_frame_streams(tmp_path, head):
    """keras.Input((None,)) is float32 by default: ids into an Embedding as
    many tutorials write them, or one sample a frame reshaped to (T, 1) for
    a GRU. Both stream, one float a step (refused: "a recurrent model needs
    input (batch, time, features...)"), and equal Keras over 110 steps."""
    import keras

    keras.utils.set_random_seed(3)
    x = keras.Input((None,), batch_size=1)
    h = (keras.layers.Embedding(30, 6)(x) if head == "embedding"
         else keras.layers.Reshape((-1, 1))(x))
    model = keras.Model(x, keras.layers.Dense(2)(keras.layers.GRU(8, return_sequences=True)(h)))
    path, out = tmp_path / "f.keras", tmp_path / "lib"
    model.save(path)
    proc = subprocess.run([sys.executable, "-m", "tfaot", "build", str(path), "-o", str(out),
                           "-q"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    lib = harness.load(out)
    assert lib.input_dtype == np.float32 and tuple(lib.input_shape) == (1,)
    rng = np.random.default_rng(2)
    xs = (rng.integers(0, 30, (1, 110)) if head == "embedding"
          else rng.normal(size=(1, 110))).astype(np.float32)
    want = np.asarray(model(xs))[0]
    got = np.stack([lib.step(xs[:, t]) for t in range(xs.shape[1])])[:, 0]
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)


def test_a_one_token_step_streams_over_axis_1(tmp_path):
    """tensorflow.org's text generation OneStep: ids [1, 1] and the GRU's
    state in, logits and the state out. The time axis was guessed to be 0
    (the batch: "makes a list along axis 0, but the time axis is 1"); a
    (batch, time) id input now streams over axis 1, and the build asks for
    the state's pair."""
    import keras
    import tensorflow as tf

    from tfaot.errors import TfaotError
    from tfaot.frontend.load import load_model
    from tfaot.frontend.load_graph import GraphOptions
    from tfaot.streamify_graph import streamify_graph

    keras.utils.set_random_seed(2)

    class OneStep(tf.Module):
        def __init__(self):
            super().__init__()
            self.emb = keras.layers.Embedding(20, 4)
            self.gru = keras.layers.GRU(6, return_sequences=True, return_state=True)

        @tf.function(input_signature=[tf.TensorSpec([1, 1], tf.int32),
                                      tf.TensorSpec([1, 6], tf.float32)])
        def step(self, input_ids, states):
            x, states = self.gru(self.emb(input_ids), initial_state=states)
            return {"logits": x[:, -1, :], "states": states}

    module = OneStep()
    tf.saved_model.save(module, str(tmp_path / "onestep"),
                        signatures={"serving_default": module.step})
    with pytest.raises(TfaotError) as err:
        streamify_graph(load_model(tmp_path / "onestep").graph)
    assert "--state states=OUT" in str(err.value) and "axis 0" not in str(err.value), err.value
    program = streamify_graph(load_model(tmp_path / "onestep",
                                         GraphOptions(state="states=states")).graph)
    assert program.stream.time_axis == 1
