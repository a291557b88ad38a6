"""Models with several outputs (a keyword head and a voice-activity head):
the typed NAME_outputs struct, the harness, verify, against TensorFlow."""
import shutil
import subprocess
import sys

import numpy as np
import pytest

import graph_models as gm
from tfaot import harness


def _two_heads():
    """Input(None, 8) -> LSTM(16, sequences) -> Dense(3) "keyword" and Dense(1, sigmoid) "vad"."""
    import keras

    keras.utils.set_random_seed(11)
    x = keras.Input((None, 8))
    h = keras.layers.LSTM(16, return_sequences=True)(x)
    keyword = keras.layers.Dense(3, name="keyword")(h)
    vad = keras.layers.Dense(1, activation="sigmoid", name="vad")(h)
    return keras.Model(x, [keyword, vad])


def _build(path, out, *extra):
    proc = subprocess.run([sys.executable, "-m", "tfaot", "build", str(path), "-o", str(out),
                           "-q", *extra], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def _verify(path, out, steps: int = 100) -> str:
    """``tfaot verify`` of the library in ``out``; its output, once it passed."""
    proc = subprocess.run([sys.executable, "-m", "tfaot", "verify", str(path), str(out),
                           "--steps", str(steps)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


@pytest.fixture(scope="module")
def two_heads(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("two_heads")
    model = _two_heads()
    path = tmp / "heads.keras"
    model.save(path)
    out = tmp / "lib"
    _build(path, out)
    return model, path, out


def test_two_heads_stream_through_the_so(two_heads):
    model, _, out = two_heads
    lib = harness.load(out)
    assert [name for name, _, _ in lib.output_specs] == ["keyword", "vad"]
    xs = np.random.default_rng(0).normal(size=(1, 150, 8)).astype(np.float32)
    want = [np.asarray(y)[0] for y in model(xs)]
    got = [lib.step(xs[:, t]) for t in range(xs.shape[1])]
    assert all(isinstance(y, tuple) and len(y) == 2 for y in got)
    for i, w in enumerate(want):
        g = np.stack([y[i] for y in got])[:, 0]
        assert g.shape == w.shape
        assert np.abs(g - w).max() <= 1e-5
    lib.reset()
    many = lib.step_n(np.swapaxes(xs, 0, 1))
    for i, w in enumerate(want):
        assert many[i].shape == (150, *lib.output_shapes[i])
        assert np.abs(many[i][:, 0] - w).max() <= 1e-5


def test_two_heads_verify_reports_each_output(two_heads):
    _, path, out = two_heads
    stdout = _verify(path, out)
    lines = [line for line in stdout.splitlines() if "max abs error" in line]
    assert len(lines) == 2, stdout
    assert lines[0].startswith("keyword:") and lines[1].startswith("vad:")
    assert all("over 100 steps" in line and line.endswith("ok") for line in lines)


def test_two_heads_header_and_c_driver(two_heads, tmp_path):
    _, _, out = two_heads
    header = (out / "heads.h").read_text()
    assert "} heads_outputs;" in header
    assert "float keyword[3];" in header and "float vad[1];" in header
    assert "int heads_step(heads_ctx *ctx, const heads_input_t *in, heads_outputs *out);" \
        in header
    assert "heads_output_t" not in header
    gcc = shutil.which("gcc") or shutil.which("cc")
    if gcc is None:
        pytest.skip("no C compiler")
    driver = tmp_path / "main.c"
    driver.write_text(r"""
#include <stdio.h>
#include "heads.h"
static _Alignas(HEADS_CTX_ALIGN) unsigned char mem[HEADS_CTX_SIZE];
static int written;
int heads_write_output(void *user, const heads_outputs *out, size_t n) {
  (void)user;
  if (n != 1) return -1;
  written += out->vad[0] >= 0.0f && out->vad[0] <= 1.0f;
  return 0;
}
int heads_read_input(void *user, heads_input_t *in, size_t n) {
  int *left = (int *)user;
  for (size_t i = 0; i < n; ++i) in[i] = 0.25f * (float)i;
  return (*left)-- > 0;
}
int main(void) {
  heads_ctx *ctx = (heads_ctx *)mem;
  if (heads_init(ctx) != HEADS_OK) return 1;
  heads_input_t in[HEADS_INPUT_SIZE] = {0};
  heads_outputs out[2];
  if (heads_step(ctx, in, &out[0]) != HEADS_OK) return 2;
  heads_input_t ins[2 * HEADS_INPUT_SIZE] = {0};
  if (heads_reset(ctx) != HEADS_OK || heads_step_n(ctx, ins, out, 2) != HEADS_OK) return 3;
  int left = 5;
  if (heads_run(ctx, &left, -1) != 5 || written != 5) return 4;
  printf("%g %g %g %g\n", out[0].keyword[0], out[0].keyword[1], out[0].keyword[2],
         out[1].vad[0]);
  heads_deinit(ctx);
  return 0;
}
""")
    exe = tmp_path / "main"
    compile_ = subprocess.run([gcc, "-std=c11", "-Wall", "-Wextra", "-Werror", "-I", str(out),
                               str(driver), str(out / "libheads.a"), "-lm", "-o", str(exe)],
                              capture_output=True, text=True)
    assert compile_.returncode == 0, compile_.stderr
    run = subprocess.run([str(exe)], capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr
    assert len(run.stdout.split()) == 4


def test_one_output_model_keeps_the_flat_signature(tmp_path):
    """The single-output C API is unchanged: flat NAME_output_t arrays, no struct."""
    import keras

    keras.utils.set_random_seed(2)
    model = keras.Sequential([keras.Input((None, 4)), keras.layers.GRU(5, return_sequences=True),
                              keras.layers.Dense(2)])
    path = tmp_path / "one.keras"
    model.save(path)
    _build(path, tmp_path / "lib")
    header = (tmp_path / "lib" / "one.h").read_text()
    assert "int one_step(one_ctx *ctx, const one_input_t *in, one_output_t *out);" in header
    assert "one_outputs" not in header
    lib = harness.load(tmp_path / "lib")
    assert isinstance(lib.step(np.zeros(lib.input_shape, np.float32)), np.ndarray)


@pytest.mark.parametrize("named", [1, pytest.param(2, marks=pytest.mark.slow)])
def test_named_outputs_in_a_dict(tmp_path, named):
    """A model whose outputs are a dict (Keras orders them by key): one or
    two of them, built, verified against TensorFlow and stepped; the
    fields take the keys' names (not the layers')."""
    import keras

    keras.utils.set_random_seed(4)
    x = keras.Input((None, 5))
    h = keras.layers.GRU(6, return_sequences=True)(x)
    heads = {"logits": keras.layers.Dense(3, name="dense_a")(h),
             "gate": keras.layers.Dense(1, activation="sigmoid", name="dense_b")(h)}
    model = keras.Model(x, dict(list(heads.items())[:named]))
    path = tmp_path / "named.keras"
    model.save(path)
    _build(path, tmp_path / "lib")
    stdout = _verify(path, tmp_path / "lib")
    assert stdout.count("ok") == named, stdout
    lib = harness.load(tmp_path / "lib")
    if named == 2:  # the outputs named by their keys, in Keras' order
        assert [name for name, _, _ in lib.output_specs] == ["gate", "logits"]
    xs = np.random.default_rng(1).normal(size=(1, 30, 5)).astype(np.float32)
    want = keras.tree.flatten(model(xs))  # by name: "gate" before "logits"
    got = [lib.step(xs[:, t]) for t in range(30)]
    got = [np.stack(got)[:, 0]] if named == 1 else [np.stack([y[i] for y in got])[:, 0]
                                                    for i in range(named)]
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, np.asarray(w)[0], rtol=0, atol=1e-5)


def test_last_output_reshaped_to_one_row(tmp_path):
    """A last output reshaped to (1, n) keeps no time axis: verify compares
    each step with the model on the prefix (it took the 1 for time)."""
    import keras

    keras.utils.set_random_seed(5)
    x = keras.Input((None, 4))
    model = keras.Model(x, keras.layers.Reshape((1, 6))(keras.layers.LSTM(6)(x)))
    path = tmp_path / "last.keras"
    model.save(path)
    _build(path, tmp_path / "lib")
    assert "ok" in _verify(path, tmp_path / "lib")


def test_outputs_that_are_not_float32(tmp_path):
    """A mixed_float16 model whose head was left float16, and an argmax
    beside it: the step gives the float16 head as float32 and the argmax as
    int32 (keras.ops.argmax), and verify passes (the signature said float32 for every output,
    and iree-compile failed with a result type mismatch)."""
    import keras

    keras.utils.set_random_seed(6)
    keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        x = keras.Input((None, 4))
        logits = keras.layers.Dense(3, name="logits")(
            keras.layers.GRU(5, return_sequences=True)(x))
    finally:
        keras.mixed_precision.set_global_policy("float32")
    model = keras.Model(x, [logits, keras.ops.argmax(logits, axis=-1)])
    assert model.outputs[0].dtype == "float16"
    path = tmp_path / "dtypes.keras"
    model.save(path)
    _build(path, tmp_path / "lib")
    lib = harness.load(tmp_path / "lib")
    assert [dt for _, dt, _ in lib.output_specs] == [np.float32, np.int32]
    assert _verify(path, tmp_path / "lib", steps=50).count(": ok") == 2


def _two_output_graph():
    """A frozen TF graph with two outputs (Identity:0, Identity_1:0) over one input "x"."""
    import tensorflow as tf
    from tensorflow.python.framework.convert_to_constants import (
        convert_variables_to_constants_v2,
    )

    model = _two_heads()
    cf = tf.function(lambda v: model(v)).get_concrete_function(
        tf.TensorSpec((1, None, 8), tf.float32, name="x"))
    return convert_variables_to_constants_v2(cf).graph.as_graph_def()


def test_graph_with_two_outputs(tmp_path):
    gd = _two_output_graph()
    path = tmp_path / "g2.pb"
    path.write_bytes(gd.SerializeToString())
    out = tmp_path / "lib"
    _build(path, out, "--outputs", "Identity,Identity_1")
    lib = harness.load(out)
    assert len(lib.output_specs) == 2
    xs = np.random.default_rng(1).normal(size=(1, 110, 8)).astype(np.float32)
    want = gm.run_graph_def(gd, "x", ["Identity:0", "Identity_1:0"], xs)
    got = [lib.step(xs[:, t]) for t in range(xs.shape[1])]
    for i in range(2):
        g = np.stack([y[i] for y in got])[:, 0]
        assert np.abs(g - np.asarray(want[i])[0]).max() <= 1e-5
    verify = subprocess.run([sys.executable, "-m", "tfaot", "verify", str(path), str(out),
                             "--outputs", "Identity,Identity_1", "--steps", "100"],
                            capture_output=True, text=True)
    assert verify.returncode == 0, verify.stdout + verify.stderr
    assert len([line for line in verify.stdout.splitlines() if "max abs error" in line]) == 2


def test_a_saved_model_output_picked_by_its_signature_key(two_heads, tmp_path):
    """--outputs output_1 on a Keras 3 export: the signature's key, as the
    manifest and verify name the outputs (was "output node 'output_1' is
    not in the graph")."""
    import json

    model, _, _ = two_heads
    path, out = tmp_path / "sm", tmp_path / "lib"
    model.export(path, verbose=False)
    _build(path, out, "--outputs", "output_1")
    manifest = json.loads(next(out.glob("*.json")).read_text())
    assert [(o["name"], o["shape"]) for o in manifest["outputs"]] == [("output_1", [1, 1])]
    xs = np.random.default_rng(2).normal(size=(1, 110, 8)).astype(np.float32)
    got = harness.load(out).step_n(np.swapaxes(xs, 0, 1)).reshape(110, 1)
    np.testing.assert_allclose(got, np.asarray(model(xs)[1])[0], rtol=0, atol=1e-5)
    assert "output_1: max abs error" in _verify(path, out)


def test_an_output_faster_than_the_steps_returns_each_of_its_frames(tmp_path):
    """A head at every frame beside a branch with a time stride of 2: each
    step takes 2 frames and returns both of the fast head's (it returned the
    last one only, with a warning), the slow head's one."""
    import json

    import keras

    keras.utils.set_random_seed(5)
    x = keras.Input((None, 6))
    fast = keras.layers.Dense(2, name="fast")(keras.layers.LSTM(8, return_sequences=True)(x))
    slow = keras.layers.Conv1D(8, 2, strides=2)(x)
    slow = keras.layers.Dense(3, name="slow")(keras.layers.GRU(6, return_sequences=True)(slow))
    model = keras.Model(x, [fast, slow])
    path, out = tmp_path / "two_rates.keras", tmp_path / "lib"
    model.save(path)
    _build(path, out)
    manifest = json.loads(next(out.glob("*.json")).read_text())
    assert manifest["stream"]["frames_per_step"] == 2
    assert manifest["stream"]["output_frames"] == [2, 1]
    assert [o["shape"] for o in manifest["outputs"]] == [[1, 2, 2], [1, 3]]
    xs = np.random.default_rng(4).normal(size=(1, 120, 6)).astype(np.float32)
    lib = harness.load(out)
    got = [lib.step(xs[:, 2 * m:2 * m + 2]) for m in range(60)]
    want_fast, want_slow = (np.asarray(y)[0] for y in model(xs))
    np.testing.assert_allclose(np.concatenate([g[0][0] for g in got]), want_fast,
                               rtol=0, atol=1e-5)
    np.testing.assert_allclose(np.stack([g[1][0] for g in got]), want_slow, rtol=0, atol=1e-5)
    report = _verify(path, out)
    assert "fast: max abs error" in report and "slow: max abs error" in report
