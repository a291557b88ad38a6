"""--weights-dtype=int8: matvecs with int8 weights (one scale per row) and an
input quantized to int8 at every call, summed in int32 (compiler/microkernel.py
quantize_int8 / pack_int8, runtime_shim/tfrt_matvec.c).

Checked here: the C kernel against numpy's model of the same arithmetic
(``microkernel.int8_matvec``: exact int32 sums, so only the final f32
scaling may differ), in its portable form and, where the CPU has AVX2, its
AVX2 form; the packing; a Keras LSTM + GRU through the .so against
TensorFlow over 120 steps (quantization error, bounded); the manifest and
the smaller read-only data; a convolution model whose convolutions keep f32
weights beside int8 matvecs; aarch64 under qemu, equal to the host build.
Speed and error against LiteRT's int8: bench/bench_litert.py.
"""
from __future__ import annotations

import ctypes
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

import toolchains
from test_microkernels import _keras_model
from tfaot import microkernel
from tfaot.resources import shim_dir
from util import run as _run

STEPS = 120
#: (n, k): one small tile, a 16-row tile with a row to spare, a last tile
#: of 1 row, odd k, an LSTM's [4u, in+u], and k over the kernel's 512-input chunk
SHAPES = [(12, 40), (16, 7), (33, 5), (80, 25), (512, 168), (96, 1030)]


def _has_avx2() -> bool:
    try:
        return " avx2 " in f" {Path('/proc/cpuinfo').read_text()} ".replace("\n", " ")
    except OSError:
        return False


def _kernel(tmp_path: Path, flags: list[str]) -> ctypes.CDLL:
    lib = tmp_path / "mv8.so"
    _run(["gcc", "-std=c11", "-O3", "-shared", "-fPIC", "-Wall", "-Wextra", "-Werror",
          "-DTFRT_MATVEC_INT8", "-DTFRT_MATVEC_FN=mv8", *flags, shim_dir() / "tfrt_matvec.c",
          "-o", lib])
    return ctypes.CDLL(str(lib))


def _call(lib, w: np.ndarray, x: np.ndarray) -> np.ndarray:
    blob = microkernel.pack_int8(w)
    buf = np.zeros(len(blob) + 64, np.uint8)  # the kernel object keeps it 64-byte aligned
    start = (-buf.ctypes.data) % 64
    buf[start:start + len(blob)] = blob
    y = np.zeros(len(w), np.float32)
    p, n = ctypes.c_void_p, ctypes.c_size_t
    lib.mv8(p(buf.ctypes.data + start), p(x.ctypes.data), n(0), p(y.ctypes.data), n(0),
            n(w.shape[0]), n(w.shape[1]))
    return y


def _variants() -> dict[str, list[str]]:
    """Kernel variant -> gcc flags: the portable C and (x86-64) the AVX2 one."""
    import platform

    out = {"portable": ["-march=x86-64"] if platform.machine() == "x86_64" else []}
    if platform.machine() == "x86_64":
        out["avx2"] = ["-mavx2", "-mfma"]
    return out


