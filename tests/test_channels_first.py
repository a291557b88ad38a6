"""Channels-first (NCHW) convolutions, batch norms and pooling, which
TensorFlow runs only on GPUs: a graph trained there failed the build's test
run ("only supports the NHWC tensor format on the CPU"). The frontend writes
them channels-last between transposes (frontend/channels_last.py). The
libraries are checked over 120 steps against the same model written
channels-last by hand, with the same weights, run by TensorFlow."""
from __future__ import annotations

import numpy as np
import pytest

import graph_models as gm
from tfaot import cli, harness
from tfaot.frontend.channels_last import channels_last

STEPS = 120
FEATURES = 16


def _weights():
    rng = np.random.default_rng(0)
    return dict(conv=rng.normal(size=(3, 3, 1, 4)).astype(np.float32) * 0.5,
                bias=rng.normal(size=4).astype(np.float32) * 0.1,
                scale=rng.uniform(0.5, 1.5, 4).astype(np.float32),
                offset=rng.normal(size=4).astype(np.float32) * 0.1,
                mean=rng.normal(size=4).astype(np.float32) * 0.1,
                var=rng.uniform(0.5, 2.0, 4).astype(np.float32),
                depthwise=rng.normal(size=(3, 1, 4, 1)).astype(np.float32) * 0.5)


