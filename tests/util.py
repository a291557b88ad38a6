"""Helpers shared by the tests that run compilers, emulators and the CLI."""
import subprocess


def run(cmd, cwd=None, **kw):
    """Runs ``cmd`` (paths allowed) and fails the test, with its output, unless it succeeds."""
    proc = subprocess.run([str(c) for c in cmd], cwd=cwd, capture_output=True, text=True, **kw)
    assert proc.returncode == 0, f"{' '.join(map(str, cmd))}\n{proc.stdout}\n{proc.stderr}"
    return proc


def x86_isa_flags(isa: str) -> list[str] | None:
    """C compiler flags that select one x86-64 path of the micro-kernels
    ("generic": SSE2 only; "avx2": AVX2 and FMA without AVX-512; "native":
    this CPU's, e.g. AVX-512), or None when this machine cannot run it (not
    x86-64, or no AVX2): so each path is tested wherever it can run,
    whatever the CPU the suite is on."""
    import platform
    from pathlib import Path

    if platform.machine() != "x86_64":
        return [] if isa == "native" else None
    flags = {"generic": [], "avx2": ["-mavx2", "-mfma"], "native": ["-march=native"]}[isa]
    if isa == "avx2":
        cpu = f" {Path('/proc/cpuinfo').read_text().replace(chr(10), ' ')} "
        if " avx2 " not in cpu or " fma " not in cpu:
            return None
    return flags
