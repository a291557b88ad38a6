"""Pooling windows as slices and maxima/sums (compiler/lower/pooling.py).

The rewrite is checked on the op forms it must take or leave, and through
the built .so against TensorFlow on max and average pooling with strides,
overlapping windows and `same` padding (a pad first; an average's counts
a constant). The streaming-conv suites' pooling models run through it too.
Builds with tfaot's micro-kernels send the padded windows and the larger
ones to the pooling kernel first (test_pool_kernel.py); ``--matvec=iree``
builds leave them all to this rewrite.
"""
from __future__ import annotations

import re

import pytest

from tfaot.lower import pooling


def _pool_module(body: str, init: str, window, strides, shape=(1, 4, 9, 3), extra="",
                 dilation=(1, 1, 1, 1)) -> str:
    out = [(n - d * (w - 1) - 1) // s + 1 for n, w, s, d in zip(shape, window, strides, dilation)]
    t = lambda s: "tensor<" + "x".join(map(str, s)) + "xf32>"  # noqa: E731
    arr = lambda v: "array<i64: " + ", ".join(map(str, v)) + ">"  # noqa: E731
    return f"""module {{
  func.func @f(%x: {t(shape)}) -> {t(out)} {{
    %init = stablehlo.constant dense<{init}> : tensor<f32>
    %y = "stablehlo.reduce_window"(%x, %init) <{{window_dimensions = {arr(window)},
        window_strides = {arr(strides)}{extra}}}> ({{
    ^bb0(%a: tensor<f32>, %b: tensor<f32>):
      %m = {body} %a, %b : tensor<f32>
      stablehlo.return %m : tensor<f32>
    }}) : ({t(shape)}, tensor<f32>) -> {t(out)}
    return %y : {t(out)}
  }}
}}
"""


CASES = {  # name: (body, init, window, strides, extra, (slices, ops) or None)
    "max_2": ("stablehlo.maximum", "0xFF800000", (1, 1, 2, 1), (1, 1, 2, 1), "", (2, 1)),
    "max_3x3_overlap": ("stablehlo.maximum", "0xFF800000", (1, 3, 3, 1), (1, 1, 2, 1), "",
                        (9, 8)),
    "sum_1x3": ("stablehlo.add", "0.000000e+00", (1, 1, 3, 1), (1, 1, 2, 1), "", (3, 2)),
    # over 16 elements: a pass along each axis, 4 slices then 5
    "max_4x5_by_axis": ("stablehlo.maximum", "0xFF800000", (1, 4, 5, 1), (1, 1, 1, 1), "",
                        (9, 7)),
    "too_long": ("stablehlo.maximum", "0xFF800000", (1, 1, 9, 1), (1, 1, 1, 1), "", None),
    "max_init_zero": ("stablehlo.maximum", "0.000000e+00", (1, 1, 2, 1), (1, 1, 2, 1), "", None),
    "min": ("stablehlo.minimum", "0x7F800000", (1, 1, 2, 1), (1, 1, 2, 1), "", None),
    "dilated": ("stablehlo.maximum", "0xFF800000", (1, 1, 2, 1), (1, 1, 1, 1),
                ", window_dilations = array<i64: 1, 1, 2, 1>", None),
}


@pytest.mark.parametrize("name", CASES)
def test_rewrite_takes_small_plain_windows(name, monkeypatch):
    body, init, window, strides, extra, expected = CASES[name]
    dilation = (1, 1, 2, 1) if name == "dilated" else (1, 1, 1, 1)
    text = _pool_module(body, init, window, strides, extra=extra, dilation=dilation)
    from iree.compiler import ir

    with ir.Context():
        ir.Module.parse(text)  # the case is valid StableHLO
    monkeypatch.setattr(pooling, "MAX_WINDOW", 8 if name == "too_long" else 16)
    new, count = pooling.unroll_small_pools(text)
    if expected is None:
        assert (new, count) == (text, 0)
        return
    slices, ops = expected
    assert count == 1 and "reduce_window" not in new
    assert len(re.findall(r"stablehlo\.slice", new)) == slices
    assert len(re.findall(body.replace(".", r"\.") + r"\b", new)) == ops


def test_a_padded_window_pads_with_its_init_value():
    """'same' max pooling: the input padded with -inf, then the slices."""
    text = _pool_module("stablehlo.maximum", "0xFF800000", (1, 3, 3, 1), (1, 1, 1, 1),
                        shape=(1, 4, 9, 3),
                        extra=", padding = dense<[[0, 0], [1, 1], [1, 1], [0, 0]]> : "
                              "tensor<4x2xi64>")
    text = text.replace("tensor<1x2x7x3xf32>", "tensor<1x4x9x3xf32>")  # 'same': the input's size
    new, count = pooling.unroll_small_pools(text)
    assert count == 1 and "reduce_window" not in new
    assert re.search(r"stablehlo\.pad %\w+, %\w+, low = \[0, 1, 1, 0\], high = \[0, 1, 1, 0\]", new)
    assert len(re.findall(r"stablehlo\.slice", new)) == 9


def _pool_model():
    import keras
    from keras import layers as L

    keras.utils.set_random_seed(3)
    x = keras.Input((20, 12))
    h = L.Reshape((20, 12, 1))(x)
    h = L.Conv2D(4, (3, 3), activation="relu")(h)
    h = L.MaxPooling2D((2, 2))(h)  # in time and frequency
    h = L.AveragePooling2D((1, 3), strides=(1, 2))(h)  # overlapping windows
    h = L.MaxPooling2D((2, 2), padding="same")(h)  # padded: a pad, then slices
    h = L.Flatten()(h)
    return keras.Model(x, L.Dense(5)(h))


def test_pooled_model_through_the_so(tmp_path, capsys):
    """Whole-window and streamed builds of a pooling model match Keras."""
    from tfaot.cli import main

    model = _pool_model()
    path = tmp_path / "pool.keras"
    model.save(path)
    for flags in ([], ["--whole-window"]):
        out = tmp_path / ("whole" if flags else "stream")
        assert main(["build", str(path), "-o", str(out), "--keep-temps", *flags]) == 0
        mlir = (out / "temps" / "compile" / "pool.mlir").read_text()
        assert "reduce_window" not in mlir
        assert main(["verify", str(path), str(out), "--steps", "120"]) == 0
        text = capsys.readouterr().out
        err = float(re.search(r"max abs error (\S+)", text).group(1))
        assert err <= 1e-5, text


def test_an_inception_blocks_same_average_pooling_builds(tmp_path, capsys):
    """AveragePooling2D(3, strides=1, padding='same') on 35 x 35 x 192 (an
    InceptionV3 block): iree-compile failed on its reduce_window ("exceeded
    stack allocation limit"). The sums are slices of the input padded with
    zeros; the counts they are divided by (a window over a constant of
    ones), a constant of the two image axes, broadcast."""
    import keras

    from tfaot.cli import main

    x = keras.Input((35, 35, 192))
    pooled = keras.layers.AveragePooling2D(3, strides=1, padding="same")(x)
    path = tmp_path / "inception_pool.keras"
    keras.Model(x, keras.layers.Concatenate()(
        [pooled, keras.layers.MaxPooling2D(3, strides=1, padding="same")(x)])).save(path)
    for flags in ([], ["--matvec=iree"]):  # the pooling kernel's (test_pool_kernel), the slices
        out = tmp_path / ("iree" if flags else "kernels")
        assert main(["-q", "build", str(path), "-o", str(out), "--keep-temps", *flags]) == 0
        mlir = (out / "temps" / "compile" / "inception_pool.mlir").read_text()
        assert "reduce_window" not in mlir
        assert ("tensor<1x35x35x1xf32>" in mlir) == bool(flags)  # the counts
        assert main(["verify", str(path), str(out), "--steps", "100"]) == 0
        assert ": ok" in capsys.readouterr().out


def test_a_running_mean_stays_the_mean_past_65536_steps(tmp_path):
    """GlobalAveragePooling1D over an open time axis is a running mean of
    every frame so far. It was a running sum divided by the stream's step
    counter, which stops at 65536: past it the output grew (a constant
    input's mean 1.75 read 2.67 after 100k steps). Through the .so against
    Keras on the whole prefix, at and past the counter's end."""
    import keras
    import numpy as np

    from tfaot import harness
    from tfaot.pipeline import BuildOptions, Progress, build_model

    keras.utils.set_random_seed(0)
    x = keras.Input((None, 2))
    model = keras.Model(x, keras.layers.GlobalAveragePooling1D()(keras.layers.Conv1D(3, 1)(x)))
    model.save(tmp_path / "gap.keras")
    build_model(str(tmp_path / "gap.keras"), BuildOptions(out_dir=tmp_path / "lib"),
                Progress(enabled=False))
    lib = harness.load(tmp_path / "lib")
    steps = 70000
    xs = (np.random.default_rng(0).random((steps, 2), np.float32) + 0.5)
    got = lib.step_n(xs.reshape(steps, *lib.input_shape))
    for t in (99, 65535, steps - 1):
        want = np.asarray(model(xs[None, :t + 1]))[0]
        np.testing.assert_allclose(got[t].ravel(), want, rtol=1e-5, atol=1e-5)


def test_long_sums_over_several_axes_go_one_axis_at_a_time():
    """A sum over height and width (global average pooling) becomes a sum
    over the width, then one over the height; a short one, or one over a
    single axis, stays."""
    from tfaot.lower.reduction_order import sum_one_axis_at_a_time

    line = ("    %16 = stablehlo.reduce(%15 init: %cst_1) applies stablehlo.add across "
            "dimensions = [1, 2] : (tensor<1x112x112x32xf32>, tensor<f32>) -> tensor<1x32xf32>")
    text, count = sum_one_axis_at_a_time(line)
    assert count == 1 and text.splitlines() == [
        "    %tfaot_sum1_0 = stablehlo.reduce(%15 init: %cst_1) applies stablehlo.add across "
        "dimensions = [2] : (tensor<1x112x112x32xf32>, tensor<f32>) -> tensor<1x112x32xf32>",
        "    %16 = stablehlo.reduce(%tfaot_sum1_0 init: %cst_1) applies stablehlo.add across "
        "dimensions = [1] : (tensor<1x112x32xf32>, tensor<f32>) -> tensor<1x32xf32>"]
    short = line.replace("112x112", "7x7").replace("1x112x32", "1x7x32")
    one_axis = line.replace("[1, 2]", "[1]").replace("-> tensor<1x32xf32>",
                                                      "-> tensor<1x112x32xf32>")
    for kept in (short, one_axis):
        assert sum_one_axis_at_a_time(kept) == (kept, 0)


def test_a_global_average_pooling_of_a_large_map_is_accurate(tmp_path):
    """GlobalAveragePooling2D over 112x112 (an EfficientNet's first
    squeeze-and-excite): IREE summed the 12,544 terms in one running sum,
    3-4e-6 from the exact mean (TensorFlow 1e-6), 5x TensorFlow's error
    through the network; summed one axis at a time, 4e-7."""
    import keras
    import numpy as np

    from tfaot import harness
    from tfaot.pipeline import BuildOptions, Progress, build_model

    x = keras.Input((112, 112, 32), batch_size=1)
    keras.Model(x, keras.layers.GlobalAveragePooling2D()(x)).save(tmp_path / "gap.keras")
    build_model(str(tmp_path / "gap.keras"), BuildOptions(out_dir=tmp_path / "lib"),
                Progress(enabled=False))
    lib = harness.load(tmp_path / "lib")
    rng = np.random.default_rng(0)
    for _ in range(4):
        image = rng.uniform(0, 4, (1, 112, 112, 32)).astype(np.float32)
        exact = image.astype(np.float64).mean(axis=(1, 2))
        got = np.asarray(lib.step(image)).reshape(exact.shape)
        assert np.abs(got - exact).max() / np.abs(exact).max() < 1.2e-6
