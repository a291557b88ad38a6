"""The emit stage's entry: VM program text -> ``VMProgram`` (C bodies + facts).

Passes, in order: parse; collect the module-level ops (``program``); plan
what the state functions reuse of the old state (``state_reuse``); plan
the direct step (``direct_step``: @step as straight C, where it can be);
plan memory (``memory``); emit each ``vm.func`` (``function``, with the
rules of ``vm_rules`` and ``hal_rules``; @step as the direct step where
planned).
"""
from __future__ import annotations

from ..errors import TfaotError
from .direct_step import emit_direct_step, plan_direct_step
from .dispatch_source import source_files
from .function import FunctionEmitter
from .memory import plan_memory
from .program import VMModule, VMProgram
from .state_reuse import plan_state_reuse
from .vmir import symbol


def translate(vm_asm: str, prefix: str, host_sync: bool = False,
              external_rodata=None, executable_sources=None) -> VMProgram:
    """Translates the VM program text into C function bodies and program facts.

    ``host_sync``: the backend dispatches asynchronously (GPU targets); the
    code waits for the dispatches before touching buffer contents.
    ``external_rodata(symbol)``: read-only data the caller supplies at run
    time (--weights=file) instead of NAME.c. ``executable_sources``: the
    folder of the executables' dumped sources (dispatch_source.py), or None."""
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
    module.executable_sources = source_files(executable_sources)
    with context:
        module.collect()
        step = module.prog.step
        ops = {symbol(op.attributes["sym_name"]): op for op in module.func_ops()}
        module.state_reuse = plan_state_reuse(module, ops, None)
        if step is not None:
            module.direct_plan = plan_direct_step(module, ops[step.vm_name], step)
        if module.direct_plan is not None and module.direct_plan.in_place is not None:
            # (a step that keeps the old buffer lets @reset take its block
            # in more cases: emit/state_reuse.py)
            module.state_reuse = plan_state_reuse(module, ops, module.direct_plan.in_place)
        get_state = module.prog.get_state
        module.prog.get_state_aliases = (get_state is not None
                                         and get_state.vm_name in module.state_reuse.views)
        plan_memory(module)  # (before emitting: it may change the size an allocation asks for)
        for vm_name, fn_op in ops.items():
            info = module.functions[vm_name]
            if info is step and module.direct_plan is not None:
                info.direct = emit_direct_step(module, fn_op, info, module.direct_plan)
            else:
                info.body = FunctionEmitter(module, fn_op, info).emit()
    return module.prog
