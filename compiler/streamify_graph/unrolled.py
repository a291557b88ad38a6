"""Unrolled recurrences: T copies of a cell chained through the state, streamed as a loop.

``tf.compat.v1.nn.static_rnn`` (and ``unroll=True``-style graphs) have no
loop: the input is sliced along time (``Unpack``, ``Split``, or one
``StridedSlice`` per step), and copy k of the cell reads slice k, the same
weights, and the state copy k-1 produced. This module finds that shape:

1. the *slicer*: the first node (in graph order) that cuts an input-dependent
   tensor into N >= 3 per-step pieces;
2. the *level* of every node: the last time step it depends on; the nodes of
   level k are copy k;
3. copy N-1 is the step body (its nodes matched against copy N-2 are the
   cell; the rest of level N-1 is the head, left to the replay); every other
   copy is matched node by node against the body (same op, attributes,
   weights and constants). Copy k+1 reads from copy k the *state*; copy 0
   reads the initial state, a constant (one fed in as a graph input, as
   DeepSpeech's ``previous_state_c``, is refused: the graph then runs a
   whole window per step, its state pairs kept by state_feedback.py).

Work a copy does only for the next one (a peephole's ``w * c_prev``, a state
update the last copy skips) is the *tail*, cloned onto the body. static_rnn
with a sequence_length compares a constant time ``k`` in copy k: a retry
takes such constants as the copies' time index (the step counter in the body).

The outer graph then gets one ``UNROLLED_OP`` pseudo node in place of the
slicer and all copies; the replay imports the body once per step with the
states as arguments. Anything that does not fit (copies that differ, a
state read across several steps, an initial state computed from the input)
leaves the graph as it is, with the reason kept for the build's notice.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .graphdef import COMPARISONS, parse_tensor, tname

UNROLLED_OP = "__TfaotUnrolled"
MIN_STEPS = 3


@dataclass
class Slicer:
    node: str  # the Unpack/Split node, or the first StridedSlice
    nodes: list[str]  # every slicing node (one per step for StridedSlice)
    source: str  # the sliced tensor ("node:i")
    axis: int  # the sliced axis of ``source``
    items: list[str]  # tensor of step k
    squeeze: bool  # the items have the axis removed


@dataclass
class Unrolled:
    name: str  # the pseudo node
    slicer: Slicer
    steps: int
    body: list[Any]  # NodeDefs of copy N-1's cell, in graph order
    statics: list[str]  # outer tensors the body reads that do not depend on time
    states: list[dict]  # {"read": tensor of copy N-2, "new": body tensor, "init": outer tensor}
    outputs: dict[str, tuple[str, int]] = field(default_factory=dict)  # copy tensor -> (body tensor, k)
    removed: set[str] = field(default_factory=set)
    times: list[str] = field(default_factory=list)  # statics that are the step's time index

    def report(self) -> dict:
        return {"name": self.name, "steps": self.steps, "slicer": self.slicer.node,
                "sliced": self.slicer.source, "axis": self.slicer.axis,
                "body_nodes": len(self.body), "states": [s["read"] for s in self.states]}


class NotUnrolled(Exception):
    """The graph is not an unrolled recurrence; the message says why."""


def find_unrolled(nodes: dict, order: list[str], input_names: list[str],
                  const_value, time_consts: dict[str, int] | None = None,
                  structural: bool = False) -> Unrolled:
    """The unrolled recurrence of the outer graph, or ``NotUnrolled``.

    ``input_names``: the graph's inputs (any of them may be sliced);
    ``const_value(tensor)`` returns the value of a Const tensor or None;
    ``time_consts``: {Const node: k}, constants taken as copy k's time index
    (see ``time_consts()``); the body's are fed from the step counter;
    ``structural``: static tensors computed alike are alike (_Ctx.same_static).
    """
    dep = _input_dependent(nodes, order, input_names)
    slicer = _find_slicer(nodes, order, dep, const_value)
    N = len(slicer.items)
    time_consts = {c: k for c, k in (time_consts or {}).items() if 0 <= k < N}
    level: dict[str, int] = dict(time_consts)  # node -> last step it depends on (-1: none)
    item_level = {t: k for k, t in enumerate(slicer.items)}
    sl_nodes = set(slicer.nodes)
    for u in order:
        if u in sl_nodes or u in time_consts:
            continue
        lv = -1
        for i in nodes[u].input:
            if i.startswith("^"):
                continue
            t = tname(i)
            if t in item_level:
                lv = max(lv, item_level[t])
            else:
                lv = max(lv, level.get(parse_tensor(t)[0], -1))
        level[u] = lv
    copies: list[list[str]] = [[] for _ in range(N)]
    for u in order:
        if level.get(u, -1) >= 0:
            copies[level[u]].append(u)
    if any(not c for c in copies):
        raise NotUnrolled(f"time step {next(k for k, c in enumerate(copies) if not c)} of "
                          f"'{slicer.node}' is not used")
    ctx = _Ctx(nodes, level, item_level, const_value, time_consts, structural)
    # The body: copy N-1's nodes that copy N-2 also has.
    prev_match = ctx.match(copies[N - 2], copies[N - 1], N - 2, N - 1, partial=True)
    cell = set(prev_match.values())
    body = [u for u in copies[N - 1] if u in cell]
    if not body:
        raise NotUnrolled("the time steps do not repeat one cell")
    head = [u for u in copies[N - 1] if u not in cell]
    # The tail: work on the state for the next step only depends on no input
    # of its own step, so it has the previous step's level (a peephole's
    # w * c_prev), or it is a state update the last copy skips because nothing
    # reads it (static_rnn's sequence_length selects). The last copy has no
    # tail: it is cloned from copy N-2's onto the body (``_tail_clones``).
    tail = _tail(nodes, order, copies[N - 2], prev_match, cell)
    # Every other copy must be the body exactly (plus the tail).
    maps: dict[int, dict[str, str]] = {}
    tail_maps: dict[int, dict[str, str]] = {}  # tail node -> copy k node
    state_reads: dict[int, dict[tuple[str, int], str]] = {}
    for k in range(N - 1):
        reads: dict[tuple[str, int], str] = {}
        m = ctx.match(copies[k], body, k, N - 1, partial=False, reads=reads)
        extra = [u for u in copies[k] if u not in m]
        used = _same_tail(ctx, extra, m, tail, prev_match, k, N)
        if used is None:
            raise NotUnrolled(f"time step {k} has nodes the last step has not "
                              f"(e.g. '{(extra or tail)[0]}')")
        maps[k] = {b: a for a, b in m.items()}  # body node -> copy k node
        tail_maps[k] = used
        state_reads[k] = reads
    back = {k: {a: b for b, a in mk.items()} for k, mk in maps.items()}  # copy k -> body

    def forward(u: str) -> str | None:
        """The copy N-2 counterpart of copy N-3's node ``u``."""
        if u in back[N - 3]:
            return maps[N - 2][back[N - 3][u]]
        return next((t for t, e in tail_maps[N - 3].items() if e == u), None)

    clones, clone_reads = _tail_clones(nodes, tail, prev_match, forward, tail_maps[0])
    # Body reads from outside: the item, statics, and the state (copy N-2).
    body_set = set(body) | {c.name for c in clones.values()}
    statics, states = [], []
    state_index: dict[str, int] = {}
    value_dep = _input_dependent(nodes, order, input_names, values_only=True)
    body_defs = [nodes[b] for b in body] + list(clones.values())
    for nb in body_defs:
        b = nb.name
        for pos, i in enumerate(x for x in nb.input if not x.startswith("^")):
            t = tname(i)
            src = parse_tensor(t)[0]
            if src in body_set or t in item_level:
                continue
            lv = level.get(src, -1)
            if lv < 0:
                if t not in statics:
                    statics.append(t)
                continue
            if lv != N - 2:
                raise NotUnrolled(f"node '{b}' reads '{t}' from time step {lv}, not from the "
                                  "step before")
            init = state_reads[0].get((b, pos)) or clone_reads.get((b, pos))
            if init is None or level.get(parse_tensor(init)[0], -1) >= 0:
                raise NotUnrolled(f"the initial value of state '{t}' depends on the input")
            if parse_tensor(init)[0] in value_dep:
                # (a state the caller feeds in each call, e.g. DeepSpeech's
                # previous_state_c: streamed, it would be read once at the
                # probe and baked in, and the input would do nothing)
                raise NotUnrolled(f"the initial value of state '{t}' is a graph input "
                                  f"('{init}'), fed by the caller with each window")
            if t in state_index:
                if states[state_index[t]]["init"] != init:
                    raise NotUnrolled(f"state '{t}' starts from two different values")
                continue
            a_node, idx = parse_tensor(t)
            body_node = back[N - 2].get(a_node) or getattr(clones.get(a_node), "name", None)
            if not body_node:
                raise NotUnrolled(f"state '{t}' is not produced by the repeated cell")
            state_index[t] = len(states)
            states.append({"read": t, "new": f"{body_node}:{idx}", "init": init})
    if not states:
        raise NotUnrolled("no state is passed from one time step to the next")
    removed = set(sl_nodes) | {u for c in copies[:N - 1] for u in c} | body_set
    # Tensors of the copies that the rest of the graph reads.
    outputs: dict[str, tuple[str, int]] = {}
    for u in order:
        if u in removed:
            continue
        for i in nodes[u].input:
            if i.startswith("^"):
                continue
            t = tname(i)
            src, idx = parse_tensor(t)
            if src in body_set:
                outputs[t] = (t, N - 1)
            elif src in removed and src not in sl_nodes:
                k = level[src]
                b = back[k].get(src)
                if b is None:
                    raise NotUnrolled(f"node '{u}' reads '{t}', which the last step has not")
                outputs[t] = (f"{b}:{idx}", k)
            elif src in sl_nodes:
                raise NotUnrolled(f"node '{u}' reads the time slice '{t}' outside the cell")
    del head
    name = _pseudo_name([b for b in body], nodes)
    times = [f"{n.name}:0" for n in body_defs if n.name in time_consts]
    return Unrolled(name, slicer, N, body_defs, statics, states, outputs, removed, times)


