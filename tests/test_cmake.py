"""CMake integration: a build folder works with find_package(NAME CONFIG) and
with add_subdirectory (sources compiled by the project); tfaot.cmake's
tfaot_add_model is exercised end to end by tests/test_examples.py."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

import backend_models
import toolchains
from tfaot.package import library
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


def test_cmake_default_name_is_the_command_lines(tmp_path):
    """tfaot_add_model without NAME names the library as `tfaot build` does
    without --name (it passed tfrt_net.keras's "tfrt_net", a reserved name,
    and "_9lives" where the command line says "m_9lives")."""
    from tfaot.names import default_name
    from tfaot.resources import cmake_module

    toolchains.require("cmake")
    stems = ["kws.keras", "kws-v2.keras", "9lives.h5", "tfrt_net.keras", "TFRTx.pb", "m.keras",
             "a.b.c.pb", "saved model", "x" * 70 + ".keras", "math.keras", "stdint.pb",
             "arm_neon.h5"]
    script = tmp_path / "names.cmake"
    script.write_text(f'include("{cmake_module().as_posix()}")\n' + "".join(
        f'_tfaot_default_name("/models/{stem}" n)\nmessage(STATUS "name=${{n}}")\n'
        for stem in stems))
    proc = subprocess.run(["cmake", "-P", script], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    got = [line.split("name=", 1)[1] for line in proc.stdout.splitlines() if "name=" in line]
    assert got == [default_name(f"/models/{stem}") for stem in stems]


def test_a_sources_only_package_in_a_cxx_project_found_twice(tmp_path):
    """The package without lib<name>.a (what a build writes without the
    target's compiler): a C++-only project compiles its C sources (it could
    not: "Cannot determine link language"), and a second find_package, in
    another directory, still sets <name>_CTX_SIZE (it was empty)."""
    import shutil

    toolchains.require("cmake")
    out = tmp_path / "acc"
    shutil.copytree(backend_models.built("accumulator")[1], out)
    (out / "libaccumulator.a").unlink()
    (tmp_path / "main.cpp").write_text(
        '#include "accumulator.h"\nalignas(ACCUMULATOR_CTX_ALIGN) static unsigned char '
        "m[ACCUMULATOR_CTX_SIZE];\nint main() { return accumulator_init("
        "reinterpret_cast<accumulator_ctx *>(m)); }\n")
    find = f'find_package(accumulator CONFIG REQUIRED PATHS "{out.as_posix()}" NO_DEFAULT_PATH)'
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "CMakeLists.txt").write_text(
        f'{find}\nmessage(STATUS "sub: ctx=${{accumulator_CTX_SIZE}}")\n')
    (tmp_path / "CMakeLists.txt").write_text(
        f"cmake_minimum_required(VERSION 3.16)\nproject(app CXX)\n{find}\n"
        "add_executable(app main.cpp)\ntarget_link_libraries(app PRIVATE tfaot::accumulator)\n"
        "add_subdirectory(sub)\n")
    configure = _run(["cmake", "-S", tmp_path, "-B", tmp_path / "b"])
    ctx = backend_models.built("accumulator")[2]["ctx_size"]
    assert f"sub: ctx={ctx}" in configure.stdout
    _run(["cmake", "--build", tmp_path / "b"])
    assert _run([tmp_path / "b" / "app"]).returncode == 0


def test_tfaot_add_model_in_a_cross_project_asks_for_the_triple(tmp_path):
    """A firmware project (a cross toolchain) calling tfaot_add_model without
    TRIPLE built the model for the host, and its compiler then failed on a
    static assert about the context size that rebuilding did not fix."""
    from tfaot.resources import cmake_module

    toolchains.require("cmake", "arm-none-eabi-gcc")
    (tmp_path / "arm.cmake").write_text(
        "set(CMAKE_SYSTEM_NAME Generic)\nset(CMAKE_SYSTEM_PROCESSOR arm)\n"
        "set(CMAKE_C_COMPILER arm-none-eabi-gcc)\n"
        "set(CMAKE_TRY_COMPILE_TARGET_TYPE STATIC_LIBRARY)\n")
    (tmp_path / "m.keras").write_bytes(b"")  # (configure only: never built)
    (tmp_path / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.16)\nproject(fw C)\n"
        f'include("{cmake_module().as_posix()}")\n'
        f'tfaot_add_model(m MODEL "{(tmp_path / "m.keras").as_posix()}" FROM_SOURCE)\n')
    proc = subprocess.run(["cmake", "-S", tmp_path, "-B", tmp_path / "b",
                           f"-DCMAKE_TOOLCHAIN_FILE={tmp_path / 'arm.cmake'}",
                           "-DTFAOT_EXECUTABLE=/bin/true"], capture_output=True, text=True)
    assert proc.returncode != 0
    assert "this project cross-compiles" in proc.stderr and "TRIPLE" in proc.stderr, proc.stderr


def test_two_models_of_one_c_name_are_refused_at_configure(tmp_path):
    """Two models whose files share a stem (sub/lstm.keras and lstm.keras)
    get one default C name: CMake failed on a clashing build rule (and in
    two directories the libraries would define the same symbols); now the
    second call is refused, naming the first and what to give."""
    from tfaot.resources import cmake_module

    toolchains.require("cmake")
    (tmp_path / "sub").mkdir()
    for model in ("lstm.keras", "sub/lstm.keras"):
        (tmp_path / model).write_bytes(b"")  # (configure only: never built)
    (tmp_path / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.16)\nproject(app C)\n"
        f'include("{cmake_module().as_posix()}")\n'
        "tfaot_add_model(m1 MODEL lstm.keras)\ntfaot_add_model(m2 MODEL sub/lstm.keras)\n")
    proc = subprocess.run(["cmake", "-S", tmp_path, "-B", tmp_path / "b",
                           "-DTFAOT_EXECUTABLE=/bin/true"], capture_output=True, text=True)
    assert proc.returncode != 0
    assert "the C name 'lstm'" in proc.stderr and "tfaot_add_model(m1)" in proc.stderr and \
        "NAME" in proc.stderr, proc.stderr


def _find_accumulator_with(tmp_path, processor: str, cc: str):
    """CMake's configure of a project (CMAKE_SYSTEM_PROCESSOR ``processor``,
    C compiler ``cc``) finding the accumulator model built for this machine:
    the completed process and the model's manifest."""
    out, manifest = backend_models.built("accumulator")[1:]
    (tmp_path / "cpu.cmake").write_text(
        f"set(CMAKE_SYSTEM_NAME Generic)\nset(CMAKE_SYSTEM_PROCESSOR {processor})\n"
        f"set(CMAKE_C_COMPILER {cc})\nset(CMAKE_TRY_COMPILE_TARGET_TYPE STATIC_LIBRARY)\n")
    (tmp_path / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.16)\nproject(app C)\n"
        f'find_package(accumulator CONFIG REQUIRED PATHS "{out.as_posix()}" NO_DEFAULT_PATH)\n')
    proc = subprocess.run(["cmake", "-S", tmp_path, "-B", tmp_path / "b",
                           f"-DCMAKE_TOOLCHAIN_FILE={tmp_path / 'cpu.cmake'}"],
                          capture_output=True, text=True)
    return proc, manifest


