"""The instruction-counting QEMU plugin of bench/bench_mcu.py counts what
ran: a 1000-iteration ``subs``/``bne`` loop between two marks is 2000
instructions and, at 1 cycle per ``subs``, 3 per taken and 1 for the final
not-taken branch, 3998 estimated cycles (after the cost of an empty pair
of marks is subtracted, as the bench does)."""
import subprocess
import sys
from pathlib import Path

import pytest

import toolchains
from util import run

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(__file__).parent / "data"


@pytest.mark.parametrize("machine,cpu,script", [("mps2-an386", "cortex-m4", "mps2.ld"),
                                                ("mps3-an547", "cortex-m55", "mps3_an547.ld")])
def test_plugin_counts_a_loop_exactly(machine, cpu, script, tmp_path):
    toolchains.require("arm-none-eabi-gcc", "qemu-system-arm")
    sys.path.insert(0, str(ROOT / "bench"))
    import bench_mcu

    plugin = bench_mcu.build_plugin(tmp_path)
    cm = toolchains.FIRMWARE
    image = tmp_path / "loop.elf"
    run(["arm-none-eabi-gcc", "-std=c11", "-O2", "-mthumb", f"-mcpu={cpu}", "-I", cm,
         "-nostartfiles", "-T", cm / script, cm / "startup.c", DATA / "kernels" / "loop_mark.c",
         "-o", image])
    marker = next(line.split()[0] for line in run(["arm-none-eabi-nm", image]).stdout.splitlines()
                  if line.endswith(" tfaot_mark"))
    proc = subprocess.run(["qemu-system-arm", "-M", machine, "-nographic", "-monitor", "none",
                           "-serial", "none", "-semihosting", "-plugin",
                           f"{plugin},marker=0x{marker}", "-d", "plugin", "-kernel", image],
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    marks = [tuple(map(int, ln.split()[1:])) for ln in (proc.stdout + proc.stderr).splitlines()
             if ln.startswith("mark ")]
    assert proc.returncode == 0 and len(marks) == 4, proc.stdout + proc.stderr
    # the second and third marks are back to back: the marker's return and
    # the next call (the first pair may have the loop's set-up between)
    empty = (marks[2][0] - marks[1][0], marks[2][1] - marks[1][1])
    assert empty == (2, 6)  # bx lr + bl: 3 cycles each
    loop = (marks[3][0] - marks[2][0] - empty[0], marks[3][1] - marks[2][1] - empty[1])
    assert loop == (2000, 1000 + 999 * 3 + 1), loop
