"""The model name: the C prefix of every symbol and file of a library.

One check for every stage that takes a name, made before any slow stage.
"""
from __future__ import annotations

import re
from pathlib import Path

from .errors import TfaotError

_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")

#: The runtime shim's own prefix: its files (tfrt*.c/h) and symbols (tfrt_*)
#: sit next to the model's in src/ and in the library.
RESERVED_PREFIX = "tfrt"


#: Names whose libNAME.a / libNAME.so would stand in for a system library
#: in -lNAME (libc, libm, the toolchain's runtime libraries)
SYSTEM_LIBRARIES = frozenset(
    "c m dl rt pthread atomic gcc gcc_s nosys rdimon".split())


#: Headers a NAME.h would stand in for: with the output folder on the include
#: path, `#include <stdint.h>` takes the folder's stdint.h (the C library's,
#: POSIX's that the runtime includes, and the compilers' vector intrinsics)
STANDARD_HEADERS = frozenset(
    "assert complex ctype errno fenv float inttypes iso646 limits locale math setjmp signal "
    "stdalign stdarg stdatomic stdbool stddef stdint stdio stdlib stdnoreturn string tgmath "
    "threads time uchar wchar wctype unistd pthread dlfcn fcntl strings alloca malloc "
    "immintrin arm_neon arm_mve arm_acle".split())


def check_name(name: str) -> None:
    """Refuses names that are not C identifiers, collide with the runtime's
    files, a standard header or name a system library."""
    if not name:
        raise TfaotError("model name is empty (--name \"\"); give a C identifier, or leave "
                         "--name out for the model file's stem")
    if len(name) > 63 and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
        raise TfaotError(
            f"model name '{name[:40]}...' has {len(name)} characters; it prefixes every symbol "
            "of the library, so it may have 63 at most: give a shorter --name")
    if not _NAME_RE.match(name):
        raise TfaotError(
            f"model name '{name}' is not a valid C identifier; it prefixes every symbol of the "
            "library (use letters, digits and '_', not starting with a digit)")
    if name in SYSTEM_LIBRARIES:
        raise TfaotError(
            f"model name '{name}' would make lib{name}.a, which -l{name} would link instead "
            f"of the system's lib{name}; choose another --name")
    if name in STANDARD_HEADERS:
        raise TfaotError(
            f"model name '{name}' would write {name}.h, which `#include <{name}.h>` takes "
            f"instead of the system's wherever the output folder is on the include path; "
            "choose another --name")
    if name.lower() == RESERVED_PREFIX or name.lower().startswith(RESERVED_PREFIX + "_"):
        raise TfaotError(
            f"model name '{name}' is reserved: '{RESERVED_PREFIX}' and '{RESERVED_PREFIX}_*' "
            "name the runtime's own files and symbols; choose another --name")


def default_name(model_path: str) -> str:
    """The model file's stem as a C identifier ("kws-v2.keras" -> "kws_v2")."""
    stem = Path(str(model_path).rstrip("/")).name.split(".")[0] or "model"
    name = re.sub(r"[^A-Za-z0-9_]", "_", stem)
    if not name[0].isdigit() and not name.lower().startswith(RESERVED_PREFIX) and \
            name not in SYSTEM_LIBRARIES | STANDARD_HEADERS:
        return name[:63]
    return f"m_{name}"[:63]
