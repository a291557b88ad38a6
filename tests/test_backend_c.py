"""Backend, C level: warnings, sanitizers, no heap after init, ABI version,
determinism, several models in one program."""
from __future__ import annotations

import filecmp
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

import backend_models
from tfaot import harness
from tfaot.package import PUBLIC_FUNCTIONS
from util import run as _run

C_DIR = Path(__file__).parent / "data" / "backend" / "c"
MODELS = sorted(backend_models.ALL)
COMPILERS = [c for c in ("gcc", "clang") if shutil.which(c)]
WARN = ["-std=c11", "-Wall", "-Wextra", "-Werror", "-pedantic", "-Wcast-align"]


def _model_defs(name: str) -> list[str]:
    return [f"-DTFAOT_MODEL={name}", f"-DTFAOT_UPPER={name.upper()}",
            f'-DTFAOT_HEADER="{name}.h"']


def _loop_reference(name: str) -> np.ndarray:
    """What step_loop.c computes, through the ctypes harness."""
    spec, out, manifest = backend_models.built(name)
    m = harness.load(out)
    n_in = spec.signature.inputs[0].size
    ys = []
    for t in range(200):
        if t == 100:
            m.reset()
        x = np.array([((t * 7 + i * 3) % 11) * 0.1 - 0.5 for i in range(n_in)], np.float32)
        ys.append(m.step(x.reshape(spec.input_shape)).ravel())
    return np.stack(ys)


@pytest.mark.parametrize("cc", COMPILERS)
@pytest.mark.parametrize("name", MODELS)
def test_generated_c_compiles_without_warnings(name, cc, tmp_path):
    _, out, _ = backend_models.built(name)
    for opt in ("-O0", "-O2"):
        _run([cc, *WARN, opt, "-c", out / "src" / f"{name}.c", "-o", tmp_path / "m.o"])
    # The public header is valid C++ too (extern "C" guards).
    if shutil.which("g++"):
        (tmp_path / "h.cc").write_text(f'#include "{name}.h"\nint main() {{ return 0; }}\n')
        _run(["g++", "-Wall", "-Wextra", "-Werror", "-I", out, "-c", tmp_path / "h.cc",
              "-o", tmp_path / "h.o"])


def test_abi_header_static_asserts_hold_for_ilp32(tmp_path):
    if not shutil.which("clang"):
        pytest.skip("clang not installed")
    shim = Path(backend_models.built("accumulator")[1]) / "src"
    (tmp_path / "t.c").write_text('#include "tfrt_abi.h"\nint x;\n')
    for target in ("i386-unknown-none", "armv7m-none-eabi", "x86_64-unknown-none",
                   "aarch64-unknown-none"):
        _run(["clang", f"--target={target}", "-ffreestanding", *WARN, "-fsyntax-only",
              "-I", shim, tmp_path / "t.c"])


@pytest.mark.parametrize("name", MODELS)
def test_sanitizers_clean_and_matches_harness(name, tmp_path):
    _, out, _ = backend_models.built(name)
    src = out / "src"
    exe = tmp_path / "loop"
    _run(["gcc", *WARN, "-O1", "-g", "-fsanitize=address,undefined",
          "-fno-sanitize-recover=all", "-fno-omit-frame-pointer", *_model_defs(name),
          "-I", src, C_DIR / "step_loop.c", src / f"{name}.c", src / f"{name}_kernels.o",
          "-lm", "-o", exe])
    proc = _run([exe], env={"ASAN_OPTIONS": "detect_leaks=1:abort_on_error=1",
                            "UBSAN_OPTIONS": "halt_on_error=1:print_stacktrace=1"})
    assert "runtime error" not in proc.stderr and "AddressSanitizer" not in proc.stderr
    ys = np.array([[float(v) for v in line.split()] for line in proc.stdout.splitlines()])
    np.testing.assert_allclose(ys, _loop_reference(name), rtol=0, atol=1e-6)


