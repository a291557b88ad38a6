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


def require_vulkan() -> None:
    """The Vulkan headers and a Vulkan driver (Mesa's lavapipe runs on the CPU)."""
    import glob

    missing = []
    if not os.path.exists("/usr/include/vulkan/vulkan.h"):
        missing.append("vulkan/vulkan.h (apt-get install libvulkan-dev)")
    if not glob.glob("/usr/share/vulkan/icd.d/lvp_icd.*.json"):
        missing.append("a Vulkan driver (apt-get install mesa-vulkan-drivers)")
    if not missing:
        return
    if os.environ.get("TFAOT_REQUIRE_TOOLS") == "1":
        pytest.fail(f"required for the Vulkan tests: {', '.join(missing)}")
    pytest.skip(f"needs {', '.join(missing)}")
