"""The examples beyond the host CPU, run as a user would, through their
Makefiles: examples/frozen_graph (a frozen TF1 graph with an audio front end,
cut at --inputs Mfcc), examples/aarch64 (the KWS model cross-built, run under
qemu-aarch64) and examples/vulkan (the KWS model with --target=vulkan, run on
lavapipe). Each program's outputs must match the host build's harness, and the
frozen graph's also TensorFlow running the whole graph from the WAV bytes."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

import toolchains
from test_examples import _stream_outputs, _tfaot, kws  # noqa: F401  (kws: module fixture)
from tfaot import harness
from util import run as _run

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
TOL_HOST = 1e-6  # the same library code on the same machine; %.9g prints float32 exactly
TOL = 1e-5  # other kernels (generic aarch64, SPIR-V) or TensorFlow: summation order, libm


def _make_run(example: str, build: Path, *args: str) -> np.ndarray:
    """`make run` in examples/EXAMPLE with BUILD=build; the program's output rows."""
    proc = _run(["make", "-C", EXAMPLES / example, "run", f"BUILD={build}",
                 f"TFAOT={' '.join(_tfaot())}", f"PYTHON={sys.executable}", *args])
    # make echoes its commands: keep the program's lines ("p0 p1 ... | frame t ...").
    rows = [ln for ln in proc.stdout.splitlines() if " | frame " in ln]
    assert rows, proc.stdout[-2000:] + proc.stderr[-2000:]
    return _stream_outputs("\n".join(rows))


def test_frozen_graph_cut_at_mfcc(tmp_path):
    """make_graph.py, `tfaot build kws_graph.pb --target=cpu --inputs Mfcc
    --outputs labels_softmax`, stream.c over the front end's MFCC frames of a
    1.5 s sound (148 steps): the same as the harness and as TensorFlow's whole
    graph from the WAV bytes; `make verify` (tfaot verify, 120 steps) passes."""
    toolchains.require("make")
    ys = _make_run("frozen_graph", tmp_path, "CFLAGS=-std=c11 -O2 -Wall -Wextra -Werror")
    lib = tmp_path / "kws_graph"
    manifest = json.loads((lib / "kws_graph.json").read_text())
    assert manifest["graph_cut"] == {"inputs": "Mfcc", "outputs": "labels_softmax"}
    assert [i["shape"] for i in manifest["inputs"]] == [[1, 10]]
    frames = np.fromfile(tmp_path / "frames.f32", np.float32).reshape(-1, 1, 10)
    assert ys.shape == (len(frames), 12) and len(frames) >= 100
    want = harness.load(lib).step_n(frames).reshape(len(frames), -1)
    np.testing.assert_allclose(ys, want, rtol=0, atol=TOL_HOST)
    tf_out = np.fromfile(tmp_path / "tf_out.f32", np.float32).reshape(-1, 12)
    np.testing.assert_allclose(ys, tf_out, rtol=0, atol=TOL)

    proc = _run(["make", "-C", EXAMPLES / "frozen_graph", "verify", f"BUILD={tmp_path}",
                 f"TFAOT={' '.join(_tfaot())}", f"PYTHON={sys.executable}"])
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("labels_softmax: ")]
    assert lines and "over 120 steps" in lines[0] and lines[0].endswith(": ok"), proc.stdout


def test_aarch64_linux_program_under_qemu(kws, tmp_path):
    """examples/aarch64: --triple aarch64-linux-gnu, ../kws/stream.c built
    with aarch64-linux-gnu-gcc -Werror, run under qemu-aarch64."""
    toolchains.require("aarch64-linux-gnu-gcc", "qemu-aarch64", "make")
    _, frames, expected, model = kws
    ys = _make_run("aarch64", tmp_path, f"MODEL={model}", f"FRAMES={frames}")
    np.testing.assert_allclose(ys, expected, rtol=0, atol=TOL)
    assert json.loads((tmp_path / "kws" / "kws.json").read_text())["triple"] == "aarch64-linux-gnu"
    assert "AArch64" in _run(["readelf", "-h", tmp_path / "stream"]).stdout


def test_vulkan_program(kws, tmp_path):
    """examples/vulkan: --target=vulkan, ../kws/stream.c linked with -ldl -lm
    (no -lvulkan), run on the first Vulkan device (lavapipe in CI)."""
    toolchains.require_vulkan()
    toolchains.require("make")
    _, frames, expected, model = kws
    ys = _make_run("vulkan", tmp_path, f"MODEL={model}", f"FRAMES={frames}")
    np.testing.assert_allclose(ys, expected, rtol=0, atol=TOL)
    assert json.loads((tmp_path / "kws" / "kws.json").read_text())["target"] == "vulkan"
    assert "libvulkan" not in _run(["readelf", "-d", tmp_path / "stream"]).stdout
