"""Published-style TF1 graphs (issue 11): audio front ends cut off, graph cruft around
the time axis, unrolled RNNs (static_rnn).

Graphs are written the way TF1 writes them (a TF1 session, tf.compat.v1 cells,
DecodeWav -> AudioSpectrogram -> Mfcc) and compared with TensorFlow running the
original graph, fed at the cut tensor.
"""
import json

import numpy as np
import pytest

import graph_models as gm
from tfaot.errors import TfaotError

FRAMES = 100  # 1.0 s of 16 kHz audio at a 10 ms stride (window 480, stride 160)
MFCC = f"Mfcc:1x{FRAMES}x10"


@pytest.fixture(scope="module")
def kws(tmp_path_factory):
    """Frozen keyword-spotting graphs, written once per module: (cell, rnn, head) -> path."""
    tmp = tmp_path_factory.mktemp("kws")
    cache = {}

    def get(cell="lstm", rnn="dynamic", head="last", frames=FRAMES, front_end=True, **kw):
        key = (cell, rnn, head, frames, front_end, tuple(sorted(kw.items())))
        if key not in cache:
            path = tmp / ("_".join(map(str, key[:5])) + f"_{len(cache)}.pb")
            gd = gm.build_kws_graph(cell, rnn, frames=frames, head=head, front_end=front_end,
                                    **kw)
            gm.write_graph_def(gd, path, text=False)
            cache[key] = path
        return cache[key]

    return get


def _stream_vs_original(path, inputs, frames, steps_axis=1, seed=3):
    """pure_step run step by step vs TensorFlow running the original graph (fed at the cut)."""
    from tfaot.frontend.load_graph import load_graph
    from tfaot.streamify_graph import streamify_graph

    loaded = load_graph(path, inputs=inputs, outputs="labels_softmax")
    program = streamify_graph(loaded)
    x = np.random.default_rng(seed).standard_normal((1, frames, 10)).astype(np.float32)
    feed = loaded.details["feeds"][0]
    want = gm.run_original(loaded.details["source_graph_def"], feed, x)
    got = gm.stream(program, x)  # (T, 1, labels)
    if want.ndim == 3:  # one result per frame
        err = np.abs(got[:, 0] - want[0]).max()
    else:
        err = np.abs(got[-1] - want).max()
    return program, err


# -- 1. cutting the graph where the network starts


def test_string_input_says_where_to_cut(kws):
    from tfaot.frontend.load_graph import load_graph

    with pytest.raises(TfaotError) as e:
        load_graph(kws())
    msg = str(e.value)
    assert "'wav_data' is a string placeholder" in msg
    assert "DecodeWav -> AudioSpectrogram -> Mfcc" in msg
    assert f"--inputs {MFCC}" in msg and "\n" not in msg


def test_cut_at_any_tensor_drops_the_front_end(kws):
    from tfaot.frontend.load_graph import load_graph

    for spec in (MFCC, f"Mfcc:0:1x{FRAMES}x10", "Mfcc"):  # NAME, NAME:INDEX, shape inferred
        loaded = load_graph(kws(), inputs=spec, outputs="labels_softmax")
        ops = {n.op for n in loaded.graph_def.node}
        assert not ops & {"DecodeWav", "AudioSpectrogram", "Mfcc"}, ops
        assert [(i.name, i.dtype, i.shape) for i in loaded.inputs] == \
            [("Mfcc", "float32", (1, FRAMES, 10))]
        (cut,) = loaded.details["cut"]
        assert cut["tensor"] == "Mfcc:0" and cut["op"] == "Mfcc"
        assert {"DecodeWav", "AudioSpectrogram"} <= set(cut["dropped_ops"])
    with pytest.raises(TfaotError, match="has shape 1x100x10 in the graph, not 1x99x10"):
        load_graph(kws(), inputs="Mfcc:1x99x10", outputs="labels_softmax")
    # (a rank-1 shape mistaken for an index: the message says how to write it)
    with pytest.raises(TfaotError, match="has no output 3.*a rank-1 shape is written Mfcc:0:3"):
        load_graph(kws(), inputs="Mfcc:3", outputs="labels_softmax")
    # an output index the node does not have (was a KeyError from TensorFlow)
    with pytest.raises(TfaotError, match="output 'labels_softmax:3': node 'labels_softmax' "
                                         r"\(op Softmax\) has no output 3"):
        load_graph(kws(), inputs="Mfcc", outputs="labels_softmax:3")


