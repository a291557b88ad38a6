"""Where a new state takes the old state's memory instead of a block of its own.

IREE's functions that store a new state (``@step``, ``@reset``,
``@set_state``) allocate its buffer, fill it, and only then store it in the
state's global, which releases the old one. So the arena kept a second block
of the state's size for the new value: for a streamed int8 DS-CNN on a
Cortex-M4, 15.3 KB of a 39.6 KB context. This pass lets the new state reuse
the old one's memory wherever that is safe:

* ``@reset`` and ``@set_state`` release the old buffer right before they
  allocate the new one, which then takes its block (``plan_state_reuse``).
  ``@set_state`` never reads the old state. tfaot's ``@reset``
  (lower/mlir_import.py) reads it only to pass the initial values through a
  dispatch (``select(is_finite(s), s, 0) * 0 + initial``, a workaround for an
  IREE bug), and that result is the same whatever the dispatch reads. So its
  reads of the old state are pointed at the new buffer.
* The direct step writes the new state over the old one (``plan_in_place``)
  where every write lands after the last read of the bytes it overwrites. A
  copy into the new state that would land too early goes to a staging
  region of the scratch area first, and is copied into the state after
  that read. For the DS-CNN this is the pooling window, 3 KB, which the last
  reduction still reads.
* ``@get_state`` returns views of the state itself, not of a copy
  (``plan_state_reuse``): the public get_state copies them out at once.

Where the old state is read is known from the copies' ranges and from the
dispatches' sources, where they show the slices each loads and stores
(``dispatch_source.accessed_ranges``: an N-stream step's ring buffers are
copied by dispatches bound to the whole state) or the views a call of
tfaot's kernels passes (``binding_extents``), else from their bindings.
A dispatch bound to the whole packed state buffer
whose only push constants are offsets the state's globals hold (IREE
passes a packed global's offset that way) reads from those offsets up to
the next such offset at most. The offsets the globals hold are
the constants that every function but ``@__init`` stores there.
``@__init`` packs equal initial values into a smaller buffer of a
different layout, so a library whose step writes in place runs ``@reset``
right after ``@__init``.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .dispatch_source import (Access, Effects, accessed_ranges, binding_extents,
                              elementwise_writes)
from .vm_rules import call_groups
from .vmir import const_int, rodata_sym, symbol

_ALIGN = 64
_WHOLE = [(0, 1 << 62)]  # a range not known here
#: the ops that split a 64-bit offset into the two 32-bit push constants
_HALVES = ("vm.trunc.i64.i32", "vm.shr.i64.u")


@dataclass
class InPlace:
    """The direct step's new state written over the old one."""

    site: tuple[int, int]     # the allocation of the new state (block 0, op index)
    global_sym: str           # the global that holds the state
    size: int                 # bytes of the state buffer
    # op index of a copy or fill into the new state that lands before a read
    # of the old bytes -> its staging region (offset in the scratch area, bytes)
    staged: dict[int, tuple[int, int]] = field(default_factory=dict)
    flush_after: int = -1     # op index after which the staged bytes go to the state


@dataclass
class StateReuse:
    """What the state functions of one module reuse of the old state, planned
    once (``plan_state_reuse``) for the memory plan and the emitters."""

    # function -> allocation site -> the globals whose block it takes
    replaced: dict[str, dict[tuple[int, int], tuple[str, ...]]] = field(default_factory=dict)
    # function (@get_state) -> its views of the state itself
    views: dict[str, StateViews] = field(default_factory=dict)

    def unallocated(self, fn_name: str) -> set[tuple[int, int]]:
        """The allocation sites of ``fn_name`` that take no block of their own."""
        sites = set(self.replaced.get(fn_name, {}))
        if fn_name in self.views:
            sites.add(self.views[fn_name].site)
        return sites


