"""tfaot's bilinear resize kernel (compiler/lower/resize_kernel.py, runtime_shim/tfrt_resize.h).

A bilinear resize's lerps along each axis (lower/bilinear_resize.py's
gathers and lerp) leave IREE's code for a C kernel. Checked: the kernel bit
for bit against numpy on TensorFlow's taps (both axes, up and down, the
flags' variants) with gcc and clang for this CPU and x86-64's baseline; a
C check under AddressSanitizer and UBSan and under qemu-aarch64; the rewrite on the forms it must
take or leave; models through the .so against TensorFlow, one resizing a
batch of images.
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
from tfaot.lower import resize_kernel
from tfaot.lower.bilinear_resize import axis_taps
from tfaot.resources import shim_dir
from tfaot.target_options import make_target
from util import kernel_calls_of_streams_build
from util import run as _run

DATA = Path(__file__).parent / "data" / "kernels"


def _variants() -> dict[str, tuple[str, list[str]]]:
    """{name: (compiler, flags)} of each path this machine compiles."""
    from tfaot.package.link import matvec_flags

    native = matvec_flags(make_target("cpu"))
    found = {"gcc": ("gcc", native), "clang": ("clang", native)}
    if platform.machine() == "x86_64":
        found["sse2"] = ("gcc", ["-O3"])  # x86-64's baseline
    return found


@pytest.fixture(scope="module", params=list(_variants()))
def resize(request, tmp_path_factory):
    """The resize kernel built as a shared library, its ctypes function."""
    cc, flags = _variants()[request.param]
    if not shutil.which(cc):
        pytest.skip(f"needs {cc}")
    lib = tmp_path_factory.mktemp("resize") / "resize.so"
    _run([cc, "-std=c11", "-Wall", "-Wextra", "-Werror", "-shared", "-fPIC", *flags,
          "-DTFRT_RESIZE_FN=resize", shim_dir() / "tfrt_matvec.c", "-o", lib])
    fn = ctypes.CDLL(str(lib)).resize
    size = ctypes.c_size_t
    fn.argtypes = [ctypes.c_void_p, size, ctypes.c_void_p, size, ctypes.c_void_p, size] + \
        [size] * 5
    return fn


CASES = [  # h, w, c, axis, out, align_corners, half_pixel_centers
    (6, 9, 16, 2, 18, False, True),  # Keras' UpSampling2D(2, "bilinear")
    (6, 9, 16, 1, 12, False, True),
    (7, 5, 3, 2, 11, True, False),  # TF1's align_corners
    (7, 5, 3, 1, 4, False, False),  # down, TF1's default
    (5, 8, 37, 2, 3, False, True),  # down, channels past whole vectors
    (1, 1, 5, 2, 6, False, True),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: "x".join(map(str, c)))
def test_kernel_is_numpys_lerp_bit_for_bit(resize, case):
    """The kernel computes lo + (hi - lo) * t, TensorFlow's CPU kernel's
    arithmetic, on the taps axis_taps gives; nothing before the offsets."""
    h, w, c, axis, out, align, half = case
    lower, upper, lerp = axis_taps(h if axis == 1 else w, out, align, half)
    taps = np.concatenate([[np.float32(9)], lower, upper, lerp]).astype(np.float32)
    x = np.random.default_rng(sum(case[:5])).normal(size=(h, w, c)).astype(np.float32)
    shape = [h, w, c]
    shape[axis - 1] = out
    xb = np.concatenate([[np.float32(7)], x.ravel()]).astype(np.float32)
    yb = np.full(1 + int(np.prod(shape)), np.nan, np.float32)
    yb[0] = 7
    resize(taps.ctypes.data, 1, xb.ctypes.data, 1, yb.ctypes.data, 1, h, w, c, axis, out)
    assert yb[0] == 7
    lo, hi = np.take(x, lower, axis=axis - 1), np.take(x, upper, axis=axis - 1)
    t = lerp.reshape([-1 if a == axis - 1 else 1 for a in range(3)])
    want = lo + (hi - lo) * t
    np.testing.assert_array_equal(yb[1:].reshape(shape), want)


@pytest.mark.parametrize("isa", ["generic", "native"])
@pytest.mark.parametrize("cc", ["gcc", "clang"])
def test_kernel_under_sanitizers(cc, isa, tmp_path):
    """data/kernels/resize_check.c (exactly sized heap buffers, a plain loop
    as the reference) under AddressSanitizer and UndefinedBehaviorSanitizer."""
    exe = toolchains.build_kernel_check_sanitized(cc, isa, DATA / "resize_check.c",
                                                  ["-DTFRT_RESIZE_FN=resize"], tmp_path)
    assert _run([exe]).stdout.strip() == "ok 8"


def test_aarch64_kernel_matches_the_loop(tmp_path):
    """The NEON build (the lerps vectorized: fmul on vectors) under qemu-aarch64."""
    proc = toolchains.run_kernel_check_aarch64(DATA / "resize_check.c",
                                               ["-DTFRT_RESIZE_FN=resize"], "armv8-a",
                                               "fmul\tv", tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip() == "ok 8", proc.stdout


# --- the rewrite -------------------------------------------------------------

def _module(lerp_shape: str, lerp_dims: str, dim: int = 2) -> str:
    """One lerp of two gathers along ``dim`` of a 1x4x6x8 image to 12
    entries, its lerp a constant of shape ``lerp_shape`` (values that differ
    along each of its axes) broadcast with ``lerp_dims``."""
    shape = [int(n) for n in lerp_shape.split("x")]
    values = np.arange(np.prod(shape), dtype=np.float32).reshape(shape) / np.prod(shape)
    lerp = np.array2string(values, separator=", ", threshold=10**6).replace("\n", "")
    out = [1, 4, 6, 8]
    out[dim] = 12
    y = "tensor<" + "x".join(map(str, out)) + "xf32>"
    return f"""
