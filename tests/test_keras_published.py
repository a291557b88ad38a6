"""Keras models written the way published examples write them, streamed
through the built .so and compared with Keras (>= 100 steps):

* Masking before recurrent layers (padded-sequence examples): masked frames
  (all features equal to the mask value) keep the states and repeat the
  last output, as Keras's backend rnn does; the stream includes such frames;
* global average / max pooling over a recurrent layer's outputs (prefix
  mode: a running mean / max of frames 0..t);
* Bidirectional and go_backwards layers, a recurrent layer started from
  another tensor (initial_state) or reading one without the input's time
  axis (RepeatVector), over a fixed window: not streamable
  incrementally, so the exact fallback (the window recomputed every step),
  or one whole inference per step when the time axis reaches the output.
"""
import numpy as np
import pytest

from tfaot import harness
from tfaot.pipeline import BuildOptions, Progress, build_model
from tfaot.verify import keras_reference, library_stream

STEPS = 120
TOL = 1e-5


def _masking():
    import keras
    from keras import layers as L
    x = keras.Input((None, 6))
    h = L.Masking(0.0)(x)
    h = L.LSTM(8, return_sequences=True)(h)
    return keras.Model(x, L.Dense(2)(L.GRU(5)(h)))


def _masking_sequential_zero_output():
    import keras
    from keras import layers as L
    return keras.Sequential([keras.Input((None, 6)), L.Masking(0.0),
                             L.SimpleRNN(8, return_sequences=True, zero_output_for_mask=True),
                             L.Dense(2)])


def _masking_time_distributed():
    """A masked GRU tagger's TimeDistributed(Dense) head: Keras passes it the
    mask, which a Dense does not take (it was refused as a masked layer)."""
    import keras
    from keras import layers as L
    x = keras.Input((None, 5))
    h = L.GRU(8, return_sequences=True)(L.Masking(0.0)(x))
    return keras.Model(x, L.TimeDistributed(L.Dense(3))(h))


def _lstm_global_average():
    import keras
    from keras import layers as L
    x = keras.Input((None, 10))
    h = L.LSTM(16, return_sequences=True)(x)
    h = L.LayerNormalization()(h)
    return keras.Model(x, L.Dense(3)(L.GlobalAveragePooling1D()(h)))


def _conv_gru_global_max():
    import keras
    from keras import layers as L
    x = keras.Input((None, 10))
    h = L.Conv1D(12, 3, strides=2, padding="causal", activation="relu")(x)
    h = L.GRU(16, return_sequences=True)(h)
    return keras.Model(x, L.Dense(3, activation="softmax")(L.GlobalMaxPooling1D()(h)))


def _bidirectional_classifier():
    import keras
    from keras import layers as L
    x = keras.Input((20, 8))
    return keras.Model(x, L.Dense(3)(L.Bidirectional(L.LSTM(16))(x)))


def _go_backwards():
    import keras
    from keras import layers as L
    x = keras.Input((12, 4))
    return keras.Model(x, L.Dense(2)(L.GRU(8, go_backwards=True)(x)))


def _bidirectional_tagger():
    import keras
    from keras import layers as L
    x = keras.Input((15, 6))
    h = L.Bidirectional(L.GRU(8, return_sequences=True))(x)
    return keras.Model(x, L.TimeDistributed(L.Dense(3))(h))


def _repeat_vector_autoencoder():
    """The LSTM autoencoder of the tutorials: encoder, RepeatVector, decoder
    over the repeated axis (not the input's time): one inference per step."""
    import keras
    from keras import layers as L
    x = keras.Input((10, 4))
    h = L.RepeatVector(10)(L.LSTM(8)(x))
    return keras.Model(x, L.TimeDistributed(L.Dense(4))(L.LSTM(6, return_sequences=True)(h)))


def _causal_self_attention():
    """Causal multi-head self-attention over a fixed window (its boolean mask
    constant must survive the import)."""
    import keras
    from keras import layers as L
    x = keras.Input((16, 8))
    h = L.MultiHeadAttention(2, 4)(x, x, use_causal_mask=True)
    return keras.Model(x, L.Dense(2)(L.LayerNormalization()(h + x)))


