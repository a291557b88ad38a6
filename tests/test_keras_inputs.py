"""--inputs NAME:SHAPE sizes a Keras model's open input axes
(frontend/keras_inputs.py): a model written for images of any size
(Input((None, None, 3))) did not build at all, and --inputs was ignored
for Keras models."""
from __future__ import annotations

import pytest

from tfaot.cli import main
from tfaot.errors import TfaotError


def _any_size_segmenter():
    """A fully convolutional segmenter for images of any size: its output
    is as large as its input."""
    import keras
    from keras import layers as L

    keras.utils.set_random_seed(3)
    x = keras.Input((None, None, 3), name="image")
    h = L.Conv2D(8, 3, strides=2, padding="same", activation="relu")(x)
    h = L.BatchNormalization()(h)
    h = L.DepthwiseConv2D(3, padding="same", activation="relu6")(h)
    h = L.UpSampling2D(2, interpolation="bilinear")(h)
    return keras.Model(x, L.Conv2D(2, 1)(h))


@pytest.fixture(scope="module")
def segmenter(tmp_path_factory):
    path = tmp_path_factory.mktemp("seg") / "seg.keras"
    _any_size_segmenter().save(path)
    return path


def test_an_image_model_of_any_size_builds_at_the_given_size(segmenter, tmp_path, capsys):
    """Built for 24 x 32 images; verify takes the size from the build (its
    manifest) and compares the library with Keras over 100 images."""
    out = tmp_path / "lib"
    assert main(["build", str(segmenter), "-o", str(out), "-q",
                 "--inputs", "image:1x24x32x3"]) == 0
    err = capsys.readouterr().err
    assert "ignoring" not in err, err
    assert main(["verify", str(segmenter), str(out), "--steps", "100"]) == 0
    stdout = capsys.readouterr().out
    assert stdout.rstrip().endswith(": ok") and "over 100 steps" in stdout, stdout
    from tfaot import harness

    lib = harness.load(out)
    assert lib.input_shape == (1, 24, 32, 3) and lib.output_shape == (1, 24, 32, 2)


def test_without_sizes_the_error_says_how_to_give_them(segmenter, tmp_path, capsys):
    assert main(["build", str(segmenter), "-o", str(tmp_path / "lib"), "-q"]) == 1
    err = capsys.readouterr().err
    assert "give them with --inputs image:1xHxWx3" in err, err
    assert not (tmp_path / "lib").exists()


@pytest.mark.parametrize("spec, words", [
    ("pixels:1x8x8x3", "names 'pixels', which is not an input of the Keras model (its "
                       "inputs: image)"),
    ("image", "--inputs image: give its shape (NAME:SHAPE, e.g. image:1x32x32x3)"),
    ("image:1x8x8", "--inputs image:1x8x8 has 3 axes; the model's input has 4 (?x?x?x3)"),
    ("image:1x8x8x4", "gives axis 3 size 4; the model fixes it at 3")])
def test_a_spec_that_does_not_fit_the_model_is_refused(segmenter, spec, words):
    from tfaot.frontend.load import load_model
    from tfaot.frontend.load_graph import GraphOptions

    with pytest.raises(TfaotError, match="seg.keras: --inputs") as err:
        load_model(segmenter, GraphOptions(inputs=spec))
    assert words in str(err.value), err.value


def test_the_one_input_takes_the_librarys_name_and_the_other_flags_stay_ignored(
        segmenter, tmp_path, capsys):
    """x_t (the step input's name in the library) names a one-input model's
    input too; --outputs and the like still do not apply to Keras models."""
    from tfaot.frontend.load import load_model
    from tfaot.frontend.load_graph import GraphOptions

    loaded = load_model(segmenter, GraphOptions(inputs="x_t:1x16x16x3"))
    assert tuple(loaded.keras_model.inputs[0].shape) == (1, 16, 16, 3)
    assert main(["build", str(segmenter), "-o", str(tmp_path / "lib"), "-q",
                 "--inputs", "image:1x16x16x3", "--outputs", "y"]) == 0
    err = capsys.readouterr().err
    assert "ignoring --outputs:" in err and "--inputs" not in err.split("ignoring")[1], err


def test_a_subclassed_model_is_refused(tmp_path):
    """Its graph is its Python code: no Input layers to replace."""
    import keras
    import numpy as np

    from tfaot.frontend.load import load_model
    from tfaot.frontend.load_graph import GraphOptions

    @keras.saving.register_keras_serializable(package="tfaot_test")
    class Net(keras.Model):
        def __init__(self, **kw):
            super().__init__(**kw)
            self.conv = keras.layers.Conv2D(2, 3)

        def call(self, x):
            return self.conv(x)

    net = Net()
    net(np.zeros((1, 8, 8, 3), np.float32))
    net.save(tmp_path / "net.keras")
    with pytest.raises(TfaotError, match="a subclassed model's graph is its Python code"):
        load_model(tmp_path / "net.keras", GraphOptions(inputs="x_t:1x8x8x3"))


def test_a_one_input_list_verifies_without_keras_warning(tmp_path, capsys):
    """keras.applications built on input_tensor= list their one input;
    verify called such a model with the tensor itself, and Keras printed a
    UserWarning about the inputs' structure in the middle of verify's
    report (its numbers were right)."""
    import warnings

    import keras
    from keras import layers as L

    keras.utils.set_random_seed(0)
    x = keras.Input((8, 8, 3))
    path = tmp_path / "listed.keras"
    keras.Model([x], L.Dense(2)(L.Flatten()(L.Conv2D(4, 3, activation="relu")(x)))).save(path)
    assert main(["build", str(path), "-o", str(tmp_path / "lib"), "-q"]) == 0
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert main(["verify", str(path), str(tmp_path / "lib"), "--steps", "3"]) == 0
    assert not [w for w in caught if "structure of `inputs`" in str(w.message)], \
        [str(w.message) for w in caught]
    assert capsys.readouterr().out.strip().endswith(": ok")
