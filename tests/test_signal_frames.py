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


def _yamnet_like(padded: bool = True, batched: bool = False):
    """YAMNet's signature in small: a waveform (None,) without a batch axis,
    padded at the end to whole patches (features.pad_waveform), an STFT,
    a log mel spectrogram, patches of 12 of its frames every 6
    (tf.signal.frame along axis 0, the patches a batch) and a small
    convolutional net per patch; outputs the scores, the embeddings and the
    spectrogram (6 of its frames a step: a step returns the last). ``batched``:
    the waveform comes as (1, None), its row taken."""
    import keras
    import tensorflow as tf
    from keras import layers as L

    keras.utils.set_random_seed(0)
    window, hop, patch, patch_hop = 64, 16, 12, 6
    patch_in = keras.Input((patch, 20))
    h = L.Reshape((patch, 20, 1))(patch_in)
    h = L.Conv2D(4, 3, strides=2, padding="same", activation="relu")(h)
    h = L.DepthwiseConv2D(3, padding="same", activation="relu")(h)
    emb = L.GlobalAveragePooling2D()(L.Conv2D(6, 1, activation="relu")(h))
    net = keras.Model(patch_in, [L.Dense(5, activation="sigmoid")(emb), emb])
    mel = tf.constant(np.random.default_rng(2).random((window // 2 + 1, 20)).astype(np.float32))

    def pad_waveform(wav):
        least = window - hop + patch * hop  # one patch
        n = tf.shape(wav)[0]
        padding = tf.maximum(0, least - n)
        after = tf.maximum(n, least) - least
        hops = tf.cast(tf.math.ceil(after / (patch_hop * hop)), tf.int32)
        padding += patch_hop * hop * hops - after
        return tf.pad(wav, [[0, padding]], mode="CONSTANT", constant_values=0.0)

    module = tf.Module()
    module.net = net

    @tf.function(input_signature=[tf.TensorSpec([1, None] if batched else [None], tf.float32)])
    def serve(waveform):
        wav = waveform[0] if batched else waveform
        wav = pad_waveform(wav) if padded else wav
        spectrum = tf.abs(tf.signal.stft(wav, frame_length=window, frame_step=hop))
        log_mel = tf.math.log(tf.matmul(spectrum, mel) + 1e-3)
        scores, embeddings = net(tf.signal.frame(log_mel, patch, patch_hop, axis=0))
        return {"scores": scores, "embeddings": embeddings, "spectrogram": log_mel}

    module.serve = serve
    return module, serve


def _built(module, tmp_path: Path, signatures=None) -> tuple[Path, Path]:
    import tensorflow as tf

    from tfaot.pipeline import BuildOptions, Progress, build_model

    model, out = tmp_path / "sm", tmp_path / "lib"
    tf.saved_model.save(module, str(model), signatures=signatures)
    build_model(str(model), BuildOptions(out_dir=out), Progress(False))
    return model, out


def _built_and_verified(module, tmp_path: Path, tol: float) -> tuple[float, dict]:
    from tfaot.verify.compare import verify

    model, out = _built(module, tmp_path)
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


def _padded_stft_waveform():
    """A waveform (None,) without a batch axis -> STFT with pad_end=True ->
    a projection of its magnitudes."""
    import tensorflow as tf

    w = tf.constant(np.random.default_rng(3).normal(size=(33, 4)).astype(np.float32))
    module = tf.Module()

    @tf.function(input_signature=[tf.TensorSpec([None], tf.float32)])
    def serve(wav):
        spectrum = tf.abs(tf.signal.stft(wav, 64, 24, pad_end=True))
        return {"y": tf.matmul(spectrum, w)}

    module.serve = serve
    return module, serve


@pytest.mark.parametrize("waveform", [False, True])
def test_frames_padded_at_the_end_stream_their_whole_frames(tmp_path, capsys, waveform):
    """pad_end=True goes on framing into zeros after the sequence's end, as
    many as its length asks for. A stream never ends: it gives the whole
    frames, says so naming the frame op's Pad, and verify's reference is the
    model's whole frames. (It was refused; a waveform (None,) was taken for
    a batch of scalars, a step framing one sample and zeros.)"""
    from tfaot.verify.compare import verify

    if waveform:
        module, serve = _padded_stft_waveform()
        model, out = _built(module, tmp_path, signatures={"serving_default": serve})
    else:
        model, out = _built(_frames_model(20, 8, pad_end=True), tmp_path)
    err = capsys.readouterr().err
    assert "frame/Pad" in err and "pads the sequence's end with zeros" in err, err
    manifest = json.loads((out / "sm.json").read_text())
    assert manifest["inputs"][0]["shape"] == ([24] if waveform else [1, 8, 3]), manifest
    assert manifest["stream"]["end_pads"][0].endswith("frame/PadV2"), manifest["stream"]
    (result,) = verify(str(model), out, steps=STEPS, seed=0, tol=None)
    assert result.ok and result.steps >= 100, result


@pytest.mark.parametrize("padded, batched", [(True, False), (False, False), (True, True)])
def test_a_yamnet_like_waveform_model_streams(tmp_path, capsys, padded, batched):
    """A waveform without a batch axis is time (it was taken for a batch and
    traced at one sample); both frame ops stream, the patches' net runs
    once a step (96 samples: 6 STFT hops); the end padding, computed from
    the length, is left out with a note, and verify's reference is the
    model without it; the STFT's identity filter is not in the library; the
    spectrogram, 6 frames a step, returns them all (it returned the last,
    with a warning)."""
    from tfaot.verify.compare import verify

    module, serve = _yamnet_like(padded, batched)
    model, out = _built(module, tmp_path, signatures={"serving_default": serve})
    assert "warning:" not in capsys.readouterr().err
    manifest = json.loads((out / "sm.json").read_text())
    assert manifest["inputs"][0]["shape"] == ([1, 96] if batched else [96])
    assert [o["shape"] for o in manifest["outputs"]] == [[6], [5], [6, 20]]
    assert manifest["stream"]["output_frames"] == [1, 1, 6]
    pads = manifest["stream"].get("end_pads", [])
    assert (len(pads) == 1 and pads[0].endswith("/Pad")) if padded else not pads, pads
    assert manifest["footprint"]["weight_bytes"] < 64 * 64 * 4, manifest["footprint"]
    results = verify(str(model), out, steps=STEPS, seed=0, tol=None)
    assert [r.output for r in results] == ["embeddings", "scores", "spectrogram"]
    for r in results:
        assert r.ok and r.steps >= 100, r


def test_a_batch_of_scalars_stays_a_batch(tmp_path):
    """An input (None,) that no frame op cuts is still a batch of one value
    each (a step is one inference on one value)."""
    import tensorflow as tf

    module = tf.Module()

    @tf.function(input_signature=[tf.TensorSpec([None], tf.float32)])
    def serve(x):
        return {"y": tf.tanh(2.0 * x + 1.0)}

    module.serve = serve
    _, out = _built(module, tmp_path, signatures={"serving_default": serve})
    manifest = json.loads((out / "sm.json").read_text())
    assert manifest["inputs"][0]["shape"] == [1] and manifest["stream"]["mode"] == "stateless"


def _conv_text(filters: np.ndarray, stride: int, positions: int = 1) -> str:
    taps = filters.shape[0]
    rows = taps + (positions - 1) * stride
    hexval = filters.astype("<f4").tobytes().hex().upper()
    return f"""
func.func @main(%x: tensor<1x{rows}x1x1xf32>) -> tensor<1x{positions}x1x{taps}xf32> {{
  %w = stablehlo.constant dense<"0x{hexval}"> : tensor<{taps}x1x1x{taps}xf32>
  %y = stablehlo.convolution(%x, %w) dim_numbers = [b, 0, 1, f]x[0, 1, i, o]->[b, 0, 1, f],
    window = {{stride = [{stride}, 1], pad = [[0, 0], [0, 0]], rhs_dilate = [1, 1]}}
    {{batch_group_count = 1 : i64, feature_group_count = 1 : i64}}
    : (tensor<1x{rows}x1x1xf32>, tensor<{taps}x1x1x{taps}xf32>) -> tensor<1x{positions}x1x{taps}xf32>
  return %y : tensor<1x{positions}x1x{taps}xf32>
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


def test_a_filter_copying_several_patches_becomes_slices_of_them():
    """Three output positions 5 rows apart (a step of several frames): a
    slice each, from rows 0, 5 and 10, concatenated."""
    from tfaot.lower.patch_copies import copies_for_patch_filters

    eye = np.eye(8, dtype=np.float32)[:, None, None, :]
    text, count = copies_for_patch_filters(_conv_text(eye, 5, positions=3))
    assert count == 1 and "stablehlo.convolution" not in text, text
    assert text.count("stablehlo.slice") == 3 and "stablehlo.concatenate" in text
    for start in (0, 5, 10):
        assert f"[0:1, {start}:{start + 8}, 0:1, 0:1]" in text, text
