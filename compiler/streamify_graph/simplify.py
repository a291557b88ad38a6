"""Graph cruft removal with TensorFlow's own grappler, before the replay.

Published frozen graphs carry cruft around the time axis that the replay's
per-op rules would refuse: a Reshape to ``[1, T*F]`` and straight back to
``[-1, T, F]`` (speech_commands' fingerprint), Transpose pairs, Identity
chains, shape arithmetic on constants, Squeeze/ExpandDims pairs. Grappler's
constant folding and its arithmetic, shape and dependency optimisers fold
these (tf-import-notes §9): the graph is imported, exported as a
MetaGraphDef whose ``train_op`` collection holds the outputs (grappler keeps
what that collection fetches) and optimised.

Inputs and outputs keep their names. The caller falls back to the graph as
given when grappler fails or when the simplified graph does not stream.
An open batch axis is made 1 first (``batch_of_one``), so that what is
computed from it folds too.
"""
from __future__ import annotations

import numpy as np

from ..errors import first_line

# Grappler optimisers that fold cruft without changing op semantics or
# introducing fused/private ops the replay would not know.
OPTIMIZERS = ("constfold", "arithmetic", "shape", "dependency", "loop")


def simplify_graph_def(graph_def, inputs: list[str], outputs: list[str]):
    """The graph after grappler, or ``(None, why)`` if grappler failed.

    ``inputs``/``outputs``: node names to keep (placeholders, output nodes).
    Returns ``(graph_def, "")`` on success.
    """
    import tensorflow as tf
    from tensorflow.core.protobuf import config_pb2
    from tensorflow.python.grappler import tf_optimizer

    from ..frontend.graphdef import node_of

    keep = list(dict.fromkeys([node_of(o) for o in outputs] + list(inputs)))
    g = tf.Graph()
    try:
        with g.as_default():
            tf.graph_util.import_graph_def(graph_def, name="")
            for name in keep:
                g.add_to_collection("train_op", g.get_operation_by_name(name))
        meta = tf.compat.v1.train.export_meta_graph(graph=g, graph_def=g.as_graph_def())
        config = config_pb2.ConfigProto()
        rw = config.graph_options.rewrite_options
        rw.optimizers.extend(OPTIMIZERS)
        rw.meta_optimizer_iterations = rw.TWO
        rw.min_graph_nodes = -1  # also small graphs
        out = tf_optimizer.OptimizeGraph(config, meta)
    except Exception as e:  # grappler is an optimisation: never fatal
        return None, first_line(e)
    names = {n.name for n in out.node}
    missing = [k for k in keep if k not in names]
    if missing:
        return None, f"grappler dropped {', '.join(missing)}"
    return out, ""


def batch_of_one(loaded):
    """``loaded``'s graph with the time input's open batch axis made 1, for
    grappler: a zero state of ``tf.shape(x)[0]`` rows (static_rnn's, for a
    published graph's input ``[None, T, F]``) then folds into the constant
    the later steps' cells take, and the unrolled cell is found. The axis
    stays open where it may be time (given so, or ``(T, 1, F)``)."""
    import tensorflow as tf

    inp = loaded.inputs[0] if loaded.inputs else None
    shape = None if inp is None or inp.shape is None else list(inp.shape)
    if not shape or len(shape) < 2 or shape[0] is not None or inp.time_axis == 0 or (
            inp.time_axis is None and len(shape) >= 3 and shape[1] == 1):
        return loaded.graph_def
    copy = tf.compat.v1.GraphDef()
    copy.CopyFrom(loaded.graph_def)
    for n in copy.node:
        if n.name == inp.name and n.op == "Placeholder" and "shape" in n.attr \
                and len(n.attr["shape"].shape.dim) == len(shape):
            n.attr["shape"].shape.dim[0].size = 1
    return _shapes_as_constants(copy)


def _shapes_as_constants(graph_def):
    """``graph_def`` with each Shape op whose input's shape TensorFlow
    infers in full made that constant (grappler left static_rnn's
    tf.shape(frame) of a batch-1 frame as it was)."""
    import tensorflow as tf

    g = tf.Graph()
    try:
        with g.as_default():
            tf.graph_util.import_graph_def(graph_def, name="")
    except Exception:  # noqa: BLE001 - the streamifier names what is wrong
        return graph_def
    for n in graph_def.node:
        if n.op != "Shape":
            continue
        shape = g.get_operation_by_name(n.name).inputs[0].shape
        if not shape.is_fully_defined():
            continue
        dtype = tf.as_dtype(n.attr["out_type"].type).as_numpy_dtype
        value = tf.make_tensor_proto(np.array(shape.as_list(), dtype))
        # (ordered after what it read: inside a v1 loop, that keeps it in the loop's frame)
        after = [f"^{i.split(':')[0]}" if not i.startswith("^") else i for i in n.input]
        n.op = "Const"
        n.input[:] = list(dict.fromkeys(after))
        for key in list(n.attr):
            del n.attr[key]
        n.attr["dtype"].type = tf.as_dtype(dtype).as_datatype_enum
        n.attr["value"].tensor.CopyFrom(value)
    return graph_def
