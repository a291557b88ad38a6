"""--intermediates=f16: the images between tfaot's convolution kernels stored
as IEEE halves (runtime_shim/tfrt_half.h, tfrt_half_convert.h;
compiler/lower/microkernel.py HALF_KINDS).

Checked here: the conversions (every half, every rounding midpoint) and the
f16-image kernels against the f32 kernels on the same image, under
AddressSanitizer and UndefinedBehaviorSanitizer with the scratch sizes the
build gives them, on aarch64 and on Cortex-M cores (the scalar FPU's f16
depthwise block, Helium's strips); the int8 convolution on halves against
numpy's model of its arithmetic; and a DS-CNN-like model built with it, on
the host and for a Cortex-M4 under QEMU, against TensorFlow through the
built library, with its context smaller than the f32 images' build.
"""
from __future__ import annotations

import json
import re
import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

import toolchains
from test_qconv import _cases, _cases_header, _output_shape, printed_floats
from test_weights_int8 import CORTEX_M, _cortex_m_image, _run_cortex_m
from tfaot.errors import TfaotError
from tfaot.lower import int8_weights, microkernel
from tfaot.resources import shim_dir
from tfaot.target_options import make_target
from util import run as _run
from util import sanitized_builds

DATA = Path(__file__).parent / "data" / "kernels"
STEPS = 120

#: n, c, kh, kw, ih, iw, (top, bottom, left, right), (sh, sw), (dh, dw),
#: depthwise (only the depthwise kernel pads: the conv kernel's image comes
#: padded, so its cases have none). DS-CNN's first convolution and a pointwise layer (in place), strided and
#: dilated ones; depthwise: DS-CNN's (width padded by 1, rows of 4 and of
#: 6: a block moved back), 'same' on every side, an odd channel count (no
#: pairs: the strip or one channel at a time), strided, a depth multiplier,
#: a row narrower than the block.
GEOMETRIES = [
    (64, 1, 10, 4, 25, 10, (0, 0, 0, 0), (2, 2), (1, 1), False),
    (32, 32, 1, 1, 6, 5, (0, 0, 0, 0), (1, 1), (1, 1), False),
    (12, 6, 3, 3, 9, 8, (0, 0, 0, 0), (2, 1), (1, 2), False),
    (64, 64, 3, 3, 7, 4, (0, 0, 1, 1), (1, 1), (1, 1), True),
    (16, 16, 3, 3, 5, 6, (0, 0, 1, 1), (1, 1), (1, 1), True),
    (24, 24, 3, 3, 6, 9, (1, 1, 1, 1), (1, 1), (1, 1), True),
    (7, 7, 3, 3, 5, 8, (1, 1, 1, 1), (1, 1), (1, 1), True),
    (10, 10, 3, 3, 7, 9, (1, 1, 1, 1), (2, 2), (1, 1), True),
    (12, 6, 3, 3, 5, 7, (1, 1, 1, 1), (1, 1), (1, 1), True),
    (8, 8, 3, 3, 4, 3, (1, 1, 1, 1), (1, 1), (1, 1), True),
]


def _geometry(case, half_blocks: bool) -> microkernel.ConvGeometry:
    n, c, kh, kw, ih, iw, pad, (sh, sw), (dh, dw), depthwise = case
    top, bottom, left, right = pad
    ph, pw = ih + top + bottom, iw + left + right
    oh, ow = (ph - dh * (kh - 1) - 1) // sh + 1, (pw - dw * (kw - 1) - 1) // sw + 1
    return microkernel.ConvGeometry(
        n=n, c=c, kh=kh, kw=kw, ih=ih, iw=iw, oh=oh, ow=ow, sh=sh, sw=sw, dh=dh, dw=dw,
        pad=((top, bottom), (left, right)), depthwise=depthwise, x_type="", y_type="",
        weights=np.zeros(0), half=True, half_blocks=half_blocks)


