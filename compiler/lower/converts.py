"""Conversions IREE 3.13's CPU code gets wrong, written so that it gets them right.

Float8 rounding (``float8_rounding``). IREE's code for ``stablehlo.convert``
from f32 to ``f8E4M3FN`` or ``f8E5M2`` (a software conversion on every
target) turns the values that should round up to the smallest normal
number into zero: for f8E4M3FN those in [7.5, 8) x 2^-9 (the largest
subnormal is 7 x 2^-9 and 2^-6 the smallest normal), for f8E5M2 those in
[3.5, 4) x 2^-16. The other values round to nearest even, as TensorFlow
and ml_dtypes round. A Keras model quantized with
``model.quantize("float8")`` rounds each Dense input to float8 over a
scale, so some of its values fall there: a GRU(64) -> Dense(64) ->
Dense(12) differed from TensorFlow by 0.022 (583 of 2400 values). Each
such conversion of an f32 value is given a value already on the float8
grid where it is not normal: ``x`` below the smallest normal in magnitude
is rounded to the nearest multiple of the subnormal step (in f32,
exactly: a multiplication by a power of two, round to nearest even, and
back), which the conversion then keeps (IREE converts the exact
subnormals and the smallest normal right).

Unsigned integers to floats (``unsigned_via_signed``). Where a
conversion of a ``ui8`` tensor to f32 feeds a ``dot_general`` directly,
IREE fuses it into the product and reads the bytes as signed: 200 became
-56 (a uint8 camera frame resized by two matrix products, resize.py, was
off by up to 256). Converted to a wider signed integer first (an
extension IREE keeps unsigned), then to the float, every value is right.
"""
from __future__ import annotations

from .legality import all_ops, new_op

#: element type -> (smallest normal, subnormal step), powers of two
FLOAT8 = {"f8E4M3FN": (2.0 ** -6, 2.0 ** -9), "f8E5M2": (2.0 ** -14, 2.0 ** -16)}


def float8_rounding(func_op) -> int:
    """Round the inputs of ``func_op``'s f32 -> float8 conversions as the
    module docstring says; returns how many."""
    from iree.compiler import ir

    count = 0
    for op in all_ops(func_op):
        if op.name != "stablehlo.convert":
            continue
        source = ir.RankedTensorType(op.operands[0].type)
        target = str(ir.RankedTensorType(op.results[0].type).element_type)
        if target in FLOAT8 and str(source.element_type) == "f32" and source.has_static_shape:
            op.operands[0] = _on_grid_below_normal(op, op.operands[0], *FLOAT8[target])
            count += 1
    return count


def _on_grid_below_normal(op, x, smallest_normal: float, step: float):
    """``select(|x| < smallest_normal, round_even(x / step) * step, x)``,
    inserted before ``op``."""
    from iree.compiler import ir

    with ir.InsertionPoint(op), op.location:
        f32 = x.type
        flags = ir.RankedTensorType.get(ir.RankedTensorType(f32).shape,
                                        ir.IntegerType.get_signless(1))

        def splat(value: float):
            attr = ir.DenseElementsAttr.get_splat(f32, ir.FloatAttr.get_f32(value))
            return new_op("stablehlo.constant", f32, [], {"value": attr})

        magnitude = new_op("stablehlo.abs", f32, [x])
        below = new_op("stablehlo.compare", flags, [magnitude, splat(smallest_normal)], {
            "comparison_direction": ir.Attribute.parse("#stablehlo<comparison_direction LT>")})
        steps = new_op("stablehlo.round_nearest_even", f32,
                        [new_op("stablehlo.multiply", f32, [x, splat(1.0 / step)])])
        on_grid = new_op("stablehlo.multiply", f32, [steps, splat(step)])
        return new_op("stablehlo.select", f32, [below, on_grid, x])


#: unsigned integer type -> the signed one that holds its every value
_WIDER_SIGNED = {"ui8": "i32", "ui16": "i32", "ui32": "i64"}


def unsigned_via_signed(func_op) -> int:
    """Make ``func_op``'s conversions of unsigned integers to floats go
    through a wider signed integer (module docstring); returns how many."""
    from iree.compiler import ir

    count = 0
    for op in all_ops(func_op):
        if op.name != "stablehlo.convert":
            continue
        source = ir.RankedTensorType(op.operands[0].type)
        target = ir.RankedTensorType(op.results[0].type)
        wider = _WIDER_SIGNED.get(str(source.element_type))
        if wider is None or not str(target.element_type).startswith(("f", "bf")):
            continue
        with ir.InsertionPoint(op), op.location:
            signed = ir.RankedTensorType.get(source.shape, ir.IntegerType.get_signless(
                int(wider[1:])))
            op.operands[0] = new_op("stablehlo.convert", signed, [op.operands[0]])
        count += 1
    return count