def plan_state_reuse(module, fn_ops: dict, in_place: InPlace | None) -> StateReuse:
    """``@reset``'s, ``@set_state``'s and ``@get_state``'s reuse of the old
    state (module docstring); ``fn_ops``: the ``vm.func`` ops by name;
    ``in_place``: the direct step's plan to write its new state over the
    old one, or None. None on GPU backends, whose buffers live on the
    device."""
    reuse = StateReuse()
    prog = module.prog
    if module.host_sync:
        return reuse
    stores = _buffer_stores(module)
    # the step leaves the old buffer in the global it writes in place
    if in_place is not None and prog.step is not None:
        stores[prog.step.vm_name].pop(in_place.global_sym, None)
    for info in (prog.reset, prog.set_state):
        if info is not None:
            replaced = _replaced_globals(module, fn_ops[info.vm_name], info, stores)
            if replaced:
                reuse.replaced[info.vm_name] = replaced
    if prog.get_state is not None:
        views = _state_views(fn_ops[prog.get_state.vm_name])
        if views is not None:
            reuse.views[prog.get_state.vm_name] = views
    return reuse


def _replaced_globals(module, fn_op, info, stores: dict
                      ) -> dict[tuple[int, int], tuple[str, ...]]:
    """The allocation sites of ``@reset`` / ``@set_state`` (``info``) whose
    buffer takes the block of the globals it is stored into (module
    docstring): site -> those globals. The function has one block; it loads
    them (if at all) before the allocation, and only uses what it loaded as
    a dispatch's binding (``@reset``); every other function but ``@__init``
    stores into them nothing, or a buffer of the same size that it stores
    into the same globals (``stores``): where IREE packs several globals
    into one buffer, they share one block, released together."""
    blocks = list(fn_op.regions[0].blocks)
    if len(blocks) != 1:
        return {}
    ops = list(blocks[0].operations)
    is_reset = info is module.prog.reset
    out = {}
    for site, shared in _allocation_globals(ops).items():
        loads = [i for i, op in enumerate(ops) if op.name == "vm.global.load.ref"
                 and symbol(op.attributes["global"]) in shared]
        size = const_int(ops[site].operands[1])
        if size is None or not any(_always(stores, info.vm_name, g, size, shared)
                                   for g in shared):
            continue
        # @reset's reads of the old state, bound to the new buffer, stay in
        # it: the old state is never larger (@__init's may be smaller)
        if loads and not (is_reset and max(loads) < site and _bound_only(ops, loads)
                          and all(n is not None and n <= size
                                  for g in shared for n in _init_sizes(module, g))):
            continue
        out[(0, site)] = shared
    return out


def _always(stores: dict, fn_name: str, g: str, size: int, shared: tuple) -> bool:
    """Whether every function but ``fn_name`` (and ``@__init``) that stores
    ``g`` stores there a buffer of ``size`` bytes shared by the same
    globals: then ``g`` always holds a block of this one size, which the new
    buffer takes once every global in ``shared`` has let go of its own. The
    others may be stored elsewhere on their own (the step's new values of
    the states it does not update in place, beside a circular buffer it
    writes in place)."""
    return all(fn_stores.get(g, (size, shared)) == (size, shared)
               for fn, fn_stores in stores.items() if fn != fn_name)


@dataclass
class StateViews:
    """``@get_state``'s views of its copy of the state, made views of the
    state itself: the public get_state copies them out at once."""

    site: tuple[int, int]                    # the copy's allocation, not made
    copies: set[tuple[int, int]]             # the copies into it, not made
    # view op -> (the loaded state the copy read, its source offset operand)
    views: dict[tuple[int, int], tuple[object, object]] = field(default_factory=dict)

    @property
    def sources(self) -> set:
        """The loaded states the views are of (kept until the function ends)."""
        return {source for source, _ in self.views.values()}


