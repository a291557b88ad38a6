"""Emit stage: IREE VM program (vm-asm text) -> C source of the host program.

Modelled on MLIR's TranslateToCpp: one ``FunctionEmitter`` per ``vm.func``
owns a table from SSA values to C expressions, and every VM op has one small
rule, found in a table grouped by dialect (``VM_RULES`` for ``vm.*`` ops,
``HAL_CALL_RULES`` for the imported ``hal_inline.*`` / ``hal_loader.*``
functions). An op without a rule is a ``TfaotError`` naming the op and its
location. The module is read with the ``iree.compiler.ir`` bindings, never
with regexes.

Modules, in pass order:

* ``program``   -- the data model (``VMProgram``, ``FunctionInfo``, ``Global``,
  ``Rodata``) and the collection of module-level ops;
* ``function``  -- the function emitter (name table, output lines, dispatch);
* ``vm_rules``, ``hal_rules`` -- the rule tables;
* ``direct_step`` -- @step as straight C over fixed buffers, where it can be
  (planned before the memory plan, emitted instead of the translated @step);
* ``memory``    -- the memory-planning pass (arena size classes, slots);
* ``driver``    -- ``translate``, the stage's entry;
* ``c_types``, ``vmir`` -- C types/names, and reading VM IR (attributes,
  constant operands, loop detection).

Every VM global is a field of the model context, so contexts are
independent. The file-level layout of the C source comes from
``codegen_templates/`` (``model.c.j2``, ``model.h.j2``); this package renders
the function bodies and the facts those templates need (globals, rodata,
memory plan).
"""
from __future__ import annotations

from .c_types import ELEMENT_TYPES, c_ident, ctype_of, is_ref, ops_template
from .driver import translate
from .function import FunctionEmitter
from .hal_rules import HAL_CALL_RULES
from .memory import plan_memory
from .program import (
    FunctionInfo,
    Global,
    Rodata,
    VMModule,
    VMProgram,
    function_signature,
    rodata_bytes,
)
from .vm_rules import BINARY_OPS, SELECT_OPS, UNARY_OPS, VM_RULES
from .vmir import blocks_in_cycles

__all__ = [
    "BINARY_OPS", "ELEMENT_TYPES", "FunctionEmitter", "FunctionInfo", "Global",
    "HAL_CALL_RULES", "Rodata", "SELECT_OPS", "UNARY_OPS", "VMModule", "VMProgram", "VM_RULES",
    "blocks_in_cycles", "c_ident", "ctype_of", "function_signature", "is_ref", "ops_template",
    "plan_memory", "rodata_bytes", "translate",
]
