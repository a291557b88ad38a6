"""Convolution, pooling, padding, cropping and windows over time (issue 10),
and ConvLSTM over frames (issue 11 item 6): Keras models streamed through the
built .so, compared with Keras on the right prefix or window."""
import json
import re

import numpy as np
import pytest

import keras_conv_models as K
from tfaot import harness
from tfaot.cli import main
from tfaot.errors import TfaotError
from tfaot.pipeline import BuildOptions, Progress, build_model
from tfaot.streamify_keras import streamify_keras
from tfaot.verify import keras_reference, library_stream

STEPS = 120
TOL = 1e-5
SLOW = {"conv_lstm3d", "ds_cnn_same"}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("conv_builds")
    cache = {}

    def get(name):
        if name not in cache:
            model = K.build(name)
            path = root / f"{name}.keras"
            model.save(path)
            out = build_model(str(path), BuildOptions(out_dir=root / name), Progress(False))
            out = getattr(out, "path", out)
            cache[name] = (model, path, out)
        return cache[name]
    return get


def _params():
    return [pytest.param(n, marks=pytest.mark.slow) if n in SLOW else n for n in K.MODELS]


@pytest.mark.parametrize("name", _params())
def test_stream_matches_keras(built, name):
    model, _, out = built(name)
    _, mode, recomputed = K.MODELS[name]
    lib = harness.load(out)
    stream = library_stream(lib, model, name)
    assert stream.mode == mode
    assert bool(stream.recompute) == recomputed, stream.recompute
    steps = STEPS + stream.first_valid_step
    xs = np.random.default_rng(3).normal(size=(steps, *lib.input_shape)).astype(np.float32)
    want = keras_reference(model, xs, stream=stream, step_output=lib.output_shape)
    got = lib.step_n(xs)
    defined = ~np.isnan(want.reshape(steps, -1)).any(axis=1)
    assert defined.sum() >= 100 and not defined[:stream.first_valid_step].any()
    err = float(np.abs(got[defined] - want[defined]).max())
    print(f"{name}: {stream.mode} P={stream.frames_per_step} first={stream.first_valid_step} "
          f"recompute={bool(stream.recompute)}: max abs error {err:.3g} over "
          f"{defined.sum()} steps")
    assert err <= TOL

    # get_state / set_state mid-stream, into a fresh context: the same outputs.
    half = steps // 2
    lib.reset()
    lib.step_n(xs[:half])
    saved = lib.get_state()
    other = harness.load(out)
    other.set_state(saved)
    np.testing.assert_array_equal(other.step_n(xs[half:]), got[half:])
    # reset brings back the start of the stream (ring buffers included).
    lib.reset()
    np.testing.assert_array_equal(lib.step_n(xs[:10]), got[:10])


def test_manifest_and_state_names(built):
    _, _, out = built("ds_cnn")
    manifest = json.loads((out / "ds_cnn.json").read_text())
    stream = manifest["stream"]
    assert (stream["mode"], stream["window"], stream["frames_per_step"]) == ("window", 16, 2)
    header = (out / "ds_cnn.h").read_text()
    for define, value in (("FRAMES_PER_STEP", 2), ("WINDOW", 16),
                          ("FIRST_VALID_STEP", stream["first_valid_step"]),
                          ("DELAY", stream["delay"])):
        assert f"#define DS_CNN_{define} {value}" in header
    names = [s["name"] for s in manifest["state"]]
    assert all(n.endswith(("/frames", "/window")) for n in names), names
    shapes = {s["name"]: s["shape"] for s in manifest["state"]}
    # the first conv: kernel 3, stride 2, 2 frames per step: its output m uses
    # frames 2m-2..2m, so it keeps the 2 frames before the chunk
    first = next(n for n in names if n.startswith("conv2d"))
    assert shapes[first][:2] == [1, 2]
    # the depthwise layers keep the first conv's 4-wide rows, not the 6-wide
    # ones ZeroPadding2D makes: the window is padded after the ring buffer
    depthwise = [sh for n, sh in shapes.items() if n.startswith("depthwise")]
    assert depthwise == [[1, 2, 4, 6]] * 2, shapes