def _write_cases(tmp_path: Path, half_blocks: bool) -> int:
    """half_cases.h for data/kernels/half_check.c, with the scratch sizes and
    strips the build gives each geometry (a target with the f16 depthwise
    block or without it), and the conversions' header beside it."""
    rows = []
    for case in GEOMETRIES:
        g = _geometry(case, half_blocks)
        (top, bottom), (left, right) = g.pad
        rows.append(f"{{{g.n}u, {g.c}u, {g.kh}u, {g.kw}u, {g.ih}u, {g.iw}u, {top}u, {bottom}u, "
                    f"{left}u, {right}u, {g.sh}u, {g.sw}u, {g.dh}u, {g.dw}u, {int(g.depthwise)}, "
                    f"{g.scratch_bytes}u, {g.strip_floats}u}}")
    (tmp_path / "half_cases.h").write_text(
        "struct half_case { size_t n, c, kh, kw, ih, iw, top, bottom, left, right, sh, sw, dh, "
        "dw; int depthwise; size_t scratch_bytes, strip; };\n"
        f"static const struct half_case cases[] = {{{', '.join(rows)}}};\n")
    shutil.copy(shim_dir() / "tfrt_half_convert.h", tmp_path)
    return len(rows)


HALF_KERNELS = ["-DTFRT_ACT_FN=act", "-DTFRT_CONV_FN=conv", "-DTFRT_DWCONV_FN=dwconv",
                "-DTFRT_CONV16_FN=conv16",
                "-DTFRT_DWCONV16_FN=dwconv16"]


@pytest.mark.parametrize("cc, isa", sanitized_builds(["generic", "avx2", "native"]))
def test_kernels_under_sanitizers(cc, isa, tmp_path):
    """Each x86-64 path this machine runs (the f32 kernels the f16 ones call
    on their strips), gcc and clang warning-free."""
    count = _write_cases(tmp_path, half_blocks=False)
    exe = toolchains.build_kernel_check_sanitized(cc, isa, DATA / "half_check.c", HALF_KERNELS,
                                                  tmp_path)
    assert _run([exe]).stdout.strip() == f"ok {count}"


def test_kernels_on_aarch64(tmp_path):
    """aarch64's conversions (__fp16) and NEON f32 kernels, under qemu-aarch64."""
    count = _write_cases(tmp_path, half_blocks=False)
    proc = toolchains.run_kernel_check_aarch64(DATA / "half_check.c", HALF_KERNELS, "armv8-a",
                                               "fcvt", tmp_path)
    assert proc.returncode == 0 and proc.stdout.strip() == f"ok {count}", proc.stdout + proc.stderr


@pytest.mark.parametrize("cpu", ["cortex-m4", "cortex-m7", "cortex-m55"])
def test_kernels_on_cortex_m(cpu, tmp_path):
    """The FPU's VCVTB/VCVTT conversions; on a scalar FPU the depthwise
    block that reads halves itself (the build gives it no strip), on Helium
    the strips."""
    toolchains.require("arm-none-eabi-gcc", "qemu-system-arm")
    target = make_target("cpu", CORTEX_M[cpu].triple, cpu)
    assert target.half_dw_blocks == (cpu != "cortex-m55")
    count = _write_cases(tmp_path, target.half_dw_blocks)
    image = _cortex_m_image(cpu, tmp_path, HALF_KERNELS, driver=DATA / "half_check.c")
    disassembly = toolchains.disassembly(image, cpu)
    assert "vcvtt.f32.f16" in disassembly and "vcvtb.f16.f32" in disassembly
    proc = _run_cortex_m(cpu, image)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == f"ok {count}", proc.stderr


