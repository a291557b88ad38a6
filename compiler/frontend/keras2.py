"""Keras 2 (tf_keras) files keep Keras 2 meanings.

tfaot builds every Keras model with Keras 3, whose streamer replays Keras 3
cells. A ``.h5`` written by Keras 2 names things whose definitions changed
between Keras 2 and Keras 3; loaded as they are, Keras 3 would silently
compute something else. What changed (checked by reading tf_keras 2.21 and
Keras 3.15 and by running every activation and activation layer through
both; see tests/test_keras2_semantics.py):

* ``hard_sigmoid`` (an activation name, e.g. the usual LSTM/GRU
  ``recurrent_activation`` of older models): Keras 2 computes
  ``clip(0.2 x + 0.5, 0, 1)``, Keras 3 ``relu6(x + 3) / 6``
  = ``clip(x / 6 + 0.5, 0, 1)``. Rewritten to :func:`keras2_hard_sigmoid`.
* ``ThresholdedReLU`` (layer): removed in Keras 3 (``Unknown layer``);
  provided by :class:`ThresholdedReLU` with Keras 2's ``x * (x > theta)``.
* ``time_major`` (recurrent layer argument): gone in Keras 3; Keras 2 files
  always write it. ``False`` is Keras 3's only layout and is dropped;
  ``True`` (input (time, batch, ...)) is refused, not silently misread.
* Arguments Keras 3 refuses that mean nothing at their Keras 2 values
  (``KERAS2_ONLY_ARGUMENTS``): ``groups=1`` of the depthwise, separable and
  transposed convolutions, a separable convolution's unused ``kernel_*``,
  a spatial dropout's ``trainable`` and ``noise_shape``, a
  MultiHeadAttention's build shapes: dropped (Keras 3 builds it on its call,
  whose value, a keyword argument, ``keras2_nodes`` rewrites).
* A BatchNormalization's ``axis`` written as a one-element list (``[2]``):
  Keras 3 takes the int.
* ``Embedding``: Keras 2's lookup (``tf.gather``) refuses a negative id,
  Keras 3's ``take`` wraps it to a row from the end; the Keras 2 class's
  own arithmetic (:class:`Embedding`), so the step refuses ids outside
  [0, rows) as tf_keras does. Its config's ``batch_input_shape`` and
  ``input_length`` (tf_keras writes them; a ``.keras`` archive with an
  Embedding did not load) are dropped: the model's input layer has the shape.
* Layer names with ``/`` (tf_keras's MobileNetV3 writes ``Conv/BatchNorm``,
  ``expanded_conv/depthwise``): Keras 3 refuses them ("cannot contain
  character `/`"); renamed with ``_`` (:func:`_slash_free_names`). The .h5
  weights are matched by order, not by name, so the numbers are the same.

Unchanged, so nothing to do (every Keras 2 config writes its arguments
explicitly, so changed *defaults* could not matter anyway): ``gelu``
(exact, ``approximate=False``, in both), ``leaky_relu`` (slope 0.2 in both),
``LeakyReLU`` (Keras 2 ``alpha`` is read by Keras 3 as ``negative_slope``;
default 0.3 in both), ``relu6``, ``elu``/``ELU`` (alpha 1.0), ``selu``,
``swish``/``silu``, ``softplus``, ``softsign``, ``exponential``, ``mish``,
``linear``, ``softmax``/``log_softmax``, ``ReLU`` (max_value,
negative_slope, threshold), ``PReLU``, ``Softmax``, GRU ``reset_after``
(True in both), ``LayerNormalization`` and ``BatchNormalization`` epsilons
(1e-3 in both). ``hard_swish``/``hard_silu`` do not exist as Keras 2
activation names.

A file is a Keras 2 file when the ``keras_version`` that every Keras save
writes (the ``.h5`` attribute, or metadata.json in a ``.keras`` archive)
has a major version below 3.
"""
from __future__ import annotations