def _encoder_decoder_state():
    """A decoder started from the encoder's final state (initial_state), over
    a fixed window: the window recomputed every step."""
    import keras
    from keras import layers as L
    x = keras.Input((12, 5))
    _, h, c = L.LSTM(8, return_state=True)(x)
    y = L.LSTM(8)(x, initial_state=[h, c])
    return keras.Model(x, L.Dense(2)(y))


# name -> (builder, stream mode, recomputed window)
MODELS = {
    "masking": (_masking, "prefix", False),
    "masking_seq_zero": (_masking_sequential_zero_output, "prefix", False),
    "masking_time_distributed": (_masking_time_distributed, "prefix", False),
    "lstm_gap": (_lstm_global_average, "prefix", False),
    "conv_gru_gmp": (_conv_gru_global_max, "prefix", False),
    "bidirectional": (_bidirectional_classifier, "window", True),
    "go_backwards": (_go_backwards, "window", True),
    "encoder_decoder_state": (_encoder_decoder_state, "window", True),
}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("published")
    cache = {}

    def get(name, builder):
        if name not in cache:
            model = builder()
            path = root / f"{name}.keras"
            model.save(path)
            out = build_model(str(path), BuildOptions(out_dir=root / name), Progress(False))
            cache[name] = (model, getattr(out, "path", out))
        return cache[name]
    return get


def _stream_input(shape, steps, masked_every=0):
    xs = np.random.default_rng(5).normal(size=(steps, *shape)).astype(np.float32)
    if masked_every:  # whole frames equal to the mask value
        xs[masked_every - 1::masked_every] = 0.0
        xs[:3] = 0.0  # masked frames before the first real one
    return xs


@pytest.mark.parametrize("name", sorted(MODELS))
def test_stream_matches_keras(built, name):
    builder, mode, recomputed = MODELS[name]
    model, out = built(name, builder)
    lib = harness.load(out)
    stream = library_stream(lib, model, name)
    assert stream.mode == mode
    assert bool(stream.recompute) == recomputed, stream.recompute
    steps = STEPS + stream.first_valid_step
    xs = _stream_input(lib.input_shape, steps, masked_every=4 if "masking" in name else 0)
    want = keras_reference(model, xs, stream=stream, step_output=lib.output_shape)
    got = lib.step_n(xs)
    defined = ~np.isnan(want.reshape(steps, -1)).any(axis=1)
    assert defined.sum() >= 100
    err = float(np.abs(got[defined] - want[defined]).max())
    print(f"{name}: {stream.mode} recompute={bool(stream.recompute)}: max abs error "
          f"{err:.3g} over {defined.sum()} steps")
    assert err <= TOL
    # state moves mid-stream: a fresh context continues bit-identically
    half = steps // 2
    lib.reset()
    lib.step_n(xs[:half])
    other = harness.load(out)
    other.set_state(lib.get_state())
    np.testing.assert_array_equal(other.step_n(xs[half:]), got[half:])


def test_masked_frames_change_nothing(built):
    """A masked frame repeats the last output and leaves the state alone:
    the stream with masked frames inserted equals the stream without them."""
    model, out = built("masking", _masking)
    lib = harness.load(out)
    xs = _stream_input(lib.input_shape, 40)
    plain = lib.step_n(xs)
    lib.reset()
    padded = np.insert(xs, [10, 10, 25], 0.0, axis=0)
    got = lib.step_n(padded)
    kept = np.ones(len(padded), bool)
    kept[[10, 11, 27]] = False
    np.testing.assert_array_equal(got[kept], plain)
    np.testing.assert_array_equal(got[10], got[9])


@pytest.mark.parametrize("name,builder", [("bidirectional_tagger", _bidirectional_tagger),
                                          ("repeat_vector", _repeat_vector_autoencoder),
                                          ("causal_attention", _causal_self_attention)])