def test_global_pooling_window_keeps_one_vector_a_frame(tmp_path):
    """Global average and max pooling (keepdims too) over a fixed window of
    2-D frames: the window state holds each frame pooled over its width (one
    vector of channels a frame, not the whole frame), and the outputs are
    still Keras's over 100+ steps."""
    import keras
    from keras import layers as L

    keras.utils.set_random_seed(4)
    x = keras.Input((16, 6))
    h = L.Conv2D(8, (3, 3), activation="relu")(L.Reshape((16, 6, 1))(x))
    avg = L.GlobalAveragePooling2D(name="gap")(h)
    top = L.Flatten()(L.GlobalMaxPooling2D(keepdims=True, name="gmp")(h))
    model = keras.Model(x, L.Dense(3)(L.Concatenate()([avg, top])))
    path = tmp_path / "gp.keras"
    model.save(path)
    out = build_model(str(path), BuildOptions(out_dir=tmp_path / "gp"), Progress(False)).path
    shapes = {st["name"]: st["shape"] for st in
              json.loads((out / "gp.json").read_text())["state"]}
    pools = {n: sh for n, sh in shapes.items() if n.startswith(("gap", "gmp"))}
    assert len(pools) == 2 and all(sh[0] == 1 and sh[2:] == [8] for sh in pools.values()), shapes
    lib = harness.load(out)
    stream = library_stream(lib, model, "gp")
    steps = STEPS + stream.first_valid_step
    xs = np.random.default_rng(5).normal(size=(steps, *lib.input_shape)).astype(np.float32)
    want = keras_reference(model, xs, stream=stream, step_output=lib.output_shape)
    defined = ~np.isnan(want.reshape(steps, -1)).any(axis=1)
    assert defined.sum() >= 100
    np.testing.assert_allclose(lib.step_n(xs)[defined], want[defined], rtol=0, atol=TOL)


