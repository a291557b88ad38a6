"""Graphs that cannot be streamed: the error names the node and op at fault."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import graph_models as gm
from tfaot.errors import TfaotError


def _keras(layers):
    import keras

    keras.utils.set_random_seed(0)
    return keras.Sequential([keras.Input((None, 8))] + layers)


def _cases():
    import keras

    L = keras.layers
    return {
        "bidirectional": (lambda: _keras([L.Bidirectional(L.LSTM(8, return_sequences=True))]),
                          ["ReverseV2", "bidirectional", "backward_lstm",
                           "reverses the time axis", "frames not yet received"]),
        "conv1d_causal": (lambda: _keras([L.Conv1D(4, 3, padding="causal"), L.LSTM(8)]),
                          ["conv1d", "Pad"]),
        # (a same conv streams late, tests/test_same_padding_late.py; a
        # last output after it cannot)
        "conv1d_same": (lambda: _keras([L.Conv1D(4, 3, padding="same"), L.LSTM(8)]),
                        ["lstm", "TensorListStack", "padding='same' in time"]),
        "avg_pool": (lambda: _keras([L.LSTM(8, return_sequences=True),
                                     L.GlobalAveragePooling1D()]),
                     ["global_average_pooling1d", "Mean", "time axis"]),
    }


# (causal convolution and global pooling over an open time axis stream since
# issue 10: tests/test_graph_streaming_conv.py)
CASES = ["bidirectional", "conv1d_same"]


@pytest.mark.parametrize("timesteps", [30, None])
@pytest.mark.parametrize("case", CASES)
def test_time_mixing_op_is_rejected_with_node_name(case, timesteps):
    from tfaot.frontend.load_graph import graph_def_to_loaded
    from tfaot.streamify_graph import streamify_graph

    build, words = _cases()[case]
    gd = gm.freeze_keras(build(), timesteps, 8, False)
    loaded = graph_def_to_loaded(gd, Path(f"{case}.pb"), "graphdef")
    with pytest.raises(TfaotError) as e:
        streamify_graph(loaded)
    msg = str(e.value)
    assert msg.startswith(f"{case}.pb: node '")
    for w in words:
        assert w in msg, msg


def test_initial_state_from_input_is_rejected():
    import keras

    from tfaot.frontend.load_graph import graph_def_to_loaded
    from tfaot.streamify_graph import streamify_graph

    keras.utils.set_random_seed(0)
    x = keras.Input((None, 8))
    h0 = keras.layers.Dense(6)(x[:, 0])
    y = keras.layers.GRU(6)(x, initial_state=[h0])
    gd = gm.freeze_keras(keras.Model(x, y), 12, 8, False)
    loaded = graph_def_to_loaded(gd, Path("init.pb"), "graphdef")
    with pytest.raises(TfaotError) as e:
        streamify_graph(loaded)
    msg = str(e.value)
    assert "init.pb" in msg and ("strided_slice" in msg or "initial value" in msg), msg


def test_two_inputs_become_two_step_inputs():
    """Several inputs are supported (issue 11 item 5; tests/test_multi_input.py):
    both placeholders become step inputs, in the graph's order."""
    import tensorflow as tf

    from tfaot.frontend.load_graph import graph_def_to_loaded
    from tfaot.streamify_graph import streamify_graph

    g = tf.Graph()
    with g.as_default():
        a = tf.compat.v1.placeholder(tf.float32, (1, None, 3), name="a")
        b = tf.compat.v1.placeholder(tf.float32, (1, None, 3), name="b")
        tf.identity(a + b, name="out")
    loaded = graph_def_to_loaded(g.as_graph_def(), Path("two.pbtxt"), "graphdef")
    program = streamify_graph(loaded, notify=False)
    assert [(t.name, t.shape) for t in program.signature.inputs] == [("a", (1, 3)),
                                                                       ("b", (1, 3))]


def _loop_graph_error(name: str, step) -> str:
    """The streaming error of a graph whose while loop over x (1, T, 3) sets
    h = step(t, h, x, read) each frame (``read(t)``: frame t from a
    TensorArray) and stacks the h's as y."""
    import tensorflow as tf

    from tfaot.frontend.load_graph import graph_def_to_loaded
    from tfaot.streamify_graph import streamify_graph

    g = tf.Graph()
    with g.as_default():
        x = tf.compat.v1.placeholder(tf.float32, (1, None, 3), name="x")
        xs = tf.transpose(x, [1, 0, 2])
        T = tf.shape(xs)[0]
        ta_in = tf.TensorArray(tf.float32, size=T).unstack(xs)

        def body(t, h, ta):
            h = step(t, h, x, ta_in.read)
            return t + 1, h, ta.write(t, h)

        _, _, ta = tf.while_loop(lambda t, *_: t < T, body,
                                 [0, tf.zeros((1, 3)), tf.TensorArray(tf.float32, size=T)])
        tf.identity(ta.stack(), name="y")
    loaded = graph_def_to_loaded(g.as_graph_def(), Path(name), "graphdef")
    with pytest.raises(TfaotError) as e:
        streamify_graph(loaded)
    return str(e.value)


