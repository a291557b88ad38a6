"""Cortex-M cost of a step: executed instructions and estimated M4 cycles under QEMU.

Each model is built for a Cortex-M4F (``thumbv7em-none-eabihf``) in several
variants, linked into a bare-metal firmware (bench/mcu/firmware.c: init,
then one ``NAME_step`` per input frame between two calls of an empty
marker function) and run on ``qemu-system-arm -M mps2-an386`` with a TCG
plugin of our own (bench/mcu/insn_count.c, built here with the host's
gcc) that counts the instructions executed between the marks and
estimates cycles from a cost per instruction class (Cortex-M4 TRM, zero
wait states):

    ALU, MUL, SMLAD and the other DSP MACs, VADD/VMUL/VCVT ...  1
    MLA/MLS 2; SDIV/UDIV 7; VMLA/VFMA family 3; VDIV/VSQRT 14
    LDR/STR/VLDR/VSTR 2 (1 right after another load/store); LDRD/STRD 3
    LDM/STM/PUSH/POP/VLDM/VSTM/VPUSH/VPOP 1 + registers (+3 loading PC)
    B/BL/BX/BLX 3; conditional branch 3 taken, 1 not (the plugin sees
    which); TBB/TBH 4; VMOV of two core registers 2

Not modelled: flash wait states, bus contention, IT folding, dual issue
(use instruction counts for an M7). The marks' own cost (an empty pair)
is subtracted.

Reported per model and variant: instructions and estimated cycles per step
(median over the steps), cycles per multiply-accumulate, the library's
flash (code + weights, the manifest's footprint), RAM (the context) and the
stack the step used (painted and measured), and the max abs error of the
outputs against TensorFlow running the Keras model over the same steps.

The peer a user would pick, TFLite Micro with CMSIS-NN, is not built here:
it needs TFLM's source tree and its pinned third-party sources (see
docs/performance.md, Cortex-M). Needs arm-none-eabi-gcc, newlib and
qemu-system-arm (built with plugin support, as Debian's is).

    .venv/bin/python bench/bench_mcu.py [--steps N] [--models a,b] [--variants a,b]
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
MCU = Path(__file__).parent / "mcu"
CORTEXM = ROOT / "examples" / "cortex_m"  # start-up, linker script, semihosting
RESULTS = Path(__file__).parent / "results"
M4_FLAGS = ["-mthumb", "-mcpu=cortex-m4", "-mfpu=fpv4-sp-d16", "-mfloat-abi=hard"]


def _recurrent(cell: str, features: int, units: int, classes: int):
    import keras

    keras.utils.set_random_seed(0)
    layer = {"lstm": keras.layers.LSTM, "gru": keras.layers.GRU,
             "rnn": keras.layers.SimpleRNN}[cell]
    return keras.Sequential([keras.Input((None, features), batch_size=1),
                             layer(units, return_sequences=True),
                             keras.layers.Dense(classes)])


def _ds_cnn():
    """ARM ML-KWS's DS-CNN on 49 x 10 MFCCs (64 channels, 4 depthwise-separable
    blocks), streamed: 2 frames per step (the first conv's time stride)."""
    import keras
    from keras import layers as L

    keras.utils.set_random_seed(0)
    x = keras.Input((49, 10), batch_size=1)
    h = L.Reshape((49, 10, 1))(x)
    # He initialisation keeps the activations of order 1 through the ReLUs
    h = L.Conv2D(64, (10, 4), strides=(2, 2), padding="valid", activation="relu",
                 kernel_initializer="he_normal")(h)
    for _ in range(4):
        h = L.ZeroPadding2D(((0, 0), (1, 1)))(h)
        h = L.DepthwiseConv2D((3, 3), padding="valid", activation="relu",
                              depthwise_initializer=keras.initializers.RandomNormal(
                                  stddev=(2 / 9) ** 0.5))(h)  # He for 9 inputs a channel
        h = L.Conv2D(64, (1, 1), activation="relu", kernel_initializer="he_normal")(h)
    h = L.GlobalAveragePooling2D()(h)
    return keras.Model(x, L.Dense(12)(h))


#: name -> (Keras model factory, multiply-accumulates per step; None: not counted)
MODELS = {
    "lstm64": (lambda: _recurrent("lstm", 40, 64, 12), 4 * 64 * (40 + 64) + 64 * 12),
    "gru64": (lambda: _recurrent("gru", 40, 64, 12), 3 * 64 * (40 + 64) + 64 * 12),
    "rnn16": (lambda: _recurrent("rnn", 8, 16, 2), 16 * (8 + 16) + 16 * 2),
    "ds_cnn": (_ds_cnn, None),
}

#: variant -> BuildOptions fields
VARIANTS = {
    "default": {},  # f32; the matvec micro-kernel's Cortex-M path for matrices >= 1024
    "iree": {"matvec": "iree"},  # f32, IREE's kernels only (the default before)
    "int8": {"weights_dtype": "int8"},  # the matvec micro-kernel's DSP path
}


def run(cmd: list, **kw) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, **kw)
    if proc.returncode != 0:
        sys.exit(f"bench_mcu: {cmd[0]} failed:\n{proc.stdout}{proc.stderr}")
    return proc


