"""Weights as mutable globals: the form GPU kernels need (gpu-notes 2).

In the inline-dynamic execution model, large constants reach GPU kernels as
null bindings (the dropped-constant bug, iree-notes 1.4), and the CPU
workaround (inlining constants into the kernels) does not work on GPUs
(SPIR-V gets per-invocation arrays; ptxas refuses over 64 KB of constants).
What works: every large constant becomes

    ml_program.global private mutable @tfaot_weightN(<value>)
    %w = ml_program.global_load @tfaot_weightN

plus an exported setter ``func @tfaot_set_weightN(%v) { global_store }``.
The setter keeps IREE from folding the never-stored global back into a
constant; with it, IREE fuses the weights into one device buffer that
``__init`` fills from read-only data, bound whole by the kernels.

The setters are only needed until the VM program exists: ``drop_setters``
removes them from it, so they are neither translated to C nor counted in
the memory plan.
"""
from __future__ import annotations

import math
import re

#: Constants up to this many bytes stay constants: iree-compile inlines them
#: into the kernels (its default --iree-flow-inline-constants-max-byte-length).
INLINE_MAX_BYTES = 256

WEIGHT_PREFIX = "tfaot_weight"
SETTER_PREFIX = "tfaot_set_weight"

#: IREE names the read-only data that __init copies the globals' initial
#: values from "_const" (then "_const_0", ...): with weights as globals, that
#: is the weights (--weights=file moves it to the NAME.weights sidecar).
_CONSTANT_POOL = re.compile(r"_const(_\d+)?")


def is_weights_rodata(symbol: str) -> bool:
    """True for the VM program's read-only data that holds the weights."""
    return _CONSTANT_POOL.fullmatch(symbol) is not None


def weights_to_globals(mlir_text: str) -> tuple[str, int]:
    """Turns every non-splat constant over INLINE_MAX_BYTES into a mutable global
    with a setter; returns the new module text and how many were turned."""
    from iree.compiler import ir

    with ir.Context():
        module = ir.Module.parse(mlir_text)
        constants = [op for op in _walk(module.operation) if _is_weight(op, ir)]
        first = module.body.operations[0]
        for i, const in enumerate(constants):
            _hoist(module, first, const, f"{WEIGHT_PREFIX}{i}", f"{SETTER_PREFIX}{i}", ir)
        return (str(module) if constants else mlir_text), len(constants)


def drop_setters(vm_asm: str) -> str:
    """Removes the weight setters' functions and exports from the VM program."""
    from iree.compiler import ir

    with ir.Context():
        module = ir.Module.parse(vm_asm)
        dropped = False
        for vm_module in module.body.operations:
            for op in list(vm_module.regions[0].blocks[0].operations):
                if op.name in ("vm.func", "vm.export") and _names_setter(op, ir):
                    op.erase()
                    dropped = True
        return str(module) if dropped else vm_asm


def _names_setter(op, ir) -> bool:
    """A setter's vm.func (by its name) or vm.export (by the function it exports)."""
    if op.name == "vm.func":
        name = ir.StringAttr(op.attributes["sym_name"]).value
    else:
        name = ir.FlatSymbolRefAttr(op.attributes["function_ref"]).value
    return name.startswith(SETTER_PREFIX)


def _walk(op):
    for region in op.regions:
        for block in region.blocks:
            for child in block.operations:
                yield child
                yield from _walk(child.operation)


def _is_weight(op, ir) -> bool:
    if op.operation.name != "stablehlo.constant":
        return False
    value = ir.DenseElementsAttr(op.attributes["value"])
    if value.is_splat:
        return False
    tensor = ir.RankedTensorType(value.type)
    return math.prod(tensor.shape) * tensor.element_type.width // 8 > INLINE_MAX_BYTES


def _hoist(module, first, const, name: str, setter: str, ir) -> None:
    """Replaces one constant by a load of a new global; adds the global's setter."""
    tensor = const.results[0].type
    loc = ir.Location.unknown()
    with ir.InsertionPoint(first), loc:
        ir.Operation.create("ml_program.global", attributes={
            "sym_name": ir.StringAttr.get(name), "type": ir.TypeAttr.get(tensor),
            "value": const.attributes["value"], "is_mutable": ir.UnitAttr.get(),
            "sym_visibility": ir.StringAttr.get("private")})
    with ir.InsertionPoint(const), const.location:
        load = ir.Operation.create("ml_program.global_load", results=[tensor],
                                   attributes={"global": ir.FlatSymbolRefAttr.get(name)})
    const.results[0].replace_all_uses_with(load.results[0])
    const.operation.erase()
    with ir.InsertionPoint(module.body), loc:
        func = ir.Operation.create("func.func", regions=1, attributes={
            "sym_name": ir.StringAttr.get(setter),
            "function_type": ir.TypeAttr.get(ir.FunctionType.get([tensor], []))})
        entry = func.regions[0].blocks.append(tensor)
    with ir.InsertionPoint(entry), loc:
        ir.Operation.create("ml_program.global_store", operands=[entry.arguments[0]],
                            attributes={"global": ir.FlatSymbolRefAttr.get(name)})
        ir.Operation.create("func.return")
