"""tfaot's pooling kernel (compiler/lower/pool_kernel.py, runtime_shim/tfrt_pool.h).

Max and average pooling over channels-last images leave IREE's code for a C
kernel. The kernel is checked bit for bit against numpy (the taps summed in
the kernel's order) on every vector path this machine compiles (gcc and
clang for the build's CPU, x86-64's baseline SSE2, the portable C), over
windows past the image's edges, strides, channel counts that leave partial
vectors, offsets and NaN taps; the rewrite on the op forms it must take or
leave (an average's division folded in by what it divides by); a C
check under AddressSanitizer and UBSan and under qemu-aarch64; whole
models through the .so against TensorFlow, several streams, and aarch64
(NEON) under qemu. Speed: docs/performance.md, "Pooling".
"""
from __future__ import annotations

import ctypes
import platform
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

import toolchains
from tfaot.lower import pool_kernel
from tfaot.resources import shim_dir
from tfaot.target_options import make_target
from util import kernel_calls_of_streams_build
from util import run as _run

DATA = Path(__file__).parent / "data" / "kernels"

MODES = pool_kernel.MODES


def _variants() -> dict[str, tuple[str, list[str]]]:
    """{name: (compiler, flags)} of each kernel path this machine runs."""
    from tfaot.package.link import matvec_flags

    native = matvec_flags(make_target("cpu"))
    found = {"gcc": ("gcc", native), "clang": ("clang", native),
             "portable": ("gcc", ["-O3", "-DTFRT_POOL_SCALAR"])}
    if platform.machine() == "x86_64":
        found["sse2"] = ("gcc", ["-O3"])  # x86-64's baseline
    return found


@pytest.fixture(scope="module", params=list(_variants()))
def pool(request, tmp_path_factory):
    """The pooling kernel built as a shared library, its ctypes function."""
    cc, flags = _variants()[request.param]
    if not shutil.which(cc):
        pytest.skip(f"needs {cc}")
    lib = tmp_path_factory.mktemp("pool") / "pool.so"
    _run([cc, "-std=c11", "-Wall", "-Wextra", "-Werror", "-shared", "-fPIC", *flags,
          "-DTFRT_POOL_FN=pool", shim_dir() / "tfrt_matvec.c", "-o", lib])
    fn = ctypes.CDLL(str(lib)).pool
    size = ctypes.c_size_t
    fn.argtypes = [ctypes.c_void_p, size, ctypes.c_void_p, size] + [size] * 12
    return fn


