"""Small recurrent models for the graph-frontend tests (fixed seeds, no network).

Keras 3 models are frozen the two ways ``convert_variables_to_constants_v2``
can (functional ``While`` and lowered v1 control flow) and saved as SavedModels
by both writers; TF1 graphs are built with ``tf.compat.v1.while_loop`` +
``TensorArray`` with control flow v2 switched off, which gives the classic
Enter/Merge/Switch/NextIteration/Exit frames and ``TensorArrayV3`` ops of TF1
``dynamic_rnn`` without needing tf_keras.
"""
from __future__ import annotations

import contextlib

import os

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")


def keras_model(kind: str, units=(16,), features=8, timesteps=None, return_sequences=True,
                dense=3, seed=0):
    """A Sequential of len(units) ``kind`` layers (LSTM/GRU/SimpleRNN), optional Dense."""
    import keras

    keras.utils.set_random_seed(seed)
    layer = {"lstm": keras.layers.LSTM, "gru": keras.layers.GRU,
             "simplernn": keras.layers.SimpleRNN}[kind.lower()]
    layers = [keras.Input((timesteps, features), batch_size=1 if timesteps else None)]
    for k, u in enumerate(units):
        last = k == len(units) - 1
        layers.append(layer(u, return_sequences=return_sequences or not last))
    if dense:
        layers.append(keras.layers.Dense(dense, activation="tanh"))
    return keras.Sequential(layers)


def freeze_keras(model, timesteps: int, features: int, lower_control_flow: bool):
    """Frozen GraphDef of ``model`` at input shape (1, timesteps, features)."""
    import tensorflow as tf
    from tensorflow.python.framework.convert_to_constants import (
        convert_variables_to_constants_v2,
    )

    cf = tf.function(lambda x: model(x)).get_concrete_function(
        tf.TensorSpec((1, timesteps, features), tf.float32, name="x"))
    frozen = convert_variables_to_constants_v2(cf, lower_control_flow=lower_control_flow)
    return frozen.graph.as_graph_def()


def write_graph_def(graph_def, path, text: bool):
    from google.protobuf import text_format

    if text:
        with open(path, "w") as f:
            f.write(text_format.MessageToString(graph_def))
    else:
        with open(path, "wb") as f:
            f.write(graph_def.SerializeToString())
    return path


def build_tf1_lstm(units=12, features=6, dense=4, timesteps=None, seed=0,
                   variables=False):
    """A TF1-style LSTM loop: v1 while_loop over TensorArrayV3, then a Dense.

    Returns (graph, input tensor, output tensor). With ``variables`` the
    weights are VariableV2 (for a SavedModel v1), else constants.
    """
    import tensorflow as tf
    from tensorflow.python.ops import control_flow_util

    rng = np.random.default_rng(seed)
    w = (rng.standard_normal((features + units, 4 * units)) * 0.3).astype(np.float32)
    b = (rng.standard_normal((4 * units,)) * 0.1).astype(np.float32)
    wd = (rng.standard_normal((units, dense)) * 0.3).astype(np.float32)
    bd = (rng.standard_normal((dense,)) * 0.1).astype(np.float32)
    saved = control_flow_util.ENABLE_CONTROL_FLOW_V2
    control_flow_util.ENABLE_CONTROL_FLOW_V2 = False
    try:
        g = tf.Graph()
        with g.as_default():
            x = tf.compat.v1.placeholder(tf.float32, (1, timesteps, features), name="x")
            if variables:
                mk = lambda v, n: tf.compat.v1.Variable(v, name=n, use_resource=False)  # noqa
            else:
                mk = lambda v, n: tf.constant(v, name=n)  # noqa
            W, B, Wd, Bd = mk(w, "kernel"), mk(b, "bias"), mk(wd, "dense_kernel"), \
                mk(bd, "dense_bias")
            with tf.compat.v1.variable_scope("rnn"):
                xs = tf.transpose(x, [1, 0, 2])
                T = tf.shape(xs)[0]
                ta_in = tf.TensorArray(tf.float32, size=T, name="input_ta").unstack(xs)
                ta_out = tf.TensorArray(tf.float32, size=T, name="output_ta")
                h0 = tf.zeros((1, units))
                c0 = tf.zeros((1, units))

                def body(t, h, c, ta):
                    z = tf.matmul(tf.concat([ta_in.read(t), h], 1), W) + B
                    i, j, f, o = tf.split(z, 4, axis=1)
                    c = tf.sigmoid(f + 1.0) * c + tf.sigmoid(i) * tf.tanh(j)
                    h = tf.sigmoid(o) * tf.tanh(c)
                    return t + 1, h, c, ta.write(t, h)

                _, h, c, ta = tf.compat.v1.while_loop(
                    lambda t, *_: t < T, body, [tf.constant(0), h0, c0, ta_out])
                ys = tf.transpose(ta.stack(), [1, 0, 2])  # (1, T, units)
            flat = tf.reshape(ys, [-1, units])
            y = tf.reshape(tf.tanh(tf.matmul(flat, Wd) + Bd), [1, -1, dense], name="y")
    finally:
        control_flow_util.ENABLE_CONTROL_FLOW_V2 = saved
    return g, x, y


