"""tfaot's convolution micro-kernels (compiler/lower/microkernel.py, runtime_shim/tfrt_matvec.c).

Constant-filter convolutions (and depthwise ones) leave IREE's codegen for C
kernels with weights packed at build time. The C kernels are checked against
a numpy convolution over strides, dilations, depth multipliers and partial
tiles; the rewrite against the op forms it must take or leave; whole models
through the .so against TensorFlow (the streaming-conv suites also run through
them: every CPU build uses them). Speed: bench/bench_streaming.py.
"""
from __future__ import annotations

import ctypes
import json
import platform
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

import toolchains
from tfaot.lower import conv_epilogue, microkernel, weight_packing
from tfaot.resources import shim_dir
from tfaot.target_options import make_target
from util import emulated_avx512_flags, sanitized_builds
from util import run as _run

STEPS = 120


@pytest.fixture(scope="module", params=["gcc", "clang", "sse2", "avx512_emulated"])
def kernels(request, tmp_path_factory):
    """The C kernels (f32 and bf16) built as a shared library with ``cc``
    for this CPU, or with gcc for x86-64's baseline ("sse2": the 4-lane
    blocks, tfrt_conv_v4.h, aarch64 builds take too) or for AVX-512 on any
    x86-64 ("avx512_emulated": util.emulated_avx512_flags)."""
    from tfaot.package.link import matvec_flags

    cc = request.param if request.param in ("gcc", "clang") else "gcc"
    if request.param in ("sse2", "avx512_emulated") and platform.machine() != "x86_64":
        pytest.skip("an x86-64 path")
    if not shutil.which(cc):
        pytest.skip(f"needs {cc}")
    libs = {}
    for dtype in ("f32", "bf16"):
        flags = matvec_flags(make_target("cpu", weights_dtype=dtype))
        if request.param in ("sse2", "avx512_emulated"):
            flags = [f for f in flags if not f.startswith(("-march", "-mprefer", "-mcpu"))]
        if request.param == "avx512_emulated":  # (-O1: gcc -O3 took 44 s over SIMDe)
            flags += [*emulated_avx512_flags(), "-O1"]
        lib = tmp_path_factory.mktemp(f"k_{request.param}") / f"k_{dtype}.so"
        _run([cc, "-std=c11", "-Wall", "-Wextra", "-Werror", "-shared", "-fPIC", *flags,
              "-DTFRT_CONV_FN=conv", "-DTFRT_DWCONV_FN=dwconv", "-DTFRT_ACT_FN=act",
              shim_dir() / "tfrt_matvec.c", "-o", lib])
        libs[dtype] = ctypes.CDLL(str(lib))
    return libs


