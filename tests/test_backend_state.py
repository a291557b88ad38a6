"""Firmware integration, C API level: state stitching (state_size, get_state,
set_state), the I/O hooks and the run loop, on the hand-written backend models."""
from __future__ import annotations

import ctypes
from pathlib import Path

import numpy as np
import pytest

import backend_models
from tfaot import harness
from tfaot.errors import TfaotError
from tfaot.program import ProgramSignature, TensorInfo
from util import run as _run

C_DIR = Path(__file__).parent / "data" / "backend" / "c"
#: the models with a state (not "stateless", whose state API has nothing to move)
MODELS = sorted(name for name in backend_models.ALL if name != "stateless")
WARN = ["-std=c11", "-Wall", "-Wextra", "-Werror", "-pedantic"]


def _inputs(spec, n, seed):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n, *spec.input_shape)).astype(np.float32)


@pytest.fixture(scope="module", params=MODELS)
def model(request):
    return backend_models.built(request.param)


def test_state_size_and_layout_in_header_and_manifest(model):
    spec, out, manifest = model
    sizes = [s.size * 4 for s in spec.signature.states]
    assert manifest["state_bytes"] == sum(sizes)
    assert manifest["state_offsets"] == [sum(sizes[:i]) for i in range(len(sizes))]
    header = (out / f"{spec.name}.h").read_text()
    P = spec.name.upper()
    assert f"#define {P}_STATE_BYTES {sum(sizes)}" in header
    assert f"#define {P}_STATE{len(sizes) - 1}_OFFSET {sum(sizes[:-1])}" in header
    assert harness.load(out).state_bytes == sum(sizes)


def test_get_state_is_the_reference_state_in_manifest_order(model):
    """Checks order and offsets: the states have different shapes in 'multi'."""
    spec, out, _ = model
    xs = _inputs(spec, 17, seed=4)
    m = harness.load(out)
    for got, want in zip(m.get_state(), spec.init_state()):
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)
    m.step_n(xs)
    state = spec.init_state()
    for x in xs:
        _, state = spec.step(x, state)
    for got, want in zip(m.get_state(), state):
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)


def test_restore_at_step_k_reruns_identically(model):
    spec, out, _ = model
    xs = _inputs(spec, 60, seed=5)
    m = harness.load(out)
    m.step_n(xs[:25])
    saved = m.get_state()
    first = m.step_n(xs[25:])
    m.set_state(saved)
    again = m.step_n(xs[25:])
    np.testing.assert_array_equal(first, again)
    # get_state does not disturb the state.
    m.set_state(saved)
    m.get_state()
    np.testing.assert_array_equal(m.step_n(xs[25:]), first)


def test_one_context_multiplexes_two_streams(model):
    """Swapping state in and out of one context == one context per stream."""
    spec, out, _ = model
    xa, xb = _inputs(spec, 30, seed=6), _inputs(spec, 30, seed=7)
    alone_a = harness.load(out).step_n(xa)
    alone_b = harness.load(out).step_n(xb)
    m = harness.load(out)
    m.reset()
    state_a = state_b = m.get_state()  # both streams start from the initial state
    ya, yb = [], []
    for t in range(30):
        m.set_state(state_a)
        ya.append(m.step(xa[t]))
        state_a = m.get_state()
        m.set_state(state_b)
        yb.append(m.step(xb[t]))
        state_b = m.get_state()
    np.testing.assert_array_equal(np.stack(ya), alone_a)
    np.testing.assert_array_equal(np.stack(yb), alone_b)


def test_set_state_reads_the_callers_buffer_at_any_alignment(model):
    """A one-stream CPU build hands set_state's buffer to the program as it
    is (no staging copy of the whole state in the context): from an address
    that is 1 mod 4, the steps after it are those after an aligned one."""
    spec, out, _ = model
    assert "state_copy" not in (out / "src" / f"{spec.name}.c").read_text()
    xs = _inputs(spec, 40, seed=8)
    m = harness.load(out)
    m.step_n(xs[:15])
    packed = m._states_to_bytes(m.get_state(), m.state_specs, "set_state", "")
    want = m.step_n(xs[15:])
    odd = np.zeros(packed.size + 1, np.uint8)
    odd[1:] = packed
    assert m._fn["set_state"](m._ctx, odd.ctypes.data + 1) == 0
    np.testing.assert_array_equal(m.step_n(xs[15:]), want)


