"""Runs a built library's steps in a child process, away from TensorFlow.

A GPU driver may carry its own LLVM (Mesa's lavapipe and llvmpipe do, as do
some vendor drivers), and TensorFlow exports its own LLVM's symbols to the
whole process: with both in one process the driver's shader compiler
crashes or hangs (measured: lavapipe in a process that imported TensorFlow
segfaulted at the first dispatch). ``tfaot verify`` and the tests therefore
step GPU libraries in a child process that never imports TensorFlow; CPU
libraries run in-process.

    python -m tfaot.harness_process LIB_DIR INPUTS.npz OUTPUTS.npz

reads ``x0, x1, ...`` (one (steps, *input i) array per input) and writes
``y0, y1, ...`` (one (steps, *output i) array per output).
"""
from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from ..errors import TfaotError
from ..target import GPU_KINDS


#: How the child reports a refused token id (harness.InputRangeError) to the parent.
_RANGE_TAG = "tfaot: input-range: "


def needs_own_process(manifest: dict) -> bool:
    """GPU libraries run away from TensorFlow (see the module docstring)."""
    return manifest.get("target") in GPU_KINDS


def load_to_run(lib_dir: Path, *, name: str | None = None):
    """A library for ``run_sequence``: loaded, not initialised, where this
    machine runs its code; its manifest alone (a ``harness.LibrarySpec``)
    where it is built for another machine (QEMU runs it: verify.emulate)."""
    from . import harness
    from .emulate import needs_emulator

    spec = harness.load_spec(lib_dir, name=name)
    if needs_emulator(spec.manifest):
        return spec
    return harness.load(lib_dir, name=spec.name, init=False)


def run_sequence(lib, xs: list[np.ndarray]) -> list[tuple]:
    """Runs len(xs[0]) steps from a fresh init; returns each step's outputs.

    ``lib`` is a ``harness.Model`` (loaded with ``init=False`` for GPU
    libraries), or the ``harness.LibrarySpec`` of a library built for another
    machine (run under QEMU: verify.emulate); ``xs`` has one (steps, *input
    i) array per input.
    """
    from . import emulate

    if emulate.needs_emulator(lib.manifest):
        return emulate.run_sequence(lib, xs)
    if not needs_own_process(lib.manifest):
        lib.init()
        return _step_all(lib, xs)
    ys = run_in_child(lib.dir, xs, name=lib.name)
    return [tuple(y[m] for y in ys) for m in range(len(xs[0]))]


def run_in_child(lib_dir: Path, xs: list[np.ndarray], *, name: str | None = None,
                 timeout: float = 600) -> list[np.ndarray]:
    """Steps the library at ``lib_dir`` over ``xs`` in a child process."""
    with tempfile.TemporaryDirectory(prefix="tfaot-steps-") as tmp:
        inputs, outputs = Path(tmp) / "inputs.npz", Path(tmp) / "outputs.npz"
        np.savez(inputs, **{f"x{i}": x for i, x in enumerate(xs)})
        cmd = [sys.executable, "-m", "tfaot.verify.process", str(lib_dir), str(inputs),
               str(outputs), *([name] if name else [])]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                              check=False)
        if proc.returncode != 0 or not outputs.exists():
            lines = (proc.stderr or proc.stdout).strip().splitlines()
            refused = [line for line in lines if line.startswith(_RANGE_TAG)]
            if refused:  # a token id out of range: the same error as in-process
                from .harness import InputRangeError

                info = json.loads(refused[-1][len(_RANGE_TAG):])
                raise InputRangeError(info.pop("message"), **info)
            why = lines[-1] if lines else f"exit code {proc.returncode}"
            raise TfaotError(f"{lib_dir}: running the library failed: {why}")
        with np.load(outputs) as data:
            return [data[f"y{i}"] for i in range(len(data.files))]


def _step_all(lib, xs: list[np.ndarray]) -> list[tuple]:
    """One step per row of ``xs`` (one array per input); each step's outputs."""
    steps = []
    for m in range(len(xs[0])):
        y = lib.step(xs[0][m] if len(xs) == 1 else tuple(x[m] for x in xs))
        steps.append(y if isinstance(y, tuple) else (y,))
    return steps


def main(argv: list[str]) -> int:
    from . import harness

    lib_dir, inputs, outputs = Path(argv[0]), Path(argv[1]), Path(argv[2])
    try:
        lib = harness.load(lib_dir, name=argv[3] if len(argv) > 3 else None)
        with np.load(inputs) as data:
            xs = [data[f"x{i}"] for i in range(len(data.files))]
        steps = _step_all(lib, xs)
        lib.close()
    except harness.InputRangeError as e:
        print(_RANGE_TAG + json.dumps({"message": str(e), "input": e.input, "id": e.id,
                                       "valid": list(e.valid), "element": e.element,
                                       "step": e.step, "sample": e.sample}), file=sys.stderr)
        return 1
    except TfaotError as e:
        print(f"tfaot: error: {e}", file=sys.stderr)
        return 1
    np.savez(outputs, **{f"y{i}": np.stack([s[i] for s in steps])
                         for i in range(len(steps[0]))})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
