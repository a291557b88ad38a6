"""A concatenation with a constant part (compiler/lower/constant_concats.py):
iree-compile's inline-dynamic program lost the constant's buffer, and the
build was refused at emit (a null buffer). A vision transformer's class
token (a learned vector before the patches, a custom layer) and a frame
joined with constant features in a SavedModel, through the built library
against TensorFlow.
"""
from __future__ import annotations

import keras
import numpy as np
import pytest

from tfaot.cli import main


@keras.saving.register_keras_serializable(package="tfaot_tests")
class ClassToken(keras.layers.Layer):
    """ViT's class token, prepended to the patch sequence."""

    def build(self, shape):
        self.token = self.add_weight(shape=(1, 1, shape[-1]), initializer="random_normal",
                                     name="token")

    def call(self, x):
        token = keras.ops.broadcast_to(self.token, (keras.ops.shape(x)[0], 1, x.shape[-1]))
        return keras.ops.concatenate([token, x], axis=1)


def _class_token_model(path):
    keras.utils.set_random_seed(4)
    image = keras.Input((8, 8, 3))
    patches = keras.layers.Reshape((4, 16))(keras.layers.Conv2D(16, 4, strides=4)(image))
    x = keras.layers.Flatten()(ClassToken()(patches))
    keras.Model(image, keras.layers.Dense(4)(x)).save(path)


def _constant_features_model(path):
    import tensorflow as tf

    extra = tf.constant(np.linspace(-1, 1, 6, dtype=np.float32).reshape(1, 1, 6))

    class Joined(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([1, None, 5], tf.float32, name="x")])
        def __call__(self, x):
            frames = tf.shape(x)[1]
            joined = tf.concat([x, tf.tile(extra, [1, frames, 1])], axis=2)
            return {"y": tf.tanh(joined) * 2.0}

    model = Joined()
    tf.saved_model.save(model, str(path), signatures=model.__call__)


@pytest.mark.parametrize("make, name", [(_class_token_model, "vit.keras"),
                                        (_constant_features_model, "joined")])
def test_a_constant_concatenated_to_a_computed_tensor_builds(tmp_path, capsys, make, name):
    path = tmp_path / name
    make(path)
    out = tmp_path / "lib"
    assert main(["-q", "build", str(path), "-o", str(out)]) == 0
    capsys.readouterr()
    assert main(["verify", str(path), str(out), "--steps", "120"]) == 0
    assert ": ok" in capsys.readouterr().out
