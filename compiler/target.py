"""What the library is built for: made once from the command line, asked by every stage.

A ``Target`` holds the closed choice of code generator (``kind``), the LLVM
triple and CPU of the kernels, and everything that follows from them: the
iree-compile flags (``iree_flags``), the C compiler and its flags
(``toolchain``), and which runtime-shim backend the library links. Stages ask
the target; none re-derives these facts from strings. target_options.py makes
one from the command line's options.

Only ELF targets are supported: the package stage measures and links ELF
objects, and the kernels are a static ELF object.
"""
from __future__ import annotations

import functools
import os
import platform
import re
import shutil
import subprocess
from dataclasses import dataclass, replace
from pathlib import Path

from .errors import TfaotError

KINDS = ("cpu", "vulkan", "cuda")
#: CUDA builds of this many streams or more split their matmuls 4 ways along
#: K. A matmul of N stream rows gets a SIMT tiling with little parallelism;
#: split, the partial products run on 4x the blocks. Measured on an H100
#: (bench/gpu_check.py, us a step, split vs not): GRU(256) N=5 56 vs 112,
#: N=8 52 vs 169, N=32 67 vs 154; LSTM(512) N=8 77 vs 227; but N=2..4 slower
#: (GRU(256) N=4 124 vs 74), where IREE's unsplit kernel is the better one.
SPLIT_K_FROM_STREAMS = 5

#: Kinds whose kernels run on a GPU (their weights are mutable globals, see
#: compiler/lower/weight_globals.py, and their dispatches are asynchronous).
GPU_KINDS = ("vulkan", "cuda")

#: --cuda-arch values iree-compile 3.13 makes PTX for without a CUDA toolkit
#: (gpu-notes 5); the first is the default. The driver JITs PTX for newer GPUs.
CUDA_ARCHS = ("sm_80", "sm_86", "sm_89", "sm_120")
#: Archs 3.13 refuses ("missing GPU target"); named in the error so users pick sm_80.
CUDA_ARCHS_REFUSED = ("sm_90", "sm_90a", "sm_100", "sm_100a")

#: Models with fewer weight bytes are not packed unless asked (Target.for_weights).
PACK_WEIGHTS_MIN_BYTES = 16 * 1024

#: --weights-dtype values: how tfaot's matvec kernel stores its weights (math in f32).
WEIGHTS_DTYPES = ("f32", "f16", "bf16", "int8")

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


#: The /proc/cpuinfo flags of the int8 dot products the int8 convolution
#: kernel has blocks for (runtime_shim/tfrt_qconv.h): AVX-512 VNNI's
#: vpdpbusd, the aarch64 dot-product extension's sdot.
INT8_DOT_FLAGS = {"x86_64": {"avx512_vnni", "avx512bw"}, "aarch64": {"asimddp"}}
#: the same features as the C compiler's predefined macros for a named CPU
#: (the ones the int8 kernels test: TFRT_I8_AVX512, __ARM_FEATURE_DOTPROD)
INT8_DOT_MACROS = {"x86_64": {"__AVX512VNNI__", "__AVX512BW__"},
                   "aarch64": {"__ARM_FEATURE_DOTPROD"}}


def int8_dot_products(arch: str, cpu: str, cc: str | None = None) -> bool:
    """Whether a CPU target multiplies int8 faster than f32: 32-bit Arm (the
    Cortex-M DSP extension's dual 16-bit MACs, or no FPU at all), or x86-64
    and aarch64 with dot-product instructions: this machine's for --cpu
    host, a named CPU's as the C compiler ``cc`` knows it (-march/-mcpu).
    Without them the int8 convolution's products cost what f32 FMAs do
    (x86-64 AVX2: a 64-channel pointwise layer 1.2x slower than f32, a 10x4
    filter over one channel 1.9x), so int8 builds keep f32 convolutions."""
    arch = "aarch64" if arch == "arm64" else arch
    if arch.startswith(("thumb", "arm")):
        return True
    flag = cpu_flag(arch, cpu)
    if arch not in INT8_DOT_FLAGS or flag is None:
        return False
    if cpu != "host":
        return cc is not None and INT8_DOT_MACROS[arch] <= compiler_macros(cc, flag)
    if arch != platform.machine().replace("arm64", "aarch64"):
        return False
    return INT8_DOT_FLAGS[arch] <= host_cpu_flags()


