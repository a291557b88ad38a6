"""Emit rules of the imported ``hal_inline.*`` / ``hal_loader.*`` functions.

``HAL_CALL_RULES`` maps an import name to ``rule(fe, op, groups)``: ``op`` is
the ``vm.call`` / ``vm.call.variadic``, ``groups`` its operands by segment
(one group for a plain ``vm.call``; tuple segments are lists of tuples).
Every import becomes one call of runtime_shim/tfrt.h. Dispatch names
(``hal_loader.executable.lookup.function``) are resolved once, when the
executable is loaded in ``__init``; a call site reads a slot.
"""
from __future__ import annotations

from typing import Any, Callable

from .c_types import ops_template
from .vmir import const_int, defining_op, is_null_const, rodata_sym

# rule(fe, op, groups); fe: the function.FunctionEmitter calling it (passed
# in, not imported: the emitter imports the rules)
CallRule = Callable[[Any, Any, list], None]


def _shape_array(fe, shape_values) -> tuple[str, str]:
    if not shape_values:
        return "0", "NULL"
    dims = ", ".join(fe.val(v) for v in shape_values)
    return str(len(shape_values)), f"(const int64_t[]){{{dims}}}"


# ---------------------------------------------------------------------------
# hal_inline: buffers and buffer views


def _buffer_allocate(fe, op, groups):
    align, size = (v for v in op.operands)
    r0 = fe.result(op, 0)
    r1 = fe.result(op, 1)
    fe.assign_ref(op, r0)
    fe.assign_ref(op, r1)
    views = fe.state_views
    if views is not None and views.site == (fe._cur_block, fe._cur_op):
        fe.line("/* the state's copy: not made, its views are of the state "
                "(emit/state_reuse.py) */")
        return
    replaced = fe.replaced.get((fe._cur_block, fe._cur_op))
    if replaced is not None:
        _release_old_state(fe, replaced)
    block = fe.planned_block()
    if block is None:
        pool = fe.pool_of(const_int(size))
        if pool is None:
            fe.line(f"TFRT_TRY(tfrt_buffer_allocate(rt, {fe.val(align)}, {fe.val(size)}, "
                    f"&{r0}));")
        else:
            fe.line(f"TFRT_TRY(tfrt_buffer_allocate_from(rt, {pool}u, {fe.val(align)}, "
                    f"{fe.val(size)}, &{r0}));")
    else:
        fe.line(f"TFRT_TRY(tfrt_buffer_allocate_in(rt, {fe.val(align)}, {fe.val(size)}, "
                f"INT64_C({block}), &{r0}));")
    if replaced is not None:
        _bind_old_state(fe, replaced, r0)
    fe.line(f"{r1} = tfrt_retain({r0});")


def _release_old_state(fe, global_syms: tuple[str, ...]) -> None:
    """The state globals' buffer released before the new state is allocated,
    which takes its block (emit/state_reuse.py), with this function's own
    references to it (@reset's loads)."""
    fe.line("/* the new state takes the old one's block (emit/state_reuse.py) */")
    for sym in global_syms:
        g = fe.module.global_by_sym[sym].cname
        fe.line(f"tfrt_release(rt, ctx->g.{g}); ctx->g.{g} = NULL;")
        for local in _loads_of(fe, g):
            fe.line(f"tfrt_release(rt, {local}); {local} = NULL;")


def _bind_old_state(fe, global_syms: tuple[str, ...], new: str) -> None:
    """@reset's loads of the old state bound to the new buffer: its
    dispatches read them only to route the initial values (emit/state_reuse.py)."""
    for sym in global_syms:
        g = fe.module.global_by_sym[sym].cname
        for local in _loads_of(fe, g):
            fe.line(f"{local} = tfrt_retain({new});")


def _loads_of(fe, g: str) -> list[str]:
    return [local for local, field in fe.global_loads.items() if field == g]


def _buffer_storage(fe, op, groups):
    r = fe.result(op)
    fe.assign_ref(op, r)
    fe.line(f"TFRT_TRY(tfrt_buffer_storage({fe.val(op.operands[0])}, &{r}));")


def _buffer_length(fe, op, groups):
    b = fe.val(op.operands[0])
    fe.line(f"if (!{b}) {{ status = TFRT_STATUS_NULL_REF; goto done; }}")
    fe.line(f"{fe.result(op)} = (int64_t){b}->length;")


def _view_create(fe, op, groups):
    buf, off, length, etype, enc = (g[0] for g in groups[:5])
    rank, shape = _shape_array(fe, groups[5] if len(groups) > 5 else [])
    r = fe.result(op)
    fe.assign_ref(op, r)
    buf_expr, off_expr = fe.val(buf), fe.val(off)
    views = fe.state_views
    if views is not None and (fe._cur_block, fe._cur_op) in views.views:
        source, offset = views.views[(fe._cur_block, fe._cur_op)]
        buf_expr, off_expr = fe.val(source), fe.val(offset)
    fe.line(f"TFRT_TRY(tfrt_view_create(rt, {buf_expr}, {off_expr}, "
            f"{fe.val(length)}, {fe.val(etype)}, {fe.val(enc)}, {rank}, {shape}, &{r}));")


