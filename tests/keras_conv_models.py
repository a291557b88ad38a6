"""Small Keras models with convolution, pooling, padding and windows over
time, written the way their families' authors write them (kws_streaming's
CRNN / DS-CNN / CNN / SVDF / TC-ResNet, reduced to toy sizes).

Each entry: name -> (builder, expected stream mode, recompute expected).
"""
from __future__ import annotations

import zlib

import keras
from keras import layers as L

F = 6  # features per frame


def _open(features=F):
    return keras.Input((None, features), batch_size=1)


def conv1d_valid_gru():
    return keras.Sequential([_open(), L.Conv1D(4, 3), L.GRU(5), L.Dense(3)])


def conv1d_causal_dilated_seq():
    return keras.Sequential([_open(), L.Conv1D(4, 3, padding="causal", dilation_rate=2,
                                                activation="relu"),
                             L.Conv1D(3, 2, dilation_rate=3), L.Dense(2)])


def conv1d_stride2_lstm_seq():
    return keras.Sequential([_open(), L.Conv1D(4, 3, strides=2), L.LSTM(4, return_sequences=True),
                             L.Dense(2)])


def pad_pool_gru():
    """ZeroPadding1D before the first frame, then pooling with stride in time."""
    return keras.Sequential([_open(), L.ZeroPadding1D((2, 0)), L.Conv1D(4, 3),
                             L.MaxPooling1D(2), L.AveragePooling1D(3, strides=1),
                             L.GRU(4), L.Dense(2)])


def grouped_conv1d_gru():
    """Grouped Conv1D (groups=2): Keras 3 compiles it with jit_compile=True
    (TensorFlow's CPU kernel lacks it), a call the importer must inline."""
    return keras.Sequential([_open(8), L.Conv1D(8, 3, groups=2, padding="causal",
                                                activation="relu"),
                             L.Conv1D(4, 2, groups=4), L.GRU(5), L.Dense(2)])


def crnn():
    """CRNN (kws_streaming crnn.py): Conv2D over (time, frequency) -> GRU."""
    x = keras.Input((None, 10), batch_size=1)
    h = L.Reshape((-1, 10, 1))(x)
    h = L.Conv2D(4, (3, 3), strides=(1, 2), activation="relu")(h)
    h = L.Conv2D(4, (3, 1), dilation_rate=(2, 1), activation="relu")(h)
    h = L.Reshape((-1, 4 * 4))(h)
    h = L.GRU(6, return_sequences=True)(h)
    h = L.GRU(5)(h)
    h = L.Dropout(0.1)(h)
    return keras.Model(x, L.Dense(3, activation="softmax")(h))


def crnn_pool_same():
    """A CRNN whose pooling is written MaxPooling2D((2, 2), padding='same')
    after a convolution of stride 2 and kernel 2, also 'same': TensorFlow
    pads no frame where the kernel is at most the stride and the length a
    whole number of strides, so it streams as 'valid' (it was refused)."""
    x = keras.Input((None, 10), batch_size=1)
    h = L.Reshape((-1, 10, 1))(x)
    h = L.Conv2D(4, (2, 3), strides=(2, 1), padding="same", activation="relu")(h)
    h = L.MaxPooling2D((2, 2), padding="same")(h)
    h = L.Reshape((-1, 4 * 5))(h)
    return keras.Model(x, L.GRU(5, return_sequences=True)(h))


def window_pool_same(window=16):
    """A fixed window's MaxPooling1D(2, padding='same') over 14 frames (a
    whole number of strides): streamed, not recomputed."""
    x = keras.Input((window, F))
    h = L.Conv1D(4, 3, activation="relu")(x)
    h = L.MaxPooling1D(2, padding="same")(h)
    return keras.Model(x, L.Dense(2)(L.Flatten()(h)))


def ds_cnn(window=16):
    """DS-CNN (kws_streaming ds_cnn.py): Conv2D, then depthwise + pointwise
    blocks with BatchNorm/ReLU, valid in time (frequency padded by ZeroPadding2D),
    average pooling over the rest."""
    x = keras.Input((window, 10))
    h = L.Reshape((window, 10, 1))(x)
    h = L.Conv2D(6, (3, 3), strides=(2, 2), padding="valid")(h)
    h = L.BatchNormalization()(h)
    h = L.ReLU()(h)
    for _ in range(2):
        h = L.ZeroPadding2D(((0, 0), (1, 1)))(h)
        h = L.DepthwiseConv2D((3, 3), padding="valid")(h)
        h = L.BatchNormalization()(h)
        h = L.ReLU()(h)
        h = L.Conv2D(6, (1, 1), padding="same")(h)
        h = L.BatchNormalization()(h)
        h = L.ReLU()(h)
    h = L.GlobalAveragePooling2D()(h)
    return keras.Model(x, L.Dense(3, activation="softmax")(h))


