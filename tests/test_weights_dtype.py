"""--weights-dtype=f16|bf16: the micro-kernel's weights stored at half width.

The packed matvec weights (compiler/lower/microkernel.py) are rounded to nearest
even at build time and converted back to f32 inside the C kernel
(runtime_shim/tfrt_matvec.c); math and accumulation stay f32. Checked here:
the rounding (numpy references), the kernel's conversion of every finite
16-bit pattern, the .so against TensorFlow (with the original weights: a
small nonzero error; with the weights rounded the same way: f32 agreement),
the smaller read-only data, warning-free C, the refused combinations, and
aarch64 (its _Float16 conversion) under qemu. Speed: bench/bench_litert.py.
"""
from __future__ import annotations

import ctypes
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

import toolchains
from tfaot.lower import microkernel, weight_packing
from tfaot.errors import TfaotError
from tfaot.resources import shim_dir
from tfaot.target_options import make_target
from util import run as _run

STEPS = 120
DATA = Path(__file__).parent / "data" / "backend"
#: Unit roundoff of each dtype (8 and 11 significant bits).
UNIT_ROUNDOFF = {"bf16": 2.0 ** -8, "f16": 2.0 ** -11}
HALVES = ("bf16", "f16")


def test_bf16_rounds_to_nearest_even():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    ties = np.array([0x3F808000, 0x3F818000, 0x3F808001, 0xBF80FFFF, 0x00000001],
                    np.uint32).view(np.float32)
    got = weight_packing.to_half(ties, "bf16")
    assert got.tolist() == [0x3F80, 0x3F82, 0x3F81, 0xBF81, 0x0000]
    w = np.random.default_rng(0).standard_normal(4096).astype(np.float32) * 10.0 ** \
        np.random.default_rng(1).integers(-30, 30, 4096)
    w = w.astype(np.float32)
    expected = w.astype(ml_dtypes.bfloat16).view(np.uint16)
    np.testing.assert_array_equal(weight_packing.to_half(w, "bf16"), expected)
    back = weight_packing.from_half(expected, "bf16")
    assert np.all(np.abs(back - w) <= np.abs(w) * UNIT_ROUNDOFF["bf16"])


def test_f16_rounds_like_numpy_and_refuses_overflow():
    w = np.random.default_rng(0).standard_normal(4096).astype(np.float32) * 100
    w[:4] = [-65504.0, 6.1035e-5, 6e-5, -1e-7]  # the largest half, the smallest normal
    expected = w.astype(np.float16).view(np.uint16)
    got = weight_packing.to_half(w, "f16")
    np.testing.assert_array_equal(got[:2], expected[:2])
    assert got[2:4].tolist() == [0x0000, 0x8000]  # subnormals flushed, sign kept
    np.testing.assert_array_equal(got[4:], expected[4:])
    with pytest.raises(TfaotError, match="not finite in f16.*use bf16 or f32"):
        weight_packing.to_half(np.array([1.0, 7e4], np.float32), "f16")
    assert weight_packing.to_half(np.array([7e4], np.float32), "bf16")[0] == 0x4789


@pytest.mark.parametrize("cc", ["gcc", "clang"])
@pytest.mark.parametrize("dtype", HALVES)
def test_c_conversion_is_exact_for_every_finite_half(dtype, cc, tmp_path):
    """k = 1, x = 1: the kernel's output is its f32 reading of each weight."""
    if not shutil.which(cc):
        pytest.skip(f"needs {cc}")
    from tfaot.package.link import matvec_flags

    lib = tmp_path / "mv.so"
    target = make_target("cpu", weights_dtype=dtype)
    _run([cc, "-std=c11", "-shared", "-fPIC", *matvec_flags(target), "-DTFRT_MATVEC_FN=mv",
          shim_dir() / "tfrt_matvec.c", "-o", lib])
    patterns = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    patterns = patterns[np.isfinite(weight_packing.from_half(patterns, dtype))]
    y = np.zeros(len(patterns), np.float32)
    x = np.ones(1, np.float32)
    ptr = ctypes.c_void_p
    ctypes.CDLL(str(lib)).mv(ptr(patterns.ctypes.data), ctypes.c_size_t(0), ptr(x.ctypes.data),
                             ctypes.c_size_t(0), ptr(y.ctypes.data), ctypes.c_size_t(0),
                             ctypes.c_size_t(len(patterns)), ctypes.c_size_t(1))
    np.testing.assert_array_equal(y, weight_packing.from_half(patterns, dtype))


