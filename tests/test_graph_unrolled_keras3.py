"""Keras 3 RNN layers with ``unroll=True`` (the form users freeze for
converters that take no loops), frozen from a concrete function: each copy
of the cell reads its weights through an Identity of its own and splits and
squeezes its bias itself, step 0 computes on a constant zero state (batch
1) or on zeros filled from the input's batch size (open batch), and layers
are stacked. Each streams one frame per step through the built library and
is checked against TensorFlow running the frozen graph (``tfaot verify``:
sequences of the graph's fixed length, over 100 steps). They streamed none:
each step was one whole inference over the window."""
from __future__ import annotations

import json
import re

import pytest

from tfaot.cli import main

FRAMES = 15


def _frozen(tmp_path, layers: str, batch):
    import keras
    import tensorflow as tf
    from tensorflow.python.framework.convert_to_constants import \
        convert_variables_to_constants_v2

    keras.utils.set_random_seed(0)
    L = keras.layers
    make = {"lstm": lambda last: L.LSTM(16, unroll=True, return_sequences=not last),
            "gru": lambda last: L.GRU(12, unroll=True, return_sequences=not last),
            "rnn": lambda last: L.SimpleRNN(8, unroll=True, return_sequences=not last)}
    kinds = layers.split("+")
    model = keras.Sequential([keras.Input((FRAMES, 6), batch_size=batch)]
                             + [make[k](i == len(kinds) - 1) for i, k in enumerate(kinds)]
                             + [L.Dense(3)])
    spec = tf.TensorSpec([batch, FRAMES, 6], tf.float32)
    graph = convert_variables_to_constants_v2(
        tf.function(lambda x: model(x)).get_concrete_function(spec)).graph.as_graph_def()
    path = tmp_path / "unrolled.pb"
    path.write_bytes(graph.SerializeToString())
    return path


@pytest.mark.parametrize("layers, batch", [("lstm", 1), ("gru+lstm", None), ("rnn", None)])
def test_frozen_keras3_unrolled_layers_stream(tmp_path, capsys, layers, batch):
    model = _frozen(tmp_path, layers, batch)
    out = tmp_path / "lib"
    assert main(["build", str(model), "-o", str(out)]) == 0
    err = capsys.readouterr().err
    assert "1 frame per step, because the graph has a recurrence" in err, err
    manifest = json.loads((out / "unrolled.json").read_text())
    assert manifest["inputs"][0]["shape"] == [1, 6]
    # (each layer's state: what its last copy passes on, as precomputed as
    # the graph has it: an LSTM's h @ U and c)
    assert len(manifest["state"]) >= len(layers.split("+")), manifest["state"]
    assert main(["verify", str(model), str(out)]) == 0
    line = capsys.readouterr().out.strip().splitlines()[-1]
    count = int(re.search(r"over (\d+) (?:steps )?in", line).group(1)) \
        if "steps in" in line else int(re.search(r"over (\d+) sequences of", line).group(1)) \
        * FRAMES
    assert line.endswith(": ok") and count >= 100, line


def test_whole_window_runs_the_unrolled_copies(tmp_path, capsys):
    """--whole-window on an unrolled cell's graph: one whole inference over
    the graph's fixed length per step, as asked (the option was ignored:
    the cell streamed)."""
    model = _frozen(tmp_path, "lstm", 1)
    out = tmp_path / "lib"
    assert main(["build", str(model), "-o", str(out), "--whole-window"]) == 0
    assert "one whole inference per step, because asked with --whole-window" in \
        capsys.readouterr().err
    manifest = json.loads((out / "unrolled.json").read_text())
    assert manifest["inputs"][0]["shape"] == [1, FRAMES, 6] and not manifest["state"]
    assert main(["verify", str(model), str(out)]) == 0
    assert capsys.readouterr().out.strip().endswith(": ok")