import json
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ..errors import TfaotError, first_line
from .keras2_causal import MODEL_CLASSES, causal_as_padding
from .keras2_cudnn import (CUDNN_CLASSES, as_keras_rnn, convert_weights, cudnn_layer_names,
                           refuse_cudnn_in_archive, with_keras_classes)
from .keras2_nodes import (CONSTANT_FIRST, MIXED_LISTS, call_node, filled, has_tensor_kwargs,
                           is_tensor_triple, slices, tf_function)

# Keras 2 activation names whose Keras 3 function computes something else.
CHANGED_ACTIVATIONS = ("hard_sigmoid",)


def h5_keras_version(path: Path) -> str | None:
    """The ``keras_version`` attribute of a Keras ``.h5`` file, or None."""
    import h5py

    with h5py.File(path, "r") as f:
        version = f.attrs.get("keras_version")
    if isinstance(version, bytes):
        version = version.decode("utf-8", "replace")
    return None if version is None else str(version)


def is_keras2_version(version: str | None) -> bool:
    """True for Keras 1/2 and tf.keras versions ("2.21.0", "2.2.4-tf")."""
    if not version:
        return False
    try:
        return int(version.split(".")[0]) < 3
    except ValueError:
        return False


def is_keras2_h5(path: Path) -> bool:
    return is_keras2_version(h5_keras_version(path))


def archive_keras_version(path: Path) -> str | None:
    """``keras_version`` from a ``.keras`` archive's metadata.json, or None."""
    import zipfile

    try:
        with zipfile.ZipFile(path) as z:
            meta = json.loads(z.read("metadata.json"))
    except (KeyError, ValueError, OSError, zipfile.BadZipFile):
        return None
    version = meta.get("keras_version") if isinstance(meta, dict) else None
    return None if version is None else str(version)


def is_keras2_file(path: Path, fmt: str) -> bool:
    """True for a ``.h5`` or ``.keras`` file written by Keras 2 (tf_keras)."""
    if fmt == "h5":
        return is_keras2_h5(path)
    if fmt == "keras":
        return is_keras2_version(archive_keras_version(path))
    return False


# --------------------------------------------------------------------------
# Keras 2 meanings as Keras 3 objects


