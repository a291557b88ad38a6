"""A YAMNet-shaped audio SavedModel streamed, against LiteRT on each window.

The model is YAMNet as tensorflow/models (research/audioset/yamnet) writes
it, with random weights (calibrated batch norms): a waveform ``(None,)``
at 16 kHz padded to whole patches, 25 ms STFT frames every 10 ms, a 64-band
log mel spectrogram, patches of 96 frames every 48 (``tf.signal.frame``
along axis 0) and MobileNetV1 (14 convolution blocks, 3.75 M weights, 521
sigmoid scores) on each patch, saved as a SavedModel whose signature takes
the waveform and returns the scores, the embeddings and the spectrogram.

* tfaot: the default build of the SavedModel; a step takes 7680 new
  samples (0.48 s) and returns the newest patch's outputs, the STFT frames
  and the log mel rows the next patches need kept in ring buffers;
* LiteRT: the same SavedModel's signature converted for one window of
  15600 samples (0.975 s: one patch; XNNPACK, 1 thread), what an
  application without streaming runs every 0.48 s;
* with ``--weights-dtype int8``: tfaot's int8 build and LiteRT's
  dynamic-range int8 model (``Optimize.DEFAULT``).

The table gives CPU µs per output patch (thread time; medians of runs
timed in turn) and the ratio tfaot / LiteRT, with wall time beside. Needs
the bench extra (ai-edge-litert).

    .venv/bin/python bench/bench_audio.py [--steps N] [--repeats R]
        [--weights-dtype f32|int8]
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np

from bench_streaming import LiteRTTimer, Timer, time_interleaved, write_results

SAMPLE_RATE = 16000
WINDOW_SAMPLES = 15600  # 0.96 s patch + one STFT window - one hop
#: YAMNet's depthwise-separable blocks after its first convolution: (stride, filters)
SEPARABLE_BLOCKS = [(1, 64), (2, 128), (1, 128), (2, 256), (1, 256), (2, 512)] + \
    [(1, 512)] * 5 + [(2, 1024), (1, 1024)]


def yamnet_saved_model(path: Path) -> None:
    """YAMNet's front end and network (module docstring) as a SavedModel."""
    import keras
    import tensorflow as tf

    L = keras.layers
    keras.utils.set_random_seed(0)
    patch = keras.Input((96, 64))
    h = L.Reshape((96, 64, 1))(patch)
    h = _bn_relu(L.Conv2D(32, 3, strides=2, padding="same", use_bias=False)(h))
    for stride, filters in SEPARABLE_BLOCKS:
        h = _bn_relu(L.DepthwiseConv2D(3, strides=stride, padding="same", use_bias=False)(h))
        h = _bn_relu(L.Conv2D(filters, 1, use_bias=False)(h))
    embeddings = L.GlobalAveragePooling2D()(h)
    net = keras.Model(patch, [L.Activation("sigmoid")(L.Dense(521)(embeddings)), embeddings])
    _calibrate(net)
    module = tf.Module()
    module.net = net

    @tf.function(input_signature=[tf.TensorSpec([None], tf.float32)])
    def serve(waveform):
        spectrogram, patches = _features(_padded(waveform))
        scores, embedding = module.net(patches)
        return {"scores": scores, "embeddings": embedding, "spectrogram": spectrogram}

    module.serve = serve
    tf.saved_model.save(module, str(path), signatures={"serving_default": serve})


def _bn_relu(x):
    import keras

    bn = keras.layers.BatchNormalization(center=True, scale=False, epsilon=1e-4)
    return keras.layers.ReLU()(bn(x))


def _calibrate(net) -> None:
    """Batch norm statistics that move the activations (the default ones
    leave a random network's outputs almost constant)."""
    import keras

    rng = np.random.default_rng(1)
    for layer in net.layers:
        if isinstance(layer, keras.layers.BatchNormalization):
            n = layer.moving_mean.shape
            layer.moving_mean.assign(rng.normal(size=n).astype(np.float32) * 0.1)
            layer.moving_variance.assign(rng.uniform(0.5, 1.5, size=n).astype(np.float32))
            layer.beta.assign(rng.normal(size=n).astype(np.float32) * 0.1)


