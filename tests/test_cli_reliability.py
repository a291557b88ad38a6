"""`tfaot build` never loses a user's files, and bad command lines fail first, in one line.

Each test runs the command as a user would (``python -m tfaot``) and checks
the exit status, the one-line message and what is on disk afterwards.
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import keras_models


@pytest.fixture(scope="module")
def model_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("rel") / "lstm.keras"
    keras_models.build("simple_rnn_last").save(path)
    return path


@pytest.fixture(scope="module")
def built(tmp_path_factory, model_file):
    """A previous tfaot output folder (built once, copied by each test)."""
    out = tmp_path_factory.mktemp("prev") / "lib"
    proc = tfaot("build", model_file, "-o", out, "-q")
    assert proc.returncode == 0, proc.stderr
    return out


def tfaot(*args, cwd=None, env=None):
    return subprocess.run([sys.executable, "-m", "tfaot", *map(str, args)], cwd=cwd,
                          capture_output=True, text=True, env=env, timeout=600)


def one_error_line(proc) -> str:
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 1, proc.stderr
    assert len(lines) == 1 and lines[0].startswith("tfaot: error: "), proc.stderr
    return lines[0]


def snapshot(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def test_build_into_the_models_own_folder_keeps_every_file(tmp_path, model_file):
    proj = tmp_path / "proj"
    proj.mkdir()
    shutil.copy(model_file, proj / "lstm.keras")
    (proj / "main.c").write_text("int main(void) { return 0; }\n")
    before = snapshot(proj)
    line = one_error_line(tfaot("build", proj / "lstm.keras", "-o", proj))
    assert str(proj) in line and "inside that folder" in line
    # Even --force never deletes the model being compiled.
    line = one_error_line(tfaot("build", proj / "lstm.keras", "-o", proj, "--force"))
    assert "inside that folder" in line
    assert snapshot(proj) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["proj"]  # no staging left


def test_folder_with_user_files_is_refused_before_any_work(tmp_path, model_file):
    proj = tmp_path / "proj"
    proj.mkdir()
    (proj / "main.c").write_text("int main(void) { return 0; }\n")
    (proj / "notes").mkdir()
    start = time.monotonic()
    line = one_error_line(tfaot("build", model_file, "-o", proj))
    assert "main.c" in line and "notes" in line and "--force" in line
    assert time.monotonic() - start < 20  # refused before loading TensorFlow's model
    assert snapshot(proj) == {"main.c": b"int main(void) { return 0; }\n"}


def test_force_replaces_a_folder_with_user_files(tmp_path, model_file):
    proj = tmp_path / "proj"
    proj.mkdir()
    (proj / "old.txt").write_text("x")
    proc = tfaot("build", model_file, "-o", proj, "--force", "-q")
    assert proc.returncode == 0, proc.stderr
    assert not (proj / "old.txt").exists() and (proj / "lstm.json").is_file()


def test_previous_output_is_replaced_but_not_with_a_user_file_added(tmp_path, built, model_file):
    out = tmp_path / "lib"
    shutil.copytree(built, out)
    (out / "lstm.h").write_text("stale\n")
    proc = tfaot("build", model_file, "-o", out, "-q")
    assert proc.returncode == 0, proc.stderr
    assert (out / "lstm.h").read_text() != "stale\n"
    (out / "src" / "mine.c").write_text("/* firmware */\n")
    line = one_error_line(tfaot("build", model_file, "-o", out))
    assert "src/mine.c" in line
    assert (out / "src" / "mine.c").is_file()


def test_kept_temps_count_as_tfaot_output(tmp_path, model_file):
    out = tmp_path / "lib"
    for _ in range(2):
        proc = tfaot("build", model_file, "-o", out, "--keep-temps", "-q")
        assert proc.returncode == 0, proc.stderr
    assert (out / "temps" / "lstm.mlir").is_file()
    manifest = json.loads((out / "lstm.json").read_text())
    assert "temps" not in " ".join(manifest["files"])


def test_output_naming_a_file_is_refused(tmp_path, model_file):
    target = tmp_path / "lib"
    target.write_text("precious\n")
    line = one_error_line(tfaot("build", model_file, "-o", target))
    assert str(target) in line and "not a folder" in line
    assert target.read_text() == "precious\n"


def test_output_below_a_file_is_refused(tmp_path, model_file):
    (tmp_path / "a").write_text("x")
    line = one_error_line(tfaot("build", model_file, "-o", tmp_path / "a" / "out"))
    assert f"{tmp_path / 'a'} is not a folder" in line


def test_dot_as_output_means_the_current_folder(tmp_path, model_file):
    work = tmp_path / "w"
    work.mkdir()
    (work / "keep.txt").write_text("x")
    line = one_error_line(tfaot("build", model_file, "-o", ".", cwd=work))
    assert "keep.txt" in line
    empty = tmp_path / "empty"
    empty.mkdir()
    proc = tfaot("build", model_file, "-o", ".", "-q", cwd=empty)
    assert proc.returncode == 0, proc.stderr
    assert (empty / "lstm.json").is_file()


def _chattr(flag: str, path: Path) -> bool:
    return shutil.which("chattr") is not None and subprocess.run(
        ["chattr", flag, str(path)], capture_output=True).returncode == 0


def test_unwritable_parent_is_refused_before_any_work(tmp_path, model_file):
    parent = tmp_path / "ro"
    parent.mkdir()
    if os.geteuid() != 0:
        parent.chmod(0o555)
    elif not _chattr("+i", parent):
        pytest.skip("running as root on a file system without chattr +i")
    try:
        line = one_error_line(tfaot("build", model_file, "-o", parent / "out"))
        assert str(parent) in line
    finally:
        if os.geteuid() == 0:
            _chattr("-i", parent)
        parent.chmod(0o755)
    assert list(parent.iterdir()) == []


def test_immutable_previous_output_is_refused(tmp_path, built, model_file):
    out = tmp_path / "lib"
    shutil.copytree(built, out)
    if not _chattr("+i", out):
        pytest.skip("chattr +i is not available here")
    try:
        line = one_error_line(tfaot("build", model_file, "-o", out))
        assert str(out) in line and "cannot be replaced" in line
    finally:
        _chattr("-i", out)
    assert snapshot(out) == snapshot(built)


@pytest.mark.parametrize("name", ["tfrt", "tfrt_abi", "TFRT_core"])
def test_reserved_names_are_refused_up_front(tmp_path, model_file, name):
    line = one_error_line(tfaot("build", model_file, "--name", name, "-o", tmp_path / "o"))
    assert f"'{name}' is reserved" in line
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("name, words", [
    ("m", "-lm would link instead of the system's libm"),
    ("c", "-lc would link instead of the system's libc"),
    # (stdint.h in the output folder took the place of <stdint.h>)
    ("stdint", "would write stdint.h, which `#include <stdint.h>` takes instead"),
    ("n" * 64, "has 64 characters; it prefixes every symbol of the library, so it may have 63"),
    ("", "model name is empty"),  # (it fell back to the default silently)
])
def test_names_of_system_libraries_and_long_names_are_refused(tmp_path, model_file, name, words):
    """--name m made libm.a (-lm then took it for the system's libm); a
    name of 64 characters was told it is "not a valid C identifier"."""
    line = one_error_line(tfaot("build", model_file, "--name", name, "-o", tmp_path / "o"))
    assert words in line, line
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("stem", ["tfrt", pytest.param("math", marks=pytest.mark.slow)])
def test_model_file_named_like_the_runtime_gets_a_safe_default_name(tmp_path, model_file, stem):
    model = tmp_path / f"{stem}.keras"
    shutil.copy(model_file, model)
    proc = tfaot("build", model, "-o", tmp_path / "o", "-q")
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "o" / f"m_{stem}.h").is_file()


@pytest.mark.parametrize("triple, why", [
    ("x86_64-pc-windows-msvc", "not ELF"),
    ("aarch64-apple-darwin", "not ELF"),
    ("foo", "not a target triple"),
    ("sparc-unknown-linux-gnu", "architecture 'sparc' is not supported"),
])
def test_unsupported_triples_fail_before_any_work(tmp_path, model_file, triple, why):
    start = time.monotonic()
    line = one_error_line(tfaot("build", model_file, "--triple", triple, "-o", tmp_path / "o"))
    assert f"--triple {triple}" in line and why in line and "supported:" in line
    assert time.monotonic() - start < 20
    assert not (tmp_path / "o").exists()


def test_hard_float_triple_without_cpu_fails_up_front(tmp_path, model_file):
    line = one_error_line(tfaot("build", model_file, "--triple", "thumbv7em-none-eabihf",
                                "-o", tmp_path / "o"))
    assert "--cpu" in line and "cortex-m4" in line


def test_killed_build_leaves_nothing_a_later_build_does_not_remove(tmp_path, model_file):
    out = tmp_path / "lib"
    env = dict(os.environ, TMPDIR=str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    proc = subprocess.Popen([sys.executable, "-m", "tfaot", "build", str(model_file), "-o",
                             str(out)], env=env, stderr=subprocess.PIPE, text=True)
    for line in proc.stderr:  # kill it in the middle of the backend
        if line.startswith("tfaot: compile"):
            break
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    leftovers = [p.name for p in tmp_path.iterdir() if p.name not in ("tmp", "lib")]
    assert leftovers and all(".tfaot-staging." in n for n in leftovers)
    assert not any(p.name.startswith("tfaot-") for p in (tmp_path / "tmp").iterdir())
    other = tmp_path / ".other.tfaot-staging.1"  # someone else's, and pid 1 is alive
    other.mkdir()
    done = tfaot("build", model_file, "-o", out, "-q", env=env)
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == [".other.tfaot-staging.1", "lib", "tmp"]


def test_import_output_must_be_a_file_in_an_existing_folder(tmp_path, model_file):
    line = one_error_line(tfaot("import", model_file, "-o", tmp_path))
    assert "is a folder" in line
    line = one_error_line(tfaot("import", model_file, "-o", tmp_path / "no" / "m.mlir"))
    assert f"{tmp_path / 'no'} does not exist" in line


def test_verify_of_a_folder_that_is_not_a_build(tmp_path, model_file):
    missing = tmp_path / "nothere"
    line = one_error_line(tfaot("verify", model_file, missing))
    assert str(missing) in line and "no such folder" in line
    (tmp_path / "empty").mkdir()
    line = one_error_line(tfaot("verify", model_file, tmp_path / "empty"))
    assert "not a folder tfaot build wrote" in line and "name=" not in line


def test_a_wrapped_error_keeps_its_cause_in_one_line():
    """Keras wraps a layer's error as "Exception encountered when calling
    X.call()." with TensorFlow's function-node marker and an empty op name
    around the cause: the one line tfaot quotes (a probe's note, a refusal)
    is the cause; an announcing first line keeps the line after it."""
    from tfaot.errors import first_line

    keras_error = ValueError(
        "Exception encountered when calling LearnedPos.call().\n\n\x1b[1m{{function_node "
        "__wrapped__AddV2_device_/job:localhost/replica:0/task:0/device:CPU:0}} Incompatible "
        "shapes: [1,5,32] vs. [1,100,32] [Op:AddV2] name: \x1b[0m\n\nArguments received by "
        "LearnedPos.call():\n  x=tf.Tensor(shape=(1, 5, 32), dtype=float32)")
    assert first_line(keras_error) == "Incompatible shapes: [1,5,32] vs. [1,100,32] [Op:AddV2]"
    assert first_line(ValueError("Example error message for object <Dense>:\n\n the cause")) \
        == "Example error message for object <Dense>: the cause"
    assert first_line(ValueError("Exception encountered when calling Lambda.call().")) == \
        "Exception encountered when calling Lambda.call()."
    assert first_line(KeyError()) == "KeyError"
