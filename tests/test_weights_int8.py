"""--weights-dtype=int8: matvecs with int8 weights (one scale per row) and an
input quantized to int8 at every call, summed in int32 (compiler/lower/microkernel.py
quantize_int8 / pack_int8, runtime_shim/tfrt_matvec.c).

Checked here: the C kernel against numpy's model of the same arithmetic
(``int8_weights.int8_matvec``: exact int32 sums, so only the final f32
scaling may differ), in its portable form and, where the CPU has AVX2, its
AVX2 form; the packing; a Keras LSTM + GRU through the .so against
TensorFlow over 120 steps (quantization error, bounded); the manifest and
the smaller read-only data; a convolution model whose convolutions keep f32
weights beside int8 matvecs; aarch64 under qemu, equal to the host build;
the Cortex-M DSP kernel (SXTB16/SMLAD) under qemu-system-arm against numpy
and, in a whole M4 image, against the host build; the aarch64 NEON and
SDOT paths under qemu-aarch64; and, with the same emulated drivers, the f32
kernel's Cortex-M path (which bare-metal builds now use by default).
Speed and error against LiteRT's int8: bench/bench_litert.py.
"""
from __future__ import annotations

import ctypes
import json
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

import toolchains
from test_microkernels import _keras_model
from tfaot.lower import int8_weights, microkernel, weight_packing
from tfaot.resources import shim_dir
from util import run as _run
from util import x86_isa_flags

STEPS = 120
#: (n, k): one small tile, a 16-row tile with a row to spare, a last tile
#: of 1 row, odd k, an LSTM's [4u, in+u], and k over the kernel's input chunk
#: (128 on a Cortex-M, 512 freestanding, 2048 hosted), also with a 16-row
#: tile; groups of 4 inputs (k rounded up to 4) of every count modulo 4 (the
#: DSP tile's loop is entered by groups % 4) and a single group; at most 4
#: rows (one after another, each a dot product in f32), k past a chunk too
SHAPES = [(12, 40), (16, 7), (33, 5), (80, 25), (512, 168), (96, 1030), (40, 2100), (16, 2100),
          (64, 17), (32, 3), (48, 16), (40, 9), (1, 2100), (3, 17), (4, 40), (2, 3)]


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
    blob = weight_packing.pack_int8(w)
    buf = np.zeros(len(blob) + 64, np.uint8)  # the kernel object keeps it 64-byte aligned
    start = (-buf.ctypes.data) % 64
    buf[start:start + len(blob)] = blob
    y = np.zeros(len(w), np.float32)
    p, n = ctypes.c_void_p, ctypes.c_size_t
    # the blob starts `start` bytes into the buffer: passed as the offset
    lib.mv8(p(buf.ctypes.data), n(start), p(x.ctypes.data), n(0), p(y.ctypes.data), n(0),
            n(w.shape[0]), n(w.shape[1]))
    return y


def _variants() -> dict[str, list[str]]:
    """Kernel variant -> gcc flags: the portable C, (x86-64) the AVX2 one, and
    this CPU's own (-march=native: VNNI where it has it; aarch64: sdot)."""
    import platform

    out = {"portable": ["-march=x86-64"] if platform.machine() == "x86_64" else [],
           # what a cpu=host build compiles: on a CPU with VNNI its vpdpbusd path
           "native": ["-march=native"] if platform.machine() == "x86_64" else ["-mcpu=native"]}
    if platform.machine() == "x86_64":
        out["avx2"] = ["-mavx2", "-mfma"]
    return out


@pytest.mark.parametrize("variant", ["portable", "avx2", "native"])
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
        want = int8_weights.int8_matvec(w, x)
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


#: Bare-metal Arm: (gcc flags, QEMU machine); both cores have the DSP
#: extension, so the kernel takes its SXTB16/SMLAD path.
CORTEX_M = toolchains.CORTEX_M
DATA = Path(__file__).parent / "data"


def _c_array(ctype: str, name: str, values) -> str:
    body = ", ".join(values)
    return f"static const _Alignas(64) {ctype} {name}[] = {{{body}}};\n"


