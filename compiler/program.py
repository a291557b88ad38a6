"""The step program: what the streamify stage hands to the import stage.

A step program is a pure TensorFlow function

    pure_step(x_t, *states) -> (y_t, *new_states)

plus the description of its tensors. The import stage turns it into MLIR in
which the states live in ``ml_program`` globals; the backend only ever sees
the ``TensorInfo`` lists below (they become the header #defines and the
manifest).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass(frozen=True)
class TensorInfo:
    """One step input, step output or state tensor (batch 1 included in shape)."""

    name: str
    dtype: str  # numpy dtype name, e.g. "float32"
    shape: tuple[int, ...]

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "dtype": self.dtype, "shape": list(self.shape)}


@dataclass(frozen=True)
class StateInfo(TensorInfo):
    """A recurrent state tensor; ``initial`` is its value after init/reset."""

    initial: np.ndarray = field(default=None, compare=False, repr=False)
    layer: str = ""


@dataclass(frozen=True)
class ProgramSignature:
    """The interface of a streaming model, as firmware sees it."""

    inputs: tuple[TensorInfo, ...]
    outputs: tuple[TensorInfo, ...]
    states: tuple[StateInfo, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "inputs": [t.to_json() for t in self.inputs],
            "outputs": [t.to_json() for t in self.outputs],
            "state": [t.to_json() for t in self.states],
        }


@dataclass
class StepProgram:
    """Output of the streamify stage, input of the import stage.

    ``pure_step`` is a TensorFlow ConcreteFunction taking
    ``(x_t, *states)`` with the shapes of ``signature.inputs`` and
    ``signature.states`` and returning ``(y_t, *new_states)`` with the shapes
    of ``signature.outputs`` and ``signature.states``. It may capture
    variables; the import stage freezes them into constants.
    """

    source: str  # the model path, for messages
    format: str  # "keras", "h5", "savedmodel", "graphdef", ...
    signature: ProgramSignature
    pure_step: Any  # tf ConcreteFunction
    # What `tfaot inspect` prints besides the signature: layers or loops found,
    # how each tensor was classified, the parameter count. JSON-serialisable.
    report: dict[str, Any] = field(default_factory=dict)
