"""TF1 graphs with the loops users have (issue 11, item 7), written as TF1 users write
them: a tf.compat.v1 session with control flow v2 off, tf.compat.v1.nn.dynamic_rnn /
static_rnn over tf.compat.v1.nn.rnn_cell cells (from tf_keras' legacy cells), frozen
with convert_variables_to_constants. Every builder returns a frozen GraphDef whose
input is ``x`` and whose output is ``y``.
"""
from __future__ import annotations

import numpy as np

import graph_models as gm


def _freeze(g, output="y"):
    import tensorflow as tf

    with tf.compat.v1.Session(graph=g) as sess:
        sess.run(tf.compat.v1.global_variables_initializer())
        gd = tf.compat.v1.graph_util.convert_variables_to_constants(
            sess, g.as_graph_def(), [output])
    return tf.compat.v1.graph_util.extract_sub_graph(gd, [output])


def _dense(h, labels, name="y"):
    import tensorflow as tf

    w = tf.compat.v1.get_variable("fc_w", (h.shape[-1], labels))
    b = tf.compat.v1.get_variable("fc_b", (labels,),
                                  initializer=tf.compat.v1.random_normal_initializer())
    if h.shape.rank == 3:
        return tf.identity(tf.tensordot(h, w, [[2], [0]]) + b, name=name)
    return tf.identity(tf.matmul(h, w) + b, name=name)


def seq_len_rnn(cell="lstm", seq_len="const", length=60, frames=None, features=6, units=10,
                head="seq", seed=0, batch=1):
    """dynamic_rnn with ``sequence_length``: a constant ``[length]`` ("const"), an
    int32 Placeholder ``seq_len`` of shape [1] ("placeholder"), one of shape
    [None] made before ``x`` ("placeholder_first"), or x's own length ("full"). ``frames`` None: an open
    time axis; ``batch`` None: an open batch (the zero state and outputs are
    shaped by tf.shape(x))."""
    import tensorflow as tf

    with gm.tf1_graph(seed) as g:
        if seq_len == "placeholder_first":
            sl = tf.compat.v1.placeholder(tf.int32, (None,), name="seq_len")
        x = tf.compat.v1.placeholder(tf.float32, (batch, frames, features), name="x")
        if seq_len == "const":
            sl = tf.constant([length], tf.int32, name="seq_len")
        elif seq_len == "placeholder":
            sl = tf.compat.v1.placeholder(tf.int32, (batch,), name="seq_len")
        elif seq_len == "full":  # every sequence as long as x
            sl = tf.fill([tf.shape(x)[0]], tf.shape(x)[1])
        outs, state = tf.compat.v1.nn.dynamic_rnn(gm._v1_cell(cell, units), x,
                                                  sequence_length=sl, dtype=tf.float32)
        if head == "seq":
            _dense(outs, 4)
        else:  # the final state (frozen at the sequence's length)
            h = state.h if hasattr(state, "h") else state
            _dense(h, 4)
        return _freeze(g)


def cond_in_loop(pred="state", frames=None, features=5, units=8, seed=0):
    """A v1 while_loop over a TensorArray whose body has a ``tf.cond``:
    ``pred`` "state" (on the recurrent state: both branches side-effect free),
    "input" (on this step's input), "counter" (on the time index, t < 3: a
    warm-up), "is_training" (dropout behind a placeholder_with_default(False)
    flag), "random" (a stateful op in a branch) or "loop" (a nested while loop
    in one branch)."""
    import tensorflow as tf

    rng = np.random.default_rng(seed)
    with gm.tf1_graph(seed) as g:
        w = tf.constant((rng.standard_normal((features + units, units)) * 0.4)
                        .astype(np.float32))
        x = tf.compat.v1.placeholder(tf.float32, (1, frames, features), name="x")
        training = tf.compat.v1.placeholder_with_default(False, (), name="is_training")
        xs = tf.transpose(x, [1, 0, 2])
        T = tf.shape(xs)[0]
        ta_in = tf.TensorArray(tf.float32, size=T).unstack(xs)

        def body(t, h, ta):
            z = tf.matmul(tf.concat([ta_in.read(t), h], 1), w)
            if pred == "state":
                p = tf.reduce_sum(h) > 0.0
            elif pred == "counter":
                p = t < 3
            else:
                p = tf.reduce_sum(z) > 0.0
            if pred == "loop":
                def inner():
                    return tf.while_loop(lambda k, v: k < 2, lambda k, v: (k + 1, v * 0.5),
                                         [0, z])[1]
                h_new = tf.cond(p, inner, lambda: tf.tanh(z), name="gate")
            elif pred == "is_training":  # dropout behind an outer flag
                h_new = tf.cond(training, lambda: tf.nn.dropout(tf.tanh(z), rate=0.3),
                                lambda: tf.tanh(z), name="gate")
            elif pred == "random":  # a stateful op in a branch
                h_new = tf.cond(p, lambda: tf.tanh(z) + tf.random.uniform((1, units)),
                                lambda: tf.sigmoid(z), name="gate")
            else:
                h_new = tf.cond(p, lambda: tf.tanh(z), lambda: tf.sigmoid(z) - 0.5,
                                name="gate")
            return t + 1, h_new, ta.write(t, h_new)

        _, _, ta = tf.while_loop(lambda t, *_: t < T, body,
                                 [0, tf.zeros((1, units)), tf.TensorArray(tf.float32, size=T)])
        tf.identity(tf.transpose(ta.stack(), [1, 0, 2]), name="y")
        return tf.compat.v1.graph_util.extract_sub_graph(g.as_graph_def(), ["y"])


