"""tfaot's matvec micro-kernel (compiler/lower/microkernel.py, runtime_shim/tfrt_matvec.c).

Constant-weight matvecs leave IREE's codegen for a C kernel with weights
packed at build time into the kernel object's read-only data. Correctness
here (vs TensorFlow through the .so, on the host and on aarch64 under qemu);
speed is measured by bench/bench_litert.py (variant ukernel).
"""
from __future__ import annotations

import dataclasses
import json
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


def _dot_module(w: np.ndarray, *, x_cols: int = 1) -> str:
    """Four products: constant W (twice), a non-constant and a splat matrix."""
    n, k = w.shape
    hexval = w.astype("<f4").tobytes().hex().upper()
    wt, xt, yt = f"tensor<{n}x{k}xf32>", f"tensor<{k}x{x_cols}xf32>", f"tensor<{n}x{x_cols}xf32>"
    dot = f"({wt}, {xt}) -> {yt}"
    return f"""module {{
  func.func @f(%x: {xt}, %v: {wt}) -> {yt} {{
    %w = stablehlo.constant dense<"0x{hexval}"> : {wt}
    %s = stablehlo.constant dense<0.5> : {wt}
    %a = stablehlo.dot %w, %x : {dot}
    %b = stablehlo.dot %v, %x : {dot}
    %c = stablehlo.dot %s, %x : {dot}
    %d = stablehlo.dot %w, %x : {dot}
    %e = stablehlo.add %a, %b : {yt}
    %f = stablehlo.add %c, %d : {yt}
    %g = stablehlo.add %e, %f : {yt}
    return %g : {yt}
  }}
}}
"""


def test_tile_agrees_with_the_c_kernel():
    header = (shim_dir() / "tfrt_matvec.c").read_text()
    assert re.search(r"#define TFRT_MATVEC_TILE (\d+)", header).group(1) == str(weight_packing.TILE)
    assert (re.search(r"#define TFRT_MATVEC_SMALL_TILE (\d+)", header).group(1)
            == str(weight_packing.SMALL_TILE))
    assert (re.search(r"#define TFRT_MATVEC_DOT_ROWS (\d+)", header).group(1)
            == str(weight_packing.DOT_ROWS))


@pytest.mark.parametrize("n", [1, 4, 5, 12, 16, 17, 32, 33, 70])
def test_matvec_kernel_matches_numpy(n, tmp_path):
    """Every tile width (1 for at most 4 rows: rows one after another, 16
    for at most 16 rows, else 32 with a partial last tile), odd and even k,
    k past the dot product's 16 partial sums."""
    import ctypes

    from tfaot.package.link import matvec_flags

    so = tmp_path / "mv.so"
    _run(["gcc", "-std=c11", "-shared", "-fPIC", *matvec_flags(make_target("cpu")),
          "-DTFRT_MATVEC_FN=mv", shim_dir() / "tfrt_matvec.c", "-o", so])
    lib = ctypes.CDLL(str(so))
    rng = np.random.default_rng(n)
    for k in (1, 2, 7, 40, 4001):
        w = (rng.standard_normal((n, k)) / np.sqrt(k)).astype(np.float32)  # sums of order 1
        packed = weight_packing.pack(w, weight_packing.matvec_tile(n))
        x = rng.standard_normal(k).astype(np.float32)
        y = np.full(n + 1, np.nan, np.float32)
        size, ptr = ctypes.c_size_t, ctypes.c_void_p
        # the weights start 3 elements into their buffer (w_offset)
        wb = np.concatenate([np.full(3, np.nan, np.float32), packed.ravel()])
        lib.mv(ptr(wb.ctypes.data), size(3), ptr(x.ctypes.data), size(0), ptr(y.ctypes.data),
               size(0), size(n), size(k))
        np.testing.assert_allclose(y[:n], w @ x, rtol=0, atol=1e-5)
        assert np.isnan(y[n])  # nothing written past the n outputs