def cpu_flag(arch: str, cpu: str) -> str | None:
    """The C compiler's flag for a CPU on x86-64 and aarch64: this machine's
    (cpu=host, e.g. the dot product the int8 kernel uses), or a named CPU's
    (--cpu x86-64-v3, cortex-a76: its vector units, as IREE's kernels get
    them); None for the baseline (cpu=generic) and other architectures."""
    if cpu in ("generic", ""):
        return None
    name = "native" if cpu == "host" else cpu
    return {"x86_64": f"-march={name}", "aarch64": f"-mcpu={name}"}.get(arch)


@functools.lru_cache(maxsize=None)
def compiler_macro_values(cc: str, *flags: str) -> dict[str, str]:
    """The macros C compiler ``cc`` predefines with ``flags``, with their
    values (none if it refuses a flag or is missing: LLVM, and so IREE,
    knows CPUs an older gcc does not)."""
    try:
        proc = subprocess.run([cc, *flags, "-dM", "-E", "-x", "c", os.devnull],
                              capture_output=True, text=True)
    except OSError:
        return {}
    if proc.returncode != 0:
        return {}
    return {fields[1]: fields[2] if len(fields) > 2 else ""
            for fields in (line.split(maxsplit=2) for line in proc.stdout.splitlines())
            if len(fields) > 1 and fields[0] == "#define"}


def compiler_macros(cc: str, *flags: str) -> frozenset[str]:
    """The names of the macros ``cc`` predefines with ``flags``."""
    return frozenset(compiler_macro_values(cc, *flags))


