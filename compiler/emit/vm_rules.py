"""Emit rules of the ``vm.*`` ops, one table entry per op: ``VM_RULES``.

A rule is ``rule(fe, op)``: ``fe`` is the ``FunctionEmitter`` of the enclosing
``vm.func`` (name table, ``line``/``block`` output). Single-statement integer
ops are C format strings over {r} (result), {a}, {b}; structural C text
comes from the macros of codegen_templates/vm_ops.j2. ``vm.call`` and
``vm.call.variadic`` hand imports to ``HAL_CALL_RULES``.
"""
from __future__ import annotations

from typing import Any, Callable

from .c_types import ctype_of, is_ref, ops_template
from .hal_rules import HAL_CALL_RULES
from .vmir import int_attr, is_null_const, optional_attr, symbol

# rule(fe, op); fe: the function.FunctionEmitter calling it (passed in, not
# imported: the emitter imports the rules)
Rule = Callable[[Any, Any], None]

# ---------------------------------------------------------------------------
# Integer op tables: op name -> C template over {r} (result), {a}, {b}, {c}.


def _binary_table() -> dict[str, str]:
    t: dict[str, str] = {}
    for bits in (32, 64):
        s, u = f"int{bits}_t", f"uint{bits}_t"
        mn = f"INT{bits}_MIN"
        sfx = f"i{bits}"
        t[f"vm.add.{sfx}"] = f"{{r}} = ({s})(({u}){{a}} + ({u}){{b}});"
        t[f"vm.sub.{sfx}"] = f"{{r}} = ({s})(({u}){{a}} - ({u}){{b}});"
        t[f"vm.mul.{sfx}"] = f"{{r}} = ({s})(({u}){{a}} * ({u}){{b}});"
        t[f"vm.div.{sfx}.s"] = (f"{{r}} = ({{b}} == 0 || ({{a}} == {mn} && {{b}} == -1)) ? 0 : "
                                f"{{a}} / {{b}};")
        t[f"vm.rem.{sfx}.s"] = (f"{{r}} = ({{b}} == 0 || ({{a}} == {mn} && {{b}} == -1)) ? 0 : "
                                f"{{a}} % {{b}};")
        t[f"vm.div.{sfx}.u"] = f"{{r}} = {{b}} == 0 ? 0 : ({s})(({u}){{a}} / ({u}){{b}});"
        t[f"vm.rem.{sfx}.u"] = f"{{r}} = {{b}} == 0 ? 0 : ({s})(({u}){{a}} % ({u}){{b}});"
        t[f"vm.and.{sfx}"] = "{r} = {a} & {b};"
        t[f"vm.or.{sfx}"] = "{r} = {a} | {b};"
        t[f"vm.xor.{sfx}"] = "{r} = {a} ^ {b};"
        t[f"vm.shl.{sfx}"] = f"{{r}} = ({s})(({u}){{a}} << ((uint32_t){{b}} & {bits - 1}u));"
        t[f"vm.shr.{sfx}.s"] = f"{{r}} = {{a}} >> ((uint32_t){{b}} & {bits - 1}u);"
        t[f"vm.shr.{sfx}.u"] = f"{{r}} = ({s})(({u}){{a}} >> ((uint32_t){{b}} & {bits - 1}u));"
        t[f"vm.min.{sfx}.s"] = "{r} = {a} < {b} ? {a} : {b};"
        t[f"vm.max.{sfx}.s"] = "{r} = {a} > {b} ? {a} : {b};"
        t[f"vm.min.{sfx}.u"] = f"{{r}} = ({u}){{a}} < ({u}){{b}} ? {{a}} : {{b}};"
        t[f"vm.max.{sfx}.u"] = f"{{r}} = ({u}){{a}} > ({u}){{b}} ? {{a}} : {{b}};"
        t[f"vm.cmp.eq.{sfx}"] = "{r} = {a} == {b};"
        t[f"vm.cmp.ne.{sfx}"] = "{r} = {a} != {b};"
        t[f"vm.cmp.lt.{sfx}.s"] = "{r} = {a} < {b};"
        t[f"vm.cmp.lte.{sfx}.s"] = "{r} = {a} <= {b};"
        t[f"vm.cmp.gt.{sfx}.s"] = "{r} = {a} > {b};"
        t[f"vm.cmp.gte.{sfx}.s"] = "{r} = {a} >= {b};"
        t[f"vm.cmp.lt.{sfx}.u"] = f"{{r}} = ({u}){{a}} < ({u}){{b}};"
        t[f"vm.cmp.lte.{sfx}.u"] = f"{{r}} = ({u}){{a}} <= ({u}){{b}};"
        t[f"vm.cmp.gt.{sfx}.u"] = f"{{r}} = ({u}){{a}} > ({u}){{b}};"
        t[f"vm.cmp.gte.{sfx}.u"] = f"{{r}} = ({u}){{a}} >= ({u}){{b}};"
    return t