def _cases_header(cases, dtype: str = "int8", layout: str = "lanes") -> str:
    """matvec_cases.h for data/kernels/matvec_check.c: each (w, x) packed
    for the int8 (in ``layout``: "paired" for Arm's DSP path, "rows" for
    Helium) or the f32 kernel."""
    ctype = {"int8": "int8_t", "f32": "float"}[dtype]
    text, table = f"#define WEIGHT_T {ctype}\n", []
    for i, (w, x) in enumerate(cases):
        if dtype == "int8":
            values = map(str, weight_packing.pack_int8(w, layout).view(np.int8).tolist())
        else:
            values = (f"{float(v)!r}f" for v in
                      weight_packing.pack(w, weight_packing.matvec_tile(len(w))).ravel())
        text += _c_array(ctype, f"w{i}", values)
        text += _c_array("float", f"x{i}", (f"{float(v)!r}f" for v in x))
        table.append(f"{{w{i}, x{i}, {w.shape[0]}u, {w.shape[1]}u}}")
    return (text + f"static const struct {{ const {ctype} *w; const float *x; size_t n, k; }} "
            f"cases[] = {{{', '.join(table)}}};\n"
            f"#define MAX_ROWS {max(w.shape[0] for w, _ in cases)}\n"
            f"#define MAX_K {max(w.shape[1] for w, _ in cases)}\n")


def _cortex_m_image(cpu: str, tmp_path: Path, defines: list[str],
                    driver: Path = DATA / "kernels" / "matvec_check.c") -> Path:
    cm = toolchains.FIRMWARE
    image = tmp_path / "k.elf"
    core = CORTEX_M[cpu]
    _run(["arm-none-eabi-gcc", "-std=c11", "-O3", "-Wall", "-Wextra", "-Werror", "-mthumb",
          *core.flags, "-mfloat-abi=hard", "-DTFRT_FREESTANDING", *defines,
          "-I", tmp_path, "-I", cm, "-nostartfiles", "-T", cm / core.script, cm / "startup.c",
          driver, shim_dir() / "tfrt_matvec.c", "-lgcc",
          "-o", image])
    return image


def _run_cortex_m(cpu: str, image: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["qemu-system-arm", "-M", CORTEX_M[cpu].machine, "-nographic", "-monitor",
                           "none", "-serial", "none", "-semihosting", "-kernel", image],
                          capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)


#: cpu -> instructions only its kernels' path has: the f32 matvec's
#: (scalar FPU asm: 16-lane groups, then 8; Helium's VFMA by a scalar), the
#: int8 matvec's and the int8 convolution's (DSP; Helium's widening multiply)
_SCALAR_FPU = (r"vmul.f32\ts18, s18, s16", r"vmul.f32\ts16, s16")
F32_PATH = {"cortex-m4": _SCALAR_FPU, "cortex-m7": _SCALAR_FPU, "cortex-m33": _SCALAR_FPU,
            "cortex-m55": (r"vfma.f32\tq\d+, q\d+, r\d+",)}
INT8_PATH = {"cortex-m4": "smlad", "cortex-m7": "smlad", "cortex-m33": "smlad",
             "cortex-m55": "vmullb.s8"}
#: the int8 matvec's own (Helium: VMLADAV over a row's 16 weights)
INT8_MATVEC_PATH = {**INT8_PATH, "cortex-m55": "vmlav.s8"}


@pytest.mark.parametrize("cpu", sorted(CORTEX_M))
def test_cortex_m_f32_kernel_matches_numpy(cpu, tmp_path):
    """The f32 kernel's Cortex-M paths (16 and then 8 sums in FPU registers,
    vmul + vadd; Helium: 16 lanes as 4 vectors) under qemu-system-arm against
    float64 numpy, f32 rounding apart; row counts that leave 8- and 16-lane
    groups and tiles part empty, k with and without inputs past a multiple
    of 4, an odd number of groups of 4 (60, 12: the 16-lane loop's half
    first pass)."""
    toolchains.require("arm-none-eabi-gcc", "qemu-system-arm")
    rng = np.random.default_rng(6)
    cases = [((rng.standard_normal((n, k)) * 0.3).astype(np.float32),
              rng.standard_normal(k).astype(np.float32))
             for n, k in [(12, 40), (16, 7), (33, 5), (80, 25), (256, 104), (20, 1),
                          (40, 60), (24, 12), (1, 300), (4, 37)]]
    (tmp_path / "matvec_cases.h").write_text(_cases_header(cases, "f32"))
    image = _cortex_m_image(cpu, tmp_path, ["-DTFRT_MATVEC_FN=m_kernel"])
    code = toolchains.disassembly(image, cpu)
    assert all(re.search(path, code) for path in F32_PATH[cpu])
    proc = _run_cortex_m(cpu, image)
    text = proc.stdout + proc.stderr
    lines = [ln for ln in text.splitlines() if ln == "done" or ln.endswith(" ")]
    assert proc.returncode == 0 and lines[-1:] == ["done"], text[-2000:]
    got = np.array([int(h, 16) for ln in lines[:-1] for h in ln.split()], np.uint32)
    got, start = got.view(np.float32), 0
    for w, x in cases:
        want = w.astype(np.float64) @ x.astype(np.float64)
        scale = np.abs(w).astype(np.float64) @ np.abs(x).astype(np.float64)
        y = got[start:start + len(w)]
        start += len(w)
        assert np.all(np.abs(y - want) <= 1e-6 * scale), (w.shape, np.abs(y - want).max())
    assert start == len(got)


