"""`tfaot build` end to end on every Keras model kind, through the built .so."""
import re

import numpy as np
import pytest

import keras_models
from tfaot import harness
from tfaot.cli import main
from tfaot.errors import TfaotError
from tfaot.pipeline import BuildOptions, Progress, build_model
from tfaot.verify import keras_reference

STEPS = 200
TOL = 1e-5


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """name -> (keras model, build folder), built once for the module."""
    root = tmp_path_factory.mktemp("builds")
    cache = {}

    def get(name):
        if name not in cache:
            model = keras_models.build(name)
            path = root / f"{name}.keras"
            model.save(path)
            out = build_model(str(path), BuildOptions(out_dir=root / name), Progress(False)).path
            cache[name] = (model, out)
        return cache[name]
    return get


ALL = sorted(keras_models.STREAMING) + sorted(keras_models.STATELESS)


@pytest.mark.parametrize("name", ALL)
def test_library_matches_keras(built, name):
    model, out = built(name)
    lib = harness.load(out)
    shape = lib.input_shape
    xs = np.random.default_rng(3).normal(size=(STEPS, *shape)).astype(np.float32)
    want = keras_reference(model, xs)
    got = lib.step_n(xs)
    err = float(np.abs(got - want).max())
    print(f"{name}: .so vs Keras max abs error {err:.3g} over {STEPS} steps")
    assert err <= TOL
    # reset() restores the initial behaviour.
    lib.reset()
    np.testing.assert_array_equal(lib.step_n(xs[:20]), got[:20])


@pytest.mark.parametrize("name", ["lstm_impl2_stacked_last", "functional_branched"])
def test_two_contexts_interleaved(built, name):
    _, out = built(name)
    a, b, alone = harness.load(out), harness.load(out), harness.load(out)
    rng = np.random.default_rng(5)
    xa = rng.normal(size=(60, *a.input_shape)).astype(np.float32)
    xb = rng.normal(size=(60, *a.input_shape)).astype(np.float32)
    ya, yb = [], []
    for t in range(60):  # step for step, alternating
        ya.append(a.step(xa[t]))
        yb.append(b.step(xb[t]))
    np.testing.assert_array_equal(np.stack(ya), alone.step_n(xa))
    alone.reset()
    np.testing.assert_array_equal(np.stack(yb), alone.step_n(xb))


def test_default_name_and_folder(tmp_path, monkeypatch, capsys):
    model_path = tmp_path / "my-kws.v2.keras"
    keras_models.build("simple_rnn_last").save(model_path)
    monkeypatch.chdir(tmp_path)
    assert main(["build", str(model_path), "--target=cpu"]) == 0
    out = tmp_path / "build" / "my_kws"
    assert sorted(p.name for p in out.iterdir()) == [
        "CMakeLists.txt", "libmy_kws.a", "libmy_kws.so", "my_kws.h", "my_kws.json",
        "my_kwsConfig.cmake", "src"]
    assert oct(out.stat().st_mode & 0o777) != "0o700"
    err = capsys.readouterr().err
    for stage in ("load", "streamify", "import", "compile", "emit", "package"):
        assert re.search(rf"tfaot: {stage}\s+done in \d+\.\d\d s", err), err
    assert "tfaot: built build/my_kws" in err
    assert re.search(r"tfaot: footprint: code \d+ B, weights \d+ B, RAM \d+ B per context", err)


def test_failed_build_leaves_nothing_and_keeps_existing(tmp_path, built):
    _, good = built("simple_rnn_last")
    import keras
    from keras import layers

    bad = tmp_path / "bad.keras"
    keras.Sequential([keras.Input((None, 3), batch_size=1),
                      layers.Bidirectional(layers.GRU(2), name="bd")]).save(bad)
    fresh = tmp_path / "fresh"
    with pytest.raises(TfaotError):
        build_model(str(bad), BuildOptions(out_dir=fresh), Progress(False))
    assert not fresh.exists()
    before = {p.name: p.read_bytes() for p in good.iterdir() if p.is_file()}
    with pytest.raises(TfaotError):
        build_model(str(bad), BuildOptions(out_dir=good), Progress(False))
    assert {p.name: p.read_bytes() for p in good.iterdir() if p.is_file()} == before
    leftovers = [p.name for p in tmp_path.iterdir() if p.name.startswith(".")]
    assert leftovers == []


def test_rebuild_replaces_folder_and_is_identical(tmp_path):
    path = tmp_path / "net.keras"
    keras_models.build("gru_reset_before_last").save(path)
    out = tmp_path / "out"
    texts = []
    for _ in range(2):
        build_model(str(path), BuildOptions(out_dir=out, keep_temps=True), Progress(False))
        assert (out / "temps" / "net.mlir").exists()  # --keep-temps keeps stage artifacts
        texts.append([(out / f).read_bytes() for f in ("net.h", "net.json", "src/net.c")])
    assert texts[0] == texts[1]
    assert not any(p.name.startswith(".") for p in tmp_path.iterdir())


