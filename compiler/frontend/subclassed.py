"""Keras models whose layer graph is in Python, as functional models of
the same layers: a subclassed model (``class M(keras.Model)`` with its own
``call``), and custom layers made of Keras layers (a block: a GRU and a
projection with a residual) inside a functional or Sequential model.

tfaot streams a model layer by layer, from its graph of layer calls; a
subclassed model keeps that graph in Python, in ``call``. Calling ``call``
on a symbolic input records the layer calls it makes, as building a
functional model does, so a ``call`` made of layers and ``keras.ops``
becomes a functional model of the very layers (and weights) the file
loaded. The input's shape is the one the model was built with, with an open
time axis for a sequence (batch, time, features), so that it streams; where
it cannot stream so (a layer needs the whole sequence: attention, a Flatten;
or --whole-window was asked) the build traces it again with the length it was
built with (``fixed_time``), a fixed window, as a functional model of that
length is (pipeline._streamify_keras), and verify does as the build did (the
manifest's ``keras_fixed_time``). A ``call`` that branches
on values, or a model built on several inputs, cannot be traced: refused
naming the class. A custom layer whose ``call`` holds Keras layers is
inlined the same way (its ``call`` on the symbolic tensors of its node), so
the layers inside stream; one that cannot be traced stays whole, and the
probe of layers tfaot has no rule for decides how it treats time.
"""
from __future__ import annotations

from ..errors import TfaotError, first_line


def layer_graph(model, path, fixed_time: bool = False):
    """(the functional model tfaot streams, the model as written for verify's
    reference, or None where they are one): a subclassed model traced, its
    custom blocks inlined (module docstring; ``fixed_time``: at the length
    it was built with)."""
    subclassed = is_subclassed(model)
    functional = inline_blocks(as_functional(model, path, fixed_time) if subclassed else model)
    if functional is model:
        return model, None
    return functional, reference_of(model, functional) if subclassed else model


def is_subclassed(model) -> bool:
    """Whether ``model`` keeps its layer graph in Python (no symbolic inputs)."""
    import keras
    from keras.src.models.functional import Functional

    return isinstance(model, keras.Model) and not isinstance(model, (Functional,
                                                                     keras.Sequential))


def as_functional(model, path, fixed_time: bool = False):
    """The functional model of ``model``'s ``call`` (module docstring): over
    an open time axis unless ``fixed_time``, or the call fails on one (then
    at the built length)."""
    import keras

    cls = type(model).__name__
    shape = _built_shape(model, path, cls)
    features = shape[1:]
    # (the build config keeps no dtype: (batch, time) into an Embedding is token ids)
    tokens = len(features) == 1 and any(isinstance(layer, keras.layers.Embedding)
                                        for layer in model._flatten_layers())
    dtype = "int32" if tokens else "float32"
    if (len(features) == 2 or tokens) and not fixed_time:
        try:  # (time, ...): streamed over an open time axis
            return _traced(model, (None, *features[1:]), dtype, path, cls)
        except TfaotError:
            pass  # (the built length may do)
    return _traced(model, features, dtype, path, cls)


def _traced(model, features: tuple, dtype: str, path, cls: str):
    """``model``'s call on a symbolic input of ``features``, as a functional
    model of batch 1, the library's: a call that sizes a tensor by its
    input's batch (an RNN's zero initial state, ``get_initial_state(
    keras.ops.shape(x)[0])``) sized it by the batch of the last fit, built
    into the library (a text generator trained in batches of 4 returned 4
    sequences a step)."""
    import keras

    x = keras.Input(tuple(features), batch_size=1, name="input", dtype=dtype)
    try:
        y = model.call(x)
    except Exception as e:  # the user's code on a symbolic input
        why = first_line(e)
        if "KerasTensor cannot be used as input to a TensorFlow function" in why:
            # (Keras' own line goes on to an example that its next lines hold)
            why = ("it calls a TensorFlow function (tf.*) on the symbolic input, where "
                   "Keras needs keras.ops (keras.ops.shape for tf.shape, ...)")
        raise TfaotError(f"{path}: the subclassed model '{cls}' cannot be traced into "
                         f"layers (its call on a symbolic input of shape "
                         f"{_text(x.shape)} failed: {why}); tfaot streams a call made of "
                         "layers and keras.ops, without branches on values; or export it "
                         "with model.export(dir) and build that SavedModel") from None
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


#: Inlining rounds: a block inside a block is inlined in the next round.
_INLINE_ROUNDS = 8


def inline_blocks(model):
    """``model`` (functional or Sequential) with its custom layers made of
    Keras layers replaced by the layer calls their ``call`` makes (module
    docstring); ``model`` itself when it has none."""
    import functools

    import keras

    out = model
    for _ in range(_INLINE_ROUNDS):
        if not any(_is_block(layer) for layer in out.layers):
            break
        # (a block's layers and ops are named when it loads or calls them:
        # "dense", "add", as the model's own may already be)
        call = functools.partial(_call_inlined, taken={layer.name for layer in out.layers})
        if isinstance(out, keras.Sequential):
            x = keras.Input(batch_shape=out.inputs[0].shape, dtype=out.inputs[0].dtype)
            y = x
            for layer in out.layers:
                y = call(layer, y)
            out = keras.Model(x, y, name=out.name)
        else:
            out = keras.models.clone_model(out, clone_function=lambda layer: layer,
                                           call_function=call)
    return out


def _is_block(layer) -> bool:
    """A custom layer that holds layers, written on keras.layers.Layer or
    keras.Model (not a subclass of one of Keras's layers, an LSTM: tfaot's
    rules know those)."""
    import keras

    own = [c for c in type(layer).__mro__ if c.__module__.split(".")[0] in ("keras", "tf_keras")]
    if not own or own[0] not in (keras.layers.Layer, keras.Model) or own[0] is type(layer):
        return False
    return any(True for _ in layer._flatten_layers(include_self=False, recursive=False))


def _call_inlined(layer, *args, taken: set[str], **kwargs):
    """``layer`` on symbolic tensors: a block's ``call`` (recording the calls
    of the layers inside, renamed where a name is ``taken``), else the layer
    as it is."""
    if _is_block(layer):
        try:
            outputs = layer.call(*args, **kwargs)
        except Exception:  # (kept whole: the probe decides how it treats time)
            pass
        else:
            _rename_inner_ops(outputs, (args, kwargs), layer.name, taken)
            return outputs
    return layer(*args, **kwargs)


def _rename_inner_ops(outputs, inputs, block: str, taken: set[str]) -> None:
    """The ops between a block's ``inputs`` and ``outputs`` (its layers and
    the keras.ops its call made) renamed BLOCK_NAME where NAME is ``taken``
    (Keras refuses a model with a name twice); each name taken then."""
    import keras

    stop = {id(t) for t in keras.tree.flatten(inputs)}
    seen: set[int] = set()
    work = list(keras.tree.flatten(outputs))
    while work:
        tensor = work.pop()
        history = getattr(tensor, "_keras_history", None)
        if id(tensor) in stop or history is None or id(history.operation) in seen:
            continue
        op = history.operation
        seen.add(id(op))
        if op.name in taken:
            name, k = f"{block}_{op.name}", 1
            while name in taken:
                name, k = f"{block}_{op.name}_{k}", k + 1
            op.name = name
        taken.add(op.name)
        work.extend(keras.tree.flatten(op._inbound_nodes[history.node_index].input_tensors))
