"""NAME_CTX_SIZE is computed from the C text and the target's data model
(compiler/package/c_layout.py), so a cross build without the target's C compiler gets
the right, non-zero size; with a compiler the two must agree."""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

import backend_models
import toolchains
from tfaot.package import c_layout
from tfaot import package
from tfaot.errors import TfaotError
from util import run as _run

MODEL = "multi"
#: (triple, cpu, C compiler for the target, its flags)
TRIPLES = {
    "host": (None, None, "gcc", []),
    "aarch64": ("aarch64-linux-gnu", "generic", "aarch64-linux-gnu-gcc", []),
    "cortex-m4": ("thumbv7em-none-eabihf", "cortex-m4", "arm-none-eabi-gcc",
                  ["-mthumb", "-mcpu=cortex-m4", "-mfpu=fpv4-sp-d16", "-mfloat-abi=hard"]),
}
#: Compilers for the targets above; hidden to simulate a machine without them.
CROSS_TOOLS = {"aarch64-linux-gnu-gcc", "arm-none-eabi-gcc", "clang"}

_BUILT: dict = {}


def _build(key: str, root: Path) -> tuple[Path, dict]:
    from tfaot.backend.build import build_library

    triple, cpu, _, _ = TRIPLES[key]
    spec = backend_models.ALL[MODEL]()
    manifest = build_library(spec.mlir, spec.signature, root / "out", name=MODEL, triple=triple,
                             cpu=cpu, workdir=root / "work")
    return root / "out", manifest


def _built(key: str, tmp_path_factory) -> tuple[Path, dict]:
    if key not in _BUILT:
        _BUILT[key] = _build(key, tmp_path_factory.mktemp(f"layout_{key}"))
    return _BUILT[key]


def _header_size(out: Path) -> int:
    m = re.search(rf"#define {MODEL.upper()}_CTX_SIZE (\d+)", (out / f"{MODEL}.h").read_text())
    return int(m.group(1))


def _measure(key: str, src: Path, tmp_path: Path) -> int:
    """sizeof(struct NAME_ctx) as the target's real compiler lays it out."""
    _, _, cc, flags = TRIPLES[key]
    probe = tmp_path / "probe.c"
    probe.write_text(f'#include "{MODEL}.c"\nchar ctx_probe_[sizeof(struct {MODEL}_ctx)];\n')
    _run([cc, "-std=c11", "-O2", *flags, "-fno-common", "-I", src, "-c", probe,
          "-o", tmp_path / "probe.o"])
    for line in _run(["nm", "-S", tmp_path / "probe.o"]).stdout.splitlines():
        if line.endswith(" ctx_probe_"):
            return int(line.split()[1], 16)
    raise AssertionError("probe symbol not found")


def _computed(out: Path, triple: str) -> int:
    src = out / "src"
    return package.compute_ctx_size((src / f"{MODEL}.c").read_text(),
                                    (src / f"{MODEL}.h").read_text(), name=MODEL, triple=triple)


@pytest.mark.parametrize("key", sorted(TRIPLES))
def test_computed_size_equals_the_real_compilers(key, tmp_path_factory, tmp_path):
    cc = TRIPLES[key][2]
    toolchains.require(cc)
    out, manifest = _built(key, tmp_path_factory)
    computed = _computed(out, manifest["triple"])
    measured = _measure(key, out / "src", tmp_path)
    print(f"{manifest['triple']}: computed {computed}, measured with {cc} {measured}")
    assert computed == measured == manifest["ctx_size"] == _header_size(out) > 0
    assert computed % 64 == 0


def test_sizes_differ_between_data_models(tmp_path_factory):
    """The three targets really exercise different layouts (LP64 vs ILP32)."""
    host = _built("host", tmp_path_factory)[0]
    arm = _built("cortex-m4", tmp_path_factory)[0]
    assert _computed(arm, "thumbv7em-none-eabihf") < _computed(host, "x86_64-unknown-linux-gnu")


@pytest.mark.parametrize("key", ["aarch64", "cortex-m4"])
def test_cross_build_without_the_target_compiler(key, monkeypatch, tmp_path, tmp_path_factory):
    from tfaot.target import is_host_triple

    if is_host_triple(TRIPLES[key][0]):  # (an aarch64 machine) its own compiler builds it
        pytest.skip(f"{TRIPLES[key][0]} is this machine's: not a cross build")
    toolchains.require(TRIPLES[key][2])
    real_which = shutil.which
    monkeypatch.setattr(shutil, "which",
                        lambda cmd, *a, **k: None if cmd in CROSS_TOOLS else real_which(cmd, *a, **k))
    out, manifest = _build(key, tmp_path / "nocc")
    monkeypatch.undo()
    assert not (out / f"lib{MODEL}.a").exists()  # really built without the compiler
    measured = _measure(key, out / "src", tmp_path)
    assert manifest["ctx_size"] == _header_size(out) == measured > 0
    assert f"set({MODEL}_CTX_SIZE {measured})" in (out / f"{MODEL}Config.cmake").read_text()
    # The sources compile with the target's compiler: the _Static_assert holds.
    _, _, cc, flags = TRIPLES[key]
    _run([cc, "-std=c11", "-Wall", "-Wextra", "-Werror", "-O2", *flags, "-c",
          out / "src" / f"{MODEL}.c", "-o", tmp_path / "m.o"])


