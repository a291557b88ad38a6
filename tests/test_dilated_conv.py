"""Dilated convolutions (issue 19 case 3).

TensorFlow writes a convolution with ``dilation_rate`` > 1 as
SpaceToBatchND -> conv on a batch of phases -> BatchToSpaceND; the import
folds that into one dilated convolution (dilated_conv.py) so that it
reaches tfaot's convolution kernels instead of IREE's generic code. Checked
here for Keras models (streamed over an open time axis, and one inference
per fixed window) and for frozen graphs (the graph streamifier, over a
fixed window and over an open time axis, where a conv dilated in time and
frequency is a space-to-batch pair of two blocks): no
convolution is left to IREE, and the built library matches TensorFlow over
many steps (``tfaot verify`` runs the .so).
"""
import re

import numpy as np
import pytest

from tfaot.lower import mlir_import
from tfaot.cli import main
from tfaot.lower.microkernel import rewrite_matvecs
from tfaot.pipeline import BuildOptions, Progress, build_model, load_and_streamify

STEPS = 110
WINDOW = 21
CONVS = 3  # convolutions in _model, all dilated


def _model(window: int | None):
    """A 1-D conv (dilation 2: TensorFlow's ExpandDims form), a Conv2D
    dilated in time and a DepthwiseConv2D dilated in both axes; an open
    time axis ends in a per-frame Dense, a fixed window in Flatten + Dense."""
    import keras
    from keras import layers as L

    keras.utils.set_random_seed(5)
    x = keras.Input((window, 12), batch_size=1)
    h = L.Conv1D(8, 3, dilation_rate=2, activation="relu")(x)
    h = L.Reshape((-1, 4, 2))(h)
    h = L.Conv2D(6, (3, 2), dilation_rate=(2, 1), activation="relu")(h)
    h = L.ZeroPadding2D(((0, 0), (1, 1)))(h)
    h = L.DepthwiseConv2D((2, 2), dilation_rate=(2, 2), activation="relu")(h)
    if window is None:
        y = L.Dense(5)(L.Reshape((-1, 3 * 6))(h))
    else:
        y = L.Dense(5)(L.Flatten()(h))
    model = keras.Model(x, y)
    rng = np.random.default_rng(3)
    for layer in model.layers:  # non-zero biases
        layer.set_weights([w + 0.1 * rng.standard_normal(w.shape).astype(w.dtype)
                           if w.ndim == 1 else w for w in layer.get_weights()])
    return model


def _freeze(model, path):
    import tensorflow as tf
    from tensorflow.python.framework.convert_to_constants import (
        convert_variables_to_constants_v2)

    spec = tf.TensorSpec((1, *model.inputs[0].shape[1:]), tf.float32, name="x")
    frozen = convert_variables_to_constants_v2(
        tf.function(lambda x: model(x, training=False)).get_concrete_function(spec))
    path.write_bytes(frozen.graph.as_graph_def().SerializeToString())
    return path


#: case -> (model file, fixed_window)
CASES = {"keras_stream": ("open.keras", "auto"), "keras_whole": ("window.keras", "whole"),
         "graph_stream": ("window.pb", "stream"), "graph_open": ("open.pb", "auto")}


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("dilated")
    open_model = _model(None)
    open_model.save(tmp / "open.keras")
    # an open time axis: TensorFlow writes the conv dilated in both axes as
    # SpaceToBatchND with blocks (2, 2), which the graph streamifier folds
    _freeze(open_model, tmp / "open.pb")
    window = _model(WINDOW)
    window.save(tmp / "window.keras")
    _freeze(window, tmp / "window.pb")
    return tmp


def _kernel_text(path, fixed_window) -> tuple[str, int]:
    program = load_and_streamify(str(path), Progress(enabled=False), fixed_window=fixed_window)
    return rewrite_matvecs(mlir_import.import_program(program), "m")


@pytest.mark.parametrize("case", CASES)
def test_every_dilated_conv_reaches_the_kernel(files, case):
    name, fixed_window = CASES[case]
    text, replaced = _kernel_text(files / name, fixed_window)
    assert "stablehlo.convolution" not in text, case
    assert "scf.for" not in text, case  # one dilated image, not a batch of phases
    assert replaced >= CONVS
    assert len(set(re.findall(r"call @m_(conv|dwconv)_f32", text))) == 2


def test_unfolded_chain_is_a_batch_of_phases(files, monkeypatch):
    """Without the fold, the phases' convolution is a batch of images (the
    kernel called once per phase, SpaceToBatchND's copies around it): the
    check above would fail (it tests the fold, not the rewrite)."""
    monkeypatch.setattr(mlir_import, "fold_dilated_convs", lambda text: (text, 0))
    text, _ = _kernel_text(files / "open.keras", "auto")
    assert "scf.for %b = %c0 to %batch" in text


