"""Write a frozen TF1 keyword-spotting graph with an audio front end.

    python make_graph.py [-o kws_graph.pb] [--frames frames.f32 --expected tf_out.f32]

The graph is what TF1's speech_commands freeze.py writes, made to stream:

    wav_data (a WAV file's bytes) -> DecodeWav -> AudioSpectrogram (30 ms
    windows every 10 ms) -> Mfcc (10 coefficients per frame)
    -> dynamic_rnn(LSTMCell(64)) -> Dense(12) -> labels_softmax (per frame)

Firmware computes the MFCC itself, so the library starts at `Mfcc`
(`tfaot build ... --inputs Mfcc`). The weights are untrained (seeded random):
the point is the path from a frozen graph to C, not the accuracy.

--frames writes the front end's MFCC of a synthetic 1.5 s sound (float32,
one frame of 10 after another): what the C program reads. --expected writes
what TensorFlow's whole graph returns for that sound, from the WAV bytes.
"""
import argparse
import io
import os
import warnings
import wave

# TF 2.16+ keeps the tf.compat.v1.nn.rnn_cell classes in tf_keras.
os.environ["TF_USE_LEGACY_KERAS"] = "1"
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

tf.get_logger().setLevel("ERROR")  # the TF1 APIs below are deprecated, and say so
warnings.filterwarnings("ignore", "`tf.nn.rnn_cell", UserWarning)

RATE, WINDOW, STRIDE, DCT, UNITS, LABELS = 16000, 480, 160, 10, 64, 12


def make_graph() -> tf.compat.v1.GraphDef:
    """The frozen GraphDef (variables folded into constants)."""
    tf.compat.v1.disable_eager_execution()
    tf.compat.v1.disable_control_flow_v2()  # dynamic_rnn as TF1 wrote it: Enter/Exit, TensorArray
    g = tf.Graph()
    with g.as_default():
        tf.compat.v1.set_random_seed(0)
        wav = tf.compat.v1.placeholder(tf.string, [], name="wav_data")
        audio, rate = tf.raw_ops.DecodeWav(contents=wav, desired_channels=1)
        spec = tf.raw_ops.AudioSpectrogram(input=audio, window_size=WINDOW, stride=STRIDE,
                                           magnitude_squared=True)
        # [1, frames, DCT]: any number of frames, so the graph streams.
        mfcc = tf.raw_ops.Mfcc(spectrogram=spec, sample_rate=rate, dct_coefficient_count=DCT,
                               name="Mfcc")
        # An explicit seed: the cell's default initializer ignores the graph's.
        cell = tf.compat.v1.nn.rnn_cell.LSTMCell(
            UNITS, initializer=tf.compat.v1.glorot_uniform_initializer(seed=1))
        outs, _ = tf.compat.v1.nn.dynamic_rnn(cell, mfcc, dtype=tf.float32)
        w = tf.compat.v1.get_variable("final_fc_weights", (UNITS, LABELS))
        b = tf.compat.v1.get_variable("final_fc_bias", (LABELS,),
                                      initializer=tf.compat.v1.random_normal_initializer())
        logits = tf.tensordot(outs, w, [[2], [0]]) + b
        tf.nn.softmax(logits, name="labels_softmax")
        with tf.compat.v1.Session(graph=g) as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            return tf.compat.v1.graph_util.convert_variables_to_constants(
                sess, g.as_graph_def(), ["labels_softmax"])


def synthetic_wav(seconds: float = 1.5) -> bytes:
    """A 16-bit mono WAV: a rising chirp with noise."""
    t = np.arange(int(RATE * seconds)) / RATE
    x = 0.5 * np.sin(2 * np.pi * (300 + 600 * t) * t)
    x += np.random.default_rng(0).normal(0, 0.05, t.shape)
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(RATE)
        w.writeframes((np.clip(x, -1, 1) * 32767).astype("<i2").tobytes())
    return buf.getvalue()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-o", "--output", default="kws_graph.pb")
    parser.add_argument("--frames", help="write the MFCC frames of a synthetic sound here")
    parser.add_argument("--expected", help="write TensorFlow's outputs for that sound here")
    args = parser.parse_args()

    graph_def = make_graph()
    with open(args.output, "wb") as f:
        f.write(graph_def.SerializeToString(deterministic=True))
    print(f"wrote {args.output} ({len(graph_def.node)} nodes)")
    if args.frames or args.expected:
        g = tf.Graph()
        with g.as_default():
            tf.graph_util.import_graph_def(graph_def, name="")
            with tf.compat.v1.Session(graph=g) as sess:
                mfcc, probs = sess.run(["Mfcc:0", "labels_softmax:0"],
                                       {"wav_data:0": synthetic_wav()})
        if args.frames:
            mfcc.astype(np.float32).tofile(args.frames)
            print(f"wrote {args.frames} ({mfcc.shape[1]} frames of {DCT})")
        if args.expected:
            probs.astype(np.float32).tofile(args.expected)
            print(f"wrote {args.expected} ({probs.shape[1]} frames of {LABELS})")


if __name__ == "__main__":
    main()
