"""Lambda layers (and any layer tfaot has no rule for): Keras refuses to
load their code unless told to (``--allow-lambda``); tfaot then finds how
each one treats time by running it on random frames (streamify_keras/
probe.py): frame by frame streams as a per-step layer, "the last frame"
(``t[:, -1]``) as a recurrent layer's last output, anything else is
refused over open time and recomputed over a fixed window. Each built
library is compared with Keras over 100+ steps through the .so.
"""
import sys

import numpy as np
import pytest

from tests.util import run
from tfaot.pipeline import BuildOptions, Progress, build_model
from tfaot.verify import verify

F = 6
TOL = 1e-5


def _per_step():
    import keras
    from keras import layers as L
    x = keras.Input((None, F))
    h = L.Lambda(lambda t: t * 0.5 + 1.0)(x)
    return keras.Model(x, L.Dense(2)(L.GRU(8, return_sequences=True)(h)))


def _last_frame():
    import keras
    from keras import layers as L
    x = keras.Input((None, F))
    h = L.LSTM(10, return_sequences=True)(x)
    return keras.Model(x, L.Dense(3)(L.Lambda(lambda t: t[:, -1, :])(h)))


def _mixes_time(window=None):
    import keras
    from keras import layers as L
    x = keras.Input((window, F))
    # each frame minus the first one: every output frame reads frame 0
    h = L.Lambda(lambda t: t - t[:, :1], output_shape=(window, F))(x)
    return keras.Model(x, L.Dense(2)(L.GRU(8)(h)))


def _keras3_ops():
    """keras.ops called on Keras 3 tensors (no Lambda): each is a node of
    the functional graph that tfaot has no rule for, probed like a Lambda."""
    import keras
    from keras import layers as L
    from keras import ops
    x = keras.Input((None, F))
    a, b = ops.split(L.Dense(8)(x), 2, axis=-1)
    h = ops.concatenate([a * ops.sigmoid(b), ops.expand_dims(ops.mean(x, axis=-1), -1)], -1)
    h = L.LSTM(6, return_sequences=True)(h)
    return keras.Model(x, L.Dense(2)(h[:, -1, :]))


def _save(tmp_path, name, builder):
    import keras
    keras.utils.set_random_seed(3)
    path = tmp_path / f"{name}.keras"
    builder().save(path)
    return path


def _unsafe_scope():
    from keras.src.saving.serialization_lib import SafeModeScope
    return SafeModeScope(False)


def test_cli_needs_allow_lambda_then_streams_the_last_frame(tmp_path):
    path = _save(tmp_path, "last", _last_frame)
    cli = [sys.executable, "-m", "tfaot"]
    import subprocess
    refused = subprocess.run([*cli, "build", path, "-o", tmp_path / "no"], capture_output=True,
                             text=True)
    assert refused.returncode == 1, refused.stderr
    assert "Lambda layer" in refused.stderr and "--allow-lambda" in refused.stderr
    assert "Traceback" not in refused.stderr and not (tmp_path / "no").exists()
    built = run([*cli, "build", path, "-o", tmp_path / "out", "--allow-lambda", "-q"])
    checked = run([*cli, "verify", path, tmp_path / "out", "--allow-lambda", "--steps", "120"])
    assert "ok" in checked.stdout
    # --allow-lambda loads Keras, and so TensorFlow, as quietly as the rest
    for proc in (built, checked):
        assert not any(word in proc.stderr for word in ("absl", "cuda", "cpu_feature_guard")), \
            proc.stderr


@pytest.mark.parametrize("name,builder", [("per_step", _per_step),
                                          ("window_mixes_time", lambda: _mixes_time(12)),
                                          ("keras3_ops", _keras3_ops)])
def test_lambda_layers_match_keras(tmp_path, name, builder):
    path = _save(tmp_path, name, builder)
    with _unsafe_scope():
        out = build_model(str(path), BuildOptions(out_dir=tmp_path / name), Progress(False)).path
        results = verify(str(path), out, steps=120, seed=0, tol=TOL)
    for r in results:
        print(f"{name}: {r.output}: max abs error {r.max_abs_error:.3g} over {r.steps} {r.unit}")
        assert r.steps >= 100 and r.ok
    manifest_stream = __import__("json").loads((out / f"{name}.json").read_text())["stream"]
    # a Lambda that works frame by frame streams; one that mixes time is recomputed
    assert bool(manifest_stream.get("recompute")) == (name == "window_mixes_time")


def test_lambda_that_mixes_time_is_refused_over_open_time(tmp_path):
    from tfaot.errors import TfaotError
    path = _save(tmp_path, "mixes", _mixes_time)
    with _unsafe_scope(), pytest.raises(TfaotError) as err:
        build_model(str(path), BuildOptions(out_dir=tmp_path / "mixes"), Progress(False))
    message = str(err.value)
    assert "(Lambda) mixes time steps" in message
    assert "give the input a fixed length" in message
    assert not (tmp_path / "mixes").exists()


def test_probe_tells_frame_local_last_and_mixing_layers_apart():
    import keras

    from tfaot.streamify_keras.probe import LAST_FRAME, MIXED, PER_STEP, time_locality
    from tfaot.streamify_keras.replay import SEQ, Seq, Streamed

    x = Streamed(np.zeros((1, 2, F), np.float32), SEQ, Seq(2, 0, -1))
    cases = {PER_STEP: keras.layers.Lambda(lambda t: t * t),
             LAST_FRAME: keras.layers.Lambda(lambda t: t[:, -1]),
             MIXED: keras.layers.Lambda(lambda t: t - t[:, :1])}
    for want, layer in cases.items():
        assert time_locality(layer, (x,), {}, Streamed) == want
    mean = keras.layers.Lambda(lambda t: t.mean(axis=1) if isinstance(t, np.ndarray)
                               else keras.ops.mean(t, axis=1))
    assert time_locality(mean, (x,), {}, Streamed) == MIXED


