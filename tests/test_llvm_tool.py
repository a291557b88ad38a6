"""LLVM's tools are found under their versioned names too.

Debian's and Ubuntu's clang-N packages install ``clang-14``,
``llvm-objcopy-14`` and ``llvm-nm-14`` on PATH; only the ``clang`` and
``llvm`` packages add the plain names. A cross build renames its kernel
symbol with llvm-objcopy (the host's binutils read only its own objects),
so a machine with only the versioned names failed that build.
"""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tfaot.package import link

#: PATH before a test empties it (for the host's cc, objcopy and nm).
HOST_PATH = os.environ.get("PATH", os.defpath)


def executable(path: Path, text: str = "#!/bin/sh\nexit 0\n") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o755)
    return path


@pytest.fixture
def only_path(tmp_path, monkeypatch):
    """PATH is one empty folder and /usr/lib/llvm-N is another: nothing real is found."""
    folder = tmp_path / "bin"
    folder.mkdir()
    monkeypatch.setenv("PATH", str(folder))
    monkeypatch.setattr(link, "LLVM_ROOT", tmp_path / "lib")
    link.llvm_tool.cache_clear()
    yield folder
    link.llvm_tool.cache_clear()


def test_the_newest_versioned_name_on_path(only_path):
    executable(only_path / "llvm-objcopy-9")
    newest = executable(only_path / "llvm-objcopy-17")
    executable(only_path / "llvm-objcopy-old")
    executable(only_path / "llvm-objcopy-18.txt")
    assert link.llvm_tool("llvm-objcopy") == str(newest)


def test_the_plain_name_before_versioned_ones(only_path):
    executable(only_path / "llvm-nm-17")
    plain = executable(only_path / "llvm-nm")
    assert link.llvm_tool("llvm-nm") == str(plain)


def test_a_version_folder_of_llvm_root(only_path):
    executable(only_path / "clang-13")
    newer = executable(link.LLVM_ROOT / "llvm-15" / "bin" / "clang")
    executable(link.LLVM_ROOT / "llvm-16" / "bin" / "clang-tidy")
    assert link.llvm_tool("clang") == str(newer)


def test_none_when_there_is_no_such_tool(only_path):
    (only_path / "llvm-objcopy-17").write_text("not executable")
    assert link.llvm_tool("llvm-objcopy") is None


def test_a_cross_build_renames_its_symbol_with_the_versioned_objcopy(only_path, tmp_path):
    objcopy, cc, nm = (shutil.which(tool, path=HOST_PATH) for tool in ("objcopy", "cc", "nm"))
    if not (objcopy and cc and nm):
        pytest.skip("needs the host's cc and objcopy")
    log = tmp_path / "called"
    executable(only_path / "llvm-objcopy-19", f'#!/bin/sh\necho "$@" > {log}\nexec {objcopy} "$@"\n')
    (tmp_path / "k.c").write_text("int old_query(void) { return 1; }\n")
    subprocess.run([cc, "-c", "k.c", "-o", "k.o"], cwd=tmp_path, check=True,
                   env={**os.environ, "PATH": HOST_PATH})
    link.rename_query_symbol(tmp_path / "k.o", tmp_path / "renamed.o", "old_query",
                             "lib_query", None, "x86_64-unknown-linux-gnu")
    assert "--redefine-sym=old_query=lib_query" in log.read_text()
    symbols = subprocess.run([nm, str(tmp_path / "renamed.o")], capture_output=True,
                             text=True, check=True).stdout
    assert "lib_query" in symbols and "old_query" not in symbols