def _reference(x, filters, stride, dilation, groups):
    """numpy convolution of ``x [ih, iw, c]`` with ``filters [kh, kw, c/groups, n]``."""
    kh, kw, _, n = filters.shape
    ih, iw, c = x.shape
    oh = (ih - dilation[0] * (kh - 1) - 1) // stride[0] + 1
    ow = (iw - dilation[1] * (kw - 1) - 1) // stride[1] + 1
    y = np.zeros((oh, ow, n), np.float64)
    per_group = n // groups
    for i in range(kh):
        for j in range(kw):
            rows = x[i * dilation[0]::stride[0], j * dilation[1]::stride[1]][:oh, :ow]
            for o in range(n):
                g = o // per_group
                part = rows[..., g * (c // groups):(g + 1) * (c // groups)]
                y[..., o] += part @ filters[i, j, :, o]
    return y


def _post(n, bias=None, lo=-np.inf, hi=np.inf, act="none"):
    """The kernels' epilogue array (tfrt_post): [lo, hi, act, 0, bias padded
    to tiles]."""
    post = np.zeros(4 + -(-n // weight_packing.TILE) * weight_packing.TILE, np.float32)
    post[:3] = lo, hi, conv_epilogue.ACTIVATIONS[act]
    if bias is not None:
        post[4:4 + n] = bias
    return post


def _call(fn, packed, x, n, c, kh, kw, oh, ow, stride, dilation, pad=None, post=None):
    """The conv kernel on x (already padded), or with ``pad`` ((top,
    bottom), (left, right)) the depthwise kernel on x and that padding."""
    y = np.full((oh, ow, n), np.nan, np.float32)
    size = ctypes.c_size_t
    sizes = 11 if pad is None else 14
    fn.argtypes = [ctypes.c_void_p, size, ctypes.c_void_p, size, ctypes.c_void_p, size,
                   ctypes.c_void_p] + [size] * sizes
    # offsets: w, x and y start into their buffers
    # (four all-ones elements before the weights: NaN as f32 or bf16)
    packed = np.ascontiguousarray(packed)
    wb = np.concatenate([np.full(4 * packed.itemsize, 0xFF, np.uint8),
                         packed.view(np.uint8).ravel()]).view(packed.dtype)
    xb = np.concatenate([[np.float32(7)], x.ravel()]).astype(np.float32)
    yb = np.concatenate([[np.float32(7)], y.ravel()]).astype(np.float32)
    post = _post(n) if post is None else post
    image = () if pad is None else (x.shape[0], x.shape[1], pad[0][0], pad[1][0])
    fn(wb.ctypes.data, 4, xb.ctypes.data, 1, yb.ctypes.data, 1, post.ctypes.data, n, c, kh, kw,
       *(image or (x.shape[1],)), oh, ow, *stride, *dilation)
    assert yb[0] == 7  # nothing written before the offset
    return yb[1:].reshape(oh, ow, n)


CONVS = [  # n, c, kh, kw, ih, iw, stride, dilation
    (30, 28, 10, 4, 10, 18, (2, 1), (1, 1)),  # the CNN's streamed frame
    (16, 30, 5, 3, 5, 15, (1, 1), (1, 1)),
    (28, 1, 10, 4, 11, 40, (1, 1), (1, 1)),  # one input channel
    (65, 3, 3, 3, 9, 9, (2, 2), (2, 1)),  # three tiles, the last of one lane
    (7, 5, 1, 1, 4, 6, (1, 1), (1, 1)),  # pointwise
    (8, 4, 3, 3, 7, 9, (1, 2), (1, 2)),  # dilation in width: taps one by one
    (12, 6, 1, 5, 1, 17, (1, 1), (1, 3)),  # 1-D, dilated
    # blocks of 6 positions (x86-64 AVX2 builds) past the last full block:
    (20, 8, 3, 3, 5, 5, (1, 1), (1, 1)),  # 9 positions
    (17, 4, 2, 2, 3, 11, (1, 1), (1, 1)),  # 20 positions, a tail of 2
    # a last tile of 8 lanes or fewer in blocks of 10 positions (AVX2)
    (24, 16, 1, 1, 5, 7, (1, 1), (1, 1)),  # 35 positions: 3 blocks and 5 more
    (40, 9, 3, 1, 6, 6, (1, 1), (1, 1)),  # 32 + 8 lanes
    # a last tile of 16 lanes or fewer in blocks of 16 positions (AVX-512)
    (16, 24, 1, 1, 8, 9, (1, 1), (1, 1)),  # 72 positions: 4 blocks and 8 more
    (8, 48, 1, 1, 7, 7, (1, 1), (1, 1)),  # 49: 3 blocks, the last 4 moved back
    (48, 6, 3, 3, 7, 8, (1, 1), (1, 1)),  # 32 + 16 lanes over 30 positions
    # one position (x86-64, aarch64: two sums a lane)
    (40, 64, 1, 3, 1, 3, (1, 1), (1, 1)),  # a Conv1D's frame, 32 + 8 lanes
    (33, 20, 3, 3, 3, 5, (1, 2), (1, 2)),  # a 2-D patch, strided and dilated in width
    (16, 7, 2, 2, 2, 2, (1, 1), (1, 1)),  # one tile of 16 lanes, odd runs
    # few positions, over 512 KB of weights (AVX2: all positions a chunk of rows at a time)
    (72, 512, 3, 3, 4, 7, (1, 1), (1, 1)),  # 10 positions, 32 + 32 + 8 lanes
    (56, 640, 3, 3, 5, 6, (2, 1), (1, 2)),  # 4 positions, strided and dilated, 32 + 24
    (64, 4096, 1, 1, 1, 3, (1, 1), (1, 1)),  # 3 positions, 1 MB
    (40, 7000, 1, 1, 3, 4, (1, 1), (1, 1)),  # 12 positions, 32 + 8 lanes
    # at most 16 outputs: one tile of 16 lanes (AVX-512: the C blocks below
    # 16 positions)
    (5, 9, 3, 3, 4, 5, (1, 1), (1, 1)),  # 6 positions
    (13, 11, 1, 3, 1, 5, (1, 1), (1, 1)),  # 3 positions, runs of 33
    (9, 6, 2, 2, 9, 10, (1, 1), (1, 1)),  # 72 positions, a last tile of 9
    # at most 4 outputs: filters one after another, each a dot product a position
    (1, 64, 9, 1, 12, 1, (1, 1), (1, 1)),  # a Conv1D(1, 9) over 64 channels
    (1, 64, 9, 1, 9, 1, (1, 1), (1, 1)),  # its streamed frame: one position
    (3, 6, 3, 3, 9, 8, (2, 1), (1, 2)),  # strided and dilated
    (4, 5, 1, 1, 4, 6, (1, 1), (1, 1)),  # pointwise, runs shorter than the partial sums
    (2, 1, 10, 4, 12, 10, (2, 2), (1, 1)),  # one input channel
]


@pytest.mark.parametrize("case", CONVS, ids=lambda c: "x".join(map(str, c[:6])))
def test_conv_kernel_matches_numpy(kernels, case):
    n, c, kh, kw, ih, iw, stride, dilation = case
    rng = np.random.default_rng(n * c)
    # weights scaled as trained ones are: outputs of order one
    filters = (rng.standard_normal((kh, kw, c, n)) / np.sqrt(kh * kw * c)).astype(np.float32)
    x = rng.standard_normal((ih, iw, c)).astype(np.float32)
    want = _reference(x, filters, stride, dilation, 1)
    w = filters.reshape(kh * kw * c, n).T
    got = _call(kernels["f32"].conv, weight_packing.pack_conv(w), x, n, c, kh, kw, *want.shape[:2],
                stride, dilation)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)


DEPTHWISE = [  # n, c, kh, kw, ih, iw, stride, dilation, ((top, bottom), (left, right))
    (64, 64, 3, 3, 3, 21, (1, 1), (1, 1), ((0, 0), (0, 0))),  # DS-CNN's streamed frame
    (70, 70, 3, 1, 5, 4, (1, 1), (2, 1), ((0, 0), (0, 0))),  # partial lanes, dilated in time
    (10, 5, 2, 3, 6, 7, (2, 2), (1, 1), ((0, 0), (0, 0))),  # depth multiplier 2
    (6, 2, 1, 4, 1, 12, (1, 1), (1, 2), ((0, 0), (0, 0))),  # 1-D, multiplier 3
    (20, 20, 3, 3, 4, 9, (1, 1), (1, 1), ((0, 0), (0, 0))),  # 7 per row: a block, then one by one
    # zero padding, which the kernel skips instead of reading a padded copy:
    (64, 64, 3, 3, 5, 19, (1, 1), (1, 1), ((0, 0), (1, 1))),  # DS-CNN's ZeroPadding2D
    (96, 96, 3, 3, 6, 9, (2, 1), (1, 1), ((1, 1), (1, 1))),  # 'same', 64 + 32 channels, strided
    (24, 24, 3, 3, 5, 11, (1, 1), (2, 2), ((2, 2), (2, 2))),  # dilated
    (33, 33, 3, 3, 2, 2, (1, 1), (1, 1), ((3, 3), (4, 3))),  # positions wholly over padding
    (12, 6, 3, 3, 4, 8, (1, 1), (1, 1), ((1, 1), (1, 1))),  # depth multiplier 2
    # 3 columns at stride 1: kws_streaming's 10x3 over 300 channels, one block a row
    (300, 300, 10, 3, 12, 9, (1, 1), (1, 1), ((0, 0), (1, 1))),
    (48, 48, 3, 3, 4, 4, (2, 1), (1, 1), ((1, 1), (1, 1))),
]


@pytest.mark.parametrize("case", DEPTHWISE, ids=lambda c: "x".join(map(str, c[:6] + c[8][1])))
def test_depthwise_kernel_matches_numpy(kernels, case):
    n, c, kh, kw, ih, iw, stride, dilation, pad = case
    rng = np.random.default_rng(n + c)
    filters = (rng.standard_normal((kh, kw, 1, n)) / np.sqrt(kh * kw)).astype(np.float32)
    x = rng.standard_normal((ih, iw, c)).astype(np.float32)
    want = _reference(np.pad(x, (*pad, (0, 0))), filters, stride, dilation, c)
    got = _call(kernels["f32"].dwconv, np.ascontiguousarray(filters.reshape(kh * kw, n)), x, n, c,
                kh, kw, *want.shape[:2], stride, dilation, pad=pad)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)


def _call_kind(kernels, kind: str, filters, x, out_hw, post):
    """The f32 conv ("conv") or depthwise ("dwconv") kernel, stride and
    dilation 1, no padding, with epilogue ``post``."""
    kh, kw, _, n = filters.shape
    c = x.shape[-1]
    if kind == "conv":
        return _call(kernels["f32"].conv, weight_packing.pack_conv(filters.reshape(-1, n).T), x, n,
                     c, kh, kw, *out_hw, (1, 1), (1, 1), post=post)
    return _call(kernels["f32"].dwconv, np.ascontiguousarray(filters.reshape(kh * kw, n)), x, n,
                 c, kh, kw, *out_hw, (1, 1), (1, 1), pad=((0, 0), (0, 0)), post=post)


@pytest.mark.parametrize("kind", ["conv", "dwconv"])
def test_epilogue_bias_and_clamp(kernels, kind):
    """The epilogue the build folds into the kernels (a bias, a batch norm's
    shift, a ReLU6): each output is min(max(y + bias, lo), hi), and a NaN
    input stays NaN through the clamp."""
    n, c, kh, kw, ih, iw = 40, 40, 3, 3, 6, 17
    rng = np.random.default_rng(3)
    cg = c if kind == "conv" else 1
    filters = (rng.standard_normal((kh, kw, cg, n)) / np.sqrt(kh * kw * cg)).astype(np.float32)
    x = rng.standard_normal((ih, iw, c)).astype(np.float32)
    x[2, 5, 0] = np.nan
    bias = rng.standard_normal(n).astype(np.float32)
    post = _post(n, bias, lo=0.0, hi=0.6)
    want = _reference(x, filters, (1, 1), (1, 1), 1 if kind == "conv" else c) + bias
    want = np.where(np.isnan(want), np.nan, np.clip(want, 0.0, 0.6))
    got = _call_kind(kernels, kind, filters, x, want.shape[:2], post)
    assert np.isnan(got).sum() == np.isnan(want).sum() > 0
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)


#: geometries (n, c, kh, kw, ih, iw) that take each path of the f32 conv
#: kernel: AVX2's 6 x 16 blocks and 8-lane blocks, AVX-512's half tiles,
#: one position, few positions over 512 KB of weights, the C blocks' tail
ACTIVATION_CONVS = [(40, 40, 3, 3, 6, 17), (24, 16, 1, 1, 5, 7), (8, 48, 1, 1, 7, 7),
                    (40, 64, 1, 3, 1, 3), (72, 512, 3, 3, 4, 7), (20, 8, 2, 2, 3, 3)]


@pytest.mark.parametrize("act", ["swish", "hard_swish"])
@pytest.mark.parametrize("kind, geometry", [("conv", g) for g in ACTIVATION_CONVS]
                         + [("dwconv", (40, 40, 3, 3, 6, 17)), ("dwconv", (300, 300, 3, 3, 4, 9))],
                         ids=lambda v: "x".join(map(str, v)) if isinstance(v, tuple) else v)
def test_epilogue_activation(kernels, kind, geometry, act):
    """A swish or hard swish after the bias (and a clamp: ReLU6 at most,
    here no lower bound), by the act kernel after the convolution's, as
    TensorFlow computes them, over outputs from -100 to 100 (past the
    exponential's clamp at 87) and NaN."""
    n, c, kh, kw, ih, iw = geometry
    rng = np.random.default_rng(n + c)
    cg = c if kind == "conv" else 1
    filters = (rng.standard_normal((kh, kw, cg, n)) * 3 / np.sqrt(kh * kw * cg)).astype(np.float32)
    x = rng.standard_normal((ih, iw, c)).astype(np.float32)
    x[0, 1, 0] = np.nan
    bias = rng.standard_normal(n).astype(np.float32)
    bias[:4] = [-100.0, 100.0, -90.0, 90.0]
    post = _post(n, bias, hi=6.0 if n % 2 else np.inf, act=act)
    want = _reference(x.astype(np.float64), filters.astype(np.float64), (1, 1), (1, 1),
                      1 if kind == "conv" else c) + bias
    want = conv_epilogue.activation(conv_epilogue.ACTIVATIONS[act],
                                    np.where(np.isnan(want), np.nan, np.minimum(want, post[1])))
    got = _call_kind(kernels, kind, filters, x, want.shape[:2], post)
    # the act kernel after the convolution, as the dispatch calls it
    act_kernel = kernels["f32"].act
    act_kernel.argtypes = [ctypes.c_void_p] + [ctypes.c_size_t] * 3
    act_kernel(got.ctypes.data, 0, got.size, conv_epilogue.ACTIVATIONS[act])
    assert np.isnan(got).sum() == np.isnan(want).sum() > 0
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-5)