def tf1_frozen_graph_def(**kw):
    import tensorflow as tf

    g, x, y = build_tf1_lstm(**kw)
    return tf.compat.v1.graph_util.extract_sub_graph(g.as_graph_def(), [y.op.name])


def save_tf1_saved_model(path, **kw):
    """A SavedModel v1 (SavedModelBuilder) of the TF1 LSTM, VariableV2 weights."""
    import tensorflow as tf

    g, x, y = build_tf1_lstm(variables=True, **kw)
    with g.as_default(), tf.compat.v1.Session(graph=g) as sess:
        sess.run(tf.compat.v1.global_variables_initializer())
        builder = tf.compat.v1.saved_model.Builder(str(path))
        sig = tf.compat.v1.saved_model.predict_signature_def({"x": x}, {"y": y})
        builder.add_meta_graph_and_variables(sess, ["serve"],
                                             signature_def_map={"serving_default": sig})
        builder.save()
    return path


def run_graph_def(graph_def, input_name: str, output: str, x: np.ndarray) -> np.ndarray:
    """Run a frozen graph on a whole sequence in a TF1 session."""
    import tensorflow as tf

    g = tf.Graph()
    with g.as_default():
        tf.graph_util.import_graph_def(graph_def, name="")
        with tf.compat.v1.Session(graph=g) as sess:
            return sess.run(output, {f"{input_name}:0": x})


def stream(program, x: np.ndarray, time_axis: int = 1) -> np.ndarray:
    """Run ``program.pure_step`` step by step (eagerly) from the initial state."""
    import tensorflow as tf

    states = [tf.constant(s.initial) for s in program.signature.states]
    ys = []
    for t in range(x.shape[time_axis]):
        out = program.pure_step(tf.constant(np.take(x, t, axis=time_axis)), *states)
        ys.append(out[0].numpy())
        states = list(out[1:])
    return np.stack(ys, axis=0)  # (T, *y_t shape)


def run_saved_model(path, x: np.ndarray) -> np.ndarray:
    """Run a SavedModel's serving signature (v2, or v1 via a TF1 session)."""
    import tensorflow as tf

    from tfaot.frontend.load_saved_model import saved_model_version

    from pathlib import Path

    if saved_model_version(Path(path)) == 1:
        g = tf.Graph()
        with g.as_default(), tf.compat.v1.Session(graph=g) as sess:
            meta = tf.compat.v1.saved_model.loader.load(sess, ["serve"], str(path))
            sig = meta.signature_def["serving_default"]
            (inp,) = sig.inputs.values()
            out = sig.outputs[sorted(sig.outputs)[0]]
            return sess.run(out.name, {inp.name: x})
    sig = tf.saved_model.load(str(path)).signatures["serving_default"]
    _, kw = sig.structured_input_signature
    (key,) = kw
    res = sig(**{key: tf.constant(x)})
    return res[sorted(res)[0]].numpy()


# --------------------------------------------------------------------------
# TF1 graphs as published keyword-spotting models are written: a TF1 session,
# tf.compat.v1 RNN cells, the speech_commands audio front end (wav_data ->
# DecodeWav -> AudioSpectrogram -> Mfcc) and its reshape round trip.


def legacy_cells():
    """The tf.compat.v1.nn.rnn_cell classes (they live in tf_keras; TF 2.21 only
    exposes them under tf.compat.v1 with TF_USE_LEGACY_KERAS=1)."""
    from tf_keras.src.layers.rnn import legacy_cells as lc

    return lc


