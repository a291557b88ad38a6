"""The command line's target options made into a Target (compiler/target.py)
by make_target, which checks them before any slow stage runs, with the
choices that depend on what the target is: which of tfaot's kernels a
bare-metal Arm build takes by default, how the images between convolutions
are stored (--intermediates), and the checks of options that need tfaot's
kernels."""
from __future__ import annotations

import difflib
from dataclasses import replace

from .errors import TfaotError
from .target import (ARM_CPU_FLAGS, GPU_KINDS, KINDS, WEIGHTS_DTYPES, Target, check_triple,
                     compiler_macros, cuda_arch, default_cpu, host_triple)

#: --intermediates: how the convolution kernels store the images between them
INTERMEDIATES = ("f32", "f16")


def default_intermediates(target: Target, stateless: bool) -> str:
    """--intermediates' default: f16 for int8 builds on a Cortex-M with a
    scalar FPU (M4, M7, M33: Target.half_dw_blocks) whose step is one whole
    inference (a window, an image), where the images are the RAM and int8
    weights move the outputs more than f16 images do (a DS-CNN on a
    Cortex-M4: context 40.6 -> 22.6 KB, error vs TensorFlow 1.2e-2 ->
    1.3e-2, cycles +1%); f32 elsewhere: for streamed models, whose f32 state
    the conversions would surround (the same DS-CNN streamed: 39.6 -> 41.1
    KB, +12% cycles), and on Helium (Cortex-M55), whose f32 depthwise path
    is vectorized and the one on halves is not: there the same whole window
    takes 40.6 -> 26.6 KB for +27% instructions (1.67M -> 2.12M), which
    --intermediates=f16 asks for."""
    mcu_int8 = (target.half_dw_blocks and target.weights_dtype == "int8"
                and target.matvec_kernel == "tfaot")
    return "f16" if mcu_int8 and stateless else "f32"


def check_intermediates(target: Target) -> None:
    """f16 images exist only between tfaot's convolution kernels."""
    if target.intermediates in (None, "f32") or target.matvec_kernel == "tfaot":
        return
    why = _iree_kernels(target)
    raise TfaotError(f"--intermediates={target.intermediates} applies to tfaot's convolution "
                     f"kernels, and {why}; build with --matvec=tfaot on a CPU target")


#: Bare metal: smaller matrices stay IREE's (a 2 x 16 one: 179 estimated M4
#: cycles, where the kernel's 8-lane group would take ~450); from 256
#: weights the kernel wins (SimpleRNN(16)'s 16 x 24 matrix: its step 4.3k ->
#: 4.0k). Depthwise filters, a few weights per channel, go to their kernel
#: whatever their size. int8 builds on the DSP extension (Cortex-M4, M7,
#: M33: Target.int8_paired_rows) quantize from there too, not from LiteRT's
#: 1024: the int8 kernel is the faster one there as well (an LSTM(64)'s
#: 12 x 64 head: 2.8k estimated M4 cycles against IREE's f32 3.5k) and flash
#: is what a microcontroller has least of. Not with Helium (Cortex-M55),
#: where IREE's f32 code is vectorized: there a SimpleRNN(16)'s 16 x 24
#: matrix in int8 took 1.8k instructions a step against f32's 1.0k.
MCU_KERNEL_MIN_WEIGHTS = 256
#: The micro-kernels bare-metal Arm takes by default (bench/bench_mcu.py,
#: estimated M4 cycles): the matvec's Cortex-M path and the depthwise kernel
#: (DS-CNN's four streamed 3x3 layers: 86k against IREE's 178k); the f32
#: convolution's Cortex-M block on a scalar FPU (mcu_kernel_kinds: DS-CNN's
#: streamed step 518k -> 384k, its convolutions 357k -> 247k); int8
#: builds also the int8 convolution (its DSP path: DS-CNN's streamed step
#: 696k -> 438k with both, flash 112 -> 61 KB) and, with --streams, the
#: int8 matmul (their only int8 path: without it they stayed f32).
MCU_KERNEL_KINDS = ("matvec", "conv", "dwconv")
MCU_INT8_KERNEL_KINDS = ("matvec", "matmul", "conv", "dwconv", "qconv")


