"""Streamed step vs whole-window inference for fixed-window keyword spotters.

For a DS-CNN-style and a CNN-style Keras model with a 49-frame window of 40
features (valid padding in time, as kws_streaming trains models meant to
stream), ARM ML-KWS's CNN (49 x 10 MFCCs, with its linear low-rank layer),
and the DS-CNN frozen into a GraphDef (``ds_cnn_pb``: the graph
streamifier), libraries are built from the same model in the same run:

* streamed (the default build): a sliding window, one step per
  ``frames_per_step`` frames, ring buffers for every conv/pool over time;
* whole window (``fixed_window="whole"``): one inference on all 49 frames
  per step, what firmware without streaming runs every frame;
* whole window with IREE's kernels (``--matvec=iree``), for context: what a
  whole inference cost before tfaot's convolution micro-kernels. The first
  two use them (the default), with ``--weights-dtype`` as given.

All run through ctypes ``step_n`` over many steps (one C call, so Python
overhead is amortised), timed in turn in every repetition; the table gives
CPU µs per step (thread time; medians), µs per input frame, the ratio, and
the ratio in wall time. Target (issue 10): a streamed step <= 15% of a
whole-window inference.

    .venv/bin/python bench/bench_streaming.py [--steps N] [--repeats R]
        [--models NAME ...] [--weights-dtype f32|bf16|f16]
"""
from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

WINDOW, FEATURES = 49, 40
RESULTS = Path(__file__).parent / "results"


def ds_cnn():
    import keras
    from keras import layers as L

    x = keras.Input((WINDOW, FEATURES))
    h = L.Reshape((WINDOW, FEATURES, 1))(x)
    h = L.Conv2D(64, (10, 4), strides=(2, 2), padding="valid")(h)
    h = L.BatchNormalization()(h)
    h = L.ReLU()(h)
    for _ in range(4):
        h = L.ZeroPadding2D(((0, 0), (1, 1)))(h)
        h = L.DepthwiseConv2D((3, 3), padding="valid")(h)
        h = L.BatchNormalization()(h)
        h = L.ReLU()(h)
        h = L.Conv2D(64, (1, 1))(h)
        h = L.BatchNormalization()(h)
        h = L.ReLU()(h)
    h = L.GlobalAveragePooling2D()(h)
    return keras.Model(x, L.Dense(12, activation="softmax")(h))


def cnn():
    import keras
    from keras import layers as L

    x = keras.Input((WINDOW, FEATURES))
    h = L.Reshape((WINDOW, FEATURES, 1))(x)
    h = L.Conv2D(28, (10, 4), activation="relu")(h)
    h = L.MaxPooling2D((1, 2))(h)
    h = L.Conv2D(30, (10, 4), strides=(2, 1), activation="relu")(h)
    h = L.Conv2D(16, (5, 3), activation="relu")(h)
    h = L.Flatten()(h)
    h = L.Dense(128, activation="relu")(h)
    return keras.Model(x, L.Dense(12, activation="softmax")(h))


def arm_cnn():
    """The CNN of ARM's ML-KWS-for-MCU (models.py create_cnn_model, the
    "28 10 4 1 1 30 10 4 2 1 16 128" size): 49 frames of 10 MFCCs, two valid
    convolutions, a linear low-rank layer of 16, then the fully connected
    layers."""
    import keras
    from keras import layers as L

    x = keras.Input((WINDOW, 10))
    h = L.Reshape((WINDOW, 10, 1))(x)
    h = L.Conv2D(28, (10, 4), activation="relu")(h)
    h = L.Conv2D(30, (10, 4), strides=(2, 1), activation="relu")(h)
    h = L.Flatten()(h)
    h = L.Dense(16)(h)  # the linear layer
    h = L.Dense(128, activation="relu")(h)
    return keras.Model(x, L.Dense(12)(h))


MODELS = {"ds_cnn": ds_cnn, "cnn": cnn, "arm_cnn": arm_cnn}
# The same networks as frozen graphs (graph streamifier): "<family>_pb".
GRAPHS = ("ds_cnn",)


def build(model, fixed_window: str, out: Path, name: str, matvec: str | None = None,
          weights_dtype: str = "f32") -> Path:
    from tfaot.backend import build_library
    from tfaot.mlir_import import import_program
    from tfaot.streamify_keras import streamify_keras
    from tfaot.target import make_target

    program = streamify_keras(model, name, "keras", fixed_window=fixed_window)
    work = out / "temps"
    work.mkdir(parents=True, exist_ok=True)
    build_library(import_program(program), program.signature, out, name=name, workdir=work,
                  stream=program.stream, target=make_target("cpu", matvec=matvec,
                                                          weights_dtype=weights_dtype))
    return out


def build_graph(model, fixed_window: str, out: Path, name: str, matvec: str | None = None,
                weights_dtype: str = "f32") -> Path:
    """``model`` frozen into a GraphDef (as a TF2 export would), built by the CLI path."""
    import tensorflow as tf
    from tensorflow.python.framework.convert_to_constants import (
        convert_variables_to_constants_v2)

    from tfaot.pipeline import BuildOptions, Progress, build_model

    spec = tf.TensorSpec((1, WINDOW, FEATURES), tf.float32, name="x")
    frozen = convert_variables_to_constants_v2(
        tf.function(lambda x: model(x, training=False)).get_concrete_function(spec))
    path = out.parent / f"{name}.pb"
    path.write_bytes(frozen.graph.as_graph_def().SerializeToString())
    build_model(str(path), BuildOptions(out_dir=out, whole_window=fixed_window == "whole",
                                        matvec=matvec, weights_dtype=weights_dtype),
                Progress(False))
    return out


