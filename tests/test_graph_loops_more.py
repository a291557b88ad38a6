"""TF1 loops users have (issue 11, item 7): dynamic_rnn with sequence_length, tf.cond
inside a v1 loop body, nested loops, static_rnn with peephole/projection LSTMCells
and with a conditioning input. Graphs from graph_loop_models.py (TF1 sessions,
tf.compat.v1 cells, frozen); each is compared with TensorFlow running the original
graph, through the built .so where it says so (>= 100 steps, error <= 1e-5).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import graph_loop_models as glm
import graph_models as gm
from tfaot.errors import TfaotError

STEPS = 100
TOL = 1e-5


def _build(gd, tmp_path, name):
    """The .so of a frozen graph (built in-process), its harness and the build report."""
    from tfaot import harness
    from tfaot.pipeline import BuildOptions, Progress, build_model

    path = gm.write_graph_def(gd, tmp_path / f"{name}.pb", text=False)
    build_model(str(path), BuildOptions(out_dir=tmp_path / name), Progress(False))
    return harness.load(tmp_path / name)


def _streamed(gd, name="g"):
    from tfaot.frontend.load_graph import graph_def_to_loaded
    from tfaot.streamify_graph import streamify_graph

    return streamify_graph(graph_def_to_loaded(gd, Path(f"{name}.pb"), "graphdef"),
                           notify=False)


def _compare(lib, gd, x, label: str, seq_len: int | None = None) -> None:
    """STEPS steps of ``lib`` against TF running ``gd`` on ``x`` (with the
    per-step ``seq_len`` value, if given)."""
    feeds = {"x:0": x}
    if seq_len is not None:
        feeds["seq_len:0"] = np.array([seq_len], np.int32)
        label = f"{label} = {seq_len}"
    want = glm.run(gd, feeds)[0]
    steps = [{"x": x[:, t], "seq_len": feeds["seq_len:0"]} if seq_len is not None else x[:, t]
             for t in range(STEPS)]
    got = np.stack([lib.step(v) for v in steps])[:, 0]
    err = np.abs(got - want).max()
    print(f"{label}: .so vs TF max abs error {err:.3g}")
    assert err <= TOL, err


def _check_lengths(lib, gd, x, lengths, label: str) -> None:
    """``_compare`` for each per-step ``seq_len`` value, from reset."""
    for length in lengths:
        lib.reset()
        _compare(lib, gd, x, label, seq_len=length)


def _refusal(graph_def, name: str) -> str:
    """The error streaming ``graph_def`` raises: one line, naming what is at fault."""
    with pytest.raises(TfaotError) as e:
        _streamed(graph_def, name)
    msg = str(e.value)
    assert "\n" not in msg, msg
    return msg


def _pure_steps(program, x, extra=None):
    """``pure_step`` run step by step from the initial state; ``extra``: per-step inputs."""
    import tensorflow as tf

    states = [tf.constant(s.initial) for s in program.signature.states]
    ys = []
    for t in range(x.shape[1]):
        args = [tf.constant(x[:, t]) if i.name == "x" else tf.constant(extra[i.name])
                for i in program.signature.inputs]
        out = program.pure_step(*args, *states)
        ys.append(out[0].numpy())
        states = list(out[1:])
    return np.stack(ys)


def _x(features, steps=STEPS, seed=0):
    return np.random.default_rng(seed).standard_normal((1, steps, features)).astype(np.float32)


# -- 1. dynamic_rnn with sequence_length


def test_sequence_length_constant_through_library(tmp_path, capsys):
    """A constant length 60 < 100 steps: the state freezes and the outputs are
    the zero output's after step 59, as in the graph; reset() restarts the count."""
    gd = glm.seq_len_rnn("lstm", "const", length=60)
    lib = _build(gd, tmp_path, "sl_const")
    note = [ln for ln in capsys.readouterr().err.splitlines() if "time index" in ln]
    assert len(note) == 1 and "rnn/while/GreaterEqual" in note[0], note
    assert "stream_step0" in [s["name"] for s in lib.manifest["state"]]
    x = _x(6)
    want = glm.run(gd, {"x:0": x})[0]
    for _ in range(2):  # the second pass after reset()
        got = np.stack([lib.step(x[:, t]) for t in range(STEPS)])[:, 0]
        err = np.abs(got - want).max()
        print(f"sequence_length=60 (constant): .so vs TF max abs error {err:.3g}")
        assert err <= TOL, err
        lib.reset()
    # The step counter is state like the others: get_state/set_state carry it.
    for t in range(50):
        lib.step(x[:, t])
    saved = lib.get_state()
    assert any(s.shape == (1,) and s[0] == 50 for s in saved)
    first = np.stack([lib.step(x[:, t]) for t in range(50, STEPS)])
    lib.set_state(saved)
    second = np.stack([lib.step(x[:, t]) for t in range(50, STEPS)])
    assert np.array_equal(first, second) and np.abs(first[:, 0] - want[50:]).max() <= TOL