BINARY_OPS = _binary_table()
UNARY_OPS = {
    "vm.not.i32": "{r} = ~{a};",
    "vm.not.i64": "{r} = ~{a};",
    "vm.abs.i32": "{r} = {a} < 0 ? (int32_t)(0u - (uint32_t){a}) : {a};",
    "vm.abs.i64": "{r} = {a} < 0 ? (int64_t)(0u - (uint64_t){a}) : {a};",
    "vm.cmp.nz.i32": "{r} = {a} != 0;",
    "vm.cmp.nz.i64": "{r} = {a} != 0;",
    "vm.cmp.nz.ref": "{r} = {a} != NULL;",
    "vm.trunc.i64.i32": "{r} = (int32_t)(uint32_t)(uint64_t){a};",
    "vm.trunc.i32.i8": "{r} = (int32_t)(uint8_t){a};",
    "vm.trunc.i32.i16": "{r} = (int32_t)(uint16_t){a};",
    "vm.trunc.i64.i8": "{r} = (int32_t)(uint8_t){a};",
    "vm.trunc.i64.i16": "{r} = (int32_t)(uint16_t){a};",
    "vm.ext.i32.i64.s": "{r} = (int64_t){a};",
    "vm.ext.i32.i64.u": "{r} = (int64_t)(uint32_t){a};",
    "vm.ext.i8.i32.s": "{r} = (int32_t)(int8_t){a};",
    "vm.ext.i8.i32.u": "{r} = (int32_t)(uint8_t){a};",
    "vm.ext.i16.i32.s": "{r} = (int32_t)(int16_t){a};",
    "vm.ext.i16.i32.u": "{r} = (int32_t)(uint16_t){a};",
    "vm.ext.i8.i64.s": "{r} = (int64_t)(int8_t){a};",
    "vm.ext.i8.i64.u": "{r} = (int64_t)(uint8_t){a};",
    "vm.ext.i16.i64.s": "{r} = (int64_t)(int16_t){a};",
    "vm.ext.i16.i64.u": "{r} = (int64_t)(uint16_t){a};",
}
SELECT_OPS = {"vm.select.i32", "vm.select.i64", "vm.select.f32"}

# vm.buffer.{load,store,fill}: op suffix -> (byte width, C type of the element)
_BUFFER_ELEMS = {
    "i8.s": (1, "int8_t"), "i8.u": (1, "uint8_t"), "i8": (1, "uint8_t"),
    "i16.s": (2, "int16_t"), "i16.u": (2, "uint16_t"), "i16": (2, "uint16_t"),
    "i32": (4, "int32_t"), "i64": (8, "int64_t"), "f32": (4, "float"), "f64": (8, "double"),
}


def _binary(text: str) -> Rule:
    def rule(fe, op):
        a, b = (fe.val(v) for v in op.operands)
        fe.line(text.format(r=fe.result(op), a=a, b=b))
    return rule


def _unary(text: str) -> Rule:
    def rule(fe, op):
        a = fe.val(op.operands[0])
        fe.line(text.format(r=fe.result(op), a=a))
    return rule


def _select(fe, op):
    c, a, b = (fe.val(v) for v in op.operands)
    fe.line(f"{fe.result(op)} = {c} ? {a} : {b};")


# ---------------------------------------------------------------------------
# Constants: no C statement, the result's name is the C constant.


def _const(text: Callable[[Any], str]) -> Rule:
    def rule(fe, op):
        fe.names[op.results[0]] = text(op)
    return rule


def _const_i64(op) -> str:
    v = int_attr(op.attributes["value"])
    return f"INT64_C({v})" if v != -2**63 else "INT64_MIN"


def _const_ref_rodata(fe, op):
    rd = fe.module.rodata_by_sym[symbol(op.attributes["rodata"])]
    fe.names[op.results[0]] = rd.expr


# ---------------------------------------------------------------------------
# Globals: fields of the model context.


def _global_field(fe, op) -> str:
    return fe.module.global_by_sym[symbol(op.attributes["global"])].cname


def _global_load(fe, op):
    g = _global_field(fe, op)
    fe.line(f"{fe.result(op)} = ctx->g.{g};")


def _global_store(fe, op):
    g = _global_field(fe, op)
    fe.line(f"ctx->g.{g} = {fe.val(op.operands[0])};")


def _global_load_ref(fe, op):
    g = _global_field(fe, op)
    r = fe.result(op)
    fe.assign_ref(op, r)
    fe.note_global_load(r, g)
    fe.line(f"{r} = tfrt_retain(ctx->g.{g});")