def host_cpu_flags() -> set[str]:
    """This machine's CPU feature flags (Linux /proc/cpuinfo), or none."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            return set(value.split())
    return set()


#: Predefined macros that say an instruction-set extension is on (x86-64's
#: __AVX512F__, __FMA__, ...; aarch64's __ARM_FEATURE_DOTPROD, ...); not the
#: tuning and CPU-name macros (__znver4__, __tune_icelake__).
_ISA_MACRO = re.compile(r"__(AVX|SSE|SSSE|FMA|F16C|BMI|LZCNT|POPCNT|MOVBE|AES|PCLMUL|SHA|"
                        r"VAES|VPCLMUL|GFNI|AMX|ARM_FEATURE_|ARM_NEON)\w*__")


def missing_instruction_sets(triple: str, cpu: str) -> list[str]:
    """The instruction-set extensions code built for ``cpu`` on this
    machine's triple may use that this machine lacks (from the C compiler's
    macros for that CPU and for this one): such code stops at the first one
    with SIGILL. Empty for the host's own CPU, the baseline, another triple,
    or a CPU the compiler does not know."""
    arch = triple.split("-")[0]
    flag = cpu_flag(arch, cpu)
    if cpu == "host" or flag is None or not is_host_triple(triple):
        return []
    cc = os.environ.get("CC", "cc")
    want, have = compiler_macros(cc, flag), compiler_macros(cc, cpu_flag(arch, "host"))
    if not want or not have:
        return []
    return sorted(m.strip("_") for m in want - have if _ISA_MACRO.fullmatch(m))


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
    """One build target; make it with ``target_options.make_target``, which validates it."""

    kind: str    # "cpu", "vulkan" or "cuda" (KINDS)
    triple: str  # LLVM triple of kernels (CPU) and host C code
    cpu: str     # LLVM CPU name, "host" or "generic"; for cuda the NVPTX arch (sm_80)
    # True/False overrides the target's default weight packing (see pack_weights).
    weight_packing: bool | None = None
    # --weights=file: the weights go to a NAME.weights sidecar the caller passes
    # to NAME_init_with_weights, instead of the library's read-only data.
    external_weights: bool = False
    # --matvec: "tfaot" (own micro-kernel, compiler/lower/microkernel.py) or "iree";
    # None: the target's default (see matvec_kernel).
    matvec: str | None = None
    # --weights-dtype: "f32", "f16"/"bf16" for the micro-kernels' weights
    # stored at half width, or "int8" for int8 matvecs (compiler/lower/microkernel.py;
    # needs matvec_kernel "tfaot").
    weights_dtype: str = "f32"
    # --activations: "exact" or "table" (tanh and logistic looked up,
    # lower/activations.py); None: the target's default (activation_tables).
    activations: str | None = None
    # --intermediates: "f32", or "f16": the convolution kernels' images
    # stored as halves (microkernel.HALF_KINDS; needs matvec_kernel "tfaot");
    # None: decided once the step is known (default_intermediates).
    intermediates: str | None = None
    # The micro-kernel kinds a "tfaot" build uses (microkernel.KINDS); None:
    # all. Bare-metal Arm with an FPU takes the matvec kernel only, for
    # matrices of MCU_KERNEL_MIN_WEIGHTS or more (see target_options.make_target).
    kernel_kinds: tuple[str, ...] | None = None
    kernel_min_weights: int = 0
    # int8 builds: matrices and convolutions of fewer weights keep f32;
    # None: microkernel.INT8_MIN_WEIGHTS (LiteRT's rule). Bare-metal Arm:
    # MCU_KERNEL_MIN_WEIGHTS (see target_options.make_target).
    int8_min_weights: int | None = None
    # int8 builds: whether convolutions take int8 weights (the int8
    # convolution kernel); None: where the target multiplies int8 faster than
    # f32 (int8_dot_products). Tests set it to run that kernel anywhere.
    int8_convolutions: bool | None = None
    # --streams: independent streams per context; their matvecs are matmuls
    # of that many rows (SPLIT_K_FROM_STREAMS)
    streams: int = 1
    # int8 builds, as lowered (lower/passes.py lower_for_target): the kernel
    # calls of a step that take int8 weights (microkernel.int8_calls).
    int8_layers: int = 0

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
    def expand_activations(self) -> bool:
        """tanh and logistic as tfaot writes them out (lower/activations.py):
        cheaper than IREE's where there are no vector units to fill."""
        return self.bare_metal_arm

    @property
    def activation_tables(self) -> bool:
        """tanh and logistic looked up in a table (lower/activations.py):
        --activations=table, or by default those of int8 builds for
        bare-metal Arm, within 1.1e-4 where the int8 weights move the
        outputs by 1e-3 and more, in half the cycles (lower_for_target
        makes them exact again when no weight took int8)."""
        if self.activations is not None:
            return self.activations == "table"
        return self.expand_activations and self.weights_dtype == "int8"

    @property
    def join_products(self) -> bool:
        """``W . x + U . h`` as one product of the joined vector
        (lower/matvec_sums.py): not on GPUs, where joining the vectors costs
        two driver copies a step (H100: LSTM(512) 42.8 -> 53.4 us a step)."""
        return not self.is_gpu

    @property
    def hard_float(self) -> bool:
        return self.triple.endswith("eabihf")

    @property
    def pointer_bytes(self) -> int:
        """sizeof(void *) on the target (also the size of size_t and long)."""
        return 4 if self.arch.startswith(("thumb", "arm", "riscv32", "i386", "i686")) else 8

    @property
    def is_gpu(self) -> bool:
        return self.kind in GPU_KINDS

    @property
    def shim_backend(self) -> str:
        """Which runtime_shim backend the library links (one per kind)."""
        return self.kind

    @property
    def weights_as_globals(self) -> bool:
        """Weights as mutable globals filled by __init (weight_globals.py): what
        GPU kernels need, and what lets the weights live outside the code."""
        return self.is_gpu or self.external_weights

    @property
    def has_kernel_object(self) -> bool:
        """CPU kernels are a linked ELF object; GPU kernels are data in NAME.c."""
        return not self.is_gpu

    @property
    def link_libs(self) -> tuple[str, ...]:
        """Libraries a program linking the static library adds (-l...).

        The GPU backends open their driver (libvulkan.so.1, libcuda.so.1)
        themselves (dlopen), so they need libdl, not the driver's library.
        """
        return ("m", "dl") if self.is_gpu else ("m",)

    @property
    def cpu_flag(self) -> str | None:
        """The C compiler's flag for this target's CPU (module cpu_flag)."""
        return cpu_flag(self.arch, self.cpu)

    @property
    def conv_int8(self) -> bool:
        """Whether an int8 build gives its convolutions int8 weights."""
        if self.int8_convolutions is not None:
            return self.int8_convolutions
        toolchain = self.toolchain() if self.cpu not in ("host", "generic", "") else None
        return int8_dot_products(self.arch, self.cpu, toolchain.cc if toolchain else None)

    @property
    def int8_layout(self) -> str:
        """How the int8 matvec's weights are packed (weight_packing.pack_int8):
        "paired" on 32-bit Arm with the DSP extension, an FPU to keep words
        in (hard or softfp ABI) and no Helium floating point
        (Cortex-M4/M7/M33: tfrt_i8_pairs); "rows" with Helium's floating
        point (Cortex-M55/M85: VMLADAV over a row's 16 weights of a block);
        "lanes" elsewhere. The C compiler takes the kernel's path from the
        same macros (tfrt_matvec.c TFRT_I8_PAIRED, TFRT_I8_ROWS), and checks
        that both agree."""
        if not self.arch.startswith(("arm", "thumb")):
            return "lanes"
        toolchain = self.toolchain()
        if toolchain is None:
            return "lanes"
        macros = compiler_macro_values(toolchain.cc, *self.c_flags())
        mve = macros.get("__ARM_FEATURE_MVE", "0")
        if mve.isdigit() and int(mve) & 2:
            return "rows"
        if "__ARM_FEATURE_DSP" in macros and "__ARM_FP" in macros:
            return "paired"
        return "lanes"

    @property
    def half_dw_blocks(self) -> bool:
        """Whether the depthwise kernel's f16 block (runtime_shim/tfrt_dwconv.h
        tfrt_dw3h_row: a scalar FPU with half conversions, no Helium) reads
        f16 images itself on this CPU (--intermediates=f16), so that its
        layers need no f32 strip."""
        if not (self.bare_metal_arm and self.hard_float) or self.toolchain() is None:
            return False
        macros = compiler_macro_values(self.toolchain().cc, f"-mcpu={self.cpu}",
                                       "-mfloat-abi=hard")
        # (tfrt_half_convert.h TFRT_ARM_HALF_CVT: every M-profile FPU converts halves)
        fp = int(macros.get("__ARM_FP", "0"), 0)
        converts = bool(fp & 2) or (fp and macros.get("__ARM_ARCH_PROFILE") in ("'M'", "77"))
        return converts and "__ARM_FEATURE_MVE" not in macros and "__ARM_NEON" not in macros

    @property
    def int8_paired_rows(self) -> bool:
        """Whether the int8 matvec pairs its lanes (``int8_layout``)."""
        return self.int8_layout == "paired"

    @property
    def matvec_kernel(self) -> str:
        """Who computes constant-weight matvecs: "tfaot" or "iree".

        tfaot's micro-kernel (compiler/lower/microkernel.py) keeps its weights packed
        in read-only data and is the default on hosted (Linux) CPU targets,
        where it measured faster (bench/bench_litert.py); Cortex-M (thumb
        triples) takes it for matvecs only (make_target, target_options.mcu_matvec_kernel),
        other bare-metal targets keep IREE's kernels unless asked. An
        explicit --pack-weights asks for IREE's kernels on weights packed at
        init. The kernel is C, compiled with the target's toolchain: without
        one, IREE's kernels.
        """
        if self.is_gpu:
            return "iree"
        if self.matvec:
            return self.matvec
        if self.weight_packing or "-linux" not in self.triple:
            return "iree"
        return "tfaot" if self.toolchain() is not None else "iree"

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
        if self.weights_as_globals:
            return False  # globals' weights would be re-packed every step
        if self.weight_packing is not None:
            return self.weight_packing
        return "-linux" in self.triple

    def for_weights(self, weight_bytes: int) -> "Target":
        """This target with packing decided for a model of ``weight_bytes``.

        Packing adds dispatches (the packed input and state vectors), which
        costs more than it saves on tiny models: SimpleRNN(16) ran 2x slower
        packed, LSTM(32) (37 KB of weights) 1.5x faster (bench_litert.py).
        """
        if self.weight_packing is not None or self.weights_as_globals:
            return self
        # the matvec choice is the user's, not the consequence of this default
        return replace(self, matvec=self.matvec_kernel, weight_packing=self.pack_weights
                       and weight_bytes >= PACK_WEIGHTS_MIN_BYTES)

    def iree_flags(self, kernel_object: Path) -> list[str]:
        """iree-compile flags of the kernels and host program (both phases).

        The reasons for each flag are in docs/notes/iree-notes.md section 0
        (CPU) and docs/notes/gpu-notes.md (GPU).
        """
        if self.is_gpu:
            return self._gpu_flags()
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
        elif self.bare_metal_arm:
            # A soft-float triple: the C is built -mfloat-abi=soft, for a core
            # without an FPU or with it off. For a CPU that has one, IREE's
            # default passes floats in its registers (the objects do not link)
            # and uses its instructions (a usage fault where it is off).
            flags += ["--iree-llvmcpu-target-float-abi=soft",
                      "--iree-llvmcpu-target-cpu-features=+soft-float"]
        if self.bare_metal_arm:
            # One workgroup a dispatch: the shim runs a dispatch's workgroups
            # one after the other on the calling thread, and a microcontroller
            # pays each call (SimpleRNN(16)'s step on an M4: 5.9k -> 5.4k
            # estimated cycles, its matvecs were 4 workgroups).
            flags.append("--iree-llvmcpu-number-of-threads=1")
        return flags + [
            # Never pass --iree-llvmcpu-target-cpu-features=host: combined with
            # cpu=generic it crashes iree-compile (iree-notes 1.3).
            # Loops whose trip count is not a multiple of the vector width peel
            # their last iterations; masking them instead made every iteration
            # of an elementwise dispatch a masked load and store (vmaskmovps,
            # microcoded on AMD): a DS-CNN's whole window 218 -> 183 us.
            "--iree-llvmcpu-vector-pproc-strategy=peel",
            "--iree-llvmcpu-link-embedded=false",
            "--iree-llvmcpu-link-static",
            f"--iree-llvmcpu-static-library-output-path={kernel_object}",
            # Workaround for the inline-mode dropped-constant bug (iree-notes 1.4).
            # Weights made globals (--weights=file) avoid it another way, but
            # not what the lowering adds after them: an int8 build's activation
            # tables (2 KB) were dropped on a Cortex-M4.
            "--iree-flow-inline-constants-max-byte-length=1000000000",
            # Packing (pack_weights): mmt4d layouts, packed once in __init by hoisted
            # const-exprs. Hoisting is otherwise off: alone, it hits the bug above.
            *(["--iree-opt-data-tiling", "--iree-opt-const-expr-hoisting=true"]
              if self.pack_weights else ["--iree-opt-const-expr-hoisting=false"]),
            # Exact bytes for composite rodata (non-splat initial values of globals).
            "--mlir-print-elementsattrs-with-hex-if-larger=0",
            "--output-format=vm-asm",
        ]

    def _gpu_flags(self) -> list[str]:
        # Vulkan: the default (portable) SPIR-V target; a named GPU's target
        # assumes its subgroup size and is silently wrong on other devices
        # (gpu-notes 4). CUDA: PTX from iree-compile's own LLVM (no CUDA
        # toolkit); the driver assembles it at load, also for newer GPUs.
        # Weights are mutable globals (weight_globals.py), so constants stay
        # out of the kernels: the default inline limit.
        backend = (["--iree-hal-target-backends=vulkan-spirv"] if self.kind == "vulkan" else
                   ["--iree-hal-target-backends=cuda", f"--iree-cuda-target={self.cpu}"])
        if self.kind == "cuda" and self.streams >= SPLIT_K_FROM_STREAMS:
            backend.append("--iree-dispatch-creation-split-matmul-reduction=4")
        return [
            "--iree-input-type=stablehlo",
            "--iree-execution-model=inline-dynamic",
            *backend,
            "--iree-opt-const-expr-hoisting=false",
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
        if self.kind == "cuda":
            return f"cuda (PTX for {self.cpu}), host code for {self.triple}"
        if self.is_gpu:
            return f"{self.kind} (SPIR-V), host code for {self.triple}"
        return f"{self.kind} {self.triple} ({self.cpu})"


def cuda_arch(arch: str | None) -> str:
    """The checked --cuda-arch (default sm_80): one iree-compile 3.13 can target."""
    if not arch:
        return CUDA_ARCHS[0]
    if arch in CUDA_ARCHS:
        return arch
    if arch in CUDA_ARCHS_REFUSED:
        raise TfaotError(f"--cuda-arch={arch} is rejected by iree-compile 3.13 (missing GPU "
                         f"target); use sm_80: the driver compiles its PTX for {arch} GPUs "
                         "at load")
    raise TfaotError(f"--cuda-arch={arch} is not supported; supported: {', '.join(CUDA_ARCHS)} "
                     "(sm_80 PTX also runs on newer GPUs)")


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
