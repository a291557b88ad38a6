"""A Keras model as the frozen TensorFlow graph its call traces to.

The Keras streamifier works layer by layer and refuses layers that move
the time axis (a Permute before a channels_first convolution, as models
ported from PyTorch write it) or whose call it cannot follow over time.
The graph streamifier follows the time axis through the traced ops
instead (transposes, reshapes, while loops), so a model the first refuses
may still stream from its graph: pipeline.py tries that before giving up.
The step's inputs and outputs keep the Keras path's names (``x_t``,
``y_t``, or the output layers' names).
"""
from __future__ import annotations

from pathlib import Path


def keras_as_graph(model, path: Path):
    """``model`` (a functional Keras model) traced with a batch of one and
    its other dimensions as declared, frozen, as a graph_cut.LoadedGraph."""
    import keras
    import tensorflow as tf
    from tensorflow.python.framework.convert_to_constants import (
        convert_variables_to_constants_v2)

    from ..streamify_keras import output_names
    from .graph_cut import graph_def_to_loaded

    specs = [tf.TensorSpec((1, *x.shape[1:]), x.dtype, name="x_t" if i == 0 else f"x_t{i}")
             for i, x in enumerate(model.inputs)]
    names = output_names(model, len(model.outputs))

    def call(*xs):
        ys = keras.tree.flatten(model(list(xs) if len(xs) > 1 else xs[0], training=False))
        return [tf.identity(y, name=n) for y, n in zip(ys, names)]

    frozen = convert_variables_to_constants_v2(tf.function(call).get_concrete_function(*specs))
    graph_def = frozen.graph.as_graph_def()
    return graph_def_to_loaded(graph_def, path, "graphdef", output_specs=names)

