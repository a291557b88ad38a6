"""tfaot verify of libraries built for another machine: the static library
linked into a runner and stepped under QEMU (compiler/verify/emulate.py),
qemu-aarch64 for an aarch64 Linux build and qemu-system-arm for Cortex-M
builds, its outputs compared with TensorFlow running the original model.
Also the soft-float Cortex-M builds that verify found broken: IREE's
kernels passed floats in FPU registers (the library did not link), the
int8 matvec's paired-lane path needs an FPU, and IREE calls fmaximumf,
which newlib lacks."""
from __future__ import annotations

import re

import pytest

import toolchains
from tfaot.cli import main

STEPS = 120


@pytest.fixture(scope="module")
def conditioned_model(tmp_path_factory):
    """Two inputs (a sequence, and a vector added to its every frame: held)
    and two outputs: the runner's input and output structs."""
    import keras
    from keras import layers as L

    keras.utils.set_random_seed(3)
    seq = keras.Input((None, 6), batch_size=1, name="frames")
    cond = keras.Input((3,), batch_size=1, name="speaker")
    x = L.Add()([seq, L.Reshape((1, 6))(L.Dense(6)(cond))])
    h = L.GRU(24, return_sequences=True)(x)
    model = keras.Model([seq, cond], [L.Dense(4, name="keyword")(h),
                                      L.Dense(2, activation="tanh", name="voice")(h)])
    path = tmp_path_factory.mktemp("conditioned") / "conditioned.keras"
    model.save(path)
    return path


@pytest.fixture(scope="module")
def conv_model(tmp_path_factory):
    """A streamed convolution stack with a ReLU and max pooling over time
    (llvm.maximum: fmaximumf without an FPU) and an LSTM of int8 size."""
    import keras
    from keras import layers as L

    keras.utils.set_random_seed(4)
    x = keras.Input((None, 10), batch_size=1)
    h = L.Conv1D(16, 3, activation="relu")(x)
    h = L.MaxPooling1D(2)(h)
    h = L.LSTM(32, return_sequences=True)(h)
    path = tmp_path_factory.mktemp("conv") / "conv.keras"
    keras.Model(x, L.Dense(3)(h)).save(path)
    return path


def _build(model, out, *flags):
    assert main(["build", str(model), "-o", str(out), "-q", *map(str, flags)]) == 0


def _verify(capsys, *args) -> tuple[int, str, str]:
    capsys.readouterr()
    rc = main(["verify", *map(str, args), "--steps", str(STEPS)])
    captured = capsys.readouterr()
    return rc, captured.out, captured.err


CORTEX_M_BUILDS = {
    # soft float: no FPU instruction may run (the runner leaves the FPU off)
    "m4-soft-int8": ["--triple", "thumbv7em-none-eabi", "--cpu", "cortex-m4",
                     "--weights-dtype", "int8"],
    "m4-soft-f32": ["--triple", "thumbv7em-none-eabi", "--cpu", "cortex-m4"],
    "m7-int8": ["--triple", "thumbv7em-none-eabihf", "--cpu", "cortex-m7",
                "--weights-dtype", "int8"],
    "m33-weights-file": ["--triple", "thumbv8m.main-none-eabihf", "--cpu", "cortex-m33",
                         "--weights", "file"],
    # Helium: the int8 matvec's rows blob (VMLADAV)
    "m55-int8": ["--triple", "thumbv8.1m.main-none-eabihf", "--cpu", "cortex-m55",
                 "--weights-dtype", "int8"],
}


@pytest.mark.parametrize("build", list(CORTEX_M_BUILDS))
def test_verify_steps_a_cortex_m_build_under_qemu(conv_model, build, tmp_path, capsys):
    toolchains.require("arm-none-eabi-gcc", "qemu-system-arm")
    out = tmp_path / build
    _build(conv_model, out, *CORTEX_M_BUILDS[build])
    rc, stdout, stderr = _verify(capsys, conv_model, out)
    assert rc == 0, stdout + stderr
    assert re.search(r"under qemu-system-arm \(mps[23]-an\d+, cortex-m\d+\)", stderr), stderr
    # (the first step's output is before the convolution's window is full)
    assert re.fullmatch(r"y_t: max abs error \S+ over 11\d steps \(tolerance \S+\): ok\n",
                        stdout), stdout


def test_verify_steps_a_build_with_several_inputs_and_outputs(conditioned_model, tmp_path,
                                                             capsys):
    """Both outputs compared (the runner's structs as the C compiler lays
    them out), then the same with a saved case, and a tolerance no build
    meets fails: the outputs come back from the emulated steps."""
    toolchains.require("arm-none-eabi-gcc", "qemu-system-arm")
    out = tmp_path / "m4"
    _build(conditioned_model, out, *CORTEX_M_BUILDS["m4-soft-f32"])
    rc, stdout, stderr = _verify(capsys, conditioned_model, out)
    assert rc == 0, stdout + stderr
    assert "under qemu-system-arm" in stderr
    assert [line.split(":")[0] for line in stdout.splitlines()] == ["keyword", "voice"]
    case = tmp_path / "case.npz"
    rc, _, _ = _verify(capsys, conditioned_model, out, "--save-case", case)
    assert rc == 0 and case.exists()
    capsys.readouterr()
    assert main(["verify", "--case", str(case), str(out)]) == 0
    assert "keyword" in capsys.readouterr().out
    rc, stdout, _ = _verify(capsys, conditioned_model, out, "--tol", "1e-12")
    assert rc == 1 and stdout.count(": FAIL") == 2, stdout


