"""Runs a library built for another machine under QEMU (``tfaot verify``).

A cross build (``--triple aarch64-linux-gnu``, a Cortex-M) has no shared
library this process can load, yet its numbers are the ones that need
checking most: other kernels (NEON, the Cortex-M DSP and FPU paths, Helium),
another libm, lookup-table activations. Where the build's cross compiler and
QEMU are installed, ``run_sequence`` links the static library with
qemu_runner.c (the build's own C flags), runs it under ``qemu-ARCH`` (Linux
triples, user mode) or ``qemu-system-arm`` (Cortex-M, on the board QEMU
models with that core; files by semihosting) and reads back every step's
outputs. Where they are missing, the error names them and the other way:
``tfaot verify --save-case`` here, ``--case`` on the target.
"""
from __future__ import annotations

import ctypes
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import TfaotError
from ..target import is_host_triple

RUNNER = Path(__file__).parent / "qemu_runner.c"

#: --cpu -> the QEMU board with that core and its memory map (code and
#: read-only data, then RAM: origin, length), as QEMU models them
BOARDS = {
    "cortex-m4": ("mps2-an386", [("CODE", 0x0, "4M"), ("DATA", 0x20000000, "4M")]),
    "cortex-m7": ("mps2-an500", [("CODE", 0x0, "4M"), ("DATA", 0x20000000, "4M")]),
    # the AN505 starts the core in the secure state: the secure aliases
    "cortex-m33": ("mps2-an505", [("CODE", 0x10000000, "4M"), ("DATA", 0x38000000, "2M")]),
    # 512 KiB of ITCM for code, the weights in SRAM, data in the internal SRAM
    "cortex-m55": ("mps3-an547", [("CODE", 0x0, "512K"), ("RODATA", 0x01000000, "2M"),
                                  ("DATA", 0x21000000, "4M")]),
}

#: tool -> the Debian package that has it (named in errors)
PACKAGES = {"qemu-system-arm": "qemu-system-arm", "arm-none-eabi-gcc":
            "gcc-arm-none-eabi libnewlib-arm-none-eabi", "qemu-aarch64": "qemu-user",
            "qemu-riscv64": "qemu-user", "qemu-arm": "qemu-user"}

#: a runner's time limit: QEMU's Cortex-M boards run some 100 M instructions a second
TIMEOUT_S = 3600


@dataclass
class Emulator:
    """How a library of one triple is linked and run."""

    what: str                # for messages: "qemu-aarch64", "qemu-system-arm (mps2-an386)"
    cc: str
    link: list[str]          # flags after the sources
    run: list[str]           # the command before the runner's path
    bare_metal: bool = False
    memory: list | None = None  # a board's regions (bare metal)


def needs_emulator(manifest: dict) -> bool:
    """True for a CPU library built for another machine."""
    return manifest.get("target", "cpu") == "cpu" and not is_host_triple(manifest["triple"])


def emulator(manifest: dict) -> Emulator:
    """The emulator for the library's triple and CPU, or a TfaotError that
    says what to install (or to run the case on the target)."""
    triple, cpu = manifest["triple"], manifest.get("cpu", "generic")
    arch = triple.split("-")[0]
    libs = [f"-l{lib}" for lib in manifest.get("link_libs", [])]
    if arch.startswith("thumb"):
        if cpu not in BOARDS:
            raise _cannot(triple, f"QEMU has no board with a {cpu} (verify runs builds for "
                                  f"{', '.join(BOARDS)})")
        board, memory = BOARDS[cpu]
        _require(triple, "arm-none-eabi-gcc", "qemu-system-arm")
        return Emulator(f"qemu-system-arm ({board}, {cpu})", "arm-none-eabi-gcc",
                        ["-nostartfiles", "-Wl,--gc-sections", *libs, "-lm", "-lc", "-lgcc"],
                        ["qemu-system-arm", "-M", board, "-nographic", "-monitor", "none",
                         "-serial", "none", "-semihosting", "-kernel"],
                        bare_metal=True, memory=memory)
    if "linux" not in triple:
        raise _cannot(triple, "verify runs Linux triples under qemu-user and Cortex-M "
                              "builds under qemu-system-arm")
    qemu = {"x86_64": "qemu-x86_64", "aarch64": "qemu-aarch64", "riscv64": "qemu-riscv64",
            "arm": "qemu-arm"}.get(arch)
    if qemu is None:
        raise _cannot(triple, f"no qemu-user for {arch}")
    cc = f"{arch}-linux-gnu-gcc" if arch != "arm" else "arm-linux-gnueabihf-gcc"
    _require(triple, cc, qemu)
    # a static executable: no sysroot to find the target's C library in
    return Emulator(qemu, cc, ["-static", *libs, "-lm"], [qemu, "-cpu", "max"])


