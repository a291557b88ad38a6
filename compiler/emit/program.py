"""The VM module as data: what the templates need, collected from module-level ops.

``VMModule.collect`` reads the module-level ops (``vm.rodata``,
``vm.global.*``, ``vm.func`` signatures, ``vm.export``) into a ``VMProgram``
before any function body is emitted; the function rules then add what they
find (dispatch names, kernel libraries, used rodata, op counts).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

from ..errors import TfaotError
from .c_types import c_ident, ctype_of
from .vmir import int_attr, location, symbol

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
    # Index among the data supplied at run time (--weights=file), or None
    # when the data is compiled into NAME.c.
    external: int | None = None

    @property
    def expr(self) -> str:
        if self.external is not None:  # wraps the caller's weights (NAME_init_with_weights)
            return f"(&ctx->weights[{self.external}])"
        return f"(&{self.cname}_buffer)"

    @property
    def text(self) -> str:
        """The data as a string (up to its trailing NULs)."""
        return self.data.rstrip(b"\0").decode("utf-8", "replace")

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
    dispatches: int = 0  # kernel dispatches in the body (where kernels may bind its buffers)
    # @step written as a direct step instead (emit/direct_step.py): its C
    direct: object = None


@dataclass
class VMProgram:
    """Everything the templates need about the host program."""

    module_name: str
    functions: dict[str, FunctionInfo] = field(default_factory=dict)   # by vm name
    exports: dict[str, str] = field(default_factory=dict)              # export -> vm name
    globals: list[Global] = field(default_factory=list)
    rodata: list[Rodata] = field(default_factory=list)
    function_names: list[str] = field(default_factory=list)            # lookup slots
    library_names: list[str] = field(default_factory=list)             # executable.load data
    # GPU formats: (format, rodata) of each executable container the program loads.
    containers: list[tuple[str, Rodata]] = field(default_factory=list)
    pools: list[tuple[int, int]] = field(default_factory=list)         # (size, count)
    view_count: int = 1
    #: @get_state returns views of the state itself (emit/state_reuse.py):
    #: writing through them changes the state (one stream's rows: c_api)
    get_state_aliases: bool = False
    view_rank: int = 1      # the most dimensions of a view the program creates
    executable_count: int = 1
    ops_used: dict[str, int] = field(default_factory=dict)

    @property
    def external_rodata(self) -> list[Rodata]:
        """The data supplied at run time (--weights=file), in index order."""
        return [rd for rd in self.rodata if rd.external is not None]

    @property
    def arena_bytes(self) -> int:
        return sum(size * count for size, count in self.pools)

    @property
    def buffer_slot_count(self) -> int:
        return max(1, sum(count for _, count in self.pools))

    # -- entry points the frontend exports --------------------------------------
    def entry(self, export: str) -> FunctionInfo | None:
        """The function exported as ``export``, or None."""
        return self.functions.get(self.exports.get(export, ""))

    @property
    def step(self) -> FunctionInfo | None:
        return self.entry("step")

    @property
    def reset(self) -> FunctionInfo | None:
        return self.entry("reset")

    @property
    def get_state(self) -> FunctionInfo | None:
        return self.entry("get_state")

    @property
    def set_state(self) -> FunctionInfo | None:
        return self.entry("set_state")

    @property
    def init(self) -> FunctionInfo | None:
        """The module initializer (export ``__init``)."""
        return self.entry("__init")


# ---------------------------------------------------------------------------
# Collection


class VMModule:
    """One ``vm.module``: its ``VMProgram`` and the symbol tables the rules use."""

    def __init__(self, vm_module, prefix: str, host_sync: bool = False,
                 external_rodata=None):
        self.op = vm_module
        self.prefix = prefix
        # Dispatches complete asynchronously (GPU backends): emit
        # tfrt_backend_sync before host memory accesses and returns.
        self.host_sync = host_sync
        # symbol -> bool: read-only data the caller supplies at run time.
        self.external_rodata = external_rodata or (lambda sym: False)
        self.prog = VMProgram(module_name=symbol(vm_module.attributes["sym_name"]))
        # (function, block index, op index) -> the block size an allocation
        # takes instead of its own (memory.py: an __init buffer that a global
        # keeps takes the class of the global's later, larger buffers)
        self.alloc_sizes: dict[tuple[str, int, int], int] = {}
        # @step's layout as a direct step (emit/direct_step.py), or None
        self.direct_plan = None
        # the state functions' reuse of the old state (emit/state_reuse.py),
        # planned by the driver before the direct step and the memory plan
        self.state_reuse = None
        # dispatch export name -> its executable's dumped source (dispatch_source.py)
        self.executable_sources: dict = {}
        self.rodata_by_sym: dict[str, Rodata] = {}
        self.rodata_by_expr: dict[str, Rodata] = {}
        self.global_by_sym: dict[str, Global] = {}
        self.functions = self.prog.functions
        self.ops_used = self.prog.ops_used

    def module_ops(self) -> list:
        return list(self.op.regions[0].blocks[0].operations)

    def func_ops(self) -> list:
        return [op for op in self.module_ops() if op.name == "vm.func"]

    def collect(self) -> None:
        """Reads the module-level ops; an op without a rule is an error."""
        from iree.compiler import ir

        for op in self.module_ops():
            name = op.name
            if name == "vm.rodata":
                self._rodata(op, ir)
            elif name.startswith("vm.global."):
                self._global(op, ir)
            elif name == "vm.func":
                self._func(op, ir)
            elif name == "vm.export":
                fn = symbol(op.attributes["function_ref"])
                export = symbol(op.attributes["export_name"]) if "export_name" in op.attributes \
                    else fn
                self.prog.exports[export] = fn
            elif name in ("vm.import", "vm.module_terminator"):
                pass
            else:
                raise TfaotError(
                    f"emit: no C emit rule for module-level op '{name}' ({location(op)})")

    def _rodata(self, op, ir) -> None:
        sym = symbol(op.attributes["sym_name"])
        align = int_attr(op.attributes["alignment"]) if "alignment" in op.attributes else 1
        rd = Rodata(sym=sym, cname=f"{self.prefix}_rd_{c_ident(sym)}",
                    data=rodata_bytes(op.attributes["value"], ir), alignment=max(1, align))
        if self.external_rodata(sym):
            rd.external = sum(r.external is not None for r in self.prog.rodata)
        self.rodata_by_sym[sym] = rd
        self.rodata_by_expr[rd.expr] = rd
        self.prog.rodata.append(rd)

    def _global(self, op, ir) -> None:
        name = op.name
        sym = symbol(op.attributes["sym_name"])
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

    def _func(self, op, ir) -> None:
        sym = symbol(op.attributes["sym_name"])
        ftype = ir.FunctionType(ir.TypeAttr(op.attributes["function_type"]).value)
        decl = ""
        if "iree.reflection" in op.attributes:
            refl = ir.DictAttr(op.attributes["iree.reflection"])
            if "iree.abi.declaration" in refl:
                decl = ir.StringAttr(refl["iree.abi.declaration"]).value
        self.functions[sym] = FunctionInfo(
            vm_name=sym, cname=f"{self.prefix}_vm_{c_ident(sym)}",
            arg_types=[str(t) for t in ftype.inputs], result_types=[str(t) for t in ftype.results],
            declaration=decl, prefix=self.prefix)

    # -- facts the function rules add -----------------------------------------
    def rodata_text(self, sym: str | None) -> str:
        if sym is None or sym not in self.rodata_by_sym:
            return ""
        return self.rodata_by_sym[sym].text

    def function_slot(self, name: str) -> int:
        """Slot of a dispatch function name (resolved once, when its executable loads)."""
        if name not in self.prog.function_names:
            self.prog.function_names.append(name)
        return self.prog.function_names.index(name)

    def add_container(self, fmt: str, sym: str) -> Rodata:
        """Records an executable container (GPU kernels) the program loads."""
        rd = self.rodata_by_sym[sym]
        if all(r is not rd for _, r in self.prog.containers):
            self.prog.containers.append((fmt, rd))
        return rd

    def add_library(self, name: str) -> None:
        """Records the name of a kernel library the program loads."""
        if name not in self.prog.library_names:
            self.prog.library_names.append(name)


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
