"""Emit stage: IREE VM program (vm-asm text) -> C source of the host program.

Modelled on MLIR's TranslateToCpp: one ``FunctionEmitter`` per ``vm.func``
owns a table from SSA values to C expressions, and every VM op has one small
rule (a method ``op_<name>`` or an entry of the integer-op tables below). An
op without a rule is a ``TfaotError`` naming the op and its location. The
module is read with the ``iree.compiler.ir`` bindings, never with regexes.

What the generated functions rely on (runtime_shim/tfrt.h):

* every VM global is a field of the model context, so contexts are independent;
* ref-typed locals own one reference: results of imports and global loads are
  +1, assigning a ref local releases its old value, ``vm.discard.refs``
  releases, and all ref locals are released when the function exits;
* ``hal_loader.executable.lookup.function`` names are resolved once, when the
  executable is loaded in ``__init``; a call site reads a slot.

The file-level layout of the C source comes from ``codegen_templates/``
(``model.c.j2``, ``model.h.j2``); this module renders the function bodies
and the facts those templates need (globals, rodata, memory plan).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from .errors import TfaotError

# ---------------------------------------------------------------------------
# Types

_REF_CTYPES = {
    "!vm.buffer": "tfrt_buffer *",
    "!vm.ref<!hal.buffer>": "tfrt_buffer *",
    "!vm.ref<!hal.buffer_view>": "tfrt_view *",
    "!vm.ref<!hal.executable>": "tfrt_executable *",
}
_SCALAR_CTYPES = {"i32": "int32_t", "i64": "int64_t", "f32": "float", "f64": "double"}

#: Element types (numpy dtype name -> IREE element-type code, C type).
ELEMENT_TYPES: dict[str, tuple[int, str]] = {
    "float32": (0x21000020, "float"),
    "float64": (0x21000040, "double"),
    "float16": (0x21000010, "uint16_t"),
    "int8": (0x10000008, "int8_t"),
    "int16": (0x10000010, "int16_t"),
    "int32": (0x10000020, "int32_t"),
    "int64": (0x10000040, "int64_t"),
    "uint8": (0x11000008, "uint8_t"),
    "uint16": (0x11000010, "uint16_t"),
    "uint32": (0x11000020, "uint32_t"),
    "bool": (0x13000008, "uint8_t"),
}

_ARENA_ALIGN = 64
_OPS_TEMPLATE = None


def ops_template():
    """The jinja2 macros of codegen_templates/vm_ops.j2 (loaded once)."""
    global _OPS_TEMPLATE
    if _OPS_TEMPLATE is None:
        import jinja2

        from .resources import template_dir

        env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(template_dir())),
                                 trim_blocks=True, lstrip_blocks=True,
                                 undefined=jinja2.StrictUndefined)
        env.filters["tfrt_u32"] = lambda v: f"(uint32_t){v}"
        _OPS_TEMPLATE = env.get_template("vm_ops.j2").module
    return _OPS_TEMPLATE
_LOOP_SITE_WEIGHT = 3  # live copies assumed for an allocation inside a loop


def ctype_of(type_str: str, where: str = "") -> str:
    if type_str in _REF_CTYPES:
        return _REF_CTYPES[type_str]
    if type_str in _SCALAR_CTYPES:
        return _SCALAR_CTYPES[type_str]
    raise TfaotError(f"VM type {type_str} is not supported by the C emitter{where}")


def is_ref(type_str: str) -> bool:
    return type_str.startswith("!vm.")


def c_ident(text: str) -> str:
    s = re.sub(r"[^0-9A-Za-z_]", "_", text)
    return s if s and not s[0].isdigit() else "_" + s


def _loc(op) -> str:
    """A short location of an op, without file paths (they may be temp dirs)."""
    text = str(op.location)
    m = re.search(r'"([^"]*)":(\d+):(\d+)', text)
    if m:
        return f"vm-asm line {m.group(2)}"
    return text


def _attr(op, name: str):
    return op.attributes[name] if name in op.attributes else None


def _sym(attr) -> str:
    """Name of a FlatSymbolRefAttr / StringAttr without '@' or quotes."""
    text = str(attr)
    if text.startswith("@"):
        text = text[1:]
    if text.startswith('"') and text.endswith('"'):
        text = text[1:-1]
    return text


def _int_attr(attr) -> int:
    from iree.compiler import ir

    return ir.IntegerAttr(attr).value


# ---------------------------------------------------------------------------
# Rodata values


def _dense_bytes(attr_text: str, ir) -> bytes:
    """Raw little-endian bytes of one ``dense<...> : type`` attribute text."""
    attr = ir.Attribute.parse(attr_text)
    if attr_text.startswith('dense<"0x'):
        hexdigits = attr_text[len('dense<"0x'):attr_text.index('"', len('dense<"0x'))]
        raw = bytes.fromhex(hexdigits)
        dense = ir.DenseElementsAttr(attr)
        count = int(np.prod(ir.ShapedType(dense.type).shape, dtype=np.int64))
        if dense.is_splat and count > 1:
            # A hex splat holds one element; repeat it.
            return raw * count
        return raw
    dense = ir.DenseElementsAttr(attr)
    shaped = ir.ShapedType(dense.type)
    etype = str(shaped.element_type)
    np_dtype = {"i8": np.int8, "i16": np.int16, "i32": np.int32, "i64": np.int64,
                "f16": np.float16, "f32": np.float32, "f64": np.float64,
                "i1": np.uint8}.get(etype)
    if np_dtype is None:
        raise TfaotError(f"rodata element type {etype} is not supported: {attr_text[:80]}")
    count = int(np.prod(shaped.shape, dtype=np.int64))
    if dense.is_splat:
        value = dense.get_splat_value()
        value = value.value if hasattr(value, "value") else value
        return np.full(count, value, dtype=np_dtype).tobytes()
    return np.asarray(dense).astype(np_dtype).tobytes()


def _split_members(body: str) -> list[str]:
    """Splits the top-level comma-separated members of a composite's list."""
    members, depth, start, in_str = [], 0, 0, False
    for i, ch in enumerate(body):
        if ch == '"' and (i == 0 or body[i - 1] != "\\"):
            in_str = not in_str
        if in_str:
            continue
        if ch in "<[(":
            depth += 1
        elif ch in ">])":
            depth -= 1
        elif ch == "," and depth == 0:
            members.append(body[start:i].strip())
            start = i + 1
    tail = body[start:].strip()
    if tail:
        members.append(tail)
    return [m for m in members if m]


