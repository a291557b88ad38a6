"""Loop discovery: every time loop of the outer graph becomes a ``Loop``.

A ``Loop`` is a body GraphDef whose arguments are Placeholders, one return
tensor per loop variable, and the outer operands. Functional loops
(``While``/``StatelessWhile``) are read from their body function; TF1 v1
frames (``Enter``/``Merge``/``Switch``/``NextIteration``/``Exit``) are
functionalised here, at GraphDef level, and replaced in the outer graph by a
``LOOP_OP`` pseudo node. A ``tf.cond`` inside a v1 body becomes a select of
its two branches (``conds.py``); a nested while frame is refused, by name.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from ..errors import first_line
from .conds import CondLowering, static_bool
from .graphdef import CF_V1, WHILE_OPS, Fail, parse_tensor, tname

LOOP_OP = "__TfaotLoop"


@dataclass
class LoopVar:
    index: int
    operand: str  # outer tensor feeding the variable ("node:i")
    arg: str  # body Placeholder node name
    ret: str  # body tensor returned for the next iteration ("node:i")
    dtype: int  # DataType enum
    kind: str = ""  # inlist | outlist | counter | state | accumulator | passthrough
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




def functional_loops(graph_def) -> list[Loop]:
    """A ``Loop`` for every functional ``While``/``StatelessWhile`` node."""
    funcs = {f.signature.name: f for f in graph_def.library.function}
    loops = []
    for node in graph_def.node:
        if node.op not in WHILE_OPS:
            continue
        body_name = node.attr["body"].func.name
        fdef = funcs.get(body_name)
        if fdef is None:
            raise Fail(f"loop '{node.name}': its body function '{body_name}' is not in the "
                       "graph's function library")
        body_gd, flat = _function_graph_def(fdef, node)
        arg_names = [a.name for a in fdef.signature.input_arg]
        data_inputs = [i for i in node.input if not i.startswith("^")]
        if len(data_inputs) != len(arg_names):
            raise Fail(f"loop '{node.name}': {len(data_inputs)} operands but the body "
                       f"'{body_name}' takes {len(arg_names)}")
        vars_ = []
        for i, (arg, out_arg) in enumerate(zip(arg_names, fdef.signature.output_arg)):
            ret = fdef.ret.get(out_arg.name)
            if ret is None:
                raise Fail(f"malformed graph: function '{body_name}' (body of loop "
                           f"'{node.name}') does not return its output '{out_arg.name}'")
            if ret in flat:
                ret = flat[ret]
            elif ret in arg_names:
                ret = ret + ":0"
            else:  # "node:output:0" form not in the map
                parts = ret.split(":")
                ret = f"{parts[0]}:{parts[-1]}" if len(parts) == 3 else tname(ret)
            vars_.append(LoopVar(i, tname(data_inputs[i]), arg, tname(ret),
                                 fdef.signature.input_arg[i].type))
        body_gd.library.CopyFrom(graph_def.library)
        loops.append(Loop(node.name, "While", body_gd, vars_, body_fn=body_name))
    return loops


def _function_graph_def(fdef, loop_node):
    """``function_def_to_graph_def``, with a malformed function reported by name."""
    from tensorflow.python.framework.function_def_to_graph import function_def_to_graph_def

    fname = fdef.signature.name
    where = f"malformed graph: function '{fname}' (body of loop '{loop_node.name}')"
    try:
        return function_def_to_graph_def(fdef)
    except KeyError as e:
        missing = e.args[0] if e.args else ""
        culprit = next((n.name for n in fdef.node_def if missing in n.input), None)
        if culprit is not None:
            raise Fail(f"{where}: node '{culprit}' reads '{missing}', which does not "
                       "exist") from None
        raise Fail(f"{where}: it refers to '{missing}', which does not exist") from None
    except Exception as e:  # unknown op, bad attribute, ...
        culprit = next((n for n in fdef.node_def if f"'{n.op}'" in str(e)), None)
        if culprit is not None:
            raise Fail(f"{where}: node '{culprit.name}' (op '{culprit.op}'): "
                       f"{first_line(e)}") from None
        raise Fail(f"{where}: {first_line(e)}") from None


def functionalize_v1(graph_def) -> tuple[list, list[Loop], dict[str, str]]:
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
            consumers.setdefault(parse_tensor(i.lstrip("^"))[0], []).append(n.name)
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
                    raise Fail(f"nested while loops are not supported: frame "
                               f"'{nodes[c].attr['frame_name'].s.decode()}' (node '{c}') is "
                               f"inside frame '{fname}'")
                seen.add(c)
                work.append(c)
        for m in seen:
            if m in in_frame and in_frame[m] != fname:
                raise Fail(f"node '{m}' belongs to two while frames ('{in_frame[m]}' and "
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
                vars_.append(LoopVar(idx, tname(e.input[0]), arg, f"{arg}:0", e.attr["T"].type))
                continue
            merges = [c for c in consumers.get(e.name, []) if nodes[c].op in ("Merge", "RefMerge")]
            if len(merges) != 1:
                raise Fail(f"while frame '{fname}': Enter node '{e.name}' does not feed exactly "
                           "one Merge; this control flow is not a plain while loop")
            merge = nodes[merges[0]]
            nexts = [i for i in merge.input if not i.startswith("^")
                     and nodes[parse_tensor(i)[0]].op in ("NextIteration", "RefNextIteration")]
            switches = [c for c in consumers.get(merge.name, [])
                        if nodes[c].op in ("Switch", "RefSwitch")
                        and parse_tensor(nodes[c].input[0])[0] == merge.name]
            if len(nexts) != 1 or len(switches) != 1:
                raise Fail(f"while frame '{fname}': Merge node '{merge.name}' is not a loop "
                           "variable (expected one NextIteration and one Switch)")
            nxt = nodes[parse_tensor(nexts[0])[0]]
            sw = nodes[switches[0]]
            idx = len(vars_)
            arg = f"tfaot_loop_arg{idx}"
            src_map[f"{sw.name}:1"] = arg
            vars_.append(LoopVar(idx, tname(e.input[0]), arg, tname(nxt.input[0]),
                                 e.attr["T"].type))
            for c in consumers.get(sw.name, []):
                if nodes[c].op in ("Exit", "RefExit"):
                    exits[idx] = c
        # Body: backward closure from the returns, stopping at the arguments;
        # a tf.cond inside is lowered to a select of both branches (conds.py).
        arg_names = {v.arg for v in vars_}
        conds = CondLowering(nodes, set(src_map), fname)
        for v in vars_:
            if tname(v.ret) not in src_map:
                v.ret = conds.through(v.ret)
        work = [parse_tensor(v.ret)[0] for v in vars_
                if tname(v.ret) not in src_map and parse_tensor(v.ret)[0] not in arg_names]
        needed = set()
        rewritten: dict[str, Any] = {}  # cond Merge -> its SelectV2
        while work:
            u = work.pop()
            if u in needed:
                continue
            needed.add(u)
            n = nodes[u]
            if u not in mem and not (n.op == "Const" and not n.input):
                raise Fail(f"while frame '{fname}': body node uses '{u}' from outside the "
                           "loop without an Enter")
            if n.op in ("Merge", "RefMerge"):
                n = rewritten[u] = conds.select(n, static=lambda p: static_bool(nodes, p))
            elif n.op in CF_V1:
                raise Fail(f"while frame '{fname}': node '{u}' ({n.op}) is control flow inside "
                           "the loop body that is not a tf.cond; this is not supported")
            for i in n.input:
                if i.startswith("^"):
                    continue
                t = conds.through(i)
                if t in src_map:
                    continue
                work.append(parse_tensor(t)[0])
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
            c.CopyFrom(rewritten.get(n.name, n))
            del c.input[:]
            for i in rewritten.get(n.name, n).input:
                if i.startswith("^"):
                    continue
                t = conds.through(i)
                c.input.append(src_map.get(t, t))
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
            src = parse_tensor(i.lstrip("^"))[0]
            if src in in_frame:
                if ctrl:
                    continue
                if src not in exit_map:
                    raise Fail(f"node '{n.name}' uses '{i}' from inside while frame "
                               f"'{in_frame[src]}' (only Exit outputs may leave a loop)")
                c.input.append(exit_map[src])
            else:
                c.input.append(i)
        new_nodes.append(c)
    return new_nodes, loops, exit_map


def initial_state_refusal(loop: str, index: int, operand: str, source: str | None,
                          meta) -> str:
    """Why loop ``loop``'s state ``index``, whose initial value ``operand``
    (the graph input ``source`` itself, or None) is not constant (``meta``:
    what it depends on), cannot stream; with the --state pair that would
    stream it where there is one."""
    what = f"input '{source}'" if source else f"'{operand}'"
    if source is None and meta.kind == "step":
        # (computed from an input without a time axis: no state input to pair)
        return (f"loop '{loop}': the initial value of state {index} ({what}) is computed from "
                "an input without a time axis (a conditioning vector through a layer): a "
                "graph's loop streams from a constant initial state or from a state input "
                "fed back (--state IN=OUT), and the Keras model itself streams such an "
                "initial_state (build the .keras file)")
    pair = f"--state {source}=OUT" if source else "--state IN=OUT"
    return (f"loop '{loop}': the initial value of state {index} ({what}) depends on the "
            f"input ({meta}); only constant initial states can be streamed (a state input "
            f"the caller feeds back: name its pair with {pair}, OUT the output that returns "
            "the final state, and the loop keeps it, from zeros at reset)")
