"""A verify case: the inputs a library is run on and what TensorFlow gave.

``tfaot verify`` makes a case from the original model (TensorFlow) and then
checks the library against it. The two halves can run on different
machines: ``--save-case FILE`` writes the case (inputs, references,
tolerance) to an .npz file, and ``tfaot verify --case FILE DIR`` runs the
library on a machine that has no TensorFlow (a GPU server, a board) and
compares. Nothing here imports TensorFlow.

A case is one or more runs, each from a fresh init: one (steps, *input i)
array per input. Each output has a list of checks: which run, which step,
which stream (of a --streams N library; -1 for a one-stream library) and the
value TensorFlow gave there.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..errors import TfaotError
from .tally import ErrorTally, VerifyResult

#: Bumped when the file's layout changes; older files are refused by name.
CASE_VERSION = 1


@dataclass
class Checks:
    """Where one output is compared, and TensorFlow's value there."""
    runs: list[int] = field(default_factory=list)
    steps: list[int] = field(default_factory=list)
    streams: list[int] = field(default_factory=list)
    values: list[np.ndarray] = field(default_factory=list)

    def add(self, run: int, step: int, stream: int, value) -> None:
        self.runs.append(run)
        self.steps.append(step)
        self.streams.append(stream)
        self.values.append(np.asarray(value))


@dataclass
class Case:
    runs: list[list[np.ndarray]]
    checks: list[Checks]  # one per library output, manifest order
    tolerance: float
    unit: str  # what a check counts in the report ("steps", "sequences of 49 frames")
    library: dict  # the tensors of the library the case was made for (_signature)
    #: One tolerance per output where they differ (the default's scaled by
    #: each output's size: compare.output_scale); None: ``tolerance`` for all.
    output_tolerances: list[float] | None = None
    #: Per output, why its tolerance is what it is, where verify says so
    #: (int8 and half-width builds: compare._rounding_spreads); None: nothing to say.
    tolerance_notes: list[str | None] | None = None
    #: What TensorFlow ran, where that is not the model as given
    #: (compare.CHANNELS_FIRST_NOTE); said once, with the first output.
    reference_note: str | None = None

    def tolerance_of(self, k: int) -> float:
        """The tolerance of output ``k``."""
        return self.tolerance if self.output_tolerances is None else self.output_tolerances[k]

    def where(self, k: int, c: int) -> str:
        """Check ``c`` of output ``k`` in messages."""
        checks = self.checks[k]
        stream = f"stream {checks.streams[c]} " if checks.streams[c] >= 0 else ""
        of = f" of sequence {checks.runs[c]}" if len(self.runs) > 1 else ""
        return f"{stream}step {checks.steps[c]}{of}"

    def save(self, path: Path) -> None:
        arrays = {f"x{r}_{i}": x for r, xs in enumerate(self.runs) for i, x in enumerate(xs)}
        for k, checks in enumerate(self.checks):
            shape = tuple(self.library["outputs"][k]["shape"])
            if self.library["streams"] > 1:
                shape = shape[1:]
            arrays[f"run{k}"] = np.asarray(checks.runs, np.int64)
            arrays[f"step{k}"] = np.asarray(checks.steps, np.int64)
            arrays[f"stream{k}"] = np.asarray(checks.streams, np.int64)
            arrays[f"want{k}"] = np.asarray(checks.values, np.float64).reshape(-1, *shape)
        meta = {"version": CASE_VERSION, "runs": [len(xs) for xs in self.runs],
                "tolerance": self.tolerance, "output_tolerances": self.output_tolerances,
                "tolerance_notes": self.tolerance_notes, "reference_note": self.reference_note,
                "unit": self.unit, "library": self.library}
        path = Path(path)
        part = path.with_name(path.name + ".part")
        with open(part, "wb") as f:  # np.savez would append .npz to a bare name
            np.savez_compressed(f, meta=np.array(json.dumps(meta)), **arrays)
        part.replace(path)

    @classmethod
    def load(cls, path: Path) -> "Case":
        try:
            data = np.load(path, allow_pickle=False)
            meta = json.loads(str(data["meta"]))
        except (OSError, ValueError, KeyError) as e:
            raise TfaotError(f"{path}: not a case file written by tfaot verify --save-case "
                             f"({e})") from None
        if meta.get("version") != CASE_VERSION:
            raise TfaotError(f"{path}: case file version {meta.get('version')}; this tfaot "
                             f"reads version {CASE_VERSION}: save the case again")
        with data:
            runs = [[data[f"x{r}_{i}"] for i in range(inputs)]
                    for r, inputs in enumerate(meta["runs"])]
            checks = []
            for k in range(len(meta["library"]["outputs"])):
                checks.append(Checks(list(data[f"run{k}"]), list(data[f"step{k}"]),
                                     list(data[f"stream{k}"]), list(data[f"want{k}"])))
        return cls(runs, checks, meta["tolerance"], meta["unit"], meta["library"],
                   meta.get("output_tolerances"), meta.get("tolerance_notes"),
                   meta.get("reference_note"))


def signature(lib) -> dict:
    """The tensors a case is made for; a library that differs cannot be checked with it."""
    def tensors(specs):
        return [{"name": n, "dtype": str(dt), "shape": list(s)} for n, dt, s in specs]

    return {"name": lib.name, "streams": lib.streams, "inputs": tensors(lib.input_specs),
            "outputs": tensors(lib.output_specs)}


def check_matches(case: Case, lib, case_path) -> None:
    """Refuses a case made for a library with other tensors (another model or build)."""
    have = signature(lib)
    want = case.library
    for key in ("streams", "inputs", "outputs"):
        if have[key] != want[key]:
            raise TfaotError(f"{case_path}: the case was saved for a library with {key} "
                             f"{want[key]}, but {lib.dir} has {have[key]}; save a case from "
                             "the model this library was built from")


def run_case(lib, case: Case, tol: float | None = None) -> list[VerifyResult]:
    """Runs the library on the case's inputs and compares every check."""
    from .process import run_sequence

    outputs = [run_sequence(lib, xs) for xs in case.runs]
    results = []
    for k, checks in enumerate(case.checks):
        tally = ErrorTally()
        for c, (run, step, stream) in enumerate(zip(checks.runs, checks.steps, checks.streams)):
            got = outputs[run][step][k]
            tally.add(case.where(k, c), got[stream] if stream >= 0 else got, checks.values[c])
        result = tally.result(lib.manifest["outputs"][k]["name"],
                              case.tolerance_of(k) if tol is None else tol, unit=case.unit)
        if tol is None and case.tolerance_notes:
            result.tolerance_note = case.tolerance_notes[k]
        if k == 0:
            result.reference_note = case.reference_note
        results.append(result)
    return results
