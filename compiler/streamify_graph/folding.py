"""Small integer tensors of the replay (shapes, axes, permutations) folded
to their values, where TensorFlow's own constant folding gives up."""
from __future__ import annotations

import numpy as np

from .graphdef import tname

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


def picks_other_than_time(node, metas, tensors: dict) -> bool:
    """``tf.shape(x)[i]`` for an i that is not x's time axis: the batch
    or a feature size, the same at any length (dynamic_rnn's zero state
    and outputs on an open batch are shaped by tf.shape(x)[0]; taken as
    computed from the length, the build was refused); or a range of
    entries without it (tf.image.resize's tf.shape(images)[1:3]).
    ``metas``: the node's inputs'; ``tensors``: the replay's, by name."""
    import tensorflow as tf

    if node.op != "StridedSlice" or metas[0].kind != "static_t" or metas[0].axis is None \
            or any(m.kind != "static" for m in metas[1:]) \
            or node.attr["shrink_axis_mask"].i not in (0, 1) \
            or node.attr["ellipsis_mask"].i or node.attr["new_axis_mask"].i:
        return False
    begin, end, strides = (tf.get_static_value(tensors.get(tname(node.input[i])))
                           for i in (1, 2, 3))
    rank = tensors[tname(node.input[0])].shape[0]
    if begin is None or np.size(begin) != 1 or rank is None:
        return False
    first = int(np.ravel(begin)[0]) % rank
    if node.attr["shrink_axis_mask"].i:
        return first != metas[0].axis
    # (tf.image.resize's tf.shape(images)[1:3]: a range of entries)
    if end is None or strides is None or int(np.ravel(strides)[0]) != 1:
        return False
    first = 0 if node.attr["begin_mask"].i & 1 else first
    stop = int(np.ravel(end)[0])
    last = rank if node.attr["end_mask"].i & 1 else min(stop + rank if stop < 0 else stop, rank)
    return not first <= metas[0].axis < last
