"""Frozen graphs of keyword-spotting convolution stacks (issue 10, graph side).

Two writers, as such graphs are found: Keras 3 models of
``keras_conv_models`` frozen with ``convert_variables_to_constants_v2``
(functional ``While`` loops, or lowered v1 control flow; TensorFlow writes a
Conv1D as ExpandDims + Conv2D + Squeeze and a dilated one with
SpaceToBatchND/BatchToSpaceND), and TF1 graphs built op by op
(``tf.nn.conv2d``, ``depthwise_conv2d``, ``FusedBatchNormV3``, ``avg_pool``,
``MatMul``) as the TF1 speech_commands / ARM KWS scripts write them.

Each entry: name -> (builder, expected stream mode, recompute expected).
A builder returns (graph_def, time steps the graph was frozen with or None).
"""
from __future__ import annotations

import numpy as np

import graph_models as gm
import keras_conv_models as K


def _keras(name: str, timesteps: int | None = "model", lower: bool = False):
    def build():
        model = K.build(name)
        shape = tuple(model.inputs[0].shape)
        t = shape[1] if timesteps == "model" else timesteps
        return gm.freeze_keras(model, t, shape[2], lower), t
    return build


def _tf1(body):
    """A TF1 graph (v1 session, constants for weights) from ``body(x, rng)``."""
    def build():
        import tensorflow as tf

        g = tf.Graph()
        with g.as_default():
            rng = np.random.default_rng(7)
            x = tf.compat.v1.placeholder(tf.float32, (1, 16, 10), name="fingerprint_input")
            y = body(x, lambda *shape: tf.constant(
                (rng.standard_normal(shape) * 0.4).astype(np.float32)))
            tf.identity(y, name="labels_softmax")
        return tf.compat.v1.graph_util.extract_sub_graph(g.as_graph_def(),
                                                         ["labels_softmax"]), 16
    return build


def _bn(h, w):
    """Inference batch norm as TF1 writes it (FusedBatchNormV3, is_training=False)."""
    import tensorflow as tf

    c = int(h.shape[-1])
    var = tf.abs(w(c)) + 0.5
    return tf.compat.v1.nn.fused_batch_norm(h, w(c), w(c), mean=w(c), variance=var,
                                            is_training=False)[0]


def _tf1_ds_cnn(x, w):
    """ARM KWS DS-CNN, TF1 style: valid in time, frequency padded explicitly."""
    import tensorflow as tf

    h = tf.reshape(x, [1, 16, 10, 1])
    h = tf.nn.relu(_bn(tf.nn.bias_add(tf.nn.conv2d(h, w(3, 3, 1, 6), [1, 2, 2, 1], "VALID"),
                                      w(6)), w))
    for _ in range(2):
        h = tf.pad(h, [[0, 0], [0, 0], [1, 1], [0, 0]])
        h = tf.nn.relu(_bn(tf.nn.depthwise_conv2d(h, w(3, 3, 6, 1), [1, 1, 1, 1], "VALID"), w))
        h = tf.nn.relu(_bn(tf.nn.conv2d(h, w(1, 1, 6, 6), [1, 1, 1, 1], "VALID"), w))
    h = tf.nn.avg_pool2d(h, [1, int(h.shape[1]), int(h.shape[2]), 1], [1, 1, 1, 1], "VALID")
    h = tf.reshape(h, [1, 6])
    return tf.nn.softmax(tf.matmul(h, w(6, 3)) + w(3))


def _tf1_cnn_same(x, w):
    """speech_commands' 'conv' model: SAME padding everywhere (the exact fallback)."""
    import tensorflow as tf

    h = tf.reshape(x, [1, 16, 10, 1])
    h = tf.nn.relu(tf.nn.conv2d(h, w(5, 3, 1, 4), [1, 1, 1, 1], "SAME") + w(4))
    h = tf.nn.max_pool2d(h, [1, 2, 2, 1], [1, 2, 2, 1], "SAME")
    h = tf.nn.relu(tf.nn.conv2d(h, w(3, 3, 4, 4), [1, 1, 1, 1], "SAME") + w(4))
    h = tf.reshape(h, [1, 8 * 5 * 4])
    return tf.matmul(h, w(8 * 5 * 4, 3)) + w(3)


def _tf1_svdf(x, w):
    """SVDF with a rank-1 memory written as a DepthwiseConv2dNative over time."""
    import tensorflow as tf

    h = tf.tensordot(x, w(10, 8), [[2], [0]])  # feature filter, per frame
    h = tf.expand_dims(h, 2)  # (1, 16, 1, 8)
    h = tf.nn.relu(tf.nn.depthwise_conv2d(h, w(5, 1, 8, 1), [1, 1, 1, 1], "VALID") + w(8))
    h = tf.reduce_mean(h, axis=[1, 2])
    return tf.matmul(h, w(8, 3))


def _same_before_gru():
    """A conv with SAME padding in time before a GRU's last output: refused
    (the conv's frames come late; tests/test_same_padding_late.py)."""
    import keras
    from keras import layers as L

    keras.utils.set_random_seed(1)
    model = keras.Sequential([keras.Input((None, 6)),
                              L.Conv1D(4, 3, padding="same", name="conv_same"), L.GRU(3)])
    return gm.freeze_keras(model, None, 6, False), None


# name -> (builder, mode, recomputed)
MODELS = {
    "crnn": (_keras("crnn", None), "prefix", False),
    "crnn_v1cf_fixed": (_keras("crnn", 100, lower=True), "prefix", False),
    "crnn_pool_same": (_keras("crnn_pool_same", None), "prefix", False),
    "conv_causal_dilated": (_keras("conv1d_causal_dilated_seq", None), "prefix", False),
    "conv_stride2_lstm": (_keras("conv1d_stride2_lstm_seq", None), "prefix", False),
    "pad_pool_gru": (_keras("pad_pool_gru", None, lower=True), "prefix", False),
    "ds_cnn_tf1": (_tf1(_tf1_ds_cnn), "window", False),
    "ds_cnn": (_keras("ds_cnn"), "window", False),
    "ds_cnn_pool_all": (_keras("ds_cnn_pool_all"), "window", False),
    "cnn": (_keras("cnn"), "window", False),
    "cnn_same_tf1": (_tf1(_tf1_cnn_same), "window", True),
    "svdf": (_keras("svdf"), "window", False),
    "svdf_tf1": (_tf1(_tf1_svdf), "window", False),
    "tc_resnet": (_keras("tc_resnet"), "window", True),
    "tc_resnet_valid": (_keras("tc_resnet_valid"), "window", False),
    "window_pool_crop": (_keras("window_pool_crop"), "window", False),
}

REFUSED = {"same_before_gru": (_same_before_gru, ("'sequential", "gru", "TensorListStack",
                                                  "padding='same' in time"))}


def write(name: str, directory) -> tuple:
    """(path of the frozen .pb, its GraphDef)."""
    builder = MODELS[name][0] if name in MODELS else REFUSED[name][0]
    graph_def, _ = builder()
    path = directory / f"{name}.pb"
    gm.write_graph_def(graph_def, path, text=False)
    return path, graph_def
