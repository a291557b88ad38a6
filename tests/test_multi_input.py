"""Models with several inputs (two feature streams; features + a per-step
token or conditioning input): the typed NAME_inputs struct, the harness,
verify, a C driver, against TensorFlow."""
import json
import shutil
import importlib.util
import subprocess
import sys

import numpy as np
import pytest

from util import run

from tfaot import harness
from tfaot.errors import TfaotError

STEPS = 120


def _step_with_held_cond(lib, xs, c):
    """The library over the frames ``xs`` (1, T, F), its input "cond" held at ``c``."""
    return lib.step_n(tuple(np.repeat(c[None], xs.shape[1], 0) if n == "cond" else
                            np.swapaxes(xs, 0, 1) for n, _, _ in lib.input_specs))


def _build(path, out, *extra):
    run([sys.executable, "-m", "tfaot", "build", path, "-o", out, "-q", *extra])


def _refused(model, out) -> str:
    """The CLI's error building ``model`` (saved as OUT.keras) into ``out``,
    which must fail."""
    path = out.parent / f"{out.name}.keras"
    model.save(path)
    proc = subprocess.run([sys.executable, "-m", "tfaot", "build", str(path), "-o", str(out),
                           "-q"], capture_output=True, text=True)
    assert proc.returncode != 0, proc.stderr
    return proc.stderr


def _held_inputs(out) -> list[tuple[str, bool]]:
    """(name, held) of each input of the library built into ``out``."""
    manifest = json.loads(next(out.glob("*.json")).read_text())
    return [(i["name"], i.get("held", False)) for i in manifest["inputs"]]


def _verify(path, out, *extra):
    """`tfaot verify` as a user runs it; returns the 'max abs error' lines."""
    proc = run([sys.executable, "-m", "tfaot", "verify", path, out, "--steps", "100", *extra])
    lines = [line for line in proc.stdout.splitlines() if "max abs error" in line]
    assert lines and all("over 100 steps" in line and line.endswith("ok") for line in lines), \
        proc.stdout
    return lines


def _two_streams():
    """features (None, 6) and extra (None, 3) -> Concatenate -> LSTM(12, sequences) -> Dense(4)."""
    import keras

    keras.utils.set_random_seed(21)
    a = keras.Input((None, 6), name="features")
    b = keras.Input((None, 3), name="extra")
    h = keras.layers.Concatenate()([a, b])
    h = keras.layers.LSTM(12, return_sequences=True)(h)
    return keras.Model([a, b], keras.layers.Dense(4)(h))


def _features_and_token():
    """features (None, 6) -> GRU(10) (last output), speaker id (1,) int32 ->
    Embedding(7, 4) -> Flatten and a conditioning vector cond (5,) -> Dense(4),
    merged -> Dense(3)."""
    import keras

    keras.utils.set_random_seed(22)
    x = keras.Input((None, 6), name="features")
    tok = keras.Input((1,), dtype="int32", name="speaker")
    cond = keras.Input((5,), name="cond")
    h = keras.layers.GRU(10)(x)
    e = keras.layers.Flatten()(keras.layers.Embedding(7, 4)(tok))
    c = keras.layers.Dense(4, activation="tanh")(cond)
    y = keras.layers.Dense(3)(keras.layers.Concatenate()([h, e, c]))
    return keras.Model([x, tok, cond], y)


