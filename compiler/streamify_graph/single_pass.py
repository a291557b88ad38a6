"""Loops that run their body once a call: a recurrent layer over a time
axis of one frame that the graph itself makes.

DTLN's real-time SavedModel takes one block of samples per call (input
(1, 512), no time axis) and runs its LSTMs over the spectrum given a time
axis of length 1 (``expand_dims``), their state kept in variables
(frontend/variable_state.py makes those state pairs). Such a loop is no time
loop: each call runs its body exactly once. Taken for one, the stream
followed the input's batch axis and was refused. Where the time input has
no time axis and every loop runs once on the input's own shape (measured:
its iteration counter's final value in a run of the graph), the build is
one inference per step (``stateless``) and each loop is its body, imported
once from the loop's own operands: the list's only element for the frame
it reads, the operands for its state (a stateful layer's: the variables'
state inputs), the item it writes for its output list.

``import_body`` (a loop body with its arguments mapped, as one subgraph) is
shared with the time loops' replay.
"""
from __future__ import annotations

from typing import Any

from ..errors import first_line
from .graphdef import IDENTITY, READ_OPS, WHILE_OPS, Fail, parse_tensor, scope, tname
from .meta import LIST_KINDS, Meta

#: list ops a body may not keep: reads are replaced, writes fetched
_LIST_WRITES = ("TensorListSetItem", "TensorArrayWriteV3", "TensorListPushBack",
                "TensorListPopBack")


def single_pass_loops(loaded, g, input_shapes) -> set[str]:
    """The functional loops of ``g`` that run their body exactly once on
    inputs of ``input_shapes`` (``loaded.inputs`` order): each loop's
    counter (from a constant, by a constant) ends one step past its start."""
    from .analysis import probe

    if any(s is None or None in tuple(s) for s in input_shapes):
        return set()  # (an open axis: the loop's length may follow it)
    input_shapes = [tuple(s) for s in input_shapes]
    counted = {}
    for name, loop in g.loops.items():
        if g.nodes[name].op not in WHILE_OPS:
            return set()  # a TF1 frame (its trip count is not a node's output)
        counter = next((v for v in loop.vars if v.kind == "counter"), None)
        by = None if counter is None else body_const(loop, counter.detail.get("by"))
        if by is None or by.size != 1:
            return set()
        counted[name] = (counter, by)
    value_of = [t for name, (v, _) in counted.items() for t in (v.operand, f"{name}:{v.index}")]
    values = probe(loaded, g, input_shapes[0], None, [], value_of,
                   input_shapes=input_shapes).values
    return {name for name, (v, by) in counted.items()
            if int(values[f"{name}:{v.index}"]) - int(values[v.operand]) == by.item()}


def body_const(loop, tensor: str | None):
    """The value of the Const node of the loop body that ``tensor`` names,
    or None (no such tensor, or not a Const)."""
    import tensorflow as tf

    if tensor is None:
        return None
    node = next((n for n in loop.body.node if n.name == parse_tensor(tensor)[0]), None)
    if node is None or node.op != "Const":
        return None
    return tf.make_ndarray(node.attr["value"].tensor)


