"""Compile stage: StableHLO + ml_program MLIR -> IREE VM program + kernel object.

The flags come from the ``Target`` (``Target.iree_flags``: the one place where
tfaot's options become iree-compile flags); this module adds the phases and
runs the compiler. The flag set and the reasons for each flag are in
docs/notes/iree-notes.md section 0:

* ``inline-dynamic`` execution model: the host program is a small VM module
  that calls 9 ``hal_inline``/``hal_loader`` imports, which our runtime shim
  implements;
* ``link-static`` + ``static-library-output-path``: kernels land in one
  relocatable object with a single ``<lib>_library_query`` entry point;
* ``inline-constants-max-byte-length`` + ``const-expr-hoisting=false``: the
  workaround for the inline-mode dropped-constant bug (iree-notes 1.4).
* GPU targets (``Target.is_gpu``): weights become mutable globals
  (weight_globals.py), the kernels are SPIR-V inside the VM program (no
  kernel object);
* ``Target.pack_weights`` (hosted targets): data tiling + const-expr
  hoisting pack the weights once in ``__init``, and long matvecs are split
  into short independent reductions first (bench/bench_litert.py).
* Before iree-compile, the MLIR rewrites the Target asks for (small pooling
  windows as slices, tfaot's micro-kernels, weights as globals), in the
  order lower/passes.py gives.
"""
from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from ..lower import microkernel, weight_globals
from ..lower.passes import lower_for_target
from ..errors import TfaotError
from ..target import WEIGHTS_DTYPES, Target

#: The compiler release the backend is tested against (kernel ABI, VM op set).
PINNED_COMPILER_VERSION = "3.13.0"


@dataclass(frozen=True)
class CompiledModule:
    """What iree-compile produced for one model."""

    vm_asm_path: Path        # host program as VM IR text (--output-format=vm-asm)
    kernel_object: Path | None  # CPU: relocatable object with the dispatch functions
    library_query: str | None   # CPU: the object's exported query symbol
    compiler_version: str    # e.g. "3.13.0rc20261016 @ 89ece87b..."
    target: Target
    # {kind: symbol} of tfaot's micro-kernels the object calls (package adds them)
    kernel_symbols: dict[str, str] = field(default_factory=dict)
    # the executables' sources as iree-compile dumped them (CPU targets)
    executable_sources: Path | None = None

    @property
    def triple(self) -> str:
        return self.target.triple

    @property
    def cpu(self) -> str:
        return self.target.cpu

    @property
    def vm_asm(self) -> str:
        return self.vm_asm_path.read_text()


def iree_compile_binary() -> str:
    """The iree-compile of the pinned iree-base-compiler package."""
    try:
        from iree.compiler.tools.binaries import find_tool
    except ImportError as e:  # pragma: no cover - environment problem
        raise TfaotError(
            "iree-base-compiler is not installed; install the pinned version "
            f"(iree-base-compiler=={PINNED_COMPILER_VERSION}.*)") from e
    return find_tool("iree-compile")


@functools.lru_cache(maxsize=None)
def llvm_cpus(triple: str) -> frozenset[str]:
    """The CPU names iree-compile's LLVM accepts for ``triple``'s
    architecture (empty if it does not say: no check then). LLVM lists them
    when asked for an unknown CPU; a misspelt --cpu otherwise failed only in
    iree-compile, after the model was loaded and streamed."""
    try:
        proc = subprocess.run([iree_compile_binary(), f"--iree-llvmcpu-target-triple={triple}",
                               "--iree-llvmcpu-target-cpu=help", "-", "-o", os.devnull],
                              input="", capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired, TfaotError):
        return frozenset()
    m = re.search(r"List of accepted CPUs: (.*)", proc.stdout + proc.stderr)
    return frozenset(c.strip() for c in m.group(1).split(",")) if m else frozenset()


def compiler_version() -> str:
    """The version line of the pinned iree-compile, without the banner."""
    out = subprocess.run([iree_compile_binary(), "--version"], capture_output=True,
                         text=True, check=False).stdout
    m = re.search(r"IREE compiler version (\S+(?: @ \S+)?)", out)
    return m.group(1) if m else out.strip().splitlines()[0] if out.strip() else "unknown"


def _first_error_line(stderr: str) -> str:
    for line in stderr.splitlines():
        if "error:" in line:
            return line.strip()
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    return lines[0] if lines else "iree-compile failed without a message (it may have crashed)"


