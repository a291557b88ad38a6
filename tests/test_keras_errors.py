"""Models that cannot stream: the error names the layer and the reason."""
import keras
import pytest
from keras import layers

from tfaot.errors import TfaotError
from tfaot.lower.mlir_import import import_program
from tfaot.program import ProgramSignature, StepProgram, TensorInfo
from tfaot.streamify_keras import streamify_keras


def _seq(f=4):
    return keras.Input((None, f), batch_size=1)


def _expect(model, *fragments):
    with pytest.raises(TfaotError) as info:
        streamify_keras(model, "m.keras", "keras")
    message = str(info.value)
    for fragment in fragments:
        assert fragment in message, message
    assert "\n" not in message


def test_bidirectional():
    m = keras.Sequential([_seq(), layers.Bidirectional(layers.LSTM(4), name="bidi")])
    _expect(m, "'bidi'", "Bidirectional", "backwards")


def test_causal_attention_over_open_time():
    x = _seq(8)
    y = layers.MultiHeadAttention(2, 4, name="mha")(x, x, use_causal_mask=True)
    _expect(keras.Model(x, y), "'mha'", "use_causal_mask=True", "without bound",
            "fixed length", "one whole inference per step where every frame reaches the "
            "output")


def test_repeat_vector_decoder_over_open_time():
    x = _seq()
    h = layers.RepeatVector(5)(layers.LSTM(4)(x))
    _expect(keras.Model(x, layers.LSTM(3, name="dec")(h)), "'dec'", "no time axis",
            "fixed length")


@pytest.mark.parametrize("kernel, strides, dilation, padding, words", [
    (3, 1, 1, "same", ["padding='same' over time (kernel 3, stride 1)",
                       "with padding='valid' it streams"]),
    (5, 2, 1, "same", ["padding='same' over time (kernel 5, stride 2)"]),
    (3, 1, 2, "valid", ["dilated in time"]),
])
def test_transposed_conv_over_open_time(kernel, strides, dilation, padding, words):
    """(a stride in time streams: test_time_upsampling.py)"""
    m = keras.Sequential([_seq(), layers.Conv1DTranspose(3, kernel, strides=strides,
                                                         dilation_rate=dilation,
                                                         padding=padding, name="up")])
    _expect(m, "'up'", "Conv1DTranspose", *words)


def test_mel_spectrogram_centers_its_frames():
    """Keras' MelSpectrogram pads both ends by reflection: it was refused as
    a layer that 'fails when run on 5 random frames' (its padding is longer)."""
    x = keras.Input((None,), batch_size=1)
    mel = layers.MelSpectrogram(fft_length=64, sequence_stride=16, sequence_length=64,
                                num_mel_bins=8, name="mel")(x)
    _expect(keras.Model(x, layers.Dense(2)(layers.Permute((2, 1))(mel))), "'mel'",
            "MelSpectrogram", "reflected samples", "in the firmware", "fixed length")


def test_go_backwards():
    m = keras.Sequential([_seq(), layers.GRU(4, go_backwards=True, name="rev_gru")])
    _expect(m, "'rev_gru'", "go_backwards")


def test_mask_into_pooling():
    # a mask streams into recurrent layers (tests/test_keras_published.py);
    # a masked mean over time does not.
    m = keras.Sequential([_seq(), layers.Masking(name="mask"),
                          layers.LSTM(4, return_sequences=True),
                          layers.GlobalAveragePooling1D(name="gap")])
    _expect(m, "'gap'", "mask")


def test_conv1d_same_over_time_into_a_last_output():
    # valid/causal convolutions stream (tests/test_keras_streaming_conv.py),
    # 'same' ones late (tests/test_same_padding_late.py); a last output
    # after one cannot.
    m = keras.Sequential([_seq(), layers.Conv1D(4, 3, padding="same", name="conv"),
                          layers.LSTM(4, name="last")])
    _expect(m, "'last'", "LSTM", "padding='same' in time", "'causal' or 'valid'")


def test_pooling_same_over_time_suggests_what_pooling_takes():
    # Keras pooling has no padding='causal': the fix named is one it takes
    m = keras.Sequential([_seq(), layers.MaxPooling1D(3, strides=2, padding="same",
                                                      name="pool")])
    _expect(m, "'pool'", "padding='valid' (or a causal ZeroPadding1D")