def _register():
    import keras

    @keras.saving.register_keras_serializable(package="tfaot", name="keras2_hard_sigmoid")
    def keras2_hard_sigmoid(x):
        """Keras 2's hard_sigmoid: clip(0.2 * x + 0.5, 0, 1)."""
        x = keras.ops.convert_to_tensor(x)
        return keras.ops.clip(x * 0.2 + 0.5, 0.0, 1.0)

    @keras.saving.register_keras_serializable(package="tfaot", name="ThresholdedReLU")
    class ThresholdedReLU(keras.layers.Layer):
        """Keras 2's ThresholdedReLU (removed in Keras 3): x * (x > theta)."""

        def __init__(self, theta=1.0, **kwargs):
            super().__init__(**kwargs)
            self.theta = float(theta)

        def call(self, inputs):
            return inputs * keras.ops.cast(keras.ops.greater(inputs, self.theta),
                                           inputs.dtype)

        def compute_output_shape(self, input_shape):
            return input_shape

        def get_config(self):
            return {**super().get_config(), "theta": self.theta}

    import numpy as np
    import tensorflow as tf

    @keras.saving.register_keras_serializable(package="tfaot", name="TFOpLambda")
    class TFOpLambda(keras.layers.Layer):
        """Keras 2's record of a TensorFlow function called on a Keras tensor
        (``tf.math.tanh(x)``, ``x * 2``, ``tf.expand_dims(x, -1)``): the
        function by its name under ``tf`` (``math.tanh``,
        ``__operators__.add``), called with the node's arguments."""

        def __init__(self, function, **kwargs):
            super().__init__(**{k: v for k, v in kwargs.items()
                                if k in ("name", "trainable", "dtype")})
            self.function = function
            self._call = tf_function(function)

        def call(self, *args, **kwargs):
            kwargs.pop("name", None)  # names the TensorFlow op, not an argument
            if MIXED_LISTS in kwargs:  # (see keras2_nodes.call_node)
                *args, tensors = args
                kwargs.update({key: filled(template, tensors)
                               for key, template in kwargs.pop(MIXED_LISTS).items()})
            if CONSTANT_FIRST in kwargs:  # (see keras2_nodes.call_node)
                name, value, key = kwargs.pop(CONSTANT_FIRST)
                # (a tensor of the other operand's dtype, as TensorFlow's
                # reflected operators (__radd__) convert it)
                value = tf.convert_to_tensor(value, dtype=args[0].dtype)
                kwargs.update({name: value, key: args[0]})
                args = args[1:]
            return self._call(*args, **kwargs)

        def get_config(self):
            return {**super().get_config(), "function": self.function}

    @keras.saving.register_keras_serializable(package="tfaot", name="SlicingOpLambda")
    class SlicingOpLambda(TFOpLambda):
        """Keras 2's ``x[...]`` on a Keras tensor: its slice spec written
        with dicts for slices."""

        def call(self, x, slice_spec=None, **kwargs):
            return self._call(x, slices(slice_spec))

    @keras.saving.register_keras_serializable(package="tfaot", name="Keras2Lambda")
    class Keras2Lambda(keras.layers.Lambda):
        """A Keras 2 ``Lambda`` of Python code: its function's globals are
        those tf_keras gives it (TensorFlow as ``tf``, numpy as ``np``, as
        its lambda module imports them). Keras 3 gives a loaded lambda its
        own utility module's globals, without ``tf``, so the common
        ``Lambda(lambda x: tf.math.l2_normalize(x, -1))`` failed its shape
        inference ('could not automatically infer the shape')."""

        @classmethod
        def from_config(cls, config, custom_objects=None, safe_mode=None):
            from keras.src.utils import python_utils

            # Keras 2's own arguments: Keras 3 drops them from an .h5's
            # config (and writes the code as a __lambda__ dict), not from a
            # tf_keras .keras archive's
            config = {k: v for k, v in config.items() if k not in (
                "function_type", "module", "output_shape_type", "output_shape_module")}
            fn = config.get("function")
            if isinstance(fn, dict) and fn.get("class_name") == "__lambda__":
                fn = [fn["config"][k] for k in ("code", "defaults", "closure")]
            if not isinstance(fn, list):
                return super().from_config(config, custom_objects=custom_objects,
                                           safe_mode=safe_mode)
            if keras_safe_mode() if safe_mode is None else safe_mode:
                keras.layers.Lambda._raise_for_lambda_deserialization(True)
            function = python_utils.func_load(
                fn, globs={"tf": tf, "np": np, "__builtins__": __builtins__})
            # the rest as Keras' own from_config, which takes the function
            # from its config only
            shape = config.get("output_shape")
            if isinstance(shape, list) and all(isinstance(d, (int, type(None))) for d in shape):
                config = {**config, "output_shape": tuple(shape)}
            elif shape is not None and not isinstance(shape, tuple):
                raise TfaotError(f"Lambda layer '{config.get('name')}': its output_shape "
                                 "is a function, which tfaot does not load")
            return cls(**{**config, "function": function})

    @keras.saving.register_keras_serializable(package="tfaot", name="Keras2Embedding")
    class Embedding(keras.layers.Embedding):
        """tf_keras's Embedding: its lookup (tf.gather) refuses a negative
        id, where Keras 3's take wraps it to a row from the end; the
        library took -1 as the last row (a tf_keras model raised
        InvalidArgumentError). Built on tf.gather, the step refuses ids
        outside [0, rows) (lower/input_ranges.py), as tf_keras does."""

        def call(self, inputs):
            if inputs.dtype not in ("int32", "int64"):
                inputs = keras.ops.cast(inputs, "int32")
            return keras.ops.cast(tf.gather(self.embeddings, inputs), self.compute_dtype)

    return (keras2_hard_sigmoid, ThresholdedReLU, TFOpLambda, SlicingOpLambda, Keras2Lambda,
            Embedding)


