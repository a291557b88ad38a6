"""Keras models with a fixed time length: input (None, T, F), e.g. a keyword
spotter's (None, 49, 40). Keras runs them on exactly T steps, so verify
compares over T steps (fewer with --steps) and says so."""
import os
import re
import subprocess
import sys

import numpy as np
import pytest

import keras_models
from tfaot import harness
from tfaot.cli import main
from tfaot.verify import keras_sequence_reference

T = 12
LINE = r"y_t: max abs error \S+ over {} steps \(tolerance 1e-05\): ok"
SEQUENCES = (r"y_t: max abs error \S+ over {} steps in {} sequences of {} frames "
             r"\(tolerance 1e-05\): ok")


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("fixed_t")
    cache = {}

    def get(name, cli=False):
        if name not in cache:
            model = keras_models.build(name)
            path = root / f"{name}.keras"
            model.save(path)
            out = root / name
            if cli:
                _tfaot("build", path, "-o", out)
            else:
                assert main(["build", str(path), "-o", str(out)]) == 0
            cache[name] = (model, path, out)
        return cache[name]
    return get


def _tfaot(*args):
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    result = subprocess.run([sys.executable, "-m", "tfaot", *map(str, args)],
                            capture_output=True, text=True, env=env)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def test_cli_build_and_verify_fixed_t_functional(built, capsys):
    model, path, out = built("fixed_t_lstm_seq", cli=True)
    assert tuple(model.inputs[0].shape) == (None, T, 5)
    # Default --steps is 200: the model defines T steps from reset, so
    # sequences of T frames, each from a fresh init, cover them.
    sequences = -(-200 // T)
    assert re.fullmatch(SEQUENCES.format(sequences * T, sequences, T),
                        _tfaot("verify", path, out))
    assert main(["verify", str(path), str(out), "--steps", "5"]) == 0
    assert re.fullmatch(LINE.format(5), capsys.readouterr().out.strip())


def test_verify_fixed_t_last_output(built, capsys):
    model, path, out = built("fixed_t_lstm_last")
    assert main(["verify", str(path), str(out), "--steps", "200"]) == 0
    sequences = -(-200 // T)
    assert re.fullmatch(SEQUENCES.format(sequences * T, sequences, T),
                        capsys.readouterr().out.strip())
    assert main(["verify", str(path), str(out), "--steps", "7"]) == 0
    assert re.fullmatch(LINE.format(7), capsys.readouterr().out.strip())


@pytest.mark.parametrize("name", sorted(keras_models.FIXED_T))
def test_library_beyond_t_matches_open_time_twin(built, name):
    """Past T the stream goes on; the reference is an open-time twin (same
    layers and weights, input (None, None, F)), checked against the model on
    its own T steps."""
    model, _, out = built(name)
    x = np.random.default_rng(4).normal(size=(1, 3 * T, 5)).astype(np.float32)
    want = keras_sequence_reference(model, x)
    assert want.shape[0] == 3 * T
    full = np.asarray(model(x[:, :T]))
    at_t = want[:T] if full.ndim == 3 else want[T - 1]
    assert np.abs(at_t - (np.swapaxes(full, 0, 1) if full.ndim == 3 else full)).max() <= 1e-6
    got = harness.load(out).step_n(np.swapaxes(x, 0, 1))
    assert np.abs(got - want).max() <= 1e-5


def test_reshape_to_fixed_time_and_minus_one(tmp_path, capsys):
    """A CRNN with a fixed window writes Reshape((T', -1)) after its
    convolution (T' the convolution's output length): the -1 is one step's
    features, not a mix of time and features. 100 windows through the .so,
    each from a reset context, against the model on the same windows."""
    import keras
    from keras import layers

    keras.utils.set_random_seed(2)
    x = keras.Input((20, 8))
    h = layers.Reshape((20, 8, 1))(x)
    h = layers.Conv2D(4, (3, 3), activation="relu")(h)  # (18, 6, 4)
    h = layers.Reshape((18, -1))(h)
    model = keras.Model(x, layers.GRU(8)(h))
    path = tmp_path / "crnn.keras"
    model.save(path)
    assert main(["build", str(path), "-o", str(tmp_path / "out"), "-q"]) == 0
    lib = harness.load(tmp_path / "out")
    windows = np.random.default_rng(5).normal(size=(100, 20, 8)).astype(np.float32)
    got = []
    for window in windows:
        lib.reset()
        got.append(lib.step_n(window[:, None, :])[-1])
    want = model.predict(windows, verbose=0)
    assert np.abs(np.reshape(got, want.shape) - want).max() <= 1e-5
    # verify's open-time twin reshapes to (-1, 24): every step with an
    # output is compared, not only the 20th (18 of each 20-frame sequence,
    # in as many sequences as 200 steps take)
    assert main(["verify", str(path), str(tmp_path / "out")]) == 0
    assert re.fullmatch(SEQUENCES.format(12 * 18, 12, 20),
                        capsys.readouterr().out.strip().splitlines()[-1])


def _squeeze_excite(layers, x):
    h = layers.Conv1D(6, 3, activation="relu")(x)
    scale = layers.Dense(6, activation="sigmoid")(
        layers.GlobalAveragePooling1D(keepdims=True)(h))
    return layers.GlobalAveragePooling1D()(layers.Multiply()([h, scale]))


def _softmax_over_time(layers, x):
    h = layers.Dense(5)(x)
    return layers.Flatten()(layers.Softmax(axis=1)(h))


def _norm_over_time(layers, x):
    return layers.LayerNormalization(axis=1)(layers.GRU(6, return_sequences=True)(x))


def _lstm_then_flatten(layers, x):
    return layers.Dense(3)(layers.Flatten()(layers.LSTM(5, return_sequences=True)(x)))


def _gru_then_flattening_reshape(layers, x):
    return layers.Dense(3)(layers.Reshape((12 * 4,))(layers.GRU(4, return_sequences=True)(x)))


def _permute_time(layers, x):
    return layers.Dense(3)(layers.Flatten()(layers.Dense(5)(layers.Permute((2, 1))(x))))


def _prelu_per_position(layers, x):
    # a PReLU over a fixed window has an alpha per frame position unless
    # shared over time (it streamed as per-frame: verify failed by 2.1)
    return layers.GlobalAveragePooling1D()(layers.PReLU()(layers.Conv1D(5, 3)(x)))


@pytest.mark.parametrize("body, how", [(_squeeze_excite, "recomputing the whole window"),
                                       (_prelu_per_position, "recomputing the whole window"),
                                       (_softmax_over_time, "recomputing the whole window"),
                                       (_norm_over_time, "one whole inference per step"),
                                       (_lstm_then_flatten, "recomputing the whole window"),
                                       (_gru_then_flattening_reshape,
                                        "recomputing the whole window"),
                                       (_permute_time, "recomputing the whole window")])
def test_fixed_window_layers_across_time_fall_back(tmp_path, capsys, body, how):
    """Layers that work across the time axis (a squeeze-and-excitation
    block's pooled scale, a softmax or a normalization over time, a
    recurrent layer's sequence flattened, the time axis permuted) in models
    of a fixed window: built as the window recomputed, or one whole
    inference a step where time reaches the output, and checked by verify
    against TensorFlow; before, the build refused them."""
    import keras
    from keras import layers

    keras.utils.set_random_seed(4)
    x = keras.Input((12, 4))
    path = tmp_path / "m.keras"
    keras.Model(x, body(layers, x)).save(path)
    assert main(["build", str(path), "-o", str(tmp_path / "out")]) == 0
    assert how in capsys.readouterr().err
    assert main(["verify", str(path), str(tmp_path / "out"), "--steps", "120"]) == 0
    assert capsys.readouterr().out.strip().endswith("ok")


def test_whole_window_is_one_inference_per_step_for_recurrent_models_too():
    """--whole-window on a recurrent model of a fixed length: one whole
    inference per step, as asked (it streamed the recurrence regardless);
    an open time axis has no window: refused (a note said so, and the build
    gave a stream with exit 0, or with -q said nothing)."""
    import keras
    from keras import layers

    from tfaot.errors import TfaotError
    from tfaot.streamify_keras import stream_info

    keras.utils.set_random_seed(4)
    for length in (12, None):
        x = keras.Input((length, 4))
        model = keras.Model(x, layers.Dense(3)(layers.LSTM(5)(x)))
        assert stream_info(model).mode == "prefix"
        if length is not None:
            assert stream_info(model, fixed_window="whole").mode == "stateless"
            continue
        with pytest.raises(TfaotError, match="--whole-window needs a fixed length, and axis 1 "
                                             r"of input \(None, None, 4\) is open"):
            stream_info(model, fixed_window="whole")


def test_verify_says_when_tensorflow_cannot_run_the_model(tmp_path, capsys, monkeypatch):
    """A channels_first convolution builds (--whole-window; its numbers are
    right), but TensorFlow runs no NCHW convolution on some CPUs ("Conv2D op
    currently only supports the NHWC tensor format on the CPU"; an AVX-512
    machine's oneDNN build runs it): verify said "internal error ... this
    is a tfaot bug" (exit 2). Now the library matches TensorFlow on every
    CPU (where it cannot run the model, on its traced graph written
    channels-last: test_channels_first.py); where TensorFlow cannot run even
    that, one line saying so, exit 1. TensorFlow's error is raised for the
    check on every CPU."""
    import keras
    import tensorflow as tf
    from keras import layers as L

    from tfaot.cli import main
    from tfaot.verify import compare

    keras.utils.set_random_seed(0)
    x = keras.Input((8, 20))
    h = L.Permute((2, 1))(L.Conv1D(6, 3, data_format="channels_first")(x))
    model = keras.Model(x, L.GRU(4, return_sequences=True)(h))
    path = tmp_path / "cf.keras"
    model.save(path)
    out = tmp_path / "cf"
    assert main(["build", str(path), "-o", str(out), "-q", "--whole-window"]) == 0
    capsys.readouterr()
    assert main(["verify", str(path), str(out), "--steps", "20"]) == 0

    def unimplemented(*args, **kwargs):
        raise tf.errors.UnimplementedError(
            None, None, "The Conv2D op currently only supports the NHWC tensor format on the "
            "CPU. The op was given the format: NCHW {{node conv1d}}")

    monkeypatch.setattr(compare, "_make_case", unimplemented)
    capsys.readouterr()
    assert main(["verify", str(path), str(out), "--steps", "20"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("tfaot: error: ") and "\n" not in err, err
    assert "TensorFlow cannot run the model on this machine" in err
    assert "NHWC tensor format on the CPU" in err and "{{" not in err


def test_a_mask_into_a_bidirectional_window_falls_back(tmp_path, capsys):
    """Masking -> Bidirectional(LSTM) over a fixed window (refused: "receives
    a mask; tfaot streams masks into recurrent layers only"): the window is
    recomputed every step, or one whole inference a step with
    --whole-window, and both equal Keras on windows with masked (all-zero)
    frames, one of them the window's first."""
    import keras
    from keras import layers

    keras.utils.set_random_seed(4)
    x = keras.Input((12, 4))
    model = keras.Model(x, layers.Dense(2)(layers.Bidirectional(layers.LSTM(5))(
        layers.Masking(0.0)(x))))
    path = tmp_path / "m.keras"
    model.save(path)
    rng = np.random.default_rng(7)
    frames = rng.normal(size=(130, 4)).astype(np.float32)
    frames[rng.random(130) < 0.3] = 0.0
    frames[118] = 0.0  # the first frame of the last window
    windows = np.stack([frames[t - 11:t + 1] for t in range(11, 130)])
    want = np.asarray(model(windows))
    assert main(["build", str(path), "-o", str(tmp_path / "stream")]) == 0
    assert "recomputing the whole window" in capsys.readouterr().err
    got = harness.load(tmp_path / "stream").step_n(frames[:, None, :])
    np.testing.assert_allclose(np.asarray(got).reshape(130, 2)[11:], want, rtol=0, atol=1e-5)
    assert main(["build", str(path), "--whole-window", "-o", str(tmp_path / "whole")]) == 0
    got = harness.load(tmp_path / "whole").step_n(windows[:, None])
    np.testing.assert_allclose(np.asarray(got).reshape(-1, 2), want, rtol=0, atol=1e-5)


def test_a_causal_attention_window_builds_with_its_boolean_mask(tmp_path, capsys):
    """Causal MultiHeadAttention over a fixed window, as the refusal of an
    open-length one advises: on a Linux triple (weights packed by IREE's
    data tiling, 16 KiB of weights and more) iree-compile failed on the
    constant causal mask ("'linalg.pack' op expected padding_value has 'i8'
    but got: 'i1'"). Such a model is built without that packing."""
    import json

    import keras

    keras.utils.set_random_seed(2)
    x = keras.Input((8, 16))
    h = keras.layers.Dense(64)(x)
    y = keras.layers.MultiHeadAttention(num_heads=4, key_dim=16)(h, h, use_causal_mask=True)
    path = tmp_path / "attention.keras"
    keras.Model(x, y).save(path)
    out = tmp_path / "lib"
    assert main(["-q", "build", str(path), "-o", str(out)]) == 0
    assert json.loads((out / "attention.json").read_text())["pack_weights"] is False
    capsys.readouterr()
    assert main(["verify", str(path), str(out), "--steps", "120"]) == 0
    assert ": ok" in capsys.readouterr().out


def test_a_last_output_model_is_checked_at_every_sequence(tmp_path, capsys):
    """Normalization before an LSTM of fixed length, one output per sequence:
    the model gives no prefix of it, its open-time twin (its LSTM returning
    sequences) does. verify compared ceil(steps / T) steps (2 for 200);
    then, the twin's Normalization having lost its adapted statistics (no
    finalize_state after set_weights), one step per sequence (40 sequences
    for 40 steps); now every step of whole sequences, as for a model that
    returns sequences."""
    import re

    import keras

    from tfaot.cli import main

    keras.utils.set_random_seed(0)
    norm = keras.layers.Normalization()  # (adapted: its statistics broadcast (1, 1, 3))
    norm.adapt(np.random.default_rng(0).normal(3, 2, (20, 30, 3)).astype("float32"))
    x = keras.Input((30, 3))
    keras.Model(x, keras.layers.Dense(1)(keras.layers.LSTM(6)(norm(x)))).save(
        tmp_path / "m.keras")
    assert main(["build", str(tmp_path / "m.keras"), "-o", str(tmp_path / "lib"), "-q"]) == 0
    assert main(["verify", str(tmp_path / "m.keras"), str(tmp_path / "lib"),
                 "--steps", "40"]) == 0
    line = capsys.readouterr().out.strip()
    assert re.search(r"over 60 steps in 2 sequences of 30 frames", line) and \
        line.endswith(": ok"), line


@pytest.mark.parametrize("masking", ["Masking",
                                     pytest.param("Embedding(mask_zero)", marks=pytest.mark.slow)])
def test_a_masked_bidirectional_returning_sequences_equals_keras(tmp_path, capsys, masking):
    """The backward half of a masked Bidirectional returning sequences, run
    whole: Keras's unrolled loop (tfaot unrolls what it runs whole) zeroes
    the outputs of masked frames at their input-order positions while its
    outputs are reversed, so the library was off at masked frames and their
    mirrors (0.03, tf_keras files 0.2), where Keras's own loop is right.
    verify now puts the mask value into some frames of a Masking input."""
    import keras
    from keras import layers

    keras.utils.set_random_seed(4)
    rng = np.random.default_rng(7)
    if masking == "Masking":
        x = keras.Input((12, 4), batch_size=1)
        h = layers.Masking(0.0)(x)
        windows = rng.normal(size=(20, 12, 4)).astype(np.float32)
        windows[rng.random((20, 12)) < 0.3] = 0.0
    else:
        x = keras.Input((12,), batch_size=1, dtype="int32")
        h = layers.Embedding(30, 4, mask_zero=True)(x)
        windows = rng.integers(0, 30, size=(20, 12)).astype(np.int32)
        windows[rng.random((20, 12)) < 0.3] = 0
    y = layers.Bidirectional(layers.GRU(5, return_sequences=True))(h)
    model = keras.Model(x, layers.Dense(2)(y))
    path = tmp_path / "m.keras"
    model.save(path)
    want = np.concatenate([np.asarray(model(w[None])) for w in windows])
    assert main(["build", str(path), "-o", str(tmp_path / "lib"), "--quiet"]) == 0
    got = harness.load(tmp_path / "lib").step_n(windows[:, None])
    np.testing.assert_allclose(np.asarray(got).reshape(want.shape), want, rtol=0, atol=1e-5)
    capsys.readouterr()
    assert main(["verify", str(path), str(tmp_path / "lib")]) == 0
    assert capsys.readouterr().out.rstrip().endswith("ok")


def test_verify_puts_the_mask_value_into_frames_a_masking_layer_reads():
    """Random normal frames never equal a Masking layer's mask_value, so
    verify could not see a library mishandle masked frames: about an eighth
    of the frames of the input the layer reads take the value; the other
    input is left alone."""
    import keras
    from keras import layers

    from tfaot.verify.keras_reference import with_masked_frames

    a, b = keras.Input((None, 3)), keras.Input((None, 2))
    h = layers.LSTM(4)(layers.Masking(-1.0)(a))
    model = keras.Model([a, b], layers.Concatenate()([h, layers.GRU(2)(b)]))
    rng = np.random.default_rng(0)
    xs = [rng.normal(size=(400, 1, 3)), rng.normal(size=(400, 1, 2))]
    masked = with_masked_frames(model, xs, rng)
    frames = np.all(masked[0] == -1.0, axis=-1)
    assert 0.05 < frames.mean() < 0.2
    np.testing.assert_array_equal(masked[0][~frames], xs[0][~frames])
    np.testing.assert_array_equal(masked[1], xs[1])


def test_stream_asked_of_an_input_without_a_time_axis_says_why_it_runs_whole(tmp_path, capsys):
    """A raw (1, 64) waveform built with --stream runs one whole inference
    per step; the note gave "because asked with --stream" as the reason."""
    import keras
    from keras import layers

    x = keras.Input((64,), batch_size=1)
    h = layers.GlobalAveragePooling1D()(layers.Conv1D(4, 3)(layers.Reshape((64, 1))(x)))
    keras.Model(x, layers.Dense(2)(h)).save(tmp_path / "wave.keras")
    assert main(["build", str(tmp_path / "wave.keras"), "-o", str(tmp_path / "lib"),
                 "--stream"]) == 0
    err = capsys.readouterr().err
    assert "one whole inference per step, because --stream was asked, but input (1, 64) " \
           "has no time axis" in err, err


def test_stream_asked_of_a_window_whose_frames_all_reach_the_output_says_so(tmp_path, capsys):
    """Causal attention over a fixed window of 8 frames, an output per
    frame: one whole inference per step; with --stream the note did not say
    that the flag was overridden."""
    import keras
    from keras import layers

    x = keras.Input((8, 16))
    y = layers.MultiHeadAttention(2, 8, name="mha")(x, x, use_causal_mask=True)
    keras.Model(x, layers.Dense(4)(layers.Add()([x, y]))).save(tmp_path / "mha.keras")
    assert main(["build", str(tmp_path / "mha.keras"), "-o", str(tmp_path / "lib"),
                 "--stream"]) == 0
    err = capsys.readouterr().err
    assert "one whole inference per step, because --stream was asked, but layer 'mha'" in err
    assert "and the time axis reaches the output" in err, err


def test_a_forecast_as_long_as_the_window_is_not_taken_for_its_time_axis(tmp_path, capsys):
    """tensorflow.org's multi-step LSTM forecaster: 24 frames in, 24 steps
    of 19 features out (its last output reshaped). verify took the output's
    axis of 24 for the input's time axis and refused the library ("returns
    (1, 24, 19) per step but the model gives (1, 19)")."""
    import keras
    from keras import layers

    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((24, 19)), layers.LSTM(32),
                              layers.Dense(24 * 19), layers.Reshape([24, 19])])
    model.save(tmp_path / "forecast.keras")
    assert main(["build", str(tmp_path / "forecast.keras"), "-o", str(tmp_path / "lib"),
                 "-q"]) == 0
    assert main(["verify", str(tmp_path / "forecast.keras"), str(tmp_path / "lib"),
                 "--steps", "100"]) == 0
    assert capsys.readouterr().out.strip().endswith(": ok")
