"""Cross toolchains and emulators used by the firmware-integration tests.

Outside CI a missing tool skips the test with the package to install; .ci/run
installs them all and sets TFAOT_REQUIRE_TOOLS=1, which turns a missing tool
into a failure so CI cannot silently skip these tests.
"""
from __future__ import annotations

import os
import shutil

import pytest

#: tool -> Debian package
PACKAGES = {
    "aarch64-linux-gnu-gcc": "gcc-aarch64-linux-gnu",
    "qemu-aarch64": "qemu-user",
    "arm-none-eabi-gcc": "gcc-arm-none-eabi (+ libnewlib-arm-none-eabi)",
    "qemu-system-arm": "qemu-system-arm",
    "cmake": "cmake",
}


def require(*tools: str) -> None:
    missing = [t for t in tools if not shutil.which(t)]
    if not missing:
        return
    what = ", ".join(f"{t} (apt-get install {PACKAGES.get(t, t)})" for t in missing)
    if os.environ.get("TFAOT_REQUIRE_TOOLS") == "1":
        pytest.fail(f"required tool missing: {what}")
    pytest.skip(f"needs {what}")
