"""Real FFTs IREE cannot compile, written out as matrix products
(compiler/lower/dft.py): lengths other than powers of two on every target,
and every length on the GPU targets, where IREE's own FFT lost its
bit-reversal table (a tf.signal.stft was refused on Vulkan). Against
numpy's FFT through IREE; an MFCC front end (tf.signal: stft, mel matrix,
log, DCT of 40 mel bins, an RFFT of 80) streamed into a dense layer, and a
spectral mask (RFFT, magnitude and phase, mask, IRFFT) through the built
library against TensorFlow: they were refused at load (and one of 32 bins
crashed).
"""
from __future__ import annotations

import numpy as np
import pytest

from reference import compile_with_iree
from toolchains import require_vulkan
from tfaot.cli import main
from tfaot.lower import dft


def _rfft_module(n: int, batch: str) -> str:
    bins = n // 2 + 1
    return f"""module {{
  func.func @fft(%x: tensor<{batch}{n}xf32>) -> (tensor<{batch}{bins}xf32>, tensor<{batch}{bins}xf32>) {{
    %y = stablehlo.fft %x, type = RFFT, length = [{n}] : (tensor<{batch}{n}xf32>) -> tensor<{batch}{bins}xcomplex<f32>>
    %re = stablehlo.real %y : (tensor<{batch}{bins}xcomplex<f32>>) -> tensor<{batch}{bins}xf32>
    %im = stablehlo.imag %y : (tensor<{batch}{bins}xcomplex<f32>>) -> tensor<{batch}{bins}xf32>
    return %re, %im : tensor<{batch}{bins}xf32>, tensor<{batch}{bins}xf32>
  }}
}}
"""


def _irfft_module(n: int, batch: str) -> str:
    bins = n // 2 + 1
    return f"""module {{
  func.func @fft(%re: tensor<{batch}{bins}xf32>, %im: tensor<{batch}{bins}xf32>) -> tensor<{batch}{n}xf32> {{
    %x = stablehlo.complex %re, %im : tensor<{batch}{bins}xcomplex<f32>>
    %y = stablehlo.fft %x, type = IRFFT, length = [{n}] : (tensor<{batch}{bins}xcomplex<f32>>) -> tensor<{batch}{n}xf32>
    return %y : tensor<{batch}{n}xf32>
  }}
}}
"""


# 40, 80: tf.signal.dct of 20 and 40 mel bins; 400: 25 ms at 16 kHz;
# 97: a prime (one product); 45, 100, 6: odd and small splits; 512 and 16:
# powers of two, written out for the GPU targets only.
@pytest.mark.parametrize("n, batch", [(40, "3x"), (45, "2x1x"), (80, "3x"), (97, ""),
                                      (100, "3x"), (400, "2x1x"), (6, "3x"), (16, ""),
                                      (512, "3x")])
def test_written_out_real_ffts_match_numpy(n, batch):
    all_lengths = dft.is_power_of_two(n)
    shape = [int(d) for d in batch.split("x") if d]
    rng = np.random.default_rng(n)
    bins = n // 2 + 1
    scale = 1.0 / np.sqrt(n)

    written, count = dft.expand_ffts(_rfft_module(n, batch), all_lengths=all_lengths)
    assert count == 1 and "stablehlo.fft" not in written
    x = rng.normal(size=shape + [n]).astype(np.float32)
    re, im = (r.to_host() for r in compile_with_iree(written, cpu="generic").fft(x))
    want = np.fft.rfft(x.astype(np.float64), axis=-1)
    np.testing.assert_allclose(re * scale, want.real * scale, rtol=0, atol=3e-6)
    np.testing.assert_allclose(im * scale, want.imag * scale, rtol=0, atol=3e-6)

    written, count = dft.expand_ffts(_irfft_module(n, batch), all_lengths=all_lengths)
    assert count == 1 and "stablehlo.fft" not in written
    # (the imaginary parts of the DC and Nyquist bins are ignored, as numpy
    # and TensorFlow do)
    spectrum = rng.normal(size=shape + [bins, 2]).astype(np.float32)
    got = compile_with_iree(written, cpu="generic").fft(spectrum[..., 0], spectrum[..., 1])
    want = np.fft.irfft(spectrum[..., 0] + 1j * spectrum[..., 1].astype(np.float64), n, axis=-1)
    np.testing.assert_allclose(got.to_host() / scale, want / scale, rtol=0, atol=3e-6)


def test_which_lengths_are_written_out():
    assert not dft.writes_out(64) and not dft.writes_out(2048)
    assert dft.writes_out(64, all_lengths=True) and dft.writes_out(65536, all_lengths=True)
    assert dft.writes_out(80) and dft.writes_out(1000) and dft.writes_out(1500)
    assert dft.writes_out(1021)          # a prime: the whole DFT matrix, 4.2 MB
    assert not dft.writes_out(1031)      # a prime past that
    assert dft.split(400) == (20, 20) and dft.split(1031) is None


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


@pytest.mark.parametrize("target, n", [("cpu", 400), ("vulkan", 512)])
def test_a_spectral_mask_streams_and_matches_tensorflow(tmp_path, capsys, target, n):
    """Frames -> RFFT -> magnitude and phase -> a mask from the magnitude ->
    IRFFT, the shape of a streaming denoiser (DTLN). 400: written out on
    every target; 512 on Vulkan: IREE's FFT was refused there."""
    import tensorflow as tf

    if target == "vulkan":
        require_vulkan()
    rng = np.random.default_rng(n)
    bins = n // 2 + 1
    w = tf.constant((rng.normal(size=(bins, bins)) / np.sqrt(bins)).astype(np.float32))

    class Denoiser(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([1, None, n], tf.float32, name="frames")])
        def __call__(self, frames):
            spectrum = tf.signal.rfft(frames)
            magnitude, phase = tf.abs(spectrum), tf.math.angle(spectrum)
            masked = magnitude * tf.sigmoid(tf.einsum("btf,fg->btg", magnitude, w))
            return {"clean": tf.signal.irfft(tf.complex(masked * tf.cos(phase),
                                                        masked * tf.sin(phase)))}

    model = Denoiser()
    path = tmp_path / "denoiser"
    tf.saved_model.save(model, str(path), signatures=model.__call__)
    out = tmp_path / "lib"
    assert main(["-q", "build", str(path), "-o", str(out), "--target", target]) == 0
    capsys.readouterr()
    assert main(["verify", str(path), str(out), "--steps", "120"]) == 0
    assert ": ok" in capsys.readouterr().out
