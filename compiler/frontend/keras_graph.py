"""A Keras model as the frozen TensorFlow graph its call traces to.

The Keras streamifier works layer by layer and refuses layers that move
the time axis (a Permute before a channels_first convolution, as models
ported from PyTorch write it) or whose call it cannot follow over time.
The graph streamifier follows the time axis through the traced ops
instead (transposes, reshapes, while loops), so a model the first refuses
may still stream from its graph: pipeline.py tries that before giving up.
The step's inputs and outputs keep the Keras path's names (``x_t``, or
the Input layers' names; ``y_t``, or the output layers' names).

A Keras 2 file whose classes only tf_keras has is built from its graph
too (``keras2_as_graph``): tfaot builds Keras 2 files as Keras 3 models,
which needs each custom class in both forms, and a model trained
quantization-aware with tensorflow_model_optimization (its
``QuantizeWrapperV2`` layers) has them in tf_keras only. tf_keras loads
it (inside tfmot's ``quantize_scope`` where the file names tfmot's
classes) and its call is traced; its FakeQuant ops stream as the
elementwise ops they are.
"""
from __future__ import annotations

from pathlib import Path


def keras_as_graph(model, path: Path):
    """``model`` (a functional Keras model) traced with a batch of one and
    its other dimensions as declared, frozen, as a graph_cut.LoadedGraph.
    A model whose stateful layers assign their variables (they cannot be
    frozen) keeps them as state pairs, as its SavedModel would
    (variable_state.py)."""
    import tensorflow as tf
    from tensorflow.python.framework.convert_to_constants import (
        convert_variables_to_constants_v2)

    from ..streamify_keras import input_names, output_names
    from .graph_cut import graph_def_to_loaded
    from .load_saved_model import with_variable_state
    from .variable_state import variables_as_state_io

    # (the Keras path's names: "x_t" for one input, else the Input layers')
    specs = [tf.TensorSpec((1, *x.shape[1:]), x.dtype, name=name)
             for x, name in zip(model.inputs, input_names(model))]
    names = output_names(model, len(model.outputs))

    def call(*xs):
        ys = tf.nest.flatten(model(list(xs) if len(xs) > 1 else xs[0], training=False))
        return [tf.identity(y, name=n) for y, n in zip(ys, names)]

    traced = tf.function(call).get_concrete_function(*specs)
    try:
        graph_def = convert_variables_to_constants_v2(traced).graph.as_graph_def()
    except Exception:  # noqa: BLE001 - assigned variables, or freezing's own failure
        state = variables_as_state_io(traced)
        if state is None:
            raise
        loaded = graph_def_to_loaded(_own_calls(state.graph_def), path, "graphdef",
                                     output_specs=names + state.outputs,
                                     state_inputs=tuple(state.inputs),
                                     state_initial=state.initial)
        loaded.output_names[len(names):] = state.output_keys()  # (as a SavedModel's)
        with_variable_state(loaded, state)
        return loaded
    return graph_def_to_loaded(_own_calls(graph_def), path, "graphdef", output_specs=names)


def _own_calls(graph_def):
    """The traced graph's calls of jit_compile functions inlined (Keras 3
    runs channels_first Conv3D and grouped convolutions through one, which
    the graph path cannot see into, and a channels_first convolution inside
    one escapes channels_last.py), and its functions renamed: freezing
    registered them in TensorFlow's context under their names, and the
    build's step, tracing a changed copy, failed ("Attempting to add a
    duplicate function with name: __inference__conv_xla_frozen_92")."""
    from .inline_calls import inline_compiled_calls
    from .load_saved_model import own_function_names

    return own_function_names(inline_compiled_calls(graph_def))


#: tensorflow_model_optimization's layer classes (quantization-aware training)
TFMOT_CLASSES = ("QuantizeLayer", "QuantizeWrapper", "QuantizeWrapperV2", "QuantizeAnnotate")


def keras2_as_graph(path: Path, fmt: str, missing_class: str):
    """The Keras 2 file ``path`` loaded by tf_keras and traced as
    ``keras_as_graph`` does, for a model that Keras 3 cannot load because
    it lacks the class ``missing_class``; None where tf_keras lacks it too
    (its own error otherwise: a Lambda's code that fails, say)."""
    from contextlib import nullcontext

    from ..errors import TfaotError
    from .keras2 import load_reference

    scope = nullcontext()
    if missing_class in TFMOT_CLASSES:
        try:
            import tensorflow_model_optimization as tfmot
        except ImportError:
            return None
        scope = tfmot.quantization.keras.quantize_scope()
    try:
        with scope:
            model = load_reference(path, fmt)
    except TfaotError as e:
        if missing_class in str(e):
            return None
        raise
    return keras_as_graph(model, path)
