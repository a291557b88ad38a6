"""Runs a program built with -fsanitize=address and judges LeakSanitizer's
report by who made each allocation.

GPU drivers (lavapipe, the CUDA driver) keep allocations until the process
exits, and how much depends on the CPU and the driver's version: those leaks
are not tfaot's. A leak counts as ours when the first frame after the
allocator is in the program itself (tfaot's C or the test driver); a leak
whose allocating frame is in a shared library, or in a module already
unloaded ("<unknown module>", a driver the loader has closed), is the
library's and is printed, not failed on.
"""
from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass

# LeakSanitizer reports but does not change the exit status: the report is
# judged below. Everything else ASan/UBSan finds still fails the run.
LEAK_ENV = {"ASAN_OPTIONS": "detect_leaks=1:exitcode=1",
            "LSAN_OPTIONS": "exitcode=0"}

_LEAK_HEAD = re.compile(r"^(Direct|Indirect) leak of (\d+) byte\(s\)")
_FRAME = re.compile(r"^\s*#(\d+) 0x[0-9a-f]+ (.*)$")
# Frames of the sanitizer's own allocator interceptors (gcc and clang).
_ALLOCATOR = re.compile(r"\b(__interceptor_|___interceptor_)?(malloc|calloc|realloc|"
                        r"reallocarray|aligned_alloc|posix_memalign|memalign|valloc|strdup|"
                        r"strndup|operator new(\[\])?)\b|libasan|libclang_rt|asan_")


@dataclass(frozen=True)
class Leak:
    kind: str  # "Direct" or "Indirect"
    size: int
    frames: tuple[str, ...]

    @property
    def site(self) -> str:
        """The first frame that is not the allocator: who asked for the memory."""
        for frame in self.frames:
            if not _ALLOCATOR.search(frame):
                return frame
        return ""

    def is_in(self, program: str) -> bool:
        """Allocated by code linked into ``program`` (not by a shared library)."""
        site = self.site
        # The program is built with -g and not stripped, so its own frames
        # always name their function ("in NAME ..."); a frame without one is
        # in a module the loader has closed (which gcc's runtime may even
        # attribute to the program, by a stale module list).
        if not site.startswith("in "):
            return False
        # Then the frame names its source file (file:line) or its module
        # ((/path/module+0x...)).
        module = re.search(r"\(([^()+]+)\+0x[0-9a-f]+\)", site)
        if module:
            return os.path.realpath(module.group(1)) == os.path.realpath(program)
        source = re.search(r" (/[^ :]+):\d+", site)
        return bool(source) and not source.group(1).startswith(("/usr/", "/lib"))


def parse_leaks(report: str) -> list[Leak]:
    """The leaks in a LeakSanitizer report, each with its stack."""
    leaks, head, frames = [], None, []
    for line in report.splitlines() + [""]:
        match = _LEAK_HEAD.match(line.strip())
        frame = _FRAME.match(line)
        if frame and head:
            frames.append(frame.group(2))
            continue
        if head:
            leaks.append(Leak(head.group(1), int(head.group(2)), tuple(frames)))
            head, frames = None, []
        if match:
            head = match
    return leaks


def run_checked(cmd, program: str | None = None, env: dict | None = None
                ) -> subprocess.CompletedProcess:
    """Run a sanitized program; fail on a non-zero exit or on a leak of its own."""
    cmd = [str(c) for c in cmd]
    program = str(program or cmd[0])
    proc = subprocess.run(cmd, capture_output=True, text=True,
                          env={**os.environ, **(env or {}), **LEAK_ENV})
    assert proc.returncode == 0, f"{' '.join(cmd)}\n{proc.stdout}\n{proc.stderr}"
    leaks = parse_leaks(proc.stderr)
    own = [leak for leak in leaks if leak.is_in(program)]
    assert not own, "leaks in the program's own code:\n" + "\n".join(
        f"{leak.kind} {leak.size} B at {leak.site}" for leak in own) + "\n" + proc.stderr
    foreign = sum(leak.size for leak in leaks if leak not in own)
    if foreign:
        print(f"{os.path.basename(program)}: {foreign} B left allocated by shared "
              f"libraries (drivers) at exit; not tfaot's")
    return proc
