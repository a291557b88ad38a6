"""Compiling and linking the library with the target's toolchain (Target.toolchain)."""
from __future__ import annotations

import functools
import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

from ..errors import TfaotError
from ..target import Target, Toolchain, compiler_macros

#: Flags every build of generated C uses (warnings are errors in tests, not here).
C_FLAGS = ("-std=c11", "-O2", "-ffunction-sections", "-fdata-sections")

#: The library's global symbols (after the NAME_ prefix); everything else is local.
PUBLIC_FUNCTIONS = ("ctx_size", "init", "reset", "step", "step_n", "state_size", "get_state",
                    "set_state", "stream_state_size", "get_stream_state", "set_stream_state",
                    "reset_stream", "read_input", "write_output", "run", "deinit",
                    "status_string")
#: Where Debian and Ubuntu install each LLVM version's tools (llvm-N/bin).
LLVM_ROOT = Path("/usr/lib")

#: Defined only by --weights=file builds.
WEIGHTS_FILE_FUNCTIONS = ("init_with_weights",)


@functools.lru_cache(maxsize=None)
def llvm_tool(name: str) -> str | None:
    """The path of LLVM's tool ``name`` (clang, llvm-objcopy, llvm-nm), or None.

    The unversioned name first, else the newest versioned one: Debian and
    Ubuntu install ``clang-14``, ``llvm-objcopy-14`` on PATH and the plain
    names in /usr/lib/llvm-14/bin, and only the ``clang``/``llvm`` packages
    add the unversioned links.
    """
    found = shutil.which(name)
    if found:
        return found
    versions = []
    for folder in os.environ.get("PATH", "").split(os.pathsep):
        for path in Path(folder or ".").glob(f"{name}-*"):
            version = path.name[len(name) + 1:]
            if version.isdigit() and os.access(path, os.X_OK):
                versions.append((int(version), str(path)))
    for path in LLVM_ROOT.glob(f"llvm-*/bin/{name}"):
        version = path.parts[-3].removeprefix("llvm-")
        if version.isdigit() and os.access(path, os.X_OK):
            versions.append((int(version), str(path)))
    return max(versions)[1] if versions else None


def c_command(target: Target, toolchain: Toolchain | None) -> list[str] | None:
    """The C compiler command (without inputs) for the target, or None.

    Without the target's toolchain, clang --target in freestanding mode still
    compiles (for the context-size cross-check), but nothing is linked.
    """
    if toolchain is not None:
        return [toolchain.cc, *C_FLAGS, *target.c_flags()]
    clang = llvm_tool("clang")
    if clang:
        return [clang, f"--target={target.triple}", "-ffreestanding", "-DTFRT_FREESTANDING",
                *C_FLAGS, *target.c_flags()]
    return None


def run(args: list[str], cwd: Path, what: str) -> None:
    proc = subprocess.run([str(a) for a in args], cwd=cwd, capture_output=True, text=True,
                          check=False)
    if proc.returncode != 0:
        msg = (proc.stderr or proc.stdout).strip().splitlines()
        first = next((ln for ln in msg if "error" in ln), msg[0] if msg else "")
        raise TfaotError(f"package: {what} failed ({args[0]}): {first}")


