"""An elementwise op with a constant operand whose result is only sliced,
sliced first: ``slice(v + c)`` becomes ``slice(v) + slice(c)``.

An LSTM's step adds its bias to the gates' product and then slices the sum
into its four gates. With several slices using it, IREE cannot fuse the
add into any of them, so the sum is a dispatch of its own: one more pass
over the 4 x units values, its result written out and read back, and one
more dispatch to run. Sliced first, each add has one user and fuses into
the gate arithmetic that reads it (one load and one add per value there).
Measured on a Cortex-M4 (bench/bench_mcu.py, estimated cycles): an
LSTM(64) step 112.2k -> 111.4k f32, 77.6k -> 76.3k int8, its context 4.8
-> 3.8 KB (no 4 x 64 sum between the kernel and the gates). The values
are the same, bit for bit: each output element is the same one operation
on the same two inputs.

``fold_constant_slices`` goes the other way for a constant that is only
sliced: each slice becomes a constant of its own. Keras' GRU with
``reset_after=False`` slices its recurrent kernel into the update and reset
gates' part and the candidate's; as slices, neither product had constant
weights, so neither took tfaot's kernel, and IREE's own packed the weights
on the stack at run time (over its 32 KB limit from 192 units: the build
failed).
"""
from __future__ import annotations

#: Elementwise ops of two operands that commute with slicing.
_ELEMENTWISE = ("stablehlo.add", "stablehlo.subtract", "stablehlo.multiply",
                "stablehlo.divide", "stablehlo.maximum", "stablehlo.minimum")


# Both rewrites first find every op to rewrite, then rewrite: the ops a
# rewrite erases are never visited again (a walk over the block's ops that
# erased the slices ahead of it crashed the process once, in IREE's Python
# bindings).


def slice_constant_operands(func_op) -> int:
    """Rewrites each such op in ``func_op`` (its slices get an op each);
    returns how many ops were rewritten."""
    planned = []
    for op in list(func_op.regions[0].blocks[0].operations):
        if op.operation.name not in _ELEMENTWISE or not _has_constant_operand(op):
            continue
        users = [use.owner for use in op.results[0].uses]
        if len(users) < 2 or any(user.operation.name != "stablehlo.slice" for user in users):
            continue  # one user: IREE fuses the op into it already
        planned.append((op, users))
    for op, users in planned:
        for user in users:
            _slice_first(op, user)
        op.operation.erase()
    return len(planned)


def fold_constant_slices(func_op) -> int:
    """Each f32 constant in ``func_op`` that only slices use becomes one
    constant per slice; returns how many slices were folded."""
    import numpy as np
    from iree.compiler import ir

    planned = []
    for op in list(func_op.regions[0].blocks[0].operations):
        if op.operation.name != "stablehlo.constant" or str(
                ir.RankedTensorType(op.results[0].type).element_type) != "f32":
            continue  # (a complex constant, tf.signal.dct's, has no DenseElementsAttr view)
        value = ir.DenseElementsAttr(op.attributes["value"])
        users = [use.owner for use in op.results[0].uses]
        if (value.is_splat or not users
                or any(u.operation.name != "stablehlo.slice" for u in users)):
            continue
        planned.append((op, value, users))
    count = 0
    for op, value, users in planned:
        array = np.array(value, dtype=np.float32).reshape(ir.RankedTensorType(value.type).shape)
        for user in users:
            starts, limits, strides = (list(ir.DenseI64ArrayAttr(user.attributes[name]))
                                       for name in ("start_indices", "limit_indices", "strides"))
            part = np.ascontiguousarray(array[tuple(slice(a, b, c) for a, b, c in
                                                    zip(starts, limits, strides))])
            with ir.InsertionPoint(user), user.location:
                folded = ir.Operation.create(
                    "stablehlo.constant", results=[user.results[0].type],
                    attributes={"value": ir.DenseElementsAttr.get(part)})
            user.results[0].replace_all_uses_with(folded.results[0])
            user.erase()
            count += 1
        op.operation.erase()
    return count


def _has_constant_operand(op) -> bool:
    from iree.compiler import ir

    return any(isinstance(v.owner, ir.OpView) and v.owner.operation.name == "stablehlo.constant"
               for v in op.operands)


def _slice_first(op, user) -> None:
    """``user`` (a slice of ``op``'s result) becomes ``op`` of the operands'
    slices."""
    from iree.compiler import ir

    attributes = {name: user.attributes[name]
                  for name in ("start_indices", "limit_indices", "strides")}
    result_type = user.results[0].type
    with ir.InsertionPoint(user), user.location:
        parts = []
        for operand in op.operands:
            operand_type = ir.RankedTensorType(operand.type)
            sliced_type = ir.RankedTensorType.get(ir.RankedTensorType(result_type).shape,
                                                  operand_type.element_type)
            parts.append(ir.Operation.create("stablehlo.slice", results=[sliced_type],
                                             operands=[operand], attributes=attributes))
        combined = ir.Operation.create(op.operation.name, results=[result_type],
                                       operands=[p.results[0] for p in parts])
    user.results[0].replace_all_uses_with(combined.results[0])
    user.erase()
