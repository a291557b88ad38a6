"""Speed options stay correct: weight packing (Target.pack_weights) and the
matvec reduction split it brings (mlir_import.split_matvec_reductions).

Correctness only; speed is measured by bench/bench_litert.py.
"""
from __future__ import annotations

import numpy as np
import pytest

from reference import compile_with_iree
from tfaot.lower.mlir_import import _split_parts, split_matvec_reductions
from tfaot.target_options import make_target


def test_pack_weights_defaults_and_override():
    from dataclasses import replace

    assert make_target("cpu", "x86_64-unknown-linux-gnu", "generic").pack_weights
    assert make_target("cpu", "aarch64-linux-gnu", "generic").pack_weights
    m4 = make_target("cpu", "thumbv7em-none-eabihf", "cortex-m4")
    assert not m4.pack_weights
    assert "--iree-opt-const-expr-hoisting=false" in m4.iree_flags("k.o")
    assert "--iree-opt-data-tiling" not in m4.iree_flags("k.o")
    on = replace(m4, weight_packing=True)
    assert on.pack_weights and "--iree-opt-data-tiling" in on.iree_flags("k.o")
    off = replace(make_target("cpu"), weight_packing=False)
    assert not off.pack_weights
    assert "--iree-opt-const-expr-hoisting=false" in off.iree_flags("k.o")


@pytest.mark.parametrize("k,parts", [(8, 1), (32, 1), (40, 2), (128, 4), (512, 16),
                                     (37, 1), (96, 3)])
def test_split_parts(k, parts):
    assert _split_parts(k, 32) == parts


def _matvec_module(w: np.ndarray) -> str:
    n, k = w.shape
    hexval = w.astype("<f4").tobytes().hex().upper()
    return f"""module {{
  func.func @f(%x: tensor<{k}x1xf32>) -> tensor<{n}x1xf32> {{
    %w = stablehlo.constant dense<"0x{hexval}"> : tensor<{n}x{k}xf32>
    %y = stablehlo.dot %w, %x : (tensor<{n}x{k}xf32>, tensor<{k}x1xf32>) -> tensor<{n}x1xf32>
    return %y : tensor<{n}x1xf32>
  }}
}}
"""


def test_split_matvec_matches_numpy():
    rng = np.random.default_rng(3)
    w = rng.standard_normal((24, 96)).astype(np.float32)
    x = rng.standard_normal((96, 1)).astype(np.float32)
    text, count = split_matvec_reductions(_matvec_module(w))
    assert count == 1 and "stablehlo.dot_general" in text and "stablehlo.dot %" not in text
    y = compile_with_iree(text, cpu="generic").f(x).to_host()
    np.testing.assert_allclose(y, w.astype(np.float64) @ x, rtol=0, atol=1e-4)
    # deterministic: the same input gives the same text
    assert split_matvec_reductions(_matvec_module(w))[0] == text


def test_split_leaves_short_and_nonconstant_products():
    w = np.ones((4, 16), np.float32) * 0.5
    text = _matvec_module(np.arange(64, dtype=np.float32).reshape(4, 16))
    assert split_matvec_reductions(text) == (text, 0)
    assert split_matvec_reductions(_matvec_module(w))[1] == 0  # splat constant, short


@pytest.mark.parametrize("pack", [False, True])
def test_keras_lstm_gru_with_and_without_packing(tmp_path, pack):
    """A 2-layer LSTM and a GRU with long reductions, through the .so, vs TensorFlow."""
    import keras

    from tfaot import harness
    from tfaot.pipeline import BuildOptions, Progress, build_model

    keras.utils.set_random_seed(1)
    model = keras.Sequential([keras.Input((None, 40), batch_size=1),
                              keras.layers.LSTM(64, return_sequences=True),
                              keras.layers.GRU(96, return_sequences=True),
                              keras.layers.Dense(5)])
    path = tmp_path / "speedy.keras"
    model.save(path)
    out = build_model(str(path), BuildOptions(out_dir=tmp_path / "out", pack_weights=pack,
                                              keep_temps=True), Progress(enabled=False)).path
    cmd = (out / "temps" / "compile" / "iree-compile.cmd").read_text()
    assert ("--iree-opt-data-tiling" in cmd) == pack
    xs = np.random.default_rng(0).standard_normal((120, 1, 40)).astype(np.float32)
    ys = harness.load(out).step_n(xs)
    ref = model.predict(xs.reshape(1, 120, 40), verbose=0)[0]
    np.testing.assert_allclose(ys.reshape(ref.shape), ref, rtol=0, atol=1e-5)


def _transposed_conv_model(path):
    """A volume model whose 3-D transposed convolution iree-compile
    mishandles with weight packing on (its filter is lost: a null binding),
    with over PACK_WEIGHTS_MIN_BYTES of weights so that a Linux build packs
    by default. (tfaot makes transposed convolutions ordinary ones,
    lower/transposed_conv.py: the test leaves this one to IREE, as a model
    whose op no rewrite takes reaches it.)"""
    import keras

    keras.utils.set_random_seed(3)
    x = keras.Input((4, 8, 8, 8), batch_size=1)
    h = keras.layers.Conv3D(32, 3, padding="same", activation="relu")(x)
    h = keras.layers.Conv3D(32, 3, padding="same", activation="relu")(h)
    y = keras.layers.Conv3DTranspose(16, 2, strides=2, padding="same")(h)
    model = keras.Model(x, y)
    model.save(path)
    return model


def test_packing_that_loses_a_weight_builds_again_without(tmp_path, monkeypatch):
    """The default build notices the lost weight, says so and builds without
    packing: right outputs over 100 images through the .so; --pack-weights
    asked for explicitly is a one-line error that names the way out (with
    --keep-temps, its stages' files are kept beside the output folder)."""
    from tfaot import harness
    from tfaot.errors import TfaotError
    from tfaot.lower import transposed_conv
    from tfaot.pipeline import BuildOptions, Progress, build_model

    monkeypatch.setattr(transposed_conv, "dilated_inputs_as_phases", lambda text: (text, 0))
    path = tmp_path / "upsampler.keras"
    model = _transposed_conv_model(path)
    warnings = []
    progress = Progress(enabled=False)
    progress.warn = warnings.append
    whole = {"fixed_window": "whole", "keep_temps": True}  # one volume a step
    out = build_model(str(path), BuildOptions(out_dir=tmp_path / "out", **whole), progress).path
    assert any("without weight packing" in w for w in warnings), warnings
    cmd = (out / "temps" / "compile" / "iree-compile.cmd").read_text()
    assert "--iree-opt-data-tiling" not in cmd
    xs = np.random.default_rng(0).standard_normal((100, 1, 4, 8, 8, 8)).astype(np.float32)
    ys = harness.load(out).step_n(xs)
    ref = model.predict(xs.reshape(100, 4, 8, 8, 8), verbose=0)
    np.testing.assert_allclose(ys.reshape(ref.shape), ref, rtol=0, atol=1e-5)
    with pytest.raises(TfaotError, match="null buffer.*--no-pack-weights may avoid it.*"
                                         "--keep-temps: the stages' files are in "):
        build_model(str(path), BuildOptions(out_dir=tmp_path / "packed", pack_weights=True,
                                            **whole), Progress(enabled=False))
    assert not (tmp_path / "packed").exists()  # a failed build makes no output folder
    kept = tmp_path / "packed.failed-temps"
    assert (kept / "upsampler.mlir").is_file() and (kept / "compile" / "iree-compile.cmd").is_file()
