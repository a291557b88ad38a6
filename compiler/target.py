"""What the library is built for: made once from the command line, asked by every stage.

A ``Target`` holds the closed choice of code generator (``kind``), the LLVM
triple and CPU of the kernels, and everything that follows from them: the
iree-compile flags (``iree_flags``), the C compiler and its flags
(``toolchain``), and which runtime-shim backend the library links. Stages ask
the target; none re-derives these facts from strings.

Only ELF targets are supported: the package stage measures and links ELF
objects, and the kernels are a static ELF object.
"""
from __future__ import annotations

import os
import platform
import shutil
from dataclasses import dataclass, replace
from pathlib import Path

from .errors import TfaotError

KINDS = ("cpu",)

#: Models with fewer weight bytes are not packed unless asked (Target.for_weights).
PACK_WEIGHTS_MIN_BYTES = 16 * 1024

#: Architectures (the triple's first field) whose kernels and C we build.
SUPPORTED_ARCHS = ("x86_64", "aarch64", "riscv64", "riscv32", "arm", "thumb")

#: arm-none-eabi-gcc flags per CPU, with the FPU the kernels' hard-float ABI uses.
ARM_CPU_FLAGS = {
    "cortex-m4": ("-mcpu=cortex-m4", "-mfpu=fpv4-sp-d16"),
    "cortex-m7": ("-mcpu=cortex-m7", "-mfpu=fpv5-d16"),
    "cortex-m33": ("-mcpu=cortex-m33", "-mfpu=fpv5-sp-d16"),
    "cortex-m55": ("-mcpu=cortex-m55",),
}

SUPPORTED_TRIPLES_TEXT = (
    "x86_64-linux-gnu, aarch64-linux-gnu, riscv64-linux-gnu, "
    "thumbv7em-none-eabi[hf] / thumbv8m.main-none-eabi[hf] (Cortex-M, with --cpu), "
    "or another ELF triple of those architectures")


def host_triple() -> str:
    """The LLVM target triple of the machine running tfaot."""
    machine = platform.machine().lower()
    arch = {"amd64": "x86_64", "arm64": "aarch64"}.get(machine, machine)
    system = platform.system().lower()
    if system == "linux":
        return f"{arch}-unknown-linux-gnu"
    if system == "darwin":
        return f"{arch}-apple-darwin"
    return f"{arch}-unknown-{system}"


def is_host_triple(triple: str) -> bool:
    """True when code for ``triple`` runs on this machine (arch and OS match)."""
    want = host_triple().split("-")
    got = triple.split("-")
    return got[0] == want[0] and len(want) > 2 and want[2] in triple


def default_cpu(triple: str) -> str:
    """``host`` for the host's triple (fastest code here), else ``generic``."""
    return "host" if is_host_triple(triple) else "generic"


@dataclass(frozen=True)
class Toolchain:
    """The C compiler and binutils that build the library for a target."""

    cc: str
    ar: str
    objcopy: str
    nm: str
    pic: bool = True  # -fPIC: not for bare-metal targets


