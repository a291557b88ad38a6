"""Keras 2's causal separable 1-D convolutions, for Keras 3.

Keras 2 takes ``padding="causal"`` on SeparableConv1D (temporal
convolutional networks use it); Keras 3 takes it on Conv1D only,
and refused to load such a file. Causal padding is zeros before the
sequence, ``dilation * (kernel - 1)`` of them, then a valid convolution:
the model config gets a ZeroPadding1D layer before each such layer, which
becomes valid. The padding has no weights, so the file's weights load as
they are (by layer, in order).
"""
from __future__ import annotations

import copy
from typing import Any

#: Layers whose causal padding Keras 3 does not take.
CAUSAL_ONLY_IN_KERAS2 = ("SeparableConv1D",)
#: Keras 2 classes of a model (also one used as a layer: a keras.applications base).
MODEL_CLASSES = ("Functional", "Model", "Sequential")


def causal_as_padding(config: Any) -> Any:
    """``config`` (a model config, nested models included) with each causal
    layer of CAUSAL_ONLY_IN_KERAS2 made a ZeroPadding1D and a valid layer."""
    if isinstance(config, list):
        return [causal_as_padding(v) for v in config]
    if not isinstance(config, dict):
        return config
    out = {k: causal_as_padding(v) for k, v in config.items()}
    inner = out.get("config")
    if out.get("class_name") in MODEL_CLASSES and isinstance(inner, dict) and \
            isinstance(inner.get("layers"), list):
        sequential = out["class_name"] == "Sequential"
        out["config"] = {**inner, "layers": _padded_layers(inner["layers"], sequential)}
    return out


def _padded_layers(layers: list, sequential: bool) -> list:
    result = []
    for layer in layers:
        conf = layer.get("config") if isinstance(layer, dict) else None
        if not isinstance(conf, dict) or layer.get("class_name") not in CAUSAL_ONLY_IN_KERAS2 \
                or conf.get("padding") != "causal":
            result.append(layer)
            continue
        pad, conv = _split(layer, sequential)
        result += [pad, conv]
    return result


def _split(layer: dict, sequential: bool) -> tuple[dict, dict]:
    """The ZeroPadding1D and the valid layer that a causal ``layer`` is."""
    conf = layer["config"]
    kernel = _first(conf.get("kernel_size", 1))
    dilation = _first(conf.get("dilation_rate", 1))
    name = f"{conf['name']}_causal_padding"
    pad_conf = {"name": name, "trainable": False, "padding": [dilation * (kernel - 1), 0]}
    if "dtype" in conf:
        pad_conf["dtype"] = conf["dtype"]
    pad = {"class_name": "ZeroPadding1D", "config": pad_conf}
    if "module" in layer:  # (a .keras archive's layers name their module)
        pad["module"] = "keras.layers"
    conv = {**layer, "config": {**conf, "padding": "valid"}}
    if not sequential:
        pad["name"] = name
        pad["inbound_nodes"] = layer.get("inbound_nodes", [])
        conv["inbound_nodes"] = [_reading(node, name, index)
                                 for index, node in enumerate(pad["inbound_nodes"])]
    return pad, conv


def _first(value) -> int:
    return int(value[0] if isinstance(value, (list, tuple)) else value)


def _reading(node, name: str, index: int):
    """A call node like ``node`` whose one input is output 0 of call
    ``index`` of layer ``name``: an .h5's list of [layer, node, tensor,
    kwargs], or a .keras archive's {"args": [tensor], "kwargs": ...} whose
    tensor names its layer in "keras_history"."""
    if isinstance(node, list):
        return [[name, index, 0, {}]]
    tensor = copy.deepcopy(node["args"][0])
    tensor["config"]["keras_history"] = [name, index, 0]
    return {**node, "args": [tensor]}
