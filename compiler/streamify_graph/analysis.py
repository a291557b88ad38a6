"""Analysis of the outer graph before the replay.

``analyse`` finds the loops (functionalising v1 frames), classifies their
variables and orders the nodes the outputs need; ``probe`` runs the original
graph once on a random sequence, which gives the full-sequence shapes (for
``Reshape``/``StridedSlice``/``Squeeze``/``Unpack``) and the loop operands
(the states' initial values).
"""
from __future__ import annotations

import os
import sys
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import first_line
from .classify import classify
from .conds import lower_outer_conds
from .graphdef import PY_FUNC_OPS, Fail, node_of, parse_tensor, py_function_message
from .loops import Loop, functional_loops, functionalize_v1


@dataclass
class Graph:
    path: Path
    nodes: dict[str, Any]  # outer nodes (loops replaced by LOOP_OP nodes)
    order: list[str]  # topological order of the nodes needed for the outputs
    loops: dict[str, Loop]
    alias: dict[str, str]  # outer tensor -> tensor name in the original graph
    unrolled: dict[str, Any] = field(default_factory=dict)  # pseudo node -> unrolled.Unrolled
    not_unrolled: str = ""  # why no unrolled recurrence was found (for the notice)
    once: dict[str, Loop] = field(default_factory=dict)  # loops run once a call (single_pass.py)


def analyse(loaded, unrolled: bool = True) -> Graph:
    """The graph's loops, order and (``unrolled``) unrolled recurrences;
    without ``unrolled`` an unrolled cell stays as its copies (a
    --whole-window build runs them all)."""
    gd = loaded.graph_def
    _check_references(gd)
    new_nodes, v1_loops, exit_map = functionalize_v1(gd)
    new_nodes = lower_outer_conds(new_nodes)
    nodes = {n.name: n for n in new_nodes}
    loops = {lp.name: lp for lp in v1_loops}
    for lp in functional_loops(gd):
        loops[lp.name] = lp
    alias = {v: k + ":0" for k, v in exit_map.items()}
    for lp in loops.values():
        classify(lp)
    # Topological order of what the outputs need (data inputs only).
    roots = []
    for out in loaded.outputs:
        root = parse_tensor(out)[0]
        roots.append(root if root in nodes else parse_tensor(exit_map.get(root, root))[0])
    needed = _topological(roots, nodes, strict=True)
    _check_py_functions(nodes, needed, loops, gd.library)
    g = Graph(Path(loaded.path), nodes, needed, loops, alias)
    if not loops and loaded.inputs and unrolled:
        _find_unrolled(g, loaded)
    return g


def _find_unrolled(g: Graph, loaded) -> None:
    """Replace each unrolled recurrence (``unrolled.py``) by one pseudo node:
    the first, then the next on what it reads (stacked unrolled layers),
    until no more are found."""
    import tensorflow as tf

    from .unrolled import UNROLLED_OP

    names = [i.name for i in loaded.inputs]
    roots = [parse_tensor(o)[0] for o in loaded.outputs]
    redirect: dict[str, str] = {}
    while True:
        # (a layer reading an earlier one's outputs depends on the input
        # through them, though they are gone from the graph)
        u = _next_unrolled(g, names + list(redirect), first=not redirect)
        if u is None:
            return
        pseudo = tf.compat.v1.NodeDef(name=u.name, op=UNROLLED_OP)
        pseudo.input.extend(dict.fromkeys([u.slicer.source] + u.statics +
                                          [s["init"] for s in u.states]))
        g.nodes = {k: v for k, v in g.nodes.items() if k not in u.removed}
        g.nodes[u.name] = pseudo
        redirect.update({r: u.name for r in u.removed})
        g.order = _topological(roots, g.nodes, redirect)
        g.unrolled[u.name] = u


