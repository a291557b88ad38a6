"""Whether a failed check says anything: how far f32 rounding alone moves
TensorFlow's outputs.

Some models amplify rounding. An EfficientNetV2S at 64 x 64 whose batch
norms were set from other images than verify's normal samples gave logits
of 1.7e5 that moved by 1.3e5 when its inputs moved by 1e-6 relative, and
by 6.4e4 between a batch of 4 images and one of 8: TensorFlow does not
agree with itself there, and a library that rounds otherwise cannot agree
with it either. verify failed that (right) library by 1.4e5.

So when a check fails, verify runs TensorFlow once more on the same inputs
with every f32 weight moved by one rounding step (``STEP`` relative, the
sign random) and, where that alone moves an output by more than
``NOTABLE`` of its tolerance, says so beside the FAIL: that the model
amplifies rounding where the move is over f32's default tolerance for
outputs of that size, else that the tolerance (a ``--tol`` given) is
below f32's rounding of the model. The verdict stands: such a model cannot
be checked at that tolerance, and the note says why.
"""
from __future__ import annotations

import numpy as np

from .changed_weights import with_changed_weights

#: a weight's move: about one f32 rounding step, relative
STEP = 2.0 ** -23
#: the share of an output's tolerance from which TensorFlow's own move is told
NOTABLE = 0.25


def with_jittered_weights(loaded, seed: int = 0):
    """``loaded`` with every f32 weight (a Keras model's variables, a
    graph's constants of two elements or more) moved by ``STEP`` of itself,
    up or down at random: a context (changed_weights)."""
    rng = np.random.default_rng(seed)

    def jittered(value: np.ndarray) -> np.ndarray:
        signs = rng.choice(np.array([-1.0, 1.0]), size=value.shape)
        return (value.astype(np.float64) * (1.0 + signs * STEP)).astype(np.float32)

    def keras_changes(model):
        for variable in model.weights:
            value = np.asarray(variable)
            if value.dtype == np.float32:
                yield variable, jittered(value)

    def change_graph(graph_def):
        import tensorflow as tf

        out = type(graph_def)()
        out.CopyFrom(graph_def)
        for node in out.node:
            if node.op != "Const" or node.attr["dtype"].type != tf.float32.as_datatype_enum:
                continue
            value = tf.make_ndarray(node.attr["value"].tensor)
            if value.size >= 2:
                node.attr["value"].tensor.CopyFrom(tf.make_tensor_proto(jittered(value)))
        return out

    return with_changed_weights(loaded, keras_changes, change_graph)


def note(output: str, move: float, amplified: bool) -> str:
    """Why a failed ``output`` says little, TensorFlow's own values moving
    by ``move`` with the weights jittered; ``amplified``: more than f32's
    default tolerance allows outputs of their size."""
    said = (f"TensorFlow's own {output} moves by {move:.3g} when the model's weights move "
            "by one f32 rounding step")
    if not amplified:
        return f"{said}: this tolerance is below f32's rounding of this model"
    return (f"{said}, so the model amplifies rounding (untrained weights? batch norm "
            "statistics far from these inputs'?): a library that rounds otherwise differs "
            "by several times that without being wrong, and verify cannot check this model "
            "at this tolerance")
