"""Keras 2 .h5 files with CuDNNLSTM / CuDNNGRU (GPU-trained models) build and verify.

The reference here is cuDNN's own arithmetic written out in numpy from the
file's raw weights (each gate's stored kernel read as cuDNN's units x inputs
matrix; an LSTM's two biases added, a GRU's reset gate applied after the
recurrent product), so it checks the weight conversion of
frontend/keras2_cudnn.py independently of both Keras loaders.
"""
import re

import h5py
import numpy as np
import pytest

from tfaot import harness
from tfaot.cli import main
from tfaot.frontend.keras2_cudnn import as_keras_rnn

STEPS = 150


def _cudnn_model(path, bidirectional: bool = False):
    """Conv1D -> CuDNNLSTM(12) -> CuDNNGRU(6) -> Dense(3), open time axis
    (or a Bidirectional CuDNNGRU over 10 frames), weights random so that
    every gate and bias matters."""
    import tf_keras
    from tf_keras.src.layers.rnn.cudnn_gru import CuDNNGRU
    from tf_keras.src.layers.rnn.cudnn_lstm import CuDNNLSTM

    L = tf_keras.layers
    if bidirectional:
        x = tf_keras.Input((10, 5), batch_size=1)
        h = L.Bidirectional(CuDNNGRU(4))(x)
    else:
        x = tf_keras.Input((None, 5), batch_size=1)
        # (named: tf_keras numbers default names per process, and the
        # reference reads each layer's weights from the file by name)
        h = L.Conv1D(7, 3, padding="causal", activation="relu", name="conv1d")(x)
        h = CuDNNLSTM(12, return_sequences=True, name="cu_dnnlstm")(h)
        h = CuDNNGRU(6, return_sequences=True, name="cu_dnngru")(h)
    model = tf_keras.Model(x, L.Dense(3, name="dense")(h))
    rng = np.random.default_rng(3)
    model.set_weights([rng.normal(0, 0.4, w.shape).astype(np.float32)
                       for w in model.get_weights()])
    model.save(path)


def _weights(path, layer: str) -> list[np.ndarray]:
    with h5py.File(path, "r") as f:
        group = f["model_weights"][layer]
        return [np.asarray(group[n]) for n in group.attrs["weight_names"]]


def _sigmoid(v):
    return 1.0 / (1.0 + np.exp(-v))


def _cudnn_matrices(kernel, recurrent, gates):
    """Each gate's (W, R) as cuDNN reads the stored blocks (module docstring)."""
    units, inputs = recurrent.shape[0], kernel.shape[0]
    ws = [k.reshape(units, inputs) for k in np.hsplit(kernel.astype(np.float64), gates)]
    rs = [k.reshape(units, units) for k in np.hsplit(recurrent.astype(np.float64), gates)]
    return ws, rs, units


def _cudnn_lstm(xs, kernel, recurrent, bias):
    (wi, wf, wc, wo), (ri, rf, rc, ro), u = _cudnn_matrices(kernel, recurrent, 4)
    b = bias.astype(np.float64).reshape(2, 4, u).sum(0)
    h, c, out = np.zeros(u), np.zeros(u), []
    for x in xs:
        i = _sigmoid(wi @ x + ri @ h + b[0])
        f = _sigmoid(wf @ x + rf @ h + b[1])
        g = np.tanh(wc @ x + rc @ h + b[2])
        o = _sigmoid(wo @ x + ro @ h + b[3])
        c = f * c + i * g
        h = o * np.tanh(c)
        out.append(h)
    return np.array(out)


def _cudnn_gru(xs, kernel, recurrent, bias):
    (wz, wr, wh), (rz, rr, rh), u = _cudnn_matrices(kernel, recurrent, 3)
    bw, br = bias.astype(np.float64).reshape(2, 3, u)
    h, out = np.zeros(u), []
    for x in xs:
        z = _sigmoid(wz @ x + bw[0] + rz @ h + br[0])
        r = _sigmoid(wr @ x + bw[1] + rr @ h + br[1])
        n = np.tanh(wh @ x + bw[2] + r * (rh @ h + br[2]))
        h = (1 - z) * n + z * h
        out.append(h)
    return np.array(out)