def test_init_state_buffer_takes_the_steps_size_class(built):
    """IREE packs the equal zero initial states of a conv stack into one
    buffer smaller than the state reset writes; the arena keeps no block
    for that first buffer alone: __init's takes a block of the step's size,
    its length the one asked for (its numerics:
    test_stream_matches_keras[ds_cnn])."""
    _, _, out = built("ds_cnn")
    text = (out / "src" / "ds_cnn.c").read_text()
    bodies = re.split(r"\n(?=static int ds_cnn_vm_\w+\(struct ds_cnn_ctx \*ctx[^;]*\{)", text)
    # the block each allocation takes: its size, or the plan's (allocate_in's 4th
    # argument); allocate_from names its pool first
    pattern = (r"tfrt_buffer_allocate(?:_in|_from)?\(rt, (?:\d+u, )?INT32_C\(64\), "
               r"INT64_C\((\d+)\)(?:, INT64_C\((\d+)\))?")
    # (the step is a direct step, ds_cnn_vm_step_direct: emit/direct_step.py)
    sizes = {re.match(r"static int ds_cnn_vm_(\w+?)(?:_direct)?\(", b).group(1):
             {int(block or size) for size, block in re.findall(pattern, b)}
             for b in bodies if b.startswith("static int ds_cnn_vm_")}
    assert "tfrt_buffer_allocate_in(" in text
    # (the step writes its new state over the old one: reset allocates the
    # state's size, emit/state_reuse.py)
    assert sizes["__init"] and sizes["__init"] <= sizes["reset"], sizes
    assert not sizes["step"], sizes
    # every block of the arena is of a class that a function other than __init allocates
    pools = re.search(r"ds_cnn_pools\[\] = \{(.*?)\{0u, 0u\}", text, re.S).group(1)
    classes = {int(c) for c in re.findall(r"\{(\d+)u, \d+u\}", pools)}
    later = {-(-n // 64) * 64 for name, fn in sizes.items() if name != "__init" for n in fn}
    assert classes <= later, (classes, later)


def test_conv_lstm_state_is_feature_map():
    program = streamify_keras(K.build("conv_lstm2d"), "m.keras", "keras")
    assert [s.shape for s in program.signature.states] == [(1, 8, 8, 4)] * 2
    assert program.signature.inputs[0].shape == (1, 8, 8, 2)


def test_verify_command_on_window_and_prefix(built, capsys):
    for name in ("svdf", "crnn", "conv1d_stride2_lstm_seq"):
        _, path, out = built(name)
        assert main(["verify", str(path), str(out), "--steps", "130"]) == 0, name
        line = capsys.readouterr().out.strip()
        # (the tolerance grows with the weighted layers: verify.compare.F32_LAYERS)
        assert re.fullmatch(r"y_t: max abs error \S+ over \d+ steps \(tolerance \S+\): ok",
                            line), line


def test_whole_window_build_is_one_inference():
    program = streamify_keras(K.build("ds_cnn"), "m.keras", "keras", fixed_window="whole")
    assert program.stream.mode == "stateless"
    assert program.signature.states == ()
    assert program.signature.inputs[0].shape == (1, 16, 10)
    assert "whole-window build" in program.report["mode"]


@pytest.mark.parametrize("name", ["ds_cnn_pool_all", "pool_one_position"])
def test_a_stride_over_one_output_position_adds_no_frames(name):
    """A pooling whose output has one time position (over all remaining
    frames, or with frames past its kernel dropped) slides one frame per
    step with an output every step; test_stream_matches_keras checks the
    numbers through the built library."""
    stream = streamify_keras(K.build(name), "m.keras", "keras").stream
    assert (stream.mode, stream.frames_per_step) == ("window", 1) and not stream.recompute
    assert stream.delay == 0


def test_image_model_stays_one_inference():
    """A fixed-shape model whose output keeps axis 1 is not a window model."""
    import keras_models

    program = streamify_keras(keras_models.build("conv2d_2x2_s2"), "m.keras", "keras")
    assert program.stream.mode == "stateless"


def test_inspect_prints_streaming_per_layer(built, capsys):
    _, path, _ = built("ds_cnn")
    assert main(["inspect", str(path)]) == 0
    text = capsys.readouterr().out
    assert "sliding window" in text
    assert re.search(r"depthwise_conv2d\S*\s+DepthwiseConv2D\s+time conv\s+buffer=", text), text
    assert re.search(r"stream:\s+window 16 frames, 2 frames per step", text), text


def _expect(model, *fragments):
    with pytest.raises(TfaotError) as info:
        streamify_keras(model, "m.keras", "keras")
    message = str(info.value)
    for fragment in fragments:
        assert fragment in message, message
    assert "\n" not in message


def test_same_padding_before_a_global_pooling_is_refused():
    # (its frames come late: tests/test_same_padding_late.py)
    import keras
    from keras import layers as L

    m = keras.Sequential([K._open(), L.Conv1D(4, 3, padding="same"),
                          L.GlobalAveragePooling1D(name="gap")])
    _expect(m, "'gap'", "pools every frame", "padding='same' in time")


@pytest.mark.parametrize("kernel, streams", [(3, True), (2, False)])
def test_same_pooling_streams_only_where_the_prefixes_fill_whole_strides(kernel, streams):
    """MaxPooling1D(2, padding='same') pads nothing on an even prefix, which
    steps of 2 frames give after a valid Conv1D of kernel 3; after one of
    kernel 2 every prefix is odd and its last pooled frame half padding
    (the next frame changes it): that streamed was 0.94 off, now refused."""
    import keras
    from keras import layers as L

    m = keras.Sequential([K._open(), L.Conv1D(4, kernel), L.MaxPooling1D(2, padding="same",
                                                                          name="pool"),
                          L.GRU(3)])
    if not streams:
        _expect(m, "'pool'", "padding='same'", "padding='valid'")
        return
    program = streamify_keras(m, "m.keras", "keras")
    assert program.stream.frames_per_step == 2
    rows = {row["name"]: row for row in program.report["layers"]}
    assert rows["pool"]["role"] == "time pool", rows["pool"]


def test_a_windows_left_padding_is_said_as_it_is():
    """A fixed window padded before its first frame only recomputes the
    window each step; the reason says where the padding goes (it said
    "both ends")."""
    import keras
    from keras import layers as L

    m = keras.Sequential([keras.Input((20, 4)), L.ZeroPadding1D((2, 0), name="zp"),
                          L.Conv1D(3, 3), L.Flatten(), L.Dense(2)])
    stream = streamify_keras(m, "m.keras", "keras", fixed_window="stream").stream
    assert "'zp'" in stream.recompute and "(2 frames before)" in stream.recompute, stream


def test_global_pooling_over_open_time_is_a_running_pool():
    # (numerics: tests/test_keras_published.py); a Flatten there is refused
    import keras
    from keras import layers as L

    m = keras.Sequential([K._open(), L.Conv1D(4, 3), L.GlobalMaxPooling1D(name="gp")])
    program = streamify_keras(m, "m.keras", "keras")
    assert program.stream.mode == "prefix"
    rows = {row["name"]: row for row in program.report["layers"]}
    assert rows["gp"]["role"] == "running max", rows["gp"]
    m = keras.Sequential([K._open(), L.Conv1D(4, 3), L.Flatten(name="flat")])
    _expect(m, "'flat'", "whole sequence", "fixed window")


def test_padding_after_last_frame_is_refused():
    import keras
    from keras import layers as L

    m = keras.Sequential([K._open(), L.ZeroPadding1D((1, 2), name="zp"), L.GRU(3)])
    _expect(m, "'zp'", "after the last frame")


def test_verify_reference_of_time_distributed_after_a_time_convolution(tmp_path, capsys):
    """Traced for an open time axis, Keras 3's TimeDistributed after a
    'valid' convolution over time returns one frame where eager Keras
    returns all: verify's reference must not take that trace (it reported a
    right library as 3.8 off)."""
    import keras
    from keras import layers

    keras.utils.set_random_seed(6)
    x = keras.Input((None, 6, 1))
    h = layers.Conv2D(2, (3, 1))(x)  # two frames of delay
    model = keras.Model(x, layers.TimeDistributed(layers.Flatten())(h))
    path = tmp_path / "td.keras"
    model.save(path)
    assert main(["build", str(path), "-o", str(tmp_path / "out"), "-q", "--stream"]) == 0
    assert main(["verify", str(path), str(tmp_path / "out"), "--steps", "120"]) == 0
    assert re.fullmatch(r"y_t: max abs error \S+ over 118 steps \(tolerance \S+\): ok",
                        capsys.readouterr().out.strip())


@pytest.mark.parametrize("batch", [None, 1])
def test_a_raw_waveform_input_streams_and_verifies(tmp_path, capsys, batch):
    """Input (batch, samples), open: a raw-audio front end (a strided Conv1D
    over samples, a dilated causal one) into a GRU. It built, streaming 8
    samples a step, but verify said the library took (1, 8) where the model
    took (1,): a rank-2 input counted as having no time axis."""
    import keras

    keras.utils.set_random_seed(5)
    samples = keras.Input((None,), batch_size=batch, name="audio")
    x = keras.layers.Reshape((-1, 1))(samples)
    x = keras.layers.Conv1D(8, 16, strides=8, activation="relu")(x)
    x = keras.layers.Conv1D(8, 3, padding="causal", dilation_rate=2)(x)
    path = tmp_path / "wave.keras"
    y = keras.layers.GRU(3, return_sequences=True)(x)
    keras.Model(samples, y).save(path)
    out = tmp_path / "lib"
    assert main(["-q", "build", str(path), "-o", str(out)]) == 0
    stream = json.loads((out / "wave.json").read_text())["stream"]
    assert (stream["mode"], stream["frames_per_step"]) == ("prefix", 8), stream
    capsys.readouterr()
    assert main(["verify", str(path), str(out), "--steps", "120"]) == 0
    assert ": ok" in capsys.readouterr().out


def _crn():
    """A convolutional recurrent denoiser (Tan and Wang's CRN, small): causal
    Conv2D encoders striding frequency, an LSTM, Conv2DTranspose decoders
    with kernel 2 in time whose last frame is cropped, skip connections."""
    import keras
    from keras import layers as L

    keras.utils.set_random_seed(0)
    x = L.Input((None, 16, 1))
    e1 = L.Conv2D(8, (2, 3), strides=(1, 2), activation="elu")(L.ZeroPadding2D(((1, 0), (1, 1)))(x))
    e2 = L.Conv2D(8, (2, 3), strides=(1, 2), activation="elu")(L.ZeroPadding2D(((1, 0), (1, 1)))(e1))
    r = L.Reshape((-1, 4, 8))(L.LSTM(32, return_sequences=True)(L.Reshape((-1, 32))(e2)))
    d = L.Conv2DTranspose(8, (2, 3), strides=(1, 2), activation="elu")(L.Concatenate()([r, e2]))
    d = L.Concatenate()([L.Cropping2D(((0, 1), (0, 1)))(d), e1])
    d = L.Cropping2D(((0, 1), (0, 1)))(L.Conv2DTranspose(1, (2, 3), strides=(1, 2))(d))
    return keras.Model(x, d)


def _transposed_1d():
    """Conv1DTranspose of kernel 3 cropped by 2 at the end, then kernel 1
    ('same'): per frame."""
    import keras
    from keras import layers as L

    keras.utils.set_random_seed(1)
    x = L.Input((None, 8))
    y = L.Cropping1D((0, 2))(L.Conv1DTranspose(6, 3)(x))
    return keras.Model(x, L.Conv1DTranspose(4, 1, padding="same")(y))


@pytest.mark.parametrize("make", [_crn, _transposed_1d])
def test_transposed_convs_with_stride_one_in_time_stream(tmp_path, capsys, make):
    """Refused as 'upsamples the time axis': with stride 1 in time a
    transposed convolution is a causal one with its kernel reversed, once
    the kernel - 1 frames it adds at the end are cropped."""
    path = tmp_path / "decoder.keras"
    make().save(path)
    out = tmp_path / "lib"
    assert main(["-q", "build", str(path), "-o", str(out)]) == 0
    assert json.loads((out / "decoder.json").read_text())["stream"]["mode"] == "prefix"
    capsys.readouterr()
    assert main(["verify", str(path), str(out), "--steps", "120"]) == 0
    assert ": ok" in capsys.readouterr().out


def test_dilated_taps_read_a_circular_buffer(built, capsys):
    """A convolution whose dilation leaves most of its kept frames unread
    keeps them in a circular buffer (one more row: the head) and gathers
    the rows its taps read, instead of copying the whole buffer into its
    window and shifting it each step (its numerics, get/set_state and
    reset: test_stream_matches_keras[wavenet] and [dilated_chunks])."""
    _, _, out = built("wavenet")
    shapes = [s["shape"] for s in json.loads((out / "wavenet.json").read_text())["state"]
              if s["name"].endswith("/frames")]
    # dilations 1 and 2 (kernel 2): ordered, 1 and 2 frames; 8 and 32: circular
    assert sorted(sh[1] for sh in shapes) == [1, 1, 2, 2, 9, 9, 33, 33], shapes
    assert main(["inspect", str(built("wavenet")[1])]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if "time conv" in line]
    assert sum("dilation=32 delay=0 ring=taps" in r for r in rows) == 2, rows
    assert not any("dilation=1 " in r and "ring=" in r for r in rows), rows
    _, _, out = built("dilated_chunks")
    shapes = {s["name"]: s["shape"] for s in
              json.loads((out / "dilated_chunks.json").read_text())["state"]}
    # two outputs a step, three taps each, dilation 16: 32 frames + the head
    assert shapes["conv1d_causal_d16/frames"] == [1, 33, 6], shapes
    assert shapes["conv2d_d16/frames"] == [1, 17, 4, 1], shapes


def test_circular_buffers_beside_stored_states_hold_the_state_once(tmp_path):
    """The step writes the circular buffers in place and stores the other
    states anew, while @reset and @set_state pack them all into one buffer:
    the arena held that packed state two or three times (emit/state_reuse.py,
    emit/memory.py: also where @__init packs the initial values smaller);
    now once, beside the step's new states."""
    import keras

    from keras import layers as L

    keras.utils.set_random_seed(9)
    x = keras.Input((None, 8), batch_size=1)
    h = L.Conv1D(16, 1)(x)
    for d in (1, 2, 16, 32):  # (16 and 32: circular, their taps 3 of 32 and 64 frames)
        y = L.Conv1D(16, 3, padding="causal", dilation_rate=d, activation="relu")(h)
        h = L.Add()([h, L.Conv1D(16, 3, padding="causal", dilation_rate=d,
                                 activation="relu")(y)])
    model = keras.Model(x, L.Dense(3)(L.GRU(4, return_sequences=True)(h)))
    path = tmp_path / "tcn.keras"
    model.save(path)
    out = build_model(str(path), BuildOptions(out_dir=tmp_path / "tcn"), Progress(False)).path
    manifest = json.loads((out / "tcn.json").read_text())
    state, pools = manifest["state_bytes"], manifest["arena_pools"]
    assert [count for size, count in pools if size >= state] == [1], (state, pools)
    assert manifest["arena_bytes"] < 2 * state, (manifest["arena_bytes"], state, pools)
    lib = harness.load(out)
    xs = np.random.default_rng(2).normal(size=(300, *lib.input_shape)).astype(np.float32)
    got = lib.step_n(xs)
    want = keras_reference(model, xs, stream=library_stream(lib, model, "tcn"),
                           step_output=lib.output_shape)
    np.testing.assert_allclose(got, want, rtol=0, atol=TOL)
    lib.reset()
    lib.step_n(xs[:150])
    other = harness.load(out)
    other.set_state(lib.get_state())
    np.testing.assert_array_equal(other.step_n(xs[150:]), got[150:])
