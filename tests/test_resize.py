"""Image resizes TensorFlow's converter leaves unlowered (ResizeArea,
ResizeBicubic, ScaleAndTranslate: tf.image.resize's area, bicubic, lanczos,
gaussian and mitchellcubic methods and every antialiased one) are built as
two matrix products (compiler/lower/resize.py); a model with one was
refused ("has no StableHLO lowering"). Each against TensorFlow through the
built library."""
from __future__ import annotations

import numpy as np
import pytest

from tfaot.cli import main

#: output name -> (method, antialias, size): shrinking and growing, square
#: and not, every method that lowers to one of the three ops
RESIZES = {
    "area": ("area", False, (5, 7)),
    "bicubic_up": ("bicubic", False, (19, 16)),
    "bicubic_down": ("bicubic", False, (6, 4)),
    "lanczos3": ("lanczos3", False, (7, 9)),
    "lanczos5_up": ("lanczos5", False, (20, 25)),
    "gaussian": ("gaussian", True, (8, 5)),
    "mitchell": ("mitchellcubic", False, (11, 6)),
    "bilinear_antialias": ("bilinear", True, (4, 6)),
}


def _saved(module, path):
    """``module`` (a tf.Module whose __call__ is its signature) saved at ``path``."""
    import tensorflow as tf

    tf.saved_model.save(module, str(path), signatures=module.__call__)
    return path


def _build_and_verify(path, tmp_path, capsys) -> str:
    """Build ``path`` and verify it over 100 steps; verify's report."""
    out = tmp_path / "lib"
    assert main(["-q", "build", str(path), "-o", str(out)]) == 0
    assert main(["verify", str(path), str(out), "--steps", "100"]) == 0
    return capsys.readouterr().out


def test_every_linear_resize_builds_and_matches_tensorflow(tmp_path, capsys):
    import tensorflow as tf

    class Model(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([1, 12, 10, 3], tf.float32, name="x")])
        def __call__(self, x):
            return {name: tf.image.resize(tf.nn.relu(x) + 0.5, size, method=method,
                                          antialias=antialias)
                    for name, (method, antialias, size) in RESIZES.items()}

    report = _build_and_verify(_saved(Model(), tmp_path / "resizes"), tmp_path, capsys)
    assert report.count(": ok") == len(RESIZES), report


def test_keras_resizing_of_uint8_images(tmp_path, capsys):
    """Keras' Resizing layer (bicubic, antialiased) on a uint8 camera frame:
    the products take the image as floats."""
    import keras

    x = keras.Input((24, 32, 3), batch_size=1, dtype="uint8")
    h = keras.layers.Resizing(10, 12, interpolation="bicubic", antialias=True)(x)
    h = keras.layers.Conv2D(4, 3, activation="relu")(keras.layers.Rescaling(1 / 255)(h))
    path = tmp_path / "camera.keras"
    keras.Model(x, keras.layers.GlobalAveragePooling2D()(h)).save(path)
    assert ": ok" in _build_and_verify(path, tmp_path, capsys)


def test_axis_matrices_are_the_ops_own():
    """A_h . x . A_w^T equals TensorFlow's resize of x."""
    import tensorflow as tf
    from iree.compiler import ir

    from tfaot.lower.resize import _axis_matrices

    rng = np.random.default_rng(2)
    x = rng.normal(size=(1, 9, 6, 2)).astype(np.float32)
    text = ('func.func @f(%x: tensor<1x9x6x2xf32>, %s: tensor<2xi32>) -> tensor<1x4x8x2xf32> {\n'
            '  %y = "tf.ResizeBicubic"(%x, %s) {align_corners = false, half_pixel_centers = true}'
            ' : (tensor<1x9x6x2xf32>, tensor<2xi32>) -> tensor<1x4x8x2xf32>\n'
            '  return %y : tensor<1x4x8x2xf32>\n}')
    with ir.Context() as ctx:
        ctx.allow_unregistered_dialects = True
        module = ir.Module.parse(text)
        resize = next(op for op in module.body.operations[0].regions[0].blocks[0].operations
                      if op.operation.name == "tf.ResizeBicubic")
        rows, cols = _axis_matrices(resize.operation, (1, 9, 6, 2), (1, 4, 8, 2))
    want = tf.raw_ops.ResizeBicubic(images=x, size=[4, 8], half_pixel_centers=True).numpy()
    got = np.einsum("kh,nhwc,lw->nklc", rows, x, cols)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("method", ["area", "lanczos3"])
def test_a_streamed_model_with_a_resize_of_its_frames(tmp_path, capsys, method):
    """A resize of each frame's spectrum-like image (not over time) streams."""
    import tensorflow as tf

    class Model(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([1, None, 16], tf.float32, name="x")])
        def __call__(self, x):
            frames = tf.reshape(x, [-1, 4, 4, 1])  # one 4x4 image per frame
            small = tf.image.resize(frames, (2, 3), method=method)
            return {"y": tf.reshape(small, [1, -1, 6])}

    assert ": ok" in _build_and_verify(_saved(Model(), tmp_path / "frames"), tmp_path, capsys)