def time_consts(nodes: dict, order: list[str], const_value) -> dict[str, int]:
    """Integer scalar Consts compared with something: static_rnn with a
    sequence_length compares a constant ``time`` = k in copy k (a retry of
    ``find_unrolled`` takes them as the copies' time index)."""
    compared = {parse_tensor(i)[0] for u in order if nodes[u].op in COMPARISONS
                for i in nodes[u].input if not i.startswith("^")}
    found = {}
    for c in compared:
        n = nodes.get(c)
        if n is not None and n.op == "Const":
            v = const_value(f"{c}:0")
            if v is not None and np.ndim(v) == 0 and np.asarray(v).dtype.kind in "iu":
                found[c] = int(v)
    return found


def _tail(nodes, order, prev: list[str], prev_match: dict[str, str], cell: set[str]):
    """Nodes of copy N-2 that the last copy's cell reads but has no counterpart of
    (the tail of copy N-1, see ``find_unrolled``), in graph order."""
    tail = [u for u in prev if u not in prev_match]
    inside = set(tail) | cell
    for u in order:
        if u in inside:
            continue
        for i in nodes[u].input:
            if not i.startswith("^") and parse_tensor(i)[0] in tail:
                raise NotUnrolled(f"node '{u}' reads '{tname(i)}', which the last step has "
                                  "not")
    return tail


