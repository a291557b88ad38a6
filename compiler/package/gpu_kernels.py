"""GPU executables: IREE's executable containers -> the shim's C tables.

A GPU program loads its kernels from read-only data of the host program
(``hal_loader.executable.load(format, data)``). The data is a container: a
64-byte header (``u32 magic``, ``u32 version``, ``u64 content size``, 48
reserved bytes) and a FlatBuffer (gpu-notes 3). It is read here, at build
time, so the shim needs no FlatBuffer reader: the generated code gives the
backend one ``tfrt_vk_pipeline_desc`` per pipeline, whose offsets point into
the container, which stays in NAME.c unchanged (CUDA: one
``tfrt_cu_kernel_desc`` per kernel, and the PTX image in place).

VKE1 field order (IREE's vulkan_executable_def.fbs, 3.13):
ExecutableDef: 0 pipelines, 1 descriptor_set_layouts, 2 pipeline_layouts,
3 shader_modules. PipelineDef: 0 shader_module_ordinal, 1 entry_point,
2 pipeline_layout_ordinal, 3 subgroup_size, 5 dispatch_abi (0 = descriptors).
DescriptorSetLayoutDef: 0 bindings. BindingDef: 0 binding, 1 descriptor_type,
2 count. PipelineLayoutDef: 0 set-layout ordinals, 1 push_constant_ranges
(structs {stage, offset, size}). ShaderModuleDef: 0 spirv_code.

CDA1 field order (IREE's cuda_executable_def.fbs, 3.13): ExecutableDef:
0 exports, 1 modules, 2 source_files. ExportDef: 0 module_ordinal,
1 kernel_name, 2 block_dims (struct {x, y, z: u32}), 3 block_shared_memory_size,
4 constant_count, 5 binding_flags ([u64], one per binding). ModuleDef:
0 ptx_image (string). Kernel ABI: one 64-bit pointer parameter per binding,
then one 32-bit parameter per constant (gpu-notes 5).
"""
from __future__ import annotations

import struct
from dataclasses import dataclass

from ..errors import TfaotError

CONTAINER_HEADER_BYTES = 64
VULKAN_FORMAT = "vulkan-spirv-fb"
_STORAGE_BUFFER = 7    # VkDescriptorType VK_DESCRIPTOR_TYPE_STORAGE_BUFFER
_SPIRV_MAGIC = 0x07230203
MAX_BINDINGS = 32      # TFRT_VK_MAX_BINDINGS in runtime_shim/tfrt_vulkan.h
CUDA_FORMAT = "cuda-nvptx-fb"
CUDA_MAX_BINDINGS = 32   # TFRT_CU_MAX_BINDINGS in runtime_shim/tfrt_cuda.h
CUDA_MAX_CONSTANTS = 64  # TFRT_CU_MAX_CONSTANTS


@dataclass(frozen=True)
class VulkanPipeline:
    """One row of the shim's pipeline table (byte offsets are into the container)."""

    entry: str
    spirv_offset: int
    spirv_words: int
    entry_offset: int
    binding_count: int
    push_constant_bytes: int
    subgroup_size: int


@dataclass(frozen=True)
class CudaKernel:
    """One row of the CUDA shim's kernel table (name_offset is into the container)."""

    name: str
    name_offset: int
    block_dims: tuple[int, int, int]
    shared_memory_bytes: int
    constant_count: int
    binding_count: int


@dataclass(frozen=True)
class CudaExecutable:
    """One CDA1 container: its PTX (a NUL-terminated string in the container) and kernels."""

    ptx_offset: int
    ptx_bytes: int
    kernels: list[CudaKernel]


