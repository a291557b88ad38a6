"""Convolution, pooling, padding, cropping and windows over time in frozen
graphs (issue 10, graph side): CRNN, DS-CNN, CNN, SVDF and TC-ResNet-shaped
GraphDefs streamed step by step, compared with TensorFlow running the
original graph on the right prefix or window (``verify.GraphReference``).

By default every model's step program runs eagerly and three of them are
built into a .so (prefix, sliding window, whole-window fallback); building
every model is ``-m slow``.
"""
import json
import re
from types import SimpleNamespace

import numpy as np
import pytest

import graph_conv_models as G
from tfaot import harness
from tfaot.cli import main
from tfaot.errors import TfaotError
from tfaot.frontend.load import load_model
from tfaot.pipeline import BuildOptions, Progress, build_model
from tfaot.streamify_graph import streamify_graph
from tfaot.verify import GraphReference, verify

STEPS = 110
TOL = 1e-5
BUILT_FAST = {"crnn", "conv_causal_dilated", "ds_cnn_tf1", "ds_cnn_pool_all", "svdf", "tc_resnet"}


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("graph_conv")
    cache = {}

    def get(name):
        if name not in cache:
            cache[name] = G.write(name, root)[0]
        return cache[name]
    get.root = root
    return get


def _reference(path, program):
    """TensorFlow on the original graph: ``.outputs([xs])`` per step (NaN where
    undefined), ``.steps(n)`` how many steps it can compare."""
    sig = program.signature
    lib = SimpleNamespace(manifest={"stream": program.stream.to_json()},
                          output_shapes=[o.shape for o in sig.outputs],
                          input_shapes=[i.shape for i in sig.inputs],
                          input_streamed=[True] * len(sig.inputs))
    return GraphReference(load_model(str(path)), lib, path.parent)


def _stream(program, xs):
    import tensorflow as tf

    states = [tf.constant(s.initial) for s in program.signature.states]
    ys = []
    for x in xs:
        out = program.pure_step(tf.constant(x), *states)
        ys.append(out[0].numpy())
        states = list(out[1:])
    return np.stack(ys)


@pytest.mark.parametrize("name", list(G.MODELS))
def test_step_program_matches_tensorflow(models, name):
    from tfaot.frontend.load_graph import load_graph

    path = models(name)
    program = streamify_graph(load_graph(path), notify=False)
    _, mode, recomputed = G.MODELS[name]
    stream = program.stream
    assert (stream.mode, bool(stream.recompute)) == (mode, recomputed), stream
    reference = _reference(path, program)
    steps = reference.steps(STEPS + stream.first_valid_step)
    xs = np.random.default_rng(5).normal(
        size=(steps, *program.signature.inputs[0].shape)).astype(np.float32)
    want = reference.outputs([xs])
    got = _stream(program, xs)
    defined = ~np.isnan(want.reshape(steps, -1)).any(axis=1)
    if stream.fixed_length is None or mode == "window":
        assert defined.sum() >= 100 and not defined[:stream.first_valid_step].any()
    err = float(np.abs(got[defined] - want[defined]).max())
    print(f"{name}: {stream.mode} P={stream.frames_per_step} W={stream.window} "
          f"first={stream.first_valid_step} recompute={bool(stream.recompute)}: "
          f"max abs error {err:.3g} over {defined.sum()} steps")
    assert err <= TOL


def _built(models, name):
    out = models.root / f"{name}_lib"
    if not out.exists():
        build_model(str(models(name)), BuildOptions(out_dir=out), Progress(False))
    return out


def _build_params():
    return [n if n in BUILT_FAST else pytest.param(n, marks=pytest.mark.slow)
            for n in G.MODELS if n != "crnn_v1cf_fixed"]


