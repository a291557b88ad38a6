"""tanh and logistic written out for Cortex-M (compiler/lower/activations.py):
the rewrite itself, its numbers through IREE against float64 numpy (every
float32 region, the clamp, infinities and NaN), and that bare-metal Arm
targets, and only they, take it. The model-level check (an LSTM/GRU built
for an M4 and an M7 against TensorFlow) is test_cross_targets.py."""
from __future__ import annotations

import numpy as np
import pytest

from reference import compile_with_iree
from tfaot.lower import activations
from tfaot.target import make_target

N = 4096

MODULE = f"""module {{
  func.func @logistic(%x: tensor<{N}xf32>) -> tensor<{N}xf32> {{
    %y = stablehlo.logistic %x : tensor<{N}xf32>
    return %y : tensor<{N}xf32>
  }}
  func.func @tanh(%x: tensor<{N}xf32>) -> tensor<{N}xf32> {{
    %y = stablehlo.tanh %x : tensor<{N}xf32>
    return %y : tensor<{N}xf32>
  }}
}}
"""


def _inputs() -> np.ndarray:
    """Tiny, moderate, saturating and out-of-range values of both signs, the
    clamp's bound and its neighbours, infinities."""
    tiny = np.geomspace(1e-30, 1e-3, 400)
    mid = np.linspace(1e-3, 20, 2600)
    large = np.geomspace(20, 1e30, 200)
    edges = np.array([43.5, 87 / 2, 86.9, 87, 87.1, 88.8, np.inf, 0.0])
    pos = np.concatenate([tiny, mid, large, edges])
    x = np.concatenate([pos, -pos]).astype(np.float32)
    return np.resize(x, N)


@pytest.fixture(scope="module")
def expanded():
    text, count = activations.expand(MODULE)
    assert count == 2
    return compile_with_iree(text, cpu="generic")


@pytest.mark.parametrize("name, exact, max_abs, max_rel", [
    ("logistic", lambda x: 1 / (1 + np.exp(-x)), 1.2e-7, 2.5e-7),
    ("tanh", np.tanh, 2.4e-7, 2.5e-7),
])
def test_matches_float64(expanded, name, exact, max_abs, max_rel):
    x = _inputs()
    with np.errstate(over="ignore"):
        want = exact(x.astype(np.float64))
    got = getattr(expanded, name)(x).to_host().astype(np.float64)
    err = np.abs(got - want)
    assert err.max() <= max_abs, x[np.argmax(err)]
    # relative accuracy wherever the value is a normal float32 (tanh near
    # 0 included: e^2x - 1 is formed without cancelling 1 - 1)
    normal = np.abs(want) > 1e-37
    rel = err[normal] / np.abs(want[normal])
    assert rel.max() <= max_rel, x[normal][np.argmax(rel)]


def test_nan_stays_nan(expanded):
    x = np.zeros(N, np.float32)
    x[::3] = np.nan
    for name in ("logistic", "tanh"):
        got = getattr(expanded, name)(x).to_host()
        assert np.isnan(got[::3]).all() and not np.isnan(got[1::3]).any(), name


def test_rewrites_static_f32_only():
    text = """    %1 = stablehlo.tanh %0 : tensor<1x64xf32>
    %2 = stablehlo.logistic %1 : tensor<f32>
    %3 = stablehlo.tanh %0 : tensor<?x64xf32>
    %4 = stablehlo.logistic %0 : tensor<1x64xf16>
"""
    out, count = activations.expand(text)
    assert count == 2
    assert "stablehlo.tanh %0 : tensor<?x64xf32>" in out
    assert "stablehlo.logistic %0 : tensor<1x64xf16>" in out
    # the results keep their names, defined once, by the division
    assert out.count("%1 = stablehlo.divide") == 1 and out.count("%2 = stablehlo.divide") == 1
    assert "stablehlo.tanh %0 : tensor<1x64xf32>" not in out


def test_bare_metal_arm_takes_it():
    assert make_target("cpu", "thumbv7em-none-eabihf", "cortex-m4").expand_activations
    assert make_target("cpu", "thumbv8m.main-none-eabihf", "cortex-m33").expand_activations
    assert not make_target("cpu", "x86_64-unknown-linux-gnu", "generic").expand_activations
    assert not make_target("cpu", "aarch64-linux-gnu", "generic").expand_activations