def build_plugin(workdir: Path) -> Path:
    plugin = workdir / "insn_count.so"
    run(["gcc", "-std=gnu11", "-O2", "-Wall", "-Wextra", "-shared", "-fPIC",
         "-fvisibility=hidden", MCU / "insn_count.c", "-o", plugin])
    return plugin


def make_inputs():
    """examples/cortex_m/make_inputs.py: its write_header writes the inputs.h firmware.c reads."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("make_inputs", CORTEXM / "make_inputs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def firmware(lib: Path, name: str, xs: np.ndarray, workdir: Path) -> Path:
    make_inputs().write_header(xs, workdir / "inputs.h")
    image = workdir / "firmware.elf"
    run(["arm-none-eabi-gcc", "-std=c11", "-O2", *M4_FLAGS, "-ffunction-sections",
         "-fdata-sections", f"-DTFAOT_MODEL={name}", f"-DTFAOT_UPPER={name.upper()}",
         f'-DTFAOT_HEADER="{name}.h"', "-I", lib, "-I", workdir, "-I", CORTEXM,
         "-nostartfiles", "-T", CORTEXM / "mps2.ld", "-Wl,--gc-sections",
         CORTEXM / "startup.c", MCU / "firmware.c", lib / f"lib{name}.a", "-lm", "-lc", "-lgcc",
         "-o", image])
    return image


def measure(image: Path, plugin: Path, steps: int, outputs: int) -> dict:
    """Runs the firmware under QEMU: per-step instructions and cycles,
    outputs, stack, and the functions of one step by cycles."""
    nm = run(["arm-none-eabi-nm", "-n", image]).stdout.splitlines()
    marker = next(line.split()[0] for line in nm if line.endswith(" tfaot_mark"))
    # marks: the empty pair, init's pair, then two per step; profile a later step
    profiled_mark = 5 + 2 * min(10, steps - 1)
    proc = subprocess.run(
        ["qemu-system-arm", "-M", "mps2-an386", "-nographic", "-monitor", "none", "-serial",
         "none", "-semihosting", "-plugin",
         f"{plugin},marker=0x{marker},profile={profiled_mark}", "-d", "plugin",
         "-kernel", image], capture_output=True, text=True, timeout=1800,
        stdin=subprocess.DEVNULL)
    text = proc.stdout + proc.stderr
    if proc.returncode != 0 or "done" not in text:
        sys.exit(f"bench_mcu: the firmware failed (exit {proc.returncode}):\n{text[-2000:]}")
    lines = text.splitlines()
    marks = [tuple(map(int, ln.split()[1:])) for ln in lines if ln.startswith("mark ")]
    if len(marks) != 4 + 2 * steps:
        sys.exit(f"bench_mcu: {len(marks)} marks, expected {4 + 2 * steps}")
    empty = np.subtract(marks[1], marks[0])
    pairs = [np.subtract(marks[i + 1], marks[i]) - empty for i in range(2, len(marks), 2)]
    init, per_step = pairs[0], np.array(pairs[1:])
    values = [int(h, 16) for ln in lines if ln.endswith(" ") and not ln.startswith(("mark", "tb"))
              for h in ln.split()]
    ys = np.array(values, np.uint32).view(np.float32).reshape(steps, outputs)
    stack = int(next(ln.split()[1] for ln in lines if ln.startswith("stack ")), 16)
    return {"insns": float(np.median(per_step[:, 0])), "cycles": float(np.median(per_step[:, 1])),
            "init_insns": int(init[0]), "init_cycles": int(init[1]), "stack_bytes": stack,
            "ys": ys, "profile": _profile(lines, nm)}


def _profile(lines: list[str], nm: list[str]) -> dict[str, int]:
    """Estimated cycles of one step by function (the plugin's "tb" lines,
    each block attributed to the text symbol at or before its address)."""
    import bisect

    symbols = sorted((int(f[0], 16), f[2]) for f in (ln.split() for ln in nm)
                     if len(f) == 3 and f[1] in "tTW")
    starts = [a for a, _ in symbols]
    cycles: dict[str, int] = {}
    for ln in lines:
        if not ln.startswith("tb "):
            continue
        addr, execs, _, cost = (int(v, 16) if i == 0 else int(v)
                                for i, v in enumerate(ln.split()[1:]))
        i = bisect.bisect_right(starts, addr) - 1
        name = symbols[i][1] if i >= 0 else "?"
        cycles[name] = cycles.get(name, 0) + execs * cost
    return dict(sorted(cycles.items(), key=lambda kv: -kv[1]))


def bench_model(model_name: str, variants: list[str], steps: int, plugin: Path,
                workdir: Path) -> list[dict]:
    from tfaot.pipeline import BuildOptions, Progress, build_model

    factory, macs = MODELS[model_name]
    model = factory()
    path = workdir / f"{model_name}.keras"
    model.save(path)
    rows, xs, want = [], None, None
    for variant in variants:
        out = workdir / f"{model_name}-{variant}"
        start = time.perf_counter()
        built = build_model(str(path), BuildOptions(
            out_dir=out / "lib", triple="thumbv7em-none-eabihf", cpu="cortex-m4",
            **VARIANTS[variant]), Progress(enabled=False))
        if xs is None:  # the step's input shape and the reference, from the first build
            xs, want = _inputs_and_reference(model, built.manifest, steps)
        image = firmware(built.path, model_name, xs, out)
        got = measure(image, plugin, steps, want.shape[1])
        fp = built.manifest["footprint"]
        defined = ~np.isnan(want).any(axis=1)  # a window's first steps have no reference
        row = {"model": model_name, "variant": variant, "macs": macs,
               "insns_per_step": got["insns"], "cycles_per_step": got["cycles"],
               "cycles_per_mac": got["cycles"] / macs if macs else None,
               "init_cycles": got["init_cycles"],
               "flash_bytes": fp["code_bytes"] + fp["weight_bytes"],
               "weight_bytes": fp["weight_bytes"], "ram_bytes": built.manifest["ctx_size"],
               "stack_bytes": got["stack_bytes"],
               "max_abs_error": float(np.max(np.abs(got["ys"][defined] - want[defined]))),
               "build_s": round(time.perf_counter() - start, 1), "profile": got["profile"]}
        top = ", ".join(f"{k} {v}" for k, v in list(got["profile"].items())[:4])
        print(f"{model_name:8} {variant:11} {row['insns_per_step']:>9.0f} insns "
              f"{row['cycles_per_step']:>9.0f} cycles   ({top})", flush=True)
        rows.append(row)
    return rows


def _inputs_and_reference(model, manifest: dict, steps: int) -> tuple[np.ndarray, np.ndarray]:
    """Random step inputs of the library's shape, and TensorFlow's output
    for each step (NaN where a window is not full yet)."""
    from tfaot.program import StreamInfo
    from tfaot.verify import keras_reference

    shape = manifest["inputs"][0]["shape"]
    xs = np.random.default_rng(0).standard_normal((steps, *shape)).astype(np.float32)
    stream = StreamInfo.from_json(manifest["stream"]) if manifest.get("stream") else None
    want = keras_reference(model, xs, stream=stream,
                           step_output=tuple(manifest["outputs"][0]["shape"]))
    return xs, np.asarray(want, np.float64).reshape(steps, -1)


def table(rows: list[dict]) -> str:
    head = ("| model (MACs/step) | variant | instructions/step | est. M4 cycles/step | "
            "cycles/MAC | flash (code + weights) | RAM (context) | stack | max abs error vs TF |")
    lines = [head, "|" + "---|" * 9]
    for r in rows:
        per_mac = f"{r['cycles_per_mac']:.2f}" if r["cycles_per_mac"] else "–"
        lines.append(f"| {r['model']} ({r['macs'] or '–'}) | {r['variant']} | "
                     f"{r['insns_per_step']:.0f} | {r['cycles_per_step']:.0f} | {per_mac} | "
                     f"{r['flash_bytes'] / 1024:.1f} KB | {r['ram_bytes'] / 1024:.1f} KB | "
                     f"{r['stack_bytes']} B | {r['max_abs_error']:.1e} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=100, help="steps per model (default 100)")
    ap.add_argument("--models", default=",".join(MODELS), help=f"of {', '.join(MODELS)}")
    ap.add_argument("--variants", default=",".join(VARIANTS), help=f"of {', '.join(VARIANTS)}")
    ap.add_argument("--out", type=Path, default=None, help="JSON results (default bench/results/)")
    args = ap.parse_args(argv)
    for tool in ("arm-none-eabi-gcc", "qemu-system-arm", "gcc"):
        if not shutil.which(tool):
            sys.exit(f"bench_mcu: needs {tool} (apt-get install gcc-arm-none-eabi "
                     "libnewlib-arm-none-eabi qemu-system-arm)")
    models, variants = args.models.split(","), args.variants.split(",")
    for name, known in ((models, MODELS), (variants, VARIANTS)):
        bad = [n for n in name if n not in known]
        if bad:
            sys.exit(f"bench_mcu: unknown {', '.join(bad)}; known: {', '.join(known)}")
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench_mcu_") as tmp:
        plugin = build_plugin(Path(tmp))
        for model_name in models:
            work = Path(tmp) / model_name
            work.mkdir()
            rows += bench_model(model_name, variants, args.steps, plugin, work)
    print()
    print("Cortex-M4F (qemu-system-arm mps2-an386), medians over "
          f"{args.steps} steps; cycles estimated from the instruction mix (see --help)")
    print(table(rows))
    out = args.out or RESULTS / f"mcu-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"cpu": "cortex-m4 (qemu mps2-an386, estimated cycles)",
                               "steps": args.steps, "rows": rows}, indent=1))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
