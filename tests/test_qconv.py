"""--weights-dtype=int8 convolutions: int8 weights (one scale per output
channel), the image quantized to int8 once per call (one scale; a 1x1
convolution's, a scale per pixel), int32 sums per patch
(runtime_shim/tfrt_qconv.h; compiler/lower/int8_weights.py pack_qconv /
int8_conv).

Checked here: the C kernel against numpy's model of the same arithmetic
(exact int32 sums, so only the f32 scaling may differ) and against the f32
convolution within the quantization's bound, on every path this machine
runs (portable C, AVX2, its own: AVX-512 VNNI where it has it) under
AddressSanitizer and UndefinedBehaviorSanitizer, with gcc and clang, on
aarch64 (NEON, SDOT) under qemu-aarch64 and on a Cortex-M4 (DSP) under
qemu-system-arm; an image with NaN or Inf, an all-zero image, row and
extreme weight, pixels 1e4 apart; the blob's layout; which convolutions the rewrite gives the
int8 kernel; and a DS-CNN-like Keras model built with int8 weights, whole
window and streamed, through the .so against TensorFlow.
"""
from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

import toolchains
from test_conv_kernels import _keras_batch_norm_model
from test_weights_int8 import CORTEX_M, INT8_PATH, _cortex_m_image, _run_cortex_m
from tfaot.lower import conv_epilogue, int8_weights, microkernel
from tfaot.resources import shim_dir
from util import run as _run
from util import x86_isa_flags

DATA = Path(__file__).parent / "data"
STEPS = 120

#: n, c, kh, kw, ih, iw (padded), strides, dilations: a pointwise layer (two
#: tiles together, a part block of positions), a 10x4 filter over one
#: channel (runs of 4), runs of 9 and 7 (rounded up to 4: the bytes past a
#: run meet zero weights), a patch over the kernel's chunk (2304 > 2048
#: inputs hosted, 128 on a Cortex-M), taps apart in width (a run per tap),
#: tiles part empty (33, 100, 130 outputs), a 1-D convolution, pointwise
#: layers strided and of channels not a multiple of 4 (a scale per pixel,
#: blocks of 8 and a part one).
GEOMETRIES = [
    (64, 64, 1, 1, 5, 5, (1, 1), (1, 1)),
    (64, 1, 10, 4, 20, 10, (2, 2), (1, 1)),
    (12, 3, 3, 3, 9, 7, (1, 1), (2, 1)),
    (40, 256, 3, 3, 4, 5, (1, 1), (1, 1)),
    (100, 20, 2, 3, 7, 9, (1, 2), (1, 2)),
    (33, 8, 1, 1, 1, 3, (1, 1), (1, 1)),
    (16, 30, 5, 3, 12, 9, (1, 1), (1, 1)),
    (5, 7, 3, 3, 6, 6, (1, 1), (1, 2)),
    (130, 16, 1, 3, 1, 13, (1, 1), (1, 1)),
    (40, 24, 1, 1, 7, 9, (2, 2), (1, 1)),
    (48, 37, 1, 1, 3, 4, (1, 1), (1, 1)),
]


def _output_shape(g) -> tuple[int, int]:
    n, c, kh, kw, ih, iw, (sh, sw), (dh, dw) = g
    return (ih - dh * (kh - 1) - 1) // sh + 1, (iw - dw * (kw - 1) - 1) // sw + 1