class Timer:
    """``step_n`` over ``steps`` steps of one library, repeatable."""

    def __init__(self, lib_dir: Path, steps: int):
        from tfaot import harness

        self.lib = harness.load(lib_dir)
        self.xs = np.random.default_rng(0).normal(
            size=(steps, *self.lib.input_shape)).astype(np.float32)
        self.lib.step_n(self.xs[: min(steps, 50)])  # warm up
        self.wall, self.cpu = [], []

    def run(self) -> None:
        """One timed pass: µs per step, wall and thread CPU time (the C loop
        runs in this thread, so CPU time leaves out other processes' share)."""
        self.lib.reset()
        wall, cpu = time.perf_counter(), time.thread_time()
        self.lib.step_n(self.xs)
        n = len(self.xs)
        self.cpu.append((time.thread_time() - cpu) / n * 1e6)
        self.wall.append((time.perf_counter() - wall) / n * 1e6)


def time_interleaved(timers: list[Timer], repeats: int) -> list[tuple[float, float]]:
    """(median CPU µs, median wall µs) per step of each library, the libraries
    timed in turn in every repetition so that machine load hits all alike."""
    for _ in range(repeats):
        for timer in timers:
            timer.run()
    return [(float(np.median(t.cpu)), float(np.median(t.wall))) for t in timers]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--models", nargs="+", metavar="NAME",
                        help="only these rows (ds_cnn, cnn, arm_cnn, ds_cnn_pb)")
    parser.add_argument("--weights-dtype", choices=["f32", "bf16", "f16"], default="f32",
                        help="the micro-kernels' weights in the streamed and whole-window "
                             "builds (the IREE-kernel build stays f32)")
    args = parser.parse_args(argv)

    import keras

    from tfaot.tfenv import quiet_tensorflow

    quiet_tensorflow()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        cases = [(f, f, build) for f in MODELS] + [(f"{f}_pb", f, build_graph) for f in GRAPHS]
        cases = [case for case in cases if not args.models or case[0] in args.models]
        for family, factory, builder in cases:
            keras.utils.set_random_seed(1)
            model = MODELS[factory]()
            dtype = {"weights_dtype": args.weights_dtype}
            streamed = builder(model, "stream", Path(tmp) / f"{family}_stream", f"{family}_s",
                               **dtype)
            whole = builder(model, "whole", Path(tmp) / f"{family}_whole", f"{family}_w", **dtype)
            whole_iree = builder(model, "whole", Path(tmp) / f"{family}_whole_iree",
                                 f"{family}_wi", matvec="iree")
            manifest = json.loads((streamed / f"{family}_s.json").read_text())
            from tfaot.program import StreamInfo

            stream = StreamInfo.from_json(manifest["stream"])
            fewer = max(args.steps // 10, 50)
            (us_step, wall_step), (us_whole, wall_whole), (us_whole_iree, _) = time_interleaved(
                [Timer(streamed, args.steps), Timer(whole, fewer), Timer(whole_iree, fewer)],
                args.repeats)
            frames = stream.frames_per_step
            rows.append({
                "model": family, "window": WINDOW, "features": int(model.inputs[0].shape[-1]),
                "frames_per_step": frames, "recompute": bool(stream.recompute),
                "params": int(model.count_params()),
                "state_bytes": sum(4 * int(np.prod(s["shape"])) for s in manifest["state"]),
                "us_per_step": us_step, "us_per_frame": us_step / frames,
                "us_whole_window": us_whole, "step_vs_whole": us_step / us_whole,
                "frame_vs_whole": us_step / frames / us_whole,
                "us_whole_window_iree_kernels": us_whole_iree,
                "wall_us_per_step": wall_step, "wall_us_whole_window": wall_whole,
                "wall_step_vs_whole": wall_step / wall_whole,
            })
    header = (f"{'model':<9} {'frames/step':>11} {'µs/step':>9} {'µs/frame':>9} "
              f"{'µs whole':>9} {'step/whole':>10} {'frame/whole':>11} {'wall step/whole':>15} "
              f"{'state B':>8} {'µs whole, IREE kernels':>22}")
    print(header)
    print("-" * len(header))
    for r in rows:
        print(f"{r['model']:<9} {r['frames_per_step']:>11} {r['us_per_step']:>9.1f} "
              f"{r['us_per_frame']:>9.1f} {r['us_whole_window']:>9.1f} "
              f"{r['step_vs_whole']:>10.1%} {r['frame_vs_whole']:>11.1%} "
              f"{r['wall_step_vs_whole']:>15.1%} {r['state_bytes']:>8} "
              f"{r['us_whole_window_iree_kernels']:>22.1f}")
    print("CPU µs per step (thread time), medians of the interleaved repetitions; "
          "target: a streamed step <= 15% of a whole-window inference")
    RESULTS.mkdir(exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    path = RESULTS / f"streaming-{stamp}.json"
    path.write_text(json.dumps({"machine": platform.machine(), "python": sys.version.split()[0],
                                "steps": args.steps, "repeats": args.repeats,
                                "weights_dtype": args.weights_dtype, "rows": rows},
                               indent=2))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