@pytest.mark.parametrize("name", _build_params())
def test_library_matches_tensorflow(models, name):
    """The built .so over >= 100 compared steps (tfaot verify's comparison),
    then get/set_state mid-stream into a fresh context, and reset."""
    out = _built(models, name)
    lib = harness.load(out)
    first = lib.stream.first_valid_step
    (result,) = verify(str(models(name)), out, steps=STEPS + first, seed=1, tol=TOL)
    print(f"{name}: {result.output}: max abs error {result.max_abs_error:.3g} over "
          f"{result.steps} steps")
    assert result.ok and result.steps >= 100, result
    xs = np.random.default_rng(2).normal(size=(60, *lib.input_shape)).astype(np.float32)
    lib.reset()
    got = lib.step_n(xs)
    lib.reset()
    lib.step_n(xs[:25])
    saved = lib.get_state()
    other = harness.load(out)
    other.set_state(saved)
    np.testing.assert_array_equal(other.step_n(xs[25:]), got[25:])
    lib.reset()  # back to the start of the stream, ring buffers included
    np.testing.assert_array_equal(lib.step_n(xs[:10]), got[:10])


def test_a_stride_over_one_output_position_adds_no_frames(models):
    """The graph of a DS-CNN pooling over all remaining frames streams one
    frame per step (test_step_program_matches_tensorflow: its numbers)."""
    from tfaot.frontend.load_graph import load_graph

    stream = streamify_graph(load_graph(models("ds_cnn_pool_all")), notify=False).stream
    assert (stream.mode, stream.frames_per_step) == ("window", 1) and not stream.recompute


def test_manifest_header_and_state(models):
    out = _built(models, "ds_cnn_tf1")
    manifest = json.loads((out / "ds_cnn_tf1.json").read_text())
    stream = manifest["stream"]
    assert (stream["mode"], stream["window"], stream["frames_per_step"]) == ("window", 16, 2)
    assert stream["first_valid_step"] == 7 and not stream["recompute"]
    header = (out / "ds_cnn_tf1.h").read_text()
    assert "#define DS_CNN_TF1_FRAMES_PER_STEP 2" in header
    assert "#define DS_CNN_TF1_WINDOW 16" in header
    names = [s["name"] for s in manifest["state"]]
    assert names and all("_buf" in n for n in names), names
    assert manifest["inputs"][0]["shape"] == [1, 2, 10]
    # the depthwise convs keep 4-wide rows, not the 6-wide ones tf.pad makes:
    # the window is padded after the ring buffer
    depthwise = [s["shape"] for s in manifest["state"] if "depthwise" in s["name"]]
    assert depthwise == [[1, 2, 4, 6]] * 2, manifest["state"]


def test_window_of_a_mean_keeps_one_vector_a_frame(models):
    """Mean over time and width over a fixed window (a frozen
    GlobalAveragePooling2D): the window state holds each frame's mean over
    its width, not the frame, in a circular buffer of the 2 frames before
    the step's chunk and a row for its head (streamify_keras/circular.py;
    numerics: test_library_matches_tensorflow)."""
    out = _built(models, "ds_cnn")
    shapes = {s["name"]: s["shape"] for s in
              json.loads((out / "ds_cnn.json").read_text())["state"]}
    mean = [sh for n, sh in shapes.items() if "global_average_pooling" in n]
    assert mean == [[1, 3, 1, 6]], shapes


def test_inspect_shows_streaming_per_node(models, capsys):
    assert main(["inspect", str(models("ds_cnn_tf1"))]) == 0
    text = capsys.readouterr().out
    assert re.search(r"stream:\s+window 16 frames, 2 frames per step", text), text
    assert re.search(r"DepthwiseConv2dNative\s+time conv\s+buffer=2 kernel=3 stride=1", text)
    assert re.search(r"AvgPool\s+time pool", text), text
    assert main(["inspect", str(models("crnn"))]) == 0
    text = capsys.readouterr().out
    assert re.search(r"stream:\s+prefix \(frames 0..t\), 1 frame per step, outputs valid "
                     r"from step 6", text), text
    assert re.search(r"Conv2D\s+time conv\s+buffer=\d+ kernel=3 stride=1 dilation=2", text)