def _same_tail(ctx, extra: list[str], m: dict[str, str], tail: list[str],
               prev_match: dict[str, str], k: int, N: int) -> dict[str, str] | None:
    """Whether copy k's nodes besides its cell (``extra``; ``m``: copy k -> body)
    compute what copy N-2's tail does, on the counterparts of the same nodes
    (from copy N-3: anything of copy k-1); returns {tail node: copy k node}, or None."""
    if len(extra) != len(tail):
        return None
    used: dict[str, str] = {}
    for t in tail:
        nt = ctx.nodes[t]
        for e in extra:
            ne = ctx.nodes[e]
            if e in used.values() or not ctx.same_attrs(ne, nt):
                continue
            ins_e = [tname(i) for i in ne.input if not i.startswith("^")]
            ins_t = [tname(i) for i in nt.input if not i.startswith("^")]
            if len(ins_e) == len(ins_t) and all(
                    _same_input(ctx, ie, it, m, prev_match, used, k, N)
                    for ie, it in zip(ins_e, ins_t)):
                used[t] = e
                break
        else:
            return None
    return used


def _same_input(ctx, ie: str, it: str, m, prev_match, used, k: int, N: int) -> bool:
    (se, ke), (st, kt) = parse_tensor(ie), parse_tensor(it)
    if ke != kt:
        return False
    if st in used:
        return used[st] == se
    if st in prev_match:
        return m.get(se) == prev_match[st]
    if ctx.level.get(st, -1) == N - 3:  # the previous state (a skipped state update)
        return ctx.level.get(se, -1) == k - 1
    return ctx.level.get(st, -1) < 0 and ctx.level.get(se, -1) < 0 and ctx.same_static(ie, it)


