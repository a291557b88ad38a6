"""Graph-level streaming: frozen graphs and SavedModels -> pure step, vs TensorFlow.

Each case streams >= 100 steps through ``pure_step`` (eagerly, from the
initial state) and compares with TensorFlow running the original graph on
the whole sequence. For a last-output model (return_sequences=False) step t
must equal the model on the prefix x[:, :t+1]: the final step is compared
with the original graph, every step with Keras on each prefix.
"""
from __future__ import annotations

import numpy as np
import pytest

import graph_models as gm

T = 100
TOL = 1e-5

# (kind, units, return_sequences, dense): every cell type, 1 and 2 stacked
# layers, with and without a Dense head, return_sequences True and False.
MODELS = {
    "lstm_seq_dense": ("lstm", (16,), True, 3),
    "lstm2_last_dense": ("lstm", (16, 12), False, 3),
    "gru_last": ("gru", (12,), False, 0),
    "gru2_seq_dense": ("gru", (12, 8), True, 3),
    "simplernn_seq": ("simplernn", (10,), True, 0),
    "simplernn2_last_dense": ("simplernn", (10, 6), False, 2),
}
FEATURES = 8
FORMS = ["pb_while", "pbtxt_v1cf", "pb_dynamic_t", "pbtxt_dynamic_t_v1cf",
         "savedmodel_export", "savedmodel_save"]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return tmp_path_factory.mktemp("graph_models")


@pytest.fixture(scope="module")
def x():
    return np.random.default_rng(42).standard_normal((1, T, FEATURES)).astype(np.float32)


_cache: dict = {}


def _model(name):
    if name not in _cache:
        kind, units, rs, dense = MODELS[name]
        _cache[name] = gm.keras_model(kind, units, FEATURES, None, rs, dense, seed=3)
    return _cache[name]


def _write(form, name, workdir):
    model = _model(name)
    path = workdir / f"{name}.{form}"
    if path.exists():
        return path
    if form == "pb_while":
        gm.write_graph_def(gm.freeze_keras(model, T, FEATURES, False), path, text=False)
    elif form == "pbtxt_v1cf":
        gm.write_graph_def(gm.freeze_keras(model, T, FEATURES, True), path, text=True)
    elif form == "pb_dynamic_t":
        gm.write_graph_def(gm.freeze_keras(model, None, FEATURES, False), path, text=False)
    elif form == "pbtxt_dynamic_t_v1cf":
        gm.write_graph_def(gm.freeze_keras(model, None, FEATURES, True), path, text=True)
    elif form == "savedmodel_export":
        model.export(str(path), verbose=False)
    elif form == "savedmodel_save":
        import tensorflow as tf

        tf.saved_model.save(model, str(path))
    return path


def _prefix_reference(model, x):
    """Keras on every prefix x[:, :t+1] (one traced function, dynamic T)."""
    import tensorflow as tf

    fn = tf.function(model, input_signature=[tf.TensorSpec((1, None, x.shape[2]), tf.float32)])
    return np.stack([fn(x[:, : t + 1]).numpy() for t in range(x.shape[1])])


def _matrix():
    """Every model x every form; by default a subset that still covers each
    model twice and each form twice (the rest: ``pytest -m slow``)."""
    cases = []
    for i, name in enumerate(MODELS):
        fast = {FORMS[i % len(FORMS)], FORMS[(i + 3) % len(FORMS)]}
        for form in FORMS:
            marks = () if form in fast else (pytest.mark.slow,)
            cases.append(pytest.param(name, form, marks=marks, id=f"{name}-{form}"))
    return cases