def _next_unrolled(g: Graph, dependent: list[str], first: bool):
    """The next unrolled recurrence of ``g`` on the tensors ``dependent``
    names, or None; the first search's failure is kept in ``g.not_unrolled``."""
    import tensorflow as tf

    from .unrolled import NotUnrolled, find_unrolled, time_consts

    def const_value(t):
        n = g.nodes.get(parse_tensor(t)[0])
        if n is None or n.op != "Const":
            return None
        return tf.make_ndarray(n.attr["value"].tensor)

    # Retried: static_rnn with a sequence_length compares a constant time
    # index in each copy (taken as the copies' time); a frozen Keras 3 cell
    # computes its static inputs anew in each copy (compared by structure).
    times = time_consts(g.nodes, g.order, const_value)
    tries = [(None, False), (times, False), (None, True), (times, True)]
    first_error = None
    for t, structural in [(t, s) for t, s in tries if t is None or times]:
        try:
            return find_unrolled(g.nodes, g.order, dependent, const_value, t, structural)
        except NotUnrolled as e:
            first_error = first_error or str(e)
    if first:
        g.not_unrolled = first_error
    return None


def _topological(roots: list[str], nodes: dict, redirect: dict[str, str] | None = None, *,
                 strict: bool = False) -> list[str]:
    """Nodes the roots need (data inputs; ``redirect`` maps removed nodes), inputs first.

    ``strict``: a reference to a missing node or a cycle is a ``Fail``
    naming the node (a malformed graph), not a crash.
    """
    redirect = redirect or {}
    order: list[str] = []
    state: dict[str, int] = {}  # 1: on the stack, 2: done
    for root in roots:
        stack = [(redirect.get(root, root), False)]
        while stack:
            u, done = stack.pop()
            if done:
                state[u] = 2
                order.append(u)
                continue
            if state.get(u):
                continue
            if strict and u not in nodes:
                raise Fail(f"node '{u}' is referenced but not in the graph")
            state[u] = 1
            stack.append((u, True))
            for i in nodes[u].input:
                if i.startswith("^"):
                    continue
                src = parse_tensor(i)[0]
                src = redirect.get(src, src)
                if strict and state.get(src) == 1:
                    raise Fail(f"the graph has a cycle through node '{src}'")
                if not state.get(src):
                    stack.append((src, False))
    return order


def _check_references(graph_def) -> None:
    """Every input of every node names a node of the graph (a corrupted file may not)."""
    names = {n.name for n in graph_def.node}
    for n in graph_def.node:
        for i in n.input:
            if node_of(i) not in names:
                raise Fail(f"malformed graph: node '{n.name}' (op {n.op}) reads '{i}', "
                           "which is not in the graph")


def _check_py_functions(nodes, order, loops, library) -> None:
    """A Python callback (tf.py_function, tf.numpy_function) cannot be compiled."""
    funcs = {f.signature.name: f for f in library.function}
    seen: set[str] = set()

    def check(node_defs, where):
        for n in node_defs:
            if n.op in PY_FUNC_OPS:
                raise Fail(py_function_message(n, where))
            for v in n.attr.values():
                called = [v.func] if v.HasField("func") else list(v.list.func)
                for f in called:
                    if f.name in funcs and f.name not in seen:
                        seen.add(f.name)
                        check(funcs[f.name].node_def, f" in function '{f.name}'")

    check((nodes[u] for u in order), "")
    for lp in loops.values():
        check(lp.body.node, f" in loop '{lp.name}'")



# --------------------------------------------------------------------------
# Probe: run the original graph once


@dataclass
class Probe:
    T: int
    shapes: dict[str, tuple[int, ...]]
    values: dict[str, np.ndarray]
    outputs: list[np.ndarray]


