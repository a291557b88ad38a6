"""Cross targets: the library built for aarch64 Linux runs under qemu-aarch64,
the Cortex-M4/M7/M33/M55 static libraries link into bare-metal images (newlib libm,
libgcc, no heap) that run under qemu-system-arm; outputs match the host
build and TensorFlow running the original Keras model (functional LSTM/GRU
with Dense, Add, Multiply, Concatenate: backend_models.keras_branched)."""
from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest

import backend_models
import toolchains
from tfaot import harness
from tfaot.target import is_host_triple
from util import run as _run

DATA = Path(__file__).parent / "data" / "backend"
STEPS = 24
TOL = 1e-5  # host build uses cpu=host (AVX-512); cross builds are generic / Cortex-M


_CROSS: dict = {}
MODEL = "keras_branched"


def _cross(triple: str, cpu: str, tmp_factory) -> tuple[Path, dict]:
    """The model built for (triple, cpu), once per session."""
    if (triple, cpu) not in _CROSS:
        from tfaot.backend.build import build_library

        spec = backend_models.ALL[MODEL]()
        root = tmp_factory.mktemp(f"{cpu}")
        manifest = build_library(spec.mlir, spec.signature, root / "out", name=MODEL,
                                 triple=triple, cpu=cpu, workdir=root / "work")
        _CROSS[(triple, cpu)] = (root / "out", manifest)
    return _CROSS[(triple, cpu)]


@pytest.fixture(scope="module")
def inputs():
    """Inputs and the expected outputs: TensorFlow on the original model,
    checked against the host build too."""
    import keras_models
    from tfaot.verify import keras_reference

    spec, out, _ = backend_models.built(MODEL)
    xs = np.random.default_rng(11).standard_normal((STEPS, *spec.input_shape)).astype(np.float32)
    expected = keras_reference(keras_models.build("functional_branched"), xs).reshape(STEPS, -1)
    host = harness.load(out).step_n(xs).reshape(STEPS, -1)
    np.testing.assert_allclose(host, expected, rtol=0, atol=TOL)
    return xs, expected


def _model_defs() -> list[str]:
    return [f"-DTFAOT_MODEL={MODEL}", f"-DTFAOT_UPPER={MODEL.upper()}",
            f'-DTFAOT_HEADER="{MODEL}.h"']


def _check_footprint(manifest: dict) -> None:
    fp = manifest["footprint"]
    assert fp["host_program_measured"]
    assert fp["code_bytes"] > 1000 and fp["weight_bytes"] > 0
    assert fp["ram_bytes"] == manifest["ctx_size"] > manifest["arena_bytes"]


def test_aarch64_linux_under_qemu(inputs, tmp_path_factory, tmp_path):
    toolchains.require("aarch64-linux-gnu-gcc", "qemu-aarch64")
    out, manifest = _cross("aarch64-linux-gnu", "generic", tmp_path_factory)
    # (on an aarch64 machine this is its own triple, which gets a .so too)
    assert (out / f"lib{MODEL}.a").is_file()
    assert (out / f"lib{MODEL}.so").exists() == is_host_triple("aarch64-linux-gnu")
    _check_footprint(manifest)
    xs, expected = inputs
    ys = toolchains.step_under_qemu_aarch64(out, MODEL, xs, tmp_path)
    np.testing.assert_allclose(ys, expected, rtol=0, atol=TOL)


ARM = toolchains.CORTEX_M


def _bare_metal_image(cpu: str, out: Path, xs: np.ndarray, tmp_path: Path) -> Path:
    toolchains.write_inputs_header(xs, tmp_path / "inputs.h")
    image = tmp_path / "image.elf"
    cm = toolchains.FIRMWARE
    _run(["arm-none-eabi-gcc", "-std=c11", "-Wall", "-Wextra", "-Werror", "-O2", "-mthumb",
          *ARM[cpu].flags, "-mfloat-abi=hard", "-ffunction-sections", "-fdata-sections",
          *_model_defs(), "-I", out, "-I", tmp_path, "-I", cm, "-nostartfiles", "-T", cm / ARM[cpu].script,
          "-Wl,--gc-sections", "-Wl,-z,noexecstack", "-Wl,--fatal-warnings", cm / "startup.c", cm / "main.c",
          out / f"lib{MODEL}.a", "-lm", "-lc", "-lgcc", "-o", image])
    return image