def _global_store_ref(fe, op):
    g = _global_field(fe, op)
    fe.stored_globals.add(g)
    v = fe.val(op.operands[0])
    fe.block(ops_template().global_store_ref(g, v))


# ---------------------------------------------------------------------------
# Refs


def _discard_refs(fe, op):
    kept = fe.state_views.sources if fe.state_views is not None else set()
    for v in op.operands:
        if v in kept:
            continue  # @get_state's views are of it (emit/state_reuse.py)
        expr = fe.val(v)
        if expr in fe.ref_locals:
            fe.line(f"tfrt_release(rt, {expr}); {expr} = NULL;")


def _select_ref(fe, op):
    c, a, b = (fe.val(v) for v in op.operands)
    r = fe.result(op)
    fe.assign_ref(op, r)
    fe.line(f"{r} = tfrt_retain({c} ? {a} : {b});")


# ---------------------------------------------------------------------------
# Control flow


def _branch(fe, block, operands) -> str:
    """Parallel copy of branch operands into the target's block args."""
    copies = []
    for arg, v in zip(block.arguments, operands):
        copies.append((fe.temp_name(), ctype_of(str(arg.type)), fe.val(v), fe.names[arg],
                       is_ref(str(arg.type))))
    return ops_template().branch(copies, fe.block_index[block])


def _br(fe, op):
    fe.block(_branch(fe, op.successors[0], list(op.operands)))


def _cond_br(fe, op):
    t_block, f_block = op.successors
    n_true = len(t_block.arguments)
    operands = list(op.operands)
    cond = fe.val(operands[0])
    fe.line(f"if ({cond}) {{")
    fe.block(_branch(fe, t_block, operands[1:1 + n_true]), "    ")
    fe.line("} else {")
    fe.block(_branch(fe, f_block, operands[1 + n_true:]), "    ")
    fe.line("}")


def _return(fe, op):
    for i, v in enumerate(op.operands):
        expr = fe.val(v)
        if is_ref(str(v.type)):
            fe.line(f"*result{i} = tfrt_retain({expr});")
        else:
            fe.line(f"*result{i} = {expr};")
    fe.line("goto done;")


def _fail(fe, op):
    code = fe.val(op.operands[0])
    msg = optional_attr(op, "message")
    text = str(msg.value if msg is not None and hasattr(msg, "value") else "")
    text = text.replace("*/", "* /")
    fe.line(f"/* vm.fail: {text} */")
    fe.line(f"ctx->fail_code = {code};")
    fe.line("status = TFRT_STATUS_PROGRAM_FAILED;")
    fe.line("goto done;")


def _check(kind: str) -> Rule:
    def rule(fe, op):
        operands = list(op.operands)
        if kind == "nz":
            cond = f"{fe.val(operands[0])}"
        elif kind == "eq":
            cond = f"{fe.val(operands[0])} == {fe.val(operands[1])}"
        else:
            cond = f"{fe.val(operands[0])} != {fe.val(operands[1])}"
        fe.line(f"if (!({cond})) {{ status = TFRT_STATUS_PROGRAM_FAILED; goto done; }}")
    return rule


# ---------------------------------------------------------------------------
# vm.buffer.*


def _buffer_copy(fe, op):
    src, soff, dst, doff, length = op.operands
    views = fe.state_views
    if views is not None and (fe._cur_block, fe._cur_op) in views.copies:
        return  # a copy of the state that @get_state's views no longer read
    if is_null_const(src):
        raise fe.null_constant_error(op, "vm.buffer.copy source")
    fe.line(f"TFRT_TRY(tfrt_buffer_copy(rt, {fe.val(src)}, {fe.val(soff)}, "
            f"{fe.val(dst)}, {fe.val(doff)}, {fe.val(length)}));")


def _buffer_length(fe, op):
    b = fe.val(op.operands[0])
    fe.line(f"if (!{b}) {{ status = TFRT_STATUS_NULL_REF; goto done; }}")
    fe.line(f"{fe.result(op)} = (int64_t){b}->length;")


def _buffer_fill(width: int, ctype: str) -> Rule:
    def rule(fe, op):
        b, off, n, value = (fe.val(v) for v in op.operands)
        fe.line(f"TFRT_TRY(tfrt_buffer_fill(rt, {b}, {off}, {n}, (uint64_t){value}, {width}));")
    return rule


def _buffer_load(width: int, ctype: str) -> Rule:
    def rule(fe, op):
        b, idx = (fe.val(v) for v in op.operands)
        r = fe.result(op)
        fe.line(f"{{ {ctype} e_ = 0; TFRT_TRY(tfrt_buffer_load(rt, {b}, {idx}, {width}, &e_)); "
                f"{r} = e_; }}")
    return rule


