"""CPU step-latency benchmark: tfaot's .so vs IREE's runtime vs Keras.

For each model (40-feature 2xLSTM(128)+Dense(12), GRU(256), LSTM(512)) it
builds the library with `tfaot build`, then measures side by side, with the
runners interleaved in every repetition so machine noise hits all alike:

  c_loop        per-step time of libNAME.a in a C loop (tfaot)
  iree_bench    iree-benchmark-module on the same streaming module compiled
                the default way (async model, local-sync device)
  iree_plain    the same, on the module without tfaot's matvec weight layout
                (weights as TensorFlow stores them)
  iree_python   iree.runtime per call from Python (local-sync)
  keras         Keras stateful model(x_t) per call (eager)

It prints a table of medians (µs/step), the ratio iree_bench / c_loop, the
`tfaot build` wall time, and the size of the runtime shim's code, and writes
everything to bench/results/bench_cpu.json.

    python bench/bench_cpu.py [--reps 5] [--models lstm2x128,gru256,lstm512]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import numpy as np  # noqa: E402

HERE = Path(__file__).resolve().parent
VENV_BIN = Path(sys.executable).parent

C_LOOP = r"""
#define _POSIX_C_SOURCE 199309L
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include "{name}.h"

static _Alignas({NAME}_CTX_ALIGN) unsigned char ctx_mem[{NAME}_CTX_SIZE];

static double now(void) {{
  struct timespec ts; clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}}

int main(int argc, char **argv) {{
  long steps = argc > 1 ? atol(argv[1]) : 1000;
  {name}_ctx *ctx = ({name}_ctx *)ctx_mem;
  float in[{NAME}_INPUT_SIZE], out[{NAME}_OUTPUT_SIZE];
  for (int i = 0; i < {NAME}_INPUT_SIZE; ++i) in[i] = 0.01f * (float)(i % 7);
  if ({name}_init(ctx) != 0) return 1;
  for (long i = 0; i < steps / 10; ++i) {name}_step(ctx, in, out);  /* warm up */
  double t0 = now();
  for (long i = 0; i < steps; ++i) {name}_step(ctx, in, out);
  double t1 = now();
  printf("%.4f\n", (t1 - t0) / (double)steps * 1e6);
  return out[0] == out[0] ? 0 : 2;
}}
"""


def build_models(workdir: Path):
    import keras

    keras.utils.set_random_seed(0)

    def seq(units_layers, kind, head):
        layers = [keras.Input((None, 40), batch_size=1)]
        for i, units in enumerate(units_layers):
            layers.append(kind(units, return_sequences=True))
        if head:
            layers.append(keras.layers.Dense(head))
        return keras.Sequential(layers)

    models = {
        "lstm2x128": seq([128, 128], keras.layers.LSTM, 12),
        "gru256": seq([256], keras.layers.GRU, 12),
        "lstm512": seq([512], keras.layers.LSTM, 12),
    }
    paths = {}
    for name, model in models.items():
        paths[name] = workdir / f"{name}.keras"
        model.save(paths[name])
    return models, paths


def tfaot_build(model_path: Path, out_dir: Path) -> float:
    start = time.perf_counter()
    subprocess.run([str(VENV_BIN / "tfaot"), "-q", "build", str(model_path), "-o", str(out_dir),
                    "--keep-temps"], check=True)
    return time.perf_counter() - start


def compile_c_loop(lib_dir: Path, name: str) -> Path:
    src = lib_dir / "bench_loop.c"
    src.write_text(C_LOOP.format(name=name, NAME=name.upper()))
    exe = lib_dir / "bench_loop"
    subprocess.run(["cc", "-O2", "-std=c11", f"-I{lib_dir}", str(src), str(lib_dir / f"lib{name}.a"),
                    "-lm", "-o", str(exe)], check=True)
    return exe


def compile_default_vmfb(lib_dir: Path, name: str) -> Path:
    vmfb = lib_dir / "default.vmfb"
    subprocess.run([str(VENV_BIN / "iree-compile"), str(lib_dir / "temps" / f"{name}.mlir"),
                    "--iree-input-type=stablehlo", "--iree-hal-target-backends=llvm-cpu",
                    "--iree-llvmcpu-target-cpu=host", "-o", str(vmfb)], check=True)
    return vmfb


def compile_plain_vmfb(model, lib_dir: Path) -> Path:
    """The streaming module with TensorFlow's weight layout, compiled the default way."""
    from tfaot.lower.mlir_import import import_program
    from tfaot.streamify_keras import streamify_keras

    mlir = lib_dir / "plain.mlir"
    mlir.write_text(import_program(streamify_keras(model, "bench", "keras"), matvec_layout=False))
    vmfb = lib_dir / "plain.vmfb"
    subprocess.run([str(VENV_BIN / "iree-compile"), str(mlir), "--iree-input-type=stablehlo",
                    "--iree-hal-target-backends=llvm-cpu", "--iree-llvmcpu-target-cpu=host",
                    "-o", str(vmfb)], check=True)
    return vmfb


def run_c_loop(exe: Path, steps: int) -> float:
    return float(subprocess.run([str(exe), str(steps)], check=True, capture_output=True,
                                text=True).stdout)


