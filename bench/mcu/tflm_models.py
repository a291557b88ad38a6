"""The TensorFlow Lite Micro + CMSIS-NN peer of bench_mcu.py: the bench's
Keras models as .tflite, TFLM's static library, and a firmware
(tflm_firmware.cc) that runs them with the same marks as firmware.c.

Recurrent models become a one-step model: the cell with its state as extra
inputs and outputs (the firmware copies each step's new state into the next
step's inputs, outside the marks). The LSTM also gets TFLM's fused
UNIDIRECTIONAL_SEQUENCE_LSTM, its state in variable tensors that persist
between Invokes; the converter fuses only tf_keras (Keras 2) LSTMs, whose
layer function carries the ``api_implements`` attribute the converter looks
for (Keras 3's does not), so that model is rebuilt in tf_keras with the
Keras 3 model's weights. DS-CNN runs one whole 49 x 10 window per Invoke.

TFLM's CMSIS-NN int8 UNIDIRECTIONAL_SEQUENCE_LSTM (at tflite-micro 90b983c2)
does not keep that state: it gives CMSIS-NN's arm_lstm_unidirectional_s8 no
hidden state and a scratch buffer as the cell state, so every Invoke starts
from zero (and skips the recurrent matvec, hidden state being NULL). The
bench measures it as shipped ("-stock") and with a two-line fix
(stateful_lstm_kernel: CMSIS-NN given the op's variable tensors), compiled
into the firmware in place of the library's kernel.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

MAKEFILE = "tensorflow/lite/micro/tools/make/Makefile"
DOWNLOADS = "tensorflow/lite/micro/tools/make/downloads"
#: what TFLM's Makefile would download (folder, what makes it whole); all
#: must be there: with one missing the Makefile reaches for the network
NEEDED = {"flatbuffers": "include/flatbuffers/flatbuffers.h", "gemmlowp": "fixedpoint",
          "ruy": "ruy", "kissfft": "kiss_fft.c", "cmsis": "CMSIS/Core/Include",
          "cmsis/Cortex_DFP": "Device", "cmsis_nn": "Include/arm_nnfunctions.h",
          "pigweed": ""}
ARENA_BYTES = 512 * 1024  # in .bss; the firmware prints how much of it the model used
#: the defines (and char signedness) TFLM's library was compiled with: TF_LITE_STATIC_MEMORY
#: changes TfLiteTensor's layout
TFLM_DEFINES = ["-DTF_LITE_STATIC_MEMORY", "-DTF_LITE_STRIP_ERROR_STRINGS", "-DNDEBUG",
                "-DCMSIS_NN", "-DARM_NN_ENABLE_F16=0", "-DARM_NN_ENABLE_F32=0", "-DARMCM4",
                "-DCPU_M4=1", "-DKERNELS_OPTIMIZED_FOR_SPEED", "-funsigned-char"]


def make_args() -> list[str]:
    """TFLM's make for a Cortex-M4F with CMSIS-NN, using the arm-none-eabi-gcc
    on PATH (TARGET_TOOLCHAIN_ROOT stops it downloading its own)."""
    root = Path(shutil.which("arm-none-eabi-gcc")).parent
    return ["make", "-f", MAKEFILE, "TARGET=cortex_m_generic", "TARGET_ARCH=cortex-m4+fp",
            "OPTIMIZED_KERNEL_DIR=cmsis_nn", "TOOLCHAIN=gcc",
            f"TARGET_TOOLCHAIN_ROOT={root}/", "BUILD_TYPE=release"]


def library(tflm: Path) -> Path:
    """TFLM's libtensorflow-microlite.a for cortex-m4+fp with CMSIS-NN,
    built here (5-9 minutes on 2 cores) if it is not there yet."""
    lib = (tflm / "gen" / "cortex_m_generic_cortex-m4+fp_release_cmsis_nn_gcc" / "lib"
           / "libtensorflow-microlite.a")
    if lib.exists():
        return lib
    if not (tflm / MAKEFILE).exists():
        sys.exit(f"bench_mcu: --tflm {tflm}: not a TFLM source tree (no {MAKEFILE})")
    missing = [d for d, inside in NEEDED.items()
               if not (tflm / DOWNLOADS / d / inside).exists()]
    if missing:
        sys.exit(f"bench_mcu: --tflm {tflm}: third-party downloads missing under {DOWNLOADS}/: "
                 f"{', '.join(missing)} (see docs/performance.md, Cortex-M)")
    # the examples' Makefiles run generate_cc_arrays.py with python3 while the
    # Makefile is read, even for microlite: it needs numpy and Pillow
    if subprocess.run(["python3", "-c", "import numpy, PIL"], capture_output=True).returncode:
        sys.exit("bench_mcu: TFLM's Makefile needs a python3 with numpy and Pillow first on PATH "
                 "(python3 -m venv V && V/bin/pip install numpy pillow; PATH=V/bin:$PATH)")
    print(f"bench_mcu: building TFLM's microlite in {tflm} (5-9 minutes on 2 cores)",
          flush=True)
    proc = subprocess.run([*make_args(), f"-j{os.cpu_count() or 1}", "microlite"],
                          cwd=tflm, capture_output=True, text=True)
    if proc.returncode != 0 or not lib.exists():
        sys.exit(f"bench_mcu: TFLM's make microlite failed:\n{(proc.stdout + proc.stderr)[-3000:]}")
    return lib


@dataclass
class TflmModel:
    """A converted model and where the firmware finds its tensors (positions
    in the subgraph's input and output lists)."""
    data: bytes
    ops: list[str]
    input_size: int
    output_size: int
    x_in: int = 0
    y_out: int = 0
    states: list[tuple[int, int, int]] = field(default_factory=list)  # (in, out, floats)


def _quiet():
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import warnings

    warnings.filterwarnings("ignore", module="tensorflow")  # tf.lite.Interpreter's deprecation


def _convert(converter, representative) -> bytes:
    """f32 as is; int8: weights and activations int8 (CMSIS-NN's kernels),
    float inputs and outputs (QUANTIZE/DEQUANTIZE in the model), as tfaot's
    step takes and gives floats."""
    import tensorflow as tf

    if representative is not None:
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
        converter.representative_dataset = representative
        converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
    return converter.convert()


def _interpreter(data: bytes):
    import tensorflow as tf

    it = tf.lite.Interpreter(
        model_content=data,
        experimental_op_resolver_type=(
            tf.lite.experimental.OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES))
    it.allocate_tensors()
    return it


def _ops(it) -> list[str]:
    return sorted({op["op_name"] for op in it._get_ops_details()})


def one_step(model, precision: str, calibration: np.ndarray) -> TflmModel:
    """The RNN layer's cell and the Dense after it as one step:
    (x, state...) -> (y, new state...), frozen (no resource variables)."""
    _quiet()
    import tensorflow as tf
    from tensorflow.python.framework.convert_to_constants import \
        convert_variables_to_constants_v2

    rnn, dense = model.layers[0], model.layers[1]
    cell = rnn.cell
    sizes = list(cell.state_size) if isinstance(cell.state_size, (list, tuple)) \
        else [cell.state_size]
    features = model.input_shape[-1]
    spec = [tf.TensorSpec((1, features), tf.float32, "x")] + \
        [tf.TensorSpec((1, s), tf.float32, f"s{i}") for i, s in enumerate(sizes)]

    @tf.function(input_signature=spec)
    def step(x, *states):
        h, new = cell(x, list(states) if len(states) > 1 else states[0])
        return (dense(h), *tf.nest.flatten(new))  # outputs Identity, Identity_1, ...

    frozen = convert_variables_to_constants_v2(step.get_concrete_function())
    seen = []  # int8: the states the model meets, from the float step over a random sequence
    if precision == "int8":
        state = [np.zeros((1, s), np.float32) for s in sizes]
        for x in calibration:
            x = x.reshape(1, features)
            seen.append([x, *state])  # in the model's input order (checked below)
            state = [np.asarray(s) for s in step(tf.constant(x), *state)[1:]]
    data = _convert(tf.lite.TFLiteConverter.from_concrete_functions([frozen]),
                    (lambda: iter(seen)) if seen else None)
    it = _interpreter(data)
    ins = [d["name"] for d in it.get_input_details()]
    if ins != ["x", *(f"s{i}" for i in range(len(sizes)))]:
        sys.exit(f"bench_mcu: TFLM peer: inputs {ins}, the calibration assumed x, s0, ...")
    outs = [d["name"] for d in it.get_output_details()]
    # "Identity_k" is the k-th returned tensor; positions in the subgraph can differ
    order = [0 if n == "Identity" else int(re.fullmatch(r"Identity_(\d+)", n)[1]) for n in outs]
    for d in [*it.get_input_details(), *it.get_output_details()]:
        if d["dtype"] != np.float32:
            sys.exit(f"bench_mcu: TFLM peer: {d['name']} is {d['dtype']}, "
                     "the firmware feeds floats")
    return TflmModel(data, _ops(it), features, int(dense.units),
                     x_in=ins.index("x"), y_out=order.index(0),
                     states=[(ins.index(f"s{i}"), order.index(i + 1), s)
                             for i, s in enumerate(sizes)])


def fused_lstm(model, precision: str, calibration: np.ndarray) -> TflmModel:
    """The same LSTM + Dense in tf_keras (Keras 2), a sequence of one frame
    per Invoke, batch 1: the converter makes UNIDIRECTIONAL_SEQUENCE_LSTM whose
    state tensors are variables that TFLM keeps between Invokes."""
    _quiet()
    import tensorflow as tf
    import tf_keras

    rnn, dense = model.layers[0], model.layers[1]
    features = model.input_shape[-1]
    twin = tf_keras.Sequential([tf_keras.Input((1, features), batch_size=1),
                                tf_keras.layers.LSTM(rnn.units, return_sequences=True),
                                tf_keras.layers.Dense(dense.units)])
    twin.set_weights([np.asarray(w) for w in model.weights])  # same order and gate layout

    def representative():
        for x in calibration:
            yield [x.reshape(1, 1, features).astype(np.float32)]

    data = _convert(tf.lite.TFLiteConverter.from_keras_model(twin),
                    representative if precision == "int8" else None)
    it = _interpreter(data)
    ops = _ops(it)
    if "UNIDIRECTIONAL_SEQUENCE_LSTM" not in ops:
        sys.exit(f"bench_mcu: TFLM peer: the converter did not fuse the LSTM ({ops})")
    return TflmModel(data, ops, features, int(dense.units))


def whole_window(model, precision: str, calibration: np.ndarray) -> TflmModel:
    """A fixed-window model (DS-CNN) as it is: one whole window per Invoke."""
    _quiet()
    import tensorflow as tf
    from tensorflow.python.framework.convert_to_constants import \
        convert_variables_to_constants_v2

    shape = tuple(model.input_shape[1:])

    @tf.function(input_signature=[tf.TensorSpec((1, *shape), tf.float32, "x")])
    def window(x):
        return model(x)

    frozen = convert_variables_to_constants_v2(window.get_concrete_function())

    def representative():
        for x in calibration:
            yield [x.reshape(1, *shape).astype(np.float32)]

    data = _convert(tf.lite.TFLiteConverter.from_concrete_functions([frozen]),
                    representative if precision == "int8" else None)
    it = _interpreter(data)
    return TflmModel(data, _ops(it), int(np.prod(shape)),
                     int(np.prod(it.get_output_details()[0]["shape"])))


#: TFLite builtin name -> MicroMutableOpResolver's Add method, where the
#: CamelCase of the name is not it
_ADD = {"UNIDIRECTIONAL_SEQUENCE_LSTM": "UnidirectionalSequenceLSTM"}


def write_header(tm: TflmModel, path: Path) -> None:
    """tflm_model.h for tflm_firmware.cc: the model bytes, the ops to
    register, and where the input, output and state tensors are."""
    adds = [_ADD.get(op) or "".join(w.capitalize() if w.isalpha() else w
                                    for w in op.split("_")) for op in tm.ops]
    n = max(len(tm.states), 1)  # no zero-length arrays in C++
    pad = [(0, 0, 0)] * (n - len(tm.states))
    rows = [", ".join(f"0x{b:02x}" for b in tm.data[i:i + 16])
            for i in range(0, len(tm.data), 16)]
    states = tm.states + pad
    path.write_text(
        "/* Written by bench/mcu/tflm_models.py: one model for tflm_firmware.cc. */\n"
        f"#define TFLM_ARENA_BYTES {ARENA_BYTES}\n"
        f"#define TFLM_NUM_OPS {len(adds)}\n"
        f"#define TFLM_ADD_OPS(r) {' '.join(f'r.Add{a}();' for a in adds)}\n"
        f"#define TFLM_INPUT {tm.x_in}\n#define TFLM_INPUT_SIZE {tm.input_size}\n"
        f"#define TFLM_OUTPUT {tm.y_out}\n#define TFLM_OUTPUT_SIZE {tm.output_size}\n"
        f"#define TFLM_NUM_STATES {len(tm.states)}\n"
        f"#define TFLM_STATE_FLOATS {sum(s for _, _, s in tm.states) or 1}\n"
        f"static const int tflm_state_in[{n}] = {{{', '.join(str(s[0]) for s in states)}}};\n"
        f"static const int tflm_state_out[{n}] = {{{', '.join(str(s[1]) for s in states)}}};\n"
        f"static const int tflm_state_size[{n}] = {{{', '.join(str(s[2]) for s in states)}}};\n"
        f"alignas(16) static const unsigned char tflm_model[{len(tm.data)}] = {{\n"
        + ",\n".join(rows) + "\n};\n")


#: the fix: CMSIS-NN's LSTM context given the op's state tensors (hidden:
#: int8 output state, cell: int16), which it reads and updates in place
_CMSIS_LSTM = "tensorflow/lite/micro/kernels/cmsis_nn/unidirectional_sequence_lstm.cc"
_STOCK = """  cmsis_buffers.cell_state = reinterpret_cast<int16_t*>(buffers.buffer2);

  if (arm_lstm_unidirectional_s8("""
_FIXED = """  // bench_mcu: the state in the op's variable tensors, kept between Invokes
  cmsis_buffers.cell_state = tflite::micro::GetTensorData<int16_t>(
      kernel_content.internal_tensors[tflite::kLstmCellStateTensor]);
  cmsis_buffers.hidden_state = tflite::micro::GetTensorData<int8_t>(
      kernel_content.internal_tensors[tflite::kLstmOutputStateTensor]);

  if (arm_lstm_unidirectional_s8("""


def stateful_lstm_kernel(tflm: Path, workdir: Path) -> Path:
    """TFLM's CMSIS-NN LSTM kernel with the fix, for the firmware to link
    before the library (whose own kernel is then not pulled in)."""
    source = (tflm / _CMSIS_LSTM).read_text()
    if _STOCK not in source:
        sys.exit(f"bench_mcu: {tflm / _CMSIS_LSTM} is not the kernel the LSTM state fix was "
                 "written for (tflite-micro 90b983c2); see bench/mcu/tflm_models.py")
    patched = workdir / "unidirectional_sequence_lstm_stateful.cc"
    patched.write_text(source.replace(_STOCK, _FIXED, 1))
    return patched


def firmware(tflm: Path, lib: Path | None, workdir: Path, m4_flags: list[str],
             cortexm: Path, mcu: Path, run, extra: list[Path] = ()) -> Path:
    """Links tflm_firmware.cc (and extra sources) with TFLM's library (lib
    None: the baseline firmware, the same skeleton without TFLM and the
    model, whose size is subtracted to give the peer's flash)."""
    image = workdir / ("baseline.elf" if lib is None else "tflm.elf")
    inc = [tflm, tflm / DOWNLOADS / "flatbuffers" / "include", tflm / DOWNLOADS / "gemmlowp",
           tflm / DOWNLOADS / "kissfft", tflm / DOWNLOADS / "cmsis_nn",
           tflm / DOWNLOADS / "cmsis" / "CMSIS" / "Core" / "Include"]
    startup = workdir / "startup.o"  # C, as firmware.c's image has it (g++ would read it as C++)
    run(["arm-none-eabi-gcc", "-std=c11", "-O2", *m4_flags, "-ffunction-sections",
         "-fdata-sections", "-I", cortexm, "-c", cortexm / "startup.c", "-o", startup])
    run(["arm-none-eabi-g++", "-std=c++17", "-O2", *m4_flags, "-fno-exceptions", "-fno-rtti",
         "-fno-threadsafe-statics", "-ffunction-sections", "-fdata-sections", *TFLM_DEFINES,
         *(["-DTFLM_BASELINE"] if lib is None else []),
         *[a for d in inc for a in ("-I", d)], "-I", workdir, "-I", cortexm,
         "-nostartfiles", "-T", cortexm / "mps2.ld", "-Wl,--gc-sections",
         startup, mcu / "tflm_firmware.cc", *(extra if lib else []), *([lib] if lib else []),
         "-lm", "-lc", "-lgcc", "-o", image])
    return image


def flash_bytes(image: Path, run) -> int:
    """What the image puts in flash: text (code + rodata) + data, as arm-none-eabi-size says."""
    fields = run(["arm-none-eabi-size", image]).stdout.splitlines()[1].split()
    return int(fields[0]) + int(fields[1])