module {{
  func.func @main(%x: tensor<1x4x6x8xf32>) -> {y} {{
    %lo_i = stablehlo.constant dense<[0, 0, 0, 1, 1, 2, 2, 3, 3, 3, 3, 3]> : tensor<12xi32>
    %hi_i = stablehlo.constant dense<[0, 1, 1, 2, 2, 3, 3, 3, 3, 3, 3, 3]> : tensor<12xi32>
    %t = stablehlo.constant dense<{lerp}> : tensor<{lerp_shape}xf32>
    %lo = "stablehlo.torch_index_select"(%x, %lo_i) <{{batch_dims = 0 : i64, dim = {dim} : i64}}> : (tensor<1x4x6x8xf32>, tensor<12xi32>) -> {y}
    %hi = "stablehlo.torch_index_select"(%x, %hi_i) <{{batch_dims = 0 : i64, dim = {dim} : i64}}> : (tensor<1x4x6x8xf32>, tensor<12xi32>) -> {y}
    %d = stablehlo.subtract %hi, %lo : {y}
    %tb = stablehlo.broadcast_in_dim %t, dims = {lerp_dims} : (tensor<{lerp_shape}xf32>) -> {y}
    %s = stablehlo.multiply %d, %tb : {y}
    %r = stablehlo.add %lo, %s : {y}
    return %r : {y}
  }}
}}"""


def test_a_lerp_along_an_axis_is_a_call():
    text, count = resize_kernel.resizes_as_calls(_module("1x1x12x1", "[0, 1, 2, 3]"), "m")
    assert count == 1
    main = text.split("func.func private @tfaot_resize_0")[0]
    assert "torch_index_select" not in main and "call @tfaot_resize_0(%arg0)" in main
    assert "func.func private @m_resize_f32(" in text


@pytest.mark.parametrize("kind", ["lerp varying across two axes", "channels"])
def test_the_rewrite_leaves(kind):
    """A lerp that varies across another axis than the gathers' (not a
    resize's), and gathers along the channels, stay IREE's."""
    if kind == "channels":
        text = _module("1x1x1x12", "[0, 1, 2, 3]", dim=3)
    else:
        text = _module("1x4x12x1", "[0, 1, 2, 3]")
    assert resize_kernel.resizes_as_calls(text, "m") == (text, 0)


def test_which_builds_take_the_kernel():
    """Builds with tfaot's kernels take it; not with --matvec=iree, f16
    images or kinds that leave it out (bare metal's)."""
    from dataclasses import replace

    from tfaot.lower.microkernel import KINDS

    target = replace(make_target("cpu"), matvec="tfaot")
    assert resize_kernel.applies(target, KINDS)
    assert not resize_kernel.applies(replace(target, matvec="iree"), KINDS)
    assert not resize_kernel.applies(replace(target, intermediates="f16"), KINDS)
    assert not resize_kernel.applies(target, ("matvec", "conv", "dwconv"))


# --- models through the .so -----------------------------------------------------

def _decoder():
    """Conv, a bilinear UpSampling2D by 2, a conv, a Resizing down to a size
    of no integer ratio (13 x 17), a 1x1 conv."""
    import keras

    L = keras.layers
    keras.utils.set_random_seed(3)
    x = keras.Input((12, 10, 3))
    h = L.Conv2D(8, 3, padding="same", activation="relu")(x)
    h = L.UpSampling2D(2, interpolation="bilinear")(h)
    h = L.Conv2D(6, 3, padding="same")(h)
    h = L.Resizing(13, 17, interpolation="bilinear")(h)
    return keras.Model(x, L.Conv2D(2, 1)(h))


def test_a_decoder_through_the_so(tmp_path, capsys):
    """Each axis of both resizes is a kernel call (4), and the .so matches
    TensorFlow over 100 images."""
    from tfaot.cli import main

    path = tmp_path / "decoder.keras"
    _decoder().save(path)
    out = tmp_path / "lib"
    assert main(["-q", "build", str(path), "-o", str(out), "--keep-temps"]) == 0
    mlir = (out / "temps" / "compile" / "decoder.mlir").read_text()
    assert len(re.findall(r"call @tfaot_resize_\d+\(", mlir)) == 4
    assert "torch_index_select" not in mlir
    assert main(["verify", str(path), str(out), "--steps", "100"]) == 0
    text = capsys.readouterr().out
    assert float(re.search(r"max abs error (\S+)", text).group(1)) <= 1e-5, text


def test_a_batch_of_images(tmp_path, capsys):
    """A SavedModel resizing a clip's 4 frames as one batch of 4 images (a
    video model's decoder): a call per image."""
    import tensorflow as tf

    from tfaot.cli import main

    kernel = tf.constant(np.random.default_rng(4).normal(size=(3, 3, 3, 2)), tf.float32)

    class Clip(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([1, 4, 6, 5, 3], tf.float32)])
        def serve(self, clip):
            frames = tf.image.resize(clip[0], (12, 15), method="bilinear")
            return tf.nn.relu(tf.nn.conv2d(frames, kernel, 1, "VALID"))

    path = tmp_path / "clip"
    tf.saved_model.save(Clip(), str(path))
    out = tmp_path / "lib"
    assert main(["-q", "build", str(path), "-o", str(out), "--keep-temps"]) == 0
    mlir = (out / "temps" / "compile" / "clip.mlir").read_text()
    assert re.search(r"func\.func private @tfaot_resize_0\(%\w+: tensor<4x", mlir)
    assert main(["verify", str(path), str(out), "--steps", "100"]) == 0
    text = capsys.readouterr().out
    assert float(re.search(r"max abs error (\S+)", text).group(1)) <= 1e-5, text


