"""Unrolled RNN outputs put back together over time (issue 19, case 5): the TF1
PTB language model writes ``tf.reshape(tf.concat(outputs, 1), [-1, size])``
after ``static_rnn``, then a dense layer and a softmax per row. Such a concat
(or a ``tf.stack``) of the per-step outputs, read back through a reshape to
one row per step, streams: step t returns row t. A dense layer over the
flattened concatenation mixes time steps and stays refused. Each graph is
compared with TensorFlow running the original graph, through the built .so,
over 100 steps."""
from __future__ import annotations

import numpy as np
import pytest

import graph_loop_models as glm
import graph_models as gm
from tfaot.errors import TfaotError

STEPS = 100
VOCAB, SIZE = 30, 12


def ptb_like(combine: str, frames: int = STEPS, seed: int = 0):
    """Token ids [1, frames] -> embedding -> static_rnn(LSTMCell) over the
    unstacked steps -> the outputs combined over time (``combine``) -> a
    softmax layer per row -> ``y``. ``combine``: "concat" (PTB's
    ``reshape(concat(outputs, 1), [-1, size])``), "stack" (``reshape(stack(
    outputs, 1), [-1, size])``) or "flat" (the concatenation [1, frames*size]
    itself, a dense layer over all steps)."""
    import tensorflow as tf

    with gm.tf1_graph(seed) as g:
        ids = tf.compat.v1.placeholder(tf.int32, (1, frames), name="x")
        embedding = tf.compat.v1.get_variable("embedding", (VOCAB, SIZE))
        inputs = tf.nn.embedding_lookup(embedding, ids)
        steps = tf.unstack(inputs, frames, 1)
        outputs, _ = tf.compat.v1.nn.static_rnn(gm._v1_cell("lstm", SIZE), steps,
                                                dtype=tf.float32)
        if combine == "concat":
            rows = tf.reshape(tf.concat(outputs, 1), [-1, SIZE])
        elif combine == "stack":
            rows = tf.reshape(tf.stack(outputs, 1), [-1, SIZE])
        else:
            rows = tf.concat(outputs, 1)
        w = tf.compat.v1.get_variable("softmax_w", (rows.shape[-1], VOCAB))
        b = tf.compat.v1.get_variable("softmax_b", (VOCAB,),
                                      initializer=tf.compat.v1.random_normal_initializer())
        tf.nn.softmax(tf.matmul(rows, w) + b, name="y")
        return glm._freeze(g)


def _build(gd, tmp_path, name):
    from tfaot import harness
    from tfaot.pipeline import BuildOptions, Progress, build_model

    path = gm.write_graph_def(gd, tmp_path / f"{name}.pb", text=False)
    build_model(str(path), BuildOptions(out_dir=tmp_path / name), Progress(False))
    return harness.load(tmp_path / name)


@pytest.mark.parametrize("combine", ["concat", "stack"])
def test_rows_stream_one_per_step(combine, tmp_path):
    gd = ptb_like(combine)
    lib = _build(gd, tmp_path, combine)
    ids = np.random.default_rng(1).integers(0, VOCAB, (1, STEPS)).astype(np.int32)
    want = glm.run(gd, {"x:0": ids})  # [STEPS, VOCAB]: row t is step t
    assert want.shape == (STEPS, VOCAB)
    got = np.stack([lib.step(ids[:, t]) for t in range(STEPS)])
    assert got.size == STEPS * VOCAB  # one row per step
    err = float(np.abs(got.reshape(STEPS, VOCAB) - want).max())
    print(f"{combine}: .so vs TF max abs error {err:.3g}")
    assert err <= 1e-5, err


def test_a_dense_layer_over_all_steps_is_refused(tmp_path):
    gd = ptb_like("flat", frames=6)
    path = gm.write_graph_def(gd, tmp_path / "flat.pb", text=False)
    from tfaot.pipeline import BuildOptions, Progress, build_model

    with pytest.raises(TfaotError, match="concat") as e:
        build_model(str(path), BuildOptions(out_dir=tmp_path / "flat"), Progress(False))
    assert not (tmp_path / "flat").exists()
    print(e.value)