def run_sequence(lib, xs: list[np.ndarray]) -> list[tuple]:
    """Runs len(xs[0]) steps of ``lib`` (a ``harness.LibrarySpec``) from a
    fresh init under its emulator; returns each step's outputs."""
    emu = emulator(lib.manifest)
    steps = len(xs[0])
    with tempfile.TemporaryDirectory(prefix="tfaot-qemu-") as tmp:
        tmp = Path(tmp)
        (tmp / "in.bin").write_bytes(_pack_inputs(lib, xs).tobytes())
        image = _link(lib, emu, steps, tmp)
        # (every step of the input: those before a window fills run too,
        # and the report counts only the steps it compares)
        _progress(f"stepping the library {steps} times under {emu.what} ...")
        start = time.monotonic()
        proc = subprocess.run([*emu.run, str(image)], capture_output=True, text=True,
                              timeout=TIMEOUT_S, stdin=subprocess.DEVNULL, cwd=tmp)
        said = [ln for ln in (proc.stdout + proc.stderr).splitlines()
                if ln.startswith("tfaot-runner: ")]
        if proc.returncode != 0 or said[-1:] != ["tfaot-runner: done"]:
            why = said[-1][len("tfaot-runner: "):] if said else \
                (proc.stderr.strip().splitlines() or [f"exit status {proc.returncode}"])[-1]
            raise TfaotError(f"{lib.dir}: running the library under {emu.what} failed: {why}")
        _progress(f"ran in {time.monotonic() - start:.1f} s")
        raw = np.frombuffer((tmp / "out.bin").read_bytes(), np.uint8)
    return _unpack_outputs(lib, raw, steps)


