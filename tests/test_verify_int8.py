"""verify's int8 and half-width tolerance from the model's own sensitivity to
the build's weight rounding (compiler/verify/int8_spread.py): a narrow image
model with int8 convolutions, and a segmenter with bf16 weights, pass where
the fixed bound failed an accurate library, and a wrong layer still fails."""
from __future__ import annotations

import re
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

SIZE = 64
#: the pointwise layer the wrong model scales, and by how much
WRONG_LAYER, WRONG_SCALE = "conv_pw_13", 0.7


@pytest.fixture(scope="module")
def narrow(tmp_path_factory):
    """MobileNet alpha 0.25 at 64x64 (random weights, batch norms calibrated
    on random images), built int8 with int8 convolutions, as a CPU with int8
    dot products builds it; and the same model with one layer wrong."""
    import keras
    from bench_images import calibrated

    from tfaot import target_options
    from tfaot.cli import main

    tmp = tmp_path_factory.mktemp("int8_spread")
    model = calibrated(lambda s: keras.applications.MobileNet(
        input_shape=(s, s, 3), alpha=0.25, weights=None, include_top=False, pooling="avg"),
        SIZE)
    model.save(tmp / "narrow.keras")
    layer = model.get_layer(WRONG_LAYER)
    layer.kernel.assign(layer.kernel.numpy() * WRONG_SCALE)
    model.save(tmp / "wrong.keras")
    make_target = target_options.make_target  # (imported by the pipeline when it builds)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(target_options, "make_target", lambda *args, **kwargs: replace(
            make_target(*args, **kwargs), int8_convolutions=True))
        assert main(["build", str(tmp / "narrow.keras"), "-o", str(tmp / "lib"), "--quiet",
                     "--whole-window", "--weights-dtype=int8"]) == 0
    return tmp


def test_a_narrow_int8_model_is_held_to_its_own_rounding(narrow):
    """The library is off by more than the fixed int8 bound (0.05 x sqrt(11 /
    8) x the outputs' size: it failed, as LiteRT's int8 would), and within 3
    times what rounding the weights alone does to TensorFlow's outputs."""
    from tfaot.verify.case import run_case
    from tfaot.verify.compare import default_tolerance, make_case, output_scale
    from tfaot.verify.process import load_to_run

    lib = load_to_run(narrow / "lib")
    assert "qconv" in lib.manifest["micro_kernels"] and lib.manifest["int8_layers"] == 11
    case = make_case(str(narrow / "narrow.keras"), lib, steps=100, seed=0, tol=None)
    (result,) = run_case(lib, case)
    fixed = default_tolerance(lib, None) * output_scale(case.checks[0])
    assert fixed < result.max_abs_error <= result.tolerance, (fixed, result)
    assert result.ok and "rounded as it rounds them" in result.describe()


def test_the_note_and_a_wrong_layer(narrow, capsys):
    """verify says where the tolerance comes from; a layer 30% off still fails."""
    from tfaot.cli import main

    assert main(["verify", str(narrow / "narrow.keras"), str(narrow / "lib")]) == 0
    out = capsys.readouterr().out
    assert re.search(r"note: the tolerance is 3 x [0-9.]+, how far TensorFlow's values move",
                     out), out
    assert main(["verify", str(narrow / "wrong.keras"), str(narrow / "lib")]) == 1
    assert "FAIL" in capsys.readouterr().out


def test_the_rule_comes_from_the_manifest():
    from tfaot.verify.int8_spread import Rule, rule_of

    assert rule_of({"weights_dtype": "f32"}) is None
    assert rule_of({"weights_dtype": "int8", "int8_layers": 0}) is None
    assert rule_of({"weights_dtype": "int8", "int8_layers": 2, "int8_min_weights": 256,
                    "micro_kernels": ["conv", "qconv"]}) == Rule(256, True)
    # a manifest from before int8_min_weights: the scheme's words
    assert rule_of({"weights_dtype": "int8", "int8_layers": 1, "micro_kernels": ["conv"],
                    "weights_scheme": "matvec ... of 1024 weights or more: int8"}) == \
        Rule(1024, False)