def test_whole_sequence_models_are_one_inference_per_step(built, name, builder):
    """A time axis reaches the output: one whole inference per step."""
    model, out = built(name, builder)
    lib = harness.load(out)
    assert tuple(lib.input_shape) == (1, *model.inputs[0].shape[1:])
    xs = np.random.default_rng(2).normal(size=(100, *lib.input_shape)).astype(np.float32)
    got = np.stack([lib.step(x) for x in xs])
    # (Keras once on the 100 inputs as a batch: eager calls one by one took 40 s)
    want = model.predict(xs.reshape(100, *lib.input_shape[1:]), verbose=0)
    worst = float(np.abs(got.reshape(want.shape) - want).max())
    print(f"{name}: max abs error {worst:.3g} over 100 inferences")
    assert worst <= TOL


def _stateful_lstm():
    import keras
    from keras import layers as L
    x = keras.Input((None, 5), batch_size=1)
    return keras.Model(x, L.Dense(2)(L.LSTM(8, stateful=True)(x)))


def _conv_lstm_frames():
    """Next-frame prediction over 16x16 frames, one frame per step."""
    import keras
    from keras import layers as L
    x = keras.Input((None, 16, 16, 1))
    h = L.ConvLSTM2D(4, (3, 3), padding="same", return_sequences=True)(x)
    h = L.BatchNormalization()(h)
    return keras.Model(x, L.TimeDistributed(L.Conv2D(1, 3, padding="same",
                                                     activation="sigmoid"))(h))


def _stacked_cells():
    """keras.layers.RNN over StackedRNNCells: the cell takes its states as one
    list per cell ([[h, c], h]), kept as three flat states."""
    import keras
    from keras import layers as L
    x = keras.Input((None, 6))
    cells = L.StackedRNNCells([L.LSTMCell(12), L.GRUCell(10)])
    return keras.Model(x, L.Dense(3)(L.RNN(cells, return_sequences=True)(x)))


def _normalized_gru():
    """A Normalization layer adapted to the data (per-feature mean and
    variance, a constant affine map per frame) in front of a causal conv."""
    import keras
    import numpy as np
    from keras import layers as L
    x = keras.Input((None, 8))
    norm = L.Normalization()
    norm.adapt(np.random.default_rng(0).normal(3, 2, (50, 20, 8)).astype("float32"))
    h = L.Conv1D(16, 3, padding="causal")(norm(x))
    h = L.Activation("swish")(L.BatchNormalization()(h))
    return keras.Model(x, L.Dense(2)(L.GRU(16, return_sequences=True)(h)))


def _gated_dilated_conv():
    """WaveNet's gated activation: keras.ops.split over the features of a
    dilated causal convolution, tanh(a) * sigmoid(b), a residual add."""
    import keras
    from keras import layers as L
    from keras import ops
    x = keras.Input((None, 8))
    h = L.Conv1D(16, 2, padding="causal", dilation_rate=2)(x)
    a, b = ops.split(h, 2, axis=-1)
    h = L.Add()([x, L.Conv1D(8, 1)(ops.tanh(a) * ops.sigmoid(b))])
    return keras.Model(x, L.Dense(2)(ops.mean(ops.concatenate([h, x], axis=-1), axis=-1,
                                              keepdims=True)))


@pytest.mark.parametrize("name,builder", [("stateful", _stateful_lstm),
                                          ("gated_dilated_conv", _gated_dilated_conv),
                                          ("conv_lstm_frames", _conv_lstm_frames),
                                          ("stacked_cells", _stacked_cells),
                                          ("normalized_gru", _normalized_gru)])
def test_verify_command(built, tmp_path, name, builder):
    """``tfaot verify`` on models whose reference needs care: a stateful
    layer (each reference call starts from the initial state), frames
    with a time axis in the output, and nested cell states."""
    from tfaot.verify import verify
    _, out = built(name, builder)
    path = out.parent / f"{name}.keras"
    results = verify(str(path), out, steps=120, seed=0, tol=TOL)
    for r in results:
        print(f"{name}: {r.output}: max abs error {r.max_abs_error:.3g} over {r.steps} {r.unit}")
        assert r.steps >= 100 and r.ok


