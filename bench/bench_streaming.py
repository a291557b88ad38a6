"""Streamed step vs whole-window inference for fixed-window keyword spotters, and LiteRT.

Models (a 49-frame window, valid padding in time, as kws_streaming trains
models meant to stream): a DS-CNN-style and a CNN-style Keras model on 40
features, ARM ML-KWS's CNN (49 x 10 MFCCs, with its linear low-rank layer),
kws_streaming's ``cnn`` and ``ds_cnn`` as its paper trains them, with their
dilated convolutions (49 x 20 MFCCs: ``kws_cnn``, ``kws_ds_cnn``), and the
DS-CNN and kws CNN frozen into GraphDefs (``*_pb``: the graph streamifier).
From the same model in the same run:

* streamed (the default build): a sliding window, one step per
  ``frames_per_step`` frames, ring buffers for every conv/pool over time;
* whole window (``fixed_window="whole"``): one inference on all 49 frames
  per step, what firmware without streaming runs every frame;
* LiteRT's whole-window inference (ai-edge-litert, XNNPACK, 1 thread,
  ``invoke()``): the peer;
* with ``--weights-dtype int8``, also LiteRT's dynamic-range int8 model
  (the converter's ``Optimize.DEFAULT``: what a LiteRT user deploying int8
  runs; XNNPACK takes its convolutions), the int8 peer, and the max abs
  error against TensorFlow of tfaot's int8 whole window and of LiteRT's
  int8, over 20 windows;
* with ``--iree-kernels``, also the whole window built with IREE's kernels
  (``--matvec=iree``), for context: what a whole inference cost before
  tfaot's convolution micro-kernels. The tfaot builds above use them (the
  default), with ``--weights-dtype`` as given.

tfaot's libraries run through ctypes ``step_n`` over many steps (one C call,
so Python overhead is amortised), all runners timed in turn in every
repetition; the table gives CPU µs per step (thread time; medians), the
ratios to LiteRT's whole window, and those ratios in wall time. Targets
(issue 19): a streamed step <= 15% of LiteRT's whole-window inference, and
tfaot's whole window <= LiteRT's. Needs the bench extra (ai-edge-litert).

    .venv/bin/python bench/bench_streaming.py [--steps N] [--repeats R]
        [--models NAME ...] [--weights-dtype f32|bf16|f16|int8] [--iree-kernels]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

# numpy's OpenBLAS worker threads spin after each call: on a 2-core machine
# they took CPU from the loops timed here (about 6% of samples)
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

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


#: kws_streaming's models take 49 frames of 20 MFCCs (40 ms windows, 20 ms
#: stride: kws_experiments_paper_12_labels.md); their Stream wrappers are
#: left out (tfaot streams the plain layers itself), dropout too.
KWS_FEATURES = 20


def kws_cnn():
    """kws_streaming's ``cnn`` with its default flags: seven valid Conv2D,
    three of them dilated (2, 1) in time, Flatten, Dense 128 (linear), 256, 12."""
    import keras
    from keras import layers as L

    x = keras.Input((WINDOW, KWS_FEATURES))
    h = L.Reshape((WINDOW, KWS_FEATURES, 1))(x)
    for filters, kernel, dilation in ((64, (3, 3), (1, 1)), (64, (5, 3), (1, 1)),
                                      (64, (5, 3), (2, 1)), (64, (5, 3), (1, 1)),
                                      (128, (5, 2), (2, 1)), (64, (5, 1), (1, 1)),
                                      (128, (10, 1), (2, 1))):
        h = L.Conv2D(filters, kernel, dilation_rate=dilation, activation="relu")(h)
    h = L.Flatten()(h)
    h = L.Dense(128)(h)
    h = L.Dense(256, activation="relu")(h)
    return keras.Model(x, L.Dense(12)(h))


def kws_ds_cnn():
    """kws_streaming's ``ds_cnn`` as its ds_cnn_stream experiment trains it:
    Conv2D(300, (3, 3), dilation (2, 1)), then five depthwise (dilations (1, 1),
    (2, 2), (1, 1), (2, 2), (1, 1)) + pointwise(300) blocks, BatchNorm without
    scale, valid padding, average pooling over the rest, Dense(12)."""
    import keras
    from keras import layers as L

    x = keras.Input((WINDOW, KWS_FEATURES))
    h = L.Reshape((WINDOW, KWS_FEATURES, 1))(x)
    h = L.Conv2D(300, (3, 3), dilation_rate=(2, 1))(h)
    h = L.ReLU()(L.BatchNormalization(scale=False)(h))
    for kernel, dilation in (((3, 3), (1, 1)), ((3, 3), (2, 2)), ((10, 3), (1, 1)),
                             ((5, 3), (2, 2)), ((10, 3), (1, 1))):
        h = L.DepthwiseConv2D(kernel, dilation_rate=dilation)(h)
        h = L.ReLU()(L.BatchNormalization(scale=False)(h))
        h = L.Conv2D(300, (1, 1))(h)
        h = L.ReLU()(L.BatchNormalization(scale=False)(h))
    h = L.AveragePooling2D((int(h.shape[1]), int(h.shape[2])))(h)
    h = L.Flatten()(h)
    return keras.Model(x, L.Dense(12)(h))


MODELS = {"ds_cnn": ds_cnn, "cnn": cnn, "arm_cnn": arm_cnn, "kws_cnn": kws_cnn,
          "kws_ds_cnn": kws_ds_cnn}
# The same networks as frozen graphs (graph streamifier): "<family>_pb".
GRAPHS = ("ds_cnn", "kws_cnn")


def build(model, fixed_window: str, out: Path, name: str, matvec: str | None = None,
          weights_dtype: str = "f32") -> Path:
    from tfaot.backend.build import build_library
    from tfaot.lower.mlir_import import import_program
    from tfaot.streamify_keras import streamify_keras
    from tfaot.target_options import make_target

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

    spec = tf.TensorSpec((1, *model.inputs[0].shape[1:]), tf.float32, name="x")
    frozen = convert_variables_to_constants_v2(
        tf.function(lambda x: model(x, training=False)).get_concrete_function(spec))
    path = out.parent / f"{name}.pb"
    path.write_bytes(frozen.graph.as_graph_def().SerializeToString())
    build_model(str(path), BuildOptions(out_dir=out, fixed_window=fixed_window,
                                        matvec=matvec, weights_dtype=weights_dtype),
                Progress(False))
    return out


def litert_whole(model, int8: bool = False) -> bytes:
    """One whole-window inference of ``model`` as a LiteRT flatbuffer (frozen
    weights: the converter folds SpaceToBatchND/BatchToSpaceND pairs into
    dilated convolutions itself); ``int8``: dynamic-range quantized."""
    import tensorflow as tf
    from tensorflow.python.framework.convert_to_constants import (
        convert_variables_to_constants_v2)

    spec = tf.TensorSpec((1, *model.inputs[0].shape[1:]), tf.float32)
    frozen = convert_variables_to_constants_v2(
        tf.function(lambda x: model(x, training=False)).get_concrete_function(spec))
    converter = tf.lite.TFLiteConverter.from_concrete_functions([frozen])
    if int8:
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
    return converter.convert()


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


class LiteRTTimer(Timer):
    """``invoke()`` of LiteRT's interpreter (XNNPACK, 1 thread) on one
    window, ``steps`` times per pass (the Python call costs ~1 µs: noise
    next to a whole window)."""

    def __init__(self, flatbuffer: bytes, steps: int):
        from ai_edge_litert.interpreter import Interpreter

        self.interp = Interpreter(model_content=flatbuffer, num_threads=1)
        self.interp.allocate_tensors()
        detail = self.interp.get_input_details()[0]
        x = np.random.default_rng(0).normal(size=detail["shape"]).astype(np.float32)
        self.interp.set_tensor(detail["index"], x)
        self.steps = steps
        for _ in range(5):  # warm up (XNNPACK packs its weights on the first call)
            self.interp.invoke()
        self.wall, self.cpu = [], []

    def output(self, x: np.ndarray) -> np.ndarray:
        self.interp.set_tensor(self.interp.get_input_details()[0]["index"], x)
        self.interp.invoke()
        return self.interp.get_tensor(self.interp.get_output_details()[0]["index"])

    def run(self) -> None:
        invoke = self.interp.invoke
        wall, cpu = time.perf_counter(), time.thread_time()
        for _ in range(self.steps):
            invoke()
        self.cpu.append((time.thread_time() - cpu) / self.steps * 1e6)
        self.wall.append((time.perf_counter() - wall) / self.steps * 1e6)


def time_interleaved(timers: list[Timer], repeats: int) -> list[tuple[float, float]]:
    """(median CPU µs, median wall µs) per step of each runner, the runners
    timed in turn in every repetition so that machine load hits all alike."""
    for _ in range(repeats):
        for timer in timers:
            timer.run()
    return [(float(np.median(t.cpu)), float(np.median(t.wall))) for t in timers]


def whole_vs_litert(whole: Timer, lite: LiteRTTimer) -> float:
    """Max abs difference of tfaot's whole window and LiteRT's on one window."""
    x = whole.xs[:1]
    whole.lib.reset()
    return float(np.abs(whole.lib.step_n(x)[0] - lite.output(x[0])).max())


def errors_vs_tf(model, whole: Timer, lite: LiteRTTimer, windows: int = 20) -> tuple[float, float]:
    """Max abs error against TensorFlow of tfaot's whole window and of ``lite``."""
    xs = whole.xs[:windows]
    want = np.concatenate([np.asarray(model(x, training=False)).reshape(1, -1)
                           for x in xs])
    whole.lib.reset()
    ours = whole.lib.step_n(xs).reshape(len(xs), -1)
    theirs = np.concatenate([lite.output(x).reshape(1, -1) for x in xs])
    return float(np.abs(ours - want).max()), float(np.abs(theirs - want).max())