def _query_symbol(kernel_object: Path) -> str:
    """The single global ``*_library_query`` symbol defined by the object."""
    out = subprocess.run(["nm", "-g", "--defined-only", str(kernel_object)],
                         capture_output=True, text=True, check=False)
    names = [ln.split()[-1] for ln in out.stdout.splitlines()
             if ln.strip().endswith("_library_query")]
    if len(names) != 1:
        raise TfaotError(
            f"kernel object {kernel_object.name} defines {len(names)} library query "
            f"symbols ({', '.join(names) or 'none'}); expected exactly one")
    return names[0]


def undefined_symbols(obj: Path, nm: str = "nm") -> set[str]:
    """The symbols an object file imports (``nm -u``)."""
    proc = subprocess.run([nm, "-u", str(obj)], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise TfaotError(f"reading the symbols of {Path(obj).name} with {nm} failed: "
                         f"{proc.stderr.strip()}")
    return {ln.split()[-1] for ln in proc.stdout.splitlines() if ln.strip()}


#: iree-compile's errors from its own bugs on the GPU targets, and what to do
_GPU_BUGS = {"util.buffer.subspan": "an IREE bug in its GPU host program (iree-base-compiler "
                                    "3.13.0): the model builds for --target cpu"}


def _run_iree_compile(args: list[str], workdir: Path, name: str, target: Target, *,
                      expect: list[Path]) -> None:
    cmd = [iree_compile_binary(), *args]
    with open(workdir / "iree-compile.cmd", "a") as f:
        f.write("iree-compile " + " ".join(args) + "\n")
    proc = subprocess.run(cmd, cwd=workdir, capture_output=True, text=True, check=False)
    if proc.returncode != 0 or not all(p.exists() for p in expect):
        (workdir / "iree-compile.stderr").write_text(proc.stderr)
        how = (f"exit code {proc.returncode}" if proc.returncode >= 0
               else f"killed by signal {-proc.returncode}")
        hint = next((f" ({why})" for what, why in _GPU_BUGS.items()
                     if target.is_gpu and what in proc.stderr), "")
        raise TfaotError(
            f"iree-compile failed ({how}) for model '{name}' ({target.describe()}): "
            f"{_first_error_line(proc.stderr)}{hint}")


def split_allocations(hal_text: str) -> str:
    """Makes every ``hal_inline.buffer.allocate`` of a function distinct.

    Compiler bug worked around here (iree-compile 3.13.0, inline-dynamic):
    the ``hal_inline.buffer.allocate`` import is declared ``nosideeffects``,
    so the VM pipeline's CSE merges two allocations with the same alignment
    and size into ONE buffer. Two live tensors then share memory and results
    are silently wrong (e.g. a new state and an output computed from it).
    Giving each duplicate a slightly larger, unique size (+k bytes) keeps
    them apart; the arena rounds sizes up to 64 bytes, so this costs nothing
    in most cases.
    """
    from iree.compiler import ir

    ctx = ir.Context()
    module = ir.Module.parse(hal_text, ctx)
    changed = False
    with ctx:
        index = ir.IndexType.get()

        def collect(op, out):
            for region in op.regions:
                for block in region.blocks:
                    for child in block.operations:
                        if child.operation.name == "hal_inline.buffer.allocate":
                            out.append(child)
                        collect(child.operation, out)

        def const_value(value):
            owner = value.owner
            if hasattr(owner, "name") and owner.name == "arith.constant":
                return ir.IntegerAttr(owner.attributes["value"]).value
            return None

        for top in module.body.operations:
            allocs: list = []
            collect(top.operation, allocs)
            if len(allocs) < 2:
                continue
            sizes = {const_value(a.operands[1]) for a in allocs}
            groups: dict = {}
            for a in allocs:
                groups.setdefault((a.operands[0], a.operands[1]), []).append(a)
            for group in groups.values():
                for k, a in enumerate(group[1:], start=1):
                    base = const_value(a.operands[1])
                    extra = k
                    if base is not None:
                        while base + extra in sizes:
                            extra += 1
                        sizes.add(base + extra)
                    with ir.InsertionPoint(a), a.location:
                        c = ir.Operation.create("arith.constant", results=[index],
                                                attributes={"value": ir.IntegerAttr.get(index, extra)})
                        total = ir.Operation.create("arith.addi", results=[index],
                                                    operands=[a.operands[1], c.result])
                    a.operands[1] = total.result
                    changed = True
    return str(module) if changed else hal_text


def _compile_to_hal(src: Path, hal_stage: Path, flags: list[str], workdir: Path, *,
                    name: str, target: Target, expect: list[Path]) -> list[str]:
    """Phase 1 of ``compile_module``; returns the flags both phases use.

    IREE evaluates constant expressions at build time (const-eval, with
    const-expr hoisting: --pack-weights) in a module it links itself with
    iree-lld, where tfaot's micro-kernels do not exist. rewrite_matvecs
    leaves ops with constant inputs to IREE; should IREE's folding still make
    a kernel's input constant, the phase runs again without const-eval (the
    expression is then computed by ``__init``, where the kernel is linked).
    """
    for extra in ([], ["--iree-opt-const-eval=false"]):
        try:
            _run_iree_compile([src.name, *flags, *extra, *_dump_sources(target, workdir),
                               "--compile-to=hal", "-o", hal_stage.name],
                              workdir, name, target, expect=expect)
            return [*flags, *extra]
        except TfaotError as e:
            symbol, error = _undefined_kernel(workdir, name), e
            if symbol is None:
                raise
    raise TfaotError(
        f"model '{name}': iree-compile links a call of tfaot's micro-kernel {symbol} into "
        "code it runs itself, where the kernel does not exist; build with --matvec=iree"
    ) from error


#: where phase 1 dumps the executables' sources (emit/dispatch_source.py)
SOURCES_DIR = "sources"


def _dump_sources(target: Target, workdir: Path) -> list[str]:
    """The flag that dumps each executable's source before code generation,
    which the state reuse reads (CPU targets; the folder emptied first)."""
    if target.is_gpu:
        return []
    folder = workdir / SOURCES_DIR
    shutil.rmtree(folder, ignore_errors=True)
    return [f"--iree-hal-dump-executable-sources-to={SOURCES_DIR}"]


def _undefined_kernel(workdir: Path, name: str) -> str | None:
    """The micro-kernel iree-lld found undefined in the last failed iree-compile."""
    stderr = workdir / "iree-compile.stderr"
    text = stderr.read_text() if stderr.exists() else ""
    ours = {microkernel.kernel_symbol(name, dtype, kind)
            for kind in microkernel.KINDS for dtype in WEIGHTS_DTYPES}
    return next((m for m in re.findall(r"undefined symbol: (\S+)", text) if m in ours), None)


_HEX_CONSTANT = re.compile(r'dense<"0x([0-9A-Fa-f]*)">')


def constant_bytes(mlir_text: str) -> int:
    """Bytes of the module's large constants (the weights), from their hex form."""
    return sum(len(m.group(1)) // 2 for m in _HEX_CONSTANT.finditer(mlir_text))


def compile_module(mlir_text: str, workdir: Path, *, name: str, target: Target) -> CompiledModule:
    """Runs iree-compile on ``mlir_text`` for ``target``; artifacts go to ``workdir``.

    ``workdir`` receives ``NAME.mlir`` (the input), ``NAME.vm.mlir`` (host
    program) and ``NAME_kernels.o``; the caller decides whether to keep it.
    """
    target = target.for_weights(constant_bytes(mlir_text))
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    mlir_text, target = lower_for_target(mlir_text, name, target)
    src = workdir / f"{name}.mlir"
    src.write_text(mlir_text)
    vm_asm = workdir / f"{name}.vm.mlir"
    kernels = workdir / f"{name}_kernels.o"
    for stale in (vm_asm, kernels, *(workdir / f"iree-compile.{e}" for e in ("cmd", "stderr"))):
        stale.unlink(missing_ok=True)
    # Phase 1 (to the end of the HAL phase) writes the kernel object; between
    # the phases allocations are made distinct (see split_allocations);
    # phase 2 lowers to the VM program. Relative paths keep temp directories
    # out of anything the compiler records.
    hal_stage = workdir / f"{name}.hal.mlir"
    object_made = [kernels] if target.has_kernel_object else []
    flags = _compile_to_hal(src, hal_stage, target.iree_flags(Path(kernels.name)), workdir,
                            name=name, target=target, expect=[hal_stage, *object_made])
    # What the package stage compiles is what the object imports (a check,
    # not a guess from the MLIR text): no kernel symbol is left undefined.
    kernel_symbols = (microkernel.imported_kernels(undefined_symbols(kernels), name,
                                                   target.weights_dtype)
                      if target.has_kernel_object else {})
    hal_stage.write_text(split_allocations(hal_stage.read_text()))
    _run_iree_compile([hal_stage.name, "--compile-from=hal", *flags, "-o", vm_asm.name],
                      workdir, name, target, expect=[vm_asm])
    if target.weights_as_globals:
        vm_asm.write_text(weight_globals.drop_setters(vm_asm.read_text()))
    return CompiledModule(
        vm_asm_path=vm_asm,
        kernel_object=kernels if target.has_kernel_object else None,
        library_query=_query_symbol(kernels) if target.has_kernel_object else None,
        compiler_version=compiler_version(),
        target=target,
        kernel_symbols=kernel_symbols,
        executable_sources=None if target.is_gpu else workdir / SOURCES_DIR,
    )