def test_pack_layout_pads_the_last_tile():
    t = 4
    w = np.arange(10 * 3, dtype=np.float32).reshape(10, 3) + 1
    p = weight_packing.pack(w, t)
    assert p.shape == (3, 3, t) and p.dtype == np.float32 and p.flags.c_contiguous
    for row in range(10):
        for col in range(3):
            assert p[row // t, col, row % t] == w[row, col]
    assert not p[2, :, 2:].any()  # rows 10, 11: zero padding


def test_rewrite_takes_constant_matvecs_only():
    w = np.random.default_rng(0).standard_normal((40, 24)).astype(np.float32)
    text, count = microkernel.rewrite_matvecs(_dot_module(w), "m")
    # the non-constant and the splat weights stay with IREE; the two uses
    # of the same constant share one packed copy
    assert count == 2
    assert text.count("stablehlo.dot ") == 2
    assert text.count("stream.executable private") == 1
    assert "hal.import.static" in text and "@m_matvec_f32" in text
    assert "alignment = 64" in text
    assert microkernel.rewrite_matvecs(_dot_module(w), "m")[0] == text  # deterministic


def test_rewrite_fallbacks_leave_the_text_alone():
    w = np.ones((8, 4), np.float32) * np.arange(4, dtype=np.float32)
    assert microkernel.rewrite_matvecs(_dot_module(w, x_cols=2), "m")[1] == 0  # a matmul
    text = _dot_module(w)
    assert microkernel.rewrite_matvecs(text, "m", min_weights=33) == (text, 0)  # too small


def test_target_options_and_flags():
    from tfaot.package.link import matvec_flags

    host = make_target("cpu", None, "host")
    assert host.matvec_kernel == "tfaot" and host.c_flags() == ()
    # this machine's CPU; on x86-64 with 512-bit vectors where it has them
    assert matvec_flags(host)[:3] == (
        ["-O3", "-march=native", "-mprefer-vector-width=512"] if host.arch == "x86_64"
        else ["-O3", "-mcpu=native"])
    # a named CPU's vector units, as IREE's kernels get them; generic: the baseline
    assert "-march=x86-64-v3" in matvec_flags(
        make_target("cpu", "x86_64-unknown-linux-gnu", "x86-64-v3"))
    assert "-mcpu=cortex-a76" in matvec_flags(make_target("cpu", "aarch64-linux-gnu", "cortex-a76"))
    assert not any(f.startswith(("-march", "-mcpu"))
                   for f in matvec_flags(make_target("cpu", "aarch64-linux-gnu", "generic")))
    # a CPU the C compiler does not know (LLVM may know more): the baseline
    # (the name is set past make_target, which refuses one LLVM does not know)
    unknown = dataclasses.replace(make_target("cpu", "x86_64-unknown-linux-gnu", "x86-64-v3"),
                                  cpu="no-such-cpu")
    assert "-march=no-such-cpu" in matvec_flags(unknown)
    if shutil.which("gcc"):
        assert matvec_flags(unknown, "gcc") == ["-O3"]
    assert make_target("cpu", "aarch64-linux-gnu", "generic").matvec_kernel == "tfaot"
    m4 = make_target("cpu", "thumbv7em-none-eabihf", "cortex-m4")
    # bare-metal Arm with an FPU: the matvec, convolution and depthwise
    # kernels (when the toolchain is there)
    assert (m4.matvec_kernel, m4.kernel_kinds) == (
        ("tfaot", ("matvec", "conv", "dwconv")) if shutil.which("arm-none-eabi-gcc")
        else ("iree", None))
    assert make_target("cpu", "thumbv7em-none-eabi", "cortex-m4").matvec_kernel == "iree"
    assert make_target("cpu", "thumbv7em-none-eabihf", "cortex-m4",
                       matvec="tfaot").matvec_kernel == "tfaot"
    iree = make_target("cpu", None, "host", matvec="iree")
    assert iree.matvec_kernel == "iree"
    with pytest.raises(TfaotError, match="CPU option"):
        make_target("vulkan", matvec="tfaot")
    with pytest.raises(TfaotError, match="not supported"):
        make_target("cpu", matvec="xnnpack")


def _keras_model():
    """Odd K (5), a last tile of 3 of 32 rows (Dense(3)), N = 80 and 120."""
    import keras

    keras.utils.set_random_seed(7)
    return keras.Sequential([keras.Input((None, 5), batch_size=1),
                             keras.layers.LSTM(20, return_sequences=True),
                             keras.layers.GRU(40, return_sequences=True),
                             keras.layers.Dense(3)])


def _build(model, tmp_path: Path, sub: str, **options):
    from tfaot.pipeline import BuildOptions, Progress, build_model

    path = tmp_path / "mk.keras"
    if not path.exists():
        model.save(path)
    return build_model(str(path), BuildOptions(out_dir=tmp_path / sub, keep_temps=True, **options),
                       Progress(enabled=False))


@pytest.fixture(scope="module")
def keras_case(tmp_path_factory):
    from tfaot.verify import keras_reference

    tmp = tmp_path_factory.mktemp("mk")
    model = _keras_model()
    xs = np.random.default_rng(1).standard_normal((STEPS, 1, 5)).astype(np.float32)
    expected = keras_reference(model, xs).reshape(STEPS, -1)
    return model, xs, expected, tmp


def test_keras_numerics_through_the_so(keras_case):
    from tfaot import harness

    model, xs, expected, tmp = keras_case
    built = _build(model, tmp, "out", matvec="tfaot")
    out, man = built.path, built.manifest
    ys = harness.load(out).step_n(xs).reshape(STEPS, -1)
    np.testing.assert_allclose(ys, expected, rtol=0, atol=1e-5)
    # the kernel object calls the micro-kernel, merged into it; no RAM copy
    # of the weights
    nm = _run(["nm", out / "src" / "mk_kernels.o"]).stdout
    assert re.search(r"\bT mk_matvec_f32\b", nm) and " U mk_matvec_f32" not in nm
    assert not man["pack_weights"] and man["matvec"] == "tfaot"
    ram, weights = man["footprint"]["ram_bytes"], man["footprint"]["weight_bytes"]
    assert ram < weights
    # rebuilding gives the same bytes
    again = _build(model, tmp, "again", matvec="tfaot").path
    for f in ("src/mk.c", "src/mk_kernels.o", "libmk.a"):
        assert (out / f).read_bytes() == (again / f).read_bytes(), f


@pytest.mark.parametrize("dtype", ["f32", "int8"])
def test_narrow_heads_keep_their_weights_unpadded(dtype, tmp_path, capsys):
    """A Dense(1) and a Conv1D(2, 4) over 2000 features (a binary
    classifier's or a regressor's head on a wide input): their rows are
    stored one after another, not padded to a 16- or 32-lane tile (which
    took 16 times their 72 KB); a Conv1D(16, 3)'s in a tile of 16 lanes,
    not 32 (twice its 384 KB). The library matches TensorFlow over 100
    steps (the int8 build's Dense as int8 rows)."""
    import keras

    from tfaot.cli import main

    keras.utils.set_random_seed(3)
    x = keras.Input((None, 2000), batch_size=1)
    model = keras.Model(x, [keras.layers.Dense(1)(x),
                            keras.layers.Conv1D(2, 4, padding="causal")(x),
                            keras.layers.Conv1D(16, 3, padding="causal")(x)])
    path = tmp_path / "heads.keras"
    model.save(path)
    out = tmp_path / "lib"
    assert main(["build", str(path), "-o", str(out), "-q", "--weights-dtype", dtype]) == 0
    weights = 4 * (2000 + 2 * 4 * 2000 + 16 * 3 * 2000)
    manifest = json.loads((out / "heads.json").read_text())
    assert manifest["footprint"]["weight_bytes"] < 1.1 * weights, manifest["footprint"]
    assert main(["verify", str(path), str(out), "--steps", "100"]) == 0
    assert capsys.readouterr().out.strip().endswith(": ok")


@pytest.mark.parametrize("cc", ["gcc", "clang"])
def test_generated_c_is_warning_free(keras_case, cc, tmp_path):
    import shutil

    from tfaot.package.link import matvec_flags

    if not shutil.which(cc):
        pytest.skip(f"needs {cc}")
    model, _, _, tmp = keras_case
    out = tmp / "out"
    if not out.exists():
        _build(model, tmp, "out", matvec="tfaot")
    warn = [cc, "-std=c11", "-Wall", "-Wextra", "-Werror", "-pedantic"]
    _run([*warn, "-O2", "-c", "mk.c", "-o", tmp_path / "mk.o"], cwd=out / "src")
    _run([*warn, *matvec_flags(make_target("cpu")), "-DTFRT_MATVEC_FN=mk_matvec_f32",
          "-DTFRT_CONV_FN=mk_conv_f32", "-DTFRT_DWCONV_FN=mk_dwconv_f32", "-c",
          shim_dir() / "tfrt_matvec.c", "-o", tmp_path / "matvec.o"])


def test_iree_matvec_still_available(keras_case):
    from tfaot import harness

    model, xs, expected, tmp = keras_case
    out = _build(model, tmp, "iree", matvec="iree").path
    assert "matvec_f32" not in _run(["nm", out / "src" / "mk_kernels.o"]).stdout
    ys = harness.load(out).step_n(xs).reshape(STEPS, -1)
    np.testing.assert_allclose(ys, expected, rtol=0, atol=1e-5)


def test_aarch64_under_qemu(keras_case, tmp_path):
    toolchains.require("aarch64-linux-gnu-gcc", "qemu-aarch64")
    model, xs, expected, tmp = keras_case
    out = _build(model, tmp, "aarch64", triple="aarch64-linux-gnu", cpu="generic").path
    assert re.search(r"\bT mk_matvec_f32\b",
                     _run(["aarch64-linux-gnu-nm", out / "src" / "mk_kernels.o"]).stdout)
    ys = toolchains.step_under_qemu_aarch64(out, "mk", xs, tmp_path)
    np.testing.assert_allclose(ys, expected, rtol=0, atol=1e-5)


@pytest.mark.parametrize("cpu, instruction", [
    pytest.param("cortex-m4", r"vmul.f32\ts16, s16, s\d+", marks=pytest.mark.slow),
    ("cortex-m55", r"vfma.f32\tq\d+, q\d+, r\d+")])
def test_cortex_m_kernel(keras_case, cpu, instruction, tmp_path):
    """Bare metal takes the kernel for matrices of 256 weights or more; asked
    for (--matvec=tfaot: every matrix), it builds and matches TensorFlow
    under qemu-system-arm, on an M4 (scalar FPU path) and an M55 (Helium)."""
    toolchains.require("arm-none-eabi-gcc", "qemu-system-arm")
    model, xs, expected, tmp = keras_case
    xs, expected = xs[:20], expected[:20]
    out = _build(model, tmp, cpu, triple=toolchains.CORTEX_M[cpu].triple, cpu=cpu,
                 matvec="tfaot").path
    image, ys = toolchains.run_cortex_m_image(out, "mk", xs, tmp_path, cpu)
    # the path for the core: the scalar FPU's asm, Helium's multiply by a scalar
    kernel = toolchains.disassembly(image, cpu)
    kernel = kernel[kernel.index("<mk_matvec_f32>:"):]
    assert re.search(instruction, kernel[:kernel.index("\n\n")])
    np.testing.assert_allclose(ys, expected, rtol=0, atol=1e-5)


def test_big_matrices_walked_back_and_forth_give_the_same_bits(tmp_path):
    """Matrices of 32768+ weights are walked last tile first on every other
    call (the cache keeps what the last call read last). The order changes
    no bit: every call, also from several threads at once, equals a
    forward-only build of the kernel, and numpy within rounding."""
    import ctypes
    import threading

    from tfaot.package.link import matvec_flags

    flags = matvec_flags(make_target("cpu"))
    libs = {}
    for variant, extra in (("both", []), ("forward", ["-DTFRT_MATVEC_FORWARD_ONLY"])):
        so = tmp_path / f"{variant}.so"
        _run(["gcc", "-std=c11", "-Wall", "-Wextra", "-Werror", "-shared", "-fPIC", *flags,
              *extra, "-DTFRT_MATVEC_FN=mv", shim_dir() / "tfrt_matvec.c", "-o", so])
        libs[variant] = ctypes.CDLL(str(so))
    rng = np.random.default_rng(4)
    n, k = 100, 401  # 4 tiles, the last of 4 lanes; 40100 weights
    w = rng.standard_normal((n, k)).astype(np.float32) / np.sqrt(k)
    packed = weight_packing.pack(w, weight_packing.matvec_tile(n))
    x = rng.standard_normal(k).astype(np.float32)

    def call(lib) -> np.ndarray:
        y = np.zeros(n, np.float32)
        size, ptr = ctypes.c_size_t, ctypes.c_void_p
        lib.mv(ptr(packed.ctypes.data), size(0), ptr(x.ctypes.data), size(0),
               ptr(y.ctypes.data), size(0), size(n), size(k))
        return y

    forward = call(libs["forward"])
    np.testing.assert_allclose(forward, w @ x, rtol=0, atol=1e-5)
    for _ in range(3):
        np.testing.assert_array_equal(call(libs["both"]), forward)
    results: list[np.ndarray] = []

    def many():
        results.extend(call(libs["both"]) for _ in range(50))

    threads = [threading.Thread(target=many) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 150
    for y in results:
        np.testing.assert_array_equal(y, forward)


@pytest.mark.parametrize("dtype", ["f32", "int8"])
def test_einsum_dense_takes_the_matvec_kernel(dtype, tmp_path):
    """Keras' EinsumDense on a frame ("btf,fh->bth") imports as a
    dot_general of a 1x1xK frame, which the kernel did not take: its weights
    stayed with IREE (117 KB of RAM for 100 KB of weights) and int8 builds
    said the model had no matrix to quantize. It is the matvec it is now;
    the library matches Keras over 110 steps."""
    import json

    import keras

    from tfaot.pipeline import BuildOptions, Progress, build_model
    from tfaot.verify.compare import verify

    keras.utils.set_random_seed(0)
    x = keras.Input((None, 40), batch_size=1)
    h = keras.layers.EinsumDense("btf,fh->bth", output_shape=(None, 128), bias_axes="h",
                                 activation="relu")(x)
    y = keras.layers.EinsumDense("bth,ho->bto", output_shape=(None, 16))(h)
    keras.Model(x, y).save(tmp_path / "ein.keras")
    out = build_model(str(tmp_path / "ein.keras"),
                      BuildOptions(out_dir=tmp_path / "lib", weights_dtype=dtype),
                      Progress(enabled=False)).path
    manifest = json.loads((out / "ein.json").read_text())
    assert manifest["micro_kernels"] == ["matvec"] and manifest["weights_dtype"] == dtype
    (result,) = verify(str(tmp_path / "ein.keras"), out, steps=110, seed=0,
                       tol=5e-2 if dtype == "int8" else 1e-5)
    assert result.steps >= 100 and result.mismatch is None, result
