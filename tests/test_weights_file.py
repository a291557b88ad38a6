"""--weights=file: the weights leave the library for a NAME.weights sidecar
that the program passes to NAME_init_with_weights (checked by size and
FNV-1a hash); and with embedded weights a Cortex-M build keeps them in
read-only sections (flash)."""
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from toolchains import require, require_vulkan
from util import run

from tfaot.package import elf_sections
from tfaot.verify import verify

C_TEST = Path(__file__).parent / "data" / "backend" / "c" / "weights_file.c"


def _lstm():
    import keras

    keras.utils.set_random_seed(5)
    return keras.Sequential([keras.Input((None, 20)), keras.layers.LSTM(48, return_sequences=True),
                             keras.layers.Dense(6)])


WEIGHT_COUNT = 20 * 192 + 48 * 192 + 192 + 48 * 6 + 6
#: Weights of 256 bytes or less (the Dense bias) stay constants in the code.
EXTERNAL_COUNT = WEIGHT_COUNT - 6


@pytest.fixture(scope="module")
def model_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("weights") / "wm.keras"
    _lstm().save(path)
    return path


def _build(model, out, *flags):
    return run([sys.executable, "-m", "tfaot", "build", model, "-o", out, "-q", *flags])


@pytest.fixture(scope="module")
def file_build(model_file):
    out = model_file.parent / "wm_file"
    _build(model_file, out, "--weights=file")
    return out


def test_sidecar_build_matches_tensorflow_and_keeps_weights_out_of_the_code(model_file,
                                                                             file_build):
    manifest = json.loads((file_build / "wm.json").read_text())
    weights = (file_build / "wm.weights").read_bytes()
    assert manifest["weights"]["mode"] == "file" and manifest["weights"]["bytes"] == len(weights)
    assert "wm.weights" in manifest["files"]
    assert len(weights) >= 4 * EXTERNAL_COUNT
    header = (file_build / "wm.h").read_text()
    assert f"#define WM_WEIGHTS_BYTES {len(weights)}u" in header
    assert f"0x{manifest['weights']['fnv1a64']}ull" in header
    # The library holds none of the weights.
    assert not _library_holds_part_of(file_build, weights)
    results = verify(str(model_file), file_build, steps=120, seed=1, tol=1e-5)
    assert all(r.ok and r.steps == 120 for r in results), results


def test_context_holds_the_weights_once(file_build, model_file, tmp_path):
    """init copies the sidecar into one buffer that every weight global
    views: the context is the weights plus what an embedded build's context
    needs, not a buffer per weight global (an LSTM's three, before: 4x)."""
    manifest = json.loads((file_build / "wm.json").read_text())
    weights = manifest["weights"]["bytes"]
    embedded = tmp_path / "wm_embedded"
    _build(model_file, embedded)
    embedded_ram = json.loads((embedded / "wm.json").read_text())["ctx_size"]
    # (the check the sidecar builds pass: an embedded build holds the weights)
    assert _library_holds_part_of(embedded, (file_build / "wm.weights").read_bytes())
    assert weights <= manifest["ctx_size"] <= weights + embedded_ram + 1024, (
        manifest["ctx_size"], weights, embedded_ram, manifest["arena_pools"])


def _library_holds_part_of(out: Path, weights: bytes) -> bool:
    """Whether the library's module object holds any 32-byte window of
    ``weights`` that is not a run of few values (zeros are in any object).
    (Its read-only data's size says nothing reliable: IREE's code for an
    AVX-512 CPU carries more constants than for an AVX2 one.)"""
    obj = subprocess.run(["ar", "p", out / "libwm.a", "wm.o"], capture_output=True,
                         check=True).stdout
    windows = [weights[i:i + 32] for i in range(0, len(weights) - 32, 64)]
    windows = [w for w in windows if len(set(w)) >= 12]
    assert len(windows) >= 16, "too few distinct windows to look for"
    return any(w in obj for w in windows)


def _defined_symbols(out: Path) -> set[str]:
    nm = subprocess.run(["nm", "--defined-only", out / "libwm.a"], capture_output=True,
                        text=True, check=True).stdout
    return {line.split()[-1] for line in nm.splitlines() if len(line.split()) == 3}


def test_sidecar_build_keeps_the_matvec_kernel(file_build):
    """The kernel's packed weights are a global of the host program (passed to
    the dispatch as a binding), so the sidecar holds them and the step still
    runs tfaot's kernel, not IREE's slower matvec."""
    assert "wm_matvec_f32" in _defined_symbols(file_build)


def _check_init(out: Path, tmp_path: Path) -> None:
    exe = tmp_path / "weights_file"
    run(["gcc", "-std=c11", "-Wall", "-Wextra", "-Werror", "-fsanitize=address,undefined",
         "-I", out, C_TEST, out / "libwm.a", "-o", exe, "-lm"])
    proc = run([exe, out / "wm.weights"])
    assert "ALL OK" in proc.stdout, proc.stdout


