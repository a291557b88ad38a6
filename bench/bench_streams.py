"""Many streams in one context (``tfaot build --streams N``): throughput.

For each model, libraries with N = 1, 4, 8, 16, 32 streams are built from
the same Keras file and stepped through ctypes ``step_n`` (one C call for
all steps, so Python's share is amortised), every library timed in turn in
each repetition. Reported: stream-steps per CPU second (thread time: the C
loop runs in this thread) and per wall second, and the speed-up over the
one-stream library. N separate one-stream contexts of one library run at
the one-stream rate (each reads every weight once per step); the N = 1 row
is that baseline. The peer: LiteRT (XNNPACK, one thread) invoked on the
same step batched over N streams (state in its resource variables), timed
in the same repetitions; |diff| is its largest difference from the tfaot
library over 100 steps of the same frames. Targets (issue 24): at N = 8,
>= 5x on LSTM(512) and >= 2.5x on 2 x LSTM(128), >= 1.5x LiteRT's batch-N
throughput. With ``--weights-dtype int8`` the libraries store int8 weights
(the N-stream steps in the int8 matmul kernel) and the peer is LiteRT's
dynamic-range int8 (the converter's ``Optimize.DEFAULT``), batched the same.
``conv1d64``, a keyword spotter's convolutions over time (ring buffers),
has no LiteRT row: LiteRT's batched step here carries recurrent state only;
its baseline is the one-stream library. Also per library: its context
(the footprint's RAM) and the CPU time of one ``reset_stream`` call through
ctypes (a stream leaving and another joining; once per library, after the
timed passes).

    .venv/bin/python bench/bench_streams.py [--streams 1,4,8,16,32]
        [--models lstm512,...] [--steps N] [--repeats R] [--no-litert]
        [--weights-dtype f32|bf16|f16|int8] [--target cpu|vulkan|cuda]
        [--build-only DIR | --prebuilt DIR] [--json FILE]

A GPU machine without TensorFlow times libraries built elsewhere:
``--build-only DIR`` here, ``--prebuilt DIR`` there (bench/gpu_check.py
does both).
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

# numpy's OpenBLAS worker threads spin after each call: on a 2-core machine
# they took CPU from the loops timed here (about 6% of samples)
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
from bench_litert import litert_model  # noqa: E402
from bench_streaming import (LiteRTTimer, Timer, _cpu_name, time_interleaved,  # noqa: E402
                             write_results)

RESULTS = Path(__file__).parent / "results"
FEATURES = 40


def _model(layers_spec):
    import keras
    from keras import layers as L

    keras.utils.set_random_seed(0)
    x = keras.Input((None, FEATURES))
    h = x
    for i, (kind, units) in enumerate(layers_spec):
        last = i == len(layers_spec) - 1
        h = getattr(L, kind)(units, return_sequences=not last)(h)
    return keras.Model(x, L.Dense(12)(h))


def _conv_model():
    """A keyword spotter's convolutions over time: three Conv1D of 64
    channels (5 frames; 3 frames, dilation 2; 1x1), a Dense(12) per frame."""
    import keras
    from keras import layers as L

    keras.utils.set_random_seed(0)
    x = keras.Input((None, FEATURES))
    h = L.Conv1D(64, 5, activation="relu")(x)
    h = L.Conv1D(64, 3, dilation_rate=2, activation="relu")(h)
    h = L.Conv1D(64, 1, activation="relu")(h)
    return keras.Model(x, L.Dense(12)(h))


#: name -> recurrent layers [(kind, units)], or a function making the model
MODELS = {
    "2xlstm128": [("LSTM", 128), ("LSTM", 128)],
    "gru256": [("GRU", 256)],
    "lstm512": [("LSTM", 512)],
    "conv1d64": _conv_model,
}
#: models whose step LiteRT's batched form (bench_litert.litert_model: the
#: recurrent layers' state in resource variables) does not cover
NO_LITERT = {"conv1d64"}


def keras_model(name: str):
    spec = MODELS[name]
    return spec() if callable(spec) else _model(spec)


def build(path: Path, streams: int, out: Path, weights_dtype: str = "f32",
          target: str = "cpu", cpu: str | None = None) -> Path:
    from tfaot.pipeline import BuildOptions, Progress, build_model

    return build_model(str(path), BuildOptions(out_dir=out, streams=streams,
                                               weights_dtype=weights_dtype, target=target,
                                               cpu=cpu),
                       Progress(False)).path


def litert_difference(lib: Timer, flatbuffer: bytes, steps: int = 100) -> float:
    """Max abs difference between tfaot's N-stream library and LiteRT's
    batch-N model over ``steps`` steps of the same random frames."""
    from ai_edge_litert.interpreter import Interpreter

    # a fresh interpreter: its state starts at zero (reset_all_variables()
    # does not reset resource variables)
    interp = Interpreter(model_content=flatbuffer, num_threads=1)
    interp.allocate_tensors()
    inp, out = interp.get_input_details()[0], interp.get_output_details()[0]
    xs = np.random.default_rng(2).normal(size=(steps, *lib.lib.input_shape)).astype(np.float32)
    lib.lib.reset()
    want = np.asarray(lib.lib.step_n(xs))
    got = []
    for x in xs:
        interp.set_tensor(inp["index"], x.reshape(inp["shape"]))
        interp.invoke()
        got.append(interp.get_tensor(out["index"]).copy())
    return float(np.max(np.abs(np.reshape(got, want.shape) - want)))


def build_all(name: str, counts: list[int], out: Path, args) -> list[Path]:
    """The model's libraries with each stream count, in OUT/NAME_N."""
    path = out / f"{name}.keras"
    keras_model(name).save(path)
    libs = []
    for n in counts:
        libs.append(build(path, n, out / f"{name}_{n}", args.weights_dtype, args.target,
                          args.cpu))
        print(f"built {name} with {n} stream(s)", file=sys.stderr, flush=True)
    return libs