def mcu_matvec_kernel(target: Target) -> bool:
    """Whether a bare-metal Arm build takes tfaot's matvec kernel by default:
    with an FPU (f32: its Cortex-M path keeps 8 sums in registers, 3.9
    estimated M4 cycles per multiply-add against 4.9 for IREE's kernel,
    LSTM(64) step 0.90x, GRU(64) 0.88x; bench/bench_mcu.py) or for int8
    (the DSP path), when the Arm toolchain is installed. Which kernels it
    takes: mcu_kernel_kinds."""
    # Cortex-M triples are thumb*; an Arm-state core may have NEON, where the
    # desktop tiles apply and were not measured against IREE's
    if not (target.bare_metal_arm and target.arch.startswith("thumb")):
        return False
    if target.weight_packing:
        return False
    if not (target.hard_float or target.weights_dtype == "int8"):
        return False
    return target.toolchain() is not None


def mcu_kernel_kinds(target: Target) -> tuple[str, ...]:
    """The kernels a bare-metal build takes by default (MCU_KERNEL_KINDS),
    the f32 convolution only where its Cortex-M block keeps 2 positions x 8
    lanes of sums in a scalar FPU's registers (a hard-float CPU the C
    compiler knows to have an FPU). Not with Helium (Cortex-M55, M85), whose
    C blocks keep theirs in memory where IREE's convolutions are vectorised
    (DS-CNN's streamed step on an M55: 496k instructions against IREE's
    195k)."""
    kinds = MCU_INT8_KERNEL_KINDS if target.weights_dtype == "int8" else MCU_KERNEL_KINDS
    macros = (compiler_macros(target.toolchain().cc, f"-mcpu={target.cpu}", "-mfloat-abi=hard")
              if target.hard_float else frozenset())
    if "__ARM_FP" in macros and "__ARM_FEATURE_MVE" not in macros:
        return kinds
    return tuple(kind for kind in kinds if kind != "conv")


def check_weights_dtype(target: Target) -> None:
    """Half-width weights exist only in tfaot's micro-kernel (microkernel.py)."""
    dtype = target.weights_dtype
    if dtype == "f32":
        return
    if target.matvec_kernel != "tfaot":
        raise TfaotError(f"--weights-dtype={dtype} needs tfaot's matvec kernel "
                         f"(--matvec=tfaot, CPU targets); {_iree_kernels(target)}")


def _iree_kernels(target: Target) -> str:
    """Why a build that asked for one of tfaot's kernels' options has IREE's:
    the one reason that applies, and what changes it."""
    if target.is_gpu:
        return f"--target={target.kind} uses IREE's kernels"
    if target.matvec == "iree":
        return "--matvec=iree asks for IREE's kernels"
    if target.weight_packing:
        return "--pack-weights packs IREE's kernels' weights; leave it out"
    if target.toolchain() is None:
        return (f"no C toolchain for {target.triple} is installed to compile tfaot's kernel "
                "(for a Cortex-M: arm-none-eabi-gcc)")
    return f"{target.triple} builds use IREE's kernels by default; add --matvec=tfaot"


