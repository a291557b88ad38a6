"""tanh and logistic written out for Cortex-M, and erf for every target
(compiler/lower/activations.py):
the rewrite itself, its numbers through IREE against float64 numpy (every
float32 region, the clamp, infinities and NaN), and that bare-metal Arm
targets, and only they, take it. The model-level check (an LSTM/GRU built
for an M4 and an M7 against TensorFlow) is test_cross_targets.py."""
from __future__ import annotations

import numpy as np
import pytest

from reference import compile_with_iree
from tfaot.lower import activations
from tfaot.target_options import make_target

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


@pytest.fixture(scope="module")
def tables():
    text, count = activations.expand(MODULE, tables=True)
    assert count == 2 and "stablehlo.gather" in text and "stablehlo.divide" not in text
    return compile_with_iree(text, cpu="generic")


@pytest.mark.parametrize("name, exact, max_abs", [
    ("logistic", lambda x: 1 / (1 + np.exp(-x)), 5.4e-5),
    ("tanh", np.tanh, 1.1e-4),
])
def test_tables_within_their_bound(tables, name, exact, max_abs):
    """The table (--activations=table) over the same finite values, up to
    1e30 and beyond the table's range: within the bound the CLI's help
    states, and no closer than a table can be (the tables are what runs).
    An infinity gives NaN, as the int8 kernels do for inputs that are not
    finite (the table's flat end segments times u)."""
    x = _inputs()
    x[-1] = -np.inf  # beside the +inf of _inputs
    finite = np.isfinite(x)
    assert (~finite).sum() == 2
    with np.errstate(over="ignore"):
        want = exact(x.astype(np.float64))
    got = getattr(tables, name)(x).to_host().astype(np.float64)
    err = np.abs(got[finite] - want[finite])
    assert max_abs / 2 < err.max() <= max_abs, x[finite][np.argmax(err)]
    assert np.isnan(got[~finite]).all()


def test_tables_keep_nan(tables):
    x = np.zeros(N, np.float32)
    x[::3] = np.nan
    for name in ("logistic", "tanh"):
        got = getattr(tables, name)(x).to_host()
        assert np.isnan(got[::3]).all() and not np.isnan(got[1::3]).any(), name


def test_tables_on_any_shape():
    """A rank-2 and a rank-0 tensor: the gather's index vector is the last
    dimension of the index tensor it is given."""
    text = """    %1 = stablehlo.tanh %0 : tensor<1x64xf32>
    %2 = stablehlo.logistic %1 : tensor<f32>
"""
    out, count = activations.expand(text, tables=True)
    assert count == 2
    assert "index_vector_dim = 2" in out and "(tensor<256xf32>, tensor<1x64x1xi32>)" in out
    assert "index_vector_dim = 0" in out and "(tensor<256xf32>, tensor<1xi32>)" in out


def test_who_takes_the_tables():
    """int8 builds for bare-metal Arm by default, anything with
    --activations=table, nothing with --activations=exact."""
    m4 = ("cpu", "thumbv7em-none-eabihf", "cortex-m4")
    assert make_target(*m4, weights_dtype="int8").activation_tables
    assert not make_target(*m4).activation_tables
    assert not make_target(*m4, weights_dtype="int8", activations="exact").activation_tables
    assert make_target(*m4, activations="table").activation_tables
    host = ("cpu", None, "generic")  # (this machine's triple: its C compiler is there)
    assert not make_target(*host, weights_dtype="int8").activation_tables
    assert make_target(*host, activations="table").activation_tables


def test_table_build_through_the_so(tmp_path):
    """`tfaot build --activations=table` of an LSTM and a GRU for the host:
    the manifest says so, 150 steps through the .so stay within verify's
    default tolerance for such a library of TensorFlow, and differ from an
    exact build (the tables ran)."""
    import keras

    from tfaot import cli, harness
    from tfaot.verify.compare import default_tolerance

    keras.utils.set_random_seed(3)
    model = keras.Sequential([keras.Input((None, 12), batch_size=1),
                              keras.layers.LSTM(32, return_sequences=True),
                              keras.layers.GRU(24, return_sequences=True),
                              keras.layers.Dense(4, activation="sigmoid")])
    path = tmp_path / "gates.keras"
    model.save(path)
    xs = np.random.default_rng(0).standard_normal((150, 1, 12)).astype(np.float32)
    ref = model.predict(xs.reshape(1, 150, 12), verbose=0)[0]
    ys = {}
    for choice in ("table", "exact"):
        out = tmp_path / choice
        assert cli.main(["build", str(path), "-o", str(out), "-q", f"--activations={choice}"]) == 0
        lib = harness.load(out)
        assert lib.manifest["activations"] == choice
        ys[choice] = lib.step_n(xs).reshape(ref.shape)
    tol = default_tolerance(lib, model)
    assert tol == 1e-5
    table_error = float(np.max(np.abs(ys["table"] - ref)))
    assert 1e-6 < table_error <= default_tolerance(harness.load(tmp_path / "table"), model)
    np.testing.assert_allclose(ys["exact"], ref, rtol=0, atol=tol)


@pytest.mark.parametrize("rows, tables", [(2, False), (64, True)])
def test_int8_default_needs_int8_weights(rows, tables):
    """An int8 M4 build takes the tables only where a matrix took int8
    weights: with none (2 x 16 stays IREE's f32), its outputs are f32's and
    so are its activations."""
    from tfaot.lower.passes import lower_for_target

    w = np.random.default_rng(0).standard_normal((rows, 16)).astype("<f4")
    text = f"""module {{
  func.func @f(%x: tensor<16x1xf32>) -> tensor<{rows}x1xf32> {{
    %w = stablehlo.constant dense<"0x{w.tobytes().hex().upper()}"> : tensor<{rows}x16xf32>
    %y = stablehlo.dot %w, %x : (tensor<{rows}x16xf32>, tensor<16x1xf32>) -> tensor<{rows}x1xf32>
    %z = stablehlo.tanh %y : tensor<{rows}x1xf32>
    return %z : tensor<{rows}x1xf32>
  }}
}}
"""
    target = make_target("cpu", "thumbv7em-none-eabihf", "cortex-m4", weights_dtype="int8")
    lowered, decided = lower_for_target(text, "m", target)
    assert decided.activation_tables == tables
    assert ("stablehlo.gather" in lowered) == tables and "stablehlo.tanh" not in lowered


