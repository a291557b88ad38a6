"""Package stage: translated program + kernel object -> a linkable C library.

Output folder ``out_dir`` (all names fixed, contents deterministic):

    NAME.h             public API (status codes, shapes, ctx size)
    libNAME.a          one relocatable object: NAME.o + kernels (only NAME_* global)
    libNAME.so         shared library (host triple only), for the ctypes harness
    NAME.json          manifest
    src/               what a firmware build compiles itself:
        NAME.c NAME.h tfrt.c tfrt.h tfrt_abi.h NAME_kernels.o

The kernel object's query symbol is renamed to ``NAME_kernels_library_query``
so several models link into one program.

Cross targets: a ``*-linux-gnu`` triple uses Debian's ``<arch>-linux-gnu-gcc``;
a bare-metal Arm triple (``thumbv7em-none-eabihf`` ...) uses ``arm-none-eabi-gcc``
with the flags of ``ARM_CPU_FLAGS``. Without that compiler only src/ is
written (the firmware build compiles it).
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import jinja2
import numpy as np

from . import emit as emit_mod
from .compile import CompiledModule, is_host_triple
from .errors import TfaotError
from .program import ProgramSignature, TensorInfo
from .resources import shim_dir, template_dir

SHIM_FILES = ("tfrt.h", "tfrt.c", "tfrt_abi.h")
CTX_ALIGN = 64
#: Flags every build of generated C uses (warnings are errors in tests, not here).
C_FLAGS = ["-std=c11", "-O2", "-ffunction-sections", "-fdata-sections"]

#: The library's global symbols (after the NAME_ prefix); everything else is local.
PUBLIC_FUNCTIONS = ("ctx_size", "init", "reset", "step", "step_n", "state_size", "get_state",
                    "set_state", "read_input", "write_output", "run", "deinit", "status_string")

#: arm-none-eabi-gcc flags per CPU; must agree with the kernels' float ABI
#: (hard-float triples get --iree-llvmcpu-target-float-abi=hard, see compile.py).
ARM_CPU_FLAGS = {
    "cortex-m4": ("-mcpu=cortex-m4", "-mfpu=fpv4-sp-d16"),
    "cortex-m7": ("-mcpu=cortex-m7", "-mfpu=fpv5-d16"),
    "cortex-m33": ("-mcpu=cortex-m33", "-mfpu=fpv5-sp-d16"),
    "cortex-m55": ("-mcpu=cortex-m55",),
}

_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")


def _tfaot_version() -> str:
    try:
        from importlib.metadata import version

        return version("tfaot")
    except Exception:
        return "dev"


def check_name(name: str) -> None:
    if not _NAME_RE.match(name):
        raise TfaotError(
            f"model name '{name}' is not a valid C identifier; it prefixes every symbol of the "
            "library (use letters, digits and '_', not starting with a digit)")


def _tensor(t: TensorInfo) -> dict:
    if t.dtype not in emit_mod.ELEMENT_TYPES:
        raise TfaotError(f"tensor '{t.name}' has dtype {t.dtype}, which the C API does not "
                         f"support (supported: {', '.join(emit_mod.ELEMENT_TYPES)})")
    etype, ctype = emit_mod.ELEMENT_TYPES[t.dtype]
    return {"name": t.name, "dtype": t.dtype, "shape": [int(d) for d in t.shape],
            "size": t.size, "bytes": t.size * np.dtype(t.dtype).itemsize,
            "etype": etype, "ctype": ctype}


_TENSOR_DECL = re.compile(r"%?([\w.]+)\s*:\s*tensor<([^>]*)>")
_MLIR_DTYPES = {"f32": "float32", "f64": "float64", "f16": "float16", "i8": "int8",
                "i16": "int16", "i32": "int32", "i64": "int64", "i1": "bool",
                "ui8": "uint8", "ui16": "uint16", "ui32": "uint32"}


def _check_signature_against_vm(sig: ProgramSignature, step: emit_mod.FunctionInfo) -> None:
    """The VM step function's reflection must agree with the signature."""
    decl = step.declaration
    if not decl or "->" not in decl:
        return
    args_text, res_text = decl.split("->", 1)
    for what, text, tensors in (("input", args_text, sig.inputs), ("output", res_text, sig.outputs)):
        found = _TENSOR_DECL.findall(text)
        if len(found) != len(tensors):
            raise TfaotError(f"package: the compiled step function has {len(found)} {what}s "
                             f"({decl}), the signature declares {len(tensors)}")
        for (_, ttext), t in zip(found, tensors):
            parts = ttext.split("x")
            shape, dtype = [int(p) if p.isdigit() else -1 for p in parts[:-1]], parts[-1]
            if shape != list(t.shape) or _MLIR_DTYPES.get(dtype) != t.dtype:
                raise TfaotError(
                    f"package: {what} '{t.name}' is {t.dtype}{list(t.shape)} in the signature "
                    f"but tensor<{ttext}> in the compiled step function")


