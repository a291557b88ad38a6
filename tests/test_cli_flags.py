"""Names and flags: duplicates and bad values are refused up front in one line,
flags a model cannot use are warned about, signals and closed pipes end the
command cleanly, and a SavedModel's signature is named and choosable."""
import json
import os
import signal
import subprocess
import sys
import time
import zipfile

import numpy as np
import pytest

import graph_models as gm
from tfaot.cli import main


def _graph(path, shape=(1, 4, 3)):
    """x -> mean over axis 1 -> Dense(2): a tiny frozen graph."""
    import tensorflow as tf

    g = tf.Graph()
    with g.as_default():
        x = tf.compat.v1.placeholder(tf.float32, shape, name="x")
        w = np.linspace(-1, 1, 3 * 2, dtype=np.float32).reshape(3, 2)
        tf.tanh(tf.matmul(tf.reduce_mean(x, axis=1), tf.constant(w)), name="y")
    gm.write_graph_def(g.as_graph_def(), path, text=False)
    return path


@pytest.fixture(scope="module")
def graph_file(tmp_path_factory):
    return _graph(tmp_path_factory.mktemp("flags") / "g.pb")


@pytest.fixture(scope="module")
def keras_file(tmp_path_factory):
    import keras

    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((None, 3)), keras.layers.SimpleRNN(2),
                              keras.layers.Dense(2)])
    path = tmp_path_factory.mktemp("flags_keras") / "small.keras"
    model.save(path)
    return path


def _error_line(capsys, argv) -> str:
    assert main([str(a) for a in argv]) == 1
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines and lines[-1].startswith("tfaot: error: "), lines
    assert not any("Traceback" in line or "internal error" in line for line in lines)
    return lines[-1]


@pytest.mark.parametrize("flags, words", [
    (["--inputs", "x,x"], ["--inputs", "'x'", "twice"]),
    (["--outputs", "y,y:0"], ["--outputs", "twice"]),
    (["--state", "a=b,a=c"], ["--state", "'a'"]),
    (["--state", "a=c,b=c"], ["--state", "'c'"]),
    (["--inputs", "x:1x3x6x"], ["--inputs", "x:1x3x6x", "missing"]),
    (["--inputs", "x:-1x3x6"], ["--inputs", "'-1'"]),
    (["--inputs", "x:1x0x3"], ["--inputs", "length 0"]),
])
def test_bad_graph_flags_are_refused_before_any_work(graph_file, tmp_path, capsys, flags,
                                                     words):
    out = tmp_path / "out"
    line = _error_line(capsys, ["build", graph_file, "-o", out, *flags])
    for word in words:
        assert word in line, line
    assert not out.exists() and list(tmp_path.iterdir()) == []


def test_empty_dimension_in_the_model_names_the_input(tmp_path, capsys):
    path = _graph(tmp_path / "empty.pb", shape=(1, 0, 3))
    out = tmp_path / "out"
    line = _error_line(capsys, ["build", path, "-o", out])
    assert "input 'x'" in line and "1x0x3" in line and "length 0" in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty.pb"]


@pytest.mark.parametrize("flags, words", [
    (["--tol", "nan"], ["--tol"]),
    (["--tol", "-1"], ["--tol"]),
    (["--seed", "-1"], ["--seed"]),
    (["--steps", "0"], ["--steps"]),
])
def test_bad_verify_numbers_are_refused(graph_file, tmp_path, capsys, flags, words):
    line = _error_line(capsys, ["verify", graph_file, tmp_path, *flags])
    for word in words:
        assert word in line, line


def test_graph_flags_on_a_keras_model_are_warned_about(keras_file, capsys):
    """All but --inputs, which sizes a Keras model's inputs (test_keras_inputs)."""
    assert main(["inspect", str(keras_file), "--state", "a=b", "--outputs", "y"]) == 0
    err = capsys.readouterr().err
    warning = [line for line in err.splitlines() if line.startswith("tfaot: warning:")]
    assert len(warning) == 1 and "--outputs" in warning[0] and "--state" in warning[0]


def test_ignored_graph_flags_are_not_kept_in_the_manifest(keras_file, tmp_path, capsys):
    """They were written to its graph_cut, which verify then applied to a
    frozen graph of the same network (and refused its input's shape); of
    them a Keras build keeps --inputs alone, which verify applies to it."""
    out = tmp_path / "lib"
    assert main(["-q", "build", str(keras_file), "-o", str(out), "--outputs", "y"]) == 0
    manifest = json.loads(next(out.glob("*.json")).read_text())
    assert "graph_cut" not in manifest, manifest.get("graph_cut")
    assert main(["-q", "build", str(keras_file), "-o", str(out), "--outputs", "y",
                 "--inputs", "x_t:1x?x3"]) == 0
    manifest = json.loads(next(out.glob("*.json")).read_text())
    assert manifest["graph_cut"] == {"inputs": "x_t:1x?x3"}, manifest.get("graph_cut")


