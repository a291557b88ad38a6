"""Keras models quantized with ``model.quantize(mode)``: Keras 3's own int8
and float8 layers (compiler/lower/converts.py, verify's
QUANTIZED_MODE_TOLERANCE). IREE rounded f32 values just under float8's
smallest normal to zero (a float8 GRU model was off by 0.022 in 583 of
2400 values); and verify failed int8-quantized models whose library was
right but for an input value rounded onto the neighbouring int8 step."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from reference import compile_with_iree
from tfaot.cli import main
from tfaot.lower.converts import FLOAT8, float8_rounding

N = 4096


@pytest.mark.parametrize("element", sorted(FLOAT8))
def test_rounding_to_float8_is_ml_dtypes_rounding(element):
    """Every value around the subnormal range, the boundary to the smallest
    normal included, and ordinary ones, through IREE as the build lowers it
    (generic CPU: the conversion is software on every target)."""
    from iree.compiler import ir

    smallest_normal, step = FLOAT8[element]
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.uniform(-2 * smallest_normal, 2 * smallest_normal, N // 2),
                        rng.normal(size=N // 2 - 4) * 3, [0.0, -0.0, smallest_normal,
                                                          smallest_normal - step / 4]])
    x = x.astype(np.float32)
    text = f"""func.func @f(%x: tensor<{N}xf32>) -> tensor<{N}xf32> {{
  %a = stablehlo.convert %x : (tensor<{N}xf32>) -> tensor<{N}x{element}>
  %b = stablehlo.convert %a : (tensor<{N}x{element}>) -> tensor<{N}xf32>
  return %b : tensor<{N}xf32>
}}"""
    with ir.Context():
        module = ir.Module.parse(text)
        assert float8_rounding(module.body.operations[0]) == 1  # (not the way back)
        text = str(module)
    got = compile_with_iree(text, cpu="generic").f(x).to_host()
    want = x.astype(getattr(ml_dtypes, {"f8E4M3FN": "float8_e4m3fn",
                                         "f8E5M2": "float8_e5m2"}[element])).astype(np.float32)
    np.testing.assert_array_equal(got, want)


def _quantized(mode: str):
    import keras
    from keras import layers as L

    keras.utils.set_random_seed(0)
    x = keras.Input((None, 20), batch_size=1)
    h = L.GRU(32, return_sequences=True)(x)
    h = L.Dense(32, activation="relu")(h)
    model = keras.Model(x, L.Dense(6)(h))
    model.quantize(mode)
    return model


@pytest.mark.parametrize("mode", ["int8", "float8"])
def test_a_model_quantized_by_keras_streams_and_verifies(tmp_path, capsys, mode):
    from tfaot.verify.compare import QUANTIZED_MODE_TOLERANCE, compute_dtype_tolerance

    model = _quantized(mode)
    assert compute_dtype_tolerance(model) == QUANTIZED_MODE_TOLERANCE[mode]
    path = tmp_path / f"{mode}.keras"
    model.save(path)
    out = tmp_path / "lib"
    assert main(["-q", "build", str(path), "-o", str(out)]) == 0
    assert main(["verify", str(path), str(out), "--steps", "150"]) == 0
    assert ": ok" in capsys.readouterr().out