_OBJECTS: tuple | None = None


def _objects():
    """The objects, made and registered once; registered again wherever
    something has cleared Keras' registry since (a program's own reset of
    it: Keras 2 files then failed to load, "the class 'Lambda' ... Keras
    does not know")."""
    import keras

    global _OBJECTS
    if _OBJECTS is None:
        _OBJECTS = _register()
    registry = keras.saving.get_custom_objects()
    for obj in _OBJECTS:
        registry.setdefault(keras.saving.get_registered_name(obj), obj)
    return _OBJECTS


def register() -> None:
    """Register the Keras 2 objects (tfaot>...) with Keras 3's serializer."""
    _objects()


def custom_objects() -> dict[str, Any]:
    """Layers that Keras 2 files may name but Keras 3 no longer has."""
    hard_sigmoid, thresholded, op_lambda, slicing, lambda_layer, embedding = _objects()
    return {"ThresholdedReLU": thresholded, "keras2_hard_sigmoid": hard_sigmoid,
            "TFOpLambda": op_lambda, "SlicingOpLambda": slicing, "Lambda": lambda_layer,
            "Embedding": embedding}


def _activation_ref(name: str) -> dict:
    import keras

    fn = {"hard_sigmoid": _objects()[0]}[name]
    return keras.saving.serialize_keras_object(fn)


#: layer arguments that act only in training (on the weights after each
#: update, or on the loss)
TRAINING_ONLY = ("_constraint", "_regularizer")


def without_training_only(config: Any) -> Any:
    """A model config (Keras 2's or 3's) with every weight constraint and
    regularizer None: they do nothing at inference, and a custom one
    (RNNoise's training script clips its weights with its own WeightClip)
    is a class the file does not hold, so neither Keras could load the
    model without the script's code."""
    if isinstance(config, list):
        return [without_training_only(v) for v in config]
    if not isinstance(config, dict):
        return config
    return {k: None if k.endswith(TRAINING_ONLY) else without_training_only(v)
            for k, v in config.items()}