def make_target(kind: str = "cpu", triple: str | None = None, cpu: str | None = None,
                weight_packing: bool | None = None, external_weights: bool = False,
                matvec: str | None = None, weights_dtype: str = "f32",
                activations: str | None = None, intermediates: str | None = None) -> Target:
    """Validates the command line's choices before any slow stage runs."""
    if external_weights and weight_packing:
        raise TfaotError("--pack-weights cannot be combined with --weights=file: weights "
                         "loaded at run time are not packed")
    if matvec not in (None, "tfaot", "iree"):
        raise TfaotError(f"--matvec={matvec} is not supported; supported: tfaot, iree")
    if matvec == "tfaot" and kind in GPU_KINDS:
        raise TfaotError(f"--matvec=tfaot is a CPU option; --target={kind} uses IREE's kernels")
    if weights_dtype not in WEIGHTS_DTYPES:
        raise TfaotError(f"--weights-dtype={weights_dtype} is not supported; supported: "
                         f"{', '.join(WEIGHTS_DTYPES)}")
    if activations not in (None, "exact", "table"):
        raise TfaotError(f"--activations={activations} is not supported; supported: "
                         "exact, table")
    if intermediates not in (None, *INTERMEDIATES):
        raise TfaotError(f"--intermediates={intermediates} is not supported; supported: "
                         f"{', '.join(INTERMEDIATES)}")
    target = replace(_make_target(kind, triple, cpu, weight_packing),
                     external_weights=external_weights, matvec=matvec,
                     weights_dtype=weights_dtype, activations=activations,
                     intermediates=intermediates)
    if matvec is None and mcu_matvec_kernel(target):
        target = replace(target, matvec="tfaot", kernel_kinds=mcu_kernel_kinds(target),
                         kernel_min_weights=MCU_KERNEL_MIN_WEIGHTS)
    if target.bare_metal_arm and target.arch.startswith("thumb") and target.int8_paired_rows:
        target = replace(target, int8_min_weights=MCU_KERNEL_MIN_WEIGHTS)
    if matvec == "tfaot" and target.toolchain() is None:
        raise TfaotError(f"--matvec=tfaot compiles tfaot's kernel with the C toolchain of "
                         f"{target.triple}, and none is installed; use --matvec=iree")
    check_weights_dtype(target)
    check_intermediates(target)
    return target


def _make_target(kind: str, triple: str | None, cpu: str | None,
                 weight_packing: bool | None) -> Target:
    if kind not in KINDS:
        raise TfaotError(f"--target={kind} is not supported; supported: {', '.join(KINDS)}")
    triple = triple or host_triple()
    check_triple(triple)
    if kind in GPU_KINDS:
        return _gpu_target(kind, triple, cpu, weight_packing)
    cpu = cpu or default_cpu(triple)
    _check_cpu_fits_triple(cpu, triple)
    target = Target(kind, triple, cpu, weight_packing)
    if cpu == "host" and not target.is_host:
        raise TfaotError(
            f"--cpu=host is only valid when building for this machine ({host_triple()}); "
            f"for {triple} name a CPU (e.g. cortex-m4) or use generic")
    if target.bare_metal_arm and target.hard_float and not target.c_flags()[1:-1]:
        raise TfaotError(f"--triple {triple} is hard-float; name the CPU with --cpu "
                         f"(one of {', '.join(ARM_CPU_FLAGS)}) so the C code uses its FPU")
    return target


#: CPU name prefixes -> the triples' architectures (their first field) they
#: belong to, for the mismatches a slip of the command line makes
_CPU_FAMILIES = (
    (("cortex-m", "sc000", "sc300", "star-mc"), ("thumb", "arm"),
     "32-bit Arm (thumbv7em-none-eabihf, ...)"),
    (("cortex-a", "cortex-x", "cortex-r", "neoverse", "apple-", "ampere", "a64fx"),
     ("aarch64", "arm64", "arm", "thumb"), "Arm"),
    (("x86-64", "skylake", "znver", "haswell", "broadwell", "icelake", "sapphirerapids",
      "alderlake", "cascadelake", "cooperlake", "tigerlake", "nehalem", "sandybridge",
      "ivybridge", "westmere", "core2", "atom", "btver", "bdver", "k8", "emeraldrapids",
      "graniterapids", "raptorlake", "meteorlake", "arrowlake", "lunarlake", "goldmont",
      "tremont", "silvermont"), ("x86_64", "i386", "i686"), "x86 (x86_64-linux-gnu, ...)"),
    (("sifive-", "rocket", "syntacore", "spacemit", "xiangshan"), ("riscv",), "RISC-V"),
)


