"""Graph formats from the command line: inspect, and bad input (one line, nothing written)."""
import json
import os

import numpy as np
import pytest

import graph_models as gm
from tfaot.cli import main


@pytest.fixture(scope="module")
def frozen(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("graph_cli")
    model = gm.keras_model("lstm", (16,), 8, None, True, 3, seed=1)
    path = tmp / "lstm.pb"
    gm.write_graph_def(gm.freeze_keras(model, None, 8, False), path, text=False)
    return path


def test_inspect_shows_loops_and_classification(frozen, capsys):
    assert main(["inspect", str(frozen), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["format"] == "graphdef"
    (loop,) = report["loops"]
    kinds = sorted(set(loop["vars"].values()))
    assert {"counter", "inlist", "passthrough", "state"} <= set(kinds)
    assert any(k.startswith("outlist") for k in kinds)
    assert [s["shape"] for s in report["state"]] == [[1, 16], [1, 16]]
    assert report["inputs"][0]["shape"] == [1, 8] and report["outputs"][0]["shape"] == [1, 3]
    assert main(["inspect", str(frozen)]) == 0
    assert "loops:" in capsys.readouterr().out


def _strings_graph(path):
    """A frozen graph whose per-step work has an op without a StableHLO lowering."""
    import tensorflow as tf

    g = tf.Graph()
    with g.as_default():
        x = tf.compat.v1.placeholder(tf.float32, (1, 4), name="x")
        text = tf.strings.as_string(x, name="to_text")
        tf.cast(tf.strings.length(text, name="text_length"), tf.float32, name="y")
    gm.write_graph_def(g.as_graph_def(), path, text=False)
    return path


def _no_placeholder_graph(path):
    import tensorflow as tf

    g = tf.Graph()
    with g.as_default():
        tf.constant(np.ones((2, 2), np.float32), name="c")
    gm.write_graph_def(g.as_graph_def(), path, text=True)
    return path


@pytest.mark.parametrize("case", ["truncated_pb", "random_pb", "bad_pbtxt", "no_placeholder",
                                  "unlowerable_op"])
def test_bad_graphs(case, frozen, tmp_path, capsys):
    if case == "truncated_pb":
        path, words = tmp_path / "t.pb", []
        path.write_bytes(frozen.read_bytes()[:1500])
    elif case == "random_pb":
        path, words = tmp_path / "r.pb", []
        path.write_bytes(os.urandom(3000))
    elif case == "bad_pbtxt":
        path, words = tmp_path / "b.pbtxt", []
        path.write_text('node {\n  name: "x"\n  op: "Placeholder"\n  attr { key: \n')
    elif case == "no_placeholder":
        path, words = _no_placeholder_graph(tmp_path / "c.pbtxt"), ["placeholder"]
    else:
        path, words = _strings_graph(tmp_path / "s.pb"), ["AsString", "to_text"]
    out = tmp_path / "out"
    assert main(["build", str(path), "-o", str(out)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("tfaot: error: ") and str(path) in err[-1], err
    for word in words:
        assert word.lower() in err[-1].lower(), err[-1]
    assert "Traceback" not in "\n".join(err)
    assert not out.exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_overrides_from_the_command_line(frozen, capsys):
    args = ["inspect", str(frozen), "--json", "--inputs", "x:1x?x8", "--outputs", "Identity",
            "--time-axis", "1"]
    assert main(args) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["input"]["time_axis"] == 1
    assert report["outputs"][0]["name"] == "Identity"
    # A time axis that does not exist is a one-line error naming the file.
    assert main(["inspect", str(frozen), "--time-axis", "5"]) == 1
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("tfaot: error: ") and str(frozen) in err and "time axis" in err
    assert main(["inspect", str(frozen), "--outputs", "no_such_node"]) == 1
    assert "no_such_node" in capsys.readouterr().err


def test_several_outputs_build_into_an_outputs_struct(tmp_path, capsys):
    """A graph with several outputs builds; the C API returns them in one typed struct."""
    import keras
    from keras import layers

    x = keras.Input((None, 4))
    y, h, c = layers.LSTM(6, return_sequences=True, return_state=True)(x)
    path = tmp_path / "three.pb"
    gm.write_graph_def(gm.freeze_keras(keras.Model(x, [y, h, c]), None, 4, False), path,
                       text=False)
    assert main(["build", str(path), "-o", str(tmp_path / "out"), "-q"]) == 0
    header = (tmp_path / "out" / "three.h").read_text()
    assert "#define THREE_NUM_OUTPUTS 3" in header and "} three_outputs;" in header
    assert "three_outputs *out);" in header
    mlir = tmp_path / "three.mlir"
    assert main(["import", str(path), "-o", str(mlir)]) == 0
    assert "-> (tensor<1x6xf32>, tensor<1x6xf32>, tensor<1x6xf32>)" in mlir.read_text()


def _corrupt_function_reference(frozen, path):
    """Rename a node reference inside the While body function (one bad input)."""
    from tensorflow.core.framework import graph_pb2

    gd = graph_pb2.GraphDef()
    gd.ParseFromString(frozen.read_bytes())
    body = next(f for f in gd.library.function if "while_body" in f.signature.name)
    node = next(n for n in body.node_def if n.input and n.input[0].count(":") == 2)
    src, rest = node.input[0].split(":", 1)
    node.input[0] = f"{src}_corrupt:{rest}"
    path.write_bytes(gd.SerializeToString())
    return body.signature.name, node.name


def test_corrupted_loop_body_is_a_one_line_error(frozen, tmp_path):
    """Issue 7: a dangling reference inside a loop body function, through `python -m tfaot`."""
    import subprocess
    import sys

    path = tmp_path / "corrupt.pb"
    fname, node = _corrupt_function_reference(frozen, path)
    res = subprocess.run([sys.executable, "-m", "tfaot", "inspect", str(path)],
                         capture_output=True, text=True, timeout=600)
    err = res.stderr.strip().splitlines()
    assert res.returncode == 1, res.stderr
    assert len(err) == 1 and err[0].startswith("tfaot: error: "), err
    for word in (str(path), "malformed graph", fname, node):
        assert word in err[0], err[0]


def test_a_control_character_in_an_op_type_stays_on_the_error_line(frozen, tmp_path, capsys):
    """A corrupt byte that makes an op type 'Add\x0c2' (a form feed, which
    splits lines): the error still is one line, the character escaped (the
    byte-flip test below met it when the fixture's names moved)."""
    import tensorflow as tf

    gd = tf.compat.v1.GraphDef()
    gd.ParseFromString(frozen.read_bytes())
    body = next(f for f in gd.library.function if "while_body" in f.signature.name)
    node = next(n for n in body.node_def if n.op == "AddV2")
    node.op = "Add\x0c2"
    path = tmp_path / "ff.pb"
    path.write_bytes(gd.SerializeToString())
    assert main(["inspect", str(path)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("tfaot: error: ") and "Add\\x0c2" in err[0], err


def test_byte_flips_never_give_an_internal_error(frozen, tmp_path, capsys):
    """Issue 7: single-byte corruptions of a .pb with a functional While loop are
    either harmless or a one-line error naming the file, never an internal error."""
    import re

    data = frozen.read_bytes()
    # References between nodes of the loop body ("...lstm_cell/mul_2:z:0"):
    # a changed byte there leaves an input that names no node.
    refs = [m.start(1) for m in re.finditer(rb"/(mul|add|BiasAdd)(_\d+)?:(z|output):0", data)]
    assert refs, "the fixture has no nested tensor references"
    positions = refs[::max(1, len(refs) // 5)][:5] + [len(data) * k // 6 for k in range(1, 6)]
    path = tmp_path / "flipped.pb"
    for pos in positions:
        corrupt = bytearray(data)
        corrupt[pos] ^= 0x5A
        path.write_bytes(bytes(corrupt))
        rc = main(["inspect", str(path)])
        err = capsys.readouterr().err.strip().splitlines()
        assert rc in (0, 1), (pos, err)
        if rc == 1:
            assert len(err) == 1 and err[0].startswith("tfaot: error: ") and \
                str(path) in err[0], (pos, err)
