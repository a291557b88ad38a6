"""Keras 2 (tf_keras) .h5 files keep Keras 2 meanings, in the build and in verify.

tests/fixtures/keras2_changed.h5 (made by fixtures/make_keras2_h5.py with
tf_keras) uses what changed between Keras 2 and 3: hard_sigmoid (Keras 2:
clip(0.2x+0.5, 0, 1); Keras 3: relu6(x+3)/6) as LSTM/GRU recurrent
activation and as a Dense activation, ThresholdedReLU (gone in Keras 3) and
LeakyReLU(alpha=...). Its _ref.npz holds Keras 2's own outputs.
"""
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from tfaot import harness
from tfaot.frontend import keras2
from tfaot.cli import main
from tfaot.frontend.load import load_model

FIXTURES = Path(__file__).parent / "fixtures"
CHANGED = FIXTURES / "keras2_changed.h5"
TOL = 1e-5


def _ref():
    ref = np.load(FIXTURES / "keras2_changed_ref.npz")
    return ref["x"], ref["y"]  # x (1, T, F); y (T, 1, out): step t of Keras 2


def test_keras2_detected_from_attributes_not_name(tmp_path):
    assert keras2.h5_keras_version(CHANGED).startswith("2.")
    odd = tmp_path / "model.bin"  # no .h5 suffix
    shutil.copyfile(CHANGED, odd)
    x, y = _ref()
    for path in (CHANGED, odd):
        loaded = load_model(path)
        assert loaded.format == "h5"
        got = np.swapaxes(np.asarray(loaded.keras_model(x)), 0, 1)
        assert np.abs(got - y).max() <= TOL
    lstm = loaded.keras_model.get_layer("lstm")
    at_two = float(np.asarray(lstm.cell.recurrent_activation(np.float32(2.0))))
    assert at_two == pytest.approx(0.9)  # Keras 3's hard_sigmoid gives 0.8333


def test_keras3_h5_keeps_keras3_hard_sigmoid(tmp_path):
    import keras

    keras.utils.set_random_seed(1)
    model = keras.Sequential([keras.Input((None, 4), batch_size=1),
                              keras.layers.LSTM(5, recurrent_activation="hard_sigmoid",
                                                return_sequences=True),
                              keras.layers.Dense(2, activation="hard_sigmoid")])
    path = tmp_path / "k3.h5"
    model.save(path)
    assert not keras2.is_keras2_h5(path)
    x = np.random.default_rng(0).normal(size=(1, 20, 4)).astype(np.float32) * 3
    loaded = load_model(path).keras_model
    np.testing.assert_array_equal(np.asarray(loaded(x)), np.asarray(model(x)))


def test_rewrite_config_names_what_changed():
    config = {"class_name": "Sequential", "config": {"name": "s", "layers": [
        {"class_name": "LSTM", "config": {"name": "l", "activation": "tanh",
                                          "recurrent_activation": "hard_sigmoid"}},
        {"class_name": "Dense", "config": {"name": "d", "activation": {
            "module": "keras.activations", "class_name": "function",
            "config": "hard_sigmoid", "registered_name": None}}},
        {"class_name": "Activation", "config": {"name": "a", "activation": "relu6"}}]}}
    new, changes = keras2.rewrite_config(config)
    assert changes == ["layer 'l' recurrent_activation=hard_sigmoid",
                       "layer 'd' activation=hard_sigmoid"]
    layers = new["config"]["layers"]
    assert layers[0]["config"]["activation"] == "tanh"
    assert layers[0]["config"]["recurrent_activation"]["config"] == "tfaot>keras2_hard_sigmoid"
    assert layers[2]["config"]["activation"] == "relu6"
    assert config["config"]["layers"][0]["config"]["recurrent_activation"] == "hard_sigmoid"


@pytest.fixture(scope="module")
def keras2_build(tmp_path_factory):
    out = tmp_path_factory.mktemp("k2") / "changed"
    assert main(["build", str(CHANGED), "-o", str(out)]) == 0
    return out


