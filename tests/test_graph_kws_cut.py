"""Published keyword-spotting graphs (ARM ML-KWS-for-MCU style: TF1 session,
speech_commands front end wav_data -> DecodeWav -> AudioSpectrogram -> Mfcc,
a fixed 25x10 MFCC window) cut at ``Mfcc`` with --inputs, built, then
checked with ``tfaot verify`` *without* repeating the cut: the manifest
records it. Covers a CRNN whose convolution strides 2 in time before a GRU
(MultiRNNCell, dynamic_rnn), so a step takes 2 frames and 25 is not a
multiple of 2, and a peephole/projection LSTMCell.
"""
import json
import re

import numpy as np
import pytest

import graph_models as G
from tfaot.cli import main

FRAMES, DCT = 25, 10


def _freeze(kind: str):
    import tensorflow as tf

    import graph_loop_models as M

    lc = G.legacy_cells()
    with G.tf1_graph(1) as g:
        wav = tf.compat.v1.placeholder(tf.string, [], name="wav_data")
        audio, rate = tf.raw_ops.DecodeWav(contents=wav, desired_channels=1,
                                           desired_samples=16000, name="decoded_sample_data")
        spec = tf.raw_ops.AudioSpectrogram(input=audio, window_size=640, stride=640,
                                           magnitude_squared=True, name="AudioSpectrogram")
        mfcc = tf.raw_ops.Mfcc(spectrogram=spec, sample_rate=rate, dct_coefficient_count=DCT,
                               name="Mfcc")
        fingerprint = tf.reshape(mfcc, [-1, FRAMES * DCT], name="Reshape")
        if kind == "crnn":
            x = tf.reshape(fingerprint, [-1, FRAMES, DCT, 1])
            w = tf.compat.v1.get_variable("W", [10, 4, 1, 16])
            b = tf.compat.v1.get_variable(
                "b", [16], initializer=tf.compat.v1.random_normal_initializer())
            c = tf.nn.relu(tf.nn.conv2d(x, w, [1, 2, 1, 1], "VALID") + b)
            c = tf.reshape(c, [-1, c.shape[1], c.shape[2] * 16])
            cell = lc.MultiRNNCell([lc.GRUCell(24)])
            _, last = tf.compat.v1.nn.dynamic_rnn(cell, c, dtype=tf.float32)
            flow, width = tf.reshape(last[-1], [-1, 24]), 24
        else:
            x = tf.reshape(fingerprint, [-1, FRAMES, DCT])
            cell = lc.LSTMCell(32, use_peepholes=True, num_proj=16)
            outs, _ = tf.compat.v1.nn.dynamic_rnn(cell, x, dtype=tf.float32)
            flow, width = outs[:, -1, :], 16
        w2 = tf.compat.v1.get_variable("W2", [width, 12])
        tf.nn.softmax(tf.matmul(flow, w2), name="labels_softmax")
        return M._freeze(g, "labels_softmax")


@pytest.mark.parametrize("kind,frames_per_step", [("crnn", 2), ("lstm_proj", 1)])
def test_cut_build_then_verify(tmp_path, capsys, kind, frames_per_step):
    path = tmp_path / f"{kind}.pb"
    path.write_bytes(_freeze(kind).SerializeToString())
    out = tmp_path / "out"
    assert main(["build", str(path), "--inputs", f"Mfcc:1x{FRAMES}x{DCT}",
                 "--outputs", "labels_softmax", "-o", str(out)]) == 0
    manifest = json.loads((out / f"{kind}.json").read_text())
    assert manifest["graph_cut"] == {"inputs": f"Mfcc:1x{FRAMES}x{DCT}",
                                     "outputs": "labels_softmax"}
    assert manifest["stream"]["mode"] == "prefix"
    assert manifest["stream"]["frames_per_step"] == frames_per_step
    capsys.readouterr()
    assert main(["verify", str(path), str(out), "--steps", "120"]) == 0
    line = capsys.readouterr().out.strip().splitlines()[-1]
    print(line)
    # "labels_softmax: max abs error E over N sequences of 25 frames ...: ok"
    words = line.split()
    assert float(words[4]) <= 1e-5 and int(words[6]) >= 8 and "sequences of 25 frames" in line
    # the same check in two halves: a saved case of several runs, each from a fresh init
    case = tmp_path / "case.npz"
    assert main(["verify", str(path), str(out), "--steps", "120", "--save-case", str(case)]) == 0
    capsys.readouterr()
    assert main(["verify", "--case", str(case), str(out)]) == 0
    assert capsys.readouterr().out.strip().splitlines()[-1] == line