def rodata_bytes(value_attr, ir) -> bytes:
    """Bytes of a ``vm.rodata`` value: string, dense elements or composite."""
    if isinstance(value_attr, ir.StringAttr):
        return bytes(value_attr.value_bytes) if hasattr(value_attr, "value_bytes") \
            else value_attr.value.encode()
    text = str(value_attr)
    if text.startswith("dense<"):
        return _dense_bytes(text, ir)
    if text.startswith("#util.composite<"):
        head, _, rest = text.partition("[")
        total = int(re.match(r"#util\.composite<(\d+)xi8", head).group(1))
        body = rest[: rest.rindex("]")]
        data = b"".join(_dense_bytes(m, ir) for m in _split_members(body))
        if len(data) != total:
            raise TfaotError(
                f"composite rodata decodes to {len(data)} bytes, declared {total}: {text[:120]}")
        return data
    raise TfaotError(f"unsupported vm.rodata value: {text[:120]}")


# ---------------------------------------------------------------------------
# Program facts collected for the templates


@dataclass
class Rodata:
    sym: str
    cname: str
    data: bytes
    alignment: int
    used: bool = False  # referenced as a buffer by the emitted code

    @property
    def expr(self) -> str:
        return f"(&{self.cname}_buffer)"

    def c_initializer(self) -> str:
        if not self.data:
            return "{0}"
        rows = []
        for i in range(0, len(self.data), 16):
            rows.append("  " + ", ".join(f"0x{b:02x}" for b in self.data[i:i + 16]) + ",")
        return "{\n" + "\n".join(rows) + "\n}"

    @property
    def comment(self) -> str:
        text = self.data.rstrip(b"\0")
        if text and all(32 <= b < 127 for b in text) and len(text) <= 80:
            return '"' + text.decode().replace("*/", "* /") + '"'
        return f"{len(self.data)} bytes"


@dataclass
class Global:
    sym: str
    cname: str
    ctype: str
    is_ref: bool
    initial: int | float | None = None


@dataclass
class FunctionInfo:
    vm_name: str
    cname: str
    arg_types: list[str]
    result_types: list[str]
    declaration: str  # iree.abi.declaration, if present
    prefix: str = ""
    body: str = ""


@dataclass
class VMProgram:
    """Everything the templates need about the host program."""

    module_name: str
    functions: dict[str, FunctionInfo] = field(default_factory=dict)   # by vm name
    exports: dict[str, str] = field(default_factory=dict)              # export -> vm name
    globals: list[Global] = field(default_factory=list)
    rodata: list[Rodata] = field(default_factory=list)
    function_names: list[str] = field(default_factory=list)            # lookup slots
    library_names: list[str] = field(default_factory=list)
    pools: list[tuple[int, int]] = field(default_factory=list)         # (size, count)
    view_count: int = 1
    executable_count: int = 1
    ops_used: dict[str, int] = field(default_factory=dict)

    @property
    def arena_bytes(self) -> int:
        return sum(size * count for size, count in self.pools)

    @property
    def buffer_slot_count(self) -> int:
        return max(1, sum(count for _, count in self.pools))


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