def test_build_matches_keras2_outputs(keras2_build):
    """The .so against what Keras 2 computed (committed) and computes (tf_keras)."""
    import tf_keras

    x, y = _ref()
    lib = harness.load(keras2_build)
    got = lib.step_n(np.swapaxes(x, 0, 1))
    err = float(np.abs(got - y).max())
    print(f"keras2_changed.h5: .so vs Keras 2 max abs error {err:.3g} over {x.shape[1]} steps")
    assert x.shape[1] >= 100 and err <= TOL
    live = tf_keras.models.load_model(CHANGED, compile=False)
    assert np.abs(got - np.swapaxes(live(x).numpy(), 0, 1)).max() <= TOL


def test_verify_compares_with_keras2(keras2_build, tmp_path, capsys):
    import keras

    assert main(["verify", str(CHANGED), str(keras2_build), "--steps", "150"]) == 0
    line = capsys.readouterr().out.strip()
    assert re.fullmatch(r"y_t: max abs error \S+ over 150 steps \(tolerance 1e-05\): ok", line)

    # A library with Keras 3's hard_sigmoid (the old, wrong reading of the
    # file) must fail verify against the Keras 2 file.
    keras3_meaning = load_model(CHANGED).keras_model
    for layer in keras3_meaning.layers:
        owner = getattr(layer, "cell", layer)  # an RNN's activations live on its cell
        for attr in ("activation", "recurrent_activation"):
            fn = getattr(owner, attr, None)
            if getattr(fn, "__name__", "") == "keras2_hard_sigmoid":
                setattr(owner, attr, keras.activations.hard_sigmoid)
    wrong_model = tmp_path / "keras3_meaning.keras"
    keras3_meaning.save(wrong_model)
    wrong = tmp_path / "wrong"
    assert main(["build", str(wrong_model), "-o", str(wrong)]) == 0
    capsys.readouterr()
    assert main(["verify", str(wrong_model), str(wrong)]) == 0  # consistent with itself
    capsys.readouterr()
    assert main(["verify", str(CHANGED), str(wrong)]) == 1
    line = capsys.readouterr().out.strip()
    error = float(re.search(r"max abs error (\S+)", line).group(1))
    assert line.endswith("FAIL") and error > 0.01, line


def test_keras2_keras_archive(tmp_path):
    """tf_keras also writes .keras archives (metadata.json keras_version 2.x),
    which name ThresholdedReLU's module (keras.layers, where Keras 3 has none)."""
    import tf_keras

    from tfaot.verify import keras_reference_model

    tf_keras.utils.set_random_seed(3)
    k2_model = tf_keras.Sequential([
        tf_keras.Input((None, 4), batch_size=1),
        tf_keras.layers.GRU(5, recurrent_activation="hard_sigmoid", return_sequences=True),
        tf_keras.layers.ThresholdedReLU(theta=0.1),
        tf_keras.layers.Dense(2, activation="hard_sigmoid")])
    k2_model.set_weights([w * 2 for w in k2_model.get_weights()])
    path = tmp_path / "k2.keras"
    k2_model.save(path)
    assert keras2.archive_keras_version(path).startswith("2.")
    x = np.random.default_rng(0).normal(size=(1, 30, 4)).astype(np.float32)
    loaded = load_model(path)
    assert np.abs(np.asarray(loaded.keras_model(x)) - k2_model(x).numpy()).max() <= TOL
    assert type(keras_reference_model(loaded)).__module__.startswith("tf_keras")


def test_time_major_true_is_refused():
    from tfaot.errors import TfaotError

    config = {"class_name": "LSTM", "config": {"name": "l", "time_major": True}}
    with pytest.raises(TfaotError, match="layer 'l' \\(LSTM\\) has time_major=True.*"
                                         "without it on \\(batch, time, ...\\)"):
        keras2.rewrite_config(config)
    new, _ = keras2.rewrite_config({"class_name": "LSTM",
                                    "config": {"name": "l", "time_major": False}})
    assert "time_major" not in new["config"]