@pytest.mark.parametrize("cpu", sorted(ARM))
def test_cortex_m_bare_metal_image(cpu, inputs, tmp_path_factory, tmp_path):
    toolchains.require("arm-none-eabi-gcc")
    out, manifest = _cross(ARM[cpu].triple, cpu, tmp_path_factory)
    _check_footprint(manifest)
    assert manifest["ctx_size"] % 64 == 0
    attrs = _run(["arm-none-eabi-readelf", "-A", out / f"lib{MODEL}.a"]).stdout
    assert "Tag_ABI_VFP_args: VFP registers" in attrs  # hard-float, as the gcc flags
    xs, expected = inputs
    image = _bare_metal_image(cpu, out, xs, tmp_path)
    symbols = _run(["arm-none-eabi-nm", image]).stdout.split()
    for heap_fn in ("malloc", "free", "_sbrk", "_malloc_r"):
        assert heap_fn not in symbols, f"bare-metal image pulls in {heap_fn}"
    # tanh and logistic are tfaot's (lower/activations.py): no floor at all
    kernels = out / "src" / f"{MODEL}_kernels.o"
    assert "floorf" not in _run(["arm-none-eabi-nm", "-u", kernels]).stdout.split()
    assert f"{MODEL}_floorf" not in symbols
    toolchains.require("qemu-system-arm")
    proc = subprocess.run(["qemu-system-arm", "-M", ARM[cpu].machine, "-nographic", "-monitor", "none",
                           "-serial", "none", "-semihosting", "-kernel", image],
                          capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL)
    # QEMU writes semihosting output to stderr; keep only the program's lines.
    lines = [ln for ln in proc.stderr.splitlines() if ln == "done" or ln.endswith(" ")]
    assert proc.returncode == 0 and lines and lines[-1] == "done", proc.stdout + proc.stderr
    ys = np.array([[int(h, 16) for h in ln.split()] for ln in lines[:-1]], np.uint32)
    np.testing.assert_allclose(ys.view(np.float32), expected, rtol=0, atol=TOL)


def test_firmware_builds_for_size_with_werror(tmp_path):
    """The generated C at -Os / -O1 -Werror, as firmware builds it (CMake's
    MinSizeRel): gcc 12 saw a convolution stack's direct-step results as
    "maybe uninitialized"."""
    import keras

    from tfaot.cli import main

    toolchains.require("arm-none-eabi-gcc")
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((None, 10)), keras.layers.Conv1D(8, 3, activation="relu"),
                              keras.layers.Conv1D(8, 3, dilation_rate=2),
                              keras.layers.GlobalMaxPooling1D(), keras.layers.Dense(5)])
    model.save(tmp_path / "kws.keras")
    out = tmp_path / "kws"
    assert main(["-q", "build", str(tmp_path / "kws.keras"), "-o", str(out),
                 "--triple", ARM["cortex-m4"].triple, "--cpu", "cortex-m4"]) == 0
    for opt in ("-Os", "-O1"):
        _run(["arm-none-eabi-gcc", "-std=c11", "-Wall", "-Wextra", "-Werror", opt, "-mthumb",
              *ARM["cortex-m4"].flags, "-mfloat-abi=hard", "-I", out / "src", "-c",
              out / "src" / "kws.c", "-o", tmp_path / "kws.o"])


def test_cortex_m4_exp_floors_with_tfaot_floorf(tmp_path):
    """IREE's exp rounds with floorf, which an M4's FPv4 lacks: the library
    brings its own (NAME_floorf, runtime_shim/tfrt_libm.c), so nothing is
    left for the firmware's libm."""
    toolchains.require("arm-none-eabi-gcc")
    from tfaot.backend.build import build_library

    spec = backend_models.ALL["accumulator"]()
    mlir = spec.mlir.replace(
        "%n = stablehlo.add %s, %x : tensor<1x4xf32>",
        "%e = stablehlo.exponential %x : tensor<1x4xf32>\n"
        "    %n = stablehlo.add %s, %e : tensor<1x4xf32>")
    assert "stablehlo.exponential" in mlir
    out = tmp_path / "out"
    build_library(mlir, spec.signature, out, name="acc", triple="thumbv7em-none-eabihf",
                  cpu="cortex-m4", workdir=tmp_path / "w")
    undefined = _run(["arm-none-eabi-nm", "-u", out / "libacc.a"]).stdout.split()
    defined = _run(["arm-none-eabi-nm", "--defined-only", out / "libacc.a"]).stdout.split()
    assert "floorf" not in undefined and "acc_floorf" in defined
    # The kernel object a firmware's CMake build links from src/: arm-none-eabi's
    # ld -r had marked its stack note executable ("requires executable stack").
    sections = _run(["arm-none-eabi-readelf", "-S", out / "src" / "acc_kernels.o"]).stdout
    (note,) = [line for line in sections.splitlines() if ".note.GNU-stack" in line]
    assert "X" not in note.split(".note.GNU-stack")[1].split()[4:], note