def test_unsigned_bytes_converted_into_a_product_stay_unsigned():
    """IREE fuses a ui8 -> f32 conversion into the dot_general it feeds and
    reads the bytes as signed (200 became -56); through a signed i32 first
    (compiler/lower/converts.py) they stay 200."""
    from iree.compiler import ir

    from reference import compile_with_iree
    from tfaot.lower.converts import unsigned_via_signed

    text = """func.func @f(%x: tensor<1x24x3xui8>) -> tensor<10x1x3xf32> {
  %f = stablehlo.convert %x : (tensor<1x24x3xui8>) -> tensor<1x24x3xf32>
  %c = stablehlo.constant dense<0.5> : tensor<10x24xf32>
  %y = stablehlo.dot_general %c, %f, contracting_dims = [1] x [1] : (tensor<10x24xf32>, tensor<1x24x3xf32>) -> tensor<10x1x3xf32>
  return %y : tensor<10x1x3xf32>
}"""
    with ir.Context():
        module = ir.Module.parse(text)
        assert unsigned_via_signed(module.body.operations[0]) == 1
        text = str(module)
    x = np.arange(72, dtype=np.uint8).reshape(1, 24, 3) * 3 + 40  # 40 .. 253
    got = compile_with_iree(text, cpu="generic").f(x).to_host()
    np.testing.assert_allclose(got, np.broadcast_to(0.5 * x.astype(np.float32).sum(1), (10, 1, 3)))


#: (in size, out size) per axis for the bilinear cases: up and down,
#: by whole and by fractional factors, to and from one pixel
BILINEAR_SIZES = [(48, 96), (13, 29), (29, 13), (7, 3), (1, 5), (5, 1), (6, 6)]


@pytest.mark.parametrize("align_corners,half_pixel_centers",
                         [(False, True), (True, False), (False, False)])
def test_bilinear_taps_are_tensorflows(align_corners, half_pixel_centers):
    """The two rows and the lerp per output index (bilinear_resize.axis_taps),
    combined as TensorFlow's kernel combines them, give its ResizeBilinear."""
    import tensorflow as tf

    from tfaot.lower.bilinear_resize import axis_taps

    rng = np.random.default_rng(5)
    for (h, h2), (w, w2) in zip(BILINEAR_SIZES, BILINEAR_SIZES[::-1]):
        x = rng.normal(size=(2, h, w, 3)).astype(np.float32)
        y_lo, y_hi, y_lerp = axis_taps(h, h2, align_corners, half_pixel_centers)
        x_lo, x_hi, x_lerp = axis_taps(w, w2, align_corners, half_pixel_centers)
        across = x[:, :, x_lo] + (x[:, :, x_hi] - x[:, :, x_lo]) * x_lerp[:, None]
        got = across[:, y_lo] + (across[:, y_hi] - across[:, y_lo]) * y_lerp[:, None, None]
        want = tf.raw_ops.ResizeBilinear(images=x, size=[h2, w2], align_corners=align_corners,
                                         half_pixel_centers=half_pixel_centers).numpy()
        np.testing.assert_allclose(got, want, rtol=0, atol=2e-6, err_msg=f"{h}x{w} -> {h2}x{w2}")


def test_bilinear_resizes_build_as_gathers(tmp_path, capsys):
    """Bilinear resizes of every flag combination, of float and of uint8
    images, against TensorFlow through the library. The 2x upsampling keeps
    the context within 4 times its output: TensorFlow's own lowering (a
    3 x 3 patch gathered per output pixel) took 12 times (7.2 MB)."""
    import json

    import tensorflow as tf

    class Model(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([1, 48, 48, 16], tf.float32, name="x")])
        def __call__(self, x):
            small = x[:, :13, :7, :3]
            pixels = tf.cast(tf.clip_by_value(small * 60 + 128, 0, 255), tf.uint8)
            return {
                "up": tf.image.resize(x, (96, 96)),
                "corners": tf.compat.v1.image.resize_bilinear(small, (29, 3), align_corners=True),
                "legacy": tf.compat.v1.image.resize_bilinear(small, (5, 16)),
                "pixels": tf.image.resize(pixels, (6, 11)),
            }

    report = _build_and_verify(_saved(Model(), tmp_path / "bilinear"), tmp_path, capsys)
    assert report.count(": ok") == 4, report
    manifest = json.loads((tmp_path / "lib" / "bilinear.json").read_text())
    assert manifest["ctx_size"] < 4 * 96 * 96 * 16 * 4, manifest["ctx_size"]
