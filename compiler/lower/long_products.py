"""The long matrix products of several streams, summed in chunks.

An N-stream step's matvecs are ``X[S,K] . W[K,M]`` (lower/streams.py),
which the convolution kernel computes as a 1x1 convolution over S
positions (microkernel.py), each output one running sum over all K
inputs. TensorFlow's speech_commands 'conv' model ends in a layer of
62,720 inputs: at 2 streams its logits came out 1.2e-5 from the exact
ones, against TensorFlow's 2.9e-6 and the one-stream library's 4.8e-6
(the matvec kernel keeps two sums per output), and verify failed. Here
such a product becomes products over chunks of at most ``CHUNK`` inputs,
added: each running sum is short, and the chunks' sums few. The weights
are the same bytes, cut into one constant per chunk; the chunks of X are
slices (a copy of S x K floats, against K x M weights read).

Only f32 products with constant weights of more than ``LONG_PRODUCT``
inputs, and S > 1 (one stream is a matvec), are split.
"""
from __future__ import annotations

import numpy as np

#: products over more inputs than this are split
LONG_PRODUCT = 8192
#: the most inputs a chunk sums
CHUNK = 4096


def split_long_products(mlir_text: str) -> tuple[str, int]:
    """``mlir_text`` with each long product of streams summed in chunks;
    and how many were split."""
    from .mlir_import import rewrite_planned

    return rewrite_planned(mlir_text, "stablehlo.dot", _plan, _split)


def _plan(op) -> tuple | None:
    """(X, W as an array) of a long ``X[S,K] . W[K,M]``, else None."""
    from iree.compiler import ir

    if op.operation.name != "stablehlo.dot" or len(op.operands) != 2:
        return None
    x, w = op.operands
    w_op = w.owner
    if not isinstance(w_op, ir.OpView) or w_op.operation.name != "stablehlo.constant":
        return None
    attr = ir.DenseElementsAttr(w_op.attributes["value"])
    x_type, w_type = ir.RankedTensorType(x.type), ir.RankedTensorType(attr.type)
    if attr.is_splat or x_type.rank != 2 or w_type.rank != 2 or \
            str(x_type.element_type) != "f32" or str(w_type.element_type) != "f32" or \
            not x_type.has_static_shape or x_type.shape[0] < 2 or \
            w_type.shape[0] <= LONG_PRODUCT:
        return None
    return x, np.array(attr, dtype=np.float32).reshape(w_type.shape)


def _split(op, x, weights: np.ndarray) -> None:
    from iree.compiler import ir

    rows, k = ir.RankedTensorType(x.type).shape
    m = weights.shape[1]
    f32 = ir.F32Type.get()
    chunks = -(-k // CHUNK)
    bounds = [k * i // chunks for i in range(chunks + 1)]  # near-equal chunks
    total = None
    with ir.InsertionPoint(op), op.location:
        for start, end in zip(bounds, bounds[1:]):
            part = ir.Operation.create(
                "stablehlo.slice", results=[ir.RankedTensorType.get([rows, end - start], f32)],
                operands=[x], attributes={
                    "start_indices": ir.DenseI64ArrayAttr.get([0, start]),
                    "limit_indices": ir.DenseI64ArrayAttr.get([rows, end]),
                    "strides": ir.DenseI64ArrayAttr.get([1, 1])})
            chunk = np.ascontiguousarray(weights[start:end])
            constant = ir.Operation.create(
                "stablehlo.constant", results=[ir.RankedTensorType.get([end - start, m], f32)],
                attributes={"value": ir.DenseElementsAttr.get(chunk)})
            product = ir.Operation.create(
                "stablehlo.dot", results=[op.results[0].type],
                operands=[part.results[0], constant.results[0]])
            total = product if total is None else ir.Operation.create(
                "stablehlo.add", results=[op.results[0].type],
                operands=[total.results[0], product.results[0]])
    old = op.operands[1].owner
    op.results[0].replace_all_uses_with(total.results[0])
    op.erase()
    if not list(old.results[0].uses):
        old.erase()
