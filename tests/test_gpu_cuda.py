"""--target=cuda without a GPU: PTX kernels through the CUDA backend of the
runtime shim, checked three ways (none runs a kernel):

* ptxas (pip nvidia-cuda-nvcc) assembles the generated PTX for sm_80 and for
  newer GPUs, as the driver's JIT would;
* the shim's own declarations of the driver functions compile against the
  real cuda.h (pip nvidia-cuda-runtime), gcc and clang, -Werror;
* a fake libcuda.so.1 (tests/data/gpu/fake_libcuda.c: host memory, kernels
  that do nothing, every call logged) runs init/step/reset/get/set_state of
  the built library: the launches (kernel names, grids, blocks, parameter
  counts) must be the host program's dispatches, under ASan and UBSan.

The model is a hand-written LSTM step (tests/backend_models.py): no
TensorFlow, about 2 s per build.
"""
import importlib.util
import os
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest

import backend_models
from util import run

from tfaot.errors import TfaotError
from tfaot.package.gpu_kernels import CudaExecutable, cuda_executable

DATA = Path(__file__).parent / "data" / "gpu"
INSTALL = "pip install nvidia-cuda-nvcc==13.5.37 nvidia-cuda-runtime==13.5.37 (or '.[test]')"


def _cuda_root() -> Path | None:
    """nvidia/cu13 of the pip packages (ptxas in bin/, cuda.h in include/)."""
    spec = importlib.util.find_spec("nvidia")
    for base in (spec.submodule_search_locations or []) if spec else []:
        for root in sorted(Path(base).glob("cu*"), reverse=True):
            if (root / "bin" / "ptxas").exists() and (root / "include" / "cuda.h").exists():
                return root
    return None


@pytest.fixture(scope="module")
def cuda_root() -> Path:
    root = _cuda_root()
    if root is None:
        if os.environ.get("TFAOT_REQUIRE_TOOLS") == "1":
            pytest.fail(f"ptxas and cuda.h missing: {INSTALL}")
        pytest.skip(f"needs ptxas and cuda.h: {INSTALL}")
    return root


def _build(tmp: Path, arch: str | None = None) -> Path:
    from tfaot.backend.build import build_library
    from tfaot.target_options import make_target

    spec = backend_models.ALL["lstm"](n_in=40, hidden=64, n_out=12)
    build_library(spec.mlir, spec.signature, tmp / "out", name="cum",
                  target=make_target("cuda", cpu=arch), workdir=tmp / "work")
    return tmp / "out"


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    """The library folder; the VM program is in ../work/compile/cum.vm.mlir."""
    return _build(tmp_path_factory.mktemp("cuda"))


def _container(lib: Path) -> bytes:
    """The CDA1 container as NAME.c holds it."""
    text = (lib / "src" / "cum.c").read_text()
    start = text.index("cuda_nvptx_fb[")
    body = text[text.index("{", start) + 1:text.index("};", start)]
    return bytes(int(b, 16) for b in body.replace("\n", " ").split(",") if b.strip())


def _ptx(lib: Path) -> tuple[CudaExecutable, str]:
    data = _container(lib)
    exe = cuda_executable(data, "@cuda_nvptx_fb")
    return exe, data[exe.ptx_offset:exe.ptx_offset + exe.ptx_bytes].decode()


# ---- target and command line ----------------------------------------------------


def test_cuda_target_flags_and_arch_choice():
    from tfaot.target_options import make_target

    target = make_target("cuda")
    assert (target.kind, target.cpu, target.is_gpu, target.has_kernel_object) == \
        ("cuda", "sm_80", True, False)
    flags = target.iree_flags(Path("k.o"))
    assert "--iree-hal-target-backends=cuda" in flags and "--iree-cuda-target=sm_80" in flags
    assert "--iree-execution-model=inline-dynamic" in flags
    # the joined products of a cell cost two driver copies a step on a GPU
    assert not target.join_products and make_target("cpu").join_products
    assert make_target("cuda", cpu="sm_86").iree_flags(Path("k.o")).count(
        "--iree-cuda-target=sm_86") == 1
    with pytest.raises(TfaotError, match="sm_90 is rejected by iree-compile 3.13.*use sm_80"):
        make_target("cuda", cpu="sm_90")
    with pytest.raises(TfaotError, match="sm_75 is not supported; supported: sm_80"):
        make_target("cuda", cpu="sm_75")
    with pytest.raises(TfaotError, match="--pack-weights is a CPU option"):
        make_target("cuda", weight_packing=True)


