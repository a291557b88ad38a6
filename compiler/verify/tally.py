"""The comparison of a library's outputs with TensorFlow's, output by output:
the largest abs error, and NaN/Inf told apart (``tfaot verify``'s report)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class VerifyResult:
    output: str
    steps: int
    max_abs_error: float  # over the steps where both sides are finite
    tolerance: float
    unit: str = "steps"  # what ``steps`` counts
    # The first place where one side is NaN or Inf and the other is not (or
    # a different non-finite value): a failure whatever the tolerance.
    mismatch: str | None = None
    # Steps where both sides hold the same NaN/Inf (TensorFlow's output is
    # not finite there, and the library agrees), and the first of them.
    nonfinite_steps: int = 0
    first_nonfinite: str | None = None
    # TensorFlow's output was the same at every step compared, or varied by
    # no more than the tolerance (``spread``: by how much at most)
    constant: bool = False
    spread: float = 0.0
    # Why the tolerance is what it is, where the default's rule is not all of it
    tolerance_note: str | None = None
    # On a failure where TensorFlow's own values move by a notable share of
    # the tolerance with the weights moved by one f32 rounding step: what
    # that says (verify/sensitivity.py)
    rounding_note: str | None = None
    # What TensorFlow ran, where that is not the model as given (Case.reference_note)
    reference_note: str | None = None

    @property
    def ok(self) -> bool:
        return self.mismatch is None and bool(self.max_abs_error <= self.tolerance)

    def describe(self) -> str:
        """The one line `tfaot verify` prints for this output."""
        line = (f"{self.output}: max abs error {self.max_abs_error:.3g} over {self.steps} "
                f"{self.unit} (tolerance {self.tolerance:g}): {'ok' if self.ok else 'FAIL'}")
        if self.mismatch:
            line += f": {self.mismatch}"
        if self.nonfinite_steps:
            line += (f" (NaN/Inf in both TensorFlow and the library at {self.nonfinite_steps} "
                     f"of them, first at {self.first_nonfinite})")
        if self.reference_note:
            line += f"\n  note: {self.reference_note}"
        if self.tolerance_note:
            line += f"\n  note: {self.tolerance_note}"
        if self.rounding_note and not self.ok:
            line += f"\n  note: {self.rounding_note}"
        if self.constant and self.spread == 0:
            line += (f"\n  note: TensorFlow's {self.output} is the same at every one of these "
                     f"{self.steps} {self.unit}, whatever the input, so this check says "
                     "little (an untrained model? batch norm statistics that zero "
                     "everything?)")
        elif self.constant:
            line += (f"\n  note: TensorFlow's {self.output} varies by at most "
                     f"{self.spread:.3g} over these {self.steps} {self.unit}, within the "
                     "tolerance, so a library that ignored its input would pass too "
                     "(inputs that the model scales to almost nothing, as a Rescaling "
                     "of 1/255 does to verify's normal samples? an untrained model?)")
        return line


class ErrorTally:
    """The comparison of one output, step by step.

    Finite pairs give the abs error. A NaN or Inf on one side only is a
    mismatch (Python's ``max(0.0, nan)`` is 0.0 and numpy's max of a NaN is
    NaN, so non-finite values are told apart here instead of inside a max):
    the first one is kept, with its step. The same NaN/Inf on both sides
    agrees with TensorFlow; those steps are counted and reported.
    """

    def __init__(self):
        self.max_abs_error = 0.0
        self.steps = 0
        self.mismatch: str | None = None
        self.nonfinite_steps = 0
        self.first_nonfinite: str | None = None
        # TensorFlow's smallest and largest value of each element so far
        # (NaN where never finite): how much the output varies over the steps
        self.low: np.ndarray | None = None
        self.high: np.ndarray | None = None

    def add(self, where: str, got, want) -> None:
        """Compares one step's output; ``where`` names the step in messages."""
        got = np.asarray(got, np.float64).ravel()
        want = np.asarray(want, np.float64).ravel()
        self.steps += 1
        finite_want = np.where(np.isfinite(want), want, np.nan)
        if self.low is None:
            self.low, self.high = finite_want, finite_want.copy()
        elif self.low.shape == want.shape:
            self.low = np.fmin(self.low, finite_want)
            self.high = np.fmax(self.high, finite_want)
        finite = np.isfinite(got) & np.isfinite(want)
        if finite.any():
            self.max_abs_error = max(self.max_abs_error,
                                     float(np.abs(got[finite] - want[finite]).max()))
        same = (np.isnan(got) & np.isnan(want)) | (np.isinf(got) & (got == want))
        differ = ~finite & ~same
        if differ.any() and self.mismatch is None:
            k = int(np.flatnonzero(differ)[0])
            self.mismatch = (f"at {where} the library gives {got[k]:.6g} where TensorFlow "
                             f"gives {want[k]:.6g} (element {k})")
        if same.any():
            self.nonfinite_steps += 1
            self.first_nonfinite = self.first_nonfinite or where

    def result(self, output: str, tol: float, steps: int | None = None,
               unit: str = "steps") -> VerifyResult:
        spread = self.spread()
        return VerifyResult(output, self.steps if steps is None else steps,
                            self.max_abs_error, tol, unit, self.mismatch,
                            self.nonfinite_steps, self.first_nonfinite,
                            constant=self.steps > 1 and spread <= tol, spread=spread)

    def spread(self) -> float:
        """How much TensorFlow's output varied over the steps at most, element
        by element: an output that moves by no more than the tolerance cannot
        tell a right library from one that returns a constant (an image
        model's Rescaling(1/255) makes verify's normal inputs almost zero)."""
        if self.low is None or self.low.size == 0:
            return 0.0
        diff = self.high - self.low
        diff = diff[np.isfinite(diff)]
        return float(diff.max()) if diff.size else 0.0