def nested_loops(frames=None, features=4, seed=0):
    """An outer v1 while loop over time whose body runs an inner while loop."""
    return cond_in_loop("loop", frames, features, seed=seed)


def static_rnn(cell="lstm_peephole_proj", frames=20, features=6, units=10, cond=0,
               head="seq", seq_len=None, seed=0, batch=1):
    """static_rnn over ``frames`` unstacked steps; ``cond`` > 0: a second input
    ``c`` (1, cond), a conditioning vector concatenated to every step's input;
    ``seq_len``: a sequence_length, an int (a constant) or "placeholder" (an int32
    Placeholder ``seq_len`` of shape [1]); ``batch``: the input's batch
    (None: open, as published graphs have it)."""
    import tensorflow as tf

    with gm.tf1_graph(seed) as g:
        x = tf.compat.v1.placeholder(tf.float32, (batch, frames, features), name="x")
        steps = tf.unstack(x, frames, 1)
        if cond:
            c = tf.compat.v1.placeholder(tf.float32, (1, cond), name="c")
            steps = [tf.concat([s, c], 1) for s in steps]
        sl = None
        if seq_len == "placeholder":
            sl = tf.compat.v1.placeholder(tf.int32, (1,), name="seq_len")
        elif seq_len is not None:
            sl = tf.constant([seq_len], tf.int32, name="seq_len")
        outs, _ = tf.compat.v1.nn.static_rnn(gm._v1_cell(cell, units), steps, dtype=tf.float32,
                                             sequence_length=sl)
        _dense(tf.stack(outs, 1) if head == "seq" else outs[-1], 4)
        return _freeze(g)


def run(graph_def, feeds: dict, fetch="y:0") -> np.ndarray:
    """TensorFlow running the original graph (a TF1 session)."""
    import tensorflow as tf

    g = tf.Graph()
    with g.as_default():
        tf.graph_util.import_graph_def(graph_def, name="")
        with tf.compat.v1.Session(graph=g) as sess:
            return sess.run(fetch, feeds)


def conv_rnn(rnn="static", stride=1, cell="gru", frames=41, features=6, filters=5,
             kernel=3, units=8, head="seq", seed=0):
    """A TF1 conv front end (tf.nn.conv1d, VALID in time, ``stride``) and ReLU
    before ``rnn`` ("static": static_rnn over the conv's frames, unrolled;
    "dynamic": dynamic_rnn, v1 loop) -> Dense."""
    import tensorflow as tf

    with gm.tf1_graph(seed) as g:
        x = tf.compat.v1.placeholder(tf.float32, (1, frames, features), name="x")
        k = tf.compat.v1.get_variable("conv_w", (kernel, features, filters))
        h = tf.nn.relu(tf.nn.conv1d(x, k, stride, "VALID") + 0.1)
        c = gm._v1_cell(cell, units)
        if rnn == "static":
            outs, _ = tf.compat.v1.nn.static_rnn(c, tf.unstack(h, axis=1), dtype=tf.float32)
            seq, last = tf.stack(outs, 1), outs[-1]
        else:
            seq, _ = tf.compat.v1.nn.dynamic_rnn(c, h, dtype=tf.float32)
            last = seq[:, -1]
        _dense(seq if head == "seq" else last, 4)
        return _freeze(g)


def dropout_cond(flag="default", frames=None, features=6, units=8, seed=0):
    """TF1 dropout behind ``tf.cond(is_training, ...)`` before a dynamic_rnn, as
    training scripts freeze it: ``is_training`` a placeholder_with_default(False)
    ("default") or a bool Placeholder ("placeholder")."""
    import tensorflow as tf

    with gm.tf1_graph(seed) as g:
        x = tf.compat.v1.placeholder(tf.float32, (1, frames, features), name="x")
        if flag == "default":
            training = tf.compat.v1.placeholder_with_default(False, (), name="is_training")
        else:
            training = tf.compat.v1.placeholder(tf.bool, (), name="is_training")
        h = tf.cond(training, lambda: tf.nn.dropout(x, rate=0.5), lambda: tf.identity(x),
                    name="dropout_cond")
        outs, _ = tf.compat.v1.nn.dynamic_rnn(gm._v1_cell("gru", units), h, dtype=tf.float32)
        _dense(outs, 4)
        return _freeze(g)