def emit_single_pass(em, node) -> None:
    """The loop ``node`` run once (module doc), into the Emitter ``em``."""
    loop = em.g.once[node.name]
    input_map: dict[str, Any] = {}
    replace_reads: dict[str, Any] = {}
    fetch: list[str] = []
    for v in loop.vars:
        m = em.metas.get(v.operand)
        if m is None:
            raise Fail(f"loop '{loop.name}': operand '{v.operand}' was not produced")
        if m.kind not in ("static", "static_t", "step") and \
                not (v.kind in ("inlist", "outlist") and m.kind in LIST_KINDS | {"step"}):
            raise Fail(f"loop '{loop.name}': loop variable {v.index} ('{v.operand}') is "
                       f"{m}; a loop that runs once a call reads no sequence")
        if v.kind == "inlist":
            element = _first_element(em, loop, v)
            replace_reads.update({r: element for r in v.detail["reads"]})
        elif v.kind == "outlist":
            fetch.append(v.detail["item"])
        elif v.kind == "state":
            input_map[f"{v.arg}:0"] = em.tensors[v.operand]
            fetch.append(v.ret)
        elif v.kind != "accumulator":  # counters from their start, passthroughs, frames
            input_map[f"{v.arg}:0"] = em.tensors[v.operand]
    got = import_body(em, loop, input_map, replace_reads, fetch)
    held = all(em.metas[v.operand].held for v in loop.vars
               if em.metas[v.operand].kind == "step")
    once = Meta("step", held=held)
    for v in loop.vars:
        out, meta = None, Meta("dead", why=f"uses the final {v.kind} of loop "
                               f"'{loop.name}', which tfaot does not compute")
        if v.kind == "state":
            out, meta = got[v.ret], once
        elif v.kind == "outlist":
            key = f"{loop.name}:{v.index}"
            em.list_values[key] = (got[v.detail["item"]], v.detail["mode"])
            em.list_frames[key] = once
            meta = Meta("list_done", key=key, mode=v.detail["mode"])
        elif v.kind == "passthrough":
            out, meta = em.tensors.get(v.operand), em.metas[v.operand]
        em.tensors[f"{node.name}:{v.index}"] = out
        em.metas[f"{node.name}:{v.index}"] = meta


def _first_element(em, loop, v):
    """The tensor a loop's input list was made from, at index 0 (the only
    index a loop that runs once reads)."""
    import tensorflow as tf

    made = em.g.nodes.get(parse_tensor(v.operand)[0])
    while made is not None and made.op in IDENTITY and made.input:
        made = em.g.nodes.get(parse_tensor(made.input[0])[0])
    if made is None or made.op != "TensorListFromTensor":
        raise Fail(f"loop '{loop.name}': its input list '{v.operand}' is not made by "
                   "TensorListFromTensor")
    whole = em.tensors[tname(made.input[0])]
    if whole.shape.rank is None or whole.shape[0] != 1:
        raise Fail(f"loop '{loop.name}': node '{made.name}' makes a list of "
                   f"{whole.shape[0] if whole.shape.rank else 'unknown'} elements, but the "
                   "loop runs once")
    with tf.name_scope(scope(made.name + "/first")):
        return tf.squeeze(whole, [0])


def import_body(em, loop, input_map: dict, replace_reads: dict, fetch: list[str],
                unknown_args: dict | None = None) -> dict:
    """The loop body's tensors ``fetch`` (body tensor names), its arguments
    mapped by ``input_map`` and the list reads ``replace_reads`` names
    replaced by their tensors; a body that uses an argument left unmapped,
    one of ``unknown_args`` (argument -> why a stream has no value for it:
    only the loop's condition may read it), or a list otherwise, is refused
    by name."""
    import tensorflow as tf

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
    dest = sorted({parse_tensor(f)[0] for f in fetch})
    try:
        sub = tf.compat.v1.graph_util.extract_sub_graph(gd, dest)
    except Exception as e:
        raise Fail(f"loop '{loop.name}': cannot extract its body: {first_line(e)}") from None
    for n in sub.node:
        if n.op == "Placeholder" and n.name in (unknown_args or {}):
            raise Fail(f"loop '{loop.name}': the body computes with loop variable "
                       f"'{n.name}', which {unknown_args[n.name]}; a stream does not "
                       "have it")
        if n.op == "Placeholder" and f"{n.name}:0" not in input_map:
            kind = next((v.kind for v in loop.vars if v.arg == n.name), "?")
            raise Fail(f"loop '{loop.name}': the body uses loop variable '{n.name}' "
                       f"({kind}) in a way that cannot be streamed")
        if n.op in READ_OPS or n.op in _LIST_WRITES:
            raise Fail(f"loop '{loop.name}': body node '{n.name}' ({n.op}) uses a "
                       "sequence list in a way that cannot be streamed")
    kept = {n.name for n in sub.node}
    im = {k: v for k, v in input_map.items() if parse_tensor(k)[0] in kept}
    try:
        res = em._import(list(sub.node), im, [tname(f) for f in fetch],
                         library=loop.body.library)
    except Exception as e:
        raise Fail(f"loop '{loop.name}': TensorFlow cannot rebuild its body: "
                   f"{first_line(e)}") from None
    return dict(zip(fetch, res))
