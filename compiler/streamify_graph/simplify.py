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
"""
from __future__ import annotations

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
