"""The sequence-rule registry and what a rule sees (``SeqOp``).

The replay at T=1 (``replay.py``) calls ``apply_seq_rule`` for a node with
at least one ``seq`` input; it aligns the inputs' frames and calls the op's
rule from ``SEQ_RULES``. The rules register themselves with ``@rule``:
per-step ops in ``rules.py``, ops that mix time steps in ``time_rules.py``
(both build on this module only, so neither imports the other's registry).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable

import numpy as np

from ..streamify_keras.time_meta import Seq, per_step_seq
from .graphdef import NotIncremental, scope, tname
from .meta import STATIC_KINDS, Meta

SEQ_RULES: dict[str, Callable[["SeqOp"], None]] = {}


def rule(*ops: str):
    """Register the decorated function as the sequence rule of ``ops``."""
    def register(fn):
        for op in ops:
            SEQ_RULES[op] = fn
        return fn
    return register


@dataclass
class SeqOp:
    """A node with a whole-sequence input, as a rule sees it."""

    em: Any  # the replay.Emitter
    node: Any  # NodeDef
    ins: list[str]  # data inputs
    metas: list[Meta]
    k0: int  # the first input with a time axis ...
    a: int  # ... and that axis
    x: Any  # that input at T=1
    rank: int

    @property
    def op(self) -> str:
        return self.node.op

    def fail(self, msg: str):
        self.em.fail(self.node, msg)

    def tensor(self, k: int):
        name = tname(self.ins[k])
        return self.em.overrides.get(name, self.em.tensors[name])

    @property
    def frames(self) -> Seq:
        """The chunk record of the (aligned) time-dependent inputs."""
        return self.metas[self.k0].frames or Seq(1, 0, -1)

    @property
    def valid_from(self) -> int:
        return max(m.valid_from for m in self.metas)

    def em_scope(self):
        import tensorflow as tf

        return tf.name_scope(scope(self.node.name))

    def const(self, pos: int) -> np.ndarray:
        return self.em.const_value(self.node, pos)

    def emit(self) -> list:
        """The op itself, rebuilt on the T=1 inputs."""
        return self.em.emit_generic(self.node)

    def set(self, outs, metas):
        """Outputs and their metas; a ``seq`` output without a record holds
        the same frames as the inputs (a per-step op: frames from before
        the stream may now be non-zero), a ``step`` one is defined from the
        inputs' first valid step on."""
        inherited = []
        for m in metas:
            if m.kind == "seq" and m.frames is None:
                passes = self.op in S2B_PASS and m.s2b is None
                m = replace(m, frames=per_step_seq(self.frames),
                            s2b=self.metas[self.k0].s2b if passes else m.s2b)
            if m.kind in ("seq", "step"):
                m = replace(m, valid_from=max(m.valid_from, self.valid_from))
            inherited.append(m)
        self.em.set(self.node, outs, inherited)

    def no_length(self):
        for k, m in enumerate(self.metas):
            if m.kind == "static_t" and not self.repeats_one_frame(k):
                self.fail(f"input {k} ('{self.ins[k]}') is computed from the sequence "
                          "length, which a stream does not know")

    def repeats_one_frame(self, k: int) -> bool:
        """Whether input ``k``, computed from the sequence length, is one
        time-independent value repeated over the sequence's frames: a
        constant tiled (``tf.tile(c, [1, tf.shape(x)[1], 1])``) or broadcast
        to the sequence's frames, or a Fill of a constant, whose shape
        depends on the length at the time axis alone. Then each frame is
        that value: a per-frame constant."""
        if self.metas[k].kind != "static_t":
            return False
        node = self.source_node(self.ins[k])
        if node is None or node.op not in ("Tile", "BroadcastTo", "Fill"):
            return False
        value_in, shape_in = (node.input[1], node.input[0]) if node.op == "Fill" else \
            (node.input[0], node.input[1])
        value = self.em.metas.get(tname(value_in))
        if value is None or value.kind != "static" or \
                self._time_entries(shape_in) != {self.a}:
            return False
        if node.op == "Fill":
            return True  # (of a scalar: one value)
        source = self.em.tensors.get(tname(value_in))
        if source is None:
            return False
        # (the repeated value has one frame, or none, along the time axis)
        pos = self.a - (self.rank - source.shape.rank)
        return pos < 0 or source.shape[pos] == 1

    def source_node(self, name: str):
        """The node that computes tensor ``name``, through identities."""
        from .graphdef import parse_tensor

        node = self.em.g.nodes.get(parse_tensor(name)[0])
        while node is not None and node.op in ("Identity", "Snapshot"):
            node = self.em.g.nodes.get(parse_tensor(node.input[0])[0])
        return node

    def _time_entries(self, shape: str) -> set[int] | None:
        """The entries of the shape vector ``shape`` that are a sequence's
        length (its Shape's time entry, or tf.shape(x)[axis] in a Pack);
        None where another entry depends on the length in another way."""
        node = self.source_node(shape)
        meta = self.em.metas.get(tname(shape))
        if node is None or meta is None:
            return None
        if node.op == "Shape":
            return {meta.axis} if meta.kind == "static_t" and meta.axis is not None else set()
        if node.op != "Pack":
            return None if meta.kind == "static_t" else set()
        entries = set()
        for i, item in enumerate(node.input):
            if self.em.metas.get(tname(item), Meta("static")).kind != "static_t":
                continue
            if not self._is_time_length(item):
                return None
            entries.add(i)
        return entries

    def _is_time_length(self, name: str) -> bool:
        """``tf.shape(x)[a]`` for x's time axis a."""
        import tensorflow as tf

        node = self.source_node(name)
        if node is None or node.op != "StridedSlice" or node.attr["shrink_axis_mask"].i != 1:
            return False
        shape = self.em.metas.get(tname(node.input[0]))
        begin = tf.get_static_value(self.em.tensors.get(tname(node.input[1])))
        return (self.source_node(node.input[0]).op == "Shape" and shape is not None
                and shape.axis is not None and begin is not None and np.size(begin) == 1
                and int(np.ravel(begin)[0]) == shape.axis)

    def others_static(self, check_length: bool = True):
        """Only input ``k0`` may depend on time."""
        if check_length:
            self.no_length()
        for k, m in enumerate(self.metas):
            if k != self.k0 and m.kind not in STATIC_KINDS:
                self.fail(f"input {k} ('{self.ins[k]}') is time-dependent; only input "
                          f"{self.k0} may be")

    def unsupported(self):
        if self._reverses_time():
            self.fail(f"op {self.op} reverses the time axis (axis {self.a} of input "
                      f"'{self.ins[self.k0]}'), as the backward half of a "
                      "bidirectional_dynamic_rnn, a Keras Bidirectional or go_backwards "
                      "does, so step t depends on frames not yet received: it cannot stream "
                      "(a Keras model of fixed length builds from its .keras or .h5 file as "
                      "a fixed window)")
        self.fail(f"op {self.op} on a time-dependent tensor is not supported: tfaot does not "
                  f"know how it treats the time axis (input '{self.ins[self.k0]}' has it at "
                  f"{self.a}), so it cannot tell whether it mixes time steps")

    def _reverses_time(self) -> bool:
        """A ReverseV2 over the time axis, or a ReverseSequence along it; it
        was told as an op whose treatment of time tfaot does not know."""
        if self.op == "ReverseSequence":
            return self.node.attr["seq_dim"].i == self.a
        if self.op != "ReverseV2" or self.k0 != 0:
            return False
        try:
            axes = np.atleast_1d(self.const(1))
        except Exception:  # noqa: BLE001 - axes computed at run time: the generic words
            return False
        return any(int(x) == self.a for x in axes)  # (a negative axis: the generic words)