def test_loop_counter_used_in_the_math_is_rejected():
    """A body that uses the time index as a value would need a step counter."""
    import tensorflow as tf

    def step(t, h, x, read):
        return tf.tanh(h + read(t) * tf.cast(t, tf.float32, name="position"))

    msg = _loop_graph_error("pos.pb", step)
    assert "pos.pb" in msg and "position" in msg and "counter" in msg, msg


def test_matmul_over_time_is_rejected():
    import keras
    import tensorflow as tf
    from tensorflow.python.framework.convert_to_constants import (
        convert_variables_to_constants_v2,
    )

    from tfaot.frontend.load_graph import graph_def_to_loaded
    from tfaot.streamify_graph import streamify_graph

    keras.utils.set_random_seed(0)
    lstm = keras.layers.LSTM(6, return_sequences=True)
    cf = tf.function(lambda v: tf.matmul(tf.transpose(lstm(v), [0, 2, 1]), tf.ones((30, 2)),
                                         name="time_matmul")).get_concrete_function(
        tf.TensorSpec((1, 30, 8), tf.float32, name="x"))
    gd = convert_variables_to_constants_v2(cf, lower_control_flow=False).graph.as_graph_def()
    with pytest.raises(TfaotError) as e:
        streamify_graph(graph_def_to_loaded(gd, Path("tm.pb"), "graphdef"))
    assert "time_matmul" in str(e.value) and "BatchMatMulV2" in str(e.value)


@pytest.mark.parametrize("timesteps", [30, None])
def test_values_from_the_sequence_length_are_rejected(timesteps):
    """A position ramp (from tf.shape or a T-sized constant) cannot be streamed."""
    import keras
    import tensorflow as tf
    from tensorflow.python.framework.convert_to_constants import (
        convert_variables_to_constants_v2,
    )

    from tfaot.frontend.load_graph import graph_def_to_loaded
    from tfaot.streamify_graph import streamify_graph

    keras.utils.set_random_seed(0)
    lstm = keras.layers.LSTM(6, return_sequences=True)

    def fn(v):
        pos = tf.cast(tf.range(tf.shape(v)[1]), tf.float32)[None, :, None]
        return tf.add(lstm(v), pos, name="add_position")

    cf = tf.function(fn).get_concrete_function(tf.TensorSpec((1, timesteps, 8), tf.float32,
                                                             name="x"))
    gd = convert_variables_to_constants_v2(cf, lower_control_flow=False).graph.as_graph_def()
    with pytest.raises(TfaotError) as e:
        streamify_graph(graph_def_to_loaded(gd, Path("pos.pb"), "graphdef"))
    msg = str(e.value)
    assert "add_position" in msg and ("sequence length" in msg or "along the time axis" in msg)


def _python_function_graph(kind: str):
    """A graph whose work calls back into Python (outside or inside the time loop)."""
    import tensorflow as tf

    g = tf.Graph()
    with g.as_default():
        x = tf.compat.v1.placeholder(tf.float32, (1, None, 3) if kind == "in_loop" else (1, 3),
                                     name="x")
        if kind == "in_loop":
            xs = tf.transpose(x, [1, 0, 2])
            T = tf.shape(xs)[0]
            ta_in = tf.TensorArray(tf.float32, size=T).unstack(xs)

            def body(t, h, ta):
                h = tf.py_function(lambda a, b: tf.tanh(a + b), [h, ta_in.read(t)],
                                   tf.float32, name="py_cell")
                h.set_shape((1, 3))
                return t + 1, h, ta.write(t, h)

            _, _, ta = tf.while_loop(lambda t, *_: t < T, body,
                                     [0, tf.zeros((1, 3)), tf.TensorArray(tf.float32, size=T)])
            tf.identity(ta.stack(), name="y")
        else:
            fn = tf.py_function if kind == "py_function" else tf.numpy_function
            y = fn(lambda v: v * 2, [x], tf.float32, name="py_double")
            tf.identity(tf.tanh(y), name="y")
    return g.as_graph_def()


@pytest.mark.parametrize("kind", ["py_function", "numpy_function", "in_loop"])
def test_python_function_is_rejected_with_the_reason(kind):
    """Issue 12b: the message names the node and says why it cannot be compiled."""
    from tfaot.frontend.load_graph import graph_def_to_loaded
    from tfaot.streamify_graph import streamify_graph

    loaded = graph_def_to_loaded(_python_function_graph(kind), Path("py.pb"), "graphdef")
    with pytest.raises(TfaotError) as e:
        streamify_graph(loaded)
    msg = str(e.value)
    assert msg.startswith("py.pb: node '"), msg
    assert ("py_cell" if kind == "in_loop" else "py_double") in msg, msg
    assert "Python function" in msg and "cannot be compiled" in msg, msg
    assert "tf.py_function" in msg and "tf.numpy_function" in msg, msg


def test_loop_reading_a_window_of_its_input_names_the_slice():
    """x[:, t:t + 2] inside a while loop (two frames an iteration; x[:, t]
    streams: test_graph_frame_reads.py): the error names the slice and the
    form tfaot streams, not just the counter."""
    import tensorflow as tf

    msg = _loop_graph_error("slice.pb", lambda t, h, x, read: tf.tanh(
        h + tf.reduce_sum(x[:, t:t + 2], axis=1)))
    assert "StridedSlice" in msg and "x[:, t]" in msg and "TensorArray" in msg, msg