@pytest.mark.parametrize("cpu", sorted(CORTEX_M))
def test_cortex_m_kernel_matches_the_arithmetic(cpu, tmp_path):
    """The DSP (SXTB16 + SMLAD, int16 inputs) and Helium (VMLADAV on the
    rows' blob) paths under qemu-system-arm: the same int32 sums as numpy's
    model of each, so the same outputs up to f32 rounding; the matmul of
    several streams gives each stream the matvec's outputs."""
    toolchains.require("arm-none-eabi-gcc", "qemu-system-arm")
    cases = _kernel_cases(np.random.default_rng(4))
    # the DSP path's blob pairs its lanes; Helium's keeps the rows
    layout = "rows" if cpu == "cortex-m55" else "paired"
    (tmp_path / "matvec_cases.h").write_text(_cases_header(cases, layout=layout))
    image = _cortex_m_image(cpu, tmp_path, ["-DTFRT_MATVEC_INT8", "-DTFRT_MATVEC_FN=m_kernel",
                                            "-DTFRT_MATMUL_FN=m_matmul", "-DCHECK_MATMUL",
                                            f"-DTFRT_I8_PAIRED_BLOB={int(layout == 'paired')}",
                                            f"-DTFRT_I8_ROWS_BLOB={int(layout == 'rows')}"])
    assert INT8_MATVEC_PATH[cpu] in toolchains.disassembly(image, cpu)
    model = int8_weights.int8_matvec if cpu == "cortex-m55" else int8_weights.int8_matvec_dsp
    proc = _run_cortex_m(cpu, image)
    # the matmul of three streams (--streams) gives each the matvec's outputs
    assert "differs" not in proc.stdout + proc.stderr
    _check_kernel_output(proc, cases, model)


@pytest.mark.parametrize("march,instruction", [("armv8-a", "sadalp"),
                                               ("armv8.2-a+dotprod", "sdot")])
def test_aarch64_kernel_matches_the_arithmetic(march, instruction, tmp_path):
    """The NEON paths (SMULL/ADDP/SADALP; SDOT with the dot-product
    extension) under qemu-aarch64 (-cpu max has FEAT_DotProd)."""
    toolchains.require("aarch64-linux-gnu-gcc", "qemu-aarch64")
    cases = _kernel_cases(np.random.default_rng(5))
    (tmp_path / "matvec_cases.h").write_text(_cases_header(cases))
    _check_kernel_output(toolchains.run_kernel_check_aarch64(
        DATA / "kernels" / "matvec_check.c", ["-DTFRT_MATVEC_INT8", "-DTFRT_MATVEC_FN=m_kernel"],
        march, instruction, tmp_path), cases)


@pytest.mark.parametrize("isa", ["generic", "avx2", "native", "avx512_emulated"])
def test_host_kernel_under_sanitizers(isa, tmp_path):
    """Each x86-64 path this machine runs (util.x86_isa_flags: on an AVX-512
    VNNI CPU, native is the zmm tile; emulated, on any), or aarch64's own, under
    AddressSanitizer and UndefinedBehaviorSanitizer, against numpy's int8
    arithmetic (the extreme-weight and all-zero rows of _kernel_cases)."""
    flags = x86_isa_flags(isa)
    if flags is None:
        pytest.skip(f"the {isa} path needs an x86-64 CPU that runs it")
    cases = _kernel_cases(np.random.default_rng(6))
    (tmp_path / "matvec_cases.h").write_text(_cases_header(cases))
    exe = tmp_path / "check"
    _run(["gcc", "-std=c11", "-O1", "-g", "-Wall", "-Wextra", "-Werror", *flags,
          "-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-DTFRT_MATVEC_INT8",
          "-DTFRT_MATVEC_FN=m_kernel", "-I", tmp_path, DATA / "kernels" / "matvec_check.c",
          # (-lm: the emulated ISA's __FMA__ without -mfma makes fmaf a call)
          shim_dir() / "tfrt_matvec.c", "-o", exe, "-lm"])
    _check_kernel_output(subprocess.run([exe], capture_output=True, text=True, timeout=120),
                         cases)


