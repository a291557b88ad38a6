"""Package stage: translated program + kernel object -> a linkable C library.

Output folder ``out_dir`` (all names fixed, contents deterministic):

    NAME.h             public API (status codes, shapes, ctx size)
    libNAME.a          one relocatable object: NAME.o + kernels (only NAME_* global)
    libNAME.so         shared library (host triple only), for the ctypes harness
    NAME.json          manifest
    NAMEConfig.cmake, CMakeLists.txt   for find_package / add_subdirectory
    src/               what a firmware build compiles itself:
        NAME.c NAME.h NAME_kernels.o, and the runtime shim NAME.c includes:
        tfrt.h tfrt_core.c tfrt_backend.h (core), tfrt_cpu.h tfrt_cpu.c
        tfrt_abi.h (CPU backend), tfrt_status.h (generated, compiler/status.py)

The kernel object's query symbol is renamed to ``NAME_kernels_library_query``
so several models link into one program. The toolchain and its flags come
from the ``Target``; without the target's compiler only src/ is written (the
firmware build compiles it), with the context size still right for the
target (ctx_size.py).

Modules: c_api (render NAME.c / NAME.h), ctx_size, footprint (ELF sizes),
link (toolchain steps), shim (runtime_shim files), library (the entry and
the manifest).
"""
from .c_api import CTX_ALIGN, ApiModel
from .ctx_size import compute_ctx_size
from .footprint import elf_sections, measure_footprint
from .library import cmake_files, package, write_cmake_files
from .link import C_FLAGS, PUBLIC_FUNCTIONS
from .shim import SHIM_BACKENDS, SHIM_FILES, SHIM_STATUS_HEADER

__all__ = ["ApiModel", "CTX_ALIGN", "C_FLAGS", "PUBLIC_FUNCTIONS", "SHIM_BACKENDS", "SHIM_FILES",
           "SHIM_STATUS_HEADER", "cmake_files", "compute_ctx_size", "elf_sections",
           "measure_footprint", "package", "write_cmake_files"]
