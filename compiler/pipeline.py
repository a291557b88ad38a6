"""Runs the stages in order, with progress lines and timings.

load -> streamify -> import (this file's ``run_frontend``); the backend
stages (compile -> emit -> package) are in ``build_model``. Each stage lives
in its own module; this one only sequences them.
"""
from __future__ import annotations

import os
import re
import shutil
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from .program import StepProgram


@dataclass
class Progress:
    """Prints one line per stage with its wall time (to stderr)."""

    enabled: bool = True
    timings: dict[str, float] = field(default_factory=dict)

    @contextmanager
    def stage(self, name: str, detail: str = ""):
        if self.enabled:
            print(f"tfaot: {name:<10} {detail}".rstrip() + " ...", file=sys.stderr, flush=True)
        start = time.perf_counter()
        yield
        elapsed = time.perf_counter() - start
        self.timings[name] = elapsed
        if self.enabled:
            print(f"tfaot: {name:<10} done in {elapsed:.2f} s", file=sys.stderr, flush=True)


@dataclass
class GraphOptions:
    """Overrides for graph formats (frozen GraphDef, SavedModel)."""

    inputs: str | None = None  # "NAME:D0xD1x...,..."
    outputs: str | None = None  # "NAME,..."
    time_axis: int | None = None


def load_and_streamify(model_path: str, progress: Progress,
                       graph_options: GraphOptions | None = None) -> StepProgram:
    from .tfenv import quiet_tensorflow

    from .load import detect_format, load_model

    detect_format(Path(model_path))  # a missing file fails before TensorFlow loads
    with progress.stage("load", str(model_path)):
        quiet_tensorflow()
        loaded = load_model(model_path)
    with progress.stage("streamify"):
        if loaded.keras_model is not None:
            from .streamify_keras import streamify_keras

            return streamify_keras(loaded.keras_model, str(loaded.path), loaded.format)
        return _streamify_graph(loaded, graph_options or GraphOptions())


def _streamify_graph(loaded, options: GraphOptions) -> StepProgram:
    from .streamify_graph import streamify_graph_model

    return streamify_graph_model(loaded.path, loaded.format, options)


def run_frontend(model_path: str, progress: Progress,
                 graph_options: GraphOptions | None = None) -> tuple[StepProgram, str]:
    """load -> streamify -> import; returns the program and the MLIR text."""
    program = load_and_streamify(model_path, progress, graph_options)
    with progress.stage("import"):
        from .mlir_import import import_program

        return program, import_program(program)


def write_atomically(path: Path, text: str) -> None:
    """Write ``text`` so that ``path`` is either complete or untouched."""
    tmp = path.with_name(f".{path.name}.tfaot-tmp")
    try:
        tmp.write_text(text)
        tmp.replace(path)
    finally:
        if tmp.exists():
            tmp.unlink()


@dataclass
class BuildOptions:
    out_dir: Path | None = None  # default: build/NAME
    name: str | None = None  # default: the model file's stem as a C identifier
    triple: str | None = None  # default: the host's
    cpu: str | None = None  # default: host for the host triple, generic otherwise
    keep_temps: bool = False
    graph_options: GraphOptions = field(default_factory=GraphOptions)


def default_name(model_path: str) -> str:
    """The model file's stem as a C identifier ("kws-v2.keras" -> "kws_v2")."""
    stem = Path(str(model_path).rstrip("/")).name.split(".")[0] or "model"
    name = re.sub(r"[^A-Za-z0-9_]", "_", stem)
    return name if not name[0].isdigit() else f"m_{name}"


def build_model(model_path: str, options: BuildOptions, progress: Progress) -> Path:
    """load -> ... -> package into a folder that appears only when complete.

    Everything is written to a temporary sibling of the output folder, which
    replaces the output folder at the end; a failed build leaves no folder
    behind and an existing one untouched.
    """
    from .backend import build_library
    from .package import check_name

    name = options.name or default_name(model_path)
    check_name(name)
    out_dir = Path(options.out_dir or Path("build") / name)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=out_dir.parent))
    staging.chmod(0o777 & ~_umask())  # mkdtemp makes it private; the result is not
    temps = staging / "temps" if options.keep_temps else Path(tempfile.mkdtemp(prefix="tfaot-"))
    try:
        program, mlir_text = run_frontend(model_path, progress, options.graph_options)
        temps.mkdir(parents=True, exist_ok=True)
        (temps / f"{name}.mlir").write_text(mlir_text)
        build_library(mlir_text, program.signature, staging, name=name, triple=options.triple,
                      cpu=options.cpu, workdir=temps, progress=progress)
        _replace_dir(staging, out_dir)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    finally:
        if not options.keep_temps:
            shutil.rmtree(temps, ignore_errors=True)
    return out_dir


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _replace_dir(new: Path, target: Path) -> None:
    """Move ``new`` to ``target``, replacing an existing folder."""
    if not target.exists():
        new.rename(target)
        return
    old = target.with_name(f".{target.name}.tfaot-old")
    shutil.rmtree(old, ignore_errors=True)
    target.rename(old)
    new.rename(target)
    shutil.rmtree(old, ignore_errors=True)
