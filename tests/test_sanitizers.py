"""The leak judge of tests/sanitizers.py: a leak of the program's own code
fails, a shared library's (a driver's, loaded or already closed) does not."""
import shutil
from pathlib import Path

import pytest

from sanitizers import run_checked
from util import run

DATA = Path(__file__).parent / "data" / "leaks"


@pytest.mark.parametrize("cc", ["gcc", "clang"])
@pytest.mark.parametrize("closed", [False, True], ids=["loaded", "closed"])
def test_own_leaks_fail_and_library_leaks_do_not(tmp_path, cc, closed):
    if not shutil.which(cc):
        pytest.skip(f"{cc} not installed")
    library = tmp_path / "libdriver.so"
    program = tmp_path / "program"
    run(["gcc", "-shared", "-fPIC", "-O1", DATA / "library.c", "-o", library])
    run([cc, "-g", "-O1", "-fsanitize=address,undefined", DATA / "program.c", "-o", program,
         "-ldl"])
    close = "close" if closed else "keep"
    proc = run_checked([program, library, "none", close])
    assert "LeakSanitizer: detected memory leaks" in proc.stderr  # reported, not failed on
    with pytest.raises(AssertionError, match="leaks in the program's own code"):
        run_checked([program, library, "own", close])
