"""`tfaot verify` never passes NaN or Inf: a non-finite value on one side only
is a failure with its step; NaN on both sides is reported; which steps are
skipped comes from the stream (a window not yet full), not from NaN."""
import numpy as np
import pytest

import graph_models as gm
from tfaot.cli import main
from tfaot.verify import ErrorTally


def _window_graph(path, weight: float):
    """x (1, 4, 3) -> flattened window -> Dense(2): a sliding window of 4 frames."""
    import tensorflow as tf

    g = tf.Graph()
    with g.as_default():
        x = tf.compat.v1.placeholder(tf.float32, (1, 4, 3), name="x")
        w = np.full((12, 2), weight, np.float32)
        w[0, 0] = 0.5
        tf.tanh(tf.matmul(tf.reshape(x, (1, 12)), tf.constant(w)), name="y")
    gm.write_graph_def(g.as_graph_def(), path, text=False)
    return path


def _fixed_length_rnn(path, nan_head: bool):
    """A SimpleRNN over exactly 5 frames that returns one value per sequence."""
    model = gm.keras_model("simplernn", (4,), 3, timesteps=5, return_sequences=False, dense=2)
    if nan_head:
        weights = model.get_weights()
        weights[-1][:] = np.nan
        model.set_weights(weights)
    gm.write_graph_def(gm.freeze_keras(model, 5, 3, False), path, text=False)
    return path


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("nan")
    paths = {"window_ok": _window_graph(tmp / "window_ok.pb", 0.25),
             "window_nan": _window_graph(tmp / "window_nan.pb", np.nan),
             "rnn_ok": _fixed_length_rnn(tmp / "rnn_ok.pb", False),
             "rnn_nan": _fixed_length_rnn(tmp / "rnn_nan.pb", True)}
    return tmp, paths


@pytest.fixture(scope="module")
def libs(models):
    tmp, paths = models
    built = {}
    for key in ("window_ok", "window_nan", "rnn_nan"):
        out = tmp / f"lib_{key}"
        assert main(["build", str(paths[key]), "-o", str(out), "-q"]) == 0
        built[key] = out
    return built


def _verify(model, lib, capsys) -> tuple[int, str]:
    code = main(["verify", str(model), str(lib), "--steps", "12"])
    captured = capsys.readouterr()
    assert "internal error" not in captured.err, captured.err
    return code, captured.out


def test_fixed_length_library_returning_nan_fails(models, libs, capsys):
    code, out = _verify(models[1]["rnn_ok"], libs["rnn_nan"], capsys)
    assert code == 1, out
    assert "FAIL" in out and "library gives nan" in out and "step 4 of sequence 0" in out


def test_window_reference_nan_everywhere_is_compared_not_skipped(models, libs, capsys):
    code, out = _verify(models[1]["window_nan"], libs["window_ok"], capsys)
    assert code == 1, out
    # the window of 4 frames is full from step 3: the first compared step
    assert "TensorFlow gives nan" in out and "at step 3" in out


def test_nan_on_both_sides_is_reported(models, libs, capsys):
    code, out = _verify(models[1]["window_nan"], libs["window_nan"], capsys)
    assert code == 0, out
    assert "NaN/Inf in both" in out and "12 of them" in out


def test_finite_library_still_passes(models, libs, capsys):
    code, out = _verify(models[1]["window_ok"], libs["window_ok"], capsys)
    assert code == 0 and "over 12 steps" in out, out


def test_tally_tells_non_finite_values_apart():
    tally = ErrorTally()
    tally.add("step 0", [1.0, 2.0], [1.0, 2.5])
    tally.add("step 1", [np.inf, np.nan], [np.inf, np.nan])
    assert tally.mismatch is None and tally.max_abs_error == 0.5
    assert tally.nonfinite_steps == 1 and tally.first_nonfinite == "step 1"
    tally.add("step 2", [np.inf], [-np.inf])
    tally.add("step 3", [np.nan], [0.0])
    assert tally.mismatch.startswith("at step 2 ")
    result = tally.result("y", 1.0)
    assert not result.ok and "FAIL" in result.describe()