def rewrite_config(config: Any) -> tuple[Any, list[str]]:
    """Map Keras 2 meanings in a model config (the ``model_config`` JSON)
    to Keras 3 objects with the same numbers. Returns the new config and a
    list of what was changed ("layer 'lstm' recurrent_activation=hard_sigmoid").
    """
    changes: list[str] = []
    config = _nested_model_calls(_slash_free_names(causal_as_padding(
        without_training_only(config))))

    def walk(node, layer_name):
        if isinstance(node, list):
            return [walk(v, layer_name) for v in node]
        if not isinstance(node, dict):
            return node
        if "class_name" in node and isinstance(node.get("config"), dict):
            layer_name = node["config"].get("name", layer_name)
            if node["class_name"] in CUDNN_CLASSES:  # (its weights: load_h5_as_keras3)
                node = as_keras_rnn(node)
            if "time_major" in node["config"]:
                node = {**node, "config": dict(node["config"])}
                if node["config"].pop("time_major"):
                    raise TfaotError(
                        f"layer '{layer_name}' ({node['class_name']}) has time_major=True "
                        "(input (time, batch, ...)), which Keras 3 and tfaot do not support; "
                        "the same layer without it on (batch, time, ...) computes the same: "
                        "make the model so (without the transposes around it), copy the "
                        "weights (set_weights) and save that file")
            if node["class_name"] == "Functional" and \
                    str(node.get("module", "")).startswith("tf_keras"):
                # (tf_keras's .keras archives name its own module, which Keras 3 cannot import)
                node = {**node, "module": "keras.src.models.functional"}
            if node["class_name"] in OP_LAYERS and "inbound_nodes" in node:
                function = node["config"].get("function")
                node = {**node, "inbound_nodes": [call_node(n, function)
                                                  for n in node["inbound_nodes"]]}
            if node["class_name"] == "MultiHeadAttention" and "build_config" in node:
                # (its build takes the query's and the value's shapes; an
                # archive's build_config has one: Keras 3 builds it on call)
                node = {k: v for k, v in node.items() if k != "build_config"}
            if has_tensor_kwargs(node.get("inbound_nodes")):
                # a layer's call with a tensor among its keyword arguments
                # (an attention's value): a node is a list of calls
                node = {**node, "inbound_nodes": [call_node(n[0] if len(n) == 1 else n)
                                                  for n in node["inbound_nodes"]]}
            if node["class_name"] == "ThresholdedReLU":
                # a .keras archive names keras.layers, where Keras 3 has none
                node = {**node, "module": None, "registered_name": "tfaot>ThresholdedReLU"}
            if node["class_name"] in ("Lambda", "Embedding") and "module" in node:
                # (a .keras archive names keras.layers, whose class Keras 3's is)
                node = {**node, "module": None,
                        "registered_name": f"tfaot>Keras2{node['class_name']}"}
            if node["class_name"] in KERAS2_ONLY_ARGUMENTS:
                node = {**node, "config": _without_keras2_arguments(
                    node["class_name"], node["config"], layer_name)}
            if node["class_name"] == "BatchNormalization" and \
                    isinstance(node["config"].get("axis"), list):
                node = {**node, "config": _batch_norm_axis(node["config"], layer_name)}
            if node["class_name"] == "LeakyReLU" and "alpha" in node["config"]:
                # the same slope, under its Keras 3 name (avoids a warning)
                node = {**node, "config": {
                    **{k: v for k, v in node["config"].items() if k != "alpha"},
                    "negative_slope": node["config"]["alpha"]}}
        out = {}
        for key, value in node.items():
            name = _activation_name(value)
            if key.endswith("activation") and name in CHANGED_ACTIVATIONS:
                out[key] = _activation_ref(name)
                changes.append(f"layer '{layer_name}' {key}={name}")
            else:
                out[key] = walk(value, layer_name)
        return out

    return walk(config, None), changes


def _nested_model_calls(config: Any) -> Any:
    """``config`` with calls of a nested model renumbered for Keras 3.

    Keras 2 counts a model's own inputs as its node 0, so the outer model's
    call of it is node 1 (``['base', 1, 0, {}]``); Keras 3 keeps no such
    node, and its loader looked for node 1 of a model called once: the
    usual transfer-learning file (input -> Rescaling -> a keras.applications
    base -> head) did not load ("disconnected nodes"). (Keras 3 itself
    takes that 1 off for the model's outputs, not for its layers' inputs.)"""
    if isinstance(config, list):
        return [_nested_model_calls(v) for v in config]
    if not isinstance(config, dict):
        return config
    config = {k: _nested_model_calls(v) for k, v in config.items()}
    layers = config.get("config", {}).get("layers") if isinstance(config.get("config"),
                                                                  dict) else None
    if not isinstance(layers, list):
        return config
    models = {layer["config"].get("name") for layer in layers
              if isinstance(layer, dict) and layer.get("class_name") in MODEL_CLASSES
              and isinstance(layer.get("config"), dict)}
    if not models:
        return config

    def renumbered(ref):
        if is_tensor_triple(ref) and ref[0] in models and ref[1] >= 1:
            return [ref[0], ref[1] - 1, *ref[2:]]
        return [renumbered(v) for v in ref] if isinstance(ref, list) else ref

    new_layers = [{**layer, "inbound_nodes": renumbered(layer["inbound_nodes"])}
                  if isinstance(layer, dict) and "inbound_nodes" in layer else layer
                  for layer in layers]
    return {**config, "config": {**config["config"], "layers": new_layers}}


