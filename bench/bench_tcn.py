"""Dilated causal convolutions streamed (WaveNet, TCN), against LiteRT on the receptive field.

Models (random weights, one frame a step, open time axis):

* ``wavenet``: WaveNet's gated residual stack, 32 channels, kernel 2,
  dilations 1, 2, 4, ..., 512 (receptive field 1024 frames), skip
  connections summed into a 1x1 head;
* ``tcn``: six causal Conv1D(64, 3) with dilations 1 to 32 and residual
  sums (receptive field 127 frames), a Dense head;
* ``wavenet_3x``: the WaveNet stack three times over (dilations 1 to 512
  thrice, receptive field 3070 frames), 16 channels.

From the same model in the same run:

* tfaot's step (the default build): the dilated layers whose taps skip most
  of their kept frames gather them from circular buffers
  (streamify_keras/circular.py);
* tfaot's step with ordered ring buffers only (every kept frame copied into
  the window and shifted each step: what the build did before);
* LiteRT (ai-edge-litert, XNNPACK, 1 thread, ``invoke()``) on the model
  over its receptive field, returning the newest frame's output: what an
  application without streaming runs for each new frame.

The table gives CPU µs per step (thread time; medians of runs timed in
turn), wall time beside, the ratio to LiteRT, and each tfaot build's
context (RAM) size; "diff" is the largest difference between the two
tfaot builds' outputs over the timed steps (the same stream). Needs the
bench extra (ai-edge-litert).

    .venv/bin/python bench/bench_tcn.py [--steps N] [--repeats R] [--models NAME ...]
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

from bench_streaming import (LiteRTTimer, Timer, litert_whole, time_interleaved,  # noqa: E402
                             write_results)


def wavenet(length=None, channels=32, stacks=1):
    import keras
    from keras import layers as L

    x = keras.Input((length, channels), batch_size=1)
    h, skips = x, []
    for d in [2 ** i for i in range(10)] * stacks:
        f = L.Conv1D(channels, 2, padding="causal", dilation_rate=d, activation="tanh")(h)
        g = L.Conv1D(channels, 2, padding="causal", dilation_rate=d, activation="sigmoid")(h)
        z = L.Multiply()([f, g])
        skips.append(L.Conv1D(channels, 1)(z))
        h = L.Add()([h, L.Conv1D(channels, 1)(z)])
    y = L.Conv1D(16, 1)(L.Activation("relu")(L.Add()(skips)))
    return keras.Model(x, y)


def tcn(length=None):
    import keras
    from keras import layers as L

    x = keras.Input((length, 64), batch_size=1)
    h = x
    for d in (1, 2, 4, 8, 16, 32):
        h = L.Add()([h, L.Conv1D(64, 3, padding="causal", dilation_rate=d,
                                 activation="relu")(h)])
    return keras.Model(x, L.Dense(8)(h))


MODELS = {"wavenet": (wavenet, 1024), "tcn": (tcn, 127),
          "wavenet_3x": (lambda length=None: wavenet(length, 16, 3), 3070)}


def build(model, out: Path, name: str, taps: bool) -> Path:
    """The default build of ``model``, or one with ordered ring buffers only."""
    from tfaot.pipeline import BuildOptions, Progress, build_model
    from tfaot.streamify_keras import circular

    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}.keras"
    model.save(path)
    saved = circular.TAPS_MIN_RATIO
    circular.TAPS_MIN_RATIO = saved if taps else 1 << 62
    try:
        built = build_model(str(path), BuildOptions(out_dir=out / name), Progress(False))
    finally:
        circular.TAPS_MIN_RATIO = saved
    return getattr(built, "path", built)


def litert_newest(factory, model, field: int) -> bytes:
    """The model over its receptive field, the newest frame's output, as a
    LiteRT flatbuffer (the streamed model's weights)."""
    import keras

    fixed = factory(field)
    fixed.set_weights(model.get_weights())
    return litert_whole(keras.Model(fixed.inputs, fixed.outputs[0][:, -1]))


def measure(name: str, tmp: Path, args) -> dict:
    import keras

    factory, field = MODELS[name]
    keras.utils.set_random_seed(0)
    model = factory()
    taps = Timer(build(model, tmp / "taps", name, True), args.steps)
    ordered = Timer(build(model, tmp / "ordered", name, False), args.steps)
    lite = LiteRTTimer(litert_newest(factory, model, field), max(50, args.steps // 20))
    (t_cpu, t_wall), (o_cpu, o_wall), (l_cpu, l_wall) = time_interleaved(
        [taps, ordered, lite], args.repeats)
    taps.lib.reset()
    ordered.lib.reset()
    diff = float(np.abs(taps.lib.step_n(taps.xs) - ordered.lib.step_n(taps.xs)).max())
    return {"model": name, "receptive_field": field,
            "taps_cpu_us": t_cpu, "taps_wall_us": t_wall,
            "ordered_cpu_us": o_cpu, "ordered_wall_us": o_wall,
            "litert_cpu_us": l_cpu, "litert_wall_us": l_wall,
            "taps_ctx_bytes": taps.lib.manifest["ctx_size"],
            "ordered_ctx_bytes": ordered.lib.manifest["ctx_size"], "diff": diff}


def print_table(rows: list[dict]) -> None:
    print(f"{'model':<12}{'field':>6}{'taps µs':>10}{'ordered µs':>12}{'LiteRT µs':>11}"
          f"{'taps/LiteRT':>13}{'ordered/taps':>14}{'ctx taps':>10}{'ctx ordered':>13}"
          f"{'diff':>10}")
    for r in rows:
        print(f"{r['model']:<12}{r['receptive_field']:>6}{r['taps_cpu_us']:>10.2f}"
              f"{r['ordered_cpu_us']:>12.2f}{r['litert_cpu_us']:>11.1f}"
              f"{r['taps_cpu_us'] / r['litert_cpu_us']:>13.4f}"
              f"{r['ordered_cpu_us'] / r['taps_cpu_us']:>14.2f}"
              f"{r['taps_ctx_bytes']:>10}{r['ordered_ctx_bytes']:>13}{r['diff']:>10.2g}")
        print(f"{'  (wall)':<18}{r['taps_wall_us']:>10.2f}{r['ordered_wall_us']:>12.2f}"
              f"{r['litert_wall_us']:>11.1f}{r['taps_wall_us'] / r['litert_wall_us']:>13.4f}"
              f"{r['ordered_wall_us'] / r['taps_wall_us']:>14.2f}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=4000)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--models", nargs="+", metavar="NAME", choices=list(MODELS),
                        help="only these rows (" + ", ".join(MODELS) + ")")
    args = parser.parse_args(argv)

    from tfaot.frontend.tfenv import quiet_tensorflow

    quiet_tensorflow()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models or list(MODELS):
            rows.append(measure(name, Path(tmp), args))
            print(f"measured {name}", file=sys.stderr, flush=True)
    print_table(rows)
    write_results("tcn", rows, steps=args.steps, repeats=args.repeats)
    return 0


if __name__ == "__main__":
    sys.exit(main())