@pytest.mark.parametrize("name", MODELS)
def test_no_heap_calls_during_steps(name, tmp_path):
    _, out, _ = backend_models.built(name)
    lib = out / f"lib{name}.a"
    undefined = _run(["nm", "-u", lib]).stdout.split()
    for fn in ("malloc", "calloc", "realloc", "free"):
        assert fn not in undefined, f"lib{name}.a references {fn}"
    exe = tmp_path / "loop"
    _run(["gcc", *WARN, "-O2", "-DCOUNT_HEAP", *_model_defs(name), "-I", out,
          C_DIR / "step_loop.c", lib, "-lm",
          "-Wl,--wrap=malloc,--wrap=calloc,--wrap=realloc,--wrap=free", "-o", exe])
    proc = _run([exe])
    assert "heap calls during steps: 0" in proc.stderr


@pytest.mark.parametrize("name", MODELS)
def test_static_library_exports_only_the_api(name):
    _, out, _ = backend_models.built(name)
    defined = _run(["nm", "-g", "--defined-only", out / f"lib{name}.a"]).stdout
    symbols = {line.split()[-1] for line in defined.splitlines() if line.count(" ") >= 2}
    assert symbols == {f"{name}_{fn}" for fn in PUBLIC_FUNCTIONS}
    weak = {line.split()[-1] for line in defined.splitlines() if " W " in line}
    assert weak == {f"{name}_read_input", f"{name}_write_output"}


def test_shared_library_names_itself(tmp_path):
    """libNAME.so carries its soname: a program linked with it by its path
    (as CMake links an imported .so) found it by that path only, from one
    directory, and failed to start anywhere else."""
    name = MODELS[0]
    _, out, _ = backend_models.built(name)
    dynamic = _run(["readelf", "-d", out / f"lib{name}.so"]).stdout
    assert f"Library soname: [lib{name}.so]" in dynamic, dynamic
    # linked by path from another directory, the program needs it by name
    exe = tmp_path / "prog"
    _run(["gcc", "-o", exe, C_DIR / "step_loop.c", f"-I{out}", *_model_defs(name),
          out / f"lib{name}.so", "-lm"])
    needed = _run(["readelf", "-d", exe]).stdout
    assert f"Shared library: [lib{name}.so]" in needed, needed


@pytest.mark.parametrize("name", MODELS)
def test_kernel_object_speaks_abi_version_6(name, tmp_path):
    """Fails loudly when the pinned compiler's kernel ABI is not the one the shim declares."""
    _, out, manifest = backend_models.built(name)
    src = out / "src"
    exe = tmp_path / "abi"
    _run(["gcc", *WARN, f"-DQUERY={manifest['kernel_query_symbol']}", "-I", src,
          C_DIR / "abi_check.c", src / f"{name}_kernels.o", "-lm", "-o", exe])
    proc = subprocess.run([exe], capture_output=True, text=True)
    assert proc.returncode == 0, (
        f"kernel object of {name} does not speak executable-library ABI v6 "
        f"(runtime_shim/tfrt_abi.h): {proc.stdout.strip()}")
    assert proc.stdout.startswith("version=6 ")
    assert "imports=0" in proc.stdout


def test_abi_version_mismatch_is_reported_at_init(tmp_path):
    name = "accumulator"
    _, out, manifest = backend_models.built(name)
    src = out / "src"
    exe = tmp_path / "loop"
    _run(["gcc", *WARN, *_model_defs(name), f"-DQUERY={manifest['kernel_query_symbol']}",
          "-I", src, C_DIR / "step_loop.c", src / f"{name}.c", C_DIR / "fake_kernels.c",
          "-lm", "-o", exe])
    proc = subprocess.run([exe], capture_output=True, text=True)
    assert proc.returncode == 3
    assert "init: 4 kernel object does not implement executable-library ABI v6" in proc.stderr


def test_two_models_link_into_one_program(tmp_path):
    a = backend_models.built("accumulator")[1]
    m = backend_models.built("multi")[1]
    exe = tmp_path / "two"
    _run(["gcc", *WARN, "-I", a, "-I", m, C_DIR / "two_models.c", a / "libaccumulator.a",
          m / "libmulti.a", "-lm", "-o", exe])
    assert _run([exe]).stdout.strip() == "12 3"