def _batch_norm_axis(config: dict, layer_name) -> dict:
    """tf_keras writes a BatchNormalization's axis as a list (``[2]``), and
    Keras 3's takes one int: its .h5 reader converts it, but a tf_keras
    ``.keras`` archive with a BatchNormalization did not load ("int()
    argument must be ... not 'list'")."""
    axis = config["axis"]
    if len(axis) != 1:
        raise TfaotError(f"layer '{layer_name}' (BatchNormalization) normalizes over the axes "
                         f"{axis}; Keras 3 (and so tfaot) takes one axis")
    return {**config, "axis": axis[0]}


def _slash_free_names(config: Any) -> Any:
    """``config`` with each layer name holding ``/`` written with ``_``
    (Keras 3 refuses ``/`` in a name). Every string equal to such a name is
    a reference to the layer (its inbound nodes, the model's input and
    output layers), so each is replaced; a new name already taken gets a
    suffix."""
    names: set[str] = set()
    slashed: list[str] = []

    def collect(node):
        if isinstance(node, list):
            for v in node:
                collect(v)
        elif isinstance(node, dict):
            name = node.get("config", {}).get("name") if "class_name" in node and \
                isinstance(node.get("config"), dict) else None
            if isinstance(name, str):
                names.add(name)
                if "/" in name:
                    slashed.append(name)
            for v in node.values():
                collect(v)

    collect(config)
    renamed: dict[str, str] = {}
    for name in dict.fromkeys(slashed):
        new = base = name.replace("/", "_")
        k = 1
        while new in names:
            new, k = f"{base}_{k}", k + 1
        names.add(new)
        renamed[name] = new
    if not renamed:
        return config

    def rename(node):
        if isinstance(node, str):
            return renamed.get(node, node)
        if isinstance(node, list):
            return [rename(v) for v in node]
        if isinstance(node, dict):
            return {k: rename(v) for k, v in node.items()}
        return node

    return rename(config)


_ANY = object()

#: Arguments that Keras 2 configs write and Keras 3 refuses ("Unrecognized
#: keyword arguments"), by layer: the value each must have to mean nothing
#: (``_ANY``: means nothing whatever it is). Without this, a Keras 2 file with
#: a DepthwiseConv2D (a DS-CNN, a MobileNet) did not load at all.
_SEPARABLE = {"groups": 1, "kernel_initializer": _ANY,  # (Keras 2's separable
              "kernel_regularizer": _ANY, "kernel_constraint": _ANY}  # kernels are
# depthwise_kernel and pointwise_kernel; its "kernel" arguments are unused)
_SPATIAL_DROPOUT = {"trainable": _ANY, "noise_shape": None}
_AUGMENTATION = {"rng_type": _ANY}  # (inert at inference: how it draws is moot)
KERAS2_ONLY_ARGUMENTS: dict[str, dict[str, Any]] = {
    **{f"Random{k}": _AUGMENTATION for k in ("Flip", "Rotation", "Zoom", "Translation",
                                              "Contrast", "Brightness", "Crop")},
    "DepthwiseConv1D": {"groups": 1}, "DepthwiseConv2D": {"groups": 1},
    "Conv1DTranspose": {"groups": 1}, "Conv2DTranspose": {"groups": 1},
    "Conv3DTranspose": {"groups": 1},
    "SeparableConv1D": _SEPARABLE, "SeparableConv2D": _SEPARABLE,
    # (a dropout has no weights to train; Keras 3's takes no "trainable", and
    # its noise shape is always the spatial one)
    "SpatialDropout1D": _SPATIAL_DROPOUT, "SpatialDropout2D": _SPATIAL_DROPOUT,
    "SpatialDropout3D": _SPATIAL_DROPOUT,
    # (tf_keras writes its input's shape into an Embedding's config: a
    # .keras archive with one did not load; the model's input layer has it)
    "Embedding": {"batch_input_shape": _ANY, "input_length": _ANY},
    # (Keras 3 builds the layer from its call; Keras 2's masks by -1e9 too)
    "MultiHeadAttention": {"query_shape": _ANY, "key_shape": _ANY, "value_shape": _ANY,
                           "softmax_robust_masking": False},
}