@pytest.mark.parametrize("kind", ["conv", "dwconv"])
def test_a_large_bias_is_added_after_the_sums(kernels, kind):
    """A batch norm's shift folded in as the bias can be far larger than the
    sums (here 1000 against sums of order one): the kernels add it after
    the sums, one rounding at its scale (half an f32 step at 1000: 3e-5).
    They started the sums at it, each product then rounded at that scale: a
    conv + batch norm differed from the exact result by 2.5x TensorFlow's
    error."""
    n, c, kh, kw, ih, iw = 40, 40, 3, 3, 9, 17
    rng = np.random.default_rng(4)
    cg = c if kind == "conv" else 1
    filters = (rng.standard_normal((kh, kw, cg, n)) / np.sqrt(kh * kw * cg)).astype(np.float32)
    x = rng.standard_normal((ih, iw, c)).astype(np.float32)
    bias = np.float32(1000.0) + rng.standard_normal(n).astype(np.float32)
    exact = _reference(x.astype(np.float64), filters.astype(np.float64), (1, 1), (1, 1),
                       1 if kind == "conv" else c) + bias
    post = _post(n, bias)
    got = _call_kind(kernels, kind, filters, x, exact.shape[:2], post)
    assert np.abs(got - exact).max() <= np.spacing(np.float32(1024.0)) / 2 + 2e-6