def _tail_clones(nodes, tail: list[str], prev_match: dict[str, str], forward, first):
    """The tail computed on the last copy's cell: ({tail node: clone NodeDef},
    {(clone, input position): initial value} for the inputs that become state).

    Inputs from copy N-2 become the body's, inputs from copy N-3 (``forward``)
    copy N-2's: state, starting from what copy 0's counterpart (``first``) reads.
    """
    clones: dict = {}
    reads: dict[tuple[str, int], str] = {}
    for t in tail:
        c = type(nodes[t])()
        c.CopyFrom(nodes[t])
        c.name = f"{t}/tfaot_next"
        del c.input[:]
        ins = [i for i in nodes[t].input if not i.startswith("^")]
        for pos, i in enumerate(ins):
            src, idx = parse_tensor(i)
            if src in prev_match:
                src = prev_match[src]
            elif src in clones:
                src = clones[src].name
            elif forward(src) is not None:
                src = forward(src)
                reads[(c.name, pos)] = tname([x for x in nodes[first[t]].input
                                              if not x.startswith("^")][pos])
            c.input.append(f"{src}:{idx}")
        clones[t] = c
    return clones, reads


def _pseudo_name(body: list[str], nodes) -> str:
    scopes = [b.rpartition("/")[0].split("/") for b in body]
    common = []
    for parts in zip(*scopes):
        if len(set(parts)) != 1:
            break
        common.append(parts[0])
    name = "/".join([c for c in common if c] + ["unrolled"])
    while name in nodes:
        name += "_"
    return name


#: Ops that read only their input's shape, not its values.
SHAPE_OPS = ("Shape", "ShapeN", "Size", "Rank")


def _input_dependent(nodes, order, input_names, values_only: bool = False) -> set[str]:
    """The nodes computed from the inputs; ``values_only``: from their
    values (not through their shapes only: the zero state of an open batch
    is a Fill of the input's batch size)."""
    dep = set(input_names)
    for u in order:
        if values_only and nodes[u].op in SHAPE_OPS:
            continue
        if any(parse_tensor(i)[0] in dep for i in nodes[u].input if not i.startswith("^")):
            dep.add(u)
    return dep


def _find_slicer(nodes, order, dep, const_value) -> Slicer:
    """The slices of the sequence into time steps: of the candidates, the
    one whose source comes first (nearest the input): an unrolled LSTM
    cell's split of its gates into four comes after the x[:, t] slices
    that feed it, and is no time axis."""
    position = {u: i for i, u in enumerate(order)}
    candidates = _slicer_candidates(nodes, order, dep, const_value)
    if not candidates:
        raise NotUnrolled("no per-step slices of the input (Unpack, Split or StridedSlice "
                          "along time) were found")
    return min(candidates, key=lambda s: position.get(parse_tensor(s.source)[0], -1))