def _without_keras2_arguments(class_name: str, config: dict, layer_name) -> dict:
    """``config`` without the Keras 2 arguments Keras 3 refuses; one that
    does not have its meaningless value is an error naming the layer."""
    drop = KERAS2_ONLY_ARGUMENTS[class_name]
    for key, value in config.items():
        if key in drop and drop[key] is not _ANY and value != drop[key]:
            raise TfaotError(f"layer '{layer_name}' ({class_name}) has {key}={value!r}, "
                             "which Keras 3 (and so tfaot) does not support")
    return {k: v for k, v in config.items() if k not in drop}


#: Keras 2's layers for TensorFlow functions called on Keras tensors.
OP_LAYERS = ("TFOpLambda", "SlicingOpLambda")


def _activation_name(value) -> str | None:
    if isinstance(value, str):
        return value
    # Keras 2.13+ may write {"class_name": "function", "config": "hard_sigmoid",
    # "module": "keras.activations", ...}
    if isinstance(value, dict) and value.get("class_name") == "function" \
            and isinstance(value.get("config"), str) \
            and str(value.get("module", "keras.activations")).endswith("activations"):
        return value["config"]
    return None


def load_h5_as_keras3(path: Path):
    """Load a Keras 2 ``.h5`` with Keras 3, keeping Keras 2 meanings.

    The model config is rewritten in a temporary copy of the file (Keras 3
    reads the config from the file itself, and looks activation names up
    without custom objects, so the config must name our objects).
    """
    import h5py
    import keras

    original = h5_model_config(path)
    if original is None:
        raise TfaotError(f"{path}: no model config in the file (a weights-only .h5?)")
    config, _ = rewrite_config(original)
    with tempfile.TemporaryDirectory(prefix="tfaot-k2-") as tmp:
        copy = Path(tmp) / "model.h5"
        shutil.copyfile(path, copy)
        with h5py.File(copy, "r+") as f:
            f.attrs["model_config"] = json.dumps(config)
            cudnn = cudnn_layer_names(original)
            if cudnn and "model_weights" in f:
                convert_weights(f["model_weights"], cudnn)
        return keras.models.load_model(copy, custom_objects=custom_objects(), compile=False,
                                       safe_mode=keras_safe_mode())


def h5_model_config(path: Path) -> Any:
    """The model config of an ``.h5`` file (its ``model_config`` attribute,
    JSON); None for a file of weights only."""
    import h5py

    with h5py.File(path, "r") as f:
        raw = f.attrs.get("model_config")
    if raw is None:
        return None
    return json.loads(raw.decode("utf-8") if isinstance(raw, bytes) else raw)


@contextmanager
def h5_rewritten(path: Path, rewrite):
    """A temporary copy of the ``.h5`` file at ``path`` whose model config
    is ``rewrite(config)``; ``path`` itself where that changes nothing or
    the file has no config. (A Keras 3 .h5 goes through
    ``without_training_only``.)"""
    import h5py

    original = h5_model_config(path)
    config = None if original is None else rewrite(original)
    if config == original:
        yield path
        return
    with tempfile.TemporaryDirectory(prefix="tfaot-k3-") as tmp:
        copy = Path(tmp) / "model.h5"
        shutil.copyfile(path, copy)
        with h5py.File(copy, "r+") as f:
            f.attrs["model_config"] = json.dumps(config)
        yield copy