@pytest.fixture(scope="module")
def two_streams(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("two_streams")
    model = _two_streams()
    path = tmp / "twin.keras"
    model.save(path)
    _build(path, tmp / "lib")
    return model, path, tmp / "lib"


@pytest.fixture(scope="module")
def with_token(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("with_token")
    model = _features_and_token()
    path = tmp / "tok.keras"
    model.save(path)
    _build(path, tmp / "lib")
    return model, path, tmp / "lib"


def test_two_streamed_inputs_match_keras(two_streams):
    model, path, out = two_streams
    lib = harness.load(out)
    assert [n for n, _, _ in lib.input_specs] == ["features", "extra"]
    assert lib.input_shapes == [(1, 6), (1, 3)] and lib.input_streamed == [True, True]
    rng = np.random.default_rng(0)
    a = rng.normal(size=(1, STEPS, 6)).astype(np.float32)
    b = rng.normal(size=(1, STEPS, 3)).astype(np.float32)
    want = np.asarray(model([a, b]))[0]
    got = np.stack([lib.step((a[:, t], b[:, t])) for t in range(STEPS)])[:, 0]
    assert np.abs(got - want).max() <= 1e-5
    lib.reset()  # step_n, inputs by name
    many = lib.step_n({"extra": np.swapaxes(b, 0, 1), "features": np.swapaxes(a, 0, 1)})
    assert np.abs(many[:, 0] - want).max() <= 1e-5
    with pytest.raises(TfaotError, match="2 inputs"):
        lib.step(a[:, 0])
    with pytest.raises(TfaotError, match="input 'extra' has shape"):
        lib.step([a[:, 0], a[:, 0]])
    _verify(path, out)


def test_streamed_input_with_token_and_conditioning(with_token):
    model, path, out = with_token
    lib = harness.load(out)
    assert [n for n, _, _ in lib.input_specs] == ["features", "speaker", "cond"]
    assert lib.input_dtypes == [np.float32, np.int32, np.float32]
    assert lib.input_streamed == [True, False, False]
    rng = np.random.default_rng(1)
    x = rng.normal(size=(1, STEPS, 6)).astype(np.float32)
    # The per-step inputs change every step: step t is the model on frames
    # 0..t with step t's token and conditioning vector.
    ids = rng.integers(0, 7, (STEPS, 1, 1)).astype(np.int32)
    cond = rng.normal(size=(STEPS, 1, 5)).astype(np.float32)
    got = lib.step_n((np.swapaxes(x, 0, 1), ids, cond))[:, 0]
    import tensorflow as tf

    # traced once for any prefix length (eager calls, one per prefix, took a minute)
    call = tf.function(model, input_signature=[[
        tf.TensorSpec((1, None, 6)), tf.TensorSpec((1, 1), tf.int32), tf.TensorSpec((1, 5))]])
    error = 0.0
    for t in range(STEPS):
        want = np.asarray(call([x[:, :t + 1], ids[t], cond[t]]))[0]
        error = max(error, float(np.abs(got[t] - want).max()))
    assert error <= 1e-5
    _verify(path, out)


def test_header_and_c_driver_fill_the_inputs_struct(with_token, tmp_path):
    _, _, out = with_token
    header = (out / "tok.h").read_text()
    assert "} tok_inputs;" in header
    assert "float features[6];" in header and "int32_t speaker[1];" in header \
        and "float cond[5];" in header
    assert "#define TOK_INPUT1_DTYPE \"int32\"" in header
    assert "#define TOK_INPUT0_STREAMED 1" in header and "#define TOK_INPUT2_STREAMED 0" in header
    assert "int tok_step(tok_ctx *ctx, const tok_inputs *in, tok_output_t *out);" in header
    assert "int tok_read_input(void *user, tok_inputs *in, size_t n);" in header
    assert "tok_input_t" not in header and "TOK_INPUT_SIZE" not in header
    gcc = shutil.which("gcc") or shutil.which("cc")
    if gcc is None:
        pytest.skip("no C compiler")
    driver = tmp_path / "main.c"
    driver.write_text(r"""
#include <stdio.h>
#include "tok.h"
static _Alignas(TOK_CTX_ALIGN) unsigned char mem[TOK_CTX_SIZE];
static void fill(tok_inputs *in, int t) {
  for (int i = 0; i < TOK_INPUT0_SIZE; ++i) in->features[i] = 0.1f * (float)((t * 7 + i) % 11) - 0.5f;
  in->speaker[0] = t % 7;
  for (int i = 0; i < TOK_INPUT2_SIZE; ++i) in->cond[i] = 0.2f * (float)(i - t % 3);
}
static float last[TOK_OUTPUT_SIZE];
int tok_read_input(void *user, tok_inputs *in, size_t n) {
  int *t = (int *)user;
  if (n != 1 || *t >= 4) return 0;
  fill(in, (*t)++);
  return 1;
}
int tok_write_output(void *user, const tok_output_t *out, size_t n) {
  (void)user;
  for (size_t i = 0; i < n; ++i) last[i] = out[i];
  return 0;
}
int main(void) {
  tok_ctx *ctx = (tok_ctx *)mem;
  if (tok_init(ctx) != TOK_OK) return 1;
  tok_inputs in[4];
  tok_output_t out[4 * TOK_OUTPUT_SIZE];
  for (int t = 0; t < 4; ++t) {
    fill(&in[t], t);
    if (tok_step(ctx, &in[t], out + t * TOK_OUTPUT_SIZE) != TOK_OK) return 2;
  }
  for (int i = 0; i < 4 * TOK_OUTPUT_SIZE; ++i) printf("%.9g\n", out[i]);
  tok_output_t again[4 * TOK_OUTPUT_SIZE];
  if (tok_reset(ctx) != TOK_OK || tok_step_n(ctx, in, again, 4) != TOK_OK) return 3;
  for (int i = 0; i < 4 * TOK_OUTPUT_SIZE; ++i) if (again[i] != out[i]) return 4;
  int t = 0;
  if (tok_reset(ctx) != TOK_OK || tok_run(ctx, &t, -1) != 4) return 5;
  for (int i = 0; i < TOK_OUTPUT_SIZE; ++i) if (last[i] != out[3 * TOK_OUTPUT_SIZE + i]) return 6;
  tok_deinit(ctx);
  return 0;
}
""")
    exe = tmp_path / "main"
    run([gcc, "-std=c11", "-Wall", "-Wextra", "-Werror", "-I", out, driver, out / "libtok.a",
         "-lm", "-o", exe])
    printed = np.array(run([exe]).stdout.split(), dtype=np.float32).reshape(4, 3)
    # The same inputs through the harness (checked against Keras above).
    lib = harness.load(out)
    for t in range(4):
        feats = (0.1 * ((t * 7 + np.arange(6)) % 11) - 0.5).astype(np.float32)[None]
        cond = (0.2 * (np.arange(5) - t % 3)).astype(np.float32)[None]
        y = lib.step({"features": feats, "speaker": np.array([[t % 7]], np.int32),
                      "cond": cond})
        assert np.abs(y[0] - printed[t]).max() <= 1e-6


def test_verify_of_two_streams_into_time_distributed(tmp_path):
    """Two streamed inputs, a GRU and a TimeDistributed head: traced for an
    open time axis, Keras 3's TimeDistributed gave one frame where eager
    Keras gives all, and verify stopped on an IndexError (its reference
    now checks each trace against an eager call, as for one input)."""
    import keras
    from keras import layers as L

    keras.utils.set_random_seed(23)
    a, b = keras.Input((None, 3), name="a"), keras.Input((None, 3), name="b")
    h = L.GRU(8, return_sequences=True)(L.Concatenate()([a, b]))
    path, out = tmp_path / "td.keras", tmp_path / "td"
    keras.Model([a, b], L.TimeDistributed(L.Dense(2))(h)).save(path)
    _build(path, out)
    _verify(path, out)


@pytest.mark.parametrize("form,conv", [
    ("keras", "valid"), ("saved_model", "strided"),
    pytest.param("saved_model", "valid", marks=pytest.mark.slow),
    pytest.param("keras", "strided", marks=pytest.mark.slow)])
def test_verify_of_two_streams_whose_output_is_shorter(tmp_path, form, conv):
    """Two streamed inputs into a valid convolution (its output 2 frames
    shorter than the input) or a strided one (2 frames per step): verify
    stopped on an IndexError (Keras: the output's frame taken at the input's
    length) or blamed TensorFlow (a SavedModel: only the first input fed)."""
    import keras
    from keras import layers as L

    keras.utils.set_random_seed(5)
    a, b = keras.Input((None, 3)), keras.Input((None, 2))
    layer = L.Conv1D(2, 3) if conv == "valid" else L.Conv1D(2, 2, strides=2)
    model = keras.Model([a, b], layer(L.Concatenate()([a, b])))
    path, out = tmp_path / ("m.keras" if form == "keras" else "sm"), tmp_path / "lib"
    model.save(path) if form == "keras" else model.export(str(path), verbose=False)
    _build(path, out)
    _verify(path, out, "--steps", "102" if conv == "valid" else "100")


def _two_placeholder_graph():
    """A frozen TF graph: placeholders feat (1, ?, 6) and aux (1, ?, 3) ->
    Concatenate -> GRU(10, sequences) -> Dense(4)."""
    import keras
    import tensorflow as tf
    from tensorflow.python.framework.convert_to_constants import (
        convert_variables_to_constants_v2,
    )

    keras.utils.set_random_seed(23)
    a, b = keras.Input((None, 6)), keras.Input((None, 3))
    h = keras.layers.GRU(10, return_sequences=True)(keras.layers.Concatenate()([a, b]))
    model = keras.Model([a, b], keras.layers.Dense(4)(h))
    cf = tf.function(lambda x, y: model([x, y])).get_concrete_function(
        tf.TensorSpec((1, None, 6), tf.float32, name="feat"),
        tf.TensorSpec((1, None, 3), tf.float32, name="aux"))
    return convert_variables_to_constants_v2(cf).graph.as_graph_def()


def _run_graph(graph_def, feeds: dict, output: str) -> np.ndarray:
    """The frozen graph on whole sequences in a TF1 session."""
    import tensorflow as tf

    g = tf.Graph()
    with g.as_default():
        tf.graph_util.import_graph_def(graph_def, name="")
        with tf.compat.v1.Session(graph=g) as sess:
            return sess.run(output, feeds)


def test_graph_with_two_placeholders(tmp_path):
    gd = _two_placeholder_graph()
    path = tmp_path / "g2in.pb"
    path.write_bytes(gd.SerializeToString())
    out = tmp_path / "lib"
    # --inputs names both, in the order the C struct gets them.
    _build(path, out, "--inputs", "aux:1x?x3,feat")
    lib = harness.load(out)
    assert [n for n, _, _ in lib.input_specs] == ["aux", "feat"]
    assert lib.input_streamed == [True, True]
    rng = np.random.default_rng(2)
    a = rng.normal(size=(1, STEPS, 6)).astype(np.float32)
    b = rng.normal(size=(1, STEPS, 3)).astype(np.float32)
    want = _run_graph(gd, {"feat:0": a, "aux:0": b}, "Identity:0")[0]
    got = np.stack([lib.step({"feat": a[:, t], "aux": b[:, t]}) for t in range(STEPS)])[:, 0]
    assert np.abs(got - want).max() <= 1e-5
    _verify(path, out, "--inputs", "aux:1x?x3,feat")


def test_saved_model_signature_with_two_inputs(tmp_path):
    """Keras export: feat (None, 6) -> LSTM(10) and cond (5,) -> Dense(4), merged;
    the signature's inputs in its (sorted) order: cond, feat."""
    import keras

    keras.utils.set_random_seed(24)
    x, cond = keras.Input((None, 6), name="feat"), keras.Input((5,), name="cond")
    h = keras.layers.LSTM(10)(x)
    c = keras.layers.Dense(4, activation="relu")(cond)
    model = keras.Model([x, cond], keras.layers.Dense(3)(keras.layers.Concatenate()([h, c])))
    path = tmp_path / "sm"
    model.export(path, verbose=False)
    out = tmp_path / "lib"
    _build(path, out)
    lib = harness.load(out)
    assert [n for n, _, _ in lib.input_specs] == ["cond", "feat"]
    assert lib.input_streamed == [False, True]
    rng = np.random.default_rng(3)
    xs = rng.normal(size=(1, STEPS, 6)).astype(np.float32)
    cs = rng.normal(size=(STEPS, 1, 5)).astype(np.float32)
    got = lib.step_n((cs, np.swapaxes(xs, 0, 1)))[:, 0]
    error = max(float(np.abs(got[t] - np.asarray(model([xs[:, :t + 1], cs[t]]))[0]).max())
                for t in range(0, STEPS, 7))
    assert error <= 1e-5
    _verify(path, out)


def test_a_conditioning_vector_added_to_every_frame_is_held(tmp_path):
    """features (None, 5) + Reshape((1, 5))(Dense(cond)) -> LSTM(8): the
    conditioning vector enters the sequence (it was refused as "combines a
    sequence with a value that is not per time step"). It streams, the input
    is held (one value a stream: header, manifest), the library equals
    Keras over a sequence with one conditioning vector, and verify holds it
    fixed. A value pooled from the sequence is still no conditioning vector."""
    import keras
    import tensorflow as tf

    keras.utils.set_random_seed(3)
    x = keras.Input((None, 5), name="features")
    cond = keras.Input((3,), name="cond")
    h = keras.layers.Reshape((1, 5))(keras.layers.Dense(5)(cond))
    y = keras.layers.Dense(2)(keras.layers.LSTM(8, return_sequences=True)(
        keras.layers.Add()([x, h])))
    model = keras.Model([x, cond], y)
    path, out = tmp_path / "cond.keras", tmp_path / "lib"
    model.save(path)
    _build(path, out)
    assert _held_inputs(out) == [("features", False), ("cond", True)]
    assert "#define COND_INPUT1_HELD 1" in (out / "cond.h").read_text()
    rng = np.random.default_rng(4)
    xs = rng.normal(size=(1, STEPS, 5)).astype(np.float32)
    c = rng.normal(size=(1, 3)).astype(np.float32)
    got = harness.load(out).step_n((np.swapaxes(xs, 0, 1), np.repeat(c[None], STEPS, 0)))
    want = np.asarray(model([tf.constant(xs), tf.constant(c)]))[0]
    np.testing.assert_allclose(np.asarray(got).reshape(STEPS, 2), want, rtol=0, atol=1e-5)
    _verify(path, out)
    # (a squeeze-and-excitation scale: the sequence times its own pooled mean)
    pooled = keras.layers.Reshape((1, 5))(keras.layers.GlobalAveragePooling1D()(x))
    se = keras.Model(x, keras.layers.LSTM(4)(keras.layers.Multiply()([x, pooled])))
    assert "not per time step" in _refused(se, tmp_path / "se")


def test_an_initial_state_from_a_conditioning_input_is_held(tmp_path):
    """LSTM(features, initial_state=[Dense(cond), Dense(cond)]): the stream's
    first frame starts from the state the conditioning vector gives (it was
    refused as "gets its initial state from another tensor"), later steps
    carry their own; the input is held, the library equals Keras over 120
    steps, after a reset too with another vector, and verify passes. An
    initial state computed from the sequence (an encoder's last output) is
    still refused."""
    import keras
    from keras import layers as L

    keras.utils.set_random_seed(5)
    x = keras.Input((None, 4), name="features")
    cond = keras.Input((3,), name="cond")
    h0, c0 = L.Dense(6, activation="tanh")(cond), L.Dense(6)(cond)
    y = L.Dense(2)(L.LSTM(6, return_sequences=True)(x, initial_state=[h0, c0]))
    model = keras.Model([x, cond], y)
    path, out = tmp_path / "init.keras", tmp_path / "lib"
    model.save(path)
    _build(path, out)
    assert _held_inputs(out) == [("features", False), ("cond", True)]
    lib = harness.load(out)
    rng = np.random.default_rng(6)
    for _ in range(2):  # the second sequence after a reset, from its own state
        xs = rng.normal(size=(1, STEPS, 4)).astype(np.float32)
        c = rng.normal(size=(1, 3)).astype(np.float32)
        lib.reset()
        got = lib.step_n((np.swapaxes(xs, 0, 1), np.repeat(c[None], STEPS, 0)))
        want = np.asarray(model([xs, c]))[0]
        np.testing.assert_allclose(np.asarray(got).reshape(STEPS, 2), want, rtol=0, atol=1e-5)
    _verify(path, out)
    encoded = L.LSTM(6)(x)
    seq2seq = keras.Model(x, L.GRU(6)(x, initial_state=encoded))
    assert "known only once the sequence has ended" in _refused(seq2seq, tmp_path / "s2s")


def test_a_conditioning_vector_in_an_exported_graph_is_held(tmp_path):
    """The conditioning model above, multiplied in and written by Keras 3's
    model.export(): the graph's per-step input, Reshape((1, C)), meets the
    sequence in a Mul (refused: "mixes a per-step tensor with a
    whole-sequence tensor"). It streams, the input is held, and the library
    equals the SavedModel; the sequence times its own running mean still
    does not stream that way."""
    import keras
    import tensorflow as tf

    from tfaot.errors import TfaotError
    from tfaot.frontend.load_graph import graph_def_to_loaded
    from tfaot.streamify_graph import streamify_graph

    keras.utils.set_random_seed(3)
    x = keras.Input((None, 5), name="features")
    cond = keras.Input((3,), name="cond")
    gate = keras.layers.Reshape((1, 5))(keras.layers.Dense(5, activation="sigmoid")(cond))
    y = keras.layers.Dense(2)(keras.layers.LSTM(8, return_sequences=True)(
        keras.layers.Multiply()([x, gate])))
    model = keras.Model([x, cond], y)
    path, out = tmp_path / "sm", tmp_path / "lib"
    model.export(path, verbose=False)
    _build(path, out)
    held = dict(_held_inputs(out))
    assert held == {"cond": True, "features": False}, held
    rng = np.random.default_rng(4)
    xs = rng.normal(size=(1, STEPS, 5)).astype(np.float32)
    c = rng.normal(size=(1, 3)).astype(np.float32)
    got = _step_with_held_cond(harness.load(out), xs, c)
    want = np.asarray(model([tf.constant(xs), tf.constant(c)]))[0]
    np.testing.assert_allclose(np.asarray(got).reshape(STEPS, 2), want, rtol=0, atol=1e-5)
    # (the sequence times its own mean so far is no held value)
    se = tf.function(lambda v: v * tf.reduce_mean(v, axis=1, keepdims=True)).get_concrete_function(
        tf.TensorSpec((1, None, 5), tf.float32, name="x"))
    with pytest.raises(TfaotError, match="mixes the sequence with a value that has no time "
                       "axis.*from the frames so far.*normalize outside the model"):
        streamify_graph(graph_def_to_loaded(se.graph.as_graph_def(),
                                            __import__("pathlib").Path("se.pb"), "graphdef"))


@pytest.mark.parametrize("form", ["tile_first",
                                  pytest.param("broadcast_last", marks=pytest.mark.slow)])
def test_a_conditioning_vector_tiled_and_concatenated_is_held(tmp_path, form):
    """A frozen graph that tiles (or broadcasts) a conditioning vector over
    the sequence's frames and concatenates it to each frame before a GRU
    (refused: "mixes a per-step tensor with a whole-sequence tensor"): the
    vector's input is held, and the library equals the graph over 120 steps."""
    import keras
    import tensorflow as tf
    from tensorflow.python.framework.convert_to_constants import (
        convert_variables_to_constants_v2,
    )

    keras.utils.set_random_seed(5)
    gru = keras.layers.GRU(6, return_sequences=True)
    gru.build((1, None, 7))

    def model(x, c):
        c = tf.expand_dims(c, 1)
        if form == "tile_first":
            return gru(tf.concat([tf.tile(c, [1, tf.shape(x)[1], 1]), x], -1))
        wide = tf.broadcast_to(c, tf.concat([tf.shape(x)[:2], tf.shape(c)[2:]], 0))
        return gru(tf.concat([x, wide], axis=2))

    concrete = tf.function(model).get_concrete_function(
        tf.TensorSpec((1, None, 4), tf.float32, name="x"),
        tf.TensorSpec((1, 3), tf.float32, name="cond"))
    graph_def = convert_variables_to_constants_v2(concrete).graph.as_graph_def()
    path, out = tmp_path / "concat_cond.pb", tmp_path / "lib"
    path.write_bytes(graph_def.SerializeToString())
    _build(path, out)
    assert dict(_held_inputs(out)) == {"x": False, "cond": True}
    rng = np.random.default_rng(6)
    xs = rng.normal(size=(1, STEPS, 4)).astype(np.float32)
    c = rng.normal(size=(1, 3)).astype(np.float32)
    got = _step_with_held_cond(harness.load(out), xs, c)
    want = np.asarray(model(tf.constant(xs), tf.constant(c)))[0]
    np.testing.assert_allclose(np.asarray(got).reshape(STEPS, 6), want, rtol=0, atol=1e-5)
    _verify(path, out)


def test_attention_onto_a_memory_input_streams_frame_by_frame(tmp_path):
    """frames (None, 6) attend to a memory input (5, 4) without a time axis
    (an encoder's output), then a GRU: each frame's attention reads that
    frame and the memory alone, so it streams frame by frame; it was refused
    as "attends over the whole sequence". The memory is held (one value a
    stream) and the library equals Keras. Attention onto the sequence's own
    pooled mean, or onto the sequence itself, still cannot stream."""
    import keras
    import tensorflow as tf

    keras.utils.set_random_seed(5)
    x = keras.Input((None, 6), name="frames")
    memory = keras.Input((5, 4), name="memory")
    h = keras.layers.Dense(8)(x)
    h = keras.layers.LayerNormalization()(h + keras.layers.MultiHeadAttention(2, 4)(h, memory))
    y = keras.layers.Dense(3)(keras.layers.GRU(8, return_sequences=True)(h))
    model = keras.Model([x, memory], y)
    path, out = tmp_path / "cross.keras", tmp_path / "lib"
    model.save(path)
    _build(path, out)
    assert _held_inputs(out) == [("frames", False), ("memory", True)]
    rng = np.random.default_rng(6)
    xs = rng.normal(size=(1, STEPS, 6)).astype(np.float32)
    m = rng.normal(size=(1, 5, 4)).astype(np.float32)
    got = harness.load(out).step_n((np.swapaxes(xs, 0, 1), np.repeat(m[None], STEPS, 0)))
    want = np.asarray(model([tf.constant(xs), tf.constant(m)]))[0]
    np.testing.assert_allclose(np.asarray(got).reshape(STEPS, 3), want, rtol=0, atol=1e-5)
    _verify(path, out)
    pooled = keras.layers.GlobalAveragePooling1D(keepdims=True)(x)
    own = keras.Model(x, keras.layers.GRU(4)(keras.layers.MultiHeadAttention(2, 4)(x, pooled)))
    assert "attends over the whole sequence" in _refused(own, tmp_path / "own")
    itself = keras.Model(x, keras.layers.GRU(4)(keras.layers.Attention()([x, x])))
    assert "attends over the whole sequence" in _refused(itself, tmp_path / "itself")


TILE_LAYER = '''
import keras
from keras import ops


@keras.saving.register_keras_serializable(package="user")
class TileOver(keras.layers.Layer):
    """A user's layer: the vector repeated over the sequence's frames, concatenated."""

    def call(self, inputs):
        seq, vec = inputs
        frames = ops.repeat(ops.expand_dims(vec, 1), ops.shape(seq)[1], axis=1)
        return ops.concatenate([seq, frames], axis=-1)
'''


def test_a_users_layer_tiling_a_conditioning_vector_holds_it(tmp_path):
    """The probe of a user's layer now runs it with its inputs without a
    time axis whole (an attention's memory); found frame by frame, those
    inputs enter the sequence, so they are held, as a Keras layer's are
    (without that, verify failed at 0.5: the model has one value). A value
    pooled from the sequence is still refused."""
    import keras

    (tmp_path / "tile.py").write_text(TILE_LAYER)
    spec = importlib.util.spec_from_file_location("tile_layers", tmp_path / "tile.py")
    layers_module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(layers_module)
    keras.utils.set_random_seed(7)
    x = keras.Input((None, 6), name="seq")
    cond = keras.Input((3,), name="cond")
    h = keras.layers.GRU(8, return_sequences=True)(layers_module.TileOver()([x, cond]))
    path, out = tmp_path / "tile.keras", tmp_path / "lib"
    keras.Model([x, cond], keras.layers.Dense(2)(h)).save(path)
    flags = ["--custom-objects", str(tmp_path / "tile.py")]
    _build(path, out, *flags)
    assert _held_inputs(out) == [("seq", False), ("cond", True)]
    _verify(path, out, *flags)
    pooled = keras.layers.GlobalAveragePooling1D()(x)
    own = keras.Model(x, keras.layers.GRU(4)(layers_module.TileOver()([x, pooled])))
    own.save(tmp_path / "own.keras")
    proc = subprocess.run([sys.executable, "-m", "tfaot", "build", str(tmp_path / "own.keras"),
                           "-o", str(tmp_path / "own"), "-q", *flags], capture_output=True,
                          text=True)
    assert proc.returncode != 0 and "value pooled from it" in proc.stderr, proc.stderr
