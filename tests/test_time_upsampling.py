"""Models whose output runs faster than their steps stream: a decoder that
upsamples time (Conv1DTranspose with a stride in time, a learned
encoder/decoder's overlap-add as in Conv-TasNet; UpSampling1D/2D) returns
the step's n output frames, shape (1, n, ...), where it was refused
("upsamples the time axis"). Checked through the built library against
Keras on the whole stream."""
from __future__ import annotations

import json
import re

import numpy as np
import pytest
from util import module_from_source

from tfaot import harness
from tfaot.cli import main


def _build(model, tmp_path, name: str = "m"):
    path, out = tmp_path / f"{name}.keras", tmp_path / name
    model.save(path)
    assert main(["-q", "build", str(path), "-o", str(out), "--keep-temps"]) == 0
    return path, out


def _no_dilated_convolution(out):
    """The step's StableHLO has no convolution of an input dilated with
    zeros: a transposed convolution over time is a matrix product and an
    overlap-add (IREE's dilated convolution took 11 of a 12 us step)."""
    mlir = next((out / "temps").glob("*.mlir")).read_text()
    assert "lhs_dilate" not in mlir


def _verify(path, out, capsys) -> str:
    assert main(["verify", str(path), str(out), "--steps", "120"]) == 0
    return capsys.readouterr().out


def _manifest(out) -> dict:
    return json.loads(next(out.glob("*.json")).read_text())


def _tasnet(crop: bool = True):
    """Waveform -> Conv1D(16, 16, stride 8) encoder -> causal Conv1D -> GRU ->
    sigmoid mask -> Conv1DTranspose(1, 16, stride 8) decoder (overlap-add),
    cropped of the 8 samples it adds past the input's end."""
    import keras
    from keras import layers

    keras.utils.set_random_seed(3)
    x = keras.Input((None, 1))
    e = layers.Conv1D(16, 16, strides=8, activation="relu")(x)
    h = layers.Conv1D(16, 3, padding="causal", activation="relu")(e)
    h = layers.GRU(16, return_sequences=True)(h)
    mask = layers.Conv1D(16, 1, activation="sigmoid")(h)
    y = layers.Conv1DTranspose(1, 16, strides=8)(layers.Multiply()([e, mask]))
    return keras.Model(x, layers.Cropping1D((0, 8))(y) if crop else y)


def test_an_overlap_add_decoder_returns_its_samples_every_step(tmp_path, capsys):
    model = _tasnet()
    path, out = _build(model, tmp_path)
    manifest = _manifest(out)
    assert manifest["stream"]["frames_per_step"] == 8
    assert manifest["stream"]["output_frames"] == [8]
    assert manifest["outputs"][0]["shape"] == [1, 8, 1]
    assert "_OUTPUT0_FRAMES 8" in next(out.glob("*.h")).read_text()
    _no_dilated_convolution(out)
    steps = 150
    wave = np.random.default_rng(0).normal(size=(1, steps * 8, 1)).astype(np.float32)
    got = harness.load(out).step_n(wave.reshape(steps, 1, 8, 1)).reshape(steps * 8)
    full = np.asarray(model(wave))[0, :, 0]  # T - 8 samples: one step of latency
    assert full.shape == (steps * 8 - 8,)
    np.testing.assert_allclose(got[8:], full, rtol=0, atol=2e-5)
    assert "max abs error" in _verify(path, out, capsys)


def test_an_uncropped_decoder_returns_its_final_samples_late(tmp_path, capsys):
    """Without the crop, Keras' last 8 samples are sums of frames to come (it
    was refused); a step returns the newest final ones, 8 samples late."""
    model = _tasnet(crop=False)
    path, out = _build(model, tmp_path)
    stream = _manifest(out)["stream"]
    assert (stream["output_frames"], stream["output_latency"]) == ([8], [8])
    assert "_OUTPUT0_LATENCY 8" in next(out.glob("*.h")).read_text()
    steps = 120
    wave = np.random.default_rng(1).normal(size=(1, steps * 8, 1)).astype(np.float32)
    got = harness.load(out).step_n(wave.reshape(steps, 1, 8, 1)).reshape(steps * 8)
    full = np.asarray(model(wave))[0, :, 0]  # T samples, the last 8 not final
    np.testing.assert_allclose(got[8:], full[:-8], rtol=0, atol=2e-5)
    assert "max abs error" in _verify(path, out, capsys)


@pytest.mark.parametrize("kernel, stride, padding", [(4, 8, "valid"), (3, 3, "same"),
                                                      (3, 2, "same"), (5, 1, "valid")])