def test_sequence_length_placeholder_is_a_per_step_input(tmp_path):
    """A sequence_length Placeholder becomes a per-step int32 input ("seq_len"):
    step t equals the graph at time t for the length given."""
    gd = glm.seq_len_rnn("gru", "placeholder")
    lib = _build(gd, tmp_path, "sl_ph")
    assert [(n, str(d), tuple(s)) for n, d, s in lib.input_specs] == \
        [("x", "float32", (1, 6)), ("seq_len", "int32", (1,))]
    assert lib.input_streamed == [True, False]
    x = _x(6, seed=1)
    # shorter than the stream, and "no limit"
    _check_lengths(lib, gd, x, (37, 1_000_000), "sequence_length placeholder")
    # verify gives it a length within its steps (integer samples 0 and 1
    # froze the state at once: TensorFlow's outputs were zeros at every step)
    from tfaot.verify import verify
    from tfaot.verify.compare import make_case

    assert lib.input_length == [False, True]
    (run,) = make_case(str(tmp_path / "sl_ph.pb"), lib, steps=100, seed=0, tol=TOL).runs
    assert 50 <= run[1].min() == run[1].max() < 100, run[1]
    (result,) = verify(str(tmp_path / "sl_ph.pb"), tmp_path / "sl_ph", steps=100, seed=0,
                       tol=TOL)
    assert result.ok and not result.constant, result.describe()


def test_sequence_length_placeholder_before_the_input():
    """A [None] length placeholder listed before a fixed-length input: the
    features stay the streamed input."""
    gd = glm.seq_len_rnn("lstm", "placeholder_first", frames=40)
    program = _streamed(gd)
    assert [(i.name, i.shape, i.streamed) for i in program.signature.inputs] == \
        [("seq_len", (1,), False), ("x", (1, 6), True)]
    x, sl = _x(6, steps=40, seed=13), np.array([29], np.int32)
    got = _pure_steps(program, x, {"seq_len": sl})[:, 0]
    assert np.abs(got - glm.run(gd, {"x:0": x, "seq_len:0": sl})[0]).max() <= TOL


def test_sequence_length_with_an_open_batch():
    """x (None, None, F) and seq_len (None,), as TF1 scripts write them:
    dynamic_rnn shapes its zero state and outputs by tf.shape(x)[0], the
    batch, which was taken for a value computed from the sequence length
    (refused: 'derived from the sequence length')."""
    gd = glm.seq_len_rnn("gru", "placeholder", frames=40, batch=None)
    program = _streamed(gd)
    x = _x(6, steps=40, seed=5)
    for length in (23, 1000):
        sl = np.array([length], np.int32)
        got = _pure_steps(program, x, {"seq_len": sl})[:, 0]
        assert np.abs(got - glm.run(gd, {"x:0": x, "seq_len:0": sl})[0]).max() <= TOL


