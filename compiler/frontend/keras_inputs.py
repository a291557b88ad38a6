"""--inputs NAME:SHAPE for a Keras model: sizes for its inputs' open axes.

A Keras model written for inputs of any size (``Input((None, None, 3))``: a
fully convolutional network, a keras.applications base without its top, a
segmenter) has neither the sizes tfaot compiles for nor one time axis to
stream along. Given shapes, the model is cloned onto Input layers of those
shapes; the clone shares the model's layers (and so their weights), so
TensorFlow's reference and the build compute with the same ones.

Only shapes can be given: a graph's --inputs may also cut the graph at any
tensor, a Keras model's inputs are its Input layers. A model whose graph
Python code holds (subclassed) has no Input layers to replace.
"""
from __future__ import annotations

from ..errors import TfaotError


def with_input_shapes(model, specs, path):
    """``model`` cloned onto inputs of the shapes ``specs`` gives ([(name,
    shape or None)], load_graph.parse_input_specs); ``model`` itself when
    none is given."""
    import keras

    if not specs:
        return model
    names = _input_names(model)
    shapes = [tuple(t.shape) for t in model.inputs]
    if len(names) == 1:  # (also by the name the library gives it: x_t)
        specs = [(names[0] if name == "x_t" else name, shape) for name, shape in specs]
    for name, shape in specs:
        if name not in names:
            raise TfaotError(f"{path}: --inputs names '{name}', which is not an input of "
                             f"the Keras model (its inputs: {', '.join(names)}); for a Keras "
                             "model --inputs gives its inputs' shapes, NAME:SHAPE")
        if shape is None:
            raise TfaotError(f"{path}: --inputs {name}: give its shape (NAME:SHAPE, e.g. "
                             f"{name}:{_example(shapes[names.index(name)])}); a Keras "
                             "model's inputs are its Input layers, so --inputs only sizes them")
    given = dict(specs)
    tensors = []
    for tensor, name, shape in zip(model.inputs, names, shapes):
        new = given.get(name, shape)
        _check_fits(path, name, shape, new)
        tensors.append(keras.Input(batch_shape=new, dtype=tensor.dtype,
                                   name=input_layer_name(tensor)))
    return keras.models.clone_model(model, input_tensors=tensors if len(tensors) > 1
                                    else tensors[0], clone_function=lambda layer: layer)


def _input_names(model) -> list[str]:
    """The names --inputs takes: each Input layer's name."""
    return [input_layer_name(t) for t in model.inputs]


def input_layer_name(tensor) -> str:
    """The name of the Input layer of a model's input ``tensor``."""
    history = getattr(tensor, "_keras_history", None)
    return getattr(history[0], "name", None) if history else tensor.name


def _check_fits(path, name: str, shape: tuple, new: tuple) -> None:
    """``new`` gives ``shape``'s axes, its fixed ones unchanged."""
    if len(new) != len(shape):
        raise TfaotError(f"{path}: --inputs {name}:{_text(new)} has {len(new)} axes; the "
                         f"model's input has {len(shape)} ({_text(shape)})")
    for axis, (old, size) in enumerate(zip(shape, new)):
        if old is not None and size is not None and old != size:
            raise TfaotError(f"{path}: --inputs {name}:{_text(new)} gives axis {axis} size "
                             f"{size}; the model fixes it at {old} ({_text(shape)})")


def _text(shape) -> str:
    return "x".join("?" if d is None else str(d) for d in shape)


def _example(shape) -> str:
    """``shape`` with a batch of 1 and its other open axes a size, as text."""
    return "x".join("1" if axis == 0 else "32" if d is None else str(d)
                    for axis, d in enumerate(shape))
