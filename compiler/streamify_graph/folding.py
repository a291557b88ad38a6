"""Small integer tensors of the replay (shapes, axes, permutations) folded
to their values, where TensorFlow's own constant folding gives up."""
from __future__ import annotations

#: ops that folded_value evaluates once all their inputs are known: the
#: integer arithmetic graphs compute axes and permutations with (TF1's
#: softmax over axis 1 builds its transpose's perm as Range(0, Rank - 1)...)
_FOLDABLE = {"Add", "AddV2", "Sub", "Mul", "FloorDiv", "FloorMod", "Maximum", "Minimum", "Neg",
             "Range", "Pack", "ConcatV2", "Cast", "Reshape", "ExpandDims", "Squeeze",
             "StridedSlice", "Slice", "GatherV2", "Fill", "Identity", "Prod", "Sum"}
_FOLD_LIMIT = 64  # elements: shapes and axes, not data


def folded_value(t, depth: int = 0):
    """``tf.get_static_value(t)``, or where that gives up on an op of
    _FOLDABLE (it folds neither Sub nor Mul), the op run on its inputs'
    folded values; None where any is unknown."""
    import tensorflow as tf

    value = tf.get_static_value(t)
    if value is not None or depth > 16 or t.op.type not in _FOLDABLE or \
            not t.dtype.is_integer or t.shape.num_elements() is None or \
            t.shape.num_elements() > _FOLD_LIMIT:
        return value
    inputs = [folded_value(i, depth + 1) for i in t.op.inputs]
    if any(v is None for v in inputs):
        return None
    graph = tf.Graph()
    with graph.as_default():
        consts = [tf.constant(v, dtype=i.dtype) for v, i in zip(inputs, t.op.inputs)]
        node = tf.compat.v1.NodeDef()
        node.CopyFrom(t.op.node_def)
        node.name = "folded"
        del node.input[:]
        node.input.extend(c.op.name for c in consts)
        node.ClearField("device")
        (out,) = tf.graph_util.import_graph_def(
            tf.compat.v1.GraphDef(node=[*(c.op.node_def for c in consts), node]),
            return_elements=[f"folded:{t.value_index}"], name="")
    with tf.compat.v1.Session(graph=graph) as session:
        return session.run(out)