def test_streams_split_cuda_matmuls_along_k():
    """N-stream matmuls are split 4 ways along K on CUDA only, from 5 streams
    (target.SPLIT_K_FROM_STREAMS: measured slower below)."""
    from dataclasses import replace

    from tfaot.target_options import make_target

    split = "--iree-dispatch-creation-split-matmul-reduction=4"
    cuda = make_target("cuda")
    assert split not in cuda.iree_flags(Path("k.o"))
    assert split not in replace(cuda, streams=4).iree_flags(Path("k.o"))
    assert split in replace(cuda, streams=5).iree_flags(Path("k.o"))
    assert split in replace(cuda, streams=32).iree_flags(Path("k.o"))
    for kind in ("vulkan", "cpu"):
        assert split not in replace(make_target(kind), streams=8).iree_flags(Path("k.o"))


def test_cuda_flags_exist_in_the_pinned_compiler():
    from tfaot.backend.compile import iree_compile_binary

    help_text = subprocess.run([iree_compile_binary(), "--help"], capture_output=True,
                               text=True).stdout
    assert "--iree-cuda-target=" in help_text and "--iree-hal-target-backends=" in help_text
    hidden = subprocess.run([iree_compile_binary(), "--help-hidden"], capture_output=True,
                            text=True).stdout
    assert "--iree-dispatch-creation-split-matmul-reduction=" in hidden


@pytest.mark.parametrize("args, message", [
    (["--target=cpu", "--cuda-arch=sm_80"], "--cuda-arch is for --target=cuda"),
    (["--target=cuda", "--cpu=cortex-m4"], "choose the GPU with --cuda-arch"),
    (["--target=cuda", "--cuda-arch=sm_100"], "sm_100 is rejected by iree-compile 3.13"),
])
def test_cli_refuses_wrong_arch_options_in_one_line(tmp_path, capsys, args, message):
    from tfaot.cli import main

    model = tmp_path / "m.keras"
    model.write_bytes(b"not read: the options are refused first")
    assert main(["build", str(model), "-o", str(tmp_path / "out"), *args]) == 1
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1, err


# ---- what the build writes ------------------------------------------------------


def test_manifest_footprint_and_sources(built, tmp_path):
    import json

    manifest = json.loads((built / "cum.json").read_text())
    assert (manifest["target"], manifest["cpu"]) == ("cuda", "sm_80")
    assert manifest["kernel_library"] is None and "dl" in manifest["link_libs"]
    weights = 4 * (40 * 256 + 64 * 256 + 256 + 64 * 12 + 12)
    fp = manifest["footprint"]
    assert fp["device_bytes"] >= weights and fp["executable_bytes"] > 0
    src = built / "src"
    assert (src / "tfrt_cuda.c").exists() and not (src / "cum_kernels.o").exists()
    assert "CUM_ERR_DEVICE" in (built / "cum.h").read_text()
    exe = tmp_path / "linked"
    run(["gcc", "-std=c11", "-I", built, DATA / "cu_driver.c", built / "libcum.a", "-o", exe,
         "-ldl", "-lm"])
    assert "libcuda" not in run(["readelf", "-d", exe]).stdout


@pytest.mark.parametrize("cc", ["gcc", "clang"])
def test_generated_c_is_warning_free(built, tmp_path, cc):
    run([cc, "-std=c11", "-O2", "-Wall", "-Wextra", "-Werror", "-c", "-I", built / "src",
         built / "src" / "cum.c", "-o", tmp_path / "cum.o"])