def _state_views(fn_op) -> StateViews | None:
    """``@get_state`` copies the state into a buffer of its own and returns
    views of it (a second block of the state's size in the arena); where
    each view is exactly one copy's destination, the view is made of the
    state's bytes that copy read instead, and neither the buffer nor the
    copies are made."""
    blocks = list(fn_op.regions[0].blocks)
    if len(blocks) != 1:
        return None
    ops = list(blocks[0].operations)
    loaded = {r: symbol(op.attributes["global"]) for op in ops
              if op.name == "vm.global.load.ref" for r in op.results}
    site_of: dict = {}
    for i, op in enumerate(ops):
        callee = symbol(op.attributes["callee"]) if "callee" in op.attributes else ""
        if callee == "hal_inline.buffer.allocate":
            site_of.update({r: i for r in op.results})
    if len(set(site_of.values())) != 1:
        return None
    site = next(iter(site_of.values()))
    copies, views, sources = set(), {}, {}
    for i, op in enumerate(ops):
        used = [v for v in op.operands if v in site_of]
        callee = symbol(op.attributes["callee"]) if "callee" in op.attributes else ""
        if not used or i == site or op.name == "vm.discard.refs":
            continue
        if op.name == "vm.buffer.copy":
            src, soff, dst, doff, length = op.operands
            start, n = const_int(doff), const_int(length)
            if src not in loaded or dst not in site_of or src in site_of or None in (start, n):
                return None
            copies.add((0, i))
            sources[(start, n)] = (src, soff)
        elif callee == "hal_inline.buffer_view.create":
            start, n = const_int(op.operands[1]), const_int(op.operands[2])
            if used != [op.operands[0]] or None in (start, n):
                return None
            views[(0, i)] = (start, n)
        else:
            return None
    if not views or any(r not in sources for r in views.values()):
        return None
    return StateViews((0, site), copies, {v: sources[r] for v, r in views.items()})


def plan_in_place(module, ops: list, kept: set[tuple[int, int]], scratch_end: int
                  ) -> InPlace | None:
    """How the direct step (one block, ``ops``) writes its new state over
    the old one, or None where it cannot. ``kept``: the step's allocations
    that a global keeps; ``scratch_end``: where staging regions may start."""
    prog = module.prog
    if len(kept) != 1 or prog.reset is None:
        return None
    site = next(iter(kept))
    shared = _allocation_globals(ops).get(site[1], ())
    size = const_int(ops[site[1]].operands[1])
    if len(shared) != 1 or size is None or not _holds(module, shared[0], size):
        return None
    g = shared[0]
    if not _reset_stores(module, g):
        return None
    # the old state's layout is the one the function that stored it left
    # (an LSTM's @step packs [c, h], its @reset [h, c]): safe for each
    per_layout = []
    for layout in _layouts(module):
        accesses = _accesses(module, ops, g, site[1], layout, size)
        if accesses is None:
            return None
        per_layout.append(accesses)
    return _schedule(InPlace(site, g, size), per_layout, scratch_end)


# ---------------------------------------------------------------------------
# What the functions store


def _allocation_globals(ops: list) -> dict[int, tuple[str, ...]]:
    """Allocation op index -> the buffer globals it is stored into, sorted
    (IREE packs several globals into one buffer; each is stored once)."""
    site_of, stored = {}, {}
    for i, op in enumerate(ops):
        callee = symbol(op.attributes["callee"]) if "callee" in op.attributes else ""
        if callee == "hal_inline.buffer.allocate":
            for r in op.results:
                site_of[r] = i
        elif callee == "hal_inline.buffer.storage" and op.operands[0] in site_of:
            site_of[op.results[0]] = site_of[op.operands[0]]
        elif op.name == "vm.global.store.ref" and op.operands[0] in site_of:
            stored.setdefault(site_of[op.operands[0]], []).append(
                symbol(op.attributes["global"]))
    return {s: tuple(sorted(gs)) for s, gs in stored.items() if len(set(gs)) == len(gs)}


def _buffer_stores(module) -> dict[str, dict[str, tuple[int | None, tuple[str, ...]]]]:
    """Function but ``@__init`` -> buffer global it stores -> (the size of
    the allocation stored there, None where it is not one allocation of a
    constant size; the globals that allocation is stored into)."""
    out: dict[str, dict] = {}
    for fn_op in module.func_ops():
        name = symbol(fn_op.attributes["sym_name"])
        if name == "__init":
            continue
        fn = out.setdefault(name, {})
        for block in fn_op.regions[0].blocks:
            ops = list(block.operations)
            allocated = {g: (const_int(ops[site].operands[1]), shared)
                         for site, shared in _allocation_globals(ops).items() for g in shared}
            for op in ops:
                if op.name == "vm.global.store.ref":
                    g = symbol(op.attributes["global"])
                    store = allocated.get(g, (None, (g,)))
                    fn[g] = store if fn.get(g, store) == store else (None, (g,))
    return out