def test_flatten_over_growing_sequence():
    # global pooling over a prefix streams (a running mean/max); a Flatten
    # over a sequence that grows cannot.
    m = keras.Sequential([_seq(), layers.LSTM(4, return_sequences=True),
                          layers.Flatten(name="flat")])
    _expect(m, "'flat'", "Flatten", "fixed window")


def test_attention_over_sequence():
    x = _seq()
    h = layers.LSTM(4, return_sequences=True)(x)
    a = layers.Attention(name="att")([h, h])
    _expect(keras.Model(x, a), "'att'", "Attention", "whole sequence")


def test_concatenate_along_time():
    x = _seq()
    h = layers.LSTM(4, return_sequences=True)(x)
    c = layers.Concatenate(axis=1, name="cat_t")([h, h])
    _expect(keras.Model(x, c), "'cat_t'", "time axis")


def test_stateful_with_batch_above_one():
    m = keras.Sequential([keras.Input((None, 4), batch_size=4),
                          layers.LSTM(4, stateful=True, name="sf")])
    _expect(m, "'sf'", "stateful=True", "batch size 4", "batch_shape=(1, ...)", "--streams 4")


def test_illegal_op_after_lowering_names_tf_op_and_node():
    """An op without a StableHLO lowering is caught before iree-compile."""
    import tensorflow as tf

    def pure(x):
        text = tf.strings.as_string(x, name="my_as_string")
        return tf.cast(tf.strings.length(text, name="my_length"), tf.float32)

    cf = tf.function(pure, input_signature=[tf.TensorSpec((1, 3))]).get_concrete_function()
    sig = ProgramSignature((TensorInfo("x_t", "float32", (1, 3)),),
                           (TensorInfo("y_t", "float32", (1, 3)),), ())
    with pytest.raises(TfaotError) as info:
        import_program(StepProgram("strings.pb", "graphdef", sig, cf))
    message = str(info.value)
    assert "AsString" in message and "my_as_string" in message, message
    assert "strings.pb" in message


def test_reshape_that_merges_time_steps():
    m = keras.Sequential([_seq(8), layers.LSTM(8, return_sequences=True),
                          layers.Reshape((-1, 16), name="pairs")])
    _expect(m, "'pairs'", "Reshape", "mixes the time axis")


def test_permute_that_moves_time():
    m = keras.Sequential([_seq(8), layers.LSTM(8, return_sequences=True),
                          layers.Permute((2, 1), name="swap")])
    _expect(m, "'swap'", "Permute", "moves the time axis")


def test_recurrent_layer_after_last_output():
    x = _seq()
    h = layers.LSTM(4)(x)  # last output: no time axis any more
    y = layers.Reshape((1, 4))(h)
    y = layers.GRU(3, name="late_gru")(y)
    _expect(keras.Model(x, y), "'late_gru'", "no time axis")


@pytest.mark.parametrize("head", ["gru", "pool"])
def test_channels_first_input_is_not_told_unknown_features(head):
    """A channels_first model, (batch, channels, time): its open axis is 2,
    and the error said "unknown feature dimensions" (the user gave them all)."""
    x = keras.Input((8, None), batch_size=1)
    h = layers.Conv1D(6, 3, data_format="channels_first")(x)
    y = layers.GRU(4)(layers.Permute((2, 1))(h)) if head == "gru" else \
        layers.GlobalAveragePooling1D(data_format="channels_first")(h)
    _expect(keras.Model(x, y), "(1, 8, None) is open on axis 2, not on axis 1",
            "channels_first", "--whole-window")


def test_a_hash_table_lookup_is_named():
    """IntegerLookup streamed failed deep in the lowering ('mhlo.concatenate'
    op operand #1 ... tensor<*xf32>) without naming the layer."""
    x = keras.Input((3,), dtype="int32", batch_size=1)
    ids = layers.IntegerLookup(vocabulary=[3, 7, 11, 42], name="ids")(x)
    y = layers.Dense(2)(layers.Flatten()(layers.Embedding(5, 4)(ids)))
    _expect(keras.Model(x, y), "'ids' (IntegerLookup)", "hash table", "before the model")