def measure(family: str, factory: str, builder, tmp: Path, args) -> dict:
    """Builds one model's libraries and LiteRT runner, times them interleaved."""
    import keras

    from tfaot.program import StreamInfo

    keras.utils.set_random_seed(1)
    model = MODELS[factory]()
    dtype = {"weights_dtype": args.weights_dtype}
    streamed = builder(model, "stream", tmp / f"{family}_stream", f"{family}_s", **dtype)
    whole = builder(model, "whole", tmp / f"{family}_whole", f"{family}_w", **dtype)
    manifest = json.loads((streamed / f"{family}_s.json").read_text())
    stream = StreamInfo.from_json(manifest["stream"])
    fewer = max(args.steps // 10, 50)
    timers = [Timer(streamed, args.steps), Timer(whole, fewer),
              LiteRTTimer(litert_whole(model), fewer)]
    int8 = args.weights_dtype == "int8"
    if int8:
        timers.append(LiteRTTimer(litert_whole(model, int8=True), fewer))
    if args.iree_kernels:
        timers.append(Timer(builder(model, "whole", tmp / f"{family}_whole_iree",
                                    f"{family}_wi", matvec="iree"), fewer))
    times = time_interleaved(timers, args.repeats)
    (us_step, wall_step), (us_whole, wall_whole), (us_lite, wall_lite) = times[:3]
    frames = stream.frames_per_step
    int8_row = {}
    if int8:
        err_ours, err_lite = errors_vs_tf(model, timers[1], timers[3])
        int8_row = {"us_litert_int8_whole_window": times[3][0],
                    "whole_vs_litert_int8": us_whole / times[3][0],
                    "max_abs_err_whole_vs_tf": err_ours, "max_abs_err_litert_int8_vs_tf": err_lite}
    return int8_row | {
        "model": family, "window": WINDOW, "features": int(model.inputs[0].shape[-1]),
        "frames_per_step": frames, "recompute": bool(stream.recompute),
        "params": int(model.count_params()),
        "state_bytes": sum(4 * int(np.prod(s["shape"])) for s in manifest["state"]),
        "us_per_step": us_step, "us_per_frame": us_step / frames,
        "us_whole_window": us_whole, "us_litert_whole_window": us_lite,
        "step_vs_whole": us_step / us_whole, "frame_vs_whole": us_step / frames / us_whole,
        "step_vs_litert": us_step / us_lite, "whole_vs_litert": us_whole / us_lite,
        "us_whole_window_iree_kernels": times[-1][0] if args.iree_kernels else None,
        "wall_us_per_step": wall_step, "wall_us_whole_window": wall_whole,
        "wall_us_litert_whole_window": wall_lite,
        "wall_step_vs_whole": wall_step / wall_whole,
        "wall_step_vs_litert": wall_step / wall_lite, "wall_whole_vs_litert": wall_whole / wall_lite,
        "max_abs_diff_whole_vs_litert": whole_vs_litert(timers[1], timers[2]),
        "targets_met": us_step <= 0.15 * us_lite and us_whole <= us_lite,
    }


def print_table(rows: list[dict]) -> None:
    header = (f"{'model':<10} {'frames/step':>11} {'µs/step':>9} {'µs whole':>9} "
              f"{'µs LiteRT':>9} {'step/LiteRT':>11} {'whole/LiteRT':>12} {'step/whole':>10} "
              f"{'wall step/LiteRT':>16} {'wall whole/LiteRT':>17} {'met':>4}"
              + (f" {'µs whole, IREE kernels':>22}" if rows and
                 rows[0]["us_whole_window_iree_kernels"] is not None else ""))
    int8 = bool(rows) and "us_litert_int8_whole_window" in rows[0]
    if int8:
        header += (f" {'µs LiteRT int8':>14} {'whole/LiteRT int8':>17} {'err':>8} "
                   f"{'LiteRT err':>10}")
    print(header)
    print("-" * len(header))
    for r in rows:
        iree = r["us_whole_window_iree_kernels"]
        int8_cells = (f" {r['us_litert_int8_whole_window']:>14.1f} "
                      f"{r['whole_vs_litert_int8']:>17.2f} {r['max_abs_err_whole_vs_tf']:>8.1e} "
                      f"{r['max_abs_err_litert_int8_vs_tf']:>10.1e}" if int8 else "")
        print(f"{r['model']:<10} {r['frames_per_step']:>11} {r['us_per_step']:>9.1f} "
              f"{r['us_whole_window']:>9.1f} {r['us_litert_whole_window']:>9.1f} "
              f"{r['step_vs_litert']:>11.1%} {r['whole_vs_litert']:>12.2f} "
              f"{r['step_vs_whole']:>10.1%} {r['wall_step_vs_litert']:>16.1%} "
              f"{r['wall_whole_vs_litert']:>17.2f} {'yes' if r['targets_met'] else 'no':>4}"
              + (f" {iree:>22.1f}" if iree is not None else "") + int8_cells)
    print("CPU µs per step (thread time), medians of the interleaved repetitions; LiteRT: "
          "ai-edge-litert, XNNPACK, 1 thread, one whole-window inference. Targets: a "
          "streamed step <= 15% of LiteRT's whole window, tfaot's whole window <= LiteRT's")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--models", nargs="+", metavar="NAME",
                        help="only these rows (" + ", ".join(
                            [*MODELS, *(f"{g}_pb" for g in GRAPHS)]) + ")")
    parser.add_argument("--weights-dtype", choices=["f32", "bf16", "f16", "int8"],
                        default="f32",
                        help="the micro-kernels' weights in the streamed and whole-window "
                             "builds (the IREE-kernel build stays f32); int8 adds LiteRT's "
                             "int8 model and the errors against TensorFlow")
    parser.add_argument("--iree-kernels", action="store_true",
                        help="also time the whole window built with IREE's kernels "
                             "(--matvec=iree), for context")
    args = parser.parse_args(argv)

    from tfaot.frontend.tfenv import quiet_tensorflow

    quiet_tensorflow()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        cases = [(f, f, build) for f in MODELS] + [(f"{f}_pb", f, build_graph) for f in GRAPHS]
        cases = [case for case in cases if not args.models or case[0] in args.models]
        for family, factory, builder in cases:
            rows.append(measure(family, factory, builder, Path(tmp), args))
            print(f"measured {family}", file=sys.stderr, flush=True)
    print_table(rows)
    write_results("streaming", rows, steps=args.steps, repeats=args.repeats,
                  weights_dtype=args.weights_dtype)
    return 0


def write_results(kind: str, rows: list, path: Path | None = None, **settings) -> Path:
    """The run's ``rows`` with the machine and the run's ``settings`` as
    JSON, at ``path`` or bench/results/KIND-<date>-<time>.json; says where."""
    RESULTS.mkdir(exist_ok=True)
    path = path or RESULTS / f"{kind}-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(json.dumps({"machine": platform.machine(), "cpu": _cpu_name(),
                                "python": sys.version.split()[0], **settings, "rows": rows},
                               indent=2))
    print(f"wrote {path}")
    return path


def _cpu_name() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor()


if __name__ == "__main__":
    sys.exit(main())