# Ops that may sit between SpaceToBatchND and BatchToSpaceND (a dilated conv).
S2B_PASS = {"ExpandDims", "Squeeze", "Identity", "Snapshot", "BatchToSpaceND"}
S2B_OPS = S2B_PASS | {"Conv2D", "DepthwiseConv2dNative"}


def apply_seq_rule(em, node, ins, metas) -> None:
    k0, a = next((k, m.axis) for k, m in enumerate(metas) if m.kind == "seq")
    if any(m.s2b for m in metas) and node.op not in S2B_OPS:
        em.fail(node, "sits between SpaceToBatchND and BatchToSpaceND of a dilated "
                "convolution over time, which tfaot only streams around a Conv2D")
    metas = _aligned(em, node, ins, metas)
    try:
        x = em.overrides.get(tname(ins[k0]), em.tensors[tname(ins[k0])])
        s = SeqOp(em, node, ins, metas, k0, a, x, x.shape.rank)
        SEQ_RULES.get(node.op, SeqOp.unsupported)(s)
    finally:
        em.overrides.clear()


def _aligned(em, node, ins, metas) -> list[Meta]:
    """Several sequences combined by one op hold the same frames: the less
    delayed ones go through a delay line (``em.overrides`` holds them)."""
    seqs = [k for k, m in enumerate(metas) if m.kind == "seq"]
    records = {k: metas[k].frames or Seq(1, 0, -1) for k in seqs}
    if len({(f.n, f.delay, f.end, f.length) for f in records.values()}) <= 1:
        return metas
    first = records[seqs[0]]
    for f in records.values():
        if (f.n, f.end, f.length) != (first.n, first.end, first.length):
            raise NotIncremental(f"node '{node.name}' (op {node.op}) combines sequences "
                                 "whose frames do not line up (different strides, crops or "
                                 "lengths in time)")
    target = max(f.delay for f in records.values())
    dirty = any(f.dirty for f in records.values())
    out = list(metas)
    for k in seqs:
        f, m = records[k], metas[k]
        if f.delay != target:
            gap = target - f.delay
            v = em.tensors[tname(ins[k])]
            cat = em.time.buffer((node.name, "delay", k), v, gap, m.axis, node.name)
            index = [slice(None)] * len(v.shape)
            index[m.axis] = slice(0, f.n)
            em.overrides[tname(ins[k])] = cat[tuple(index)]
            em.row(node, "time align", buffer=gap)
        out[k] = replace(m, frames=replace(f, delay=target, dirty=dirty))
    return out
