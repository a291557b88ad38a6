"""The backend: compile -> emit -> package, in one call.

``build_library`` is what the ``tfaot build`` orchestrator calls once the
frontend has produced MLIR and a ``ProgramSignature``. It writes only into
``out_dir`` (results) and ``workdir`` (intermediates the caller may keep).
"""
from __future__ import annotations

from contextlib import nullcontext
from dataclasses import replace
from pathlib import Path

from . import compile as compile_mod
from .. import emit as emit_mod
from ..lower import input_ranges
from .. import package as package_mod
from ..errors import DroppedConstant
from ..lower import weight_globals
from ..names import check_name
from ..program import ProgramSignature, StreamInfo
from ..target import Target
from ..target_options import make_target


def build_library(mlir_text: str, signature: ProgramSignature, out_dir: Path, *, name: str,
                  target: Target | None = None, triple: str | None = None,
                  cpu: str | None = None, workdir: Path, progress=None,
                  stream: StreamInfo | None = None) -> dict:
    """Builds the C library of one model; returns its manifest (also NAME.json).

    ``target`` defaults to ``make_target("cpu", triple, cpu)``: the host's
    triple and CPU unless named. ``progress``, if given, has a
    ``stage(name, detail)`` context manager (``pipeline.Progress``) that
    reports each stage. ``stream`` (how steps relate to the model's time
    axis) goes into the manifest. Raises ``TfaotError`` on any failure.
    """
    def stage(label: str, detail: str = ""):
        return progress.stage(label, detail) if progress else nullcontext()

    check_name(name)
    target = target or make_target("cpu", triple, cpu)
    workdir = Path(workdir)
    id_ranges, mlir_text = _id_ranges(mlir_text, signature, progress)
    try:
        compiled, vm = _compile_and_emit(mlir_text, workdir, name, target, stage)
    except DroppedConstant as e:
        # Weight packing hoists the weights' layout changes into __init; where
        # iree-compile then loses one (a transposed convolution's filter in a
        # U-Net), the same program without packing keeps every weight inline.
        if target.weight_packing:
            raise DroppedConstant(f"{e} With --pack-weights; --no-pack-weights may avoid it.",
                                  e.where) from None
        if not target.for_weights(compile_mod.constant_bytes(mlir_text)).pack_weights:
            raise
        warn = getattr(progress, "warn", None)
        if warn is not None:
            warn(f"iree-compile lost a weight that packing moved to init ({e.where}: its "
                 "dropped-constant bug, docs/notes/iree-notes.md 1.4); building again "
                 "without weight packing, as --no-pack-weights")
        target = replace(target, weight_packing=False)
        compiled, vm = _compile_and_emit(mlir_text, workdir, name, target, stage)
    with stage("package"):
        return package_mod.package(vm, signature, compiled, Path(out_dir), name=name,
                                   workdir=workdir / "package", stream=stream,
                                   id_ranges=id_ranges)


def _compile_and_emit(mlir_text: str, workdir: Path, name: str, target: Target, stage):
    """iree-compile's VM program and kernels, and the C host program emitted from them."""
    with stage("compile", f"iree-compile, {target.describe()}"):
        compiled = compile_mod.compile_module(mlir_text, workdir / "compile", name=name,
                                              target=target)
    with stage("emit"):
        vm = emit_mod.translate(
            compiled.vm_asm, prefix=name, host_sync=target.is_gpu,
            external_rodata=weight_globals.is_weights_rodata if target.external_weights else None,
            executable_sources=compiled.executable_sources)
    return compiled, vm


def _id_ranges(mlir_text: str, signature: ProgramSignature,
               progress) -> tuple[dict[int, dict], str]:
    """The integer inputs that index a table and their valid ids
    (input_ranges.py), and the module with the ids it cannot check clamped
    into their tables; what the build checks, and cannot, goes to the notes."""
    analysis = input_ranges.analyze(mlir_text, len(signature.inputs))
    ranges = input_ranges.input_id_ranges(analysis, signature.inputs)
    note = getattr(progress, "note", None)
    if note is not None:
        for index, r in ranges.items():
            t = signature.inputs[index]
            whole = len(r["runs"]) == 1 and r["runs"][0][:2] == [0, t.size]
            note(f"input '{t.name}' indexes a table: the step refuses ids outside "
                 f"[{r['min']}, {r['end']})" +
                 ("" if whole else " (its elements' ranges are in the manifest's id_range)"))
    warn = getattr(progress, "warn", None)
    for text in analysis.unchecked if warn is not None else ():
        warn(f"{text}: those ids are not range-checked; the step clamps them into the table "
             "(an id out of range reads its first or last row)")
    return ranges, analysis.clamped_text or mlir_text