def run_iree_bench(vmfb: Path, features: int) -> float:
    out = subprocess.run([str(VENV_BIN / "iree-benchmark-module"), f"--module={vmfb}",
                          "--function=step", f"--input=1x{features}xf32=0.01",
                          "--device=local-sync", "--benchmark_min_time=0.3s",
                          "--benchmark_format=json"], check=True, capture_output=True, text=True)
    bench = json.loads(out.stdout)["benchmarks"][0]
    scale = {"ns": 1e-3, "us": 1.0, "ms": 1e3}[bench["time_unit"]]
    return bench["real_time"] * scale


def make_iree_python(vmfb: Path, features: int):
    import iree.runtime as rt

    ctx = rt.SystemContext(config=rt.Config("local-sync"))
    ctx.add_vm_module(rt.VmModule.copy_buffer(ctx.instance, vmfb.read_bytes()))
    step = ctx.modules.streaming.step
    x = np.full((1, features), 0.01, np.float32)

    def run(calls: int) -> float:
        start = time.perf_counter()
        for _ in range(calls):
            step(x).to_host()
        return (time.perf_counter() - start) / calls * 1e6
    return run


def make_keras_stateful(model, features: int):
    import keras

    config = model.get_config()
    for layer in config["layers"]:
        if layer["class_name"] in ("LSTM", "GRU", "SimpleRNN"):
            layer["config"]["stateful"] = True
    stateful = keras.Sequential.from_config(config)
    stateful.set_weights(model.get_weights())
    x = np.full((1, 1, features), 0.01, np.float32)

    stateful(x)  # the first call traces

    def run(calls: int) -> float:
        start = time.perf_counter()
        for _ in range(calls):
            stateful(x)
        return (time.perf_counter() - start) / calls * 1e6
    return run


def host_text_bytes(lib_dir: Path, name: str) -> int:
    """.text of the generated host program with the shim compiled in (no kernels)."""
    with tempfile.TemporaryDirectory() as tmp:
        obj = Path(tmp) / "host.o"
        subprocess.run(["cc", "-O2", "-std=c11", "-c", str(lib_dir / "src" / f"{name}.c"),
                        f"-I{lib_dir / 'src'}", "-o", str(obj)], check=True)
        out = subprocess.run(["size", str(obj)], check=True, capture_output=True, text=True)
        return int(out.stdout.splitlines()[1].split()[0])


def main() -> None:
    parser = argparse.ArgumentParser(description="tfaot CPU step benchmark")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--models", default="lstm2x128,gru256,lstm512")
    parser.add_argument("--out", default=str(HERE / "results" / "bench_cpu.json"))
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="tfaot-bench-"))
    models, paths = build_models(work)
    wanted = args.models.split(",")
    runners, build_s = {}, {}
    for name in wanted:
        lib_dir = work / "build" / name
        build_s[name] = tfaot_build(paths[name], lib_dir)
        exe = compile_c_loop(lib_dir, name)
        vmfb = compile_default_vmfb(lib_dir, name)
        runners[name] = {
            "c_loop": lambda exe=exe: run_c_loop(exe, 2000),
            "iree_bench": lambda vmfb=vmfb: run_iree_bench(vmfb, 40),
            "iree_plain": lambda vmfb=compile_plain_vmfb(models[name], lib_dir):
                run_iree_bench(vmfb, 40),
            "iree_python": make_iree_python(vmfb, 40),
            "keras": make_keras_stateful(models[name], 40),
        }
    samples = {name: {k: [] for k in runners[name]} for name in wanted}
    for rep in range(args.reps):
        for name in wanted:
            for kind, run in runners[name].items():
                calls = {"iree_python": 300, "keras": 20}.get(kind)
                value = run() if calls is None else run(calls)
                samples[name][kind].append(value)
        print(f"repetition {rep + 1}/{args.reps} done", file=sys.stderr)

    shim_bytes = host_text_bytes(work / "build" / wanted[0], wanted[0])
    rows = []
    print(f"\n{'model':<10} {'c_loop':>9} {'iree_bench':>11} {'iree_plain':>11} {'iree_py':>9} {'keras':>9} "
          f"{'bench/c':>8} {'min b/c':>8} {'build s':>8}   (µs/step, medians of {args.reps})")
    for name in wanted:
        med = {k: statistics.median(v) for k, v in samples[name].items()}
        best = {k: min(v) for k, v in samples[name].items()}
        ratio = med["iree_bench"] / med["c_loop"]
        rows.append({"model": name, "median_us": med, "min_us": best, "samples_us": samples[name],
                     "iree_bench_over_c_loop": ratio,
                     "iree_bench_over_c_loop_min": best["iree_bench"] / best["c_loop"],
                     "build_s": build_s[name]})
        print(f"{name:<10} {med['c_loop']:>9.2f} {med['iree_bench']:>11.2f} {med['iree_plain']:>11.2f} "
              f"{med['iree_python']:>9.2f} {med['keras']:>9.1f} {ratio:>8.2f} "
              f"{rows[-1]['iree_bench_over_c_loop_min']:>8.2f} {build_s[name]:>8.1f}")
    print(f"\nhost program + runtime shim .text ({wanted[0]}): {shim_bytes} bytes (cc -O2, x86-64)")
    result = {"reps": args.reps, "models": rows, "host_and_shim_text_bytes": shim_bytes,
              "loadavg": os.getloadavg()}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