def _holds(module, g: str, size: int) -> bool:
    """Whether every buffer that a function but ``@__init`` stores into
    ``g`` has ``size`` bytes or more, the first ``size`` of them ``g``'s
    alone. A global that IREE updates in place in ``@step`` (a circular
    buffer's scatter, streamify_keras/circular.py) has a buffer of its own
    there, while ``@reset`` and ``@set_state`` pack it with the others:
    it must lie past the bytes the step writes."""
    ints, fixed = _stored_ints(module), _fixed_offsets(module)
    for fn, stores in _buffer_stores(module).items():
        if g not in stores:
            continue
        n, shared = stores[g]
        if n is None or n < size:
            return False
        offsets = [ints.get(fn, {}).get(f"{h}__offset", fixed.get(h)) for h in shared if h != g]
        if any(off is None or off < size for off in offsets):
            return False
    return True


def _fixed_offsets(module) -> dict[str, int]:
    """Buffer global -> its offset in a packed buffer where IREE keeps no
    global of that offset (a layout fixed at build time): where
    ``@get_state`` copies it from, the same in every layout."""
    fn_op = _fn_op(module, module.prog.get_state)
    offsets: dict[str, int | None] = {}
    for block in fn_op.regions[0].blocks if fn_op is not None else []:
        loaded = {}
        for op in block.operations:
            if op.name == "vm.global.load.ref":
                loaded.update({r: symbol(op.attributes["global"]) for r in op.results})
            elif op.name == "vm.buffer.copy" and op.operands[0] in loaded:
                g, off = loaded[op.operands[0]], const_int(op.operands[1])
                offsets[g] = off if offsets.get(g, off) == off else None
    return {g: off for g, off in offsets.items() if off is not None}


def _fn_op(module, info):
    """The ``vm.func`` op of a function of the program (``info``), or None."""
    return next((fn_op for fn_op in module.func_ops() if info is not None
                 and symbol(fn_op.attributes["sym_name"]) == info.vm_name), None)


def _init_sizes(module, g: str) -> set:
    """The sizes of the buffers ``@__init`` stores into ``g`` (None: not an
    allocation of a constant size)."""
    sizes = set()
    for fn_op in module.func_ops():
        if symbol(fn_op.attributes["sym_name"]) != "__init":
            continue
        for block in fn_op.regions[0].blocks:
            ops = list(block.operations)
            allocs = _allocation_globals(ops)
            sizes |= {const_int(ops[site].operands[1]) for site, shared in allocs.items()
                      if g in shared}
            if any(op.name == "vm.global.store.ref" and symbol(op.attributes["global"]) == g
                   for op in ops) and not any(g in shared for shared in allocs.values()):
                sizes.add(None)
    return sizes


def _reset_stores(module, g: str) -> bool:
    """Whether ``@reset`` stores ``g`` (then the layout after init is the
    one every later function keeps, see the module docstring)."""
    fn_op = _fn_op(module, module.prog.reset)
    return fn_op is not None and any(
        op.name == "vm.global.store.ref" and symbol(op.attributes["global"]) == g
        for block in fn_op.regions[0].blocks for op in block.operations)


def _layouts(module) -> list[dict[str, int]]:
    """The integer globals (the packed state's offsets and size) as each
    function but ``@__init`` leaves them, one dict per distinct layout; a
    global some function does not store as one constant is left out of
    all (its value not known). At least one dict."""
    stored = _stored_ints(module)
    names = set().union(*stored.values()) if stored else set()
    known = {g for g in names
             if all(fn.get(g) is not None for fn in stored.values())}
    layouts = []
    for fn in stored.values():
        layout = {g: fn[g] for g in sorted(known)}
        if layout not in layouts:
            layouts.append(layout)
    return layouts or [{}]


def _stored_ints(module) -> dict[str, dict[str, int | None]]:
    """Function (but ``@__init``) that stores integer globals -> global ->
    the constant it stores there (None: not one constant)."""
    out: dict[str, dict] = {}
    for fn_op in module.func_ops():
        name = symbol(fn_op.attributes["sym_name"])
        if name == "__init":
            continue
        for block in fn_op.regions[0].blocks:
            for op in block.operations:
                if op.name.startswith("vm.global.store.i"):
                    g, v = symbol(op.attributes["global"]), const_int(op.operands[0])
                    fn = out.setdefault(name, {})
                    fn[g] = v if fn.get(g, v) == v else None
    return out


