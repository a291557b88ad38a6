"""The function emitter: one ``vm.func`` -> the body of one C function.

Modelled on MLIR's TranslateToCpp: the emitter owns a table from SSA values
to C expressions and the output lines, and sends every op to its rule in
``VM_RULES``. An op without a rule is a ``TfaotError`` naming the op and its
location.

What the generated function relies on (runtime_shim/tfrt.h): ref-typed
locals own one reference: results of imports and global loads are +1,
assigning a ref local releases its old value, ``vm.discard.refs`` releases,
and all ref locals are released when the function exits. Two exceptions
(``borrowed_refs``), which save a count taken and given back per step: a
ref argument, which the caller holds for the call, and the load of a
global the function never stores (nor any function it calls), which the
global holds, are borrowed where the local is assigned once and outside
loops. And a retain of a local right before that local's release (the
VM's copy of a ref, then the discard of the original) is a move.
"""
from __future__ import annotations

import re
from typing import Any

from ..errors import DroppedConstant, TfaotError
from .c_types import c_ident, ctype_of, is_ref, ops_template
from .program import FunctionInfo, VMModule
from .vm_rules import VM_RULES
from .vmir import blocks_in_cycles, location


class FunctionEmitter:
    """Emits one ``vm.func`` as a C function over the model context."""

    def __init__(self, module: VMModule, func_op, info: FunctionInfo):
        self.module = module
        self.op = func_op
        self.info = info
        self.names: dict[Any, str] = {}      # SSA value -> C expression
        self.decls: dict[str, str] = {}      # C local -> C type (declaration order)
        self.ref_locals: list[str] = []
        self.lines: list[str] = []
        self.blocks = list(func_op.regions[0].blocks)
        self.block_index = {b: i for i, b in enumerate(self.blocks)}
        self.loop_blocks = blocks_in_cycles(self.blocks)
        self.uses: dict[str, int] = {}
        self.global_loads: dict[str, str] = {}  # ref local -> the global it loads
        self.stored_globals: set[str] = set()
        self.calls_functions = False
        # allocation site -> the state global whose block it takes (@reset,
        # @set_state), and @get_state's views of the state itself, or None
        # (emit/state_reuse.py, planned once for the module)
        self.replaced = module.state_reuse.replaced.get(info.vm_name, {})
        self.state_views = module.state_reuse.views.get(info.vm_name)
        self._tmp = 0
        self._cur_block = 0
        self._cur_op = 0

    # -- errors ----------------------------------------------------------------
    def error(self, op, message: str) -> TfaotError:
        return TfaotError(
            f"emit: {message} (op '{op.name}' in function @{self.info.vm_name}, {location(op)})")

    def null_constant_error(self, op, what: str) -> DroppedConstant:
        return DroppedConstant(
            f"emit: {what} in @{self.info.vm_name} is a null buffer ({location(op)}). This is "
            "iree-compile's inline-dynamic dropped-constant bug (docs/notes/iree-notes.md, 1.4): "
            "a constant that needs its own buffer (e.g. storing a plain constant into a state "
            "global, or returning a constant) is lost. Route the constant through a "
            "computation, e.g. 'state = state * 0 + constant', or give the global that initial "
            "value instead.",
            where=f"{what} in @{self.info.vm_name}")

    # -- name table --------------------------------------------------------------
    def declare(self, value) -> str:
        """A new C local for ``value``."""
        type_str = str(value.type)
        raw = value.get_name() if hasattr(value, "get_name") else f"v{len(self.decls)}"
        name = "v_" + c_ident(raw.lstrip("%"))
        base, n = name, 1
        while name in self.decls:
            name = f"{base}_{n}"
            n += 1
        self.decls[name] = ctype_of(type_str, f" (value {raw} in @{self.info.vm_name})")
        if is_ref(type_str):
            self.ref_locals.append(name)
        self.names[value] = name
        return name

    def val(self, value) -> str:
        """The C expression of a used value."""
        try:
            expr = self.names[value]
        except KeyError:
            raise TfaotError(f"emit: value {value.get_name()} used before definition "
                             f"in @{self.info.vm_name}") from None
        self.uses[expr] = self.uses.get(expr, 0) + 1
        rd = self.module.rodata_by_expr.get(expr)
        if rd is not None:
            rd.used = True
        return expr

    def result(self, op, i: int = 0) -> str:
        return self.declare(op.results[i])

    def temp_name(self) -> str:
        """A fresh name for a block-local C temporary."""
        tmp = f"t{self._tmp}_"
        self._tmp += 1
        return tmp

    # -- output ------------------------------------------------------------------
    def line(self, text: str) -> None:
        self.lines.append("  " + text)

    def block(self, text: str, indent: str = "  ") -> None:
        for ln in str(text).splitlines():
            if ln.strip():
                self.lines.append(indent + ln)

    def planned_block(self) -> int | None:
        """The block size the memory plan gives the current allocation
        (emit/memory.py), or None: a block of its own size."""
        return self.module.alloc_sizes.get((self.info.vm_name, self._cur_block, self._cur_op))

    def pool_of(self, size: int | None) -> int | None:
        """The arena pool (emit/memory.py) whose blocks fit an allocation of
        ``size`` bytes best, or None (no constant size, or no such pool)."""
        if size is None:
            return None
        fits = [i for i, (block, _) in enumerate(self.module.prog.pools) if block >= size]
        return fits[0] if fits else None

    def note_global_load(self, local: str, global_field: str) -> None:
        """``local`` is a load of ``global_field`` (outside loops: a candidate
        for borrowing, borrowed_refs)."""
        if self._cur_block not in self.loop_blocks:
            self.global_loads[local] = global_field

    def assign_ref(self, op, target: str) -> None:
        """Before redefining a ref local inside a loop, drop its old value."""
        if self._cur_block in self.loop_blocks:
            self.line(f"tfrt_release(rt, {target}); {target} = NULL;")

    # -- driver ------------------------------------------------------------------
    def emit(self) -> str:
        entry = self.blocks[0]
        params = []
        for arg in entry.arguments:
            name = self.declare(arg)
            params.append((name, str(arg.type)))
        # Declare every block argument of the other blocks up front.
        for b in self.blocks[1:]:
            for arg in b.arguments:
                self.declare(arg)
        for bi, block in enumerate(self.blocks):
            self._cur_block = bi
            if bi > 0:
                self.lines.append(f"bb{bi}:")
            for oi, op in enumerate(block.operations):
                self._cur_op = oi
                self.emit_op(op)
        unused = [n for n in self.decls if n not in self.ref_locals and not self.uses.get(n)]
        param_refs = [n for n, t in params if is_ref(t)]
        borrowed = self.borrowed_refs(param_refs)
        lines = _with_borrowed_refs(self.lines, borrowed, self.global_loads)
        owned = [n for n in self.ref_locals if n not in borrowed]
        lines = _with_direct_return(lines, owned, self.module.host_sync)
        # the shared exit's label, where something jumps to it (a function of
        # no op that can fail, e.g. a stateless model's @reset, returns
        # directly, and an unused label warns)
        exit_used = any("goto done" in line or "TFRT_TRY(" in line for line in lines)
        return ops_template().function_body(
            list(self.decls.items()), [(n, is_ref(t), n in borrowed) for n, t in params],
            [is_ref(t) for t in self.info.result_types], lines, unused, owned,
            self.module.host_sync, exit_used)

    def borrowed_refs(self, param_refs: list[str]) -> set[str]:
        """The ref locals that need no reference of their own (module
        docstring): ref arguments never assigned in the body, and loads of
        a global this function does not store (and calls no function that
        might) assigned only there."""
        assigned: dict[str, int] = {}
        for line in self.lines:
            for name in _ASSIGNED.findall(line):
                assigned[name] = assigned.get(name, 0) + 1
        borrowed = {n for n in param_refs if not assigned.get(n)}
        if not self.calls_functions:
            borrowed |= {n for n, g in self.global_loads.items()
                         if g not in self.stored_globals and assigned.get(n) == 1}
        return borrowed

    def emit_op(self, op) -> None:
        name = op.name
        self.module.ops_used[name] = self.module.ops_used.get(name, 0) + 1
        rule = VM_RULES.get(name)
        if self.module.host_sync and name == "vm.return":
            # Asynchronous backends: the caller reads the results.
            self.line("TFRT_TRY(tfrt_backend_sync(rt));")
        elif self.module.host_sync and _touches_buffer_contents(name):
            # The dispatches issued so far first, where the host touches the
            # bytes itself (Vulkan); CUDA queues the op after them.
            self.line("TFRT_TRY(tfrt_backend_before_buffer_op(rt));")
        if rule is None:
            raise self.error(op, f"no C emit rule for VM op '{name}'; tfaot supports the VM "
                             "subset listed in docs/notes/iree-notes.md section 1.2")
        rule(self, op)


