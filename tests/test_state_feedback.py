"""Graphs published as one step with the state as I/O (DeepSpeech's
previous_state_c/h -> new_state_c/h, "external state" exports): the state
pairs are kept inside the library (compiler/streamify_graph/state_feedback.py)."""
import json
import sys

import numpy as np
import pytest

from util import run

from tfaot import harness
from tfaot.cli import main
from tfaot.program import ProgramSignature, TensorInfo
from tfaot.streamify_graph.state_feedback import find_pairs, parse_pairs

STEPS = 120


def _step_graph(defaults: bool = False):
    """One LSTM step written by hand in a TF1 session, frozen; the state is
    fed in and read out by the caller (``defaults``: its inputs are
    placeholder_with_default, zeros)."""
    import tensorflow as tf

    def state_input(name):
        if defaults:
            return tf.compat.v1.placeholder_with_default(tf.zeros([1, 16]), [1, 16], name=name)
        return tf.compat.v1.placeholder(tf.float32, [1, 16], name=name)

    g = tf.Graph()
    with g.as_default():
        tf.compat.v1.set_random_seed(3)
        x = tf.compat.v1.placeholder(tf.float32, [1, 10], name="input_node")
        c = state_input("previous_state_c")
        h = state_input("previous_state_h")
        w = tf.compat.v1.get_variable("w", [26, 64])
        b = tf.compat.v1.get_variable("b", [64])
        i, f, gg, o = tf.split(tf.matmul(tf.concat([x, h], 1), w) + b, 4, axis=1)
        c2 = tf.sigmoid(f + 1.0) * c + tf.sigmoid(i) * tf.tanh(gg)
        h2 = tf.sigmoid(o) * tf.tanh(c2)
        tf.identity(c2, name="new_state_c")
        tf.identity(h2, name="new_state_h")
        wo = tf.compat.v1.get_variable("wo", [16, 5])
        tf.nn.softmax(tf.matmul(h2, wo), name="logits")
        with tf.compat.v1.Session(graph=g) as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            return tf.compat.v1.graph_util.convert_variables_to_constants(
                sess, g.as_graph_def(), ["logits", "new_state_c", "new_state_h"])


@pytest.fixture(scope="module")
def step_graph(tmp_path_factory):
    path = tmp_path_factory.mktemp("feedback") / "ds.pb"
    path.write_bytes(_step_graph().SerializeToString())
    return path


def _run_graph(graph_def, xs):
    """The original graph stepped by its caller: state outputs fed back."""
    import tensorflow as tf

    g = tf.Graph()
    with g.as_default():
        tf.graph_util.import_graph_def(graph_def, name="")
    with tf.compat.v1.Session(graph=g) as sess:
        c = h = np.zeros((1, 16), np.float32)
        ys = []
        for x in xs:
            y, c, h = sess.run(["logits:0", "new_state_c:0", "new_state_h:0"],
                               {"input_node:0": x, "previous_state_c:0": c,
                                "previous_state_h:0": h})
            ys.append(y)
    return np.stack(ys)


def test_found_pairs_stream_through_the_library(step_graph, tmp_path, capsys):
    out = tmp_path / "lib"
    assert main(["build", str(step_graph), "-o", str(out)]) == 0
    assert "keeps output 'new_state_c' as the state fed to input 'previous_state_c'" in \
        capsys.readouterr().err
    manifest = json.loads((out / "ds.json").read_text())
    assert [i["name"] for i in manifest["inputs"]] == ["input_node"]
    assert [o["name"] for o in manifest["outputs"]] == ["logits"]
    assert [s["name"] for s in manifest["state"]] == ["previous_state_c", "previous_state_h"]
    lib = harness.load(out)
    xs = np.random.default_rng(0).normal(size=(STEPS, 1, 10)).astype(np.float32)
    got = lib.step_n(xs)
    want = _run_graph(_step_graph(), xs)
    err = float(np.abs(got - want).max())
    print(f"state fed back: max abs error {err:.3g} over {STEPS} steps")
    assert err <= 1e-5
    # the state is the library's: reset, get/set_state
    lib.reset()
    lib.step_n(xs[:50])
    other = harness.load(out)
    other.set_state(lib.get_state())
    np.testing.assert_array_equal(other.step_n(xs[50:]), got[50:])
    # tfaot verify runs the graph with the same pairs fed back
    capsys.readouterr()
    assert main(["verify", str(step_graph), str(out), "--steps", str(STEPS)]) == 0
    assert f"over {STEPS} steps" in capsys.readouterr().out


