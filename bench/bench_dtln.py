"""DTLN's real-time SavedModel, stateful, one block a call: tfaot against LiteRT.

DTLN (Westhausen & Meyer, 2020, github.com/breizhn/DTLN) publishes its
real-time speech enhancer as a SavedModel of a stateful tf_keras model: a
block of 512 samples in (every 128 samples, 8 ms at 16 kHz), its rFFT
magnitude masked by two LSTM(128) layers run over a time axis of one frame
the model makes, the inverse rFFT, a 1×1 Conv1D encoder (256), instant
layer normalization, two more LSTM(128) layers masking it and a 1×1
Conv1D decoder back to 512 samples; the LSTMs keep their state in
variables between calls, and the caller overlap-adds the blocks. The model
here is that architecture with random weights (no weights are downloaded).

* tfaot: ``tfaot build`` of the SavedModel (the variables become the
  library's state, each call one inference: streamify_graph/single_pass.py);
* LiteRT: the model cannot be converted whole (its angle, complex exp and
  inverse rFFT are TF Select ops, which LiteRT's runtime lacks), so it runs
  as DTLN's own TF-Lite release does: two models with the LSTMs' state in
  resource variables (``experimental_enable_resource_variables``), the
  magnitude to the first mask and the masked frame to the output block,
  the FFTs in numpy between them (XNNPACK, 1 thread); its time is the two
  ``invoke()`` calls alone. With ``--weights-dtype int8``: tfaot's int8
  build and LiteRT's dynamic-range int8 models (``Optimize.DEFAULT``).

Both are checked against TensorFlow calling the SavedModel once a block
(its variables carrying the state) over ``--check`` blocks. The table gives
CPU µs per block (thread time; medians of runs timed in turn), the ratio
tfaot / LiteRT, wall time beside. Needs the bench extra (ai-edge-litert).

    .venv/bin/python bench/bench_dtln.py [--steps N] [--repeats R]
        [--weights-dtype f32|int8] [--check N]
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from bench_streaming import Timer, time_interleaved, write_results

BLOCK, UNITS, ENCODER = 512, 128, 256


def dtln_models():
    """DTLN's stateful real-time model (module docstring) and the two parts
    of it that LiteRT runs (its rFFT, angle and inverse rFFT are TF Select
    ops, which LiteRT's own runtime lacks; DTLN's TF-Lite models are split
    so too, the FFTs done by the caller): the magnitude to its mask, and
    the estimated frame to the output block. The parts share the model's
    layers, so they hold the same weights."""
    import tensorflow as tf
    import tf_keras

    L = tf_keras.layers
    tf.random.set_seed(0)

    class Spectrum(L.Layer):
        def call(self, block):
            spectrum = tf.signal.rfft(tf.expand_dims(block, axis=1))
            return tf.abs(spectrum), tf.math.angle(spectrum)

    class Inverse(L.Layer):
        def call(self, magnitude, phase):
            return tf.signal.irfft(tf.cast(magnitude, tf.complex64) *
                                   tf.exp(1j * tf.cast(phase, tf.complex64)))

    class InstantNorm(L.Layer):
        def build(self, shape):
            self.gamma = self.add_weight(name="gamma", shape=shape[-1:], initializer="ones")
            self.beta = self.add_weight(name="beta", shape=shape[-1:], initializer="zeros")

        def call(self, x):
            mean = tf.reduce_mean(x, axis=-1, keepdims=True)
            variance = tf.reduce_mean(tf.square(x - mean), axis=-1, keepdims=True)
            return (x - mean) / tf.sqrt(variance + 1e-7) * self.gamma + self.beta

    class LogOf(L.Layer):
        def call(self, x):
            return tf.math.log(x + 1e-7)

    def masker(size):
        layers = [L.LSTM(UNITS, return_sequences=True, stateful=True) for _ in range(2)]
        layers += [L.Dense(size), L.Activation("sigmoid")]

        def apply(x):
            for layer in layers:
                x = layer(x)
            return x
        return apply

    first, second = masker(BLOCK // 2 + 1), masker(ENCODER)
    norm1, norm2 = InstantNorm(), InstantNorm()
    encoder = L.Conv1D(ENCODER, 1, use_bias=False)
    decoder = L.Conv1D(BLOCK, 1, padding="causal", use_bias=False)

    def first_mask(magnitude):
        return first(norm1(LogOf()(magnitude)))

    def second_half(frames):
        encoded = encoder(frames)
        return decoder(L.Multiply()([encoded, second(norm2(encoded))]))

    block = L.Input(batch_shape=(1, BLOCK))
    magnitude, phase = Spectrum()(block)
    frames = Inverse()(L.Multiply()([magnitude, first_mask(magnitude)]), phase)
    whole = tf_keras.Model(block, second_half(frames))
    part1_in = L.Input(batch_shape=(1, 1, BLOCK // 2 + 1))
    part2_in = L.Input(batch_shape=(1, 1, BLOCK))
    return (whole, tf_keras.Model(part1_in, first_mask(part1_in)),
            tf_keras.Model(part2_in, second_half(part2_in)))


def called_per_block(path: Path, blocks: np.ndarray) -> np.ndarray:
    """TensorFlow: the SavedModel called once a block, its variables carrying
    the state (before the build: freezing it in this process leaves its
    functions unrunnable)."""
    import tensorflow as tf

    step = tf.saved_model.load(str(path)).signatures["serving_default"]
    key = next(iter(step.structured_input_signature[1]))
    return np.stack([list(step(**{key: tf.constant(b)}).values())[0].numpy().reshape(-1)
                     for b in blocks])


def litert_model(model, int8: bool) -> bytes:
    """``model`` for LiteRT, its state variables kept as resource variables."""
    import tensorflow as tf

    converter = tf.lite.TFLiteConverter.from_keras_model(model)
    converter.experimental_enable_resource_variables = True
    if int8:
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
    return converter.convert()


class LiteRTPipeline:
    """DTLN on LiteRT as its real-time script runs it: the block's rFFT
    (numpy), the first part, the inverse rFFT of the masked spectrum
    (numpy), the second part. Timed: the two ``invoke()`` calls only (the
    FFTs and the Python between them left out: LiteRT's time is a lower
    bound). A fresh pair of interpreters is the initial state (their
    variables as converted)."""

    def __init__(self, parts: list[bytes], steps: int):
        self.parts, self.steps, self.wall, self.cpu = parts, steps, [], []
        self.reset()
        block = np.random.default_rng(0).normal(size=(1, BLOCK)).astype(np.float32) * 0.1
        for _ in range(5):  # warm up (XNNPACK packs its weights on the first call)
            self.output(block)

    def reset(self) -> None:
        from ai_edge_litert.interpreter import Interpreter

        self.interps = [Interpreter(model_content=p, num_threads=1) for p in self.parts]
        for interp in self.interps:
            interp.allocate_tensors()

    def _invoke(self, interp, x: np.ndarray) -> np.ndarray:
        interp.set_tensor(interp.get_input_details()[0]["index"], x)
        interp.invoke()
        return interp.get_tensor(interp.get_output_details()[0]["index"])

    def output(self, block: np.ndarray) -> np.ndarray:
        spectrum = np.fft.rfft(block.reshape(-1))
        magnitude = np.abs(spectrum).astype(np.float32).reshape(1, 1, -1)
        mask = self._invoke(self.interps[0], magnitude).reshape(-1)
        frame = np.fft.irfft(spectrum * mask).astype(np.float32).reshape(1, 1, -1)
        return self._invoke(self.interps[1], frame)

    def run(self) -> None:
        """One timed pass over the inputs the last ``output`` set."""
        first, second = (interp.invoke for interp in self.interps)
        wall, cpu = time.perf_counter(), time.thread_time()
        for _ in range(self.steps):
            first()
            second()
        self.cpu.append((time.thread_time() - cpu) / self.steps * 1e6)
        self.wall.append((time.perf_counter() - wall) / self.steps * 1e6)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=400, help="blocks per timed run")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--check", type=int, default=200, help="blocks compared with TF")
    parser.add_argument("--weights-dtype", choices=("f32", "int8"), default="f32")
    args = parser.parse_args(argv)
    from tfaot.cli import main as tfaot_main

    int8 = args.weights_dtype == "int8"
    import tensorflow as tf

    with tempfile.TemporaryDirectory() as tmp:
        saved, out = Path(tmp) / "dtln", Path(tmp) / "lib"
        whole, part1, part2 = dtln_models()
        lite = LiteRTPipeline([litert_model(part1, int8), litert_model(part2, int8)],
                              args.steps)
        tf.saved_model.save(whole, str(saved))
        blocks = np.random.default_rng(1).normal(
            size=(args.check, 1, BLOCK)).astype(np.float32) * 0.1
        want = called_per_block(saved, blocks)
        if tfaot_main(["-q", "build", str(saved), "-o", str(out),
                       *(["--weights-dtype", "int8"] if int8 else [])]) != 0:
            return 1
        ours = Timer(out, args.steps)
        ours.lib.reset()
        our_error = float(np.abs(ours.lib.step_n(blocks).reshape(len(blocks), -1)
                                 - want).max())
        lite.reset()
        lite_error = float(np.abs(np.stack([lite.output(b).reshape(-1) for b in blocks])
                                  - want).max())
        (ours_cpu, ours_wall), (lite_cpu, lite_wall) = time_interleaved([ours, lite],
                                                                        args.repeats)
        footprint = ours.lib.manifest["footprint"]
    row = {"model": "dtln", "weights_dtype": args.weights_dtype,
           "tfaot_cpu_us": ours_cpu, "tfaot_wall_us": ours_wall,
           "litert_cpu_us": lite_cpu, "litert_wall_us": lite_wall,
           "ratio_cpu": ours_cpu / lite_cpu, "ratio_wall": ours_wall / lite_wall,
           "tfaot_error": our_error, "litert_error": lite_error, "blocks_checked": args.check,
           "tfaot_weight_bytes": footprint["weight_bytes"],
           "tfaot_ram_bytes": footprint["ram_bytes"]}
    print(f"{'model':6} {'dtype':5} {'tfaot µs/block':>15} {'LiteRT µs/block':>16} "
          f"{'tfaot/LiteRT':>13} {'wall ratio':>10} {'tfaot err':>10} {'LiteRT err':>10}")
    print(f"{'dtln':6} {args.weights_dtype:5} {ours_cpu:15.1f} {lite_cpu:16.1f} "
          f"{ours_cpu / lite_cpu:13.2f} {ours_wall / lite_wall:10.2f} {our_error:10.2e} "
          f"{lite_error:10.2e}")
    print(f"tfaot: weights {footprint['weight_bytes']} B, RAM {footprint['ram_bytes']} B per "
          f"context; errors: max abs vs TensorFlow over {args.check} blocks")
    write_results("dtln", [row], steps=args.steps, repeats=args.repeats,
                  weights_dtype=args.weights_dtype)
    return 0


if __name__ == "__main__":
    sys.exit(main())