@pytest.mark.parametrize("cc, isa", sanitized_builds(["generic", "avx2", "native"]))
def test_kernels_under_sanitizers(cc, isa, tmp_path):
    """Both convolution kernels, each x86-64 path of them this machine can
    run (util.x86_isa_flags: the AVX2 blocks also on an AVX-512 CPU, the
    AVX-512 blocks emulated on any x86-64), on exactly sized heap buffers,
    under AddressSanitizer and UndefinedBehaviorSanitizer, against a plain
    loop."""
    exe = toolchains.build_kernel_check_sanitized(
        cc, isa, Path(__file__).parent / "data" / "kernels" / "conv_check.c",
        CONV_CHECK_KERNELS, tmp_path)
    assert _run([exe]).stdout.strip() == f"ok {CONV_CHECK_GEOMETRIES + CONV_CHECK_HOSTED}"


def test_aarch64_kernels_match_the_loop(tmp_path):
    """data/kernels/conv_check.c built for aarch64 (NEON: the blocks gcc
    vectorizes, the activations' 4-lane pass) under qemu-aarch64."""
    proc = toolchains.run_kernel_check_aarch64(
        Path(__file__).parent / "data" / "kernels" / "conv_check.c",
        CONV_CHECK_KERNELS, "armv8-a", "fdiv\tv", tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip() == f"ok {CONV_CHECK_GEOMETRIES + CONV_CHECK_HOSTED}", proc.stdout


#: the kernels data/kernels/conv_check.c calls
CONV_CHECK_KERNELS = ["-DTFRT_CONV_FN=conv", "-DTFRT_DWCONV_FN=dwconv", "-DTFRT_ACT_FN=act"]
#: the geometries of data/kernels/conv_check.c, and those it checks only
#: hosted (their weights are more than its Cortex-M pool)
CONV_CHECK_GEOMETRIES = 40
CONV_CHECK_HOSTED = 2


@pytest.mark.parametrize("cpu", ["cortex-m4", "cortex-m7", "cortex-m33", "cortex-m55"])
def test_cortex_m_kernels_match_the_loop(cpu, tmp_path):
    """The convolution kernels built bare metal for a Cortex-M (a scalar
    FPU: the depthwise 3-column blocks with one channel at a time; Helium:
    4 channels at a time, the rest one by one; at the edges of a padding of
    1 on either side or both) against the plain loop, under
    qemu-system-arm."""
    from test_weights_int8 import _cortex_m_image, _run_cortex_m

    toolchains.require("arm-none-eabi-gcc", "qemu-system-arm")
    image = _cortex_m_image(cpu, tmp_path, CONV_CHECK_KERNELS,
                            driver=Path(__file__).parent / "data" / "kernels" / "conv_check.c")
    proc = _run_cortex_m(cpu, image)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == f"ok {CONV_CHECK_GEOMETRIES}", proc.stderr


def test_half_width_conv_weights(kernels):
    """bf16 weights: the kernel computes with exactly the rounded weights."""
    n, c, kh, kw, ih, iw, stride, dilation = CONVS[0]
    rng = np.random.default_rng(5)
    filters = (rng.standard_normal((kh, kw, c, n)) / np.sqrt(kh * kw * c)).astype(np.float32)
    x = rng.standard_normal((ih, iw, c)).astype(np.float32)
    half = weight_packing.to_half(filters, "bf16")
    want = _reference(x, weight_packing.from_half(half, "bf16"), stride, dilation, 1)
    packed = weight_packing.to_half(weight_packing.pack_conv(filters.reshape(-1, n).T), "bf16")
    got = _call(kernels["bf16"].conv, packed, x, n, c, kh, kw, *want.shape[:2], stride, dilation)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)


def _conv_module(layout: str, x_shape, f_shape, y_shape, attrs: str) -> str:
    f = np.random.default_rng(0).standard_normal(f_shape).astype("<f4")
    t = lambda s: "tensor<" + "x".join(map(str, s)) + "xf32>"  # noqa: E731
    return f"""module {{
  func.func @f(%x: {t(x_shape)}) -> {t(y_shape)} {{
    %w = stablehlo.constant dense<"0x{f.tobytes().hex().upper()}"> : {t(f_shape)}
    %y = stablehlo.convolution(%x, %w) dim_numbers = {layout}, window = {{{attrs}}}
        {{batch_group_count = 1 : i64, feature_group_count = GROUPS : i64}}
        : ({t(x_shape)}, {t(f_shape)}) -> {t(y_shape)}
    return %y : {t(y_shape)}
  }}
}}
"""


