"""``tf.signal.stft`` / ``tf.signal.frame`` over a waveform of open length
(an audio model's front end in a SavedModel): streamed as a strided
convolution with the identity filter (streamify_graph/signal_frames.py),
which the step computes as a slice of its ring buffer
(lower/patch_copies.py). Built into a library and checked against
TensorFlow running the saved model over >= 100 steps."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tfaot.cli import main

STEPS = 110


def _stft_model(length: int, step: int):
    """Waveform (1, samples) -> STFT -> log power -> a mel-like matrix ->
    a projection, one row per frame."""
    import tensorflow as tf

    rng = np.random.default_rng(0)
    bins = length // 2 + 1
    mel = tf.constant(rng.random((bins, 12)).astype(np.float32) * 0.1)
    head = tf.constant(rng.normal(size=(12, 5)).astype(np.float32) * 0.3)

    class Front(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([1, None], tf.float32)])
        def __call__(self, wav):
            spectrum = tf.signal.stft(wav, frame_length=length, frame_step=step,
                                      fft_length=length)
            power = tf.matmul(tf.abs(spectrum) ** 2, mel)
            return tf.matmul(tf.math.log(power + 1e-3), head)

    return Front()


def _frames_model(length: int, step: int, pad_end: bool = False):
    """(1, samples, 3) -> tf.signal.frame along time -> each frame flattened
    and projected."""
    import tensorflow as tf

    w = tf.constant(np.random.default_rng(1).normal(size=(length * 3, 4)).astype(np.float32))

    class Frames(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([1, None, 3], tf.float32)])
        def __call__(self, x):
            frames = tf.signal.frame(x, length, step, axis=1, pad_end=pad_end)
            return tf.tanh(tf.matmul(tf.reshape(frames, [1, -1, length * 3]), w))

    return Frames()


def _built_and_verified(module, tmp_path: Path, tol: float) -> tuple[float, dict]:
    import tensorflow as tf

    from tfaot.pipeline import BuildOptions, Progress, build_model
    from tfaot.verify.compare import verify

    model, out = tmp_path / "sm", tmp_path / "lib"
    tf.saved_model.save(module, str(model))
    build_model(str(model), BuildOptions(out_dir=out), Progress(False))
    (result,) = verify(str(model), out, steps=STEPS, seed=0, tol=tol)
    assert result.steps >= 100 and result.mismatch is None, result
    return result.max_abs_error, json.loads((out / "sm.json").read_text())


@pytest.mark.parametrize("length, step", [(64, 24), (32, 32)])
def test_an_stft_front_end_streams(tmp_path, length, step):
    """Frames overlapping (64 every 24) and back to back (32 every 32); the
    STFT was refused ("computed from the sequence length"). The identity
    filter is not in the library: its weights are the mel matrix's and the
    head's, not length**2 more."""
    err, manifest = _built_and_verified(_stft_model(length, step), tmp_path, tol=1e-4)
    assert err < 1e-4
    assert manifest["inputs"][0]["shape"][-1] == step  # a step takes `step` new samples
    if length == 64:  # (IREE's RFFT of 32 takes a 4 KB table of its own)
        assert manifest["footprint"]["weight_bytes"] < length * length * 4, manifest["footprint"]


def test_a_keras_model_with_an_stft_lambda_exported_streams(tmp_path):
    """The usual route: a Keras model with tf.signal.stft in a Lambda before
    a GRU, exported as a SavedModel (model.export). The frame op sits behind
    the export's identities of the input and reads its shape outside its
    own scope."""
    import keras
    import tensorflow as tf
    from keras import layers as L

    from tfaot.pipeline import BuildOptions, Progress, build_model
    from tfaot.verify.compare import verify

    keras.utils.set_random_seed(0)
    x = keras.Input((None,), batch_size=1)
    s = L.Lambda(lambda w: tf.math.log(tf.abs(tf.signal.stft(w, 48, 16, 64)) + 1e-3))(x)
    h = L.GRU(8, return_sequences=True)(s)
    model, out = tmp_path / "sm", tmp_path / "lib"
    keras.Model(x, L.Dense(3)(h)).export(str(model), verbose=False)
    build_model(str(model), BuildOptions(out_dir=out), Progress(False))
    (result,) = verify(str(model), out, steps=STEPS, seed=0, tol=1e-5)
    assert result.steps >= 100 and result.mismatch is None, result


def test_frames_with_channels_and_gaps_stream(tmp_path):
    """Frames of 20 samples every 32 (samples between frames never used) of
    a 3-channel signal, along axis 1."""
    err, _ = _built_and_verified(_frames_model(20, 32), tmp_path, tol=1e-5)
    assert err < 1e-5


def test_frames_padded_at_the_end_are_refused_by_node(tmp_path, capsys):
    """pad_end=True frames the end of the sequence, which a stream never
    reaches: refused with the node named, as before."""
    import tensorflow as tf

    model = tmp_path / "sm"
    tf.saved_model.save(_frames_model(20, 8, pad_end=True), str(model))
    assert main(["build", str(model), "-o", str(tmp_path / "lib"), "-q"]) == 1
    err = capsys.readouterr().err
    assert "frame/" in err and "sequence length" in err, err
    assert not (tmp_path / "lib").exists()


def _conv_text(filters: np.ndarray, stride: int) -> str:
    taps = filters.shape[0]
    hexval = filters.astype("<f4").tobytes().hex().upper()
    return f"""
func.func @main(%x: tensor<1x{taps}x1x1xf32>) -> tensor<1x1x1x{taps}xf32> {{
  %w = stablehlo.constant dense<"0x{hexval}"> : tensor<{taps}x1x1x{taps}xf32>
  %y = stablehlo.convolution(%x, %w) dim_numbers = [b, 0, 1, f]x[0, 1, i, o]->[b, 0, 1, f],
    window = {{stride = [{stride}, 1], pad = [[0, 0], [0, 0]], rhs_dilate = [1, 1]}}
    {{batch_group_count = 1 : i64, feature_group_count = 1 : i64}}
    : (tensor<1x{taps}x1x1xf32>, tensor<{taps}x1x1x{taps}xf32>) -> tensor<1x1x1x{taps}xf32>
  return %y : tensor<1x1x1x{taps}xf32>
}}
"""


def test_only_a_filter_that_copies_its_patch_becomes_a_slice():
    """The identity filter over 8 taps is a slice; twice the identity, or
    the identity with its taps reversed, stays a convolution."""
    from tfaot.lower.patch_copies import copies_for_patch_filters

    eye = np.eye(8, dtype=np.float32)[:, None, None, :]
    text, count = copies_for_patch_filters(_conv_text(eye, 8))
    assert count == 1 and "stablehlo.convolution" not in text and "stablehlo.slice" in text
    for other in (2 * eye, eye[::-1]):
        assert copies_for_patch_filters(_conv_text(other, 8))[1] == 0
