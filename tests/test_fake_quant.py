"""Graphs of quantization-aware trained models (tensorflow_model_optimization's
``quantize_model``, exported as a SavedModel): their FakeQuant ops round
each layer's output to an int8 grid. The graph streamifier did not know
them ("op FakeQuantWithMinMaxVars on a time-dependent tensor is not
supported") and ran one whole window per step; and verify failed streamed
libraries whose float rounding put a value on the neighbouring grid step
(compiler/verify/fake_quant.py). These graphs are written with
TensorFlow's own fake-quant ops (the same ops tfmot's layers emit), since
tfmot is not a dependency."""
from __future__ import annotations

import json

import numpy as np
import pytest

from tfaot.cli import main


def _quantized_conv(tmp_path, time: int | None):
    """x (1, time, 8) -> Conv1D(16, 3) -> ReLU -> FakeQuant [0, 6] -> mean
    over the window (a fixed one) or per frame -> Dense(4) -> FakeQuant
    [-3, 3] with its min and max as Args, and a head fake-quantized per
    channel then reshaped: the ops and placements tfmot's layers use."""
    import tensorflow as tf

    rng = np.random.default_rng(5)
    w1 = tf.constant((rng.normal(size=(3, 8, 16)) / 4).astype(np.float32))
    w2 = tf.constant((rng.normal(size=(16, 4)) / 3).astype(np.float32))
    low, high = tf.constant(-2.0 * np.ones(4, np.float32)), tf.constant(2.0 * np.ones(4, np.float32))

    class Model(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([1, time, 8], tf.float32, name="x")])
        def __call__(self, x):
            h = tf.nn.relu(tf.nn.conv1d(x, w1, 1, "VALID"))
            h = tf.quantization.fake_quant_with_min_max_vars(h, 0.0, 6.0)
            if time is not None:
                h = tf.reduce_mean(h, axis=1, keepdims=True)
            y = tf.einsum("btf,fg->btg", h, w2)
            per_channel = tf.quantization.fake_quant_with_min_max_vars_per_channel(y, low, high)
            return {"y": tf.quantization.fake_quant_with_min_max_args(y, -3.0, 3.0),
                    "head": tf.reshape(per_channel, [1, -1, 2, 2])}

    model = Model()
    path = tmp_path / ("qat_window" if time else "qat_frames")
    tf.saved_model.save(model, str(path), signatures=model.__call__)
    return path


@pytest.mark.parametrize("time", [None, 40])
def test_a_fake_quantized_graph_streams_and_verifies(tmp_path, capsys, time):
    """Frame by frame over an open axis, and as a window of 40 frames whose
    mean a step updates (--stream): before, both ran one whole inference a
    step (the open axis: no step at all)."""
    path = _quantized_conv(tmp_path, time)
    out = tmp_path / "lib"
    flags = ["--stream"] if time else []
    assert main(["-q", "build", str(path), "-o", str(out), *flags]) == 0
    manifest = json.loads((out / f"{path.name}.json").read_text())
    assert manifest["stream"]["mode"] == ("window" if time else "prefix"), manifest["stream"]
    assert manifest["stream"]["recompute"] == ""
    assert main(["verify", str(path), str(out), "--steps", "150"]) == 0
    report = capsys.readouterr().out
    assert report.count(": ok") == 2, report
    # each output is given its grid's step: 6/255 for y; 4/255 for the
    # per-channel head, through its reshape
    assert "steps of 0.0235 by a FakeQuant op" in report, report
    assert "steps of 0.0157 by a FakeQuant op" in report, report


def test_an_output_computed_after_a_fake_quant_keeps_the_float_bound(tmp_path):
    """A softmax after the FakeQuant is not on its grid: no step allowed."""
    import tensorflow as tf

    from tfaot.frontend.load import load_model
    from tfaot.verify import fake_quant

    class Model(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([1, 5, 3], tf.float32, name="x")])
        def __call__(self, x):
            q = tf.quantization.fake_quant_with_min_max_args(x, -1.0, 1.0, num_bits=4,
                                                            narrow_range=True)
            return {"a": tf.nn.softmax(q), "b": tf.transpose(q, [0, 2, 1])}

    model = Model()
    tf.saved_model.save(model, str(tmp_path / "m"), signatures=model.__call__)
    loaded = load_model(str(tmp_path / "m"))
    steps = dict(zip(loaded.graph.output_names, fake_quant.output_steps(loaded)))
    assert steps == {"a": 0.0, "b": pytest.approx(2.0 / 14)}  # 4 bits, narrow: 14 steps
