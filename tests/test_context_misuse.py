"""Context misuse (issue 20): init on a live context starts it afresh and
releases what the first init made; overlapping calls on one context (a hook
calling back in during run, a second thread) get NAME_ERR_BUSY and change
nothing.  C level, under ASan and UBSan; Vulkan's re-init is checked for
leaks by its heap use."""
from __future__ import annotations

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
COMPILERS = ["gcc"] + (["clang"] if shutil.which("clang") else [])


@pytest.mark.parametrize("cc", COMPILERS)
@pytest.mark.parametrize("name", ["lstm", "multi"])
def test_reinit_and_overlapping_calls(name, cc, tmp_path):
    _, out, _ = backend_models.built(name)
    src = out / "src"
    exe = tmp_path / "misuse"
    _run([cc, *WARN, *SANITIZE, f"-DTFAOT_MODEL={name}", f"-DTFAOT_UPPER={name.upper()}",
          f'-DTFAOT_HEADER="{name}.h"', "-I", src, C_DIR / "misuse.c", src / f"{name}.c",
          src / f"{name}_kernels.o", "-lm", "-lpthread", "-o", exe])
    proc = subprocess.run([exe], capture_output=True, text=True,
                          env={"ASAN_OPTIONS": "detect_leaks=1:abort_on_error=1",
                               "UBSAN_OPTIONS": "halt_on_error=1:print_stacktrace=1"})
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), proc.stdout + proc.stderr
    assert "AddressSanitizer" not in proc.stderr and "runtime error" not in proc.stderr


def test_busy_status_is_documented():
    _, out, _ = backend_models.built("lstm")
    header = (out / "lstm.h").read_text()
    assert "#define LSTM_ERR_BUSY 17 " in header
    assert "one atomic exchange" in header and "LSTM_ERR_BUSY" in header
    assert "init first releases what the first" in header
