"""Streamify stage for graph formats: a frozen graph with time loops -> a step program.

The input is an unmodified frozen TensorFlow graph (``load_graph``) whose
recurrent layers are ``While`` loops over time, either functional
(``While``/``StatelessWhile`` with body/cond functions) or TF1 v1 control
flow (``Enter``/``Merge``/``Switch``/``NextIteration``/``Exit``), with
``TensorList`` or ``TensorArrayV3`` sequences. The output is a pure step
function ``(x_t, *states) -> (y_t, *new_states)`` (tf-import-notes §2):

1. *Loops.* Every loop becomes a ``Loop``: a body GraphDef whose arguments
   are Placeholders, one return tensor per loop variable, and the outer
   operands. v1 frames are functionalised here at GraphDef level.
2. *Classification* of each loop variable: ``inlist`` (the sequence read at
   the time index), ``outlist`` (the sequence written at the time index, or
   at a constant index: the last output), ``counter`` (integer scalars that
   only count), ``state`` (everything else that changes), ``passthrough``
   (weights, bounds, list handles).
3. *Probe.* The original graph runs once on a random sequence; this gives
   the full-sequence shapes (for ``Reshape``/``StridedSlice``/``Squeeze``)
   and the states' initial values (the loop operands).
4. *Re-emission at T=1.* The outer graph is copied node by node into a
   ``tf.function`` while a *time meta* is tracked for every tensor: static,
   ``seq`` (has a time axis, each step depends on its own step only),
   ``step`` (no time axis, depends on the steps so far: the last output, a
   final state), ``item`` (time step k alone, from an unrolled per-step map
   that must be stacked back whole), ``static_t`` (computed from the
   sequence length: fine as a shape, an error as data), or a sequence list.
   Each loop body is imported once with the states as arguments. An op that
   mixes time steps (``ReverseV2``, ``Pad``, ``Mean`` over time, ...) is a
   ``TfaotError`` naming the node.

Stateless graphs (no loop and no ``time_axis`` given) pass through: the step
is one inference on the input as it is.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .errors import TfaotError
from .program import ProgramSignature, StateInfo, StepProgram, TensorInfo

LOOP_OP = "__TfaotLoop"
_CF_V1 = {"Enter", "Exit", "Merge", "Switch", "NextIteration", "LoopCond",
          "RefEnter", "RefExit", "RefMerge", "RefSwitch", "RefNextIteration"}
_WHILE_OPS = {"While", "StatelessWhile"}
_IDENTITY = {"Identity", "Snapshot", "StopGradient", "PreventGradient"}
_READ_OPS = {"TensorListGetItem": 0, "TensorArrayReadV3": 0}  # op -> list/handle input
_INT_TYPES = (3, 9)  # DT_INT32, DT_INT64
_FLOAT_TYPES = (1, 2, 14, 19)  # float, double, bfloat16, half
_DT_VARIANT, _DT_RESOURCE = 21, 20

# Ops that act on each element independently (with broadcasting).
_ELEMENTWISE = set("""
Identity Snapshot StopGradient PreventGradient CheckNumerics EnsureShape
Add AddV2 Sub Mul RealDiv Div DivNoNan FloorDiv FloorMod Mod TruncateDiv Maximum Minimum Pow
SquaredDifference BiasAdd BiasAddV1 AddN Relu Relu6 Elu Selu LeakyRelu Gelu Sigmoid Tanh
Softplus Softsign Exp Expm1 Log Log1p Sqrt Rsqrt Square Neg Abs Sign Floor Ceil Round Rint Cast
Erf Erfc Reciprocal Inv Select SelectV2 ClipByValue Equal NotEqual Greater GreaterEqual Less
LessEqual LogicalAnd LogicalOr LogicalNot ZerosLike OnesLike Sin Cos IsNan IsFinite IsInf
HardSigmoid Swish Atan Atan2 Mish
""".split())
_REDUCTIONS = {"Sum", "Mean", "Max", "Min", "Prod", "All", "Any", "EuclideanNorm"}
_ARG_REDUCTIONS = {"ArgMax", "ArgMin"}
_SHAPE_OPS = {"Shape", "ShapeN", "Size", "Rank"}


_HINT = [""]  # appended to axis errors when the time axis was guessed


class _Fail(Exception):
    """Internal: becomes a TfaotError with the file name in front."""


# --------------------------------------------------------------------------
# Time meta of a tensor


@dataclass(frozen=True)
class Meta:
    kind: str  # static | static_t | seq | step | item | list_in | list_out | list_done |
    #            ta | ta_flow | dead
    axis: int | None = None  # seq: the time axis; item: T
    key: str | None = None  # lists: identity; item: the step index
    mode: str = ""  # list_done: "seq" (one item per step) or "last"
    why: str = ""  # dead: why it cannot be used

    def __str__(self):
        if self.kind == "seq":
            return f"seq(axis {self.axis})"
        if self.kind == "item":
            return f"time step {self.key} alone"
        return self.kind


STATIC = Meta("static")
# Static, but computed from the shape of a sequence tensor: in the T=1 graph it
# has its T=1 value, which is right for shapes and list sizes, but not as data.
STATIC_T = Meta("static_t")
STEP = Meta("step")
_STATIC_KINDS = {"static", "static_t"}
_LIST_KINDS = {"list_in", "list_out", "list_done", "ta", "ta_flow"}


def _seq(axis: int) -> Meta:
    return Meta("seq", axis=axis)


# --------------------------------------------------------------------------
# Loops


@dataclass
class LoopVar:
    index: int
    operand: str  # outer tensor feeding the variable ("node:i")
    arg: str  # body Placeholder node name
    ret: str  # body tensor returned for the next iteration ("node:i")
    dtype: int  # DataType enum
    kind: str = ""  # inlist | outlist | counter | state | passthrough
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass
class Loop:
    name: str  # While node name or v1 frame name
    form: str  # "While" (functional) or "v1" (Enter/Exit frame)
    body: Any  # GraphDef; args are Placeholder nodes
    vars: list[LoopVar]
    body_fn: str = ""  # functional body name

    def var_kinds(self) -> dict[str, str]:
        return {str(v.index): v.kind for v in self.vars}


def _tensor(name: str) -> tuple[str, int]:
    """"node:1" -> ("node", 1); "node" -> ("node", 0)."""
    node, _, idx = name.partition(":")
    return node, int(idx) if idx else 0


def _tname(name: str) -> str:
    node, idx = _tensor(name)
    return f"{node}:{idx}"


def _functional_loops(graph_def) -> list[Loop]:
    from tensorflow.python.framework.function_def_to_graph import function_def_to_graph_def

    funcs = {f.signature.name: f for f in graph_def.library.function}
    loops = []
    for node in graph_def.node:
        if node.op not in _WHILE_OPS:
            continue
        body_name = node.attr["body"].func.name
        fdef = funcs.get(body_name)
        if fdef is None:
            raise _Fail(f"loop '{node.name}': its body function '{body_name}' is not in the "
                        "graph's function library")
        body_gd, flat = function_def_to_graph_def(fdef)
        arg_names = [a.name for a in fdef.signature.input_arg]
        data_inputs = [i for i in node.input if not i.startswith("^")]
        if len(data_inputs) != len(arg_names):
            raise _Fail(f"loop '{node.name}': {len(data_inputs)} operands but the body "
                        f"'{body_name}' takes {len(arg_names)}")
        vars_ = []
        for i, (arg, out_arg) in enumerate(zip(arg_names, fdef.signature.output_arg)):
            ret = fdef.ret[out_arg.name]
            if ret in flat:
                ret = flat[ret]
            elif ret in arg_names:
                ret = ret + ":0"
            else:  # "node:output:0" form not in the map
                parts = ret.split(":")
                ret = f"{parts[0]}:{parts[-1]}" if len(parts) == 3 else _tname(ret)
            vars_.append(LoopVar(i, _tname(data_inputs[i]), arg, _tname(ret),
                                 fdef.signature.input_arg[i].type))
        body_gd.library.CopyFrom(graph_def.library)
        loops.append(Loop(node.name, "While", body_gd, vars_, body_fn=body_name))
    return loops


def _functionalize_v1(graph_def) -> tuple[list, list[Loop], dict[str, str]]:
    """Replace every v1 while frame by a LOOP_OP node.

    Returns (new node list, loops, {exit node name: "loop:i"}).
    """
    import tensorflow as tf

    nodes = {n.name: n for n in graph_def.node}
    enters = [n for n in graph_def.node if n.op in ("Enter", "RefEnter")]
    if not enters:
        return list(graph_def.node), [], {}
    consumers: dict[str, list[str]] = {}
    for n in graph_def.node:
        for i in n.input:
            consumers.setdefault(_tensor(i.lstrip("^"))[0], []).append(n.name)
    frames: dict[str, list] = {}
    for e in enters:
        frames.setdefault(e.attr["frame_name"].s.decode(), []).append(e)

    in_frame: dict[str, str] = {}
    members: dict[str, set[str]] = {}
    for fname, fenters in frames.items():
        seen = set(e.name for e in fenters)
        work = [e.name for e in fenters]
        while work:
            u = work.pop()
            if nodes[u].op in ("Exit", "RefExit"):
                continue
            for c in consumers.get(u, []):
                if c in seen:
                    continue
                if nodes[c].op in ("Enter", "RefEnter") and \
                        nodes[c].attr["frame_name"].s.decode() != fname:
                    raise _Fail(f"nested while loops are not supported: frame "
                                f"'{nodes[c].attr['frame_name'].s.decode()}' (node '{c}') is "
                                f"inside frame '{fname}'")
                seen.add(c)
                work.append(c)
        for m in seen:
            if m in in_frame and in_frame[m] != fname:
                raise _Fail(f"node '{m}' belongs to two while frames ('{in_frame[m]}' and "
                            f"'{fname}'); nested loops are not supported")
            in_frame[m] = fname
        members[fname] = seen

    loops: list[Loop] = []
    exit_map: dict[str, str] = {}
    for fname, fenters in frames.items():
        fenters = sorted(fenters, key=lambda e: [int(p) if p.isdigit() else p
                                                 for p in re.split(r"(\d+)", e.name)])
        loop_name = fname
        if loop_name in nodes:
            loop_name = fname + "/__loop"
        mem = members[fname]
        src_map: dict[str, str] = {}  # body source tensor -> arg name
        vars_: list[LoopVar] = []
        exits: dict[int, str] = {}
        for e in fenters:
            if e.attr["is_constant"].b:
                idx = len(vars_)
                arg = f"tfaot_loop_arg{idx}"
                src_map[f"{e.name}:0"] = arg
                vars_.append(LoopVar(idx, _tname(e.input[0]), arg, f"{arg}:0", e.attr["T"].type))
                continue
            merges = [c for c in consumers.get(e.name, []) if nodes[c].op in ("Merge", "RefMerge")]
            if len(merges) != 1:
                raise _Fail(f"while frame '{fname}': Enter node '{e.name}' does not feed exactly "
                            "one Merge; this control flow is not a plain while loop")
            merge = nodes[merges[0]]
            nexts = [i for i in merge.input if not i.startswith("^")
                     and nodes[_tensor(i)[0]].op in ("NextIteration", "RefNextIteration")]
            switches = [c for c in consumers.get(merge.name, [])
                        if nodes[c].op in ("Switch", "RefSwitch")
                        and _tensor(nodes[c].input[0])[0] == merge.name]
            if len(nexts) != 1 or len(switches) != 1:
                raise _Fail(f"while frame '{fname}': Merge node '{merge.name}' is not a loop "
                            "variable (expected one NextIteration and one Switch)")
            nxt = nodes[_tensor(nexts[0])[0]]
            sw = nodes[switches[0]]
            idx = len(vars_)
            arg = f"tfaot_loop_arg{idx}"
            src_map[f"{sw.name}:1"] = arg
            vars_.append(LoopVar(idx, _tname(e.input[0]), arg, _tname(nxt.input[0]),
                                 e.attr["T"].type))
            for c in consumers.get(sw.name, []):
                if nodes[c].op in ("Exit", "RefExit"):
                    exits[idx] = c
        # Body: backward closure from the returns, stopping at the arguments.
        arg_names = {v.arg for v in vars_}
        work = [_tensor(v.ret)[0] for v in vars_
                if _tname(v.ret) not in src_map and _tensor(v.ret)[0] not in arg_names]
        needed = set()
        while work:
            u = work.pop()
            if u in needed:
                continue
            needed.add(u)
            n = nodes[u]
            if u not in mem and not (n.op == "Const" and not n.input):
                raise _Fail(f"while frame '{fname}': body node uses '{u}' from outside the "
                            "loop without an Enter")
            if n.op in _CF_V1:
                raise _Fail(f"while frame '{fname}': node '{u}' ({n.op}) is control flow inside "
                            "the loop body (a tf.cond or nested loop); this is not supported")
            for i in n.input:
                if i.startswith("^"):
                    continue
                if _tname(i) in src_map:
                    continue
                work.append(_tensor(i)[0])
        body = tf.compat.v1.GraphDef()
        for v in vars_:
            ph = body.node.add()
            ph.op = "Placeholder"
            ph.name = v.arg
            ph.attr["dtype"].type = v.dtype
        for n in graph_def.node:  # keep the original order
            if n.name not in needed:
                continue
            c = body.node.add()
            c.CopyFrom(n)
            del c.input[:]
            for i in n.input:
                if i.startswith("^"):
                    continue
                c.input.append(src_map.get(_tname(i), i))
            for a in ("_class", "frame_name"):
                if a in c.attr:
                    del c.attr[a]
        body.library.CopyFrom(graph_def.library)
        for v in vars_:
            if v.ret in src_map:
                v.ret = src_map[v.ret] + ":0"
        loops.append(Loop(loop_name, "v1", body, vars_))
        for idx, ex in exits.items():
            exit_map[ex] = f"{loop_name}:{idx}"
        # The pseudo node standing for the loop in the outer graph.
        pseudo = tf.compat.v1.NodeDef()
        pseudo.op = LOOP_OP
        pseudo.name = loop_name
        pseudo.input.extend(v.operand for v in vars_)
        members[fname] = mem
        nodes[loop_name] = pseudo

    new_nodes = []
    placed = set()
    for n in graph_def.node:
        f = in_frame.get(n.name)
        if f is not None:
            loop_name = next(lp.name for lp in loops if lp.name in (f, f + "/__loop"))
            if loop_name not in placed:
                placed.add(loop_name)
                new_nodes.append(nodes[loop_name])
            continue
        c = tf.compat.v1.NodeDef()
        c.CopyFrom(n)
        del c.input[:]
        for i in n.input:
            ctrl = i.startswith("^")
            src = _tensor(i.lstrip("^"))[0]
            if src in in_frame:
                if ctrl:
                    continue
                if src not in exit_map:
                    raise _Fail(f"node '{n.name}' uses '{i}' from inside while frame "
                                f"'{in_frame[src]}' (only Exit outputs may leave a loop)")
                c.input.append(exit_map[src])
            else:
                c.input.append(i)
        new_nodes.append(c)
    return new_nodes, loops, exit_map


# --------------------------------------------------------------------------
# Loop variable classification


def _classify(loop: Loop) -> None:
    body = {n.name: n for n in loop.body.node}
    arg_index = {v.arg: v.index for v in loop.vars}
    consumers: dict[str, list[tuple[str, int]]] = {}
    for n in loop.body.node:
        for pos, i in enumerate(n.input):
            if not i.startswith("^"):
                consumers.setdefault(_tname(i), []).append((n.name, pos))

    def resolve(t: str) -> str:
        """Follow Identity chains back to the producing tensor."""
        seen = 0
        while True:
            n = body.get(_tensor(t)[0])
            if n is None or n.op not in _IDENTITY or seen > 100:
                return _tname(t)
            t = _tname(n.input[0])
            seen += 1

    def arg_of(t: str) -> int | None:
        node, _ = _tensor(resolve(t))
        return arg_index.get(node)

    def forward(t: str) -> list[tuple[str, int]]:
        """Consumers of t, looking through Identity chains."""
        out, work = [], [_tname(t)]
        while work:
            u = work.pop()
            for c, pos in consumers.get(u, []):
                if body[c].op in _IDENTITY:
                    work.append(f"{c}:0")
                else:
                    out.append((c, pos))
        return out

    for v in loop.vars:
        v.kind, v.detail = "", {}
    # Reads and writes of the sequences.
    reads: dict[int, list[str]] = {}
    for n in loop.body.node:
        if n.op in _READ_OPS:
            a = arg_of(n.input[0])
            if a is None:
                raise _Fail(f"loop '{loop.name}': node '{n.name}' ({n.op}) reads a list that is "
                            "not a loop variable")
            reads.setdefault(a, []).append(n.name)
    for v in loop.vars:
        if v.index in reads:
            v.kind = "inlist"
            v.detail = {"reads": reads[v.index]}
    for v in loop.vars:
        if v.kind:
            continue
        r = resolve(v.ret)
        rnode = _tensor(r)[0]
        rn = body.get(rnode)
        if rnode == v.arg:
            v.kind = "passthrough"
            continue
        if rn is not None and rn.op == "TensorListSetItem" and arg_of(rn.input[0]) == v.index:
            v.kind = "outlist"
            v.detail = {"write": rn.name, "item": _tname(rn.input[2]), "index": _tname(rn.input[1])}
            continue
        if rn is not None and rn.op == "TensorArrayWriteV3" and arg_of(rn.input[3]) == v.index:
            v.kind = "outlist"
            v.detail = {"write": rn.name, "item": _tname(rn.input[2]),
                        "index": _tname(rn.input[1]), "handle_arg": arg_of(rn.input[0])}
            continue
        if v.dtype in _INT_TYPES and rn is not None and rn.op in ("Add", "AddV2") and \
                arg_of(rn.input[0]) == v.index and body.get(_tensor(resolve(rn.input[1]))[0]) \
                is not None and body[_tensor(resolve(rn.input[1]))[0]].op == "Const":
            v.kind = "counter"
            v.detail = {"increment": rn.name}
            continue
        if v.dtype in _FLOAT_TYPES:
            v.kind = "state"
            continue
        raise _Fail(f"loop '{loop.name}': loop variable {v.index} ('{v.arg}', dtype "
                    f"{_dtype_name(v.dtype)}) changes every step but is neither a float state, "
                    f"a counter nor a sequence; it cannot be streamed (returned from node "
                    f"'{rnode}', op {rn.op if rn is not None else '?'})")
    # Index checks: reads/writes at the time counter (or a constant index).
    for v in loop.vars:
        if v.kind == "inlist":
            for rname in v.detail["reads"]:
                idx = arg_of(body[rname].input[1])
                if idx is None or loop.vars[idx].kind != "counter":
                    raise _Fail(f"loop '{loop.name}': node '{rname}' reads the sequence at an "
                                "index that is not the loop's time counter")
        if v.kind == "outlist":
            idx_t = resolve(v.detail["index"])
            a = arg_of(idx_t)
            if a is not None and loop.vars[a].kind == "counter":
                v.detail["mode"] = "seq"
            elif body.get(_tensor(idx_t)[0]) is not None and body[_tensor(idx_t)[0]].op == "Const":
                v.detail["mode"] = "last"
            else:
                raise _Fail(f"loop '{loop.name}': node '{v.detail['write']}' writes the output "
                            "at an index that is neither the time counter nor a constant")
    # Counters may only index and count; anything else would need a step counter.
    for v in loop.vars:
        if v.kind != "counter":
            continue
        for c, pos in forward(f"{v.arg}:0"):
            op = body[c].op
            if op in _READ_OPS and pos == 1:
                continue
            if op in ("TensorListSetItem", "TensorArrayWriteV3") and pos == 1:
                continue
            if c == v.detail["increment"]:
                continue
            raise _Fail(f"loop '{loop.name}': the loop counter (loop variable {v.index}, "
                        f"initially '{v.operand}') is used by node '{c}' "
                        f"(op {op}); streaming that would need a step counter, which is not "
                        "supported")


def _dtype_name(t: int) -> str:
    import tensorflow as tf

    try:
        return tf.dtypes.as_dtype(t).name
    except Exception:
        return str(t)


# --------------------------------------------------------------------------
# The graph model


@dataclass
class _Graph:
    path: Path
    nodes: dict[str, Any]  # outer nodes (loops replaced by LOOP_OP nodes)
    order: list[str]  # topological order of the nodes needed for the outputs
    loops: dict[str, Loop]
    alias: dict[str, str]  # outer tensor -> tensor name in the original graph


def _analyse(loaded) -> _Graph:
    gd = loaded.graph_def
    new_nodes, v1_loops, exit_map = _functionalize_v1(gd)
    nodes = {n.name: n for n in new_nodes}
    loops = {lp.name: lp for lp in v1_loops}
    for lp in _functional_loops(gd):
        loops[lp.name] = lp
    alias = {v: k + ":0" for k, v in exit_map.items()}
    for lp in loops.values():
        _classify(lp)
    # Topological order of what the outputs need (data inputs only).
    needed: list[str] = []
    state: dict[str, int] = {}
    for out in loaded.outputs:
        root = _tensor(out)[0]
        if root not in nodes:
            root = _tensor(exit_map.get(root, root))[0]
        stack = [(root, False)]
        while stack:
            u, done = stack.pop()
            if done:
                state[u] = 2
                needed.append(u)
                continue
            if state.get(u):
                continue
            if u not in nodes:
                raise _Fail(f"node '{u}' is referenced but not in the graph")
            state[u] = 1
            stack.append((u, True))
            for i in nodes[u].input:
                if i.startswith("^"):
                    continue
                src = _tensor(i)[0]
                if state.get(src) == 1:
                    raise _Fail(f"the graph has a cycle through node '{src}'")
                if not state.get(src):
                    stack.append((src, False))
    return _Graph(Path(loaded.path), nodes, needed, loops, alias)


# --------------------------------------------------------------------------
# Probe: run the original graph once


@dataclass
class _Probe:
    T: int
    shapes: dict[str, tuple[int, ...]]
    values: dict[str, np.ndarray]
    outputs: list[np.ndarray]


def _probe(loaded, g: _Graph, x_shape: tuple[int, ...], time_axis: int | None,
           shape_of: list[str], value_of: list[str]) -> _Probe:
    import tensorflow as tf

    inp = loaded.inputs[0]
    rng = np.random.default_rng(0)
    if np.issubdtype(np.dtype(inp.dtype), np.integer):
        x = rng.integers(0, 2, x_shape).astype(inp.dtype)  # valid ids for any embedding
    elif inp.dtype == "bool":
        x = rng.integers(0, 2, x_shape).astype(bool)
    else:
        x = rng.standard_normal(x_shape).astype(inp.dtype)
    graph = tf.Graph()
    with graph.as_default():
        try:
            tf.graph_util.import_graph_def(loaded.graph_def, name="")
        except Exception as e:
            raise _Fail(f"TensorFlow cannot import the graph: {_first_line(e)}") from None
        fetch: dict[str, Any] = {}
        orig = lambda t: g.alias.get(t, t)  # noqa: E731
        for t in shape_of:
            try:
                tensor = graph.get_tensor_by_name(orig(t))
            except (KeyError, ValueError, TypeError):
                continue
            if tensor.dtype not in (tf.variant, tf.resource, tf.string):
                fetch["s:" + t] = tf.shape(tensor)
        for t in value_of:
            fetch["v:" + t] = graph.get_tensor_by_name(orig(t))
        for k, t in enumerate(loaded.outputs):
            fetch[f"o:{k}"] = graph.get_tensor_by_name(t)
        with tf.compat.v1.Session(graph=graph) as sess:
            try:
                res = sess.run(fetch, {f"{inp.name}:0": x})
            except Exception as e:
                raise _Fail(f"running the graph on a test sequence of shape {x_shape} failed: "
                            f"{_first_line(e)}") from None
    shapes = {k[2:]: tuple(int(d) for d in v) for k, v in res.items() if k.startswith("s:")}
    values = {k[2:]: v for k, v in res.items() if k.startswith("v:")}
    outs = [res[f"o:{k}"] for k in range(len(loaded.outputs))]
    return _Probe(None if time_axis is None else x_shape[time_axis], shapes, values, outs)


# --------------------------------------------------------------------------
# Re-emission at T=1


class _Emitter:
    def __init__(self, g: _Graph, loaded, probe: _Probe, state_order: list[tuple[str, int]],
                 time_axis: int | None):
        self.time_axis = time_axis
        self.g = g
        self.loaded = loaded
        self.probe = probe
        self.state_order = state_order  # (loop name, var index) per state slot
        self.tensors: dict[str, Any] = {}
        self.metas: dict[str, Meta] = {}
        self.list_values: dict[str, tuple[Any, str]] = {}  # key -> (v_t or y_t, mode)
        self.ta_in: dict[str, Any] = {}
        self.new_states: dict[tuple[str, int], Any] = {}
        self.library_loaded = False

    # -- helpers
    def fail(self, node, msg: str):
        raise _Fail(f"node '{node.name}' (op {node.op}): {msg}")

    def const_value(self, node, pos: int):
        import tensorflow as tf

        t = self.tensors.get(_tname(node.input[pos]))
        v = None if t is None else tf.get_static_value(t)
        if v is None:
            src = self.g.nodes.get(_tensor(node.input[pos])[0])
            if src is not None and src.op == "Const":
                v = tf.make_ndarray(src.attr["value"].tensor)
        if v is None:
            self.fail(node, f"input {pos} ('{node.input[pos]}') must be a constant")
        return np.asarray(v)

    def full_shape(self, t: str):
        return self.probe.shapes.get(_tname(t))

    def _import(self, node_defs, input_map, return_elements, library=None):
        import tensorflow as tf

        gd = tf.compat.v1.GraphDef()
        gd.node.extend(node_defs)
        if library is not None and not self.library_loaded and len(library.function) and \
                any(_calls_function(n) for n in node_defs):
            # Only graphs that call functions (a nested loop, a PartitionedCall)
            # need the library; it then comes along once.
            gd.library.CopyFrom(library)
            self.library_loaded = True
        return tf.graph_util.import_graph_def(gd, input_map=input_map,
                                              return_elements=return_elements, name="")

    def emit_generic(self, node):
        import tensorflow as tf

        c = tf.compat.v1.NodeDef()
        c.CopyFrom(node)
        del c.input[:]
        input_map = {}
        for i in node.input:
            if i.startswith("^"):
                continue
            t = self.tensors.get(_tname(i))
            if t is None:
                self.fail(node, f"input '{i}' has no streamable value")
            c.input.append(i)
            input_map[_tname(i)] = t
        for a in ("_class", "_output_shapes"):
            if a in c.attr:
                del c.attr[a]
        try:
            op = self._import([c], input_map, [node.name],
                              library=self.loaded.graph_def.library)[0]
        except Exception as e:
            self.fail(node, f"TensorFlow cannot rebuild it: {_first_line(e)}")
        return list(op.outputs)

    def set(self, node, outs, metas):
        for k, (t, m) in enumerate(zip(outs, metas)):
            self.tensors[f"{node.name}:{k}"] = t
            self.metas[f"{node.name}:{k}"] = m

    # -- the walk
    def run(self, x_t, states):
        import tensorflow as tf

        self.state_inputs = dict(zip(self.state_order, states))
        inp = self.loaded.inputs[0]
        for name in self.g.order:
            node = self.g.nodes[name]
            if name == inp.name:
                if self.time_axis is None:
                    self.set(node, [tf.identity(x_t, name=_scope(name)[:-1])], [STEP])
                    continue
                with tf.name_scope(_scope(name)):
                    x = tf.expand_dims(x_t, self.time_axis)
                self.set(node, [x], [_seq(self.time_axis)])
                continue
            if node.op == LOOP_OP or node.op in _WHILE_OPS:
                self.emit_loop(node)
                continue
            self.emit(node)
        ys = []
        for out in self.loaded.outputs:
            t, m = self.tensors.get(_tname(out)), self.metas.get(_tname(out))
            node = self.g.nodes[_tensor(out)[0]]
            if m is not None and m.kind == "item" and int(m.key) == m.axis - 1:
                m = STEP  # the last time step: what the stream has at this step
            if m is None or t is None or m.kind in _LIST_KINDS or m.kind in ("dead", "item"):
                self.fail(node, f"the output '{out}' has no streamable value ({m})")
            if m.kind == "seq":
                with tf.name_scope("output"):
                    t = tf.squeeze(t, [m.axis])
            ys.append(t)
        new = [self.new_states[k] for k in self.state_order]
        return ys, new

    def emit(self, node):
        ins = [i for i in node.input if not i.startswith("^")]
        metas = [self.metas.get(_tname(i)) for i in ins]
        for i, m in zip(ins, metas):
            if m is None:
                self.fail(node, f"input '{i}' was not produced")
        kinds = {m.kind for m in metas}
        op = node.op
        # Sources and list creation.
        if op in ("Placeholder", "PlaceholderV2", "PlaceholderWithDefault") and not ins:
            self.fail(node, "a second graph input; only one streamed input is supported "
                      "(give the input with --inputs)")
        if op in ("TensorListReserve", "EmptyTensorList"):
            if kinds - _STATIC_KINDS:
                self.fail(node, "a list whose size depends on the sequence in an unsupported way")
            self.set(node, [None], [Meta("list_out", key=node.name)])
            return
        if op == "TensorArrayV3":
            self.set(node, [None, None], [Meta("ta", key=node.name), Meta("ta_flow", key=node.name)])
            return
        if "dead" in kinds:
            m = next(m for m in metas if m.kind == "dead")
            self.fail(node, m.why)
        if kinds & _LIST_KINDS:
            return self.emit_list_op(node, ins, metas)
        if kinds <= _STATIC_KINDS:
            outs = self.emit_generic(node)
            self.set(node, outs, [STATIC_T if "static_t" in kinds else STATIC] * len(outs))
            return
        if op in _SHAPE_OPS:
            outs = self.emit_generic(node)
            t_dep = op in ("Shape", "ShapeN", "Size") and "seq" in kinds
            self.set(node, outs, [STATIC_T if t_dep else STATIC] * len(outs))
            return
        if "item" in kinds:
            return self.emit_item(node, ins, metas)
        if "seq" in kinds and "step" in kinds:
            self.fail(node, "mixes a per-step tensor with a whole-sequence tensor "
                      "(inputs: " + ", ".join(f"'{i}' {m}" for i, m in zip(ins, metas)) + ")")
        if "seq" not in kinds:  # step (and static): a function of the current step only
            outs = self.emit_generic(node)
            self.set(node, outs, [STEP] * len(outs))
            return
        self.emit_seq(node, ins, metas)

    # -- ops on whole-sequence tensors
    def emit_seq(self, node, ins, metas):
        import tensorflow as tf

        op = node.op
        seq_axes = [(k, m.axis) for k, m in enumerate(metas) if m.kind == "seq"]
        k0, a = seq_axes[0]
        x = self.tensors[_tname(ins[k0])]
        rank = x.shape.rank

        def no_length(kinds=("static_t",)):
            for k, m in enumerate(metas):
                if m.kind in kinds:
                    self.fail(node, f"input {k} ('{ins[k]}') is computed from the sequence "
                              "length, which a stream does not know")

        def others_static(allowed=(k0,)):
            if op != "Reshape":  # Reshape's shape operand is replaced (see emit_reshape)
                no_length()
            for k, m in enumerate(metas):
                if k not in allowed and m.kind not in _STATIC_KINDS:
                    self.fail(node, f"input {k} ('{ins[k]}') is time-dependent; only input "
                              f"{allowed[0]} may be")

        if op in _ELEMENTWISE:
            no_length()
            outs = self.emit_generic(node)
            out_rank = outs[0].shape.rank
            if out_rank is None:
                self.fail(node, "unknown output rank")
            axis = None
            for k, m in enumerate(metas):
                t = self.tensors[_tname(ins[k])]
                r = t.shape.rank
                if r is None:
                    self.fail(node, f"input {k} has unknown rank")
                if m.kind == "seq":
                    ax = m.axis + out_rank - r
                    if axis is not None and ax != axis:
                        self.fail(node, "its inputs have their time axes at different positions "
                                  "after broadcasting")
                    axis = ax
            for k, m in enumerate(metas):
                if m.kind == "static":
                    t = self.tensors[_tname(ins[k])]
                    r = t.shape.rank
                    pos = axis - (out_rank - r)
                    if 0 <= pos < r and t.shape[pos] not in (None, 1):
                        self.fail(node, f"input {k} ('{ins[k]}') is a constant with size "
                                  f"{t.shape[pos]} along the time axis (a per-time-step "
                                  "constant cannot be streamed)")
            self.set(node, outs, [_seq(axis)] * len(outs))
            return
        if op in ("Softmax", "LogSoftmax"):
            if a == rank - 1:
                self.fail(node, "normalises over the time axis")
            self.set(node, self.emit_generic(node), [_seq(a)])
            return
        if op == "MatMul":
            others_static()
            ta = node.attr["transpose_a"].b
            if k0 != 0 or (a == 1) != ta:
                self.fail(node, "multiplies along the time axis")
            self.set(node, self.emit_generic(node), [_seq(1 if ta else 0)])
            return
        if op in ("BatchMatMul", "BatchMatMulV2", "BatchMatMulV3"):
            others_static()
            adj = node.attr["adj_x"].b
            rows = rank - 1 if adj else rank - 2  # x's axis that stays in the result
            if k0 != 0 or (a >= rank - 2 and a != rows):
                self.fail(node, "multiplies along the time axis")
            outs = self.emit_generic(node)
            out_rank = outs[0].shape.rank
            if a == rows:
                self.set(node, outs, [_seq(out_rank - 2)])
                return
            b = self.tensors[_tname(ins[1])]
            pos = a + out_rank - rank - (out_rank - b.shape.rank)
            if 0 <= pos < b.shape.rank - 2 and b.shape[pos] not in (None, 1):
                self.fail(node, "its second operand has a time-sized batch dimension")
            self.set(node, outs, [_seq(a + out_rank - rank)])
            return
        if op == "Einsum":
            eq = node.attr["equation"].s.decode().replace(" ", "")
            lhs, _, out = eq.partition("->")
            terms = lhs.split(",")
            if "." in eq or not out or len(terms) != len(ins) or len(seq_axes) != 1:
                self.fail(node, f"einsum '{eq}' on a time-dependent tensor is not supported")
            label = terms[k0][a]
            if label not in out or any(label in t for k, t in enumerate(terms) if k != k0):
                self.fail(node, f"einsum '{eq}' contracts or mixes the time axis "
                          f"('{label}')")
            self.set(node, self.emit_generic(node), [_seq(out.index(label))])
            return
        if op == "Transpose":
            others_static()
            perm = [int(p) for p in self.const_value(node, 1)]
            perm = [p % rank for p in perm]
            self.set(node, self.emit_generic(node), [_seq(perm.index(a))])
            return
        if op == "ExpandDims":
            others_static()
            dim = int(self.const_value(node, 1))
            dim = dim % (rank + 1)
            self.set(node, self.emit_generic(node), [_seq(a + 1 if dim <= a else a)])
            return
        if op == "Squeeze":
            dims = list(node.attr["squeeze_dims"].list.i)
            if not dims:
                full = self.full_shape(ins[0])
                if full is None:
                    self.fail(node, "squeezes all size-1 dims of a tensor whose full shape is "
                              "unknown")
                dims = [d for d, s in enumerate(full) if s == 1]
            dims = [d % rank for d in dims]
            if a in dims:
                self.fail(node, "removes the time axis")
            with tf.name_scope(_scope(node.name)):
                y = tf.squeeze(x, dims)
            self.set(node, [y], [_seq(a - sum(d < a for d in dims))])
            return
        if op == "Reshape":
            others_static()
            return self.emit_reshape(node, ins, x, a)
        if op == "StridedSlice":
            others_static()
            return self.emit_strided_slice(node, ins, x, a)
        if op in _REDUCTIONS or op in _ARG_REDUCTIONS:
            others_static()
            axes = np.atleast_1d(self.const_value(node, 1)).astype(int) % rank
            if a in axes:
                self.fail(node, "reduces over the time axis, which needs the whole sequence")
            keep = node.attr["keep_dims"].b if op in _REDUCTIONS else False
            new_a = a if keep else a - int(sum(ax < a for ax in axes))
            self.set(node, self.emit_generic(node), [_seq(new_a)])
            return
        if op == "ConcatV2":
            n = node.attr["N"].i
            axis = int(self.const_value(node, n)) % rank
            for k in range(n):
                if metas[k].kind != "seq" or metas[k].axis != a:
                    self.fail(node, f"concatenates a time-dependent tensor with input {k} "
                              f"('{ins[k]}'), which is not one with the same time axis")
            if axis == a:
                self.fail(node, "concatenates along the time axis")
            self.set(node, self.emit_generic(node), [_seq(a)])
            return
        if op == "Unpack":
            others_static()
            axis = node.attr["axis"].i % rank
            full = self.full_shape(ins[0])
            if axis != a or full is None:
                self.fail(node, "unstacks a time-dependent tensor along another axis")
            with tf.name_scope(_scope(node.name)):
                step = tf.squeeze(x, [a])
            T = full[a]
            for k in range(T):
                self.tensors[f"{node.name}:{k}"] = step
                self.metas[f"{node.name}:{k}"] = Meta("item", key=str(k), axis=T)
            return
        if op == "Pack":
            axis = node.attr["axis"].i % (rank + 1)
            for k, m in enumerate(metas):
                if m.kind != "seq" or m.axis != a:
                    self.fail(node, f"stacks a time-dependent tensor with input {k} ('{ins[k]}')")
            self.set(node, self.emit_generic(node), [_seq(a + 1 if axis <= a else a)])
            return
        if op in ("Split", "SplitV"):
            vpos, dpos = (1, 0) if op == "Split" else (0, 2)
            if metas[vpos].kind != "seq" or any(m.kind != "static" for k, m in enumerate(metas)
                                                if k != vpos):
                self.fail(node, "splits with a time-dependent size or axis")
            axis = int(self.const_value(node, dpos)) % rank
            if axis == a:
                self.fail(node, "splits along the time axis")
            outs = self.emit_generic(node)
            self.set(node, outs, [_seq(a)] * len(outs))
            return
        if op in ("GatherV2", "ResourceGather", "Gather") and k0 == 1 and \
                metas[0].kind == "static" and all(m.kind == "static" for m in metas[2:]):
            # An embedding lookup: indices carry the time axis.
            axis = int(self.const_value(node, 2)) if op == "GatherV2" else 0
            if axis != 0 or node.attr["batch_dims"].i:
                self.fail(node, "a gather with time-dependent indices along axis "
                          f"{axis} is not supported")
            self.set(node, self.emit_generic(node), [_seq(a)])
            return
        if op == "TensorListFromTensor":
            if a != 0:
                self.fail(node, f"makes a list along axis 0, but the time axis is {a}"
                          + _HINT[0])
            with tf.name_scope(_scope(node.name)):
                v_t = tf.squeeze(x, [0])
            self.list_values[node.name] = (v_t, "seq")
            self.set(node, [None], [Meta("list_in", key=node.name)])
            return
        self.fail(node, f"op {op} on a time-dependent tensor is not supported (input "
                  f"'{ins[k0]}' has its time axis at {a}); it may mix time steps")

    def emit_item(self, node, ins, metas):
        """Ops on one time step taken out of a sequence (an unrolled per-step map).

        Step k of a fixed-length sequence is fine as long as all T steps are
        stacked back in order (Keras' fixed-T TimeDistributed unrolls so);
        step T-1 on its own is the last step, like a ``step`` tensor.
        """
        import tensorflow as tf

        items = {(m.key, m.axis) for m in metas if m.kind == "item"}
        others = {m.kind for m in metas if m.kind != "item"}
        k, T = next(iter(items))
        if node.op == "Pack" and others <= {"step"}:
            keys = [int(m.key) if m.kind == "item" else T - 1 for m in metas]
            if keys != list(range(T)):
                self.fail(node, f"stacks time steps {keys}, not the whole sequence 0..{T - 1}")
            axis = node.attr["axis"].i % (self.tensors[_tname(ins[0])].shape.rank + 1)
            with tf.name_scope(_scope(node.name)):
                y = tf.expand_dims(self.tensors[_tname(ins[0])], axis)
            self.set(node, [y], [_seq(axis)])
            return
        if len(items) > 1 or others - _STATIC_KINDS - {"step"} or \
                ("step" in others and int(k) != T - 1):
            self.fail(node, f"combines time step {k} of a sequence with other time steps or "
                      "with the whole sequence")
        if "static_t" in others:
            self.fail(node, "combines a time step with a value computed from the sequence length")
        outs = self.emit_generic(node)
        self.set(node, outs, [Meta("item", key=k, axis=T)] * len(outs))

    def emit_reshape(self, node, ins, x, a):
        import tensorflow as tf

        full_in, full_out = self.full_shape(ins[0]), self.full_shape(f"{node.name}:0")
        if full_in is None or full_out is None:
            self.fail(node, "cannot find its full-sequence shapes")
        T = full_in[a]
        left = int(np.prod(full_in[:a], dtype=np.int64))
        right = int(np.prod(full_in[a + 1:], dtype=np.int64))
        b = None
        for j in range(len(full_out)):
            if int(np.prod(full_out[:j], dtype=np.int64)) == left and full_out[j] == T and \
                    int(np.prod(full_out[j + 1:], dtype=np.int64)) == right:
                b = j
                break
        if b is None:
            self.fail(node, f"reshapes {list(full_in)} (time axis {a}) to {list(full_out)}, "
                      "which merges the time axis with other dimensions")
        step_shape = list(full_out)
        step_shape[b] = 1
        with tf.name_scope(_scope(node.name)):
            y = tf.reshape(x, step_shape)
        self.set(node, [y], [_seq(b)])

    def emit_strided_slice(self, node, ins, x, a):
        import tensorflow as tf

        begin = [int(v) for v in self.const_value(node, 1)]
        end = [int(v) for v in self.const_value(node, 2)]
        strides = [int(v) for v in self.const_value(node, 3)]
        at = node.attr
        bm, em, sm = at["begin_mask"].i, at["end_mask"].i, at["shrink_axis_mask"].i
        if at["ellipsis_mask"].i or at["new_axis_mask"].i:
            self.fail(node, "a slice with an ellipsis or new axis on a time-dependent tensor is "
                      "not supported")
        full = self.full_shape(ins[0])
        T = full[a] if full else None
        if a >= len(begin):
            meta = _seq(a - sum(1 for d in range(len(begin)) if sm >> d & 1))
        else:
            b, e, s = begin[a], end[a], strides[a]
            if sm >> a & 1:
                begin[a], end[a] = 0, 1
                if b == -1 or (T is not None and b == T - 1):
                    meta = STEP
                elif T is not None and 0 <= b < T:
                    # Step b alone: fine only if all T steps are stacked back
                    # (a fixed-T TimeDistributed unrolls like this).
                    meta = Meta("item", key=str(b), axis=T)
                else:
                    self.fail(node, f"takes time step {b} only; only the last step (-1) can be "
                              "streamed")
            elif s == 1 and (bm >> a & 1 or b == 0) and \
                    (em >> a & 1 or (T is not None and e >= T)):
                bm |= 1 << a
                em |= 1 << a
                meta = _seq(a - sum(1 for d in range(a) if sm >> d & 1))
            elif s == 1 and (b == -1 or (T is not None and b == T - 1)) and \
                    (em >> a & 1 or (T is not None and e >= T)):
                begin[a] = 0
                em |= 1 << a
                meta = STEP
            else:
                self.fail(node, f"slices the time axis [{b}:{e}:{s}]; only the whole sequence "
                          "or the last step can be streamed")
        with tf.name_scope(_scope(node.name)):
            y = tf.strided_slice(x, begin, end, strides, begin_mask=bm, end_mask=em,
                                 shrink_axis_mask=sm)
        self.set(node, [y], [meta])

    # -- list ops outside loops
    def emit_list_op(self, node, ins, metas):
        import tensorflow as tf

        op = node.op
        if op in _IDENTITY and len(ins) == 1:  # a list passed on unchanged
            self.set(node, [self.tensors.get(_tname(ins[0]))], [metas[0]])
            return
        if op in ("TensorListStack", "TensorArrayGatherV3", "TensorArrayPack"):
            m = metas[0] if op == "TensorListStack" else metas[-1]
            if m.kind != "list_done":
                self.fail(node, f"stacks a list that is not a loop's output ({m})")
            y_t, mode = self.list_values[m.key]
            with tf.name_scope(_scope(node.name)):
                y = tf.expand_dims(y_t, 0)
            self.set(node, [y], [_seq(0) if mode == "seq" else STEP])
            return
        if op == "TensorArrayScatterV3":
            hm = metas[0]
            if hm.kind != "ta" or metas[1].kind not in _STATIC_KINDS or metas[2].kind != "seq":
                self.fail(node, "an unsupported TensorArray scatter")
            if metas[2].axis != 0:
                self.fail(node, "scatters along an axis that is not the time axis" + _HINT[0])
            with tf.name_scope(_scope(node.name)):
                self.ta_in[hm.key] = tf.squeeze(self.tensors[_tname(ins[2])], [0])
            self.set(node, [None], [Meta("ta_flow", key=hm.key)])
            return
        if op in ("TensorArraySizeV3", "TensorListLength"):
            with tf.name_scope(_scope(node.name)):
                y = tf.constant(1, tf.int32)
            self.set(node, [y], [STATIC])
            return
        self.fail(node, "an unsupported use of a TensorList/TensorArray outside a loop (inputs: "
                  + ", ".join(f"'{i}' {m}" for i, m in zip(ins, metas)) + ")")

    # -- loops
    def emit_loop(self, node):
        import tensorflow as tf

        loop = self.g.loops[node.name]
        input_map: dict[str, Any] = {}
        length_args: set[str] = set()
        replace_reads: dict[str, Any] = {}
        fetch: list[str] = []
        out_metas: dict[int, Meta] = {}
        for v in loop.vars:
            m = self.metas.get(v.operand)
            t = self.tensors.get(v.operand)
            if m is None:
                raise _Fail(f"loop '{loop.name}': operand '{v.operand}' was not produced")
            if v.kind == "state":
                if m.kind not in _STATIC_KINDS:
                    raise _Fail(f"loop '{loop.name}': the initial value of state {v.index} "
                                f"('{v.operand}') depends on the input ({m}); only constant "
                                "initial states can be streamed")
                input_map[f"{v.arg}:0"] = self.state_inputs[(loop.name, v.index)]
                fetch.append(v.ret)
                out_metas[v.index] = STEP
            elif v.kind == "counter":
                input_map[f"{v.arg}:0"] = tf.constant(0, tf.as_dtype(v.dtype))
                out_metas[v.index] = Meta("dead", why=f"uses the final loop counter of loop "
                                          f"'{loop.name}', which has no streaming equivalent")
            elif v.kind == "inlist":
                if m.kind == "list_in":
                    v_t = self.list_values[m.key][0]
                elif m.kind == "ta" and m.key in self.ta_in:
                    v_t = self.ta_in[m.key]
                else:
                    raise _Fail(f"loop '{loop.name}': loop variable {v.index} is read as the "
                                f"input sequence but its operand '{v.operand}' is not a "
                                f"sequence of the input ({m})")
                for r in v.detail["reads"]:
                    replace_reads[r] = v_t
                out_metas[v.index] = m
            elif v.kind == "outlist":
                if m.kind not in ("list_out", "ta_flow"):
                    raise _Fail(f"loop '{loop.name}': loop variable {v.index} is written as the "
                                f"output sequence but its operand '{v.operand}' is {m}")
                fetch.append(v.detail["item"])
                key = f"{loop.name}:{v.index}"
                out_metas[v.index] = Meta("list_done", key=key, mode=v.detail["mode"])
            else:  # passthrough
                if m.kind in ("seq",):
                    raise _Fail(f"loop '{loop.name}': the whole input sequence '{v.operand}' "
                                "is used inside the loop (not one step at a time); this "
                                "cannot be streamed")
                if t is not None and m.kind != "static_t":
                    input_map[f"{v.arg}:0"] = t
                if m.kind == "static_t":
                    length_args.add(v.arg)
                out_metas[v.index] = m
        # Body nodes: reads of the input sequence become placeholders.
        gd = tf.compat.v1.GraphDef()
        for n in loop.body.node:
            c = gd.node.add()
            if n.name in replace_reads:
                c.op = "Placeholder"
                c.name = n.name
                dt = n.attr["element_dtype"] if "element_dtype" in n.attr else n.attr["dtype"]
                c.attr["dtype"].CopyFrom(dt)
                input_map[f"{n.name}:0"] = replace_reads[n.name]
            else:
                c.CopyFrom(n)
                c.input[:] = [i for i in n.input if not i.startswith("^")]
                for a in ("_class", "_output_shapes"):
                    if a in c.attr:
                        del c.attr[a]
        dest = sorted({_tensor(f)[0] for f in fetch})
        try:
            sub = tf.compat.v1.graph_util.extract_sub_graph(gd, dest)
        except Exception as e:
            raise _Fail(f"loop '{loop.name}': cannot extract its body: {_first_line(e)}") from None
        for n in sub.node:
            if n.op == "Placeholder" and n.name in length_args:
                raise _Fail(f"loop '{loop.name}': the body computes with loop variable "
                            f"'{n.name}', which is derived from the sequence length; a stream "
                            "does not know the length")
            if n.op == "Placeholder" and f"{n.name}:0" not in input_map:
                kind = next((v.kind for v in loop.vars if v.arg == n.name), "?")
                raise _Fail(f"loop '{loop.name}': the body uses loop variable '{n.name}' "
                            f"({kind}) in a way that cannot be streamed")
            if n.op in _READ_OPS or n.op in ("TensorListSetItem", "TensorArrayWriteV3",
                                             "TensorListPushBack", "TensorListPopBack"):
                raise _Fail(f"loop '{loop.name}': body node '{n.name}' ({n.op}) uses a "
                            "sequence list in a way that cannot be streamed")
        im = {k: v for k, v in input_map.items() if _tensor(k)[0] in {n.name for n in sub.node}}
        try:
            res = self._import(list(sub.node), im, [_tname(f) for f in fetch],
                                   library=loop.body.library)
        except _Fail:
            raise
        except Exception as e:
            raise _Fail(f"loop '{loop.name}': TensorFlow cannot rebuild its body: "
                        f"{_first_line(e)}") from None
        got = dict(zip(fetch, res))
        for v in loop.vars:
            if v.kind == "state":
                self.new_states[(loop.name, v.index)] = got[v.ret]
            elif v.kind == "outlist":
                key = f"{loop.name}:{v.index}"
                self.list_values[key] = (got[v.detail["item"]], v.detail["mode"])
        for v in loop.vars:
            self.tensors[f"{node.name}:{v.index}"] = None if v.kind != "state" else \
                got[v.ret]
            self.metas[f"{node.name}:{v.index}"] = out_metas[v.index]
            if v.kind == "passthrough" and out_metas[v.index].kind not in _LIST_KINDS:
                self.tensors[f"{node.name}:{v.index}"] = self.tensors.get(v.operand)


def _calls_function(node) -> bool:
    return any(v.HasField("func") or (v.HasField("list") and len(v.list.func))
               for v in node.attr.values())


def _scope(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.\-/]", "_", name) + "/"


def _first_line(e: BaseException) -> str:
    """The informative line of an exception (TF's OpError puts it last)."""
    text = str(e).strip() or type(e).__name__
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if len(lines) > 1 and lines[0].startswith("Graph execution error"):
        node = next((ln for ln in lines if ln.startswith("Detected at node")), "")
        msg = next((ln for ln in reversed(lines) if not ln.startswith("[[")), lines[-1])
        return f"{msg} ({node.split(' defined at')[0]})" if node else msg
    return lines[0]


# --------------------------------------------------------------------------
# Public API


def streamify_graph(loaded, probe_T: int = 13) -> StepProgram:
    """Stream a loaded frozen graph (``load_graph.LoadedGraph``).

    Returns a ``StepProgram`` whose ``pure_step`` is a ConcreteFunction
    ``(x_t, *states) -> (y_t, *new_states)`` at batch 1 (with several graph
    outputs: ``(*ys, *new_states)``).
    """
    try:
        return _streamify(loaded, probe_T)
    except _Fail as e:
        raise TfaotError(f"{loaded.path}: {e}") from None


def streamify_graph_model(path, fmt: str, options) -> StepProgram:
    """Pipeline entry: load ``path`` (a graph format) and stream it.

    ``fmt`` is load.py's detected format (unused: ``load_graph`` detects it
    again from the content); ``options`` is pipeline.GraphOptions.
    """
    from .load_graph import load_graph

    loaded = load_graph(path, inputs=getattr(options, "inputs", None),
                        outputs=getattr(options, "outputs", None),
                        time_axis=getattr(options, "time_axis", None))
    return streamify_graph(loaded)


def _streamify(loaded, probe_T: int) -> StepProgram:
    import tensorflow as tf

    if len(loaded.inputs) != 1:
        raise _Fail("the graph has {} inputs ({}); only one streamed input is supported "
                    "(choose it with --inputs)".format(
                        len(loaded.inputs), ", ".join(f"'{i.name}'" for i in loaded.inputs)))
    inp = loaded.inputs[0]
    if inp.shape is None:
        raise _Fail(f"input '{inp.name}' has an unknown shape; give it with --inputs NAME:SHAPE")
    shape = list(inp.shape)
    g = _analyse(loaded)
    stateless = not g.loops and inp.time_axis is None
    a = inp.time_axis
    if a is None:
        unknown = [d for d, s in enumerate(shape) if s is None and d != 0]
        if len(unknown) == 1:
            a = unknown[0]
        elif shape and shape[0] is None and len(shape) >= 3 and shape[1] == 1:
            a = 0  # time-major (T, 1, F)
        else:
            a = 1 if len(shape) >= 3 else 0
        _HINT[0] = (f" (the time axis of input '{inp.name}' was taken to be {a}; "
                    "set it with --time-axis if that is wrong)")
    else:
        _HINT[0] = ""
    if stateless:
        a = None  # no loop: the step is one inference on the input as it is
    elif not 0 <= a < len(shape):
        raise _Fail(f"time axis {a} is out of range for input '{inp.name}' of rank {len(shape)}")
    for d, s in enumerate(shape):
        if s is None and d != a:
            if d == 0:
                shape[d] = 1
            else:
                raise _Fail(f"input '{inp.name}' has unknown dimension {d}"
                            + ("" if a is None else f" besides the time axis {a}")
                            + "; give the shape with --inputs NAME:SHAPE")
    if a is not None and shape[0] != 1 and a != 0 and len(shape) >= 3:
        raise _Fail(f"input '{inp.name}' has batch size {shape[0]}; streaming needs batch 1")
    dynamic = a is not None and shape[a] is None
    full = list(shape)
    if dynamic:
        full[a] = probe_T
    x_t_shape = tuple(s for d, s in enumerate(full) if d != a)
    # States in loop order.
    loop_order = [n for n in g.order if n in g.loops]
    state_order = [(ln, v.index) for ln in loop_order for v in g.loops[ln].vars
                   if v.kind == "state"]
    shape_of = []
    for name in g.order:
        n = g.nodes[name]
        if n.op in ("Reshape", "Squeeze", "StridedSlice", "Unpack") and n.input:
            shape_of.append(_tname(n.input[0]))
            shape_of.append(f"{name}:0")
    value_of = [g.loops[ln].vars[i].operand for ln, i in state_order]
    probe = _probe(loaded, g, tuple(full), a, shape_of, value_of)

    states: list[StateInfo] = []
    used = set()
    for ln, i in state_order:
        init = np.asarray(probe.values[g.loops[ln].vars[i].operand])
        sname = _state_name(ln, used)
        states.append(StateInfo(sname, init.dtype.name, tuple(init.shape), initial=init,
                                layer=ln))
    dtype = tf.as_dtype(inp.dtype)
    specs = [tf.TensorSpec(x_t_shape, dtype, name="x_t")] + [
        tf.TensorSpec(s.shape, tf.as_dtype(s.dtype), name=f"state_{k}")
        for k, s in enumerate(states)]

    holder: dict[str, Any] = {}

    def pure_step(x_t, *st):
        em = _Emitter(g, loaded, probe, state_order, a)
        ys, new = em.run(x_t, list(st))
        holder["emitter"] = em
        return tuple(ys) + tuple(tf.identity(s) for s in new)

    try:
        fn = tf.function(pure_step, input_signature=specs, autograph=False)
        cf = fn.get_concrete_function()
    except _Fail:
        raise
    except TfaotError:
        raise
    out_shapes = [tuple(int(d) if d is not None else 1 for d in t.shape)
                  for t in cf.structured_outputs[:len(loaded.outputs)]]
    outputs = tuple(
        TensorInfo(name, t.dtype.name, shp)
        for name, t, shp in zip(loaded.output_names, cf.structured_outputs, out_shapes))
    for s, t in zip(states, cf.structured_outputs[len(loaded.outputs):]):
        if tuple(t.shape) != s.shape:
            raise _Fail(f"state '{s.name}': initial value has shape {s.shape} but the loop "
                        f"body returns shape {tuple(t.shape)}")
    inputs = (TensorInfo(inp.name, inp.dtype, x_t_shape),)
    sig = ProgramSignature(inputs, outputs, tuple(states))
    state_names = {key: s.name for key, s in zip(state_order, states)}
    report = {
        "mode": "stateless graph (one inference per step)" if stateless else
                "graph (loop bodies of the frozen graph)",
        "input": {**inp.to_json(), "time_axis": a, "probed_shape": list(full)},
        "dynamic_time": dynamic,
        "stateless": stateless,
        "loops": [
            {"name": ln, "form": g.loops[ln].form,
             "vars": {str(v.index): v.kind + (f"({v.detail['mode']})" if "mode" in v.detail
                                              else "") for v in g.loops[ln].vars},
             "states": [state_names[(ln, v.index)] for v in g.loops[ln].vars
                        if v.kind == "state"]}
            for ln in loop_order],
        "loop_vars": [
            {"loop": ln, "body": g.loops[ln].body_fn or None,
             "vars": [{"index": v.index, "kind": v.kind, "operand": v.operand,
                       "dtype": _dtype_name(v.dtype),
                       **({"mode": v.detail["mode"]} if "mode" in v.detail else {})}
                      for v in g.loops[ln].vars]}
            for ln in loop_order],
        "parameters": _count_params(loaded.graph_def),
    }
    program = StepProgram(source=str(loaded.path), format=loaded.format, signature=sig,
                          pure_step=cf, report=report)
    return program


def _state_name(loop_name: str, used: set) -> str:
    parts = [p for p in loop_name.split("/")
             if not re.fullmatch(r"(Stateful)?PartitionedCall(_\d+)?|while|while_context|__loop",
                                 p)]
    base = re.sub(r"[^A-Za-z0-9_]+", "_", "_".join(parts)).strip("_") or "loop"
    k = sum(1 for u in used if u.startswith(base + "_s"))
    name = f"{base}_s{k}"
    while name in used:
        k += 1
        name = f"{base}_s{k}"
    used.add(name)
    return name


def _count_params(graph_def) -> int:
    total = 0
    for n in graph_def.node:
        if n.op == "Const" and n.attr["dtype"].type in _FLOAT_TYPES:
            shp = n.attr["value"].tensor.tensor_shape
            total += int(np.prod([d.size for d in shp.dim], dtype=np.int64)) if shp.dim else 1
    return total
