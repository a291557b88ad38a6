"""TensorFlow's fused RNN cell ops, written out as the plain ops they stand for.

TF1 graphs built with ``tf.contrib.rnn.LSTMBlockCell``, ``LSTMBlockFusedCell``
or ``GRUBlockCell`` (published speech models, e.g. Mozilla DeepSpeech's
inference graph) hold ops the StableHLO import has no lowering for:
``LSTMBlockCell`` and ``GRUBlockCell`` (one time step) and ``BlockLSTM`` /
``BlockLSTMV2`` (a whole sequence). ``expand_block_ops`` replaces each in
the GraphDef by the equations its kernel computes
(tensorflow/core/kernels/rnn/lstm_ops.h, gru_ops.h), built by TensorFlow
from ``lstm_cell``/``gru_cell``; a sequence op of a fixed length becomes
the cell unrolled over its frames (Unpack, the chained cells, Pack), which
the unrolled-recurrence streamifier then streams one frame per step. The
graph as given stays the reference ``tfaot verify`` runs.
"""
from __future__ import annotations

import numpy as np

from .graphdef import Fail

#: The step cells and the sequence ops written out.
CELL_OPS = ("LSTMBlockCell", "GRUBlockCell")
SEQUENCE_OPS = ("BlockLSTM", "BlockLSTMV2")


def _attr(node, name: str, default):
    if name not in node.attr:
        return default
    value = node.attr[name]
    kind = value.WhichOneof("value")
    return getattr(value, kind) if kind else default


def lstm_cell(x, cs_prev, h_prev, w, wci, wcf, wco, b, *, forget_bias: float,
              cell_clip: float, use_peephole: bool, gate_order: str = "icfo"):
    """One LSTMBlockCell step: its seven outputs ``(i, cs, f, o, ci, co, h)``.
    ``gate_order``: the blocks of ``w``'s columns ("icfo": LSTMBlockCell and
    BlockLSTM; "ifco": BlockLSTMV2)."""
    import tensorflow as tf

    gates = tf.matmul(tf.concat([x, h_prev], axis=1), w) + b
    parts = dict(zip(gate_order, tf.split(gates, 4, axis=1)))
    i, f, ci, o = parts["i"], parts["f"] + forget_bias, parts["c"], parts["o"]
    if use_peephole:
        i, f = i + cs_prev * wci, f + cs_prev * wcf
    i, f, ci = tf.sigmoid(i), tf.sigmoid(f), tf.tanh(ci)
    cs = ci * i + cs_prev * f
    if cell_clip > 0:
        cs = tf.clip_by_value(cs, -cell_clip, cell_clip)
    o = tf.sigmoid(o + cs * wco) if use_peephole else tf.sigmoid(o)
    co = tf.tanh(cs)
    return [i, cs, f, o, ci, co, co * o]


def gru_cell(x, h_prev, w_ru, w_c, b_ru, b_c):
    """One GRUBlockCell step: ``(r, u, c, h)``."""
    import tensorflow as tf

    r, u = tf.split(tf.sigmoid(tf.matmul(tf.concat([x, h_prev], 1), w_ru) + b_ru), 2, axis=1)
    c = tf.tanh(tf.matmul(tf.concat([x, h_prev * r], 1), w_c) + b_c)
    return [r, u, c, u * h_prev + (1.0 - u) * c]


def _lstm_attrs(node) -> dict:
    v2 = node.op == "BlockLSTMV2"
    return {"forget_bias": 0.0 if v2 else float(_attr(node, "forget_bias", 1.0)),
            "cell_clip": float(_attr(node, "cell_clip", 0.0 if v2 else 3.0)),
            "use_peephole": bool(_attr(node, "use_peephole", False)),
            "gate_order": "ifco" if v2 else "icfo"}


def _expansion(node, inputs: list) -> list:
    """The outputs of ``node`` written out on ``inputs`` (placeholders)."""
    import tensorflow as tf

    if node.op == "GRUBlockCell":
        return gru_cell(*inputs)
    if node.op == "LSTMBlockCell":
        return lstm_cell(*inputs, **_lstm_attrs(node))
    # BlockLSTM(seq_len_max, x [T, batch, in], cs_prev, h_prev, w, wci, wcf, wco, b)
    x, cs, h = inputs[1:4]
    frames = []
    for x_t in tf.unstack(x, axis=0):
        outs = lstm_cell(x_t, cs, h, *inputs[4:], **_lstm_attrs(node))
        cs, h = outs[1], outs[6]
        frames.append(outs)
    return [tf.stack([f[k] for f in frames], axis=0) for k in range(7)]