NHWC = "[b, 0, 1, f]x[0, 1, i, o]->[b, 0, 1, f]"
REWRITES = {  # name: (layout, x, filter, y, window, groups, kernel or None)
    "conv_same": (NHWC, (1, 5, 8, 3), (3, 3, 3, 4), (1, 3, 8, 4),
                  "stride = [1, 1], pad = [[0, 0], [1, 1]], rhs_dilate = [1, 1]", 1, "conv"),
    "conv1d": ("[b, 0, f]x[0, i, o]->[b, 0, f]", (1, 9, 3), (3, 3, 5), (1, 3, 5),
               "stride = [2], pad = [[0, 0]], rhs_dilate = [2]", 1, "conv"),
    "depthwise_x2": (NHWC, (1, 4, 6, 3), (2, 2, 1, 6), (1, 3, 5, 6),
                     "stride = [1, 1], pad = [[0, 0], [0, 0]], rhs_dilate = [1, 1]", 3, "dwconv"),
    "grouped": (NHWC, (1, 4, 6, 4), (2, 2, 2, 6), (1, 3, 5, 6),
                "stride = [1, 1], pad = [[0, 0], [0, 0]], rhs_dilate = [1, 1]", 2, None),
    # (a batch: a call per image, an N-stream step's; numbers: test_streams.py)
    "batch2": (NHWC, (2, 4, 6, 3), (2, 2, 3, 6), (2, 3, 5, 6),
               "stride = [1, 1], pad = [[0, 0], [0, 0]], rhs_dilate = [1, 1]", 1, "conv"),
    "input_dilation": (NHWC, (1, 4, 6, 3), (2, 2, 3, 6), (1, 6, 10, 6),
                       "stride = [1, 1], pad = [[0, 0], [0, 0]], lhs_dilate = [2, 2], "
                       "rhs_dilate = [1, 1]", 1, None),
    "channels_first": ("[b, f, 0, 1]x[o, i, 0, 1]->[b, f, 0, 1]", (1, 3, 4, 6), (6, 3, 2, 2),
                       (1, 6, 3, 5), "stride = [1, 1], pad = [[0, 0], [0, 0]], "
                       "rhs_dilate = [1, 1]", 1, None),
    "cropping_pad": (NHWC, (1, 5, 8, 3), (3, 3, 3, 4), (1, 3, 4, 4),
                     "stride = [1, 1], pad = [[0, 0], [-1, -1]], rhs_dilate = [1, 1]", 1, None),
}


@pytest.mark.parametrize("name", REWRITES)
def test_rewrite_takes_the_forms_the_kernels_compute(name):
    layout, x, f, y, window, groups, kind = REWRITES[name]
    text = _conv_module(layout, x, f, y, window).replace("GROUPS", str(groups))
    new, count = microkernel.rewrite_matvecs(text, "m")
    if kind is None:
        assert (new, count) == (text, 0)
        return
    assert count == 1 and "stablehlo.convolution" not in new
    assert microkernel.kernel_symbols(new, "m", "f32") == {kind: f"m_{kind}_f32"}
    assert ("stablehlo.pad" in new) == (name == "conv_same")


def _epilogue_module(after: str, extra_use: bool = False) -> str:
    """A depthwise convolution over a ZeroPadding2D-style pad, then ``after``
    (ops on %y, the last one's result %z returned)."""
    f = np.random.default_rng(0).standard_normal((3, 3, 1, 40)).astype("<f4")
    bias = np.arange(40, dtype="<f4") / 10
    returned = "%z, %y" if extra_use else "%z"
    types = "tensor<1x4x6x40xf32>, tensor<1x4x6x40xf32>" if extra_use else "tensor<1x4x6x40xf32>"
    return f"""module {{
  func.func @f(%x0: tensor<1x6x4x40xf32>) -> ({types}) {{
    %zero = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %x = stablehlo.pad %x0, %zero, low = [0, 0, 1, 0], high = [0, 0, 1, 0],
        interior = [0, 0, 0, 0] : (tensor<1x6x4x40xf32>, tensor<f32>) -> tensor<1x6x6x40xf32>
    %w = stablehlo.constant dense<"0x{f.tobytes().hex().upper()}"> : tensor<3x3x1x40xf32>
    %y = stablehlo.convolution(%x, %w) dim_numbers = {NHWC},
        window = {{stride = [1, 1], pad = [[0, 0], [0, 0]], rhs_dilate = [1, 1]}}
        {{batch_group_count = 1 : i64, feature_group_count = 40 : i64}}
        : (tensor<1x6x6x40xf32>, tensor<3x3x1x40xf32>) -> tensor<1x4x4x40xf32>
    %bias = stablehlo.constant dense<"0x{bias.tobytes().hex().upper()}"> : tensor<40xf32>
    %b = stablehlo.broadcast_in_dim %bias, dims = [3] : (tensor<40xf32>) -> tensor<1x4x4x40xf32>
    %half = stablehlo.constant dense<5.000000e-01> : tensor<1x4x4x40xf32>
    %lo = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %hi = stablehlo.constant dense<6.000000e+00> : tensor<f32>
    %six = stablehlo.constant dense<6.000000e+00> : tensor<1x4x4x40xf32>
    {after}
    return {returned} : {types}
  }}
}}
""".replace("1x4x6x40", "1x4x4x40")


def _post_of(text: str) -> np.ndarray:
    """The epilogue constant of the one kernel in a rewritten module."""
    hexval = re.search(r'sym_name = "tfaot_\w+_post".*?dense<"0x([0-9A-F]+)">', text, re.S)
    return np.frombuffer(bytes.fromhex(hexval.group(1)), "<f4")


def test_rewrite_folds_padding_and_epilogue_into_the_kernel():
    """A zero pad before a depthwise convolution and a bias, a scale and a
    ReLU6 after it become the kernel's: no pad, add, multiply or clamp is
    left for IREE, the epilogue holds (bias * scale) and the clamp."""
    after = """%a = stablehlo.add %y, %b : tensor<1x4x4x40xf32>
    %m = stablehlo.multiply %a, %half : tensor<1x4x4x40xf32>
    %z = stablehlo.clamp %lo, %m, %hi : (tensor<f32>, tensor<1x4x4x40xf32>, tensor<f32>) -> tensor<1x4x4x40xf32>"""
    new, count = microkernel.rewrite_matvecs(_epilogue_module(after), "m")
    assert count == 1
    for op in ("stablehlo.pad", "stablehlo.add", "stablehlo.multiply", "stablehlo.clamp"):
        assert op not in new, op
    post = _post_of(new)
    assert list(post[:4]) == [0.0, 6.0, 0.0, 0.0]  # no activation
    np.testing.assert_allclose(post[4:44], np.arange(40) / 10 * 0.5, rtol=1e-6)
    assert not post[44:].any() and len(post) == 4 + 64  # padded to whole tiles