def test_weights_file_without_large_constants_is_warned_about(tmp_path, capsys):
    import keras

    model = keras.Sequential([keras.Input((3,), batch_size=1), keras.layers.Dense(2)])
    path = tmp_path / "tiny.keras"
    model.save(path)
    assert main(["build", str(path), "-o", str(tmp_path / "out"), "-q",
                 "--weights=file"]) == 0
    err = capsys.readouterr().err
    assert "tfaot: warning: --weights=file" in err and "tiny.weights" in err
    assert not (tmp_path / "out" / "tiny.weights").exists()


def test_keras_load_error_keeps_its_cause(keras_file, tmp_path, capsys):
    """Keras's "could not be loaded ... for object <Dense>:" has its cause on the next line."""
    bad = tmp_path / "bad.keras"
    with zipfile.ZipFile(keras_file) as zin, zipfile.ZipFile(bad, "w") as zout:
        for item in zin.infolist():
            data = zin.read(item.filename)
            if item.filename == "config.json":
                config = json.loads(data)
                for layer in config["config"]["layers"]:
                    if layer["class_name"] == "Dense":
                        layer["config"]["units"] = 5
                data = json.dumps(config).encode()
            zout.writestr(item, data)
    line = _error_line(capsys, ["inspect", bad])
    assert "could not be loaded" in line and "shape" in line.split("Dense")[-1], line


def _saved_model_with_two_signatures(path):
    import tensorflow as tf

    class Two(tf.Module):
        def __init__(self):
            self.w = tf.Variable(np.ones((3, 2), np.float32))

        @tf.function(input_signature=[tf.TensorSpec((1, 3), tf.float32)])
        def small(self, x):
            return {"y": tf.matmul(x, self.w)}

        @tf.function(input_signature=[tf.TensorSpec((1, 3), tf.float32)])
        def wide(self, x):
            return {"y": tf.concat([tf.matmul(x, self.w)] * 3, axis=1)}

    module = Two()
    tf.saved_model.save(module, str(path), signatures={"serving_default": module.small,
                                                       "wide": module.wide})
    return path


def test_saved_model_signature_is_named_and_choosable(tmp_path, capsys):
    path = _saved_model_with_two_signatures(tmp_path / "two")
    assert main(["import", str(path), "-o", str(tmp_path / "m.mlir")]) == 0
    notes = [line for line in capsys.readouterr().err.splitlines() if "uses signature" in line]
    assert len(notes) == 1 and "'serving_default'" in notes[0] and "wide" in notes[0]
    assert main(["inspect", str(path), "--json", "--signature", "wide"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["outputs"][0]["shape"] == [1, 6]
    line = _error_line(capsys, ["inspect", path, "--signature", "nope"])
    assert "--signature nope" in line and "wide" in line


def test_inspect_names_the_signature_it_took(tmp_path, capsys):
    """The build says which of several signatures it took; inspect, where a
    user looks first, said nothing of it."""
    path = _saved_model_with_two_signatures(tmp_path / "two")
    assert main(["inspect", str(path)]) == 0
    lines = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("signature:")]
    assert lines == ["signature:  'serving_default' (also has wide; --signature NAME for "
                     "another)"], lines
    assert main(["inspect", str(path), "--json", "--signature", "wide"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["signature"] == {"name": "wide", "others": ["serving_default"]}


def test_closed_stdout_pipe_exits_quietly(graph_file):
    proc = subprocess.Popen([sys.executable, "-m", "tfaot", "inspect", str(graph_file)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    proc.stdout.close()  # the reader is gone before tfaot writes anything
    err = proc.stderr.read()
    assert proc.wait(timeout=300) == 0, err
    assert "error" not in err and "Exception" not in err, err


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(p) for p in f.read().split()]
    except OSError:
        return []


def test_sigterm_removes_the_staging_folder_and_stops_the_compiler(tmp_path, keras_file):
    out = tmp_path / "lib"
    proc = subprocess.Popen([sys.executable, "-m", "tfaot", "build", str(keras_file), "-o",
                             str(out)], stderr=subprocess.PIPE, text=True)
    for line in proc.stderr:  # stop it in the middle of the backend
        if line.startswith("tfaot: compile"):
            break
    deadline = time.time() + 20
    while not _children(proc.pid) and time.time() < deadline:  # iree-compile started
        time.sleep(0.05)
    children = _children(proc.pid)
    proc.send_signal(signal.SIGTERM)
    rest = proc.stderr.read()
    assert proc.wait(timeout=60) == 128 + signal.SIGTERM, rest
    assert "terminated" in rest and "Traceback" not in rest, rest
    assert sorted(p.name for p in tmp_path.iterdir()) == []
    time.sleep(0.2)
    for child in children:
        assert not os.path.exists(f"/proc/{child}") or \
            open(f"/proc/{child}/stat").read().split()[2] == "Z"
