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


@dataclass
class CCompiler:
    """The C compiler and binutils used to build the library."""

    cc: str
    ar: str
    objcopy: str
    nm: str
    extra_flags: tuple[str, ...] = ()

    @classmethod
    def for_triple(cls, triple: str) -> "CCompiler | None":
        if is_host_triple(triple):
            return cls(cc=os.environ.get("CC", "cc"), ar="ar", objcopy="objcopy", nm="nm")
        parts = triple.split("-")
        if len(parts) >= 3 and "linux" in triple:
            gnu = f"{parts[0]}-linux-gnu"
            if shutil.which(f"{gnu}-gcc"):
                return cls(cc=f"{gnu}-gcc", ar=f"{gnu}-ar", objcopy=f"{gnu}-objcopy", nm=f"{gnu}-nm")
        return None

    def run(self, args: list[str], cwd: Path, what: str) -> None:
        proc = subprocess.run(args, cwd=cwd, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            msg = (proc.stderr or proc.stdout).strip().splitlines()
            first = next((ln for ln in msg if "error" in ln), msg[0] if msg else "")
            raise TfaotError(f"package: {what} failed ({' '.join(args[:1])}): {first}")


def render(vm: emit_mod.VMProgram, sig: ProgramSignature, compiled: CompiledModule, *,
           name: str, ctx_size: int, library_name: str, query_symbol: str) -> tuple[str, str]:
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
            "C API of this version supports exactly one step input and one step output")
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
    cc = CCompiler.for_triple(compiled.triple)
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
    if cc is not None:
        obj = Path(workdir) / f"{name}.o"
        cc.run([cc.cc, *C_FLAGS, *cc.extra_flags, "-fPIC", "-c", f"{name}.c", "-o", str(obj)],
               src, "compiling the generated C")
        # One relocatable object with only the public API global.
        combined = Path(workdir) / f"{name}_lib.o"
        cc.run([cc.cc, "-r", "-nostdlib", "-o", str(combined), str(obj), str(kernels)],
               src, "combining objects")
        keep = Path(workdir) / "public.syms"
        public = [f"{name}_{fn}" for fn in ("ctx_size", "init", "reset", "step", "step_n",
                                             "deinit", "status_string")]
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

    manifest = {
        "name": name,
        "target": "cpu",
        "triple": compiled.triple,
        "cpu": compiled.cpu,
        "compiler_version": compiled.compiler_version,
        **sig.to_json(),
        "ctx_size": ctx_size,
        "ctx_align": CTX_ALIGN,
        "arena_bytes": vm.arena_bytes,
        "arena_pools": [list(p) for p in vm.pools],
        "kernel_library": library_name,
        "kernel_query_symbol": query_symbol,
        "link_libs": ["m"],
        "files": sorted(built + [f"{name}.h", f"{name}.json"]) + sorted(
            f"src/{p.name}" for p in src.iterdir()),
    }
    (out_dir / f"{name}.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest
