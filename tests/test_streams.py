"""--streams N (lower/streams.py): one context steps N independent streams.

Each stream of an N-stream library equals the one-stream library on the same
frames (within 1e-6: the N-stream step is a matrix product where the
one-stream step is a matvec, so the summation order differs) and TensorFlow
(tfaot verify); streams do not see each other's inputs; one stream's state
moves, resets and restores alone, from Python and from C (ASan + UBSan).
"""
from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

import keras_conv_models
from tfaot import harness
from tfaot.cli import main
from tfaot.errors import TfaotError
from tfaot.pipeline import BuildOptions, Progress, build_model
from util import run

STREAMS = 4
STEPS = 120
C_DIR = Path(__file__).parent / "data" / "backend" / "c"


def _lstm_gru():
    import keras
    from keras import layers as L

    keras.utils.set_random_seed(1)
    x = keras.Input((None, 12))
    h = L.LSTM(24, return_sequences=True)(x)
    return keras.Model(x, L.Dense(3)(L.GRU(16)(h)))


def _running_max():
    """A running max over open time: its state starts at -FLT_MAX, not 0
    (reset_stream writes that word), over outputs near -5 (a reset to 0
    would show)."""
    import keras
    from keras import layers as L

    keras.utils.set_random_seed(2)
    x = keras.Input((None, 6))
    h = L.Conv1D(8, 3, padding="causal")(x)
    h = L.LSTM(8, return_sequences=True)(h)
    h = L.Dense(8, bias_initializer=keras.initializers.Constant(-5.0))(h)
    return keras.Model(x, L.Dense(3)(L.GlobalMaxPooling1D()(h)))


MODELS = {"lstm_gru": _lstm_gru, "running_max": _running_max}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """name -> (model file, one-stream library, N-stream library)"""
    root = tmp_path_factory.mktemp("streams")
    cache = {}

    def get(name):
        if name not in cache:
            model = MODELS[name]() if name in MODELS else keras_conv_models.build(name)
            path = root / f"{name}.keras"
            model.save(path)
            dirs = []
            for n in (1, STREAMS):
                out = build_model(str(path), BuildOptions(out_dir=root / f"{name}_{n}",
                                                          streams=n, keep_temps=n > 1),
                                  Progress(False))
                dirs.append(out.path)
            cache[name] = (path, *dirs)
        return cache[name]
    return get


def _frames(lib, steps, seed=0):
    return np.random.default_rng(seed).normal(size=(steps, *lib.input_shape)).astype(np.float32)


@pytest.mark.parametrize("name", ["lstm_gru", pytest.param("ds_cnn", marks=pytest.mark.slow)])
def test_each_stream_equals_the_one_stream_library(built, name):
    """ds_cnn: a sliding window of convolutions (ring buffers, a depthwise
    convolution whose filter all streams share)."""
    _, one_dir, many_dir = built(name)
    one, many = harness.load(one_dir), harness.load(many_dir)
    assert many.streams == STREAMS and one.streams == 1
    assert many.input_shape == (STREAMS, *one.input_shape)
    assert many.output_shape == (STREAMS, *one.output_shape)
    xs = _frames(many, STEPS)
    got = many.step_n(xs)
    worst = 0.0
    for i in range(STREAMS):
        one.reset()
        want = one.step_n(np.ascontiguousarray(xs[:, i]))
        worst = max(worst, float(np.abs(got[:, i] - want).max()))
    print(f"{name}: max abs difference to the one-stream library {worst:.3g} "
          f"over {STREAMS} x {STEPS} steps")
    assert worst <= 1e-6


def test_matrix_products_of_all_streams_run_in_the_micro_kernel(built):
    """Each ``X[N,K] . W`` of the N-stream step is a call of tfaot's
    register-blocked kernel (as a 1x1 convolution over N positions), not
    IREE's matmul: the LSTM's input and recurrent products as one
    (``[x, h] . [W; U]``: lower/matvec_sums.py), the GRU's two (its
    recurrent product is scaled by the reset gate, not added), the head."""
    _, _, many_dir = built("lstm_gru")
    text = (many_dir / "temps" / "compile" / "lstm_gru.mlir").read_text()
    assert "stablehlo.dot" not in text
    assert text.count(f"-> tensor<{STREAMS}x") >= 4
    assert len(set(re.findall(r"call @(tfaot_conv_\d+)\(", text))) == 4


def test_convolutions_of_all_streams_run_in_the_micro_kernels(built):
    """An N-stream step's convolutions (batch N) are tfaot's kernels, as the
    one-stream step's are: each dispatch loops over the streams' images
    (scf.for), where IREE's own convolutions made the 4-stream DS-CNN's
    step 8x the cost of 4 one-stream steps. Numbers: the test above."""
    _, one_dir, many_dir = built("ds_cnn")
    text = (many_dir / "temps" / "compile" / "ds_cnn.mlir").read_text()
    assert "stablehlo.convolution" not in text
    assert {"conv", "dwconv"} <= set(harness.load(many_dir).manifest["micro_kernels"])
    assert set(harness.load(one_dir).manifest["micro_kernels"]) <= set(
        harness.load(many_dir).manifest["micro_kernels"]) | {"matvec"}
    assert "scf.for %b = %c0 to %batch" in text


def _streams_equal_one_stream(libs, seed, nan_stream, nan_from):
    """The N-stream library's outputs on random frames (NaN in one stream
    from a step on): each stream's equal the one-stream library's bit for
    bit, the other streams' finite. Returns them."""
    xs = _frames(libs[STREAMS], STEPS, seed=seed)
    xs[nan_from:, nan_stream] = np.nan
    got = libs[STREAMS].step_n(xs)
    for i in range(STREAMS):
        libs[1].reset()
        want = libs[1].step_n(np.ascontiguousarray(xs[:, i]))
        assert np.array_equal(got[:, i], want, equal_nan=True), i
    assert np.isfinite(np.delete(got, nan_stream, axis=1)).all()
    return got


def test_int8_convolutions_of_streams_equal_the_one_stream_library(tmp_path):
    """With int8 weights (the int8 convolution kernel whatever this
    machine's CPU) each stream's outputs are the one-stream int8 library's
    bit for bit (each image quantized by itself, the scratch reused), and a
    stream fed NaN gets NaN alone."""
    from dataclasses import replace

    import keras
    from keras import layers as L

    from tfaot import target_options

    keras.utils.set_random_seed(2)
    x = keras.Input((None, 10))  # a 3-frame filter over 10 features, then a 1x1 layer
    h = L.Conv1D(40, 1, activation="relu")(L.Conv1D(48, 3, activation="relu")(x))
    path = tmp_path / "c1d.keras"
    keras.Model(x, L.Dense(3)(h)).save(path)
    make_target = target_options.make_target
    libs = {}
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(target_options, "make_target", lambda *args, **kwargs: replace(
            make_target(*args, **kwargs), int8_convolutions=True))
        for n in (1, STREAMS):
            out = tmp_path / f"i8_{n}"
            assert main(["-q", "build", str(path), "--streams", str(n),
                         "--weights-dtype=int8", "-o", str(out)]) == 0
            libs[n] = harness.load(out)
    assert "qconv" in libs[STREAMS].manifest["micro_kernels"]
    assert libs[STREAMS].manifest["int8_layers"] == 2
    got = _streams_equal_one_stream(libs, seed=5, nan_stream=1, nan_from=60)
    assert np.isnan(got[70:, 1]).all()


def test_streams_do_not_see_each_other(built):
    _, _, many_dir = built("lstm_gru")
    many = harness.load(many_dir)
    xs = _frames(many, 60)
    base = many.step_n(xs)
    other = xs.copy()
    other[:, 0] = _frames(many, 60, seed=9)[:, 0]
    many.reset()
    changed = many.step_n(other)
    assert not np.array_equal(changed[:, 0], base[:, 0])
    np.testing.assert_array_equal(changed[:, 1:], base[:, 1:])


@pytest.mark.parametrize("name", ["lstm_gru", "running_max"])
def test_one_stream_moves_resets_and_restores(built, name):
    _, one_dir, many_dir = built(name)
    one, many = harness.load(one_dir), harness.load(many_dir)
    xs = _frames(many, 50)
    many.step_n(xs[:20])
    saved = many.get_stream_state(1)
    assert [s.shape for s in saved] == [shape[1:] for _, _, shape in many.state_specs]
    # the one-stream library, fed stream 1's frames, holds the same state
    one.step_n(np.ascontiguousarray(xs[:20, 1]))
    for a, b in zip(one.get_state(), saved):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-6)
    # stream 3 takes stream 1's state and stream 2 is reset: from here on,
    # stream 3 continues stream 1 and stream 2 starts afresh.
    many.set_stream_state(3, saved)
    many.reset_stream(2)
    rest = many.step_n(xs[20:])
    one.set_state(saved)
    np.testing.assert_allclose(rest[:, 3], one.step_n(np.ascontiguousarray(xs[20:, 3])),
                               rtol=0, atol=1e-6)
    one.reset()
    np.testing.assert_allclose(rest[:, 2], one.step_n(np.ascontiguousarray(xs[20:, 2])),
                               rtol=0, atol=1e-6)
    with pytest.raises(TfaotError, match="reset_stream failed with status 1"):
        many.reset_stream(STREAMS)
    with pytest.raises(TfaotError, match="of one stream must be"):
        many.set_stream_state(0, [np.zeros((STREAMS, *s.shape), s.dtype) for s in saved])


def test_verify_compares_every_stream_with_tensorflow(built, capsys):
    path, _, many_dir = built("lstm_gru")
    assert main(["verify", str(path), str(many_dir), "--steps", "100"]) == 0
    out = capsys.readouterr().out
    assert f"over {STREAMS * 100} steps of {STREAMS} streams" in out and ": ok" in out


def test_c_program_under_sanitizers(built, tmp_path):
    if not shutil.which("gcc"):
        pytest.skip("needs gcc")
    _, one_dir, many_dir = built("lstm_gru")
    src = many_dir.parent / f"{many_dir.name}" / "src"
    name = "lstm_gru"
    exe = tmp_path / "streams"
    run(["gcc", "-std=c11", "-Wall", "-Wextra", "-Werror", "-O1", "-g",
         "-fsanitize=address,undefined", "-fno-sanitize-recover=all",
         f"-DTFAOT_MODEL={name}", f"-DTFAOT_UPPER={name.upper()}", f'-DTFAOT_HEADER="{name}.h"',
         "-I", src, C_DIR / "streams.c", src / f"{name}.c", src / f"{name}_kernels.o", "-lm",
         "-o", exe])
    proc = run([exe], env={"ASAN_OPTIONS": "detect_leaks=1:abort_on_error=1",
                           "UBSAN_OPTIONS": "halt_on_error=1:print_stacktrace=1"})
    assert "runtime error" not in proc.stderr
    rows = [line.split("|") for line in proc.stdout.splitlines()]
    first = np.array([r[0].split() for r in rows], np.float32)
    last = np.array([r[1].split() for r in rows], np.float32)
    # The same frames through the one-stream library, moves included.
    one = harness.load(one_dir)
    k = np.arange(one.input_shape[-1])
    frames = [np.array([((t * 31 + s * 17 + k * 7) % 23) / 11.0 - 1.0 for t in range(40)],
                       np.float32).reshape(40, *one.input_shape) for s in (0, STREAMS - 1)]
    want_first = one.step_n(frames[0][:10])
    saved = one.get_state()
    want_first = np.concatenate([want_first, one.step_n(frames[0][10:30])])
    one.reset()
    want_first = np.concatenate([want_first, one.step_n(frames[0][30:])])
    one.reset()
    want_last = one.step_n(frames[1][:20])
    one.set_state(saved)
    want_last = np.concatenate([want_last, one.step_n(frames[1][20:])])
    np.testing.assert_allclose(first, want_first.reshape(40, -1), rtol=0, atol=1e-5)
    np.testing.assert_allclose(last, want_last.reshape(40, -1), rtol=0, atol=1e-5)


@pytest.mark.parametrize("count", ["0", "5000", "-2"])
def test_bad_stream_counts_are_one_line_errors(tmp_path, capsys, count):
    path = tmp_path / "m.keras"
    _lstm_gru().save(path)
    assert main(["build", str(path), "--streams", count, "-o", str(tmp_path / "out")]) != 0
    err = capsys.readouterr().err
    assert "--streams must be between 1 and 4096" in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()


def test_int8_streams_take_the_int8_matmul(built, tmp_path, capsys):
    """--weights-dtype=int8 with streams: the matrices of 1024 weights or
    more go to the int8 matmul kernel, whose streams each equal the
    one-stream int8 library bit for bit (the same quantization and sums per
    stream); a stream fed NaN gets NaN alone; tfaot verify passes at the
    int8 tolerance."""
    path, _, _ = built("lstm_gru")
    libs = {}
    for n in (1, STREAMS):
        out = tmp_path / f"i8_{n}"
        assert main(["-q", "build", str(path), "--streams", str(n), "--weights-dtype=int8",
                     "-o", str(out)]) == 0
        libs[n] = harness.load(out)
    manifest = libs[STREAMS].manifest
    assert manifest["weights_dtype"] == "int8" and "matmul" in manifest["micro_kernels"]
    assert "stay f32" not in capsys.readouterr().err
    got = _streams_equal_one_stream(libs, seed=3, nan_stream=2, nan_from=40)
    assert np.isnan(got[40:, 2]).all()
    assert main(["verify", str(path), str(tmp_path / f"i8_{STREAMS}"), "--steps", "100"]) == 0
    assert f"over {100 * STREAMS} steps of {STREAMS} streams (tolerance 0.05): ok" in \
        capsys.readouterr().out


def test_int8_streams_on_a_cortex_m_take_the_int8_matmul(built, tmp_path, capsys):
    """A Cortex-M4 build with --streams and --weights-dtype=int8 takes the
    int8 matmul by itself, as one-stream bare-metal int8 builds take their
    kernels (it fell back to IREE's f32 kernels, warning that no matrix
    was large enough), and verifies under qemu-system-arm."""
    import toolchains

    toolchains.require("arm-none-eabi-gcc", "qemu-system-arm")
    path, _, _ = built("lstm_gru")
    out = tmp_path / "m4"
    assert main(["-q", "build", str(path), "--streams", "2", "--weights-dtype=int8",
                 "--triple", "thumbv7em-none-eabihf", "--cpu", "cortex-m4", "-o", str(out)]) == 0
    manifest = json.loads((out / "lstm_gru.json").read_text())
    assert manifest["weights_dtype"] == "int8" and "matmul" in manifest["micro_kernels"]
    assert "stay f32" not in capsys.readouterr().err
    assert main(["verify", str(path), str(out), "--steps", "100"]) == 0
    assert "over 200 steps of 2 streams (tolerance 0.05): ok" in capsys.readouterr().out


def test_vulkan_build_of_eight_streams_verifies(built, tmp_path, capsys):
    """--target=vulkan through the same seam (lavapipe: a CPU emulation, so
    correctness only, no speed)."""
    import toolchains

    toolchains.require_vulkan()
    path, _, _ = built("lstm_gru")
    out = tmp_path / "vk"
    assert main(["-q", "build", str(path), "--target=vulkan", "--streams", "8",
                 "-o", str(out)]) == 0
    assert main(["verify", str(path), str(out), "--steps", "100"]) == 0
    assert "over 800 steps of 8 streams" in capsys.readouterr().out


@pytest.mark.parametrize("name", ["lstm_gru", "ds_cnn"])
def test_the_n_stream_context_holds_its_state_once(built, name):
    """The N-stream step writes the new state over the old, as one stream's
    does (emit/state_reuse.py): the batched ring buffers' copies are IREE
    dispatches bound to the whole state, whose sources show the one
    stream's rows each touches (emit/dispatch_source.py accessed_ranges),
    and a call of tfaot's kernels that reads the LSTM's new state for the
    GRU writes only its output view (binding_extents). The 2-stream int8
    DS-CNN of bench_mcu on a Cortex-M4: a context of 89,920 B before,
    67,776 B now. Numbers: the tests above."""
    _, _, many_dir = built(name)
    manifest = json.loads((many_dir / f"{name}.json").read_text())
    state_block = -(-manifest["state_bytes"] // 64) * 64
    assert manifest["arena_pools"] == [[state_block, 1]], manifest["arena_pools"]
    text = (many_dir / "src" / f"{name}.c").read_text()
    step = text[text.index(f"static int {name}_vm_step_direct("):]
    step = step[:step.index("\n}\n")]
    assert "allocate" not in step


@pytest.mark.parametrize("name", ["lstm_gru", "running_max"])
def test_one_streams_rows_are_written_where_they_lie(built, name):
    """set_stream_state and reset_stream write one stream's rows through
    @get_state's views of the state (package/c_api.py writes_stream_rows):
    the context keeps no copy of all streams' state for them (2 streams of
    the 49x40 DS-CNN: 85 KB), and reset_stream writes the rows' initial
    value itself (the running max's -FLT_MAX, a repeated word). The moves'
    numbers: test_one_stream_moves_resets_and_restores."""
    _, _, many_dir = built(name)
    text = (many_dir / "src" / f"{name}.c").read_text()
    assert "state_copy" not in text
    assert f"return {name}_leave(ctx, {name}_write_stream_rows(ctx, stream, NULL));" in text
    if name == "running_max":
        assert "const uint32_t w = 0xFF7FFFFFu;" in text


def test_a_step_pfor_cannot_batch_is_refused_in_one_line(tmp_path):
    """A crop and resize (its boxes name images of the batch), which pfor
    has no batched form of: TensorFlow's vectorization logged 200 lines (a
    Python traceback at ERROR level) before tfaot's one-line refusal."""
    import subprocess
    import sys

    import tensorflow as tf

    class Cropped(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([1, 8, 8, 4], tf.float32)])
        def serve(self, image):
            return tf.image.crop_and_resize(image, [[0.1, 0.1, 0.8, 0.9]], [0], (5, 5))

    tf.saved_model.save(Cropped(), str(tmp_path / "crop"))
    proc = subprocess.run([sys.executable, "-m", "tfaot", "-q", "build", "crop", "-o", "out",
                           "--streams", "2"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=600)
    lines = [ln for ln in proc.stderr.strip().splitlines() if not ln.startswith("tfaot: note:")]
    assert proc.returncode == 1 and len(lines) == 1, proc.stderr
    assert "--streams 2: TensorFlow cannot batch the step" in lines[0], lines
    assert "CropAndResize" in lines[0], lines


@pytest.mark.parametrize("op", ["lrn", "patches"])
def test_normalized_and_patched_images_of_several_streams(tmp_path, capsys, op):
    """A local response normalization (AlexNet's, GoogLeNet's) and image
    patches, which pfor has no batched form of (--streams refused them),
    fold the streams into their batch: each stream as TensorFlow runs it."""
    import tensorflow as tf

    kernel = tf.constant(np.random.default_rng(2).normal(size=(3, 3, 4, 3)), tf.float32)

    def apply(image):
        if op == "lrn":
            return tf.nn.local_response_normalization(image, depth_radius=2, alpha=0.1)
        return tf.image.extract_patches(image, [1, 3, 3, 1], [1, 2, 2, 1], [1, 1, 1, 1],
                                        "VALID")

    class Model(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([1, 9, 9, 4], tf.float32)])
        def serve(self, image):
            return apply(tf.nn.relu(tf.nn.conv2d(image, kernel, 1, "SAME")))

    tf.saved_model.save(Model(), str(tmp_path / op))
    out = tmp_path / "out"
    assert main(["-q", "build", str(tmp_path / op), "-o", str(out), "--streams", "2"]) == 0
    assert main(["verify", str(tmp_path / op), str(out), "--steps", "100"]) == 0
    assert ": ok" in capsys.readouterr().out


def _two_streams_verify(model, capsys, steps: int, *flags) -> None:
    """``model`` built with --streams 2 (and ``flags``): verify, which
    compares each stream with TensorFlow, is ok over ``steps`` steps."""
    out = model.parent / "out"
    assert main(["-q", "build", str(model), "-o", str(out), "--streams", "2", *flags]) == 0
    assert main(["verify", str(model), str(out), "--steps", str(steps)]) == 0
    assert ": ok" in capsys.readouterr().out


def test_images_and_video_frames_of_several_streams(tmp_path, capsys):
    """A resize and a Conv3D, which pfor has no batched form of (--streams
    refused them), fold the streams into their batch: each stream of a
    --streams 2 build as TensorFlow runs it."""
    import keras

    L = keras.layers
    keras.utils.set_random_seed(6)
    x = keras.Input((4, 6, 6, 2))
    h = L.Conv3D(3, 3, padding="same", activation="relu")(x)
    h = L.TimeDistributed(L.Resizing(5, 5, interpolation="nearest"))(h)
    keras.Model(x, L.Dense(2)(L.Flatten()(h))).save(tmp_path / "clip.keras")
    _two_streams_verify(tmp_path / "clip.keras", capsys, 100, "--whole-window")


@pytest.mark.parametrize("rank", [1, 2, 3])
def test_transposed_convolutions_of_several_streams(tmp_path, capsys, rank):
    """Conv1DTranspose, Conv2DTranspose (strided 'same', and stride 1
    'valid') and Conv3DTranspose: pfor's batched form computes the output
    size at run time, which TensorFlow's lowering does not take (--streams
    refused any of them); the streams fold into the batch with a constant
    size instead. Each stream as TensorFlow runs it."""
    import keras

    L = keras.layers
    keras.utils.set_random_seed(7)
    up = {1: L.Conv1DTranspose, 2: L.Conv2DTranspose, 3: L.Conv3DTranspose}[rank]
    x = keras.Input((6,) * rank + (2,))
    h = up(4, 3, strides=2, padding="same", activation="relu")(x)
    h = up(3, 2, padding="valid")(h)
    keras.Model(x, h).save(tmp_path / "up.keras")
    _two_streams_verify(tmp_path / "up.keras", capsys, 30)


def test_a_univariate_residual_of_several_streams(tmp_path, capsys):
    """Keras 3 adds a [1, T, 1] sequence to another as a BiasAdd over axis
    1 (data_format NCHW), whose batched form pfor reshaped wrongly: keras.io's
    time-series transformer failed with --streams 2. Each stream as
    TensorFlow runs it."""
    import keras

    L = keras.layers
    keras.utils.set_random_seed(8)
    x = keras.Input((24, 1))
    h = L.Add()([L.Dense(1, activation="tanh")(x), x])
    keras.Model(x, L.Dense(2)(L.Flatten()(h))).save(tmp_path / "uni.keras")
    _two_streams_verify(tmp_path / "uni.keras", capsys, 30, "--whole-window")


def test_a_batched_op_without_lowering_blames_streams(tmp_path, capsys, monkeypatch):
    """pfor's own batched form of a Conv2DTranspose (as before tfaot gave it
    one) is an op with no StableHLO lowering, which said nothing of --streams."""
    import keras

    from tfaot.lower import streams

    monkeypatch.setattr(streams, "TRANSPOSED_OPS", ())
    x = keras.Input((8, 8, 2))
    keras.Model(x, keras.layers.Conv2DTranspose(4, 2, strides=2, padding="same")(x)).save(
        tmp_path / "up.keras")
    assert main(["-q", "build", str(tmp_path / "up.keras"), "-o", str(tmp_path / "out"),
                 "--streams", "2"]) == 1
    err = capsys.readouterr().err
    assert "Conv2DBackpropInput" in err and "for --streams" in err, err
    assert "builds with one stream" in err, err


CLASS_TOKEN = '''
import keras
from keras import ops


@keras.saving.register_keras_serializable(package="user")
class ClassToken(keras.layers.Layer):
    """A learned token in front of the sequence (a ViT's class token)."""

    def build(self, shape):
        self.cls = self.add_weight(name="cls", shape=(1, 1, shape[-1]),
                                   initializer="random_normal")

    def call(self, x):
        token = ops.broadcast_to(self.cls, (ops.shape(x)[0], 1, ops.shape(x)[-1]))
        return ops.concatenate([token, x], axis=1)
'''


def _class_token_model(path):
    import importlib.util

    import keras

    (path.parent / "token.py").write_text(CLASS_TOKEN)
    spec = importlib.util.spec_from_file_location("token_layers", path.parent / "token.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    keras.utils.set_random_seed(2)
    x = keras.Input((10, 8), batch_size=1)
    h = module.ClassToken()(keras.layers.Dense(16)(x))
    h = keras.layers.MultiHeadAttention(num_heads=2, key_dim=8)(h, h)
    keras.Model(x, keras.layers.Dense(3)(h[:, 0])).save(path)
    return ["--custom-objects", str(path.parent / "token.py")]


def _mel_model(path):
    import keras

    keras.utils.set_random_seed(3)
    x = keras.Input((2000,), batch_size=1)
    h = keras.layers.MelSpectrogram(fft_length=256, sequence_stride=128, sequence_length=256,
                                    num_mel_bins=16, sampling_rate=8000)(x)
    h = keras.layers.Conv1D(8, 3, activation="relu")(keras.layers.Permute((2, 1))(h))
    keras.Model(x, keras.layers.Dense(4)(keras.layers.GlobalAveragePooling1D()(h))).save(path)
    return []


@pytest.mark.parametrize("make", [_class_token_model, _mel_model], ids=["class_token", "mel"])
def test_steps_that_pfor_left_unlowered_or_unbatched_build(tmp_path, capsys, make):
    """A class token (a weight broadcast over the batch: TensorFlow folded
    pfor's Tile of it into a constant after lowering, "'tf.Const' has no
    StableHLO lowering") and Keras' MelSpectrogram (reflect padding: "No
    pfor vectorization defined for MirrorPad") refused --streams 2; each
    stream now matches TensorFlow."""
    flags = make(tmp_path / "m.keras")
    assert main(["-q", "build", str(tmp_path / "m.keras"), "-o", str(tmp_path / "out"),
                 "--streams", "2", *flags]) == 0
    capsys.readouterr()
    assert main(["verify", str(tmp_path / "m.keras"), str(tmp_path / "out"), *flags]) == 0
    assert "of 2 streams" in capsys.readouterr().out
