"""The calls microkernel.rewrite_matvecs puts in place of an op: the
kernel's private function called on the op's input, with f32 or f16 images
(--intermediates=f16: converted where something else produces or reads
them)."""
from __future__ import annotations


def replace_with_call(op, callee: str, x, w_index: int, extra: tuple = ()):
    """``op`` becomes ``callee(x, *extra)``; its constant weights (operand
    ``w_index``) go when nothing else uses them. Returns the call."""
    from iree.compiler import ir

    with ir.InsertionPoint(op), op.location:
        made = call(callee, x, op.results[0].type, extra)
    retire(op, w_index, made.results[0])
    return made


def half_call(op, callee: str, x, w_index: int):
    """``op`` (an f32 convolution) becomes ``callee`` on f16 images: its
    input converted to f16, unless it is the f32 form of another kernel's
    f16 result (then that result itself: two kernels in a row pass halves),
    its result converted back to f32 for whatever uses it (IREE fuses such a
    conversion into the op that reads it; rewrite_matvecs drops those
    nothing reads). Returns the f32 result."""
    from iree.compiler import ir

    shape = ir.RankedTensorType(op.results[0].type).shape
    with ir.InsertionPoint(op), op.location:
        made = call(callee, _as_f16(x), ir.RankedTensorType.get(shape, ir.F16Type.get()))
        y = _convert(made.results[0], ir.F32Type.get())
    retire(op, w_index, y)
    return y


def call(callee: str, x, result_type, extra: tuple = ()):
    """``func.call @callee(x, *extra) -> result_type`` at the insertion point."""
    from iree.compiler import ir

    return ir.Operation.create("func.call", results=[result_type], operands=[x, *extra],
                               attributes={"callee": ir.FlatSymbolRefAttr.get(callee)})


def retire(op, w_index: int, value) -> None:
    """``op``'s uses take ``value``; ``op`` goes, and its constant weights
    (operand ``w_index``) when nothing else uses them."""
    w_op = op.operands[w_index].owner
    op.results[0].replace_all_uses_with(value)
    op.operation.erase()
    if not list(w_op.results[0].uses):
        w_op.operation.erase()


def erase_unused(op, erasable: tuple[str, ...]) -> None:
    """Erases ``op`` (unused), then those of the ops that made its operands
    (named in ``erasable``) that nothing else uses now: what a kernel call
    leaves of the ops it replaced (pool_kernel.py, resize_kernel.py)."""
    from iree.compiler import ir

    owners = [v.owner for v in op.operands]
    op.operation.erase()
    for owner in owners:
        if (isinstance(owner, ir.OpView) and owner.operation.name in erasable
                and not any(list(r.uses) for r in owner.results)):
            erase_unused(owner, erasable)


def _as_f16(x):
    """``x`` (f32) as f16: the operand of the conversion that made it, when
    it is one from f16, else a new conversion (at the insertion point)."""
    from iree.compiler import ir

    owner = x.owner
    if (isinstance(owner, ir.OpView) and owner.operation.name == "stablehlo.convert"
            and str(ir.RankedTensorType(owner.operands[0].type).element_type) == "f16"):
        return owner.operands[0]
    return _convert(x, ir.F16Type.get())


def _convert(value, element):
    """``stablehlo.convert`` of ``value`` to the element type ``element``."""
    from iree.compiler import ir

    shape = ir.RankedTensorType(value.type).shape
    return ir.Operation.create("stablehlo.convert",
                               results=[ir.RankedTensorType.get(shape, element)],
                               operands=[value]).results[0]