@pytest.mark.parametrize("after, left", [
    # a maximum with a value per channel: not a clamp the kernel has
    ("%z = stablehlo.maximum %y, %b : tensor<1x4x4x40xf32>", "stablehlo.maximum"),
    # a scale after the clamp cannot go into the weights
    ("%r = stablehlo.maximum %y, %six : tensor<1x4x4x40xf32>\n"
     "    %z = stablehlo.multiply %r, %half : tensor<1x4x4x40xf32>", "stablehlo.multiply"),
    # c - y
    ("%z = stablehlo.subtract %six, %y : tensor<1x4x4x40xf32>", "stablehlo.subtract"),
])
def test_rewrite_leaves_what_is_not_an_epilogue(after, left):
    new, count = microkernel.rewrite_matvecs(_epilogue_module(after), "m")
    assert count == 1 and left in new


def test_rewrite_keeps_an_output_used_twice():
    """The convolution's own output is also returned: the bias stays IREE's."""
    new, count = microkernel.rewrite_matvecs(
        _epilogue_module("%z = stablehlo.add %y, %b : tensor<1x4x4x40xf32>", extra_use=True),
        "m")
    assert count == 1 and "stablehlo.add" in new and not _post_of(new)[2:].any()


#: an activation after the epilogue's bias, as the import writes Keras'
#: swish (and silu) and hard_swish (and MobileNetV3's hard_swish)
SWISH = """%a = stablehlo.add %y, %b : tensor<1x4x4x40xf32>
    %s = stablehlo.logistic %a : tensor<1x4x4x40xf32>
    %z = stablehlo.multiply %a, %s : tensor<1x4x4x40xf32>"""
HARD_SWISH = """%a = stablehlo.add %y, %b : tensor<1x4x4x40xf32>
    %three = stablehlo.constant dense<3.000000e+00> : tensor<1x4x4x40xf32>
    %sixth = stablehlo.constant dense<0.166666672> : tensor<1x4x4x40xf32>
    %t = stablehlo.add %a, %three : tensor<1x4x4x40xf32>
    %r = stablehlo.clamp %lo, %t, %hi : (tensor<f32>, tensor<1x4x4x40xf32>, tensor<f32>) -> tensor<1x4x4x40xf32>
    %g = stablehlo.multiply %r, %sixth : tensor<1x4x4x40xf32>
    %z = stablehlo.multiply %g, %a : tensor<1x4x4x40xf32>"""


@pytest.mark.parametrize("act, after", [("swish", SWISH), ("hard_swish", HARD_SWISH)])
def test_rewrite_folds_an_activation_into_the_kernel(act, after):
    """A swish or hard swish after the bias becomes the kernel's: none of
    its ops is left for IREE, the epilogue names it."""
    new, count = microkernel.rewrite_matvecs(_epilogue_module(after), "m")
    assert count == 1
    body = new[:new.index("func.func private @tfaot_")]
    assert not re.findall(r"= stablehlo\.(add|multiply|clamp|logistic) ", body), body
    post = _post_of(new)
    assert list(post[:4]) == [-np.inf, np.inf, conv_epilogue.ACTIVATIONS[act], 0.0]
    np.testing.assert_allclose(post[4:44], np.arange(40) / 10, rtol=1e-6)


@pytest.mark.parametrize("after, left", [
    # the gate of another value: x * logistic(y) is not a swish of x
    (SWISH.replace("%s = stablehlo.logistic %a", "%s = stablehlo.logistic %b"),
     "stablehlo.logistic"),
    # relu6(v + 3) / 5: not the hard sigmoid
    (HARD_SWISH.replace("0.166666672", "2.000000e-01"), "stablehlo.clamp"),
    # relu(v + 3) * (1/6): no upper bound
    (HARD_SWISH.replace("%r = stablehlo.clamp %lo, %t, %hi : (tensor<f32>, tensor<1x4x4x40xf32>, "
                        "tensor<f32>) -> tensor<1x4x4x40xf32>",
                        "%r = stablehlo.maximum %t, %lo4 : tensor<1x4x4x40xf32>")
     .replace("%three =", "%lo4 = stablehlo.constant dense<0.000000e+00> : tensor<1x4x4x40xf32>\n"
              "    %three ="), "stablehlo.maximum"),
    # the swish's input, or its gate, also used elsewhere
    (SWISH + "\n    %y2 = stablehlo.add %a, %s : tensor<1x4x4x40xf32>", "stablehlo.logistic"),
    (SWISH + "\n    %y2 = stablehlo.add %s, %s : tensor<1x4x4x40xf32>", "stablehlo.logistic"),
])
def test_rewrite_leaves_what_is_not_an_activation(after, left):
    new, count = microkernel.rewrite_matvecs(_epilogue_module(after), "m")
    assert count == 1 and left in new


def test_a_batch_of_single_patches_is_one_image_of_positions():
    """A batch of images that are each one patch (an N-stream step's
    streamed convolution: one output position per stream) is one 1x1
    convolution over an image of N positions, the kernel's blocks of
    positions (not a loop of one-position calls), and a 1x1 convolution
    over a batch one over all its pixels; a batch of larger images loops
    over them."""
    x, f = (4, 3, 5, 8), (3, 5, 8, 16)
    window = "stride = [1, 1], pad = [[0, 0], [0, 0]], rhs_dilate = [1, 1]"
    new, count = microkernel.rewrite_matvecs(
        _conv_module(NHWC, x, f, (4, 1, 1, 16), window).replace("GROUPS", "1"), "m")
    assert count == 1 and "scf.for" not in new
    assert "tensor<1x1x4x120xf32>" in new and "tensor<1x1x4x16xf32>" in new
    new, count = microkernel.rewrite_matvecs(  # 1x1: all the batch's pixels
        _conv_module(NHWC, (3, 2, 5, 8), (1, 1, 8, 16), (3, 2, 5, 16), window)
        .replace("GROUPS", "1"), "m")
    assert count == 1 and "scf.for" not in new
    assert "tensor<1x1x30x8xf32>" in new and "tensor<1x1x30x16xf32>" in new
    layout, x, f, y, window, groups, _ = REWRITES["batch2"]
    new, _ = microkernel.rewrite_matvecs(
        _conv_module(layout, x, f, y, window).replace("GROUPS", str(groups)), "m")
    assert "scf.for %b = %c0 to %batch" in new


