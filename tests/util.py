"""Helpers shared by the tests that run compilers, emulators and the CLI."""
import importlib.util
import subprocess


def run(cmd, cwd=None, **kw):
    """Runs ``cmd`` (paths allowed) and fails the test, with its output, unless it succeeds."""
    proc = subprocess.run([str(c) for c in cmd], cwd=cwd, capture_output=True, text=True, **kw)
    assert proc.returncode == 0, f"{' '.join(map(str, cmd))}\n{proc.stdout}\n{proc.stderr}"
    return proc


def module_from_source(path, text: str, name: str):
    """``text`` written to ``path`` and run as module ``name`` (a user's file
    of custom classes, given to the build with --custom-objects)."""
    path.write_text(text)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


#: the ISA macros an "avx512_emulated" build defines: the AVX-512 (and
#: VNNI) paths of the kernels, which an AVX-512 CPU takes with -march=native
EMULATED_AVX512 = ["__AVX__", "__AVX2__", "__FMA__", "__AVX512F__", "__AVX512BW__",
                   "__AVX512DQ__", "__AVX512VL__", "__AVX512VNNI__"]


def x86_isa_flags(isa: str) -> list[str] | None:
    """C compiler flags that select one x86-64 path of the micro-kernels
    ("generic": SSE2 only; "avx2": AVX2 and FMA without AVX-512; "native":
    this CPU's, e.g. AVX-512; "avx512_emulated": the AVX-512 VNNI paths on
    any x86-64, their intrinsics in portable C: emulated_avx512_flags), or
    None when this machine cannot run it (not x86-64, or no AVX2): so each
    path is tested wherever it can run, whatever the CPU the suite is on."""
    import platform
    from pathlib import Path

    if platform.machine() != "x86_64":
        return [] if isa == "native" else None
    if isa == "avx512_emulated":
        return emulated_avx512_flags()
    flags = {"generic": [], "avx2": ["-mavx2", "-mfma"], "native": ["-march=native"]}[isa]
    if isa == "avx2":
        cpu = f" {Path('/proc/cpuinfo').read_text().replace(chr(10), ' ')} "
        if " avx2 " not in cpu or " fma " not in cpu:
            return None
    return flags


def sanitized_builds(isas: list[str]) -> list[tuple[str, str]]:
    """(compiler, isa) pairs of a sanitized kernel check: each of ``isas``
    with gcc and with clang, and the emulated AVX-512 paths with clang
    (gcc's AddressSanitizer build of SIMDe's intrinsics takes a minute,
    clang's 8 s)."""
    return [(cc, isa) for isa in isas for cc in ("gcc", "clang")] + [("clang", "avx512_emulated")]


def emulated_avx512_flags() -> list[str]:
    """Flags that build the kernels' AVX-512 VNNI paths for any x86-64 CPU:
    the ISA macros defined by hand, TFRT_INTRINSICS_ONLY, and
    data/kernels/emulated/immintrin.h (SIMDe's portable intrinsics) in
    place of the compiler's. Fails (TFAOT_REQUIRE_TOOLS=1) or skips
    without SIMDe's headers (apt-get install libsimde-dev). -Wno-psabi: a
    512-bit vector passed by value without -mavx512f changes the ABI, which
    the emulation's inline functions do not care about."""
    import os
    from pathlib import Path

    import pytest

    if not Path("/usr/include/simde/x86/avx512.h").exists():
        message = "needs SIMDe's headers (apt-get install libsimde-dev)"
        if os.environ.get("TFAOT_REQUIRE_TOOLS") == "1":
            pytest.fail(f"required: {message}")
        pytest.skip(message)
    emulated = Path(__file__).parent / "data" / "kernels" / "emulated"
    return [*(f"-D{macro}" for macro in EMULATED_AVX512), "-DTFRT_INTRINSICS_ONLY",
            "-I", str(emulated), "-Wno-psabi"]


def kernel_calls_of_streams_build(path, out, kernel: str, capsys) -> int:
    """Builds the model at ``path`` with --streams 3 into ``out`` (its temps
    kept), checks that verify passes over 100 steps, and returns how many
    calls of tfaot's ``kernel`` ("pool", "resize") its compiled module makes."""
    import re

    from tfaot.cli import main

    assert main(["-q", "build", str(path), "-o", str(out), "--streams", "3",
                 "--keep-temps"]) == 0
    mlir = (out / "temps" / "compile" / f"{path.stem}.mlir").read_text()
    assert main(["verify", str(path), str(out), "--steps", "100"]) == 0
    assert ": ok" in capsys.readouterr().out
    return len(re.findall(rf"call @tfaot_{kernel}_\d+\(", mlir))


def stream_matches_keras(lib, model, name: str, compared: int, seed: int, atol: float = 1e-5):
    """Runs the library ``lib`` over ``compared`` steps past its first valid
    one, from random frames (``seed``), and asserts that its outputs are
    Keras's on at least 100 of them (the others undefined, before the
    stream's window fills); returns (frames, outputs)."""
    import numpy as np

    from tfaot.verify import keras_reference, library_stream

    stream = library_stream(lib, model, name)
    steps = compared + stream.first_valid_step
    xs = np.random.default_rng(seed).normal(size=(steps, *lib.input_shape)).astype(np.float32)
    want = keras_reference(model, xs, stream=stream, step_output=lib.output_shape)
    got = lib.step_n(xs)
    defined = ~np.isnan(want.reshape(steps, -1)).any(axis=1)
    assert defined.sum() >= 100
    np.testing.assert_allclose(got[defined], want[defined], rtol=0, atol=atol)
    return xs, got