def ds_cnn_same(window=16):
    """DS-CNN as ARM's Hello Edge writes it: padding='same' everywhere (fallback)."""
    x = keras.Input((window, 10))
    h = L.Reshape((window, 10, 1))(x)
    h = L.Conv2D(6, (5, 3), strides=(2, 2), padding="same", activation="relu")(h)
    h = L.DepthwiseConv2D((3, 3), padding="same", activation="relu")(h)
    h = L.Conv2D(6, (1, 1), activation="relu")(h)
    h = L.AveragePooling2D(pool_size=(h.shape[1], h.shape[2]))(h)
    h = L.Flatten()(h)
    return keras.Model(x, L.Dense(3)(h))


def ds_cnn_pool_all(window=16):
    """DS-CNN whose last AveragePooling2D covers every remaining frame (its
    pool size is the remaining time length: one output position, a stride
    of that length), then Flatten, as kws_streaming's ds_cnn writes it."""
    x = keras.Input((window, 10))
    h = L.Reshape((window, 10, 1))(x)
    h = L.Conv2D(6, (3, 3), strides=(1, 2), padding="valid", activation="relu")(h)
    h = L.DepthwiseConv2D((3, 3), padding="valid")(h)
    h = L.BatchNormalization()(h)
    h = L.ReLU()(h)
    h = L.Conv2D(6, (1, 1), activation="relu")(h)
    h = L.AveragePooling2D(pool_size=(h.shape[1], h.shape[2]))(h)
    h = L.Flatten()(h)
    return keras.Model(x, L.Dense(3, activation="softmax")(h))


def pool_one_position(window=16):
    """A max pooling whose stride leaves one output position but not all
    frames under its kernel (11 frames, pool 8, stride 8: the last 3 frames
    are dropped), then Flatten."""
    x = keras.Input((window, 6))
    h = L.Conv1D(5, 6, activation="relu")(x)
    h = L.MaxPooling1D(pool_size=8)(h)
    h = L.Flatten()(h)
    return keras.Model(x, L.Dense(3)(h))


def cnn(window=16):
    """CNN (kws_streaming cnn.py): Conv2D + MaxPooling2D, Flatten, Dense."""
    x = keras.Input((window, 10))
    h = L.Reshape((window, 10, 1))(x)
    h = L.Conv2D(4, (3, 3), activation="relu")(h)
    h = L.MaxPooling2D((2, 2))(h)
    h = L.Conv2D(4, (3, 3), dilation_rate=(2, 1), activation="relu")(h)
    h = L.Flatten()(h)
    h = L.Dense(8, activation="relu")(h)
    return keras.Model(x, L.Dense(3)(h))


def svdf(window=16):
    """SVDF (kws_streaming svdf.py): Dense (feature filter) -> DepthwiseConv1D
    over time (memory) -> bias/ReLU, stacked; Flatten at the end."""
    x = keras.Input((window, 10))
    h = L.Dense(8, use_bias=False)(x)
    h = L.DepthwiseConv1D(4, padding="valid", activation="relu")(h)
    h = L.Dense(8, use_bias=False)(h)
    h = L.DepthwiseConv1D(3, padding="valid")(h)
    h = L.SeparableConv1D(4, 3)(h)
    h = L.Flatten()(h)
    return keras.Model(x, L.Dense(3)(h))


def _tc_block(h, filters, stride, padding, crop=None):
    y = L.Conv1D(filters, 3, strides=stride, padding=padding, use_bias=False)(h)
    y = L.BatchNormalization()(y)
    y = L.ReLU()(y)
    y = L.Conv1D(filters, 3, padding=padding, use_bias=False)(y)
    y = L.BatchNormalization()(y)
    s = L.Conv1D(filters, 1, strides=stride, use_bias=False)(h)
    if crop:
        s = L.Cropping1D(crop)(s)
    return L.ReLU()(L.Add()([y, s]))


def tc_resnet(window=16):
    """TC-ResNet (Choi et al.; kws_streaming tc_resnet.py): Conv1D over time with
    frequency as channels, residual blocks with stride 2, 'same' padding (fallback)."""
    x = keras.Input((window, 10))
    h = L.Conv1D(6, 3, padding="same", use_bias=False)(x)
    h = _tc_block(h, 8, 2, "same")
    h = L.GlobalAveragePooling1D()(h)
    return keras.Model(x, L.Dense(3, activation="softmax")(h))


def tc_resnet_valid(window=16):
    """TC-ResNet with valid convolutions; the shortcut is cropped to line up."""
    x = keras.Input((window, 10))
    h = L.Conv1D(6, 3, use_bias=False)(x)
    h = _tc_block(h, 8, 1, "valid", crop=(2, 2))
    h = _tc_block(h, 8, 2, "valid", crop=(1, 2))
    h = L.GlobalMaxPooling1D()(h)
    return keras.Model(x, L.Dense(3, activation="softmax")(h))


def window_pool_crop(window=12):
    x = keras.Input((window, F))
    h = L.Conv1D(4, 2, dilation_rate=2)(x)
    h = L.AveragePooling1D(2)(h)
    h = L.Cropping1D((1, 1))(h)
    h = L.GlobalAveragePooling1D()(h)
    return keras.Model(x, L.Dense(2)(h))


