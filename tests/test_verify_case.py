"""`tfaot verify --save-case` / `--case`: TensorFlow's half of verify on one
machine, the library's on another (a GPU server, a board without TensorFlow).
The replay runs in a process where importing TensorFlow or Keras fails."""
import re
import shutil
import subprocess
import sys

import pytest

from tfaot.cli import main
from tfaot.pipeline import BuildOptions, Progress, build_model

#: Runs ``tfaot`` with TensorFlow and Keras made unimportable.
NO_TF = ("import sys; sys.modules['tensorflow'] = sys.modules['keras'] = None; "
         "from tfaot.cli import main; sys.exit(main(sys.argv[1:]))")


def _gru(seed: int):
    import keras

    keras.utils.set_random_seed(seed)
    return keras.Sequential([keras.Input((None, 6)), keras.layers.GRU(12, return_sequences=True),
                             keras.layers.Dense(3)])


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """Model files a (seed 1) and b (seed 2, same shapes); libraries of a with
    1 and 3 streams, and of b."""
    tmp = tmp_path_factory.mktemp("case")
    for name, seed in (("a", 1), ("b", 2)):
        _gru(seed).save(tmp / f"{name}.keras")
    for model, streams, out in (("a", 1, "a1"), ("a", 3, "a3"), ("b", 1, "b1")):
        build_model(str(tmp / f"{model}.keras"), BuildOptions(out_dir=tmp / out, streams=streams),
                    Progress(enabled=False))
    return tmp


def _no_tf(*args):
    return subprocess.run([sys.executable, "-c", NO_TF, *map(str, args)], capture_output=True,
                          text=True, timeout=300)


@pytest.mark.parametrize("lib", ["a1", "a3"])
def test_saved_case_gives_what_verify_gives_without_tensorflow(built, capsys, lib):
    assert main(["verify", str(built / "a.keras"), str(built / lib), "--steps", "120"]) == 0
    direct = capsys.readouterr().out.strip()
    case = built / f"{lib}.npz"
    assert main(["verify", str(built / "a.keras"), str(built / lib), "--steps", "120",
                 "--save-case", str(case)]) == 0
    assert f"check the library with: tfaot verify --case {case.name} DIR" in \
        capsys.readouterr().out
    replay = _no_tf("verify", "--case", case, built / lib)
    assert replay.returncode == 0, replay.stderr
    assert replay.stdout.strip() == direct
    steps = "360 steps of 3 streams" if lib == "a3" else "120 steps"
    # (the default 1e-5, times the largest |output| where that is over 1)
    assert re.search(rf"over {steps} \(tolerance (1e-05|1\.\de-05)\): ok", direct), direct


def test_case_catches_a_library_of_other_weights(built, tmp_path):
    case = tmp_path / "a.npz"
    assert main(["verify", str(built / "a.keras"), str(built / "a1"), "--steps", "100",
                 "--save-case", str(case)]) == 0
    replay = _no_tf("verify", "--case", case, built / "b1")
    assert replay.returncode == 1 and "FAIL" in replay.stdout, replay.stdout + replay.stderr
    # a looser --tol on the command line replaces the saved one
    assert _no_tf("verify", "--case", case, built / "b1", "--tol", "1e9").returncode == 0


def test_save_case_reads_only_the_manifest(built, tmp_path, capsys):
    """A library for another machine has no host .so: the case is still made."""
    lib = tmp_path / "no_so"
    shutil.copytree(built / "a1", lib)
    for so in lib.glob("*.so"):
        so.unlink()
    case = tmp_path / "c.npz"
    assert main(["verify", str(built / "a.keras"), str(lib), "--save-case", str(case)]) == 0
    assert case.exists() and not (tmp_path / "c.npz.part").exists()
    capsys.readouterr()
    assert main(["verify", "--case", str(case), str(lib)]) == 1
    assert "no liba.so" in capsys.readouterr().err


def _one_line_error(capsys, args, message):
    assert main(args) == 1
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1, err


def test_bad_cases_and_options_are_one_line_errors(built, tmp_path, capsys):
    case = tmp_path / "a3.npz"
    assert main(["verify", str(built / "a.keras"), str(built / "a3"), "--steps", "20",
                 "--save-case", str(case)]) == 0
    capsys.readouterr()
    _one_line_error(capsys, ["verify", "--case", str(case), str(built / "a1")],
                    "saved for a library with streams 3, but")
    junk = tmp_path / "junk.npz"
    junk.write_bytes(b"not a case")
    _one_line_error(capsys, ["verify", "--case", str(junk), str(built / "a1")],
                    "not a case file written by tfaot verify --save-case")
    _one_line_error(capsys, ["verify", str(built / "a.keras"), "--case", str(case),
                             str(built / "a3")], "--case runs a saved case; MODEL belong")
    _one_line_error(capsys, ["verify", "--case", str(case), str(built / "a3"), "--seed", "2"],
                    "--seed belong to making one")
    _one_line_error(capsys, ["verify", "--case", str(case), str(built / "a3"), "--tol", "-1"],
                    "--tol -1.0: must be a finite number")
    _one_line_error(capsys, ["verify", str(built / "a3")],
                    "verify needs MODEL and DIR (or --case FILE DIR)")
    _one_line_error(capsys, ["verify", str(built / "a.keras"), str(built / "a1"),
                             "--save-case", str(tmp_path / "nowhere" / "c.npz")],
                    "no folder")