def test_host_kernel_with_clang(tmp_path):
    """clang compiles this CPU's path (its asm statements, e.g. the memory
    broadcasts of the AVX-512 VNNI tiles) to the same arithmetic, under the
    sanitizers."""
    toolchains.require("clang")
    cases = _kernel_cases(np.random.default_rng(6))
    (tmp_path / "matvec_cases.h").write_text(_cases_header(cases))
    exe = tmp_path / "check"
    _run(["clang", "-std=c11", "-O1", "-g", "-Wall", "-Wextra", "-Werror",
          *x86_isa_flags("native"), "-fsanitize=address,undefined", "-fno-sanitize-recover=all",
          "-DTFRT_MATVEC_INT8", "-DTFRT_MATVEC_FN=m_kernel", "-I", tmp_path,
          DATA / "kernels" / "matvec_check.c", shim_dir() / "tfrt_matvec.c", "-o", exe])
    _check_kernel_output(subprocess.run([exe], capture_output=True, text=True, timeout=120),
                         cases)


@pytest.mark.parametrize("isa", ["generic", "avx2", "native", "avx512_emulated"])
def test_matmul_of_streams_is_the_matvec_per_stream(isa, tmp_path):
    """The int8 matmul of N streams (--streams with int8 weights) gives each
    stream the matvec's outputs bit for bit, a NaN stream alone NaN, under
    AddressSanitizer and UndefinedBehaviorSanitizer (data/kernels/matmul_check.c)."""
    flags = x86_isa_flags(isa)
    if flags is None:
        pytest.skip(f"the {isa} path needs an x86-64 CPU that runs it")
    exe = tmp_path / "check"
    _run(["gcc", "-std=c11", "-O1", "-g", "-Wall", "-Wextra", "-Werror", *flags,
          "-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-DTFRT_MATVEC_INT8",
          "-DTFRT_MATVEC_FN=a", "-DTFRT_MATMUL_FN=b", DATA / "kernels" / "matmul_check.c",
          shim_dir() / "tfrt_matvec.c", "-lm", "-o", exe])
    assert _run([exe]).stdout.strip() == "ok"