def is_bare_metal_arm(triple: str) -> bool:
    return triple.startswith(("thumb", "arm")) and "-none-eabi" in triple


def arm_flags(triple: str, cpu: str) -> tuple[str, ...]:
    """arm-none-eabi-gcc flags matching the kernels built for (triple, cpu)."""
    hard = triple.endswith("eabihf")
    if cpu in ARM_CPU_FLAGS:
        cpu_flags = ARM_CPU_FLAGS[cpu] if hard else ARM_CPU_FLAGS[cpu][:1]
    elif cpu in ("generic", ""):
        cpu_flags = ()
    else:
        cpu_flags = (f"-mcpu={cpu}",)
    if hard and not cpu_flags:
        raise TfaotError(f"package: {triple} is hard-float; name the CPU with --cpu "
                         f"(one of {', '.join(ARM_CPU_FLAGS)}) so the C code uses its FPU")
    return ("-mthumb", *cpu_flags, f"-mfloat-abi={'hard' if hard else 'soft'}")


@dataclass
class CCompiler:
    """The C compiler and binutils used to build the library."""

    cc: str
    ar: str
    objcopy: str
    nm: str
    extra_flags: tuple[str, ...] = ()

    pic: bool = True         # -fPIC (not for bare-metal targets)

    @classmethod
    def for_triple(cls, triple: str, cpu: str = "generic") -> "CCompiler | None":
        if is_host_triple(triple):
            return cls(cc=os.environ.get("CC", "cc"), ar="ar", objcopy="objcopy", nm="nm")
        parts = triple.split("-")
        if len(parts) >= 3 and "linux" in triple:
            gnu = f"{parts[0]}-linux-gnu"
            if shutil.which(f"{gnu}-gcc"):
                return cls(cc=f"{gnu}-gcc", ar=f"{gnu}-ar", objcopy=f"{gnu}-objcopy", nm=f"{gnu}-nm")
        if is_bare_metal_arm(triple) and shutil.which("arm-none-eabi-gcc"):
            return cls(cc="arm-none-eabi-gcc", ar="arm-none-eabi-ar",
                       objcopy="arm-none-eabi-objcopy", nm="arm-none-eabi-nm",
                       extra_flags=arm_flags(triple, cpu), pic=False)
        return None

    def run(self, args: list[str], cwd: Path, what: str) -> None:
        proc = subprocess.run(args, cwd=cwd, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            msg = (proc.stderr or proc.stdout).strip().splitlines()
            first = next((ln for ln in msg if "error" in ln), msg[0] if msg else "")
            raise TfaotError(f"package: {what} failed ({' '.join(args[:1])}): {first}")


def _state_layout(states: list[dict]) -> tuple[int, int]:
    """Adds ``offset`` (packed, the public layout) and ``slot`` (64-byte aligned,
    the context's scratch copy) to each state; returns both total sizes."""
    offset = slot = 0
    for s in states:
        s["offset"], s["slot"] = offset, slot
        offset += s["bytes"]
        slot += -(-s["bytes"] // CTX_ALIGN) * CTX_ALIGN
    return offset, slot


def _state_functions(vm: emit_mod.VMProgram, name: str, states: list[dict]):
    """The program's @get_state / @set_state, checked against the states."""
    if not states:
        return None, None
    fns = []
    for export, kind in (("get_state", "result_types"), ("set_state", "arg_types")):
        fn = vm.functions.get(vm.exports.get(export, ""))
        if fn is None:
            raise TfaotError(
                f"package: model '{name}' has {len(states)} state tensors but the compiled "
                f"program has no '{export}' function (exports: {', '.join(vm.exports)}); the "
                "frontend writes get_state/set_state next to step and reset")
        types = getattr(fn, kind)
        if types != ["!vm.ref<!hal.buffer_view>"] * len(states):
            raise TfaotError(f"package: {export} of model '{name}' has VM signature "
                             f"{fn.arg_types} -> {fn.result_types}; expected one tensor per "
                             f"state ({len(states)})")
        fns.append(fn)
    return fns[0], fns[1]


def render(vm: emit_mod.VMProgram, sig: ProgramSignature, compiled: CompiledModule, *,
           name: str, ctx_size: int, library_name: str, query_symbol: str,
           footprint: dict | None = None) -> tuple[str, str]:
    """Renders (NAME.c, NAME.h) from the templates."""
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(template_dir())),
                             trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True,
                             undefined=jinja2.StrictUndefined)
    inputs = [_tensor(t) for t in sig.inputs]
    outputs = [_tensor(t) for t in sig.outputs]
    states = [_tensor(t) for t in sig.states]
    if len(inputs) != 1 or len(outputs) != 1:
        raise TfaotError(
            f"package: model '{name}' has {len(inputs)} inputs and {len(outputs)} outputs; the "
            "C API of this version supports exactly one step input and one step output "
            "(for a graph, pick one with --outputs NAME)")
    for export in ("step",):
        if export not in vm.exports:
            raise TfaotError(f"package: the compiled program has no '{export}' function "
                             f"(exports: {', '.join(vm.exports)})")
    step_fn = vm.functions[vm.exports["step"]]
    if step_fn.arg_types != ["!vm.ref<!hal.buffer_view>"] or \
            step_fn.result_types != ["!vm.ref<!hal.buffer_view>"]:
        raise TfaotError(f"package: step has VM signature {step_fn.arg_types} -> "
                         f"{step_fn.result_types}; expected one tensor in and one tensor out")
    _check_signature_against_vm(sig, step_fn)
    state_bytes, state_slot_bytes = _state_layout(states)
    get_fn, set_fn = _state_functions(vm, name, states)
    ctx = dict(
        name=name, P=name.upper(), tfaot_version=_tfaot_version(), triple=compiled.triple,
        cpu=compiled.cpu, compiler_version=compiled.compiler_version, vm=vm,
        inputs=inputs, outputs=outputs, states=states,
        in_ctype=inputs[0]["ctype"], out_ctype=outputs[0]["ctype"],
        in_etype=inputs[0]["etype"], out_etype=outputs[0]["etype"],
        ctx_size=ctx_size, ctx_align=CTX_ALIGN, arena_bytes=vm.arena_bytes,
        libraries=[{"name": library_name, "symbol": query_symbol}],
        step_fn=step_fn,
        reset_fn=vm.functions.get(vm.exports.get("reset", ""), None),
        init_fn=vm.functions.get(vm.exports.get("__init", ""), None),
        get_fn=get_fn, set_fn=set_fn, state_bytes=state_bytes, state_slot_bytes=state_slot_bytes,
        footprint=footprint or {"code_bytes": 0, "weight_bytes": 0},
        signature=emit_mod.function_signature,
    )
    c_text = env.get_template("model.c.j2").render(**ctx)
    h_text = env.get_template("model.h.j2").render(**ctx)
    return c_text, h_text


