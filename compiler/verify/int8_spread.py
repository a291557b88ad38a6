"""How far int8 weights move this model's outputs: verify's int8 tolerance.

An int8 build rounds each quantized matrix's weights to 1/127 of its row's
largest, and each layer's input as the kernel reads it; what that does to
the outputs depends on the model. A fixed bound fits the recurrent models
and keyword spotters it was measured on and fails narrow image models
whose libraries are as accurate as LiteRT's int8: MobileNet alpha 0.25 at
96x96 with int8 convolutions (what an AVX-512 VNNI or Arm dot-product CPU
builds) differed from TensorFlow by 0.39, LiteRT's int8 by about as much,
where the fixed bound was 0.15. Its few channels per layer average the
rounding less.

So verify also runs TensorFlow on the model with the weights the build
quantizes rounded as the build rounds them (``rounded``: per output
channel, symmetric, 127 steps), on the same inputs, and allows ``MARGIN``
times the largest change that alone makes (its spread:
changed_weights.moves). The weights' rounding is about half of the
library's error (the inputs' rounding is the other half): that model's
library differed by 1.7 times it, a MobileNetV2 0.35 by 1.6 times,
recurrent models and a DS-CNN by 1.3 to 1.9 times. A wrong kernel, off by
about the outputs' size, still fails; an error of a few times the rounding
passes where the rounding is large (on the MobileNet alpha 0.25 at 64x64 of
the tests, its last layer's weights scaled by 1.3).

Which weights the build quantized comes from its manifest: matrices
(Dense, recurrent kernels, a graph's MatMul) of ``int8_min_weights`` or
more, and convolutions (not depthwise ones) where it used the int8
convolution kernel. A streamed convolution that became a matrix product is
not rounded here; the fixed bound stays the floor, so this never makes
verify stricter than it was.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from .changed_weights import with_changed_weights

#: allowed error, in multiples of the spread of the weights' rounding alone
MARGIN = 3.0
#: the int8 build's weight threshold where an older manifest does not say
FALLBACK_MIN_WEIGHTS = 1024


@dataclass(frozen=True)
class Rule:
    """Which weights an int8 build quantized."""
    min_weights: int
    convolutions: bool


def rule_of(manifest: dict) -> Rule | None:
    """The int8 build's rule, from its manifest; None for other builds."""
    if manifest.get("weights_dtype") != "int8" or not manifest.get("int8_layers"):
        return None
    fewest = manifest.get("int8_min_weights")
    if fewest is None:  # (manifests before it was recorded say it in words)
        found = re.search(r"of (\d+) weights or more", manifest.get("weights_scheme", ""))
        fewest = int(found.group(1)) if found else FALLBACK_MIN_WEIGHTS
    kernels = set(manifest.get("micro_kernels", []))
    return Rule(int(fewest), bool({"qconv", "qconv16"} & kernels))


def rounded(w: np.ndarray, axis: int) -> np.ndarray:
    """``w`` rounded as the int8 kernels store it: symmetric, one scale per
    index along ``axis`` (the output channel), 127 steps each side."""
    moved = np.moveaxis(np.asarray(w, np.float32), axis, -1)
    flat = moved.reshape(-1, moved.shape[-1])
    scale = np.abs(flat).max(axis=0) / 127.0
    scale[scale == 0] = 1.0
    back = (np.round(flat / scale) * scale).astype(np.float32).reshape(moved.shape)
    return np.moveaxis(back, -1, axis)


def note(spread_of_output: float) -> str:
    """Why an output's tolerance is ``MARGIN`` times its spread, for verify's report."""
    return (f"the tolerance is {MARGIN:g} x {spread_of_output:.3g}, how far TensorFlow's "
            "values move with only the weights this int8 build quantized rounded as it "
            "rounds them (its inputs' rounding adds about as much again)")


def with_rounded_weights(loaded, rule: Rule):
    """``loaded`` as TensorFlow would run it with the weights ``rule`` names
    rounded (``rounded``): a context (changed_weights)."""
    return with_changed_weights(loaded, lambda model: _rounded_keras(model, rule),
                                lambda graph_def: _rounded_graph(graph_def, rule))


#: a Keras layer's matrices, by attribute (a SeparableConv's pointwise one is a 1x1 convolution)
_KERNELS = ("kernel", "recurrent_kernel", "pointwise_kernel")


def _rounded_keras(model, rule: Rule):
    """(variable, rounded value) for the quantized matrices of ``model``'s
    layers (their output channel is the last axis)."""
    for layer in model._flatten_layers(include_self=False):
        kind = type(layer).__name__
        if "Depthwise" in kind:
            continue
        for attr in _KERNELS:
            variable = getattr(layer, attr, None)
            if variable is None or not hasattr(variable, "assign"):
                continue
            value = np.asarray(variable)
            is_conv = "Conv" in kind or attr == "pointwise_kernel"
            if value.size < rule.min_weights or (is_conv and not rule.convolutions):
                continue
            yield variable, rounded(value, -1)


#: graph ops whose second input is a matrix the int8 build may quantize
_MATRIX_OPS = ("MatMul", "BatchMatMul", "BatchMatMulV2", "BatchMatMulV3")
_CONV_OPS = ("Conv1D", "Conv2D", "Conv3D")


def _rounded_graph(graph_def, rule: Rule):
    """A copy of ``graph_def`` with the constant weights of its matrix
    products (and convolutions, where the rule has them) rounded."""
    import tensorflow as tf

    from ..frontend.graphdef import source_node

    out = type(graph_def)()
    out.CopyFrom(graph_def)
    nodes = {n.name: n for n in out.node}
    done = set()
    for node in list(out.node):
        is_conv = node.op in _CONV_OPS
        if len(node.input) < 2 or not (node.op in _MATRIX_OPS or (is_conv and rule.convolutions)):
            continue
        name = source_node(nodes, node.input[1])
        const = nodes.get(name)
        if name in done or const is None or const.op != "Const":
            continue
        value = tf.make_ndarray(const.attr["value"].tensor)
        if value.dtype != np.float32 or value.size < rule.min_weights or value.ndim < 2:
            continue
        # (a MatMul's output is a column of its [K, N] matrix, a row if transposed)
        adjoint = any(key in node.attr and node.attr[key].b for key in ("transpose_b", "adj_y"))
        axis = -2 if adjoint and not is_conv else -1
        const.attr["value"].tensor.CopyFrom(tf.make_tensor_proto(rounded(value, axis)))
        done.add(name)
    return out