def _check_half_output(proc: subprocess.CompletedProcess, cases) -> None:
    """qconv_check.c with -DQ16 prints each case's f32 outputs, then those of
    the kernel on halves: these against numpy's int8 arithmetic on the image
    rounded to f16, rounded to f16 themselves (one unit of the last place
    apart at most: the f32 scaling may round the other way)."""
    got, start = printed_floats(proc), 0
    for case in cases:
        n, c, kh, kw, ih, iw, strides, dilations = case["g"]
        size = int(np.prod(_output_shape(case["g"]))) * n
        y = got[start + size:start + 2 * size].reshape(-1, n)
        start += 2 * size
        x16 = case["x"].astype(np.float16).astype(np.float32)
        want = int8_weights.int8_conv(case["w"], x16, kh, kw, strides, dilations,
                                      case["post"]).reshape(-1, n)
        # NaN where the image had NaN or Inf: all outputs, a 1x1 layer's at that pixel
        np.testing.assert_array_equal(np.isnan(y), np.isnan(want), err_msg=str(case["g"]))
        if not np.isfinite(x16).all():
            assert np.isnan(want).any()
            y, want = y[~np.isnan(want)], want[~np.isnan(want)]
        ulp = np.abs(want.astype(np.float16).astype(np.float32)) * 2.0 ** -10 + 2.0 ** -24
        np.testing.assert_array_less(np.abs(y - want), 1.5 * ulp + 1e-5, err_msg=str(case["g"]))
    assert start == len(got)


def _write_qconv_cases(tmp_path: Path, seed: int) -> list[dict]:
    cases = _cases(np.random.default_rng(seed))
    (tmp_path / "qconv_cases.h").write_text(_cases_header(cases))
    shutil.copy(shim_dir() / "tfrt_half_convert.h", tmp_path)
    return cases


QCONV16 = ["-DTFRT_MATVEC_INT8", "-DTFRT_QCONV_FN=q_kernel", "-DTFRT_QCONV16_FN=q16_kernel",
           "-DQ16"]


@pytest.mark.parametrize("isa", ["generic", "native", "avx512_emulated"])
def test_int8_kernel_under_sanitizers(isa, tmp_path):
    """The int8 convolution on halves (the image quantized straight from
    them, an output row at a time) on this machine's paths, with the
    scratch the build gives it; an image with NaN or Inf gives NaNs."""
    cases = _write_qconv_cases(tmp_path, 10)
    exe = toolchains.build_kernel_check_sanitized("gcc", isa, DATA / "qconv_check.c", QCONV16,
                                                  tmp_path)
    _check_half_output(subprocess.run([exe], capture_output=True, text=True, timeout=120), cases)


def test_int8_kernel_on_cortex_m4(tmp_path):
    """The DSP path on halves under qemu-system-arm."""
    toolchains.require("arm-none-eabi-gcc", "qemu-system-arm")
    cases = _write_qconv_cases(tmp_path, 11)
    image = _cortex_m_image("cortex-m4", tmp_path, QCONV16, DATA / "qconv_check.c")
    _check_half_output(_run_cortex_m("cortex-m4", image), cases)