def test_cda1_reader_tables_and_refusals(built):
    data = _container(built)
    exe, ptx = _ptx(built)
    assert data[exe.ptx_offset + exe.ptx_bytes] == 0  # passed to the driver as a C string
    assert ".target sm_80" in ptx
    for k in exe.kernels:
        assert data[k.name_offset:k.name_offset + len(k.name) + 1] == k.name.encode() + b"\0"
        params = re.search(rf"\.entry {k.name}\((.*?)\)", ptx, re.S).group(1)
        assert params.count(".param .u64 .ptr") == k.binding_count
        assert params.count(".param .b32") == k.constant_count
        assert k.block_dims[0] >= 1 and f".maxntid {k.block_dims[0]}, " in ptx
    with pytest.raises(TfaotError, match="@bad.*not a version-0 CDA1"):
        cuda_executable(b"VKE1" + data[4:], "@bad")
    unterminated = bytearray(data)
    unterminated[exe.ptx_offset + exe.ptx_bytes] = ord("x")
    with pytest.raises(TfaotError, match="PTX image in @bad is not NUL-terminated"):
        cuda_executable(bytes(unterminated), "@bad")


# ---- ptxas and cuda.h -----------------------------------------------------------


@pytest.mark.parametrize("gpu", ["sm_80", "sm_90", "sm_120"])
def test_ptx_assembles_for_the_arch_and_newer_gpus(built, cuda_root, tmp_path, gpu):
    """sm_80 PTX is what the driver JITs for Hopper and Blackwell GPUs."""
    _, ptx = _ptx(built)
    (tmp_path / "k.ptx").write_text(ptx)
    run([cuda_root / "bin" / "ptxas", f"-arch={gpu}", tmp_path / "k.ptx", "-o",
         tmp_path / "k.cubin"])


def test_cuda_arch_sm86_gives_sm86_ptx(cuda_root, tmp_path):
    lib = _build(tmp_path, "sm_86")
    _, ptx = _ptx(lib)
    assert ".target sm_86" in ptx
    (tmp_path / "k.ptx").write_text(ptx)
    run([cuda_root / "bin" / "ptxas", "-arch=sm_86", tmp_path / "k.ptx", "-o",
         tmp_path / "k.cubin"])


DECLARATION_CHECK = r"""
#include <cuda.h>
#define TFRT_CU_DECLARATIONS_ONLY 1
#define TFRT_UNITY_BUILD 1
#include "tfrt_cuda.c"
/* Each of the shim's function-pointer types takes the real prototype. */
#define CHECK(f, params) { tfrt_cu_fn_##f p = f; (void)p; }
void check(void) { TFRT_CU_FUNCTIONS(CHECK) }
_Static_assert(TFRT_CU_SUCCESS == CUDA_SUCCESS, "CUDA_SUCCESS");
_Static_assert(TFRT_CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES ==
               CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, "");
_Static_assert(TFRT_CU_STREAM_NON_BLOCKING == CU_STREAM_NON_BLOCKING, "");
_Static_assert(sizeof(tfrt_cu_deviceptr) == sizeof(CUdeviceptr), "");
"""


@pytest.mark.parametrize("cc", ["gcc", "clang"])
def test_driver_declarations_match_cuda_h(built, cuda_root, tmp_path, cc):
    check = tmp_path / "check.c"
    check.write_text(DECLARATION_CHECK)
    cmd = [cc, "-std=c11", "-Wall", "-Wextra", "-Werror", "-c", "-I", cuda_root / "include",
           "-I", built / "src", check, "-o", tmp_path / "check.o"]
    run(cmd)
    # The check bites: one wrong parameter type is an error.
    wrong = tmp_path / "wrong"
    wrong.mkdir()
    shim = (built / "src" / "tfrt_cuda.c").read_text()
    (wrong / "tfrt_cuda.c").write_text(shim.replace("X(cuInit, (unsigned int flags))",
                                                    "X(cuInit, (int flags))"))
    proc = subprocess.run([str(c) for c in cmd[:6] + ["-I", wrong] + cmd[6:]],
                          capture_output=True, text=True)
    assert proc.returncode != 0 and "cuInit" in proc.stderr


# ---- the library on a fake driver -----------------------------------------------


@pytest.fixture(scope="module")
def fake_driver(tmp_path_factory) -> Path:
    """A folder holding the fake libcuda.so.1 (for LD_LIBRARY_PATH)."""
    folder = tmp_path_factory.mktemp("fake_cuda")
    run(["gcc", "-shared", "-fPIC", "-O1", "-g", "-Wall", "-Wextra", "-Werror",
         DATA / "fake_libcuda.c", "-o", folder / "libcuda.so.1"])
    return folder