def test_init_checks_the_weights(file_build, tmp_path):
    _check_init(file_build, tmp_path)


def test_int8_sidecar_holds_the_int8_weights(model_file, file_build, tmp_path):
    """--weights=file with --weights-dtype=int8: the sidecar holds the int8
    weights and their scales (about a quarter of the f32 sidecar), the
    library none of them, and the outputs match TF within int8's tolerance."""
    out = tmp_path / "wm_int8"
    _build(model_file, out, "--weights=file", "--weights-dtype=int8")
    manifest = json.loads((out / "wm.json").read_text())
    assert manifest["weights_dtype"] == "int8" and manifest["weights"]["mode"] == "file"
    int8_bytes = (out / "wm.weights").stat().st_size
    assert int8_bytes == manifest["weights"]["bytes"]
    assert int8_bytes < 0.35 * (file_build / "wm.weights").stat().st_size
    assert "wm_matvec_int8" in _defined_symbols(out)
    assert not _library_holds_part_of(out, (out / "wm.weights").read_bytes())
    results = verify(str(model_file), out, steps=120, seed=3, tol=None)  # the int8 default
    assert all(r.ok and r.steps == 120 for r in results), results
    assert max(r.max_abs_error for r in results) > 1e-5  # the int8 weights are in use
    _check_init(out, tmp_path)


def test_pack_weights_and_weights_file_exclude_each_other(model_file, tmp_path):
    proc = subprocess.run([sys.executable, "-m", "tfaot", "build", str(model_file), "-o",
                           str(tmp_path / "x"), "--weights=file", "--pack-weights"],
                          capture_output=True, text=True)
    assert proc.returncode == 1
    assert "--pack-weights cannot be combined with --weights=file" in proc.stderr
    assert not (tmp_path / "x").exists()


def test_vulkan_sidecar_build_matches_tensorflow(model_file, tmp_path):
    require_vulkan()
    out = tmp_path / "wm_vk"
    _build(model_file, out, "--weights=file", "--target=vulkan")
    assert (out / "wm.weights").stat().st_size >= 4 * EXTERNAL_COUNT
    results = verify(str(model_file), out, steps=120, seed=2, tol=1e-5)
    assert all(r.ok and r.steps == 120 for r in results), results


def test_cortex_m_embedded_weights_stay_in_read_only_sections(model_file, tmp_path):
    """Flash, not RAM: the weights are in .rodata of the objects, and the
    writable sections (copied to RAM at boot) stay small."""
    require("arm-none-eabi-gcc")
    out = tmp_path / "wm_m4"
    _build(model_file, out, "--triple", "thumbv7em-none-eabihf", "--cpu", "cortex-m4")
    sections = {}
    for obj in (out / "src" / "wm_kernels.o",):
        for name, size in elf_sections(obj.read_bytes()).items():
            sections[name] = sections.get(name, 0) + size
    host = subprocess.run(["arm-none-eabi-ar", "p", str(out / "libwm.a"), "wm.o"],
                          capture_output=True).stdout
    for name, size in elf_sections(host).items():
        sections[name] = sections.get(name, 0) + size
    read_only = sum(s for n, s in sections.items() if n.startswith((".rodata", ".text")))
    writable = sum(s for n, s in sections.items() if n.startswith((".data", ".bss")))
    assert read_only >= 4 * WEIGHT_COUNT, sections
    assert writable < 4096, sections
    manifest = json.loads((out / "wm.json").read_text())
    assert manifest["weights"] == {"mode": "embedded"}
    assert np.isclose(manifest["footprint"]["ram_bytes"], manifest["ctx_size"])


def test_cortex_m_int8_sidecar_keeps_its_activation_tables(model_file, tmp_path):
    """An int8 build on a Cortex-M4 looks tanh and logistic up in 2 KB
    tables, which the lowering adds after the weights became globals: with
    --weights=file iree-compile dropped them (its inline-mode dropped-
    constant bug) and emit failed on a null binding. Verified under QEMU.
    (The DS-CNN of bench/bench_mcu.py verifies so too, f32 and int8.)"""
    require("arm-none-eabi-gcc")
    out = tmp_path / "wm_m4_file"
    _build(model_file, out, "--triple", "thumbv7em-none-eabihf", "--cpu", "cortex-m4",
           "--weights=file", "--weights-dtype=int8")
    manifest = json.loads((out / "wm.json").read_text())
    # (tfaot's kernels by default there too: "--weights-dtype=int8 needs
    # tfaot's matvec kernel" was the answer before)
    assert manifest["weights"]["mode"] == "file" and manifest["weights_dtype"] == "int8"
    assert "matvec" in manifest["micro_kernels"]
    results = verify(str(model_file), out, steps=110, seed=1, tol=5e-2)  # (int8)
    assert all(r.ok and r.steps == 110 for r in results), results