def _bound_only(ops: list, loads: list[int]) -> bool:
    """Whether the refs loaded at ``loads`` are used only as dispatch
    bindings (or released)."""
    loaded = {r for i in loads for r in ops[i].results}
    for op in ops:
        used = [v for v in op.operands if v in loaded]
        if not used or op.name == "vm.discard.refs":
            continue
        callee = symbol(op.attributes["callee"]) if "callee" in op.attributes else ""
        if callee != "hal_loader.executable.dispatch":
            return False
        groups = call_groups(op)
        binds = groups[6] if len(groups) > 6 else []
        if any(v in loaded for group in groups[:6] for v in group):
            return False
        if not any(b[0] in loaded for b in binds):
            return False
    return True


# ---------------------------------------------------------------------------
# The direct step's reads of the old state and writes of the new one


@dataclass
class _Access:
    index: int               # op index
    kind: str                # "copy", "fill" or "dispatch"
    reads_old: list          # byte ranges of the old state it reads
    writes_new: list         # byte ranges of the new state it writes
    reads_new: list          # byte ranges of the new state it reads
    # a dispatch whose writes over its own reads of the old state are
    # elementwise (dispatch_source.py): it may write the state in place
    in_place: bool = False


def _accesses(module, ops: list, g: str, site: int, layout: dict[str, int], size: int
              ) -> list[_Access] | None:
    """Each op's ranges of the old and the new state, or None where the
    step uses either buffer in a way this pass does not follow."""
    role: dict = {}     # value -> "old" or "new"
    ints: dict = {}     # value -> its constant (constants, loads of layout globals)
    origin: dict = {}   # value -> the offset global it was computed from
    names: dict = {}    # function id -> the dispatch function's name
    offsets = sorted({v for name, v in layout.items() if name.endswith("__offset")} | {size})
    out = []
    stored = False
    for i, op in enumerate(ops):
        callee = symbol(op.attributes["callee"]) if "callee" in op.attributes else ""
        name = op.name
        if name == "vm.global.load.ref" and symbol(op.attributes["global"]) == g:
            if stored:
                return None  # (a load of what the step stored: the new state)
            role[op.results[0]] = "old"
        elif name.startswith("vm.global.load.i"):
            gname = symbol(op.attributes["global"])
            if gname in layout:
                ints[op.results[0]] = layout[gname]
                if gname.endswith("__offset"):
                    origin[op.results[0]] = gname
        elif callee == "hal_inline.buffer.allocate" and i == site:
            for r in op.results:
                role[r] = "new"
        elif callee == "hal_inline.buffer.storage" and op.operands[0] in role:
            role[op.results[0]] = role[op.operands[0]]
        elif name == "vm.buffer.copy":
            src, soff, dst, doff, length = op.operands
            n = _int(length, ints)
            acc = _Access(i, "copy", [], [], [])
            if role.get(src) == "old":
                acc.reads_old = _span(_int(soff, ints), n)
            if role.get(src) == "new":
                acc.reads_new = _span(_int(soff, ints), n)
            if role.get(dst) == "old":
                return None  # (IREE never writes a global's old value)
            if role.get(dst) == "new":
                acc.writes_new = _span(_int(doff, ints), n)
            out.append(acc)
        elif name.startswith("vm.buffer.fill.") and role.get(op.operands[0]):
            if role[op.operands[0]] == "old":
                return None
            width = int(name.rsplit(".", 1)[1][1:]) // 8
            off, count = _int(op.operands[1], ints), _int(op.operands[2], ints)
            ranges = (_span(off * width, count * width) if None not in (off, count)
                      else list(_WHOLE))
            out.append(_Access(i, "fill", [], ranges, []))
        elif callee == "hal_loader.executable.lookup.function":
            names[op.results[0]] = module.rodata_text(rodata_sym(op.operands[1]))
        elif callee == "hal_loader.executable.dispatch":
            acc = _dispatch_access(i, op, role, ints, origin, layout, offsets)
            source = module.executable_sources.get(names.get(op.operands[1]))
            if source is not None and acc.reads_old and acc.writes_new:
                _check_in_place(acc, op, source, names[op.operands[1]], role, ints)
            if source is not None and not acc.in_place and (acc.reads_old or acc.writes_new):
                _narrow(acc, op, source, names[op.operands[1]], role, ints)
            if acc.reads_old or acc.writes_new:
                out.append(acc)
        elif name == "vm.global.store.ref":
            if role.get(op.operands[0]) == "old":
                return None
            stored = stored or symbol(op.attributes["global"]) == g
        elif name not in ("vm.discard.refs",) and any(v in role for v in op.operands):
            if callee not in ("hal_inline.buffer.length", "hal_inline.buffer_view.create"):
                return None
            if callee == "hal_inline.buffer_view.create" and role.get(op.operands[0]) == "old":
                return None  # a view of the old state (an output): it must stay as it was
        elif name.startswith(_HALVES) and op.operands[0] in origin:
            for r in op.results:  # (the low and the high half of an offset)
                origin[r] = origin[op.operands[0]]
            value, shift = ints.get(op.operands[0]), _int(op.operands[-1], ints)
            if value is not None:
                half = value >> shift if name.startswith("vm.shr") and shift is not None \
                    else value & 0xFFFFFFFF
                ints[op.results[0]] = half
    return out