def _keras2_op_layers():
    """TensorFlow functions called on Keras 2 tensors, as TF2 examples write
    them: Keras 2 records each as a TFOpLambda (a slice as SlicingOpLambda),
    with tensors among its keyword arguments (``a + b``), a list of them
    as its argument (``tf.concat``), several outputs (``tf.split``) or a
    Python value first (``1.0 - x``: written as "_CONSTANT_VALUE", which
    Keras 3 took for a layer's name)."""
    import tensorflow as tf
    import tf_keras

    tf_keras.utils.set_random_seed(4)
    L = tf_keras.layers
    x = tf_keras.Input((None, 6))
    h = tf.math.tanh(x) * 2.0 + tf.expand_dims(tf.reduce_mean(x, axis=-1), -1)
    h = tf.concat([L.Dense(4)(h), tf.nn.relu(x)], axis=-1)
    a, b = tf.split(h, 2, axis=-1)  # a layer with two outputs
    h = L.LSTM(8, return_sequences=True)(a * (1.0 - tf.sigmoid(b)))
    return tf_keras.Model(x, tf.nn.softmax(L.Dense(3)(h[:, -1, :]), axis=-1))


@pytest.mark.parametrize("suffix", [".h5", pytest.param(".keras", marks=pytest.mark.slow)])
def test_keras2_op_layers_stream(tmp_path, capsys, suffix):
    """Each op layer is found to work frame by frame (the slice of the last
    frame: as a recurrent layer's last output) and the library matches
    Keras 2 over 150 steps; also from tf_keras's .keras archive of a
    functional model."""
    path = tmp_path / f"ops{suffix}"
    _keras2_op_layers().save(path)
    classes = {layer.__class__.__name__ for layer in load_model(path).keras_model.layers}
    assert {"TFOpLambda", "SlicingOpLambda"} <= classes
    line = _build_and_verify(path, tmp_path / "ops", 150, capsys)
    assert re.fullmatch(r"\S+: max abs error \S+ over 150 steps \(tolerance 1e-05\): ok", line)


def _keras2_shape_reshape():
    """A CRNN written the Keras 2 way: ``tf.reshape(h, [-1, tf.shape(h)[1],
    C])`` between the convolution and the GRU, a list mixing a tensor and
    numbers in the op layer's arguments, which Keras 3 refused to call
    ("you cannot mix tensors and non-tensors")."""
    import tensorflow as tf
    import tf_keras

    tf_keras.utils.set_random_seed(5)
    L = tf_keras.layers
    x = tf_keras.Input((None, 12))
    h = L.Conv2D(4, (3, 3), strides=(1, 2), activation="relu")(tf.expand_dims(x, -1))
    h = tf.reshape(h, [-1, tf.shape(h)[1], h.shape[2] * h.shape[3]])
    return tf_keras.Model(x, L.Dense(3)(L.GRU(8)(h)))


def test_keras2_reshape_by_a_shape_tensor_streams(tmp_path, capsys):
    path = tmp_path / "crnn.h5"
    _keras2_shape_reshape().save(path)
    line = _build_and_verify(path, tmp_path / "crnn", 120, capsys)
    assert re.fullmatch(r"\S+: max abs error \S+ over \d+ steps \(tolerance \S+\): ok", line), line


def _build_and_verify(path, out, steps: int, capsys) -> str:
    """Build ``path`` into ``out`` and verify it over ``steps`` steps: verify's line."""
    assert main(["build", str(path), "-o", str(out), "-q"]) == 0
    capsys.readouterr()
    assert main(["verify", str(path), str(out), "--steps", str(steps)]) == 0
    return capsys.readouterr().out.strip()


def _keras2_depthwise_and_separable():
    """What Keras 2 configs write and Keras 3 refuses: DepthwiseConv1D,
    SeparableConv1D, Conv1DTranspose (``groups``, the separable's unused
    ``kernel_*``) and SpatialDropout1D (``trainable``, ``noise_shape``)."""
    import tf_keras

    tf_keras.utils.set_random_seed(5)
    L = tf_keras.layers
    x = tf_keras.Input((12, 6))
    h = L.SeparableConv1D(8, 3, activation="relu")(x)
    h = L.SpatialDropout1D(0.2)(h)
    h = L.DepthwiseConv1D(3, depth_multiplier=2)(h)
    h = L.Conv1DTranspose(4, 2, strides=2)(h)
    return tf_keras.Model(x, L.Dense(3)(L.GlobalMaxPooling1D()(h)))