def test_layer_that_raises_is_refused_with_its_error(tmp_path):
    """A Lambda whose code fails on the probe's frames is refused with that
    error, naming the layer (it was "not a per-time-step layer"); a name its
    code has lost (a saved lambda runs with Keras's globals) no window would
    find either: the error says so, without the fixed-window advice."""
    import keras

    from tfaot.errors import TfaotError
    from tfaot.streamify_keras.probe import ProbeFailed, time_locality
    from tfaot.streamify_keras.replay import SEQ, Seq, Streamed

    # (a lambda: Keras saves its code, where a named function is saved by name)
    broken = lambda t: undefined_name * t  # noqa: E731, F821 (the layer's bug)
    x = Streamed(np.zeros((1, 2, F), np.float32), SEQ, Seq(2, 0, -1))
    with pytest.raises(ProbeFailed, match="ZeroDivisionError"):
        time_locality(keras.layers.Lambda(lambda t: t / 0 if 1 // 0 else t), (x,), {}, Streamed)
    with pytest.raises(TfaotError, match="NameError"):
        time_locality(keras.layers.Lambda(broken), (x,), {}, Streamed)
    def model():
        inputs = keras.Input((None, F))
        return keras.Model(inputs, keras.layers.Lambda(broken, output_shape=(None, F),
                                                       name="broken")(inputs))

    path = _save(tmp_path, "broken", model)
    with _unsafe_scope(), pytest.raises(TfaotError) as err:
        build_model(str(path), BuildOptions(out_dir=tmp_path / "broken"), Progress(False))
    assert "layer 'broken' (Lambda) fails when run (NameError" in str(err.value)
    assert "named function" in str(err.value) and "fixed length" not in str(err.value)


_TF_LAMBDA_MODELS = """
import sys
import tensorflow as tf
import keras
import tf_keras

def model(k):
    x = k.Input((None, 6))
    h = k.layers.GRU(8, return_sequences=True)(x)
    h = k.layers.Lambda(lambda t: tf.math.l2_normalize(t, axis=-1) * 2.0)(h)
    return k.Model(x, k.layers.Dense(2)(h))

tf_keras.utils.set_random_seed(3)
model(tf_keras).save(sys.argv[1] + "/k2.h5")
model(tf_keras).save(sys.argv[1] + "/k2.keras")
keras.utils.set_random_seed(3)
x = keras.Input((None, 6))
h = keras.layers.Lambda(lambda t: t * t - 1.0)(keras.layers.GRU(8, return_sequences=True)(x))
keras.Model(x, keras.layers.Dense(2)(h)).save(sys.argv[1] + "/k3.h5")
"""


def test_allow_lambda_loads_h5_and_keras2_lambdas(tmp_path):
    """--allow-lambda on an .h5 file (Keras 3's or Keras 2's) and a Keras 2
    Lambda calling tf: the .h5 was refused with the flag given (Keras' .h5
    loader and tf_keras keep their own safe mode), and a Keras 2 Lambda's
    code had no 'tf' ('could not automatically infer the shape'); both
    build and verify now, and still need the flag."""
    run([sys.executable, "-c", _TF_LAMBDA_MODELS, tmp_path])
    import subprocess
    refused = subprocess.run([sys.executable, "-m", "tfaot", "build", tmp_path / "k2.h5", "-o",
                              tmp_path / "no", "-q"], capture_output=True, text=True)
    assert refused.returncode == 1 and "--allow-lambda" in refused.stderr, refused.stderr
    for name in ("k2.h5", "k2.keras", "k3.h5"):
        with _unsafe_scope():  # (what --allow-lambda sets)
            out = build_model(str(tmp_path / name), BuildOptions(out_dir=tmp_path / name.replace(".", "_")),
                              Progress(False)).path
            results = verify(str(tmp_path / name), out, steps=100, seed=0, tol=TOL)
        assert all(r.ok and r.steps >= 100 for r in results), (name, results)


def test_a_sequential_lambda_that_fails_as_keras_loads_it_says_why(tmp_path):
    """Keras swallows the error of a Sequential model's Lambda that fails as
    it rebuilds the model (a name its code uses is not defined where it is
    loaded) and returns a model without inputs: that was an internal error
    ("has no defined inputs yet"); now the lambda's own error and what to do."""
    import keras

    from tfaot.errors import TfaotError
    from tfaot.frontend.load import load_model

    globals()["_gone_at_load"] = lambda t: t * 2.0
    model = keras.Sequential([keras.Input((None, 6), batch_size=1),
                              keras.layers.Lambda(lambda t: _gone_at_load(t)),  # noqa: F821
                              keras.layers.LSTM(4, return_sequences=True)])
    path = tmp_path / "seq.keras"
    model.save(path)
    del globals()["_gone_at_load"]
    with _unsafe_scope(), pytest.raises(TfaotError) as e:
        load_model(str(path))
    msg = str(e.value)
    assert msg.startswith(f"{path}: Keras loaded the model but could not rebuild it"), msg
    assert "NameError" in msg and "_gone_at_load" in msg and "--custom-objects" in msg, msg
