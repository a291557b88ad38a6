"""Loops that only copy frames: ``tf.vectorized_map`` over the frames.

``tf.vectorized_map(lambda i: f(x[i]), tf.range(T))`` over a time-major
``x`` vectorises ``f`` (the frames become one batch) but not ``x[i]``, a
strided slice at an index that differs per iteration: pfor falls back to a
``While`` loop whose iteration k writes frame ``x[index[k]]`` into a
TensorList, stacked after the loop, the index vector computed through
pfor's gathers. Such a loop does no arithmetic; where the index vector is
0..T-1 its stack is ``x`` itself. The loop streams as it is nowhere (it
indexes ``x`` with a value), so where its stack equals ``x`` on random
inputs of two lengths, each item being a strided slice of the
loop-invariant ``x`` (checked in the body), the stack is replaced by an
Identity of ``x`` and the loop dropped. (Keras 3's TimeDistributed over an
open time axis is written so, but keras 3.15 maps over the batch size, not
the frames: that loop is no copy, and the classification refuses it.)
"""
from __future__ import annotations

import numpy as np

from .analysis import probe_value
from .graphdef import Fail, parse_tensor, tname
from .loops import functional_loops

#: Frame counts the candidates are checked on: two, so that an index vector
#: that only happens to be 0..T-1 at one length is not taken.
CHECK_LENGTHS = (5, 11)


def frame_copies_as_identities(loaded):
    """``loaded.graph_def`` with every frame-copying loop's stack replaced by
    the copied tensor; (graph_def, count). The graph is unchanged (count 0)
    where no loop qualifies or the check cannot run."""
    gd = loaded.graph_def
    candidates = _candidates(gd)
    if not candidates:
        return gd, 0
    copies = {stack: x for stack, x in candidates.items() if _stack_is_copy(loaded, stack, x)}
    if not copies:
        return gd, 0
    return _replaced(gd, copies, loaded.outputs), len(copies)


def _candidates(gd) -> dict[str, str]:
    """TensorListStack node -> the outer tensor its loop copies frames of
    (``_copied_frames``), for every functional loop of ``gd``."""
    users: dict[str, list] = {}
    for n in gd.node:
        for i in n.input:
            if not i.startswith("^"):
                users.setdefault(parse_tensor(i)[0], []).append((n, i))
    try:
        loops = functional_loops(gd)
    except Fail:
        return {}  # (the streamifier names what is wrong with the loop)
    found = {}
    for loop in loops:
        copy = _copied_frames(loop, users.get(loop.name, []))
        if copy is not None:
            found[copy[0]] = copy[1]
    return found


def _copied_frames(loop, outputs: list) -> tuple[str, str] | None:
    """(stack node, copied tensor) where the loop's only list item is
    ``StridedSlice(x, ...)`` shrinking axis 0, ``x`` a loop variable the
    body returns unchanged, and its only output in use (``outputs``: the
    outer nodes reading it) is that list, read by one TensorListStack."""
    body = {n.name: n for n in loop.body.node}
    writes = [n for n in body.values() if n.op == "TensorListSetItem"]
    if len(writes) != 1:
        return None
    item = body.get(parse_tensor(writes[0].input[2])[0])
    if item is None or item.op != "StridedSlice" or item.attr["shrink_axis_mask"].i != 1:
        return None
    source = next((v for v in loop.vars if v.arg == parse_tensor(item.input[0])[0]), None)
    listed = next((v for v in loop.vars if _returns(body, v, writes[0])), None)
    if source is None or listed is None or parse_tensor(source.ret)[0] != source.arg:
        return None
    used = {parse_tensor(i)[1] for _, i in outputs}
    if used != {listed.index} or len(outputs) != 1 or outputs[0][0].op != "TensorListStack":
        return None
    return outputs[0][0].name, source.operand


def _returns(body: dict, var, write) -> bool:
    """Whether loop variable ``var`` returns ``write``'s list (through Identities)."""
    name = parse_tensor(var.ret)[0]
    while name in body and body[name].op == "Identity" and name != write.name:
        name = parse_tensor(body[name].input[0])[0]
    return name == write.name


def _stack_is_copy(loaded, stack: str, x: str) -> bool:
    """Whether the graph's ``stack`` equals ``x`` on random inputs of each
    CHECK_LENGTHS frame count (the open axes of every input take it)."""
    import tensorflow as tf

    rng = np.random.default_rng(0)
    graph = tf.Graph()
    with graph.as_default():
        tf.graph_util.import_graph_def(loaded.graph_def, name="")
    with tf.compat.v1.Session(graph=graph) as sess:
        for length in CHECK_LENGTHS:
            feed = {}
            for inp in loaded.inputs:
                if inp.shape is None:
                    return False
                shape = [1 if k == 0 and d is None else length if d is None else d
                         for k, d in enumerate(inp.shape)]
                feed[f"{inp.name}:0"] = probe_value(rng, inp.dtype, shape)
            try:
                got, want = sess.run([f"{stack}:0", tname(x)], feed)
            except Exception:  # noqa: BLE001 (not a frame copy we can show)
                return False
            if got.shape != want.shape or not np.array_equal(got, want):
                return False
    return True


def _replaced(gd, copies: dict[str, str], outputs: list[str]):
    """``gd`` with each stack an Identity of its copied tensor, pruned to
    what the outputs need (the loops fall away)."""
    import tensorflow as tf

    from tensorflow.core.framework import graph_pb2

    out = graph_pb2.GraphDef()
    out.CopyFrom(gd)
    for node in out.node:
        if node.name in copies:
            dtype = node.attr["element_dtype"].type
            node.op = "Identity"
            del node.input[:]
            node.input.append(copies[node.name])
            node.attr.clear()
            node.attr["T"].type = dtype
    keep = [parse_tensor(o)[0] for o in outputs]
    pruned = tf.compat.v1.graph_util.extract_sub_graph(out, keep)
    pruned.library.CopyFrom(out.library)
    pruned.versions.CopyFrom(out.versions)
    return pruned