def test_whole_window_build_is_one_inference(models):
    from tfaot.frontend.load_graph import load_graph

    program = streamify_graph(load_graph(models("ds_cnn_tf1")), notify=False,
                              fixed_window="whole")
    assert program.stream.mode == "stateless"
    assert program.signature.states == ()
    assert program.signature.inputs[0].shape == (1, 16, 10)
    assert "whole-window build" in program.report["mode"]


def test_same_padding_before_a_loop_is_refused(tmp_path):
    from tfaot.frontend.load_graph import load_graph

    path, _ = G.write("same_before_gru", tmp_path)
    with pytest.raises(TfaotError) as info:
        streamify_graph(load_graph(path), notify=False)
    message = str(info.value)
    for fragment in ("gru", "(op TensorListStack)", "padding='same' in time"):
        assert fragment in message, message
    assert "\n" not in message


def test_running_global_pooling_in_prefix_mode(tmp_path):
    """Mean / Max over an open time axis (a prefix model): running values."""
    import tensorflow as tf

    import graph_models as gm
    from tfaot.frontend.load_graph import graph_def_to_loaded

    w = tf.constant(np.random.default_rng(3).normal(size=(3, 6, 4)).astype(np.float32))

    def fn(x):
        h = tf.nn.relu(tf.nn.conv1d(x, w, 1, "VALID"))
        return tf.concat([tf.reduce_mean(h, axis=1), tf.reduce_max(h, axis=1)], axis=1)

    from tensorflow.python.framework.convert_to_constants import (
        convert_variables_to_constants_v2,
    )

    cf = tf.function(fn).get_concrete_function(tf.TensorSpec((1, None, 6), tf.float32, name="x"))
    gd = convert_variables_to_constants_v2(cf).graph.as_graph_def()
    loaded = graph_def_to_loaded(gd, tmp_path / "gp.pb", "graphdef")
    program = streamify_graph(loaded, notify=False)
    assert program.stream.mode == "prefix" and program.stream.first_valid_step == 2
    assert {r["role"] for r in program.report["layers"]} >= {"running mean", "running max"}
    xs = np.random.default_rng(4).normal(size=(102, 1, 6)).astype(np.float32)
    got = _stream(program, xs)
    frames = np.moveaxis(xs, 0, 1)
    err = max(np.abs(got[t] - gm.run_graph_def(gd, "x", loaded.outputs[0], frames[:, :t + 1]))
              .max() for t in range(2, 102))
    assert err <= TOL, err


def test_a_conv_stack_that_empties_the_first_test_sequence(tmp_path, capsys):
    """Strided and dilated 2-D convolutions before a GRU (a KWS CRNN) turn
    the 13-frame test sequence into no frames; the Keras 3 export failed
    ("Tried to stack elements of an empty list") where the .keras built.
    A longer test sequence is tried; the library matches over 120 steps."""
    import keras
    from keras import layers as L

    keras.utils.set_random_seed(0)
    x = keras.Input((None, 20))
    h = L.Reshape((-1, 20, 1))(x)
    h = L.Conv2D(8, (3, 3), strides=(2, 2), activation="relu")(h)
    h = L.SeparableConv2D(8, (3, 3))(h)
    h = L.DepthwiseConv2D((3, 3), dilation_rate=(2, 1))(h)
    h = L.Reshape((-1, h.shape[2] * h.shape[3]))(h)
    model = keras.Model(x, L.Dense(3)(L.GRU(8, return_sequences=True)(h)))
    path, out = tmp_path / "crnn", tmp_path / "lib"
    model.export(str(path), verbose=False)
    line = _build_and_verify_120(path, out, capsys)
    assert re.fullmatch(r"output_0: max abs error \S+ over 1\d\d steps \(tolerance \S+\): ok",
                        line), line


def _build_and_verify_120(path, out, capsys) -> str:
    """Build ``path`` into ``out`` and verify it over 120 steps: verify's line."""
    assert main(["build", str(path), "-o", str(out), "-q"]) == 0
    capsys.readouterr()
    assert main(["verify", str(path), str(out), "--steps", "120"]) == 0
    return capsys.readouterr().out.strip()


