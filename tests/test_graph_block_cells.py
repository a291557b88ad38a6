"""TensorFlow's fused RNN cell ops in frozen graphs (TF1 ``tf.contrib.rnn``
``LSTMBlockCell``, ``LSTMBlockFusedCell``, ``GRUBlockCell``: the ops
``LSTMBlockCell``, ``BlockLSTM``/``BlockLSTMV2``, ``GRUBlockCell``): written
out as plain ops (compiler/streamify_graph/block_cells.py), they stream one
frame per step. Each graph runs in TensorFlow with the fused kernels
themselves and through the built .so, over 120 steps (peepholes, a cell
clip that clips, a forget bias, both gate orders); a fused LSTM of open or
cut-short length is a one-line error naming the node."""
from __future__ import annotations

import re

import numpy as np
import pytest

import graph_models as gm
from tfaot.errors import TfaotError

STEPS = 120
FEATURES, UNITS = 6, 8


def _weights(rows: int, cols: int, seed: int):
    rng = np.random.default_rng(seed)
    return rng.normal(0, 0.5, (rows, cols)).astype(np.float32)


def _frozen(step_fn, frames: int = STEPS):
    """A frozen GraphDef of ``y = step_fn(x)`` for ``x [1, frames, FEATURES]``."""
    import tensorflow as tf
    from tensorflow.python.framework.convert_to_constants import (
        convert_variables_to_constants_v2)

    fn = tf.function(step_fn, input_signature=[tf.TensorSpec((1, frames, FEATURES),
                                                             tf.float32, name="x")])
    return convert_variables_to_constants_v2(fn.get_concrete_function()).graph.as_graph_def()


def _lstm_args(seed: int, peephole: bool):
    import tensorflow as tf

    rng = np.random.default_rng(seed)
    peep = [tf.constant(rng.normal(0, 0.5, UNITS).astype(np.float32)) for _ in range(3)]
    return {"w": tf.constant(_weights(FEATURES + UNITS, 4 * UNITS, seed)),
            "b": tf.constant(rng.normal(0, 0.3, 4 * UNITS).astype(np.float32)),
            "wci": peep[0], "wcf": peep[1], "wco": peep[2], "use_peephole": peephole}


def unrolled_lstm_block_cell(x):
    """static_rnn of LSTMBlockCell: peepholes, a clip at 0.5 (the cell state
    of these weights goes past it), forget bias 0.7."""
    import tensorflow as tf

    args = _lstm_args(1, peephole=True)
    h = c = tf.zeros((1, UNITS))
    outputs = []
    for t in range(x.shape[1]):
        _, c, _, _, _, _, h = tf.raw_ops.LSTMBlockCell(
            x=x[:, t], cs_prev=c, h_prev=h, forget_bias=0.7, cell_clip=0.5, **args)
        outputs.append(h)
    return tf.identity(tf.stack(outputs, 1), name="y")


def unrolled_gru_block_cell(x):
    import tensorflow as tf

    rng = np.random.default_rng(2)
    w_ru = tf.constant(_weights(FEATURES + UNITS, 2 * UNITS, 3))
    w_c = tf.constant(_weights(FEATURES + UNITS, UNITS, 4))
    b_ru = tf.constant(rng.normal(0, 0.3, 2 * UNITS).astype(np.float32))
    b_c = tf.constant(rng.normal(0, 0.3, UNITS).astype(np.float32))
    h = tf.zeros((1, UNITS))
    outputs = []
    for t in range(x.shape[1]):
        h = tf.raw_ops.GRUBlockCell(x=x[:, t], h_prev=h, w_ru=w_ru, w_c=w_c, b_ru=b_ru,
                                    b_c=b_c)[3]
        outputs.append(h)
    return tf.identity(tf.stack(outputs, 1), name="y")


def fused(op: str, seq_len: int | str | None = None):
    """LSTMBlockFusedCell's op over the whole window (time first), a Dense
    after it; ``seq_len``: its seq_len_max (default: the window; "shape":
    computed from the input's shape, as LSTMBlockFusedCell writes it
    without a sequence_length)."""
    def graph(x):
        import tensorflow as tf

        args = _lstm_args(5, peephole=op == "BlockLSTM")
        frames = x.shape[1]
        extra = {"forget_bias": 1.0} if op == "BlockLSTM" else {}
        xt = tf.transpose(x, [1, 0, 2])
        length = (tf.cast(tf.raw_ops.Shape(input=xt)[0], tf.int64) if seq_len == "shape"
                  else tf.constant(seq_len or frames, tf.int64))
        h = getattr(tf.raw_ops, op)(
            seq_len_max=length, x=xt, cs_prev=tf.zeros((1, UNITS)),
            h_prev=tf.zeros((1, UNITS)), cell_clip=0.8, **extra, **args)[6]
        dense = tf.constant(_weights(UNITS, 3, 6))
        return tf.identity(tf.matmul(tf.transpose(h, [1, 0, 2]), dense), name="y")
    return graph