def _measure_ctx_size(vm, sig, compiled, *, name: str, library_name: str, query_symbol: str,
                      cmd: list[str], probe: Path) -> int:
    """sizeof(struct NAME_ctx) for the target, rounded up to CTX_ALIGN."""
    c_text, h_text = render(vm, sig, compiled, name=name, ctx_size=0,
                            library_name=library_name, query_symbol=query_symbol)
    probe.mkdir(parents=True, exist_ok=True)
    for f in SHIM_FILES:
        shutil.copyfile(shim_dir() / f, probe / f)
    (probe / f"{name}.c").write_text(
        c_text + f"\nchar {name}_ctx_probe_[sizeof(struct {name}_ctx)];\n")
    (probe / f"{name}.h").write_text(h_text)
    proc = subprocess.run([*cmd, "-fno-common", "-c", f"{name}.c", "-o", "probe.o"], cwd=probe,
                          capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        first = next((ln for ln in proc.stderr.splitlines() if "error" in ln), proc.stderr[:200])
        raise TfaotError(f"package: compiling the generated C for {compiled.triple} failed "
                         f"({cmd[0]}): {first}")
    nm = shutil.which("llvm-nm") or "nm"
    out = subprocess.run([nm, "-S", "probe.o"], cwd=probe, capture_output=True, text=True,
                         check=False).stdout
    for line in out.splitlines():
        parts = line.split()
        if parts and parts[-1] == f"{name}_ctx_probe_" and len(parts) >= 2:
            size = int(parts[1], 16)
            return -(-size // CTX_ALIGN) * CTX_ALIGN
    raise TfaotError(f"package: could not measure the context size for {compiled.triple}")


def elf_sections(data: bytes) -> dict[str, int]:
    """Section name -> size of an ELF relocatable object (32/64-bit, either endianness).

    Read here rather than with size(1) so every target's objects can be measured
    without that target's binutils.
    """
    import struct

    if data[:4] != b"\x7fELF":
        raise TfaotError("package: footprint: not an ELF object")
    is64, end = data[4] == 2, "<" if data[5] == 1 else ">"
    if is64:
        shoff, = struct.unpack_from(end + "Q", data, 0x28)
        shentsize, shnum, shstrndx = struct.unpack_from(end + "HHH", data, 0x3A)
    else:
        shoff, = struct.unpack_from(end + "I", data, 0x20)
        shentsize, shnum, shstrndx = struct.unpack_from(end + "HHH", data, 0x2E)

    def header(i):  # (name offset, type, flags, offset, size)
        base = shoff + i * shentsize
        if is64:
            name, typ, flags, _, off, size = struct.unpack_from(end + "IIQQQQ", data, base)
        else:
            name, typ, flags, _, off, size = struct.unpack_from(end + "IIIIII", data, base)
        return name, typ, flags, off, size

    strtab_off = header(shstrndx)[3]
    sections = {}
    for i in range(1, shnum):
        name_off, _, flags, _, size = header(i)
        if not flags & 0x2:  # SHF_ALLOC: only what ends up in the image
            continue
        end_name = data.index(b"\0", strtab_off + name_off)
        name = data[strtab_off + name_off:end_name].decode()
        sections[name] = sections.get(name, 0) + size
    return sections


def _sum(sections: dict[str, int], *prefixes: str) -> int:
    return sum(size for name, size in sections.items()
               if any(name == p or name.startswith(p + ".") for p in prefixes))


def measure_footprint(kernels: bytes, host: bytes | None, ctx_size: int) -> dict:
    """Bytes of flash (code, weights, constants) and RAM (one context) on the target.

    ``weight_bytes`` is the kernels' read-only data (the weights are baked into
    the dispatch functions); ``static_data_bytes`` is the library's own
    .data/.bss (immutable buffer headers), shared by all contexts.
    """
    k = elf_sections(kernels)
    h = elf_sections(host) if host is not None else {}
    return {
        "code_bytes": _sum(k, ".text") + _sum(h, ".text"),
        "weight_bytes": _sum(k, ".rodata", ".lrodata"),
        "const_bytes": _sum(h, ".rodata"),
        "static_data_bytes": _sum(k, ".data", ".bss") + _sum(h, ".data", ".bss"),
        "ram_bytes": ctx_size,
        "host_program_measured": host is not None,
    }


def CMAKE_FILES(name: str) -> list[str]:  # noqa: N802 - reads as a constant
    """The CMake files of a build folder: for find_package and add_subdirectory."""
    return [f"{name}Config.cmake", "CMakeLists.txt"]


def write_cmake_files(out_dir: Path, manifest: dict) -> None:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(template_dir())),
                             keep_trailing_newline=True, undefined=jinja2.StrictUndefined)
    values = dict(manifest, tfaot_version=_tfaot_version())
    for file, template in zip(CMAKE_FILES(manifest["name"]),
                              ("Config.cmake.j2", "CMakeLists.txt.j2")):
        (out_dir / file).write_text(env.get_template(template).render(**values))