@pytest.mark.parametrize("name,form", _matrix())
def test_stream_matches_tensorflow(name, form, workdir, x):
    from tfaot.frontend.load_graph import load_graph
    from tfaot.streamify_graph import streamify_graph

    path = _write(form, name, workdir)
    loaded = load_graph(path)
    program = streamify_graph(loaded)
    sig = program.signature
    assert sig.inputs[0].shape == (1, FEATURES)
    n_layers = len(MODELS[name][1])
    assert len(program.report["loops"]) == n_layers
    kind = MODELS[name][0]
    per_layer = 2 if kind == "lstm" else 1
    assert len(sig.states) == n_layers * per_layer
    for s in sig.states:
        assert np.all(s.initial == 0) and s.initial.shape == s.shape

    # TensorFlow running the original model on the whole sequence.
    if form.startswith("savedmodel"):
        ref = gm.run_saved_model(path, x)
    else:
        ref = gm.run_graph_def(loaded.graph_def, loaded.inputs[0].name, loaded.outputs[0], x)
    ys = gm.stream(program, x)  # (T, 1, units)
    assert ys.shape[0] == T
    rs = MODELS[name][2]
    if rs:
        err = np.abs(ys[:, 0] - ref[0]).max()
    else:
        err = np.abs(ys[-1] - ref).max()
        if ("prefix", name) not in _cache:
            _cache[("prefix", name)] = _prefix_reference(_model(name), x)
        prefix = _cache[("prefix", name)]
        err = max(err, np.abs(ys - prefix).max())
    assert err <= TOL, f"{name}/{form}: max abs error {err}"


def test_reset_semantics_and_report(workdir, x):
    """@reset returns the compiled module's state to the initial value; report is JSON."""
    import json

    from reference import compile_with_iree, run_steps
    from tfaot.frontend.load_graph import load_graph
    from tfaot.lower.mlir_import import import_program
    from tfaot.streamify_graph import streamify_graph

    program = streamify_graph(load_graph(_write("pb_while", "lstm_seq_dense", workdir)))
    module = compile_with_iree(import_program(program))
    first = run_steps(module, x[:, :20])
    carried_on = run_steps(module, x[:, :20])  # the state goes on from step 20
    module.reset()
    after_reset = run_steps(module, x[:, :20])
    assert np.abs(first - after_reset).max() <= 1e-6
    assert np.abs(first - carried_on).max() > 1e-3
    rep = json.loads(json.dumps(program.report))
    (loop,) = rep["loops"]
    kinds = sorted(loop["vars"].values())
    assert kinds.count("state") == 2 and "inlist" in kinds and "outlist(seq)" in kinds
    assert kinds.count("counter") == 2
    assert loop["states"] == [s.name for s in program.signature.states]
    assert program.format == "graphdef"
    assert program.pure_step.structured_input_signature[0][0].shape == (1, FEATURES)


@pytest.mark.parametrize("form", ["pb", "savedmodel_v1"])
def test_tf1_while_loop_tensorarray(form, workdir):
    """TF1 v1 control flow (Enter/Exit/...) + TensorArrayV3, as dynamic_rnn builds it."""
    from tfaot.frontend.load_graph import load_graph
    from tfaot.streamify_graph import streamify_graph

    path = workdir / f"tf1_lstm.{form}"
    if form == "pb":
        gm.write_graph_def(gm.tf1_frozen_graph_def(), path, text=False)
    else:
        gm.save_tf1_saved_model(path)
    loaded = load_graph(path)
    program = streamify_graph(loaded)
    (loop,) = program.report["loops"]
    assert loop["form"] == "v1"
    assert sorted(loop["vars"].values()).count("state") == 2
    xx = np.random.default_rng(7).standard_normal((1, 120, 6)).astype(np.float32)
    ref = gm.run_saved_model(path, xx) if form == "savedmodel_v1" else \
        gm.run_graph_def(loaded.graph_def, "x", loaded.outputs[0], xx)
    ys = gm.stream(program, xx)
    err = np.abs(ys[:, 0] - ref[0]).max()
    assert err <= TOL, f"tf1 {form}: max abs error {err}"
    assert program.signature.outputs[0].shape == (1, 4)


