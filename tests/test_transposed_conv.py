"""Transposed convolutions (a convolution of an input dilated by the stride,
as TensorFlow lowers Conv2DTranspose) become one ordinary convolution and
an interleave (compiler/lower/transposed_conv.py): 36 to 47 times faster
on the Keras layers below, with the same products.

The rewrite is checked against the op it replaces by IREE's own runtime on
many geometries (strides, kernels larger and smaller than the stride,
padding that crops, the 1-D and 3-D forms, both kernel layouts), and
Keras models against TensorFlow through the built library."""
from __future__ import annotations

import numpy as np
import pytest

from reference import conv_module, same_as_before
from tfaot.cli import main
from tfaot.lower.transposed_conv import dilated_inputs_as_phases


def _module(x_shape, k_shape, y_shape, layout, dilation, padding, kernel) -> str:
    pads = ", ".join(f"[{lo}, {hi}]" for lo, hi in padding)
    ones = ", ".join("1" for _ in dilation)
    window = (f"stride = [{ones}], pad = [{pads}], "
              f"lhs_dilate = [{', '.join(map(str, dilation))}], rhs_dilate = [{ones}]")
    return conv_module(x_shape, kernel.reshape(k_shape), y_shape, layout, window)


def _out_size(size, k, d, lo, hi):
    return (size - 1) * d + 1 + lo + hi - k + 1


#: (spatial sizes, kernel sizes, dilations, (lo, hi) paddings); as TensorFlow
#: writes them for VALID (lo = hi = k - 1) and SAME, and others
GEOMETRIES = [
    ((5, 4), (2, 2), (2, 2), ((1, 1), (1, 1))),      # Conv2DTranspose(k=2, s=2)
    ((5, 4), (3, 3), (2, 2), ((2, 1), (2, 1))),      # k=3, s=2, same
    ((5, 4), (3, 3), (2, 2), ((2, 2), (2, 2))),      # k=3, s=2, valid
    ((4, 6), (4, 3), (2, 1), ((2, 1), (1, 1))),      # k=4 s=2 same, stride 1 across
    ((3, 3), (5, 5), (3, 3), ((4, 4), (2, 3))),      # k > s, uneven padding
    ((4, 5), (1, 2), (2, 3), ((0, 1), (1, 2))),      # kernels smaller than the stride
    ((6, 5), (3, 3), (2, 2), ((-1, 0), (0, -2))),    # padding that crops
]


def _weights_before_layout(k, c_in, c_out, seed):
    return np.random.default_rng(seed).normal(size=(*k, c_in, c_out)).astype(np.float32)


@pytest.mark.parametrize("geometry", GEOMETRIES, ids=lambda g: "x".join(map(str, g[1])) + "s" +
                         "x".join(map(str, g[2])) + "p" + "".join(f"{a}{b}" for a, b in g[3]))
@pytest.mark.parametrize("kernel_layout", ["i, o", "o, i"])
def test_phases_equal_the_input_dilated_convolution(geometry, kernel_layout):
    sizes, k, d, pads = geometry
    c_in, c_out = 3, 2
    kernel = _weights_before_layout(k, c_in, c_out, 1)
    if kernel_layout == "o, i":
        kernel = np.swapaxes(kernel, -1, -2)
    k_shape = list(kernel.shape)
    y_sizes = [_out_size(s, kk, dd, lo, hi) for s, kk, dd, (lo, hi) in zip(sizes, k, d, pads)]
    text = _module([1, *sizes, c_in], k_shape, [1, *y_sizes, c_out],
                   f"[b, 0, 1, f]x[0, 1, {kernel_layout}]->[b, 0, 1, f]", d, pads, kernel)
    rewritten, count = dilated_inputs_as_phases(text)
    assert count == 1 and "lhs_dilate" not in rewritten
    same_as_before(text, rewritten, np.random.default_rng(2).normal(
        size=(1, *sizes, c_in)).astype(np.float32))


def test_the_one_dimensional_form():
    kernel = _weights_before_layout((4,), 3, 5, 3)
    text = _module([2, 7, 3], [4, 3, 5], [2, _out_size(7, 4, 3, 3, 2), 5],
                   "[b, 0, f]x[0, i, o]->[b, 0, f]", [3], [(3, 2)], kernel)
    rewritten, count = dilated_inputs_as_phases(text)
    assert count == 1
    same_as_before(text, rewritten,
                   np.random.default_rng(4).normal(size=(2, 7, 3)).astype(np.float32))