def test_verify_command(built, capsys):
    _, out = built("lstm_impl2_stacked_last")
    model_path = out.parent / "lstm_impl2_stacked_last.keras"
    assert main(["verify", str(model_path), str(out), "--steps", "120"]) == 0
    line = capsys.readouterr().out.strip()
    assert re.fullmatch(r"y_t: max abs error \S+ over 120 steps \(tolerance 1e-05\): ok", line)
    # A tolerance below float32 rounding must fail with exit status 1, and
    # says so (TensorFlow's own values move by more with the weights
    # jittered: verify/sensitivity.py)
    assert main(["verify", str(model_path), str(out), "--steps", "120", "--tol", "1e-12"]) == 1
    fail, note = capsys.readouterr().out.strip().split("\n")
    assert fail.endswith("FAIL")
    assert note.endswith("this tolerance is below f32's rounding of this model")


def test_verify_rejects_library_of_another_model(built, capsys):
    _, out = built("lstm_impl2_stacked_last")
    other = out.parent / "gru_reset_before_last.keras"
    built("gru_reset_before_last")  # same input shape, 3 outputs instead of 4
    assert main(["verify", str(other), str(out)]) == 1
    assert "was it built from this model?" in capsys.readouterr().err
    wider = out.parent / "wide.keras"
    keras_models.stateless_dense().save(wider)  # 20 inputs instead of 8
    assert main(["verify", str(wider), str(out)]) == 1
    assert "takes (1, 20);" in capsys.readouterr().err


def test_layer_names_tensorflow_refuses_as_scopes_build(tmp_path, capsys):
    """Keras accepts layer names with a space, '?', '*' or a leading '_',
    which TensorFlow refuses as name scopes while tfaot traces the step (an
    internal error): they are renamed, the states' names with them, and
    the library matches Keras over 150 steps."""
    import json

    import keras

    keras.utils.set_random_seed(2)
    x = keras.Input((None, 8), name="in put?")
    h = keras.layers.LSTM(16, name="my lstm*", return_sequences=True)(x)
    h = keras.layers.Conv1D(4, 3, name="_conv 1")(h)
    model = keras.Model(x, keras.layers.Dense(3, name="my output")(h))
    path = tmp_path / "names.keras"
    model.save(path)
    out = tmp_path / "out"
    assert main(["-q", "build", str(path), "-o", str(out)]) == 0
    states = [s["name"] for s in json.loads((out / "names.json").read_text())["state"]]
    assert states == ["my_lstm_/h", "my_lstm_/c", "L_conv_1/frames"]
    assert main(["verify", str(path), str(out), "--steps", "150"]) == 0
    assert ": ok" in capsys.readouterr().out


def test_a_wide_gru_with_reset_before_builds(tmp_path, capsys):
    """GRU(192, reset_after=False) slices its recurrent kernel into the
    gates' part and the candidate's; neither product had constant weights,
    so IREE packed them on the stack at run time and iree-compile failed
    ("exceeded stack allocation limit of 32768 bytes"). The slices are
    constants now and take tfaot's kernel; the library matches Keras over
    120 steps."""
    import json

    import keras

    keras.utils.set_random_seed(3)
    x = keras.Input((None, 24), batch_size=1)
    model = keras.Model(x, keras.layers.Dense(5)(keras.layers.GRU(192, reset_after=False)(x)))
    path = tmp_path / "gru.keras"
    model.save(path)
    out = tmp_path / "out"
    assert main(["-q", "build", str(path), "-o", str(out)]) == 0
    kernels = json.loads((out / "gru.json").read_text())["micro_kernels"]
    assert kernels == ["matvec"], kernels
    assert main(["verify", str(path), str(out), "--steps", "120"]) == 0
    assert ": ok" in capsys.readouterr().out


def test_verify_rejects_a_window_of_another_length(tmp_path, capsys):
    """Two sliding-window models with the same frame but windows of 20 and
    30 frames take the same input per step: verifying the library of one
    against the other ended in Keras's shape error (an internal error)."""
    import keras

    for name, window in (("w20", 20), ("w30", 30)):
        x = keras.Input((window, 40), batch_size=1)
        h = keras.layers.Conv1D(8, 3)(x)
        keras.Model(x, keras.layers.Dense(2)(keras.layers.GlobalAveragePooling1D()(h))).save(
            tmp_path / f"{name}.keras")
    out = tmp_path / "out"
    assert main(["build", str(tmp_path / "w20.keras"), "-o", str(out), "--quiet"]) == 0
    capsys.readouterr()
    assert main(["verify", str(tmp_path / "w30.keras"), str(out)]) == 1
    err = capsys.readouterr().err
    assert "built for a window of 20 frames" in err and "takes 30" in err, err
