"""Cross toolchains and emulators used by the firmware-integration tests.

Outside CI a missing tool skips the test with the package to install; .ci/run
installs them all and sets TFAOT_REQUIRE_TOOLS=1, which turns a missing tool
into a failure so CI cannot silently skip these tests.
"""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pytest

#: The C program that steps a library over a file of inputs and prints each
#: step's outputs, then "run=N" (its macros name the model).
RUN_HOOKS = Path(__file__).parent / "data" / "backend" / "c" / "run_hooks.c"
#: The bare-metal Cortex-M example (start-up, linker script, semihosting, a
#: main that runs a model over inputs.h): firmware tests build on it.
FIRMWARE = Path(__file__).parent.parent / "examples" / "cortex_m"


def build_kernel_check_sanitized(cc: str, isa: str, driver: Path, defines: list[str],
                                 tmp_path: Path) -> Path:
    """A kernel check program (tests/data/kernels/``driver``, its cases header
    in ``tmp_path``) built with runtime_shim/tfrt_matvec.c by ``cc`` for the
    x86-64 path ``isa`` (util.x86_isa_flags) under AddressSanitizer and
    UndefinedBehaviorSanitizer, warning-free; the test skips where ``cc`` is
    missing or this machine cannot run that path."""
    from tfaot.resources import shim_dir
    from util import x86_isa_flags

    if not shutil.which(cc):
        pytest.skip(f"needs {cc}")
    flags = x86_isa_flags(isa)
    if flags is None:
        pytest.skip(f"the {isa} path needs an x86-64 CPU that runs it")
    exe = tmp_path / "check"
    subprocess.run([cc, "-std=c11", "-Wall", "-Wextra", "-Werror", "-O1", "-g", *flags,
                    "-fsanitize=address,undefined", "-fno-sanitize-recover=all", *defines,
                    "-I", tmp_path, driver, shim_dir() / "tfrt_matvec.c", "-lm", "-o", exe],
                   check=True)
    return exe


def run_kernel_check_aarch64(driver: Path, defines: list[str], march: str, instruction: str,
                             tmp_path: Path) -> subprocess.CompletedProcess:
    """A kernel check program (tests/data/kernels/``driver``, its cases header
    in ``tmp_path``) built with runtime_shim/tfrt_matvec.c for aarch64
    ``-march``, its disassembly holding ``instruction`` (the path asked for),
    run under qemu-aarch64 (-cpu max: every extension, e.g. FEAT_DotProd)."""
    from tfaot.resources import shim_dir

    require("aarch64-linux-gnu-gcc", "qemu-aarch64")
    exe = tmp_path / "check"
    subprocess.run(["aarch64-linux-gnu-gcc", "-std=c11", "-O3", "-Wall", "-Wextra", "-Werror",
                    f"-march={march}", *defines, "-I", tmp_path, driver,
                    shim_dir() / "tfrt_matvec.c", "-o", exe], check=True)
    disassembly = subprocess.run(["aarch64-linux-gnu-objdump", "-d", exe], check=True,
                                 capture_output=True, text=True).stdout
    assert instruction in disassembly, f"no {instruction} in the -march={march} build"
    return subprocess.run(["qemu-aarch64", "-cpu", "max", "-L", "/usr/aarch64-linux-gnu", exe],
                          capture_output=True, text=True, timeout=120)