def test_transposed_convolutions_of_other_shapes(kernel, stride, padding, tmp_path, capsys):
    """A kernel shorter than the stride (the output frames no tap reaches
    are the bias's), 'same' padding where it crops nothing at the start
    (kernel <= stride + 1), stride 1 without a crop (4 frames late)."""
    import keras
    from keras import layers

    keras.utils.set_random_seed(kernel + stride)
    x = keras.Input((None, 6))
    h = layers.LSTM(8, return_sequences=True)(x)
    y = layers.Conv1DTranspose(3, kernel, strides=stride, padding=padding,
                               activation="tanh")(h)
    extra = max(kernel, stride) - stride if padding == "valid" else 0
    if extra and stride > 1:
        y = layers.Cropping1D((0, extra))(y)
    path, out = _build(keras.Model(x, y), tmp_path)
    assert _manifest(out)["stream"].get("output_frames", [1]) == [stride]
    assert _manifest(out)["stream"].get("output_latency", [0]) == [0 if stride > 1 else extra]
    assert "max abs error" in _verify(path, out, capsys)


def test_upsampling_layers_stream(tmp_path, capsys):
    """UpSampling1D after a stride 2 (a step of 2 frames returns 2), and a
    spectrogram decoder: Conv2D stride (2, 2), then UpSampling2D((1, 2))
    (frequency only: per step; refused before) and Conv2DTranspose with
    stride (2, 2) in time and frequency, cropped."""
    import keras
    from keras import layers

    keras.utils.set_random_seed(9)
    x = keras.Input((None, 8))
    u = layers.UpSampling1D(2)(layers.Conv1D(6, 3, strides=2)(x))
    path, out = _build(keras.Model(x, layers.Dense(4)(u)), tmp_path, "up1d")
    assert _manifest(out)["stream"]["output_frames"] == [2]
    assert "max abs error" in _verify(path, out, capsys)

    spec = keras.Input((None, 12, 1))
    h = layers.Conv2D(4, (2, 3), strides=(2, 2), padding="valid", activation="relu")(spec)
    h = layers.UpSampling2D((1, 2))(h)
    h = layers.Conv2DTranspose(2, (3, 2), strides=(2, 1), activation="relu")(h)
    h = layers.Cropping2D(((0, 1), (0, 0)))(h)
    path, out = _build(keras.Model(spec, h), tmp_path, "up2d")
    assert _manifest(out)["stream"]["output_frames"] == [2]
    assert "max abs error" in _verify(path, out, capsys)


def test_bilinear_upsampling_in_time_is_refused(tmp_path, capsys):
    import keras
    from keras import layers

    x = keras.Input((None, 4, 2))
    y = layers.UpSampling2D((2, 1), interpolation="bilinear")(x)
    path = tmp_path / "m.keras"
    keras.Model(x, y).save(path)
    assert main(["-q", "build", str(path), "-o", str(tmp_path / "lib")]) != 0
    assert "interpolates between frames in time" in capsys.readouterr().err


def test_graphs_return_every_frame_of_a_faster_output(tmp_path, capsys):
    """The same in a SavedModel: UpSampling1D is a Reshape of (1, T, 3, C)
    to (1, 3T, C) there (an upsampling of the frames), and a head at every
    frame beside a stride-2 branch returns its 2 frames a step (it
    returned the last one, with a warning)."""
    import keras
    from keras import layers

    keras.utils.set_random_seed(2)
    x = keras.Input((None, 8))
    up = layers.Dense(4)(layers.UpSampling1D(3)(layers.GRU(5, return_sequences=True)(x)))
    keras.Model(x, up).export(tmp_path / "up_sm", verbose=False)
    out = tmp_path / "up"
    assert main(["-q", "build", str(tmp_path / "up_sm"), "-o", str(out)]) == 0
    assert _manifest(out)["stream"]["output_frames"] == [3]
    assert "max abs error" in _verify(tmp_path / "up_sm", out, capsys)

    x = keras.Input((None, 6))
    fast = layers.Dense(2)(layers.Conv1D(8, 3, padding="causal")(x))
    slow = layers.Dense(3)(layers.Conv1D(8, 2, strides=2)(x))
    model = keras.Model(x, [fast, slow])
    model.export(tmp_path / "rates_sm", verbose=False)
    out = tmp_path / "rates"
    assert main(["-q", "build", str(tmp_path / "rates_sm"), "-o", str(out)]) == 0
    assert _manifest(out)["stream"]["output_frames"] == [2, 1]
    xs = np.random.default_rng(1).normal(size=(1, 60, 6)).astype(np.float32)
    got_fast, got_slow = harness.load(out).step_n(xs.reshape(30, 1, 2, 6))
    want_fast, want_slow = (np.asarray(y)[0] for y in model(xs))
    np.testing.assert_allclose(got_fast.reshape(60, 2), want_fast, rtol=0, atol=1e-5)
    np.testing.assert_allclose(got_slow.reshape(30, 3), want_slow, rtol=0, atol=1e-5)
    assert _verify(tmp_path / "rates_sm", out, capsys).count(": ok") == 2