#: What the fake driver prints when it is unloaded with everything released.
NO_LEAKS = "leaks contexts 0 modules 0 allocations 0 streams 0"
_RODATA_STRING = re.compile(r'vm\.rodata private @(\w+) <alignment = 1> "([^"]*)"')
_FUNC = re.compile(r"^    vm\.func private @(\w+)\(", re.M)


def expected_launches(vm_text: str) -> dict[str, list[tuple]]:
    """VM function -> its dispatches in order: (kernel, grid, parameter count).

    The functions are straight-line (asserted): each dispatch runs once per call."""
    strings = dict(_RODATA_STRING.findall(vm_text))
    found = {}
    starts = list(_FUNC.finditer(vm_text))
    for m, nxt in zip(starts, starts[1:] + [None]):
        body = vm_text[m.end():nxt.start() if nxt else len(vm_text)]
        consts = dict(re.findall(r"%(\w+) = vm\.const\.i32 (\d+)", body))
        refs = dict(re.findall(r"%(\w+) = vm\.const\.ref\.rodata @(\w+)", body))
        lookups = {v: strings[refs[s]] for v, s in re.findall(
            r"%(\w+) = vm\.call @hal_loader\.executable\.lookup\.function\(%\w+, %(\w+)\)", body)}
        launches = []
        for fid, x, y, z, constants, bindings in re.findall(
                r"@hal_loader\.executable\.dispatch\(%\w+, %(\w+), %(\w+), %(\w+), %(\w+), "
                r"\[([^\]]*)\], \[(.*?)\]\) :", body):
            params = len([c for c in constants.split(",") if c.strip()]) + bindings.count("(")
            launches.append((lookups[fid], tuple(int(consts[c]) for c in (x, y, z)), params))
        if launches:
            assert "vm.cond_br" not in body and "vm.br " not in body, m.group(1)
        found[m.group(1)] = launches
    return found


def _calls_by_phase(log: str) -> list[tuple[str, list[str]]]:
    """Splits the driver's log at its "== PHASE STATUS" lines: each phase gets the
    fake driver's lines logged during that call."""
    phases, pending = [], []
    for line in log.splitlines():
        if line.startswith("== "):
            name = line.split()[1]
            if name != "begin":
                phases.append((name, pending))
            pending = []
        else:
            pending.append(line)
    return phases


@pytest.mark.parametrize("cc", ["gcc", "clang"])
def test_launches_match_the_host_program_under_sanitizers(built, fake_driver, tmp_path, cc):
    exe = tmp_path / f"drv_{cc}"
    run([cc, "-std=c11", "-O1", "-g", "-Wall", "-Wextra", "-Werror",
         "-fsanitize=address,undefined", "-fno-sanitize-recover=undefined",
         "-I", built / "src", DATA / "cu_driver.c", built / "src" / "cum.c", "-o", exe,
         "-ldl", "-lm"])
    env = dict(os.environ, LD_LIBRARY_PATH=str(fake_driver))
    log = run([exe, "calls"], env=env).stdout
    assert "ALL OK" in log and "BAD" not in log, log

    vm = expected_launches((built.parent / "work" / "compile" / "cum.vm.mlir").read_text())
    assert len(vm["step"]) >= 5 and vm["reset"], vm  # the LSTM's dispatches were found
    exe_desc, _ = _ptx(built)
    api_to_vm = {"init": "__init", "step": "step", "reset": "reset", "get_state": "get_state",
                 "set_state": "set_state", "deinit": None}
    phases = _calls_by_phase(log)
    assert [p for p, _ in phases] == ["init", "step", "step", "step", "reset", "get_state",
                                      "set_state", "step", "deinit"]
    for phase, lines in phases:
        launches = [line.split() for line in lines if line.startswith("launch ")]
        got = [(w[1], (int(w[3]), int(w[4]), int(w[5])), int(w[13])) for w in launches]
        want = vm.get(api_to_vm[phase], []) if api_to_vm[phase] else []
        if phase == "init":  # (init runs @reset after @__init: model.c.j2)
            want = want + vm["reset"]
        assert got == want, (phase, lines)
        blocks = {k.name: k.block_dims for k in exe_desc.kernels}
        assert all(tuple(map(int, w[7:10])) == blocks[w[1]] for w in launches), lines
    init_lines = phases[0][1]
    # init loads the one PTX module and every kernel of the table, nothing else.
    assert [l.split()[1] for l in init_lines if l.startswith("function ")] == \
        [k.name for k in exe_desc.kernels]
    assert sum(l.startswith("module ") for l in init_lines) == 1
    # The step's input is staged (copied to device memory) once per step, and
    # its output (12 floats) copied out by the driver: a host read of managed
    # memory would fault its page over, and the next kernel's fault it back.
    assert all(sum(l.startswith("copy ") for l in lines) == 1
               for p, lines in phases if p == "step")
    assert all([l for l in lines if l.startswith("read ")] == ["read 48"]
               for p, lines in phases if p == "step")
    state_reads = [l for p, lines in phases if p == "get_state" for l in lines
                   if l.startswith("read ")]
    assert state_reads == ["read 256", "read 256"], state_reads  # h and c of the LSTM(64)
    assert NO_LEAKS in phases[-1][1], log


