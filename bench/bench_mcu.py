"""Cortex-M cost of a step: executed instructions and estimated M4 cycles under QEMU.

Each model is built for a Cortex-M4F (``thumbv7em-none-eabihf``) in several
variants, linked into a bare-metal firmware (bench/mcu/firmware.c: init,
then one ``NAME_step`` per input frame between two calls of an empty
marker function) and run on ``qemu-system-arm -M mps2-an386`` (with
``--core m7``: a Cortex-M7 on ``mps2-an500``; ``--core m33``: a Cortex-M33,
``thumbv8m.main-none-eabihf``, on ``mps2-an505``; ``--core m55``: a
Cortex-M55, ``thumbv8.1m.main-none-eabihf``, on ``mps3-an547``) with a TCG
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
(median over the steps), cycles per multiply-accumulate, the runtime's
instructions in a step (the host program and the runtime shim: what is
not the kernel object's nor the C library's memcpy/memset; the copies'
own are in the JSON, copy_insns) with the step's dispatches, the library's
flash (code + weights, the manifest's footprint), RAM (the context) and the
stack the step used (painted and measured), and the max abs error of the
outputs against TensorFlow running the Keras model over the same steps.

The peer a user would pick, TFLite Micro with CMSIS-NN, is measured with
--tflm DIR, a TFLM source tree with its pinned third-party sources already
unpacked (see docs/performance.md, Cortex-M): its library is built there
once, each model is converted to .tflite (bench/mcu/tflm_models.py) and run
by bench/mcu/tflm_firmware.cc under the same plugin and marks. Its rows:
tflm-f32 and tflm-int8 (recurrent models as a one-step model, the state as
extra inputs and outputs), tflm-f32-fused and tflm-int8-fused for the LSTM
(TFLM's UNIDIRECTIONAL_SEQUENCE_LSTM, its state in variable tensors; the
int8 one with a fix to TFLM's CMSIS-NN kernel, which as shipped restarts
from a zero state every Invoke: tflm-int8-fused-stock); DS-CNN runs a whole 49 x 10 window per step,
as tfaot's "whole"/"int8-whole"/"int8-whole-f32" variants do (its other
rows stream 2 frames a step; "-f32": --intermediates=f32). A TFLM row's flash is its firmware's size minus a baseline
firmware's without TFLM and the model (TFLM code + model), its RAM the
arena the model used. Needs arm-none-eabi-gcc/g++, newlib and
qemu-system-arm (built with plugin support, as Debian's is).

    .venv/bin/python bench/bench_mcu.py [--steps N] [--models a,b] [--variants a,b] [--tflm DIR]
                                        [--core m4|m7|m33|m55]
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
#: --core: tfaot's triple and --cpu, the firmware's gcc flags, the QEMU
#: board and its linker script. The cycle estimate is the M4's table: on the
#: M7 (dual issue), the M33 and the M55 (Helium's beats) read instructions.
CORES = {"m4": {"triple": "thumbv7em-none-eabihf", "cpu": "cortex-m4", "flags": M4_FLAGS,
                "machine": "mps2-an386", "ld": "mps2.ld"},
         "m7": {"triple": "thumbv7em-none-eabihf", "cpu": "cortex-m7", "machine": "mps2-an500",
                "flags": ["-mthumb", "-mcpu=cortex-m7", "-mfpu=fpv5-d16", "-mfloat-abi=hard"],
                "ld": "mps2.ld"},
         "m33": {"triple": "thumbv8m.main-none-eabihf", "cpu": "cortex-m33",
                 "machine": "mps2-an505", "flags": ["-mthumb", "-mcpu=cortex-m33",
                                                    "-mfpu=fpv5-sp-d16", "-mfloat-abi=hard"],
                 "ld": "mps2_an505.ld"},
         "m55": {"triple": "thumbv8.1m.main-none-eabihf", "cpu": "cortex-m55",
                 "machine": "mps3-an547", "flags": ["-mthumb", "-mcpu=cortex-m55",
                                                    "-mfloat-abi=hard"],
                 "ld": "mps3_an547.ld"}}


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
    # the same with tanh and logistic computed, not looked up in a table
    "int8-exact": {"weights_dtype": "int8", "activations": "exact"},
    # one whole-window inference per step (models in WHOLE_WINDOW only): the
    # unit of TFLM's DS-CNN rows
    "whole": {"fixed_window": "whole"},
    # (f16 images between the convolutions: the default there)
    "int8-whole": {"weights_dtype": "int8", "fixed_window": "whole"},
    # the same with f32 images (--intermediates=f32)
    "int8-whole-f32": {"weights_dtype": "int8", "fixed_window": "whole",
                       "intermediates": "f32"},
    # and with f16 images asked for (on a Helium core, where f32 is the default)
    "int8-whole-f16": {"weights_dtype": "int8", "fixed_window": "whole",
                       "intermediates": "f16"},
}
#: fixed-window models: the "*-whole" variants and TFLM run one whole window a step
WHOLE_WINDOW = {"ds_cnn"}
WHOLE_STEPS = 10  # whole-window steps cost 5-35 M cycles: fewer of them
#: TFLM's rows: variant -> (precision, how tflm_models makes the .tflite);
#: "fused" only for LSTMs; "-stock": TFLM's CMSIS-NN fused LSTM as shipped,
#: which restarts from a zero state at every Invoke (see tflm_models.py):
#: not a streaming result, kept to show it, left out of the ratios
TFLM_VARIANTS = {"tflm-f32": ("f32", "step"), "tflm-int8": ("int8", "step"),
                 "tflm-f32-fused": ("f32", "fused"), "tflm-int8-fused": ("int8", "fused"),
                 "tflm-int8-fused-stock": ("int8", "fused")}
#: the tfaot variant a TFLM row is compared with: (precision, whole window?) -> variant
SAME_PRECISION = {("f32", False): "default", ("int8", False): "int8",
                  ("f32", True): "whole", ("int8", True): "int8-whole"}


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


def _load(path: Path):
    """A Python file of the repository (not a package) as a module."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def make_inputs():
    """examples/cortex_m/make_inputs.py: its write_header writes the inputs.h firmware.c reads."""
    return _load(CORTEXM / "make_inputs.py")


