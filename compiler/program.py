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
class InputInfo(TensorInfo):
    """A step input. ``streamed``: it has the model's time axis (each step takes
    the next frame(s)); else it has none and each step takes its whole value
    (a conditioning vector given every step). ``held``: such a value enters
    the sequence itself (broadcast over its frames, into a recurrent layer):
    the model has one value for the whole sequence, so a stream keeps it the
    same from step to step (and verify gives it one value). ``length``: a
    graph's sequence_length, the bound its time index is compared with
    (verify gives it lengths within the steps it compares)."""

    streamed: bool = True
    held: bool = False
    length: bool = False

    def to_json(self) -> dict[str, Any]:
        held = {"held": True} if self.held else {}
        length = {"length": True} if self.length else {}
        return {**super().to_json(), "streamed": self.streamed, **held, **length}


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


@dataclass(frozen=True)
class StreamInfo:
    """How steps relate to the original model's time axis (the manifest's "stream").

    ``mode`` is ``"prefix"`` when step t returns the original model on
    frames 0..t (recurrent models), ``"window"`` when it returns the model
    on the last ``window`` frames (fixed-window models streamed as a sliding
    window), and ``"stateless"`` when each step is one whole inference of
    the model on its input (no time axis). Outputs of steps before
    ``first_valid_step`` are not defined (a window not yet full).

    Step m consumes frames ``[m*P, (m+1)*P)`` (P = ``frames_per_step``, the
    product of the time strides; the step input is then ``(1, P, ...)``).
    In mode "window" its output is the model on the ``window`` frames that
    end ``delay`` frames before the step's last frame. ``recompute`` is
    empty when the stream is incremental, else why each step runs the whole
    window (the exact fallback).

    ``streams`` (``--streams N``): independent streams one context steps
    together; every input, output and state then has a leading axis of N
    (stream i's tensors are row i), in front of the one stream's shape.

    ``output_frames``: frames each output returns a step (empty: one each).
    An output with n > 1 (upsampled in time: a decoder's overlap-add; or a
    branch without another's strides) returns its last n frames, shape
    ``(1, n, ...)``, where one with a frame a step returns ``(1, ...)``.

    ``output_latency``: frames each output comes late (empty: none): one
    whose model output runs past the input's end (a transposed convolution's
    overlap-add without a crop after it: its last frames are sums of frames
    to come) returns its newest final frames, that many before the last
    frame the model gives for the input so far.

    ``end_pads``: graph nodes that pad the sequence's end with as many zeros
    as its length asks for (YAMNet's whole patches); they only complete
    the last window of a sequence that ends, so the stream passes its
    frames through them, and its reference is the model without them.
    """

    mode: str = "stateless"
    time_axis: int | None = None      # the time axis of the original model's input
    fixed_length: int | None = None   # T, when the original model's length is fixed
    frames_per_step: int = 1          # input frames one step consumes
    window: int | None = None         # W for mode "window"
    first_valid_step: int = 0
    delay: int = 0                    # frames between the window's end and the step's last
    recompute: str = ""               # why each step recomputes the whole window ("" = no)
    streams: int = 1                  # independent streams per context (--streams)
    end_pads: tuple[str, ...] = ()    # end paddings passed through (graph nodes)
    output_frames: tuple[int, ...] = ()  # frames per step of each output (empty: 1 each)
    output_latency: tuple[int, ...] = ()  # frames each output comes late (empty: none)

    def frames_of(self, output: int) -> int:
        """How many frames output ``output`` returns a step."""
        return self.output_frames[output] if output < len(self.output_frames) else 1

    def latency_of(self, output: int) -> int:
        """How many frames output ``output`` comes late (``output_latency``)."""
        return self.output_latency[output] if output < len(self.output_latency) else 0

    def to_json(self) -> dict[str, Any]:
        data = {"mode": self.mode, "time_axis": self.time_axis,
                "fixed_length": self.fixed_length, "frames_per_step": self.frames_per_step,
                "window": self.window, "first_valid_step": self.first_valid_step,
                "delay": self.delay, "recompute": self.recompute, "streams": self.streams}
        if self.end_pads:
            data["end_pads"] = list(self.end_pads)
        if any(n != 1 for n in self.output_frames):
            data["output_frames"] = list(self.output_frames)
        if any(self.output_latency):
            data["output_latency"] = list(self.output_latency)
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any] | None) -> "StreamInfo":
        if not data:
            return cls()
        known = set(cls.__dataclass_fields__)
        fields = {k: v for k, v in data.items() if k in known}
        for name in ("end_pads", "output_frames", "output_latency"):
            if name in fields:
                fields[name] = tuple(fields[name])
        return cls(**fields)


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
    # What verify, the harness and firmware need to know about the time axis.
    stream: StreamInfo = field(default_factory=StreamInfo)
    # What owns the variables ``pure_step`` captures (the Keras model): a
    # ConcreteFunction holds them only weakly, so without this reference a
    # garbage collection between streamify and import deletes them.
    owner: Any = field(default=None, repr=False, compare=False)