def probe(loaded, g: Graph, x_shape: tuple[int, ...], time_axis: int | None,
           shape_of: list[str], value_of: list[str], input_shapes=None) -> Probe:
    """``x_shape``: the first input's; ``input_shapes``: every input's, in
    ``loaded.inputs`` order, for a graph with several inputs."""
    import tensorflow as tf

    rng = np.random.default_rng(0)
    feed = {}
    for inp, shape in zip(loaded.inputs, input_shapes or [x_shape]):
        feed[f"{inp.name}:0"] = probe_value(rng, inp.dtype, shape)
    graph = tf.Graph()
    with graph.as_default():
        try:
            tf.graph_util.import_graph_def(loaded.graph_def, name="")
        except Exception as e:
            raise Fail(f"TensorFlow cannot import the graph: {_error_text(e)}") from None
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
        with tf.compat.v1.Session(graph=graph) as sess, _quiet_native_stderr():
            try:
                res = sess.run(fetch, feed)
            except Exception as e:
                text = _error_text(e)
                # a ragged input reaches the graph as its components (values,
                # row splits), fed here as plain tensors of the probe's shape
                ragged = ("; the model takes a ragged tensor (a SavedModel signature passes "
                          "its values and row splits as inputs): tfaot takes dense tensors, "
                          "export a signature whose inputs are tf.TensorSpec"
                          if "Ragged" in text else "")
                raise Fail(f"running the graph on a test sequence of shape {x_shape} failed: "
                           f"{text}{ragged}") from None
            _refuse_randomness(loaded.graph_def, sess, fetch, feed, res)
    shapes = {k[2:]: tuple(int(d) for d in v) for k, v in res.items() if k.startswith("s:")}
    values = {k[2:]: v for k, v in res.items() if k.startswith("v:")}
    outs = [res[f"o:{k}"] for k in range(len(loaded.outputs))]
    return Probe(None if time_axis is None else x_shape[time_axis], shapes, values, outs)


#: TensorFlow ops that draw new random numbers at each run (a stateless
#: random op with a constant seed gives the same numbers every time).
RANDOM_OPS = {"RandomUniform", "RandomUniformInt", "RandomStandardNormal", "TruncatedNormal",
              "Multinomial", "RandomShuffle", "RandomGamma", "RandomPoisson", "RandomPoissonV2"}


def _refuse_randomness(graph_def, sess, fetch: dict, feed: dict, res: dict) -> None:
    """A graph with random ops whose outputs differ from one run to the next
    (dropout left on for training: a v1 DropoutWrapper's keep_prob under 1)
    is refused: it built, and verify failed by 0.9. Dropout whose keep_prob
    is 1 draws numbers that change nothing, and builds."""
    nodes = [*graph_def.node, *(n for f in graph_def.library.function for n in f.node_def)]
    random = [n.name for n in nodes if n.op in RANDOM_OPS]
    if not random:
        return
    outputs = [k for k in fetch if k.startswith("o:")]
    again = sess.run([fetch[k] for k in outputs], feed)
    if all(np.array_equal(res[k], v, equal_nan=True) for k, v in zip(outputs, again)):
        return
    raise Fail(f"node '{random[0]}' draws new random numbers at every run, and the outputs "
               "change with them (dropout or noise left on for training), which a compiled "
               "step cannot repeat; export the model for inference (keep_prob=1, "
               "training=False) and build that")


def probe_value(rng, dtype: str, shape) -> np.ndarray:
    if np.issubdtype(np.dtype(dtype), np.integer):
        return rng.integers(0, 2, shape).astype(dtype)  # valid ids for any embedding
    if dtype == "bool":
        return rng.integers(0, 2, shape).astype(bool)
    return rng.standard_normal(shape).astype(dtype)


@contextmanager
def _quiet_native_stderr():
    """Drop what TensorFlow's C++ side prints while the probe runs.

    A malformed graph can make TensorFlow's graph optimiser print MLIR
    diagnostics straight to file descriptor 2 (and then fall back and run
    fine); errors that matter come back as exceptions. TFAOT_DEBUG=1 keeps them.
    """
    if os.environ.get("TFAOT_DEBUG"):
        yield
        return
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def _error_text(e: BaseException) -> str:
    """One informative line from a TensorFlow runtime error, with the node at fault."""
    import tensorflow as tf

    if not isinstance(e, tf.errors.OpError):
        return first_line(e)
    lines = [ln.strip() for ln in (e.message or "").splitlines()
             if ln.strip() and not ln.strip().startswith("[[")]
    msg = lines[-1] if lines else type(e).__name__
    op = getattr(e, "op", None)
    return f"{msg} (node '{op.name}')" if op is not None else msg