@pytest.mark.parametrize("batch", [1, None])
def test_sequence_length_of_the_whole_input_streams(tmp_path, batch):
    """sequence_length = tf.fill([batch], tf.shape(x)[1]), as exported graphs
    write it: every step is inside the sequence (it was refused: "derived
    from the sequence length"). Through the library against the graph."""
    gd = glm.seq_len_rnn("gru", "full", batch=batch)
    lib = _build(gd, tmp_path, "sl_full")
    x = _x(6, seed=3)
    got = lib.step_n(np.swapaxes(x, 0, 1))[:, 0]
    assert np.abs(got - glm.run(gd, {"x:0": x})[0]).max() <= TOL


def test_sequence_length_final_state_head():
    """The final state (frozen at the length) read after the loop."""
    gd = glm.seq_len_rnn("basic_lstm", "const", length=30, frames=50, head="state")
    program = _streamed(gd)
    x = _x(6, steps=50)
    assert np.abs(_pure_steps(program, x)[-1] - glm.run(gd, {"x:0": x})).max() <= TOL


def test_counter_as_a_value_is_still_refused():
    """Only comparisons of the time counter stream exactly (see test_graph_errors)."""
    import tensorflow as tf

    with gm.tf1_graph(0) as g:
        x = tf.compat.v1.placeholder(tf.float32, (1, None, 3), name="x")
        xs = tf.transpose(x, [1, 0, 2])
        T = tf.shape(xs)[0]
        ta_in = tf.TensorArray(tf.float32, size=T).unstack(xs)

        def body(t, h, ta):
            h = tf.tanh(h + ta_in.read(t) * tf.cast(t, tf.float32, name="position"))
            return t + 1, h, ta.write(t, h)

        _, _, ta = tf.while_loop(lambda t, *_: t < T, body,
                                 [0, tf.zeros((1, 3)), tf.TensorArray(tf.float32, size=T)])
        tf.identity(ta.stack(), name="y")
    gd = tf.compat.v1.graph_util.extract_sub_graph(g.as_graph_def(), ["y"])
    msg = _refusal(gd, "pos")
    assert "position" in msg and "Cast" in msg, msg


def _tf2_loop_over_captured_input(body_reads_x: bool):
    """A hand-written RNN in a tf.function (TF2 while loop over a TensorArray
    of the frames) whose condition is ``t < tf.shape(x)[1]``: x is captured,
    so the loop carries the whole input as a loop variable; frozen."""
    import tensorflow as tf
    from tensorflow.python.framework.convert_to_constants import \
        convert_variables_to_constants_v2

    rng = np.random.default_rng(0)
    wx = tf.constant(rng.normal(0, 0.3, (4, 8)).astype(np.float32))
    wh = tf.constant(rng.normal(0, 0.3, (8, 8)).astype(np.float32))

    def rnn(x):
        frames = tf.TensorArray(tf.float32, size=tf.shape(x)[1]).unstack(
            tf.transpose(x, [1, 0, 2]))

        def body(t, h, out):
            h = tf.tanh(frames.read(t) @ wx + h @ wh)
            if body_reads_x:
                h += tf.reduce_mean(x)
            return t + 1, h, out.write(t, h)

        _, _, out = tf.while_loop(lambda t, h, out: t < tf.shape(x)[1], body,
                                  (0, tf.zeros([1, 8]), tf.TensorArray(tf.float32,
                                                                       size=tf.shape(x)[1])))
        return tf.transpose(out.stack(), [1, 0, 2])

    fn = tf.function(rnn).get_concrete_function(tf.TensorSpec([1, None, 4], tf.float32,
                                                              name="x"))
    return convert_variables_to_constants_v2(fn).graph.as_graph_def()


def test_a_loop_condition_reading_the_whole_input_streams(tmp_path):
    """Its condition only takes the input's length; the body reads one frame
    a step. It was refused: 'the whole input sequence is used inside the
    loop'. Through the library against the graph."""
    gd = _tf2_loop_over_captured_input(body_reads_x=False)
    lib = _build(gd, tmp_path, "captured")
    x = _x(4, seed=7)
    want = glm.run(gd, {"x:0": x}, fetch="Identity:0")[0]
    got = lib.step_n(np.swapaxes(x, 0, 1))[:, 0]
    assert got.shape == want.shape == (STEPS, 8)
    assert np.abs(got - want).max() <= TOL


