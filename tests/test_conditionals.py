"""A tf.cond in the step: Keras' Resizing with pad_to_aspect_ratio (a
condition on static shapes) and a layer of the user's that branches on
its input's values. The step's functional If was lowered to v1 Switch/Merge
when its variables were frozen, which TensorFlow's converter has no
StableHLO lowering for: such models did not build ("a TF1 conditional ...
that tfaot did not stream"). Both branches match Keras through the built
library."""
import textwrap

import numpy as np
from util import module_from_source

from tfaot import harness
from tfaot.cli import main

GATE = textwrap.dedent('''
    import keras
    from keras import ops


    class Gate(keras.layers.Layer):
        """Doubles an image whose mean is positive, else lowers it by one."""

        def call(self, x):
            return ops.cond(ops.mean(x) > 0.0, lambda: x * 2.0, lambda: x - 1.0)
''')


def test_a_cond_on_shapes_and_one_on_values_build_and_match_keras(tmp_path, capsys):
    import keras

    source = tmp_path / "gate.py"
    module = module_from_source(source, GATE, "gate_classes")
    keras.utils.set_random_seed(2)
    x = keras.Input((10, 16, 3))
    h = keras.layers.Resizing(12, 12, pad_to_aspect_ratio=True)(x)
    h = keras.layers.Conv2D(4, 3, activation="relu")(module.Gate()(h))
    model = keras.Model(x, keras.layers.Dense(2)(keras.layers.Flatten()(h)))
    path, out = tmp_path / "cond.keras", tmp_path / "cond"
    model.save(path)
    assert main(["build", str(path), "-o", str(out), "-q", "--custom-objects", str(source)]) == 0
    lib = harness.load(out)
    rng = np.random.default_rng(0)
    # images of positive and of negative mean: both branches
    xs = np.concatenate([rng.normal(size=(50, 10, 16, 3)) + 0.5,
                         rng.normal(size=(50, 10, 16, 3)) - 0.5]).astype(np.float32)
    want = np.asarray(model.predict(xs, batch_size=1, verbose=0))  # (its mean: one image)
    got = lib.step_n(xs[:, None]).reshape(want.shape)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)
    assert np.abs(want[:50] - want[50:]).max() > 0.1  # (the branches differ)
