"""verify's note on a model that amplifies rounding (compiler/verify/
sensitivity.py): where a check fails and TensorFlow's own outputs move by
a notable share of the tolerance when the weights move by one f32 rounding
step, the FAIL says so; a wrong library of an ordinary model gets no such
note."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from tfaot.cli import main

#: pairs of hidden units that differ by this, and the output's gain on
#: their difference: the output is O(1), each term 1e6
PAIR_GAP, GAIN = 1e-6, 1e6


def _cancelling_model(path):
    """An output that is the difference of pairs of large, almost equal
    terms (tanh of nearly the same value, times +1e6 and -1e6): any
    difference of rounding in the tanh or the sums, about 6e-8, comes out
    1e6 times larger, in TensorFlow as in the library."""
    import keras

    rng = np.random.default_rng(0)
    x = keras.Input((8,))
    hidden = keras.layers.Dense(16, activation="tanh")
    out = keras.layers.Dense(1)
    model = keras.Model(x, out(hidden(x)))
    w = rng.normal(size=(8, 8)).astype(np.float32) * 0.3
    kernel = np.repeat(w, 2, axis=1)
    kernel[:, 1::2] *= 1 + PAIR_GAP
    hidden.set_weights([kernel, np.zeros(16, np.float32)])
    signs = np.tile([GAIN, -GAIN], 8).astype(np.float32)[:, None]
    out.set_weights([signs, np.zeros(1, np.float32)])
    model.save(path)


def _plain_model(path, scale: float):
    import keras

    keras.utils.set_random_seed(1)
    x = keras.Input((8,))
    model = keras.Model(x, keras.layers.Dense(4)(keras.layers.Dense(16, activation="tanh")(x)))
    model.layers[-1].kernel.assign(model.layers[-1].kernel.numpy() * scale)
    model.save(path)


def test_a_model_that_amplifies_rounding_is_told(tmp_path, capsys):
    _cancelling_model(tmp_path / "cancel.keras")
    assert main(["-q", "build", str(tmp_path / "cancel.keras"), "-o", str(tmp_path / "lib")]) == 0
    capsys.readouterr()
    assert main(["verify", str(tmp_path / "cancel.keras"), str(tmp_path / "lib"),
                 "--steps", "100"]) == 1
    out = capsys.readouterr().out
    assert "FAIL" in out
    move = float(out.split("own y_t moves by ")[1].split()[0])
    assert 1e-3 < move < 10 and "amplifies rounding" in out


def test_a_wrong_library_of_an_ordinary_model_gets_no_note(tmp_path, capsys):
    """The library of a model whose last layer is 0.9 times another's: a
    FAIL with no note (TensorFlow's move is far under the tolerance)."""
    _plain_model(tmp_path / "right.keras", 1.0)
    _plain_model(tmp_path / "wrong.keras", 0.9)
    assert main(["-q", "build", str(tmp_path / "wrong.keras"), "-o", str(tmp_path / "lib")]) == 0
    capsys.readouterr()
    assert main(["verify", str(tmp_path / "right.keras"), str(tmp_path / "lib"),
                 "--steps", "100"]) == 1
    out = capsys.readouterr().out
    assert "FAIL" in out and "note" not in out


@pytest.mark.parametrize("kind", ["keras", "graph"])
def test_jittered_weights_move_by_one_rounding_step(tmp_path, kind):
    """Every f32 weight moves by at most STEP of itself, nearly all move,
    and a Keras model's variables are put back afterwards."""
    from tfaot.frontend.load import load_model
    from tfaot.verify.sensitivity import STEP, with_jittered_weights

    _plain_model(tmp_path / "plain.keras", 1.0)
    loaded = load_model(str(tmp_path / "plain.keras"), None)
    if kind == "keras":
        before = [np.asarray(v) for v in loaded.keras_model.weights]
        with with_jittered_weights(loaded) as changed:
            during = [np.asarray(v) for v in changed.keras_model.weights]
        after = [np.asarray(v) for v in loaded.keras_model.weights]
        assert all(np.array_equal(a, b) for a, b in zip(before, after))
    else:
        import tensorflow as tf

        from tfaot.frontend.keras_graph import keras_as_graph

        graph = replace(loaded, keras_model=None,
                        graph=keras_as_graph(loaded.keras_model, loaded.path))

        def consts(graph_def):
            return [tf.make_ndarray(n.attr["value"].tensor) for n in graph_def.node
                    if n.op == "Const" and n.attr["dtype"].type == tf.float32.as_datatype_enum
                    and n.attr["value"].tensor.tensor_shape.dim]

        before = consts(graph.graph.graph_def)
        with with_jittered_weights(graph) as changed:
            during = consts(changed.graph.graph_def)
    values = np.concatenate([b.ravel() for b in before if b.size >= 2])
    moved = np.concatenate([d.ravel() for b, d in zip(before, during) if b.size >= 2])
    nonzero = values != 0
    relative = np.abs(moved[nonzero] - values[nonzero]) / np.abs(values[nonzero])
    assert relative.max() <= 1.5 * STEP and np.mean(relative > 0) > 0.9