def test_a_loop_body_reading_the_whole_input_is_refused():
    msg = _refusal(_tf2_loop_over_captured_input(body_reads_x=True), "captured")
    assert "whole input sequence" in msg and "the body computes with" in msg, msg


def _tf2_for_loop(read: str):
    """``for t in tf.range(T)`` in a tf.function, frozen, its frame read by
    an if/elif chain on a Python value without an else, as code picking a
    mode writes it: AutoGraph then carries xt from one iteration to the
    next, defined or not, and adds a bool loop variable, set to True by
    every iteration, that an Assert after the loop reads. The frame is
    ``x[:, t]`` or ``tf.slice(x, [0, t, 0], [1, 1, F])``."""
    import tensorflow as tf
    from tensorflow.python.framework.convert_to_constants import \
        convert_variables_to_constants_v2

    rng = np.random.default_rng(1)
    wx = tf.constant(rng.normal(0, 0.3, (4, 8)).astype(np.float32))
    wh = tf.constant(rng.normal(0, 0.3, (8, 8)).astype(np.float32))

    def rnn(x):
        out, h = tf.TensorArray(tf.float32, size=tf.shape(x)[1]), tf.zeros([1, 8])
        for t in tf.range(tf.shape(x)[1]):
            if read == "slice":
                xt = tf.slice(x, [0, t, 0], [1, 1, 4])[:, 0]
            elif read == "index":
                xt = x[:, t]
            h = tf.tanh(xt @ wx + h @ wh)
            out = out.write(t, h)
        return tf.transpose(out.stack(), [1, 0, 2])

    fn = tf.function(rnn).get_concrete_function(tf.TensorSpec([1, None, 4], tf.float32,
                                                              name="x"))
    frozen = convert_variables_to_constants_v2(fn)
    gd = frozen.graph.as_graph_def()
    assert any(n.op == "Assert" for n in gd.node)  # (AutoGraph's check that xt is defined)
    return gd, frozen.outputs[0].name


@pytest.mark.parametrize("read", ["index", "slice"])
def test_a_tf2_for_loop_streams(read):
    """Both were refused: AutoGraph's flag as 'neither a float state, a
    counter nor a sequence', the Slice as indexing by the counter."""
    gd, output = _tf2_for_loop(read)
    program = _streamed(gd, read)
    x = _x(4, seed=11)
    want = glm.run(gd, {"x:0": x}, fetch=output)[0]
    got = _pure_steps(program, x)[:, 0]
    assert got.shape == want.shape == (STEPS, 8)
    assert np.abs(got - want).max() <= TOL


# -- 2. tf.cond inside a v1 loop body; nested loops


@pytest.mark.parametrize("pred", ["state", "input", "is_training"])
def test_cond_in_loop_body_streams(pred):
    gd = glm.cond_in_loop(pred)
    program = _streamed(gd, f"cond_{pred}")
    x = _x(5, seed=2)
    err = np.abs(_pure_steps(program, x)[:, 0] - glm.run(gd, {"x:0": x})[0]).max()
    assert err <= TOL, err


def test_cond_on_the_time_counter_through_library(tmp_path):
    """tf.cond(t < 3, ...): a warm-up on the time index, from the stream's step counter."""
    gd = glm.cond_in_loop("counter")
    lib = _build(gd, tmp_path, "cond_counter")
    x = _x(5, seed=3)
    _compare(lib, gd, x, "tf.cond on the time counter in a v1 loop")


def test_cond_with_a_stateful_branch_is_refused():
    msg = _refusal(glm.cond_in_loop("random"), "rnd")
    assert "RandomUniform" in msg and "gate/Merge" in msg, msg


def test_nested_while_loops_name_the_inner_frame():
    msg = _refusal(glm.nested_loops(), "nested")
    assert "nested while loops" in msg and "while/gate/while/while_context" in msg, msg


# -- 3. static_rnn: peephole + projection LSTMCell; several inputs


