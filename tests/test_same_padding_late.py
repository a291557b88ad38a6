"""Convolutions with padding='same' in time stream, their output frames late.

At stride 1 a 'same' convolution is a zero pad before the stream (the ring
buffer's zeros) and a valid convolution; its output frame j reads input
frames up to j + after (streamify_keras/time_rules.same_in_time), so the
step returns frame j that many frames late: exactly Keras' frame j of the
whole sequence (was refused: "pads the time axis"). Checked through the
built library against Keras on the whole stream, shifted by the latency
the header states.
"""
from __future__ import annotations

import json
import re

import numpy as np
import pytest

from tfaot import harness
from tfaot.cli import main

STEPS = 140


def _crnn(dilation: int = 2):
    """A CRNN written the usual Keras way: Conv2D 'same' in time and
    frequency (a stride 2 in frequency), a (dilated) Conv1D 'same' with a
    residual sum, a GRU and a per-frame head: 1 + ``dilation`` frames late."""
    import keras
    from keras import layers as L

    keras.utils.set_random_seed(7)
    x = keras.Input((None, 12), batch_size=1)
    h = L.Reshape((-1, 12, 1))(x)
    h = L.Conv2D(6, (3, 3), strides=(1, 2), padding="same", activation="relu")(h)
    h = L.Reshape((-1, 6 * 6))(h)
    r = L.Conv1D(36, 3, padding="same", dilation_rate=dilation, activation="tanh")(h)
    h = L.GRU(8, return_sequences=True)(L.Add()([h, r]))
    return keras.Model(x, L.Dense(3)(h))


def _depthwise_even_kernel():
    """A DepthwiseConv1D 'same' of kernel 4 (1 frame padded before, 2 after)
    and a Conv1D 'same' of kernel 2 (0 before, 1 after): 3 frames late."""
    import keras
    from keras import layers as L

    keras.utils.set_random_seed(8)
    x = keras.Input((None, 5), batch_size=1)
    h = L.DepthwiseConv1D(4, padding="same", depth_multiplier=2)(x)
    h = L.Conv1D(4, 2, padding="same", activation="relu")(h)
    return keras.Model(x, L.Concatenate()([h, L.Dense(2)(x)]))


def _strided_front():
    """A keyword spotter's front written with 'same' and strides in time:
    Conv2D (10, 4) stride (2, 2), DepthwiseConv2D (3, 3), Conv1D(5) stride 2,
    all 'same' (4 frames a step), a GRU and a head: 3 output frames late."""
    import keras
    from keras import layers as L

    keras.utils.set_random_seed(5)
    x = keras.Input((None, 10), batch_size=1)
    h = L.Reshape((-1, 10, 1))(x)
    h = L.Conv2D(8, (10, 4), strides=(2, 2), padding="same", activation="relu")(h)
    h = L.DepthwiseConv2D((3, 3), padding="same", activation="relu")(h)
    h = L.Conv1D(8, 5, strides=2, padding="same")(L.Reshape((-1, 8 * 5))(h))
    return keras.Model(x, L.Dense(3)(L.GRU(6, return_sequences=True)(h)))


@pytest.mark.parametrize("make, latency", [(_crnn, 3), (_depthwise_even_kernel, 3),
                                           (_strided_front, 3)])
def test_same_padding_streams_late_and_matches_keras(make, latency, tmp_path, capsys):
    model = make()
    path, out = tmp_path / "m.keras", tmp_path / "m"
    model.save(path)
    assert main(["build", str(path), "-o", str(out)]) == 0
    assert f"late: output 0 {latency} frames" in capsys.readouterr().err
    manifest = json.loads(next(out.glob("*.json")).read_text())
    assert manifest["stream"]["output_latency"] == [latency]
    assert f"_OUTPUT0_LATENCY {latency}" in next(out.glob("*.h")).read_text()

    features = int(model.inputs[0].shape[-1])
    per_step = manifest["stream"]["frames_per_step"]
    xs = np.random.default_rng(0).normal(size=(1, STEPS * per_step, features))
    xs = xs.astype(np.float32)
    step_shape = manifest["inputs"][0]["shape"]  # (1, features) or (1, per_step, features)
    got = harness.load(out).step_n(xs.reshape(STEPS, *step_shape)).reshape(STEPS, -1)
    full = np.asarray(model(xs))[0]  # the last `latency` frames read the pad after
    assert got.shape == full.shape and len(got) == STEPS
    err = float(np.abs(got[latency:] - full[:-latency]).max())
    print(f"{make.__name__}: library vs Keras (frames {latency} late) {err:.3g} over "
          f"{STEPS - latency} steps")
    assert err <= 2e-5
    # one frame earlier or later is another sequence: the alignment is checked
    assert np.abs(got[latency + 1:] - full[:-latency - 1]).max() > 1e-2
    assert main(["verify", str(path), str(out), "--steps", "120"]) == 0
    assert re.search(r"over \d+ steps .*: ok", capsys.readouterr().out)


@pytest.mark.parametrize("head, words", [
    ("lstm", ["'rnn'", "returns its last output"]),
    # (Keras numbers the slice's name by the GetItems the process made before)
    ("slice", ["(GetItem) takes its input's last frame"])])
