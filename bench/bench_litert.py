"""Per-step speed of tfaot's library vs LiteRT (XNNPACK) vs a roofline floor.

For the four reference models

    lstm2x128  40 -> LSTM(128) -> LSTM(128) -> Dense(12)
    gru256     40 -> GRU(256) -> Dense(12)
    lstm512    64 -> LSTM(512) -> Dense(10)
    rnn16       8 -> SimpleRNN(16) -> Dense(2)

(and with --series the LSTM(u) scaling series, 40 -> LSTM(u) -> Dense(12)
for u = 32...1024; with --models dense4000x1 a Dense(1) over 4000 inputs,
a narrow head) it builds the library with `tfaot build` once per variant (default:
tfaot's matvec micro-kernel, ``--matvec=tfaot``, also with its weights stored
at half width, ``--weights-dtype=bf16`` / ``f16``; IREE's kernels with the
weights packed at init, ``--pack-weights``, and not, ``--no-pack-weights``),
converts the same step to LiteRT, and then measures, interleaved in every
repetition so machine noise hits all runners alike:

  tfaot:VARIANT  NAME_step() of libNAME.so in a C loop (dlopen), thread CPU
                 time (CLOCK_THREAD_CPUTIME_ID) and wall time per step
  litert         Interpreter.invoke() (ai-edge-litert, 1 thread, XNNPACK),
                 the state in resource variables (the step assigns them),
                 timed from Python: includes ~0.1-0.3 us of Python call cost
  litert-int8    the same with the converter's dynamic-range int8
                 (optimizations=[Optimize.DEFAULT], nothing else): int8
                 weights, activations quantized on the fly
  floor          max(FLOPs / peak FMA rate, weight bytes / cached read
                 bandwidth at that size), both measured here by a C loop

Medians over repetitions of CPU time per step are reported, with the ratios
tfaot / LiteRT and tfaot / floor, and each runner's error against
TensorFlow (the Keras model on the whole sequence): the max abs error over
100 steps, averaged over ERROR_SEQUENCES random sequences; everything (with
each sequence's error, every sample, wall times, dispatch counts and context
sizes) goes to bench/results/.

    python bench/bench_litert.py [--quick] [--series] [--reps 7]
                                 [--models lstm2x128,...]
                                 [--variants ukernel,ukernel-bf16,ukernel-f16,ukernel-int8,packed,stock]

Needs the bench extra: pip install -e '.[bench]' (ai-edge-litert).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
# numpy's OpenBLAS worker threads spin after each call: on a 2-core machine
# they took CPU from the loops timed here (about 6% of samples)
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402  # noqa: E402

HERE = Path(__file__).resolve().parent
VENV_BIN = Path(sys.executable).parent

#: name -> (features, layers [(kind, units)], dense head)
MODELS = {
    "lstm2x128": (40, [("LSTM", 128), ("LSTM", 128)], 12),
    "gru256": (40, [("GRU", 256)], 12),
    "lstm512": (64, [("LSTM", 512)], 10),
    "rnn16": (8, [("SimpleRNN", 16)], 2),
}
REFERENCE = list(MODELS)
#: the LSTM(u) scaling series (--series): 40 -> LSTM(u) -> Dense(12)
SERIES = [f"lstm{u}x40" for u in (32, 64, 128, 256, 512, 1024)]
MODELS.update({f"lstm{u}x40": (40, [("LSTM", u)], 12) for u in (32, 64, 128, 256, 512, 1024)})
#: a narrow head on a wide input (--models dense4000x1): a regressor's or a
#: binary classifier's Dense(1) over 4000 features, its weights stored row
#: after row (weight_packing.DOT_ROWS), not in a 16-lane tile
MODELS["dense4000x1"] = (4000, [], 1)

#: variant -> extra `tfaot build` arguments: tfaot's matvec micro-kernel
#: (weights packed at build time, read-only; f32, or stored as bf16 / f16,
#: math in f32), and IREE's kernels with the weights packed at init (a RAM
#: copy) or not
VARIANTS = {
    "ukernel": ["--matvec=tfaot"],
    "ukernel-bf16": ["--matvec=tfaot", "--weights-dtype=bf16"],
    "ukernel-f16": ["--matvec=tfaot", "--weights-dtype=f16"],
    "ukernel-int8": ["--matvec=tfaot", "--weights-dtype=int8"],
    "packed": ["--matvec=iree", "--pack-weights"],
    "stock": ["--matvec=iree", "--no-pack-weights"],
}

STEP_LOOP_C = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

typedef size_t (*size_fn)(void);
typedef int (*init_fn)(void *);
typedef int (*step_fn)(void *, const float *, float *);

static double clock_s(clockid_t id) {
  struct timespec ts; clock_gettime(id, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* step_loop LIB.so NAME N_IN N_OUT SECONDS -> "cpu_us wall_us steps" */
int main(int argc, char **argv) {
  if (argc != 6) return 64;
  void *lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!lib) { fprintf(stderr, "%s\n", dlerror()); return 1; }
  char sym[256];
  snprintf(sym, sizeof sym, "%s_ctx_size", argv[2]); size_fn ctx_size = (size_fn)dlsym(lib, sym);
  snprintf(sym, sizeof sym, "%s_init", argv[2]); init_fn init = (init_fn)dlsym(lib, sym);
  snprintf(sym, sizeof sym, "%s_step", argv[2]); step_fn step = (step_fn)dlsym(lib, sym);
  if (!ctx_size || !init || !step) return 2;
  int n_in = atoi(argv[3]), n_out = atoi(argv[4]);
  double seconds = atof(argv[5]);
  void *ctx = aligned_alloc(64, (ctx_size() + 63) / 64 * 64);
  float *in = aligned_alloc(64, 64 * ((n_in + 15) / 16)), *out = aligned_alloc(64, 64 * ((n_out + 15) / 16));
  for (int i = 0; i < n_in; ++i) in[i] = 0.01f * (float)(i % 7);
  if (init(ctx) != 0) return 3;
  /* calibrate: steps for about `seconds` of CPU time */
  long n = 16;
  for (;;) {
    double t0 = clock_s(CLOCK_THREAD_CPUTIME_ID);
    for (long i = 0; i < n; ++i) if (step(ctx, in, out) != 0) return 4;
    double dt = clock_s(CLOCK_THREAD_CPUTIME_ID) - t0;
    if (dt > 0.02) { n = (long)(n * seconds / dt) + 1; break; }
    n *= 4;
  }
  double w0 = clock_s(CLOCK_MONOTONIC), c0 = clock_s(CLOCK_THREAD_CPUTIME_ID);
  for (long i = 0; i < n; ++i) step(ctx, in, out);
  double c1 = clock_s(CLOCK_THREAD_CPUTIME_ID), w1 = clock_s(CLOCK_MONOTONIC);
  printf("%.5f %.5f %ld\n", (c1 - c0) / n * 1e6, (w1 - w0) / n * 1e6, n);
  return out[0] == out[0] ? 0 : 5;
}
"""

ROOFLINE_C = r"""
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double cpu_s(void) {
  struct timespec ts; clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* floats per vector: one register of the widest unit ("+x" below must fit one) */
#if defined(__AVX512F__)
#define W 16
#elif defined(__AVX__)
#define W 8
#else
#define W 4
#endif
typedef float vf __attribute__((vector_size(4 * W)));

/* peak: 12 independent FMA chains on W-wide vectors; returns GFLOP/s */
static double peak_gflops(double seconds) {
  vf a[12], m, b;
  for (int j = 0; j < 12; ++j) for (int k = 0; k < W; ++k) a[j][k] = (float)(j + k) * 1e-3f;
  for (int k = 0; k < W; ++k) { m[k] = 0.999999f; b[k] = 1e-7f; }
  long n = 1000, done = 0; double t0 = cpu_s(), dt;
  do {
    for (long i = 0; i < n; ++i) {
      for (int j = 0; j < 12; ++j) a[j] = a[j] * m + b;
      __asm__ volatile("" : "+x"(m));
    }
    done += n; n *= 2; dt = cpu_s() - t0;
  } while (dt < seconds);
  float s = 0; for (int j = 0; j < 12; ++j) for (int k = 0; k < W; ++k) s += a[j][k];
  if (s == 12345.f) puts("");
  return (double)done * 12 * W * 2 / dt * 1e-9;
}

/* read bandwidth over a `bytes` buffer that is read again and again; GB/s */
static double read_gbps(size_t bytes, double seconds) {
  size_t nv = bytes / sizeof(vf); if (nv < 8) nv = 8;
  vf *buf = aligned_alloc(64, nv * sizeof(vf));
  for (size_t i = 0; i < nv; ++i) for (int k = 0; k < W; ++k) buf[i][k] = 1e-6f * (float)(i % 97);
  vf acc[8] = {0};
  long inner = (long)(4000000 / (nv * sizeof(vf))) + 1;  /* ~4 MB read between clock reads */
  long reps = 0; double t0 = cpu_s(), dt;
  do {
    for (long r = 0; r < inner; ++r) {
      for (size_t i = 0; i + 8 <= nv; i += 8)
        for (int j = 0; j < 8; ++j) acc[j] += buf[i + j];
      __asm__ volatile("" ::: "memory");
    }
    reps += inner; dt = cpu_s() - t0;
  } while (dt < seconds);
  float s = 0; for (int j = 0; j < 8; ++j) for (int k = 0; k < W; ++k) s += acc[j][k];
  if (s == 12345.f) puts("");
  free(buf);
  return (double)reps * (double)(nv / 8 * 8 * sizeof(vf)) / dt * 1e-9;
}

/* roofline SECONDS BYTES... -> "peak GFLOP/s" then "bytes GB/s" per size */
int main(int argc, char **argv) {
  double seconds = atof(argv[1]);
  printf("peak %.3f\n", peak_gflops(seconds));
  for (int i = 2; i < argc; ++i) {
    size_t bytes = strtoull(argv[i], 0, 10);
    printf("%zu %.3f\n", bytes, read_gbps(bytes, seconds));
  }
  return 0;
}
"""