def test_an_op_of_unknown_time_behaviour_is_named_as_unsupported():
    import tensorflow as tf

    from tfaot.frontend.load_graph import graph_def_to_loaded
    from tfaot.streamify_graph import streamify_graph

    g = tf.Graph()
    with g.as_default():
        x = tf.compat.v1.placeholder(tf.float32, (1, None, 3), name="x")
        tf.identity(tf.raw_ops.Bucketize(input=x, boundaries=[0.0, 1.0], name="levels"),
                    name="y")
    loaded = graph_def_to_loaded(g.as_graph_def(), Path("b.pb"), "graphdef")
    with pytest.raises(TfaotError) as e:
        streamify_graph(loaded)
    msg = str(e.value)
    assert "levels" in msg and "Bucketize" in msg and "does not know how it treats" in msg, msg


@pytest.mark.parametrize("op, length, refused", [("rfft", 40, False), ("rfft", 64, False),
                                                  ("rfft", 1500, False), ("irfft", 40, False),
                                                  ("rfft", 1031, True), ("irfft", 2053, True),
                                                  ("rfft2d", 40, True)])
def test_fft_of_a_length_iree_cannot_compile_is_named(tmp_path, op, length, refused):
    """iree-compile failed deep inside on an FFT of 40 points; the load names
    the node and says what to do. A power-of-two FFT passes (IREE compiles
    those), and so does a 1-D real FFT that lower/dft.py writes out (an MFCC
    front end's DCT: tests/test_dft.py): not a prime past 1024, whose DFT
    matrix is too big, nor a 2-D one."""
    import tensorflow as tf

    from tfaot.frontend.load_graph import load_graph

    g = tf.Graph()
    with g.as_default():
        x = tf.compat.v1.placeholder(tf.float32, (1, 10, length), name="x")
        fft = {"rfft": tf.signal.rfft, "irfft": tf.signal.irfft,
               "rfft2d": tf.signal.rfft2d}[op]
        lengths = [length, length] if op == "rfft2d" else [length]
        tf.abs(fft(tf.complex(x, x) if op == "irfft" else x, fft_length=lengths,
                   name="spectrum"), name="y")
    path = tmp_path / "fft.pb"
    path.write_bytes(g.as_graph_def().SerializeToString())
    if not refused:
        assert load_graph(path).graph_def is not None
        return
    with pytest.raises(TfaotError) as e:
        load_graph(path)
    msg = str(e.value)
    assert f"'spectrum' ({op.upper()})" in msg and f"length {length}" in msg, msg
    assert "--inputs" in msg, msg


def test_a_saved_model_returning_strings_says_which_outputs_to_keep(tmp_path):
    """tensorflow.org's audio ExportModel returns its class names (strings
    looked up by the argmax) beside the numbers: refused naming that output
    and the --outputs that leaves it out (it was "node 'Identity_1' is
    referenced but not in the graph"), which builds."""
    import tensorflow as tf

    from tfaot.cli import main
    from tfaot.frontend.load import load_model
    from tfaot.frontend.load_graph import GraphOptions

    class Labels(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec((1, 16), tf.float32)])
        def f(self, x):
            scores = tf.matmul(x, tf.ones([16, 3]) / 16)
            ids = tf.argmax(scores, axis=-1)
            return {"scores": scores, "ids": ids,
                    "names": tf.gather(tf.constant(["down", "go", "up"]), ids)}

    module = Labels()
    tf.saved_model.save(module, str(tmp_path / "sm"), signatures={"serving_default": module.f})
    with pytest.raises(TfaotError, match=r"output 'names' is a tensor of strings, which a C "
                       r"library cannot return; leave it out with --outputs ids,scores"):
        load_model(tmp_path / "sm")
    assert load_model(tmp_path / "sm", GraphOptions(outputs="ids,scores")).graph.output_names \
        == ["ids", "scores"]
    assert main(["build", str(tmp_path / "sm"), "-o", str(tmp_path / "lib"), "-q",
                 "--outputs", "ids,scores"]) == 0


def test_a_saved_model_taking_strings_is_refused_at_load(tmp_path):
    """A signature input of strings (a text model): one line naming the
    input, as for a frozen graph's string placeholder (the SavedModel's
    inputs skipped that check, and the probe crashed on the dtype)."""
    import tensorflow as tf

    from tfaot.frontend.load import load_model

    class Lengths(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec((None,), tf.string)])
        def f(self, text):
            return {"n": tf.strings.length(text)}

    module = Lengths()
    tf.saved_model.save(module, str(tmp_path / "sm"), signatures={"serving_default": module.f})
    with pytest.raises(TfaotError) as e:
        load_model(tmp_path / "sm")
    msg = str(e.value)
    assert "input 'text' is a string placeholder" in msg and "numeric" in msg, msg