@pytest.mark.parametrize("named", [False, True])
def test_state_inputs_with_defaults_are_state_too(tmp_path, capsys, named):
    """The same step with its state inputs written as placeholder_with_default
    (zeros): they were folded to their defaults without a word, so the
    library restarted from zero state every step, and --state said they
    were no inputs. Now they pair as plain placeholders do, found by their
    names or named by --state, and the library carries the state."""
    path = tmp_path / "defaults.pb"
    path.write_bytes(_step_graph(defaults=True).SerializeToString())
    out = tmp_path / "lib"
    state = ["--state", "previous_state_c=new_state_c,previous_state_h=new_state_h"]
    assert main(["-q", "build", str(path), "-o", str(out), *(state if named else [])]) == 0
    manifest = json.loads((out / "defaults.json").read_text())
    assert [i["name"] for i in manifest["inputs"]] == ["input_node"]
    assert [s["name"] for s in manifest["state"]] == ["previous_state_c", "previous_state_h"]
    xs = np.random.default_rng(1).normal(size=(STEPS, 1, 10)).astype(np.float32)
    want = _run_graph(_step_graph(defaults=True), xs)
    np.testing.assert_allclose(harness.load(out).step_n(xs), want, rtol=0, atol=1e-5)


def _step_module(path) -> callable:
    """One tanh-RNN step as a SavedModel signature (a tf.Module): the state
    goes in as 'previous_state_h' and out as 'new_state_h'; returns the
    signature, to step it as its caller does."""
    import tensorflow as tf

    rng = np.random.default_rng(41)
    w, u, v = (tf.constant(rng.normal(size=s).astype(np.float32) * 0.5)
               for s in ((4, 6), (6, 6), (6, 2)))

    class Step(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec((1, 4), tf.float32, name="x"),
                                      tf.TensorSpec((1, 6), tf.float32,
                                                    name="previous_state_h")])
        def step(self, x, previous_state_h):
            h = tf.tanh(x @ w + previous_state_h @ u)
            return {"y": h @ v, "new_state_h": h}

    module = Step()
    tf.saved_model.save(module, str(path), signatures={"serving_default": module.step})
    return module.step


def test_saved_model_signature_with_its_state_as_io(tmp_path, capsys):
    """A SavedModel's signature keys name the state pair, its tensors are
    StatefulPartitionedCall's: the library and `tfaot verify` both pair
    them by key."""
    path = tmp_path / "step_sm"
    step = _step_module(path)
    out = tmp_path / "lib"
    assert main(["build", str(path), "-o", str(out)]) == 0
    assert "keeps output 'new_state_h' as the state fed to input 'previous_state_h'" in \
        capsys.readouterr().err
    xs = np.random.default_rng(1).normal(size=(STEPS, 1, 4)).astype(np.float32)
    h, want = np.zeros((1, 6), np.float32), []
    for x in xs:
        result = step(x=x, previous_state_h=h)
        h = result["new_state_h"].numpy()
        want.append(result["y"].numpy())
    err = float(np.abs(harness.load(out).step_n(xs) - np.stack(want)).max())
    assert err <= 1e-5, err
    assert main(["verify", str(path), str(out), "--steps", str(STEPS)]) == 0
    assert "y: max abs error" in capsys.readouterr().out


