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

A TF2 ``tf.cond`` (an If or StatelessIf node) whose predicate is known when
the graph is built (a constant, or a PlaceholderWithDefault of one: TF1's
``is_training`` flag) is replaced by its live branch's nodes; it was
refused as "op StatelessIf on a time-dependent tensor".
"""
from __future__ import annotations

from .graphdef import static_bool

#: Function attributes that keep grappler from inlining a call.
NOINLINE = ("_noinline", "_XlaMustCompile")
CALL_OPS = ("PartitionedCall", "StatefulPartitionedCall")
IF_OPS = ("If", "StatelessIf")


def inline_compiled_calls(graph_def):
    """``graph_def`` with its conds of a known predicate inlined, and its
    calls of ``NOINLINE`` functions (the same object when it has none, or
    when grappler fails)."""
    graph_def = _static_conds_inlined(graph_def)
    functions = {f.signature.name: f for f in graph_def.library.function}
    marked = {n.attr["f"].func.name for n in graph_def.node if n.op in CALL_OPS} & \
        {name for name, f in functions.items() if any(k in f.attr for k in NOINLINE)}
    if not marked:
        return graph_def
    try:
        return _inlined(_unmarked(graph_def, marked))
    except Exception:  # noqa: BLE001 - an optimisation: the replay names the call
        return graph_def


def _static_conds_inlined(graph_def):
    """``graph_def`` with each If/StatelessIf of a known predicate replaced
    by its live branch's nodes (under the If's name) and an IdentityN of
    the If's name giving its outputs."""
    import tensorflow as tf

    nodes = {n.name: n for n in graph_def.node}
    # (not through an Enter: a branch inlined into a v1 loop's frame would
    # leave its constants outside it)
    known = {n.name: static_bool(nodes, n.input[0], through_enter=False)
             for n in graph_def.node if n.op in IF_OPS and n.input}
    if all(v is None for v in known.values()):
        return graph_def
    functions = {f.signature.name: f for f in graph_def.library.function}
    out = tf.compat.v1.GraphDef()
    out.CopyFrom(graph_def)
    del out.node[:]
    for n in graph_def.node:
        if known.get(n.name) is None:
            out.node.add().CopyFrom(n)
            continue
        branch = n.attr["then_branch" if known[n.name] else "else_branch"].func.name
        try:
            out.node.extend(_branch_nodes(n, functions[branch]))
        except Exception:  # noqa: BLE001 - left as it was: the replay names the If
            out.node.add().CopyFrom(n)
    return out


def _branch_nodes(if_node, fdef) -> list:
    """The nodes of ``fdef`` (a branch of ``if_node``) under the If's name:
    its arguments identities of the If's inputs, its results an IdentityN
    named as the If (its consumers read it as they read the If)."""
    import tensorflow as tf
    from tensorflow.python.framework.function_def_to_graph import function_def_to_graph_def

    body, flat = function_def_to_graph_def(fdef)
    prefix = f"{if_node.name}/"
    args = dict(zip((a.name for a in fdef.signature.input_arg),
                    (i for i in if_node.input[1:] if not i.startswith("^"))))

    def renamed(name: str) -> str:
        bare = name.lstrip("^")
        return ("^" if name.startswith("^") else "") + prefix + bare

    result = []
    for n in body.node:
        c = tf.compat.v1.NodeDef()
        c.CopyFrom(n)
        c.name = prefix + n.name
        if n.op == "Placeholder" and n.name in args:
            c.op, c.input[:] = "Identity", [args[n.name]]
            c.attr.clear()
            c.attr["T"].CopyFrom(n.attr["dtype"])
        else:
            c.input[:] = [renamed(i) for i in n.input]
        result.append(c)
    outputs = tf.compat.v1.NodeDef(name=if_node.name, op="IdentityN")
    outputs.input.extend(prefix + flat[fdef.ret[a.name]] for a in fdef.signature.output_arg)
    outputs.input.extend(i for i in if_node.input if i.startswith("^"))
    outputs.attr["T"].CopyFrom(if_node.attr["Tout"])
    return result + [outputs]


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
