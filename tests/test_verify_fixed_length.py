"""`tfaot verify` of a Keras model of fixed length T streamed as a prefix:
the model defines T steps from reset, so verify compares sequences of T
frames, each from a fresh init, until it has compared ``--steps`` steps
(it compared only the first T before)."""
import re

import pytest

from tfaot.cli import main


def _gru(path, seed: int, frames: int = 10):
    import keras

    keras.utils.set_random_seed(seed)
    keras.Sequential([keras.Input((frames, 6), batch_size=1),
                      keras.layers.GRU(12, return_sequences=True),
                      keras.layers.Dense(3)]).save(path)
    return path


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("fixed")
    models = {name: _gru(tmp / f"{name}.keras", seed) for name, seed in (("a", 1), ("b", 2))}
    assert main(["build", str(models["a"]), "-o", str(tmp / "lib"), "-q"]) == 0
    return models, tmp / "lib"


def test_verify_compares_the_steps_asked_in_sequences_of_t(built, capsys):
    models, lib = built
    assert main(["verify", str(models["a"]), str(lib), "--steps", "105"]) == 0
    out = capsys.readouterr().out
    match = re.search(r"max abs error (\S+) over (\d+) steps in (\d+) sequences of 10 frames",
                      out)
    assert match, out
    assert float(match[1]) <= 1e-5 and int(match[2]) == 110 and int(match[3]) == 11, out


def test_a_library_of_other_weights_fails(built, capsys):
    models, lib = built
    assert main(["verify", str(models["b"]), str(lib), "--steps", "30"]) == 1
    assert "FAIL" in capsys.readouterr().out


@pytest.mark.parametrize("shape", ["stateful", "fixed"])
def test_an_adapted_normalization_is_in_the_reference(shape, tmp_path, capsys):
    """Verify compares against a rebuilt copy of a stateful model (made
    stateless) and of a fixed-length one (open in time, so that it can
    compare fewer steps than T); an adapted Normalization's copy kept mean
    0 and variance 1 (Keras derives them in finalize_state, which
    set_weights does not call): a correct library failed (1.99 here), or
    `--steps 10` of a 20-frame model was refused."""
    import keras
    import numpy as np

    keras.utils.set_random_seed(0)
    norm = keras.layers.Normalization()
    norm.adapt(np.array([[5.0], [7.0], [9.0]], np.float32))
    stateful = shape == "stateful"
    x = keras.Input(batch_shape=(1, None, 1)) if stateful else keras.Input((20, 1))
    rnn = keras.layers.SimpleRNN(2, stateful=stateful, return_sequences=stateful)
    path = tmp_path / f"{shape}.keras"
    keras.Model(x, rnn(norm(x))).save(path)
    assert main(["build", str(path), "-o", str(tmp_path / "lib"), "-q"]) == 0
    assert main(["verify", str(path), str(tmp_path / "lib"), "--steps", "10"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"over 10 steps.*: ok", out), out
