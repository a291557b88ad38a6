"""--target=cuda on a real GPU, in two halves: a machine with TensorFlow and
IREE builds the libraries and saves verify cases; the GPU machine, which
may have neither (only Python, numpy, a C compiler and the NVIDIA driver),
runs them.

    python bench/gpu_check.py prepare DIR      # here: builds, cases (tfaot verify --save-case)
    python bench/gpu_check.py run DIR [--out RESULTS_DIR] [--skip-bench]
                                               # there: from a checkout of this repository

``run`` does, each part in its own process so that one crash is reported
and the rest still runs:

* ``tfaot verify --case`` of every library: Keras LSTM/GRU/Dense models, a
  streamed DS-CNN, token inputs, a frozen graph cut at its MFCC, and
  ``--streams 8`` libraries (each stream against TensorFlow on its own);
* stream independence: each stream of the 8-stream library against the
  1-stream library on the same frames (max |diff| and whether bit-identical),
  state moves of one stream, and i >= N refused;
* the C API (tests/data/gpu/cu_driver.c: init, steps, reset, state get/set)
  under compute-sanitizer's memcheck, and built with ASan and UBSan;
* bench/bench_streams.py --prebuilt: stream-steps per second for N = 1..32 on
  the GPU, and the same models' CPU libraries (x86-64-v3) on the GPU
  machine's CPU, side by side.

It prints a summary and writes gpu-check.json (plus the benches' JSON) to
RESULTS_DIR (default bench/results).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from bench_streaming import _cpu_name  # noqa: E402
from bench_streams import gpu_name  # noqa: E402

REPO = HERE.parent
STREAM_MODELS = "lstm512,gru256,2xlstm128"
STREAM_COUNTS = "1,4,8,16,32"
CPU_COUNTS = "1,8"
#: the stream count checked against the one-stream library
N = 8


# ---- prepare (TensorFlow, IREE) ---------------------------------------------------


def _keras_models():
    """name -> a function making the model: shapes the GPU path has not run."""
    import keras
    from keras import layers as L

    from bench_streaming import ds_cnn

    def seeded(make):
        def made():
            keras.utils.set_random_seed(3)
            return make()
        return made

    return {
        "lstm40": seeded(lambda: keras.Sequential([
            keras.Input((None, 40)), L.LSTM(64, return_sequences=True), L.Dense(12)])),
        "gru_tokens": seeded(lambda: keras.Sequential([
            keras.Input((None,), dtype="int32"), L.Embedding(50, 16),
            L.GRU(32, return_sequences=True), L.Dense(50)])),
        "dense": seeded(lambda: keras.Sequential([
            keras.Input((None, 20)), L.Dense(32, activation="relu"), L.Dense(4)])),
        "ds_cnn": seeded(ds_cnn),
        # odd sizes, 8 streams: K = 13 and 37 do not split 4 ways (target.py)
        "gru_odd_streams": seeded(lambda: keras.Sequential([
            keras.Input((None, 13)), L.GRU(37, return_sequences=True), L.Dense(5)])),
    }


def _build(model: Path, out: Path, **options) -> Path:
    from tfaot.pipeline import BuildOptions, Progress, build_model

    return build_model(str(model), BuildOptions(out_dir=out, **options), Progress(False)).path


def _save_case(model: Path, lib: Path, case: Path, steps: int = 200) -> None:
    from tfaot.cli import main

    if main(["verify", str(model), str(lib), "--steps", str(steps), "--save-case",
             str(case)]) != 0:
        raise SystemExit(f"saving the case of {lib} failed")


def _prune(lib: Path, keep_sources: bool = False) -> None:
    """What the GPU machine needs: the .so, header and manifest (64 MiB travel)."""
    for a in lib.glob("*.a"):
        a.unlink()
    if not keep_sources:
        shutil.rmtree(lib / "src", ignore_errors=True)


def prepare(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    verify = out / "verify"
    for name, make in _keras_models().items():
        path = out / f"{name}.keras"
        make().save(path)
        lib = _build(path, verify / name, target="cuda",
                     streams=N if name.endswith("_streams") else 1)
        _save_case(path, lib, lib / "case.npz")
        _prune(lib)
        print(f"built and saved the case of {name}", flush=True)
    # the C driver's model: an LSTM named cum, with its sources (sanitizer builds)
    lib = _build(out / "lstm40.keras", out / "cum", target="cuda", name="cum")
    _prune(lib, keep_sources=True)
    graph = out / "kws_graph.pb"
    subprocess.run([sys.executable, REPO / "examples" / "frozen_graph" / "make_graph.py", "-o",
                    graph], check=True)
    from tfaot.cli import main

    lib = verify / "kws_graph"  # cut at its MFCC, as examples/frozen_graph does
    if main(["--quiet", "build", str(graph), "--target=cuda", "--inputs", "Mfcc", "--outputs",
             "labels_softmax", "-o", str(lib)]) != 0:
        raise SystemExit(f"building {graph} failed")
    _save_case(graph, lib, lib / "case.npz", steps=120)
    _prune(lib)
    streams = out / "streams"
    for target, folder, counts in (("cuda", streams, STREAM_COUNTS),
                                   ("cpu", out / "streams_cpu", CPU_COUNTS)):
        subprocess.run([sys.executable, HERE / "bench_streams.py", "--target", target,
                        *(["--cpu", "x86-64-v3"] if target == "cpu" else []), "--models",
                        STREAM_MODELS, "--streams", counts, "--build-only", folder], check=True)
        for lib in folder.glob("*_*"):
            _prune(lib)
    for name in STREAM_MODELS.split(","):
        for n in (1, N):
            _save_case(streams / f"{name}.keras", streams / f"{name}_{n}",
                       streams / f"{name}_{n}.case.npz", steps=100)
    for model in out.glob("streams*/*.keras"):  # not needed there: 13 MiB less to send
        model.unlink()
    print(f"wrote {out} ({sum(f.stat().st_size for f in out.rglob('*') if f.is_file()) >> 20} "
          "MiB)")


# ---- run (numpy, the NVIDIA driver) -----------------------------------------------


def _env() -> dict:
    """PYTHONPATH that makes this checkout's compiler/ importable as tfaot."""
    link_dir = Path(tempfile.mkdtemp(prefix="tfaot-path-"))
    (link_dir / "tfaot").symlink_to(REPO / "compiler")
    env = dict(os.environ, PYTHONUNBUFFERED="1", OPENBLAS_NUM_THREADS="1")
    env["PYTHONPATH"] = os.pathsep.join([str(link_dir), env.get("PYTHONPATH", "")]).rstrip(
        os.pathsep)
    return env