def test_rewrite_passes_halves_between_kernels():
    """Two convolutions in a row: the first's f16 result is the second's
    input (no conversion between them), the model's f32 input converted
    once before the first, the f32 result once after the last; a pointwise
    result takes its image's buffer (tied), a depthwise one does not."""
    from test_conv_kernels import NHWC

    f1 = np.random.default_rng(0).standard_normal((3, 3, 1, 8)).astype("<f4")
    f2 = np.random.default_rng(1).standard_normal((1, 1, 8, 8)).astype("<f4")
    f3 = np.random.default_rng(2).standard_normal((3, 3, 1, 8)).astype("<f4")

    def const(name, f):
        shape = "x".join(map(str, f.shape))
        return (f'    %{name} = stablehlo.constant dense<"0x{f.tobytes().hex().upper()}"> : '
                f"tensor<{shape}xf32>\n")

    def conv(y, x, w, x_shape, w_shape, y_shape, groups, pad):
        return (f"    %{y} = stablehlo.convolution(%{x}, %{w}) dim_numbers = {NHWC}, window = "
                f"{{stride = [1, 1], pad = {pad}, rhs_dilate = [1, 1]}} {{batch_group_count = 1 "
                f": i64, feature_group_count = {groups} : i64}} : (tensor<{x_shape}xf32>, "
                f"tensor<{w_shape}xf32>) -> tensor<{y_shape}xf32>\n")

    text = ("module {\n  func.func @f(%x: tensor<1x6x6x8xf32>) -> tensor<1x4x4x8xf32> {\n"
            + const("w1", f1) + const("w2", f2) + const("w3", f3)
            + conv("a", "x", "w1", "1x6x6x8", "3x3x1x8", "1x6x6x8", 8, "[[1, 1], [1, 1]]")
            + conv("b", "a", "w2", "1x6x6x8", "1x1x8x8", "1x6x6x8", 1, "[[0, 0], [0, 0]]")
            + conv("c", "b", "w3", "1x6x6x8", "3x3x1x8", "1x4x4x8", 8, "[[0, 0], [0, 0]]")
            + "    return %c : tensor<1x4x4x8xf32>\n  }\n}\n")
    out, count = microkernel.rewrite_matvecs(text, "m", half_images=True)
    assert count == 3
    main = out[out.index("func.func @f"):out.index("\n  }")]
    assert main.count("stablehlo.convert") == 2, main  # the input's and the result's
    assert re.search(r"call @tfaot_dwconv16_0\(%\S+\) : \(tensor<1x6x6x8xf16>\)", main), main
    assert "@m_dwconv16_f32" in out and "@m_conv16_f32" in out
    dispatches = re.findall(r"flow.dispatch @(\w+)_exe.* -> \((\S+),", out)
    assert dispatches == [("tfaot_dwconv16_0", "tensor<1x6x6x8xf16>"), ("tfaot_conv16_1", "%x0"),
                          ("tfaot_dwconv16_2", "tensor<1x4x4x8xf16>")], dispatches


def test_refused_where_no_kernel_of_tfaot_runs():
    """f16 images exist only between tfaot's kernels: a GPU target and
    --matvec=iree say so before anything is built; an unknown value too."""
    for kwargs in ({"kind": "vulkan"}, {"matvec": "iree"}):
        with pytest.raises(TfaotError, match="--intermediates=f16 applies to tfaot's"):
            make_target(intermediates="f16", **kwargs)
    with pytest.raises(TfaotError, match="--intermediates=f8 is not supported"):
        make_target(intermediates="f8")


def _ds_cnn():
    """A DS-CNN of 32 channels over 32 x 10 frames: a 4x4 convolution (512
    weights: f32 in int8 builds), two depthwise 3x3 + pointwise 32x32 (1024
    weights: int8) blocks with batch norms and ReLUs, average pooling."""
    import keras
    from keras import layers as L

    keras.utils.set_random_seed(3)
    x = keras.Input((32, 10))
    h = L.Reshape((32, 10, 1))(x)
    # (He initialisation: outputs of order 1, where f16's rounding shows)
    h = L.Conv2D(32, (4, 4), strides=(2, 2), activation="relu", kernel_initializer="he_normal")(h)
    for _ in range(2):
        h = L.ZeroPadding2D(((0, 0), (1, 1)))(h)
        h = L.DepthwiseConv2D((3, 3), depthwise_initializer=keras.initializers.RandomNormal(
            stddev=(2 / 9) ** 0.5))(h)
        h = L.ReLU()(L.BatchNormalization()(h))
        h = L.Conv2D(32, (1, 1), kernel_initializer="he_normal")(h)
        h = L.ReLU()(L.BatchNormalization()(h))
    h = L.GlobalAveragePooling2D()(h)
    model = keras.Model(x, L.Dense(3)(h))
    model(np.random.default_rng(0).standard_normal((8, 32, 10)).astype(np.float32),
          training=True)  # batch norms with statistics of their own
    return model