def _saved_steps(path, xs, key: str = "x"):
    """The SavedModel at ``path`` called once per step of ``xs`` (its
    variables carrying the state from call to call): its "y" outputs.
    (Called before the build: TensorFlow's freezing of the same SavedModel
    in this process may leave its functions unrunnable here.)"""
    import tensorflow as tf

    step = tf.saved_model.load(str(path)).signatures["serving_default"]
    return np.stack([list(step(**{key: tf.constant(x)}).values())[0].numpy() for x in xs])


def test_saved_model_with_variable_state_keeps_it(tmp_path, capsys):
    """The same step keeping its state in a tf.Variable (saved non-zero): it
    was refused; the variable is now the library's state, from its saved
    value at reset, and the library equals the SavedModel called step by
    step (its variable carrying the state) and verifies."""
    import tensorflow as tf

    class Step(tf.Module):
        def __init__(self):
            self.h = tf.Variable([[0.5, -1.0, 0.25, 2.0, 0.0, 1.0]], trainable=False)

        @tf.function(input_signature=[tf.TensorSpec((1, 4), tf.float32)])
        def step(self, x):
            h = tf.tanh(tf.tile(x, [1, 2])[:, :6] + 0.9 * self.h)
            self.h.assign(h)
            return {"y": 2.0 * h}

    module = Step()
    path, out = tmp_path / "variable_state", tmp_path / "lib"
    tf.saved_model.save(module, str(path), signatures={"serving_default": module.step})
    xs = np.random.default_rng(0).normal(size=(STEPS, 1, 4)).astype(np.float32)
    want = _saved_steps(path, xs)
    assert main(["build", str(path), "-o", str(out)]) == 0
    assert "keeps the 1 variable(s) its call assigns" in capsys.readouterr().err
    manifest = json.loads(next(out.glob("*.json")).read_text())
    assert [s["shape"] for s in manifest["state"]] == [[1, 6]]
    lib = harness.load(out)
    err = float(np.abs(lib.step_n(xs) - want).max())
    assert err <= 1e-5, err
    lib.reset()  # (the saved value again: the first step as the SavedModel's first call)
    np.testing.assert_allclose(lib.step(xs[0]), want[0], atol=1e-6)
    assert main(["verify", str(path), str(out), "--steps", str(STEPS)]) == 0


def test_a_scalar_variable_state(tmp_path, capsys):
    """A step that keeps a scalar (rank 0) tf.Variable, a gain it updates:
    iree-compile failed on the reset function ('stablehlo.is_finite' op
    result must be of bools: its mask was typed tensor<f32>)."""
    import tensorflow as tf

    class Step(tf.Module):
        def __init__(self):
            self.g = tf.Variable(0.5, trainable=False)

        @tf.function(input_signature=[tf.TensorSpec((1, 4), tf.float32)])
        def step(self, x):
            g = 0.9 * self.g + 0.1 * tf.reduce_mean(tf.abs(x))
            self.g.assign(g)
            return {"y": x * g}

    module = Step()
    path, out = tmp_path / "scalar_state", tmp_path / "lib"
    tf.saved_model.save(module, str(path), signatures={"serving_default": module.step})
    xs = np.random.default_rng(1).normal(size=(STEPS, 1, 4)).astype(np.float32)
    want = _saved_steps(path, xs)
    assert main(["build", str(path), "-o", str(out), "-q"]) == 0
    manifest = json.loads(next(out.glob("*.json")).read_text())
    assert [s["shape"] for s in manifest["state"]] == [[]]
    lib = harness.load(out)
    np.testing.assert_allclose(lib.step_n(xs), want, atol=1e-6)
    assert main(["verify", str(path), str(out), "--steps", str(STEPS)]) == 0