def _matvec_module(w: np.ndarray) -> str:
    n, k = w.shape
    wt, xt, yt = f"tensor<{n}x{k}xf32>", f"tensor<{k}x1xf32>", f"tensor<{n}x1xf32>"
    return f"""module {{
  func.func @f(%x: {xt}) -> {yt} {{
    %w = stablehlo.constant dense<"0x{w.astype('<f4').tobytes().hex().upper()}"> : {wt}
    %y = stablehlo.dot %w, %x : ({wt}, {xt}) -> {yt}
    return %y : {yt}
  }}
}}
"""


def test_rewrite_stores_16_bit_weights():
    w = np.random.default_rng(0).standard_normal((40, 24)).astype(np.float32)
    f32, _ = microkernel.rewrite_matvecs(_matvec_module(w), "m")
    text, count = microkernel.rewrite_matvecs(_matvec_module(w), "m", dtype="bf16")
    assert count == 1 and "@m_matvec_bf16" in text and "matvec_f32" not in text
    assert "memref<2x24x32xi16>" in text and "memref<2x24x32xf32>" in f32
    hexlen = [len(max(re.findall(r'0x([0-9A-F]+)"', t), key=len)) for t in (f32, text)]
    assert hexlen[1] * 2 == hexlen[0]


def test_refused_combinations():
    with pytest.raises(TfaotError, match="not supported"):
        make_target("cpu", weights_dtype="f8")
    with pytest.raises(TfaotError, match="needs tfaot's matvec kernel.*--matvec=iree"):
        make_target("cpu", matvec="iree", weights_dtype="bf16")
    # the one reason that applies, not a list of every possible one
    with pytest.raises(TfaotError, match="needs tfaot's matvec kernel.*--pack-weights packs"):
        make_target("cpu", weight_packing=True, weights_dtype="f16")
    with pytest.raises(TfaotError, match="--target=vulkan uses IREE's kernels"):
        make_target("vulkan", weights_dtype="bf16")
    assert make_target("cpu", external_weights=True, weights_dtype="bf16").matvec_kernel == \
        "tfaot"
    with pytest.raises(TfaotError, match="thumbv7em-none-eabi builds use IREE's kernels by "
                                         "default; add --matvec=tfaot"):
        make_target("cpu", "thumbv7em-none-eabi", "cortex-m4", weights_dtype="bf16")
    # a Cortex-M4 with --weights=file takes the kernel (it was refused)
    if make_target("cpu", "thumbv7em-none-eabihf", "cortex-m4").toolchain() is not None:
        assert make_target("cpu", "thumbv7em-none-eabihf", "cortex-m4", external_weights=True,
                           weights_dtype="int8").matvec_kernel == "tfaot"
    assert make_target("cpu", weights_dtype="bf16").weights_dtype == "bf16"