def _as_graph(model, path, form: str):
    """``model`` (8 features a frame) as a SavedModel (Keras' export) or a
    frozen GraphDef at ``path``: the path to build."""
    import graph_models as gm

    if form == "export":
        model.export(str(path), verbose=False)
        return path
    return gm.write_graph_def(gm.freeze_keras(model, None, 8, False),
                              path.with_suffix(".pb"), False)


@pytest.mark.parametrize("form", ["export", "pb"])
def test_a_grouped_convolution_of_a_keras_3_graph_streams(tmp_path, capsys, form):
    """Keras 3 runs Conv1D(groups=4) through a jit_compile function, which
    freezing keeps as a StatefulPartitionedCall on the sequence: it was
    refused ("op StatefulPartitionedCall on a time-dependent tensor is not
    supported"); the call is inlined and the library matches over 120 steps."""
    import keras
    from keras import layers as L

    keras.utils.set_random_seed(0)
    x = keras.Input((None, 8))
    h = L.Conv1D(16, 3, groups=4, padding="causal", activation="swish")(x)
    model = keras.Model(x, L.Dense(3)(L.GRU(6, return_sequences=True)(h)))
    out = tmp_path / "lib"
    line = _build_and_verify_120(_as_graph(model, tmp_path / "grouped", form), out, capsys)
    assert re.fullmatch(r"\S+: max abs error \S+ over 1\d\d steps \(tolerance 1e-05\): ok",
                        line), line


def test_a_cumulative_sum_over_open_time_is_a_running_sum(tmp_path, capsys):
    """tf.cumsum over time (a running mean for CMVN: cumsum(x) / frames so
    far), after a strided conv (2 frames a step, a frame before the stream)
    and exclusive; per frame over the features; verified over 120 steps
    through the library. It was refused ("tfaot does not know how it treats
    the time axis"); reverse=True still is, by name."""
    import tensorflow as tf

    w = np.random.default_rng(5).normal(size=(3, 4, 5)).astype(np.float32)
    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, (1, None, 4), name="x")
        h = tf.nn.conv1d(x, w, 2, "VALID")
        frames = tf.cumsum(tf.ones_like(h[..., :1]), axis=1)
        mean = tf.cumsum(h, axis=1) / frames
        tf.concat([h - mean, tf.cumsum(h, axis=1, exclusive=True),
                   tf.cumsum(h, axis=2)], -1, name="y")
    path = tmp_path / "cmvn.pb"
    path.write_bytes(graph.as_graph_def().SerializeToString())
    line = _build_and_verify_120(path, tmp_path / "lib", capsys)
    assert line.endswith(": ok"), line

    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, (1, None, 4), name="x")
        tf.identity(tf.cumsum(x, axis=1, reverse=True), name="y")
    path = tmp_path / "rev.pb"
    path.write_bytes(graph.as_graph_def().SerializeToString())
    assert main(["build", str(path), "-o", str(tmp_path / "rev"), "-q"]) == 1
    assert "'Cumsum' (op Cumsum): sums from the last frame backwards" in capsys.readouterr().err


def test_a_keras_export_recomputing_its_window_builds(tmp_path, capsys):
    """A VGGish-like export (patches (None, 12, 8), a 'same' convolution,
    Flatten, Dense) streams as a window recomputed every step; Keras 3's
    export orders its frozen weights after the input by control edges,
    which kept an unfed copy of the input in the step, and the build
    stopped on TensorFlow's UnliftableError (a tfaot bug)."""
    import keras
    from keras import layers as L

    keras.utils.set_random_seed(9)
    x = keras.Input((12, 8))
    h = L.Conv2D(4, 3, padding="same", activation="relu")(L.Reshape((12, 8, 1))(x))
    model = keras.Model(x, L.Dense(3)(L.Flatten()(L.MaxPooling2D(2)(h))))
    path, out = tmp_path / "vgg", tmp_path / "lib"
    model.export(str(path), verbose=False)
    line = _build_and_verify_120(path, out, capsys)
    assert re.fullmatch(r"output_0: max abs error \S+ over 120 steps \(tolerance \S+\): ok",
                        line), line
    manifest = json.loads((out / "vgg.json").read_text())
    assert manifest["stream"]["mode"] == "window" and manifest["stream"]["recompute"]


