"""Function calls that TensorFlow's freezing keeps, inlined.

``convert_variables_to_constants_v2`` inlines a SavedModel's function
calls, except those of functions marked ``_noinline`` or
``_XlaMustCompile``: Keras 3 runs a grouped convolution (``Conv1D(groups=4)``)
through a ``jit_compile`` function, so its export keeps a
``StatefulPartitionedCall`` of ``_conv_xla`` on the sequence, which the
replay cannot see into ("op StatefulPartitionedCall on a time-dependent
tensor is not supported"). The marks only choose how TensorFlow runs the
function (XLA); the ops are the same, so the marks are dropped and
grappler's function optimiser inlines the calls. Any failure leaves the
graph as it was (the replay then names the call).
"""
from __future__ import annotations

#: Function attributes that keep grappler from inlining a call.
NOINLINE = ("_noinline", "_XlaMustCompile")
CALL_OPS = ("PartitionedCall", "StatefulPartitionedCall")


def inline_compiled_calls(graph_def):
    """``graph_def`` with its calls of ``NOINLINE`` functions inlined (the
    same object when it has none, or when grappler fails)."""
    functions = {f.signature.name: f for f in graph_def.library.function}
    marked = {n.attr["f"].func.name for n in graph_def.node if n.op in CALL_OPS} & \
        {name for name, f in functions.items() if any(k in f.attr for k in NOINLINE)}
    if not marked:
        return graph_def
    try:
        return _inlined(_unmarked(graph_def, marked))
    except Exception:  # noqa: BLE001 - an optimisation: the replay names the call
        return graph_def


def _unmarked(graph_def, marked: set):
    import tensorflow as tf

    copy = tf.compat.v1.GraphDef()
    copy.CopyFrom(graph_def)
    for f in copy.library.function:
        if f.signature.name in marked:
            for key in NOINLINE:
                f.attr.pop(key, None)
    for n in copy.node:
        if n.op in CALL_OPS and n.attr["f"].func.name in marked:
            for key in NOINLINE:
                n.attr.pop(key, None)
    return copy


def _inlined(graph_def):
    """Grappler's function optimiser alone, keeping every node (each sink is
    fetched: the outputs are found later)."""
    import tensorflow as tf
    from tensorflow.core.protobuf import config_pb2
    from tensorflow.python.grappler import tf_optimizer

    from .graphdef import node_of

    consumed = {node_of(i) for n in graph_def.node for i in n.input}
    g = tf.Graph()
    with g.as_default():
        tf.graph_util.import_graph_def(graph_def, name="")
        for n in graph_def.node:
            if n.name not in consumed or n.op == "Placeholder":
                g.add_to_collection("train_op", g.get_operation_by_name(n.name))
    meta = tf.compat.v1.train.export_meta_graph(graph=g, graph_def=g.as_graph_def())
    config = config_pb2.ConfigProto()
    rewrite = config.graph_options.rewrite_options
    rewrite.optimizers.extend(["function"])
    rewrite.min_graph_nodes = -1
    out = tf_optimizer.OptimizeGraph(config, meta)
    return out
