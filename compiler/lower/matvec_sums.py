"""A sum of two constant-matrix matvecs as one matvec of the joined vector.

A recurrent cell adds the input's product and the state's: ``W . x + U . h``
(a Keras LSTM's gates, a SimpleRNN's). As two products, the step runs two
kernels, keeps two result vectors and adds them in a third pass. As one,
``[W U] . [x; h]``, the weights are read in one pass and the sum stays in
the kernel's registers. Measured: on a Cortex-M4 (bench/bench_mcu.py,
estimated cycles) an LSTM(64) step 122.0k -> 119.4k f32 and 98.1k -> 92.3k
int8, its RAM 5.4 -> 4.8 KB; a SimpleRNN(16) 4314 -> 4327 (IREE's kernel
for its 16 x 24 matrix, and the join a copy). On x86 (Zen 5, one stream,
bench/bench_streams.py): 2xLSTM(128) 5.6 -> 4.7 us, LSTM(512) 38.7 -> 36.5.
A GRU's recurrent product is scaled by its reset gate before the sum, so it
stays apart. The N-stream form ``[X H] . [W; U]`` is joined the same way,
so that each stream still equals the one-stream library. Not on GPUs
(Target.join_products): there the joined vector costs two driver copies
a step, more than the launch it saves (H100, LSTM(512): 42.8 -> 53.4 us).

The products are ``reshape(dot(W[N,K], v[K,1]))`` (the form
``use_matvec_layout`` writes) or ``reshape(dot(V[S,K], W[K,M]))`` (S
streams). Both must have constant f32 weights, the same result type and
feed nothing but the add. The sum's order changes (each output is one dot
product over K1 + K2 terms): differences of order 1e-7 relative.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


def merge_matvec_sums(func_op) -> int:
    """Rewrites each such add in ``func_op``; returns how many."""
    count = 0
    for op in list(func_op.regions[0].blocks[0].operations):
        if op.operation.name != "stablehlo.add":
            continue
        parts = [_product_of(value) for value in op.operands]
        if None in parts or parts[0].form != parts[1].form or \
                parts[0].dot.results[0].type != parts[1].dot.results[0].type:
            continue
        _join(op, *parts)
        count += 1
    return count


@dataclass
class _Product:
    """``reshape(dot(...))`` with constant f32 weights: ``form`` "column" is
    ``W[N,K] . v[K,1]`` (one stream), "rows" is ``v[S,K] . W[K,M]`` (S
    streams, lower/streams.py); K is the axis the two are joined along."""
    form: str
    weights: np.ndarray
    vector: object
    row: object
    dot: object
    constant: object


def _product_of(value) -> _Product | None:
    from iree.compiler import ir

    def owner(v, name):
        op = v.owner
        return op if isinstance(op, ir.OpView) and op.operation.name == name else None

    row = owner(value, "stablehlo.reshape")
    dot = row and owner(row.operands[0], "stablehlo.dot")
    if dot is None or len(list(value.uses)) != 1 or len(list(dot.results[0].uses)) != 1:
        return None
    for form, w_index in (("column", 0), ("rows", 1)):
        constant = owner(dot.operands[w_index], "stablehlo.constant")
        if constant is None:
            continue
        attr = ir.DenseElementsAttr(constant.attributes["value"])
        w_type = ir.RankedTensorType(attr.type)
        v_type = ir.RankedTensorType(dot.operands[1 - w_index].type)
        if attr.is_splat or w_type.rank != 2 or str(w_type.element_type) != "f32" or \
                v_type.rank != 2 or (form == "column" and v_type.shape[1] != 1):
            return None
        return _Product(form, np.array(attr), dot.operands[1 - w_index], row, dot, constant)
    return None


def _join(add, first: _Product, second: _Product) -> None:
    from iree.compiler import ir

    column = first.form == "column"
    # the vectors join along K: rows of a column, columns of the rows
    v_axis, w_axis = (0, 1) if column else (1, 0)
    v1, v2 = (ir.RankedTensorType(p.vector.type) for p in (first, second))
    v_shape = list(v1.shape)
    v_shape[v_axis] += v2.shape[v_axis]
    weights = np.ascontiguousarray(np.concatenate([first.weights, second.weights], w_axis))
    f32 = ir.F32Type.get()
    with ir.InsertionPoint(add), add.location:
        vector = ir.Operation.create(
            "stablehlo.concatenate", results=[ir.RankedTensorType.get(v_shape, f32)],
            operands=[first.vector, second.vector], attributes={"dimension": ir.IntegerAttr.get(
                ir.IntegerType.get_signless(64), v_axis)})
        constant = ir.Operation.create(
            "stablehlo.constant", results=[ir.RankedTensorType.get(weights.shape, f32)],
            attributes={"value": ir.DenseElementsAttr.get(weights)})
        operands = [constant.results[0], vector.results[0]]
        product = ir.Operation.create(
            "stablehlo.dot", results=[first.dot.results[0].type],
            operands=operands if column else operands[::-1])
        row = ir.Operation.create("stablehlo.reshape", results=[add.results[0].type],
                                  operands=[product.results[0]])
    add.results[0].replace_all_uses_with(row.results[0])
    add.erase()
    for part in (first, second):
        part.row.erase()
        part.dot.erase()
        if not list(part.constant.results[0].uses):
            part.constant.erase()