FIXTURES = __import__("pathlib").Path(__file__).parent / "fixtures"


@pytest.mark.parametrize("fixture,loops,states", [
    # TF1 dynamic_rnn(MultiRNNCell([LSTMCell(12), GRUCell(8)])) + tensordot Dense:
    # one v1 frame with TensorArrayV3 in/out lists.
    ("tf1_dynamic_rnn.pb", 1, 3),
    # tf_keras (Keras 2) SavedModel: LSTM(10) -> GRU(6, reset_after=False) -> Dense(3).
    ("keras2_savedmodel", 2, 3),
])
def test_committed_fixtures(fixture, loops, states):
    from tfaot.frontend.load_graph import load_graph
    from tfaot.streamify_graph import streamify_graph

    loaded = load_graph(FIXTURES / fixture)
    program = streamify_graph(loaded)
    assert len(program.report["loops"]) == loops
    assert len(program.signature.states) == states
    assert program.signature.inputs[0].shape == (1, 6)
    assert program.signature.outputs[0].shape == (1, 3)
    xx = np.random.default_rng(5).standard_normal((1, 110, 6)).astype(np.float32)
    if fixture.endswith(".pb"):
        ref = gm.run_graph_def(loaded.graph_def, loaded.inputs[0].name, loaded.outputs[0], xx)
    else:
        ref = gm.run_saved_model(FIXTURES / fixture, xx)
    ys = gm.stream(program, xx)
    err = np.abs(ys[:, 0] - ref[0]).max()
    assert err <= TOL, f"{fixture}: max abs error {err}"


def _freeze_fn(fn, shape, lower_control_flow):
    import tensorflow as tf
    from tensorflow.python.framework.convert_to_constants import (
        convert_variables_to_constants_v2,
    )

    cf = tf.function(fn).get_concrete_function(tf.TensorSpec(shape, tf.float32, name="x"))
    return convert_variables_to_constants_v2(
        cf, lower_control_flow=lower_control_flow).graph.as_graph_def()


def _stream_all(program, x, n_out, time_axis=1):
    import tensorflow as tf

    states = [tf.constant(s.initial) for s in program.signature.states]
    outs = []
    for t in range(x.shape[time_axis]):
        res = program.pure_step(tf.constant(np.take(x, t, axis=time_axis)), *states)
        outs.append([r.numpy() for r in res[:n_out]])
        states = list(res[n_out:])
    return [np.stack([o[k] for o in outs]) for k in range(n_out)]


@pytest.mark.parametrize("lower_control_flow", [False, True])
def test_return_state_outputs_and_masking(lower_control_flow):
    """Several outputs (sequence + final h, c) and a Masking layer (a second input list)."""
    import keras

    from tfaot.frontend.load_graph import graph_def_to_loaded
    from tfaot.streamify_graph import streamify_graph

    keras.utils.set_random_seed(11)
    inp = keras.Input((None, 8))
    masked = keras.layers.Masking()(inp)
    seq, h, c = keras.layers.LSTM(6, return_sequences=True, return_state=True)(masked)
    model = keras.Model(inp, [keras.layers.Dense(2)(seq), h, c])
    gd = _freeze_fn(lambda v: model(v), (1, None, 8), lower_control_flow)
    loaded = graph_def_to_loaded(gd, __import__("pathlib").Path("rs.pb"), "graphdef")
    assert len(loaded.outputs) == 3
    program = streamify_graph(loaded)
    assert [o.shape for o in program.signature.outputs] == [(1, 2), (1, 6), (1, 6)]
    x = np.random.default_rng(2).standard_normal((1, 100, 8)).astype(np.float32)
    x[:, 30:34] = 0.0  # masked steps keep the state
    got = _stream_all(program, x, 3)
    for k, out in enumerate(loaded.outputs):
        ref = gm.run_graph_def(gd, "x", out, x)
        err = np.abs(got[k][:, 0] - ref[0]).max() if ref.ndim == 3 else \
            np.abs(got[k][-1] - ref).max()
        assert err <= TOL, f"output {k}: {err}"


