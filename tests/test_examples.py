"""The examples, run as a user would: build the KWS model with the tfaot
command, compile examples/kws/stream.c (Makefile and CMake, the latter via
tfaot_add_model) and run it on a file of frames, run harness_demo.py; every
output must match the harness (which tests/test_build_keras.py checks
against TensorFlow)."""
from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

import toolchains
from tfaot import harness
from util import run as _run

KWS = Path(__file__).resolve().parent.parent / "examples" / "kws"
FRAMES = 30
TOL = 1e-6


def _tfaot() -> list[str]:
    exe = Path(sys.executable).with_name("tfaot")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "tfaot"]


@pytest.fixture(scope="module")
def kws(tmp_path_factory):
    """(build folder, frames file, harness outputs, model file) of the KWS example."""
    root = tmp_path_factory.mktemp("kws")
    model = KWS / "kws.keras"
    if not model.exists():  # not in git: made by the example's own script
        model = root / "kws.keras"
        _run([sys.executable, KWS / "make_model.py", "-o", model])
    proc = _run([*_tfaot(), "build", model, "-o", root / "kws"])
    assert "tfaot: footprint: code " in proc.stderr
    frames = np.random.default_rng(3).normal(0, 0.5, (FRAMES, 1, 40)).astype(np.float32)
    frames.tofile(root / "frames.f32")
    expected = harness.load(root / "kws").step_n(frames).reshape(FRAMES, -1)
    return root / "kws", root / "frames.f32", expected, model


def _stream_outputs(stdout: str) -> np.ndarray:
    rows = [ln.split("|")[0].split() for ln in stdout.splitlines()]
    return np.array(rows, np.float32)


def test_stream_c_with_makefile(kws, tmp_path):
    build, frames, expected, model = kws
    if not shutil.which("make"):
        pytest.skip("needs make")
    for f in ("stream.c", "Makefile"):
        shutil.copy(KWS / f, tmp_path / f)
    shutil.copy2(model, tmp_path / "kws.keras")  # keeps its mtime: the library is newer
    _run(["make", "-C", tmp_path, f"KWS_DIR={build}", "CFLAGS=-std=c11 -O2 -Wall -Wextra -Werror"])
    proc = _run([tmp_path / "stream", frames])
    np.testing.assert_allclose(_stream_outputs(proc.stdout), expected, rtol=0, atol=TOL)
    assert proc.stdout.splitlines()[-1].endswith(f"frame {FRAMES - 1} keyword "
                                                 f"{int(expected[-1].argmax())}")
    assert f"{FRAMES} frames" in proc.stderr


def test_stream_c_with_cmake_tfaot_add_model(kws, tmp_path):
    """examples/kws/CMakeLists.txt: tfaot_add_model builds the model at build time."""
    toolchains.require("cmake")
    _, frames, expected, model = kws
    src = tmp_path / "src"
    src.mkdir()
    for f in ("stream.c", "CMakeLists.txt"):
        shutil.copy(KWS / f, src / f)
    shutil.copy(model, src / "kws.keras")
    tfaot = _tfaot()
    if len(tfaot) > 1:
        pytest.skip("needs the tfaot command installed next to the Python interpreter")
    _run(["cmake", "-S", src, "-B", tmp_path / "b", f"-DTFAOT_EXECUTABLE={tfaot[0]}"])
    _run(["cmake", "--build", tmp_path / "b"])
    assert (tmp_path / "b" / "tfaot" / "kws" / "libkws.a").is_file()
    proc = _run([tmp_path / "b" / "stream", frames])
    np.testing.assert_allclose(_stream_outputs(proc.stdout), expected, rtol=0, atol=TOL)
    # A second build is a no-op: the model is not rebuilt.
    again = _run(["cmake", "--build", tmp_path / "b"])
    assert "tfaot: building model" not in again.stdout


def test_harness_demo_script(kws):
    build, frames, expected, _ = kws
    proc = _run([sys.executable, KWS / "harness_demo.py", build, frames])
    final = [ln for ln in proc.stdout.splitlines() if ln.startswith("final:")][0]
    np.testing.assert_allclose(np.array(final.split()[1:], np.float32), expected[-1],
                               rtol=0, atol=TOL)
    assert "replay identical = True" in proc.stdout
    # Without a file it feeds a synthetic keyword.
    proc = _run([sys.executable, KWS / "harness_demo.py", build])
    assert "synthetic keyword" in proc.stdout and "replay identical = True" in proc.stdout


def test_two_keras_models_in_one_program(kws, tmp_path):
    """The KWS library and a second, different Keras-built library link into
    one program (symbols are prefixed, kernel query symbols renamed)."""
    import keras_models

    build, frames, expected, _ = kws
    keras_models.build("simple_rnn_last").save(tmp_path / "rnn.keras")
    _run([*_tfaot(), "-q", "build", tmp_path / "rnn.keras", "-o", tmp_path / "rnn"])
    rnn = harness.load(tmp_path / "rnn")
    xr = np.random.default_rng(4).normal(size=(FRAMES, *rnn.input_shape)).astype(np.float32)
    xr.tofile(tmp_path / "rnn.f32")
    expected_rnn = rnn.step_n(xr).reshape(FRAMES, -1)
    exe = tmp_path / "two"
    _run(["gcc", "-std=c11", "-Wall", "-Wextra", "-Werror", "-I", build, "-I", tmp_path / "rnn",
          Path(__file__).parent / "data" / "backend" / "c" / "two_keras.c", build / "libkws.a",
          tmp_path / "rnn" / "librnn.a", "-lm", "-o", exe])
    lines = _run([exe, frames, tmp_path / "rnn.f32"]).stdout.splitlines()
    got = {k: np.array([ln.split()[1:] for ln in lines if ln.startswith(k)], np.float32)
           for k in ("kws", "rnn")}
    np.testing.assert_allclose(got["kws"], expected, rtol=0, atol=TOL)
    np.testing.assert_allclose(got["rnn"], expected_rnn, rtol=0, atol=TOL)


@pytest.mark.parametrize("cpu", ["cortex-m4", pytest.param("cortex-m55", marks=pytest.mark.slow)])
def test_cortex_m_firmware_make_run(kws, cpu, tmp_path):
    """examples/cortex_m: `make run` builds the KWS model for a Cortex-M4
    (and, CPU=cortex-m55, an M55 on its own board), links the bare-metal
    firmware and runs it under qemu-system-arm; its outputs match the host
    library on the same frames (f32; the M4 build differs from the host's
    only in summation order and libm)."""
    toolchains.require("arm-none-eabi-gcc", "qemu-system-arm", "make")
    host, _, _, model = kws
    steps = 12
    proc = _run(["make", "-C", toolchains.FIRMWARE, "run", f"BUILD={tmp_path}",
                 f"TFAOT={' '.join(_tfaot())}", f"PYTHON={sys.executable}",
                 f"MODEL={model}", f"STEPS={steps}", f"CPU={cpu}"])
    # QEMU writes semihosting output to stderr; keep only the program's lines.
    text = proc.stdout + proc.stderr
    lines = [ln for ln in text.splitlines() if re.fullmatch(r"done|([0-9a-f]{8} )+", ln)]
    assert lines and lines[-1] == "done", text[-2000:]
    ys = np.array([[int(h, 16) for h in ln.split()] for ln in lines[:-1]], np.uint32)
    assert ys.shape[0] == steps
    frames = np.load(tmp_path / "frames.npy").reshape(steps, 1, -1)
    want = harness.load(host).step_n(frames).reshape(steps, -1)
    np.testing.assert_allclose(ys.view(np.float32), want, rtol=0, atol=1e-5)
