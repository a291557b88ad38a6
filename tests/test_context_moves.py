"""A context moved or copied after init (memcpy, realloc) is refused with
NAME_ERR_MOVED by every call and the original is not touched; a misaligned
context is refused with NAME_ERR_ALIGNMENT.  C level, under ASan and UBSan."""
from __future__ import annotations

import ctypes
import shutil
import subprocess
from pathlib import Path

import pytest

import backend_models
from util import run as _run

C_DIR = Path(__file__).parent / "data" / "backend" / "c"
WARN = ["-std=c11", "-Wall", "-Wextra", "-Werror", "-pedantic"]
SANITIZE = ["-O1", "-g", "-fsanitize=address,undefined", "-fno-sanitize-recover=all",
            "-fno-omit-frame-pointer"]
CASES = [(name, "gcc") for name in sorted(backend_models.ALL)] + \
    ([("lstm", "clang")] if shutil.which("clang") else [])


@pytest.mark.parametrize("name,cc", CASES)
def test_moved_context_is_refused_and_original_unchanged(name, cc, tmp_path):
    _, out, _ = backend_models.built(name)
    src = out / "src"
    exe = tmp_path / "moved"
    _run([cc, *WARN, *SANITIZE, f"-DTFAOT_MODEL={name}", f"-DTFAOT_UPPER={name.upper()}",
          f'-DTFAOT_HEADER="{name}.h"', "-I", src, C_DIR / "moved.c", src / f"{name}.c",
          src / f"{name}_kernels.o", "-lm", "-o", exe])
    proc = subprocess.run([exe], capture_output=True, text=True,
                          env={"ASAN_OPTIONS": "detect_leaks=1:abort_on_error=1",
                               "UBSAN_OPTIONS": "halt_on_error=1:print_stacktrace=1"})
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stdout + proc.stderr
    assert "AddressSanitizer" not in proc.stderr and "runtime error" not in proc.stderr


def test_moved_and_alignment_statuses_are_documented():
    spec, out, _ = backend_models.built("multi")
    header = (out / "multi.h").read_text()
    assert "#define MULTI_ERR_MOVED 12 " in header
    assert "#define MULTI_ERR_ALIGNMENT 13 " in header
    assert "must be initialised again with multi_init" in header
    lib = ctypes.CDLL(str(out / "libmulti.so"))
    lib.multi_status_string.restype = ctypes.c_char_p
    assert lib.multi_status_string(12).decode() == (
        "context was moved or copied after init; call multi_init on it again")
    assert lib.multi_status_string(13).decode() == (
        "context not aligned to MULTI_CTX_ALIGN (64) bytes")
    assert lib.multi_status_string(1).decode() != lib.multi_status_string(13).decode()


def test_misaligned_context_through_ctypes():
    _, out, manifest = backend_models.built("accumulator")
    lib = ctypes.CDLL(str(out / "libaccumulator.so"))
    buf = ctypes.create_string_buffer(manifest["ctx_size"] + 128)
    base = ctypes.addressof(buf)
    aligned = base + (-base % 64)
    lib.accumulator_init.argtypes = [ctypes.c_void_p]
    lib.accumulator_deinit.argtypes = [ctypes.c_void_p]
    assert lib.accumulator_init(aligned + 4) == 13
    assert lib.accumulator_init(aligned) == 0
    lib.accumulator_deinit(aligned)