def test_time_major_tf2_graph_while():
    """A graph built with tf.while_loop in a tf.Graph (control flow v2), input (T, 1, F)."""
    import tensorflow as tf

    from tfaot.frontend.load_graph import graph_def_to_loaded
    from tfaot.streamify_graph import streamify_graph

    w = (np.random.default_rng(0).standard_normal((14, 6)) * 0.3).astype(np.float32)
    g = tf.Graph()
    with g.as_default():
        x = tf.compat.v1.placeholder(tf.float32, (None, 1, 8), name="x")
        T = tf.shape(x)[0]
        ta_in = tf.TensorArray(tf.float32, size=T).unstack(x)

        def body(t, h, ta):
            h = tf.tanh(tf.matmul(tf.concat([ta_in.read(t), h], 1), w))
            return t + 1, h, ta.write(t, h)

        _, _, ta = tf.while_loop(lambda t, *_: t < T, body,
                                 [0, tf.zeros((1, 6)), tf.TensorArray(tf.float32, size=T)])
        tf.identity(ta.stack() * 2.0, name="y")
    loaded = graph_def_to_loaded(g.as_graph_def(), __import__("pathlib").Path("tm.pb"),
                                 "graphdef")
    assert loaded.outputs == ["y:0"]
    program = streamify_graph(loaded)
    assert program.report["input"]["time_axis"] == 0
    xs = np.random.default_rng(4).standard_normal((100, 1, 8)).astype(np.float32)
    ref = gm.run_graph_def(g.as_graph_def(), "x", "y:0", xs)
    ys = gm.stream(program, xs, time_axis=0)
    assert np.abs(ys[:, 0] - ref[:, 0]).max() <= TOL


def test_stateless_graph_is_one_inference():
    import keras

    from tfaot.frontend.load_graph import graph_def_to_loaded
    from tfaot.streamify_graph import streamify_graph

    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(4, activation="relu"),
                              keras.layers.Dense(2)])
    gd = _freeze_fn(lambda v: model(v), (None, 8), False)
    program = streamify_graph(graph_def_to_loaded(gd, __import__("pathlib").Path("d.pb"),
                                                  "graphdef"))
    assert program.signature.states == ()
    assert program.report["stateless"] is True
    x = np.random.default_rng(1).standard_normal((1, 8)).astype(np.float32)
    assert np.abs(program.pure_step(x)[0].numpy() - model(x).numpy()).max() <= TOL


@pytest.mark.parametrize("lower_control_flow", [False, True])
def test_embedding_int_input(lower_control_flow):
    """Token ids (int32, shape (1, T)) -> Embedding -> GRU -> Dense."""
    import keras

    from tfaot.frontend.load_graph import graph_def_to_loaded
    from tfaot.streamify_graph import streamify_graph

    keras.utils.set_random_seed(6)
    model = keras.Sequential([keras.Input((None,), dtype="int32"), keras.layers.Embedding(50, 8),
                              keras.layers.GRU(6, return_sequences=True), keras.layers.Dense(3)])
    import tensorflow as tf
    from tensorflow.python.framework.convert_to_constants import (
        convert_variables_to_constants_v2,
    )

    cf = tf.function(lambda v: model(v)).get_concrete_function(
        tf.TensorSpec((1, None), tf.int32, name="x"))
    gd = convert_variables_to_constants_v2(
        cf, lower_control_flow=lower_control_flow).graph.as_graph_def()
    program = streamify_graph(graph_def_to_loaded(gd, __import__("pathlib").Path("e.pb"),
                                                  "graphdef"))
    assert program.signature.inputs[0].shape == (1,)
    assert program.signature.inputs[0].dtype == "int32"
    x = np.random.default_rng(0).integers(0, 50, (1, 100)).astype(np.int32)
    ref = gm.run_graph_def(gd, "x", "Identity:0", x)
    ys = gm.stream(program, x)
    assert np.abs(ys[:, 0] - ref[0]).max() <= TOL