def test_verify_catches_a_wrong_library(tmp_path, capsys):
    """The fixed-length check can fail: a library built from other weights."""
    graph = _freeze("lstm_proj")
    path = tmp_path / "a.pb"
    path.write_bytes(graph.SerializeToString())
    other = tmp_path / "b.pb"
    for node in graph.node:  # change the output layer's weights
        if node.name == "W2":
            values = np.frombuffer(node.attr["value"].tensor.tensor_content, np.float32)
            node.attr["value"].tensor.tensor_content = (values * 3.0).tobytes()
    other.write_bytes(graph.SerializeToString())
    out = tmp_path / "out"
    assert main(["build", str(other), "--inputs", f"Mfcc:1x{FRAMES}x{DCT}",
                 "--outputs", "labels_softmax", "-o", str(out)]) == 0
    capsys.readouterr()
    assert main(["verify", str(path), str(out), "--steps", "50"]) == 1
    assert "FAIL" in capsys.readouterr().out


@pytest.mark.parametrize("rnn,stride,compared", [("static", 1, 100), ("dynamic", 2, 50)])
def test_verify_fixed_length_conv_front_end_sequence_output(tmp_path, capsys, rnn, stride,
                                                            compared):
    """A fixed-length graph (102 frames) with a VALID conv (k=3, ``stride``)
    before the RNN and an output per conv frame: verify maps conv output j
    to step first_valid_step + j (the graph runs on no other length), in as
    many 102-frame sequences from reset as the steps asked need."""
    import graph_loop_models as M
    path = tmp_path / "g.pb"
    path.write_bytes(M.conv_rnn(rnn=rnn, stride=stride, frames=102).SerializeToString())
    out = tmp_path / "out"
    assert main(["build", str(path), "-o", str(out)]) == 0
    capsys.readouterr()
    assert main(["verify", str(path), str(out), "--steps", "120"]) == 0
    line = capsys.readouterr().out.strip().splitlines()[-1]
    print(line)
    runs = -(-120 // (102 // stride))
    assert f"over {compared * runs} steps in {runs} sequences of 102 frames" in line, line


def _framed_rnn_saved_model(path):
    """A tf.Module SavedModel: a waveform framed and windowed (the front end
    firmware computes itself), named ``features``, into a SimpleRNN."""
    import keras
    import tensorflow as tf

    class Model(tf.Module):
        def __init__(self):
            super().__init__()
            keras.utils.set_random_seed(2)
            self.rnn = keras.layers.SimpleRNN(8, return_sequences=True)
            self.rnn.build((1, None, 32))

        @tf.function(input_signature=[tf.TensorSpec([1, 1600], tf.float32)])
        def __call__(self, wav):
            frames = tf.signal.frame(wav, 32, 16) * tf.signal.hann_window(32)
            return self.rnn(tf.identity(frames, name="features"))

    model = Model()
    tf.saved_model.save(model, str(path), signatures=model.__call__)


def test_saved_model_cut_at_a_node_then_verify(tmp_path, capsys):
    """--inputs naming a tensor inside a SavedModel cuts it there, as in a
    frozen graph (it was ignored: a name not in the graph even built). The
    error for a name that is not there suggests the scoped node, and the
    reference runs the source graph fed at the cut, although the call's
    nodes are ordered after the waveform by control edges."""
    path = tmp_path / "framed_rnn"
    _framed_rnn_saved_model(path)
    assert main(["build", str(path), "--inputs", "features", "-o", str(tmp_path / "bad")]) == 1
    err = capsys.readouterr().err
    found = re.search(r"did you mean '([^']+/features)'", err)
    assert "input node 'features' is not in the graph" in err and found, err
    assert not (tmp_path / "bad").exists()
    # a shape for the signature's input that contradicts the signature
    assert main(["build", str(path), "--inputs", "wav:1x1000", "-o", str(tmp_path / "bad")]) == 1
    err = capsys.readouterr().err
    assert "input 'wav' of signature 'serving_default' has shape 1x1600, not 1x1000" in err, err
    out = tmp_path / "out"
    assert main(["build", str(path), "--inputs", found.group(1), "-o", str(out)]) == 0
    manifest = json.loads((out / "framed_rnn.json").read_text())
    assert manifest["graph_cut"]["inputs"] == found.group(1)
    assert [i["shape"] for i in manifest["inputs"]] == [[1, 32]]  # a frame a step
    capsys.readouterr()
    assert main(["verify", str(path), str(out), "--steps", "99"]) == 0
    report = capsys.readouterr().out
    assert re.search(r"over 99 steps \(tolerance [0-9.e-]+\): ok", report), report