#: A C local assigned a value (not the NULL a release leaves), at the start
#: of a statement.
_ASSIGNED = re.compile(r"(?:^|[;{]\s*)\s*(v_\w+) = (?!NULL;)")
#: A ref local's release as vm.discard.refs (and a loop's reassignment) emit it.
_RELEASE = re.compile(r"^(\s*)tfrt_release\(rt, (v_\w+)\); (v_\w+) = NULL;$")
_RETAIN = re.compile(r"^(\s*)(v_\w+) = tfrt_retain\((v_\w+)\);$")
_RETAIN_GLOBAL = re.compile(r"^(\s*)(v_\w+) = tfrt_retain\(ctx->g\.(\w+)\);$")
#: A return's result line: a ref local retained into it, or another value.
_RESULT = re.compile(r"^(\s*)(\*result\d+) = (?:tfrt_retain\((v_\w+)\)|.*);$")
#: What sets a local on the path: ``v = NULL`` (after a release or a move),
#: or another value (an assignment, or ``&v`` handed to a call that fills it).
_SET_NULL = re.compile(r"(?:^|[;{]\s*)\s*(v_\w+) = NULL;")
_SET_VALUE = re.compile(r"(?:(?:^|[;{]\s*)\s*(v_\w+) = (?!NULL;))|&(v_\w+)\b")