def _run(cmd: list, env: dict, timeout: float = 300) -> dict:
    start = time.perf_counter()
    try:
        proc = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, env=env,
                              timeout=timeout)
        rc, text = proc.returncode, (proc.stdout + proc.stderr).strip()
    except subprocess.TimeoutExpired as e:
        rc, text = 124, f"timed out after {timeout} s: {e.stdout or ''}"
    except OSError as e:  # not built, or no such tool
        rc, text = 127, str(e)
    return {"cmd": " ".join(str(c) for c in cmd), "rc": rc, "seconds":
            round(time.perf_counter() - start, 2), "output": text[-4000:]}


def _info() -> dict:
    return {"gpu": gpu_name(), "python": platform.python_version(), "numpy": np.__version__,
            "machine": platform.machine(), "cpu": _cpu_name()}


def _verify_all(root: Path, env: dict) -> list[dict]:
    jobs = [(case, case.parent) for case in sorted((root / "verify").glob("*/case.npz"))]
    jobs += [(case, case.with_name(case.name.removesuffix(".case.npz")))
             for case in sorted((root / "streams").glob("*.case.npz"))]
    results = []
    for case, lib in jobs:
        r = _run([sys.executable, "-m", "tfaot", "verify", "--case", case, lib], env)
        r["library"] = lib.name
        results.append(r)
        print(f"verify {lib.name}: rc {r['rc']} ({r['seconds']} s)\n  "
              + r["output"].replace("\n", "\n  "), flush=True)
    return results


def streams_check(many: Path, one: Path) -> dict:
    """Each stream of ``many`` against ``one`` on the same frames; state moves."""
    from tfaot import harness
    from tfaot.errors import TfaotError

    t0 = time.perf_counter()
    lib_n = harness.load(many)
    init_s = time.perf_counter() - t0
    lib_1 = harness.load(one)
    n = lib_n.streams
    xs = np.random.default_rng(5).normal(size=(100, *lib_n.input_shape)).astype(np.float32)
    got = np.asarray(lib_n.step_n(xs))
    diffs = []
    for i in range(n):
        lib_1.reset()
        diffs.append(float(np.max(np.abs(np.asarray(lib_1.step_n(xs[:, i])) - got[:, i]))))
    # one stream's state moved into another stream, then both step alike
    lib_n.set_stream_state(5, lib_n.get_stream_state(2))
    x = xs[0].copy()
    x[5] = x[2]
    y = np.asarray(lib_n.step(x))
    try:
        lib_n.reset_stream(n)
        refused = None
    except TfaotError as e:
        refused = str(e)
    return {"library": many.name, "streams": n, "init_seconds": round(init_s, 3),
            "max_abs_diff_vs_one_stream": max(diffs),
            "bit_identical": all(d == 0.0 for d in diffs),
            "moved_state_steps_alike": bool(np.array_equal(y[2], y[5])),
            "stream_n_refused": refused}