class _Table:
    """A FlatBuffer table: fields by index, as the schema numbers them."""

    def __init__(self, buf: bytes, pos: int):
        self.buf, self.pos = buf, pos
        vtable = pos - struct.unpack_from("<i", buf, pos)[0]
        vsize = struct.unpack_from("<H", buf, vtable)[0]
        self.fields = [struct.unpack_from("<H", buf, vtable + 4 + 2 * i)[0]
                       for i in range((vsize - 4) // 2)]

    def _at(self, i: int) -> int:
        return self.fields[i] if i < len(self.fields) else 0

    def u32(self, i: int) -> int:
        off = self._at(i)
        return struct.unpack_from("<I", self.buf, self.pos + off)[0] if off else 0

    def u8(self, i: int) -> int:
        off = self._at(i)
        return self.buf[self.pos + off] if off else 0

    def vector(self, i: int) -> tuple[int, int]:
        """(position of the first element, element count); (0, 0) when absent."""
        off = self._at(i)
        if not off:
            return 0, 0
        field = self.pos + off
        start = field + struct.unpack_from("<I", self.buf, field)[0]
        return start + 4, struct.unpack_from("<I", self.buf, start)[0]

    def tables(self, i: int) -> list["_Table"]:
        start, count = self.vector(i)
        return [_Table(self.buf, e + struct.unpack_from("<I", self.buf, e)[0])
                for e in (start + 4 * k for k in range(count))]

    def u32s(self, i: int) -> list[int]:
        start, count = self.vector(i)
        return list(struct.unpack_from(f"<{count}I", self.buf, start)) if count else []


def vulkan_pipelines(container: bytes, label: str) -> list[VulkanPipeline]:
    """Reads a VKE1 container; ``label`` names it in errors."""
    fb = _container_body(container, b"VKE1", label, "Vulkan")
    base = CONTAINER_HEADER_BYTES
    root = _Table(fb, struct.unpack_from("<I", fb, 0)[0])
    set_layouts, layouts, modules = root.tables(1), root.tables(2), root.tables(3)
    pipelines = []
    for p in root.tables(0):
        entry_start, entry_len = p.vector(1)
        entry = fb[entry_start:entry_start + entry_len].decode()
        if p.u8(5) != 0:
            raise TfaotError(f"package: pipeline '{entry}' of {label} uses buffer device "
                             "addresses; the Vulkan shim binds descriptors only")
        layout = layouts[p.u32(2)]
        bindings = [b for ordinal in layout.u32s(0) for b in set_layouts[ordinal].tables(0)]
        if len(layout.u32s(0)) != 1 or sorted(b.u32(0) for b in bindings) != \
                list(range(len(bindings))) or any(b.u32(1) != _STORAGE_BUFFER for b in bindings):
            raise TfaotError(f"package: pipeline '{entry}' of {label} does not bind storage "
                             "buffers 0..N-1 of one set, which the Vulkan shim expects")
        if len(bindings) > MAX_BINDINGS:
            raise TfaotError(f"package: pipeline '{entry}' of {label} has {len(bindings)} "
                             f"bindings; the Vulkan shim supports {MAX_BINDINGS}")
        push_start, push_count = layout.vector(1)
        ranges = [struct.unpack_from("<III", fb, push_start + 12 * k) for k in range(push_count)]
        if any(offset != 0 for _, offset, _ in ranges) or len(ranges) > 1:
            raise TfaotError(f"package: pipeline '{entry}' of {label} has push-constant ranges "
                             f"{ranges}; the Vulkan shim expects one at offset 0")
        spirv_start, spirv_words = modules[p.u32(0)].vector(0)
        if not spirv_words or struct.unpack_from("<I", fb, spirv_start)[0] != _SPIRV_MAGIC:
            raise TfaotError(f"package: pipeline '{entry}' of {label} has no SPIR-V module")
        pipelines.append(VulkanPipeline(
            entry=entry, spirv_offset=base + spirv_start, spirv_words=spirv_words,
            entry_offset=base + entry_start, binding_count=len(bindings),
            push_constant_bytes=ranges[0][2] if ranges else 0, subgroup_size=p.u32(3)))
    if not pipelines:
        raise TfaotError(f"package: executable {label} has no pipelines")
    return pipelines


def _tables(containers, wanted: str, target: str, read) -> tuple[list[dict], list]:
    """The shim's executable table (one row per container, with its range of
    the entry table) and entry table (pipelines or kernels), for the program's
    containers (``VMProgram.containers``: (format, Rodata) pairs).
    ``read(data, label)`` -> (extra executable columns, entries)."""
    executables, entries = [], []
    for fmt, rodata in containers:
        if fmt != wanted:
            raise TfaotError(f"package: the program loads a '{fmt}' executable; the {target} "
                             f"target expects '{wanted}'")
        extra, found = read(rodata.data, f"@{rodata.sym}")
        executables.append({"container": rodata.cname, **extra, "first": len(entries),
                            "count": len(found)})
        entries.extend(found)
    return executables, entries


def vulkan_tables(containers) -> tuple[list[dict], list[VulkanPipeline]]:
    """The Vulkan shim's executable and pipeline tables."""
    return _tables(containers, VULKAN_FORMAT, "Vulkan",
                   lambda data, label: ({}, vulkan_pipelines(data, label)))


def _container_body(container: bytes, magic: bytes, label: str, what: str) -> bytes:
    """The FlatBuffer after a container's 64-byte header (checked)."""
    found, version, size = struct.unpack_from("<4sIQ", container, 0)
    if found != magic or version != 0 or CONTAINER_HEADER_BYTES + size > len(container):
        raise TfaotError(f"package: executable {label} is not a version-0 {magic.decode()} "
                         f"container (magic {found!r}, version {version}); iree-compile "
                         f"changed its {what} executable format")
    return container[CONTAINER_HEADER_BYTES:CONTAINER_HEADER_BYTES + size]


def _c_string(fb: bytes, start: int, length: int, what: str, label: str) -> str:
    """A FlatBuffer string the shim passes to the driver as a C string: it
    must end with the NUL FlatBuffers writes after every string."""
    if start + length >= len(fb) or fb[start + length] != 0:
        raise TfaotError(f"package: {what} in {label} is not NUL-terminated; the CUDA shim "
                         "passes it to the driver as a C string")
    return fb[start:start + length].decode("utf-8", errors="replace")


def cuda_executable(container: bytes, label: str) -> CudaExecutable:
    """Reads a CDA1 container; ``label`` names it in errors."""
    fb = _container_body(container, b"CDA1", label, "CUDA")
    base = CONTAINER_HEADER_BYTES
    root = _Table(fb, struct.unpack_from("<I", fb, 0)[0])
    modules = root.tables(1)
    if len(modules) != 1:
        raise TfaotError(f"package: executable {label} has {len(modules)} PTX modules; the "
                         "CUDA shim loads one per executable")
    ptx_start, ptx_len = modules[0].vector(0)
    ptx = _c_string(fb, ptx_start, ptx_len, "the PTX image", label)
    if ".entry" not in ptx:
        raise TfaotError(f"package: executable {label} has no PTX kernels")
    kernels = [_cuda_kernel(fb, e, label) for e in root.tables(0)]
    if not kernels:
        raise TfaotError(f"package: executable {label} exports no kernels")
    return CudaExecutable(base + ptx_start, ptx_len, kernels)


def _cuda_kernel(fb: bytes, export: _Table, label: str) -> CudaKernel:
    name_start, name_len = export.vector(1)
    name = _c_string(fb, name_start, name_len, "a kernel name", label)
    dims_at = export._at(2)
    dims = struct.unpack_from("<III", fb, export.pos + dims_at) if dims_at else (0, 0, 0)
    if export.u32(0) != 0 or not all(dims):
        raise TfaotError(f"package: kernel '{name}' of {label} has module {export.u32(0)} and "
                         f"block {dims}; expected module 0 and a non-empty block")
    _, bindings = export.vector(5)
    constants = export.u32(4)
    if bindings > CUDA_MAX_BINDINGS or constants > CUDA_MAX_CONSTANTS:
        raise TfaotError(f"package: kernel '{name}' of {label} has {bindings} bindings and "
                         f"{constants} constants; the CUDA shim supports {CUDA_MAX_BINDINGS} "
                         f"and {CUDA_MAX_CONSTANTS}")
    return CudaKernel(name=name, name_offset=CONTAINER_HEADER_BYTES + name_start,
                      block_dims=tuple(dims), shared_memory_bytes=export.u32(3),
                      constant_count=constants, binding_count=bindings)


def cuda_tables(containers) -> tuple[list[dict], list[CudaKernel]]:
    """The CUDA shim's executable and kernel tables."""
    def read(data: bytes, label: str):
        exe = cuda_executable(data, label)
        return {"ptx_offset": exe.ptx_offset, "ptx_bytes": exe.ptx_bytes}, exe.kernels

    return _tables(containers, CUDA_FORMAT, "CUDA", read)