HOOKS_C = """#include <string.h>
#include "accumulator.h"
int accumulator_read_input(void *user, float *in, size_t n) {
  int *t = user;
  memset(in, 0, n * sizeof *in);
  return (*t)++ < 10;
}
int accumulator_write_output(void *user, const float *out, size_t n) {
  (void)user, (void)out, (void)n;
  return 0;
}
"""
RUN_C = """#include <stdio.h>
#include "accumulator.h"
static _Alignas(ACCUMULATOR_CTX_ALIGN) unsigned char mem[ACCUMULATOR_CTX_SIZE];
int main(void) {
  int t = 0;
  accumulator_ctx *ctx = (accumulator_ctx *)mem;
  if (accumulator_init(ctx) != ACCUMULATOR_OK) return 2;
  long steps = accumulator_run(ctx, &t, -1);
  printf("%ld %s\\n", steps, steps < 0 ? accumulator_status_string((int)-steps) : "");
  return steps == -ACCUMULATOR_ERR_NO_HOOK ? 3 : steps == 10 ? 0 : 1;
}
"""


def test_hooks_missing_from_the_link_are_an_error_not_an_empty_run(tmp_path):
    """Hooks in a static library are never linked over the library's weak
    defaults; the defaults end the run with NO_HOOK (they returned 0: an
    empty input, no error). Linked as an object, the program's hooks run."""
    out = backend_models.built("accumulator")[1]
    (tmp_path / "hooks.c").write_text(HOOKS_C)
    (tmp_path / "run.c").write_text(RUN_C)
    for src in ("hooks", "run"):
        _run(["gcc", *WARN, "-I", out, "-c", tmp_path / f"{src}.c", "-o", tmp_path / f"{src}.o"])
    _run(["ar", "rcs", tmp_path / "libboard.a", tmp_path / "hooks.o"])
    lib = [out / "libaccumulator.a", "-lm"]
    _run(["gcc", tmp_path / "run.o", "-L", tmp_path, "-lboard", *lib, "-o", tmp_path / "archive"])
    _run(["gcc", tmp_path / "run.o", tmp_path / "hooks.o", *lib, "-o", tmp_path / "object"])
    proc = subprocess.run([tmp_path / "archive"], capture_output=True, text=True)
    assert proc.returncode == 3, proc.stdout
    assert "accumulator_read_input" in proc.stdout and "object file" in proc.stdout
    assert _run([tmp_path / "object"]).stdout.strip() == "10"


def test_two_builds_are_byte_identical(tmp_path):
    from tfaot.backend.build import build_library

    spec = backend_models.ALL["lstm"]()
    outs = []
    for i in range(2):
        out = tmp_path / f"out{i}"
        build_library(spec.mlir, spec.signature, out, name=spec.name,
                      workdir=tmp_path / f"work{i}")
        outs.append(out)
    cmp = filecmp.dircmp(outs[0], outs[1])
    files = sorted(p.relative_to(outs[0]) for p in outs[0].rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(outs[1]) for p in outs[1].rglob("*") if p.is_file())
    for rel in files:
        assert (outs[0] / rel).read_bytes() == (outs[1] / rel).read_bytes(), f"{rel} differs"
    assert not cmp.diff_files
    for f in files:
        text = (outs[0] / f).read_bytes()
        assert str(tmp_path).encode() not in text, f"{f} contains the build path"


@pytest.mark.parametrize("name", ["lstm", "multi"])
def test_contexts_in_parallel_threads(name, tmp_path):
    _, out, _ = backend_models.built(name)
    src = out / "src"
    exe = tmp_path / "threads"
    _run(["gcc", *WARN, "-O1", "-g", "-fsanitize=thread", *_model_defs(name), "-I", src,
          C_DIR / "threads.c", src / f"{name}.c", src / f"{name}_kernels.o", "-lm",
          "-pthread", "-o", exe])
    proc = _run([exe], env={"TSAN_OPTIONS": "halt_on_error=1"})
    assert proc.stdout.strip() == "ok" and "ThreadSanitizer" not in proc.stderr


