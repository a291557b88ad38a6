"""A step that takes one block a call and runs its recurrent layers over a
time axis of one frame it makes itself (DTLN's published real-time
SavedModel: a stateful tf_keras model on (1, 512) blocks, rFFT, LSTMs,
irFFT, Conv1D). Its loops run once a call: the step is one inference
(streamify_graph/single_pass.py) and the stateful layers' variables are its
state. It was refused ("makes a list along axis 0, but the time axis is 1").
"""
from __future__ import annotations

import json
import re

import numpy as np
import pytest

from tfaot import harness
from tfaot.cli import main

BLOCK = 32
STEPS = 120


def _block_model(stateful: bool):
    """DTLN's stateful shape, small: the block's spectrum given a time axis
    of 1, two LSTMs, a mask, the inverse FFT and a 1×1 Conv1D."""
    import tensorflow as tf
    import tf_keras

    L = tf_keras.layers
    tf.random.set_seed(4)
    block = L.Input(batch_shape=(1, BLOCK))
    mag, angle = L.Lambda(spectrum)(block)
    h = L.LSTM(8, return_sequences=True, stateful=stateful)(tf.math.log(mag + 1e-7))
    h = L.LSTM(8, return_sequences=True, stateful=stateful)(h)
    mask = L.Activation("sigmoid")(L.Dense(BLOCK // 2 + 1)(h))
    frames = L.Lambda(inverse)([L.Multiply()([mag, mask]), angle])
    return tf_keras.Model(block, L.Conv1D(BLOCK, 1, use_bias=False)(frames))


def spectrum(x):
    import tensorflow as tf

    s = tf.signal.rfft(tf.expand_dims(x, axis=1))
    return [tf.abs(s), tf.math.angle(s)]


def inverse(x):
    import tensorflow as tf

    return tf.signal.irfft(tf.cast(x[0], tf.complex64) *
                           tf.exp(1j * tf.cast(x[1], tf.complex64)))


def _called_per_block(path, blocks):
    """The SavedModel's signature called once a block (its variables
    carrying a stateful layer's state): the outputs, stacked. (Before the
    build: freezing it in this process leaves its functions unrunnable.)"""
    import tensorflow as tf

    step = tf.saved_model.load(str(path)).signatures["serving_default"]
    key = next(iter(step.structured_input_signature[1]))
    return np.stack([list(step(**{key: tf.constant(b)}).values())[0].numpy()
                     for b in blocks])


@pytest.mark.parametrize("stateful", [True, False], ids=["stateful", "stateless"])
def test_one_block_a_call_with_loops_run_once(tmp_path, stateful):
    """Stateful: the library keeps the LSTMs' state from call to call, from
    the values saved (the model ran before it was saved, so they are not
    zeros), and equals the SavedModel called once a block over 120 blocks.
    Not stateful: each call starts its loops from zeros, as TensorFlow's."""
    import tensorflow as tf

    model = _block_model(stateful)
    rng = np.random.default_rng(5)
    model(rng.normal(size=(1, BLOCK)).astype(np.float32))  # saved state not zeros
    tf.saved_model.save(model, str(tmp_path / "sm"))
    blocks = rng.normal(size=(STEPS, 1, BLOCK)).astype(np.float32)
    want = _called_per_block(tmp_path / "sm", blocks)
    out = tmp_path / "lib"
    assert main(["build", str(tmp_path / "sm"), "-o", str(out), "-q"]) == 0
    manifest = json.loads((out / "sm.json").read_text())
    assert len(manifest["state"]) == (4 if stateful else 0)  # h and c of two LSTMs
    for state in manifest["state"]:  # (named after its variable: which layer's state)
        assert re.fullmatch(r"tfaot_state/previous_v\d_lstm(_\d+)?_Variable_state",
                            state["name"]), state["name"]
    lib = harness.load(out)
    got = lib.step_n(blocks)
    err = float(np.abs(got.reshape(want.shape) - want).max())
    assert err <= 1e-5, err
    lib.reset()  # back to the saved state: the first block's output again
    first = lib.step_n(blocks[:1])
    np.testing.assert_allclose(first.reshape(want[0].shape), want[0], rtol=0, atol=1e-5)
    if stateful:  # (verify's reference steps the graph with the state pairs fed back)
        assert main(["verify", str(tmp_path / "sm"), str(out)]) == 0


def test_a_loop_over_more_than_one_frame_a_call_is_not_run_once(tmp_path, capsys):
    """A block cut into two frames inside the graph runs its LSTM twice a
    call: no single pass (that would drop a frame); refused by name."""
    import tensorflow as tf
    import tf_keras

    L = tf_keras.layers
    block = L.Input(batch_shape=(1, BLOCK))
    frames = L.Reshape((2, BLOCK // 2))(block)
    h = L.LSTM(4, stateful=True)(frames)
    tf.saved_model.save(tf_keras.Model(block, L.Dense(2)(h)), str(tmp_path / "sm"))
    assert main(["build", str(tmp_path / "sm"), "-o", str(tmp_path / "lib"), "-q"]) == 1
    err = capsys.readouterr().err
    assert "TensorListFromTensor" in err and "lstm" in err, err
    assert not (tmp_path / "lib").exists()


def test_a_stateful_keras_file_builds_from_its_graph(tmp_path, capsys):
    """The same model as a Keras 2 file: the Keras path refuses the spectrum's
    Lambda over time, and its traced graph could not be frozen (the
    stateful layers assign their variables): it was refused. Its graph now
    keeps those variables as the state, as the SavedModel's does, and the
    library equals the model called once a block (from zeros: an .h5 keeps
    no RNN state)."""
    model = _block_model(True)
    model.save(tmp_path / "st.h5")
    blocks = np.random.default_rng(6).normal(size=(STEPS, 1, BLOCK)).astype(np.float32)
    model.reset_states()
    want = np.stack([model(b).numpy() for b in blocks])
    out = tmp_path / "lib"
    assert main(["build", str(tmp_path / "st.h5"), "-o", str(out), "--allow-lambda"]) == 0
    assert "keeps the 4 variable(s) its call assigns" in capsys.readouterr().err
    got = harness.load(out).step_n(blocks)
    err = float(np.abs(got.reshape(want.shape) - want).max())
    assert err <= 1e-5, err
    assert main(["verify", str(tmp_path / "st.h5"), str(out), "--allow-lambda"]) == 0