def _crnn_graph(fmt: str, frames: int | None):
    """x (1, T, 16) -> Conv2D 3x3 -> BiasAdd -> FusedBatchNormV3 -> Relu ->
    MaxPool over frequency -> depthwise 3x1 in time -> a GRU over the frames,
    every image op in data format ``fmt`` ("NCHW" or "NHWC"); frozen."""
    import tensorflow as tf

    tf1 = tf.compat.v1
    w = _weights()
    first = fmt == "NCHW"
    g = tf.Graph()
    with g.as_default():
        tf1.set_random_seed(1)
        x = tf1.placeholder(tf.float32, [1, frames, FEATURES], name="input")
        img = x[:, None] if first else x[..., None]  # (1, 1, T, F) or (1, T, F, 1)
        y = tf.nn.conv2d(img, w["conv"], [1, 1, 1, 1], "VALID", data_format=fmt)
        y = tf.nn.bias_add(y, w["bias"], data_format=fmt)
        y, *_ = tf1.nn.fused_batch_norm(y, w["scale"], w["offset"], w["mean"], w["var"],
                                        is_training=False, data_format=fmt)
        y = tf.nn.relu(y)
        pool = [1, 1, 1, 2] if first else [1, 1, 2, 1]
        y = tf.nn.max_pool2d(y, pool, pool, "VALID", data_format=fmt)
        y = tf.nn.depthwise_conv2d(y, w["depthwise"], [1, 1, 1, 1], "VALID", data_format=fmt)
        # (1, T, C, F) from (1, C, T, F) or (1, T, F, C): the same features
        y = tf.transpose(y, [0, 2, 1, 3] if first else [0, 1, 3, 2])
        return _gru_frozen(g, tf.reshape(y, [1, -1, 4 * ((FEATURES - 2) // 2)]), 6)


def _gru_frozen(g, frames, units: int):
    """``g`` with a GRU over ``frames`` (1, T, F) as its output, frozen; the
    GRU's weights are the same in both data formats' graphs (seeded per op)."""
    import tensorflow as tf

    tf1 = tf.compat.v1
    init = tf1.random_normal_initializer(stddev=0.4, seed=5)
    cell = gm.legacy_cells().GRUCell(units, kernel_initializer=init, bias_initializer=init)
    ys, _ = tf1.nn.dynamic_rnn(cell, frames, dtype=tf.float32)
    tf.identity(ys, name="output")
    with tf1.Session() as sess:
        sess.run(tf1.global_variables_initializer())
        return tf1.graph_util.convert_variables_to_constants(sess, g.as_graph_def(), ["output"])


def test_a_channels_first_graph_streams_and_matches_its_channels_last_twin(tmp_path):
    import tensorflow as tf

    first = _crnn_graph("NCHW", None)
    rewritten, count = channels_last(first)
    assert count == 4  # conv, batch norm, max pool, depthwise (BiasAdd runs NCHW on CPUs)
    path = gm.write_graph_def(first, tmp_path / "nchw.pb", text=False)
    assert cli.main(["build", str(path), "-o", str(tmp_path / "out"), "-q"]) == 0
    xs = np.random.default_rng(2).standard_normal((STEPS, 1, FEATURES)).astype(np.float32)
    got = harness.load(tmp_path / "out").step_n(xs)
    with tf.compat.v1.Session(graph=tf.Graph()) as sess:
        tf.graph_util.import_graph_def(_crnn_graph("NHWC", None), name="")
        want = sess.run("output:0", {"input:0": xs.reshape(1, STEPS, FEATURES)})[0]
    # (the first two frames fill the 3-tap windows: no output for them)
    np.testing.assert_allclose(got.reshape(-1, 6)[-want.shape[0]:], want, rtol=0, atol=1e-5)


def _upsampling_graph(fmt: str):
    """x (1, T, 8) -> a transposed convolution over frequency (kernel 1x3,
    stride 1x2: 8 -> 17 bins, the output shape computed from the input's
    frame count, as Keras writes it) -> a GRU, in data format ``fmt``."""
    import tensorflow as tf

    tf1 = tf.compat.v1
    first = fmt == "NCHW"
    kernel = np.random.default_rng(5).normal(size=(1, 3, 4, 1)).astype(np.float32)
    g = tf.Graph()
    with g.as_default():
        tf1.set_random_seed(1)
        x = tf1.placeholder(tf.float32, [1, None, 8], name="input")
        frames = tf.shape(x)[1]
        img = x[:, None] if first else x[..., None]
        shape = tf.stack([1, 4, frames, 17] if first else [1, frames, 17, 4])
        y = tf.nn.conv2d_transpose(img, kernel, shape, [1, 1, 1, 2] if first else [1, 1, 2, 1],
                                   "VALID", data_format=fmt)
        y = tf.transpose(y, [0, 2, 1, 3] if first else [0, 1, 3, 2])  # (1, T, C, F)
        return _gru_frozen(g, tf.reshape(y, [1, -1, 4 * 17]), 5)


def test_a_channels_first_transposed_convolution_streams(tmp_path):
    """Conv2DBackpropInput in NCHW (TensorFlow's CPU kernel: "only supports
    NHWC"): its output shape, computed in NCHW order, is reordered too. (A
    transposed convolution read by anything but a Reshape or Squeeze, here
    the transpose back, was refused in NHWC as well: "cannot find its
    output's shape".)"""
    import tensorflow as tf

    path = gm.write_graph_def(_upsampling_graph("NCHW"), tmp_path / "up.pb", text=False)
    assert cli.main(["build", str(path), "-o", str(tmp_path / "out"), "-q"]) == 0
    xs = np.random.default_rng(6).standard_normal((STEPS, 1, 8)).astype(np.float32)
    got = harness.load(tmp_path / "out").step_n(xs).reshape(STEPS, 5)
    with tf.compat.v1.Session(graph=tf.Graph()) as sess:
        tf.graph_util.import_graph_def(_upsampling_graph("NHWC"), name="")
        want = sess.run("output:0", {"input:0": xs.reshape(1, STEPS, 8)})[0]
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)


def test_verify_runs_a_channels_first_graph(tmp_path):
    """verify's reference is the graph as given, which TensorFlow cannot run
    on a CPU as it is: it runs the channels-last rewrite."""
    from tfaot.verify.compare import verify

    path = gm.write_graph_def(_crnn_graph("NCHW", None), tmp_path / "nchw.pb", text=False)
    assert cli.main(["build", str(path), "-o", str(tmp_path / "out"), "-q"]) == 0
    (result,) = verify(str(path), tmp_path / "out", steps=STEPS, seed=0, tol=1e-5)
    assert result.steps >= 100 and result.mismatch is None, result


@pytest.mark.parametrize("keep", [True, False])
def test_a_batch_norm_whose_statistics_are_read_stays(keep):
    """Only output 0 is transposed back: a node whose other outputs are read
    stays as it is."""
    gd = _crnn_graph("NCHW", 8)
    if keep:
        bn = next(n for n in gd.node if n.op == "FusedBatchNormV3")
        reader = gd.node.add(name="reads_mean", op="Identity", input=[f"{bn.name}:1"])
        reader.attr["T"].type = bn.attr["U"].type
    _, count = channels_last(gd)
    assert count == (3 if keep else 4)


def test_a_keras_model_ported_channels_first_streams(tmp_path):
    """A PyTorch-style Keras model: Permute to (channels, time), a
    channels_first Conv1D, Permute back, a GRU. Keras cannot run it on a
    CPU at all; its traced graph, written channels-last, streams. Checked
    against the channels_last twin with the same weights."""
    import keras

    keras.utils.set_random_seed(0)
    conv_first = keras.layers.Conv1D(8, 3, data_format="channels_first")
    conv_last = keras.layers.Conv1D(8, 3)
    gru = keras.layers.GRU(5, return_sequences=True)
    x = keras.Input((None, 12))
    y = keras.layers.Permute((2, 1))(conv_first(keras.layers.Permute((2, 1))(x)))
    ported = keras.Model(x, gru(y))
    twin = keras.Model(x, gru(conv_last(x)))
    conv_last.set_weights(conv_first.get_weights())  # (kernel (3, 12, 8) in both)
    ported.save(tmp_path / "ported.keras")
    assert cli.main(["build", str(tmp_path / "ported.keras"), "-o", str(tmp_path / "out"),
                     "-q"]) == 0
    xs = np.random.default_rng(4).standard_normal((STEPS, 1, 12)).astype(np.float32)
    got = harness.load(tmp_path / "out").step_n(xs).reshape(-1, 5)
    want = twin.predict(xs.reshape(1, STEPS, 12), verbose=0)[0]
    np.testing.assert_allclose(got[-want.shape[0]:], want, rtol=0, atol=1e-5)


def _torch_like(seed: int):
    """A channels_first image classifier as PyTorch ports write it in Keras:
    (N, C, H, W) in, Conv2D + BatchNormalization(axis=1) + ReLU + MaxPool,
    Flatten in channels-first order, Dense."""
    import keras
    from keras import layers as L

    keras.utils.set_random_seed(seed)
    first = dict(data_format="channels_first")
    x = keras.Input((2, 8, 8))
    h = L.Conv2D(4, 3, padding="same", use_bias=False, **first)(x)
    h = L.BatchNormalization(axis=1, beta_initializer="random_normal",
                             moving_mean_initializer="random_normal")(h)
    h = L.MaxPooling2D(2, **first)(L.ReLU()(h))
    return keras.Model(x, L.Dense(3)(L.Flatten()(h)))


def _as_without_nchw_kernels(monkeypatch):
    """verify as on a CPU whose TensorFlow runs no NCHW convolution (this
    one's, unless its oneDNN build does, as on an AVX-512 machine): the
    Keras model's reference raises TensorFlow's error; its traced graph's
    runs."""
    import tensorflow as tf

    from tfaot.verify import compare

    make_case = compare._make_case

    def keras_fails(loaded, *args, **kwargs):
        if loaded.keras_model is not None:
            raise tf.errors.UnimplementedError(
                None, None, "The Conv2D op currently only supports the NHWC tensor format "
                "on the CPU. The op was given the format: NCHW")
        return make_case(loaded, *args, **kwargs)

    monkeypatch.setattr(compare, "_make_case", keras_fails)


def test_verify_runs_a_channels_first_keras_model(tmp_path, capsys, monkeypatch):
    """Keras runs channels_first convolutions and pools through TensorFlow's
    NCHW kernels, which most CPU builds lack, so verify had no reference
    ("The Conv2D op currently only supports the NHWC tensor format on the
    CPU"): it runs the model's traced graph channels-last, and says so (a
    saved case too). A library of the same model with other weights fails
    that check."""
    from tfaot.verify.compare import CHANNELS_FIRST_NOTE, verify

    for seed in (0, 1):
        _torch_like(seed).save(tmp_path / f"m{seed}.keras")
        assert cli.main(["build", str(tmp_path / f"m{seed}.keras"), "-o",
                         str(tmp_path / f"out{seed}"), "-q"]) == 0
    (result,) = verify(str(tmp_path / "m0.keras"), tmp_path / "out0", steps=STEPS, seed=0,
                       tol=None)  # (this CPU's TensorFlow, whichever reference it allows)
    assert result.ok and result.steps >= 100, result.describe()
    _as_without_nchw_kernels(monkeypatch)
    (result,) = verify(str(tmp_path / "m0.keras"), tmp_path / "out0", steps=STEPS, seed=0,
                       tol=None)
    assert result.ok and result.steps >= 100, result.describe()
    assert not result.constant and result.reference_note == CHANNELS_FIRST_NOTE
    (other,) = verify(str(tmp_path / "m0.keras"), tmp_path / "out1", steps=STEPS, seed=0,
                      tol=None)
    assert not other.ok, other.describe()
    case = tmp_path / "case.npz"
    capsys.readouterr()
    assert cli.main(["verify", str(tmp_path / "m0.keras"), str(tmp_path / "out0"),
                     "--save-case", str(case)]) == 0
    assert cli.main(["verify", "--case", str(case), str(tmp_path / "out0")]) == 0
    assert f"note: {CHANNELS_FIRST_NOTE}" in capsys.readouterr().out


def test_a_keras_channels_first_conv3d_builds(tmp_path):
    """Keras 3 runs a channels_first Conv3D through a jit_compile function
    (TensorFlow's CPU kernels lack NCDHW). Its traced graph kept the call,
    whose frozen function TensorFlow's context already held under its name:
    the build failed ("Attempting to add a duplicate function with name:
    __inference__conv_xla_frozen_92"). The call is inlined, and the
    Conv3D written channels-last."""
    import keras
    from keras import layers as L

    from tfaot.verify.compare import verify

    keras.utils.set_random_seed(2)
    x = keras.Input((2, 6, 6, 6))
    h = L.Conv3D(4, 3, padding="same", activation="relu", data_format="channels_first")(x)
    keras.Model(x, L.Dense(3)(L.Flatten()(h))).save(tmp_path / "cf3d.keras")
    assert cli.main(["build", str(tmp_path / "cf3d.keras"), "-o", str(tmp_path / "out"),
                     "-q"]) == 0
    (result,) = verify(str(tmp_path / "cf3d.keras"), tmp_path / "out", steps=STEPS, seed=0,
                       tol=None)
    assert result.ok and result.steps >= 100 and not result.constant, result.describe()