def _buffer_store(width: int, ctype: str) -> Rule:
    def rule(fe, op):
        # vm.buffer.store.T %buffer[%index], %value
        b, idx, value = (fe.val(v) for v in op.operands)
        fe.line(f"{{ {ctype} e_ = ({ctype}){value}; "
                f"TFRT_TRY(tfrt_buffer_store(rt, {b}, {idx}, {width}, &e_)); }}")
    return rule


# ---------------------------------------------------------------------------
# Calls: imports go to HAL_CALL_RULES, other callees are functions of the module.


def _call(fe, op):
    callee = symbol(op.attributes["callee"])
    rule = HAL_CALL_RULES.get(callee)
    if rule is None:
        if callee in fe.module.functions:
            return _internal_call(fe, op, callee)
        raise fe.error(op, f"no C emit rule for import '{callee}'")
    rule(fe, op, [list(op.operands)])


def _call_variadic(fe, op):
    callee = symbol(op.attributes["callee"])
    rule = HAL_CALL_RULES.get(callee)
    if rule is None:
        raise fe.error(op, f"no C emit rule for import '{callee}'")
    rule(fe, op, call_groups(op))


def call_groups(op) -> list:
    """The operands of a ``vm.call.variadic`` by segment (a tuple segment as
    a list of tuples); of a ``vm.call``, one group of all."""
    if op.name != "vm.call.variadic":
        return [list(op.operands)]
    from iree.compiler import ir

    sizes = [int(x) for x in ir.DenseIntElementsAttr(op.attributes["segment_sizes"])]
    types = [str(t) for t in ir.ArrayAttr(op.attributes["segment_types"])]
    operands = list(op.operands)
    groups, pos = [], 0
    for size, type_str in zip(sizes, types):
        width = type_str.count(",") + 1 if type_str.startswith("tuple<") else 1
        n = 1 if size < 0 else size * width
        group = operands[pos:pos + n]
        pos += n
        if size < 0:
            groups.append(group)
        elif width > 1:
            groups.append([group[i:i + width] for i in range(0, len(group), width)])
        else:
            groups.append(group)
    return groups


def _internal_call(fe, op, callee):
    fe.calls_functions = True  # which may store into any global
    target = fe.module.functions[callee]
    args = [fe.val(v) for v in op.operands]
    outs = []
    for r in op.results:
        name = fe.declare(r)
        fe.assign_ref(op, name)
        outs.append("&" + name)
    fe.line(f"TFRT_TRY({target.cname}(ctx{''.join(', ' + a for a in args + outs)}));")


# ---------------------------------------------------------------------------

VM_RULES: dict[str, Rule] = {
    **{name: _binary(text) for name, text in BINARY_OPS.items()},
    **{name: _unary(text) for name, text in UNARY_OPS.items()},
    **{name: _select for name in SELECT_OPS},
    "vm.const.i32": _const(lambda op: f"INT32_C({int_attr(op.attributes['value'])})"),
    "vm.const.i64": _const(_const_i64),
    "vm.const.i32.zero": _const(lambda op: "INT32_C(0)"),
    "vm.const.i64.zero": _const(lambda op: "INT64_C(0)"),
    "vm.const.ref.zero": _const(lambda op: "NULL"),
    "vm.const.ref.rodata": _const_ref_rodata,
    **{f"vm.global.load.{t}": _global_load for t in ("i32", "i64", "f32")},
    **{f"vm.global.store.{t}": _global_store for t in ("i32", "i64", "f32")},
    "vm.global.load.ref": _global_load_ref,
    "vm.global.store.ref": _global_store_ref,
    "vm.discard.refs": _discard_refs,
    "vm.select.ref": _select_ref,
    "vm.br": _br,
    "vm.cond_br": _cond_br,
    "vm.return": _return,
    "vm.fail": _fail,
    "vm.check.nz": _check("nz"),
    "vm.check.eq": _check("eq"),
    "vm.check.ne": _check("ne"),
    "vm.buffer.copy": _buffer_copy,
    "vm.buffer.length": _buffer_length,
    **{f"vm.buffer.fill.{sfx}": _buffer_fill(*elem) for sfx, elem in _BUFFER_ELEMS.items()},
    **{f"vm.buffer.load.{sfx}": _buffer_load(*elem) for sfx, elem in _BUFFER_ELEMS.items()},
    **{f"vm.buffer.store.{sfx}": _buffer_store(*elem) for sfx, elem in _BUFFER_ELEMS.items()},
    "vm.call": _call,
    "vm.call.variadic": _call_variadic,
}
