"""CMake integration: a build folder works with find_package(NAME CONFIG) and
with add_subdirectory (sources compiled by the project); tfaot.cmake's
tfaot_add_model is exercised end to end by tests/test_examples.py."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

import backend_models
import toolchains
from util import run as _run

DATA = Path(__file__).parent / "data"


@pytest.mark.parametrize("project", ["find_package", "subdirectory"])
def test_two_models_through_cmake(project, tmp_path):
    toolchains.require("cmake")
    acc = backend_models.built("accumulator")[1]
    multi = backend_models.built("multi")[1]
    build = tmp_path / "build"
    _run(["cmake", "-S", DATA / "cmake" / project, "-B", build, f"-DACCUMULATOR_DIR={acc}",
          f"-DMULTI_DIR={multi}", f"-DTWO_MODELS_C={DATA / 'backend' / 'c' / 'two_models.c'}"])
    _run(["cmake", "--build", build])
    assert _run([build / "two"]).stdout.strip() == "12 3"


def test_build_folder_has_cmake_files():
    spec, out, manifest = backend_models.built("multi")
    config = (out / "multiConfig.cmake").read_text()
    assert "add_library(tfaot::multi STATIC IMPORTED)" in config
    assert f"set(multi_STATE_BYTES {manifest['state_bytes']})" in config
    assert "add_library(tfaot::multi ALIAS multi)" in (out / "CMakeLists.txt").read_text()
    assert {"multiConfig.cmake", "CMakeLists.txt"} <= set(manifest["files"])


def test_cmake_path_command():
    from tfaot.cli import main
    from tfaot.resources import cmake_module

    path = cmake_module()
    assert path.name == "tfaot.cmake" and "function(tfaot_add_model" in path.read_text()
    proc = subprocess.run([__import__("sys").executable, "-m", "tfaot", "cmake-path"],
                          capture_output=True, text=True)
    assert proc.returncode == 0 and Path(proc.stdout.strip()) == path
    assert main(["cmake-path"]) == 0


def test_cmake_module_lists_the_shim_files():
    """tfaot.cmake declares the shim files the build writes into src/ as byproducts."""
    import re

    from tfaot.package import SHIM_FILES, SHIM_STATUS_HEADER
    from tfaot.resources import cmake_module

    text = cmake_module().read_text()
    listed = re.search(r"set\(TFAOT_SHIM_FILES([^)]*)\)", text).group(1).split()
    assert sorted(listed) == sorted([*SHIM_FILES, SHIM_STATUS_HEADER])
    _, out, manifest = backend_models.built("multi")
    assert {f"src/{f}" for f in listed} <= set(manifest["files"])
