"""Memory planning pass: arena size classes, view and executable slots.

Runs over the ``vm.func`` ops before the functions are emitted. Every
``hal_inline.buffer.allocate`` must have a constant size; it is rounded up to
a size class. A function needs the sum of its allocation sites per class (a
site inside a loop counts ``_LOOP_SITE_WEIGHT`` times); the program needs the
maximum over its functions, plus one buffer per class for every buffer-typed
global that holds an allocation (an unknown source gets the biggest class).

An allocation that ``__init`` stores into a global that is still empty (the
weights that packed builds lay out once at init) is counted once, as that
global's buffer, not also as a transient of ``__init``: otherwise the arena
would hold a second, never-used copy of the packed weights. Globals that
only ``__init`` stores, all from the same allocations (--weights=file: every
weight global is a view of the one buffer ``init`` fills from the file),
hold one buffer between them, not one each: six weight globals of one
LSTM/GRU model made the arena seven times the 178 KB of its weights.
A global whose ``__init`` buffer is smaller than the one buffer size every
other function stores there (IREE packs a conv stack's equal zero initial
states into one smaller buffer) gets a block of that size for its ``__init``
allocation (``VMModule.alloc_sizes``; the buffer's length stays the one
asked for), so it needs one block of one class; so this pass runs before the
functions are emitted.
"""
from __future__ import annotations

from typing import Any

from ..errors import TfaotError
from .program import VMModule
from .vmir import blocks_in_cycles, const_int, location, symbol

_ARENA_ALIGN = 64
_LOOP_SITE_WEIGHT = 3  # live copies assumed for an allocation inside a loop
#: a store into a global: (function, allocation site or None, weight, class or -1)
_Store = tuple[str, "tuple[int, int] | None", int, int]