@pytest.mark.parametrize("variant", ["portable", "avx2"])
def test_kernel_matches_the_arithmetic(variant, tmp_path):
    flags = _variants().get(variant)
    if flags is None or (variant == "avx2" and not _has_avx2()):
        pytest.skip(f"{variant} kernel needs an x86-64 CPU with AVX2")
    lib = _kernel(tmp_path, flags)
    rng = np.random.default_rng(0)
    for n, k in SHAPES:
        w = (rng.standard_normal((n, k)) * 0.3).astype(np.float32)
        w[n // 2] = 0  # an all-zero row: scale 0
        x = rng.standard_normal(k).astype(np.float32)
        want = microkernel.int8_matvec(w, x)
        got = _call(lib, w, x)
        np.testing.assert_allclose(got, want, rtol=2e-6, atol=2e-6 * float(np.abs(want).max()),
                                   err_msg=f"{n}x{k}")
        # and it is W x up to the quantization: 1/127 of the largest terms
        exact = w.astype(np.float64) @ x
        bound = (np.abs(w).sum(1) * np.abs(x).max() + np.abs(w).max(1) * np.abs(x).sum()) / 127
        assert np.all(np.abs(got - exact) <= bound + 1e-6), f"{n}x{k}"
    w = rng.standard_normal((20, 9)).astype(np.float32)
    assert not _call(lib, w, np.zeros(9, np.float32)).any()
    x = np.ones(9, np.float32)
    x[4] = np.nan
    assert np.isnan(_call(lib, w, x)).all()
    x[4] = np.inf
    assert np.isnan(_call(lib, w, x)).all()


def test_packing():
    w = np.arange(-40, 40, dtype=np.float32).reshape(20, 4)[:, :3] / 10  # 20 x 3
    q, scale = microkernel.quantize_int8(w)
    assert q.dtype == np.int8 and np.abs(q).max() == 127
    np.testing.assert_allclose(q * scale[:, None], w, atol=float(scale.max()) / 2 + 1e-7)
    blob = microkernel.pack_int8(w)
    tile, tiles, k4 = microkernel.matvec_tile(20), 1, 4  # 20 rows: one 32-wide tile
    assert tile == 32
    assert len(blob) == tiles * tile * 4 + tiles * tile * k4
    scales = blob[:tiles * tile * 4].view("<f4")
    np.testing.assert_array_equal(scales[:20], scale)
    assert not scales[20:].any()
    data = blob[tiles * tile * 4:].view(np.int8).reshape(tiles, k4 // 4, tile, 4)
    np.testing.assert_array_equal(data[0, 0, :20, :3], q)  # lane l, inputs 0..3
    assert not data[0, 0, :, 3].any() and not data[0, 0, 20:].any()  # zero padding


# ---- through the built library -------------------------------------------------


@pytest.fixture(scope="module")
def case(tmp_path_factory):
    from tfaot.pipeline import BuildOptions, Progress, build_model
    from tfaot.verify import keras_reference

    tmp = tmp_path_factory.mktemp("int8")
    model = _keras_model()
    path = tmp / "q8.keras"
    model.save(path)
    xs = np.random.default_rng(1).standard_normal((STEPS, 1, 5)).astype(np.float32)
    built = {dtype: build_model(str(path), BuildOptions(out_dir=tmp / dtype, weights_dtype=dtype,
                                                        matvec="tfaot"), Progress(enabled=False))
             for dtype in ("f32", "int8")}
    return {"path": path, "xs": xs, "ref": keras_reference(model, xs).reshape(STEPS, -1),
            "built": built, "tmp": tmp, "model": model}


def test_numerics_through_the_so(case):
    from tfaot import harness

    ys = harness.load(case["built"]["int8"].path).step_n(case["xs"]).reshape(STEPS, -1)
    err = float(np.max(np.abs(ys - case["ref"])))
    # quantized (not f32 by accident), and within the stated tolerance with
    # room: measured 5e-3 on this model
    assert 1e-4 < err < 2e-2, err
    man = case["built"]["int8"].manifest
    assert man["weights_dtype"] == "int8" and "per output row" in man["weights_scheme"]
    nm = _run(["nm", case["built"]["int8"].path / "src" / "q8_kernels.o"]).stdout
    assert re.search(r"\bT q8_matvec_int8\b", nm) and "matvec_f32" not in nm


def test_verify_uses_the_int8_tolerance(case, capsys):
    from tfaot.cli import main

    assert main(["verify", str(case["path"]), str(case["built"]["int8"].path),
                 "--steps", "120"]) == 0
    out = capsys.readouterr().out
    assert "tolerance 0.05" in out and "ok" in out


def test_weights_are_a_quarter(case):
    matvec_weights = sum(w.size for w in case["model"].get_weights() if w.ndim == 2)
    f32 = case["built"]["f32"].manifest["footprint"]["weight_bytes"]
    int8 = case["built"]["int8"].manifest["footprint"]["weight_bytes"]
    assert int8 <= f32 - 3 * matvec_weights + 1024, (f32, int8)  # scales and padding on top
    header = (case["built"]["int8"].path / "q8.h").read_text()
    assert f"#define Q8_WEIGHT_BYTES {int8}" in header


def test_convolutions_keep_f32_beside_int8_matvecs(tmp_path):
    import keras

    from tfaot.pipeline import BuildOptions, Progress, build_model
    from tfaot import harness
    from tfaot.verify import keras_reference

    keras.utils.set_random_seed(2)
    model = keras.Sequential([keras.Input((None, 6), batch_size=1),
                              keras.layers.Conv1D(16, 3, padding="causal"),
                              keras.layers.GRU(24, return_sequences=True),
                              keras.layers.Dense(4)])
    path = tmp_path / "cq.keras"
    model.save(path)
    built = build_model(str(path), BuildOptions(out_dir=tmp_path / "out", weights_dtype="int8",
                                                matvec="tfaot"), Progress(enabled=False))
    nm = _run(["nm", built.path / "src" / "cq_kernels.o"]).stdout
    assert re.search(r"\bT cq_matvec_int8\b", nm) and re.search(r"\bT cq_conv_f32\b", nm), nm
    xs = np.random.default_rng(3).standard_normal((STEPS, 1, 6)).astype(np.float32)
    ys = harness.load(built.path).step_n(xs).reshape(STEPS, -1)
    err = float(np.max(np.abs(ys - keras_reference(model, xs).reshape(STEPS, -1))))
    assert 1e-5 < err < 2e-2, err


def test_aarch64_matches_the_host_build(case, tmp_path):
    """The portable kernel on aarch64 computes the same int32 sums and scaling."""
    toolchains.require("aarch64-linux-gnu-gcc", "qemu-aarch64")
    from tfaot import harness
    from tfaot.pipeline import BuildOptions, Progress, build_model

    out = build_model(str(case["path"]), BuildOptions(
        out_dir=case["tmp"] / "aarch64", triple="aarch64-linux-gnu", cpu="generic",
        weights_dtype="int8", matvec="tfaot"), Progress(enabled=False)).path
    ys = toolchains.step_under_qemu_aarch64(out, "q8", case["xs"], tmp_path)
    host = harness.load(case["built"]["int8"].path).step_n(case["xs"]).reshape(STEPS, -1)
    np.testing.assert_allclose(np.asarray(ys).reshape(STEPS, -1), host, rtol=0, atol=1e-5)


@pytest.mark.parametrize("cc,flags", [
    ("gcc", ["-march=haswell"]), ("clang", ["-march=haswell"]), ("gcc", []),
    ("aarch64-linux-gnu-gcc", []),
    ("arm-none-eabi-gcc", ["-mthumb", "-mcpu=cortex-m4", "-mfpu=fpv4-sp-d16",
                           "-mfloat-abi=hard", "-DTFRT_FREESTANDING"])])
def test_kernel_is_warning_free(cc, flags, tmp_path):
    """The int8 kernel (AVX2 with -march=haswell, portable elsewhere) with the
    f32 convolutions of the same build."""
    import platform

    if not shutil.which(cc):
        pytest.skip(f"needs {cc}")
    if "-march=haswell" in flags and platform.machine() != "x86_64":
        pytest.skip("x86-64 flags")
    _run([cc, "-std=c11", "-O3", "-Wall", "-Wextra", "-Werror", "-pedantic", *flags,
          "-DTFRT_MATVEC_INT8", "-DTFRT_MATVEC_FN=m_int8", "-DTFRT_CONV_FN=c_f32",
          "-DTFRT_DWCONV_FN=d_f32", "-c", shim_dir() / "tfrt_matvec.c", "-o", tmp_path / "k.o"])


def test_refused_where_the_kernel_is_not_used():
    from tfaot.errors import TfaotError
    from tfaot.target import make_target

    with pytest.raises(TfaotError, match="--weights-dtype=int8 needs tfaot's matvec kernel"):
        make_target("vulkan", weights_dtype="int8")
    with pytest.raises(TfaotError, match="--weights-dtype=int8 needs tfaot's matvec kernel"):
        make_target("cpu", matvec="iree", weights_dtype="int8")
    with pytest.raises(TfaotError, match="--weights=file"):
        make_target("cpu", external_weights=True, weights_dtype="int8")
    with pytest.raises(TfaotError, match="NaN or infinite"):
        microkernel.quantize_int8(np.array([[1.0, np.inf]], np.float32))
