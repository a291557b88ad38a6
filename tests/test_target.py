"""The Target record: one place that turns --target/--triple/--cpu into flags."""
from pathlib import Path

import pytest

from tfaot.errors import TfaotError
from tfaot.target import host_triple
from tfaot.target_options import make_target

CROSS = "riscv64-unknown-linux-gnu" if host_triple().startswith("aarch64") else \
    "aarch64-unknown-linux-gnu"


def test_defaults_are_the_host_for_the_host_and_generic_otherwise():
    host = make_target()
    assert (host.kind, host.triple, host.cpu, host.is_host) == ("cpu", host_triple(), "host", True)
    cross = make_target("cpu", CROSS)
    assert (cross.cpu, cross.is_host) == ("generic", False)


def test_iree_flags_carry_triple_cpu_and_float_abi():
    flags = make_target("cpu", "thumbv7em-none-eabihf", "cortex-m4").iree_flags(Path("k.o"))
    assert flags[3:6] == ["--iree-llvmcpu-target-triple=thumbv7em-none-eabihf",
                          "--iree-llvmcpu-target-cpu=cortex-m4",
                          "--iree-llvmcpu-target-float-abi=hard"]
    assert "--iree-llvmcpu-static-library-output-path=k.o" in flags
    assert "--iree-execution-model=inline-dynamic" in flags
    assert not any("cpu-features" in f for f in flags)
    soft = make_target("cpu", "thumbv7em-none-eabi", "cortex-m4").iree_flags(Path("k.o"))
    # no FPU instruction, floats passed in core registers: as -mfloat-abi=soft
    assert soft[5:7] == ["--iree-llvmcpu-target-float-abi=soft",
                         "--iree-llvmcpu-target-cpu-features=+soft-float"]
    # one workgroup a dispatch on a microcontroller; hosts keep IREE's tiles
    assert "--iree-llvmcpu-number-of-threads=1" in flags
    assert not any("number-of-threads" in f
                   for f in make_target("cpu", CROSS).iree_flags(Path("k.o")))


@pytest.mark.parametrize("triple, cpu, c_flags", [
    ("thumbv7em-none-eabihf", "cortex-m4",
     ("-mthumb", "-mcpu=cortex-m4", "-mfpu=fpv4-sp-d16", "-mfloat-abi=hard")),
    ("thumbv7em-none-eabihf", "cortex-m7",
     ("-mthumb", "-mcpu=cortex-m7", "-mfpu=fpv5-d16", "-mfloat-abi=hard")),
    ("thumbv7em-none-eabi", "cortex-m4", ("-mthumb", "-mcpu=cortex-m4", "-mfloat-abi=soft")),
    ("thumbv6m-none-eabi", "generic", ("-mthumb", "-mfloat-abi=soft")),
    ("aarch64-unknown-linux-gnu", "generic", ()),
])
def test_c_flags_match_the_kernels_abi(triple, cpu, c_flags):
    assert make_target("cpu", triple, cpu).c_flags() == c_flags


@pytest.mark.parametrize("triple, pointer", [
    ("x86_64-unknown-linux-gnu", 8), ("aarch64-linux-gnu", 8), ("thumbv7em-none-eabihf", 4),
    ("riscv32-unknown-none-elf", 4)])
def test_pointer_size(triple, pointer):
    assert make_target("cpu", triple, "generic" if "eabihf" not in triple else "cortex-m4") \
        .pointer_bytes == pointer


@pytest.mark.parametrize("kind, triple, cpu, message", [
    ("metal", None, None, "--target=metal is not supported"),
    ("vulkan", "thumbv7em-none-eabihf", None, "needs a Linux triple"),
    ("vulkan", None, "cortex-m4", "leave --cpu out"),
    ("cpu", CROSS, "host", "--cpu=host is only valid"),
    ("cpu", "thumbv7em-none-eabihf", None, "name the CPU with --cpu"),
    ("cpu", "x86_64-pc-windows-msvc", None, "not ELF"),
    ("cpu", "x86_64-apple-darwin", None, "not ELF"),
    ("cpu", "mips-unknown-linux-gnu", None, "architecture 'mips' is not supported"),
    ("cpu", "x86_64", None, "not a target triple"),
    ("cpu", "x86_64-unknown-freebsd", None, "unknown operating system"),
    # a CPU of another architecture than the triple's (it failed in iree-compile,
    # or, Cortex-A on a Cortex-M triple, in the firmware's link)
    ("cpu", "x86_64-linux-gnu", "cortex-m4", "CPU for 32-bit Arm .* is x86_64"),
    ("cpu", "aarch64-linux-gnu", "znver3", "CPU for x86 .* is aarch64"),
    ("cpu", "thumbv7em-none-eabihf", "skylake", "CPU for x86 .* is thumbv7em"),
    ("cpu", "thumbv7em-none-eabihf", "cortex-a53", "conflicting architecture profiles"),
    ("cpu", "thumbv7em-none-eabihf", "cortex-m4f", "not a Cortex-M CPU gcc knows"),
    # a Cortex-M core of another architecture version built its own code under
    # the triple's name (the header named the triple's)
    ("cpu", "thumbv8m.main-none-eabihf", "cortex-m4", "give --triple thumbv7em-none-eabihf"),
    ("cpu", "thumbv7em-none-eabihf", "cortex-m55", "is a thumbv8.1m.main core"),
    # a CPU the compiler's LLVM does not know failed only in iree-compile
    ("cpu", None, "nonsense", "not a CPU the compiler knows"),
    ("cpu", "x86_64-linux-gnu", "znver44", "did you mean znver4"),
    ("cpu", "aarch64-linux-gnu", "cortex-a767", "did you mean .*cortex-a76"),
])
def test_bad_choices_are_refused(kind, triple, cpu, message):
    with pytest.raises(TfaotError, match=message):
        make_target(kind, triple, cpu)


@pytest.mark.parametrize("triple, cpu, layout", [
    ("thumbv7em-none-eabihf", "cortex-m4", "paired"),  # DSP extension: SMLAD
    ("thumbv7em-none-eabihf", "cortex-m7", "paired"),
    ("thumbv8m.main-none-eabihf", "cortex-m33", "paired"),
    ("thumbv7em-none-eabi", "cortex-m4", "lanes"),  # no FPU to keep words in
    ("thumbv8.1m.main-none-eabihf", "cortex-m55", "rows"),  # Helium: VMLADAV on rows
    ("thumbv6m-none-eabi", "generic", "lanes"),  # no DSP extension
])
def test_int8_blob_layout_is_the_kernels_path(triple, cpu, layout):
    import toolchains

    toolchains.require("arm-none-eabi-gcc")  # the answer comes from its predefined macros
    target = make_target("cpu", triple, cpu)
    assert target.int8_layout == layout
    assert target.int8_paired_rows is (layout == "paired")


def test_hosts_keep_the_int8_blob_of_lanes_apart():
    assert make_target().int8_layout == "lanes"
    assert make_target("cpu", CROSS).int8_layout == "lanes"