def test_static_rnn_peephole_projection_through_library(tmp_path):
    gd = glm.static_rnn("lstm_peephole_proj", frames=STEPS)
    program = _streamed(gd)
    assert program.report["unrolled"] and not program.report["stateless"]
    lib = _build(gd, tmp_path, "peep")
    x = _x(6, seed=4)
    _compare(lib, gd, x, "static_rnn LSTMCell(peepholes, num_proj)")


@pytest.mark.parametrize("cell", ["gru", "lstm"])
def test_static_rnn_with_a_conditioning_input(cell):
    """Features + a conditioning vector concatenated to every copy's input."""
    gd = glm.static_rnn(cell, frames=40, cond=3, head="last")
    program = _streamed(gd)
    assert program.report["unrolled"]
    assert [(i.name, i.streamed) for i in program.signature.inputs] == [("x", True),
                                                                        ("c", False)]
    x, c = _x(6, steps=40, seed=5), np.full((1, 3), 0.7, np.float32)
    got = _pure_steps(program, x, {"c": c})[-1]
    assert np.abs(got - glm.run(gd, {"x:0": x, "c:0": c})).max() <= TOL


@pytest.mark.slow
def test_static_rnn_with_a_conditioning_input_through_library(tmp_path):
    gd = glm.static_rnn("lstm_peephole_proj", frames=STEPS, cond=3)
    lib = _build(gd, tmp_path, "cond_in")
    x, c = _x(6, seed=6), np.full((1, 3), -0.4, np.float32)
    want = glm.run(gd, {"x:0": x, "c:0": c})[0]
    got = np.stack([lib.step({"x": x[:, t], "c": c}) for t in range(STEPS)])[:, 0]
    assert np.abs(got - want).max() <= TOL


@pytest.mark.parametrize("cell,seq_len", [("gru", "placeholder"), ("lstm", 15)])
def test_static_rnn_with_sequence_length(cell, seq_len):
    """static_rnn compares a constant time k in copy k with the length (inside
    tf.conds): the copies' time constants become the step counter."""
    gd = glm.static_rnn(cell, frames=24, seq_len=seq_len)
    program = _streamed(gd, "static_sl")
    assert program.report["unrolled"], program.report.get("notes")
    x, sl = _x(6, steps=24, seed=11), np.array([17], np.int32)
    feeds = {"x:0": x, **({"seq_len:0": sl} if seq_len == "placeholder" else {})}
    got = _pure_steps(program, x, {"seq_len": sl})[:, 0]
    assert np.abs(got - glm.run(gd, feeds)[0]).max() <= TOL


@pytest.mark.slow
def test_static_rnn_with_sequence_length_through_library(tmp_path):
    gd = glm.static_rnn("lstm", frames=STEPS, seq_len="placeholder")
    lib = _build(gd, tmp_path, "static_sl")
    x = _x(6, seed=12)
    _check_lengths(lib, gd, x, (70, 1000), "static_rnn sequence_length")


# -- 4. a convolution front end (and time strides) before static_rnn / dynamic_rnn


