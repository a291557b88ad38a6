"""Stream over time or one inference per step: the default by the input's
rank (compiler/stream_choice.py), the flags that override it, and the one
line the build prints about it. Keras models and frozen graphs alike."""
import json

import numpy as np
import pytest

import graph_models as gm
from tfaot import harness
from tfaot.cli import main

TOL = 1e-5


def _image_classifier():
    import keras
    from keras import layers as L

    keras.utils.set_random_seed(4)
    x = keras.Input((32, 32, 3))
    h = L.Conv2D(8, 3, activation="relu")(x)
    h = L.MaxPooling2D()(h)
    h = L.Conv2D(8, 3, strides=2, activation="relu")(h)
    h = L.Flatten()(h)
    return keras.Model(x, L.Dense(10, activation="softmax")(h))


def _notes(err: str) -> list[str]:
    """The build's notes on how the model streams (the sizes note is another test's)."""
    return [line for line in err.splitlines()
            if line.startswith("tfaot: note:") and "context at least" not in line]


def _inspect(capsys, path, *flags) -> dict:
    assert main(["inspect", str(path), "--json", *flags]) == 0
    return json.loads(capsys.readouterr().out)


def test_an_image_classifier_is_one_inference_per_step(tmp_path, capsys):
    """Input (None, 32, 32, 3), no recurrence: step() takes one image and
    returns what TensorFlow returns for it, over 100 images; the build says
    so in one line, with the flag that streams it instead."""
    model = _image_classifier()
    path = tmp_path / "image.keras"
    model.save(path)
    out = tmp_path / "lib"
    assert main(["build", str(path), "-o", str(out)]) == 0
    (note,) = _notes(capsys.readouterr().err)
    assert "one whole inference per step" in note and "image" in note, note
    assert "(None, 32, 32, 3)" in note and "--stream" in note, note
    lib = harness.load(out)
    assert tuple(lib.input_shape) == (1, 32, 32, 3) and lib.manifest["state"] == []
    images = np.random.default_rng(0).uniform(size=(100, 1, 32, 32, 3)).astype(np.float32)
    got = lib.step_n(images)
    want = np.stack([np.asarray(model(image)) for image in images])
    err = float(np.abs(got.reshape(want.shape) - want).max())
    print(f"image classifier: max abs error {err:.3g} over 100 images")
    assert err <= TOL


def test_stream_flag_streams_an_image_over_its_rows(tmp_path, capsys):
    path = tmp_path / "image.keras"
    _image_classifier().save(path)
    report = _inspect(capsys, path, "--stream")
    assert report["stream"]["mode"] == "window" and report["stream"]["window"] == 32
    # rows of 32 pixels, 4 rows a step (the pooling's and the conv's strides)
    assert report["inputs"][0]["shape"] == [1, 4, 32, 3]


@pytest.mark.parametrize("shape, expected", [
    ((16, 10), "window"),  # (batch, time, features), reshaped to rank 4 inside
    ((6, 8, 8, 1), "window"),  # (batch, time, H, W, C)
])
def test_sequences_stream_by_default(tmp_path, capsys, shape, expected):
    import keras
    from keras import layers as L

    x = keras.Input(shape)
    if len(shape) == 2:
        h = L.Reshape((*shape, 1))(x)
        h = L.Conv2D(4, 3, activation="relu")(h)
        h = L.GlobalAveragePooling2D()(h)
    else:
        h = L.TimeDistributed(L.Conv2D(3, 3, activation="relu"))(x)
        h = L.TimeDistributed(L.Flatten())(h)
        h = L.GlobalAveragePooling1D()(h)
    path = tmp_path / "seq.keras"
    keras.Model(x, L.Dense(2)(h)).save(path)
    assert _inspect(capsys, path)["stream"]["mode"] == expected
    assert main(["import", str(path), "-o", str(tmp_path / "m.mlir")]) == 0
    (note,) = _notes(capsys.readouterr().err)
    assert "sliding window" in note and f"(None, {', '.join(map(str, shape))})" in note, note