@pytest.fixture(scope="module")
def sanitized_driver(built, tmp_path_factory) -> Path:
    exe = tmp_path_factory.mktemp("cu_driver") / "drv"
    run(["gcc", "-std=c11", "-O1", "-g", "-fsanitize=address,undefined",
         "-fno-sanitize-recover=undefined", "-I", built / "src", DATA / "cu_driver.c",
         built / "src" / "cum.c", "-o", exe, "-ldl", "-lm"])
    return exe


def test_without_a_device_init_reports_the_device_status(sanitized_driver, fake_driver,
                                                          tmp_path):
    no_gpu = dict(os.environ, LD_LIBRARY_PATH=str(fake_driver), FAKE_CUDA_DEVICES="0")
    proc = run([sanitized_driver, "init"], env=no_gpu)
    assert "init: 14 " in proc.stdout and NO_LEAKS in proc.stdout, proc.stdout
    import ctypes.util

    if ctypes.util.find_library("cuda"):
        pytest.skip("this machine has a real libcuda: the no-driver case cannot be staged")
    proc = run([sanitized_driver, "init"], env=dict(os.environ, LD_LIBRARY_PATH=str(tmp_path)))
    assert "init: 14 " in proc.stdout, proc.stdout


@pytest.mark.parametrize("failing", ["cuStreamCreate", "cuMemAlloc_v2", "cuModuleLoadData",
                                     "cuModuleGetFunction", "cuLaunchKernel",
                                     "cuStreamSynchronize"])
def test_a_failing_driver_call_is_a_status_and_releases_everything(
        sanitized_driver, fake_driver, failing):
    env = dict(os.environ, LD_LIBRARY_PATH=str(fake_driver), FAKE_CUDA_FAIL=failing)
    proc = subprocess.run([str(sanitized_driver), "calls"], capture_output=True, text=True,
                          env=env)
    statuses = [line.split()[1:] for line in proc.stdout.splitlines()
                if line.startswith("== ") and "begin" not in line]
    assert proc.returncode == 1 and "FAILED" in proc.stdout, proc.stdout + proc.stderr
    assert statuses[-2][1] == "14" and statuses[-1] == ["deinit", "0"], proc.stdout
    assert all(status == "0" for _, status in statuses[:-2]), proc.stdout
    assert NO_LEAKS in proc.stdout, proc.stdout


def test_harness_steps_the_library_in_a_child_process(built, fake_driver, monkeypatch):
    """tfaot verify's path: the harness runs GPU libraries in a child process."""
    from tfaot.verify.process import run_in_child

    monkeypatch.setenv("LD_LIBRARY_PATH", str(fake_driver))
    xs = np.zeros((5, 1, 40), np.float32)
    (ys,) = run_in_child(built, [xs], name="cum")
    assert ys.shape == (5, 1, 12)  # values are garbage: the fake runs no kernels
