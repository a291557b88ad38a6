"""The MLIR rewrites a Target asks for, in order, in one place.

The import stage writes one module for every target; before iree-compile,
the Target decides which of these rewrites the module gets:

0. ``patch_copies``: convolutions that only copy their patch (streamed
   ``tf.signal.frame``) become slices; ``transposed_conv``: a convolution
   of an input dilated by its stride (a transposed convolution) becomes an
   ordinary one and an interleave; ``constant_concats``: a
   concatenation's constant parts are added after it (IREE lost their
   buffers: iree-notes 1.4); on GPU targets, ``dft`` writes out
   every real FFT as matrix products (IREE's own needs a table the GPU
   host program loses) and ``gpu_workarounds`` rewrites what IREE's GPU
   code gets wrong (a reduction across rows fused with its consumers, a
   reduction of booleans).
1. ``pool_kernel``: pooling windows over channels-last images become calls
   of tfaot's pooling kernel (with the micro-kernels, where the target
   takes it), ``resize_kernel``: a bilinear resize's lerps calls of its
   resize kernel; ``pooling``: the other small pooling windows become slices
   (CPU targets: IREE's pooling is a generic loop); ``reduction_order``: a long sum over
   several axes (a global average pooling) one axis at a time (IREE's one
   running sum drifted 5x TensorFlow's error); ``long_products``: with
   several streams, a matrix product over many inputs summed in chunks
   (the kernels' one running sum drifted 4x).
2. ``microkernel``: constant-weight matvecs and convolutions become calls of
   tfaot's C kernels (``Target.matvec_kernel == "tfaot"``; a grouped
   convolution first one per group: ``grouped_conv``; a 3-D one a sum of
   2-D ones: ``conv3d``); with weights as
   globals, their packed weights become globals themselves.
3. ``weight_globals``: the remaining large constants become mutable globals
   (GPU targets and --weights=file): after the kernels' rewrite, which
   needs them as constants.
4. ``activations``: tanh and logistic written out as one exponential and
   one division (Target.expand_activations: Cortex-M), or looked up in a
   table (Target.activation_tables: int8 builds there, or --activations).
5. ``split_matvec_reductions``: with IREE's packed weights, shorter FMA
   chains (Target.pack_weights).

Returns the module and the Target as decided: when the kernels took every
matmul, nothing is left for IREE to pack.
"""
from __future__ import annotations

import re
from dataclasses import replace

from ..target import Target
from . import (activations, constant_concats, conv3d, dft, gpu_workarounds, grouped_conv,
               long_products, microkernel, patch_copies, pool_kernel, pooling,
               reduction_order, resize_kernel, transposed_conv, weight_globals)

#: Ops IREE's data tiling packs (Target.pack_weights).
_MATMUL_OP = re.compile(r"stablehlo\.(dot|dot_general|convolution)\b")

#: A constant boolean table (a causal attention mask): IREE's data tiling
#: packs it beside the product it masks and fails ("'linalg.pack' op
#: expected padding_value has 'i8' but got: 'i1'").
_BOOLEAN_TABLE = re.compile(
    r"stablehlo\.constant dense<(?:\[[^>]*|\"0x[0-9A-F]*\")> : tensor<(?:\d+x)+i1>", re.I)


def _kernel_kinds(target: Target) -> tuple[str, ...]:
    """The micro-kernels ``target`` takes (with ``matvec_kernel == "tfaot"``)."""
    kinds = target.kernel_kinds or microkernel.KINDS
    return kinds if target.conv_int8 else tuple(kind for kind in kinds if kind != "qconv")


def lower_for_target(mlir_text: str, name: str, target: Target) -> tuple[str, Target]:
    """``mlir_text`` with the rewrites ``target`` asks for, and the target as decided."""
    mlir_text, _ = patch_copies.copies_for_patch_filters(mlir_text)
    mlir_text, _ = transposed_conv.dilated_inputs_as_phases(mlir_text)
    mlir_text, _ = constant_concats.constants_added_to_concats(mlir_text)
    if target.is_gpu:
        mlir_text, _ = dft.expand_ffts(mlir_text, all_lengths=True)
        mlir_text, _ = gpu_workarounds.fence_row_reductions(mlir_text)
        mlir_text, _ = gpu_workarounds.integer_boolean_reductions(mlir_text)
    else:
        if pool_kernel.applies(target, _kernel_kinds(target)):
            mlir_text, _ = pool_kernel.pools_as_calls(mlir_text, name, target.weights_dtype)
        if resize_kernel.applies(target, _kernel_kinds(target)):
            mlir_text, _ = resize_kernel.resizes_as_calls(mlir_text, name,
                                                          target.weights_dtype)
        mlir_text, _ = pooling.unroll_small_pools(mlir_text)
        mlir_text, _ = reduction_order.sum_one_axis_at_a_time(mlir_text)
        if target.streams > 1 and target.weights_dtype != "int8":
            # (the int8 matmul keeps each stream equal to the one-stream library)
            mlir_text, _ = long_products.split_long_products(mlir_text)
    if target.matvec_kernel == "tfaot":
        mlir_text, _ = grouped_conv.groups_as_convs(mlir_text)
        mlir_text, _ = conv3d.convs_3d_as_2d(mlir_text)
        mlir_text, rewritten = microkernel.rewrite_matvecs(
            mlir_text, name, dtype=target.weights_dtype, kinds=_kernel_kinds(target),
            min_weights=target.kernel_min_weights,
            weights_as_globals=target.weights_as_globals,
            int8_layout=target.int8_layout if target.weights_dtype == "int8" else "lanes",
            int8_min=target.int8_min_weights, half_images=target.intermediates == "f16",
            half_dw_blocks=target.half_dw_blocks,
            # a whole inference (no state stored): its images are the big ones
            reuse_images="ml_program.global_store" not in mlir_text)
        if rewritten and not _MATMUL_OP.search(mlir_text):
            target = replace(target, weight_packing=False)  # nothing left to pack
        if target.weights_dtype == "int8":
            target = replace(target, int8_layers=microkernel.int8_calls(mlir_text))
    if target.activations is None and target.weights_dtype == "int8" and not any(
            microkernel.kernel_dtype(kind, "int8") == "int8"
            for kind in microkernel.kernel_symbols(mlir_text, name, "int8")):
        # no weight took int8, so the outputs are f32's: so are the activations
        target = replace(target, activations="exact")
    if target.weights_as_globals:
        mlir_text, _ = weight_globals.weights_to_globals(mlir_text)
    if target.activation_tables or target.expand_activations:
        mlir_text, expanded = activations.expand(mlir_text, tables=target.activation_tables)
        if target.activation_tables and not expanded:  # no tanh or logistic to look up
            target = replace(target, activations="exact")
    if target.pack_weights and _BOOLEAN_TABLE.search(mlir_text):
        target = replace(target, weight_packing=False)
    if target.pack_weights:
        # With packed weights each matvec is one serial FMA chain per output
        # tile; shorter chains overlap.
        from .mlir_import import split_matvec_reductions

        mlir_text, _ = split_matvec_reductions(mlir_text)
    return mlir_text, target
