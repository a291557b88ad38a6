"""Runs the stages in order, with progress lines and timings.

load -> streamify -> import (this file's ``run_frontend``); the backend
stages (compile -> emit -> package) are in ``build_model``. Each stage lives
in its own module; this one only sequences them.
"""
from __future__ import annotations

import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from .errors import TfaotError
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
    try:
        from .streamify_graph import streamify_graph_model
    except ImportError:
        raise TfaotError(f"{loaded.path}: {loaded.format} models are not supported "
                         "yet; use a .keras or .h5 file") from None
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
