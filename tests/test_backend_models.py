"""Backend end to end: hand-written step programs -> C library -> ctypes harness.

Every model is compared step by step with a numpy reference and with IREE's
own runtime running the same MLIR compiled the default way.
"""
from __future__ import annotations

import numpy as np
import pytest

import backend_models
from reference import compile_with_iree
from tfaot import harness

STEPS = 240
TOL = 1e-5


@pytest.fixture(scope="module", params=sorted(backend_models.ALL))
def model(request):
    return backend_models.built(request.param)


def _inputs(spec, n, seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n, *spec.input_shape)).astype(np.float32)


def _iree_reference(spec, xs):
    """The same MLIR through iree.runtime (default async model, local-sync)."""
    mod = compile_with_iree(spec.mlir, cpu="generic")
    return np.stack([mod.step(x).to_host().copy() for x in xs])


def test_manifest(model):
    spec, out, manifest = model
    assert manifest["name"] == spec.name
    assert manifest["inputs"] == [t.to_json() for t in spec.signature.inputs]
    assert manifest["outputs"] == [t.to_json() for t in spec.signature.outputs]
    assert [s["name"] for s in manifest["state"]] == [s.name for s in spec.signature.states]
    # the buffers: the pools' (a state's), and the direct step's temporaries
    assert manifest["ctx_size"] > manifest["arena_bytes"] + manifest["step_scratch_bytes"] > 0
    for f in manifest["files"]:
        assert (out / f).is_file(), f
    header = (out / f"{spec.name}.h").read_text()
    P = spec.name.upper()
    assert f"#define {P}_CTX_SIZE {manifest['ctx_size']}" in header
    assert f"#define {P}_INPUT0_SIZE {spec.signature.inputs[0].size}" in header
    assert 'extern "C"' in header


def test_matches_numpy_and_iree_runtime(model):
    spec, out, _ = model
    xs = _inputs(spec, STEPS)
    m = harness.load(out)
    ys = m.step_n(xs)
    ref = spec.reference(xs)
    assert ys.shape == ref.shape
    np.testing.assert_allclose(ys, ref, rtol=0, atol=TOL)
    np.testing.assert_allclose(ys, _iree_reference(spec, xs), rtol=0, atol=TOL)
    # step() one at a time gives the same numbers as step_n().
    m.init()
    ys1 = np.stack([m.step(x) for x in xs[:50]])
    np.testing.assert_array_equal(ys1, ys[:50])


def test_reset_restores_initial_behaviour(model):
    spec, out, _ = model
    xs = _inputs(spec, 60, seed=1)
    m = harness.load(out)
    first = m.step_n(xs[:30])
    m.step_n(xs[30:])
    m.reset()
    again = m.step_n(xs[:30])
    np.testing.assert_array_equal(first, again)


def test_two_contexts_are_independent(model):
    spec, out, _ = model
    xa, xb = _inputs(spec, 40, seed=2), _inputs(spec, 40, seed=3)
    alone_a = harness.load(out).step_n(xa)
    alone_b = harness.load(out).step_n(xb)
    a, b = harness.load(out), harness.load(out)
    ya, yb = [], []
    for t in range(40):
        ya.append(a.step(xa[t]))
        yb.append(b.step(xb[t]))
    np.testing.assert_array_equal(np.stack(ya), alone_a)
    np.testing.assert_array_equal(np.stack(yb), alone_b)


def test_harness_validates_inputs(model):
    spec, out, _ = model
    m = harness.load(out)
    from tfaot.errors import TfaotError

    with pytest.raises(TfaotError, match="shape"):
        m.step(np.zeros((2, *spec.input_shape), np.float32))
    with pytest.raises(TfaotError, match="dtype float64"):
        m.step(np.zeros(spec.input_shape, np.float64))
    with pytest.raises(TfaotError, match=r"\(n, "):
        m.step_n(np.zeros(spec.input_shape, np.float32))


def test_use_after_deinit_is_a_status_not_a_crash(model):
    spec, out, _ = model
    from tfaot.errors import TfaotError

    m = harness.load(out)
    m.close()
    with pytest.raises(TfaotError, match="status 2: context not initialized"):
        m.step(np.zeros(spec.input_shape, np.float32))