def _library_name(vm: emit_mod.VMProgram, compiled: CompiledModule) -> str:
    """The library name the program passes to executable.load (= query prefix)."""
    name = compiled.library_query[: -len("_library_query")]
    texts = {rd.data.rstrip(b"\0").decode("utf-8", "replace") for rd in vm.rodata}
    if name not in texts:
        raise TfaotError(f"package: kernel library '{name}' is not referenced by the program")
    return name


def package(vm: emit_mod.VMProgram, sig: ProgramSignature, compiled: CompiledModule,
            out_dir: Path, *, name: str, workdir: Path) -> dict:
    """Builds the library files into ``out_dir``; returns the manifest."""
    check_name(name)
    out_dir = Path(out_dir).resolve()
    workdir = Path(workdir).resolve()
    src = out_dir / "src"
    src.mkdir(parents=True, exist_ok=True)
    for f in SHIM_FILES:
        shutil.copyfile(shim_dir() / f, src / f)
    library_name = _library_name(vm, compiled)
    query_symbol = f"{name}_kernels_library_query"
    cc = CCompiler.for_triple(compiled.triple, compiled.cpu)
    # Binutils of the host only read host objects; llvm-objcopy reads all targets.
    objcopy = cc.objcopy if cc else (shutil.which("llvm-objcopy") or "objcopy")
    kernels = src / f"{name}_kernels.o"
    proc = subprocess.run([objcopy, f"--redefine-sym={compiled.library_query}={query_symbol}",
                           str(compiled.kernel_object), str(kernels)],
                          capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise TfaotError(
            f"package: renaming the kernel query symbol with {objcopy} failed: "
            f"{proc.stderr.strip()} (for {compiled.triple} install llvm (llvm-objcopy) or the "
            "target's binutils)")

    # Pass 1: measure sizeof(ctx) with a compiler for the target (the target
    # toolchain, else clang --target in freestanding mode); pass 2: final text.
    probe_cmd = None
    if cc is not None:
        probe_cmd = [cc.cc, *C_FLAGS, *cc.extra_flags]
    elif shutil.which("clang"):
        probe_cmd = ["clang", f"--target={compiled.triple}", "-ffreestanding",
                     "-DTFRT_FREESTANDING", *C_FLAGS]
    ctx_size = 0
    if probe_cmd is not None:
        ctx_size = _measure_ctx_size(vm, sig, compiled, name=name, library_name=library_name,
                                     query_symbol=query_symbol, cmd=probe_cmd,
                                     probe=Path(workdir) / "ctx_probe")
    c_text, h_text = render(vm, sig, compiled, name=name, ctx_size=ctx_size,
                            library_name=library_name, query_symbol=query_symbol)
    (src / f"{name}.c").write_text(c_text)
    (src / f"{name}.h").write_text(h_text)
    (out_dir / f"{name}.h").write_text(h_text)

    built = []
    host_object = None
    if cc is not None:
        obj = Path(workdir) / f"{name}.o"
        pic = ["-fPIC"] if cc.pic else []
        cc.run([cc.cc, *C_FLAGS, *cc.extra_flags, *pic, "-c", f"{name}.c", "-o", str(obj)],
               src, "compiling the generated C")
        host_object = obj.read_bytes()  # measured below; obj's path is reused for the archive
        # One relocatable object with only the public API global.
        combined = Path(workdir) / f"{name}_lib.o"
        # The kernel object has no .note.GNU-stack; say the stack is not executable.
        cc.run([cc.cc, "-r", "-nostdlib", "-Wl,-z,noexecstack", "-o", str(combined), str(obj),
                str(kernels)],
               src, "combining objects")
        keep = Path(workdir) / "public.syms"
        public = [f"{name}_{fn}" for fn in PUBLIC_FUNCTIONS]
        keep.write_text("\n".join(public) + "\n")
        cc.run([cc.objcopy, f"--keep-global-symbols={keep}", str(combined)], src,
               "hiding internal symbols")
        lib_a = out_dir / f"lib{name}.a"
        lib_a.unlink(missing_ok=True)
        staged = Path(workdir) / f"{name}.o"
        shutil.copyfile(combined, staged)
        cc.run([cc.ar, "rcsD", str(lib_a), staged.name], staged.parent, "creating the archive")
        built.append(lib_a.name)
        if is_host_triple(compiled.triple):
            lib_so = out_dir / f"lib{name}.so"
            cc.run([cc.cc, "-shared", "-o", str(lib_so), str(combined), "-lm"], src,
                   "linking the shared library")
            built.append(lib_so.name)

    footprint = measure_footprint(kernels.read_bytes(), host_object, ctx_size)
    _, h_text = render(vm, sig, compiled, name=name, ctx_size=ctx_size, library_name=library_name,
                       query_symbol=query_symbol, footprint=footprint)
    (src / f"{name}.h").write_text(h_text)
    (out_dir / f"{name}.h").write_text(h_text)
    states = [_tensor(t) for t in sig.states]
    state_bytes, _ = _state_layout(states)
    manifest = {
        "name": name,
        "target": "cpu",
        "triple": compiled.triple,
        "cpu": compiled.cpu,
        "compiler_version": compiled.compiler_version,
        **sig.to_json(),
        "state_bytes": state_bytes,
        "state_offsets": [s["offset"] for s in states],
        "ctx_size": ctx_size,
        "ctx_align": CTX_ALIGN,
        "footprint": footprint,
        "c_flags": [*C_FLAGS, *(cc.extra_flags if cc else ())],
        "arena_bytes": vm.arena_bytes,
        "arena_pools": [list(p) for p in vm.pools],
        "kernel_library": library_name,
        "kernel_query_symbol": query_symbol,
        "link_libs": ["m"],
        "files": sorted(built + [f"{name}.h", f"{name}.json", *CMAKE_FILES(name)]) + sorted(
            f"src/{p.name}" for p in src.iterdir()),
    }
    (out_dir / f"{name}.json").write_text(json.dumps(manifest, indent=2) + "\n")
    write_cmake_files(out_dir, manifest)
    return manifest
