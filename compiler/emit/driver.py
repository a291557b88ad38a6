"""The emit stage's entry: VM program text -> ``VMProgram`` (C bodies + facts).

Passes, in order: parse; collect the module-level ops (``program``); emit
each ``vm.func`` (``function``, with the rules of ``vm_rules`` and
``hal_rules``); plan memory (``memory``).
"""
from __future__ import annotations

from ..errors import TfaotError
from .function import FunctionEmitter
from .memory import plan_memory
from .program import VMModule, VMProgram
from .vmir import symbol


def translate(vm_asm: str, prefix: str, host_sync: bool = False,
              external_rodata=None) -> VMProgram:
    """Translates the VM program text into C function bodies and program facts.

    ``host_sync``: the backend dispatches asynchronously (GPU targets); the
    code waits for the dispatches before touching buffer contents.
    ``external_rodata(symbol)``: read-only data the caller supplies at run
    time (--weights=file) instead of NAME.c."""
    from iree.compiler import ir

    context = ir.Context()
    try:
        parsed = ir.Module.parse(vm_asm, context)
    except Exception as e:  # MLIRError
        raise TfaotError(f"emit: cannot parse the VM program: {str(e).splitlines()[0]}") from e
    vm_modules = [op for op in parsed.body.operations if op.name == "vm.module"]
    if len(vm_modules) != 1:
        raise TfaotError(f"emit: expected one vm.module, found {len(vm_modules)}")
    module = VMModule(vm_modules[0], prefix, host_sync, external_rodata)
    with context:
        module.collect()
        plan_memory(module)  # (first: it may change the size an allocation asks for)
        for fn_op in module.func_ops():
            info = module.functions[symbol(fn_op.attributes["sym_name"])]
            info.body = FunctionEmitter(module, fn_op, info).emit()
    return module.prog