def firmware(lib: Path, name: str, xs: np.ndarray, workdir: Path,
             core: dict = CORES["m4"]) -> Path:
    make_inputs().write_header(xs, workdir / "inputs.h")
    image = workdir / "firmware.elf"
    run(["arm-none-eabi-gcc", "-std=c11", "-O2", *core["flags"], "-ffunction-sections",
         "-fdata-sections", f"-DTFAOT_MODEL={name}", f"-DTFAOT_UPPER={name.upper()}",
         f'-DTFAOT_HEADER="{name}.h"', "-I", lib, "-I", workdir, "-I", CORTEXM,
         "-nostartfiles", "-T", CORTEXM / core["ld"], "-Wl,--gc-sections",
         CORTEXM / "startup.c", MCU / "firmware.c", lib / f"lib{name}.a", "-lm", "-lc", "-lgcc",
         "-o", image])
    return image


def measure(image: Path, plugin: Path, steps: int, outputs: int,
            machine: str = "mps2-an386") -> dict:
    """Runs the firmware under QEMU: per-step instructions and cycles,
    outputs, stack, and the functions of one step by cycles."""
    nm = run(["arm-none-eabi-nm", "-n", image]).stdout.splitlines()
    marker = next(line.split()[0] for line in nm if line.endswith(" tfaot_mark"))
    # marks: the empty pair, init's pair, then two per step; profile a later step
    profiled_mark = 5 + 2 * min(10, steps - 1)
    proc = subprocess.run(
        ["qemu-system-arm", "-M", machine, "-nographic", "-monitor", "none", "-serial",
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
    # TFLM's firmware also prints the arena its model used, and the size of
    # its interpreter and op resolver (in .bss, beside the arena)
    word = {ln.split()[0]: int(ln.split()[1], 16) for ln in lines
            if ln.startswith(("arena ", "objects "))}
    return {"insns": float(np.median(per_step[:, 0])), "cycles": float(np.median(per_step[:, 1])),
            "init_insns": int(init[0]), "init_cycles": int(init[1]), "stack_bytes": stack,
            "arena_bytes": word.get("arena"), "objects_bytes": word.get("objects"),
            "ys": ys, **_profile(lines, nm)}


def _profile(lines: list[str], nm: list[str]) -> dict[str, dict[str, int]]:
    """Estimated cycles ("profile") and instructions ("profile_insns") of one
    step by function (the plugin's "tb" lines, each block attributed to the
    text symbol at or before its address)."""
    import bisect

    symbols = sorted((int(f[0], 16), f[2]) for f in (ln.split() for ln in nm)
                     if len(f) == 3 and f[1] in "tTW")
    starts = [a for a, _ in symbols]
    cycles: dict[str, int] = {}
    insns: dict[str, int] = {}
    for ln in lines:
        if not ln.startswith("tb "):
            continue
        addr, execs, count, cost = (int(v, 16) if i == 0 else int(v)
                                    for i, v in enumerate(ln.split()[1:]))
        i = bisect.bisect_right(starts, addr) - 1
        name = symbols[i][1] if i >= 0 else "?"
        cycles[name] = cycles.get(name, 0) + execs * cost
        insns[name] = insns.get(name, 0) + execs * count
    return {"profile": dict(sorted(cycles.items(), key=lambda kv: -kv[1])),
            "profile_insns": dict(sorted(insns.items(), key=lambda kv: -kv[1]))}


#: the C library's byte movers: the model's copies (its concatenations,
#: ring buffers, the step's input), wherever they are called from
COPY_FUNCTIONS = {"memcpy", "memmove", "memset", "__aeabi_memcpy", "__aeabi_memmove",
                  "__aeabi_memset", "__aeabi_memclr"}


def runtime_cost(lib: Path, name: str, profile_insns: dict[str, int]) -> dict[str, int]:
    """What a step spends besides the model's arithmetic: the runtime's
    instructions (the host program and the runtime shim: every function
    outside the kernel object NAME_kernels.o, which holds IREE's dispatches
    and tfaot's micro-kernels, and outside the C library's byte movers), the
    copies' (COPY_FUNCTIONS), and the dispatches of a step (the step
    function's dispatch sites: it is straight-line code)."""
    kernels = {f[2] for f in (ln.split() for ln in run(
        ["arm-none-eabi-nm", lib / "src" / f"{name}_kernels.o"]).stdout.splitlines())
        if len(f) == 3 and f[1] in "tTW"} - COPY_FUNCTIONS
    harness = {"main", "tfaot_mark"}  # the firmware's loop and its marks
    import re

    source = (lib / "src" / f"{name}.c").read_text()
    # the step's definition: the direct step (emit/direct_step.py) or the translated @step
    head = re.search(rf"^static int {name}_vm_step(_direct)?\(struct {name}_ctx \*ctx.*\{{$",
                     source, re.M)
    body = source[head.end():].split("\n}\n")[0]
    return {"runtime_insns": sum(v for k, v in profile_insns.items()
                                 if k not in kernels | harness | COPY_FUNCTIONS),
            "copy_insns": sum(v for k, v in profile_insns.items() if k in COPY_FUNCTIONS),
            "dispatches": body.count("/* dispatch ")}


def bench_model(model_name: str, variants: list[str], steps: int, plugin: Path,
                workdir: Path, tflm: tuple[Path, Path] | None = None,
                core: dict = CORES["m4"]) -> list[dict]:
    """tfaot's rows for the variants, then (tflm: TFLM's tree and its
    library) TFLM's rows."""
    from tfaot.pipeline import BuildOptions, Progress, build_model

    factory, macs = MODELS[model_name]
    model = factory()
    path = workdir / f"{model_name}.keras"
    model.save(path)
    whole_model = model_name in WHOLE_WINDOW
    rows, xs, want = [], None, None
    for variant in variants:
        whole = VARIANTS[variant].get("fixed_window") == "whole"
        if whole and not whole_model:
            continue  # a whole-window variant of a streaming-only model
        out = workdir / f"{model_name}-{variant}"
        start = time.perf_counter()
        built = build_model(str(path), BuildOptions(
            out_dir=out / "lib", triple=core["triple"], cpu=core["cpu"],
            **VARIANTS[variant]), Progress(enabled=False))
        if whole:
            x, y = _whole_windows(model, min(steps, WHOLE_STEPS))
        else:
            if xs is None:  # the step's input shape and the reference, from the first build
                xs, want = _inputs_and_reference(model, built.manifest, steps)
            x, y = xs, want
        image = firmware(built.path, model_name, x, out, core)
        got = measure(image, plugin, len(x), y.shape[1], core["machine"])
        fp = built.manifest["footprint"]
        rows.append(_row(model_name, variant, macs, got, y, start, whole,
                         flash_bytes=fp["code_bytes"] + fp["weight_bytes"],
                         weight_bytes=fp["weight_bytes"], ram_bytes=built.manifest["ctx_size"],
                         **runtime_cost(built.path, model_name, got["profile_insns"])))
    if tflm is None:
        return rows
    tflm_models = _load(MCU / "tflm_models.py")
    tree, lib = tflm
    if whole_model:
        x, y = _whole_windows(model, min(steps, WHOLE_STEPS))
        calibration = np.random.default_rng(1).standard_normal((50, *x.shape[1:]), np.float32)
    else:
        if xs is None:  # no tfaot row: a default build just for the step's inputs
            built = build_model(str(path), BuildOptions(
                out_dir=workdir / "inputs", triple="thumbv7em-none-eabihf", cpu="cortex-m4"),
                Progress(enabled=False))
            xs, want = _inputs_and_reference(model, built.manifest, steps)
        x, y = xs, want
        # int8 calibration: another random sequence of the same kind (the
        # one-step conversion runs it through the cell for the states it meets)
        calibration = np.random.default_rng(1).standard_normal((200, *x.shape[1:]), np.float32)
    is_lstm = type(model.layers[0]).__name__ == "LSTM"
    for variant, (precision, how) in TFLM_VARIANTS.items():
        if how == "fused" and not is_lstm:
            continue
        out = workdir / f"{model_name}-{variant}"
        out.mkdir()
        start = time.perf_counter()
        convert = (tflm_models.whole_window if whole_model else
                   tflm_models.fused_lstm if how == "fused" else tflm_models.one_step)
        tm = convert(model, precision, calibration)
        tflm_models.write_header(tm, out / "tflm_model.h")
        make_inputs().write_header(x, out / "inputs.h")
        fix = (how == "fused" and precision == "int8" and not variant.endswith("-stock"))
        extra = [tflm_models.stateful_lstm_kernel(tree, out)] if fix else []
        image = tflm_models.firmware(tree, lib, out, M4_FLAGS, CORTEXM, MCU, run, extra)
        baseline = tflm_models.firmware(tree, None, out, M4_FLAGS, CORTEXM, MCU, run)
        got = measure(image, plugin, len(x), y.shape[1])
        got["profile"] = _demangle(got["profile"])
        row = _row(model_name, variant, macs, got, y, start, whole_model,
                   flash_bytes=tflm_models.flash_bytes(image, run)
                   - tflm_models.flash_bytes(baseline, run),
                   weight_bytes=len(tm.data), ram_bytes=got["arena_bytes"])
        row.update(peer="tflm", ops=tm.ops, model_bytes=len(tm.data),
                   interpreter_bytes=got["objects_bytes"])
        rows.append(row)
    return rows


def _demangle(profile: dict[str, int]) -> dict[str, int]:
    """C++ symbols of a profile (TFLM's) as arm-none-eabi-c++filt writes them."""
    names = run(["arm-none-eabi-c++filt"], input="\n".join(profile)).stdout.splitlines()
    return dict(zip(names, profile.values())) if len(names) == len(profile) else profile


def _row(model_name: str, variant: str, macs, got: dict, want: np.ndarray, start: float,
         whole: bool, **sizes) -> dict:
    """One table row (and its progress line) from measure()'s results."""
    defined = ~np.isnan(want).any(axis=1)  # a window's first steps have no reference
    row = {"model": model_name, "variant": variant, "step": "whole window" if whole else "step",
           "macs": None if whole else macs,
           "insns_per_step": got["insns"], "cycles_per_step": got["cycles"],
           "cycles_per_mac": got["cycles"] / macs if macs and not whole else None,
           "init_cycles": got["init_cycles"], **sizes, "stack_bytes": got["stack_bytes"],
           "max_abs_error": float(np.max(np.abs(got["ys"][defined] - want[defined]))),
           "build_s": round(time.perf_counter() - start, 1), "profile": got["profile"],
           "profile_insns": got["profile_insns"]}
    top = ", ".join(f"{k} {v}" for k, v in list(got["profile"].items())[:4])
    print(f"{model_name:8} {variant:21} {row['insns_per_step']:>9.0f} insns "
          f"{row['cycles_per_step']:>9.0f} cycles   ({top})", flush=True)
    return row


def _whole_windows(model, steps: int) -> tuple[np.ndarray, np.ndarray]:
    """Random whole windows (steps, 1, *window) and TensorFlow's output for each."""
    xs = np.random.default_rng(0).standard_normal(
        (steps, 1, *model.input_shape[1:])).astype(np.float32)
    want = np.concatenate([np.asarray(model(x), np.float64).reshape(1, -1) for x in xs])
    return xs, want


def _inputs_and_reference(model, manifest: dict, steps: int) -> tuple[np.ndarray, np.ndarray]:
    """Random step inputs of the library's shape, and TensorFlow's output
    for each step (NaN where a window is not full yet)."""
    from tfaot.program import StreamInfo
    from tfaot.verify import keras_reference

    shape = manifest["inputs"][0]["shape"]
    xs = np.random.default_rng(0).standard_normal((steps, *shape)).astype(np.float32)
    stream = StreamInfo.from_json(manifest["stream"]) if manifest.get("stream") else None
    if stream is not None and stream.first_valid_step >= steps:
        raise SystemExit(f"--steps {steps}: the stream's first output is at step "
                         f"{stream.first_valid_step} (its window fills then); give more steps")
    want = keras_reference(model, xs, stream=stream,
                           step_output=tuple(manifest["outputs"][0]["shape"]))
    return xs, np.asarray(want, np.float64).reshape(steps, -1)


def table(rows: list[dict]) -> str:
    head = ("| model (MACs/step) | variant | instructions/step | est. M4 cycles/step | "
            "cycles/MAC | runtime instructions (dispatches) | flash (code + weights) | "
            "RAM (context) | stack | max abs error vs TF |")
    lines = [head, "|" + "---|" * 10]
    for r in rows:
        per_mac = f"{r['cycles_per_mac']:.2f}" if r["cycles_per_mac"] else "–"
        variant = r["variant"] + (" (whole window)" if r.get("step") == "whole window" else "")
        runtime = (f"{r['runtime_insns']} ({r['dispatches']})" if "runtime_insns" in r
                   else "–")
        lines.append(f"| {r['model']} ({r['macs'] or '–'}) | {variant} | "
                     f"{r['insns_per_step']:.0f} | {r['cycles_per_step']:.0f} | {per_mac} | "
                     f"{runtime} | {r['flash_bytes'] / 1024:.1f} KB | "
                     f"{r['ram_bytes'] / 1024:.1f} KB | {r['stack_bytes']} B | "
                     f"{r['max_abs_error']:.1e} |")
    return "\n".join(lines)


def ratios(rows: list[dict]) -> list[dict]:
    """tfaot's cycles over TFLM's, per model, at the same precision and unit
    (a step, or a whole window)."""
    ours = {(r["model"], r["variant"]): r for r in rows if r.get("peer") != "tflm"}
    out = []
    for r in rows:
        if r.get("peer") != "tflm" or r["variant"].endswith("-stock"):
            continue
        precision = TFLM_VARIANTS[r["variant"]][0]
        mine = ours.get((r["model"], SAME_PRECISION[precision, r["step"] == "whole window"]))
        if mine:
            out.append({"model": r["model"], "unit": r["step"], "precision": precision,
                        "tfaot": mine["variant"], "tfaot_cycles": mine["cycles_per_step"],
                        "tflm": r["variant"], "tflm_cycles": r["cycles_per_step"],
                        "ratio": mine["cycles_per_step"] / r["cycles_per_step"]})
    return out


def ratio_table(pairs: list[dict]) -> str:
    lines = ["| model | unit | precision | tfaot variant | tfaot cycles | TFLM variant | "
             "TFLM cycles | tfaot / TFLM |", "|" + "---|" * 8]
    for p in pairs:
        lines.append(f"| {p['model']} | {p['unit']} | {p['precision']} | {p['tfaot']} | "
                     f"{p['tfaot_cycles']:.0f} | {p['tflm']} | {p['tflm_cycles']:.0f} | "
                     f"{p['ratio']:.2f} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=100, help="steps per model (default 100)")
    ap.add_argument("--models", default=",".join(MODELS), help=f"of {', '.join(MODELS)}")
    ap.add_argument("--variants", default=",".join(VARIANTS), help=f"of {', '.join(VARIANTS)}")
    ap.add_argument("--out", type=Path, default=None, help="JSON results (default bench/results/)")
    ap.add_argument("--tflm", type=Path, default=None, metavar="DIR",
                    help="also measure TFLite Micro + CMSIS-NN from this source tree "
                         "(its third-party downloads unpacked; Cortex-M4 only)")
    ap.add_argument("--core", choices=sorted(CORES), default="m4",
                    help="m4 (mps2-an386, default), m7 (mps2-an500), m33 "
                         "(mps2-an505) or m55 (mps3-an547); but on the m4 read the "
                         "instructions, the cycle estimate is the M4's")
    args = ap.parse_args(argv)
    core = CORES[args.core]
    if args.tflm is not None and args.core != "m4":
        sys.exit("bench_mcu: --tflm builds TFLite Micro for the Cortex-M4 only (--core m4)")
    for tool in ("arm-none-eabi-gcc", "qemu-system-arm", "gcc",
                 *(("arm-none-eabi-g++",) if args.tflm else ())):
        if not shutil.which(tool):
            sys.exit(f"bench_mcu: needs {tool} (apt-get install gcc-arm-none-eabi "
                     "libnewlib-arm-none-eabi qemu-system-arm)")
    models, variants = args.models.split(","), [v for v in args.variants.split(",") if v]
    for name, known in ((models, MODELS), (variants, VARIANTS)):
        bad = [n for n in name if n not in known]
        if bad:
            sys.exit(f"bench_mcu: unknown {', '.join(bad)}; known: {', '.join(known)}")
    tflm = None
    if args.tflm is not None:  # checked (and the library built) before any row
        tflm = (args.tflm.resolve(), _load(MCU / "tflm_models.py").library(args.tflm.resolve()))
    else:
        print("bench_mcu: TFLite Micro peer skipped (add --tflm DIR, a TFLM source tree with its "
              "third-party downloads unpacked; see docs/performance.md)", flush=True)
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench_mcu_") as tmp:
        plugin = build_plugin(Path(tmp))
        for model_name in models:
            work = Path(tmp) / model_name
            work.mkdir()
            rows += bench_model(model_name, variants, args.steps, plugin, work, tflm, core)
    print()
    print(f"{core['cpu']} (qemu-system-arm {core['machine']}), medians over "
          f"{args.steps} steps ({WHOLE_STEPS} for whole windows); cycles estimated from the "
          "instruction mix (see --help)")
    print(table(rows))
    pairs = ratios(rows)
    if args.tflm:
        print("\nTFLM rows: flash = firmware text + data minus a baseline firmware's without "
              "TFLM and the model (TFLM code + model); RAM = the arena used "
              "(arena_used_bytes); recurrent models as a one-step model (state copied between "
              "steps outside the marks) or, -fused, UNIDIRECTIONAL_SEQUENCE_LSTM (-stock: as "
              "shipped, state lost between Invokes; not in the ratios)\n")
        print(ratio_table(pairs))
    out = args.out or RESULTS / f"mcu-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"cpu": f"{core['cpu']} (qemu {core['machine']}, cycles "
                                      "estimated with the M4's costs)",
                               "steps": args.steps, "whole_window_steps": WHOLE_STEPS,
                               "tflm": str(args.tflm) if args.tflm else None,
                               "rows": rows, "tflm_ratios": pairs}, indent=1))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