def _check_cpu_fits_triple(cpu: str, triple: str) -> None:
    """``--cpu`` of one architecture with ``--triple`` of another failed only
    in iree-compile or, for a Cortex-A CPU on a Cortex-M triple, in the
    firmware's link ("conflicting architecture profiles")."""
    arch = triple.split("-")[0]
    for prefixes, arches, what in _CPU_FAMILIES:
        if cpu.startswith(prefixes) and not arch.startswith(arches):
            raise TfaotError(f"--cpu={cpu} is a CPU for {what} but --triple {triple} is "
                             f"{arch}; give the triple of that CPU, or a CPU of {arch}")
    if cpu.startswith("cortex-m") and arch.startswith("thumb") and cpu not in ARM_CPU_FLAGS \
            and cpu not in _OTHER_CORTEX_M:
        raise TfaotError(f"--cpu={cpu} is not a Cortex-M CPU gcc knows; tfaot's kernels are "
                         f"tuned for {', '.join(ARM_CPU_FLAGS)}")
    profile = _CORTEX_M_ARCH.get(cpu)
    if profile and arch.startswith("thumb") and arch != profile:
        raise TfaotError(f"--cpu={cpu} is a {profile} core but --triple {triple} is {arch}: "
                         f"give --triple {profile}-{triple.split('-', 1)[1]} (the code and the "
                         "header would say different cores)")
    if cpu.startswith(("cortex-a", "cortex-x", "cortex-r")) and arch.startswith("thumb") and \
            "none" in triple:
        raise TfaotError(f"--cpu={cpu} is an application (or real-time) core but --triple "
                         f"{triple} is a Cortex-M (M-profile) triple: the firmware's link "
                         "would fail on conflicting architecture profiles")
    _check_llvm_knows(cpu, triple)


def _check_llvm_knows(cpu: str, triple: str) -> None:
    """A CPU name LLVM does not know failed only in iree-compile, after the
    model was loaded and streamed."""
    from .backend.compile import llvm_cpus

    if cpu in ("host", "generic"):
        return
    known = llvm_cpus(triple)
    if known and cpu not in known:
        close = difflib.get_close_matches(cpu, sorted(known), n=3)
        hint = f"did you mean {' or '.join(close)}? " if close else ""
        raise TfaotError(f"--cpu={cpu} is not a CPU the compiler knows for {triple}; {hint}"
                         f"host, generic or one of: {', '.join(sorted(known))}")


#: The architecture (a triple's first field) of each Cortex-M core: a core
#: of another one built its own code under the triple's name.
_CORTEX_M_ARCH = {"cortex-m0": "thumbv6m", "cortex-m0plus": "thumbv6m",
                  "cortex-m1": "thumbv6m", "cortex-m3": "thumbv7m", "cortex-m4": "thumbv7em",
                  "cortex-m7": "thumbv7em", "cortex-m23": "thumbv8m.base",
                  "cortex-m33": "thumbv8m.main", "cortex-m35p": "thumbv8m.main",
                  "cortex-m52": "thumbv8.1m.main", "cortex-m55": "thumbv8.1m.main",
                  "cortex-m85": "thumbv8.1m.main"}
#: Cortex-M cores gcc knows besides ARM_CPU_FLAGS' (built with generic C kernels)
_OTHER_CORTEX_M = set(_CORTEX_M_ARCH) - set(ARM_CPU_FLAGS)


def _gpu_target(kind: str, triple: str, cpu: str | None, weight_packing: bool | None) -> Target:
    """A GPU target: kernels for the GPU, host code (NAME.c) for ``triple``."""
    if "linux" not in triple:
        raise TfaotError(f"--target={kind} needs a Linux triple for the host code (the "
                         f"backend loads the GPU driver at run time); got {triple}")
    if kind == "cuda" and not triple.startswith(("x86_64", "aarch64")):
        raise TfaotError(f"--target=cuda needs a 64-bit host (x86_64 or aarch64 Linux), where "
                         f"NVIDIA's driver runs; got {triple}")
    if kind == "cuda":
        gpu_cpu = cuda_arch(cpu)
    elif cpu not in (None, "", "generic", "host"):
        raise TfaotError(f"--cpu={cpu} names a CPU for CPU kernels; --target={kind} builds "
                         "GPU kernels, so leave --cpu out")
    else:
        gpu_cpu = "generic"
    if weight_packing:
        raise TfaotError(f"--pack-weights is a CPU option; --target={kind} keeps the "
                         "weights in one device buffer")
    return Target(kind, triple, gpu_cpu, False)
