"""Loops that read their input as ``x[:, t]`` (or ``tf.gather(x, t, axis)``)
with the loop's counter, as hand-written TF2 code does (a ``for t in
tf.range(T)`` loop over a ``tf.function``'s input) instead of unstacking it
into a TensorArray: the step reads the stream's frame where the loop read
frame t. Built into a library and checked against TensorFlow running the
saved model or graph over >= 100 steps."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tfaot.errors import TfaotError

STEPS = 120


def _weights(features: int, units: int, classes: int):
    rng = np.random.default_rng(0)
    return [(rng.normal(size=shape) * 0.3).astype(np.float32)
            for shape in ((features, units), (units, units), (units, classes))]


def _module(read: str):
    """A tf.Module whose loop reads frame t of x (1, T, 8) by ``read``
    ("slice": x[:, t]; "gather": tf.gather(x, t, axis=1)), with a tanh
    recurrence, and writes one output per frame."""
    import tensorflow as tf

    w_in, w_rec, w_out = _weights(8, 16, 3)

    class Loop(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([1, None, 8], tf.float32)])
        def __call__(self, x):
            frames = tf.shape(x)[1]
            h = tf.zeros([1, 16])
            ys = tf.TensorArray(tf.float32, size=frames)
            for t in tf.range(frames):
                xt = x[:, t] if read == "slice" else tf.gather(x, t, axis=1)
                h = tf.tanh(xt @ w_in + h @ w_rec)
                ys = ys.write(t, h @ w_out)
            return tf.transpose(ys.stack(), [1, 0, 2])

    return Loop()


def _build_and_verify(model: Path, out: Path) -> float:
    from tfaot.pipeline import BuildOptions, Progress, build_model
    from tfaot.verify.compare import verify

    build_model(str(model), BuildOptions(out_dir=out), Progress(False))
    (result,) = verify(str(model), out, steps=STEPS, seed=0, tol=1e-5)
    assert result.steps >= 100 and result.mismatch is None, result
    return result.max_abs_error


@pytest.mark.parametrize("read", ["slice", "gather"])
def test_a_saved_model_loop_reading_x_at_t_streams(tmp_path, read):
    import tensorflow as tf

    tf.saved_model.save(_module(read), str(tmp_path / "loop"))
    err = _build_and_verify(tmp_path / "loop", tmp_path / "lib")
    print(f"{read}: max abs error {err:.3g} over {STEPS} steps")
    assert err <= 1e-5, err


def _v1_graph(start: int = 0, whole_too: bool = False):
    """A TF1 graph (Enter/Exit frames) whose tf.while_loop reads x[t] of a
    time-major x (T, 1, 8) from ``start`` and outputs the last frame's
    result; ``whole_too``: the body also adds the mean of the whole x."""
    import tensorflow as tf

    w_in, w_rec, w_out = _weights(8, 16, 3)
    g = tf.Graph()
    with g.as_default():
        tf.compat.v1.disable_control_flow_v2()
        try:
            x = tf.compat.v1.placeholder(tf.float32, (None, 1, 8), name="x")
            frames = tf.shape(x)[0]

            def body(t, h):
                h = tf.tanh(x[t] @ w_in + h @ w_rec)
                if whole_too:
                    h = h + tf.reduce_mean(x)
                return t + 1, h

            _, h = tf.while_loop(lambda t, *_: t < frames, body, [start, tf.zeros((1, 16))])
            tf.matmul(h, w_out, name="y")  # the last frame's output
        finally:
            tf.compat.v1.enable_control_flow_v2()
    return g.as_graph_def()


def test_a_v1_loop_reading_x_at_t_time_major_streams(tmp_path):
    import graph_models as gm

    path = gm.write_graph_def(_v1_graph(), tmp_path / "loop.pb", text=False)
    err = _build_and_verify(path, tmp_path / "lib")
    print(f"v1 x[t]: max abs error {err:.3g} over {STEPS} steps")
    assert err <= 1e-5, err


def _stream_error(gd, name: str) -> str:
    from tfaot.frontend.load_graph import graph_def_to_loaded
    from tfaot.streamify_graph import streamify_graph

    with pytest.raises(TfaotError) as e:
        streamify_graph(graph_def_to_loaded(gd, Path(name), "graphdef"), notify=False)
    return str(e.value)


def test_a_loop_from_frame_1_is_refused_by_name():
    """Frame t = 1, 2, ... at iteration 0, 1, ...: a stream would read one
    frame late, so it is refused, naming the loop."""
    msg = _stream_error(_v1_graph(start=1), "late.pb")
    assert "late.pb" in msg and "does not count 0, 1, 2" in msg and "starts at 1" in msg, msg


def test_a_loop_that_also_uses_the_whole_input_is_refused_by_name():
    msg = _stream_error(_v1_graph(whole_too=True), "whole.pb")
    assert "whole.pb" in msg and "uses the whole of loop variable" in msg, msg
    assert "a stream has only the current frame" in msg, msg


def test_slices_with_new_axes_and_ellipses_stream(tmp_path):
    """``wav[:, :, None]`` in front of a conv1d over the waveform (refused:
    "a slice with an ellipsis or new axis ... is not supported", where
    tf.expand_dims streamed), and ``x[..., 0]``, ``x[None]``, ``x[:, None]``
    on a frame sequence: each keeps the time axis whole, so each is per
    frame. A crop of time with a new axis is still refused, by name."""
    import tensorflow as tf

    rng = np.random.default_rng(1)
    graph = tf.Graph()
    with graph.as_default():
        wav = tf.compat.v1.placeholder(tf.float32, [1, None], name="wav")
        frames = tf.nn.relu(tf.nn.conv1d(wav[:, :, None], rng.standard_normal(
            (16, 1, 3)).astype(np.float32), 8, "VALID"))  # (1, T, 3)
        mixed = (tf.squeeze(frames[:, None, :, :], 1) + frames[..., None][..., 0]
                 + tf.squeeze(frames[None], 0) + frames[..., 0][..., None])
        tf.identity(mixed, name="y")
    model = tmp_path / "newaxis.pb"
    model.write_bytes(graph.as_graph_def().SerializeToString())
    assert _build_and_verify(model, tmp_path / "out") < 1e-5

    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [1, None, 3], name="x")
        tf.identity(x[:, 1:, None] * 2.0, name="y")
    model = tmp_path / "crop.pb"
    model.write_bytes(graph.as_graph_def().SerializeToString())
    with pytest.raises(TfaotError, match="'strided_slice' .*with an ellipsis or a new axis"):
        _build_and_verify(model, tmp_path / "crop")


def _mapped_frames(order: str):
    """A tf.Module mapping a layer over the frames with tf.vectorized_map
    (``x[i]`` for i in range(T) of the time-major input: pfor leaves the
    slice as a loop copying frames into a list, the loop form of Keras 3's
    TimeDistributed export too), then a tf.scan recurrence. ``order`` "reversed" maps
    frame T-1-i, which is not a copy of the input in order."""
    import tensorflow as tf

    w_in, w_rec, _ = _weights(8, 6, 3)

    class Mapped(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([1, None, 8], tf.float32)])
        def __call__(self, x):
            xt = tf.transpose(x, [1, 0, 2])
            frames = tf.shape(xt)[0]
            pick = (lambda i: i) if order == "in order" else (lambda i: frames - 1 - i)
            y = tf.vectorized_map(lambda i: tf.nn.relu(xt[pick(i)] @ w_in), tf.range(frames))
            h = tf.scan(lambda h, f: tf.tanh(f + h @ w_rec), y,
                        initializer=tf.zeros([1, 6]))
            return tf.transpose(h, [1, 0, 2])

    return Mapped()


def test_a_vectorized_map_over_the_frames_streams(tmp_path):
    """pfor's loop that copies frame i into a list for i in range(T) (it
    cannot vectorise x[i]) was refused as a loop indexing x with a value;
    its stack is the input itself (checked on two lengths), so the graph
    streams frame by frame."""
    import tensorflow as tf

    tf.saved_model.save(_mapped_frames("in order"), str(tmp_path / "mapped"))
    err = _build_and_verify(tmp_path / "mapped", tmp_path / "lib")
    assert err <= 1e-5, err


def test_a_vectorized_map_over_frames_out_of_order_is_refused(tmp_path):
    """The same loop reading frame T-1-i is not a copy: refused, naming it."""
    import tensorflow as tf

    from tfaot.pipeline import Progress, load_and_streamify

    tf.saved_model.save(_mapped_frames("reversed"), str(tmp_path / "mapped"))
    with pytest.raises(TfaotError) as e:
        load_and_streamify(str(tmp_path / "mapped"), Progress(enabled=False))
    assert "/pfor/while'" in str(e.value), e.value