def rename_query_symbol(kernel_object: Path, dest: Path, old: str, new: str,
                        toolchain: Toolchain | None, triple: str) -> None:
    """Copies the kernel object to ``dest`` with its query symbol renamed."""
    # Binutils of the host only read host objects; llvm-objcopy reads all targets.
    objcopy = toolchain.objcopy if toolchain else (llvm_tool("llvm-objcopy") or "objcopy")
    proc = subprocess.run([objcopy, f"--redefine-sym={old}={new}", str(kernel_object),
                           str(dest)], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise TfaotError(
            f"package: renaming the kernel query symbol with {objcopy} failed: "
            f"{proc.stderr.strip()} (for {triple} install llvm (llvm-objcopy) or the "
            "target's binutils)")


#: The micro-kernel's source in runtime_shim/ (compiler/lower/microkernel.py).
MATVEC_SOURCE = "tfrt_matvec.c"


def matvec_flags(target: Target, cc: str | None = None) -> list[str]:
    """C flags of the micro-kernel: -O3 (gcc -O2 keeps its accumulator arrays
    in memory, 1.7x slower) and the target CPU's (Target.cpu_flag), unless
    the C compiler ``cc`` does not know that CPU; with AVX-512, 512-bit
    vectors read the weights 1.5x faster than gcc's default 256
    (bench_litert.py)."""
    # half-width weights (--weights-dtype): the kernel's variant that converts them
    dtype = [f"-DTFRT_MATVEC_{target.weights_dtype.upper()}"] * (target.weights_dtype != "f32")
    if target.weights_dtype == "int8":  # how the blob was packed: the C checks it agrees
        dtype += [f"-DTFRT_I8_PAIRED_BLOB={int(target.int8_layout == 'paired')}",
                  f"-DTFRT_I8_ROWS_BLOB={int(target.int8_layout == 'rows')}"]
    cpu = target.cpu_flag
    if cpu is None or (cc is not None and target.cpu != "host"
                       and not compiler_macros(cc, cpu)):
        return ["-O3", *dtype]
    # with AVX-512, 512-bit vectors (gcc's default is 256)
    wide = ["-mprefer-vector-width=512"] if target.arch == "x86_64" else []
    return ["-O3", cpu, *wide, *dtype]


def add_micro_kernels(target: Target, toolchain: Toolchain | None, kernels: Path,
                      symbols: dict[str, str], workdir: Path) -> None:
    """Compiles the micro-kernels ``{kind: symbol}`` and merges them into ``kernels``.

    The kernel object then defines what its matvec and convolution
    dispatches call: it stays one self-contained object, as for IREE's own
    kernels.
    """
    if toolchain is None:
        raise TfaotError(f"package: tfaot's micro-kernels need the C toolchain of "
                         f"{target.triple}; none is installed (build with --matvec=iree)")
    from ..lower.microkernel import with_wrapped_kernels

    names = [f"-DTFRT_{kind.upper()}_FN={symbol}"
             for kind, symbol in sorted(with_wrapped_kernels(symbols).items())]
    flags = matvec_flags(target, toolchain.cc)
    if target.cpu_flag and target.cpu_flag not in flags:
        print(f"tfaot: warning: the C compiler ({toolchain.cc}) does not know --cpu "
              f"{target.cpu}: tfaot's micro-kernels are built for the baseline {target.arch}, "
              "slower than they could be (a newer gcc, or CC=clang, may know it)",
              file=sys.stderr, flush=True)
    merged = _merge_shim_source(target, toolchain, kernels, MATVEC_SOURCE,
                                [*flags, *names], workdir, "the micro-kernels")
    check_kernels_defined(merged, toolchain)
    shutil.copyfile(merged, kernels)


#: runtime_shim objects this process compiled, by command and sources: a
#: process that builds several models (a test run, a script) compiles the
#: same micro-kernels with the same flags once (0.8 s a build)
_COMPILED_SHIMS: dict[str, bytes] = {}


def _merge_shim_source(target: Target, toolchain: Toolchain, kernels: Path, source: str,
                       flags: list[str], workdir: Path, what: str) -> Path:
    """``kernels`` with runtime_shim/``source`` (compiled with ``flags`` by the
    target's toolchain) merged in, as ``workdir``/kernels.o."""
    from ..resources import shim_dir

    workdir.mkdir(parents=True, exist_ok=True)
    sources = [shim_dir() / source, *sorted(shim_dir().glob("*.h"))]
    for path in sources:  # relative paths
        shutil.copyfile(path, workdir / path.name)
    pic = ["-fPIC"] if toolchain.pic else []
    command = [str(a) for a in (*c_command(target, toolchain), *pic, *flags, "-c", source,
                                "-o", "shim.o")]
    key = hashlib.sha256(repr(command).encode() +
                         b"".join(path.read_bytes() for path in sources)).hexdigest()
    if key not in _COMPILED_SHIMS:
        run(command, workdir, f"compiling {what}")
        _COMPILED_SHIMS[key] = (workdir / "shim.o").read_bytes()
    (workdir / "shim.o").write_bytes(_COMPILED_SHIMS[key])
    run([toolchain.cc, "-r", "-nostdlib", "-o", "kernels.o", kernels, "shim.o"], workdir,
        f"adding {what} to the kernel object")
    return workdir / "kernels.o"


#: The libm functions a kernel object may call that tfaot defines itself
#: (runtime_shim/tfrt_libm.c), under NAME_ names.
LIBM_SOURCE = "tfrt_libm.c"
LIBM_SHIMS = ("floorf", "fmaximumf", "fminimumf")


def add_libm_shims(target: Target, toolchain: Toolchain, kernels: Path, name: str,
                   workdir: Path) -> list[str]:
    """Where the kernel object calls ``floorf`` (FPUs without a round-down
    instruction: Cortex-M4) or, without an FPU, ``fmaximumf`` or
    ``fminimumf`` (which newlib lacks), renames the calls to ``NAME_floorf``
    and so on and merges tfaot's definitions into the object; returns the
    functions so replaced. The library then needs no libm for them, and the
    firmware's own libm is left alone."""
    from ..backend.compile import undefined_symbols

    wanted = [f for f in LIBM_SHIMS if f in undefined_symbols(kernels, toolchain.nm)]
    if not wanted:
        return []
    workdir.mkdir(parents=True, exist_ok=True)
    renamed = workdir / "renamed.o"
    run([toolchain.objcopy, *(f"--redefine-sym={f}={name}_{f}" for f in wanted), kernels,
         renamed], workdir, "renaming the kernel object's libm calls")
    merged = _merge_shim_source(target, toolchain, renamed, LIBM_SOURCE,
                                ["-O2", f"-DTFRT_LIBM_PREFIX={name}_"], workdir,
                                "tfaot's libm functions")
    shutil.copyfile(merged, kernels)
    return wanted


def check_kernels_defined(kernels: Path, toolchain: Toolchain) -> None:
    """Refuses a kernel object that still imports a micro-kernel: the library
    would fail to link or load (an undefined ``NAME_matvec_f32``) far from
    the cause."""
    from ..backend.compile import undefined_symbols
    from ..lower.microkernel import kernel_like

    missing = kernel_like(undefined_symbols(kernels, toolchain.nm))
    if missing:
        raise TfaotError(f"package: the kernel object calls the micro-kernel(s) "
                         f"{', '.join(missing)}, which this build did not compile from "
                         f"{MATVEC_SOURCE}")


def non_executable_stack(toolchain: Toolchain, obj: Path, src: Path) -> None:
    """``obj`` (the kernel object a firmware's CMake build links from src/)
    with its stack note not executable: arm-none-eabi's ld -r marks the
    merged note executable, and every firmware link warned "requires
    executable stack"."""
    run([toolchain.objcopy, "--set-section-flags", ".note.GNU-stack=contents,readonly", obj],
        src, "marking the kernel object's stack not executable")


def link_library(target: Target, toolchain: Toolchain, *, name: str, src: Path,
                 kernels: Path | None, out_dir: Path, workdir: Path) -> tuple[list[str], bytes]:
    """Builds libNAME.a (and libNAME.so for the host) into ``out_dir``.

    Returns the file names written and the bytes of the compiled NAME.o
    (for the footprint).
    """
    cc = c_command(target, toolchain)
    obj = workdir / f"{name}.o"
    pic = ["-fPIC"] if toolchain.pic else []
    run([*cc, *pic, "-c", f"{name}.c", "-o", obj], src, "compiling the generated C")
    host_object = obj.read_bytes()
    # One relocatable object with only the public API global.
    combined = workdir / f"{name}_lib.o"
    # The kernel object has no .note.GNU-stack; say the stack is not executable.
    run([toolchain.cc, "-r", "-nostdlib", "-Wl,-z,noexecstack", "-o", combined, obj,
         *([kernels] if kernels else [])], src, "combining objects")
    keep = workdir / "public.syms"
    keep.write_text("".join(f"{name}_{fn}\n"
                            for fn in (*PUBLIC_FUNCTIONS, *WEIGHTS_FILE_FUNCTIONS)))
    # arm-none-eabi's ld -r ignores -z noexecstack and marks the merged
    # note executable (a linker warning in every firmware): clear its flags.
    run([toolchain.objcopy, f"--keep-global-symbols={keep}",
         "--set-section-flags", ".note.GNU-stack=contents,readonly", combined], src,
        "hiding internal symbols")
    built = []
    lib_a = out_dir / f"lib{name}.a"
    lib_a.unlink(missing_ok=True)
    shutil.copyfile(combined, obj)  # the archive member is named NAME.o
    run([toolchain.ar, "rcsD", lib_a, obj.name], obj.parent, "creating the archive")
    built.append(lib_a.name)
    if target.is_host:
        lib_so = out_dir / f"lib{name}.so"
        # (a soname: a program linked with the .so by its path, as CMake
        # links an imported one, looks it up by name at run time)
        run([toolchain.cc, "-shared", f"-Wl,-soname,{lib_so.name}", "-o", lib_so, combined,
             *(f"-l{lib}" for lib in target.link_libs)], src, "linking the shared library")
        built.append(lib_so.name)
    return built, host_object