def _unary_table() -> dict[str, str]:
    t = {
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
    return t


BINARY_OPS = _binary_table()
UNARY_OPS = _unary_table()
SELECT_OPS = {"vm.select.i32", "vm.select.i64", "vm.select.f32"}

# vm.buffer.{load,store,fill}: op suffix -> (byte width, C type of the VM value, load extension)
_BUFFER_ELEMS = {
    "i8.s": (1, "int8_t"), "i8.u": (1, "uint8_t"), "i8": (1, "uint8_t"),
    "i16.s": (2, "int16_t"), "i16.u": (2, "uint16_t"), "i16": (2, "uint16_t"),
    "i32": (4, "int32_t"), "i64": (8, "int64_t"), "f32": (4, "float"), "f64": (8, "double"),
}


# ---------------------------------------------------------------------------
# Function emitter


class FunctionEmitter:
    """Emits one ``vm.func`` as a C function over the model context."""

    def __init__(self, program: "ProgramEmitter", func_op, info: FunctionInfo):
        self.program = program
        self.op = func_op
        self.info = info
        self.names: dict[Any, str] = {}      # SSA value -> C expression
        self.decls: dict[str, str] = {}      # C local -> C type (declaration order)
        self.ref_locals: list[str] = []
        self.lines: list[str] = []
        self.blocks = list(func_op.regions[0].blocks)
        self.block_index = {self._bkey(b): i for i, b in enumerate(self.blocks)}
        self.loop_blocks = self._blocks_in_cycles()
        self.uses: dict[str, int] = {}
        self._tmp = 0
        self._cur_block = 0

    # -- helpers -----------------------------------------------------------
    @staticmethod
    def _bkey(block):
        return block

    def _blocks_in_cycles(self) -> set[int]:
        succ: dict[int, list[int]] = {}
        for i, b in enumerate(self.blocks):
            ops = list(b.operations)
            term = ops[-1] if ops else None
            succ[i] = [self.block_index[s] for s in term.successors] if term else []
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

    def error(self, op, message: str) -> TfaotError:
        return TfaotError(
            f"emit: {message} (op '{op.name}' in function @{self.info.vm_name}, {_loc(op)})")

    def declare(self, value) -> str:
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
        try:
            expr = self.names[value]
        except KeyError:
            raise TfaotError(f"emit: value {value.get_name()} used before definition "
                             f"in @{self.info.vm_name}") from None
        self.uses[expr] = self.uses.get(expr, 0) + 1
        rd = self.program.rodata_by_expr.get(expr)
        if rd is not None:
            rd.used = True
        return expr

    def line(self, text: str) -> None:
        self.lines.append("  " + text)

    def block(self, text: str, indent: str = "  ") -> None:
        for ln in str(text).splitlines():
            if ln.strip():
                self.lines.append(indent + ln)

    def result(self, op, i: int = 0) -> str:
        return self.declare(op.results[i])

    def assign_ref(self, op, target: str) -> None:
        """Before redefining a ref local inside a loop, drop its old value."""
        if self._cur_block in self.loop_blocks:
            self.line(f"tfrt_release(rt, {target}); {target} = NULL;")

    @staticmethod
    def defining_op(value):
        owner = value.owner
        return owner if hasattr(owner, "name") and hasattr(owner, "operands") else None

    def const_int(self, value) -> int | None:
        op = self.defining_op(value)
        if op is None:
            return None
        if op.name in ("vm.const.i32", "vm.const.i64"):
            return _int_attr(op.attributes["value"])
        if op.name in ("vm.const.i32.zero", "vm.const.i64.zero"):
            return 0
        return None

    def rodata_sym(self, value) -> str | None:
        op = self.defining_op(value)
        if op is not None and op.name == "vm.const.ref.rodata":
            return _sym(op.attributes["rodata"])
        return None

    def is_null_const(self, value) -> bool:
        op = self.defining_op(value)
        return op is not None and op.name == "vm.const.ref.zero"

    # -- driver ------------------------------------------------------------
    def emit(self) -> str:
        entry = self.blocks[0]
        params = []
        for i, arg in enumerate(entry.arguments):
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
            for op in block.operations:
                self.emit_op(op)
        unused = [n for n in self.decls if n not in self.ref_locals and not self.uses.get(n)]
        return ops_template().function_body(
            list(self.decls.items()), [(n, is_ref(t)) for n, t in params],
            [is_ref(t) for t in self.info.result_types], self.lines, unused, self.ref_locals)

    def emit_op(self, op) -> None:
        name = op.name
        self.program.ops_used[name] = self.program.ops_used.get(name, 0) + 1
        if name in BINARY_OPS:
            a, b = (self.val(v) for v in op.operands)
            self.line(BINARY_OPS[name].format(r=self.result(op), a=a, b=b))
            return
        if name in UNARY_OPS:
            a = self.val(op.operands[0])
            self.line(UNARY_OPS[name].format(r=self.result(op), a=a))
            return
        if name in SELECT_OPS:
            c, a, b = (self.val(v) for v in op.operands)
            self.line(f"{self.result(op)} = {c} ? {a} : {b};")
            return
        rule: Callable | None = getattr(self, "op_" + name.replace(".", "_"), None)
        if rule is None:
            if name.startswith("vm.buffer."):
                rule = self._buffer_rule(name)
        if rule is None:
            raise self.error(op, f"no C emit rule for VM op '{name}'; tfaot supports the VM "
                             "subset listed in shared/iree-notes.md section 1.2")
        rule(op)

    # -- constants -----------------------------------------------------------
    def op_vm_const_i32(self, op):
        self.names[op.results[0]] = f"INT32_C({_int_attr(op.attributes['value'])})"

    def op_vm_const_i64(self, op):
        v = _int_attr(op.attributes["value"])
        self.names[op.results[0]] = f"INT64_C({v})" if v != -2**63 else "INT64_MIN"

    def op_vm_const_i32_zero(self, op):
        self.names[op.results[0]] = "INT32_C(0)"

    def op_vm_const_i64_zero(self, op):
        self.names[op.results[0]] = "INT64_C(0)"

    def op_vm_const_ref_zero(self, op):
        self.names[op.results[0]] = "NULL"

    def op_vm_const_ref_rodata(self, op):
        rd = self.program.rodata_by_sym[_sym(op.attributes["rodata"])]
        self.names[op.results[0]] = rd.expr

    # -- globals ---------------------------------------------------------------
    def _global(self, op) -> Global:
        return self.program.global_by_sym[_sym(op.attributes["global"])]

    def _load_scalar(self, op):
        g = self._global(op)
        self.line(f"{self.result(op)} = ctx->g.{g.cname};")

    def _store_scalar(self, op):
        g = self._global(op)
        self.line(f"ctx->g.{g.cname} = {self.val(op.operands[0])};")

    op_vm_global_load_i32 = op_vm_global_load_i64 = op_vm_global_load_f32 = _load_scalar
    op_vm_global_store_i32 = op_vm_global_store_i64 = op_vm_global_store_f32 = _store_scalar

    def op_vm_global_load_ref(self, op):
        g = self._global(op)
        r = self.result(op)
        self.assign_ref(op, r)
        self.line(f"{r} = tfrt_retain(ctx->g.{g.cname});")

    def op_vm_global_store_ref(self, op):
        g = self._global(op)
        v = self.val(op.operands[0])
        self.block(ops_template().global_store_ref(g.cname, v))

    # -- refs ------------------------------------------------------------------
    def op_vm_discard_refs(self, op):
        for v in op.operands:
            expr = self.val(v)
            if expr in self.ref_locals:
                self.line(f"tfrt_release(rt, {expr}); {expr} = NULL;")

    def op_vm_select_ref(self, op):
        c, a, b = (self.val(v) for v in op.operands)
        r = self.result(op)
        self.assign_ref(op, r)
        self.line(f"{r} = tfrt_retain({c} ? {a} : {b});")

    # -- control flow ----------------------------------------------------------
    def _branch(self, block, operands) -> str:
        """Parallel copy of branch operands into the target's block args."""
        copies = []
        for arg, v in zip(block.arguments, operands):
            tmp = f"t{self._tmp}_"
            self._tmp += 1
            copies.append((tmp, ctype_of(str(arg.type)), self.val(v), self.names[arg],
                           is_ref(str(arg.type))))
        return ops_template().branch(copies, self.block_index[block])

    def op_vm_br(self, op):
        self.block(self._branch(op.successors[0], list(op.operands)))

    def op_vm_cond_br(self, op):
        t_block, f_block = op.successors
        n_true = len(t_block.arguments)
        operands = list(op.operands)
        cond = self.val(operands[0])
        self.line(f"if ({cond}) {{")
        self.block(self._branch(t_block, operands[1:1 + n_true]), "    ")
        self.line("} else {")
        self.block(self._branch(f_block, operands[1 + n_true:]), "    ")
        self.line("}")

    def op_vm_return(self, op):
        for i, v in enumerate(op.operands):
            expr = self.val(v)
            if is_ref(str(v.type)):
                self.line(f"*result{i} = tfrt_retain({expr});")
            else:
                self.line(f"*result{i} = {expr};")
        self.line("goto done;")

    def op_vm_fail(self, op):
        code = self.val(op.operands[0])
        msg = _attr(op, "message")
        text = str(msg.value if msg is not None and hasattr(msg, "value") else "")
        text = text.replace("*/", "* /")
        self.line(f"/* vm.fail: {text} */")
        self.line(f"ctx->fail_code = {code};")
        self.line("status = TFRT_STATUS_PROGRAM_FAILED;")
        self.line("goto done;")

    def _check(self, op, kind: str):
        operands = list(op.operands)
        if kind == "nz":
            cond = f"{self.val(operands[0])}"
        elif kind == "eq":
            cond = f"{self.val(operands[0])} == {self.val(operands[1])}"
        else:
            cond = f"{self.val(operands[0])} != {self.val(operands[1])}"
        self.line(f"if (!({cond})) {{ status = TFRT_STATUS_PROGRAM_FAILED; goto done; }}")

    def op_vm_check_nz(self, op):
        self._check(op, "nz")

    def op_vm_check_eq(self, op):
        self._check(op, "eq")

    def op_vm_check_ne(self, op):
        self._check(op, "ne")

    # -- vm.buffer.* -----------------------------------------------------------
    def op_vm_buffer_copy(self, op):
        src, soff, dst, doff, length = op.operands
        if self.is_null_const(src):
            raise self.program.null_constant_error(self, op, "vm.buffer.copy source")
        self.line(f"TFRT_TRY(tfrt_buffer_copy({self.val(src)}, {self.val(soff)}, "
                  f"{self.val(dst)}, {self.val(doff)}, {self.val(length)}));")

    def op_vm_buffer_length(self, op):
        b = self.val(op.operands[0])
        self.line(f"if (!{b}) {{ status = TFRT_STATUS_NULL_REF; goto done; }}")
        self.line(f"{self.result(op)} = (int64_t){b}->length;")

    def _buffer_rule(self, name: str):
        parts = name.split(".")  # vm.buffer.<verb>.<type>[.<ext>]
        if len(parts) < 4:
            return None
        verb, suffix = parts[2], ".".join(parts[3:])
        if suffix not in _BUFFER_ELEMS:
            return None
        width, ctype = _BUFFER_ELEMS[suffix]

        def fill(op):
            b, off, n, value = (self.val(v) for v in op.operands)
            self.line(f"TFRT_TRY(tfrt_buffer_fill({b}, {off}, {n}, (uint64_t){value}, {width}));")

        def load(op):
            b, idx = (self.val(v) for v in op.operands)
            r = self.result(op)
            self.line(f"{{ {ctype} e_ = 0; TFRT_TRY(tfrt_buffer_load({b}, {idx}, {width}, &e_)); "
                      f"{r} = e_; }}")

        def store(op):
            operands = list(op.operands)
            # vm.buffer.store.T %buffer[%index], %value
            b, idx, value = (self.val(v) for v in operands)
            self.line(f"{{ {ctype} e_ = ({ctype}){value}; "
                      f"TFRT_TRY(tfrt_buffer_store({b}, {idx}, {width}, &e_)); }}")

        return {"fill": fill, "load": load, "store": store}.get(verb)

    # -- calls to imports ------------------------------------------------------
    def op_vm_call(self, op):
        callee = _sym(op.attributes["callee"])
        rule = getattr(self, "call_" + callee.replace(".", "_"), None)
        if rule is None:
            if callee in self.program.functions:
                return self._internal_call(op, callee)
            raise self.error(op, f"no C emit rule for import '{callee}'")
        rule(op, [list(op.operands)])

    def op_vm_call_variadic(self, op):
        callee = _sym(op.attributes["callee"])
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
        rule = getattr(self, "call_" + callee.replace(".", "_"), None)
        if rule is None:
            raise self.error(op, f"no C emit rule for import '{callee}'")
        rule(op, groups, variadic=True)

    def _internal_call(self, op, callee):
        target = self.program.functions[callee]
        args = [self.val(v) for v in op.operands]
        outs = []
        for i, r in enumerate(op.results):
            name = self.declare(r)
            self.assign_ref(op, name)
            outs.append("&" + name)
        self.line(f"TFRT_TRY({target.cname}(ctx{''.join(', ' + a for a in args + outs)}));")

    @staticmethod
    def _flat(groups) -> list:
        return [g[0] if isinstance(g, list) and len(g) == 1 else g for g in groups]

    def call_hal_inline_buffer_allocate(self, op, groups, variadic=False):
        align, size = (v for v in op.operands)
        r0 = self.result(op, 0)
        r1 = self.result(op, 1)
        self.assign_ref(op, r0)
        self.assign_ref(op, r1)
        self.line(f"TFRT_TRY(tfrt_buffer_allocate(rt, {self.val(align)}, {self.val(size)}, &{r0}));")
        self.line(f"{r1} = tfrt_retain({r0});")

    def call_hal_inline_buffer_storage(self, op, groups, variadic=False):
        r = self.result(op)
        self.assign_ref(op, r)
        self.line(f"TFRT_TRY(tfrt_buffer_storage({self.val(op.operands[0])}, &{r}));")

    def call_hal_inline_buffer_length(self, op, groups, variadic=False):
        b = self.val(op.operands[0])
        self.line(f"if (!{b}) {{ status = TFRT_STATUS_NULL_REF; goto done; }}")
        self.line(f"{self.result(op)} = (int64_t){b}->length;")

    def _shape_array(self, shape_values) -> tuple[str, str]:
        if not shape_values:
            return "0", "NULL"
        dims = ", ".join(self.val(v) for v in shape_values)
        return str(len(shape_values)), f"(const int64_t[]){{{dims}}}"

    def call_hal_inline_buffer_view_create(self, op, groups, variadic=False):
        buf, off, length, etype, enc = (g[0] for g in groups[:5])
        rank, shape = self._shape_array(groups[5] if len(groups) > 5 else [])
        r = self.result(op)
        self.assign_ref(op, r)
        self.line(f"TFRT_TRY(tfrt_view_create(rt, {self.val(buf)}, {self.val(off)}, "
                  f"{self.val(length)}, {self.val(etype)}, {self.val(enc)}, {rank}, {shape}, &{r}));")

    def call_hal_inline_buffer_view_assert(self, op, groups, variadic=False):
        view, msg, etype, enc = (g[0] for g in groups[:4])
        rank, shape = self._shape_array(groups[4] if len(groups) > 4 else [])
        text = self.program.rodata_text(self.rodata_sym(msg))
        self.line(f"/* check {text} */")
        self.line(f"TFRT_TRY(tfrt_view_assert({self.val(view)}, {self.val(etype)}, "
                  f"{self.val(enc)}, {rank}, {shape}));")

    def call_hal_inline_buffer_view_buffer(self, op, groups, variadic=False):
        r = self.result(op)
        self.assign_ref(op, r)
        self.line(f"TFRT_TRY(tfrt_view_buffer({self.val(op.operands[0])}, &{r}));")

    def call_hal_inline_buffer_view_dim(self, op, groups, variadic=False):
        view, index = op.operands
        self.line(f"TFRT_TRY(tfrt_view_dim({self.val(view)}, {self.val(index)}, "
                  f"&{self.result(op)}));")

    def call_hal_inline_buffer_view_rank(self, op, groups, variadic=False):
        v = self.val(op.operands[0])
        self.line(f"if (!{v}) {{ status = TFRT_STATUS_NULL_REF; goto done; }}")
        self.line(f"{self.result(op)} = (int32_t){v}->rank;")

    def call_hal_inline_buffer_view_element_type(self, op, groups, variadic=False):
        v = self.val(op.operands[0])
        self.line(f"if (!{v}) {{ status = TFRT_STATUS_NULL_REF; goto done; }}")
        self.line(f"{self.result(op)} = (int32_t){v}->element_type;")

    def call_hal_loader_executable_query_support(self, op, groups, variadic=False):
        self.line(f"TFRT_TRY(tfrt_executable_query_support({self.val(op.operands[0])}, "
                  f"&{self.result(op)}));")

    def call_hal_loader_executable_load(self, op, groups, variadic=False):
        fmt, data, consts = op.operands
        lib = self.rodata_sym(data)
        if lib is None:
            raise self.error(op, "executable data is not a rodata constant")
        r = self.result(op)
        self.assign_ref(op, r)
        self.line(f"/* kernel library {self.program.rodata_text(lib)} */")
        self.line(f"TFRT_TRY(tfrt_executable_load(rt, {self.val(fmt)}, {self.val(data)}, "
                  f"{self.val(consts)}, &{r}));")

    def call_hal_loader_executable_lookup_function(self, op, groups, variadic=False):
        exe, fname = op.operands
        sym = self.rodata_sym(fname)
        if sym is None:
            raise self.error(op, "dispatch name is not a rodata constant")
        slot = self.program.function_slot(self.program.rodata_text(sym))
        r = self.result(op)
        self.line(f"TFRT_TRY(tfrt_executable_lookup({self.val(exe)}, {slot}u, &{r})); "
                  f"/* {self.program.prog.function_names[slot]} */")

    def call_hal_loader_executable_dispatch(self, op, groups, variadic=False):
        exe, fid, wx, wy, wz = (g[0] for g in groups[:5])
        consts = groups[5] if len(groups) > 5 else []
        binds = groups[6] if len(groups) > 6 else []
        # Name of the dispatch, for the comment.
        lk = self.defining_op(fid)
        label = ""
        if lk is not None and lk.name == "vm.call":
            sym = self.rodata_sym(lk.operands[1])
            label = self.program.rodata_text(sym) if sym else ""
        for i, (buf, _, _) in enumerate(binds):
            if self.is_null_const(buf):
                raise self.program.null_constant_error(
                    self, op, f"binding {i} of dispatch '{label}'")
        self.block(ops_template().dispatch(
            label, self.val(exe), self.val(fid), self.val(wx), self.val(wy), self.val(wz),
            [self.val(c) for c in consts],
            [(self.val(b), self.val(o), self.val(n)) for b, o, n in binds]))


# ---------------------------------------------------------------------------
# Program emitter


class ProgramEmitter:
    """Reads a VM module and renders the C of all its functions."""

    def __init__(self, vm_asm: str, prefix: str):
        from iree.compiler import ir

        self.ir = ir
        self.prefix = prefix
        self.context = ir.Context()
        try:
            self.module = ir.Module.parse(vm_asm, self.context)
        except Exception as e:  # MLIRError
            raise TfaotError(f"emit: cannot parse the VM program: {str(e).splitlines()[0]}") from e
        vm_modules = [op for op in self.module.body.operations if op.name == "vm.module"]
        if len(vm_modules) != 1:
            raise TfaotError(f"emit: expected one vm.module, found {len(vm_modules)}")
        self.vm_module = vm_modules[0]
        self.prog = VMProgram(module_name=_sym(self.vm_module.attributes["sym_name"]))
        self.rodata_by_sym: dict[str, Rodata] = {}
        self.rodata_by_expr: dict[str, Rodata] = {}
        self.global_by_sym: dict[str, Global] = {}
        self.functions: dict[str, FunctionInfo] = {}
        self.ops_used = self.prog.ops_used

    # -- module-level ops ----------------------------------------------------
    def collect(self) -> None:
        ir = self.ir
        for op in self.vm_module.regions[0].blocks[0].operations:
            name = op.name
            if name == "vm.rodata":
                sym = _sym(op.attributes["sym_name"])
                align = _int_attr(op.attributes["alignment"]) if "alignment" in op.attributes else 1
                rd = Rodata(sym=sym, cname=f"{self.prefix}_rd_{c_ident(sym)}",
                            data=rodata_bytes(op.attributes["value"], ir), alignment=max(1, align))
                self.rodata_by_sym[sym] = rd
                self.rodata_by_expr[rd.expr] = rd
                self.prog.rodata.append(rd)
            elif name.startswith("vm.global."):
                sym = _sym(op.attributes["sym_name"])
                type_str = str(ir.TypeAttr(op.attributes["type"]).value)
                init = None
                if "initial_value" in op.attributes:
                    a = op.attributes["initial_value"]
                    init = ir.IntegerAttr(a).value if name in ("vm.global.i32", "vm.global.i64") \
                        else ir.FloatAttr(a).value
                if name == "vm.global.ref" and "initial_value" in op.attributes:
                    raise TfaotError(f"emit: ref global @{sym} with an initial value is not supported")
                g = Global(sym=sym, cname=c_ident(sym), ctype=ctype_of(type_str),
                           is_ref=name == "vm.global.ref", initial=init)
                self.global_by_sym[sym] = g
                self.prog.globals.append(g)
            elif name == "vm.func":
                sym = _sym(op.attributes["sym_name"])
                ftype = ir.TypeAttr(op.attributes["function_type"]).value
                ftype = ir.FunctionType(ftype)
                decl = ""
                if "iree.reflection" in op.attributes:
                    refl = ir.DictAttr(op.attributes["iree.reflection"])
                    if "iree.abi.declaration" in refl:
                        decl = ir.StringAttr(refl["iree.abi.declaration"]).value
                info = FunctionInfo(vm_name=sym, cname=f"{self.prefix}_vm_{c_ident(sym)}",
                                    arg_types=[str(t) for t in ftype.inputs],
                                    result_types=[str(t) for t in ftype.results],
                                    declaration=decl, prefix=self.prefix)
                self.functions[sym] = info
                self.prog.functions[sym] = info
            elif name == "vm.export":
                fn = _sym(op.attributes["function_ref"])
                export = _sym(op.attributes["export_name"]) if "export_name" in op.attributes else fn
                self.prog.exports[export] = fn
            elif name in ("vm.import", "vm.module_terminator"):
                pass
            else:
                raise TfaotError(f"emit: no C emit rule for module-level op '{name}' ({_loc(op)})")

    def rodata_text(self, sym: str | None) -> str:
        if sym is None or sym not in self.rodata_by_sym:
            return ""
        return self.rodata_by_sym[sym].data.rstrip(b"\0").decode("utf-8", "replace")

    def function_slot(self, name: str) -> int:
        if name not in self.prog.function_names:
            self.prog.function_names.append(name)
        return self.prog.function_names.index(name)

    def null_constant_error(self, fe: FunctionEmitter, op, what: str) -> TfaotError:
        return TfaotError(
            f"emit: {what} in @{fe.info.vm_name} is a null buffer ({_loc(op)}). This is the "
            "iree-compile inline-dynamic dropped-constant bug (iree-notes 1.4): a constant that "
            "needs its own buffer (e.g. storing a plain constant into a state global, or "
            "returning a constant) is lost. Route the constant through a computation, e.g. "
            "'state = state * 0 + constant', or give the global that initial value instead.")

    # -- memory plan ---------------------------------------------------------
    def plan_memory(self) -> None:
        per_function: list[dict[int, int]] = []
        view_need = 1
        exe_sites = 0
        global_classes: dict[str, set[int]] = {}
        all_classes: set[int] = set()
        for fn_op in self._func_ops():
            fe_blocks = list(fn_op.regions[0].blocks)
            dummy = FunctionEmitter(self, fn_op, self.functions[_sym(fn_op.attributes["sym_name"])])
            loops = dummy.loop_blocks
            counts: dict[int, int] = {}
            views = 0
            alloc_class: dict[Any, int] = {}
            for bi, block in enumerate(fe_blocks):
                weight = _LOOP_SITE_WEIGHT if bi in loops else 1
                for op in block.operations:
                    callee = _sym(op.attributes["callee"]) if "callee" in op.attributes else ""
                    if op.name == "vm.call" and callee == "hal_inline.buffer.allocate":
                        size = dummy.const_int(op.operands[1])
                        if size is None:
                            raise TfaotError(
                                f"emit: buffer size of an allocation in @{dummy.info.vm_name} is "
                                f"not a constant ({_loc(op)}); dynamic shapes are not supported "
                                "by the CPU backend yet")
                        cls = max(_ARENA_ALIGN, -(-size // _ARENA_ALIGN) * _ARENA_ALIGN)
                        counts[cls] = counts.get(cls, 0) + weight
                        all_classes.add(cls)
                        for r in op.results:
                            alloc_class[r] = cls
                    elif callee == "hal_inline.buffer_view.create":
                        views += weight
                    elif callee == "hal_loader.executable.load":
                        exe_sites += weight
                    elif op.name == "vm.call" and callee == "hal_inline.buffer.storage":
                        src = op.operands[0]
                        if src in alloc_class:
                            alloc_class[op.results[0]] = alloc_class[src]
                    elif op.name == "vm.global.store.ref":
                        g = _sym(op.attributes["global"])
                        if self.global_by_sym[g].ctype != "tfrt_buffer *":
                            continue
                        cls = alloc_class.get(op.operands[0])
                        global_classes.setdefault(g, set()).add(cls if cls is not None else -1)
            per_function.append(counts)
            view_need = max(view_need, views)
        need: dict[int, int] = {}
        for counts in per_function:
            for cls, n in counts.items():
                need[cls] = max(need.get(cls, 0), n)
        biggest = max(all_classes) if all_classes else _ARENA_ALIGN
        for g, classes in global_classes.items():
            for cls in classes:
                cls = biggest if cls == -1 else cls
                need[cls] = need.get(cls, 0) + 1
        self.prog.pools = sorted(need.items())
        self.prog.view_count = view_need
        self.prog.executable_count = max(1, exe_sites)

    def _func_ops(self):
        return [op for op in self.vm_module.regions[0].blocks[0].operations if op.name == "vm.func"]

    # -- driver ----------------------------------------------------------------
    def emit(self) -> VMProgram:
        with self.context:
            self.collect()
            for fn_op in self._func_ops():
                info = self.functions[_sym(fn_op.attributes["sym_name"])]
                info.body = FunctionEmitter(self, fn_op, info).emit()
            self.plan_memory()
        return self.prog


def translate(vm_asm: str, prefix: str) -> VMProgram:
    """Translates the VM program text into C function bodies and program facts."""
    return ProgramEmitter(vm_asm, prefix).emit()


def function_signature(info: FunctionInfo) -> str:
    """C prototype of a translated VM function (without the trailing ';')."""
    params = [f"struct {info.prefix}_ctx *ctx"]
    for i, t in enumerate(info.arg_types):
        ct = ctype_of(t)
        params.append(f"{ct}{'' if ct.endswith('*') else ' '}arg{i}")
    for i, t in enumerate(info.result_types):
        ct = ctype_of(t)
        params.append(f"{ct}{'' if ct.endswith('*') else ' '}*result{i}")
    return f"static int {info.cname}({', '.join(params)})"