def test_graph_transposed_convolution_and_overlap_add_stream(tmp_path, capsys):
    """In a SavedModel, a Conv1DTranspose is a Conv2DBackpropInput sized by
    the sequence's length (it was "not supported"), and
    ``tf.signal.overlap_and_add`` (a DTLN-style enhancer: frames of 64
    samples every 16, a product per frame, overlap-add back to a waveform)
    a pad, reshapes and a sum sized by it: both stream, 16 samples a step,
    the final ones (48 late for the overlap-add)."""
    import tensorflow as tf

    _tasnet(crop=False).export(tmp_path / "tasnet_sm", verbose=False)
    out = tmp_path / "tasnet"
    assert main(["-q", "build", str(tmp_path / "tasnet_sm"), "-o", str(out), "--keep-temps"]) == 0
    stream = _manifest(out)["stream"]
    assert (stream["output_frames"], stream["output_latency"]) == ([8], [8])
    _no_dilated_convolution(out)
    assert "max abs error" in _verify(tmp_path / "tasnet_sm", out, capsys)

    class Enhancer(tf.Module):
        def __init__(self):
            super().__init__()
            rng = np.random.default_rng(0)
            self.w = tf.constant(rng.normal(size=(64, 64)).astype(np.float32) / 8)

        @tf.function(input_signature=[tf.TensorSpec([1, None], tf.float32)])
        def __call__(self, x):
            window = tf.signal.hann_window(64)
            frames = tf.signal.frame(x, 64, 16) * window
            return tf.signal.overlap_and_add(tf.tanh(tf.matmul(frames, self.w)) * window, 16)

    enhancer = Enhancer()
    tf.saved_model.save(enhancer, str(tmp_path / "ola_sm"), signatures=enhancer.__call__)
    out = tmp_path / "ola"
    assert main(["-q", "build", str(tmp_path / "ola_sm"), "-o", str(out)]) == 0
    stream = _manifest(out)["stream"]
    assert (stream["frames_per_step"], stream["output_latency"]) == (16, [48])
    # (the overlap-add is added up, not multiplied by a 64 x 64 identity)
    header = next(out.glob("*.h")).read_text()
    assert int(re.search(r"_WEIGHT_BYTES (\d+)", header).group(1)) < 2 * 64 * 64 * 4
    steps = 100
    wave = np.random.default_rng(2).normal(size=(1, steps * 16)).astype(np.float32)
    got = harness.load(out).step_n(wave.reshape(steps, 1, 16)).reshape(steps * 16)
    full = enhancer(tf.constant(wave)).numpy()[0]  # every sample, the last 48 not final
    np.testing.assert_allclose(got[48:], full[:-48], rtol=0, atol=1e-5)
    assert "max abs error" in _verify(tmp_path / "ola_sm", out, capsys)


DTLN_LAYERS = '''
import keras
import tensorflow as tf

BLOCK, SHIFT = 64, 16


def stft(x):
    spectrum = tf.signal.rfft(tf.signal.frame(x, BLOCK, SHIFT))
    return [tf.abs(spectrum), tf.math.angle(spectrum)]


def ifft(parts):
    return tf.signal.irfft(tf.cast(parts[0], tf.complex64)
                           * tf.exp(1j * tf.cast(parts[1], tf.complex64)))


def overlap_add(frames):
    return tf.signal.overlap_and_add(frames, SHIFT)
'''


def test_a_dtln_style_keras_enhancer_streams(tmp_path, capsys):
    """DTLN's shape in Keras Lambdas: a waveform framed and rFFT'd, an LSTM's
    mask on the magnitudes, the inverse FFT, a learned Conv1D decoder and
    overlap-add back to samples: 16 samples in, 16 out a step (48 late)."""
    import keras
    from keras import layers

    source = tmp_path / "dtln_layers.py"
    user = module_from_source(source, DTLN_LAYERS, "dtln_layers")
    keras.utils.set_random_seed(4)
    x = keras.Input(batch_shape=(1, None))
    mag, phase = layers.Lambda(user.stft)(x)
    mask = layers.Dense(33, activation="sigmoid")(layers.LSTM(8, return_sequences=True)(mag))
    frames = layers.Lambda(user.ifft)([layers.Multiply()([mag, mask]), phase])
    decoded = layers.Conv1D(64, 1, use_bias=False)(frames)
    path, out = tmp_path / "dtln.keras", tmp_path / "lib"
    keras.Model(x, layers.Lambda(user.overlap_add)(decoded)).save(path)
    flags = ["--allow-lambda", "--custom-objects", str(source)]
    assert main(["-q", "build", str(path), "-o", str(out), *flags]) == 0
    stream = _manifest(out)["stream"]
    assert (stream["frames_per_step"], stream["output_frames"], stream["output_latency"]) == \
        (16, [16], [48])
    assert main(["verify", str(path), str(out), "--steps", "120", *flags]) == 0
    assert "max abs error" in capsys.readouterr().out