def test_an_int32_variable_state_is_said_to_stay_io(tmp_path, capsys):
    """A step counting its frames in an int32 tf.Variable: tfaot keeps
    float32 state only, so the variable stays a step input and output; the
    note said it was kept as the library's state."""
    import tensorflow as tf

    class Step(tf.Module):
        def __init__(self):
            self.n = tf.Variable([0], trainable=False)

        @tf.function(input_signature=[tf.TensorSpec((1, 3), tf.float32)])
        def step(self, x):
            n = self.n + 1
            self.n.assign(n)
            return {"y": x * tf.cast(n, tf.float32)[:, None]}

    module = Step()
    path, out = tmp_path / "counter", tmp_path / "lib"
    tf.saved_model.save(module, str(path), signatures={"serving_default": module.step})
    assert main(["build", str(path), "-o", str(out)]) == 0
    err = capsys.readouterr().err
    assert "keeps the" not in err and "stay step inputs and outputs" in err, err
    manifest = json.loads(next(out.glob("*.json")).read_text())
    assert manifest["state"] == [] and len(manifest["inputs"]) == 2, manifest["inputs"]


@pytest.mark.parametrize("write", ["assign_add", "assign"])
def test_a_counter_by_assign_add_is_refused_with_the_form_that_builds(write, tmp_path, capsys):
    """A frame counter kept with assign_add is refused; the message named
    the plain assign of the other variable, not the assign_add, and did not
    say how to write it. Written as it says (the new value assigned and
    used), the step builds and verifies."""
    import tensorflow as tf

    class Step(tf.Module):
        def __init__(self):
            self.h = tf.Variable(tf.zeros((1, 3)), trainable=False)
            self.n = tf.Variable([0.0], trainable=False)

        @tf.function(input_signature=[tf.TensorSpec((1, 3), tf.float32)])
        def step(self, x):
            h = tf.tanh(x + 0.5 * self.h)
            self.h.assign(h)
            if write == "assign_add":
                self.n.assign_add([1.0])
                return {"y": h * self.n}
            n = self.n + 1.0
            self.n.assign(n)
            return {"y": h * n}

    module = Step()
    path, out = tmp_path / "counter", tmp_path / "lib"
    tf.saved_model.save(module, str(path), signatures={"serving_default": module.step})
    code = main(["build", str(path), "-o", str(out), "-q"])
    if write == "assign_add":
        err = capsys.readouterr().err
        assert code == 1 and "AssignAddVariableOp" in err and "v.assign(new)" in err, err
        return
    assert code == 0
    assert main(["verify", str(path), str(out), "--steps", "100"]) == 0


def test_variable_state_beside_a_captured_tensor(tmp_path, capsys):
    """A step keeping its state in a tf.Variable and multiplying by a
    tensor the module made in __init__ (a mel matrix, say): the tensor is a
    capture of the call, which was taken for one of its inputs ("input '68:0'
    has shape 4x3 in the graph, not 1x3")."""
    import tensorflow as tf

    class Step(tf.Module):
        def __init__(self):
            self.w = tf.constant(np.random.default_rng(2).normal(size=(4, 3)).astype(np.float32))
            self.h = tf.Variable(tf.zeros([1, 3]), trainable=False)

        @tf.function(input_signature=[tf.TensorSpec([1, 4], tf.float32, name="x")])
        def step(self, x):
            h = tf.tanh(x @ self.w + 0.5 * self.h)
            self.h.assign(h)
            return {"y": h}

    module = Step()
    path, out = tmp_path / "captured", tmp_path / "lib"
    tf.saved_model.save(module, str(path), signatures={"serving_default": module.step})
    xs = np.random.default_rng(3).normal(size=(STEPS, 1, 4)).astype(np.float32)
    want = _saved_steps(path, xs)
    assert main(["build", str(path), "-o", str(out), "-q"]) == 0
    np.testing.assert_allclose(harness.load(out).step_n(xs), want, atol=1e-6)