def test_hard_float_arm_without_cpu_is_refused(tmp_path):
    toolchains.require("arm-none-eabi-gcc")
    from tfaot.backend.build import build_library
    from tfaot.errors import TfaotError

    spec = backend_models.ALL["accumulator"]()
    with pytest.raises(TfaotError, match="is hard-float; name the CPU with --cpu"):
        build_library(spec.mlir, spec.signature, tmp_path / "out", name="acc",
                      triple="thumbv7em-none-eabihf", cpu="generic", workdir=tmp_path / "w")


FLOORF_CHECK = r"""
#include <math.h>
#include <stdio.h>
#include <string.h>
float t_floorf(float x);
float t_fmaximumf(float a, float b);
float t_fminimumf(float a, float b);

/* IEEE 754-2019 maximum and minimum as fmaxf/fminf and the rules they
 * differ in: a NaN wins, and -0 < +0 */
static int same_extremes(float a, float b) {
  const float mx = t_fmaximumf(a, b), mn = t_fminimumf(a, b);
  if (a != a || b != b) return mx != mx && mn != mn;
  if (a == 0.0f && b == 0.0f)
    return !!signbit(mx) == (signbit(a) && signbit(b)) &&
           !!signbit(mn) == (signbit(a) || signbit(b));
  return mx == fmaxf(a, b) && mn == fminf(a, b);
}

int main(void) {
  const float special[] = {0.0f, -0.0f, 0.5f, -0.5f, 1.0f, -1.0f, 2.5f, -2.5f, 1e-40f, -1e-40f,
                           8388607.5f, -8388607.5f, 8388608.0f, -8388609.0f, 1e30f, -1e30f,
                           INFINITY, -INFINITY, NAN};
  unsigned bad = 0, count = 0;
  for (unsigned i = 0; i < sizeof special / sizeof special[0]; i++, count++) {
    const float want = floorf(special[i]), got = t_floorf(special[i]);
    bad += memcmp(&want, &got, sizeof got) != 0;
  }
  unsigned seed = 1;
  for (unsigned i = 0; i < 1000000; i++, count++) {
    seed = seed * 1103515245u + 12345u;
    unsigned bits = seed ^ (seed >> 7);
    float x;
    memcpy(&x, &bits, sizeof x);
    if (x != x) continue;
    const float want = floorf(x), got = t_floorf(x);
    bad += memcmp(&want, &got, sizeof got) != 0;
  }
  for (unsigned i = 0; i < sizeof special / sizeof special[0]; i++)
    for (unsigned j = 0; j < sizeof special / sizeof special[0]; j++, count++)
      bad += !same_extremes(special[i], special[j]);
  printf("%u of %u differ\n", bad, count);
  return bad != 0;
}
"""


def test_libm_shims_are_libms_bit_for_bit(tmp_path):
    """runtime_shim/tfrt_libm.c's floorf against the C library's, bit for bit
    (signed zeros, subnormals, halves, the 2^23 edge, Inf, NaN, a million
    random bit patterns), and its fmaximumf/fminimumf on every pair of those
    values, under UndefinedBehaviorSanitizer."""
    from tfaot.resources import shim_dir

    (tmp_path / "check.c").write_text(FLOORF_CHECK)
    exe = tmp_path / "check"
    _run(["gcc", "-std=c11", "-O2", "-Wall", "-Wextra", "-Werror", "-fsanitize=undefined",
          "-fno-sanitize-recover=all", "-DTFRT_LIBM_PREFIX=t_", tmp_path / "check.c",
          shim_dir() / "tfrt_libm.c", "-lm", "-o", exe])
    assert _run([exe]).stdout.startswith("0 of ")