def _slicer_candidates(nodes, order, dep, const_value) -> list[Slicer]:
    found: list[Slicer] = []
    strided: dict[tuple[str, int], dict[int, str]] = {}
    for u in order:
        n = nodes[u]
        if u not in dep:
            continue
        if n.op == "Unpack" and n.attr["num"].i >= MIN_STEPS:
            N = n.attr["num"].i
            found.append(Slicer(u, [u], tname(n.input[0]), n.attr["axis"].i,
                                [f"{u}:{k}" for k in range(N)], True))
        if n.op == "Split" and n.attr["num_split"].i >= MIN_STEPS:
            N = n.attr["num_split"].i
            axis = const_value(tname(n.input[0]))
            if axis is not None:
                found.append(Slicer(u, [u], tname(n.input[1]), int(axis),
                                    [f"{u}:{k}" for k in range(N)], False))
        if n.op == "StridedSlice":
            sm = n.attr["shrink_axis_mask"].i
            if sm == 0 or sm & (sm - 1) or n.attr["ellipsis_mask"].i or n.attr["new_axis_mask"].i:
                continue
            d = sm.bit_length() - 1
            begin, strides = const_value(tname(n.input[1])), const_value(tname(n.input[3]))
            if begin is None or strides is None or d >= len(begin) or int(strides[d]) != 1:
                continue
            strided.setdefault((tname(n.input[0]), d), {})[int(begin[d])] = u
    for (src, d), by_k in strided.items():
        N = len(by_k)
        if N >= MIN_STEPS and sorted(by_k) == list(range(N)):
            ns = [by_k[k] for k in range(N)]
            found.append(Slicer(ns[0], ns, src, d, [f"{x}:0" for x in ns], True))
    return found


_IGNORED_ATTRS = {"_class", "_output_shapes"}


