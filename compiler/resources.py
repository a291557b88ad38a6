"""Where tfaot's package data lives: C templates, the runtime shim, CMake helpers.

An installed wheel carries them inside the package (``tfaot/codegen_templates``,
``tfaot/runtime_shim``); a source checkout has them next to ``compiler/``.
"""
from __future__ import annotations

import functools
from pathlib import Path

_PKG_DIR = Path(__file__).resolve().parent


def _find(name: str) -> Path:
    for candidate in (_PKG_DIR / name, _PKG_DIR.parent / name):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(
        f"tfaot package data folder '{name}' not found next to {_PKG_DIR}; "
        "the installation is incomplete (reinstall tfaot)")


def template_dir() -> Path:
    """Folder with the jinja2 templates of generated C/H text."""
    return _find("codegen_templates")


def shim_dir() -> Path:
    """Folder with the runtime shim sources (core tfrt_core.c/tfrt.h, backends tfrt_cpu.*)."""
    return _find("runtime_shim")


def cmake_module() -> Path:
    """cmake/tfaot.cmake (tfaot_add_model), for include() in a CMake project."""
    return _find("cmake") / "tfaot.cmake"


@functools.lru_cache(maxsize=None)
def template_env():
    """The one jinja2 environment of every generated text (C, headers, CMake)."""
    import jinja2

    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(template_dir())),
                             trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True,
                             undefined=jinja2.StrictUndefined)
    env.filters["tfrt_u32"] = lambda v: f"(uint32_t){v}"
    env.filters["c_string"] = c_string
    env.filters["c_comment"] = c_comment
    return env


def c_string(text: str) -> str:
    """``text`` as the inside of a C string literal: a quote, a backslash and
    anything not printable ASCII as octal escapes (a hex escape would run
    on into a following hex digit; a UTF-8 name keeps its bytes)."""
    return "".join(c if " " <= c <= "~" and c not in '"\\?' else
                   "".join(f"\\{b:03o}" for b in c.encode()) for c in text)


def c_comment(text: str) -> str:
    """``text`` inside a C comment: no end or start of one, no line break."""
    text = text.replace("*/", "* /").replace("/*", "/ *")
    return "".join(c if " " <= c <= "~" else "?" for c in text)