def test_a_read_after_the_assign_is_refused_clearly(tmp_path, capsys):
    """A step that returns its variable after assigning it (the read sees
    the new value): not a state this rewrite can hoist; one line that says
    so and names the form tfaot takes, no TensorFlow internals, no folder."""
    import tensorflow as tf

    class Step(tf.Module):
        def __init__(self):
            self.h = tf.Variable(tf.zeros((1, 6)), trainable=False)

        @tf.function(input_signature=[tf.TensorSpec((1, 4), tf.float32)])
        def step(self, x):
            self.h.assign(tf.tanh(tf.tile(x, [1, 2])[:, :6] + self.h))
            return {"y": self.h.read_value() * 2.0}

    module = Step()
    path = tmp_path / "variable_state"
    tf.saved_model.save(module, str(path), signatures={"serving_default": module.step})
    assert main(["build", str(path), "-o", str(tmp_path / "lib")]) == 1
    err = capsys.readouterr().err
    assert "keeps state in a tf.Variable" in err and "--state IN=OUT" in err, err
    assert "resource" not in err and not (tmp_path / "lib").exists()


def test_stateful_tf_keras_saved_models_build(tmp_path):
    """tf_keras models exported as SavedModels with their state in
    variables: a stateful GRU over an open time axis (its loop keeps the
    state: one frame a step), and a keyword-spotting "internal state"
    stream (a ring buffer variable in front of each Conv1D, one frame a
    call). Each was refused ("keeps state in a tf.Variable"); each equals
    the SavedModel called on the same frames, through the library, from the
    state saved (the GRU's loop started from zeros)."""
    import tensorflow as tf
    import tf_keras

    L = tf_keras.layers
    tf.random.set_seed(3)
    inp = tf_keras.Input((None, 5), batch_size=1)
    gru = L.GRU(8, return_sequences=True, stateful=True)(inp)
    model = tf_keras.Model(inp, L.Dense(2)(gru))
    model(np.ones((1, 4, 5), np.float32))  # its saved state not zeros: the stream's start
    model.save(tmp_path / "gru", save_format="tf")
    xs = np.random.default_rng(1).normal(size=(1, 60, 5)).astype(np.float32)
    key = next(iter(tf.saved_model.load(str(tmp_path / "gru")).signatures[
        "serving_default"].structured_input_signature[1]))
    want = _saved_steps(tmp_path / "gru", [xs], key)[0, 0]  # one call on all 60 frames
    out = tmp_path / "gru_lib"
    assert main(["build", str(tmp_path / "gru"), "-o", str(out), "-q"]) == 0
    got = harness.load(out).step_n(np.swapaxes(xs, 0, 1)).reshape(60, 2)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)

    class StreamConv(L.Layer):
        """A Conv1D over a ring buffer variable of its last k frames."""

        def __init__(self, filters, k, **kwargs):
            super().__init__(**kwargs)
            self.k, self.conv = k, L.Conv1D(filters, k)

        def build(self, shape):
            self.frames = self.add_weight(name="states", shape=(1, self.k, shape[-1]),
                                          trainable=False, initializer="zeros")

        def call(self, x):
            window = tf.concat([self.frames[:, 1:], x], axis=1)
            with tf.control_dependencies([self.frames.assign(window)]):
                return self.conv(window)

    inp = tf_keras.Input(batch_shape=(1, 1, 8))
    h = StreamConv(6, 3)(L.ReLU()(StreamConv(12, 3)(inp)))
    model = tf_keras.Model(inp, L.Dense(2)(h))
    tf.saved_model.save(model, str(tmp_path / "kws"))
    xs = np.random.default_rng(2).normal(size=(STEPS, 1, 1, 8)).astype(np.float32)
    key = next(iter(tf.saved_model.load(str(tmp_path / "kws")).signatures[
        "serving_default"].structured_input_signature[1]))
    want = _saved_steps(tmp_path / "kws", xs, key)
    out = tmp_path / "kws_lib"
    assert main(["build", str(tmp_path / "kws"), "-o", str(out), "-q"]) == 0
    err = float(np.abs(harness.load(out).step_n(xs) - want).max())
    assert err <= 1e-5, err