def write_inputs_header(xs, path: Path) -> None:
    """inputs.h of the firmware's main.c for the frames ``xs`` (the example's
    make_inputs.write_header)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("make_inputs", FIRMWARE / "make_inputs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.write_header(xs, path)

class CortexM(NamedTuple):
    """A bare-metal Arm core the tests run."""
    triple: str        # tfaot's --triple for it
    flags: list[str]   # the firmware's gcc flags besides -mthumb -mfloat-abi=hard
    machine: str       # the QEMU board with that core
    script: str        # the example's linker script for that board


#: --cpu -> its core
CORTEX_M = {
    "cortex-m4": CortexM("thumbv7em-none-eabihf", ["-mcpu=cortex-m4", "-mfpu=fpv4-sp-d16"],
                         "mps2-an386", "mps2.ld"),
    "cortex-m7": CortexM("thumbv7em-none-eabihf", ["-mcpu=cortex-m7", "-mfpu=fpv5-d16"],
                         "mps2-an500", "mps2.ld"),
    # Armv8-M mainline with the DSP extension, as the M4's
    "cortex-m33": CortexM("thumbv8m.main-none-eabihf", ["-mcpu=cortex-m33", "-mfpu=fpv5-sp-d16"],
                          "mps2-an505", "mps2_an505.ld"),
    # Armv8.1-M with Helium (MVE): IREE vectorizes with it, so do the kernels
    "cortex-m55": CortexM("thumbv8.1m.main-none-eabihf", ["-mcpu=cortex-m55"], "mps3-an547",
                          "mps3_an547.ld"),
}


def disassembly(image: Path, cpu: str) -> str:
    """objdump's text of a bare-metal image; for the M55 with the Armv8.1-M
    decoder, without which objdump prints Helium instructions as
    coprocessor ones."""
    arch = ["-m", "armv8.1-m.main"] if CORTEX_M[cpu].triple.startswith("thumbv8.1m") else []
    return subprocess.run(["arm-none-eabi-objdump", "-d", "--no-show-raw-insn", *arch, image],
                          capture_output=True, text=True, check=True).stdout


def run_cortex_m_image(lib: Path, name: str, xs, tmp_path: Path,
                       cpu: str = "cortex-m4") -> tuple[Path, "np.ndarray"]:
    """The library in ``lib`` (built for ``cpu``'s triple) linked with the
    example firmware's main.c into an image that steps it over ``xs``, run
    by qemu-system-arm on a board with that core: (the image, its outputs,
    one row per step). Fails the test if it does not build or run to the
    end."""
    import subprocess

    import numpy as np

    core = CORTEX_M[cpu]
    write_inputs_header(xs, tmp_path / "inputs.h")
    image = tmp_path / "image.elf"
    subprocess.run(
        ["arm-none-eabi-gcc", "-std=c11", "-Wall", "-Wextra", "-Werror", "-O2", "-mthumb",
         *core.flags, "-mfloat-abi=hard", f"-DTFAOT_MODEL={name}",
         f"-DTFAOT_UPPER={name.upper()}", f'-DTFAOT_HEADER="{name}.h"', "-I", lib, "-I",
         tmp_path, "-I", FIRMWARE, "-nostartfiles", "-T", FIRMWARE / core.script,
         "-Wl,--gc-sections", FIRMWARE / "startup.c", FIRMWARE / "main.c",
         lib / f"lib{name}.a", "-lm", "-lc", "-lgcc", "-o", image], check=True)
    proc = subprocess.run(["qemu-system-arm", "-M", core.machine, "-nographic", "-monitor",
                           "none", "-serial", "none", "-semihosting", "-kernel", image],
                          capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    lines = [ln for ln in proc.stderr.splitlines() if ln == "done" or ln.endswith(" ")]
    assert proc.returncode == 0 and lines[-1:] == ["done"], proc.stdout + proc.stderr
    ys = np.array([[int(h, 16) for h in ln.split()] for ln in lines[:-1]], np.uint32)
    return image, ys.view(np.float32).reshape(len(xs), -1)


#: tool -> Debian package
PACKAGES = {
    "aarch64-linux-gnu-gcc": "gcc-aarch64-linux-gnu",
    "qemu-aarch64": "qemu-user",
    "arm-none-eabi-gcc": "gcc-arm-none-eabi (+ libnewlib-arm-none-eabi)",
    "qemu-system-arm": "qemu-system-arm",
    "cmake": "cmake",
}


def require(*tools: str) -> None:
    missing = [t for t in tools if not shutil.which(t)]
    if not missing:
        return
    what = ", ".join(f"{t} (apt-get install {PACKAGES.get(t, t)})" for t in missing)
    if os.environ.get("TFAOT_REQUIRE_TOOLS") == "1":
        pytest.fail(f"required tool missing: {what}")
    pytest.skip(f"needs {what}")


def require_vulkan() -> None:
    """The Vulkan headers and a Vulkan driver (Mesa's lavapipe runs on the CPU)."""
    import glob

    missing = []
    if not os.path.exists("/usr/include/vulkan/vulkan.h"):
        missing.append("vulkan/vulkan.h (apt-get install libvulkan-dev)")
    if not glob.glob("/usr/share/vulkan/icd.d/lvp_icd.*.json"):
        missing.append("a Vulkan driver (apt-get install mesa-vulkan-drivers)")
    if not missing:
        return
    if os.environ.get("TFAOT_REQUIRE_TOOLS") == "1":
        pytest.fail(f"required for the Vulkan tests: {', '.join(missing)}")
    pytest.skip(f"needs {', '.join(missing)}")


def step_under_qemu_aarch64(out: Path, name: str, xs: np.ndarray, tmp_path: Path) -> np.ndarray:
    """Steps the aarch64 library ``out/libNAME.a`` over ``xs`` under
    qemu-aarch64 (RUN_HOOKS, built warning-free); one output row per step."""
    require("aarch64-linux-gnu-gcc", "qemu-aarch64")
    xs.astype(np.float32).tofile(tmp_path / "in.f32")
    exe = tmp_path / "run"
    subprocess.run(["aarch64-linux-gnu-gcc", "-std=c11", "-Wall", "-Wextra", "-Werror", "-O2",
                    f"-DTFAOT_MODEL={name}", f"-DTFAOT_UPPER={name.upper()}",
                    f'-DTFAOT_HEADER="{name}.h"', "-I", out, RUN_HOOKS, out / f"lib{name}.a",
                    "-lm", "-o", exe], check=True, capture_output=True, text=True)
    proc = subprocess.run(["qemu-aarch64", "-L", "/usr/aarch64-linux-gnu", str(exe),
                           str(tmp_path / "in.f32")], capture_output=True, text=True, check=True)
    lines = proc.stdout.splitlines()
    assert lines[-1] == f"run={len(xs)}", proc.stdout[-500:]
    return np.array([[float(v) for v in ln.split()] for ln in lines[:-1]], np.float32)