def test_non_max_suppression_suggests_the_cut_before_it(tmp_path):
    """A detector's post-processing (NonMaxSuppressionV3) has no StableHLO
    lowering: the error names the node and says to build up to the boxes
    and scores with --outputs; built so, the network's head builds."""
    import tensorflow as tf

    from tfaot.pipeline import BuildOptions, Progress, build_model

    class Detector(tf.Module):
        def __init__(self):
            self.w = tf.Variable(tf.random.stateless_normal([3, 3, 3, 5], seed=[1, 2]))

        @tf.function(input_signature=[tf.TensorSpec([1, 16, 16, 3], tf.float32, name="image")])
        def __call__(self, image):
            features = tf.nn.relu(tf.nn.conv2d(image, self.w, 2, "SAME"))
            boxes = tf.reshape(features[..., :4], [-1, 4])
            scores = tf.reshape(features[..., 4], [-1])
            keep = tf.image.non_max_suppression(boxes, scores, 10)
            return {"features": features, "boxes": tf.gather(boxes, keep)}

    module = Detector()
    tf.saved_model.save(module, str(tmp_path / "sm"), signatures=module.__call__)
    with pytest.raises(TfaotError) as e:
        build_model(str(tmp_path / "sm"), BuildOptions(out_dir=tmp_path / "all"), Progress(False))
    msg = str(e.value)
    assert "NonMaxSuppressionV3" in msg and "non_max_suppression" in msg, msg
    assert "post-processing" in msg and "--outputs" in msg, msg
    from tfaot.frontend.load_graph import GraphOptions

    build_model(str(tmp_path / "sm"), BuildOptions(
        out_dir=tmp_path / "head", graph_options=GraphOptions(outputs="features")),
        Progress(False))
    assert not (tmp_path / "all").exists()


def test_a_string_lookup_before_an_embedding_suggests_the_embeddings_output(tmp_path):
    """Words -> a lookup table -> ids -> an embedding (GatherV2) -> GRU: the
    cut to suggest is the embedding's output (the first float tensor); its
    dtype went unread (GatherV2 writes it as Tparams), and the GRU's
    transpose inside its loop was suggested, which did not build."""
    import tensorflow as tf

    from tfaot.frontend.load import load_model

    table = tf.lookup.StaticHashTable(tf.lookup.KeyValueTensorInitializer(
        tf.constant(["a", "b"]), tf.constant([0, 1], tf.int64)), default_value=0)
    embedding = tf.constant(np.ones((2, 4), np.float32))
    module = tf.Module()
    module.table = table

    @tf.function(input_signature=[tf.TensorSpec((1, None), tf.string)])
    def serve(words):
        vectors = tf.gather(embedding, table.lookup(words), name="Gather")
        return {"y": tf.tanh(tf.cumsum(vectors, axis=1))}

    tf.saved_model.save(module, str(tmp_path / "sm"), signatures={"serving_default": serve})
    with pytest.raises(TfaotError) as e:
        load_model(tmp_path / "sm")
    msg = str(e.value)
    assert "input 'words' is a string placeholder" in msg and "/Gather:" in msg, msg


def test_float64_inputs_and_outputs_are_refused_before_compiling(tmp_path, capsys):
    """IREE computes float64 as float32: a float64 input reached the package
    stage and failed as a type mismatch naming neither; the build now says
    which tensor, before import."""
    import tensorflow as tf

    from tfaot.cli import main

    g = tf.Graph()
    with g.as_default():
        x = tf.compat.v1.placeholder(tf.float64, (1, 4, 3), name="reading")
        tf.cast(tf.reduce_sum(x, axis=-1), tf.float32, name="y")
    path = gm.write_graph_def(g.as_graph_def(), tmp_path / "f64.pb", text=False)
    assert main(["build", str(path), "-o", str(tmp_path / "out"), "-q"]) == 1
    err = capsys.readouterr().err
    assert "input 'reading' is float64" in err and "float32" in err, err
    assert "import" not in err and not (tmp_path / "out").exists()


def test_a_float64_state_says_to_keep_the_recurrence_in_float32(tmp_path, capsys):
    """A float64 recurrence between float32 inputs and outputs was told to
    make the inputs and outputs float32, which they were."""
    import tensorflow as tf
    from tensorflow.python.framework.convert_to_constants import \
        convert_variables_to_constants_v2

    from tfaot.cli import main

    def fn(x):
        steps = tf.cast(tf.transpose(x, [1, 0, 2]), tf.float64)
        h = tf.scan(lambda h, xt: tf.tanh(h + xt), steps, initializer=tf.zeros([1, 3], tf.float64))
        return tf.cast(tf.transpose(h, [1, 0, 2]), tf.float32)

    spec = tf.TensorSpec([1, None, 3], tf.float32, name="x")
    graph = convert_variables_to_constants_v2(
        tf.function(fn, input_signature=[spec]).get_concrete_function()).graph
    path = gm.write_graph_def(graph.as_graph_def(), tmp_path / "f64.pb", text=False)
    assert main(["build", str(path), "-o", str(tmp_path / "out"), "-q"]) == 1
    err = capsys.readouterr().err
    assert "is float64" in err and "keep the recurrence in float32" in err, err
    assert "inputs and outputs" not in err


