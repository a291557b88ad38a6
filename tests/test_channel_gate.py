"""Squeeze-and-excitation gates moved into the next convolution's weights
(compiler/lower/channel_gate.py): which products go (a gate per channel
before a convolution that alone reads the product, where the weights are
smaller than the image), which stay, and the numbers through the built
library against TensorFlow, with weights embedded and in a sidecar file.
"""
from __future__ import annotations

import re

import numpy as np
import pytest

from tfaot.lower import microkernel

STEPS = 100


def _se_model():
    """An EfficientNet-like image model with three squeeze-and-excitation
    gates: one over a 24x24x16 image before a 16 -> 8 projection (gated
    into its 512 weights), one over another such image whose product a
    residual add reads too (left to IREE), one over a 6x6x64 image before a
    64 -> 64 projection (4096 weights > 2304 pixels: left)."""
    import keras
    from keras import layers as L

    keras.utils.set_random_seed(3)

    def excite(h, channels):
        s = L.GlobalAveragePooling2D(keepdims=True)(h)
        s = L.Conv2D(4, 1, activation="swish")(s)
        return L.Multiply()([h, L.Conv2D(channels, 1, activation="sigmoid")(s)])

    x = keras.Input((24, 24, 3))
    h = L.Conv2D(16, 3, padding="same", activation="swish")(x)
    h = L.Activation("swish")(L.BatchNormalization()(L.DepthwiseConv2D(3, padding="same")(h)))
    h = L.BatchNormalization()(L.Conv2D(8, 1)(excite(h, 16)))
    gated = excite(L.Conv2D(16, 1, activation="relu")(h), 16)
    h = L.Add()([L.Conv2D(16, 1)(gated), gated])
    h = L.Conv2D(64, 3, strides=4, padding="same", activation="relu")(h)
    h = L.Conv2D(64, 1)(excite(h, 64))
    model = keras.Model(x, L.Dense(5)(L.GlobalAveragePooling2D()(h)))
    rng = np.random.default_rng(1)
    for layer in model.layers:
        if isinstance(layer, L.BatchNormalization):
            n = layer.get_weights()[0].shape
            layer.set_weights([rng.uniform(0.5, 1.5, n).astype("f4"),
                               rng.normal(0, 0.3, n).astype("f4"),
                               rng.normal(0, 0.1, n).astype("f4"),
                               rng.uniform(0.5, 1.5, n).astype("f4")])
    return model


@pytest.fixture(scope="module")
def se_keras(tmp_path_factory):
    path = tmp_path_factory.mktemp("se") / "se.keras"
    _se_model().save(path)
    return path


def test_only_the_first_gate_moves_into_weights(se_keras):
    """The first 24x24x16 image's product goes: its projection's dispatch
    takes the gate and multiplies its packed weights; the other two stay."""
    from tfaot.lower.mlir_import import import_program
    from tfaot.streamify_keras import streamify_keras

    import keras

    program = streamify_keras(keras.models.load_model(se_keras), "se.keras", "keras",
                              fixed_window="whole")
    text = import_program(program)

    def products(t):  # the images a gate of 1x1x1xC is spread over, for a product
        main = t[:t.index("func.func private @tfaot_")] if "@tfaot_" in t else t
        return re.findall(r"broadcast_in_dim \S+, dims = \[0, 1, 2, 3\] : "
                          r"\(tensor<1x1x1x\d+xf32>\) -> tensor<(1x\d+x\d+x\d+)xf32>", main)

    before = products(text)
    assert before.count("1x24x24x16") == 2 and before.count("1x6x6x64") == 1, before
    new, _ = microkernel.rewrite_matvecs(text, "m")
    after = products(new)
    assert after.count("1x24x24x16") == 1 and after.count("1x6x6x64") == 1, after
    gated = re.findall(r"func\.func private @(\w+)\(%x: tensor<1x24x24x16xf32>, "
                       r"%g: tensor<1x1x1x16xf32>\)", new)
    assert len(gated) == 1 and new.count("%w_gated = stablehlo.multiply") == 1
    assert re.search(rf"call @{gated[0]}\(%\S+, %\S+\)", new)


@pytest.mark.parametrize("weights", ["embedded", "file"])
def test_gated_model_through_the_so(se_keras, weights, tmp_path, capsys):
    """TensorFlow's outputs over STEPS images through the built library,
    the gated weights made from the kernel object's constant or from the
    sidecar's global."""
    from tfaot.cli import main

    out = tmp_path / "out"
    assert main(["build", str(se_keras), "-o", str(out), "--quiet", "--weights", weights]) == 0
    assert main(["verify", str(se_keras), str(out), "--steps", str(STEPS)]) == 0
    err = float(re.search(r"max abs error (\S+)", capsys.readouterr().out).group(1))
    assert err <= 2e-5


def test_a_conv1d_gate_through_the_so(tmp_path, capsys):
    """A Conv1D's gate, whose product reaches the convolution through the
    import's reshape to a 2-D image, goes into its weights too (a reshape
    of the ungated image takes the product's place); TensorFlow's outputs
    over STEPS steps through the built library."""
    import keras
    from keras import layers as L

    from tfaot.cli import main

    keras.utils.set_random_seed(4)
    x = keras.Input((50, 12))
    h = L.Conv1D(32, 5, padding="same", activation="relu")(x)
    s = L.Dense(32, activation="sigmoid")(L.Dense(8, activation="relu")(
        L.GlobalAveragePooling1D(keepdims=True)(h)))
    h = L.Conv1D(16, 1)(L.Multiply()([h, s]))
    keras.Model(x, L.Dense(3)(L.GlobalAveragePooling1D()(h))).save(tmp_path / "se1.keras")
    out = tmp_path / "out"
    assert main(["build", str(tmp_path / "se1.keras"), "-o", str(out), "--quiet",
                 "--whole-window", "--keep-temps"]) == 0
    assert (out / "temps" / "compile" / "se1.mlir").read_text().count("%w_gated = ") == 1
    assert main(["verify", str(tmp_path / "se1.keras"), str(out), "--steps", str(STEPS)]) == 0
    err = float(re.search(r"max abs error (\S+)", capsys.readouterr().out).group(1))
    assert err <= 2e-5