ERF_MODULE = f"""module {{
  func.func @erf(%x: tensor<{N}xf32>) -> tensor<{N}xf32> {{
    %y = stablehlo.custom_call @mhlo.erf(%x) {{mhlo.attributes = {{}}, mhlo.version = 1 : i64}} : (tensor<{N}xf32>) -> tensor<{N}xf32>
    return %y : tensor<{N}xf32>
  }}
}}
"""


def test_erf_matches_float64():
    """TensorFlow's Erf is a custom call IREE cannot compile: written out
    (every target), it is within 5e-7 of erf in float64 on every region,
    keeps NaN and is +-1 at the infinities."""
    import math

    text, count = activations.expand_erf(ERF_MODULE)
    assert count == 1 and "custom_call" not in text
    module = compile_with_iree(text, cpu="generic")
    x = _inputs()
    x[::97] = np.nan
    got = module.erf(x).to_host().astype(np.float64)
    finite = ~np.isnan(x)
    want = np.array([math.erf(v) for v in x[finite].astype(np.float64)])
    assert np.abs(got[finite] - want).max() <= 5e-7
    assert np.isnan(got[~finite]).all()


def test_erf_gelu_builds_and_matches_tensorflow(tmp_path):
    """The exact GELU as BERT-style graphs write it, 0.5 x (1 + erf(x / sqrt 2)),
    in a streamed model frozen into a graph, 120 steps through the .so:
    iree-compile refused its Erf. (Keras' own gelu writes Erfc, which
    TensorFlow's converter expands itself.)"""
    import keras
    import tensorflow as tf

    import graph_models as gm
    from tfaot import cli, harness

    keras.utils.set_random_seed(4)
    gelu = keras.layers.Lambda(lambda t: 0.5 * t * (1.0 + tf.math.erf(t * 0.7071067811865476)))
    model = keras.Sequential([keras.Input((None, 6), batch_size=1),
                              keras.layers.Dense(16), gelu,
                              keras.layers.GRU(8, return_sequences=True),
                              keras.layers.Dense(3)])
    path = tmp_path / "gelu.pb"
    path.write_bytes(gm.freeze_keras(model, None, 6, False).SerializeToString())
    out = tmp_path / "out"
    assert cli.main(["build", str(path), "-o", str(out), "-q"]) == 0
    xs = 2 * np.random.default_rng(1).standard_normal((120, 1, 6)).astype(np.float32)
    ref = model.predict(xs.reshape(1, 120, 6), verbose=0)[0]
    got = harness.load(out).step_n(xs).reshape(ref.shape)
    np.testing.assert_allclose(got, ref, rtol=0, atol=1e-5)


TAN_MODULE = f"""module {{
  func.func @tan(%x: tensor<{N}xf32>) -> tensor<{N}xf32> {{
    %y = stablehlo.tan %x : tensor<{N}xf32>
    return %y : tensor<{N}xf32>
  }}
}}
"""


def test_tan_matches_float64():
    """tan written out (every target: IREE's gave a non-finite value at
    float32(pi/2), whose tan is -2.3e7, and 2.8e-3 relative error near the
    poles): within 3 ulps of tan in float64 for |x| < 1e4, the floats next
    to the first poles included; NaN and the infinities give NaN."""
    text, count = activations.expand_tan(TAN_MODULE)
    assert count == 1 and "stablehlo.tan" not in text
    module = compile_with_iree(text, cpu="generic")
    rng = np.random.default_rng(0)
    poles = np.float32(np.pi / 2) * np.array([1, -1, 3, -3], np.float32)
    near = (poles[:, None] + np.arange(-300, 300) * np.spacing(poles)[:, None]).ravel()
    x = np.concatenate([rng.uniform(-10, 10, 1000), rng.uniform(-1e4, 1e4, 500),
                        np.geomspace(1e-30, 1e-3, 100), near, [0.0, np.nan, np.inf, -np.inf]])
    x = np.resize(x.astype(np.float32), N)
    got = module.tan(x).to_host().astype(np.float64)
    finite = np.isfinite(x)
    want = np.tan(x[finite].astype(np.float64))
    ulps = np.abs(got[finite] - want) / np.spacing(np.abs(want).astype(np.float32))
    assert ulps.max() <= 3.0, (ulps.max(), x[finite][np.argmax(ulps)])
    assert np.isnan(got[~finite]).all()


def test_a_table_build_without_tanh_or_sigmoid_says_so(tmp_path, capsys):
    """--activations=table on a model of ReLUs only: nothing to look up; the
    build said nothing and the manifest said "table"."""
    import keras

    from tfaot import cli, harness

    model = keras.Sequential([keras.Input((None, 4)), keras.layers.Conv1D(3, 2, activation="relu"),
                              keras.layers.Dense(2)])
    model.save(tmp_path / "relu.keras")
    assert cli.main(["build", str(tmp_path / "relu.keras"), "-o", str(tmp_path / "out"),
                     "--activations=table"]) == 0
    assert "no tanh or sigmoid to look up" in capsys.readouterr().err
    assert harness.load(tmp_path / "out").manifest["activations"] == "exact"