def test_explicit_pairs_and_errors(step_graph, tmp_path, capsys):
    out = tmp_path / "one"
    assert main(["build", str(step_graph), "-o", str(out),
                 "--state", "previous_state_c=new_state_c"]) == 0
    manifest = json.loads((out / "ds.json").read_text())
    assert [s["name"] for s in manifest["state"]] == ["previous_state_c"]
    assert {i["name"] for i in manifest["inputs"]} == {"input_node", "previous_state_h"}
    # (the header said "each step is one whole inference" of a step with state)
    assert "its state kept from the step before" in (out / "ds.h").read_text()
    assert main(["verify", str(step_graph), str(out), "--steps", "100"]) == 0
    for pair, words in (("previous_state_c=logits", "is float32 (1, 16) but output 'logits'"),
                        ("nothing=logits", "'nothing' is not an input"),
                        ("previous_state_c", "is not INPUT=OUTPUT")):
        bad = tmp_path / "bad"
        capsys.readouterr()
        assert main(["build", str(step_graph), "-o", str(bad), "--state", pair]) != 0
        err = capsys.readouterr().err
        assert words in err and "Traceback" not in err, err
        assert not bad.exists()


def test_state_pairs_survive_a_cut_that_names_the_steps_own_io(step_graph, tmp_path, capsys):
    """--inputs/--outputs name the step's own tensors; the --state pairs'
    are kept by the cut (they were cut away: "'new_state_c' is not an
    output"), and verify, which reads the cut from the manifest, agrees."""
    out = tmp_path / "cut"
    flags = ["--inputs", "input_node", "--outputs", "logits",
             "--state", "previous_state_c=new_state_c,previous_state_h=new_state_h"]
    assert main(["build", str(step_graph), "-o", str(out), *flags]) == 0
    manifest = json.loads((out / "ds.json").read_text())
    assert [i["name"] for i in manifest["inputs"]] == ["input_node"]
    assert [o["name"] for o in manifest["outputs"]] == ["logits"]
    assert [s["name"] for s in manifest["state"]] == ["previous_state_c", "previous_state_h"]
    xs = np.random.default_rng(1).normal(size=(STEPS, 1, 10)).astype(np.float32)
    np.testing.assert_allclose(harness.load(out).step_n(xs), _run_graph(_step_graph(), xs),
                               rtol=0, atol=1e-5)
    capsys.readouterr()
    assert main(["verify", str(step_graph), str(out), "--steps", str(STEPS)]) == 0


def _sig(inputs, outputs):
    def t(name):
        return TensorInfo(name, "float32", (1, 8))
    return ProgramSignature(tuple(map(t, inputs)), tuple(map(t, outputs)), ())


@pytest.mark.parametrize("inputs,outputs,pairs", [
    (["x", "previous_state_c", "previous_state_h"], ["y", "new_state_c", "new_state_h"],
     [("previous_state_c", "new_state_c"), ("previous_state_h", "new_state_h")]),
    (["feats", "h_in"], ["probs", "h_out"], [("h_in", "h_out")]),
    (["audio", "state_in"], ["out", "state_out"], [("state_in", "state_out")]),
    (["x", "prev/state"], ["y", "next/state"], [("prev/state", "next/state")]),
    (["x", "bias_in"], ["y", "bias_out"], []),  # not named a state
    (["x", "hidden"], ["y", "hidden"], []),  # the same name is not a pair
    # Silero VAD's and PyTorch's names: state -> stateN, h -> hn, c -> cn
    (["input", "state", "sr"], ["output", "stateN"], [("state", "stateN")]),
    (["x", "h", "c"], ["y", "hn", "cn"], [("h", "hn"), ("c", "cn")]),
    (["x", "bias"], ["y", "biasn"], []),  # not named a state
])
def test_found_pairs(inputs, outputs, pairs):
    assert find_pairs(_sig(inputs, outputs)) == pairs


def test_parse_pairs():
    assert parse_pairs(None) is None
    assert parse_pairs("a:0=b, c=d:0") == [("a", "b"), ("c", "d")]