def _padded(waveform):
    """features.pad_waveform: zeros to a whole number of patches."""
    import tensorflow as tf

    least = WINDOW_SAMPLES
    n = tf.shape(waveform)[0]
    padding = tf.maximum(0, least - n)
    after = tf.maximum(n, least) - least
    hop = 7680
    hops = tf.cast(tf.math.ceil(tf.cast(after, tf.float32) / hop), tf.int32)
    return tf.pad(waveform, [[0, padding + hop * hops - after]])


def _features(waveform):
    import tensorflow as tf

    magnitude = tf.abs(tf.signal.stft(waveform, frame_length=400, frame_step=160,
                                      fft_length=512))
    mel = tf.signal.linear_to_mel_weight_matrix(64, 257, SAMPLE_RATE, 125.0, 7500.0)
    log_mel = tf.math.log(tf.matmul(magnitude, mel) + 0.001)
    return log_mel, tf.signal.frame(log_mel, frame_length=96, frame_step=48, axis=0)


def litert_window(path: Path, int8: bool) -> bytes:
    """The SavedModel as a LiteRT flatbuffer for one window of audio, its
    input shape fixed (converted with the open (None,) input, its tensors
    were dynamic, and XNNPACK took none of the convolutions)."""
    import tensorflow as tf

    saved = tf.saved_model.load(str(path))  # (kept: the function reads its variables)
    signature = saved.signatures["serving_default"]
    window = tf.function(lambda waveform: signature(waveform=waveform)).get_concrete_function(
        tf.TensorSpec([WINDOW_SAMPLES], tf.float32))
    converter = tf.lite.TFLiteConverter.from_concrete_functions([window], saved)
    if int8:
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
    return converter.convert()


class WindowTimer(LiteRTTimer):
    """LiteRTTimer with the waveform input resized to one window."""

    def __init__(self, flatbuffer: bytes, steps: int):
        from ai_edge_litert.interpreter import Interpreter

        self.interp = Interpreter(model_content=flatbuffer, num_threads=1)
        self.interp.allocate_tensors()
        index = self.interp.get_input_details()[0]["index"]
        x = np.random.default_rng(0).normal(size=WINDOW_SAMPLES).astype(np.float32) * 0.1
        self.interp.set_tensor(index, x)
        self.steps = steps
        for _ in range(3):
            self.interp.invoke()
        self.wall, self.cpu = [], []


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--weights-dtype", choices=["f32", "int8"], default="f32")
    args = parser.parse_args(argv)

    from tfaot.frontend.tfenv import quiet_tensorflow
    from tfaot.pipeline import BuildOptions, Progress, build_model

    quiet_tensorflow()
    int8 = args.weights_dtype == "int8"
    with tempfile.TemporaryDirectory() as tmp:
        model, out = Path(tmp) / "yamnet", Path(tmp) / "lib"
        yamnet_saved_model(model)
        build_model(str(model), BuildOptions(out_dir=out, weights_dtype=args.weights_dtype),
                    Progress(False))
        ours = Timer(out, args.steps)
        footprint = ours.lib.manifest["footprint"]
        theirs = WindowTimer(litert_window(model, int8), args.steps)
        (ours_cpu, ours_wall), (lite_cpu, lite_wall) = time_interleaved([ours, theirs],
                                                                          args.repeats)
    row = {"model": "yamnet", "weights_dtype": args.weights_dtype,
           "tfaot_step_cpu_us": ours_cpu, "tfaot_step_wall_us": ours_wall,
           "litert_window_cpu_us": lite_cpu, "litert_window_wall_us": lite_wall,
           "ratio_cpu": ours_cpu / lite_cpu, "ratio_wall": ours_wall / lite_wall,
           "tfaot_weight_bytes": footprint["weight_bytes"],
           "tfaot_ram_bytes": footprint["ram_bytes"]}
    print(f"{'model':8} {'dtype':5} {'tfaot step µs':>14} {'LiteRT window µs':>17} "
          f"{'ratio (CPU)':>11} {'ratio (wall)':>12}")
    print(f"{'yamnet':8} {args.weights_dtype:5} {ours_cpu:14.0f} {lite_cpu:17.0f} "
          f"{row['ratio_cpu']:11.2f} {row['ratio_wall']:12.2f}")
    print(f"tfaot: weights {footprint['weight_bytes']} B, RAM {footprint['ram_bytes']} B "
          "per context; a step is one output patch (7680 new samples)")
    write_results("audio", [row], steps=args.steps, repeats=args.repeats)
    return 0


if __name__ == "__main__":
    sys.exit(main())