def _reference(path, xs):
    """The model's outputs for frames ``xs`` (T, 5), computed in float64."""
    ck, cb = _weights(path, "conv1d")
    padded = np.concatenate([np.zeros((2, xs.shape[1])), xs])
    conv = np.maximum(np.stack([np.einsum("kc,kco->o", padded[t:t + 3], ck) + cb
                                for t in range(len(xs))]), 0)
    h = _cudnn_gru(_cudnn_lstm(conv, *_weights(path, "cu_dnnlstm")), *_weights(path, "cu_dnngru"))
    dk, db = _weights(path, "dense")
    return h @ dk + db


@pytest.fixture(scope="module")
def cudnn_build(tmp_path_factory):
    folder = tmp_path_factory.mktemp("cudnn")
    path = folder / "gpu_trained.h5"
    _cudnn_model(path)
    out = folder / "lib"
    assert main(["build", str(path), "-o", str(out), "-q"]) == 0
    return path, out


def test_cudnn_layers_stream_and_match_cudnn_arithmetic(cudnn_build):
    path, out = cudnn_build
    xs = np.random.default_rng(0).normal(size=(STEPS, 5)).astype(np.float32)
    got = harness.load(out).step_n(xs[:, None, :])[:, 0, :]
    err = float(np.abs(got - _reference(path, xs)).max())
    print(f"CuDNNLSTM + CuDNNGRU .h5: library vs cuDNN's arithmetic {err:.3g} over {STEPS} steps")
    assert err <= 1e-5


def test_verify_of_a_cudnn_file_uses_tf_keras_conversion(cudnn_build, capsys):
    """verify's reference is tf_keras loading the file into an LSTM and a GRU
    (tf_keras' own weight conversion, not tfaot's): it passes."""
    path, out = cudnn_build
    capsys.readouterr()
    assert main(["verify", str(path), str(out), "--steps", str(STEPS)]) == 0
    line = capsys.readouterr().out.strip()
    assert re.fullmatch(rf"\S+: max abs error \S+ over {STEPS} steps \(tolerance \S+\): ok", line)


def test_bidirectional_cudnn_gru_whole_window(tmp_path, capsys):
    """A Bidirectional(CuDNNGRU) over a fixed window: the weights of both
    directions converted (the wrapper's weight names), built and verified."""
    path = tmp_path / "bi.h5"
    _cudnn_model(path, bidirectional=True)
    out = tmp_path / "bi"
    assert main(["build", str(path), "-o", str(out), "-q"]) == 0
    capsys.readouterr()
    assert main(["verify", str(path), str(out), "--steps", "100"]) == 0
    assert capsys.readouterr().out.strip().endswith(": ok")


def test_config_rewrite_keeps_what_the_layer_computes():
    node = {"class_name": "CuDNNGRU", "config": {
        "name": "g", "units": 5, "return_sequences": True, "stateful": True,
        "time_major": False, "kernel_initializer": "glorot_uniform"}}
    new = as_keras_rnn(node)
    assert new["class_name"] == "GRU"
    assert new["config"]["reset_after"] is True
    assert new["config"]["recurrent_activation"] == "sigmoid"
    assert new["config"]["stateful"] and new["config"]["units"] == 5


def test_a_keras_archive_with_a_cudnn_layer_is_refused_clearly(tmp_path, capsys):
    import tf_keras
    from tf_keras.src.layers.rnn.cudnn_lstm import CuDNNLSTM

    x = tf_keras.Input((None, 4), batch_size=1)
    path = tmp_path / "gpu.keras"
    tf_keras.Model(x, CuDNNLSTM(3)(x)).save(path)
    out = tmp_path / "out"
    assert main(["build", str(path), "-o", str(out), "-q"]) == 1
    err = capsys.readouterr().err
    assert re.search(r"layer 'cu_dnnlstm\w*' is a CuDNNLSTM", err) and ".h5" in err
    assert "Traceback" not in err and not out.exists()