@dataclass(frozen=True)
class Target:
    """One build target; make it with ``make_target``, which validates it."""

    kind: str    # "cpu"
    triple: str  # LLVM triple of kernels and C code
    cpu: str     # LLVM CPU name, "host" or "generic"
    # True/False overrides the target's default weight packing (see pack_weights).
    weight_packing: bool | None = None

    @property
    def arch(self) -> str:
        return self.triple.split("-")[0]

    @property
    def is_host(self) -> bool:
        return is_host_triple(self.triple)

    @property
    def bare_metal_arm(self) -> bool:
        return self.arch.startswith(("thumb", "arm")) and "-none-eabi" in self.triple

    @property
    def hard_float(self) -> bool:
        return self.triple.endswith("eabihf")

    @property
    def pointer_bytes(self) -> int:
        """sizeof(void *) on the target (also the size of size_t and long)."""
        return 4 if self.arch.startswith(("thumb", "arm", "riscv32", "i386", "i686")) else 8

    @property
    def shim_backend(self) -> str:
        """Which runtime_shim backend the library links (one per kind)."""
        return self.kind

    @property
    def link_libs(self) -> tuple[str, ...]:
        """Libraries a program linking the static library adds (-l...)."""
        return ("m",)

    @property
    def pack_weights(self) -> bool:
        """Whether ``__init`` packs the weights into a RAM copy for faster steps.

        With data tiling and const-expr hoisting, IREE lays each matmul's
        constant weights out as ``[N/n][K][n]`` tiles (mmt4d) once, in
        ``__init``, so the step's kernels read them without transposing
        (iree-notes 7; bench/bench_litert.py). It costs a RAM copy of the
        weights (the read-only originals stay), so it is on for hosted
        (Linux) triples and off for bare metal, where the weights must stay
        in flash. ``weight_packing`` overrides it; ``for_weights`` decides
        it for one model.
        """
        if self.weight_packing is not None:
            return self.weight_packing
        return "-linux" in self.triple

    def for_weights(self, weight_bytes: int) -> "Target":
        """This target with packing decided for a model of ``weight_bytes``.

        Packing adds dispatches (the packed input and state vectors), which
        costs more than it saves on tiny models: SimpleRNN(16) ran 2x slower
        packed, LSTM(32) (37 KB of weights) 1.5x faster (bench_litert.py).
        """
        if self.weight_packing is not None:
            return self
        return replace(self, weight_packing=self.pack_weights
                       and weight_bytes >= PACK_WEIGHTS_MIN_BYTES)

    def iree_flags(self, kernel_object: Path) -> list[str]:
        """iree-compile flags of the kernels and host program (both phases).

        The reasons for each flag are in shared/iree-notes.md section 0.
        """
        flags = [
            "--iree-input-type=stablehlo",
            "--iree-execution-model=inline-dynamic",
            "--iree-hal-target-backends=llvm-cpu",
            f"--iree-llvmcpu-target-triple={self.triple}",
            f"--iree-llvmcpu-target-cpu={self.cpu}",
        ]
        if self.hard_float:
            # Float arguments in FPU registers, as arm-none-eabi-gcc -mfloat-abi=hard
            # expects (iree-notes 5); LLVM's default for the triple is soft.
            flags.append("--iree-llvmcpu-target-float-abi=hard")
        return flags + [
            # Never pass --iree-llvmcpu-target-cpu-features=host: combined with
            # cpu=generic it crashes iree-compile (iree-notes 1.3).
            "--iree-llvmcpu-link-embedded=false",
            "--iree-llvmcpu-link-static",
            f"--iree-llvmcpu-static-library-output-path={kernel_object}",
            # Workaround for the inline-mode dropped-constant bug (iree-notes 1.4).
            "--iree-flow-inline-constants-max-byte-length=1000000000",
            # Packing (pack_weights): mmt4d layouts, packed once in __init by hoisted
            # const-exprs. Hoisting is otherwise off: alone, it hits the bug above.
            *(["--iree-opt-data-tiling", "--iree-opt-const-expr-hoisting=true"]
              if self.pack_weights else ["--iree-opt-const-expr-hoisting=false"]),
            # Exact bytes for composite rodata (non-splat initial values of globals).
            "--mlir-print-elementsattrs-with-hex-if-larger=0",
            "--output-format=vm-asm",
        ]

    def c_flags(self) -> tuple[str, ...]:
        """Target flags of the C compiler; they must agree with ``iree_flags``."""
        if not self.bare_metal_arm:
            return ()
        if self.cpu in ARM_CPU_FLAGS:
            cpu_flags = ARM_CPU_FLAGS[self.cpu] if self.hard_float else ARM_CPU_FLAGS[self.cpu][:1]
        elif self.cpu in ("generic", ""):
            cpu_flags = ()
        else:
            cpu_flags = (f"-mcpu={self.cpu}",)
        return ("-mthumb", *cpu_flags, f"-mfloat-abi={'hard' if self.hard_float else 'soft'}")

    def toolchain(self) -> Toolchain | None:
        """The installed C toolchain for this target, or None (then only src/ is written)."""
        if self.is_host:
            return Toolchain(cc=os.environ.get("CC", "cc"), ar="ar", objcopy="objcopy", nm="nm")
        parts = self.triple.split("-")
        if len(parts) >= 3 and "linux" in self.triple:
            gnu = f"{parts[0]}-linux-gnu"
            if shutil.which(f"{gnu}-gcc"):
                return Toolchain(cc=f"{gnu}-gcc", ar=f"{gnu}-ar", objcopy=f"{gnu}-objcopy",
                                 nm=f"{gnu}-nm")
        if self.bare_metal_arm and shutil.which("arm-none-eabi-gcc"):
            return Toolchain(cc="arm-none-eabi-gcc", ar="arm-none-eabi-ar",
                             objcopy="arm-none-eabi-objcopy", nm="arm-none-eabi-nm", pic=False)
        return None

    def describe(self) -> str:
        return f"{self.kind} {self.triple} ({self.cpu})"


def make_target(kind: str = "cpu", triple: str | None = None, cpu: str | None = None,
                weight_packing: bool | None = None) -> Target:
    """Validates the command line's choices before any slow stage runs."""
    if kind not in KINDS:
        raise TfaotError(f"--target={kind} is not supported; supported: {', '.join(KINDS)}")
    triple = triple or host_triple()
    check_triple(triple)
    cpu = cpu or default_cpu(triple)
    target = Target(kind, triple, cpu, weight_packing)
    if cpu == "host" and not target.is_host:
        raise TfaotError(
            f"--cpu=host is only valid when building for this machine ({host_triple()}); "
            f"for {triple} name a CPU (e.g. cortex-m4) or use generic")
    if target.bare_metal_arm and target.hard_float and not target.c_flags()[1:-1]:
        raise TfaotError(f"--triple {triple} is hard-float; name the CPU with --cpu "
                         f"(one of {', '.join(ARM_CPU_FLAGS)}) so the C code uses its FPU")
    return target


def check_triple(triple: str) -> None:
    """Refuses triples whose objects are not ELF or whose architecture we do not build."""
    parts = triple.split("-")
    arch = parts[0]
    problem = None
    if len(parts) < 2 or not all(parts):
        problem = "not a target triple (ARCH-VENDOR-OS[-ENV])"
    elif not arch.startswith(SUPPORTED_ARCHS):
        problem = f"architecture '{arch}' is not supported"
    elif any(p.startswith(("windows", "win32", "msvc", "darwin", "macos", "ios", "mingw",
                           "cygwin")) for p in parts[1:]):
        problem = "its object format is not ELF (COFF/Mach-O are not supported)"
    elif not ("linux" in triple or "-none" in triple or triple.endswith("-elf")):
        problem = "unknown operating system (use a *-linux-gnu or bare-metal *-none-* triple)"
    if problem:
        raise TfaotError(f"--triple {triple}: {problem}; supported: {SUPPORTED_TRIPLES_TEXT}")
