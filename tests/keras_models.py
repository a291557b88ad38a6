"""Small Keras models of every kind tfaot streams, with fixed seeds.

Each builder returns a compiled-free Keras model with input (1, None, F)
(or a static shape for stateless models). Names are used as test ids.
"""
from __future__ import annotations

import zlib

import keras
from keras import layers

F = 8


def _seq_input(features: int = F):
    return keras.Input((None, features), batch_size=1)


def lstm_impl1_seq():
    return keras.Sequential([_seq_input(), layers.LSTM(16, implementation=1, return_sequences=True),
                             layers.Dense(5)])


def lstm_impl2_stacked_last():
    return keras.Sequential([_seq_input(), layers.LSTM(16, implementation=2, return_sequences=True),
                             layers.LSTM(12, implementation=2), layers.Dense(4)])


def gru_reset_after_seq_timedistributed():
    return keras.Sequential([_seq_input(), layers.GRU(16, reset_after=True, return_sequences=True),
                             layers.TimeDistributed(layers.Dense(6, activation="softmax"))])


def gru_reset_before_last():
    return keras.Sequential([_seq_input(), layers.GRU(12, reset_after=False),
                             layers.Dense(3, activation="sigmoid")])


def simple_rnn_last():
    return keras.Sequential([_seq_input(), layers.SimpleRNN(10), layers.Dense(4)])


def functional_branched():
    x = _seq_input()
    a = layers.LSTM(16, return_sequences=True)(x)
    b = layers.Dense(16, activation="tanh")(x)
    s = layers.Add()([a, b])
    m = layers.Multiply()([s, layers.Activation("sigmoid")(b)])
    c = layers.Concatenate()([m, x])
    g = layers.GRU(8, return_sequences=True)(c)
    h = layers.LSTM(8)(g)
    return keras.Model(x, layers.Dense(2)(h))


def normalization_and_reshape():
    x = _seq_input()
    h = layers.GRU(12, return_sequences=True)(x)
    h = layers.LayerNormalization()(h)
    h = layers.Dropout(0.5)(h)
    h = layers.BatchNormalization()(h)
    h = layers.Reshape((-1, 3, 4))(h)
    h = layers.TimeDistributed(layers.Flatten())(h)
    h = layers.SimpleRNN(6, return_sequences=True)(h)
    return keras.Model(x, layers.Dense(3, activation="relu")(h))


def with_batchnorm_stats(model):
    """Give BatchNormalization layers non-trivial moving statistics."""
    import numpy as np

    rng = np.random.default_rng(3)
    for layer in model.layers:
        if isinstance(layer, layers.BatchNormalization):
            for var in (layer.moving_mean, layer.gamma, layer.beta):
                var.assign(rng.normal(0, 0.5, var.shape).astype("float32"))
            layer.moving_variance.assign(rng.uniform(0.5, 2, layer.moving_variance.shape)
                                         .astype("float32"))
    return model


def stateless_conv2d():
    return keras.Sequential([keras.Input((32, 32, 3), batch_size=1),
                             layers.Conv2D(1, (2, 2), strides=(2, 2), padding="valid")])


def stateless_dense():
    return keras.Sequential([keras.Input((20,), batch_size=1), layers.Dense(16, activation="relu"),
                             layers.Dense(4, activation="softmax")])


def fixed_t_functional_lstm_seq(frames: int = 12, features: int = 5):
    """Functional, input (None, T, F) with T fixed, as a keyword spotter's."""
    x = keras.Input((frames, features))
    h = layers.LSTM(10, return_sequences=True)(x)
    return keras.Model(x, layers.Dense(4)(h))


def fixed_t_functional_lstm_last(frames: int = 12, features: int = 5):
    x = keras.Input((frames, features))
    h = layers.GRU(8, return_sequences=True)(x)
    h = layers.LSTM(6)(h)
    return keras.Model(x, layers.Dense(3, activation="softmax")(h))


# Input (None, T, F) with a fixed T: Keras itself runs them on exactly T steps.
FIXED_T = {
    "fixed_t_lstm_seq": fixed_t_functional_lstm_seq,
    "fixed_t_lstm_last": fixed_t_functional_lstm_last,
}

STREAMING = {
    "lstm_impl1_seq": lstm_impl1_seq,
    "lstm_impl2_stacked_last": lstm_impl2_stacked_last,
    "gru_reset_after_seq_td": gru_reset_after_seq_timedistributed,
    "gru_reset_before_last": gru_reset_before_last,
    "simple_rnn_last": simple_rnn_last,
    "functional_branched": functional_branched,
    "norm_reshape": lambda: with_batchnorm_stats(normalization_and_reshape()),
}

STATELESS = {
    "conv2d_2x2_s2": stateless_conv2d,
    "dense": stateless_dense,
}


def build(name: str):
    keras.utils.set_random_seed(zlib.crc32(name.encode()) % 1000)
    factory = {**STREAMING, **STATELESS, **FIXED_T}[name]
    return factory()