def test_half_width_builds_round_every_kernel_weight():
    """A bf16 or f16 build's rule: every weight its kernels take, rounded to
    the nearest half as weight_packing stores it; none without such kernels."""
    from tfaot.verify.int8_spread import Rule, rounded_as, rule_of

    assert rule_of({"weights_dtype": "bf16", "micro_kernels": ["conv", "pool"]}) == \
        Rule(0, True, "bf16")
    assert rule_of({"weights_dtype": "f16", "micro_kernels": ["matvec"]}) == Rule(0, True, "f16")
    assert rule_of({"weights_dtype": "bf16", "micro_kernels": ["pool"]}) is None
    w = np.array([[1 + 2**-9, 1 + 3 * 2**-9], [3.0, -2**-20]], np.float32)
    np.testing.assert_array_equal(rounded_as(Rule(0, True, "bf16"), w, -1),
                                  [[1.0, 1 + 2**-7], [3.0, -2**-20]])
    np.testing.assert_array_equal(rounded_as(Rule(0, True, "f16"), w, -1),
                                  w.astype(np.float16).astype(np.float32) * [[1, 1], [1, 0]])


@pytest.fixture(scope="module")
def segmenter(tmp_path_factory):
    """bench_images' DeepLabV3+-style segmenter at 64 x 64 (batch norms
    calibrated, 5 logits per pixel) built with bf16 weights; the same model
    with its last layer 10% off."""
    from bench_images import calibrated, deeplab_small

    from tfaot.cli import main

    tmp = tmp_path_factory.mktemp("half_spread")
    model = calibrated(deeplab_small, SIZE)
    model.save(tmp / "seg.keras")
    last = model.layers[-1]
    last.kernel.assign(last.kernel.numpy() * 0.9)
    model.save(tmp / "wrong.keras")
    assert main(["build", str(tmp / "seg.keras"), "-o", str(tmp / "lib"), "--quiet",
                 "--whole-window", "--weights-dtype=bf16"]) == 0
    return tmp


def test_a_bf16_segmenter_is_held_to_its_own_rounding(segmenter, capsys):
    """Off by more than the fixed bf16 bound (1e-2 x the logits' size: verify
    failed it), within twice what rounding the weights to bf16 does to
    TensorFlow's outputs, said in a note; the last layer 10% off fails."""
    from tfaot.cli import main
    from tfaot.verify.case import run_case
    from tfaot.verify.compare import default_tolerance, make_case, output_scale
    from tfaot.verify.process import load_to_run

    lib = load_to_run(segmenter / "lib")
    case = make_case(str(segmenter / "seg.keras"), lib, steps=100, seed=0, tol=None)
    (result,) = run_case(lib, case)
    fixed = default_tolerance(lib, None) * output_scale(case.checks[0])
    assert fixed < result.max_abs_error <= result.tolerance, (fixed, result)
    assert re.search(r"note: the tolerance is 2 x [0-9.]+, how far TensorFlow's values move "
                     r"with the weights this bf16 build", result.describe()), result.describe()
    assert main(["verify", str(segmenter / "wrong.keras"), str(segmenter / "lib")]) == 1
    assert "FAIL" in capsys.readouterr().out


def test_rounding_is_per_output_channel():
    from tfaot.verify.int8_spread import rounded

    w = np.random.default_rng(0).standard_normal((5, 3)).astype(np.float32)
    w[:, 2] *= 100.0
    got = rounded(w, -1)
    for j in range(3):  # each column on its own grid of 127 steps of its largest
        step = np.abs(w[:, j]).max() / 127
        np.testing.assert_allclose(got[:, j] / step, np.round(w[:, j] / step), atol=1e-3)
    np.testing.assert_array_equal(rounded(w.T, 0), got.T)
    np.testing.assert_array_equal(rounded(np.zeros((4, 2)), -1), np.zeros((4, 2)))