def test_keras2_depthwise_separable_and_transposed_convolutions_load(tmp_path, capsys):
    """A Keras 2 file with a DepthwiseConv or SeparableConv (DS-CNN,
    MobileNet) did not load at all ("Unrecognized keyword arguments passed
    to DepthwiseConv1D: {'groups': 1}"); the library now matches Keras 2."""
    path = tmp_path / "sep.h5"
    _keras2_depthwise_and_separable().save(path)
    out = tmp_path / "sep"
    assert main(["build", str(path), "-o", str(out), "-q"]) == 0
    capsys.readouterr()
    assert main(["verify", str(path), str(out), "--steps", "40"]) == 0
    assert capsys.readouterr().out.strip().endswith(": ok")
    from tfaot.errors import TfaotError

    with pytest.raises(TfaotError, match="layer 'd' \\(DepthwiseConv2D\\) has groups=2"):
        keras2.rewrite_config({"class_name": "DepthwiseConv2D",
                               "config": {"name": "d", "groups": 2}})


def _keras2_transfer_learning():
    """The transfer-learning file: input -> Rescaling -> a base model (as
    keras.applications gives one) -> pooling -> head, in Keras 2. Keras 2
    numbers the outer call of the base as its node 1, which Keras 3's
    loader took literally ("disconnected nodes")."""
    import tf_keras

    tf_keras.utils.set_random_seed(6)
    L = tf_keras.layers
    base_in = tf_keras.Input((12, 12, 3))
    h = L.Conv2D(4, 3, strides=2, activation="relu")(base_in)
    base = tf_keras.Model(base_in, L.DepthwiseConv2D(3, padding="same")(h), name="base")
    x = tf_keras.Input((12, 12, 3))
    h = base(L.Rescaling(1 / 127.5, offset=-1)(x))
    return tf_keras.Model(x, L.Dense(3, activation="softmax")(L.GlobalAveragePooling2D()(h)))


@pytest.mark.parametrize("suffix", [".h5", ".keras"])
def test_keras2_model_with_a_base_model_inside_loads(tmp_path, capsys, suffix):
    path = tmp_path / f"tl{suffix}"
    _keras2_transfer_learning().save(path)
    line = _build_and_verify(path, tmp_path / "tl", 100, capsys)
    assert re.fullmatch(r"\S+: max abs error \S+ over 100 steps \(tolerance \S+\): ok", line), line


def _keras2_slash_names():
    """Layer names with '/', as tf_keras's MobileNetV3 writes them
    ('Conv/BatchNorm'), one whose '_' spelling is taken ('enc_bn'), and a
    BatchNormalization (tf_keras writes its axis as a list)."""
    import tf_keras

    tf_keras.utils.set_random_seed(3)
    L = tf_keras.layers
    x = tf_keras.Input((None, 4))
    h = L.BatchNormalization(name="enc/bn")(L.Dense(6, activation="tanh", name="enc/dense")(x))
    h = L.GRU(5, return_sequences=True, name="rnn/gru")(h)
    y = L.Dense(2, name="head/out")(L.Add(name="enc_bn")([h, L.Dense(5, name="enc/skip")(x)]))
    model = tf_keras.Model(x, y)
    rng = np.random.default_rng(1)
    model.get_layer("enc/bn").set_weights([rng.uniform(0.5, 1.5, 6), rng.normal(size=6),
                                           rng.normal(size=6) * 0.1, rng.uniform(0.5, 1.5, 6)])
    return model


@pytest.mark.parametrize("suffix", [".h5", ".keras"])
def test_keras2_slash_names_and_batch_norm_axis(tmp_path, capsys, suffix):
    """A Keras 2 model whose layer names hold '/' did not load ("Argument
    `name` ... cannot contain character `/`"), nor a tf_keras .keras archive
    with a BatchNormalization ("int() argument must be ... not 'list'");
    both build and match Keras 2 over 120 steps."""
    path = tmp_path / f"slash{suffix}"
    _keras2_slash_names().save(path)
    names = {layer.name for layer in load_model(path).keras_model.layers}
    assert {"enc_bn", "enc_bn_1", "rnn_gru", "head_out"} <= names
    line = _build_and_verify(path, tmp_path / "slash", 120, capsys)
    assert re.fullmatch(r"\S+: max abs error \S+ over 120 steps \(tolerance \S+\): ok", line)


