"""A Keras model the layer-by-layer streamifier refuses streams from its
traced TensorFlow graph (pipeline._graph_of_keras, frontend/keras_graph.py).

Models ported from PyTorch put Permutes around layers written for
(batch, channels, time), or take channels-first input (time last): the
Keras streamifier refuses a layer that moves the time axis, the graph
streamifier follows the axis through the transposes. The library is
checked against Keras itself over 120 steps, and by ``tfaot verify``
(Keras itself, else the same traced graph); a model neither path streams
keeps the Keras refusal, which names the layer. (Channels_first
convolutions, which TensorFlow runs on few CPUs: test_channels_first.)
"""
from __future__ import annotations

import json

import numpy as np
import pytest

from tfaot import harness
from tfaot.cli import main

STEPS = 120


def _permuted():
    """x -> Permute -> a norm over the channels, now axis 1 -> Permute ->
    causal left pad -> Conv1D -> GRU -> Dense: one output per frame."""
    import keras
    from keras import layers as L

    keras.utils.set_random_seed(3)
    x = keras.Input((None, 6))
    h = L.Permute((2, 1), name="to_channels")(x)
    h = L.LayerNormalization(axis=1)(h)
    h = L.Permute((2, 1))(h)
    h = L.ZeroPadding1D((2, 0))(h)
    h = L.Conv1D(8, 3, activation="relu")(h)
    h = L.GRU(8, return_sequences=True)(h)
    return keras.Model(x, L.Dense(3)(h))


def _time_last():
    """Channels-first input (batch, features, time), time open, turned
    into (batch, time, features) by a Permute."""
    import keras
    from keras import layers as L

    keras.utils.set_random_seed(4)
    x = keras.Input((6, None))
    h = L.Permute((2, 1))(x)
    return keras.Model(x, L.LSTM(5, return_sequences=True)(h))


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("keras_graph")
    cache = {}

    def get(name):
        if name not in cache:
            model = {"permuted": _permuted, "time_last": _time_last}[name]()
            path = root / f"{name}.keras"
            model.save(path)
            cache[name] = (model, path, root / name)
        return cache[name]
    return get


def test_a_permuted_convolution_streams_from_the_graph(built, capsys):
    model, path, out = built("permuted")
    assert main(["build", str(path), "-o", str(out)]) == 0
    err = capsys.readouterr().err
    assert "streams from its TensorFlow graph, not layer by layer, because layer " \
           "'to_channels' (Permute) moves the time axis" in err
    manifest = json.loads((out / "permuted.json").read_text())
    assert manifest["keras_graph"] is True
    lib = harness.load(out)
    xs = np.random.default_rng(0).normal(size=(STEPS, 1, 6)).astype(np.float32)
    want = np.asarray(model(xs.reshape(1, STEPS, 6)))[0]
    np.testing.assert_allclose(lib.step_n(xs).reshape(STEPS, 3), want, rtol=0, atol=1e-5)
    assert main(["verify", str(path), str(out), "--steps", "120"]) == 0
    assert ": ok" in capsys.readouterr().out


def test_verify_takes_keras_itself_as_the_reference(built, monkeypatch, capsys):
    """Of a library streamed from the traced graph, verify's reference is
    eager Keras where Keras takes the library's stream (the graph, traced
    for an open time axis, ran a GRU's loop over a wrong length after a
    dilated channels_first Conv1D, and verify failed a right library)."""
    import tfaot.frontend.keras_graph as keras_graph

    _, path, out = built("permuted")
    if not (out / "permuted.json").exists():
        assert main(["-q", "build", str(path), "-o", str(out)]) == 0

    def no_graph(*args, **kwargs):
        raise AssertionError("verify traced the Keras model")

    monkeypatch.setattr(keras_graph, "keras_as_graph", no_graph)
    assert main(["verify", str(path), str(out), "--steps", "120"]) == 0
    assert "over 120 steps" in capsys.readouterr().out


def test_a_time_last_input_streams_over_its_last_axis(built, capsys):
    model, path, out = built("time_last")
    assert main(["-q", "build", str(path), "-o", str(out)]) == 0
    lib = harness.load(out)
    assert lib.input_shape == (1, 6)  # one frame: the time axis goes
    xs = np.random.default_rng(1).normal(size=(STEPS, 1, 6)).astype(np.float32)
    want = np.asarray(model(xs[:, 0, :].T[None]))[0]  # (STEPS, 5)
    got = lib.step_n(xs).reshape(STEPS, 5)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)
    assert main(["verify", str(path), str(out), "--steps", "120"]) == 0


def test_a_model_neither_path_streams_keeps_the_layer_refusal(tmp_path, capsys):
    import keras
    from keras import layers as L

    x = keras.Input((None, 4))
    model = keras.Model(x, L.Bidirectional(L.GRU(3, return_sequences=True), name="both")(x))
    path = tmp_path / "bidir.keras"
    model.save(path)
    assert main(["-q", "build", str(path), "-o", str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err
    assert "layer 'both' (Bidirectional) runs the sequence backwards" in err
    assert "Traceback" not in err and not (tmp_path / "out").exists()


def test_the_traced_graph_keeps_the_input_layers_names(tmp_path):
    """A model of several inputs built from its graph named them x_t, x_t1
    (the header's fields too), where the layer-by-layer path takes the
    Input layers' names; a one-input model's is x_t on both."""
    import keras

    from tfaot.frontend.keras_graph import keras_as_graph

    seq, cond = keras.Input((None, 4), name="seq"), keras.Input((3,), name="cond")
    shift = keras.layers.Reshape((1, 2))(keras.layers.Dense(2)(cond))
    two = keras.Model([seq, cond], keras.ops.add(keras.layers.Dense(2)(seq), shift))
    assert [i.name for i in keras_as_graph(two, tmp_path / "two.keras").inputs] == ["seq", "cond"]
    one = keras.Model(seq, keras.layers.Dense(2)(seq))
    assert [i.name for i in keras_as_graph(one, tmp_path / "one.keras").inputs] == ["x_t"]
