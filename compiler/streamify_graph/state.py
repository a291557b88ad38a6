"""The streaming state of a step program: every tensor kept between two steps.

Loop variables that change every step (an LSTM's h and c) are added by the
loop replay; a rule that needs memory of its own (a ring buffer for a
streaming convolution, a running pooling window) adds it the same way. The
registry is filled before the step function is traced: its order is the
order of the state arguments and results of ``pure_step``, and its names are
the C names of the state tensors.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Hashable

import numpy as np

from ..program import StateInfo

# Name parts that say nothing about the layer ("while", "PartitionedCall_3").
_NOISE = re.compile(r"(Stateful)?PartitionedCall(_\d+)?|while|while_context|__loop")


@dataclass(frozen=True)
class StateSlot:
    key: Hashable  # who owns it, e.g. (loop name, loop variable index)
    info: StateInfo  # name, dtype, shape, initial value, layer/node


class StateRegistry:
    """The ordered list of state tensors; ``add`` appends one."""

    def __init__(self):
        self.slots: list[StateSlot] = []
        self._names: set[str] = set()

    def add(self, key: Hashable, initial: Any, layer: str, kind: str = "s") -> StateInfo:
        """Register state ``key`` with its initial value; ``layer`` is the loop or node
        that owns it. The name is ``<layer>_<kind><k>`` (``lstm_1_s0``, ``conv_buf0``)."""
        if any(s.key == key for s in self.slots):
            raise ValueError(f"state {key!r} is registered twice")
        initial = np.asarray(initial)
        info = StateInfo(self._name(layer, kind), initial.dtype.name, tuple(initial.shape),
                         initial=initial, layer=layer)
        self.slots.append(StateSlot(key, info))
        return info

    @property
    def keys(self) -> list[Hashable]:
        return [s.key for s in self.slots]

    @property
    def infos(self) -> tuple[StateInfo, ...]:
        return tuple(s.info for s in self.slots)

    def name_of(self, key: Hashable) -> str:
        return next(s.info.name for s in self.slots if s.key == key)

    def specs(self) -> list:
        """``tf.TensorSpec`` of every state, in order (the step function's arguments)."""
        import tensorflow as tf

        return [tf.TensorSpec(s.info.shape, tf.as_dtype(s.info.dtype), name=f"state_{k}")
                for k, s in enumerate(self.slots)]

    def __len__(self) -> int:
        return len(self.slots)

    def _name(self, layer: str, kind: str) -> str:
        parts = [p for p in layer.split("/") if not _NOISE.fullmatch(p)]
        base = re.sub(r"[^A-Za-z0-9_]+", "_", "_".join(parts)).strip("_") or "loop"
        k = sum(1 for u in self._names if u.startswith(f"{base}_{kind}"))
        name = f"{base}_{kind}{k}"
        while name in self._names:
            k += 1
            name = f"{base}_{kind}{k}"
        self._names.add(name)
        return name