def _v1_cell(kind: str, units: int):
    lc = legacy_cells()
    if kind == "lstm":
        return lc.LSTMCell(units)
    if kind == "lstm_peephole_proj":
        return lc.LSTMCell(units, use_peepholes=True, num_proj=units // 2)
    if kind == "basic_lstm":
        return lc.BasicLSTMCell(units)
    if kind == "gru":
        return lc.GRUCell(units)
    if kind == "rnn":
        return lc.BasicRNNCell(units)
    if kind == "multi":
        return lc.MultiRNNCell([lc.LSTMCell(units), lc.GRUCell(units // 2)])
    raise ValueError(kind)


@contextlib.contextmanager
def tf1_graph(seed: int):
    """A fresh graph with TF1 (v1) control flow, its random seed set; yields the graph."""
    import tensorflow as tf
    from tensorflow.python.ops import control_flow_util

    saved = control_flow_util.ENABLE_CONTROL_FLOW_V2
    control_flow_util.ENABLE_CONTROL_FLOW_V2 = False
    try:
        g = tf.Graph()
        with g.as_default():
            tf.compat.v1.set_random_seed(seed)
            yield g
    finally:
        control_flow_util.ENABLE_CONTROL_FLOW_V2 = saved


def build_kws_graph(cell="lstm", rnn="dynamic", frames=100, dct=10, units=12, labels=4,
                    front_end=True, head="last", seed=0, sequence_length=None):
    """A frozen TF1 keyword-spotting graph, as speech_commands' freeze.py writes them.

    ``wav_data`` (string) -> DecodeWav -> AudioSpectrogram(window 480, stride
    160) -> ``Mfcc`` [1, frames, dct] -> Reshape [1, frames*dct] -> Reshape
    [-1, frames, dct] -> ``rnn`` ("dynamic": dynamic_rnn, v1 control flow;
    "static": static_rnn, unrolled) over a tf.compat.v1 ``cell`` -> Dense ->
    ``labels_softmax``. ``head``: "last" (the last output, a [1, labels]
    result) or "seq" (softmax per frame, [1, frames, labels]). Without
    ``front_end`` the graph starts at a float placeholder ``fingerprint_input``.
    Returns the frozen GraphDef.
    """
    import tensorflow as tf

    with tf1_graph(seed) as g:
        if front_end:
            wav = tf.compat.v1.placeholder(tf.string, [], name="wav_data")
            audio, rate = tf.raw_ops.DecodeWav(contents=wav, desired_channels=1,
                                               desired_samples=480 + 160 * (frames - 1),
                                               name="decoded_sample_data")
            spec = tf.raw_ops.AudioSpectrogram(input=audio, window_size=480, stride=160,
                                               magnitude_squared=True, name="AudioSpectrogram")
            mfcc = tf.raw_ops.Mfcc(spectrogram=spec, sample_rate=rate,
                                   dct_coefficient_count=dct, name="Mfcc")
        else:
            mfcc = tf.compat.v1.placeholder(tf.float32, [1, frames, dct],
                                            name="fingerprint_input")
        fingerprint = tf.reshape(mfcc, [-1, frames * dct], name="Reshape")
        x = tf.reshape(fingerprint, [-1, frames, dct], name="Reshape_1")
        c = _v1_cell(cell, units)
        if rnn == "dynamic":
            seq_len = None if sequence_length is None else \
                tf.constant([sequence_length], tf.int32, name="seq_len")
            outs, _ = tf.compat.v1.nn.dynamic_rnn(c, x, dtype=tf.float32,
                                                  sequence_length=seq_len)
            out_units = outs.shape[-1]
            per_step = None
            last = outs[:, -1, :]
        else:
            steps = tf.unstack(x, frames, 1)
            per_step, _ = tf.compat.v1.nn.static_rnn(c, steps, dtype=tf.float32)
            out_units = per_step[-1].shape[-1]
            last = per_step[-1]
        w = tf.compat.v1.get_variable("final_fc_weights", (out_units, labels),
                                      initializer=tf.compat.v1.glorot_uniform_initializer())
        b = tf.compat.v1.get_variable("final_fc_bias", (labels,),
                                      initializer=tf.compat.v1.random_normal_initializer())
        if head == "last":
            logits = tf.matmul(last, w) + b
        else:
            seq = outs if per_step is None else tf.stack(per_step, axis=1)
            logits = tf.tensordot(seq, w, [[2], [0]]) + b
        tf.nn.softmax(logits, name="labels_softmax")
        with tf.compat.v1.Session(graph=g) as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            gd = tf.compat.v1.graph_util.convert_variables_to_constants(
                sess, g.as_graph_def(), ["labels_softmax"])
    return tf.compat.v1.graph_util.extract_sub_graph(gd, ["labels_softmax"])


def run_original(graph_def, feed: str, x: np.ndarray, fetch="labels_softmax:0") -> np.ndarray:
    """TensorFlow running the original graph fed at any tensor (a TF1 session)."""
    import tensorflow as tf

    g = tf.Graph()
    with g.as_default():
        tf.graph_util.import_graph_def(graph_def, name="")
        with tf.compat.v1.Session(graph=g) as sess:
            return sess.run(fetch, {feed: x})