def test_outputs_prune_other_inputs(tmp_path):
    """A second head with its own placeholder is dropped when --outputs picks the first."""
    import tensorflow as tf

    from tfaot.frontend.load_graph import load_graph

    g = tf.Graph()
    with g.as_default():
        x = tf.compat.v1.placeholder(tf.float32, (1, 4), name="x")
        z = tf.compat.v1.placeholder(tf.float32, (1, 4), name="z")
        tf.tanh(x, name="y")
        tf.sigmoid(z + x, name="other")
    path = gm.write_graph_def(g.as_graph_def(), tmp_path / "two.pb", text=False)
    loaded = load_graph(path, outputs="y")
    assert [i.name for i in loaded.inputs] == ["x"]
    assert {n.name for n in loaded.graph_def.node} == {"x", "y"}


def test_inspect_shows_the_cut(kws, capsys):
    from tfaot.cli import main

    args = ["inspect", str(kws()), "--inputs", MFCC, "--outputs", "labels_softmax"]
    assert main(args + ["--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["cut"][0]["tensor"] == "Mfcc:0"
    assert report["inputs"][0]["shape"] == [1, 10] and report["outputs"][0]["shape"] == [1, 4]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "Mfcc:0" in out and "DecodeWav" in out


# -- 2. cruft around the time axis (grappler), 3. unrolled RNNs, through TF


@pytest.mark.parametrize("cell,rnn,head", [
    ("lstm", "dynamic", "seq"), ("gru", "dynamic", "last"),
    ("lstm", "static", "seq"), ("gru", "static", "last"),
    ("multi", "static", "seq"), ("lstm_peephole_proj", "dynamic", "last")])
def test_kws_graph_streams(kws, cell, rnn, head):
    frames = 30
    program, err = _stream_vs_original(kws(cell, rnn, head, frames=frames),
                                       f"Mfcc:1x{frames}x10", frames)
    assert err <= 1e-5, err
    assert program.report["simplified"]["used"]
    assert program.signature.inputs[0].shape == (1, 10)
    if rnn == "static":
        (u,) = program.report["unrolled"]
        assert u["steps"] == frames and program.report["mode"].startswith("graph (unrolled")
    assert "notes" not in program.report


def _cruft_graph(path, frames=20, units=8):
    """Round trips around the time axis before a dynamic_rnn: Transpose pair, Identity
    chain, ExpandDims/Squeeze pair, shape arithmetic on constants, Reshape chain."""
    import tensorflow as tf
    from tensorflow.python.ops import control_flow_util

    lc = gm.legacy_cells()
    saved = control_flow_util.ENABLE_CONTROL_FLOW_V2
    control_flow_util.ENABLE_CONTROL_FLOW_V2 = False
    try:
        g = tf.Graph()
        with g.as_default():
            tf.compat.v1.set_random_seed(4)
            x = tf.compat.v1.placeholder(tf.float32, (1, frames, 10), name="fingerprint_input")
            t = tf.transpose(tf.transpose(x, [0, 2, 1]), [0, 2, 1])
            t = tf.identity(tf.identity(t))
            t = tf.squeeze(tf.expand_dims(t, 0), [0])
            n = tf.constant(frames) * tf.constant(10)  # shape arithmetic on constants
            t = tf.reshape(tf.reshape(t, tf.stack([1, n])), [-1, frames, 10])
            outs, _ = tf.compat.v1.nn.dynamic_rnn(lc.GRUCell(units), t, dtype=tf.float32)
            w = tf.compat.v1.get_variable("w", (units, 3))
            tf.nn.softmax(tf.tensordot(outs, w, [[2], [0]]), name="labels_softmax")
            with tf.compat.v1.Session(graph=g) as sess:
                sess.run(tf.compat.v1.global_variables_initializer())
                gd = tf.compat.v1.graph_util.convert_variables_to_constants(
                    sess, g.as_graph_def(), ["labels_softmax"])
    finally:
        control_flow_util.ENABLE_CONTROL_FLOW_V2 = saved
    return gm.write_graph_def(gd, path, text=False)


def test_cruft_around_the_time_axis(tmp_path):
    path = _cruft_graph(tmp_path / "cruft.pb")
    program, err = _stream_vs_original(path, None, 20)
    assert err <= 1e-5, err
    assert program.report["simplified"]["used"]


def test_unrolled_needs_constant_initial_state_else_says_nothing_streams(tmp_path, capsys):
    """A time window with no recurrence is built stateless, and says so in one line."""
    import tensorflow as tf

    from tfaot.cli import main

    g = tf.Graph()
    with g.as_default():
        x = tf.compat.v1.placeholder(tf.float32, (1, 12, 5), name="x")
        # multiplies along the time axis: no sliding window either
        mixed = tf.reshape(tf.matmul(x[0], tf.constant(np.ones((12, 3), np.float32)),
                                     transpose_a=True), [1, 15])
        tf.nn.softmax(mixed, name="labels_softmax")
    path = gm.write_graph_def(g.as_graph_def(), tmp_path / "window.pb", text=False)
    assert main(["inspect", str(path)]) == 0
    cap = capsys.readouterr()
    notes = [ln for ln in cap.err.splitlines() if "nothing streams" in ln]
    assert len(notes) == 1 and "1x12x5" in notes[0], cap.err
    assert "nothing streams" in cap.out  # inspect's report shows it too


def test_unrolled_copies_must_repeat(tmp_path):
    """Per-step weights that differ: not one repeated cell, so it is not streamed."""
    import tensorflow as tf

    from tfaot.frontend.load_graph import load_graph
    from tfaot.streamify_graph import streamify_graph

    rng = np.random.default_rng(0)
    g = tf.Graph()
    with g.as_default():
        x = tf.compat.v1.placeholder(tf.float32, (1, 6, 4), name="x")
        h = tf.zeros((1, 5))
        for k, xt in enumerate(tf.unstack(x, axis=1)):
            w = tf.constant(rng.standard_normal((9, 5)).astype(np.float32))
            h = tf.tanh(tf.matmul(tf.concat([xt, h], 1), w))
        tf.identity(h, name="y")
    path = gm.write_graph_def(g.as_graph_def(), tmp_path / "varying.pb", text=False)
    program = streamify_graph(load_graph(path), notify=False)
    assert program.report["stateless"]
    (note,) = program.report["notes"]
    assert "time step" in note and "nothing streams" in note, note


@pytest.mark.parametrize("split", ["unstack", "strided_slice", "split"])
def test_hand_unrolled_rnn_streams(tmp_path, split):
    """An RNN unrolled by hand with the three ways of slicing time."""
    import tensorflow as tf

    from tfaot.frontend.load_graph import load_graph
    from tfaot.streamify_graph import streamify_graph

    T, F, U = 7, 4, 5
    rng = np.random.default_rng(1)
    w = rng.standard_normal((F + U, U)).astype(np.float32) * 0.5
    g = tf.Graph()
    with g.as_default():
        x = tf.compat.v1.placeholder(tf.float32, (1, T, F), name="x")
        if split == "unstack":
            steps = tf.unstack(x, axis=1)
        elif split == "strided_slice":
            steps = [x[:, k, :] for k in range(T)]
        else:
            steps = [tf.squeeze(s, [1]) for s in tf.split(x, T, axis=1)]
        h = tf.zeros((1, U))
        outs = []
        for xt in steps:
            h = tf.tanh(tf.matmul(tf.concat([xt, h], 1), w) + 0.1)
            outs.append(h)
        tf.identity(tf.stack(outs, axis=1), name="y")
    path = gm.write_graph_def(g.as_graph_def(), tmp_path / f"{split}.pb", text=False)
    loaded = load_graph(path)
    program = streamify_graph(loaded)
    assert not program.report["stateless"] and program.report["unrolled"]
    xs = rng.standard_normal((1, T, F)).astype(np.float32)
    want = gm.run_graph_def(loaded.details["source_graph_def"], "x", "y:0", xs)
    got = gm.stream(program, xs)
    assert np.abs(got[:, 0] - want[0]).max() <= 1e-5


# -- through the built .so, >= 100 steps


@pytest.mark.parametrize("cell,rnn", [("lstm", "dynamic"), ("gru", "static")])
def test_kws_library_matches_tensorflow(kws, tmp_path, cell, rnn):
    from tfaot.pipeline import BuildOptions, GraphOptions, Progress, build_model
    from tfaot.verify import verify

    path = kws(cell, rnn, "seq")
    opts = GraphOptions(inputs=MFCC, outputs="labels_softmax")
    out = build_model(str(path), BuildOptions(out_dir=tmp_path / "lib", graph_options=opts),
                      Progress(False)).path
    (result,) = verify(str(path), out, steps=FRAMES, seed=1, tol=1e-5, graph_options=opts)
    print(f"kws {cell} {rnn}: .so vs TensorFlow max abs error {result.max_abs_error:.3g} "
          f"over {result.steps} steps")
    assert result.steps == FRAMES and result.ok, result


@pytest.mark.slow
@pytest.mark.parametrize("cell", ["lstm", "gru", "basic_lstm", "lstm_peephole_proj", "multi",
                                  "rnn"])
@pytest.mark.parametrize("rnn", ["dynamic", "static"])
@pytest.mark.parametrize("head", ["last", "seq"])
def test_kws_matrix_through_library(kws, tmp_path, cell, rnn, head):
    from tfaot.pipeline import BuildOptions, GraphOptions, Progress, build_model
    from tfaot.verify import verify

    path = kws(cell, rnn, head)
    opts = GraphOptions(inputs=MFCC, outputs="labels_softmax")
    out = build_model(str(path), BuildOptions(out_dir=tmp_path / "lib", graph_options=opts),
                      Progress(False)).path
    (result,) = verify(str(path), out, steps=FRAMES, seed=1, tol=1e-5, graph_options=opts)
    print(f"kws {cell} {rnn} {head}: max abs error {result.max_abs_error:.3g} "
          f"over {result.steps} steps")
    assert result.ok, result


def _training_flag_graph():
    """A TF1 graph in control flow v2, as TF 2 writes them: is_training =
    placeholder_with_default(False), a tf.cond (a StatelessIf) adding noise
    in training, then dynamic_rnn (a While) and a dense layer."""
    import tensorflow as tf

    g = tf.Graph()
    with g.as_default():
        tf.compat.v1.set_random_seed(0)
        x = tf.compat.v1.placeholder(tf.float32, (1, None, 5), name="x")
        training = tf.compat.v1.placeholder_with_default(False, [], name="is_training")
        h = tf.cond(training, lambda: x + tf.random.normal(tf.shape(x)) * 0.1,
                    lambda: tf.tanh(x))
        cell = gm.legacy_cells().GRUCell(6)
        h, _ = tf.compat.v1.nn.dynamic_rnn(cell, h, dtype=tf.float32)
        w = tf.compat.v1.get_variable("w", (6, 3))
        tf.identity(tf.einsum("btf,fo->bto", h, w), name="y")
        with tf.compat.v1.Session(graph=g) as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            return tf.compat.v1.graph_util.convert_variables_to_constants(
                sess, g.as_graph_def(), ["y"])


def test_a_cond_on_a_flag_known_at_build_streams(tmp_path, capsys):
    """A TF2 cond (If/StatelessIf) on a flag known when the graph is built
    keeps its live branch (it was refused: "op StatelessIf on a
    time-dependent tensor"), a frozen TF1 graph's is_training as a tf.Module's
    captured constant; through the library against TensorFlow."""
    import tensorflow as tf

    from tfaot.cli import main

    path = gm.write_graph_def(_training_flag_graph(), tmp_path / "flag.pb", text=False)
    assert any(n.op in ("If", "StatelessIf") for n in _training_flag_graph().node)
    kernel = tf.constant(np.random.default_rng(0).normal(size=(3, 4, 6)).astype(np.float32))

    class Module(tf.Module):
        flag = tf.constant(True)

        @tf.function(input_signature=[tf.TensorSpec([1, None, 4], tf.float32)])
        def __call__(self, x):
            h = tf.nn.conv1d(x, kernel, 1, "VALID")
            return {"y": tf.cond(self.flag, lambda: tf.nn.relu(h), lambda: tf.tanh(h))}

    module = Module()
    tf.saved_model.save(module, str(tmp_path / "sm"), signatures=module.__call__)
    for model in (path, tmp_path / "sm"):
        out = tmp_path / f"lib_{model.stem}"
        assert main(["build", str(model), "-o", str(out), "-q"]) == 0, capsys.readouterr().err
        assert main(["verify", str(model), str(out)]) == 0
        assert capsys.readouterr().out.strip().endswith(": ok")


def test_a_time_major_saved_model_streams_over_axis_0(tmp_path, capsys):
    """A SavedModel taking (None, 1, F), time-major (a tf.scan over axis 0):
    its open axis 0 was made batch 1 and the loop refused ("makes a list
    along axis 0, but the time axis is 1"), where the same frozen graph
    streams over axis 0. One without a loop stays one inference on (1, 1, F)."""
    import tensorflow as tf

    from tfaot.cli import main

    rng = np.random.default_rng(2)
    wx, wh = (tf.constant(rng.normal(size=s).astype(np.float32) * 0.4) for s in ((6, 8), (8, 8)))
    spec = tf.TensorSpec([None, 1, 6], tf.float32, name="feats")
    for name, fn in (("scan", lambda x: {"h": tf.scan(lambda h, xt: tf.tanh(xt @ wx + h @ wh),
                                                          x, initializer=tf.zeros([1, 8]))}),
                     ("frames", lambda x: {"h": tf.tanh(x @ wx)})):
        module = tf.Module()
        module.f = tf.function(fn, input_signature=[spec])
        tf.saved_model.save(module, str(tmp_path / name), signatures=module.f)
        out = tmp_path / f"lib_{name}"
        assert main(["build", str(tmp_path / name), "-o", str(out)]) == 0
        err = capsys.readouterr().err
        manifest = json.loads((out / f"{name}.json").read_text())
        if name == "scan":
            assert "streams over axis 0 of input 'feats'" in err, err
            assert manifest["inputs"][0]["shape"] == [1, 6]
        else:
            assert manifest["inputs"][0]["shape"] == [1, 1, 6], manifest["inputs"]
        assert main(["verify", str(tmp_path / name), str(out)]) == 0
        assert capsys.readouterr().out.strip().endswith(": ok")


def test_a_cond_pivot_is_not_taken_for_an_output():
    """A TF1 tf.cond adds an Identity per branch (cond/switch_f); unread
    where the branch has no constants, it was listed as a second output."""
    from pathlib import Path

    import tensorflow as tf

    from tfaot.frontend.load_graph import graph_def_to_loaded

    with gm.tf1_graph(0) as g:
        x = tf.compat.v1.placeholder(tf.float32, (1, None, 3), name="x")
        training = tf.compat.v1.placeholder_with_default(False, [], name="is_training")
        tf.identity(tf.cond(training, lambda: x * 0.5, lambda: tf.tanh(x)), name="y")
    graph_def = g.as_graph_def()
    assert any(n.name.endswith("switch_f") for n in graph_def.node)
    loaded = graph_def_to_loaded(graph_def, Path("cond.pb"), "graphdef")
    assert loaded.outputs == ["y:0"], loaded.outputs


def test_constants_left_unread_are_not_taken_for_outputs():
    """An unpruned TF1 graph keeps tf.signal's constant pieces (the stft's
    frame count, the mel matrix's linspace casts) unread: they were outputs
    0-2 of the library, before the one output computed from the input.
    Two outputs computed from the input both stay."""
    from pathlib import Path

    import tensorflow as tf

    from tfaot.frontend.load_graph import graph_def_to_loaded

    with gm.tf1_graph(0) as g:
        wav = tf.compat.v1.placeholder(tf.float32, (1, None), name="wav")
        spectrum = tf.abs(tf.signal.stft(wav, 256, 128, 256))
        mel = tf.signal.linear_to_mel_weight_matrix(16, 129, 16000, 60.0, 7000.0)
        tf.identity(tf.reduce_mean(tf.tensordot(spectrum, mel, 1), -1), name="scores")
        tf.identity(tf.reduce_max(spectrum, -1), name="loudest")
    loaded = graph_def_to_loaded(g.as_graph_def(), Path("mel.pb"), "graphdef")
    assert sorted(loaded.outputs) == ["loudest:0", "scores:0"], loaded.outputs