def _conv_stream(program, x):
    """pure_step over x in chunks of the stream's frames per step; (steps, *y_t)."""
    import tensorflow as tf

    p = program.stream.frames_per_step
    states = [tf.constant(s.initial) for s in program.signature.states]
    ys = []
    for m in range(x.shape[1] // p):
        out = program.pure_step(tf.constant(x[:, m * p:(m + 1) * p].reshape(
            program.signature.inputs[0].shape)), *states)
        ys.append(out[0].numpy())
        states = list(out[1:])
    return np.stack(ys)


@pytest.mark.parametrize("rnn,stride", [("static", 1), ("static", 2), ("dynamic", 2)])
def test_conv_front_end_before_rnn(rnn, stride):
    """VALID conv (kernel 3) -> ReLU -> RNN over 41 frames: step m's output is the
    graph's at the conv frame it completes (from the first step whose receptive
    field is full on)."""
    gd = glm.conv_rnn(rnn, stride, frames=41)
    program = _streamed(gd, f"conv_{rnn}{stride}")
    st = program.stream
    assert st.frames_per_step == stride and st.first_valid_step == (2 if stride == 1 else 1)
    assert bool(program.report.get("unrolled")) == (rnn == "static")
    x = _x(6, steps=41, seed=7)
    want = glm.run(gd, {"x:0": x})[0]  # (conv frames, labels)
    got = _conv_stream(program, x)[st.first_valid_step:, 0]
    n = min(len(got), len(want))
    assert n >= len(want) - 1
    err = np.abs(got[:n] - want[:n]).max()
    assert err <= TOL, err


def test_conv_front_end_before_static_rnn_through_library(tmp_path):
    """100 conv frames (VALID, kernel 3) into static_rnn, through the .so."""
    gd = glm.conv_rnn("static", 1, cell="lstm", frames=STEPS + 2)
    lib = _build(gd, tmp_path, "conv_static")
    assert lib.manifest["stream"]["first_valid_step"] == 2
    x = _x(6, steps=STEPS + 2, seed=8)
    want = glm.run(gd, {"x:0": x})[0]
    got = np.stack([lib.step(x[:, t]) for t in range(STEPS + 2)])[2:, 0]
    err = np.abs(got - want).max()
    print(f"conv -> static_rnn(LSTMCell): .so vs TF max abs error {err:.3g} over {len(want)} "
          "steps")
    assert len(want) == STEPS and err <= TOL, err


# -- tf.cond in the outer graph (TF1 is_training flags)


def test_is_training_cond_with_a_default_keeps_the_inference_branch():
    gd = glm.dropout_cond("default")
    program = _streamed(gd, "drop")
    assert [i.name for i in program.signature.inputs] == ["x"]
    x = _x(6, seed=9)
    err = np.abs(_pure_steps(program, x)[:, 0] - glm.run(gd, {"x:0": x})[0]).max()
    assert err <= TOL, err


def test_is_training_placeholder_with_dropout_is_refused():
    msg = _refusal(glm.dropout_cond("placeholder"), "drop_ph")
    assert "dropout_cond/Merge" in msg and "RandomUniform" in msg, msg


def test_strided_conv_before_static_rnn_through_library(tmp_path):
    """Stride 2 in time: each step takes 2 frames and runs the repeated cell once."""
    gd = glm.conv_rnn("static", 2, frames=2 * STEPS + 1)
    lib = _build(gd, tmp_path, "conv_stride2")
    assert lib.manifest["stream"]["frames_per_step"] == 2
    x = _x(6, steps=2 * STEPS + 1, seed=10)
    want = glm.run(gd, {"x:0": x})[0]  # STEPS conv frames
    got = np.stack([lib.step(x[:, 2 * m:2 * m + 2]) for m in range(STEPS)])[1:, 0]
    err = np.abs(got - want[:STEPS - 1]).max()
    print(f"stride-2 conv -> static_rnn(GRUCell): .so vs TF max abs error {err:.3g} over "
          f"{len(got)} steps")
    assert err <= TOL, err


def test_a_tf1_saved_model_returning_its_loops_final_state(tmp_path, capsys):
    """simple_save of a v1 dynamic_rnn whose signature returns the final
    state (the loop's Exit) besides the outputs: the Exit is an output of
    the loop now, and the build stopped on a KeyError (a tfaot bug); and
    --outputs naming a signature key (it was taken for a node)."""
    import tensorflow as tf

    from tfaot.cli import main

    tf1 = tf.compat.v1
    with gm.tf1_graph(18):
        x = tf1.placeholder(tf.float32, [1, None, 6], name="input")
        y, state = tf1.nn.dynamic_rnn(gm.legacy_cells().GRUCell(10), x, dtype=tf.float32)
        w = tf.constant(np.random.default_rng(18).normal(size=(10, 3)).astype(np.float32))
        out = tf.tensordot(y, w, 1)
        with tf1.Session() as sess:
            sess.run(tf1.global_variables_initializer())
            tf1.saved_model.simple_save(sess, str(tmp_path / "sm"), inputs={"input": x},
                                        outputs={"out": out, "state": state})
    model, out_dir = str(tmp_path / "sm"), str(tmp_path / "lib")
    assert main(["build", model, "-o", out_dir, "-q"]) == 0, capsys.readouterr().err
    capsys.readouterr()
    assert main(["verify", model, out_dir, "--steps", "100"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert [line.split(":")[0] for line in lines] == ["out", "state"], lines
    assert all("over 100 steps" in line and line.endswith(": ok") for line in lines), lines
    # --outputs by signature key (the state's node is 'rnn/while/Exit_...')
    cut = str(tmp_path / "state_only")
    assert main(["build", model, "-o", cut, "-q", "--outputs", "state"]) == 0, \
        capsys.readouterr().err
    capsys.readouterr()
    assert main(["verify", model, cut, "--steps", "100"]) == 0
    (line,) = capsys.readouterr().out.strip().splitlines()
    assert line.startswith("state: ") and line.endswith(": ok"), line


def test_static_rnn_over_an_open_batch_streams(tmp_path):
    """static_rnn over an input [None, T, F] (how published graphs come): its
    zero state is zeros of tf.shape(frame)[0] rows, which differed from the
    later steps' state, so nothing streamed (one whole inference per
    step); with the batch made 1 the shape is a constant and the cell
    streams a frame a step."""
    gd = glm.static_rnn(cell="lstm", frames=STEPS, batch=None, head="seq")
    program = _streamed(gd, "open_batch")
    assert program.stream.mode == "prefix" and program.stream.frames_per_step == 1
    assert not program.report.get("notes"), program.report.get("notes")
    x = np.random.default_rng(7).normal(size=(1, STEPS, 6)).astype(np.float32)
    _compare(_build(gd, tmp_path, "open_batch"), gd, x, "static_rnn, open batch")


def test_verify_of_a_fixed_length_graph_runs_sequences_from_reset(tmp_path):
    """A graph of T = 10 frames defines 10 steps; verify compared those 10
    only, and now runs enough 10-frame sequences, each from reset, for the
    steps asked."""
    from tfaot.verify.compare import verify

    gd = glm.static_rnn(cell="lstm", frames=10, batch=None, head="seq")
    _build(gd, tmp_path, "ten")
    (result,) = verify(str(tmp_path / "ten.pb"), tmp_path / "ten", steps=120, seed=0, tol=TOL)
    assert result.ok and result.steps == 120, result
    assert result.unit == "steps in 12 sequences of 10 frames", result.unit


# -- while_v2's gradient accumulators


def _graph_mode_gru(features=6, units=10):
    """A tf_keras GRU built in a TF1-style graph (graph mode, control flow v2),
    frozen from its session: at the top level of a graph, while_v2 keeps every
    step's intermediate values (the counter's too) in TensorLists for
    gradients, loop variables that TensorListPushBack appends to and nothing
    reads at inference. They were refused ("changes every step but is
    neither a float state, a counter nor a sequence")."""
    import tensorflow as tf
    import tf_keras

    tf1 = tf.compat.v1
    g = tf.Graph()
    with g.as_default():
        tf1.set_random_seed(0)
        x = tf1.placeholder(tf.float32, [1, None, features], name="x")
        h = tf_keras.layers.GRU(units, return_sequences=True)(x)
        tf.identity(tf_keras.layers.Dense(3)(h), name="y")
        with tf1.Session(graph=g) as session:
            session.run(tf1.global_variables_initializer())
            return tf1.graph_util.convert_variables_to_constants(
                session, g.as_graph_def(), ["y"])


def test_a_graph_mode_loops_gradient_accumulators_are_left_out(tmp_path):
    gd = _graph_mode_gru()
    loop = next(n for n in gd.node if n.op in ("While", "StatelessWhile"))
    body = next(f for f in gd.library.function if f.signature.name == loop.attr["body"].func.name)
    assert any(n.op == "TensorListPushBack" for n in body.node_def)  # (what the test is about)
    lib = _build(gd, tmp_path, "graph_mode_gru")
    _compare(lib, gd, _x(6), "graph-mode GRU with accumulators")