def plan_memory(module: VMModule) -> None:
    """Fills ``pools``, ``view_count``, ``view_rank`` and ``executable_count``
    of the program."""
    per_function: list[dict[int, int]] = []
    view_need = 1
    view_rank = 1
    exe_sites = 0
    # global -> each store into it: (function, allocation site or None, the
    # site's weight, size class or -1 when unknown); a site is (block, op) by
    # position, stable, where id() of the ops' Python objects was reused
    # within one walk
    stores: dict[str, list[_Store]] = {}
    all_classes: set[int] = set()
    step = module.prog.step
    for fn_op in module.func_ops():
        fn_name = symbol(fn_op.attributes["sym_name"])
        # a direct step takes its temporaries from its own scratch area and
        # creates no views: only the buffers it keeps in globals are the pools'
        direct = module.direct_plan if step is not None and fn_name == step.vm_name else None
        blocks = list(fn_op.regions[0].blocks)
        loops = blocks_in_cycles(blocks)
        counts: dict[int, int] = {}
        # @reset's and @set_state's new state takes the old one's block;
        # @get_state's copy is not made (emit/state_reuse.py)
        unallocated = module.state_reuse.unallocated(fn_name)
        views = 0
        alloc_class: dict[Any, int] = {}
        alloc_site: dict[Any, tuple[tuple[int, int], int]] = {}  # value -> (site, weight)
        kept_sites: set[tuple[int, int]] = set()  # __init allocations that only fill empty globals
        stored_globals: set[str] = set()
        for bi, block in enumerate(blocks):
            weight = _LOOP_SITE_WEIGHT if bi in loops else 1
            for oi, op in enumerate(block.operations):
                callee = symbol(op.attributes["callee"]) if "callee" in op.attributes else ""
                if op.name == "vm.call" and callee == "hal_inline.buffer.allocate":
                    size = const_int(op.operands[1])
                    if size is None:
                        raise TfaotError(
                            f"emit: buffer size of an allocation in @{fn_name} is "
                            f"not a constant ({location(op)}); dynamic shapes are not supported "
                            "by the CPU backend yet")
                    cls = max(_ARENA_ALIGN, -(-size // _ARENA_ALIGN) * _ARENA_ALIGN)
                    if (bi, oi) not in unallocated and (direct is None or (bi, oi) in direct.pooled):
                        counts[cls] = counts.get(cls, 0) + weight
                    all_classes.add(cls)
                    for r in op.results:
                        alloc_class[r] = cls
                        alloc_site[r] = ((bi, oi), weight)
                elif callee == "hal_inline.buffer_view.create" and direct is None:
                    views += weight
                    # operands: buffer, offset, length, element type, encoding, dims...
                    view_rank = max(view_rank, len(op.operands) - 5)
                elif callee == "hal_loader.executable.load":
                    exe_sites += weight
                elif op.name == "vm.call" and callee == "hal_inline.buffer.storage":
                    src = op.operands[0]
                    if src in alloc_class:
                        alloc_class[op.results[0]] = alloc_class[src]
                    if src in alloc_site:
                        alloc_site[op.results[0]] = alloc_site[src]
                elif op.name == "vm.global.store.ref":
                    g = symbol(op.attributes["global"])
                    if module.global_by_sym[g].ctype != "tfrt_buffer *":
                        continue
                    cls = alloc_class.get(op.operands[0])
                    site = alloc_site.get(op.operands[0])
                    if (direct is not None and direct.in_place is not None and site is not None
                            and site[0] == direct.in_place.site):
                        continue  # the old buffer, stored back (emit/state_reuse.py)
                    stores.setdefault(g, []).append(
                        (fn_name, site[0] if site is not None else None,
                         site[1] if site is not None else 1, cls if cls is not None else -1))
                    if (fn_name == "__init" and site is not None and g not in stored_globals
                            and site[0] not in kept_sites):
                        kept_sites.add(site[0])
                        counts[cls] -= site[1]
                    stored_globals.add(g)
        per_function.append(counts)
        view_need = max(view_need, views)
    need: dict[int, int] = {}
    for counts in per_function:
        for cls, n in counts.items():
            need[cls] = max(need.get(cls, 0), n)
    biggest = max(all_classes) if all_classes else _ARENA_ALIGN
    grown = _init_buffers_grown(stores)
    for g, size in grown.items():
        for fn, site, _, _ in stores[g]:
            if fn == "__init" and site is not None:
                module.alloc_sizes[("__init", *site)] = size
    for classes in _held_by_globals(stores, grown):
        for cls in classes:
            cls = biggest if cls == -1 else cls
            need[cls] = need.get(cls, 0) + 1
    prog = module.prog
    prog.pools = sorted((cls, n) for cls, n in need.items() if n > 0)
    prog.view_count = view_need
    prog.view_rank = view_rank
    prog.executable_count = max(1, exe_sites)


def _init_buffers_grown(stores: dict[str, list[_Store]]) -> dict[str, int]:
    """Globals whose ``__init`` buffer is smaller than every buffer the other
    functions store there (a streaming model's state: IREE packs the initial
    zeros of equal states into one smaller buffer): global -> the class
    their ``__init`` allocation grows to, so that the global needs one block
    of that class, not one of each. (A block of one class left to the
    global's first buffer only, 15 KB of a streamed DS-CNN's context.)"""
    grown = {}
    for g, entries in stores.items():
        if any(cls == -1 for *_, cls in entries):
            continue  # a buffer of unknown size
        later = {cls for fn, _, _, cls in entries if fn != "__init"}
        first = [(site, cls) for fn, site, _, cls in entries if fn == "__init"]
        if (len(later) == 1 and first and all(site is not None for site, _ in first)
                and all(cls < max(later) for _, cls in first)):
            grown[g] = max(later)
    return grown


def _held_by_globals(stores: dict[str, list[_Store]], grown: dict[str, int]
                     ) -> list[set[int]]:
    """The size classes of the buffers globals keep alive, one set per buffer
    holder: each global on its own, except globals that are only ever
    stored from the same known allocations, which share one holder: every
    call that stores one of them stores the same buffer into all (weights
    that init lays out; the state globals IREE packs into one buffer in
    @reset and @set_state). A global in ``grown`` holds one buffer of that
    class.

    Where the sources of one such holder are a part of another's (IREE
    packs a circular buffer, which the step writes in place, with the
    states the step stores anew), a buffer of the larger holder from one of
    the common sources is the smaller holder's: both were stored by that
    call, and neither since (whatever stores the smaller one stores both).
    The larger holder counts only the classes of its other sources."""
    holders: list[set[int]] = []
    shared: dict[frozenset, dict] = {}  # sources -> source -> class
    # (an __init allocation grown for one global is grown for all it fills)
    grown_sites = {("__init", site): grown[g] for g in grown
                   for fn, site, _, _ in stores[g] if fn == "__init" and site is not None}
    for g, entries in stores.items():
        # (a site in a loop may fill the globals with several buffers)
        sources = frozenset((fn, site if weight == 1 else None)
                            for fn, site, weight, _ in entries)
        if not sources or any(site is None for _, site in sources):
            holders.append({grown[g]} if g in grown else {cls for *_, cls in entries})
            continue
        classes = shared.setdefault(sources, {})
        for fn, site, _, cls in entries:
            classes.setdefault((fn, site), set()).add(grown_sites.get((fn, site), cls))
    for sources, classes in shared.items():
        common = set().union(*(other for other in shared if other < sources))
        holders.append(set().union(*(c for source, c in classes.items()
                                      if source not in common)))
    return [h for h in holders if h]