GRAPHS = {"lstm_block_cell": unrolled_lstm_block_cell, "gru_block_cell": unrolled_gru_block_cell,
          "block_lstm": fused("BlockLSTM"), "block_lstm_v2": fused("BlockLSTMV2")}


@pytest.mark.parametrize("name", GRAPHS)
def test_fused_cells_stream_and_match_tensorflow(name, tmp_path, capsys):
    from tfaot.cli import main
    from tfaot.pipeline import BuildOptions, Progress, build_model

    gd = _frozen(GRAPHS[name])
    fused_ops = {n.op for n in gd.node} & {"LSTMBlockCell", "GRUBlockCell", "BlockLSTM",
                                           "BlockLSTMV2"}
    assert fused_ops  # the reference runs TensorFlow's own fused kernels
    path = gm.write_graph_def(gd, tmp_path / f"{name}.pb", text=False)
    built = build_model(str(path), BuildOptions(out_dir=tmp_path / name), Progress(False))
    assert built.manifest["stream"]["frames_per_step"] == 1
    assert main(["verify", str(path), str(tmp_path / name)]) == 0
    out = capsys.readouterr().out
    steps = int(re.search(r"over (\d+) steps", out).group(1))
    assert steps >= 100 and out.rstrip().endswith("ok"), out
    # one frame a step, not the window: the unrolled LSTMBlockCell's x[:, t]
    # slices, not its cell's split of the gates into four, are the time steps
    assert built.manifest["stream"]["mode"] == "prefix"


def test_the_clip_is_in_use():
    """The clipped cell state differs from an unclipped one (so the test
    above checks the clip)."""
    import tensorflow as tf

    x = tf.constant(np.random.default_rng(0).normal(size=(1, 30, FEATURES)).astype(np.float32))
    args = _lstm_args(1, peephole=True)
    c = h = tf.zeros((1, UNITS))
    clipped = []
    for t in range(30):
        _, c, *_ = tf.raw_ops.LSTMBlockCell(x=x[:, t], cs_prev=c, h_prev=h, forget_bias=0.7,
                                            cell_clip=-1.0, **args)
        clipped.append(float(np.abs(c.numpy()).max()))
    assert max(clipped) > 0.5


@pytest.mark.parametrize("given", [False, True])
def test_a_fused_lstm_whose_length_is_its_inputs_shape(given, tmp_path, capsys):
    """seq_len_max = cast(shape(x)[0]), as LSTMBlockFusedCell writes it
    without a sequence_length: tf.get_static_value does not fold it, and the
    graph was refused ("a shorter or computed length stops the LSTM early")
    when its input had a fixed length (``given`` False), and with an open
    one given by --inputs NAME:SHAPE as the refusal advised (``given``: the
    placeholder kept its open shape in the graph)."""
    import tensorflow as tf
    from tensorflow.python.framework.convert_to_constants import (
        convert_variables_to_constants_v2)

    from tfaot.cli import main

    frames = 40
    fn = tf.function(fused("BlockLSTM", seq_len="shape"),
                     input_signature=[tf.TensorSpec((1, None if given else frames, FEATURES),
                                                    tf.float32, name="x")])
    gd = convert_variables_to_constants_v2(fn.get_concrete_function()).graph.as_graph_def()
    assert "Shape" in {n.op for n in gd.node}
    path = gm.write_graph_def(gd, tmp_path / "shape.pb", text=False)
    cut = ["--inputs", f"x:1x{frames}x{FEATURES}"] if given else []
    assert main(["-q", "build", str(path), "-o", str(tmp_path / "lib"), *cut]) == 0
    capsys.readouterr()
    assert main(["verify", str(path), str(tmp_path / "lib"), *cut]) == 0
    assert f"over 200 steps in 5 sequences of {frames} frames" in capsys.readouterr().out


@pytest.mark.parametrize("case,match", [("short", "seq_len_max"), ("open", "open length")])
def test_fused_lstm_of_unknown_or_short_length_is_refused(case, match, tmp_path):
    import tensorflow as tf
    from tensorflow.python.framework.convert_to_constants import (
        convert_variables_to_constants_v2)

    from tfaot.pipeline import BuildOptions, Progress, build_model

    if case == "short":
        gd = _frozen(fused("BlockLSTM", seq_len=10), frames=20)
    else:
        fn = tf.function(fused("BlockLSTM", seq_len=1000),
                         input_signature=[tf.TensorSpec((1, None, FEATURES), tf.float32,
                                                        name="x")])
        gd = convert_variables_to_constants_v2(fn.get_concrete_function()).graph.as_graph_def()
    path = gm.write_graph_def(gd, tmp_path / f"{case}.pb", text=False)
    with pytest.raises(TfaotError, match=match) as e:
        build_model(str(path), BuildOptions(out_dir=tmp_path / case), Progress(False))
    assert "BlockLSTM" in str(e.value) and str(path) in str(e.value)
    assert not (tmp_path / case).exists()