def _stateful_one_frame():
    """The usual Keras streaming recipe: batch_shape (1, 1, F), stateful=True,
    called once per frame with the state carried between calls."""
    import keras
    from keras import layers as L
    x = keras.Input(batch_shape=(1, 1, 5))
    h = L.GRU(8, stateful=True, return_sequences=True)(x)
    return keras.Model(x, L.Dense(2)(L.LSTM(8, stateful=True, return_sequences=True)(h)))


def _stateful_chunks():
    """Stateful over chunks of 4 frames, a last output per chunk."""
    import keras
    from keras import layers as L
    x = keras.Input(batch_shape=(1, 4, 5))
    return keras.Model(x, L.Dense(2)(L.LSTM(8, stateful=True)(x)))


@pytest.mark.parametrize("name,builder,compared", [("stateful_1", _stateful_one_frame, 120),
                                                   ("stateful_4", _stateful_chunks, 30)])
def test_verify_carries_a_stateful_models_state(built, name, builder, compared):
    """A stateful model of fixed length T is Keras called T frames at a time
    with its state carried: verify compares one run of 120 steps against
    that (each chunk's last step for a last output), not T-frame runs from
    reset, which would pass a library that lost its state between calls."""
    from tfaot.verify import verify
    from tfaot.verify.keras_reference import keras_stateful_reference
    model, out = built(name, builder)
    results = verify(str(out.parent / f"{name}.keras"), out, steps=120, seed=0, tol=TOL)
    assert [(r.ok, r.steps, r.unit) for r in results] == [(True, compared, "steps")], results
    # The reference itself: Keras over the chunks, state carried, is the
    # library stepped over all 120 frames without a reset.
    lib = harness.load(out)
    xs = np.random.default_rng(3).normal(size=(120, *lib.input_shape)).astype(np.float32)
    want = keras_stateful_reference(model, [xs], model.inputs[0].shape[1],
                                    lib.output_shapes)[0]
    lib.reset()
    got = np.stack([lib.step(x) for x in xs])
    defined = ~np.ma.getmaskarray(want).reshape(len(want), -1).any(axis=1)
    assert defined.sum() == compared
    assert np.abs(got[defined] - np.ma.getdata(want)[defined]).max() <= TOL


def _fixed_window_average():
    import keras
    from keras import layers as L
    x = keras.Input((30, 8))
    h = L.GlobalAveragePooling1D()(L.LSTM(16, return_sequences=True)(x))
    return keras.Model(x, L.Dense(2)(h))


def test_verify_fixed_window_pooled_over_time(built):
    """A fixed 30-frame input pooled over all of time: only the 30th step has
    a Keras reference (the open-time twin has no time axis left), and
    verify compares that one instead of failing inside numpy."""
    from tfaot.verify import verify
    _, out = built("fixed_gap", _fixed_window_average)
    results = verify(str(out.parent / "fixed_gap.keras"), out, steps=30, seed=0, tol=TOL)
    assert [(r.ok, r.steps) for r in results] == [(True, 1)], results


def _mixed_float16_lstm():
    import keras
    from keras import layers as L
    keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        x = keras.Input((None, 8))
        h = L.LSTM(16, return_sequences=True)(x)
        return keras.Model(x, L.Dense(2, dtype="float32")(h))
    finally:
        keras.mixed_precision.set_global_policy("float32")


def test_verify_mixed_precision_model(built):
    """A model trained under mixed_float16 computes in float16 in TensorFlow:
    verify's default tolerance follows its compute dtype (it is not the
    library that is off), and an explicit --tol still wins."""
    from tfaot.verify import compute_dtype_tolerance, verify
    model, out = built("mixed16", _mixed_float16_lstm)
    assert compute_dtype_tolerance(model) == 5e-3
    results = verify(str(out.parent / "mixed16.keras"), out, steps=120, seed=0, tol=None)
    assert all(r.ok and r.steps == 120 and r.tolerance == 5e-3 for r in results), results
    assert max(r.max_abs_error for r in results) > 1e-5  # float16 rounding in TF's outputs


def _embedding_mask_zero():
    import keras
    from keras import layers as L
    return keras.Sequential([keras.Input((None,), dtype="int32"),
                             L.Embedding(30, 8, mask_zero=True),
                             L.GRU(8, return_sequences=True), L.Dense(2)])


