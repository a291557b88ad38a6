"""Helpers shared by the tests that run compilers, emulators and the CLI."""
import subprocess


def run(cmd, cwd=None, **kw):
    """Runs ``cmd`` (paths allowed) and fails the test, with its output, unless it succeeds."""
    proc = subprocess.run([str(c) for c in cmd], cwd=cwd, capture_output=True, text=True, **kw)
    assert proc.returncode == 0, f"{' '.join(map(str, cmd))}\n{proc.stdout}\n{proc.stderr}"
    return proc
