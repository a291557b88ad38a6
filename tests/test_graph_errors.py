"""Graphs that cannot be streamed: the error names the node and op at fault."""
from __future__ import annotations

from pathlib import Path

import pytest

import graph_models as gm
from tfaot.errors import TfaotError


def _keras(layers):
    import keras

    keras.utils.set_random_seed(0)
    return keras.Sequential([keras.Input((None, 8))] + layers)


def _cases():
    import keras

    L = keras.layers
    return {
        "bidirectional": (lambda: _keras([L.Bidirectional(L.LSTM(8, return_sequences=True))]),
                          ["ReverseV2", "bidirectional", "backward_lstm"]),
        "conv1d_causal": (lambda: _keras([L.Conv1D(4, 3, padding="causal"), L.LSTM(8)]),
                          ["conv1d", "Pad"]),
        "conv1d_same": (lambda: _keras([L.Conv1D(4, 3, padding="same"), L.LSTM(8)]),
                        ["conv1d", "Conv2D"]),
        "avg_pool": (lambda: _keras([L.LSTM(8, return_sequences=True),
                                     L.GlobalAveragePooling1D()]),
                     ["global_average_pooling1d", "Mean", "time axis"]),
    }


CASES = ["bidirectional", "conv1d_causal", "conv1d_same", "avg_pool"]


@pytest.mark.parametrize("timesteps", [30, None])
@pytest.mark.parametrize("case", CASES)
def test_time_mixing_op_is_rejected_with_node_name(case, timesteps):
    from tfaot.load_graph import graph_def_to_loaded
    from tfaot.streamify_graph import streamify_graph

    build, words = _cases()[case]
    gd = gm.freeze_keras(build(), timesteps, 8, False)
    loaded = graph_def_to_loaded(gd, Path(f"{case}.pb"), "graphdef")
    with pytest.raises(TfaotError) as e:
        streamify_graph(loaded)
    msg = str(e.value)
    assert msg.startswith(f"{case}.pb: node '")
    for w in words:
        assert w in msg, msg


def test_initial_state_from_input_is_rejected():
    import keras

    from tfaot.load_graph import graph_def_to_loaded
    from tfaot.streamify_graph import streamify_graph

    keras.utils.set_random_seed(0)
    x = keras.Input((None, 8))
    h0 = keras.layers.Dense(6)(x[:, 0])
    y = keras.layers.GRU(6)(x, initial_state=[h0])
    gd = gm.freeze_keras(keras.Model(x, y), 12, 8, False)
    loaded = graph_def_to_loaded(gd, Path("init.pb"), "graphdef")
    with pytest.raises(TfaotError) as e:
        streamify_graph(loaded)
    msg = str(e.value)
    assert "init.pb" in msg and ("strided_slice" in msg or "initial value" in msg), msg


def test_two_inputs_are_rejected():
    import tensorflow as tf

    from tfaot.load_graph import graph_def_to_loaded
    from tfaot.streamify_graph import streamify_graph

    g = tf.Graph()
    with g.as_default():
        a = tf.compat.v1.placeholder(tf.float32, (1, None, 3), name="a")
        b = tf.compat.v1.placeholder(tf.float32, (1, None, 3), name="b")
        tf.identity(a + b, name="out")
    loaded = graph_def_to_loaded(g.as_graph_def(), Path("two.pbtxt"), "graphdef")
    with pytest.raises(TfaotError) as e:
        streamify_graph(loaded)
    assert "two.pbtxt" in str(e.value) and "'a'" in str(e.value) and "'b'" in str(e.value)