@pytest.fixture(scope="module")
def ds_cnn_half(tmp_path_factory):
    """_ds_cnn, whole window, built with f32 images and with f16 ones: f32
    weights, and int8 with the int8 convolution kernel whatever this
    machine's CPU."""
    from tfaot import target_options
    from tfaot.cli import main

    tmp = tmp_path_factory.mktemp("half")
    _ds_cnn().save(tmp / "kws.keras")
    make_target = target_options.make_target  # (imported by the pipeline when it builds)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(target_options, "make_target", lambda *args, **kwargs: replace(
            make_target(*args, **kwargs), int8_convolutions=True))
        for sub, flags in (("f32", []), ("f16", ["--intermediates=f16"]),
                           ("int8", ["--intermediates=f16", "--weights-dtype=int8"])):
            assert main(["build", str(tmp / "kws.keras"), "-o", str(tmp / sub), "--quiet",
                         "--whole-window", *flags]) == 0
    return tmp


@pytest.mark.parametrize("sub,kernels", [("f16", {"conv16", "dwconv16"}),
                                         ("int8", {"conv16", "qconv16", "dwconv16"})])
def test_model_through_the_so(ds_cnn_half, sub, kernels, capsys):
    """Through the built library over STEPS whole windows against TensorFlow:
    within verify's f16 tolerance and really rounded (f32 images: ~1e-7)."""
    from tfaot.cli import main

    out = ds_cnn_half / sub
    manifest = json.loads((out / "kws.json").read_text())
    assert manifest["intermediates"] == "f16"
    assert kernels <= set(manifest["micro_kernels"]), manifest["micro_kernels"]
    assert main(["verify", str(ds_cnn_half / "kws.keras"), str(out), "--steps",
                 str(STEPS)]) == 0
    text = capsys.readouterr().out
    err, tol = map(float, re.search(r"max abs error (\S+) .*tolerance (\S+)\)", text).groups())
    # verify's tolerance for f16 images, scaled by |y|
    assert tol >= 5e-2, text
    assert 1e-5 < err < (3e-2 if sub == "int8" else 2e-3), text


def test_context_is_smaller(ds_cnn_half):
    """The step's temporaries are the images: f16 ones take less of the
    context than f32 ones (the f32 build's manifest says f32)."""
    def manifest(sub):
        return json.loads((ds_cnn_half / sub / "kws.json").read_text())

    assert manifest("f32")["intermediates"] == "f32"
    f32, f16 = manifest("f32")["step_scratch_bytes"], manifest("f16")["step_scratch_bytes"]
    assert f16 < 0.75 * f32, (f16, f32)


def test_cortex_m4_build_under_qemu(ds_cnn_half, tmp_path, capsys):
    """An int8 Cortex-M4 whole-window build takes f16 images by default (its
    depthwise layers on the scalar FPU's f16 block, no strip) and says so;
    verified under qemu-system-arm, with less context than the same build
    with f32 images."""
    toolchains.require("arm-none-eabi-gcc", "qemu-system-arm")
    from tfaot.cli import main

    model = str(ds_cnn_half / "kws.keras")
    common = ["--whole-window", "--weights-dtype=int8", "--triple", "thumbv7em-none-eabihf",
              "--cpu", "cortex-m4"]
    for sub, flags in (("m4", []), ("m4_f32", ["--intermediates=f32", "--quiet"])):
        assert main(["build", model, "-o", str(tmp_path / sub), *common, *flags]) == 0
    assert "f16 images between the convolutions (the default" in capsys.readouterr().err

    def manifest(sub):
        return json.loads((tmp_path / sub / "kws.json").read_text())

    assert manifest("m4")["intermediates"] == "f16"
    assert "dwconv16" in manifest("m4")["micro_kernels"]
    assert manifest("m4_f32")["intermediates"] == "f32"
    assert manifest("m4")["ctx_size"] < manifest("m4_f32")["ctx_size"]
    assert main(["verify", model, str(tmp_path / "m4"), "--steps", "100"]) == 0
    assert "ok" in capsys.readouterr().out