def _geometry(size: int, k: int, s: int, padding: str) -> tuple[int, int]:
    """(outputs, padding before) along one axis, as TensorFlow pools."""
    if padding == "valid":
        return (size - k) // s + 1, 0
    out = -(-size // s)
    return out, max((out - 1) * s + k - size, 0) // 2


def _reference(x, kh, kw, sh, sw, top, left, oh, ow, mode):
    """numpy pooling of ``x [ih, iw, c]``: the taps inside the image, summed
    row by row as the kernel sums them; a max passes NaN over."""
    ih, iw, c = x.shape
    y = np.empty((oh, ow, c), np.float32)
    for i in range(oh):
        for j in range(ow):
            h0, w0 = i * sh - top, j * sw - left
            taps = x[max(h0, 0):max(h0 + kh, 0), max(w0, 0):max(w0 + kw, 0)].reshape(-1, c)
            if mode == "max":
                y[i, j] = np.fmax.reduce(taps, axis=0, initial=-np.inf)
                continue
            acc = np.zeros(c, np.float32)
            for tap in taps:
                acc = acc + tap
            count = {"sum": None, "mean_inside": len(taps), "mean_window": kh * kw}[mode]
            y[i, j] = acc if count is None else acc / np.float32(count)
    return y


def _call(fn, x, kh, kw, sh, sw, top, left, oh, ow, mode):
    """The kernel on x; x and y one element into their buffers, whose first
    element must stay as it was."""
    ih, iw, c = x.shape
    xb = np.concatenate([[np.float32(7)], x.ravel()]).astype(np.float32)
    yb = np.full(1 + oh * ow * c, np.nan, np.float32)
    yb[0] = 7
    fn(xb.ctypes.data, 1, yb.ctypes.data, 1, ih, iw, c, oh, ow, kh, kw, sh, sw, top, left,
       MODES[mode])
    assert yb[0] == 7
    return yb[1:].reshape(oh, ow, c)


CASES = [  # ih, iw, c, kh, kw, sh, sw, padding
    (9, 11, 64, 3, 3, 2, 2, "same"),  # whole blocks of vectors
    (7, 7, 40, 3, 3, 1, 1, "same"),  # a block and a vector
    (6, 10, 13, 2, 2, 2, 2, "valid"),  # vectors and the last channels one by one
    (5, 5, 3, 5, 5, 1, 1, "same"),  # a window wider than the image's half
    (1, 17, 7, 1, 3, 1, 2, "same"),  # 1-D
    (4, 4, 1, 4, 4, 1, 1, "valid"),  # one window, one channel
    (8, 8, 100, 3, 3, 3, 3, "same"),
    (10, 9, 36, 3, 2, 2, 3, "valid"),
]


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("case", CASES, ids=lambda c: "x".join(map(str, c)))
def test_kernel_is_numpys_pooling_bit_for_bit(pool, case, mode):
    ih, iw, c, kh, kw, sh, sw, padding = case
    (oh, top), (ow, left) = _geometry(ih, kh, sh, padding), _geometry(iw, kw, sw, padding)
    x = np.random.default_rng(ih * iw + c).normal(size=(ih, iw, c)).astype(np.float32)
    got = _call(pool, x, kh, kw, sh, sw, top, left, oh, ow, mode)
    np.testing.assert_array_equal(got, _reference(x, kh, kw, sh, sw, top, left, oh, ow, mode))


def test_windows_past_the_padding_and_nan_taps(pool):
    """Padding beyond TensorFlow's (explicit padding before a valid pool): a
    window with one row inside; an average over it divides by the taps
    inside or the whole window, as asked. A NaN tap is passed over by the
    maximum (TensorFlow's CPU MaxPool) and spreads through a sum."""
    x = np.random.default_rng(1).normal(size=(5, 6, 20)).astype(np.float32)
    x[2, 3, :4] = np.nan
    for mode in MODES:
        got = _call(pool, x, 3, 3, 2, 2, 2, 1, 3, 3, mode)
        want = _reference(x, 3, 3, 2, 2, 2, 1, 3, 3, mode)
        np.testing.assert_array_equal(got, want)
    got = _call(pool, x, 3, 3, 1, 1, 1, 1, 5, 6, "max")
    assert not np.isnan(got).any()
    assert np.isnan(_call(pool, x, 3, 3, 1, 1, 1, 1, 5, 6, "sum")[2, 3, :4]).all()


#: tests/data/kernels/pool_check.c: its geometries times the four modes
POOL_CHECK_CASES = 36


@pytest.mark.parametrize("isa", ["generic", "native"])
@pytest.mark.parametrize("cc", ["gcc", "clang"])
def test_kernel_under_sanitizers(cc, isa, tmp_path):
    """data/kernels/pool_check.c (exactly sized heap buffers, a plain loop as
    the reference) under AddressSanitizer and UndefinedBehaviorSanitizer."""
    exe = toolchains.build_kernel_check_sanitized(cc, isa, DATA / "pool_check.c",
                                                  ["-DTFRT_POOL_FN=pool"], tmp_path)
    assert _run([exe]).stdout.strip() == f"ok {POOL_CHECK_CASES}"


def test_aarch64_kernel_matches_the_loop(tmp_path):
    """The NEON path (fmaxnm: a NaN tap passed over, as on x86) under qemu-aarch64."""
    proc = toolchains.run_kernel_check_aarch64(DATA / "pool_check.c", ["-DTFRT_POOL_FN=pool"],
                                               "armv8-a", "fmaxnm\tv", tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip() == f"ok {POOL_CHECK_CASES}", proc.stdout


# --- the rewrite -------------------------------------------------------------

def _module(window, strides, shape, pads=None, body="stablehlo.maximum", init="0xFF800000",
            divide=None, element="f32", dilation=None) -> str:
    """A function of one reduce_window (and, with ``divide``: "splat N" or
    "count", the division of its result by a constant or by the window over
    a constant of ones)."""
    pads = pads or [(0, 0)] * len(shape)
    dilation_ = dilation or [1] * len(shape)
    out = [(n + lo + hi - d * (w - 1) - 1) // s + 1
           for n, w, s, d, (lo, hi) in zip(shape, window, strides, dilation_, pads)]
    t = lambda s: "tensor<" + "x".join(map(str, s)) + f"x{element}>"  # noqa: E731
    arr = lambda v: "array<i64: " + ", ".join(map(str, v)) + ">"  # noqa: E731
    pad_text = ", ".join(f"[{lo}, {hi}]" for lo, hi in pads)
    extra = f", window_dilations = {arr(dilation)}" if dilation else ""

    def window_op(name, operand):
        return f"""%{name} = "stablehlo.reduce_window"({operand}, %init) <{{padding = dense<[{pad_text}]> :
        tensor<{len(shape)}x2xi64>, window_dimensions = {arr(window)},
        window_strides = {arr(strides)}{extra}}}> ({{
    ^bb0(%a: tensor<{element}>, %b: tensor<{element}>):
      %m = {body} %a, %b : tensor<{element}>
      stablehlo.return %m : tensor<{element}>
    }}) : ({t(shape)}, tensor<{element}>) -> {t(out)}"""

    lines = [f"%init = stablehlo.constant dense<{init}> : tensor<{element}>",
             window_op("y", "%x")]
    result = "%y"
    if divide == "count":
        lines += [f"%ones = stablehlo.constant dense<1.0> : {t(shape)}",
                  window_op("n", "%ones")]
    elif divide:
        lines.append(f"%n = stablehlo.constant dense<{divide.split()[1]}.0> : {t(out)}")
    if divide:
        lines.append(f"%q = stablehlo.divide %y, %n : {t(out)}")
        result = "%q"
    body_text = "\n    ".join(lines)
    return f"""module {{
  func.func @f(%x: {t(shape)}) -> {t(out)} {{
    {body_text}
    return {result} : {t(out)}
  }}
}}
"""


def _rewrite(text: str):
    """The rewritten text and the kernel's size arguments (or None)."""
    new, count = pool_kernel.pools_as_calls(text, "m")
    if not count:
        return new, None
    sizes = [int(v) for v in re.findall(r"%s\d+ = arith\.constant (\d+) : index", new)]
    return new, sizes


SAME_3X3 = dict(window=(1, 3, 3, 1), strides=(1, 2, 2, 1), shape=(1, 9, 10, 5),
                pads=[(0, 0), (0, 1), (1, 1), (0, 0)])


@pytest.mark.parametrize("divide, mode", [(None, "sum"), ("count", "mean_inside"),
                                          ("splat 9", "mean_window"), ("splat 5", "sum")])
def test_an_average_folds_the_division_by_its_count(divide, mode):
    """A sum window divided by the taps inside (TensorFlow's 'same'
    average: the window over ones) or by the window's size is one kernel
    call; divided by anything else, the kernel sums and the division stays."""
    text, sizes = _rewrite(_module(**SAME_3X3, body="stablehlo.add", init="0.0",
                                   divide=divide))
    assert sizes == [9, 10, 5, 4, 5, 3, 3, 2, 2, 0, 1, MODES[mode]]
    assert "reduce_window" not in text and "@m_pool_f32(" in text
    assert ("stablehlo.divide" in text) == (divide == "splat 5")


def test_a_max_pool_and_a_1d_one_are_calls():
    text, sizes = _rewrite(_module(**SAME_3X3))
    assert sizes == [9, 10, 5, 4, 5, 3, 3, 2, 2, 0, 1, MODES["max"]]
    text, sizes = _rewrite(_module((1, 4, 1), (1, 2, 1), (2, 4099, 3),
                                   pads=[(0, 0), (1, 2), (0, 0)]))
    assert sizes == [1, 4099, 3, 1, 2050, 1, 4, 1, 2, 0, 1, MODES["max"]]
    assert "scf.for" in text  # two images: a call each


@pytest.mark.parametrize("kind", ["over_channels", "dilated", "small_unpadded", "f16", "min",
                                  "max_from_zero"])
def test_the_rewrite_leaves(kind):
    """Windows along channels, dilated ones, unpadded ones of fewer than
    MIN_ELEMENTS inputs (a streamed step's, which IREE fuses), other element
    types, bodies and inits stay IREE's."""
    big = (1, 40, 40, 8)
    module = {
        "over_channels": lambda: _module((1, 2, 2, 2), (1, 2, 2, 2), big),
        "dilated": lambda: _module((1, 2, 2, 1), (1, 1, 1, 1), big, dilation=(1, 2, 2, 1)),
        "small_unpadded": lambda: _module((1, 2, 2, 1), (1, 2, 2, 1), (1, 10, 10, 8)),
        "f16": lambda: _module((1, 2, 2, 1), (1, 2, 2, 1), big, element="f16", init="0xFC00"),
        "min": lambda: _module((1, 2, 2, 1), (1, 2, 2, 1), big, body="stablehlo.minimum",
                               init="0x7F800000"),
        "max_from_zero": lambda: _module((1, 2, 2, 1), (1, 2, 2, 1), big, init="0.0"),
    }[kind]()
    text, sizes = _rewrite(module)
    assert sizes is None and text == module


def test_unpadded_windows_over_many_inputs_are_taken():
    assert _rewrite(_module((1, 2, 2, 1), (1, 2, 2, 1), (1, 40, 40, 8)))[1] is not None


# --- through the library -----------------------------------------------------

def _image_model():
    """Max and average pools of each kind a CNN has, on channel counts that
    leave partial vectors."""
    import keras

    L = keras.layers
    keras.utils.set_random_seed(3)
    x = keras.Input((20, 22, 13))
    h = L.Conv2D(40, 3, padding="same")(x)
    h = L.MaxPooling2D(3, strides=2, padding="same")(h)  # ResNet's stem
    a = L.AveragePooling2D(3, strides=1, padding="same")(h)  # Inception's
    b = L.MaxPooling2D(3, strides=1, padding="same")(h)
    h = L.Conv2D(44, 1)(L.Concatenate()([a, b]))
    h = L.AveragePooling2D(2)(h)  # DenseNet's transition (4840 inputs: over MIN_ELEMENTS)
    h = L.MaxPooling2D((2, 3), strides=(1, 2), padding="same")(h)
    return keras.Model(x, L.Dense(6)(L.Flatten()(h)))


def test_image_model_through_the_so(tmp_path, capsys):
    """Every pool of the model is a kernel call; the .so matches TensorFlow
    over 100 images."""
    from tfaot.cli import main

    path = tmp_path / "pools.keras"
    _image_model().save(path)
    out = tmp_path / "lib"
    assert main(["-q", "build", str(path), "-o", str(out), "--keep-temps"]) == 0
    mlir = (out / "temps" / "compile" / "pools.mlir").read_text()
    assert "reduce_window" not in mlir and len(re.findall(r"call @tfaot_pool_\d+\(", mlir)) == 5
    assert main(["verify", str(path), str(out), "--steps", "100"]) == 0
    text = capsys.readouterr().out
    assert float(re.search(r"max abs error (\S+)", text).group(1)) <= 1e-5, text


def test_streamed_pools_of_several_streams(tmp_path, capsys):
    """A streamed spectrogram CNN's 'same' pools over frequency (padded:
    the kernel's), built for 3 streams: a call per stream's image, each
    stream as TensorFlow runs it."""
    import keras

    L = keras.layers
    keras.utils.set_random_seed(4)
    x = keras.Input((None, 30, 4))
    h = L.Conv2D(12, (3, 3), padding="valid", activation="relu")(x)
    h = L.MaxPooling2D((1, 3), strides=(1, 2), padding="same")(h)
    h = L.AveragePooling2D((1, 3), strides=(1, 1), padding="same")(h)
    h = L.Reshape((-1, 14 * 12))(h)
    path = tmp_path / "spec.keras"
    keras.Model(x, L.Dense(3)(L.GRU(8, return_sequences=True)(h))).save(path)
    assert kernel_calls_of_streams_build(path, tmp_path / "lib", "pool", capsys) == 2


def test_aarch64_under_qemu(tmp_path):
    """The NEON path: the image model built for aarch64, stepped under
    qemu-aarch64, against TensorFlow."""
    toolchains.require("aarch64-linux-gnu-gcc", "qemu-aarch64")
    from tfaot.pipeline import BuildOptions, Progress, build_model

    model = _image_model()
    model.save(tmp_path / "pa.keras")
    out = tmp_path / "lib"
    build_model(str(tmp_path / "pa.keras"),
                BuildOptions(out_dir=out, triple="aarch64-linux-gnu", cpu="generic"),
                Progress(enabled=False))
    assert re.search(r"\bT pa_pool_f32\b",
                     _run(["aarch64-linux-gnu-nm", out / "src" / "pa_kernels.o"]).stdout)
    xs = np.random.default_rng(5).normal(size=(6, 20, 22, 13)).astype(np.float32)
    ys = toolchains.step_under_qemu_aarch64(out, "pa", xs, tmp_path)
    np.testing.assert_allclose(ys, np.asarray(model(xs)), rtol=0, atol=1e-5)


def test_which_builds_take_the_kernel():
    """Builds with tfaot's kernels take it; not with --matvec=iree, f16
    images (--intermediates=f16) or kinds that leave it out (bare metal's)."""
    from dataclasses import replace

    from tfaot.lower.microkernel import KINDS

    target = replace(make_target("cpu"), matvec="tfaot")
    assert pool_kernel.applies(target, KINDS)
    assert not pool_kernel.applies(replace(target, matvec="iree"), KINDS)
    assert not pool_kernel.applies(replace(target, intermediates="f16"), KINDS)
    assert not pool_kernel.applies(target, ("matvec", "conv", "dwconv"))
