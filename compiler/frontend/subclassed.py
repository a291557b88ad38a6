"""A subclassed Keras model (``class M(keras.Model)`` with its own ``call``)
as a functional model of the same layers.

tfaot streams a model layer by layer, from its graph of layer calls; a
subclassed model keeps that graph in Python, in ``call``. Calling ``call``
on a symbolic input records the layer calls it makes, as building a
functional model does, so a ``call`` made of layers and ``keras.ops``
becomes a functional model of the very layers (and weights) the file
loaded. The input's shape is the one the model was built with, with an open
time axis for a sequence (batch, time, features). A ``call`` that branches
on values, or a model built on several inputs, cannot be traced: refused
naming the class.
"""
from __future__ import annotations

from ..errors import TfaotError, first_line


def is_subclassed(model) -> bool:
    """Whether ``model`` keeps its layer graph in Python (no symbolic inputs)."""
    import keras
    from keras.src.models.functional import Functional

    return isinstance(model, keras.Model) and not isinstance(model, (Functional,
                                                                     keras.Sequential))


def as_functional(model, path):
    """The functional model of ``model``'s ``call`` (module docstring)."""
    import keras

    cls = type(model).__name__
    shape = _built_shape(model, path, cls)
    features = shape[1:]
    if len(features) == 2:  # (time, features): streamed over an open time axis
        features = (None, features[1])
    x = keras.Input(tuple(features), batch_size=shape[0], name="input")
    try:
        y = model.call(x)
    except Exception as e:  # the user's code on a symbolic input
        raise TfaotError(f"{path}: the subclassed model '{cls}' cannot be traced into "
                         f"layers (its call on a symbolic input of shape "
                         f"{_text(x.shape)} failed: {first_line(e)}); tfaot streams a call "
                         "made of layers and keras.ops, without branches on values") from None
    return keras.Model(x, y, name=model.name)


def _built_shape(model, path, cls) -> tuple:
    """The input shape ``model`` was built with (the file keeps it)."""
    config = model.get_build_config() if hasattr(model, "get_build_config") else None
    shape = (config or {}).get("input_shape")
    if shape is None:
        raise TfaotError(f"{path}: the subclassed model '{cls}' was saved before it was "
                         "built, so its input shape is unknown; call it on an input (or "
                         "model.build(shape)) before saving it")
    if isinstance(shape, dict) or (shape and isinstance(shape[0], (list, tuple))):
        raise TfaotError(f"{path}: the subclassed model '{cls}' takes several inputs; "
                         "tfaot traces subclassed models of one input (write it as a "
                         "functional model: keras.Model(inputs, outputs))")
    return tuple(shape)


def _text(shape) -> str:
    return "(" + ", ".join("None" if d is None else str(d) for d in shape) + ")"


def reference_of(model, functional):
    """``model`` itself as a functional model of one layer, on
    ``functional``'s input: verify's reference runs the user's own ``call``,
    not its trace."""
    import keras

    x = functional.inputs[0]
    return keras.Model(x, model(x), name=f"{model.name}_as_written")