#: 3-D geometries: Conv3DTranspose(k=2, s=2); k=3, s=(1, 2, 2), same; and
#: kernels larger and smaller than uneven strides
GEOMETRIES_3D = [
    ((3, 4, 3), (2, 2, 2), (2, 2, 2), ((1, 1), (1, 1), (1, 1))),
    ((3, 4, 3), (3, 3, 3), (1, 2, 2), ((1, 1), (2, 1), (2, 1))),
    ((2, 3, 4), (3, 1, 2), (2, 3, 1), ((2, 1), (0, 2), (1, 0))),
]


@pytest.mark.parametrize("geometry", GEOMETRIES_3D, ids=["k2s2", "same", "uneven"])
@pytest.mark.parametrize("kernel_layout", ["i, o", "o, i"])
def test_the_three_dimensional_form(geometry, kernel_layout):
    sizes, k, d, pads = geometry
    kernel = _weights_before_layout(k, 3, 2, 5)
    if kernel_layout == "o, i":
        kernel = np.swapaxes(kernel, -1, -2)
    y_sizes = [_out_size(s, kk, dd, lo, hi) for s, kk, dd, (lo, hi) in zip(sizes, k, d, pads)]
    text = _module([2, *sizes, 3], list(kernel.shape), [2, *y_sizes, 2],
                   f"[b, 0, 1, 2, f]x[0, 1, 2, {kernel_layout}]->[b, 0, 1, 2, f]", d, pads,
                   kernel)
    rewritten, count = dilated_inputs_as_phases(text)
    assert count == 1 and "lhs_dilate" not in rewritten
    same_as_before(text, rewritten, np.random.default_rng(6).normal(
        size=(2, *sizes, 3)).astype(np.float32))


def test_keras_conv_transposes_through_the_library(tmp_path, capsys):
    """A decoder of Conv2DTranspose layers as users write them (U-Net's
    2 x 2 up-convolution, 'same' with kernel 3 and 4, a stride of 2 across
    frequency only, output_padding), each rewritten, against TensorFlow."""
    import keras

    keras.utils.set_random_seed(3)
    layers = keras.layers
    x = keras.Input((6, 5, 8))
    h = layers.Conv2DTranspose(8, 2, strides=2, activation="relu")(x)
    h = layers.Conv2DTranspose(6, 3, strides=2, padding="same")(h)
    h = layers.Conv2DTranspose(6, 4, strides=(1, 2), padding="same", activation="relu")(h)
    h = layers.Conv2DTranspose(4, 3, strides=2, output_padding=1)(h)
    path = tmp_path / "decoder.keras"
    keras.Model(x, h).save(path)
    out = tmp_path / "lib"
    assert main(["-q", "import", str(path), "-o", str(tmp_path / "decoder.mlir")]) == 0
    _, count = dilated_inputs_as_phases((tmp_path / "decoder.mlir").read_text())
    assert count == 4
    assert main(["-q", "build", str(path), "-o", str(out)]) == 0
    assert main(["verify", str(path), str(out), "--steps", "100"]) == 0
    assert ": ok" in capsys.readouterr().out


def test_keras_conv3d_transposes_through_the_library(tmp_path, capsys):
    """A volumetric decoder (a 3-D U-Net's 2 x 2 x 2 up-convolution, then
    'same' with kernel 3 and a stride across space only): each becomes one
    3-D phase convolution, then 2-D convolutions for tfaot's kernel (no
    3-D or input-dilated convolution is left), against TensorFlow."""
    import keras

    from tfaot.lower.conv3d import convs_3d_as_2d

    keras.utils.set_random_seed(4)
    layers = keras.layers
    x = keras.Input((3, 4, 5, 6))
    h = layers.Conv3DTranspose(8, 2, strides=2, activation="relu")(x)
    h = layers.Conv3DTranspose(4, 3, strides=(1, 2, 2), padding="same")(h)
    path = tmp_path / "volume.keras"
    keras.Model(x, h).save(path)
    assert main(["-q", "import", str(path), "-o", str(tmp_path / "volume.mlir")]) == 0
    phases, count = dilated_inputs_as_phases((tmp_path / "volume.mlir").read_text())
    assert count == 2
    planes, count = convs_3d_as_2d(phases)
    assert count == 2 and "[b, 0, 1, 2, f]" not in planes and "lhs_dilate" not in planes
    out = tmp_path / "lib"
    assert main(["-q", "build", str(path), "-o", str(out)]) == 0
    assert main(["verify", str(path), str(out), "--steps", "100"]) == 0
    assert ": ok" in capsys.readouterr().out
