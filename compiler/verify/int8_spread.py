"""How far the build's rounding of its weights moves this model's outputs:
verify's tolerance for int8 and half-width (bf16, f16) builds.

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

Half-width builds (``--weights-dtype=bf16|f16``) round every weight their
kernels take (matrices, convolutions, depthwise ones) to the nearest bf16
or f16 (weight_packing.to_half), and only the weights: a DeepLab-style
segmenter at 64 x 64 (batch norms calibrated, logits per pixel) differed
from TensorFlow by 0.14 in bf16 and 0.013 in f16, over the fixed bounds
(0.054, 0.0054) that fit the benchmark models, where TensorFlow itself,
with those weights rounded, moved by about as much (0.141, 0.018). The
same rule applies, with all of those weights rounded as the build rounds
them, and HALF_MARGIN.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from .changed_weights import with_changed_weights

#: allowed error, in multiples of the spread of the weights' rounding alone
MARGIN = 3.0
#: ... for a half-width build, which rounds nothing else: its library's
#: error was about one spread (the segmenter above: 0.140 against 0.141 in
#: bf16), the rest a batch norm's scale folded into the weights before
#: they are rounded
HALF_MARGIN = 2.0


def margin(dtype: str) -> float:
    """The allowed multiple of the spread for a build of ``dtype``."""
    return MARGIN if dtype == "int8" else HALF_MARGIN
#: the int8 build's weight threshold where an older manifest does not say
FALLBACK_MIN_WEIGHTS = 1024


#: the kernels whose weights a half-width build stores in 16 bits
HALF_KINDS = {"matvec", "conv", "dwconv", "conv16", "dwconv16"}


@dataclass(frozen=True)
class Rule:
    """Which weights an int8 or half-width build rounded, and how (``dtype``)."""
    min_weights: int
    convolutions: bool
    dtype: str = "int8"


def rule_of(manifest: dict) -> Rule | None:
    """The build's rule, from its manifest; None for f32 builds (and those
    whose kernels took no weights)."""
    dtype = manifest.get("weights_dtype")
    if dtype in ("bf16", "f16"):
        taken = HALF_KINDS & set(manifest.get("micro_kernels", []))
        return Rule(0, True, dtype) if taken else None
    if dtype != "int8" or not manifest.get("int8_layers"):
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


def rounded_as(rule: Rule, w: np.ndarray, axis: int) -> np.ndarray:
    """``w`` rounded as the build of ``rule`` stores it: int8 (``rounded``)
    or the nearest bf16 or f16."""
    if rule.dtype == "int8":
        return rounded(w, axis)
    from ..lower.weight_packing import from_half, to_half

    return from_half(to_half(w, rule.dtype), rule.dtype).reshape(np.shape(w))


def note(spread_of_output: float, dtype: str = "int8") -> str:
    """Why an output's tolerance is ``MARGIN`` times its spread, for verify's report."""
    if dtype == "int8":
        return (f"the tolerance is {MARGIN:g} x {spread_of_output:.3g}, how far TensorFlow's "
                "values move with only the weights this int8 build quantized rounded as it "
                "rounds them (its inputs' rounding adds about as much again)")
    return (f"the tolerance is {HALF_MARGIN:g} x {spread_of_output:.3g}, how far TensorFlow's "
            f"values move with the weights this {dtype} build stores in 16 bits rounded as it "
            "rounds them")


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
        if "Depthwise" in kind and rule.dtype == "int8":
            continue
        for attr in (*_KERNELS, "depthwise_kernel"):
            variable = getattr(layer, attr, None)
            if variable is None or not hasattr(variable, "assign"):
                continue
            value = np.asarray(variable)
            is_conv = "Conv" in kind or attr == "pointwise_kernel"
            if value.size < rule.min_weights or (is_conv and not rule.convolutions):
                continue
            yield variable, rounded_as(rule, value, -1)


#: graph ops whose second input is a matrix the int8 build may quantize
_MATRIX_OPS = ("MatMul", "BatchMatMul", "BatchMatMulV2", "BatchMatMulV3")
_CONV_OPS = ("Conv1D", "Conv2D", "Conv3D")
#: ... and whose weights a half-width build rounds too
_DEPTHWISE_OPS = ("DepthwiseConv2dNative",)


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
        is_conv = node.op in _CONV_OPS or (rule.dtype != "int8" and node.op in _DEPTHWISE_OPS)
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
        const.attr["value"].tensor.CopyFrom(tf.make_tensor_proto(rounded_as(rule, value, axis)))
        done.add(name)
    return out