def test_tally_notes_an_output_that_never_changes():
    """TensorFlow's output the same at every step (an untrained model, batch
    norm zeroing everything): the check passes but says little, and says so."""
    constant = ErrorTally()
    for t in range(5):
        constant.add(f"step {t}", [0.2, 0.2], [0.2, 0.2])
    result = constant.result("y", 1e-5)
    assert result.ok and result.constant
    first, note = result.describe().splitlines()
    assert first.endswith(": ok") and "the same at every one of these 5 steps" in note
    varying = ErrorTally()
    for t in range(5):
        varying.add(f"step {t}", [0.2, t], [0.2, t])
    assert not varying.result("y", 1e-5).constant
    assert "note" not in varying.result("y", 1e-5).describe()
    single = ErrorTally()
    single.add("step 0", [1.0], [1.0])
    assert not single.result("y", 1e-5).constant  # one step: nothing to tell


def test_tally_notes_an_output_that_varies_less_than_the_tolerance():
    """An image model whose Rescaling(1/255) turns verify's normal inputs
    into almost nothing: TensorFlow's output moves by less than the
    tolerance, so a library returning a constant passes; the note says so
    (it spoke only of outputs exactly the same at every step)."""
    tally = ErrorTally()
    for t in range(5):
        tally.add(f"step {t}", [0.5, 0.1], [0.5 + 1e-6 * t, 0.1 - 2e-6 * t])
    result = tally.result("y", 1e-5)
    assert result.ok and result.constant and result.spread == pytest.approx(8e-6)
    first, note = result.describe().splitlines()
    assert "varies by at most 8e-06" in note and "ignored its input" in note, note
    assert not tally.result("y", 1e-6).constant  # varies past a tighter tolerance
    nan = ErrorTally()  # a NaN step does not hide how the finite steps vary
    for want in ([0.0], [np.nan], [1.0]):
        nan.add("step", want, want)
    assert nan.spread() == 1.0 and not nan.result("y", 1e-5).constant


def test_random_boolean_inputs_are_both_values():
    """verify's samples for a bool input: True and False (normal floats cast
    to bool were all True, so a graph's boolean input never changed)."""
    from tfaot.verify.keras_reference import random_inputs

    x = random_inputs(np.random.default_rng(0), (200,), np.bool_, 2)
    assert x.dtype == np.bool_ and 50 < x.sum() < 150


