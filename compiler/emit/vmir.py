"""Reading the VM IR: op locations, attributes, constant operands, loops.

Shared by the function emitter, its rules and the memory planner; nothing
here writes C. The module is read with the ``iree.compiler.ir`` bindings,
never with regexes (``location`` only shortens the printed location).
"""
from __future__ import annotations

import re


def location(op) -> str:
    """A short location of an op, without file paths (they may be temp dirs)."""
    text = str(op.location)
    m = re.search(r'"([^"]*)":(\d+):(\d+)', text)
    if m:
        return f"vm-asm line {m.group(2)}"
    return text


def optional_attr(op, name: str):
    """The attribute ``name`` of ``op``, or None."""
    return op.attributes[name] if name in op.attributes else None


def symbol(attr) -> str:
    """Name of a FlatSymbolRefAttr / StringAttr without '@' or quotes."""
    text = str(attr)
    if text.startswith("@"):
        text = text[1:]
    if text.startswith('"') and text.endswith('"'):
        text = text[1:-1]
    return text


def int_attr(attr) -> int:
    from iree.compiler import ir

    return ir.IntegerAttr(attr).value


# ---------------------------------------------------------------------------
# Operands defined by constants


def defining_op(value):
    """The op that defines ``value``, or None for a block argument."""
    owner = value.owner
    return owner if hasattr(owner, "name") and hasattr(owner, "operands") else None


def const_int(value) -> int | None:
    """The value of an integer constant operand, or None if it is not one."""
    op = defining_op(value)
    if op is None:
        return None
    if op.name in ("vm.const.i32", "vm.const.i64"):
        return int_attr(op.attributes["value"])
    if op.name in ("vm.const.i32.zero", "vm.const.i64.zero"):
        return 0
    return None


def rodata_sym(value) -> str | None:
    """The ``vm.rodata`` symbol an operand refers to, or None."""
    op = defining_op(value)
    if op is not None and op.name == "vm.const.ref.rodata":
        return symbol(op.attributes["rodata"])
    return None


def is_null_const(value) -> bool:
    op = defining_op(value)
    return op is not None and op.name == "vm.const.ref.zero"


# ---------------------------------------------------------------------------
# Control flow


def blocks_in_cycles(blocks: list) -> set[int]:
    """Indices of the blocks of a ``vm.func`` that lie on a cycle (loop bodies)."""
    index = {b: i for i, b in enumerate(blocks)}
    succ: dict[int, list[int]] = {}
    for i, b in enumerate(blocks):
        ops = list(b.operations)
        term = ops[-1] if ops else None
        succ[i] = [index[s] for s in term.successors] if term else []
    in_cycle = set()
    for start in succ:
        stack, seen = list(succ[start]), set()
        while stack:
            n = stack.pop()
            if n == start:
                in_cycle.add(start)
                break
            if n in seen:
                continue
            seen.add(n)
            stack.extend(succ[n])
    return in_cycle