def test_verify_steps_an_aarch64_linux_build_under_qemu_user(conv_model, tmp_path, capsys):
    import platform

    if platform.machine() == "aarch64":
        pytest.skip("this machine runs aarch64 builds itself")
    toolchains.require("aarch64-linux-gnu-gcc", "qemu-aarch64")
    out = tmp_path / "a64"
    _build(conv_model, out, "--triple", "aarch64-linux-gnu", "--weights-dtype", "int8")
    assert not (out / "libconv.so").exists()
    rc, stdout, stderr = _verify(capsys, conv_model, out)
    assert rc == 0, stdout + stderr
    assert "under qemu-aarch64" in stderr and stdout.endswith(": ok\n")


def test_a_machine_without_the_emulator_is_told_what_to_install(monkeypatch):
    from tfaot.errors import TfaotError
    from tfaot.target import host_triple
    from tfaot.verify import emulate

    monkeypatch.setattr(emulate.shutil, "which", lambda tool: None)
    manifest = {"triple": "thumbv7em-none-eabihf", "cpu": "cortex-m4"}
    with pytest.raises(TfaotError) as err:
        emulate.emulator(manifest)
    message = str(err.value)
    assert "arm-none-eabi-gcc and qemu-system-arm" in message
    assert "apt-get install" in message and "--save-case" in message
    with pytest.raises(TfaotError, match="needs aarch64-linux-gnu-gcc and qemu-aarch64"):
        emulate.emulator({"triple": "aarch64-linux-gnu", "cpu": "generic"})
    with pytest.raises(TfaotError, match="QEMU has no board with a cortex-m3"):
        emulate.emulator({"triple": "thumbv7m-none-eabi", "cpu": "cortex-m3"})
    assert not emulate.needs_emulator({"triple": host_triple(), "target": "cpu"})


def test_instruction_sets_a_named_cpu_has_and_this_one_lacks(monkeypatch):
    """From the C compiler's macros for that CPU and for this one (-march=
    native), extensions only: tuning and CPU-name macros are not."""
    from tfaot import target

    macros = {"-march=icelake-server": {"__AVX2__", "__AVX512F__", "__AVX512VNNI__",
                                        "__icelake_server__", "__tune_icelake_server__"},
              "-march=native": {"__AVX2__", "__znver3__"}}
    monkeypatch.setattr(target, "compiler_macros", lambda cc, flag: frozenset(macros[flag]))
    monkeypatch.setattr(target, "is_host_triple", lambda triple: triple.startswith("x86_64"))
    assert target.missing_instruction_sets("x86_64-linux-gnu", "icelake-server") == [
        "AVX512F", "AVX512VNNI"]
    assert target.missing_instruction_sets("x86_64-linux-gnu", "host") == []
    assert target.missing_instruction_sets("x86_64-linux-gnu", "generic") == []
    assert target.missing_instruction_sets("aarch64-linux-gnu", "cortex-a76") == []  # not here


def test_a_library_for_a_cpu_this_one_lacks_is_refused_not_run(conv_model, tmp_path,
                                                                monkeypatch, capsys):
    """Loaded, its first such instruction would kill the process (SIGILL):
    verify and the harness say which extensions are missing instead."""
    from tfaot import target
    from tfaot.verify import harness

    out = tmp_path / "host"
    _build(conv_model, out)
    monkeypatch.setattr(target, "missing_instruction_sets", lambda triple, cpu: ["AVX512F"])
    with pytest.raises(harness.TfaotError, match=r"whose instructions this CPU lacks \(AVX512F\)"):
        harness.load(out)
    rc, stdout, stderr = _verify(capsys, conv_model, out)
    assert rc != 0 and "--save-case" in stderr and "AVX512F" in stderr


def test_a_library_bigger_than_the_board_is_one_line(conv_model, tmp_path, monkeypatch,
                                                      capsys):
    """A library past the QEMU board's memory (a MobileNet's 4 MiB of
    weights on the MPS2) was the linker's lines of warnings and "region
    `CODE' overflowed"; now one line naming the board, the region and the
    way round it. (The board's code memory made small here: the same
    overflow from a small model.)"""
    toolchains.require("arm-none-eabi-gcc", "qemu-system-arm")
    from tfaot.verify import emulate

    out = tmp_path / "m4"
    _build(conv_model, out, "--triple", "thumbv7em-none-eabihf", "--cpu", "cortex-m4")
    board, memory = emulate.BOARDS["cortex-m4"]
    monkeypatch.setitem(emulate.BOARDS, "cortex-m4",
                        (board, [("CODE", 0x0, "16K"), *memory[1:]]))
    rc, stdout, stderr = _verify(capsys, conv_model, out)
    assert rc == 1
    error = [ln for ln in stderr.splitlines() if ln.startswith("tfaot: error")]
    assert len(error) == 1 and "\n" not in stderr.split("tfaot: error")[1].strip(), stderr
    assert re.search(r"does not fit in the memory of QEMU's board qemu-system-arm "
                     r"\(mps2-an386, cortex-m4\): its CODE region \(16KiB\) overflows by "
                     r"\d+ bytes; verify it on the target instead .*--save-case", error[0])