def _c_api(root: Path, work: Path, env: dict) -> list[dict]:
    """cu_driver.c on the real driver: compute-sanitizer, then ASan + UBSan."""
    lib = root / "cum"
    driver = REPO / "tests" / "data" / "gpu" / "cu_driver.c"
    sources = [driver, lib / "src" / "cum.c"]  # which includes the runtime shim
    plain, sanitized = work / "cu_driver", work / "cu_driver_asan"
    results = [_run(["gcc", "-std=c11", "-O1", "-g", "-I", lib / "src", *sources, "-o", plain,
                     "-ldl", "-lm"], env)]
    results.append(_run([plain], env))
    sanitizer = shutil.which("compute-sanitizer") or "/usr/local/cuda/bin/compute-sanitizer"
    if Path(sanitizer).exists():
        results.append(_run([sanitizer, "--tool", "memcheck", "--leak-check", "full", plain],
                            env, timeout=600))
    results.append(_run(["gcc", "-std=c11", "-O1", "-g", "-fsanitize=address,undefined",
                         "-fno-sanitize-recover=undefined", "-I", lib / "src", *sources, "-o",
                         sanitized, "-ldl", "-lm"], env))
    # the driver maps memory where ASan's shadow gap is; its own allocations
    # are not ours to report
    results.append(_run([sanitized], dict(env, ASAN_OPTIONS="protect_shadow_gap=0:"
                                                             "detect_leaks=0")))
    for r in results:
        print(f"{r['cmd'][:100]}: rc {r['rc']}\n  " + r["output"][-1500:].replace("\n", "\n  "),
              flush=True)
    return results


def run(root: Path, out: Path, skip_bench: bool) -> int:
    env = _env()
    out.mkdir(parents=True, exist_ok=True)
    summary = {"info": _info()}
    print(json.dumps(summary["info"]), flush=True)
    summary["verify"] = _verify_all(root, env)
    summary["streams"] = []
    for name in STREAM_MODELS.split(","):
        r = _run([sys.executable, __file__, "streams-check", root / "streams" / f"{name}_{N}",
                  root / "streams" / f"{name}_1"], env)
        print(f"streams {name}: rc {r['rc']}: {r['output'][-1500:]}", flush=True)
        summary["streams"].append(r)
    with tempfile.TemporaryDirectory() as work:
        summary["c_api"] = _c_api(root, Path(work), env)
    if not skip_bench:
        summary["bench"] = []
        for folder, counts, tag in (("streams", STREAM_COUNTS, "cuda"),
                                    ("streams_cpu", CPU_COUNTS, "cpu")):
            if not (root / folder).is_dir():
                continue
            r = _run([sys.executable, HERE / "bench_streams.py", "--prebuilt", root / folder,
                      "--models", STREAM_MODELS, "--streams", counts, "--repeats", "3",
                      "--json", out / f"streams-{tag}.json"], env, timeout=600)
            print(r["output"][-3000:], flush=True)
            summary["bench"].append(r)
    path = out / "gpu-check.json"
    path.write_text(json.dumps(summary, indent=2))
    failed = [r["cmd"] for part in ("verify", "streams", "c_api", "bench")
              for r in summary.get(part, []) if r["rc"] != 0]
    print(f"wrote {path}; {len(failed)} failed: {failed}")
    return 1 if failed else 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="command", required=True)
    p = sub.add_parser("prepare", help="build the libraries and save their cases (TensorFlow)")
    p.add_argument("dir", type=Path)
    p = sub.add_parser("run", help="run them on the GPU (numpy and the driver)")
    p.add_argument("dir", type=Path)
    p.add_argument("--out", type=Path, default=HERE / "results")
    p.add_argument("--skip-bench", action="store_true")
    p = sub.add_parser("streams-check", help=argparse.SUPPRESS)
    p.add_argument("many", type=Path)
    p.add_argument("one", type=Path)
    args = ap.parse_args(argv)
    if args.command == "prepare":
        prepare(args.dir)
        return 0
    if args.command == "streams-check":
        result = streams_check(args.many, args.one)
        print(json.dumps(result))
        return 0 if result["max_abs_diff_vs_one_stream"] <= 1e-6 and \
            result["moved_state_steps_alike"] and result["stream_n_refused"] else 1
    return run(args.dir, args.out, args.skip_bench)


if __name__ == "__main__":
    sys.exit(main())
