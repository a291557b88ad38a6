"""The runtime shim that NAME.c includes: a core plus one backend per target kind."""
from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from .. import status as status_mod
from ..resources import shim_dir


@dataclass(frozen=True)
class ShimBackend:
    """One backend of the runtime shim (runtime_shim/, see tfrt_backend.h)."""

    header: str                # included by NAME.c; defines the backend's types
    source: str                # included by NAME.c after SHIM_CORE_SOURCE
    extra: tuple[str, ...] = ()  # other files the backend includes

    @property
    def files(self) -> tuple[str, ...]:
        """Every shim file a library of this backend ships in src/."""
        return (*SHIM_CORE, SHIM_CORE_SOURCE, self.header, self.source, *self.extra)


SHIM_CORE = ("tfrt.h", "tfrt_backend.h")
SHIM_CORE_SOURCE = "tfrt_core.c"
#: Target.shim_backend -> its files.
SHIM_BACKENDS = {"cpu": ShimBackend("tfrt_cpu.h", "tfrt_cpu.c", ("tfrt_abi.h",)),
                 "vulkan": ShimBackend("tfrt_vulkan.h", "tfrt_vulkan.c"),
                 "cuda": ShimBackend("tfrt_cuda.h", "tfrt_cuda.c")}
#: The shim files of the CPU backend (what tfaot.cmake lists).
SHIM_FILES = SHIM_BACKENDS["cpu"].files
#: Written into src/ at package time (not in runtime_shim/), from compiler/status.py.
SHIM_STATUS_HEADER = "tfrt_status.h"


def write_shim(dest: Path, backend: str) -> None:
    """Copies the runtime shim into ``dest`` and writes its generated status header."""
    for f in SHIM_BACKENDS[backend].files:
        shutil.copyfile(shim_dir() / f, dest / f)
    (dest / SHIM_STATUS_HEADER).write_text(status_mod.shim_header())


def shim_texts(backend: str) -> list[str]:
    """The shim headers in the order NAME.c includes them (for c_layout)."""
    shim = SHIM_BACKENDS[backend]
    texts = [status_mod.shim_header()]
    for f in ("tfrt.h", *shim.extra, shim.header, "tfrt_backend.h"):
        texts.append((shim_dir() / f).read_text())
    return texts