def _view_assert(fe, op, groups):
    view, msg, etype, enc = (g[0] for g in groups[:4])
    rank, shape = _shape_array(fe, groups[4] if len(groups) > 4 else [])
    text = fe.module.rodata_text(rodata_sym(msg))
    fe.line(f"/* check {text} */")
    fe.line(f"TFRT_TRY(tfrt_view_assert({fe.val(view)}, {fe.val(etype)}, "
            f"{fe.val(enc)}, {rank}, {shape}));")


def _view_buffer(fe, op, groups):
    r = fe.result(op)
    fe.assign_ref(op, r)
    fe.line(f"TFRT_TRY(tfrt_view_buffer({fe.val(op.operands[0])}, &{r}));")


def _view_dim(fe, op, groups):
    view, index = op.operands
    fe.line(f"TFRT_TRY(tfrt_view_dim({fe.val(view)}, {fe.val(index)}, &{fe.result(op)}));")


def _view_field(field: str) -> CallRule:
    """buffer_view.rank / .element_type: an int32 field of the view."""
    def rule(fe, op, groups):
        v = fe.val(op.operands[0])
        fe.line(f"if (!{v}) {{ status = TFRT_STATUS_NULL_REF; goto done; }}")
        fe.line(f"{fe.result(op)} = (int32_t){v}->{field};")
    return rule


# ---------------------------------------------------------------------------
# hal_loader: kernel libraries and dispatches


def _executable_query_support(fe, op, groups):
    fe.line(f"TFRT_TRY(tfrt_executable_query_support({fe.val(op.operands[0])}, "
            f"&{fe.result(op)}));")


def _executable_load(fe, op, groups):
    fmt, data, consts = op.operands
    lib = rodata_sym(data)
    if lib is None:
        raise fe.error(op, "executable data is not a rodata constant")
    fmt_text = fe.module.rodata_text(rodata_sym(fmt))
    r = fe.result(op)
    fe.assign_ref(op, r)
    if fmt_text == "static":  # CPU: the data names a kernel library linked in
        library = fe.module.rodata_text(lib)
        fe.module.add_library(library)
        fe.line(f"/* kernel library {library} */")
    else:  # GPU: the data is the executable container itself
        fe.module.add_container(fmt_text, lib)
        fe.line(f"/* {fmt_text} executable @{lib} */")
    fe.line(f"TFRT_TRY(tfrt_executable_load(rt, {fe.val(fmt)}, {fe.val(data)}, "
            f"{fe.val(consts)}, &{r}));")


def _executable_lookup_function(fe, op, groups):
    exe, fname = op.operands
    sym = rodata_sym(fname)
    if sym is None:
        raise fe.error(op, "dispatch name is not a rodata constant")
    slot = fe.module.function_slot(fe.module.rodata_text(sym))
    r = fe.result(op)
    fe.line(f"TFRT_TRY(tfrt_executable_lookup({fe.val(exe)}, {slot}u, &{r})); "
            f"/* {fe.module.prog.function_names[slot]} */")


def _executable_dispatch(fe, op, groups):
    fe.info.dispatches += 1
    exe, fid, wx, wy, wz = (g[0] for g in groups[:5])
    consts = groups[5] if len(groups) > 5 else []
    binds = groups[6] if len(groups) > 6 else []
    # Name of the dispatch, for the comment.
    lk = defining_op(fid)
    label = ""
    if lk is not None and lk.name == "vm.call":
        sym = rodata_sym(lk.operands[1])
        label = fe.module.rodata_text(sym) if sym else ""
    for i, (buf, _, _) in enumerate(binds):
        if is_null_const(buf):
            raise fe.null_constant_error(op, f"binding {i} of dispatch '{label}'")
    fe.block(ops_template().dispatch(
        label, fe.val(exe), fe.val(fid), fe.val(wx), fe.val(wy), fe.val(wz),
        [fe.val(c) for c in consts],
        [(fe.val(b), fe.val(o), fe.val(n)) for b, o, n in binds],
        # CPU (its shim defines TFRT_BOUND_DISPATCH): the buffers bound here,
        # where offsets and lengths are constants
        bound=not fe.module.host_sync))


HAL_CALL_RULES: dict[str, CallRule] = {
    "hal_inline.buffer.allocate": _buffer_allocate,
    "hal_inline.buffer.storage": _buffer_storage,
    "hal_inline.buffer.length": _buffer_length,
    "hal_inline.buffer_view.create": _view_create,
    "hal_inline.buffer_view.assert": _view_assert,
    "hal_inline.buffer_view.buffer": _view_buffer,
    "hal_inline.buffer_view.dim": _view_dim,
    "hal_inline.buffer_view.rank": _view_field("rank"),
    "hal_inline.buffer_view.element_type": _view_field("element_type"),
    "hal_loader.executable.query_support": _executable_query_support,
    "hal_loader.executable.load": _executable_load,
    "hal_loader.executable.lookup.function": _executable_lookup_function,
    "hal_loader.executable.dispatch": _executable_dispatch,
}