@pytest.mark.parametrize("form", ["export", "pb"])
def test_dilated_convolutions_of_a_graph_gather_their_taps(tmp_path, capsys, form):
    """A graph's dilated convolutions (a Keras export's Conv2D with
    dilations, a frozen graph's space-to-batch pair) whose kept frames
    their taps mostly skip keep them in a circular buffer (one more row:
    the head) and gather the taps' rows: 1-D and 2-D (over time and
    frequency), depthwise and separable, over 120 steps; also after the
    buffers have wrapped around several times (dilation 16, 2 taps)."""
    import keras
    from keras import layers as L

    keras.utils.set_random_seed(1)
    x = keras.Input((None, 8))
    h = L.DepthwiseConv1D(3, dilation_rate=8, activation="relu")(L.ZeroPadding1D((16, 0))(x))
    h = L.SeparableConv1D(6, 2, dilation_rate=16)(L.ZeroPadding1D((16, 0))(h))
    w = L.DepthwiseConv2D((2, 3), dilation_rate=(16, 1), depth_multiplier=2)(
        L.Reshape((-1, 6, 1))(h))
    model = keras.Model(x, L.Dense(2)(L.GRU(4, return_sequences=True)(L.Reshape((-1, 8))(w))))
    out = tmp_path / "lib"
    line = _build_and_verify_120(_as_graph(model, tmp_path / "dilated", form), out, capsys)
    assert re.fullmatch(r"\S+: max abs error \S+ over 1\d\d steps \(tolerance \S+\): ok",
                        line), line
    manifest = json.loads(next(out.glob("*.json")).read_text())
    frames = sorted(max(s["shape"][1:-1]) for s in manifest["state"] if len(s["shape"]) > 2)
    assert frames == [17, 17, 17], manifest["state"]


def test_an_attention_graph_asked_to_stream_is_the_sliding_window(tmp_path, capsys):
    """A frozen transformer over a fixed window of 12 frames: its attention's
    einsum mixes the frames. Without --time-axis it is one whole inference a
    step (the note says to give --time-axis); with --time-axis 1 it was that
    too, where the user asked for frames: now the exact sliding window (a
    ring buffer of the window, the graph on it every step), as a Keras
    model's is."""
    import json

    import keras
    import tensorflow as tf
    from tensorflow.python.framework.convert_to_constants import (
        convert_variables_to_constants_v2)

    from tfaot.cli import main

    keras.utils.set_random_seed(20)
    x = keras.Input((12, 5), batch_size=1)
    h = keras.layers.Dense(8)(x)
    h = keras.layers.LayerNormalization()(h + keras.layers.MultiHeadAttention(2, 4)(h, h))
    model = keras.Model(x, keras.layers.Dense(3)(keras.layers.GlobalAveragePooling1D()(h)))
    fn = tf.function(lambda v: model(v)).get_concrete_function(
        tf.TensorSpec([1, 12, 5], tf.float32, name="x"))
    tf.io.write_graph(convert_variables_to_constants_v2(fn).graph.as_graph_def(), str(tmp_path),
                      "attn.pb", as_text=False)
    for flags, mode, frame in (([], "stateless", [1, 12, 5]), (["--time-axis", "1"], "window",
                                                                [1, 5])):
        out = tmp_path / mode
        assert main(["build", str(tmp_path / "attn.pb"), "-o", str(out), "-q", *flags]) == 0
        manifest = json.loads((out / "attn.json").read_text())
        assert manifest["stream"]["mode"] == mode and manifest["inputs"][0]["shape"] == frame
        assert bool(manifest["stream"]["recompute"]) == (mode == "window")
        capsys.readouterr()
        assert main(["verify", str(tmp_path / "attn.pb"), str(out)]) == 0
        assert capsys.readouterr().out.rstrip().endswith(": ok")
