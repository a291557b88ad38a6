"""A real FFT of a length IREE cannot compile (not a power of two), as two
matrix products (compiler/lower/dft.py): against numpy's FFT through IREE,
and an MFCC front end (tf.signal: stft, mel matrix, log, DCT of 40 mel
bins, an RFFT of 80) streamed into a dense layer, through the .so against
TensorFlow: it was refused at load (and one of 32 bins crashed).
"""
from __future__ import annotations

import numpy as np
import pytest

from reference import compile_with_iree
from tfaot.cli import main
from tfaot.lower import dft


@pytest.mark.parametrize("n", [40, 45, 80, 100])
def test_written_out_rfft_matches_numpy(n):
    bins = n // 2 + 1
    text = f"""module {{
  func.func @rfft(%x: tensor<3x{n}xf32>) -> (tensor<3x{bins}xf32>, tensor<3x{bins}xf32>) {{
    %y = stablehlo.fft %x, type = RFFT, length = [{n}] : (tensor<3x{n}xf32>) -> tensor<3x{bins}xcomplex<f32>>
    %re = stablehlo.real %y : (tensor<3x{bins}xcomplex<f32>>) -> tensor<3x{bins}xf32>
    %im = stablehlo.imag %y : (tensor<3x{bins}xcomplex<f32>>) -> tensor<3x{bins}xf32>
    return %re, %im : tensor<3x{bins}xf32>, tensor<3x{bins}xf32>
  }}
}}
"""
    written, count = dft.expand_rfft(text)
    assert count == 1 and "stablehlo.fft" not in written
    x = np.random.default_rng(n).normal(size=(3, n)).astype(np.float32)
    re, im = (r.to_host() for r in compile_with_iree(written, cpu="generic").rfft(x))
    want = np.fft.rfft(x.astype(np.float64), axis=-1)
    np.testing.assert_allclose(re, want.real, rtol=0, atol=2e-5)
    np.testing.assert_allclose(im, want.imag, rtol=0, atol=2e-5)


def test_powers_of_two_and_long_ones_stay_with_iree():
    assert not dft.writes_out(64) and not dft.writes_out(2048) and not dft.writes_out(1500)
    assert dft.writes_out(80) and dft.writes_out(1000)


@pytest.mark.parametrize("mel_bins", [40, 32])
def test_an_mfcc_front_end_streams_and_matches_tensorflow(tmp_path, capsys, mel_bins):
    """40 mel bins: a DCT by an RFFT of 80, written out; 32: of 64, IREE's,
    whose complex twiddle constant the slice folding crashed on (an
    internal error: lower/sliced_constants.py)."""
    import tensorflow as tf
    from tensorflow.python.framework.convert_to_constants import (
        convert_variables_to_constants_v2)

    rng = np.random.default_rng(0)
    mel = tf.signal.linear_to_mel_weight_matrix(mel_bins, 129, 16000, 20.0, 7600.0)
    w = tf.constant(rng.normal(size=(13, 8)).astype(np.float32) * 0.3)

    @tf.function(input_signature=[tf.TensorSpec([1, None], tf.float32, name="audio")])
    def step(audio):
        spectrum = tf.abs(tf.signal.stft(audio, 256, 128, 256))
        log_mel = tf.math.log(tf.tensordot(spectrum, mel, 1) + 1e-6)
        mfcc = tf.signal.mfccs_from_log_mel_spectrograms(log_mel)[..., :13]
        return tf.identity(tf.tanh(tf.einsum("btc,cd->btd", mfcc, w)), name="y")

    frozen = convert_variables_to_constants_v2(step.get_concrete_function())
    path = tmp_path / "mfcc.pb"
    path.write_bytes(frozen.graph.as_graph_def().SerializeToString())
    out = tmp_path / "lib"
    assert main(["-q", "build", str(path), "-o", str(out)]) == 0
    capsys.readouterr()
    assert main(["verify", str(path), str(out), "--steps", "120"]) == 0
    assert ": ok" in capsys.readouterr().out