@pytest.mark.parametrize("interpolation", ["bilinear", "nearest", "bicubic", "lanczos3"])
def test_streamed_resizes_of_several_streams(tmp_path, capsys, interpolation):
    """A streamed spectrogram model resizing each frame's bins (Resizing to
    (1, 18): the time axis untouched), built for 3 streams: pfor has no
    batched form of TensorFlow's resizes, so --streams refused it ("No pfor
    vectorization defined for ResizeBilinear"); the streams fold into the
    resize's batch. Each stream as TensorFlow runs it; a bilinear one
    through the kernel."""
    import keras

    L = keras.layers
    keras.utils.set_random_seed(4)
    x = keras.Input((None, 10, 2))
    h = L.TimeDistributed(L.Reshape((1, 10, 2)))(x)
    h = L.TimeDistributed(L.Resizing(1, 18, interpolation=interpolation))(h)
    h = L.TimeDistributed(L.Conv2D(4, (1, 3), activation="relu"))(h)
    h = L.Reshape((-1, 16 * 4))(h)
    path = tmp_path / "spec.keras"
    keras.Model(x, L.Dense(3)(L.GRU(6, return_sequences=True)(h))).save(path)
    calls = kernel_calls_of_streams_build(path, tmp_path / "lib", "resize", capsys)
    assert calls == (1 if interpolation == "bilinear" else 0)