def test_cli_error_is_one_line(capsys):
    from tfaot.cli import main

    assert main(["build", "missing.keras", "--matvec=iree", "--weights-dtype=bf16"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--weights-dtype=bf16 needs tfaot's matvec kernel" in err[0]


# odd K (5), a last tile of 3 rows, N = 80 and 120
from test_microkernels import _keras_model  # noqa: E402


def _rounded_twin(model, dtype: str):
    """The model with every matrix (the matvec weights) rounded as the build does."""
    import keras

    twin = keras.models.clone_model(model)
    twin.set_weights([weight_packing.from_half(weight_packing.to_half(w, dtype), dtype).reshape(w.shape)
                      if w.ndim == 2 else w for w in model.get_weights()])
    return twin


def _build(case, sub: str, **options):
    from tfaot.pipeline import BuildOptions, Progress, build_model

    return build_model(str(case["path"]), BuildOptions(out_dir=case["tmp"] / sub, **options),
                       Progress(enabled=False))


@pytest.fixture(scope="module")
def case(tmp_path_factory):
    from tfaot.verify import keras_reference

    tmp = tmp_path_factory.mktemp("wd")
    model = _keras_model()
    path = tmp / "wd.keras"
    model.save(path)
    xs = np.random.default_rng(1).standard_normal((STEPS, 1, 5)).astype(np.float32)
    ref = {"f32": keras_reference(model, xs).reshape(STEPS, -1)}
    for dtype in HALVES:
        ref[dtype] = keras_reference(_rounded_twin(model, dtype), xs).reshape(STEPS, -1)
    return {"model": model, "path": path, "xs": xs, "ref": ref, "tmp": tmp, "built": {}}


def _built(case, dtype: str):
    if dtype not in case["built"]:
        case["built"][dtype] = _build(case, dtype, matvec="tfaot", weights_dtype=dtype)
    return case["built"][dtype]


@pytest.mark.parametrize("dtype", HALVES)
def test_numerics_through_the_so(case, dtype):
    from tfaot import harness

    built = _built(case, dtype)
    ys = harness.load(built.path).step_n(case["xs"]).reshape(STEPS, -1)
    # the weights really are rounded: the .so agrees with TF run on rounded
    # matrices to f32 precision ...
    np.testing.assert_allclose(ys, case["ref"][dtype], rtol=0, atol=1e-5)
    # ... and differs from TF on the original ones, by about the rounding
    # (outputs of order 1, a few roundings of weights of order 1 per step)
    err = float(np.max(np.abs(ys - case["ref"]["f32"])))
    assert 1e-6 < err < 4 * UNIT_ROUNDOFF[dtype], err
    man = built.manifest
    assert man["weights_dtype"] == dtype and man["matvec"] == "tfaot"
    nm = _run(["nm", built.path / "src" / "wd_kernels.o"]).stdout
    assert re.search(rf"\bT wd_matvec_{dtype}\b", nm) and "matvec_f32" not in nm


def test_read_only_data_is_smaller(case):
    from tfaot.package.footprint import elf_sections

    f32 = _built(case, "f32")
    assert f32.manifest["weights_dtype"] == "f32"
    matvec_weights = sum(w.size for w in case["model"].get_weights() if w.ndim == 2)
    rodata = {}  # dtype -> {section: bytes} of the kernel object's read-only data
    for dtype in ("f32", *HALVES):
        sections = elf_sections((_built(case, dtype).path / "src" / "wd_kernels.o").read_bytes())
        rodata[dtype] = {k: v for k, v in sections.items() if k.startswith(".rodata")}
    packed = [k for k in rodata["f32"] if re.fullmatch(r"\.rodata\.tfaot_matvec_\d+_w", k)]
    # the LSTM's two joined (lower/matvec_sums.py), the GRU's two, the Dense
    assert len(packed) == 4
    for dtype in HALVES:
        # every packed matrix at half the bytes (the kernel's own constants may differ)
        assert all(rodata[dtype][k] * 2 == rodata["f32"][k] for k in packed), rodata
        saved = sum(rodata["f32"].values()) - sum(rodata[dtype].values())
        assert saved >= 2 * matvec_weights
        fp = _built(case, dtype).manifest["footprint"]
        assert fp["weight_bytes"] <= f32.manifest["footprint"]["weight_bytes"] - 2 * matvec_weights
        header = (_built(case, dtype).path / "wd.h").read_text()
        assert f"#define WD_WEIGHT_BYTES {fp['weight_bytes']}" in header


@pytest.mark.parametrize("cc", ["gcc", "clang", "aarch64-linux-gnu-gcc"])
def test_kernel_and_generated_c_are_warning_free(case, cc, tmp_path):
    if not shutil.which(cc):
        pytest.skip(f"needs {cc}")
    warn = [cc, "-std=c11", "-Wall", "-Wextra", "-Werror", "-pedantic", "-O3"]
    from tfaot.package.link import matvec_flags

    # (this CPU's flags, as a host build compiles the kernels)
    arch = matvec_flags(make_target("cpu")) if "aarch64" not in cc else []
    for dtype in HALVES:
        _run([*warn, *arch, f"-DTFRT_MATVEC_{dtype.upper()}", f"-DTFRT_MATVEC_FN=m_{dtype}",
              "-c", shim_dir() / "tfrt_matvec.c", "-o", tmp_path / f"{dtype}.o"])
    if "aarch64" not in cc:
        _run([*warn, "-c", "wd.c", "-o", tmp_path / "wd.o"], cwd=_built(case, "bf16").path / "src")


def test_aarch64_f16_under_qemu(case, tmp_path):
    """aarch64 converts with _Float16 (fcvtl), not the bit routine of x86-64."""
    toolchains.require("aarch64-linux-gnu-gcc", "qemu-aarch64")
    out = _build(case, "aarch64", triple="aarch64-linux-gnu", cpu="generic",
                 weights_dtype="f16").path
    ys = toolchains.step_under_qemu_aarch64(out, "wd", case["xs"], tmp_path)
    np.testing.assert_allclose(ys, case["ref"]["f16"], rtol=0, atol=1e-5)
