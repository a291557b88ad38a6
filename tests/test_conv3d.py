"""3-D convolutions (Conv3D) become a sum of 2-D convolutions, one per tap
along the first spatial axis (compiler/lower/conv3d.py), which tfaot's
convolution kernel takes: two Conv3D(32, 3, 'same') layers on
8 x 28 x 28 x 16 went from 314 ms (IREE's generic code) to 7.9 ms.

Checked against the op it replaces by IREE's own runtime (strides,
dilation and padding along the split axis and across), and Keras models
against TensorFlow through the built library, a clip at a time and
streamed."""
from __future__ import annotations

import numpy as np
import pytest

from reference import conv_module, same_as_before
from tfaot.cli import main
from tfaot.lower.conv3d import convs_3d_as_2d

LAYOUT = "[b, 0, 1, 2, f]x[0, 1, 2, i, o]->[b, 0, 1, 2, f]"


@pytest.mark.parametrize("stride,dilation,pads", [
    ((1, 1, 1), (1, 1, 1), ((1, 1), (1, 1), (1, 1))),
    ((2, 1, 2), (1, 1, 1), ((0, 1), (1, 0), (0, 0))),
    ((1, 2, 1), (2, 1, 2), ((2, 2), (0, 0), (2, 1))),
], ids=["same", "strided", "dilated"])
def test_a_sum_of_2d_convolutions_equals_the_3d_one(stride, dilation, pads):
    rng = np.random.default_rng(8)
    shape, taps, c_in, c_out = (7, 9, 8), (3, 2, 3), 3, 4
    kernel = rng.normal(size=(*taps, c_in, c_out)).astype(np.float32)
    out = [(n + lo + hi - d * (k - 1) - 1) // s + 1
           for n, (lo, hi), d, k, s in zip(shape, pads, dilation, taps, stride)]
    window = (f"stride = {list(stride)}, pad = [{', '.join(f'[{a}, {b}]' for a, b in pads)}], "
              f"rhs_dilate = {list(dilation)}")
    text = conv_module([2, *shape, c_in], kernel, [2, *out, c_out], LAYOUT, window)
    rewritten, count = convs_3d_as_2d(text)
    assert count == 1 and "[b, 0, 1, 2, f]" not in rewritten
    same_as_before(text, rewritten, rng.normal(size=(2, *shape, c_in)).astype(np.float32))


@pytest.mark.parametrize("whole", [True, False], ids=["clip", "streamed"])
def test_keras_conv3d_through_the_library(tmp_path, capsys, whole):
    """A C3D-style block ('same', then strided and dilated in space) on a
    clip of 6 frames, one clip a step; and causal in time (streamed frame
    by frame) into a GRU."""
    import keras

    keras.utils.set_random_seed(6)
    layers = keras.layers
    x = keras.Input((6 if whole else None, 10, 12, 3))
    if whole:
        h = layers.Conv3D(8, 3, padding="same", activation="relu")(x)
        h = layers.Conv3D(8, (2, 3, 3), strides=(1, 2, 2), dilation_rate=1)(h)
        y = layers.Conv3D(4, (3, 3, 3), dilation_rate=(1, 2, 2), padding="same")(h)
    else:
        h = layers.Conv3D(8, (3, 3, 3), activation="relu")(x)
        h = layers.Reshape((-1, 8 * 10 * 8))(h)
        y = layers.GRU(6, return_sequences=True)(h)
    path = tmp_path / "video.keras"
    keras.Model(x, y).save(path)
    assert main(["-q", "import", str(path), "-o", str(tmp_path / "video.mlir")]
                + (["--whole-window"] if whole else [])) == 0
    assert convs_3d_as_2d((tmp_path / "video.mlir").read_text())[1] == (3 if whole else 1)
    out = tmp_path / "lib"
    assert main(["-q", "build", str(path), "-o", str(out)]
                + (["--whole-window"] if whole else [])) == 0
    assert main(["verify", str(path), str(out), "--steps", "100"]) == 0
    assert ": ok" in capsys.readouterr().out