def test_masked_last_output_starts_from_zeros_like():
    """Embedding(mask_zero=True) then a GRU's last output, as Keras 3 writes
    it: the loop carries the last unmasked output, which starts as
    zeros_like(the output at step 0); that initial state was refused as
    depending on the input (a model.export() of a token classifier did not
    build)."""
    import keras
    import tensorflow as tf
    from tensorflow.python.framework.convert_to_constants import (
        convert_variables_to_constants_v2,
    )

    from tfaot.frontend.load_graph import graph_def_to_loaded
    from tfaot.streamify_graph import streamify_graph

    keras.utils.set_random_seed(6)
    model = keras.Sequential([keras.Input((None,), dtype="int32"),
                              keras.layers.Embedding(20, 8, mask_zero=True),
                              keras.layers.GRU(6), keras.layers.Dense(3)])
    # (an open batch, as model.export() writes it: zeros_like is not folded)
    cf = tf.function(lambda v: model(v)).get_concrete_function(
        tf.TensorSpec((None, None), tf.int32, name="x"))
    gd = convert_variables_to_constants_v2(cf).graph.as_graph_def()
    program = streamify_graph(graph_def_to_loaded(gd, __import__("pathlib").Path("m.pb"),
                                                  "graphdef"))
    x = np.random.default_rng(0).integers(0, 4, (1, 100)).astype(np.int32)  # 1 in 4 masked
    x[0, 0] = 0
    ys = gm.stream(program, x)
    for t in (0, 1, 2, 10, 37, 99):
        ref = gm.run_graph_def(gd, "x", "Identity:0", x[:, :t + 1])
        assert np.abs(ys[t] - ref).max() <= TOL, t


_W = np.random.default_rng(0).standard_normal((6, 3)).astype(np.float32)
HEADS = {
    "batch_matmul_2d": lambda y: __import__("tensorflow").matmul(y, _W),
    "batch_matmul_3d": lambda y: __import__("tensorflow").matmul(y, _W[None]),
    "einsum": lambda y: __import__("tensorflow").einsum("btf,fu->btu", y, _W),
    "adjoint": lambda y: __import__("tensorflow").matmul(
        __import__("tensorflow").transpose(y, [0, 2, 1]), _W, adjoint_a=True),
    "layer_norm": lambda y: __import__("tensorflow").nn.l2_normalize(y, axis=-1),
}


@pytest.mark.parametrize("head", list(HEADS))
def test_per_step_heads_after_the_loop(head):
    """Time-pointwise ops on the sequence output (matmul forms, einsum, reductions)."""
    import keras

    from tfaot.frontend.load_graph import graph_def_to_loaded
    from tfaot.streamify_graph import streamify_graph

    keras.utils.set_random_seed(8)
    lstm = keras.layers.LSTM(6, return_sequences=True)
    fn = HEADS[head]
    gd = _freeze_fn(lambda v: fn(lstm(v)), (1, T, 8), False)
    loaded = graph_def_to_loaded(gd, __import__("pathlib").Path(f"{head}.pb"), "graphdef")
    program = streamify_graph(loaded)
    x = np.random.default_rng(3).standard_normal((1, T, 8)).astype(np.float32)
    ref = gm.run_graph_def(gd, "x", loaded.outputs[0], x)
    ys = gm.stream(program, x)
    assert np.abs(ys[:, 0] - ref[0]).max() <= TOL