def test_names_reach_c_strings_and_comments_intact(tmp_path):
    """A tensor name with a quote, a backslash, '?', '*/' or UTF-8 (a
    SavedModel's signature keys may hold any) becomes a C string that prints
    it back, and a comment that stays one line and closed."""
    from tfaot.resources import c_comment, c_string

    name = 'x"y\\z??=/*a*/ é\n'
    (tmp_path / "s.c").write_text(f'#include <stdio.h>\n/* {c_comment(name)} */\n'
                                  f'int main(void) {{ fputs("{c_string(name)}", stdout); '
                                  'return 0; }\n')
    _run(["gcc", *WARN, tmp_path / "s.c", "-o", tmp_path / "s"])
    assert subprocess.run([tmp_path / "s"], capture_output=True).stdout == name.encode()
    assert not any(bad in c_comment(name) for bad in ("\n", "*/", "/*"))


def test_tensor_names_that_are_cxx_keywords_or_gnu_macros_make_valid_fields(tmp_path):
    """Inputs and outputs named 'float', 'linux' (a macro in gcc's GNU
    modes), 'class' and 'new' (C++): the typed structs' members are escaped
    for C in GNU mode and for C++ alike."""
    import keras

    from tfaot.cli import main

    ins = [keras.Input((None, 2), name=n) for n in ("float", "linux")]
    h = keras.layers.GRU(4)(keras.layers.Concatenate()(ins))
    model = keras.Model(ins, [keras.layers.Dense(2, name="class")(h),
                              keras.layers.Dense(1, name="new")(h)])
    model.save(tmp_path / "kw.keras")
    assert main(["-q", "build", str(tmp_path / "kw.keras"), "-o", str(tmp_path / "kw")]) == 0
    src = ('#include "kw.h"\nint main(void) { kw_inputs i; kw_outputs o; i.float_[0] = 1; '
           'i.linux_[0] = 2; o.class_[0] = 3; o.new_[0] = 4; '
           'return (int)(i.float_[0] + i.linux_[0] + o.class_[0] + o.new_[0]) - 10; }\n')
    (tmp_path / "m.c").write_text(src)
    (tmp_path / "m.cc").write_text(src)
    _run(["gcc", "-std=gnu11", "-Wall", "-Wextra", "-Werror", "-I", tmp_path / "kw",
          tmp_path / "m.c", "-o", tmp_path / "m"])
    assert subprocess.run([tmp_path / "m"]).returncode == 0
    if shutil.which("g++"):
        _run(["g++", "-Wall", "-Wextra", "-Werror", "-I", tmp_path / "kw", "-c",
              tmp_path / "m.cc", "-o", tmp_path / "m.o"])


def test_every_c_file_of_src_compiles_and_links_on_its_own(tmp_path):
    """An IDE, or a CMake file(GLOB) of src/*.c, compiles every .c there:
    the shim's files (which NAME.c includes) compile to nothing on their own
    (tfrt_core.c stopped at an #error about tfrt_backend.h), and the objects
    link into a program with NAME.c's."""
    out = backend_models.built("accumulator")[1]
    objects = []
    for source in sorted((out / "src").glob("*.c")):
        objects.append(tmp_path / f"{source.stem}.o")
        _run(["gcc", *WARN, "-I", out / "src", "-c", source, "-o", objects[-1]])
    assert len(objects) >= 3  # accumulator.c, tfrt_core.c, tfrt_cpu.c
    (tmp_path / "run.c").write_text(RUN_C)
    (tmp_path / "hooks.c").write_text(HOOKS_C)
    _run(["gcc", *WARN, "-I", out / "src", tmp_path / "run.c", tmp_path / "hooks.c", *objects,
          out / "src" / "accumulator_kernels.o", "-lm", "-o", tmp_path / "app"])
    assert _run([tmp_path / "app"]).stdout.strip() == "10"