def conv_lstm1d():
    return keras.Sequential([keras.Input((None, 8, 2), batch_size=1),
                             L.ConvLSTM1D(3, 3, padding="same", return_sequences=True),
                             L.ConvLSTM1D(2, 3), L.Flatten(), L.Dense(3)])


def conv_lstm2d():
    return keras.Sequential([keras.Input((None, 8, 8, 2), batch_size=1),
                             L.ConvLSTM2D(4, (3, 3), padding="same", return_sequences=True),
                             L.TimeDistributed(L.Flatten()), L.Dense(3)])


def conv_lstm3d():
    return keras.Sequential([keras.Input((None, 4, 4, 4, 1), batch_size=1),
                             L.ConvLSTM3D(2, 3, padding="valid"), L.Flatten(), L.Dense(2)])


# name -> (builder, mode, recomputed)
def wavenet():
    """Gated causal convolutions with dilations up to 32 (a WaveNet / TCN):
    residual and skip sums, a GRU after them. The dilated layers keep their
    frames in circular buffers and gather the rows their taps read
    (streamify_keras/circular.py), beside the ordered ring buffer of the
    undilated one and the GRU's state."""
    x = _open()
    h, skips = L.Conv1D(8, 1)(x), []
    for d in (1, 2, 8, 32):
        f = L.Conv1D(8, 2, padding="causal", dilation_rate=d, activation="tanh")(h)
        g = L.Conv1D(8, 2, padding="causal", dilation_rate=d, activation="sigmoid")(h)
        z = L.Multiply()([f, g])
        skips.append(L.Conv1D(6, 1)(z))
        h = L.Add()([h, L.Conv1D(8, 1)(z)])
    s = L.Activation("relu")(L.Add()(skips))
    return keras.Model(x, L.Dense(3)(L.GRU(5, return_sequences=True)(s)))


def dilated_chunks():
    """Dilated convolutions over chunks of two frames (a stride 2 later),
    one of them valid (a delay), and over time and frequency (Conv2D with
    dilation (16, 1)): each output of a chunk gathers its own taps."""
    x = _open()
    h = L.Conv1D(4, 3, padding="causal", dilation_rate=16, activation="relu",
                 name="conv1d_causal_d16")(x)
    w = L.Reshape((-1, 4, 1))(h)
    w = L.Conv2D(3, (2, 2), dilation_rate=(16, 1), activation="relu", name="conv2d_d16")(w)
    h = L.Reshape((-1, 9))(w)
    h = L.Conv1D(4, 2, strides=2)(h)
    h = L.Conv1D(3, 3, dilation_rate=8)(h)
    return keras.Model(x, L.Dense(2)(L.GRU(4, return_sequences=True)(h)))


MODELS = {
    "conv1d_valid_gru": (conv1d_valid_gru, "prefix", False),
    "conv1d_causal_dilated_seq": (conv1d_causal_dilated_seq, "prefix", False),
    "conv1d_stride2_lstm_seq": (conv1d_stride2_lstm_seq, "prefix", False),
    "pad_pool_gru": (pad_pool_gru, "prefix", False),
    "grouped_conv1d_gru": (grouped_conv1d_gru, "prefix", False),
    "crnn": (crnn, "prefix", False),
    "crnn_pool_same": (crnn_pool_same, "prefix", False),
    "window_pool_same": (window_pool_same, "window", False),
    "ds_cnn": (ds_cnn, "window", False),
    "ds_cnn_same": (ds_cnn_same, "window", True),
    "ds_cnn_pool_all": (ds_cnn_pool_all, "window", False),
    "pool_one_position": (pool_one_position, "window", False),
    "cnn": (cnn, "window", False),
    "svdf": (svdf, "window", False),
    "tc_resnet": (tc_resnet, "window", True),
    "tc_resnet_valid": (tc_resnet_valid, "window", False),
    "window_pool_crop": (window_pool_crop, "window", False),
    "wavenet": (wavenet, "prefix", False),
    "dilated_chunks": (dilated_chunks, "prefix", False),
    "conv_lstm1d": (conv_lstm1d, "prefix", False),
    "conv_lstm2d": (conv_lstm2d, "prefix", False),
    "conv_lstm3d": (conv_lstm3d, "prefix", False),
}


def build(name: str):
    keras.utils.set_random_seed(zlib.crc32(name.encode()) % 1000)
    model = MODELS[name][0]()
    for layer in model.layers:  # non-trivial BatchNorm statistics
        if isinstance(layer, L.BatchNormalization):
            import numpy as np

            rng = np.random.default_rng(3)
            for var in (layer.moving_mean, layer.gamma, layer.beta):
                var.assign(rng.normal(0, 0.5, var.shape).astype("float32"))
            layer.moving_variance.assign(rng.uniform(0.5, 2, layer.moving_variance.shape)
                                         .astype("float32"))
    return model