def deepspeech_like(frames: int = 16):
    """DeepSpeech's inference graph in small: a window of ``frames`` frames,
    a fused LSTM (LSTMBlockFusedCell) whose initial state the caller feeds
    (``previous_state_c/h``) and whose last state it reads back
    (``new_state_c/h``), a softmax per frame."""
    import tensorflow as tf

    rng = np.random.default_rng(7)
    with gm.tf1_graph(0) as g:
        x = tf.compat.v1.placeholder(tf.float32, (1, frames, FEATURES), name="input_node")
        c0 = tf.compat.v1.placeholder(tf.float32, (1, UNITS), name="previous_state_c")
        h0 = tf.compat.v1.placeholder(tf.float32, (1, UNITS), name="previous_state_h")
        args = _lstm_args(8, peephole=False)
        outs = tf.raw_ops.BlockLSTM(seq_len_max=tf.constant(frames, tf.int64),
                                    x=tf.transpose(x, [1, 0, 2]), cs_prev=c0, h_prev=h0,
                                    forget_bias=0.0, cell_clip=-1.0, **args)
        logits = tf.matmul(tf.reshape(outs[6], [frames, UNITS]),
                           tf.constant(rng.normal(0, 0.5, (UNITS, 5)).astype(np.float32)))
        tf.nn.softmax(logits, name="logits")
        tf.identity(outs[1][-1], name="new_state_c")
        tf.identity(outs[6][-1], name="new_state_h")
        return g.as_graph_def()


def test_initial_state_fed_by_the_caller_is_kept_as_state(tmp_path, capsys):
    """An unrolled recurrence whose initial state is a graph input (the
    caller's previous window's state) does not stream frame by frame: that
    would read the input once and bake it in (wrong outputs, before). It runs
    a whole window per step, the state pairs found by their names and kept
    by the library, and matches TensorFlow fed its own state back."""
    from tfaot.cli import main
    from tfaot.pipeline import BuildOptions, Progress, build_model

    path = gm.write_graph_def(deepspeech_like(), tmp_path / "ds.pb", text=False)
    built = build_model(str(path), BuildOptions(out_dir=tmp_path / "ds"), Progress(False))
    state_names = {s["name"] for s in built.manifest["state"]}
    assert {"previous_state_c", "previous_state_h"} <= state_names, state_names
    assert [i["name"] for i in built.manifest["inputs"]] == ["input_node"]
    assert main(["verify", str(path), str(tmp_path / "ds")]) == 0
    out = capsys.readouterr().out
    assert "FAIL" not in out and "ok" in out, out


def tf1_loop_lstm_block_cell():
    """dynamic_rnn's shape with LSTMBlockCell: a TF1 while loop (Enter/Merge/
    Switch, TensorArrays) over an open time axis; the written-out cell's
    constants must sit in the loop's frame, the TensorArray write is
    colocated with the cell."""
    import tensorflow as tf

    import graph_loop_models as glm

    with gm.tf1_graph(0) as g:
        x = tf.compat.v1.placeholder(tf.float32, (1, None, FEATURES), name="x")
        args = _lstm_args(9, peephole=True)
        xs = tf.transpose(x, [1, 0, 2])
        steps = tf.shape(xs)[0]
        frames = tf.TensorArray(tf.float32, size=steps).unstack(xs)

        def body(t, c, h, out):
            _, c, _, _, _, _, h = tf.raw_ops.LSTMBlockCell(
                x=frames.read(t), cs_prev=c, h_prev=h, forget_bias=1.0, cell_clip=0.6, **args)
            return t + 1, c, h, out.write(t, h)

        zeros = tf.zeros((1, UNITS))
        _, _, _, out = tf.compat.v1.while_loop(
            lambda t, *_: t < steps, body,
            [tf.constant(0), zeros, zeros, tf.TensorArray(tf.float32, size=steps)])
        tf.identity(tf.transpose(out.stack(), [1, 0, 2]), name="y")
        return glm._freeze(g)


def test_fused_cell_in_a_tf1_while_loop(tmp_path, capsys):
    from tfaot.cli import main
    from tfaot.pipeline import BuildOptions, Progress, build_model

    gd = tf1_loop_lstm_block_cell()
    assert "LSTMBlockCell" in {n.op for n in gd.node} and "Enter" in {n.op for n in gd.node}
    path = gm.write_graph_def(gd, tmp_path / "loop.pb", text=False)
    build_model(str(path), BuildOptions(out_dir=tmp_path / "loop"), Progress(False))
    assert main(["verify", str(path), str(tmp_path / "loop"), "--steps", "120"]) == 0
    out = capsys.readouterr().out
    assert "over 120 steps" in out and out.rstrip().endswith("ok"), out