def _cases(rng) -> list[dict]:
    """Each geometry with a bias and a clamp (ReLU, ReLU6 or none), plus: an
    all-zero row of weights and an extreme one (1e30: its row's other
    weights round to 0) in the first, an all-zero image, an image with NaN
    and one with Inf, of the 10x4 layer and of the first (pointwise: NaN
    outputs at that position only), and a pointwise image whose pixels
    differ in size by 1e4 (each keeps its own precision)."""
    cases = []
    for i, g in enumerate(GEOMETRIES):
        n, c, kh, kw, ih, iw, _, _ = g
        w = (rng.standard_normal((n, kh * kw * c)) * 0.3).astype(np.float32)
        x = rng.standard_normal((ih, iw, c)).astype(np.float32)
        if i == 0:
            w[3] = 0
            w[5, 7] = 1e30
        lo, hi = [(0.0, 6.0), (-np.inf, np.inf), (0.0, np.inf)][i % 3]
        # none, swish, hard swish (conv_epilogue.ACTIVATIONS): the kernel on
        # f16 images applies it (test_half_images.py), the f32 one leaves it
        act = (i // 3) % 3
        bias = np.zeros(-(-n // 32) * 32, np.float32)
        bias[:n] = rng.standard_normal(n)
        cases.append({"g": g, "w": w, "x": x,
                      "post": np.concatenate([[lo, hi, act, 0], bias]).astype(np.float32)})
    for base, fill in ((1, 0.0), (1, np.nan), (1, np.inf), (0, np.nan), (0, -np.inf),
                       (0, 0.0)):
        case = dict(cases[base])
        case["x"] = case["x"].copy()
        case["x"][3, 2, 0] = fill
        if fill == 0.0:
            case["x"][:] = 0
        cases.append(case)
    loud = dict(cases[0])
    loud["x"] = loud["x"] * np.float32(1e-2)
    loud["x"][2, 3] *= np.float32(1e4)
    return cases + [loud]


def _c_array(ctype: str, name: str, values) -> str:
    return f"static const _Alignas(64) {ctype} {name}[] = {{{', '.join(values)}}};\n"


def _floats(values) -> list[str]:
    """C initializers of f32 values, NaN and infinities as constant expressions."""
    def literal(v: float) -> str:
        if np.isnan(v):
            return "(0.0f/0.0f)"
        if np.isinf(v):
            return "(1.0f/0.0f)" if v > 0 else "(-1.0f/0.0f)"
        return f"{float(v)!r}f"

    return [literal(v) for v in values]


def _blob(case) -> np.ndarray:
    n, c, kh, kw, *_, (dh, dw) = case["g"]
    return int8_weights.pack_qconv(case["w"], *int8_weights.qconv_runs(c, kh, kw, dw))


def _cases_header(cases) -> str:
    """qconv_cases.h for data/kernels/qconv_check.c."""
    text, table = "", []
    for i, case in enumerate(cases):
        n, c, kh, kw, ih, iw, (sh, sw), (dh, dw) = case["g"]
        oh, ow = _output_shape(case["g"])
        blob = _blob(case)
        text += _c_array("int8_t", f"w{i}", map(str, blob.view(np.int8).tolist()))
        text += _c_array("float", f"x{i}", _floats(case["x"].ravel()))
        text += _c_array("float", f"post{i}", _floats(case["post"]))
        table.append(f"{{w{i}, {len(blob)}u, x{i}, post{i}, {len(case['post'])}u, {n}u, {c}u, "
                     f"{kh}u, {kw}u, {ih}u, {iw}u, {oh}u, {ow}u, {sh}u, {sw}u, {dh}u, {dw}u, "
                     f"{_scratch(case['g'], False)}u, {_scratch(case['g'], True)}u}}")
    outputs = max(int(np.prod(_output_shape(k["g"]))) * k["g"][0] for k in cases)
    image = max(k["x"].size for k in cases)
    scratch = max(_scratch(k["g"], False) for k in cases)
    scratch16 = max(_scratch(k["g"], True) for k in cases)
    return (text + "struct qconv_case { const int8_t *w; size_t w_bytes; const float *x, *post; "
            "size_t post_count, n, c, kh, kw, ih, iw, oh, ow, sh, sw, dh, dw, scratch, "
            "scratch16; };\n"
            f"static const struct qconv_case cases[] = {{{', '.join(table)}}};\n"
            f"#define MAX_OUTPUTS {outputs}\n#define MAX_IMAGE {image}\n"
            f"#define MAX_SCRATCH {scratch}\n#define MAX_SCRATCH16 {scratch16}\n")


def _scratch(g, half: bool) -> int:
    """The scratch of the kernel (on f16 images: q16_kernel's) for
    geometry g, as the build gives it (microkernel.ConvGeometry.scratch_bytes)."""
    n, c, kh, kw, ih, iw, (sh, sw), (dh, dw) = g
    oh, ow = _output_shape(g)
    geometry = microkernel.ConvGeometry(
        n=n, c=c, kh=kh, kw=kw, ih=ih, iw=iw, oh=oh, ow=ow, sh=sh, sw=sw, dh=dh, dw=dw,
        pad=((0, 0), (0, 0)), depthwise=False, x_type="", y_type="", weights=np.zeros(0),
        int8=True, half=half)
    return geometry.scratch_bytes


def _exact(case) -> tuple[np.ndarray, np.ndarray]:
    """The f32 convolution with the epilogue (float64), and per output the
    sum of its terms' magnitudes."""
    n, c, kh, kw, ih, iw, (sh, sw), (dh, dw) = case["g"]
    oh, ow = _output_shape(case["g"])
    x = case["x"].astype(np.float64)
    patches = np.stack([x[r * sh + i * dh, p * sw + j * dw] for r in range(oh)
                        for p in range(ow) for i in range(kh) for j in range(kw)])
    patches = patches.reshape(oh * ow, -1)
    w = case["w"].astype(np.float64)
    return patches @ w.T + case["post"][4:4 + n], np.abs(patches) @ np.abs(w).T


def printed_floats(proc: subprocess.CompletedProcess) -> np.ndarray:
    """The floats qconv_check.c printed (print_hex.h), after checking that
    it ran to its end."""
    text = proc.stdout + proc.stderr
    lines = [ln for ln in text.splitlines() if ln == "done" or ln.endswith(" ")]
    assert proc.returncode == 0 and lines[-1:] == ["done"], text[-2000:]
    return np.array([int(h, 16) for ln in lines[:-1] for h in ln.split()],
                    np.uint32).view(np.float32)


def _check_output(proc: subprocess.CompletedProcess, cases) -> None:
    """The printed outputs against numpy's int8 arithmetic (f32 rounding
    apart) and against the f32 convolution (the quantization's bound)."""
    got, start = printed_floats(proc), 0
    for case in cases:
        n, c, kh, kw, ih, iw, strides, dilations = case["g"]
        size = int(np.prod(_output_shape(case["g"]))) * n
        y = got[start:start + size].reshape(-1, n)
        start += size
        # (the f32 kernel leaves the activation to the act kernel after it)
        post = case["post"].copy()
        post[2] = conv_epilogue.ACTIVATIONS["none"]
        want = int8_weights.int8_conv(case["w"], case["x"], kh, kw, strides, dilations,
                                      post).reshape(-1, n)
        np.testing.assert_array_equal(np.isnan(y), np.isnan(want), err_msg=str(case["g"]))
        if not np.isfinite(case["x"]).all():
            # NaN where the quantized image had none: the whole output, a
            # pointwise layer's at the position alone
            assert np.isnan(want).any() and (np.isnan(want).all() != (kh == kw == 1))
            finite = ~np.isnan(want)
            np.testing.assert_allclose(y[finite], want[finite], rtol=1e-5, atol=1e-5)
            continue
        assert np.isfinite(y).all(), case["g"]
        exact, terms = _exact(case)
        lo, hi = case["post"][:2]
        np.testing.assert_array_less(np.abs(y - want), 4e-6 * terms + 1e-6,
                                     err_msg=str(case["g"]))
        # int8 rounding of weights and image: 1/254 of their largest each
        bound = (np.abs(case["w"]).max(1) / 254 * np.abs(case["x"]).sum()
                 + np.abs(case["w"]).sum(1) * np.abs(case["x"]).max() / 254)
        assert np.all(np.abs(y - np.clip(exact, lo, hi)) <= bound + 1e-5), case["g"]
    assert start == len(got)


def _host_check(tmp_path: Path, cc: str, flags: list[str]) -> subprocess.CompletedProcess:
    cases = _cases(np.random.default_rng(7))
    (tmp_path / "qconv_cases.h").write_text(_cases_header(cases))
    exe = tmp_path / "check"
    _run([cc, "-std=c11", "-O1", "-g", "-Wall", "-Wextra", "-Werror", *flags,
          "-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-DTFRT_MATVEC_INT8",
          "-DTFRT_QCONV_FN=q_kernel", "-I", tmp_path, DATA / "kernels" / "qconv_check.c",
          shim_dir() / "tfrt_matvec.c", "-o", exe])
    return cases, subprocess.run([exe], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("isa", ["generic", "avx2", "native", "avx512_emulated"])
def test_kernel_matches_the_arithmetic_under_sanitizers(isa, tmp_path):
    """Each x86-64 path this machine runs (native: AVX-512 VNNI's blocks of
    8 positions x 32 lanes and 6 x 64 where the CPU has it; those blocks
    emulated on any x86-64), or aarch64's own, with AddressSanitizer and
    UndefinedBehaviorSanitizer."""
    flags = x86_isa_flags(isa)
    if flags is None:
        pytest.skip(f"the {isa} path needs an x86-64 CPU that runs it")
    cases, proc = _host_check(tmp_path, "gcc", flags)
    _check_output(proc, cases)


def test_kernel_with_clang(tmp_path):
    """clang compiles the same kernel (its asm blocks, its lane loops)
    warning-free, with the same results."""
    toolchains.require("clang")
    cases, proc = _host_check(tmp_path, "clang", x86_isa_flags("native"))
    _check_output(proc, cases)


@pytest.mark.parametrize("march,instruction", [("armv8-a", "sadalp"),
                                               ("armv8.2-a+dotprod", "sdot")])
def test_aarch64_kernel_matches_the_arithmetic(march, instruction, tmp_path):
    """The NEON paths (SMULL/ADDP/SADALP; SDOT) under qemu-aarch64."""
    toolchains.require("aarch64-linux-gnu-gcc", "qemu-aarch64")
    cases = _cases(np.random.default_rng(8))
    (tmp_path / "qconv_cases.h").write_text(_cases_header(cases))
    _check_output(toolchains.run_kernel_check_aarch64(
        DATA / "kernels" / "qconv_check.c", ["-DTFRT_MATVEC_INT8", "-DTFRT_QCONV_FN=q_kernel"],
        march, instruction, tmp_path), cases)


@pytest.mark.parametrize("cpu", ["cortex-m4", "cortex-m55"])
def test_cortex_m_kernel_matches_the_arithmetic(cpu, tmp_path):
    """The DSP path (SXTB16 + SMLAD, positions in pairs, patches over the
    Cortex-M's 128-input chunk) and Helium's (one position at a time) under
    qemu-system-arm."""
    toolchains.require("arm-none-eabi-gcc", "qemu-system-arm")
    cases = _cases(np.random.default_rng(9))
    (tmp_path / "qconv_cases.h").write_text(_cases_header(cases))
    image = _cortex_m_image(cpu, tmp_path, ["-DTFRT_MATVEC_INT8", "-DTFRT_QCONV_FN=q_kernel"],
                            DATA / "kernels" / "qconv_check.c")
    assert INT8_PATH[cpu] in toolchains.disassembly(image, cpu)
    assert cpu in CORTEX_M
    _check_output(_run_cortex_m(cpu, image), cases)


@pytest.mark.parametrize("core", [
    ["--target=armv7em-none-eabi", "-mcpu=cortex-m4", "-mfpu=fpv4-sp-d16"],
    ["--target=thumbv8.1m.main-none-eabi", "-mcpu=cortex-m55"]], ids=["m4", "m55"])
@pytest.mark.parametrize("kinds", [
    ["-DTFRT_MATVEC_INT8", "-DTFRT_MATVEC_FN=m", "-DTFRT_QCONV_FN=q"],
    ["-DTFRT_MATVEC_FN=m", "-DTFRT_CONV_FN=c", "-DTFRT_DWCONV_FN=d"]], ids=["int8", "f32"])
def test_cortex_m_kernels_are_warning_free_with_clang(kinds, core, tmp_path):
    """The Cortex-M (DSP, scalar FPU; Helium on the M55) paths with clang as
    well as gcc: a helper left unused there is a warning only clang gives."""
    if not shutil.which("clang"):
        pytest.skip("needs clang")
    _run(["clang", "-std=c11", "-Wall", "-Wextra", "-Werror", "-O2", *core, "-mfloat-abi=hard",
          "-DTFRT_FREESTANDING", *kinds, "-c", shim_dir() / "tfrt_matvec.c",
          "-o", tmp_path / "k.o"])


def test_scratch_slack_and_block_agree_with_the_kernel():
    header = (shim_dir() / "tfrt_qconv.h").read_text()
    assert re.search(r"#define TFRT_Q_SLACK (\d+)", header).group(1) == str(
        int8_weights.QCONV_SLACK)
    assert re.search(r"#define TFRT_Q_BLOCK (\d+)", header).group(1) == str(
        int8_weights.QCONV_BLOCK)


def test_packing():
    """pack_qconv: the scales, the weight sums, then [tiles][runs*run4/4][32][4]
    with each run padded by zero weights to a multiple of 4."""
    rng = np.random.default_rng(1)
    runs, run, n = 3, 7, 40
    w = rng.standard_normal((n, runs * run)).astype(np.float32)
    blob = int8_weights.pack_qconv(w, runs, run)
    q, scale = int8_weights.quantize_int8(w)
    tiles, run4 = 2, 8
    assert len(blob) == tiles * 32 * 8 + tiles * 32 * runs * run4
    np.testing.assert_array_equal(blob[:n * 4].view("<f4"), scale)
    sums = blob[tiles * 128:tiles * 256].view("<i4")
    np.testing.assert_array_equal(sums[:n], q.astype(np.int32).sum(1))
    assert not sums[n:].any()
    data = blob[tiles * 256:].view(np.int8).reshape(tiles, runs * run4 // 4, 32, 4)
    rows = data.transpose(0, 2, 1, 3).reshape(tiles * 32, runs, run4)
    np.testing.assert_array_equal(rows[:n, :, :run].reshape(n, -1), q)
    assert not rows[:, :, run:].any() and not rows[n:].any()


def _conv_text(x_shape, f_shape, groups: int = 1, dilation=(1, 1)) -> str:
    """One constant-filter NHWC convolution as the TF import writes it."""
    y_shape = [1, x_shape[1] - dilation[0] * (f_shape[0] - 1),
               x_shape[2] - dilation[1] * (f_shape[1] - 1), f_shape[3]]
    t = lambda s: "tensor<" + "x".join(map(str, s)) + "xf32>"  # noqa: E731
    values = np.random.default_rng(0).standard_normal(f_shape).astype(np.float32)
    hexval = values.tobytes().hex().upper()
    return f"""module {{
  func.func @main(%x: {t(x_shape)}) -> {t(y_shape)} {{
    %f = stablehlo.constant dense<"0x{hexval}"> : {t(f_shape)}
    %y = stablehlo.convolution(%x, %f) dim_numbers = [b, 0, 1, f]x[0, 1, i, o]->[b, 0, 1, f],
        window = {{stride = [1, 1], rhs_dilate = [{dilation[0]}, {dilation[1]}]}}
        {{batch_group_count = 1 : i64, feature_group_count = {groups} : i64}}
        : ({t(x_shape)}, {t(f_shape)}) -> {t(y_shape)}
    return %y : {t(y_shape)}
  }}
}}
"""


@pytest.mark.parametrize("x_shape,f_shape,groups,dilation,kernel", [
    ([1, 9, 5, 64], [1, 1, 64, 64], 1, (1, 1), "qconv_int8"),  # pointwise
    ([1, 20, 10, 1], [10, 4, 1, 32], 1, (1, 1), "qconv_int8"),  # runs of 4
    ([1, 9, 9, 3], [3, 3, 3, 48], 1, (1, 1), "qconv_int8"),  # runs of 9
    ([1, 9, 9, 1], [3, 3, 1, 128], 1, (1, 1), "conv_f32"),  # runs of 3
    ([1, 9, 9, 2], [3, 3, 2, 128], 1, (1, 2), "conv_f32"),  # taps apart: runs of 2
    ([1, 9, 5, 8], [1, 1, 8, 16], 1, (1, 1), "conv_f32"),  # 128 weights
    ([1, 9, 5, 64], [3, 3, 1, 64], 64, (1, 1), "dwconv_f32"),  # depthwise
])
def test_rewrite_gives_the_int8_kernel_what_it_computes_well(x_shape, f_shape, groups,
                                                             dilation, kernel):
    """In an int8 build, convolutions of 1024 weights or more whose patches
    are runs of 4 or more inputs take the int8 kernel; the others keep f32
    weights: runs shorter than a group of 4 would waste products, small
    filters save nothing, depthwise filters are a few weights per channel."""
    text, count = microkernel.rewrite_matvecs(_conv_text(x_shape, f_shape, groups, dilation),
                                              "m", dtype="int8")
    assert count == 1
    assert re.findall(r"func\.call @(m_\w+)\(", text) == [f"m_{kernel}"], text[-3000:]
    if kernel == "qconv_int8":  # its scratch: the int8 image and the slack (pointwise:
        # 24 pixels and their scales, word-aligned)
        pixels = x_shape[1] * x_shape[2]
        scratch = (24 * (x_shape[3] + 4) + 3 if f_shape[:2] == [1, 1] else pixels * x_shape[3])
        assert f"tensor<{scratch + int8_weights.QCONV_SLACK}xi8>" in text
    # a pointwise int8 layer's result takes its image's buffer (the kernel
    # reads the image into its scratch before it writes): tied in the
    # dispatch, one binding for both
    dispatch = re.search(r"= flow\.dispatch @\w+::@\w+\((%\w+)\) : \([^)]*\) -> (.*)", text)
    pointwise = kernel == "qconv_int8" and f_shape[:2] == [1, 1]
    assert dispatch[2].startswith(f"({dispatch[1]}, ") == pointwise, dispatch[0]
    assert ("%y = stream.binding.subspan %bx[" in text) == pointwise


def test_a_streamed_step_keeps_pointwise_images_apart():
    """Tying a pointwise int8 result to its image saves a whole inference's
    big images, but IREE packed a streamed step's temporaries larger with
    it (the streamed int8 DS-CNN on a Cortex-M4: 23.7 KB against 20.8 KB):
    a module that stores state (a streamed step) keeps them apart."""
    from tfaot.lower.passes import lower_for_target
    from tfaot.target_options import make_target

    target = make_target("cpu", "thumbv7em-none-eabihf", "cortex-m4", weights_dtype="int8")
    whole = _conv_text([1, 9, 5, 64], [1, 1, 64, 64])
    state = ("  ml_program.global private mutable @state0(dense<0.0> : tensor<1xf32>) "
             ": tensor<1xf32>\n  func.func @keep(%s: tensor<1xf32>) {\n"
             "    ml_program.global_store @state0 = %s : tensor<1xf32>\n    return\n  }\n")
    streamed = whole.replace("module {\n", "module {\n" + state, 1)
    tied = [("%y = stream.binding.subspan %bx[" in lower_for_target(text, "m", target)[0])
            for text in (whole, streamed)]
    assert tied == [True, False]


def test_int8_convolutions_where_the_target_has_int8_dot_products():
    """int8 builds give convolutions int8 weights where the target multiplies
    int8 faster than f32: 32-bit Arm always; x86-64 and aarch64 with their
    dot-product instructions (this machine's, for --cpu host), else f32."""
    from tfaot.target import INT8_DOT_FLAGS, host_cpu_flags, int8_dot_products
    from tfaot.target_options import make_target

    assert make_target("cpu", "thumbv7em-none-eabihf", "cortex-m4", weights_dtype="int8",
                       matvec="tfaot").conv_int8
    assert not make_target("cpu", "x86_64-unknown-linux-gnu", "generic").conv_int8
    assert not int8_dot_products("arm64", "generic")  # (aarch64, not 32-bit Arm)
    host = make_target("cpu", weights_dtype="int8")
    assert host.conv_int8 == (INT8_DOT_FLAGS.get(host.arch, {"-"}) <= host_cpu_flags())
    # a named CPU: its features as the C compiler knows them (here gcc, for x86-64)
    if shutil.which("gcc") and host.arch == "x86_64":
        assert int8_dot_products("x86_64", "icelake-server", "gcc")  # AVX-512 VNNI
        assert not int8_dot_products("x86_64", "haswell", "gcc")  # AVX2 only
        assert not int8_dot_products("x86_64", "no-such-cpu", "gcc")
    assert not int8_dot_products("x86_64", "icelake-server", None)  # no compiler to ask


def test_targets_without_int8_dot_products_keep_f32_convolutions():
    from dataclasses import replace

    from tfaot.lower.passes import lower_for_target
    from tfaot.target_options import make_target

    target = replace(make_target("cpu", weights_dtype="int8"), int8_convolutions=False)
    text, _ = lower_for_target(_conv_text([1, 9, 5, 64], [1, 1, 64, 64]), "m", target)
    assert re.findall(r"func\.call @(m_\w+)\(", text) == ["m_conv_f32"]


def test_manifest_scheme_says_what_the_convolutions_got():
    from dataclasses import replace

    from tfaot.package.library import _weights_dtype
    from tfaot.target_options import make_target

    host = replace(make_target("cpu", weights_dtype="int8"), int8_convolutions=True)
    scheme = _weights_dtype(host, {"matvec": "m", "qconv": "q"})["weights_scheme"]
    assert "image quantized" in scheme
    assert "no convolution has int8" in _weights_dtype(host, {"matvec": "m"})["weights_scheme"]
    without = replace(host, int8_convolutions=False)
    scheme = _weights_dtype(without, {"matvec": "m", "conv": "c"})["weights_scheme"]
    assert "no int8 dot product" in scheme
    assert "of 1024 weights or more" in scheme and "block of 16 inputs" in scheme


def test_manifest_scheme_says_what_a_cortex_m4_quantizes():
    """Bare-metal Arm quantizes matrices and convolutions from 256 weights,
    and the DSP path's input to int16 per chunk of 128."""
    toolchains.require("arm-none-eabi-gcc")
    from tfaot.package.library import _weights_dtype
    from tfaot.target_options import make_target

    m4 = make_target("cpu", "thumbv7em-none-eabihf", "cortex-m4", weights_dtype="int8")
    scheme = _weights_dtype(m4, {"matvec": "m", "qconv": "q"})["weights_scheme"]
    assert "matvec (and the matmul of many streams) of 256 weights or more" in scheme
    assert "to int16, one scale per chunk of 128 inputs" in scheme
    assert "convolutions of 256 weights or more" in scheme


@pytest.fixture(scope="module")
def bn_int8(tmp_path_factory):
    """The DS-CNN-like batch-norm model of test_conv_kernels, built with int8
    weights whole window and streamed (and f32 whole window, to compare),
    with the int8 convolution kernel whatever this machine's CPU."""
    from dataclasses import replace

    from tfaot import target_options
    from tfaot.cli import main

    tmp = tmp_path_factory.mktemp("qconv")
    _keras_batch_norm_model().save(tmp / "bn.keras")
    make_target = target_options.make_target  # (imported by the pipeline when it builds)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(target_options, "make_target", lambda *args, **kwargs: replace(
            make_target(*args, **kwargs), int8_convolutions=True))
        for sub, flags in (("whole", ["--whole-window", "--weights-dtype=int8"]),
                           ("stream", ["--stream", "--weights-dtype=int8"]),
                           ("file", ["--stream", "--weights-dtype=int8", "--weights=file"]),
                           ("f32", ["--whole-window"])):
            assert main(["build", str(tmp / "bn.keras"), "-o", str(tmp / sub), "--quiet",
                         *flags]) == 0
    return tmp


@pytest.mark.parametrize("sub", ["whole", "stream", "file"])
def test_int8_model_through_the_so(bn_int8, sub, capsys):
    """Through the built library over STEPS steps against TensorFlow: within
    verify's int8 tolerance, and really quantized (f32 builds: ~1e-7);
    also with the weights in a sidecar (--weights=file: the int8 blob is a
    global the dispatch reads)."""
    from tfaot.cli import main

    out = bn_int8 / sub
    nm = _run(["nm", out / "src" / "bn_kernels.o"]).stdout
    # the pointwise layer int8, the first (runs of 3) and the depthwise f32
    for symbol in ("bn_qconv_int8", "bn_conv_f32", "bn_dwconv_f32"):
        assert re.search(rf"\bT {symbol}\b", nm), nm
    manifest = json.loads((out / "bn.json").read_text())
    assert "qconv" in manifest["micro_kernels"] and manifest["weights_dtype"] == "int8"
    assert "image quantized" in manifest["weights_scheme"]
    assert manifest["int8_layers"] == 1  # the pointwise layer (the Dense head is small)
    if sub == "file":  # the sidecar holds the int8 filter (96 packed rows of 72)
        assert manifest["weights"]["bytes"] >= 96 * 8 + 96 * 72
    assert main(["verify", str(bn_int8 / "bn.keras"), str(out), "--steps", str(STEPS)]) == 0
    err = float(re.search(r"max abs error (\S+)", capsys.readouterr().out).group(1))
    assert 1e-5 < err < 2e-2, err


def test_int8_model_weighs_less(bn_int8):
    """The pointwise filter (72x72, packed as 96 rows) is stored as int8 with
    its scales and sums: 27 KB of f32 become 7.5 KB."""
    def weight_bytes(sub):
        return json.loads((bn_int8 / sub / "bn.json").read_text())["footprint"]["weight_bytes"]

    saved = weight_bytes("f32") - weight_bytes("whole")
    assert saved >= 96 * 72 * 4 - (96 * 8 + 96 * 72), saved


def test_cortex_m4_image_matches_the_host_build(bn_int8, tmp_path):
    """A bare-metal Cortex-M4 int8 build takes the depthwise, int8 and
    (for the convolution too small for int8 weights) f32 convolution kernels
    by itself; linked into an image run by qemu-system-arm, its DSP path
    gives the host int8 build's outputs. (Built with the host's int8
    threshold: bare metal also quantizes the model's smaller Dense head,
    Target.int8_min_weights, where the host keeps it f32.)"""
    from dataclasses import replace

    toolchains.require("arm-none-eabi-gcc", "qemu-system-arm")
    from tfaot import harness, target_options
    from tfaot.pipeline import BuildOptions, Progress, build_model

    make_target = target_options.make_target
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(target_options, "make_target", lambda *args, **kwargs: replace(
            make_target(*args, **kwargs), int8_min_weights=None))
        out = build_model(str(bn_int8 / "bn.keras"), BuildOptions(
            out_dir=tmp_path / "m4", triple="thumbv7em-none-eabihf", cpu="cortex-m4",
            weights_dtype="int8", fixed_window="whole", intermediates="f32"),
            Progress(enabled=False)).path
    manifest = json.loads((out / "bn.json").read_text())
    assert manifest["micro_kernels"] == ["conv", "dwconv", "qconv"], manifest["micro_kernels"]
    host = harness.load(bn_int8 / "whole")
    xs = np.random.default_rng(4).standard_normal((12, *host.input_shape)).astype(np.float32)
    image, ys = toolchains.run_cortex_m_image(out, "bn", xs, tmp_path)
    assert "smlad" in _run(["arm-none-eabi-objdump", "-d", image]).stdout
    want = host.step_n(xs).reshape(len(xs), -1)
    np.testing.assert_allclose(ys, want, rtol=1e-5, atol=1e-5)


def test_pointwise_layers_quantize_each_pixel(tmp_path):
    """Two 1x1 layers over images with one pixel 1000x louder than the rest,
    int8, through the .so over STEPS images against TensorFlow: each pixel
    has its own scale, so the quiet positions keep int8's precision (with
    one scale for the image they all rounded to 0: errors the size of the
    outputs). LiteRT's XNNPACK quantizes 1x1 layers by pixel too."""
    from dataclasses import replace

    import keras

    from tfaot import harness, target_options
    from tfaot.cli import main

    x = keras.Input((6, 6, 32))
    h = keras.layers.Conv2D(64, 1, activation="relu")(x)
    model = keras.Model(x, keras.layers.Conv2D(32, 1)(h))
    model.save(tmp_path / "pw.keras")
    make_target = target_options.make_target
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(target_options, "make_target", lambda *args, **kwargs: replace(
            make_target(*args, **kwargs), int8_convolutions=True))
        assert main(["build", str(tmp_path / "pw.keras"), "-o", str(tmp_path / "pw"),
                     "--quiet", "--whole-window", "--weights-dtype=int8"]) == 0
    rng = np.random.default_rng(5)
    xs = rng.standard_normal((STEPS, 6, 6, 32)).astype(np.float32)
    loud = rng.integers(0, 36, STEPS)
    xs.reshape(STEPS, 36, 32)[np.arange(STEPS), loud] *= 1000
    lib = harness.load(tmp_path / "pw")
    assert "qconv" in lib.manifest["micro_kernels"]
    got = lib.step_n(xs[:, None]).reshape(STEPS, 36, 32)
    want = model.predict(xs, verbose=0).reshape(STEPS, 36, 32)
    quiet = np.ones((STEPS, 36), bool)
    quiet[np.arange(STEPS), loud] = False
    err = np.abs(got - want)[quiet].max()
    assert 1e-4 < err < 0.05 * np.abs(want[quiet]).max(), err
    # the loud pixels within int8's precision of theirs
    loud_err = np.abs(got - want)[~quiet].max()
    assert loud_err < 0.05 * np.abs(want[~quiet]).max(), loud_err