def test_find_package_of_another_cpus_build_is_refused_at_configure(tmp_path):
    """A firmware project (arm-none-eabi, 4-byte pointers) finding a model
    built for this machine configured fine and failed at link ("file format
    not recognized"); the package now refuses, naming its triple."""
    toolchains.require("cmake", "arm-none-eabi-gcc")
    proc, manifest = _find_accumulator_with(tmp_path, "arm", "arm-none-eabi-gcc")
    assert proc.returncode != 0
    assert f"built for {manifest['triple']}" in proc.stderr and "--triple" in proc.stderr, \
        proc.stderr


@pytest.mark.parametrize("processor", ["aarch64", "AMD64"])
def test_find_package_of_another_64_bit_cpus_build_is_refused(processor, tmp_path):
    """Two 64-bit CPUs have the same pointer size: an aarch64 project finding
    an x86-64 build (or the reverse) also failed only at link. The project's
    CMAKE_SYSTEM_PROCESSOR, where it names another family than the triple's,
    is refused at configure; the same family is accepted (AMD64 is how
    Windows names x86-64: accepted for an x86-64 build, refused otherwise)."""
    toolchains.require("cmake", "cc")
    proc, manifest = _find_accumulator_with(tmp_path, processor, "cc")
    family = library.arch_family(manifest["triple"].split("-")[0])
    if family == {"aarch64": "aarch64", "AMD64": "x86_64"}[processor]:
        assert proc.returncode == 0, proc.stderr
    else:
        assert proc.returncode != 0
        assert f"built for {manifest['triple']}" in proc.stderr and processor in proc.stderr \
            and "--triple" in proc.stderr, proc.stderr