def _with_borrowed_refs(lines: list[str], borrowed: set[str],
                        global_loads: dict[str, str]) -> list[str]:
    """``lines`` with the borrowed locals taking no reference (their global
    load a plain read, their release a plain NULL), and each retain of an
    owned local right before its release a move, as is a result's retain
    right before the exit (``goto done``), which releases the local, where
    no other result of that return is the same local."""
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        results = _return_moves(lines, i, borrowed)
        if results:
            out += results
            i += len(results)
            continue
        load = _RETAIN_GLOBAL.match(line)
        release = _RELEASE.match(line)
        retain = _RETAIN.match(line)
        after = _RELEASE.match(lines[i + 1]) if i + 1 < len(lines) else None
        if load and load[2] in borrowed and global_loads.get(load[2]) == load[3]:
            out.append(f"{load[1]}{load[2]} = ctx->g.{load[3]};  /* borrowed */")
        elif release and release[2] == release[3] and release[2] in borrowed:
            out.append(f"{release[1]}{release[2]} = NULL;")
        elif (retain and after and after[2] == after[3] == retain[3]
              and retain[3] not in borrowed):
            out.append(f"{retain[1]}{retain[2]} = {retain[3]}; {retain[3]} = NULL;  /* moved */")
            i += 1
        else:
            out.append(line)
        i += 1
    return out


def _with_direct_return(lines: list[str], owned: list[str], host_sync: bool) -> list[str]:
    """A function of one block whose one return ends it: that return releases
    only the locals that may hold a reference there and returns, where the
    shared exit (``done:``, for the failures) releases every local, most of
    them NULL by then (a SimpleRNN(16) step: 5 of 10)."""
    if host_sync or any(ln.startswith("bb") or "goto bb" in ln for ln in lines):
        return lines
    exits = [i for i, ln in enumerate(lines) if ln.strip() == "goto done;"]
    if exits != [len(lines) - 1]:
        return lines
    holding: set[str] = set()
    for line in lines[:-1]:
        events = sorted([(m.start(), m[1], False) for m in _SET_NULL.finditer(line)]
                        + [(m.start(), m[1] or m[2], True) for m in _SET_VALUE.finditer(line)])
        for _, name, holds in events:  # in the order the line runs them
            if holds:
                holding.add(name)
            else:
                holding.discard(name)
    releases = [f"  tfrt_release(rt, {n});" for n in owned if n in holding]
    return lines[:-1] + releases + ["  return status;"]


def _return_moves(lines: list[str], i: int, borrowed: set[str]) -> list[str]:
    """If a return's result lines start at ``i`` (then ``goto done;``):
    those lines with each owned local returned once moved, not retained;
    else []."""
    end = i
    while end < len(lines) and _RESULT.match(lines[end]):
        end += 1
    if end == i or end >= len(lines) or lines[end].strip() != "goto done;":
        return []
    matches = [_RESULT.match(line) for line in lines[i:end]]
    returned = [m[3] for m in matches if m[3]]
    out = []
    for line, m in zip(lines[i:end], matches):
        local = m[3]
        if local and local not in borrowed and returned.count(local) == 1:
            out.append(f"{m[1]}{m[2]} = {local}; {local} = NULL;  /* moved */")
        else:
            out.append(line)
    return out


def _touches_buffer_contents(op_name: str) -> bool:
    """vm.buffer.* ops that read or write buffer contents."""
    return op_name.startswith("vm.buffer.") and op_name not in ("vm.buffer.length",
                                                                 "vm.buffer.alloc")