@pytest.mark.parametrize("wrong", ["0", "delta"])
def test_static_assert_rejects_a_wrong_or_zero_size(wrong, tmp_path, tmp_path_factory):
    out, manifest = _built("host", tmp_path_factory)
    src = tmp_path / "src"
    shutil.copytree(out / "src", src)
    header = src / f"{MODEL}.h"
    size = manifest["ctx_size"]
    bad = "0" if wrong == "0" else str(size + 64)
    header.write_text(header.read_text().replace(f"_CTX_SIZE {size}\n", f"_CTX_SIZE {bad}\n"))
    proc = subprocess.run(["gcc", "-std=c11", "-c", src / f"{MODEL}.c", "-o", tmp_path / "m.o"],
                          capture_output=True, text=True)
    assert proc.returncode != 0
    assert "CTX_SIZE in multi.h does not match this compiler" in proc.stderr


def test_build_fails_when_computed_and_measured_disagree(monkeypatch, tmp_path):
    """The compiler probe stays as a cross-check of the computed layout."""
    monkeypatch.setattr(c_layout, "data_model", lambda triple: c_layout.ILP32)
    with pytest.raises(TfaotError, match=r"tfaot computed \d+ \(compiler/package/c_layout.py"):
        _build("host", tmp_path)


@pytest.mark.parametrize("triple,model", [
    ("x86_64-unknown-linux-gnu", c_layout.LP64), ("aarch64-linux-gnu", c_layout.LP64),
    ("riscv64-unknown-linux-gnu", c_layout.LP64), ("thumbv7em-none-eabihf", c_layout.ILP32),
    ("thumbv8m.main-none-eabi", c_layout.ILP32), ("armv7a-linux-gnueabihf", c_layout.ILP32),
    ("i686-unknown-linux-gnu", c_layout.ILP32_I386), ("x86_64-pc-windows-msvc", c_layout.LLP64),
])
def test_data_models(triple, model):
    assert c_layout.data_model(triple) == model


def test_unknown_architecture_is_an_error():
    with pytest.raises(TfaotError, match="data model .* of target avr-none is not known"):
        c_layout.data_model("avr-none")


def test_layout_rules_against_gcc(tmp_path):
    """Padding, nested unions, anonymous members, _Alignas, #define'd array
    sizes (a later #define of a name wins, as a generated model's
    TFRT_MAX_RANK over tfrt.h's default), typedefs."""
    text = """#include <stdint.h>
#include <stddef.h>
#define N 3u
#ifndef M
#define M 40u
#endif
#undef M
#define M (N * 2u + 1u)
typedef struct inner { uint8_t c; double d; uint16_t s[N]; } inner;
typedef float elem_t;
struct outer {
  uint8_t tag;
  const struct outer *self;
  inner in[M];
  union { _Alignas(32) uint8_t a[5]; int64_t b; } u;
  elem_t e[N];
  union {
    struct { uint8_t k; double kd[M]; };
    struct { uint16_t h[N]; };
  };
  size_t n;
  _Alignas(16) uint8_t tail[7];
};
"""
    (tmp_path / "t.c").write_text(text + "char probe_[sizeof(struct outer)];\n")
    _run(["gcc", "-std=c11", "-fno-common", "-c", tmp_path / "t.c", "-o", tmp_path / "t.o"])
    nm = _run(["nm", "-S", tmp_path / "t.o"]).stdout
    size = int(next(ln for ln in nm.splitlines() if ln.endswith("probe_")).split()[1], 16)
    assert c_layout.struct_layout([text], "struct outer", c_layout.LP64) == (size, 32)


def test_unsupported_field_forms_are_errors():
    text = "struct s { int (*fn)(void); };"
    with pytest.raises(TfaotError, match="a function pointer field"):
        c_layout.struct_layout([text], "struct s", c_layout.LP64)
    with pytest.raises(TfaotError, match="q could not be parsed: field 'a' is a bit-field"):
        c_layout.struct_layout(["typedef struct q { int a : 3; } q; struct s { q x; };"],
                               "struct s", c_layout.LP64)
    with pytest.raises(TfaotError, match="'missing_t' is not defined"):
        c_layout.struct_layout(["struct s { missing_t x; };"], "struct s", c_layout.LP64)
    with pytest.raises(TfaotError, match="uses 'K', which is not a #define"):
        c_layout.struct_layout(["struct s { int x[K]; };"], "struct s", c_layout.LP64)


def test_views_hold_the_programs_most_dimensions(tmp_path_factory):
    """A view's shape array is as long as the program's longest, not tfrt.h's
    default of 8 (64 bytes a view on every target): the model defines
    TFRT_MAX_RANK before the runtime's headers, and the layout uses it."""
    out, manifest = _built("host", tmp_path_factory)
    src = (out / "src" / f"{MODEL}.c").read_text()
    found = re.search(r"#define TFRT_MAX_RANK (\d+)\n(?:.*\n)*?#include", src)
    assert found, "TFRT_MAX_RANK is not defined before the includes"
    tensors = [*manifest["inputs"], *manifest["outputs"], *manifest.get("state", [])]
    assert int(found.group(1)) == max(len(t["shape"]) for t in tensors) < 8