def _vad_step(path, step):
    """A SavedModel of ``step(input[1, 20], state[1, 32], sr)``, Silero VAD's
    signature (its sample rate a scalar int64)."""
    import tensorflow as tf

    class Step(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([1, 20], tf.float32, name="input"),
                                      tf.TensorSpec([1, 32], tf.float32, name="state"),
                                      tf.TensorSpec([], tf.int64, name="sr")])
        def __call__(self, x, state, sr):
            return step(x, state, sr)

    model = Step()
    tf.saved_model.save(model, str(path), signatures=model.__call__)
    return path


def test_a_signature_input_no_output_reads_is_left_out(tmp_path, capsys):
    """Silero VAD's step signature: (input, state, sr), where this step does
    not read the sample rate. Freezing prunes 'sr', and the first run of the
    graph failed feeding it ('The name 'sr:0' refers to a Tensor which does
    not exist'). The library takes input and state, the build says why."""
    import tensorflow as tf

    rng = np.random.default_rng(3)
    w = tf.constant(rng.normal(0, 0.3, (52, 32)).astype(np.float32))
    v = tf.constant(rng.normal(0, 0.3, (32, 1)).astype(np.float32))

    def step(x, state, sr):
        h = tf.tanh(tf.concat([x, state], -1) @ w)
        return {"output": tf.sigmoid(h @ v), "stateN": h}

    path = _vad_step(tmp_path / "vad", step)
    out = tmp_path / "lib"
    assert main(["build", str(path), "-o", str(out), "--state", "state=stateN"]) == 0
    assert "no output reads input(s) 'sr'" in capsys.readouterr().err
    manifest = json.loads((out / "vad.json").read_text())
    assert [i["name"] for i in manifest["inputs"]] == ["input"], manifest["inputs"]
    assert main(["verify", str(path), str(out), "--steps", "120"]) == 0
    assert ": ok" in capsys.readouterr().out


def test_a_step_that_branches_on_a_scalar_input_builds(tmp_path, capsys):
    """Silero VAD picks its 8 or 16 kHz branch with a tf.cond on its scalar
    'sr' input. A SavedModel with a tf.cond was an internal error (its
    frozen branches clashed with the loaded model's functions of the same
    names), and a scalar input made invalid MLIR (tensor<xi64>)."""
    import tensorflow as tf

    rng = np.random.default_rng(4)
    w = tf.constant(rng.normal(0, 0.3, (52, 32)).astype(np.float32))

    def step(x, state, sr):
        x = tf.cond(sr > 12000, lambda: x, lambda: x * 0.5)
        h = tf.tanh(tf.concat([x, state], -1) @ w)
        return {"output": tf.reduce_mean(h, -1, keepdims=True), "stateN": h}

    path = _vad_step(tmp_path / "vad", step)
    out = tmp_path / "lib"
    # (in a process of its own: in this one TensorFlow already holds the
    # branches as traced here, and the clash does not show)
    run([sys.executable, "-m", "tfaot", "-q", "build", path, "-o", out,
         "--state", "state=stateN"], cwd=tmp_path)
    assert "int64_t sr[1];" in (out / "vad.h").read_text()
    lib = harness.load(out)
    lib.init()
    x = rng.normal(size=(1, 20)).astype(np.float32)
    fast, slow = (float(np.ravel(lib.step((x, np.array(sr, np.int64))))[0])
                  for sr in (16000, 8000))
    assert fast != slow  # (each branch taken: the state moved between, too)
    capsys.readouterr()
    assert main(["verify", str(path), str(out), "--steps", "120"]) == 0
    assert ": ok" in capsys.readouterr().out