def test_a_last_output_after_same_padding_is_refused_clearly(head, words):
    """An LSTM's last output, or the last frame sliced off (keras-tcn's
    head: it was an internal error, an empty slice), over frames that come
    late has no streamed value equal to the model's on any prefix: refused,
    saying why."""
    import keras
    from keras import layers as L

    from tfaot.errors import TfaotError
    from tfaot.streamify_keras import streamify_keras

    x = keras.Input((None, 4), batch_size=1)
    h = L.Conv1D(4, 3, padding="same", name="conv")(x)
    model = keras.Model(x, L.LSTM(3, name="rnn")(h) if head == "lstm" else h[:, -1, :])
    with pytest.raises(TfaotError) as info:
        streamify_keras(model, "m.keras", "keras")
    message = str(info.value)
    for words in (*words, "last 1 frame read input frames still to come",
                  "padding='same' in time", "'causal' or 'valid'"):
        assert words in message, message


def test_same_padding_at_a_stride_off_whole_strides_is_refused():
    """TensorFlow's 'same' pad at a stride depends on the sequence's length:
    it streams where every prefix a step ends on is a whole number of strides
    (_strided_front); after a valid Conv1D of kernel 2 every prefix is odd."""
    import keras
    from keras import layers as L

    from tfaot.errors import TfaotError
    from tfaot.streamify_keras import streamify_keras

    x = keras.Input((None, 4), batch_size=1)
    h = L.Conv1D(4, 2)(x)
    model = keras.Model(x, L.Conv1D(4, 5, strides=2, padding="same", name="c2")(h))
    with pytest.raises(TfaotError, match=r"'c2'.*padding='same', kernel 5, stride 2"):
        streamify_keras(model, "m.keras", "keras")


def test_a_saved_model_with_same_padding_streams_late(tmp_path, capsys):
    """The CRNN as a SavedModel (the graph streamifier: SAME Conv2D nodes run
    as VALID ones on a window padded off time), verified against TensorFlow
    running the SavedModel (its dilated Conv1D is TensorFlow's
    SpaceToBatchND pair around a VALID conv, the pair's pad before in time
    the SAME one); its last-output twin is refused, not wrong."""
    model = _crnn()
    saved = tmp_path / "crnn_sm"
    model.export(str(saved), verbose=False)
    out = tmp_path / "crnn"
    assert main(["build", str(saved), "-o", str(out)]) == 0
    assert "late: output 0 3 frames" in capsys.readouterr().err
    assert main(["verify", str(saved), str(out), "--steps", "120"]) == 0
    assert re.search(r"over \d+ steps .*: ok", capsys.readouterr().out)

    import keras
    from keras import layers as L

    x = keras.Input((None, 4), batch_size=1)
    last = keras.Model(x, L.GRU(3)(L.Conv1D(4, 3, padding="same")(x)))
    last_saved = tmp_path / "last_sm"
    last.export(str(last_saved), verbose=False)
    assert main(["build", str(last_saved), "-o", str(tmp_path / "last")]) == 1
    err = capsys.readouterr().err
    assert "stacks the last output of a loop" in err and "padding='same' in time" in err
    assert not (tmp_path / "last").exists()


def test_a_fixed_window_with_same_padding_and_a_last_output_recomputes(tmp_path, capsys):
    """Over a fixed length, the refusal of the last output falls back to the
    exact sliding window, as 'same' padding did before it streamed late."""
    import keras
    from keras import layers as L

    keras.utils.set_random_seed(3)
    x = keras.Input((20, 6), batch_size=1)
    h = L.Reshape((20, 6, 1))(x)
    h = L.Reshape((20, 24))(L.Conv2D(4, (3, 3), padding="same", activation="relu")(h))
    path, out = tmp_path / "fixed.keras", tmp_path / "fixed"
    keras.Model(x, L.Dense(3)(L.GRU(5)(h))).save(path)
    assert main(["build", str(path), "-o", str(out)]) == 0
    assert "recomputing the whole window every step" in capsys.readouterr().err
    assert main(["verify", str(path), str(out), "--steps", "100"]) == 0
    assert capsys.readouterr().out.strip().endswith(": ok")


def test_a_saved_models_last_output_after_a_transposed_convolution_is_refused(tmp_path,
                                                                              capsys):
    """A Conv1DTranspose (stride 1: its last 2 frames are sums of frames to
    come) before a GRU's last output: the SavedModel built and was 1.14 off
    TensorFlow; now refused with the reason."""
    import keras
    from keras import layers as L

    keras.utils.set_random_seed(2)
    x = keras.Input((None, 6), batch_size=1)
    saved = tmp_path / "tr_last"
    keras.Model(x, L.GRU(5)(L.Conv1DTranspose(8, 3)(x))).export(str(saved), verbose=False)
    assert main(["build", str(saved), "-o", str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err
    assert "stacks the last output of a loop" in err and "last 2 frames" in err


def test_same_pooling_that_pads_nothing_in_time_keeps_its_padding_off_time():
    """MaxPooling2D((2, 2), 'same') over whole strides pads nothing in time
    but pads an odd frequency axis: it must run with its own padding (run as
    a valid one it gave 2 frequencies, not 3, and the Keras path failed)."""
    import keras
    from keras import layers as L

    from tfaot.streamify_keras import streamify_keras

    x = keras.Input((None, 5), batch_size=1)
    h = L.Conv2D(4, (3, 1), activation="relu")(L.Reshape((-1, 5, 1))(x))
    h = L.Reshape((-1, 3 * 4))(L.MaxPooling2D((2, 2), padding="same", name="pool")(h))
    model = keras.Model(x, L.Dense(2)(L.GRU(4, return_sequences=True)(h)))
    program = streamify_keras(model, "m.keras", "keras")
    assert program.stream.frames_per_step == 2
    rows = {row["name"]: row for row in program.report["layers"]}
    assert rows["pool"]["role"] == "time pool", rows["pool"]