def test_iree_compiles_every_rewritten_form(tmp_path):
    """The rewritten modules go through iree-compile (to the kernel object)."""
    from tfaot.backend.compile import compile_module

    for name in ("conv_same", "conv1d", "depthwise_x2", "batch2"):
        layout, x, f, y, window, groups, _ = REWRITES[name]
        text = _conv_module(layout, x, f, y, window).replace("GROUPS", str(groups))
        text = text.replace("func.func @f", "func.func @step")
        compiled = compile_module(text, tmp_path / name, name="m", target=make_target("cpu"))
        assert set(compiled.kernel_symbols) == {REWRITES[name][6]}
        nm = _run(["nm", compiled.kernel_object]).stdout
        assert re.search(rf"\bU m_{REWRITES[name][6]}_f32\b", nm)


def _keras_conv_model():
    """Conv1D (causal, dilated), Conv2D with zero padding in frequency and
    stride 2 in time, DepthwiseConv2D with multiplier 2, SeparableConv2D, a
    GRU: every kernel, with non-zero biases. (Convolutions with `same`
    padding, whose padding the rewrite moves into a pad op, run through it
    in the streaming-conv suites' fallback models, e.g. ds_cnn_same.)"""
    import keras
    from keras import layers as L

    keras.utils.set_random_seed(11)
    x = keras.Input((None, 12), batch_size=1)
    h = L.Conv1D(16, 3, dilation_rate=2, padding="causal", activation="relu")(x)
    h = L.Reshape((-1, 8, 2))(h)
    h = L.Conv2D(8, (3, 3), strides=(2, 1), padding="valid", activation="relu")(
        L.ZeroPadding2D(((0, 0), (1, 1)))(h))
    h = L.DepthwiseConv2D((2, 3), depth_multiplier=2, padding="valid")(
        L.ZeroPadding2D(((0, 0), (1, 1)))(h))
    h = L.SeparableConv2D(6, (1, 3), padding="valid", activation="relu")(h)
    h = L.Reshape((-1, 6 * 6))(h)
    h = L.GRU(10, return_sequences=True)(h)
    model = keras.Model(x, L.Dense(4)(h))
    for layer in model.layers:
        weights = layer.get_weights()
        if weights:
            rng = np.random.default_rng(len(layer.name))
            layer.set_weights([w + 0.1 * rng.standard_normal(w.shape).astype(w.dtype)
                               if w.ndim == 1 else w for w in weights])
    return model