def _kernel_cases(rng) -> list[tuple[np.ndarray, np.ndarray]]:
    cases = []
    for n, k in SHAPES:
        w = (rng.standard_normal((n, k)) * 0.3).astype(np.float32)
        w[n // 2] = 0
        w[0, 0] = 1e30  # an extreme weight: its row's other weights round to 0
        cases.append((w, rng.standard_normal(k).astype(np.float32)))
    # the largest sums a chunk of 128 inputs makes: every weight and input at
    # its largest magnitude (the DSP tile's first sum wraps past 2^31 here),
    # rows of alternating sign
    signs = np.where(np.arange(32) % 4 < 2, 1.0, -1.0).astype(np.float32)
    cases.append((np.repeat(signs[:, None], 128, axis=1), np.ones(128, np.float32)))
    cases.append((np.repeat(-signs[:, None], 128, axis=1), -np.ones(128, np.float32)))
    return cases


def _check_kernel_output(proc: subprocess.CompletedProcess, cases,
                         model=int8_weights.int8_matvec) -> None:
    """The printed outputs (matvec_check.c) against numpy's int8 arithmetic
    (``model``)."""
    text = proc.stdout + proc.stderr
    lines = [ln for ln in text.splitlines() if ln == "done" or ln.endswith(" ")]
    assert proc.returncode == 0 and lines[-1:] == ["done"], text[-2000:]
    got = np.array([int(h, 16) for ln in lines[:-1] for h in ln.split()], np.uint32)
    got = got.view(np.float32)
    start = 0
    for w, x in cases:
        want = model(w, x)
        y = got[start:start + len(w)]
        start += len(w)
        assert np.all(np.isfinite(y))
        # f32 rounding of each row's sum: relative to the size of its terms
        # (the extreme row's are 1e30, the others' of order 1)
        scale = np.abs(w).astype(np.float64) @ np.abs(x).astype(np.float64)
        assert np.all(np.abs(y - want) <= 2e-6 * scale), (w.shape, np.abs(y - want).max())
    assert start == len(got)


def test_packing():
    w = np.arange(-40, 40, dtype=np.float32).reshape(20, 4)[:, :3] / 10  # 20 x 3
    q, scale = int8_weights.quantize_int8(w)
    assert q.dtype == np.int8 and np.abs(q).max() == 127
    np.testing.assert_allclose(q * scale[:, None], w, atol=float(scale.max()) / 2 + 1e-7)
    blob = weight_packing.pack_int8(w)
    tile, tiles, k4 = weight_packing.matvec_tile(20), 1, 4  # 20 rows: one 32-wide tile
    assert tile == 32
    assert len(blob) == tiles * tile * 4 + tiles * tile * k4
    scales = blob[:tiles * tile * 4].view("<f4")
    np.testing.assert_array_equal(scales[:20], scale)
    assert not scales[20:].any()
    data = blob[tiles * tile * 4:].view(np.int8).reshape(tiles, k4 // 4, tile, 4)
    np.testing.assert_array_equal(data[0, 0, :20, :3], q)  # lane l, inputs 0..3
    assert not data[0, 0, :, 3].any() and not data[0, 0, 20:].any()  # zero padding



def test_paired_packing():
    """The DSP path's blob (pack_int8 with paired lanes): per group of 4
    inputs, lanes 2m and 2m+1 interleaved byte by byte, lane 2m's weights
    offset by 128, so that each 16-bit half is e + 128 + 256 o; a pass's
    (four lanes') groups together."""
    rng = np.random.default_rng(3)
    w = rng.standard_normal((20, 6)).astype(np.float32)
    q, _ = int8_weights.quantize_int8(w)
    plain, paired = weight_packing.pack_int8(w), weight_packing.pack_int8(w, "paired")
    assert len(plain) == len(paired) and (plain[:32 * 4] == paired[:32 * 4]).all()  # scales
    # [pass][group][pair in the pass][input][even, odd]
    data = paired[32 * 4:].reshape(8, 2, 2, 4, 2)
    lanes = np.zeros((32, 8), np.int64)
    lanes[:20, :6] = q
    for g in range(2):
        for m in range(16):
            even, odd = lanes[2 * m, 4 * g:4 * g + 4], lanes[2 * m + 1, 4 * g:4 * g + 4]
            pair = data[m // 2, g, m % 2]
            np.testing.assert_array_equal(pair[:, 0], even + 128)
            np.testing.assert_array_equal(pair[:, 1].view(np.int8), odd)
            halves = pair.astype(np.int64) @ [1, 256]  # little-endian 16-bit halves
            np.testing.assert_array_equal(halves.astype(np.uint16).view(np.int16),
                                          even + 128 + 256 * odd)


def test_rows_packing():
    """Helium's blob (pack_int8 "rows"): the scales, then every row of the
    padded tiles as it is, K rounded up to 4."""
    rng = np.random.default_rng(4)
    w = rng.standard_normal((20, 6)).astype(np.float32)
    q, _ = int8_weights.quantize_int8(w)
    plain, rows = weight_packing.pack_int8(w), weight_packing.pack_int8(w, "rows")
    assert len(plain) == len(rows) and (plain[:32 * 4] == rows[:32 * 4]).all()  # scales
    data = rows[32 * 4:].view(np.int8).reshape(32, 8)
    np.testing.assert_array_equal(data[:20, :6], q)
    assert not data[20:].any() and not data[:, 6:].any()  # zero padding
    with pytest.raises(ValueError):
        weight_packing.pack_int8(w, "columns")


def test_kernel_refuses_a_blob_packed_for_another_cpu(tmp_path):
    """The build tells the kernel how it packed the blob; compiled for a
    CPU whose path reads the other layout, the kernel does not compile."""
    toolchains.require("arm-none-eabi-gcc")
    proc = subprocess.run(
        ["arm-none-eabi-gcc", "-std=c11", "-O2", "-mthumb", "-mcpu=cortex-m4",
         "-mfpu=fpv4-sp-d16", "-mfloat-abi=hard", "-DTFRT_FREESTANDING", "-DTFRT_MATVEC_INT8",
         "-DTFRT_MATVEC_FN=m_kernel", "-DTFRT_I8_PAIRED_BLOB=0", "-c",
         str(shim_dir() / "tfrt_matvec.c"), "-o", str(tmp_path / "k.o")],
        capture_output=True, text=True)
    assert proc.returncode != 0 and "packed for another CPU" in proc.stderr, proc.stderr[-800:]

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


def test_int8_tolerance_grows_with_the_int8_layers(case):
    """verify's int8 tolerance covers 8 int8 layers and grows as the square
    root of their number past that (their roundings add in quadrature: a
    MobileNetV2's 27 int8 layers drift from TensorFlow as LiteRT's int8
    does, past 0.05); the manifest counts this model's: a matvec per
    matrix of 1024 weights or more (the LSTM's recurrent one, the GRU's two)."""
    from types import SimpleNamespace

    from tfaot.verify.compare import default_tolerance

    big = [w for w in case["model"].get_weights()
           if w.ndim == 2 and w.size >= microkernel.INT8_MIN_WEIGHTS]
    assert case["built"]["int8"].manifest["int8_layers"] == len(big) == 3
    assert "int8_layers" not in case["built"]["f32"].manifest

    def tolerance(dtype, layers):
        lib = SimpleNamespace(manifest={"weights_dtype": dtype, "int8_layers": layers})
        return default_tolerance(lib, None)

    assert tolerance("int8", 1) == tolerance("int8", 8) == pytest.approx(0.05)
    assert tolerance("int8", 32) == pytest.approx(0.1)
    assert tolerance("f32", 32) == pytest.approx(1e-5)


def test_weights_are_a_quarter(case):
    # matrices under INT8_MIN_WEIGHTS stay f32 (the LSTM's 80x5 input kernel, the head)
    matvec_weights = sum(w.size for w in case["model"].get_weights()
                         if w.ndim == 2 and w.size >= microkernel.INT8_MIN_WEIGHTS)
    f32 = case["built"]["f32"].manifest["footprint"]["weight_bytes"]
    int8 = case["built"]["int8"].manifest["footprint"]["weight_bytes"]
    assert int8 <= f32 - 3 * matvec_weights + 1024, (f32, int8)  # scales and padding on top
    header = (case["built"]["int8"].path / "q8.h").read_text()
    assert f"#define Q8_WEIGHT_BYTES {int8}" in header


def test_small_matrices_stay_f32(tmp_path, capsys):
    """A SimpleRNN(16): no matrix of 1024 weights, so nothing is quantized
    (as LiteRT does): f32 accuracy, and the build says so."""
    import keras

    from tfaot import harness
    from tfaot.cli import main
    from tfaot.verify import keras_reference

    keras.utils.set_random_seed(3)
    model = keras.Sequential([keras.Input((None, 8), batch_size=1),
                              keras.layers.SimpleRNN(16, return_sequences=True),
                              keras.layers.Dense(2)])
    path = tmp_path / "tiny.keras"
    model.save(path)
    assert main(["build", str(path), "-o", str(tmp_path / "out"), "--weights-dtype=int8"]) == 0
    assert "--weights-dtype=int8: this model has no matrix of 1024 weights" in \
        capsys.readouterr().err
    lib = harness.load(tmp_path / "out")
    assert lib.manifest["weights_dtype"] == "f32"
    xs = np.random.default_rng(0).standard_normal((STEPS, 1, 8)).astype(np.float32)
    err = np.abs(lib.step_n(xs).reshape(STEPS, -1) - keras_reference(model, xs).reshape(STEPS, -1))
    assert float(err.max()) < 1e-5


@pytest.mark.parametrize("conv_int8", [False, True])
def test_the_warning_says_why_convolutions_stay_f32(conv_int8):
    """An int8 build where nothing was quantized: a model with convolutions
    on a CPU without int8 dot products is told that this kept them f32."""
    from types import SimpleNamespace

    from tfaot.pipeline import _warn_weights_dtype_unused

    warnings = []
    progress = SimpleNamespace(warn=warnings.append)
    target = SimpleNamespace(weights_dtype="int8", int8_min_weights=None, conv_int8=conv_int8)
    for kernels in (["conv", "matvec"], ["matvec"]):
        _warn_weights_dtype_unused({"weights_dtype": "f32", "micro_kernels": kernels},
                                   target, progress)
    assert len(warnings) == 2 and all("its weights stay f32" in w for w in warnings)
    said = ["convolutions stay f32 on a CPU without int8 dot products" in w for w in warnings]
    assert said == [not conv_int8, False], warnings


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


@pytest.mark.parametrize("cpu, instruction", [("cortex-m4", "smlad"), ("cortex-m55", "vmlav.s8")])
def test_cortex_m_image_matches_the_host_build(case, cpu, instruction, tmp_path):
    """The whole library for a Cortex-M4 or M55 (bare metal; int8 picks the
    matvec micro-kernel there by itself), linked into an image run by
    qemu-system-arm. The M55's Helium kernel gives the host int8 build's
    outputs; the M4's DSP kernel, whose inputs have 16 bits where the
    host's have 8, is at least as close to TensorFlow as the host build
    (its own arithmetic: test_cortex_m_kernel_matches_the_arithmetic).
    Both with exact activations; the M4's default, tables, stays within
    3e-4 of them."""
    toolchains.require("arm-none-eabi-gcc", "qemu-system-arm")
    from tfaot import harness

    xs = case["xs"]
    out = _cortex_m_build(case, cpu, tmp_path / "lib", activations="exact")
    image, ys = toolchains.run_cortex_m_image(out, "q8", xs, tmp_path, cpu)
    assert instruction in toolchains.disassembly(image, cpu)
    host = harness.load(case["built"]["int8"].path).step_n(xs).reshape(STEPS, -1)
    if cpu == "cortex-m55":
        np.testing.assert_allclose(ys, host, rtol=0, atol=1e-5)
    else:
        error, host_error = np.abs(ys - case["ref"]), np.abs(host - case["ref"])
        assert error.max() <= host_error.max() and error.mean() <= host_error.mean()
        np.testing.assert_allclose(ys, host, rtol=0, atol=5e-3)
        tables = _cortex_m_build(case, cpu, tmp_path / "tables", activations=None)
        assert json.loads((tables / "q8.json").read_text())["activations"] == "table"
        (tmp_path / "run").mkdir()
        _, table_ys = toolchains.run_cortex_m_image(tables, "q8", xs, tmp_path / "run", cpu)
        np.testing.assert_allclose(table_ys, ys, rtol=0, atol=3e-4)
        assert 0 < float(np.max(np.abs(table_ys - ys)))  # the tables were used
    assert float(np.max(np.abs(ys - case["ref"]))) < 2e-2


def _cortex_m_build(case, cpu: str, out_dir, activations: str | None):
    """The case's model as an int8 library for ``cpu``: its folder."""
    from tfaot.pipeline import BuildOptions, Progress, build_model

    out = build_model(str(case["path"]), BuildOptions(
        out_dir=out_dir, triple=toolchains.CORTEX_M[cpu].triple, cpu=cpu,
        weights_dtype="int8", activations=activations), Progress(enabled=False)).path
    manifest = json.loads((out / "q8.json").read_text())
    assert manifest["micro_kernels"] == ["matvec"] and manifest["weights_dtype"] == "int8"
    return out


@pytest.mark.parametrize("cc,flags", [
    ("gcc", ["-march=haswell"]), ("clang", ["-march=haswell"]), ("gcc", []),
    ("aarch64-linux-gnu-gcc", []),
    ("gcc", ["-march=icelake-server"]), ("clang", ["-march=alderlake"]),
    ("aarch64-linux-gnu-gcc", ["-march=armv8.2-a+dotprod"]),
    ("arm-none-eabi-gcc", ["-mthumb", "-mcpu=cortex-m4", "-mfpu=fpv4-sp-d16",
                           "-mfloat-abi=hard", "-DTFRT_FREESTANDING"]),
    ("arm-none-eabi-gcc", ["-mthumb", "-mcpu=cortex-m55", "-mfloat-abi=hard",
                           "-DTFRT_FREESTANDING"])])
def test_kernel_is_warning_free(cc, flags, tmp_path):
    """The int8 kernel's paths (AVX2: haswell; AVX-512 VNNI: icelake-server;
    AVX-VNNI: alderlake; sdot; Cortex-M DSP; Helium; portable), its matmul of many
    streams, with the f32 convolutions of the same build."""
    import platform

    if not shutil.which(cc):
        pytest.skip(f"needs {cc}")
    if any(f.startswith("-march=") and "armv8" not in f for f in flags) and \
            platform.machine() != "x86_64":
        pytest.skip("x86-64 flags")
    _run([cc, "-std=c11", "-O3", "-Wall", "-Wextra", "-Werror", "-pedantic", *flags,
          "-DTFRT_MATVEC_INT8", "-DTFRT_MATVEC_FN=m_int8", "-DTFRT_MATMUL_FN=mm_int8",
          "-DTFRT_CONV_FN=c_f32",
          "-DTFRT_DWCONV_FN=d_f32", "-c", shim_dir() / "tfrt_matvec.c", "-o", tmp_path / "k.o"])


def test_bare_metal_arm_takes_the_kernels_that_win_there():
    """Bare-metal Arm with an FPU, or int8, takes the matvec micro-kernel by
    default, for matrices of 256 weights or more (int8 too on the DSP
    extension, where hosted targets and Helium quantize from LiteRT's 1024,
    also with --matvec=tfaot), the f32
    convolution (its scalar-FPU block; with Helium IREE's convolutions are
    faster: bench_mcu.py) and the depthwise one; int8 builds the int8
    convolution too; --matvec=tfaot asks for all of them; soft-float f32
    stays IREE's."""
    toolchains.require("arm-none-eabi-gcc")
    from tfaot.target_options import make_target
    from tfaot.target_options import MCU_KERNEL_MIN_WEIGHTS

    m4 = {"triple": "thumbv7em-none-eabihf", "cpu": "cortex-m4"}
    for dtype, kinds in (("f32", ("matvec", "conv", "dwconv")),
                         ("int8", ("matvec", "matmul", "conv", "dwconv", "qconv"))):
        t = make_target("cpu", **m4, weights_dtype=dtype)
        assert (t.matvec_kernel, t.kernel_kinds, t.kernel_min_weights) == (
            "tfaot", kinds, MCU_KERNEL_MIN_WEIGHTS)
        assert t.int8_min_weights == MCU_KERNEL_MIN_WEIGHTS
    m55 = make_target("cpu", "thumbv8.1m.main-none-eabihf", "cortex-m55")
    assert m55.kernel_kinds == ("matvec", "dwconv")
    # (Helium: small matrices stay f32, which IREE vectorizes there)
    assert make_target("cpu", "thumbv8.1m.main-none-eabihf", "cortex-m55",
                       weights_dtype="int8").int8_min_weights is None
    t = make_target("cpu", **m4, matvec="tfaot", weights_dtype="int8")
    assert (t.matvec_kernel, t.kernel_kinds, t.kernel_min_weights) == ("tfaot", None, 0)
    assert t.int8_min_weights == MCU_KERNEL_MIN_WEIGHTS
    host = make_target("cpu", weights_dtype="int8")
    assert microkernel.int8_min_weights(host.int8_min_weights) == microkernel.INT8_MIN_WEIGHTS
    assert make_target("cpu", **m4, matvec="iree").matvec_kernel == "iree"
    # (--weights=file too: its int8 and f32 builds verify under QEMU, test_weights_file.py)
    assert make_target("cpu", **m4, external_weights=True).matvec_kernel == "tfaot"
    soft = {"triple": "thumbv7em-none-eabi", "cpu": "cortex-m4"}
    assert make_target("cpu", **soft).matvec_kernel == "iree"
    assert make_target("cpu", **soft, weights_dtype="int8").matvec_kernel == "tfaot"
    # (its f32 convolutions: IREE's, the kernel's block needs the FPU)
    assert make_target("cpu", **soft, weights_dtype="int8").kernel_kinds == (
        "matvec", "matmul", "dwconv", "qconv")


def test_rewrite_keeps_the_kinds_asked_for():
    import keras

    from tfaot.lower.mlir_import import import_program
    from tfaot.streamify_keras import streamify_keras

    keras.utils.set_random_seed(2)
    model = keras.Sequential([keras.Input((None, 6), batch_size=1),
                              keras.layers.Conv1D(16, 3, padding="causal"),
                              keras.layers.GRU(24, return_sequences=True)])
    text = import_program(streamify_keras(model, "cq", "keras"))
    _, every = microkernel.rewrite_matvecs(text, "k", min_weights=1)
    only, count = microkernel.rewrite_matvecs(text, "k", min_weights=1, kinds=("matvec",))
    assert 0 < count < every
    assert "k_matvec_f32" in only and "k_conv_f32" not in only


def test_refused_where_the_kernel_is_not_used():
    from tfaot.errors import TfaotError
    from tfaot.target_options import make_target

    with pytest.raises(TfaotError, match="--weights-dtype=int8 needs tfaot's matvec kernel"):
        make_target("vulkan", weights_dtype="int8")
    with pytest.raises(TfaotError, match="--weights-dtype=int8 needs tfaot's matvec kernel"):
        make_target("cpu", matvec="iree", weights_dtype="int8")
    with pytest.raises(TfaotError, match="NaN or infinite"):
        int8_weights.quantize_int8(np.array([[1.0, np.inf]], np.float32))