def _link(lib, emu: Emulator, steps: int, tmp: Path) -> Path:
    """The runner for ``lib`` and this run's files, linked for the target."""
    name = lib.name
    in_t, in_n = _c_io(lib, "input")
    out_t, out_n = _c_io(lib, "output")
    macros = {"TFAOT_MODEL": name, "TFAOT_UPPER": name.upper(),
              "TFAOT_HEADER": f'"{name}.h"', "TFAOT_IN_T": in_t, "TFAOT_IN_N": in_n,
              "TFAOT_OUT_T": out_t, "TFAOT_OUT_N": out_n, "TFAOT_STEPS": steps,
              "TFAOT_IN_PATH": f'"{tmp / "in.bin"}"', "TFAOT_OUT_PATH": f'"{tmp / "out.bin"}"'}
    weights = lib.manifest.get("weights", {})
    if weights.get("mode") == "file":
        path = lib.dir / weights["file"]
        macros.update(TFAOT_WEIGHTS_PATH=f'"{path.resolve()}"',
                      TFAOT_WEIGHTS_BYTES=path.stat().st_size)
    flags = [f"-D{k}={v}" for k, v in macros.items()]
    extra = []
    if emu.bare_metal:
        flags.append("-DTFAOT_BARE_METAL")
        (tmp / "board.ld").write_text(_linker_script(emu.memory))
        extra = ["-T", str(tmp / "board.ld")]
    image = tmp / "runner.elf"
    cmd = [emu.cc, *lib.manifest.get("c_flags", ["-std=c11", "-O2"]), *flags, "-I",
           str(lib.dir), *extra, str(RUNNER), str(lib.dir / f"lib{name}.a"), *emu.link,
           "-o", str(image)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0 and emu.bare_metal:
        _refuse_overflow(lib, emu, proc.stderr)
    if proc.returncode != 0:
        raise TfaotError(f"{lib.dir}: linking the library into a runner with {emu.cc} "
                         f"failed:\n{proc.stderr.strip()[-1500:]}")
    return image


#: GNU ld's words for a section that does not fit its memory region
_OVERFLOW = re.compile(r"region `(\w+)' overflowed by (\d+) bytes")


def _refuse_overflow(lib, emu: Emulator, stderr: str) -> None:
    """A library bigger than the QEMU board's memory (a MobileNet's weights
    past the MPS2's 4 MiB of code memory) is said in one line, with the way
    that does not need the board; the linker's own words were several lines
    of warnings and "region `CODE' overflowed"."""
    over = _OVERFLOW.findall(stderr)
    if not over:
        return
    sizes = {name: length for name, _, length in emu.memory}
    said = ", ".join(f"its {name} region ({sizes.get(name, '?')}iB) overflows by {int(n)} "
                     "bytes" for name, n in dict(over).items())
    raise TfaotError(f"{lib.dir}: the library does not fit in the memory of QEMU's board "
                     f"{emu.what}: {said}; verify it on the target instead (tfaot verify "
                     f"MODEL DIR --save-case FILE here, then tfaot verify --case FILE DIR "
                     f"there)")


def _c_io(lib, kind: str) -> tuple[str, str]:
    """(C type, count) of a step's inputs or outputs, as the header declares them."""
    specs = lib.input_specs if kind == "input" else lib.output_specs
    if len(specs) > 1:
        return f"{lib.name}_{kind}s", "1"
    return f"{lib.name}_{kind}_t", f"{lib.name.upper()}_{kind.upper()}_SIZE"


def _pack_inputs(lib, xs: list[np.ndarray]) -> np.ndarray:
    """(steps, bytes of a step's input): one array, or one NAME_inputs
    struct a step (fields as the C compiler lays them out)."""
    if len(lib.input_specs) == 1:
        x = np.ascontiguousarray(xs[0], dtype=lib.input_specs[0][1])
        return x.reshape(len(x), -1).view(np.uint8)
    struct = lib._inputs_struct
    raw = np.zeros((len(xs[0]), ctypes.sizeof(struct)), np.uint8)
    for i, ((_, dtype, _), x) in enumerate(zip(lib.input_specs, xs)):
        offset = getattr(struct, f"f{i}").offset
        flat = np.ascontiguousarray(x, dtype=dtype).reshape(len(x), -1).view(np.uint8)
        raw[:, offset:offset + flat.shape[1]] = flat
    return raw


def _unpack_outputs(lib, raw: np.ndarray, steps: int) -> list[tuple]:
    """Each step's outputs from the runner's file."""
    if len(lib.output_specs) == 1:
        _, dtype, shape = lib.output_specs[0]
        ys = raw.view(dtype).reshape(steps, *shape)
        return [(y,) for y in ys]
    from .harness import _unpack_outputs as unpack

    struct = lib._outputs_struct
    outs = unpack(raw.reshape(steps, ctypes.sizeof(struct)), lib.output_specs, struct)
    return [tuple(y[m] for y in outs) for m in range(steps)]


def _linker_script(memory: list) -> str:
    """The board's memory map; code, vectors and read-only data in its first
    regions, everything written in the last. QEMU loads the ELF's segments
    itself, so .data needs no copy at reset."""
    regions = "\n".join(f"  {name} : ORIGIN = {origin:#x}, LENGTH = {length}"
                        for name, origin, length in memory)
    rodata = "RODATA" if any(m[0] == "RODATA" for m in memory) else "CODE"
    return f"""ENTRY(reset_handler)
MEMORY
{{
{regions}
}}
SECTIONS
{{
  .vectors : {{ KEEP(*(.vectors)) }} > CODE
  .text : {{ *(.text*) }} > CODE
  .rodata : {{ *(.rodata*) }} > {rodata}
  .ARM.exidx : {{ *(.ARM.exidx*) }} > CODE
  .data : {{ *(.data*) }} > DATA
  .bss (NOLOAD) : {{ __bss_start = .; *(.bss*) *(COMMON) . = ALIGN(4); __bss_end = .; }} > DATA
  __stack_top = ORIGIN(DATA) + LENGTH(DATA);
}}
"""


def _progress(text: str) -> None:
    print(f"tfaot: verify: {text}", file=sys.stderr, flush=True)


def _require(triple: str, *tools: str) -> None:
    missing = [t for t in tools if not shutil.which(t)]
    if missing:
        packages = " ".join(dict.fromkeys(PACKAGES.get(t, f"gcc-{t[:-4]}" if t.endswith("-gcc")
                                                       else t) for t in missing))
        raise _cannot(triple, f"needs {' and '.join(missing)} (apt-get install {packages})")


def _cannot(triple: str, why: str) -> TfaotError:
    return TfaotError(f"this library is built for {triple}, which this machine does not run: "
                      f"{why}; or save a case here (tfaot verify MODEL DIR --save-case "
                      f"FILE) and run `tfaot verify --case FILE DIR` on the target")
