"""The one table of tensor element types, for every stage that names one.

numpy name (what ``TensorInfo.dtype`` holds) -> MLIR element type, IREE's
element-type code (what ``hal_inline.buffer_view.create`` receives and the
generated C checks), C type, and size in bytes.
"""
from __future__ import annotations

from dataclasses import dataclass

from .errors import TfaotError


@dataclass(frozen=True)
class DType:
    name: str        # numpy dtype name, e.g. "float32"
    mlir: str        # MLIR element type, e.g. "f32"
    iree_code: int   # IREE HAL element type, e.g. 0x21000020
    ctype: str       # C type of one element in the public API
    size: int        # bytes per element


DTYPES: dict[str, DType] = {d.name: d for d in (
    DType("float32", "f32", 0x21000020, "float", 4),
    DType("float64", "f64", 0x21000040, "double", 8),
    DType("float16", "f16", 0x21000010, "uint16_t", 2),
    DType("int8", "i8", 0x10000008, "int8_t", 1),
    DType("int16", "i16", 0x10000010, "int16_t", 2),
    DType("int32", "i32", 0x10000020, "int32_t", 4),
    DType("int64", "i64", 0x10000040, "int64_t", 8),
    # IREE's codes: 0x10 signless integer, 0x11 signed, 0x12 unsigned. The
    # compiled step asserts 0x12 on an unsigned input's buffer view (a uint8
    # image); with 0x11 every uint8 step was refused as a type mismatch.
    DType("uint8", "ui8", 0x12000008, "uint8_t", 1),
    DType("uint16", "ui16", 0x12000010, "uint16_t", 2),
    DType("uint32", "ui32", 0x12000020, "uint32_t", 4),
    DType("bool", "i1", 0x13000008, "uint8_t", 1),
)}

BY_MLIR: dict[str, DType] = {d.mlir: d for d in DTYPES.values()}


def dtype(name: str, what: str = "tensor") -> DType:
    """The table row of numpy dtype ``name``, or an error naming ``what``."""
    if name not in DTYPES:
        raise TfaotError(f"{what} has dtype {name}, which the C API does not support "
                         f"(supported: {', '.join(DTYPES)})")
    return DTYPES[name]