@pytest.fixture(scope="module")
def conv_case(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("convk")
    model = _keras_conv_model()
    model.save(tmp / "ck.keras")
    return model, tmp


def _build(tmp, sub, **options):
    from tfaot.pipeline import BuildOptions, Progress, build_model

    return build_model(str(tmp / "ck.keras"), BuildOptions(out_dir=tmp / sub, **options),
                       Progress(enabled=False)).path


def _verify(tmp, out, capsys, tol=1e-5):
    from tfaot.cli import main

    assert main(["verify", str(tmp / "ck.keras"), str(out), "--steps", str(STEPS)]) == 0
    text = capsys.readouterr().out
    err = float(re.search(r"max abs error (\S+)", text).group(1))
    assert err <= tol, text
    return err


def test_streamed_model_through_the_so(conv_case, capsys):
    model, tmp = conv_case
    out = _build(tmp, "out")
    manifest = json.loads((out / "ck.json").read_text())
    assert set(manifest["micro_kernels"]) == {"conv", "dwconv", "matvec"}
    nm = _run(["nm", out / "src" / "ck_kernels.o"]).stdout
    for kind in ("conv", "dwconv"):
        assert re.search(rf"\bT ck_{kind}_f32\b", nm)
    _verify(tmp, out, capsys)
    again = _build(tmp, "again")  # deterministic
    assert (out / "libck.a").read_bytes() == (again / "libck.a").read_bytes()


def test_half_width_weights_through_the_so(conv_case, capsys):
    """--weights-dtype=bf16 stores the convolution filters at half width too,
    within bf16's tolerance."""
    model, tmp = conv_case
    out = _build(tmp, "bf16", weights_dtype="bf16")
    manifest = json.loads((out / "ck.json").read_text())
    assert manifest["weights_dtype"] == "bf16"
    assert set(manifest["micro_kernels"]) == {"conv", "dwconv", "matvec"}
    err = _verify(tmp, out, capsys, tol=1e-2)
    assert err > 1e-5  # the weights really were rounded (f32 builds: about 1e-7)


def test_iree_kernels_on_request(conv_case, capsys):
    model, tmp = conv_case
    out = _build(tmp, "iree", matvec="iree")
    manifest = json.loads((out / "ck.json").read_text())
    assert manifest["micro_kernels"] == [] and manifest["matvec"] == "iree"
    _verify(tmp, out, capsys)


def test_aarch64_under_qemu(conv_case, tmp_path):
    """The kernels built for aarch64 step as the host library does (which
    test_streamed_model_through_the_so compares with TensorFlow)."""
    from tfaot import harness

    toolchains.require("aarch64-linux-gnu-gcc", "qemu-aarch64")
    model, tmp = conv_case
    host = harness.load(_build(tmp, "host"))
    xs = np.random.default_rng(2).standard_normal((40, *host.input_shape)).astype(np.float32)
    expected = host.step_n(xs).reshape(len(xs), -1)
    out = _build(tmp, "aarch64", triple="aarch64-linux-gnu", cpu="generic")
    assert re.search(r"\bT ck_dwconv_f32\b",
                     _run(["aarch64-linux-gnu-nm", out / "src" / "ck_kernels.o"]).stdout)
    ys = toolchains.step_under_qemu_aarch64(out, "ck", xs, tmp_path)
    np.testing.assert_allclose(ys, expected, rtol=0, atol=1e-5)


def _keras_batch_norm_model():
    """A DS-CNN-like block as trained models have it: Conv2D with a bias,
    batch norms with trained statistics, ReLU6 and ReLU, ZeroPadding2D
    before a DepthwiseConv2D, 72 channels (a block of 64 and a masked one),
    a fixed window of 16 frames."""
    import keras
    from keras import layers as L

    keras.utils.set_random_seed(5)
    x = keras.Input((16, 10))
    h = L.Reshape((16, 10, 1))(x)
    h = L.ReLU(6.0)(L.BatchNormalization()(L.Conv2D(72, (3, 3), strides=(2, 1))(h)))
    h = L.DepthwiseConv2D((3, 3))(L.ZeroPadding2D(((0, 0), (1, 1)))(h))
    h = L.ReLU()(L.BatchNormalization()(h))
    h = L.ReLU(6.0)(L.BatchNormalization()(L.Conv2D(72, (1, 1), use_bias=False)(h)))
    return _with_trained_batch_norms(keras.Model(x, L.Dense(5)(L.GlobalAveragePooling2D()(h))),
                                     seed=1, shift=0.2)


def _with_trained_batch_norms(model, seed: int, shift: float):
    """``model`` with statistics and scales in its batch norms as training
    leaves them (random: scales near 1, shifts of about ``shift``)."""
    from keras import layers as L

    rng = np.random.default_rng(seed)
    for layer in model.layers:
        if isinstance(layer, L.BatchNormalization):
            gamma, beta, mean, var = layer.get_weights()
            layer.set_weights([1 + 0.3 * rng.standard_normal(gamma.shape).astype("f4"),
                               shift * rng.standard_normal(beta.shape).astype("f4"),
                               0.1 * rng.standard_normal(mean.shape).astype("f4"),
                               rng.uniform(0.5, 1.5, var.shape).astype("f4")])
    return model


def test_batch_norm_relu_and_padding_fold_into_the_kernels():
    """Every batch norm, bias, ReLU and ReLU6 after a convolution of the
    model, and its zero padding, become the kernels' own: the imported
    step keeps none of those ops for IREE."""
    from tfaot.lower.mlir_import import import_program
    from tfaot.streamify_keras import streamify_keras

    program = streamify_keras(_keras_batch_norm_model(), "bn.keras", "keras",
                              fixed_window="whole")
    text = import_program(program)
    assert "stablehlo.pad" in text and "stablehlo.maximum" in text  # (as imported)
    new, count = microkernel.rewrite_matvecs(text, "m")
    assert count == 4  # three convolutions and the dense layer
    body = new[:new.index("func.func private @tfaot_")]
    left = re.findall(r"= stablehlo\.(pad|maximum|minimum|clamp|multiply|add|subtract) ", body)
    assert not left, body


@pytest.mark.parametrize("mode", ["--whole-window", "--stream"])
def test_batch_norm_model_through_the_so(mode, tmp_path, capsys):
    """The folded epilogues and padding give TensorFlow's outputs, whole
    window and streamed, over STEPS steps through the built library."""
    from tfaot.cli import main

    _keras_batch_norm_model().save(tmp_path / "bn.keras")
    out = tmp_path / "out"
    assert main(["build", str(tmp_path / "bn.keras"), "-o", str(out), "--quiet", mode]) == 0
    assert main(["verify", str(tmp_path / "bn.keras"), str(out), "--steps", str(STEPS)]) == 0
    err = float(re.search(r"max abs error (\S+)", capsys.readouterr().out).group(1))
    assert err <= 1e-5


def _keras_activation_model():
    """An EfficientNet / MobileNetV3-like block: convolutions with a batch
    norm and a swish, a depthwise one with a hard swish, a pointwise one
    with Keras' silu as its own activation; a window of 16 frames."""
    import keras
    from keras import layers as L

    keras.utils.set_random_seed(6)
    x = keras.Input((16, 10))
    h = L.Reshape((16, 10, 1))(x)
    h = L.Activation("swish")(L.BatchNormalization()(L.Conv2D(24, (3, 3), use_bias=False)(h)))
    h = L.DepthwiseConv2D((3, 3), padding="same")(h)
    h = L.Activation("hard_swish")(L.BatchNormalization()(h))
    h = L.Conv2D(16, (1, 1), activation="silu")(h)
    return _with_trained_batch_norms(keras.Model(x, L.Dense(5)(L.GlobalAveragePooling2D()(h))),
                                     seed=2, shift=0.5)


def test_activations_fold_into_the_kernels():
    """Every swish, hard swish and silu after a convolution of the model
    (and its batch norm) becomes the kernels' own: the imported step keeps
    none of their ops for IREE."""
    from tfaot.lower.mlir_import import import_program
    from tfaot.streamify_keras import streamify_keras

    program = streamify_keras(_keras_activation_model(), "act.keras", "keras",
                              fixed_window="whole")
    text = import_program(program)
    assert text.count("stablehlo.logistic") == 2  # (as imported)
    new, count = microkernel.rewrite_matvecs(text, "m")
    assert count == 4  # three convolutions and the dense layer
    body = new[:new.index("func.func private @tfaot_")]
    left = re.findall(r"= stablehlo\.(logistic|clamp|multiply|add) ", body)
    assert not left, body
    acts = sorted(int(_post_of(new[m.start():])[2])
                  for m in re.finditer(r'sym_name = "tfaot_\w+_post"', new))
    assert acts == [1, 1, 2]  # swish, silu; hard swish


@pytest.mark.parametrize("mode", ["--whole-window", "--stream"])
def test_activation_model_through_the_so(mode, tmp_path, capsys):
    """The folded activations give TensorFlow's outputs, whole window and
    streamed, over STEPS steps through the built library."""
    from tfaot.cli import main

    _keras_activation_model().save(tmp_path / "act.keras")
    out = tmp_path / "out"
    assert main(["build", str(tmp_path / "act.keras"), "-o", str(out), "--quiet", mode]) == 0
    manifest = json.loads((out / "act.json").read_text())
    assert set(manifest["micro_kernels"]) == {"conv", "dwconv", "matvec", "act"}
    assert main(["verify", str(tmp_path / "act.keras"), str(out), "--steps", str(STEPS)]) == 0
    err = float(re.search(r"max abs error (\S+)", capsys.readouterr().out).group(1))
    assert err <= 1e-5