def _image_graph(path):
    import tensorflow as tf

    rng = np.random.default_rng(1)
    g = tf.Graph()
    with g.as_default():
        x = tf.compat.v1.placeholder(tf.float32, (1, 12, 12, 3), name="image")
        w = tf.constant(rng.normal(size=(3, 3, 3, 4)).astype(np.float32))
        h = tf.nn.relu(tf.nn.conv2d(x, w, strides=1, padding="VALID"))
        h = tf.reshape(h, [1, -1])
        d = tf.constant(rng.normal(size=(10 * 10 * 4, 5)).astype(np.float32) * 0.05)
        tf.nn.softmax(tf.matmul(h, d), name="probs")
    return gm.write_graph_def(g.as_graph_def(), path, text=False)


def test_an_image_graph_is_one_inference_per_step_unless_a_time_axis_is_given(
        tmp_path, capsys):
    path = _image_graph(tmp_path / "image.pb")
    report = _inspect(capsys, path)
    assert report["stream"]["mode"] == "stateless"
    assert report["inputs"][0]["shape"] == [1, 12, 12, 3]
    for flags in (["--time-axis", "1"], ["--stream"]):
        report = _inspect(capsys, path, *flags)
        assert report["stream"]["mode"] == "window", flags
        assert report["inputs"][0]["shape"] == [1, 12, 3], flags
    out = tmp_path / "lib"
    assert main(["build", str(path), "-o", str(out)]) == 0
    (note,) = _notes(capsys.readouterr().err)
    assert "one whole inference per step" in note and "image" in note, note
    assert main(["verify", str(path), str(out), "--steps", "100"]) == 0
    assert "ok" in capsys.readouterr().out


def test_a_uint8_image_graph_is_one_inference_per_step(tmp_path, capsys):
    """Raw pixels as uint8 (batch, H, W, C), as image SavedModels take
    them: one inference per step (it was streamed over the rows), and the
    step accepts its uint8 input (IREE asserts its unsigned element type on
    the buffer view; the library asserted the signed one and every step
    failed with a type mismatch)."""
    import tensorflow as tf

    rng = np.random.default_rng(2)
    g = tf.Graph()
    with g.as_default():
        x = tf.compat.v1.placeholder(tf.uint8, (1, 6, 6, 3), name="pixels")
        w = tf.constant(rng.normal(size=(3, 3, 3, 4)).astype(np.float32) * 0.01)
        h = tf.nn.conv2d(tf.cast(x, tf.float32), w, strides=1, padding="VALID")
        tf.reduce_mean(h, axis=[1, 2], name="y")
    path = gm.write_graph_def(g.as_graph_def(), tmp_path / "pixels.pb", text=False)
    out = tmp_path / "lib"
    assert main(["build", str(path), "-o", str(out)]) == 0
    (note,) = _notes(capsys.readouterr().err)
    assert "one whole inference per step" in note and "image" in note, note
    lib = harness.load(out)
    images = rng.integers(0, 256, size=(5, 1, 6, 6, 3)).astype(np.uint8)
    got = lib.step_n(images)
    with tf.compat.v1.Session(graph=g) as sess:
        want = np.stack([sess.run("y:0", {"pixels:0": image}) for image in images])
    np.testing.assert_allclose(got.reshape(want.shape), want, rtol=1e-5, atol=1e-5)


def test_a_keras_model_taking_uint8_pixels_builds_and_verifies(tmp_path, capsys):
    """keras.Input(..., dtype="uint8") then Rescaling(1/255): one inference
    per step, checked on pixels over 0..255 (the input was refused:
    "input dtype is uint8")."""
    import re

    import keras
    from keras import layers as L

    keras.utils.set_random_seed(3)
    x = keras.Input((12, 12, 3), dtype="uint8")
    h = L.Conv2D(4, 3, activation="relu")(L.Rescaling(1 / 255.0)(x))
    path = tmp_path / "pixels.keras"
    keras.Model(x, L.Dense(3)(L.GlobalAveragePooling2D()(h))).save(path)
    out = tmp_path / "lib"
    assert main(["build", str(path), "-o", str(out)]) == 0
    (note,) = _notes(capsys.readouterr().err)
    assert "one whole inference per step" in note and "image" in note, note
    assert main(["verify", str(path), str(out), "--steps", "50"]) == 0
    line = capsys.readouterr().out
    assert re.fullmatch(r"y_t: max abs error \S+ over 50 steps \(tolerance 1e-05\): ok\n", line)