def test_a_time_loop_started_from_state_inputs_streams(tmp_path, capsys):
    """A TF1 dynamic_rnn whose initial state is previous_state_c/h (fed back
    by the caller, new_state_c/h out), as DeepSpeech-style graphs export it:
    refused ("the initial value of state ... depends on the input"). The
    loop's state is the stream's now, from zeros at reset."""
    import tensorflow as tf

    import graph_models

    tf1, cells = tf.compat.v1, graph_models.legacy_cells()
    graph = tf.Graph()
    with graph.as_default():
        x = tf1.placeholder(tf.float32, [1, None, 6], name="input_node")
        c0 = tf1.placeholder(tf.float32, [1, 8], name="previous_state_c")
        h0 = tf1.placeholder(tf.float32, [1, 8], name="previous_state_h")
        cell = cells.LSTMCell(8, initializer=tf1.glorot_uniform_initializer(seed=1))
        outs, final = tf1.nn.dynamic_rnn(cell, x, initial_state=cells.LSTMStateTuple(c0, h0))
        w = tf.constant(np.random.default_rng(5).normal(size=(8, 3)).astype(np.float32))
        tf.identity(tf.einsum("btf,fg->btg", outs, w), name="logits")
        tf.identity(final.c, name="new_state_c")
        tf.identity(final.h, name="new_state_h")
        with tf1.Session() as session:
            session.run(tf1.global_variables_initializer())
            frozen = tf1.graph_util.convert_variables_to_constants(
                session, graph.as_graph_def(), ["logits", "new_state_c", "new_state_h"])
    path = tmp_path / "ds.pb"
    path.write_bytes(frozen.SerializeToString())
    out = tmp_path / "lib"
    assert main(["build", str(path), "-o", str(out)]) == 0
    assert "keeps the time loop's state that input(s) 'previous_state_c'" in \
        capsys.readouterr().err
    manifest = json.loads((out / "ds.json").read_text())
    assert [i["name"] for i in manifest["inputs"]] == ["input_node"], manifest["inputs"]
    assert main(["verify", str(path), str(out), "--steps", "120"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 3 and all(": ok" in line for line in lines), lines


def test_an_exported_initial_state_input_is_named_with_its_pair(tmp_path, capsys):
    """A Keras export whose GRU starts from an input h0 (initial_state):
    the refusal named the export's inner identity of it ('Func/.../input/
    _12:0'); it names input 'h0' and the --state pair to give, which
    builds."""
    import keras

    keras.utils.set_random_seed(47)
    x = keras.Input((None, 4), batch_size=1, name="x")
    h0 = keras.Input((8,), batch_size=1, name="h0")
    y, h = keras.layers.GRU(8, return_sequences=True, return_state=True)(x, initial_state=h0)
    path, out = tmp_path / "sm", tmp_path / "lib"
    keras.Model([x, h0], [keras.layers.Dense(2)(y), h]).export(str(path), verbose=False)
    assert main(["build", str(path), "-o", str(out), "-q"]) == 1
    err = capsys.readouterr().err
    assert "(input 'h0')" in err and "--state h0=OUT" in err, err
    assert main(["build", str(path), "-o", str(out), "-q", "--state", "h0=output_1"]) == 0
    capsys.readouterr()
    assert main(["verify", str(path), str(out), "--steps", "100"]) == 0


def test_an_initial_state_computed_from_a_conditioning_input_names_no_state_pair(tmp_path,
                                                                                  capsys):
    """A GRU's initial_state = Dense(cond), exported with model.export: its
    loop's initial state is computed from an input without a time axis, so
    there is no state input to pair, and the refusal's "--state IN=OUT, OUT
    the output that returns the final state" could not be followed. It says
    what the value is and that the Keras file streams it."""
    import keras

    seq = keras.Input((None, 5), batch_size=1, name="frames")
    cond = keras.Input((3,), batch_size=1, name="speaker")
    h0 = keras.layers.Dense(6, activation="tanh")(cond)
    y = keras.layers.GRU(6, return_sequences=True)(seq, initial_state=[h0])
    keras.Model([seq, cond], y).export(str(tmp_path / "sm"), verbose=False)
    assert main(["build", str(tmp_path / "sm"), "-o", str(tmp_path / "lib")]) == 1
    err = capsys.readouterr().err
    assert "is computed from an input without a time axis" in err, err
    assert "name its pair" not in err and "build the .keras file" in err, err
