"""``stablehlo.einsum`` as the ``dot_general`` it is.

TensorFlow's converter leaves ``tf.einsum`` as ``stablehlo.einsum``, which
IREE lowers itself, but which none of tfaot's rewrites read: a
``tf.einsum("btf,fg->btg", x, w)`` in a SavedModel kept its weights with
IREE's kernels (in f32 under --weights-dtype=int8, and not in the
matvec layout). Written as a ``dot_general`` (and a transpose when the
output's order is not dot_general's: batch, then the left's free axes,
then the right's), the products become the vector-matrix ``dot`` the
micro-kernels take (mlir_import.dot_generals_as_dots).

Only two-operand einsums whose every label is a batch axis (in both and in
the output), a contracted one (in both, not in the output) or a free one
(in one operand and the output) are rewritten; a diagonal, a sum over an
axis of one operand or an ellipsis stay as they are.
"""
from __future__ import annotations

import re

_CONFIG = re.compile(r"^([a-zA-Z]*),([a-zA-Z]*)->([a-zA-Z]*)$")


def einsums_as_dot_generals(func_op) -> int:
    """Rewrite the einsums of ``func_op`` that are products; returns how many."""
    count = 0
    for op in list(func_op.regions[0].blocks[0].operations):
        if op.operation.name != "stablehlo.einsum" or len(op.operands) != 2:
            continue
        plan = dot_plan(str(op.attributes["einsum_config"]).strip('"'))
        if plan is not None:
            _rewrite(op, *plan)
            count += 1
    return count


def dot_plan(config: str):
    """For an einsum ``config`` that is a product: the dot_general's
    (lhs batch, rhs batch, lhs contracting, rhs contracting) axes, the
    permutation from its result to the output (None: none needed) and the
    labels of its result's axes; else None."""
    match = _CONFIG.match(config.replace(" ", ""))
    if match is None:
        return None
    lhs, rhs, out = match.groups()
    if any(len(set(labels)) != len(labels) for labels in (lhs, rhs, out)):
        return None  # a diagonal, or a repeated output axis
    if any(label not in lhs + rhs for label in out):
        return None
    batch = [label for label in lhs if label in rhs and label in out]
    contracted = [label for label in lhs if label in rhs and label not in out]
    lhs_free = [label for label in lhs if label not in rhs]
    rhs_free = [label for label in rhs if label not in lhs]
    if any(label not in out for label in lhs_free + rhs_free):
        return None  # a sum over an axis of one operand
    result = batch + lhs_free + rhs_free
    permutation = [result.index(label) for label in out]
    return ([lhs.index(a) for a in batch], [rhs.index(a) for a in batch],
            [lhs.index(a) for a in contracted], [rhs.index(a) for a in contracted],
            None if permutation == sorted(permutation) else permutation, result)


def _rewrite(op, lhs_batch, rhs_batch, lhs_contract, rhs_contract, permutation, result) -> None:
    from iree.compiler import ir

    out_type = ir.RankedTensorType(op.results[0].type)
    out_labels = [result[i] for i in permutation] if permutation else result
    sizes = dict(zip(out_labels, out_type.shape))
    with ir.InsertionPoint(op), op.location:
        dot_type = ir.RankedTensorType.get([sizes[label] for label in result],
                                           out_type.element_type)
        numbers = ir.Attribute.parse(
            f"#stablehlo.dot<lhs_batching_dimensions = {lhs_batch}, "
            f"rhs_batching_dimensions = {rhs_batch}, "
            f"lhs_contracting_dimensions = {lhs_contract}, "
            f"rhs_contracting_dimensions = {rhs_contract}>")
        value = ir.Operation.create(
            "stablehlo.dot_general", results=[dot_type if permutation else out_type],
            operands=list(op.operands),
            attributes={"dot_dimension_numbers": numbers}).results[0]
        if permutation:
            value = ir.Operation.create(
                "stablehlo.transpose", results=[out_type], operands=[value],
                attributes={"permutation": ir.DenseI64ArrayAttr.get(permutation)}).results[0]
    op.results[0].replace_all_uses_with(value)
    op.operation.erase()