def expand_block_ops(graph_def):
    """``graph_def`` with its fused RNN cell ops written out (and how many
    there were). A sequence op is written out only for a fixed sequence
    length that ``seq_len_max`` (a constant) covers; others are refused
    with the node named."""
    import tensorflow as tf

    from ..frontend.graphdef import node_of

    targets = [n for n in graph_def.node if n.op in CELL_OPS + SEQUENCE_OPS]
    if not targets:
        return graph_def, 0
    g = tf.Graph()
    with g.as_default():
        tf.graph_util.import_graph_def(graph_def, name="")
    renamed: dict[str, str] = {}  # "node:k" -> the written-out output
    new_nodes = []
    for node in targets:
        op = g.get_operation_by_name(node.name)
        if node.op in SEQUENCE_OPS:
            _check_length(node, op)
        sub = tf.Graph()
        with sub.as_default():
            holders = [tf.compat.v1.placeholder(t.dtype, t.shape, name=f"in{k}")
                       for k, t in enumerate(op.inputs)]
            outs = [tf.identity(t, name=f"out{k}")
                    for k, t in enumerate(_expansion(node, holders))]
        prefix = f"{node.name}/written_out/"
        data_inputs = [i for i in node.input if not i.startswith("^")]
        # Constants of the written-out cell depend on one of the cell's
        # inputs, so that in a TF1 while loop they are in its frame.
        anchor = next((f"^{node_of(i)}" for i in data_inputs
                       if g.get_operation_by_name(node_of(i)).type != "Const"), None)
        for n in sub.as_graph_def().node:
            if n.op == "Placeholder":
                continue
            c = tf.compat.v1.NodeDef()
            c.CopyFrom(n)
            c.name = prefix + n.name
            c.input[:] = [outer_input(i, prefix, data_inputs) for i in n.input]
            if not c.input and anchor:
                c.input.append(anchor)
            c.device = node.device
            new_nodes.append(c)
        for k, t in enumerate(outs):
            renamed[f"{node.name}:{k}"] = prefix + t.op.name
    kept = [n for n in graph_def.node if n.op not in CELL_OPS + SEQUENCE_OPS]
    out = tf.compat.v1.GraphDef()
    out.CopyFrom(graph_def)
    del out.node[:]
    gone = {f"loc:@{n.name}".encode() for n in targets}
    for n in kept + new_nodes:
        c = out.node.add()
        c.CopyFrom(n)
        c.input[:] = [_renamed(i, renamed) for i in n.input]
        if "_class" in c.attr:  # colocation with a replaced node (a TensorArray write's)
            keep = [v for v in c.attr["_class"].list.s if v not in gone]
            del c.attr["_class"].list.s[:]
            c.attr["_class"].list.s.extend(keep)
            if not keep:
                del c.attr["_class"]
    return out, len(targets)


def _check_length(node, op) -> None:
    steps = op.inputs[1].shape[0]
    seq_len = _static_value(op.inputs[0])
    if steps is None:
        raise Fail(f"node '{node.name}' (op {node.op}): a fused LSTM over a sequence of open "
                   "length; tfaot streams it when the length is fixed (give it with --inputs "
                   "NAME:SHAPE)")
    if seq_len is None or int(np.min(seq_len)) < steps:
        raise Fail(f"node '{node.name}' (op {node.op}): seq_len_max must be a constant of at "
                   f"least the sequence's {steps} frames (a shorter or computed length "
                   "stops the LSTM early)")


def _static_value(tensor):
    """``tensor``'s value where it is a constant, or computed from static
    shapes alone: LSTMBlockFusedCell without a sequence_length gives
    BlockLSTM ``cast(shape(x)[0])``, which tf.get_static_value does not fold
    (a StridedSlice of a Shape). Such a value is computed with zeros fed for
    the placeholders whose shapes it reads; None otherwise."""
    import tensorflow as tf

    value = tf.get_static_value(tensor)
    if value is not None:
        return value
    feeds = {}
    if not _from_shapes(tensor.op, feeds, set()):
        return None
    with tf.compat.v1.Session(graph=tensor.graph) as session:
        return session.run(tensor, feeds)


_SHAPE_OPS = ("Shape", "ShapeN", "Size", "Rank")


def _from_shapes(op, feeds: dict, seen: set) -> bool:
    """Whether ``op``'s value depends on no data, only on static shapes;
    ``feeds`` gets zeros for the placeholders those shapes are of."""
    if op.name in seen:
        return True
    seen.add(op.name)
    if op.type in _SHAPE_OPS:
        if not all(t.shape.is_fully_defined() for t in op.inputs):
            return False
        for placeholder in _placeholders(op, set()):
            t = placeholder.outputs[0]
            if not t.shape.is_fully_defined():
                return False
            feeds[t] = np.zeros(t.shape, t.dtype.as_numpy_dtype)
        return True
    if op.type in ("Placeholder", "PlaceholderWithDefault") or op.type.startswith("Var"):
        return False
    return all(_from_shapes(t.op, feeds, seen) for t in op.inputs)


def _placeholders(op, seen: set) -> list:
    """The placeholders ``op`` is computed from."""
    if op.name in seen:
        return []
    seen.add(op.name)
    if op.type == "Placeholder":
        return [op]
    return [p for t in op.inputs for p in _placeholders(t.op, seen)]


def outer_input(name: str, prefix: str, data_inputs: list[str]) -> str:
    """A written-out node's input: a placeholder ``ink`` stands for the op's
    k-th data input, everything else is a node of the written-out cell."""
    control = name.startswith("^")
    base = name[1:] if control else name
    node, _, index = base.partition(":")
    if node.startswith("in") and node[2:].isdigit() and index in ("", "0"):
        return data_inputs[int(node[2:])]
    return ("^" if control else "") + prefix + base


def _renamed(name: str, renamed: dict[str, str]) -> str:
    """``name`` (an input of a kept node) after the fused ops were replaced."""
    if name.startswith("^"):
        target = renamed.get(f"{name[1:]}:0")
        return f"^{target}" if target else name
    node, _, index = name.partition(":")
    return renamed.get(f"{node}:{index or 0}", name)
