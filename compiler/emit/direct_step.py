"""Direct step: ``@step`` as straight C over buffers fixed at build time.

The VM program's ``@step`` allocates its temporaries, wraps its inputs and
outputs in buffer views, counts references, looks its dispatches up and
checks every binding at every call: on a Cortex-M4 that was 700-840
instructions a step for three or four dispatches, a quarter of a
SimpleRNN(16)'s step. Where ``@step`` is one block of the ops below (what
IREE's inline HAL gives a streaming model), ``NAME_vm_step_direct`` does the
same work without any of it:

* its temporaries are regions of a scratch area in the context, at offsets
  fixed here (``scratch``); the new state is written over the old one
  where emit/state_reuse.py finds that safe, else it comes from the
  arena's pools, as the other functions' buffers do;
* each dispatch's kernel was found and checked against its attributes
  once, at init (``tfrt_direct_prepare``); the step passes it the bindings'
  pointers (most of them constants: the scratch area's) and calls it
  (``tfrt_direct_call``; its lengths and constants, where they are
  constants, are arrays in read-only memory);
* binding and copy ranges are checked here, at build time, where they are
  constants, and at run time only where a global's buffer is involved;
* the inputs are read where the caller's step copied them, and the outputs
  are handed back as (pointer, length, element type) for the caller to
  check and copy: no views.

``plan_direct_step`` decides whether ``@step`` qualifies and lays out its
scratch area (the memory plan needs that before any function is emitted);
``DirectEmitter`` then writes the C. Anything else (several blocks, calls
of other functions, buffer views used otherwise, an input kept in a global,
a GPU backend) keeps the translated ``@step``, which handles every VM op.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import TfaotError
from .function import FunctionEmitter
from .state_reuse import InPlace, plan_in_place
from .vm_rules import BINARY_OPS, SELECT_OPS, UNARY_OPS, VM_RULES, call_groups
from .vmir import const_int, location, rodata_sym, symbol

_ALIGN = 64  # kernels assume 64-byte aligned bindings (as the arena's blocks)
#: A step of more dispatches than this calls them through
#: tfrt_direct_call_outlined (runtime_shim/tfrt_cpu.c) instead of inlining
#: each: gcc's -O2 time grows with the square of the inlined calls (43 s for
#: 811), while a step of few dispatches (a microcontroller's recurrent
#: model) keeps the instructions inlining saves.
INLINED_CALLS_MAX = 64

#: imports a direct step may call
_CALLS = {"hal_inline.buffer.allocate", "hal_inline.buffer.storage", "hal_inline.buffer.length",
          "hal_inline.buffer_view.assert", "hal_inline.buffer_view.buffer",
          "hal_inline.buffer_view.create", "hal_loader.executable.lookup.function",
          "hal_loader.executable.dispatch"}
#: VM ops (besides calls of _CALLS) a direct step may hold
_OPS = ({"vm.const.i32", "vm.const.i64", "vm.const.i32.zero", "vm.const.i64.zero",
         "vm.const.ref.zero", "vm.const.ref.rodata", "vm.global.load.ref", "vm.global.store.ref",
         "vm.discard.refs", "vm.buffer.copy", "vm.buffer.length", "vm.check.nz", "vm.check.eq",
         "vm.check.ne", "vm.return", "vm.call", "vm.call.variadic"}
        | {f"vm.global.{d}.{t}" for d in ("load", "store") for t in ("i32", "i64", "f32")}
        | {f"vm.buffer.fill.{t}" for t in ("i8", "i16", "i32", "i64", "f32")}
        | (set(BINARY_OPS) | set(UNARY_OPS) | set(SELECT_OPS)) - {"vm.cmp.nz.ref"})


class Ineligible(Exception):
    """``@step`` is not one a direct step can replace (the reason)."""


@dataclass
class DirectPlan:
    """Where ``@step``'s allocations live: scratch regions (offset, size) by
    site, and the sites whose buffers a global keeps (from the pools)."""

    scratch: dict[tuple[int, int], tuple[int, int]] = field(default_factory=dict)
    pooled: set[tuple[int, int]] = field(default_factory=set)
    # the new state written over the old (emit/state_reuse.py), or None
    in_place: InPlace | None = None
    # its dispatches call tfrt_direct_call_outlined (INLINED_CALLS_MAX)
    outlined_calls: bool = False

    @property
    def scratch_bytes(self) -> int:
        """The scratch area's size: its regions and the in-place state's
        staging regions, rounded up to _ALIGN."""
        regions = list(self.scratch.values())
        if self.in_place is not None:
            regions += list(self.in_place.staged.values())
        end = max((off + size for off, size in regions), default=0)
        return -(-end // _ALIGN) * _ALIGN


@dataclass
class DirectDispatch:
    """One dispatch of the direct step, as init finds it."""

    label: str
    executable: str          # the C field of the executable's global
    slot: int                # the dispatch's name slot (VMProgram.function_names)
    constant_count: int
    binding_count: int


@dataclass
class DirectStep:
    """The C of ``NAME_vm_step_direct`` and what the templates need of it."""

    cname: str
    params: list[str]
    body: str
    scratch_bytes: int
    dispatches: list[DirectDispatch]
    inputs: list[tuple[int, int]]   # (element type, bytes) the step reads per input
    outputs: list[tuple[int, int]]  # (element type, bytes) per output (bytes -1: not constant)
    # the new state is written over the old: init runs @reset after @__init
    # (whose state has another layout, emit/state_reuse.py)
    in_place: bool = False


# ---------------------------------------------------------------------------
# Planning


def plan_direct_step(module, fn_op, info) -> DirectPlan | None:
    """The direct step's layout of ``fn_op`` (``@step``), or None when it
    does not qualify (module docstring). Emits it once to find out, so the
    emission after the memory plan cannot fail."""
    if module.host_sync:
        return None
    try:
        plan = _plan(module, fn_op)
        dry = DirectEmitter(module, fn_op, info, plan, dry_run=True)
        dry.emit_direct()
    except (Ineligible, TfaotError):  # (the translated @step reports a real error)
        return None
    plan.outlined_calls = len(dry.dispatches) > INLINED_CALLS_MAX
    return plan


def _plan(module, fn_op) -> DirectPlan:
    blocks = list(fn_op.regions[0].blocks)
    if len(blocks) != 1:
        raise Ineligible("several blocks")
    site_of: dict = {}  # buffer value -> its allocation site (block 0, op index)
    sizes: dict[tuple[int, int], int] = {}
    kept: set[tuple[int, int]] = set()
    for oi, op in enumerate(blocks[0].operations):
        name = op.name
        if name not in _OPS:
            raise Ineligible(f"op {name}")
        callee = symbol(op.attributes["callee"]) if "callee" in op.attributes else ""
        if name.startswith("vm.call") and callee not in _CALLS:
            raise Ineligible(f"call of {callee}")
        if callee == "hal_inline.buffer.allocate":
            size = const_int(op.operands[1])
            if size is None:
                raise Ineligible("an allocation of a size known only at run time")
            sizes[(0, oi)] = size
            for r in op.results:
                site_of[r] = (0, oi)
        elif callee == "hal_inline.buffer.storage" and op.operands[0] in site_of:
            site_of[op.results[0]] = site_of[op.operands[0]]
        elif name == "vm.global.store.ref" and op.operands[0] in site_of:
            kept.add(site_of[op.operands[0]])
    plan = DirectPlan(pooled=kept)
    offset = 0
    for site, size in sizes.items():
        if site not in kept:
            plan.scratch[site] = (offset, size)
            offset += -(-max(size, 1) // _ALIGN) * _ALIGN
    plan.in_place = plan_in_place(module, list(blocks[0].operations), kept, offset)
    if plan.in_place is not None:
        plan.pooled = kept - {plan.in_place.site}
    return plan


# ---------------------------------------------------------------------------
# Emission


@dataclass
class _Buf:
    """A buffer value of the direct step."""

    kind: str                # "scratch", "pool", "input", "global", "rodata"
    ptr: str                 # C expression of its first byte (uint8_t *)
    size: int | None         # bytes, where known here
    obj: str = ""            # C expression of its tfrt_buffer * (pool, global, rodata)
    key: object = None       # what tells two buffers apart (copies: memcpy or memmove)
    rodata: object = None    # its Rodata, for a rodata buffer


@dataclass
class _View:
    data: str                # C expression of its first byte
    length: str              # C expression of its byte count
    element_type: int


class DirectEmitter(FunctionEmitter):
    """Writes ``NAME_vm_step_direct`` for a ``@step`` that ``plan`` laid out.

    Integer ops and checks go through the VM rules (``VM_RULES``), as in any
    function; buffers, views, dispatches and ref globals are this class's.
    ``dry_run``: emitted only to see that it can be (before the memory plan,
    so without the pools' numbers)."""

    def __init__(self, module, fn_op, info, plan: DirectPlan, dry_run: bool = False):
        super().__init__(module, fn_op, info)
        self.plan = plan
        self.dry_run = dry_run
        self.bufs: dict = {}         # value -> _Buf
        self.views: dict = {}        # value -> _View
        self.inputs: list[tuple[int, int]] = []
        self.exe: dict = {}          # value -> the executable global's field
        self.slots: dict = {}        # value -> (executable field, dispatch name slot)
        self.dispatches: list[DirectDispatch] = []
        self.stored: dict[str, _Buf] = {}   # global field -> what the step stored there
        self.olds: list[str] = []           # globals' old buffers, released at the end
        self.owned: list[str] = []          # pool buffers this step allocated
        self.outputs: list[tuple[int, int]] = []
        self.executables = _executable_globals(module)
        self.flushes: list[str] = []        # staged bytes' copies into the state

    def fail(self, op, message: str) -> Ineligible:
        return Ineligible(f"{message} ({op.name}, {location(op)})")

    # -- driver ------------------------------------------------------------------
    def emit_direct(self) -> DirectStep | None:
        args = list(self.blocks[0].arguments)
        for i, arg in enumerate(args):
            self.names[arg] = f"in{i}"
        self.inputs = [(0, 0)] * len(args)
        in_place = self.plan.in_place
        for oi, op in enumerate(self.blocks[0].operations):
            self._cur_op = oi
            self.emit_op(op)
            if in_place is not None and oi == in_place.flush_after:
                self.line("/* the staged bytes, now that the old state's are read */")
                self.lines += self.flushes
        if self.dry_run:
            return None
        decls = [f"  {ctype}{'' if ctype.endswith('*') else ' '}{n} = "
                 f"{'NULL' if ctype.endswith('*') else '0'};" for n, ctype in self.decls.items()]
        refs = [f"  tfrt_buffer *{n} = NULL;" for n in self.owned + self.olds]
        unused = [f"  (void){n};" for n in [*self.decls, *(f"in{i}" for i in range(len(args)))]
                  if not self.uses.get(n)]
        exit_lines = ["done:", *(f"  tfrt_release(rt, {n});" for n in self.owned + self.olds),
                      "  return status;"]
        body = "\n".join(decls + refs + unused + self.lines + exit_lines)
        params = [f"const uint8_t *in{i}" for i in range(len(args))] + ["tfrt_result *result"]
        return DirectStep(
            cname=f"{self.info.cname}_direct", params=params, body=body,
            scratch_bytes=self.plan.scratch_bytes, dispatches=self.dispatches,
            inputs=self.inputs, outputs=self.outputs, in_place=in_place is not None)

    def emit_op(self, op) -> None:
        name = op.name
        if not self.dry_run:
            self.module.ops_used[name] = self.module.ops_used.get(name, 0) + 1
        if name in ("vm.call", "vm.call.variadic"):
            _CALL_RULES[symbol(op.attributes["callee"])](self, op, call_groups(op))
        elif name in _REF_OPS:
            _REF_OPS[name](self, op)
        else:
            VM_RULES[name](self, op)  # integer ops and checks, as in any function

    # -- buffers -----------------------------------------------------------------
    def buf(self, value, op) -> _Buf:
        """The buffer a ref operand is."""
        b = self.bufs.get(value)
        if b is None:
            raise self.fail(op, "a buffer of unknown origin")
        if b.rodata is not None:
            b.rodata.used = True
        return b

    def span(self, b: _Buf, offset, length, op) -> tuple[str, str, bool]:
        """(pointer, length, constant length) of ``b``'s bytes [offset,
        offset + length) (operands, or ints): checked here where constant,
        else at run time."""
        off = offset if isinstance(offset, int) else const_int(offset)
        n = length if isinstance(length, int) else const_int(length)
        if off is not None and n is not None and b.size is not None:
            if off < 0 or n < 0 or off + n > b.size:
                raise self.fail(op, f"bytes [{off}, {off + n}) of a {b.size}-byte buffer")
            return (f"{b.ptr} + {off}u" if off else b.ptr), f"{n}u", True
        o = str(offset) if isinstance(offset, int) else self.val(offset)
        ln = str(length) if isinstance(length, int) else self.val(length)
        if b.obj:
            self.line(f"if (!tfrt_range_ok({b.obj}, {o}, {ln})) "
                      "{ status = TFRT_STATUS_OUT_OF_RANGE; goto done; }")
        elif b.size is not None:
            self.line(f"if ({o} < 0 || {ln} < 0 || {o} > {b.size} || {ln} > {b.size} - {o}) "
                      "{ status = TFRT_STATUS_OUT_OF_RANGE; goto done; }")
        else:
            raise self.fail(op, "a range of a buffer of unknown size")
        return f"{b.ptr} + (size_t){o}", f"(size_t){ln}", False


def _executable_globals(module) -> set[str]:
    """The executable globals only ``__init`` stores (loaded once, so the
    direct step's dispatches can be prepared right after it)."""
    stores: dict[str, set[str]] = {}
    for fn_op in module.func_ops():
        fn = symbol(fn_op.attributes["sym_name"])
        for block in fn_op.regions[0].blocks:
            for op in block.operations:
                if op.name == "vm.global.store.ref":
                    stores.setdefault(symbol(op.attributes["global"]), set()).add(fn)
    return {module.global_by_sym[g].cname for g, fns in stores.items()
            if fns == {"__init"} and module.global_by_sym[g].ctype == "tfrt_executable *"}


# -- VM ops of refs ----------------------------------------------------------------


def _global_load_ref(de: DirectEmitter, op) -> None:
    g = de.module.global_by_sym[symbol(op.attributes["global"])]
    if g.ctype == "tfrt_executable *":
        if g.cname not in de.executables:
            raise de.fail(op, f"the executable @{g.sym} is stored outside __init")
        de.exe[op.results[0]] = g.cname
        return
    if g.ctype != "tfrt_buffer *":
        raise de.fail(op, f"a {g.ctype} global")
    if g.cname in de.stored:  # stored earlier in this step: that buffer
        de.bufs[op.results[0]] = de.stored[g.cname]
        return
    local = _global_local(de, g.cname)
    de.bufs[op.results[0]] = _Buf("global", f"{local}->data", None, local, key=("global", g.cname))


def _global_local(de: DirectEmitter, cname: str) -> str:
    """The C local holding the buffer of the global ``cname`` (read once)."""
    local = f"g_{cname}"
    if local not in de.decls:
        de.decls[local] = "tfrt_buffer *"
        de.uses[local] = 1
        de.line(f"{local} = ctx->g.{cname};")
        de.line(f"if (!{local}) {{ status = TFRT_STATUS_NULL_REF; goto done; }}")
    return local


def _global_store_ref(de: DirectEmitter, op) -> None:
    g = de.module.global_by_sym[symbol(op.attributes["global"])]
    if g.ctype != "tfrt_buffer *":
        raise de.fail(op, f"a store into the {g.ctype} global @{g.sym}")
    b = de.buf(op.operands[0], op)
    if b.kind in ("scratch", "input"):
        raise de.fail(op, f"a {b.kind} buffer kept in @{g.sym}")
    if b.kind == "in_place":  # the new state already is the global's buffer
        de.stored[g.cname] = b
        return
    old = f"old_{g.cname}"
    if old in de.olds:
        de.line(f"tfrt_release(rt, ctx->g.{g.cname});")
    else:
        de.olds.append(old)
        de.line(f"{old} = ctx->g.{g.cname};  /* released at the end, after its last use */")
    de.line(f"ctx->g.{g.cname} = tfrt_retain({b.obj});")
    de.stored[g.cname] = b


def _const_ref_rodata(de: DirectEmitter, op) -> None:
    rd = de.module.rodata_by_sym[symbol(op.attributes["rodata"])]
    size = None if rd.external is not None else len(rd.data)
    de.bufs[op.results[0]] = _Buf("rodata", f"{rd.expr}->data", size, rd.expr,
                                  key=("rodata", rd.sym), rodata=rd)


def _nothing(de: DirectEmitter, op) -> None:
    """A null ref (a direct step only discards one: any other use of it is a
    buffer of unknown origin), or a discard: the direct step counts no
    references of its temporaries."""


def _buffer_copy(de: DirectEmitter, op) -> None:
    src, soff, dst, doff, length = op.operands
    s, d = de.buf(src, op), de.buf(dst, op)
    if d.kind in ("input", "rodata"):
        raise de.fail(op, f"a copy into a read-only {d.kind} buffer")
    sp, n, _ = de.span(s, soff, length, op)
    dp, _, _ = de.span(d, doff, length, op)
    staged = _staging(de, dp, n)
    if staged:
        de.line(f"memcpy({staged}, {sp}, {n});")
        return
    if s.key == d.key:  # apart only where the ranges are constants that do not meet
        so, do, ln = const_int(soff), const_int(doff), const_int(length)
        apart = None not in (so, do, ln) and (so + ln <= do or do + ln <= so)
    else:  # (two globals may hold one buffer)
        apart = not (s.kind == "global" and d.kind == "global")
    de.line(f"{'memcpy' if apart else 'memmove'}({dp}, {sp}, {n});")


def _buffer_length(de: DirectEmitter, op) -> None:
    b = de.buf(op.operands[0], op)
    r = de.result(op)
    de.line(f"{r} = INT64_C({b.size});" if b.size is not None
            else f"{r} = (int64_t){b.obj}->length;")


def _buffer_fill(width: int, ctype: str):
    def rule(de: DirectEmitter, op) -> None:
        buf, offset, count, value = op.operands
        b = de.buf(buf, op)
        if b.kind in ("input", "rodata"):
            raise de.fail(op, f"a fill of a read-only {b.kind} buffer")
        off, n = const_int(offset), const_int(count)
        if off is None or n is None:
            raise de.fail(op, "a fill of a range known only at run time")
        p, ln, _ = de.span(b, off * width, n * width, op)
        p = _staging(de, p, ln) or p
        v = de.val(value)
        if width == 1 or const_int(value) == 0:
            de.line(f"memset({p}, (int)(uint8_t){v}, {ln});")
        else:
            de.line(f"for (size_t i_ = 0; i_ < {n}u; ++i_) {{ {ctype} e_ = ({ctype}){v}; "
                    f"memcpy({p} + i_ * {width}u, &e_, {width}u); }}")
    return rule


def _staging(de: DirectEmitter, dst: str, length: str) -> str | None:
    """Where the current op writes instead of ``dst`` when it is a write
    into the new state staged until the old bytes there are read
    (emit/state_reuse.py), or None; the copy into the state waits in
    ``de.flushes``."""
    in_place = de.plan.in_place
    if in_place is None or de._cur_op not in in_place.staged:
        return None
    offset, _ = in_place.staged[de._cur_op]
    staged = f"ctx->scratch + {offset}u"
    de.flushes.append(f"  memcpy({dst}, {staged}, {length});")
    return staged


def _return(de: DirectEmitter, op) -> None:
    for i, v in enumerate(op.operands):
        view = de.views.get(v)
        if view is None:
            raise de.fail(op, f"result {i} is not a view the step created")
        de.line(f"result[{i}].data = {view.data};")
        de.line(f"result[{i}].length = {view.length};")
        de.line(f"result[{i}].element_type = 0x{view.element_type:08X}u;")
        n = view.length.rstrip("u")
        de.outputs.append((view.element_type, int(n) if n.isdigit() else -1))
    de.line("goto done;")


# -- imports ---------------------------------------------------------------------


def _allocate(de: DirectEmitter, op, groups) -> None:
    site = (0, de._cur_op)
    size = const_int(op.operands[1])
    in_place = de.plan.in_place
    if site in de.plan.scratch:
        offset, _ = de.plan.scratch[site]
        b = _Buf("scratch", f"ctx->scratch + {offset}u" if offset else "ctx->scratch", size,
                 key=("scratch", site))
    elif in_place is not None and site == in_place.site:
        # the new state over the old (emit/state_reuse.py): the global's
        # buffer, which @reset, @set_state and this step leave at this size
        g = de.module.global_by_sym[in_place.global_sym].cname
        local = _global_local(de, g)
        de.line(f"if ({local}->length < {size}u) "
                "{ status = TFRT_STATUS_OUT_OF_RANGE; goto done; }")
        b = _Buf("in_place", f"{local}->data", size, local, key=("global", g))
    else:  # kept by a global: a block of the arena's pools, as the other functions'
        local = f"b_{de._cur_op}"
        de.owned.append(local)
        pool = 0 if de.dry_run else de.pool_of(size)
        if pool is None:
            raise TfaotError(f"emit: the memory plan has no pool for the {size}-byte buffer "
                             f"@step keeps ({location(op)}; a tfaot bug)")
        de.line(f"TFRT_TRY(tfrt_buffer_allocate_from(rt, {pool}u, {de.val(op.operands[0])}, "
                f"INT64_C({size}), &{local}));")
        b = _Buf("pool", f"{local}->data", size, local, key=("pool", site))
    for r in op.results:
        de.bufs[r] = b


def _storage(de: DirectEmitter, op, groups) -> None:
    de.bufs[op.results[0]] = de.buf(op.operands[0], op)


def _length(de: DirectEmitter, op, groups) -> None:
    _buffer_length(de, op)


def _input_index(de: DirectEmitter, view, op) -> int:
    arg = de.names.get(view)
    if arg is None or not arg.startswith("in"):
        raise de.fail(op, "a view that is not an input")
    return int(arg[2:])


def _view_assert(de: DirectEmitter, op, groups) -> None:
    view, _, etype, _ = (g[0] for g in groups[:4])
    index = _input_index(de, view, op)
    dims = [const_int(d) for d in (groups[4] if len(groups) > 4 else [])]
    et = const_int(etype)
    if et is None or None in dims:
        raise de.fail(op, "an input of a shape known only at run time")
    count = 1
    for d in dims:
        count *= d
    de.inputs[index] = (et, count * -(-(et & 0xFF) // 8))  # (the low byte: bits an element)


def _view_buffer(de: DirectEmitter, op, groups) -> None:
    index = _input_index(de, op.operands[0], op)
    _, size = de.inputs[index]
    if not size:
        raise de.fail(op, f"input {index} read before its shape is asserted")
    de.uses[f"in{index}"] = 1
    de.bufs[op.results[0]] = _Buf("input", f"(uint8_t *)in{index}", size, key=("input", index))


def _view_create(de: DirectEmitter, op, groups) -> None:
    buf, off, length, etype, _ = (g[0] for g in groups[:5])
    et = const_int(etype)
    if et is None:
        raise de.fail(op, "a view of an element type known only at run time")
    ptr, n, _ = de.span(de.buf(buf, op), off, length, op)
    de.views[op.results[0]] = _View(ptr, n, et)


def _lookup(de: DirectEmitter, op, groups) -> None:
    exe, fname = op.operands
    sym = rodata_sym(fname)
    if exe not in de.exe or sym is None:
        raise de.fail(op, "a lookup in an executable other than the one __init loads")
    de.slots[op.results[0]] = (de.exe[exe], de.module.function_slot(de.module.rodata_text(sym)))


def _dispatch(de: DirectEmitter, op, groups) -> None:
    exe, fid, wx, wy, wz = (g[0] for g in groups[:5])
    consts = groups[5] if len(groups) > 5 else []
    binds = groups[6] if len(groups) > 6 else []
    if fid not in de.slots or de.slots[fid][0] != de.exe.get(exe):
        raise de.fail(op, "a dispatch of a function not looked up in its executable")
    grid = tuple(const_int(w) for w in (wx, wy, wz))
    if None in grid or min(grid) < 1:
        raise de.fail(op, "a workgroup count known only at run time")
    executable, slot = de.slots[fid]
    label = de.module.prog.function_names[slot]
    values = [de.val(c) for c in consts]
    spans = [de.span(de.buf(buf, op), off, length, op) for buf, off, length in binds]
    fixed = all(const_int(c) is not None for c in consts)
    de.line(f"{{ /* dispatch {label} */")
    if consts:
        de.line(f"  {'static ' if fixed else ''}const uint32_t c_[] = "
                f"{{{', '.join(f'(uint32_t){v}' for v in values)}}};")
    if binds:
        de.line(f"  void *const p_[] = {{{', '.join(p for p, _, _ in spans)}}};")
        de.line(f"  {'static ' if all(c for _, _, c in spans) else ''}const size_t n_[] = "
                f"{{{', '.join(n for _, n, _ in spans)}}};")
    call = "tfrt_direct_call_outlined" if de.plan.outlined_calls else "tfrt_direct_call"
    de.line(f"  TFRT_TRY({call}(&ctx->direct_sites[{len(de.dispatches)}], "
            f"{grid[0]}u, {grid[1]}u, {grid[2]}u, {len(consts)}u, {'c_' if consts else 'NULL'}, "
            f"{len(binds)}u, {'p_, n_' if binds else 'NULL, NULL'}));")
    de.line("}")
    de.dispatches.append(DirectDispatch(label, executable, slot, len(consts), len(binds)))


_REF_OPS = {
    "vm.global.load.ref": _global_load_ref,
    "vm.global.store.ref": _global_store_ref,
    "vm.const.ref.rodata": _const_ref_rodata,
    "vm.const.ref.zero": _nothing,
    "vm.discard.refs": _nothing,
    "vm.buffer.copy": _buffer_copy,
    "vm.buffer.length": _buffer_length,
    "vm.return": _return,
    **{f"vm.buffer.fill.{sfx}": _buffer_fill(w, t) for sfx, (w, t) in {
        "i8": (1, "uint8_t"), "i16": (2, "uint16_t"), "i32": (4, "uint32_t"),
        "i64": (8, "uint64_t"), "f32": (4, "float")}.items()},
}
_CALL_RULES = {
    "hal_inline.buffer.allocate": _allocate,
    "hal_inline.buffer.storage": _storage,
    "hal_inline.buffer.length": _length,
    "hal_inline.buffer_view.assert": _view_assert,
    "hal_inline.buffer_view.buffer": _view_buffer,
    "hal_inline.buffer_view.create": _view_create,
    "hal_loader.executable.lookup.function": _lookup,
    "hal_loader.executable.dispatch": _dispatch,
}


def emit_direct_step(module, fn_op, info, plan: DirectPlan) -> DirectStep:
    """The direct step of ``@step`` laid out by ``plan`` (after the memory plan)."""
    return DirectEmitter(module, fn_op, info, plan).emit_direct()
