"""``tf.cond`` inside a v1 loop body, lowered to a select of both branches.

A TF1 cond is a set of ``Switch`` nodes (each tensor a branch reads goes
through ``Switch(tensor, pred)``: output 1 feeds the true branch, output 0
the false one) and one ``Merge`` per result. Inside a loop body that runs
once per step, both branches can simply be computed: every ``Switch`` is
looked through (both outputs are its data input) and every ``Merge``
becomes ``SelectV2(pred, true result, false result)``. That is exact when
both branches are side-effect free, which is checked (a stateful op in a
branch is a ``Fail`` naming it); the predicate is whatever the body
computes it from (the state, the input, a comparison of the time counter).
"""
from __future__ import annotations

from ..frontend.graphdef import static_bool  # noqa: F401 (loops.py takes it from here)
from .graphdef import IDENTITY, Fail, parse_tensor, tname

SWITCH = ("Switch", "RefSwitch")
MERGE = ("Merge", "RefMerge")


class CondLowering:
    """Rewrites of one loop frame's conds: ``through`` for inputs, ``select`` for Merges."""

    def __init__(self, nodes: dict, stop: set[str], frame: str | None):
        self.nodes = nodes
        self.stop = stop  # tensors where a walk back stops (the loop's arguments)
        self.where = f"while frame '{frame}': " if frame else ""  # None: the outer graph
        self._branches: dict[str, tuple[str, str, str]] = {}

    def through(self, t: str) -> str:
        """``t`` with cond Switches looked through (their data input)."""
        t = tname(t)
        while t not in self.stop and getattr(self.nodes.get(parse_tensor(t)[0]), "op",
                                             None) in SWITCH:
            t = tname(self.nodes[parse_tensor(t)[0]].input[0])
        return t

    def _resolve(self, t: str) -> str:
        """Follow Identity chains back (the cond's ``pred_id`` is Identity(pred))."""
        t = tname(t)
        while t not in self.stop:
            n = self.nodes[parse_tensor(t)[0]]
            if n.op not in IDENTITY:
                break
            t = tname(n.input[0])
        return t

    def _branch(self, t: str):
        """Walk back from ``t`` to the cond Switches it depends on: returns the
        (pred, output) pairs found and the nodes on the way. The walk goes
        through conds nested inside (seen by their Merge first, whose Switches
        it then passes) and stops at any other cond's Switches, so it stays in
        the branch (linear in its size, not in the graph's)."""
        inner, seen, sides, work = set(), set(), set(), [tname(t)]
        while work:
            u = work.pop()
            if u in self.stop or u in seen:
                continue
            seen.add(u)
            name, idx = parse_tensor(u)
            n = self.nodes[name]
            if n.op in ("Enter", "RefEnter"):
                continue
            if n.op in MERGE:
                inner.add(self.branches(n)[0])
            elif n.op in SWITCH:
                p = self._resolve(n.input[1])
                if p not in inner:
                    sides.add((p, idx))
                    continue
            work.extend(tname(i.lstrip("^")) for i in n.input)
        return sides, {parse_tensor(u)[0] for u in seen}

    def branches(self, merge) -> tuple[str, str, str]:
        """(pred, true result, false result) of a cond ``Merge`` (memoised)."""
        if merge.name in self._branches:
            return self._branches[merge.name]
        ins = [i for i in merge.input if not i.startswith("^")]
        if len(ins) != 2:
            raise Fail(f"{self.where}node '{merge.name}' ({merge.op}) merges {len(ins)} "
                       "branches; only a two-way tf.cond is supported")
        a, b = self._branch(ins[0])[0], self._branch(ins[1])[0]
        found = []
        for p in sorted({p for p, _ in a | b}):
            ka = {k for q, k in a if q == p}
            kb = {k for q, k in b if q == p}
            if (ka, kb) in (({0}, {1}), ({1}, {0})):
                found.append((p, ins[1] if ka == {0} else ins[0],
                              ins[0] if ka == {0} else ins[1]))
        if len(found) != 1:
            raise Fail(f"{self.where}node '{merge.name}' ({merge.op}): its two inputs are not "
                       "the branches of one tf.cond; this control flow cannot be streamed")
        self._branches[merge.name] = found[0]
        return found[0]

    def select(self, merge, static=None):
        """The NodeDef replacing a cond ``Merge``: SelectV2(pred, true, false), or
        Identity(live branch) where ``static(pred)`` knows the predicate."""
        import tensorflow as tf

        pred, true, false = self.branches(merge)
        known = static(pred) if static else None
        if known is not None:
            node = tf.compat.v1.NodeDef(name=merge.name, op="Identity")
            node.input.append(self.through(true if known else false))
            node.attr["T"].CopyFrom(merge.attr["T"])
            return node
        for branch in (true, false):
            self._check_pure(branch, f"{self.where}node '{merge.name}' ({merge.op})")
        node = tf.compat.v1.NodeDef(name=merge.name, op="SelectV2")
        node.input.extend([pred, self.through(true), self.through(false)])
        node.attr["T"].CopyFrom(merge.attr["T"])
        return node

    def _check_pure(self, branch: str, where: str) -> None:
        """Both branches are computed every step: none may have a side effect."""
        from tensorflow.python.framework import op_def_registry

        for name in sorted(self._branch(branch)[1]):
            n = self.nodes[name]
            op_def = op_def_registry.get(n.op)
            if n.op not in SWITCH and (op_def is None or op_def.is_stateful):
                raise Fail(f"{where}: the tf.cond branch computing '{branch}' has the "
                           f"stateful node '{name}' (op {n.op}); both branches would run "
                           "every step, so it cannot be streamed")


def lower_outer_conds(node_list: list) -> list:
    """tf.conds of the outer graph (outside any loop): a predicate known at build
    time keeps its live branch only (a TF1 ``is_training`` cond around dropout);
    any other is computed on both branches and selected, as inside loop bodies."""
    import tensorflow as tf

    if not any(n.op in MERGE for n in node_list):
        return node_list
    nodes = {n.name: n for n in node_list}
    low = CondLowering(nodes, set(), None)
    out = []
    for n in node_list:
        if n.op in MERGE:
            c = low.select(n, static=lambda p: static_bool(nodes, p))
        else:
            c = tf.compat.v1.NodeDef()
            c.CopyFrom(n)
            c.input[:] = [i if i.startswith("^") else low.through(i) for i in n.input]
        out.append(c)
    return out