def _dispatch_access(i: int, op, role: dict, ints: dict, origin: dict, layout: dict,
                     offsets: list[int]) -> _Access:
    groups = call_groups(op)
    consts = groups[5] if len(groups) > 5 else []
    binds = groups[6] if len(groups) > 6 else []
    acc = _Access(i, "dispatch", [], [], [])
    # every push constant a half of an offset the state's globals hold: the
    # old state is read in those packed globals' slots only
    named = {origin.get(c) for c in consts}
    # (a slot past the step's new state, in another function's larger
    # packing, reaches to the end of the buffer)
    slots = ([(layout[g], min((o for o in offsets if o > layout[g]), default=_WHOLE[0][1]))
              for g in sorted(named)]
             if consts and None not in named else [])
    for buf, off, length in binds:
        r = role.get(buf)
        if r is None:
            continue
        ranges = _span(_int(off, ints), _int(length, ints))
        if r == "old" and slots:
            ranges = _intersect(ranges, slots)
        if r == "old":
            acc.reads_old += ranges
        else:  # a dispatch bound to the new state may read and write it
            acc.writes_new += ranges
            acc.reads_new += ranges
    return acc


def _check_in_place(acc: _Access, op, source, export: str, role: dict, ints: dict) -> None:
    """Where the dispatch's source (dispatch_source.py) shows that each of
    its stores into the new state that meets one of its loads of the old
    state stores exactly those bytes, elementwise of that load: ``acc`` may
    write in place, and its ranges become the bytes it loads and stores."""
    groups = call_groups(op)
    consts = [_int(c, ints) for c in (groups[5] if len(groups) > 5 else [])]
    effects = elementwise_writes(source, export, consts)
    # one elementwise op reads element i of each operand before it writes
    # element i; with two, the second could read bytes the first wrote
    # where code generation gives the first's result the output's buffer
    if effects is None or effects.generics > 1:
        return
    where = {}  # binding -> (its role, its offset in the state buffer)
    for k, (buf, off, _) in enumerate(groups[6] if len(groups) > 6 else []):
        where[k] = (role.get(buf), _int(off, ints))

    def state_range(a):
        r, base = where.get(a.binding, (None, None))
        return r, None if base is None else (base + a.start, base + a.end)

    gaps = {state_range(a) for a in effects.loads + [s for s, _ in effects.stores]
            if not a.contiguous}

    reads = [state_range(a) for a in effects.loads]
    writes = [(state_range(s), [state_range(a) for a in loads]) for s, loads in effects.stores]
    if any(rng is None for r, rng in reads + [w for w, _ in writes] if r is not None):
        return
    old_reads = [rng for r, rng in reads if r == "old"]
    new_writes = []
    for (r, rng), sources in writes:
        if r == "old":
            return
        if r != "new":
            continue
        for read in old_reads:
            if _meet([rng], [read]) and (read != rng or ("old", read) not in sources
                                         or {("old", read), ("new", rng)} & gaps):
                return
        new_writes.append(rng)
    acc.in_place, acc.reads_old, acc.writes_new = True, old_reads, new_writes