def test_default_tolerance_grows_with_the_outputs(tmp_path, capsys):
    """A head that outputs thousands differs from TensorFlow by f32 rounding
    of thousands (over 1e-5): the default tolerance is scaled by its largest
    |output|, each output's by its own (a head of probabilities beside it
    keeps f32's 1e-5); an explicit --tol is taken as it is."""
    import re

    import keras

    from tfaot.verify.case import Case, Checks
    from tfaot.verify.compare import output_scale

    keras.utils.set_random_seed(0)
    x = keras.Input((None, 8))
    h = keras.layers.GRU(16, return_sequences=True)(x)
    big = keras.layers.Rescaling(3000.0, name="big")(keras.layers.Dense(4)(h))
    probs = keras.layers.Dense(3, activation="softmax", name="probs")(h)
    keras.Model(x, [big, probs]).save(tmp_path / "big.keras")
    assert main(["build", str(tmp_path / "big.keras"), "-o", str(tmp_path / "out"), "-q"]) == 0
    capsys.readouterr()
    assert main(["verify", str(tmp_path / "big.keras"), str(tmp_path / "out")]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    tols = {re.search(r"(big|probs)", line).group(1):
            float(re.search(r"\(tolerance (\S+)\)", line).group(1))
            for line in lines if "tolerance" in line}
    assert tols["big"] > 1e-5 * 100 and tols["probs"] == 1e-5, lines
    assert all(line.endswith(": ok") for line in lines if "tolerance" in line), lines
    assert main(["verify", str(tmp_path / "big.keras"), str(tmp_path / "out"), "--save-case",
                 str(tmp_path / "case.npz")]) == 0
    case = Case.load(tmp_path / "case.npz")
    assert case.output_tolerances == [tols["big"], tols["probs"]]
    assert main(["verify", str(tmp_path / "big.keras"), str(tmp_path / "out"),
                 "--tol", "1e-5"]) in (0, 1)
    assert capsys.readouterr().out.count("(tolerance 1e-05)") == 2
    small = Checks()
    small.add(0, 0, -1, [0.5, -0.25, np.nan])
    assert output_scale(small) == 1.0
    small.add(0, 1, -1, [-40.0, np.inf])
    assert output_scale(small) == 40.0
    small.add(0, 2, -1, [1234.5])
    assert output_scale(small) == 1300.0


def test_random_uint8_inputs_take_every_pixel_value():
    """A uint8 input that indexes no table (an image's pixels) takes values
    over 0..255 (it took 0 and 1, which a Rescaling(1/255) made almost
    zero); token ids stay below their table's size."""
    from tfaot.verify.keras_reference import random_inputs

    rng = np.random.default_rng(0)
    pixels = random_inputs(rng, (2000,), np.uint8, None)
    assert pixels.dtype == np.uint8 and len(np.unique(pixels)) > 200
    assert set(np.unique(random_inputs(rng, (200,), np.int32, None))) == {0, 1}
    assert random_inputs(rng, (200,), np.int64, 30).max() < 30


def test_default_f32_tolerance_grows_with_the_weighted_layers():
    """Each convolution or matrix product rounds its sums, its own way in
    TensorFlow and in the library, and carries the errors before it: the
    default f32 tolerance covers 4 such layers and grows with their count
    past that (a MobileNetV2's 54 differ from TensorFlow by 1.5e-5, over
    1e-5), counted in a Keras model or in a graph."""
    from types import SimpleNamespace

    import keras
    import tensorflow as tf

    from tfaot.verify.compare import default_tolerance, weighted_layers

    L = keras.layers
    inner = keras.Sequential([keras.Input((8, 8, 4)), L.SeparableConv2D(4, 3), L.Conv2D(4, 1)])
    x = keras.Input((8, 8, 3))
    h = inner(L.Conv2D(4, 3, padding="same")(x))
    model = keras.Model(x, L.Dense(2)(L.Flatten()(L.DepthwiseConv2D(3)(h))))
    assert weighted_layers(SimpleNamespace(keras_model=model)) == 5  # (the nested ones too)

    @tf.function(input_signature=[tf.TensorSpec([1, 6])])
    def graph(v):
        return tf.matmul(tf.nn.relu(tf.matmul(v, tf.ones([6, 6]))), tf.ones([6, 2]))
    graph_def = graph.get_concrete_function().graph.as_graph_def()
    loaded = SimpleNamespace(keras_model=None, graph=SimpleNamespace(graph_def=graph_def))
    assert weighted_layers(loaded) == 2

    @tf.function(input_signature=[tf.TensorSpec([1, 6])])
    def unrolled(v):  # one cell's weights, three copies (static_rnn): one layer deep
        w = tf.ones([6, 6])
        for _ in range(3):
            v = tf.tanh(tf.matmul(v, w))
        return v
    graph_def = unrolled.get_concrete_function().graph.as_graph_def()
    loaded = SimpleNamespace(keras_model=None, graph=SimpleNamespace(graph_def=graph_def))
    assert sum(n.op == "MatMul" for n in graph_def.node) == 3 and weighted_layers(loaded) == 1

    lib = SimpleNamespace(manifest={"weights_dtype": "f32"})
    assert default_tolerance(lib, None, 2) == default_tolerance(lib, None, 4) == 1e-5
    assert default_tolerance(lib, None, 54) == pytest.approx(1.35e-4)
    lib = SimpleNamespace(manifest={"weights_dtype": "int8"})
    assert default_tolerance(lib, None, 54) == pytest.approx(0.05)


def test_a_graph_with_half_precision_ops_inside_gets_their_tolerance():
    """A graph of f32 inputs and outputs that computes a head in float16
    (cast to half and back) rounds to f16 in TensorFlow and in the library,
    each its own way: verify failed a right library (9.8e-4, one f16 ulp
    at 1, over f32's 1e-5)."""
    from types import SimpleNamespace

    import tensorflow as tf

    from tfaot.verify.compare import COMPUTE_DTYPE_TOLERANCE, default_tolerance

    def graph_def(dtype):
        @tf.function(input_signature=[tf.TensorSpec([1, 6])])
        def head(v):
            w = tf.ones([6, 2], dtype)
            return tf.cast(tf.matmul(tf.cast(v, dtype), w), tf.float32)
        return head.get_concrete_function().graph.as_graph_def()

    lib = SimpleNamespace(manifest={"weights_dtype": "f32", "inputs": [{"dtype": "float32"}]})
    assert default_tolerance(lib, None, 1, graph_def(tf.float32)) == 1e-5
    assert default_tolerance(lib, None, 1, graph_def(tf.float16)) == \
        COMPUTE_DTYPE_TOLERANCE["float16"]