def test_strided_chain_is_left_as_it_is():
    """A chain the fold does not equal (a stride inside the pair) is kept."""
    from tfaot.lower.dilated_conv import fold_dilated_convs

    text = _tf_chain(strides="[1, 2, 2, 1]")
    assert fold_dilated_convs(text) == (text, 0)
    folded, count = fold_dilated_convs(_tf_chain(strides="[1, 1, 1, 1]"))
    assert count == 1 and "SpaceToBatchND" not in folded
    assert "dilations = [1, 2, 2, 1]" in folded


def _tf_chain(strides: str) -> str:
    """TF-dialect text of SpaceToBatchND -> Conv2D -> BatchToSpaceND, block 2,
    on a 1x8x8x1 input with a 3x3 filter: with unit strides, a 3x3 filter
    dilated by 2 (4x4 out)."""
    phase = 2 if strides == "[1, 1, 1, 1]" else 1  # each phase's conv output size
    y = f"tensor<1x{2 * phase}x{2 * phase}x1xf32>"
    c = f"tensor<4x{phase}x{phase}x1xf32>"
    return f"""
func.func @f(%x: tensor<1x8x8x1xf32>) -> {y} {{
  %block = "tf.Const"() <{{value = dense<2> : tensor<2xi32>}}> : () -> tensor<2xi32>
  %pads = "tf.Const"() <{{value = dense<0> : tensor<2x2xi32>}}> : () -> tensor<2x2xi32>
  %w = "tf.Const"() <{{value = dense<1.0> : tensor<3x3x1x1xf32>}}> : () -> tensor<3x3x1x1xf32>
  %s = "tf.SpaceToBatchND"(%x, %block, %pads) : (tensor<1x8x8x1xf32>, tensor<2xi32>, tensor<2x2xi32>) -> tensor<4x4x4x1xf32>
  %c = "tf.Conv2D"(%s, %w) <{{data_format = "NHWC", dilations = [1, 1, 1, 1], padding = "VALID", strides = {strides}}}> : (tensor<4x4x4x1xf32>, tensor<3x3x1x1xf32>) -> {c}
  %y = "tf.BatchToSpaceND"(%c, %block, %pads) : ({c}, tensor<2xi32>, tensor<2x2xi32>) -> {y}
  return %y : {y}
}}
"""


@pytest.mark.parametrize("case", CASES)
def test_built_library_matches_tensorflow(files, case, capsys):
    name, fixed_window = CASES[case]
    out = files / f"out_{case}"
    build_model(str(files / name), BuildOptions(out_dir=out, fixed_window=fixed_window),
                Progress(enabled=False))
    assert main(["verify", str(files / name), str(out), "--steps", str(STEPS)]) == 0
    text = capsys.readouterr().out
    assert float(re.search(r"max abs error (\S+)", text).group(1)) <= 1e-5, text


def _causal_fixed_window_graph(path, frames: int = 24):
    """A WaveNet-style graph of a fixed length: each dilated convolution
    after tf.pad of its receptive field at the start (causal), gated, with
    residuals; frozen from a TF1 graph."""
    import tensorflow as tf

    rng = np.random.default_rng(9)
    g = tf.Graph()
    with g.as_default():
        x = tf.compat.v1.placeholder(tf.float32, (1, frames, 6), name="x")
        h = tf.nn.conv1d(x, rng.normal(0, 0.4, (1, 6, 8)).astype(np.float32), 1, "VALID")
        for d in (1, 2, 4):
            w = rng.normal(0, 0.3, (2, 8, 16)).astype(np.float32)
            z = tf.nn.conv1d(tf.pad(h, [[0, 0], [d, 0], [0, 0]]), w, 1, "VALID", dilations=d)
            h = h + tf.tanh(z[..., :8]) * tf.sigmoid(z[..., 8:])
        tf.identity(h, name="y")
    path.write_bytes(tf.compat.v1.graph_util.extract_sub_graph(
        g.as_graph_def(), ["y"]).SerializeToString())
    return path


def test_a_causal_fixed_window_graph_streams_with_time_axis(tmp_path, capsys):
    """By default one whole window a step (its start's padding is no
    sliding window), and the note says to give --time-axis; given, it was
    still one whole window a step. Now it streams a frame a step from
    reset, checked by verify over sequences of its length."""
    import json

    model = _causal_fixed_window_graph(tmp_path / "wavenet24.pb")
    for flags, mode in (([], "stateless"), (["--time-axis", "1"], "prefix")):
        out = tmp_path / f"lib_{mode}"
        assert main(["build", str(model), "-o", str(out), "-q", *flags]) == 0
        manifest = json.loads((out / "wavenet24.json").read_text())
        assert manifest["stream"]["mode"] == mode
        assert manifest["inputs"][0]["shape"] == ([1, 24, 6] if mode == "stateless" else [1, 6])
        assert main(["verify", str(model), str(out), "--steps", "120"]) == 0
        text = capsys.readouterr().out
        assert float(re.search(r"max abs error (\S+)", text).group(1)) <= 1e-5, text