class _Ctx:
    def __init__(self, nodes, level, item_level, const_value, time_consts, structural):
        self.nodes = nodes
        self.level = level
        self.item_level = item_level
        self.const_value = const_value
        self._const_key: dict[str, Any] = {}
        self._same: dict[tuple[str, str], bool] = {}
        self.structural = structural
        self.time_consts = time_consts  # Const node -> the time step it stands for

    def same_static(self, ta: str, tb: str) -> bool:
        """Whether static tensors ``ta`` and ``tb`` hold the same value: the
        same tensor, equal constants, or with ``structural``, the same op on
        such tensors (each copy of a frozen Keras 3 cell reads its weights
        through Identity nodes of its own, and splits and squeezes its bias
        itself). Not by default: more equal inputs make the greedy match
        take the wrong one of two alike nodes (static_rnn's conds)."""
        ta, tb = self.through_identities(ta), self.through_identities(tb)
        if ta == tb:
            return True
        ka, kb = self.const_key(ta), self.const_key(tb)
        if ka is not None or kb is not None:
            return ka == kb
        if not self.structural:
            return False
        if (ta, tb) not in self._same:
            self._same[(ta, tb)] = self._same_static_op(ta, tb)
        return self._same[(ta, tb)]

    def _same_static_op(self, ta: str, tb: str) -> bool:
        (sa, ia), (sb, ib) = parse_tensor(ta), parse_tensor(tb)
        na, nb = self.nodes.get(sa), self.nodes.get(sb)
        if na is None or nb is None or ia != ib or not na.input or \
                self.level.get(sa, -1) >= 0 or self.level.get(sb, -1) >= 0:
            return False
        a_ins = [tname(i) for i in na.input if not i.startswith("^")]
        b_ins = [tname(i) for i in nb.input if not i.startswith("^")]
        return self.same_attrs(na, nb) and len(a_ins) == len(b_ins) and \
            all(self.same_static(x, y) for x, y in zip(a_ins, b_ins))

    def through_identities(self, t: str) -> str:
        """The tensor that Identity nodes pass on as ``t``."""
        n = self.nodes.get(parse_tensor(t)[0])
        while n is not None and n.op == "Identity" and n.input and \
                not n.input[0].startswith("^"):
            t = tname(n.input[0])
            n = self.nodes.get(parse_tensor(t)[0])
        return t

    def time_pair(self, a: str, ka: int, b: str, kb: int) -> bool:
        """Whether ``a`` and ``b`` are the time-index constants of copies ka and kb."""
        return self.time_consts.get(a) == ka and self.time_consts.get(b) == kb

    def const_key(self, t: str):
        if t not in self._const_key:
            n = self.nodes.get(parse_tensor(t)[0])
            key = None
            if n is not None and n.op == "Const":
                v = self.const_value(t)
                if v is not None:
                    v = np.asarray(v)
                    key = (v.dtype.str, v.shape, v.tobytes())
            self._const_key[t] = key
        return self._const_key[t]

    def same_attrs(self, a, b) -> bool:
        ka = {k: v for k, v in a.attr.items() if k not in _IGNORED_ATTRS}
        kb = {k: v for k, v in b.attr.items() if k not in _IGNORED_ATTRS}
        return a.op == b.op and ka.keys() == kb.keys() and \
            all(ka[k] == kb[k] for k in ka)

    def match(self, A: list[str], B: list[str], ka: int, kb: int, partial: bool,
              reads: dict | None = None) -> dict[str, str]:
        """Map nodes of copy ``ka`` (A) to nodes of copy ``kb`` (B), in B's order.

        With ``partial``, B nodes without a counterpart are skipped; otherwise
        one is a ``NotUnrolled``. ``reads`` collects, for every B input from an
        earlier step, what A reads at the same place: {(b, pos): tensor}.
        """
        by_op: dict[str, list[str]] = {}
        for a in A:
            by_op.setdefault(self.nodes[a].op, []).append(a)
        a_set = set(A)
        m: dict[str, str] = {}  # a -> b
        inv: dict[str, str] = {}  # b -> a
        for b in B:
            nb = self.nodes[b]
            b_ins = [i for i in nb.input if not i.startswith("^")]
            found = None
            for a in by_op.get(nb.op, []):
                if a in m:
                    continue
                na = self.nodes[a]
                a_ins = [i for i in na.input if not i.startswith("^")]
                if len(a_ins) != len(b_ins) or not (self.same_attrs(na, nb) or
                                                    self.time_pair(a, ka, b, kb)):
                    continue
                got = {}
                ok = True
                for pos, (ia, ib) in enumerate(zip(a_ins, b_ins)):
                    ta, tb = tname(ia), tname(ib)
                    sa, ia_idx = parse_tensor(ta)
                    sb, ib_idx = parse_tensor(tb)
                    if sb in inv:  # inside B: A must read the matched node
                        ok = inv[sb] == sa and ia_idx == ib_idx
                    elif tb in self.item_level:
                        ok = self.item_level.get(ta) == ka
                    elif self.level.get(sb, -1) < 0:  # static
                        ok = self.level.get(sa, -1) < 0 and ta not in self.item_level and \
                            self.same_static(ta, tb)
                    elif self.level.get(sb, -1) < kb:  # from an earlier step: the state
                        ok = sa not in a_set and ta not in self.item_level and \
                            self.level.get(sa, -1) < ka
                        got[(b, pos)] = ta
                    else:  # a node of B without a counterpart
                        ok = False
                    if not ok:
                        break
                if ok:
                    found = a
                    if reads is not None:
                        reads.update(got)
                    break
            if found is None:
                if partial:
                    continue
                raise NotUnrolled(f"time step {ka} differs from the last one at node '{b}' "
                                  f"(op {nb.op})")
            m[found] = b
            inv[b] = found
        return m