def test_state_api_errors(model):
    spec, out, _ = model
    m = harness.load(out)
    with pytest.raises(TfaotError, match="set_state got 0 arrays"):
        m.set_state([])
    bad = [np.zeros((2, 2), np.float64)] + m.get_state()[1:]
    with pytest.raises(TfaotError, match=f"state '{spec.signature.states[0].name}' must be"):
        m.set_state(bad)
    lib = ctypes.CDLL(str(out / f"lib{spec.name}.so"))
    for fn in ("get_state", "set_state"):
        f = getattr(lib, f"{spec.name}_{fn}")
        f.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
        assert f(m._ctx, None) == 1          # NULL buffer: invalid argument
        assert f(None, ctypes.c_void_p(1)) == 1
    m.close()
    with pytest.raises(TfaotError, match="get_state failed with status 2"):
        m.get_state()


def test_model_without_state_has_empty_state(tmp_path):
    from tfaot.backend.build import build_library

    mlir = """module @twice {
  func.func @step(%x: tensor<1x3xf32>) -> tensor<1x3xf32> {
    %y = stablehlo.add %x, %x : tensor<1x3xf32>
    return %y : tensor<1x3xf32>
  }
}"""
    sig = ProgramSignature(inputs=(TensorInfo("x", "float32", (1, 3)),),
                           outputs=(TensorInfo("y", "float32", (1, 3)),), states=())
    manifest = build_library(mlir, sig, tmp_path / "out", name="twice", workdir=tmp_path / "w")
    assert manifest["state_bytes"] == 0
    m = harness.load(tmp_path / "out")
    assert m.state_bytes == 0 and m.get_state() == []
    m.set_state([])
    np.testing.assert_array_equal(m.step(np.ones((1, 3), np.float32)), 2 * np.ones((1, 3)))
    assert "#define TWICE_STATE_BYTES 0" in (tmp_path / "out" / "twice.h").read_text()


def test_state_without_get_set_functions_is_refused(tmp_path):
    from tfaot.backend.build import build_library

    raw = backend_models.accumulator()  # MLIR without @get_state/@set_state
    with pytest.raises(TfaotError, match="has 1 state tensors but the compiled program has no "
                                         "'get_state' function"):
        build_library(raw.mlir, raw.signature, tmp_path / "out", name="acc",
                      workdir=tmp_path / "w")


# ---------------------------------------------------------------------------
# I/O hooks and the run loop, from C.

def _hooks_program(name: str, out: Path, tmp_path: Path, source: str = "run_hooks.c") -> Path:
    exe = tmp_path / source.replace(".c", "")
    _run(["gcc", *WARN, "-O1", "-g", "-fsanitize=address,undefined", "-fno-sanitize-recover=all",
          f"-DTFAOT_MODEL={name}", f"-DTFAOT_UPPER={name.upper()}", f'-DTFAOT_HEADER="{name}.h"',
          "-I", out, C_DIR / source, out / f"lib{name}.a", "-lm", "-o", exe])
    return exe


def _outputs(stdout: str) -> tuple[np.ndarray, str]:
    lines = stdout.splitlines()
    rows = [[float(v) for v in ln.split()] for ln in lines[:-1]]
    return np.array(rows, np.float32), lines[-1]


@pytest.mark.parametrize("name", ["lstm", "multi"])
def test_run_loop_with_firmware_hooks_matches_harness(name, tmp_path):
    spec, out, _ = backend_models.built(name)
    xs = _inputs(spec, 40, seed=8)
    samples = tmp_path / "in.f32"
    xs.tofile(samples)
    expected = harness.load(out).step_n(xs).reshape(40, -1)
    exe = _hooks_program(name, out, tmp_path)

    ys, last = _outputs(_run([exe, samples]).stdout)
    assert last == "run=40"
    np.testing.assert_allclose(ys, expected, rtol=0, atol=1e-6)
    ys, last = _outputs(_run([exe, samples, 7]).stdout)           # max_steps
    assert last == "run=7" and len(ys) == 7
    ys, last = _outputs(_run([exe, samples, -1, "stop:3"]).stdout)  # write_output stops
    assert last == "run=3" and len(ys) == 3
    ys, last = _outputs(_run([exe, samples, -1, "fail:5"]).stdout)  # read_input fails
    assert last == "run=-11" and len(ys) == 5                      # -NAME_ERR_IO
    np.testing.assert_allclose(ys, expected[:5], rtol=0, atol=1e-6)


def test_default_hooks_end_the_run_with_no_hook(tmp_path):
    """Without the program's hooks the run ends with -NAME_ERR_NO_HOOK (18),
    not 0 steps, which passed for an empty input."""
    _, out, _ = backend_models.built("accumulator")
    exe = _hooks_program("accumulator", out, tmp_path, "default_hooks.c")
    assert _run([exe]).stdout.strip() == "run=-18"
