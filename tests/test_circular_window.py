"""A window only reduced over time streams through a circular buffer
(compiler/streamify_keras/circular.py): each step writes its newest frames
over the oldest rows, where the head (kept in the buffer's last row)
points, and nothing else of the buffer moves. Checked on the reduction
itself against the sliding window, and through built C libraries (Keras
and frozen-graph models) against TensorFlow over 100+ steps, with the
state saved and restored mid-stream."""
from __future__ import annotations

import numpy as np
import pytest

import graph_conv_models as G
from tfaot import harness
from tfaot.pipeline import BuildOptions, Progress, build_model
from tfaot.streamify_keras import circular
from tfaot.verify import verify
from util import stream_matches_keras

REDUCE = {"mean": np.mean, "sum": np.sum, "max": np.max, "min": np.min}


@pytest.mark.parametrize("n,lag,length", [(1, 0, 5), (1, 1, 5), (2, 0, 6), (2, 1, 7),
                                          (3, 2, 4), (2, 2, 1), (3, 0, 2)])
@pytest.mark.parametrize("kind", circular.ORDER_FREE)
def test_the_buffer_reduces_the_sliding_window(kind, n, lag, length):
    """Step m gets frames [m*n, (m+1)*n); the window is the ``length``
    frames ending ``lag`` before the chunk's last (zeros before the stream).
    Over 40 steps, the buffer's reduction is the window's."""
    import tensorflow as tf

    keep = length + lag - n
    assert circular.applies(kind, lag, n, keep) == (keep > 0)
    if keep <= 0:
        return
    rng = np.random.default_rng(n * 100 + lag * 10 + length)
    steps, width = 40, 3
    stream = rng.normal(size=(steps * n, width)).astype(np.float32)
    padded = np.concatenate([np.zeros((length + lag, width), np.float32), stream])
    buffer = tf.zeros((1, keep + 1, width))
    for m in range(steps):
        chunk = tf.constant(stream[None, m * n:(m + 1) * n])
        fresh = chunk[:, :n - lag] if n > lag else None
        rows = circular.rows(buffer, 1)
        assert rows.shape == (1, keep, width)
        got = circular.reduce_window(rows, fresh, kind, 1, length).numpy()
        end = (m + 1) * n - 1 - lag  # the window's last frame in the stream
        last = end + length + lag  # its index in padded
        want = REDUCE[kind](padded[last - length + 1:last + 1], axis=0)
        np.testing.assert_allclose(got.reshape(-1), want, rtol=1e-6, atol=1e-6)
        buffer = circular.write(buffer, chunk, axis=1)
        assert float(buffer[0, keep, 0]) == ((m + 1) * min(n, keep)) % keep


@pytest.mark.parametrize("head,row", [(float("nan"), 0), (float("inf"), 0), (-3.0, 0),
                                      (1e9, 3), (2.0, 2), (2.7, 2)])
def test_a_head_set_from_outside_writes_inside_the_buffer(head, row):
    """set_state may hand the head (the first element of the buffer's last
    row) any float: the write lands on one row of the buffer (the head
    clamped into it), never outside, and the head moves past it."""
    import tensorflow as tf

    buffer = np.arange(5 * 2, dtype=np.float32).reshape(1, 5, 2)
    buffer[0, 4] = [head, 0.0]
    new = circular.write(tf.constant(buffer), tf.constant([[[-1.0, -1.0]]]), axis=1).numpy()
    changed = np.flatnonzero((new[:, :4] != buffer[:, :4]).any(axis=2)[0])
    assert changed.tolist() == [row]
    assert new[0, 4, 0] == (row + 1) % 4


def _pooled_cnn(pooling: str):
    """Conv1D over a 20-frame window, then a global pooling of the window."""
    import keras
    from keras import layers as L

    keras.utils.set_random_seed(3)
    x = keras.Input((20, 6), batch_size=1)
    h = L.Conv1D(8, 3, activation="tanh")(x)
    h = getattr(L, pooling)()(h)
    return keras.Model(x, L.Dense(4)(h))


def _state(lib, name: str, states):
    index = [s[0] for s in lib.state_specs].index(name)
    return states[index]


@pytest.mark.parametrize("pooling", ["GlobalAveragePooling1D", "GlobalMaxPooling1D"])
def test_a_pooled_window_is_written_in_place(pooling, tmp_path):
    """Through the built library: the outputs are Keras's over 120 steps;
    once the window is full, a step changes one row of the window's buffer
    and moves the head by one (an ordered buffer shifts every row); a state
    saved mid-stream and restored gives the same outputs."""
    model = _pooled_cnn(pooling)
    model.save(tmp_path / "pool.keras")
    out = build_model(str(tmp_path / "pool.keras"), BuildOptions(out_dir=tmp_path / "lib"),
                      Progress(enabled=False)).path
    lib = harness.load(out)
    name = f"{model.layers[-2].name}/window"
    assert name in [s[0] for s in lib.state_specs]
    xs, got = stream_matches_keras(lib, model, "pool", compared=120, seed=4)

    lib.reset()
    lib.step_n(xs[:60])
    before = lib.get_state()
    lib.step(xs[60])
    after = lib.get_state()
    rows_before, rows_after = _state(lib, name, before), _state(lib, name, after)
    keep = rows_before.shape[1] - 1  # (the last row holds the head)
    moved = (rows_before != rows_after)[0, :keep].reshape(keep, -1).any(axis=1)
    assert moved.sum() == 1, moved
    head = rows_before[0, keep, 0]
    assert np.flatnonzero(moved).tolist() == [int(head)]
    assert rows_after[0, keep, 0] == (head + 1) % keep
    lib.set_state(before)
    np.testing.assert_array_equal(lib.step_n(xs[60:]), got[60:])


def test_a_graph_window_mean_is_written_in_place(tmp_path):
    """A frozen graph's reduce_mean over a window (the TF1 SVDF graph): its
    buffer ends in the head, and the library verifies against TensorFlow."""
    path, _ = G.write("svdf_tf1", tmp_path)
    out = build_model(str(path), BuildOptions(out_dir=tmp_path / "lib"),
                      Progress(enabled=False)).path
    lib = harness.load(out)
    (name,) = [s[0] for s in lib.state_specs if s[0].startswith("Mean")]
    lib.step_n(np.ones((5, *lib.input_shape), np.float32))
    buffer = _state(lib, name, lib.get_state())
    keep = buffer.shape[1] - 1
    written = 5 * min(lib.stream.frames_per_step, keep)
    assert buffer.reshape(-1)[keep * buffer[0, 0].size] == written % keep  # the head, 5 steps on
    (result,) = verify(str(path), out, steps=120 + lib.stream.first_valid_step, seed=1,
                       tol=1e-5)
    assert result.ok and result.steps >= 100, result
