"""Small pooling windows become elementwise ops on strided slices.

IREE's CPU code for ``stablehlo.reduce_window`` pooled the CNN's streamed
frames (2x37x28 -> 2x18x28, window 2) in about 3 µs, 5% of the streamed
step (bench/bench_streaming.py). A window of a few elements is the maximum
(or sum) of that many strided slices of the input: plain elementwise work,
which IREE fuses with the ops around it (the ReLU before, the copy into the
ring buffer after).

Only windows of at most ``MAX_WINDOW`` elements, without padding or
dilation, whose body is one ``maximum`` (init -inf) or ``add`` (init 0)
qualify: max and average pooling as TensorFlow imports them (average
pooling divides the sum afterwards). The result is the same up to the order
of additions in a sum.
"""
from __future__ import annotations

import itertools

import numpy as np

#: Pooling windows with more elements stay one reduce_window.
MAX_WINDOW = 16
#: The body ops taken, with the init value that changes no result.
_NEUTRAL = {"stablehlo.maximum": float("-inf"), "stablehlo.add": 0.0}


def unroll_small_pools(mlir_text: str) -> tuple[str, int]:
    """Rewrites qualifying ``stablehlo.reduce_window`` ops; returns the text
    and how many were rewritten."""
    from .mlir_import import rewrite_each_op

    def rewrite(op) -> bool:
        plan = _small_pool(op)
        if plan is not None:
            _replace(op, *plan)
        return plan is not None

    return rewrite_each_op(mlir_text, "stablehlo.reduce_window", rewrite)


def _small_pool(op) -> tuple[str, list[int], list[int]] | None:
    """(body op name, window, strides) of a reduce_window this stage takes."""
    from iree.compiler import ir

    if op.operation.name != "stablehlo.reduce_window" or len(op.operands) != 2:
        return None
    attrs = {a: op.attributes[a] for a in op.attributes}
    window = list(ir.DenseI64ArrayAttr(attrs["window_dimensions"]))
    strides = list(ir.DenseI64ArrayAttr(attrs["window_strides"])) if "window_strides" in attrs \
        else [1] * len(window)
    for name in ("base_dilations", "window_dilations"):
        if name in attrs and any(v != 1 for v in ir.DenseI64ArrayAttr(attrs[name])):
            return None
    if "padding" in attrs and "dense<0>" not in str(attrs["padding"]):
        return None
    size = 1
    for w in window:
        size *= w
    block = op.operation.regions[0].blocks[0]
    body = list(block.operations)
    if (size > MAX_WINDOW or len(body) != 2 or body[0].operation.name not in _NEUTRAL
            or set(body[0].operands) != set(block.arguments)
            or str(ir.RankedTensorType(op.operands[0].type).element_type) != "f32"):
        return None
    kind = body[0].operation.name
    init = op.operands[1].owner
    if not isinstance(init, ir.OpView) or init.operation.name != "stablehlo.constant":
        return None
    values = np.array(ir.DenseElementsAttr(init.attributes["value"]), dtype=np.float32)
    if values.size != 1 or values.item() != _NEUTRAL[kind]:
        return None
    return kind, window, strides


def _replace(op, kind: str, window: list[int], strides: list[int]) -> None:
    """``op`` becomes ``kind`` folded over one strided slice per window offset."""
    from iree.compiler import ir

    x = op.operands[0]
    out_type = ir.RankedTensorType(op.results[0].type)
    out_shape = list(out_type.shape)
    with ir.InsertionPoint(op), op.location:
        result = None
        for offset in itertools.product(*(range(w) for w in window)):
            limits = [o + (n - 1) * s + 1 for o, n, s in zip(offset, out_shape, strides)]
            piece = ir.Operation.create(
                "stablehlo.slice", results=[out_type], operands=[x],
                attributes={"start_indices": ir.DenseI64ArrayAttr.get(list(offset)),
                            "limit_indices": ir.DenseI64ArrayAttr.get(limits),
                            "strides": ir.DenseI64ArrayAttr.get(strides)}).results[0]
            result = piece if result is None else ir.Operation.create(
                kind, results=[out_type], operands=[result, piece]).results[0]
    op.results[0].replace_all_uses_with(result)
    op.operation.erase()