def measure(name: str, counts: list[int], tmp: Path, args) -> list[dict]:
    """One row per stream count: the libraries timed side by side (built
    here, or found in --prebuilt), with LiteRT's batch-N model unless
    --no-litert."""
    if args.prebuilt:
        libs = [Path(args.prebuilt) / f"{name}_{n}" for n in counts]
        model = None
    else:
        libs = build_all(name, counts, tmp, args)
        model = keras_model(name) if not (args.no_litert or name in NO_LITERT) else None
    timers, lites, differences = [], [], []
    for n, lib in zip(counts, libs):
        # each library runs about the same number of stream-steps
        steps = max(20, args.steps // n)
        timers.append(Timer(lib, steps))
        if model is not None:
            flatbuffer, _ = litert_model(model, int8=args.weights_dtype == "int8", streams=n)
            lites.append(LiteRTTimer(flatbuffer, steps))
            differences.append(litert_difference(timers[-1], flatbuffer))
    times = time_interleaved(timers + lites, args.repeats)
    resets = [reset_stream_us(t.lib) for t in timers]
    base_cpu, base_wall = times[0]
    rows = []
    for i, (n, (cpu_us, wall_us)) in enumerate(zip(counts, times)):
        row = {"model": name, "target": timers[i].lib.manifest["target"], "streams": n,
               "cpu_us_per_step": cpu_us,
               "wall_us_per_step": wall_us,
               "stream_steps_per_cpu_s": n / cpu_us * 1e6,
               "stream_steps_per_wall_s": n / wall_us * 1e6,
               "speedup_cpu": n * base_cpu / cpu_us,
               "speedup_wall": n * base_wall / wall_us,
               "context_bytes": timers[i].lib.manifest["footprint"]["ram_bytes"],
               "reset_stream_cpu_us": resets[i]}
        if lites:
            lite_cpu, lite_wall = times[len(counts) + i]
            row.update(litert_cpu_us_per_step=lite_cpu, litert_wall_us_per_step=lite_wall,
                       vs_litert_cpu=lite_cpu / cpu_us, vs_litert_wall=lite_wall / wall_us,
                       litert_max_abs_difference=differences[i])
        rows.append(row)
    return rows


def reset_stream_us(lib, calls: int = 200) -> float:
    """CPU µs of one ``reset_stream`` call (the best of 5 runs of ``calls``),
    the Python call included (about 1 µs)."""
    best = float("inf")
    for _ in range(5):
        start = time.thread_time()
        for i in range(calls):
            lib.reset_stream(i % lib.streams)
        best = min(best, (time.thread_time() - start) / calls * 1e6)
    return best


def print_table(rows: list[dict]) -> None:
    lite = any("litert_cpu_us_per_step" in r for r in rows)
    print(f"{'model':<10} {'N':>3} {'CPU us/step':>12} {'stream-steps/CPU s':>19} "
          f"{'x one stream (CPU)':>19} {'x (wall)':>9} {'context KiB':>12} "
          f"{'reset_stream us':>16}"
          + (f" {'LiteRT us/step':>15} {'x LiteRT (CPU)':>15} {'x (wall)':>9} {'|diff|':>8}"
             if lite else ""))
    for r in rows:
        print(f"{r['model']:<10} {r['streams']:>3} {r['cpu_us_per_step']:>12.1f} "
              f"{r['stream_steps_per_cpu_s']:>19,.0f} {r['speedup_cpu']:>19.2f} "
              f"{r['speedup_wall']:>9.2f} {r['context_bytes'] / 1024:>12.1f} "
              f"{r['reset_stream_cpu_us']:>16.1f}"
              + (f" {r['litert_cpu_us_per_step']:>15.1f} {r['vs_litert_cpu']:>15.2f} "
                 f"{r['vs_litert_wall']:>9.2f} {r['litert_max_abs_difference']:>8.1e}"
                 if "litert_cpu_us_per_step" in r else ""))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--streams", default="1,4,8,16,32",
                    help="stream counts, the first one is the baseline (default 1,4,8,16,32)")
    ap.add_argument("--models", default=",".join(MODELS), help=f"of {', '.join(MODELS)}")
    ap.add_argument("--steps", type=int, default=2000,
                    help="stream-steps per timed pass (default 2000)")
    ap.add_argument("--repeats", type=int, default=5, help="timed passes (default 5)")
    ap.add_argument("--no-litert", action="store_true",
                    help="leave out LiteRT's batch-N model (needs ai-edge-litert)")
    ap.add_argument("--weights-dtype", choices=["f32", "bf16", "f16", "int8"], default="f32",
                    help="tfaot's weights (int8: LiteRT's dynamic-range int8 is the peer)")
    ap.add_argument("--target", choices=["cpu", "vulkan", "cuda"], default="cpu",
                    help="the libraries' target (default cpu); a GPU's rows time its "
                         "synchronous steps, LiteRT still on the CPU")
    ap.add_argument("--cpu", default=None,
                    help="tfaot build --cpu (or the --cuda-arch of --target=cuda)")
    ap.add_argument("--build-only", metavar="DIR",
                    help="build the libraries into DIR/MODEL_N and stop: time them with "
                         "--prebuilt DIR on another machine (a GPU server with no TensorFlow)")
    ap.add_argument("--prebuilt", metavar="DIR",
                    help="time the libraries in DIR/MODEL_N (from --build-only); needs numpy "
                         "and tfaot's harness only, no LiteRT")
    ap.add_argument("--json", metavar="FILE", help="where the results go (default: "
                                                   "bench/results/streams-DATE.json)")
    args = ap.parse_args(argv)
    counts = [int(n) for n in args.streams.split(",")]
    names = args.models.split(",")
    unknown = [n for n in names if n not in MODELS]
    if unknown:
        ap.error(f"unknown model(s) {', '.join(unknown)}; known: {', '.join(MODELS)}")
    if args.build_only:
        out = Path(args.build_only)
        out.mkdir(parents=True, exist_ok=True)
        for name in names:
            build_all(name, counts, out, args)
        return 0
    args.no_litert |= bool(args.prebuilt)
    rows = []
    with tempfile.TemporaryDirectory(prefix="tfaot-bench-streams-") as tmp:
        for name in names:
            rows += measure(name, counts, Path(tmp), args)
    device = _device_name(rows)
    print(f"CPU: {_cpu_name()}; {device}weights {args.weights_dtype}")
    print_table(rows)
    write_results("streams", rows, Path(args.json) if args.json else None,
                  device=device.rstrip("; ") or None, weights_dtype=args.weights_dtype,
                  steps=args.steps, repeats=args.repeats)
    return 0


def gpu_name() -> str | None:
    """The NVIDIA GPU and driver, from nvidia-smi, or None without one."""
    import subprocess

    try:
        smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version",
                              "--format=csv,noheader"], capture_output=True, text=True,
                             timeout=30).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return None
    return smi or None


def _device_name(rows: list[dict]) -> str:
    """The GPU the libraries ran on (CUDA), or nothing."""
    target = rows[0]["target"]
    if target != "cuda":
        return f"target {target}; " if target != "cpu" else ""
    return f"target cuda on {gpu_name() or 'GPU unknown'}; "


if __name__ == "__main__":
    sys.exit(main())
