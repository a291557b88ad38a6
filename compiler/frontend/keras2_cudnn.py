"""Keras 2's CuDNNLSTM and CuDNNGRU, loaded as the LSTM and GRU they compute.

Models trained on a GPU with Keras 2.0-2.3 (and tf.keras 1.x) often use
``CuDNNLSTM`` / ``CuDNNGRU``: their only kernel is cuDNN's (the
``CudnnRNNV3`` op has no CPU kernel), so neither Keras 3 nor tf_keras can
run such a file on a CPU. What they compute is a plain LSTM (tanh,
sigmoid gates) and a GRU with the reset gate applied after the recurrent
product (``reset_after=True``, sigmoid gates), so a file's config is
rewritten to those classes (``as_keras_rnn``) and its weights converted
(``convert_weights``); tf_keras's .h5 loader converts such weights itself
once the config names LSTM or GRU (verify's Keras 2 reference, so it
checks the conversion here against that one).

The weights as cuDNN reads them: each gate's input kernel ``k`` (inputs x
units, as Keras stores it) is passed to cuDNN flattened, which reads it as
its ``units x inputs`` matrix ``W`` and computes ``W x``: the same product
as Keras' ``x k'`` with ``k' = W.T = k.reshape(units, inputs).T``. A
recurrent kernel (units x units) is read the same way, so ``k' = k.T``.
An LSTM adds an input and a recurrent bias (8 x units), whose sum is
Keras' bias; a GRU keeps both (6 x units), Keras' ``reset_after`` bias of
shape (2, 3 x units). The gate order is Keras' in both files (the layer
reorders its blocks for cuDNN as it runs).

A ``.keras`` archive that tf_keras wrote with such a layer is refused with
a clear error (``refuse_cudnn_in_archive``): its weights lie under the
layer's class name, and Keras 3 would look for them under LSTM's or GRU's
numbering (the .h5 of the model converts). tf_keras cannot write a
SavedModel of one (its saving fails on the layer).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ..errors import TfaotError

#: Keras 2's cuDNN class -> (the Keras class it computes, its gates, config it needs)
CUDNN_CLASSES = {
    "CuDNNLSTM": ("LSTM", 4, {"activation": "tanh", "recurrent_activation": "sigmoid"}),
    "CuDNNGRU": ("GRU", 3, {"activation": "tanh", "recurrent_activation": "sigmoid",
                            "reset_after": True}),
}

#: the cuDNN layers' arguments that LSTM and GRU take as they are
_KEPT_ARGUMENTS = (
    "name", "trainable", "dtype", "units", "return_sequences", "return_state", "go_backwards",
    "stateful", "time_major", "kernel_initializer", "recurrent_initializer", "bias_initializer",
    "kernel_regularizer", "recurrent_regularizer", "bias_regularizer", "activity_regularizer",
    "kernel_constraint", "recurrent_constraint", "bias_constraint", "batch_input_shape",
    "batch_size")


def as_keras_rnn(node: dict) -> dict:
    """A ``CuDNNLSTM`` / ``CuDNNGRU`` layer config node as its LSTM / GRU."""
    keras_class, _, needed = CUDNN_CLASSES[node["class_name"]]
    config = {k: v for k, v in node["config"].items() if k in _KEPT_ARGUMENTS}
    if keras_class == "LSTM" and "unit_forget_bias" in node["config"]:
        config["unit_forget_bias"] = node["config"]["unit_forget_bias"]  # (an initializer)
    return {**node, "class_name": keras_class, "config": {**config, **needed}}


def with_keras_classes(config):
    """A model config with every cuDNN layer as its LSTM or GRU (``as_keras_rnn``)."""
    if isinstance(config, list):
        return [with_keras_classes(v) for v in config]
    if not isinstance(config, dict):
        return config
    if config.get("class_name") in CUDNN_CLASSES and isinstance(config.get("config"), dict):
        config = as_keras_rnn(config)
    return {k: with_keras_classes(v) for k, v in config.items()}


def cudnn_layer_names(config) -> dict[str, str]:
    """The names of the cuDNN layers in a model config (nested ones too,
    as a Bidirectional's layer) -> their class."""
    found: dict[str, str] = {}

    def walk(node):
        if isinstance(node, list):
            for v in node:
                walk(v)
        elif isinstance(node, dict):
            if node.get("class_name") in CUDNN_CLASSES and isinstance(node.get("config"), dict):
                found[node["config"].get("name", "")] = node["class_name"]
            for v in node.values():
                walk(v)

    walk(config)
    return found


def convert_weights(weights_group, cudnn_layers: dict[str, str]) -> int:
    """Converts, in an .h5 file's ``model_weights`` group (opened for
    writing), every cuDNN layer's kernel, recurrent kernel and bias to the
    LSTM's or GRU's; returns how many layers were converted."""
    converted = 0
    for layer in weights_group.attrs.get("layer_names", []):
        group = weights_group[_text(layer)]
        names = [_text(n) for n in group.attrs.get("weight_names", [])]
        for i, name in enumerate(names):
            owner = _owner(name)
            if owner in cudnn_layers and name.endswith("/kernel:0") and \
                    i + 2 < len(names) and _owner(names[i + 2]) == owner:
                _convert_triple(group, names[i:i + 3], cudnn_layers[owner], owner)
                converted += 1
    return converted


def _convert_triple(group, names: list[str], cudnn_class: str, owner: str) -> None:
    arrays = converted_arrays([np.asarray(group[n]) for n in names], cudnn_class, owner)
    for name, value in zip(names, arrays):
        dtype = group[name].dtype
        del group[name]
        group.create_dataset(name, data=value.astype(dtype))


def converted_arrays(weights: list[np.ndarray], cudnn_class: str, owner: str) -> list:
    """A cuDNN layer's (kernel, recurrent kernel, bias) as its Keras class's
    (module docstring)."""
    kernel, recurrent, bias = weights
    _, gates, _ = CUDNN_CLASSES[cudnn_class]
    units = recurrent.shape[0]
    if kernel.ndim != 2 or recurrent.shape != (units, gates * units) or \
            kernel.shape[1] != gates * units or bias.shape != (2 * gates * units,):
        raise TfaotError(
            f"layer '{owner}' ({cudnn_class}): weights of shapes {kernel.shape}, "
            f"{recurrent.shape}, {bias.shape} are not a {cudnn_class}'s "
            f"(kernel (inputs, {gates} x units), recurrent kernel (units, {gates} x units), "
            f"bias ({2 * gates} x units))")
    inputs = kernel.shape[0]
    new_kernel = np.hstack([k.reshape(units, inputs).T for k in np.hsplit(kernel, gates)])
    new_recurrent = np.hstack([k.T for k in np.hsplit(recurrent, gates)])
    new_bias = (bias[:gates * units] + bias[gates * units:] if cudnn_class == "CuDNNLSTM"
                else bias.reshape(2, gates * units))
    return [new_kernel, new_recurrent, new_bias]


def refuse_cudnn_in_archive(path: Path, config) -> None:
    """A tf_keras ``.keras`` archive keeps a layer's weights under its class's
    name, which Keras 3 would look for under LSTM's or GRU's: such an
    archive is refused (the .h5 of the same model converts)."""
    cudnn = cudnn_layer_names(config)
    if cudnn:
        name, cls = next(iter(cudnn.items()))
        raise TfaotError(
            f"{path}: layer '{name}' is a {cls} (cuDNN only) in a .keras archive written by "
            "tf_keras; tfaot converts cuDNN layers from .h5 files: load the model with "
            "tf_keras where a GPU is and save it as .h5 (model.save('model.h5'))")


def _owner(weight_name: str) -> str:
    """The layer a weight belongs to: ``lstm/kernel:0`` -> lstm; a
    Bidirectional's ``bi/forward_lstm/kernel:0`` -> lstm."""
    parts = weight_name.split("/")
    owner = parts[-2] if len(parts) >= 2 else ""
    for prefix in ("forward_", "backward_"):
        if len(parts) >= 3 and owner.startswith(prefix):
            return owner[len(prefix):]
    return owner


def _text(value) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)