def test_batch_norm_over_several_axes_is_refused():
    from tfaot.errors import TfaotError

    with pytest.raises(TfaotError, match="layer 'b' \\(BatchNormalization\\) normalizes over"):
        keras2.rewrite_config({"class_name": "BatchNormalization",
                               "config": {"name": "b", "axis": [1, 2]}})


def _keras2_causal_separable(sequential: bool):
    """A TCN block in Keras 2: a dilated causal SeparableConv1D (Keras 3
    takes causal padding on Conv1D only) before a GRU."""
    import tf_keras

    tf_keras.utils.set_random_seed(4)
    L = tf_keras.layers
    sep = L.SeparableConv1D(6, 3, dilation_rate=2, padding="causal", activation="relu")
    if sequential:
        return tf_keras.Sequential([tf_keras.Input((None, 4)), sep, L.Dense(2)])
    x = tf_keras.Input((None, 4))
    h = L.GRU(5, return_sequences=True)(sep(x))
    return tf_keras.Model(x, L.Dense(2)(L.Add()([h, L.Dense(5)(x)])))


@pytest.mark.parametrize("suffix, sequential", [(".h5", False), (".keras", False),
                                                (".h5", True)])
def test_keras2_causal_separable_convolution_streams(tmp_path, capsys, suffix, sequential):
    """Keras 3 refused to load the file ("The `padding` argument must be
    ... one of {'same', 'valid'}. Received: causal"); it is a zero padding
    of the 4 frames before, then a valid convolution, and matches Keras 2
    over 120 steps."""
    path = tmp_path / f"tcn{suffix}"
    _keras2_causal_separable(sequential).save(path)
    line = _build_and_verify(path, tmp_path / "tcn", 120, capsys)
    assert re.fullmatch(r"\S+: max abs error \S+ over 120 steps \(tolerance \S+\): ok", line)


def test_keras2_data_augmentation_layers_load(tmp_path, capsys):
    """tf_keras writes rng_type into its augmentation layers' configs, which
    Keras 3 refused ("Unrecognized keyword arguments passed to RandomFlip");
    inert at inference, they load and match Keras 2."""
    import tf_keras

    tf_keras.utils.set_random_seed(5)
    L = tf_keras.layers
    x = tf_keras.Input((10, 10, 3))
    h = L.Conv2D(3, 3, activation="relu")(L.RandomRotation(0.1)(L.RandomFlip()(x)))
    tf_keras.Model(x, L.Dense(2)(L.Flatten()(h))).save(tmp_path / "aug.h5")
    assert main(["build", str(tmp_path / "aug.h5"), "-o", str(tmp_path / "aug"), "-q"]) == 0
    capsys.readouterr()
    assert main(["verify", str(tmp_path / "aug.h5"), str(tmp_path / "aug")]) == 0
    assert capsys.readouterr().out.strip().endswith(": ok")


@pytest.mark.parametrize("suffix", [".h5", ".keras"])
def test_keras2_multi_head_attention_loads(tmp_path, capsys, suffix):
    """tf_keras writes its build shapes and softmax_robust_masking into a
    MultiHeadAttention's config and the value among the call's keyword
    arguments; Keras 3 refused the arguments ("Unrecognized keyword
    arguments") and then built the layer without its value ("build()
    missing ... 'value_shape'"). A causal self-attention and a
    cross-attention of another width over a fixed window match Keras 2."""
    import tf_keras

    tf_keras.utils.set_random_seed(6)
    L = tf_keras.layers
    x = tf_keras.Input((12, 6))
    h = L.GRU(8, return_sequences=True)(x)
    h = L.MultiHeadAttention(2, 4)(h, h, use_causal_mask=True)
    c = L.MultiHeadAttention(2, 3, value_dim=5)(h, x)
    path = tmp_path / f"mha{suffix}"
    tf_keras.Model(x, L.Dense(3)(L.Concatenate()([h, c]))).save(path)
    line = _build_and_verify(path, tmp_path / "mha", 100, capsys)
    assert re.fullmatch(r"\S+: max abs error \S+ over 100 steps \(tolerance \S+\): ok", line), line