def _narrow(acc: _Access, op, source, export: str, role: dict, ints: dict) -> None:
    """Where the dispatch's source shows the slices it loads and stores
    (dispatch_source.accessed_ranges), its ranges of the old and the new
    state become those slices' bytes, not its bindings' (the copies of a
    batched ring buffer that IREE writes as dispatches, bound to the whole
    state, each touch one stream's rows of one buffer); for a call of
    tfaot's kernels, the views it passes, written where not read-only
    (dispatch_source.binding_extents)."""
    groups = call_groups(op)
    consts = [_int(c, ints) for c in (groups[5] if len(groups) > 5 else [])]
    effects = accessed_ranges(source, export, consts)
    if effects is None:  # (a call of tfaot's kernels: each view, within its shape)
        extents = binding_extents(source, export, consts)
        if extents is None:
            return
        effects = Effects([Access(b, start, end) for b, start, end, _ in extents],
                          [(Access(b, start, end), []) for b, start, end, w in extents if w])
    where = {k: (role.get(buf), _int(off, ints))
             for k, (buf, off, _) in enumerate(groups[6] if len(groups) > 6 else [])}

    def ranges(accesses: list, wanted: str) -> list | None:
        out = []
        for a in accesses:
            r, base = where.get(a.binding, (None, None))
            if r == wanted:
                if base is None:
                    return None
                out.append((base + a.start, base + a.end))
        return out

    stores = [s for s, _ in effects.stores]
    narrowed = (ranges(effects.loads, "old"), ranges(stores, "new"), ranges(effects.loads, "new"))
    if None not in narrowed:
        acc.reads_old, acc.writes_new, acc.reads_new = narrowed


def _int(value, ints: dict) -> int | None:
    c = const_int(value)
    return c if c is not None else ints.get(value)


def _span(offset: int | None, length: int | None) -> list[tuple[int, int]]:
    if offset is None or length is None:
        return list(_WHOLE)
    return [(offset, offset + length)] if length > 0 else []


def _intersect(a: list, b: list) -> list:
    return [(max(s0, s1), min(e0, e1)) for s0, e0 in a for s1, e1 in b
            if max(s0, s1) < min(e0, e1)]


def _meet(a: list, b: list) -> bool:
    return bool(_intersect(a, b))


def _schedule(plan: InPlace, per_layout: list[list[_Access]], scratch_end: int
              ) -> InPlace | None:
    """Stages each write into the new state that a later op's read of the
    old bytes would see under some layout (``per_layout``: the step's
    accesses for each layout the old state may have); None where that
    cannot be done (a dispatch's write, or a staged region read or written
    again before its flush)."""
    staged: dict[int, int] = {}  # op index -> bytes
    for accesses in per_layout:
        for k, acc in enumerate(accesses):
            if not acc.writes_new:
                continue
            later = [a.index for a in accesses[k:]
                     if a.reads_old and _meet(a.reads_old, acc.writes_new)
                     and (a.index > acc.index or acc.kind == "dispatch" and not acc.in_place)]
            if not later:
                continue
            if acc.kind == "dispatch" or acc.writes_new == _WHOLE:
                return None
            plan.flush_after = max(plan.flush_after, max(later))
            staged[acc.index] = max(staged.get(acc.index, 0),
                                    sum(e - s for s, e in acc.writes_new))
    offset = -(-scratch_end // _ALIGN) * _ALIGN
    for index in sorted(staged):
        plan.staged[index] = (offset, staged[index])
        offset += -(-staged[index] // _ALIGN) * _ALIGN
    for accesses in per_layout:
        if not _flush_is_safe(plan, accesses):
            return None
    return plan


def _flush_is_safe(plan: InPlace, accesses: list[_Access]) -> bool:
    """Whether no staged region is read or written again before its flush."""
    for k, acc in enumerate(accesses):
        if acc.index not in plan.staged:
            continue
        for other in accesses[k + 1:]:
            if other.index > plan.flush_after:
                break
            rewritten = _meet(other.writes_new, acc.writes_new) and other.index not in plan.staged
            if _meet(other.reads_new, acc.writes_new) or rewritten:
                return False
    return True
