"""C types and names of VM values, and the C-text macros of vm_ops.j2.

``ELEMENT_TYPES`` (numpy dtype name -> IREE element-type code, C type) is a
view of the one dtype table, compiler/dtypes.py.
"""
from __future__ import annotations

import re
from ..dtypes import DTYPES
from ..errors import TfaotError

_REF_CTYPES = {
    "!vm.buffer": "tfrt_buffer *",
    "!vm.ref<!hal.buffer>": "tfrt_buffer *",
    "!vm.ref<!hal.buffer_view>": "tfrt_view *",
    "!vm.ref<!hal.executable>": "tfrt_executable *",
}
_SCALAR_CTYPES = {"i32": "int32_t", "i64": "int64_t", "f32": "float", "f64": "double"}

#: Element types (numpy dtype name -> IREE element-type code, C type), from the
#: one dtype table (compiler/dtypes.py).
ELEMENT_TYPES: dict[str, tuple[int, str]] = {d.name: (d.iree_code, d.ctype)
                                            for d in DTYPES.values()}


def ctype_of(type_str: str, where: str = "") -> str:
    """C type of a VM value type (``i32``, ``!vm.buffer``, ...)."""
    if type_str in _REF_CTYPES:
        return _REF_CTYPES[type_str]
    if type_str in _SCALAR_CTYPES:
        return _SCALAR_CTYPES[type_str]
    raise TfaotError(f"VM type {type_str} is not supported by the C emitter{where}")


def is_ref(type_str: str) -> bool:
    return type_str.startswith("!vm.")


def c_ident(text: str) -> str:
    """A C identifier made from ``text`` (other characters become '_')."""
    s = re.sub(r"[^0-9A-Za-z_]", "_", text)
    return s if s and not s[0].isdigit() else "_" + s


_OPS_TEMPLATE = None


def ops_template():
    """The jinja2 macros of codegen_templates/vm_ops.j2 (loaded once)."""
    global _OPS_TEMPLATE
    if _OPS_TEMPLATE is None:
        from ..resources import template_env

        env = template_env()
        _OPS_TEMPLATE = env.get_template("vm_ops.j2").module
    return _OPS_TEMPLATE
