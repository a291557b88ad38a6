"""Footprint: flash and RAM of a library on its target, read from the ELF objects.

Read here rather than with size(1) so every target's objects can be measured
without that target's binutils.
"""
from __future__ import annotations

import struct

from ..errors import TfaotError


def elf_sections(data: bytes) -> dict[str, int]:
    """Section name -> size of an ELF relocatable object (32/64-bit, either endianness)."""
    if data[:4] != b"\x7fELF":
        raise TfaotError("package: footprint: not an ELF object")
    is64, end = data[4] == 2, "<" if data[5] == 1 else ">"
    if is64:
        shoff, = struct.unpack_from(end + "Q", data, 0x28)
        shentsize, shnum, shstrndx = struct.unpack_from(end + "HHH", data, 0x3A)
    else:
        shoff, = struct.unpack_from(end + "I", data, 0x20)
        shentsize, shnum, shstrndx = struct.unpack_from(end + "HHH", data, 0x2E)

    def header(i):  # (name offset, type, flags, offset, size)
        base = shoff + i * shentsize
        if is64:
            name, typ, flags, _, off, size = struct.unpack_from(end + "IIQQQQ", data, base)
        else:
            name, typ, flags, _, off, size = struct.unpack_from(end + "IIIIII", data, base)
        return name, typ, flags, off, size

    strtab_off = header(shstrndx)[3]
    sections = {}
    for i in range(1, shnum):
        name_off, _, flags, _, size = header(i)
        if not flags & 0x2:  # SHF_ALLOC: only what ends up in the image
            continue
        end_name = data.index(b"\0", strtab_off + name_off)
        name = data[strtab_off + name_off:end_name].decode()
        sections[name] = sections.get(name, 0) + size
    return sections


def _sum(sections: dict[str, int], *prefixes: str) -> int:
    return sum(size for name, size in sections.items()
               if any(name == p or name.startswith(p + ".") for p in prefixes))


def measure_footprint(kernels: bytes | None, host: bytes | None, ctx_size: int) -> dict:
    """Bytes of flash (code, weights, constants) and RAM (one context) on the target.

    ``weight_bytes`` is the read-only data of the kernels and of the host
    program: the weights live in the kernels (baked into the dispatch
    functions) or, when ``__init`` packs them (Target.pack_weights), in the
    host program's rodata; ``const_bytes`` is the host program's part of it.
    ``static_data_bytes`` is the library's own .data/.bss (immutable buffer
    headers), shared by all contexts.
    """
    k = elf_sections(kernels) if kernels is not None else {}
    h = elf_sections(host) if host is not None else {}
    return {
        "code_bytes": _sum(k, ".text") + _sum(h, ".text"),
        "weight_bytes": _sum(k, ".rodata", ".lrodata") + _sum(h, ".rodata", ".lrodata"),
        "const_bytes": _sum(h, ".rodata", ".lrodata"),
        "static_data_bytes": _sum(k, ".data", ".bss") + _sum(h, ".data", ".bss"),
        "ram_bytes": ctx_size,
        "host_program_measured": host is not None,
    }