def load_archive_as_keras3(path: Path):
    """Load a ``.keras`` archive written by tf_keras with Keras 3, keeping
    Keras 2 meanings (its config.json rewritten in a temporary copy)."""
    import zipfile

    import keras

    with zipfile.ZipFile(path) as src:
        refuse_cudnn_in_archive(path, json.loads(src.read("config.json")))
    with archive_rewritten(path, lambda config: rewrite_config(config)[0]) as copy:
        return keras.models.load_model(copy, custom_objects=custom_objects(), compile=False)


@contextmanager
def archive_rewritten(path: Path, rewrite):
    """A temporary copy of the ``.keras`` archive at ``path`` whose
    config.json is ``rewrite(config)``; ``path`` itself where that changes
    nothing. (A Keras 3 archive goes through ``without_training_only``.)"""
    import zipfile

    with zipfile.ZipFile(path) as src:
        original = json.loads(src.read("config.json"))
        config = rewrite(original)
        if config == original:
            yield path
            return
        with tempfile.TemporaryDirectory(prefix="tfaot-k2-") as tmp:
            copy = Path(tmp) / "model.keras"
            with zipfile.ZipFile(copy, "w") as dst:
                for name in src.namelist():
                    data = src.read(name)
                    dst.writestr(name, json.dumps(config).encode("utf-8")
                                 if name == "config.json" else data)
            yield copy


# --------------------------------------------------------------------------
# the Keras 2 reference for verify


def load_reference(path: Path, fmt: str = "h5"):
    """The file loaded by Keras 2 itself (tf_keras), for ``tfaot verify``."""
    try:
        import tf_keras
    except ImportError:
        raise TfaotError(f"{path} was saved by Keras 2; verifying it needs the tf_keras "
                         "package (pip install tf-keras==2.21.0)") from None
    try:
        with _named(path, fmt) as named, tf_keras_readable(named, fmt) as readable:
            # tf_keras keeps its own safe mode: --allow-lambda's is Keras 3's
            return tf_keras.models.load_model(readable, compile=False,
                                              safe_mode=keras_safe_mode())
    except Exception as e:
        raise TfaotError(f"{path}: Keras 2 (tf_keras) cannot load it: {first_line(e)}") \
            from None


@contextmanager
def tf_keras_readable(path: Path, fmt: str):
    """``path``, or where it is an .h5 that tf_keras (verify's Keras 2
    reference) cannot run as it is, a copy whose config it can: cuDNN
    layers named as their LSTM and GRU (tf_keras cannot run the cuDNN
    classes on a CPU, and converts their weights itself as it loads them
    into an LSTM or GRU), weight constraints and regularizers none
    (keras2.without_training_only)."""
    if fmt != "h5":
        yield path
        return
    with h5_rewritten(path, lambda c: with_keras_classes(without_training_only(c))) as copy:
        yield copy


def _named(path: Path, fmt: str):
    return with_suffix(path, "." + fmt)


@contextmanager
def with_suffix(path: Path, suffix: str):
    """Keras (3 and 2) picks its reader by file suffix; give it one that
    matches the content (a symlink in a temporary folder)."""
    if path.suffix == suffix:
        yield path
        return
    with tempfile.TemporaryDirectory(prefix="tfaot-") as tmp:
        link = Path(tmp) / f"model{suffix}"
        link.symlink_to(path.resolve())
        yield link


def keras_safe_mode() -> bool:
    """``safe_mode`` for loaders that do not read Keras 3's global setting.

    ``--allow-lambda`` calls ``keras.config.enable_unsafe_deserialization()``,
    which Keras 3's .keras loader honours; its .h5 loader opens a safe-mode
    scope of its own (on unless told), and tf_keras (verify's Keras 2
    reference) has its own flag, so an .h5 or Keras 2 Lambda was refused
    with the flag given. They get the setting passed on."""
    from keras.src.saving import serialization_lib

    return serialization_lib.in_safe_mode() is not False