def test_embedding_mask_zero_skips_padding_tokens(built):
    """Token 0 (padding) is masked: the GRU keeps its state and repeats its
    last output there, in Keras and in the stream."""
    from tfaot.verify import keras_sequence_reference
    model, out = built("embedding_mask_zero", _embedding_mask_zero)
    lib = harness.load(out)
    tokens = np.random.default_rng(4).integers(1, 30, size=(STEPS, 1)).astype(np.int32)
    tokens[::5] = 0
    tokens[:2] = 0
    got = lib.step_n(tokens)
    want = keras_sequence_reference(model, tokens.reshape(1, STEPS))
    err = float(np.abs(got - want).max())
    print(f"embedding mask_zero: max abs error {err:.3g} over {STEPS} steps")
    assert err <= TOL
    np.testing.assert_array_equal(got[5], got[4])


def _two_input_same_padding():
    """Features + a conditioning vector; 'same' padding in time: the window
    is recomputed every step, the vector taken as it is at that step."""
    import keras
    from keras import layers as L
    x, c = keras.Input((16, 10), name="features"), keras.Input((3,), name="cond")
    h = L.Flatten()(L.Conv1D(8, 3, padding="same")(x))
    return keras.Model([x, c], L.Dense(2)(L.Concatenate()([h, c])))


def _text_cnn_same_padding():
    import keras
    from keras import layers as L
    x = keras.Input((30,), dtype="int32")
    h = L.Conv1D(16, 5, padding="same", activation="relu")(L.Embedding(50, 8)(x))
    return keras.Model(x, L.Dense(2)(L.GlobalMaxPooling1D()(h)))


@pytest.mark.parametrize("name,builder", [("two_input_same", _two_input_same_padding),
                                          ("text_cnn_same", _text_cnn_same_padding)])
def test_window_fallback_with_typed_inputs(built, name, builder):
    from tfaot.verify import verify
    model, out = built(name, builder)
    lib = harness.load(out)
    stream = library_stream(lib, model, name)
    assert stream.mode == "window" and stream.recompute
    (result,) = verify(str(out.parent / f"{name}.keras"), out, steps=STEPS, seed=1, tol=TOL)
    print(f"{name}: max abs error {result.max_abs_error:.3g} over {result.steps} steps")
    assert result.steps == STEPS and result.ok


@pytest.mark.parametrize("builder", [_bidirectional_classifier, _masking],
                         ids=["window_fallback", "streamed"])
def test_variables_survive_garbage_collection_between_stages(tmp_path, builder):
    """The traced step holds the model's variables weakly (tf.function):
    the program keeps the model alive until the import has frozen them, so
    a collection between streamify and import changes nothing."""
    import gc

    from tfaot.lower.mlir_import import import_program
    from tfaot.pipeline import load_and_streamify

    path = tmp_path / "m.keras"
    builder().save(path)
    gc.collect()
    program = load_and_streamify(str(path), Progress(enabled=False))
    gc.collect()
    assert "stablehlo" in import_program(program)


def test_data_augmentation_layers_are_inert(tmp_path, capsys):
    """keras.io's image classifier starts with RandomFlip, RandomRotation,
    RandomZoom and RandomContrast, which pass their input through at
    inference; their seed generator's update stopped the build with an
    internal error."""
    import keras
    from keras import layers as L

    from tfaot.cli import main

    keras.utils.set_random_seed(2)
    x = keras.Input((12, 12, 3))
    h = L.RandomContrast(0.2)(L.RandomZoom(0.1)(L.RandomRotation(0.1)(L.RandomFlip()(x))))
    h = L.Conv2D(4, 3, activation="relu")(L.Rescaling(1 / 255)(h))
    keras.Model(x, L.Dense(2)(L.Flatten()(h))).save(tmp_path / "aug.keras")
    assert main(["build", str(tmp_path / "aug.keras"), "-o", str(tmp_path / "lib"), "-q"]) == 0
    assert main(["verify", str(tmp_path / "aug.keras"), str(tmp_path / "lib")]) == 0
    assert capsys.readouterr().out.strip().endswith(": ok")