@pytest.mark.parametrize("suffix", [".h5", ".keras"])
def test_keras2_embedding_refuses_negative_ids_as_tf_keras_does(tmp_path, capsys, suffix):
    """tf_keras's Embedding raises on id -1; built as Keras 3's (whose take
    wraps it to the last row) the library returned the last row. Its ids are
    [0, rows) now (the step's range check), and the masked tagger matches.
    (A tf_keras .keras archive with an Embedding did not load at all: its
    config's batch_input_shape.)"""
    import json

    import tf_keras

    tf_keras.utils.set_random_seed(3)
    L = tf_keras.layers
    x = tf_keras.Input((None,), batch_size=1, dtype="int32")
    h = L.LSTM(8, return_sequences=True)(L.Embedding(50, 6, mask_zero=True)(x))
    model = tf_keras.Model(x, L.Dense(3)(h))
    model.save(tmp_path / f"emb{suffix}")
    with pytest.raises(Exception):  # (what tfaot's library must do too)
        model(np.array([[-1]], np.int32))
    lib = tmp_path / "lib"
    assert main(["build", str(tmp_path / f"emb{suffix}"), "-o", str(lib), "-q"]) == 0
    entry = json.loads((lib / "emb.json").read_text())["inputs"][0]
    assert entry["id_range"]["min"] == 0 and entry["id_range"]["end"] == 50, entry
    with pytest.raises(harness.InputRangeError):
        harness.load(lib).step(np.array([-1], np.int32))
    capsys.readouterr()
    assert main(["verify", str(tmp_path / f"emb{suffix}"), str(lib)]) == 0
    assert capsys.readouterr().out.strip().endswith(": ok")


def test_keras2_sequential_embedding_on_float_input_verifies(tmp_path, capsys):
    """A tf_keras Sequential model with an Embedding first, built by a call on
    ids: its input is float32 and the Embedding casts it. verify drew normal
    floats, which cast to negative ids that TensorFlow refuses ("TensorFlow
    cannot run the model"); it draws ids in [0, rows) for such an input."""
    import tf_keras

    tf_keras.utils.set_random_seed(4)
    L = tf_keras.layers
    model = tf_keras.Sequential([L.Embedding(30, 4), L.GRU(6, return_sequences=True),
                                 L.Dense(2)])
    model(np.zeros((1, 5), np.int32))
    model.save(tmp_path / "seq.keras")
    assert main(["build", str(tmp_path / "seq.keras"), "-o", str(tmp_path / "lib"), "-q"]) == 0
    capsys.readouterr()
    assert main(["verify", str(tmp_path / "seq.keras"), str(tmp_path / "lib")]) == 0
    assert capsys.readouterr().out.strip().endswith(": ok")


def test_a_custom_weight_constraint_and_regularizer_mean_nothing(tmp_path, capsys):
    """RNNoise's training script clips its weights with a WeightClip of its
    own (and regularizes them): a class the .h5 does not hold, so neither
    Keras could load the model ("Could not interpret constraint
    identifier"), --custom-objects or not. They act only in training: the
    build and verify's tf_keras reference load the model without them."""
    import tf_keras

    class WeightClip(tf_keras.constraints.Constraint):  # (not registered: as in a script)
        def __init__(self, c=2):
            self.c = c

        def __call__(self, p):
            return tf_keras.backend.clip(p, -self.c, self.c)

        def get_config(self):
            return {"name": "WeightClip", "c": self.c}

    class Sparse(tf_keras.regularizers.Regularizer):
        def __call__(self, w):
            return 1e-4 * tf_keras.backend.sum(tf_keras.backend.abs(w))

        def get_config(self):
            return {}

    tf_keras.utils.set_random_seed(0)
    clip = WeightClip(0.499)
    x = tf_keras.Input((None, 42))
    h = tf_keras.layers.Dense(24, activation="tanh", kernel_constraint=clip,
                              kernel_regularizer=Sparse())(x)
    h = tf_keras.layers.GRU(24, return_sequences=True, reset_after=False,
                            kernel_constraint=clip, recurrent_constraint=clip)(h)
    path = tmp_path / "rnnoise_like.h5"
    tf_keras.Model(x, tf_keras.layers.Dense(22, activation="sigmoid")(h)).save(path)
    assert main(["build", str(path), "-o", str(tmp_path / "lib"), "-q"]) == 0
    assert main(["verify", str(path), str(tmp_path / "lib"), "--steps", "100"]) == 0
    assert capsys.readouterr().out.strip().endswith("over 100 steps (tolerance 1e-05): ok")
