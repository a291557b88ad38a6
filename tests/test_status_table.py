"""Status codes come from one table (compiler/status.py): the shim's enum
(generated tfrt_status.h), the NAME_OK / NAME_ERR_* defines of NAME.h and the
texts of NAME_status_string all agree with it, and nothing else spells them."""
from __future__ import annotations

import ctypes
import re

import backend_models
from tfaot import package, status
from tfaot.resources import shim_dir, template_dir


def test_table_is_dense_and_unique():
    assert [s.value for s in status.STATUSES] == list(range(len(status.STATUSES)))
    assert status.STATUSES[0].name == "OK"
    assert len({s.text for s in status.STATUSES}) == len(status.STATUSES)


def test_generated_shim_enum_matches_table():
    _, out, _ = backend_models.built("multi")
    text = (out / "src" / package.SHIM_STATUS_HEADER).read_text()
    assert text == status.shim_header()
    enum = dict(re.findall(r"^\s*(TFRT_\w+) = (\d+),", text, re.M))
    assert enum == {s.shim_name: str(s.value) for s in status.STATUSES}


def test_header_defines_and_status_strings_match_table():
    _, out, _ = backend_models.built("multi")
    header = (out / "multi.h").read_text()
    defines = dict(re.findall(r"^#define (MULTI_(?:OK|ERR_\w+)) (\d+)", header, re.M))
    assert defines == {s.api_name("MULTI"): str(s.value) for s in status.STATUSES}
    lib = ctypes.CDLL(str(out / "libmulti.so"))
    lib.multi_status_string.restype = ctypes.c_char_p
    for s in status.render(name="multi", P="MULTI", align=package.CTX_ALIGN):
        assert lib.multi_status_string(s["value"]).decode() == s["text"]
        assert f"/* {s['doc']} */" in header
    assert lib.multi_status_string(len(status.STATUSES)).decode() == "unknown status"


def test_no_other_copy_of_the_table():
    """The shim and the templates use the names, never the values or texts."""
    sources = {p.name: p.read_text() for p in [*shim_dir().iterdir(), *template_dir().iterdir()]
               if p.suffix in (".c", ".h", ".j2")}
    for fname, text in sources.items():
        assert not re.search(r"TFRT_STATUS_\w+\s*=", text), f"{fname} defines a status value"
        assert not re.search(r"_ERR_\w+ \d", text), f"{fname} defines a status value"
        for s in status.STATUSES[1:]:
            assert s.text.split("{")[0] not in text, f"{fname} spells the text of {s.name}"
    used = set()
    for text in sources.values():
        used |= set(re.findall(r"\bTFRT_STATUS_([A-Z_]+[A-Z])\b", text))
    assert used - {"COUNT"} <= {s.name for s in status.STATUSES}