@pytest.mark.parametrize("lower_control_flow", [False, True])
def test_fixed_t_time_distributed_unrolled(lower_control_flow):
    """Keras 3 TimeDistributed at a fixed T unrolls into T slices + Pack."""
    import keras

    from tfaot.frontend.load_graph import graph_def_to_loaded
    from tfaot.streamify_graph import streamify_graph

    keras.utils.set_random_seed(12)
    L = keras.layers
    model = keras.Sequential([keras.Input((None, 8)), L.TimeDistributed(L.Dense(5)),
                              L.GRU(4, return_sequences=True),
                              L.TimeDistributed(L.Dense(2, activation="softmax"))])
    gd = gm.freeze_keras(model, T, 8, lower_control_flow)
    loaded = graph_def_to_loaded(gd, __import__("pathlib").Path("td.pb"), "graphdef")
    program = streamify_graph(loaded)
    x = np.random.default_rng(3).standard_normal((1, T, 8)).astype(np.float32)
    ref = gm.run_graph_def(gd, "x", loaded.outputs[0], x)
    ys = gm.stream(program, x)
    assert np.abs(ys[:, 0] - ref[0]).max() <= TOL


@pytest.mark.parametrize("timesteps", [None, 20])
def test_tf_keras_layer_normalization_and_swish_stream(timesteps):
    """tf_keras writes LayerNormalization as a FusedBatchNorm in training
    mode over the frames as channels, with ones and zeros as long as the
    sequence, and swish's custom gradient as an IdentityN: both per frame.
    The first was refused as computed from the sequence length (a fixed
    window fell back to one whole inference per step), the second as an op
    of unknown time behaviour; both stream now, open or as a window."""
    import tf_keras

    from tfaot.frontend.load_graph import graph_def_to_loaded
    from tfaot.streamify_graph import streamify_graph

    tf_keras.utils.set_random_seed(12)
    L = tf_keras.layers
    inp = tf_keras.Input((timesteps, 8))
    h = L.Conv1D(8, 3, activation="swish")(inp) if timesteps else \
        L.GRU(8, return_sequences=True)(inp)
    h = L.Activation("swish")(L.LayerNormalization()(h))
    model = tf_keras.Model(inp, L.Dense(3)(L.GlobalAveragePooling1D()(h) if timesteps else h))
    gd = _freeze_fn(lambda v: model(v), (1, timesteps, 8), False)
    assert {"IdentityN", "FusedBatchNormV3"} <= {n.op for n in gd.node}
    program = streamify_graph(graph_def_to_loaded(gd, __import__("pathlib").Path("ln.pb"),
                                                  "graphdef"))
    x = np.random.default_rng(3).standard_normal((1, 40, 8)).astype(np.float32)
    got = _stream_all(program, x, 1)[0][:, 0]
    if timesteps:  # step t: the window of frames t-19..t
        assert program.stream.mode == "window" and not program.stream.recompute
        want = np.concatenate([np.asarray(model(x[:, t - 19:t + 1])) for t in range(19, 40)])
        got = got[19:]
    else:
        want = np.asarray(model(x))[0]
    assert np.abs(got - want).max() <= TOL


def test_keras_3_argmax_head_streams(tmp_path, capsys):
    """Keras 3's argmax bitcasts its floats to integers and masks their bits
    (to order -0.0 and NaN): Bitcast and BitwiseAnd were refused as ops of
    unknown time behaviour in a model.export(); the ids match over 120 steps."""
    import re

    import keras
    from keras import layers as L

    from tfaot.cli import main

    keras.utils.set_random_seed(0)
    x = keras.Input((None, 8))
    h = L.GRU(8, return_sequences=True)(x)
    path, out = tmp_path / "argmax", tmp_path / "lib"
    keras.Model(x, keras.ops.argmax(L.Dense(5)(h), axis=-1)).export(str(path), verbose=False)
    assert main(["build", str(path), "-o", str(out), "-q"]) == 0
    capsys.readouterr()
    assert main(["verify", str(path), str(out), "--steps", "120"]) == 0
    line = capsys.readouterr().out.strip()
    assert re.fullmatch(r"output_0: max abs error 0 over 120 steps \(tolerance \S+\): ok", line)