def cc(src_text: str, exe: Path, *flags: str) -> Path:
    src = exe.with_suffix(".c")
    src.write_text(src_text)
    subprocess.run(["cc", "-O3", "-march=native", "-std=c11", str(src), "-o", str(exe), *flags],
                   check=True)
    return exe


# --------------------------------------------------------------------------
# models


def make_keras(name: str):
    import keras

    features, layers, head = MODELS[name]
    keras.utils.set_random_seed(0)
    seq = [keras.Input((None, features), batch_size=1)]
    for kind, units in layers:
        seq.append(getattr(keras.layers, kind)(units, return_sequences=True))
    seq.append(keras.layers.Dense(head))
    return keras.Sequential(seq)


def model_cost(model) -> tuple[int, int]:
    """(FLOPs per step, weight bytes): 2 per weight of a matmul, 4 bytes per parameter."""
    flops = 0
    for w in model.weights:
        if len(w.shape) == 2:
            flops += 2 * int(np.prod(w.shape))
    return flops, 4 * int(model.count_params())


def tfaot_build(model_path: Path, out_dir: Path, extra: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run([str(VENV_BIN / "tfaot"), "-q", "build", str(model_path), "-o", str(out_dir),
                    "--keep-temps", "--force", "--name", model_path.stem, *extra], check=True)
    return time.perf_counter() - start


def dispatch_counts(lib_dir: Path, name: str) -> dict[str, int]:
    """Dispatches per call of @step and of @__init, counted in the VM program.

    Counts call sites of hal_loader.executable.dispatch in each vm.func
    (the step programs are straight-line: no loops around dispatches).
    """
    text = (lib_dir / "temps" / "compile" / f"{name}.vm.mlir").read_text()
    counts: dict[str, int] = {}
    func = None
    for line in text.splitlines():
        m = re.match(r"\s*vm\.func (?:private )?@([\w$.]+)\(", line)
        if m:
            func = m.group(1)
            counts.setdefault(func, 0)
        elif func and "@hal_loader.executable.dispatch" in line and "vm.call" in line:
            counts[func] += 1
    return {k: v for k, v in counts.items() if k in ("step", "__init")}


def manifest(lib_dir: Path, name: str) -> dict:
    return json.loads((lib_dir / f"{name}.json").read_text())


def litert_model(model, int8: bool = False, streams: int = 1):
    """The streaming step as a LiteRT flatbuffer: frozen weights, state in
    resource variables; ``int8``: the converter's dynamic-range int8;
    ``streams``: a batch of that many streams (the step batched as
    ``tfaot build --streams`` batches it, every input and state [N, ...])."""
    import tensorflow as tf
    from tensorflow.python.framework.convert_to_constants import (
        convert_variables_to_constants_v2,
    )
    from tfaot.lower.streams import batch_streams
    from tfaot.streamify_keras import streamify_keras

    program = batch_streams(streamify_keras(model, "bench", "keras"), streams)
    frozen = convert_variables_to_constants_v2(program.pure_step)
    sig = program.signature

    class Step(tf.Module):
        def __init__(self):
            super().__init__()
            self.states = [tf.Variable(np.asarray(s.initial, np.float32)) for s in sig.states]

        @tf.function(input_signature=[tf.TensorSpec(sig.inputs[0].shape, tf.float32)])
        def step(self, x):
            results = frozen(x, *[v.read_value() for v in self.states])
            for v, new in zip(self.states, results[len(sig.outputs):]):
                v.assign(new)
            return results[0]

    module = Step()
    converter = tf.lite.TFLiteConverter.from_concrete_functions(
        [module.step.get_concrete_function()], module)
    converter.experimental_enable_resource_variables = True
    if int8:
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
    return converter.convert(), program


def make_litert_runner(flatbuffer: bytes, features: int):
    from ai_edge_litert.interpreter import Interpreter

    interp = Interpreter(model_content=flatbuffer, num_threads=1)
    interp.allocate_tensors()
    inp = interp.get_input_details()[0]["index"]
    interp.set_tensor(inp, np.array([[0.01 * (i % 7) for i in range(features)]], np.float32))
    invoke = interp.invoke
    for _ in range(10):
        invoke()

    def run(seconds: float) -> tuple[float, float]:
        n = 16
        while True:
            t0 = time.thread_time()
            for _ in range(n):
                invoke()
            dt = time.thread_time() - t0
            if dt > 0.02:
                n = int(n * seconds / dt) + 1
                break
            n *= 4
        w0, c0 = time.perf_counter(), time.thread_time()
        for _ in range(n):
            invoke()
        c1, w1 = time.thread_time(), time.perf_counter()
        return (c1 - c0) / n * 1e6, (w1 - w0) / n * 1e6
    return run, interp


#: Random sequences the errors against TensorFlow are measured on: on one
#: sequence, int8 runners that differ by 10% swap places by chance
#: (2xLSTM(128): tfaot 3.2e-3 vs LiteRT 3.0e-3 on one 100-step sequence,
#: 3.0e-3 vs 3.5e-3 averaged over 8 of 200 steps).
ERROR_SEQUENCES = 8


def reference_sequences(model, features: int, steps: int = 100,
                        count: int = ERROR_SEQUENCES) -> list[tuple[np.ndarray, np.ndarray]]:
    """``count`` pairs (inputs [steps, 1, features], TensorFlow's outputs
    [steps, 1, out]) of the Keras model run on a whole random sequence."""
    pairs = []
    for seed in range(1, count + 1):
        xs = np.random.default_rng(seed).standard_normal((steps, 1, features)).astype(np.float32)
        ys = np.asarray(model(xs.transpose(1, 0, 2)))  # [1, steps, out]
        pairs.append((xs, ys.transpose(1, 0, 2)))
    return pairs


def litert_error(flatbuffer: bytes, sequences) -> list[float]:
    """Max abs error of a LiteRT step model against each sequence's outputs
    (one row per step), each sequence from the initial state."""
    from ai_edge_litert.interpreter import Interpreter

    errors = []
    for xs, want in sequences:
        # a fresh interpreter: reset_all_variables() does not reset resource variables
        interp = Interpreter(model_content=flatbuffer, num_threads=1)
        interp.allocate_tensors()
        inp = interp.get_input_details()[0]["index"]
        out = interp.get_output_details()[0]["index"]
        err = 0.0
        for x, y in zip(xs, want):
            interp.set_tensor(inp, x)
            interp.invoke()
            err = max(err, float(np.max(np.abs(interp.get_tensor(out) - y))))
        errors.append(err)
    return errors


def tfaot_error(lib_dir: Path, sequences) -> list[float]:
    """Max abs error of a tfaot library (step by step, reset before each
    sequence) against each sequence's TensorFlow outputs."""
    from tfaot import harness

    lib, errors = harness.load(lib_dir), []
    for xs, want in sequences:
        lib.reset()
        got = lib.step_n(xs)
        errors.append(float(np.max(np.abs(np.asarray(got).reshape(want.shape) - want))))
    return errors


def check_litert(flatbuffer: bytes, lib_dir: Path, features: int, steps: int = 100) -> float:
    """Max abs difference between LiteRT and the tfaot .so over `steps` random steps."""
    from tfaot import harness

    rng = np.random.default_rng(0)
    xs = rng.standard_normal((steps, 1, features)).astype(np.float32)
    return litert_error(flatbuffer, [(xs, harness.load(lib_dir).step_n(xs))])[0]


# --------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description="tfaot vs LiteRT (XNNPACK) per-step benchmark")
    parser.add_argument("--quick", action="store_true", help="3 repetitions of 0.1 s each")
    parser.add_argument("--reps", type=int, default=None, help="repetitions (default 7, quick 3)")
    parser.add_argument("--seconds", type=float, default=None,
                        help="CPU seconds per measurement (default 0.25, quick 0.1)")
    parser.add_argument("--models", default=",".join(REFERENCE),
                        help=f"comma-separated, of {', '.join(MODELS)}")
    parser.add_argument("--series", action="store_true",
                        help="add the LSTM(u) scaling series u = 32...1024 (40 features)")
    parser.add_argument("--variants", default=",".join(VARIANTS),
                        help=f"tfaot build variants, of {', '.join(VARIANTS)}")
    parser.add_argument("--out", default=str(HERE / "results" / "bench_litert.json"))
    parser.add_argument("--workdir", help="keep builds here (default: a temporary folder)")
    args = parser.parse_args()
    reps = args.reps or (3 if args.quick else 7)
    seconds = args.seconds or (0.1 if args.quick else 0.25)
    wanted = args.models.split(",") + (SERIES if args.series else [])
    variants = args.variants.split(",")

    work = Path(args.workdir or tempfile.mkdtemp(prefix="tfaot-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    step_loop = cc(STEP_LOOP_C, work / "step_loop", "-ldl")
    roofline = cc(ROOFLINE_C, work / "roofline")

    info, runners = {}, {}
    for name in wanted:
        model = make_keras(name)
        features = MODELS[name][0]
        path = work / f"{name}.keras"
        model.save(path)
        flops, weight_bytes = model_cost(model)
        flat, _ = litert_model(model)
        flat_int8, _ = litert_model(model, int8=True)
        sequences = reference_sequences(model, features)
        per_sequence = {"litert": litert_error(flat, sequences),
                        "litert-int8": litert_error(flat_int8, sequences)}
        info[name] = {"flops": flops, "weight_bytes": weight_bytes, "params": model.count_params(),
                      "litert_bytes": len(flat), "litert_int8_bytes": len(flat_int8),
                      "variants": {}, "max_abs_error_vs_tf_per_sequence": per_sequence}
        runners[name] = {}
        lit_run, _ = make_litert_runner(flat, features)
        lit8_run, _ = make_litert_runner(flat_int8, features)
        for variant in variants:
            lib_dir = work / variant / name
            build_s = tfaot_build(path, lib_dir, VARIANTS[variant])
            man = manifest(lib_dir, name)
            info[name]["variants"][variant] = {
                "build_s": build_s, "dispatches": dispatch_counts(lib_dir, name),
                "ctx_size": man.get("ctx_size"), "arena_bytes": man.get("arena_bytes"),
                "so_bytes": (lib_dir / f"lib{name}.so").stat().st_size,
            }
            if variant == variants[0]:
                info[name]["litert_max_abs_diff_vs_tfaot"] = check_litert(flat, lib_dir, features)
            per_sequence[f"tfaot:{variant}"] = tfaot_error(lib_dir, sequences)
            n_out = MODELS[name][2]

            def run_c(s, lib=lib_dir / f"lib{name}.so", name=name, f=features, o=n_out):
                out = subprocess.run([str(step_loop), str(lib), name, str(f), str(o), str(s)],
                                     check=True, capture_output=True, text=True).stdout.split()
                return float(out[0]), float(out[1])
            runners[name][f"tfaot:{variant}"] = run_c
        runners[name]["litert"] = lit_run
        runners[name]["litert-int8"] = lit8_run
        print(f"built {name}: " + ", ".join(
            f"{v} {d['build_s']:.0f} s, {d['dispatches']}" for v, d in info[name]["variants"].items()),
            file=sys.stderr)

    # the floor's inputs, measured once before and once after the timed runs
    def measure_roofline():
        sizes = [str(info[n]["weight_bytes"]) for n in wanted]
        out = subprocess.run([str(roofline), str(max(seconds, 0.2)), *sizes], check=True,
                             capture_output=True, text=True).stdout.splitlines()
        peak = float(out[0].split()[1])
        bw = {int(a): float(b) for a, b in (ln.split() for ln in out[1:])}
        return peak, bw
    roof = [measure_roofline()]

    samples = {n: {k: [] for k in runners[n]} for n in wanted}
    for rep in range(reps):
        for name in wanted:
            for kind, run in runners[name].items():
                samples[name][kind].append(run(seconds))
        print(f"repetition {rep + 1}/{reps} done", file=sys.stderr)
    roof.append(measure_roofline())
    peak = max(r[0] for r in roof)

    kinds = [f"tfaot:{v}" for v in variants] + ["litert-int8", "litert"]
    rows = []
    head = (f"{'model':<10} {'floor':>7} " + " ".join(f"{k:>14}" for k in kinds) + " "
            + " ".join(f"{k.split(':')[-1] + '/lit':>11}" for k in kinds[:-1]) + " "
            + " ".join(f"{k.split(':')[-1] + '/floor':>13}" for k in kinds[:-1]) + "  dispatches/step")
    print(f"\nCPU µs per step, medians of {reps} interleaved repetitions "
          f"(wall in JSON); peak {peak:.1f} GFLOP/s, 1 thread")
    print(head)
    for name in wanted:
        bw = max(r[1][info[name]["weight_bytes"]] for r in roof)
        floor = max(info[name]["flops"] / peak * 1e-3, info[name]["weight_bytes"] / bw * 1e-3)
        cpu = {k: statistics.median(s[0] for s in samples[name][k]) for k in kinds}
        wall = {k: statistics.median(s[1] for s in samples[name][k]) for k in kinds}
        disp = {v: info[name]["variants"][v]["dispatches"].get("step") for v in variants}
        error = {k: statistics.mean(v)
                 for k, v in info[name]["max_abs_error_vs_tf_per_sequence"].items()}
        row = {"model": name, **info[name], "floor_us": floor, "read_gbps": bw,
               "max_abs_error_vs_tf": error,
               "cpu_us": cpu, "wall_us": wall,
               "over_litert": {k: cpu[k] / cpu["litert"] for k in kinds[:-1]},
               "over_litert_int8": {k: cpu[k] / cpu["litert-int8"] for k in kinds[:-2]},
               "over_floor": {k: cpu[k] / floor for k in kinds},
               "samples_cpu_wall_us": samples[name]}
        rows.append(row)
        print(f"{name:<10} {floor:>7.2f} " + " ".join(f"{cpu[k]:>14.2f}" for k in kinds) + " "
              + " ".join(f"{row['over_litert'][k]:>11.2f}" for k in kinds[:-1]) + " "
              + " ".join(f"{row['over_floor'][k]:>13.2f}" for k in kinds[:-1]) + "  "
              + " ".join(f"{v}={disp[v]}" for v in variants))
    print(f"\nmax abs error vs TensorFlow over 100 steps (mean over {ERROR_SEQUENCES} sequences), "
          "and CPU time / LiteRT int8's:")
    for row in rows:
        err = row["max_abs_error_vs_tf"]
        print(f"{row['model']:<10} " + "  ".join(
            f"{k.split(':')[-1]} {err[k]:.2g}"
            + (f" ({row['over_litert_int8'][k]:.2f}x)" if k in row["over_litert_int8"] else "")
            for k in kinds))
    print("context bytes (ctx_size): " + "; ".join(
        f"{n} " + ", ".join(f"{v} {info[n]['variants'][v]['ctx_size']}" for v in variants)
        for n in wanted))
    result = {"reps": reps, "seconds": seconds, "peak_gflops": peak,
              "roofline_runs": [{"peak_gflops": p, "read_gbps": {str(k): v for k, v in b.items()}}
                                for p, b in roof],
              "machine": {"cpu": _cpu_name(), "nproc": os.cpu_count(),
                          "python": platform.python_version(),
                          "loadavg_end": os.getloadavg()},
              "models": rows}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    print(f"wrote {out}")


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


if __name__ == "__main__":
    main()
