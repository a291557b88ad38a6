"""Loading graph formats: content detection, inputs/outputs, overrides, bad files."""
from __future__ import annotations

import numpy as np
import pytest

import graph_models as gm
from tfaot.errors import TfaotError

T, F = 20, 5


@pytest.fixture(scope="module")
def frozen():
    model = gm.keras_model("gru", (6,), F, None, True, 2, seed=1)
    return {
        "while": gm.freeze_keras(model, T, F, False),
        "v1cf": gm.freeze_keras(model, T, F, True),
    }


@pytest.fixture(scope="module")
def files(tmp_path_factory, frozen):
    d = tmp_path_factory.mktemp("load")
    out = {
        "pb": gm.write_graph_def(frozen["while"], d / "m.pb", text=False),
        "pbtxt": gm.write_graph_def(frozen["while"], d / "m.pbtxt", text=True),
        # Wrong suffixes: the content decides.
        "text_as_pb": gm.write_graph_def(frozen["v1cf"], d / "text_really.pb", text=True),
        "binary_as_pbtxt": gm.write_graph_def(frozen["v1cf"], d / "binary_really.pbtxt",
                                              text=False),
        "v1cf": gm.write_graph_def(frozen["v1cf"], d / "v1cf.pb", text=False),
    }
    data = out["pb"].read_bytes()
    (d / "truncated.pb").write_bytes(data[: len(data) // 3])
    out["truncated"] = d / "truncated.pb"
    (d / "random.pb").write_bytes(np.random.default_rng(0).bytes(5000))
    out["random"] = d / "random.pb"
    (d / "bad.pbtxt").write_text('node {\n  name: "x"\n  op: "Placeholder"\n  attr {\n')
    out["bad_text"] = d / "bad.pbtxt"
    (d / "empty.pb").write_bytes(b"")
    out["empty"] = d / "empty.pb"
    # A graph without any Placeholder.
    import tensorflow as tf

    g = tf.Graph()
    with g.as_default():
        tf.identity(tf.constant([1.0, 2.0]) * 2.0, name="out")
    out["no_input"] = gm.write_graph_def(g.as_graph_def(), d / "no_input.pbtxt", text=True)
    (d / "not_a_savedmodel").mkdir()
    out["dir"] = d / "not_a_savedmodel"
    return out


@pytest.mark.parametrize("key,text", [("pb", False), ("pbtxt", True), ("text_as_pb", True),
                                      ("binary_as_pbtxt", False)])
def test_detects_text_or_binary_from_content(files, key, text):
    from tfaot.frontend.load_graph import load_graph

    loaded = load_graph(files[key])
    assert loaded.format == "graphdef"
    assert loaded.details["text_format"] is text
    assert [i.name for i in loaded.inputs] == ["x"]
    assert loaded.inputs[0].shape == (1, T, F)
    assert loaded.outputs == ["Identity:0"]


def test_ignores_unused_control_flow_placeholders(files):
    from tfaot.frontend.load_graph import load_graph

    loaded = load_graph(files["v1cf"])
    source = loaded.details["source_graph_def"]  # the graph as the file has it
    names = [n.name for n in source.node if n.op == "Placeholder"]
    assert any("unused_control_flow_input" in n for n in names)
    assert [i.name for i in loaded.inputs] == ["x"]
    # The loaded graph keeps only what the outputs need.
    assert not any("unused_control_flow_input" in n.name for n in loaded.graph_def.node)


def test_overrides(files):
    from tfaot.frontend.load_graph import load_graph

    loaded = load_graph(files["pb"], inputs="x:1x?x5", outputs="Identity", time_axis=1)
    assert loaded.inputs[0].shape == (1, None, F) and loaded.inputs[0].time_axis == 1
    assert loaded.outputs == ["Identity:0"]
    loaded = load_graph(files["pb"], inputs=["x:1,20,5"], outputs=["Identity:0"])
    assert loaded.inputs[0].shape == (1, 20, 5)


@pytest.mark.parametrize("key,words", [
    ("truncated", ["truncated.pb", "not a valid GraphDef"]),
    ("random", ["random.pb", "not a valid GraphDef"]),
    ("bad_text", ["bad.pbtxt", "text GraphDef"]),
    ("empty", ["empty.pb", "empty"]),
    ("no_input", ["no_input.pbtxt", "no input", "Placeholder"]),
    ("dir", ["not_a_savedmodel", "not a SavedModel"]),
])
def test_bad_files_name_the_file(files, key, words):
    from tfaot.frontend.load_graph import load_graph

    with pytest.raises(TfaotError) as e:
        load_graph(files[key])
    for w in words:
        assert w in str(e.value)


@pytest.mark.parametrize("kw,words", [
    ({"inputs": "nope:1x2x3"}, ["input node 'nope'"]),
    ({"outputs": "nope"}, ["output node 'nope'"]),
    ({"inputs": "x:1xbadx5"}, ["bad input spec", "x:1xbadx5"]),
    ({"time_axis": 7}, ["time axis 7", "'x'"]),
])
def test_bad_overrides(files, kw, words):
    from tfaot.frontend.load_graph import load_graph

    with pytest.raises(TfaotError) as e:
        load_graph(files["pb"], **kw)
    for w in words:
        assert w in str(e.value)


def test_missing_path():
    from tfaot.frontend.load_graph import load_graph

    with pytest.raises(TfaotError, match="no such file"):
        load_graph("/nonexistent/model.pb")


def test_truncated_saved_model(tmp_path):
    from tfaot.frontend.load_graph import load_graph

    (tmp_path / "saved_model.pb").write_bytes(b"\x08\x01\x12\xff\xff\xff")
    with pytest.raises(TfaotError) as e:
        load_graph(tmp_path)
    assert str(tmp_path) in str(e.value)


def test_a_saved_models_pb_file_names_its_folder(tmp_path, capsys):
    """`tfaot build DIR/saved_model.pb` (the SavedModel's file, not its
    folder) said the file was not a valid GraphDef, perhaps truncated; it
    now says to give the folder, and writes nothing."""
    import tensorflow as tf

    from tfaot.cli import main

    class Step(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([1, 3], tf.float32)])
        def __call__(self, x):
            return {"y": 2.0 * x}

    module = Step()
    tf.saved_model.save(module, str(tmp_path / "sm"), signatures=module.__call__)
    out = tmp_path / "lib"
    assert main(["build", str(tmp_path / "sm" / "saved_model.pb"), "-o", str(out)]) == 1
    err = capsys.readouterr().err
    assert "SavedModel's saved_model.pb" in err and f"tfaot build {tmp_path / 'sm'}" in err, err
    assert not out.exists()