def test_a_saved_model_taking_a_ragged_tensor_says_so(tmp_path, capsys):
    """A ragged signature input reaches the graph as its values and row
    splits; the probe, feeding plain tensors, fails in a ragged op: the
    error says the model takes a ragged tensor and what to export instead
    (it named the op's shape mismatch only)."""
    import tensorflow as tf

    from tfaot.cli import main

    class Sums(tf.Module):
        @tf.function(input_signature=[tf.RaggedTensorSpec((None, None, 4), tf.float32, 1)])
        def f(self, r):
            return {"y": tf.reduce_sum(r, axis=1)}

    module = Sums()
    tf.saved_model.save(module, str(tmp_path / "sm"),
                        signatures={"serving_default": module.f.get_concrete_function()})
    assert main(["build", str(tmp_path / "sm"), "-o", str(tmp_path / "out"), "--quiet"]) != 0
    err = capsys.readouterr().err
    assert "takes a ragged tensor" in err and "tf.TensorSpec" in err, err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("axis", [1, 2])
def test_a_reverse_says_whether_it_reverses_time(axis):
    """tf.reverse over time (a backward RNN) was told as an op whose
    treatment of time tfaot does not know; over the features it streams,
    frame by frame (tests/test_graph_per_frame_ops.py)."""
    import tensorflow as tf

    from tfaot.frontend.load_graph import graph_def_to_loaded
    from tfaot.streamify_graph import streamify_graph

    g = tf.Graph()
    with g.as_default():
        x = tf.compat.v1.placeholder(tf.float32, (1, None, 3), name="x")
        tf.identity(tf.reverse(x, [axis], name="flip") * 2.0, name="y")
    loaded = graph_def_to_loaded(g.as_graph_def(), Path("r.pb"), "graphdef")
    if axis == 2:
        assert streamify_graph(loaded).signature.inputs[0].shape == (1, 3)
        return
    with pytest.raises(TfaotError) as e:
        streamify_graph(loaded)
    msg = str(e.value)
    assert "'flip'" in msg and "ReverseV2" in msg and "\n" not in msg, msg
    assert "reverses the time axis (axis 1 of input 'x')" in msg, msg


def test_a_keras_3_export_of_a_dropout_rnn_builds_without_its_seed(tmp_path):
    """Keras 3's LSTM(dropout=0.2) advances its dropout seed on every call,
    even at inference: its export was told it "keeps state in a tf.Variable"
    (then that it advances a seed, to build the .keras file instead). No
    output reads the seed: the export loads with no state of it (the
    variables a call assigns are state only where an output reads them)."""
    import keras

    from tfaot.frontend.load import load_model

    keras.utils.set_random_seed(0)
    x = keras.Input((None, 4))
    path = tmp_path / "dropout"
    keras.Model(x, keras.layers.LSTM(3, dropout=0.2)(x)).export(str(path), verbose=False)
    loaded = load_model(str(path))
    assert not loaded.graph.details.get("variable_state")
    assert not [n.name for n in loaded.graph.graph_def.node if "seed_generator" in n.name]


