"""Streamify stage for Keras models: turn the time loop into a step function.

The functional graph is replayed at one time step. Every value carries a
*time meta*:

* ``seq``: a per-time-step slice of a sequence, shape ``(1, 1, ...)`` (the
  time axis is kept, with length 1, so layer axes keep their meaning);
* ``vec``: a value with no time axis: the last output of a recurrent layer
  (at step t it equals what Keras returns for ``x[:, :t+1]``), or anything
  in a model without a time axis.

Recurrent layers are replaced by one call of their cell, whose state comes
in as an argument and goes out as a result; per-time-step layers run as they
are on the ``(1, 1, ...)`` slice; anything that would mix time steps is an
error naming the layer. The result is a pure function
``(x_t, *states) -> (y_t, *new_states)``.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from .errors import TfaotError
from .program import ProgramSignature, StateInfo, StepProgram, TensorInfo

SEQ, VEC = "seq", "vec"

# Layers that see one time step at a time: applied unchanged to a (1, 1, ...)
# slice. The value says which attribute holds axes that must not be the time
# (or batch) axis, or None.
PER_STEP_LAYERS: dict[str, str | None] = {
    "Dense": None, "Activation": None, "Dropout": None, "GaussianDropout": None,
    "GaussianNoise": None, "AlphaDropout": None, "SpatialDropout1D": None,
    "Identity": None, "ReLU": None, "LeakyReLU": None, "ELU": None,
    "Rescaling": None, "Softmax": "axis", "LayerNormalization": "axis",
    "BatchNormalization": "axis", "UnitNormalization": "axis",
    "Concatenate": "axis", "Add": None, "Subtract": None, "Multiply": None,
    "Average": None, "Maximum": None, "Minimum": None,
}

# Elementwise keras.ops that the functional API records as graph nodes
# (``x + y``, ``keras.ops.tanh(x)`` ...).
ELEMENTWISE_OPS = {
    "Add", "Subtract", "Multiply", "Divide", "TrueDivide", "Maximum", "Minimum",
    "Negative", "Abs", "Exp", "Log", "Sqrt", "Square", "Tanh", "Sigmoid", "Relu",
}

# Why a layer cannot stream, for the common cases; anything else on a
# sequence gets the generic message.
NOT_STREAMABLE: dict[str, str] = {
    "Bidirectional": "runs the sequence backwards as well as forwards, so step t "
                     "depends on future samples",
    "Masking": "masks time steps; streaming masked sequences is not supported "
               "(feed only valid samples to step() instead)",
    "Conv1D": "mixes neighbouring time steps (streaming convolution is not "
              "supported yet)",
    "Flatten": "flattens the time axis into the features, which mixes time steps",
    "RepeatVector": "creates a new time axis",
    "Attention": "attends over the whole sequence",
    "MultiHeadAttention": "attends over the whole sequence",
    "AdditiveAttention": "attends over the whole sequence",
}


class Streamed:
    """A value flowing through the replayed graph, with its time meta."""

    __slots__ = ("value", "meta")

    def __init__(self, value, meta: str):
        self.value = value
        self.meta = meta


def streamify_keras(model, source: str, fmt: str) -> StepProgram:
    """Build the step program of a loaded Keras model."""
    import tensorflow as tf

    x_spec = step_input_spec(model, source)
    streaming = is_streaming(model)

    # Pass 1 (eager, zeros): discover state slots and check every layer.
    discover = _Replay(streaming, states=None)
    y0 = discover.run_model(model, tf.zeros(x_spec.shape, tf.float32))
    states = tuple(discover.new_states)

    # Pass 2: trace the pure function with the states as arguments.
    def pure_step(x, *state_values):
        replay = _Replay(streaming, states=list(state_values))
        y = replay.run_model(model, x)
        return (y, *replay.new_values)

    arg_specs = [tf.TensorSpec(x_spec.shape, tf.float32, name="x_t")]
    arg_specs += [tf.TensorSpec(s.shape, tf.float32) for s in states]
    concrete = tf.function(pure_step, input_signature=arg_specs,
                           autograph=False).get_concrete_function()
    out_spec = TensorInfo("y_t", "float32", tuple(int(d) for d in y0.shape))
    signature = ProgramSignature((x_spec,), (out_spec,), states)
    report = _report(model, fmt, streaming, discover.layer_rows, signature)
    return StepProgram(source, fmt, signature, concrete, report)


# --------------------------------------------------------------------------
# model-level checks


def step_input_spec(model, source: str) -> TensorInfo:
    if len(model.inputs) != 1 or len(model.outputs) != 1:
        raise TfaotError(
            f"{source}: the model has {len(model.inputs)} inputs and "
            f"{len(model.outputs)} outputs; tfaot supports one input and one output")
    shape = tuple(model.inputs[0].shape)
    dtype = str(model.inputs[0].dtype)
    if dtype != "float32":
        raise TfaotError(f"{source}: input dtype is {dtype}; only float32 is supported")
    _check_batch(model, shape[0])
    streaming = is_streaming(model)
    feature_dims = shape[2:] if streaming else shape[1:]
    if streaming and len(shape) < 3:
        raise TfaotError(
            f"{source}: a recurrent model needs input (batch, time, features...), "
            f"got {shape}")
    if any(d is None for d in feature_dims):
        raise TfaotError(
            f"{source}: input shape {shape} has unknown feature dimensions; "
            "tfaot needs static shapes apart from batch and time")
    return TensorInfo("x_t", "float32", (1, *(int(d) for d in feature_dims)))


def _check_batch(model, batch) -> None:
    if batch in (None, 1):
        return
    for layer in _all_layers(model):
        if getattr(layer, "stateful", False):
            raise TfaotError(
                f"layer '{layer.name}' ({type(layer).__name__}) is stateful=True "
                f"with batch size {batch}; tfaot streams batch 1 only")


def is_streaming(model) -> bool:
    """True if the model has a time axis to stream over (axis 1 of its input).

    That is the case with a recurrent layer or an input whose axis 1 is of
    unknown length; otherwise step() is one whole inference.
    """
    return _has_recurrent_layer(model) or _has_dynamic_time(model)


def _all_layers(model):
    for layer in getattr(model, "layers", []):
        yield layer
        yield from _all_layers(layer)
        inner = getattr(layer, "layer", None)  # TimeDistributed, Bidirectional
        if inner is not None:
            yield inner


def _is_rnn(layer) -> bool:
    import keras

    return isinstance(layer, keras.layers.RNN)


def _has_recurrent_layer(model) -> bool:
    return any(_is_rnn(layer) for layer in _all_layers(model))


def _has_dynamic_time(model) -> bool:
    shape = tuple(model.inputs[0].shape)
    return len(shape) >= 3 and shape[1] is None


# --------------------------------------------------------------------------
# the replay


class _Replay:
    """Replays a Keras graph on one time step.

    With ``states=None`` it runs eagerly on zeros and records the state slots
    it meets (discovery); otherwise it takes state values from ``states`` in
    the same order and collects the new values in ``new_values``.
    """

    def __init__(self, streaming: bool, states: list | None):
        self.streaming = streaming
        self.discovering = states is None
        self.incoming = states
        self.new_states: list[StateInfo] = []  # found while discovering
        self.new_values: list = []
        self.layer_rows: list[dict[str, Any]] = []

    # -- entry points ------------------------------------------------------

    def run_model(self, model, x_t):
        import tensorflow as tf

        if self.streaming:
            x = Streamed(tf.expand_dims(x_t, 1), SEQ)
        else:
            x = Streamed(x_t, VEC)
        y = self._run(model, x)
        if isinstance(y, (list, tuple)):
            y = y[0]
        return y.value[:, 0] if y.meta == SEQ else y.value

    def _run(self, model, inputs):
        import keras

        if isinstance(model, keras.Sequential):
            x = inputs
            for layer in model.layers:
                x = self.call_layer(layer, x)
            return x
        return model._run_through_graph(  # private Keras 3 API: walks any DAG
            inputs, call_fn=lambda op, *a, **k: self.call_layer(op, *a, **k))

    # -- one node ----------------------------------------------------------

    def call_layer(self, op, *args, **kwargs):
        import keras

        kind = type(op).__name__
        if kwargs.get("mask") is not None:
            raise _layer_error(op, "receives a mask; masked sequences cannot stream")
        if kind == "InputLayer":
            return args[0]
        if isinstance(op, keras.Model):
            self._row(op, "model")
            return self._run(op, args[0] if len(args) == 1 else list(args))
        streamed = [a for a in _leaves((args, kwargs)) if isinstance(a, Streamed)]
        on_sequence = any(s.meta == SEQ for s in streamed)
        if _is_rnn(op):
            return self._recurrent(op, args[0], kwargs)
        if kind in NOT_STREAMABLE and (on_sequence or kind == "Bidirectional"):
            raise _layer_error(op, NOT_STREAMABLE[kind])
        if kind == "Embedding" and getattr(op, "mask_zero", False):
            raise _layer_error(op, "produces a mask (mask_zero=True); masked "
                                   "sequences cannot stream")
        if not on_sequence:
            self._row(op, "per-step")
            return self._apply(op, args, kwargs, VEC)
        return self._per_step(op, kind, args, kwargs)

    def _per_step(self, op, kind, args, kwargs):
        if kind == "TimeDistributed":
            self._row(op, "per-step")
            x = args[0].value
            return Streamed(_expand_time(op.layer(x[:, 0])), SEQ)
        if kind == "Reshape":
            self._row(op, "per-step")
            return self._reshape(op, args[0])
        if kind == "Permute":
            if tuple(op.dims)[0] != 1:
                raise _layer_error(op, f"moves the time axis (dims={tuple(op.dims)})")
            self._row(op, "per-step")
            return self._apply(op, args, kwargs, SEQ)
        if kind in PER_STEP_LAYERS or _is_elementwise_op(op):
            self._check_axes(op, PER_STEP_LAYERS.get(kind), args)
            self._check_all_sequences(op, args)
            self._row(op, "per-step")
            return self._apply(op, args, kwargs, SEQ)
        raise _layer_error(
            op, "is not a per-time-step layer, so it cannot run on a streamed "
                "sequence (tfaot streams recurrent layers and layers that treat "
                "each time step alone)")

    def _apply(self, op, args, kwargs, meta):
        import tensorflow as tf

        args, kwargs = _unwrap((args, kwargs))
        with tf.name_scope(op.name):
            out = op(*args, **kwargs)
        if isinstance(out, (list, tuple)):
            return [Streamed(o, meta) for o in out]
        return Streamed(out, meta)

    def _check_axes(self, op, attr: str | None, args) -> None:
        if attr is None:
            return
        rank = len(_leaves(args)[0].value.shape)
        axes = getattr(op, attr)
        axes = axes if isinstance(axes, (list, tuple)) else [axes]
        for axis in axes:
            if axis % rank in (0, 1):
                raise _layer_error(op, f"works along axis {axis}, the "
                                       f"{'batch' if axis % rank == 0 else 'time'} axis")

    def _check_all_sequences(self, op, args) -> None:
        metas = {s.meta for s in _leaves(args) if isinstance(s, Streamed)}
        if len(metas) > 1:
            raise _layer_error(op, "combines a sequence with a value that has no "
                                   "time axis; tfaot cannot tell how they align")

    def _reshape(self, op, x: Streamed) -> Streamed:
        """Reshape the features of each step; the time axis must stay first.

        The target's first entry is the time length (-1, or the model's
        fixed T); the rest must hold exactly one step's features, which also
        rules out a fixed first entry other than T.
        """
        import tensorflow as tf

        target = tuple(op.target_shape)
        per_step = tuple(int(d) for d in x.value.shape[2:])
        rest = target[1:]
        if -1 in rest or int(np.prod(rest)) != int(np.prod(per_step)):
            raise _layer_error(op, f"target shape {target} mixes the time axis "
                                   f"with the features {per_step}")
        with tf.name_scope(op.name):
            return Streamed(tf.reshape(x.value, (1, 1, *rest)), SEQ)

    # -- recurrent layers --------------------------------------------------

    def _recurrent(self, layer, x: Streamed, kwargs):
        import tensorflow as tf
        from keras import tree

        self._check_recurrent(layer, x, kwargs)
        self._row(layer, "recurrent")
        cell = layer.cell
        sizes = _state_sizes(layer)
        states = [self._take_state(layer, i, n) for i, n in enumerate(sizes)]
        with tf.name_scope(layer.name):
            y, new_states = cell.call(x.value[:, 0], states, training=False)
        new_states = tree.flatten(new_states)
        self.new_values.extend(new_states)
        out = Streamed(_expand_time(y), SEQ) if layer.return_sequences else Streamed(y, VEC)
        if getattr(layer, "return_state", False):
            return [out] + [Streamed(s, VEC) for s in new_states]
        return out

    def _check_recurrent(self, layer, x: Streamed, kwargs) -> None:
        if layer.go_backwards:
            raise _layer_error(layer, "has go_backwards=True: step t would depend "
                                      "on future samples")
        if kwargs.get("initial_state") is not None:
            raise _layer_error(layer, "gets its initial state from another tensor; "
                                      "tfaot needs the layer's own initial state")
        if x.meta != SEQ:
            raise _layer_error(layer, "reads a tensor that has no time axis of the "
                                      "model input (e.g. after a last-output layer)")
        _state_sizes(layer)  # raises on nested state sizes

    def _take_state(self, layer, index: int, units: int):
        import tensorflow as tf

        if self.discovering:
            name = f"{layer.name}/{_state_name(layer, index)}"
            self.new_states.append(StateInfo(name, "float32", (1, units),
                                             initial=np.zeros((1, units), np.float32),
                                             layer=layer.name))
            return tf.zeros((1, units), tf.float32)
        return self.incoming.pop(0)

    # -- report ------------------------------------------------------------

    def _row(self, op, role: str) -> None:
        if not self.discovering:
            return
        row = {"name": op.name, "type": type(op).__name__, "role": role}
        if role == "recurrent":
            row["units"] = int(op.cell.units) if hasattr(op.cell, "units") else None
            row["return_sequences"] = bool(op.return_sequences)
        self.layer_rows.append(row)


def _state_sizes(layer) -> list[int]:
    size = layer.cell.state_size
    sizes = list(size) if isinstance(size, (list, tuple)) else [size]
    if not all(isinstance(s, (int, np.integer)) for s in sizes):
        raise _layer_error(layer, f"has a nested state size {size!r} (e.g. "
                                  "StackedRNNCells), which is not supported yet")
    return [int(s) for s in sizes]


def _state_name(layer, index: int) -> str:
    if type(layer.cell).__name__ == "LSTMCell":
        return ("h", "c")[index]
    if len(_state_sizes(layer)) == 1:
        return "h"
    return f"state{index}"


def _expand_time(value):
    import tensorflow as tf

    return tf.expand_dims(value, 1)


def _is_elementwise_op(op) -> bool:
    return type(op).__module__.startswith("keras.src.ops") and \
        type(op).__name__ in ELEMENTWISE_OPS


def _layer_error(op, reason: str) -> TfaotError:
    return TfaotError(f"layer '{op.name}' ({type(op).__name__}) {reason}")


def _leaves(structure) -> list:
    from keras import tree

    return tree.flatten(structure)


def _unwrap(structure):
    from keras import tree

    return tree.map_structure(
        lambda v: v.value if isinstance(v, Streamed) else v, structure)


def _report(model, fmt, streaming, layer_rows, signature: ProgramSignature):
    return {
        "format": fmt,
        "mode": "streaming" if streaming else "stateless (step = one whole inference)",
        "layers": layer_rows,
        "parameters": int(model.count_params()),
        **signature.to_json(),
    }