def test_a_graphs_weights_are_rounded_where_the_build_rounds_them():
    """MatMul weights (of a transposed one along its rows), a Conv2D's filter
    only where the build had int8 convolutions, nothing under the fewest
    weights; the graph still runs; the graph before a cut is rounded too."""
    import tensorflow as tf

    from tfaot.verify.int8_spread import Rule, _rounded_graph, rounded

    rng = np.random.default_rng(1)
    w = rng.standard_normal((64, 32)).astype(np.float32)
    wt = rng.standard_normal((24, 32)).astype(np.float32)
    small = rng.standard_normal((24, 4)).astype(np.float32)
    f = rng.standard_normal((3, 3, 2, 64)).astype(np.float32)
    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, (1, 64), name="x")
        img = tf.compat.v1.placeholder(tf.float32, (1, 8, 8, 2), name="img")
        h = tf.matmul(x, tf.constant(w, name="w"))
        h = tf.matmul(h, tf.constant(wt, name="wt"), transpose_b=True)
        tf.identity(tf.matmul(h, tf.constant(small, name="small")), name="y")
        tf.identity(tf.nn.conv2d(img, tf.constant(f, name="f"), 1, "SAME"), name="z")
    original = graph.as_graph_def()

    def consts(graph_def):
        return {n.name: tf.make_ndarray(n.attr["value"].tensor) for n in graph_def.node
                if n.op == "Const" and n.name in ("w", "wt", "small", "f")}

    without = consts(_rounded_graph(original, Rule(576, False)))
    np.testing.assert_array_equal(without["w"], rounded(w, -1))
    np.testing.assert_array_equal(without["wt"], rounded(wt, 0))  # [N, K]: a row per output
    np.testing.assert_array_equal(without["small"], small)
    np.testing.assert_array_equal(without["f"], f)
    assert not np.array_equal(without["w"], w)
    with_convs = _rounded_graph(original, Rule(576, True))
    np.testing.assert_array_equal(consts(with_convs)["f"], rounded(f, -1))
    assert consts(original)["w"].tobytes() == w.tobytes()  # the original is left alone
    runner = tf.Graph()
    with runner.as_default():
        tf.graph_util.import_graph_def(with_convs, name="")
        with tf.compat.v1.Session(graph=runner) as sess:
            y = sess.run("y:0", {"x:0": np.ones((1, 64), np.float32)})
    assert y.shape == (1, 4) and np.isfinite(y).all()
    # verify's reference runs the graph before a cut (--inputs): both are rounded
    from tfaot.frontend.graph_cut import LoadedGraph
    from tfaot.frontend.load import LoadedModel
    from tfaot.verify.int8_spread import with_rounded_weights

    loaded = LoadedModel(Path("g.pb"), "graphdef", graph=LoadedGraph(
        Path("g.pb"), "graphdef", original, [], ["y:0"], ["y"], {"source_graph_def": original}))
    with with_rounded_weights(loaded, Rule(576, False)) as rounded_graph:
        for graph_def in (rounded_graph.graph.graph_def,
                          rounded_graph.graph.details["source_graph_def"]):
            np.testing.assert_array_equal(consts(graph_def)["w"], rounded(w, -1))


def test_a_keras2_reference_is_loaded_rounded_and_models_are_put_back(tmp_path):
    """A Keras 2 file's reference (tf_keras loads it afresh) is rounded while
    verify compares; a Keras 3 model's own weights are put back after."""
    import tf_keras

    from tfaot.frontend.load import load_model
    from tfaot.verify.int8_spread import Rule, rounded, with_rounded_weights
    from tfaot.verify.keras_reference import keras_reference_model

    old = tf_keras.Sequential([tf_keras.Input((40,)), tf_keras.layers.Dense(32),
                               tf_keras.layers.Dense(4)])
    old.save(tmp_path / "k2.h5")
    kernel = old.layers[0].kernel.numpy()
    loaded = load_model(str(tmp_path / "k2.h5"))
    with with_rounded_weights(loaded, Rule(1024, False)) as rounded_model:
        reference = keras_reference_model(rounded_model)
        np.testing.assert_array_equal(reference.layers[0].kernel.numpy(), rounded(kernel, -1))
        # 32 x 4 weights: under the fewest, left f32
        np.testing.assert_array_equal(reference.layers[1].kernel.numpy(),
                                      old.layers[1].kernel.numpy())
        dense = loaded.keras_model.layers[0]
        np.testing.assert_array_equal(dense.kernel.numpy(), rounded(kernel, -1))
    np.testing.assert_array_equal(dense.kernel.numpy(), kernel)
    np.testing.assert_array_equal(keras_reference_model(loaded).layers[0].kernel.numpy(),
                                  kernel)


def test_weights_two_models_share_are_put_back(tmp_path):
    """A subclassed model and its trace share their layers: rounded once and
    put back once (saved twice, the second saved value was the rounded one,
    and the model stayed rounded after verify)."""
    import keras

    from tfaot.frontend.load import LoadedModel
    from tfaot.verify.int8_spread import Rule, rounded, with_rounded_weights

    dense = keras.layers.Dense(40)
    x = keras.Input((40,))
    trace, original = keras.Model(x, dense(x)), keras.Model(x, dense(x))
    kernel = dense.kernel.numpy()
    loaded = LoadedModel(tmp_path / "m.keras", "keras", keras_model=trace,
                         keras_original=original)
    with with_rounded_weights(loaded, Rule(1024, False)):
        np.testing.assert_array_equal(dense.kernel.numpy(), rounded(kernel, -1))
    np.testing.assert_array_equal(dense.kernel.numpy(), kernel)