def test_whole_window_of_a_graph_with_a_time_loop_is_refused(tmp_path, capsys):
    """--whole-window on a frozen graph whose recurrence is a loop (a fixed
    T): refused naming the loop (it streamed, ignoring the flag)."""
    import keras

    from tfaot.cli import main

    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((12, 4), batch_size=1), keras.layers.GRU(3)])
    path = tmp_path / "gru12.pb"
    path.write_bytes(gm.freeze_keras(model, 12, 4, lower_control_flow=False)
                     .SerializeToString())
    assert main(["build", str(path), "--whole-window", "-o", str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err
    assert "--whole-window" in err and "loop" in err and "/while'" in err, err
    assert not (tmp_path / "out").exists()


def test_a_keras_3_export_of_time_distributed_says_what_to_build(tmp_path):
    """Keras 3's TimeDistributed over an open time axis is a tf.vectorized_map
    over an index, which TensorFlow leaves as a loop slicing x[t]; keras
    3.15 maps over the batch size there, not the frames (the SavedModel
    returns as many frames as the batch has samples): the error says so and
    names the two forms that build (the .keras file, a fixed number of
    frames)."""
    import keras

    from tfaot.pipeline import Progress, load_and_streamify

    keras.utils.set_random_seed(0)
    x = keras.Input((None, 6, 2))
    y = keras.layers.TimeDistributed(keras.layers.Flatten())(x)
    path = tmp_path / "td"
    keras.Model(x, keras.layers.GRU(3)(y)).export(str(path), verbose=False)
    with pytest.raises(TfaotError) as e:
        load_and_streamify(str(path), Progress(enabled=False))
    msg = str(e.value)
    assert "/pfor/while'" in msg and "tf.vectorized_map" in msg, msg
    assert ".keras file" in msg and "fixed number of frames" in msg and "\n" not in msg, msg
    assert "per sample of the batch, not per frame" in msg, msg


def test_axes_computed_from_constants_fold():
    """A perm or axis the graph computes from constants with ops
    tf.get_static_value does not fold (TF1's softmax over axis 1 writes its
    transpose's perm as ConcatV2(Range(0, Rank - 1), ...)) is a constant to
    the rules: it was refused as "must be a constant"."""
    import tensorflow as tf

    from tfaot.streamify_graph.replay import folded_value

    with tf.Graph().as_default():
        last = tf.constant(3) - tf.constant(1)
        perm = tf.concat([tf.range(0, last - 1), [last], tf.range(last - 1, last)], 0)
        assert tf.get_static_value(perm) is None
        assert folded_value(perm).tolist() == [0, 2, 1]
        data = tf.compat.v1.placeholder(tf.int32, [3])
        assert folded_value(data + last) is None  # not a constant


def test_top_k_is_refused_naming_the_op_before_compiling(tmp_path, capsys):
    """tf.math.top_k (also tf.sort, Keras' sparsemax) becomes a custom call
    IREE cannot compile: refused at import, naming TensorFlow's op (it was
    iree-compile's "failed to legalize" quoting MLIR)."""
    import tensorflow as tf

    from tfaot.cli import main

    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [1, 8], name="x")
        tf.identity(tf.math.top_k(x, 3).values, name="y")
    path = tmp_path / "topk.pb"
    path.write_bytes(graph.as_graph_def().SerializeToString())
    assert main(["build", str(path), "-o", str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err
    assert "TopKV2 (tf.math.top_k" in err and "IREE cannot compile" in err, err
    assert "iree-compile" not in err and not (tmp_path / "out").exists()


def test_a_reversed_scan_says_it_runs_backwards():
    """tf.scan(reverse=True) counts its index down: refused saying so (it was
    "loop variable 2 ... is neither a float state, a counter nor a sequence")."""
    import tensorflow as tf

    from tfaot.frontend.load_graph import graph_def_to_loaded
    from tfaot.streamify_graph import streamify_graph

    g = tf.Graph()
    with g.as_default():
        x = tf.compat.v1.placeholder(tf.float32, (None, 3), name="x")
        tf.identity(tf.scan(lambda h, xt: tf.tanh(h + xt), x, initializer=tf.zeros(3),
                            reverse=True), name="y")
    with pytest.raises(TfaotError) as e:
        streamify_graph(graph_def_to_loaded(g.as_graph_def(), Path("rev.pb"), "graphdef"))
    msg = str(e.value)
    assert "counts down" in msg and "tf.scan(reverse=True)" in msg and "\n" not in msg, msg


def test_a_v1_conditional_left_in_the_step_builds(tmp_path):
    """static_rnn with a sequence_length placeholder writes a tf.cond per
    step, which TF1's freezing (convert_variables_to_constants) lowers to
    Switch/Merge; where the cells do not stream, the conditional reached
    TensorFlow's converter, which has no StableHLO lowering for v1 control
    flow: the build stopped with an error naming the node. The step's own
    freezing now keeps functional control flow, which the importer makes of
    the Switch/Merge too: the graph builds as one whole inference per step
    and matches TensorFlow at lengths that cut the sequence and that don't."""
    import tensorflow as tf

    from tfaot import harness
    from tfaot.cli import main

    tf1 = tf.compat.v1
    g = tf.Graph()
    with g.as_default():
        tf1.set_random_seed(32)
        x = tf1.placeholder(tf.float32, [1, 10, 4], name="input")
        length = tf1.placeholder(tf.int32, [1], name="seq_len")
        ys, _ = tf1.nn.static_rnn(gm.legacy_cells().LSTMCell(6), tf.unstack(x, axis=1),
                                  sequence_length=length, dtype=tf.float32)
        tf.identity(tf.stack(ys, 1), name="output")
        with tf1.Session() as sess:
            sess.run(tf1.global_variables_initializer())
            gd = tf1.graph_util.convert_variables_to_constants(sess, g.as_graph_def(),
                                                               ["output"])
    path = gm.write_graph_def(gd, tmp_path / "cond.pb", text=False)
    assert main(["build", str(path), "-o", str(tmp_path / "out"), "-q"]) == 0
    lib = harness.load(tmp_path / "out")
    xs = np.random.default_rng(3).normal(size=(1, 10, 4)).astype(np.float32)
    with tf1.Session(graph=tf.Graph()) as sess:
        tf.graph_util.import_graph_def(gd, name="")
        for n in (3, 10):
            n = np.array([n], np.int32)
            want = sess.run("output:0", {"input:0": xs, "seq_len:0": n})
            np.testing.assert_allclose(lib.step((xs, n)), want, rtol=0, atol=1e-5)
            assert n[0] == 10 or not want[0, n[0]:].any()  # (cut: zeros past the length)


def test_an_audio_front_end_without_a_lowering_names_the_cut(tmp_path, capsys):
    """A float waveform into AudioSpectrogram and Mfcc (speech_commands'
    graph fed its decoded samples): neither lowers to StableHLO; the error
    says they are the front end and where to cut (it said only the ops)."""
    import tensorflow as tf

    from tfaot.cli import main

    tf1 = tf.compat.v1
    g = tf.Graph()
    with g.as_default():
        wav = tf1.placeholder(tf.float32, [16000, 1], name="decoded_sample_data")
        spectrogram = tf.raw_ops.AudioSpectrogram(input=wav, window_size=480, stride=160,
                                                  magnitude_squared=True)
        mfcc = tf.raw_ops.Mfcc(spectrogram=spectrogram, sample_rate=16000,
                               dct_coefficient_count=10, name="Mfcc")
        w = tf.constant(np.ones((10, 3), np.float32))
        tf.identity(tf.tensordot(mfcc, w, 1), name="out")
    path = gm.write_graph_def(g.as_graph_def(), tmp_path / "front.pb", text=False)
    assert main(["build", str(path), "-o", str(tmp_path / "lib"), "-q"]) == 1
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "front end" in err and "--inputs Mfcc_1:SHAPE" in err, err


def test_whole_window_on_an_open_time_axis_is_refused(tmp_path, capsys):
    """--whole-window asked for a graph whose time axis is open: refused (it
    streamed, with exit 0)."""
    import tensorflow as tf

    from tfaot.cli import main

    @tf.function(input_signature=[tf.TensorSpec([1, None, 6], tf.float32, name="x")])
    def per_frame(x):
        return tf.tanh(tf.tensordot(x, tf.ones([6, 2]), 1))

    graph_def = per_frame.get_concrete_function().graph.as_graph_def()
    path = gm.write_graph_def(graph_def, tmp_path / "frames.pb", text=False)
    assert main(["build", str(path), "-o", str(tmp_path / "lib"), "--whole-window"]) == 1
    err = capsys.readouterr().err
    assert "--whole-window needs a fixed length, and axis 1 of the input is open" in err, err
    assert not (tmp_path / "lib").exists()


@pytest.mark.parametrize("keep", [0.8, 1.0])
def test_dropout_left_on_is_refused_and_keep_prob_one_builds(tmp_path, capsys, keep):
    """A v1 DropoutWrapper with keep_prob under 1 draws new random numbers at
    every run: it built, and the library was off by 0.9 (verify failed). It
    is refused, naming the random op; with keep_prob 1 (a
    placeholder_with_default, as published graphs have it) the numbers
    change nothing, and it builds."""
    import tensorflow as tf

    import graph_loop_models as glm
    from tfaot.cli import main

    with gm.tf1_graph(0) as g:
        x = tf.compat.v1.placeholder(tf.float32, (1, None, 5), name="x")
        prob = tf.compat.v1.placeholder_with_default(keep, [], name="keep_prob")
        from tf_keras.src.layers.rnn.legacy_cell_wrappers import DropoutWrapper

        cell = DropoutWrapper(gm._v1_cell("gru", 8), output_keep_prob=prob)
        h, _ = tf.compat.v1.nn.dynamic_rnn(cell, x, dtype=tf.float32)
        tf.identity(h, name="y")
        path = gm.write_graph_def(glm._freeze(g), tmp_path / "dropout.pb", text=False)
    code = main(["build", str(path), "-o", str(tmp_path / "lib"), "-q"])
    err = capsys.readouterr().err
    if keep < 1:
        assert code == 1 and "RandomUniform' draws new random numbers" in err, err
        assert "keep_prob=1" in err and not (tmp_path / "lib").exists()
    else:
        assert code == 0, err
        assert main(["verify", str(path), str(tmp_path / "lib")]) == 0


def test_scan_without_an_initializer_is_refused_with_what_to_do(tmp_path, capsys):
    """tf.scan without an initializer reads frame 0 outside its loop: it was
    refused as "an unsupported use of a TensorList/TensorArray"; the error
    now says to give an initializer."""
    import tensorflow as tf
    from tensorflow.python.framework.convert_to_constants import \
        convert_variables_to_constants_v2

    from tfaot.cli import main

    fn = tf.function(lambda x: tf.transpose(tf.scan(tf.maximum, tf.transpose(x, [1, 0, 2])),
                                            [1, 0, 2]),
                     input_signature=[tf.TensorSpec([1, None, 3], tf.float32, name="x")])
    graph = convert_variables_to_constants_v2(fn.get_concrete_function()).graph
    path = gm.write_graph_def(graph.as_graph_def(), tmp_path / "scan.pb", text=False)
    assert main(["build", str(path), "-o", str(tmp_path / "lib"), "-q"]) == 1
    err = capsys.readouterr().err
    assert "reads one frame of the input sequence outside a loop" in err, err
    assert "give tf.scan an initializer" in err and "Traceback" not in err


def _image_classifier_pb(tmp_path, shape):
    """An image classifier's graph whose input signature is ``shape`` (a
    serving signature leaves the height and width open), resizing first."""
    import tensorflow as tf

    @tf.function(input_signature=[tf.TensorSpec(shape, tf.float32, name="image")])
    def classify(image):
        x = tf.image.resize(image, [16, 16])
        x = tf.nn.relu(tf.nn.conv2d(x, tf.ones([3, 3, 3, 4]) / 27, 2, "SAME"))
        return tf.matmul(tf.reduce_mean(x, axis=[1, 2]), tf.ones([4, 2]))

    graph_def = classify.get_concrete_function().graph.as_graph_def()
    return gm.write_graph_def(graph_def, tmp_path / "classifier.pb", text=False)


@pytest.mark.parametrize("shape, words", [
    ([None, None, None, 3], ["input 'image' has open dimensions 1 and 2",
                             "--inputs image:1xHxWx3 (an image's size"]),
    ([1, None, 24, 3], ["(op ResizeBilinear): resizes the time axis",
                        "input 'image' was taken to be 1",
                        "give the image's size with --inputs NAME:1xHxWxC"])],
    ids=["height_and_width", "height"])
def test_an_image_of_open_size_is_told_to_give_its_size(tmp_path, capsys, shape, words):
    """An image input with its height and width open was told it had "an
    unknown dimension 2 besides the time axis 1"; with only its height
    open, the build streamed it over the height and stopped at the resize
    naming no way out. Both now say to give the image's size, which
    builds."""
    from tfaot.cli import main

    path = _image_classifier_pb(tmp_path, shape)
    assert main(["build", str(path), "-o", str(tmp_path / "lib"), "-q"]) == 1
    err = capsys.readouterr().err
    for w in words:
        assert w in err, err
    assert "Traceback" not in err and not (tmp_path / "lib").exists()
    assert main(["build", str(path), "-o", str(tmp_path / "lib"), "-q",
                 "--inputs", "image:1x24x24x3"]) == 0


def test_a_saved_model_without_signatures_takes_its_traced_call(tmp_path, capsys):
    """tensorflow.org's audio tutorial saves its ExportModel without
    signatures (tf.saved_model.save(export, dir)): its one trace of
    __call__ serves instead (it was refused: "the SavedModel has no
    signatures"); a module without such a trace is told how to save one."""
    import tensorflow as tf

    from tfaot.cli import main

    class Export(tf.Module):
        def __init__(self):
            super().__init__()
            self.__call__.get_concrete_function(tf.TensorSpec([1, 32], tf.float32, name="x"))

        @tf.function
        def __call__(self, x):
            scores = tf.matmul(tf.abs(x), tf.ones([32, 4]) / 32)
            return {"scores": scores, "ids": tf.argmax(scores, axis=-1)}

    tf.saved_model.save(Export(), str(tmp_path / "sm"))
    assert main(["build", str(tmp_path / "sm"), "-o", str(tmp_path / "lib")]) == 0
    assert "has no signatures; uses the trace of its __call__" in capsys.readouterr().err
    assert main(["verify", str(tmp_path / "sm"), str(tmp_path / "lib"), "--steps", "100"]) == 0
    assert capsys.readouterr().out.count(": ok") == 2

    tf.saved_model.save(tf.Module(), str(tmp_path / "empty"))
    assert main(["build", str(tmp_path / "empty"), "-o", str(tmp_path / "lib2")]) == 1
    assert "signatures=module.f" in capsys.readouterr().err


def test_a_saved_model_traced_at_a_batch_of_four_says_how_to_export_it(tmp_path, capsys):
    """A recurrent model exported by a tf.function traced for its training
    batches (tensorflow.org's FeedBack forecaster: batch 4) was told only
    that streaming needs batch 1; --inputs cannot resize a fixed axis."""
    import keras
    import tensorflow as tf

    from tfaot.cli import main

    class Forecast(tf.Module):
        def __init__(self):
            super().__init__()
            self.lstm = keras.layers.LSTM(4)

        @tf.function(input_signature=[tf.TensorSpec([4, 10, 3], tf.float32)])
        def f(self, inputs):
            return {"y": self.lstm(inputs)}

    module = Forecast()
    tf.saved_model.save(module, str(tmp_path / "sm"), signatures={"serving_default": module.f})
    assert main(["build", str(tmp_path / "sm"), "-o", str(tmp_path / "lib"), "-q"]) == 1
    err = capsys.readouterr().err
    assert "has batch size 4; streaming needs batch 1: export the model with a batch of 1 " \
           "or an open one" in err, err
    assert main(["build", str(tmp_path / "sm"), "-o", str(tmp_path / "lib"), "-q",
                 "--inputs", "inputs:1x10x3"]) == 1
    assert "--inputs sizes the signature's open axes only" in capsys.readouterr().err


def test_frames_made_one_waveform_name_the_cut_that_streams(tmp_path, capsys):
    """Frames of 4 samples a step (1, None, 4) reshaped to one waveform for a
    front end: the Reshape merges time with the samples, and the refusal
    said no more; it now names the Reshape to build from, and that build
    verifies."""
    import re

    import tensorflow as tf

    from tfaot.cli import main

    filters = tf.constant(np.random.default_rng(0).normal(size=(4, 1, 3)).astype(np.float32))

    class FrontEnd(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([1, None, 4], tf.float32, name="frames")])
        def __call__(self, frames):
            wave = tf.reshape(frames, [1, -1])
            return {"y": tf.nn.conv1d(wave[:, :, None], filters, stride=4, padding="VALID")}

    module = FrontEnd()
    path = tmp_path / "frames"
    tf.saved_model.save(module, str(path), signatures={"serving_default": module.__call__})
    assert main(["build", str(path), "-o", str(tmp_path / "lib")]) == 1
    err = capsys.readouterr().err
    cut = re.search(r"build from it: --inputs (\S+)", err)
    assert cut and "merges the time axis" in err, err
    out = tmp_path / "cut"
    assert main(["build", str(path), "-o", str(out), "-q", "--inputs", cut[1]]) == 0
    assert main(["verify", str(path), str(out), "--steps", "100"]) == 0