def test_default_only_for_int8_whole_inferences_on_cortex_m():
    """f16 images by default only where they were measured to pay: int8
    weights, a Cortex-M with a scalar FPU, a step without state (streamed
    models keep f32, as do f32 weights, hosted targets and Helium)."""
    from tfaot.target_options import default_intermediates

    m4 = dict(kind="cpu", triple="thumbv7em-none-eabihf", cpu="cortex-m4")
    if make_target(**m4).toolchain() is None:
        pytest.skip("needs arm-none-eabi-gcc")
    assert default_intermediates(make_target(**m4, weights_dtype="int8"), stateless=True) == "f16"
    assert default_intermediates(make_target(**m4, weights_dtype="int8"), stateless=False) == "f32"
    assert default_intermediates(make_target(**m4), stateless=True) == "f32"
    assert default_intermediates(make_target(weights_dtype="int8"), stateless=True) == "f32"
    m55 = make_target("cpu", "thumbv8.1m.main-none-eabihf", "cortex-m55", weights_dtype="int8")
    assert default_intermediates(m55, stateless=True) == "f32"


@pytest.mark.parametrize("cc", ["gcc", "clang"])
def test_generated_c_clean(ds_cnn_half, cc, tmp_path):
    """The int8 build's host program (its f16 conversions are IREE
    dispatches, its kernels on halves tfaot's) compiles warning-free and
    steps, resets and moves its state under AddressSanitizer and
    UndefinedBehaviorSanitizer."""
    if not shutil.which(cc):
        pytest.skip(f"needs {cc}")
    src = ds_cnn_half / "int8" / "src"
    warn = ["-std=c11", "-Wall", "-Wextra", "-Werror", "-pedantic"]
    _run([cc, *warn, "-O2", "-c", src / "kws.c", "-o", tmp_path / "kws.o"])
    exe = tmp_path / "loop"
    _run([cc, *warn, "-O1", "-g", "-fsanitize=address,undefined", "-fno-sanitize-recover=all",
          "-DTFAOT_MODEL=kws", "-DTFAOT_UPPER=KWS", '-DTFAOT_HEADER="kws.h"', "-I", src,
          Path(__file__).parent / "data" / "backend" / "c" / "step_loop.c", src / "kws.c",
          src / "kws_kernels.o", "-lm", "-o", exe])
    proc = _run([exe], env={"ASAN_OPTIONS": "detect_leaks=1:abort_on_error=1",
                            "UBSAN_OPTIONS": "halt_on_error=1:print_stacktrace=1"})
    assert "runtime error" not in proc.stderr and "AddressSanitizer" not in proc.stderr
    assert len(proc.stdout.splitlines()) == 200


def test_model_without_convolutions_says_so(tmp_path, capsys):
    """A model with no convolution for the kernels (a GRU) builds f32, with
    a warning naming the option, and its manifest says f32."""
    import keras

    from tfaot.cli import main

    keras.utils.set_random_seed(0)
    keras.Sequential([keras.Input((None, 4), batch_size=1),
                      keras.layers.GRU(8, return_sequences=True)]).save(tmp_path / "g.keras")
    assert main(["build", str(tmp_path / "g.keras"), "-o", str(tmp_path / "g"),
                 "--intermediates=f16"]) == 0
    assert ("--intermediates=f16: this model has no convolution that tfaot's kernels compute"
            in capsys.readouterr().err)
    assert json.loads((tmp_path / "g" / "g.json").read_text())["intermediates"] == "f32"


def test_a_streamed_step_is_warned_that_halves_save_nothing(tmp_path, capsys):
    """--intermediates=f16 on a streamed step: its state stays f32 and its
    images are a frame or two, and the conversions made a Cortex-M4 DS-CNN's
    context 3520 -> 5312 B without a word; the build says so."""
    from tfaot.cli import main

    _ds_cnn().save(tmp_path / "kws.keras")
    assert main(["build", str(tmp_path / "kws.keras"), "-o", str(tmp_path / "lib"),
                 "--stream", "--intermediates=f16"]) == 0
    manifest = json.loads((tmp_path / "lib" / "kws.json").read_text())
    assert manifest["state"] and manifest["intermediates"] == "f16"
    assert "--intermediates=f16 on a streamed step" in capsys.readouterr().err
