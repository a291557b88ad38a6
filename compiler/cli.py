"""The `tfaot` command line."""
from __future__ import annotations

import argparse
import math
import os
import signal
import sys
from contextlib import contextmanager
from pathlib import Path

from .errors import TfaotError, first_line, printable
from .target import KINDS

DESCRIPTION = """\
tfaot compiles a recurrent TensorFlow/Keras model into a streaming step
function: the time loop is removed, the recurrent state lives in globals and
each call of step() consumes one sample.

Model formats: .keras, .h5 (Keras 3 or Keras 2), SavedModel folders, frozen
GraphDefs (.pb, .pbtxt)."""


def _add_stream_options(p: argparse.ArgumentParser) -> None:
    how = p.add_mutually_exclusive_group()
    how.add_argument("--stream", dest="fixed_window", action="store_const", const="stream",
                     default="auto",
                     help="stream a model without recurrence over axis 1 as a sliding "
                          "window, frame by frame (the default for inputs (batch, time, "
                          "features) and (batch, time, H, W, C); use it for an input "
                          "(batch, time, features, 1) that is not an image)")
    how.add_argument("--whole-window", dest="fixed_window", action="store_const",
                     const="whole",
                     help="run one whole inference per step on a model with a fixed window "
                          "(the default for images without recurrence: inputs (batch, H, W, "
                          "C)); e.g. a keyword spotter over 49 frames, once per 49 frames, "
                          "or a recurrent model over a fixed T, its state from zero each step")


def _size(text: str) -> int:
    from .sizes import parse_size

    try:
        return parse_size(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _add_size_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("sizes (said before compiling; a build past a limit is refused)")
    g.add_argument("--max-context-bytes", type=_size, metavar="SIZE",
                   help="the largest context (state, step I/O and, with --weights=file, the "
                        "weights) to build, e.g. 4G (default: 1G)")
    g.add_argument("--max-weight-bytes", type=_size, metavar="SIZE",
                   help="the largest weights (and model files) to build, e.g. 2G (default: 1G)")
    g.add_argument("--allow-large", action="store_true",
                   help="no size limit but what the target can address (4 GiB on 32-bit "
                        "targets, 1.5 GiB of RAM on a Cortex-M)")


def _size_limits(args):
    from .sizes import SizeLimits

    limits = SizeLimits.unlimited() if args.allow_large else SizeLimits()
    return SizeLimits(args.max_context_bytes or limits.context_bytes,
                      args.max_weight_bytes or limits.weight_bytes)


def _add_graph_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--allow-lambda", action="store_true",
                   help="load a Keras model's Lambda layers, whose Python code runs as the "
                        "file loads (Keras refuses them by default): only for files you "
                        "trust")
    p.add_argument("--custom-objects", metavar="FILE.py,...",
                   help="Python files that define the Keras model's own classes (custom "
                        "layers, cells, activations): they run before the model loads and "
                        "what they define is registered with Keras under its name; only "
                        "files you trust")
    g = p.add_argument_group("graph formats (frozen .pb/.pbtxt, SavedModel)")
    g.add_argument("--inputs", metavar="NAME[:INDEX][:SHAPE],...",
                   help="the streamed input: a placeholder or any tensor inside the graph, "
                        "where the graph is cut (everything that only feeds it is dropped), "
                        "optionally with its full shape, e.g. Mfcc:1x100x10 or x:0:1x100x40 "
                        "(default: found automatically); for a Keras model, sizes for its "
                        "Input layers' open axes, e.g. image:1x224x224x3 for an "
                        "Input((None, None, 3))")
    g.add_argument("--outputs", metavar="NAME,...",
                   help="output nodes (default: nodes nothing consumes / signature outputs)")
    g.add_argument("--time-axis", type=int, metavar="AXIS",
                   help="the time axis of the input (default: found by probing)")
    g.add_argument("--state", metavar="IN=OUT,...",
                   help="a graph that is already one step, with its state as inputs and "
                        "outputs: keep output OUT as the state fed to input IN at the next "
                        "step (default: pairs whose names say so, e.g. "
                        "previous_state_c=new_state_c)")
    g.add_argument("--signature", metavar="NAME",
                   help="the SavedModel signature to compile (default: serving_default, "
                        "else the first by name; the build says which when there are "
                        "several)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tfaot", description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quiet", "-q", action="store_true", help="no progress lines")
    # Also accepted after the command (`tfaot build -q m.keras`); SUPPRESS keeps
    # a value given before the command.
    quiet = argparse.ArgumentParser(add_help=False)
    quiet.add_argument("--quiet", "-q", action="store_true", default=argparse.SUPPRESS,
                       help="no progress lines")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    p = sub.add_parser("import", parents=[quiet], help="write the streaming module as StableHLO + ml_program MLIR",
                       description="Load, streamify and import MODEL; write MLIR that "
                                   "contains only func, stablehlo and ml_program ops.")
    p.add_argument("model", metavar="MODEL")
    p.add_argument("-o", "--output", metavar="OUT.mlir",
                   help="output file (default: MODEL's name with .mlir, in the current folder)")
    _add_stream_options(p)
    _add_graph_options(p)

    p = sub.add_parser("inspect", help="show layers, state tensors and the step signature",
                       description="Print the detected format, the layers (which are "
                                   "recurrent), each state tensor, the step input/output "
                                   "shapes and the parameter count.")
    p.add_argument("model", metavar="MODEL")
    p.add_argument("--json", action="store_true", help="print JSON instead of text")
    _add_stream_options(p)
    _add_graph_options(p)

    p = sub.add_parser("build", parents=[quiet], help="compile MODEL into a C library (.h, .a, .so, manifest)",
                       description="Run load -> streamify -> import -> compile -> emit -> "
                                   "package and write a folder with NAME.h, libNAME.a, "
                                   "libNAME.so (host triple only), NAME.json and the sources "
                                   "a firmware build needs (src/). The folder appears only "
                                   "when the build succeeds.")
    p.add_argument("model", metavar="MODEL")
    p.add_argument("--target", default="cpu", choices=list(KINDS),
                   help="where the kernels run: cpu (default; kernels linked into the "
                        "library), vulkan (SPIR-V kernels run through the Vulkan driver "
                        "that the library loads at init) or cuda (PTX kernels run through "
                        "libcuda.so.1, loaded at init); same C API")
    p.add_argument("-o", "--output", metavar="DIR",
                   help="output folder (default: build/NAME); an existing folder is replaced "
                        "only if it is empty or a previous tfaot output")
    p.add_argument("--force", action="store_true",
                   help="replace the output folder even if it holds files tfaot did not "
                        "write (they are deleted; the model itself never is)")
    p.add_argument("--name", help="C symbol prefix (default: the model file's stem)")
    p.add_argument("--triple", help="target triple (ELF only), e.g. aarch64-linux-gnu or "
                                    "thumbv7em-none-eabihf (default: the host's)")
    p.add_argument("--cpu", help="target CPU, e.g. cortex-m4 (default: host for the host "
                                 "triple, generic otherwise); one of the triple's "
                                 "architecture (cortex-m* with thumbv*, x86 CPUs with "
                                 "x86_64)")
    p.add_argument("--cuda-arch", metavar="SM",
                   help="--target=cuda: the GPU architecture of the PTX: sm_80 (default), "
                        "sm_86, sm_89 or sm_120; the driver compiles sm_80 PTX for newer "
                        "GPUs (sm_90, sm_100) at load")
    p.add_argument("--keep-temps", action="store_true",
                   help="keep every stage's artifacts (MLIR, VM program, kernels) in DIR/temps "
                        "(of a build that fails past the frontend: in DIR.failed-temps)")
    p.add_argument("--weights", choices=["embedded", "file"], default="embedded",
                   help="where the weights live: embedded (default) in the library's "
                        "read-only data (flash on a microcontroller), or file: a "
                        "NAME.weights sidecar next to the library that the program loads "
                        "and passes to NAME_init_with_weights (checked against a hash in "
                        "NAME.h: new weights need a new build; the file lets them live "
                        "apart from the code, e.g. in their own flash region)")
    p.add_argument("--pack-weights", action=argparse.BooleanOptionalAction, default=None,
                   help="pack the weights of the matrix products tfaot's micro-kernels do "
                        "not take once at init into a RAM copy laid out for IREE's kernels "
                        "(default: on for Linux triples when the model has 16 KiB of weights "
                        "or more and some matrix product is left to IREE's kernels; off for "
                        "bare metal, where weights stay in flash); never for a model with a "
                        "constant boolean mask (causal attention), which IREE's packing "
                        "fails on")
    p.add_argument("--matvec", choices=["tfaot", "iree"], default=None,
                   help="who computes constant-weight matrix-vector products and "
                        "convolutions (also depthwise): tfaot's own micro-kernels with weights "
                        "packed at build time in read-only data (default on Linux triples, "
                        "and on Cortex-M with an FPU or with --weights-dtype=int8: there for "
                        "matrices of 256 weights or more, depthwise and, with a scalar FPU, "
                        "other convolutions), or IREE's generated kernels (the default "
                        "elsewhere)")
    p.add_argument("--weights-dtype", choices=["f32", "f16", "bf16", "int8"], default="f32",
                   help="how tfaot's micro-kernels store their weights: f32 (default), "
                        "f16/bf16 at half width (half the weight bytes, faster on models "
                        "bound by reading them; math stays f32, error vs f32 about 1e-4 "
                        "(f16) / 1e-3 (bf16)), or int8: matvecs (dense layers, LSTM/GRU "
                        "gates) of 1024 weights or more (256 on Cortex-M4/M7/M33; smaller "
                        "ones stay f32) and, on targets with int8 dot products (AVX-512 VNNI, "
                        "aarch64 dotprod: --cpu host, or a named CPU that has them; 32-bit "
                        "Arm), convolutions with "
                        "int8 weights, one scale per output channel, and an input quantized "
                        "to int8 at every call, summed in int32 (the scheme of LiteRT's "
                        "dynamic-range int8; error about 1e-3 to 1e-2; depthwise "
                        "convolutions keep f32 weights); needs tfaot's kernels "
                        "(--matvec=tfaot, the default on Linux triples; bare-metal int8 "
                        "builds take them by themselves)")
    p.add_argument("--activations", choices=["exact", "table"], default=None,
                   help="tanh and sigmoid (LSTM/GRU gates, Dense and Conv activations): "
                        "exact (to float32 rounding) or table: looked up in a 2 KiB table "
                        "and interpolated, within 1.1e-4, in a third of the cycles on a "
                        "core without vector units; an infinite input gives NaN, as in "
                        "the int8 kernels (default: table for int8 builds on "
                        "bare-metal Arm where a matrix took int8 weights, which alone move "
                        "the outputs by 1e-3 and more; exact elsewhere)")
    p.add_argument("--intermediates", choices=["f32", "f16"], default=None,
                   help="how the images between tfaot's convolution kernels are stored: "
                        "f32 or f16: IEEE halves, half the RAM of a convolutional "
                        "model's largest temporaries (a keyword spotter's layers on a "
                        "microcontroller) for one more rounding per layer (2^-11 relative, "
                        "growing with depth: 3e-4 on a DS-CNN, 2e-2 on a MobileNetV2; math "
                        "stays f32; the input is rounded to f16 before the first "
                        "convolution); needs tfaot's kernels (--matvec=tfaot, the default "
                        "on Linux triples and Cortex-M with an FPU). Default: f16 for "
                        "--weights-dtype=int8 builds on a Cortex-M4/M7/M33 whose step is "
                        "one whole inference (--whole-window, images), f32 elsewhere")
    p.add_argument("--streams", type=int, default=1, metavar="N",
                   help="independent streams per context (default 1): NAME_step takes N "
                        "frames, one per stream (stream-major), and writes N outputs; "
                        "each weight is read once for all N (servers stepping many "
                        "microphones); NAME_reset_stream, NAME_get_stream_state and "
                        "NAME_set_stream_state move one stream")
    _add_size_options(p)
    _add_stream_options(p)
    _add_graph_options(p)

    p = sub.add_parser("verify", help="compare a built library with TensorFlow",
                       usage="tfaot verify [options] MODEL DIR\n"
                             "       tfaot verify MODEL DIR --save-case FILE\n"
                             "       tfaot verify --case FILE DIR",
                       description="Run a random input sequence through TensorFlow on the "
                                   "original model (whole sequence) and through the built "
                                   ".so step by step (a build for another machine: its .a "
                                   "under QEMU, qemu-user for Linux triples, "
                                   "qemu-system-arm for a Cortex-M4/M7/M33/M55); print the "
                                   "max abs error per output. "
                                   "Exit status 1 if it is above the tolerance. To check a "
                                   "library on a machine without TensorFlow (a GPU server, "
                                   "a board), save the inputs and TensorFlow's outputs with "
                                   "--save-case where TensorFlow is, and run --case there.")
    # One list, split in check_arguments: argparse cannot take an optional
    # positional before a required one once an option comes between them.
    p.add_argument("paths", metavar="PATH", nargs="+",
                   help="MODEL (the model the library was built from) and DIR (the folder "
                        "`tfaot build` wrote); DIR alone with --case")
    p.add_argument("--steps", type=int, default=None, help="sequence length (default: 200)")
    p.add_argument("--seed", type=int, default=None, help="random seed (default: 0)")
    p.add_argument("--tol", type=float, default=None,
                   help="max abs error allowed (default: 1e-5, times L/4 for a model of L > 4 "
                        "convolutions and matrix products (f32 rounding grows with depth); "
                        "1e-3 for a library built with "
                        "--weights-dtype=f16, 1e-2 with bf16, 5e-2 with int8; 5e-2 "
                        "with --intermediates=f16; each times "
                        "TensorFlow's largest |output| where that is over 1; with --case: "
                        "the saved case's)")
    p.add_argument("--save-case", metavar="FILE", default=None,
                   help="write the inputs and TensorFlow's outputs to FILE (.npz) instead of "
                        "running the library; the library's .json is all that is read")
    p.add_argument("--case", metavar="FILE", default=None,
                   help="run the library on a case saved with --save-case and compare; "
                        "TensorFlow is not needed (nor imported)")
    _add_graph_options(p)

    sub.add_parser("cmake-path", help="print the path of tfaot.cmake (tfaot_add_model)",
                   description="Print the absolute path of tfaot.cmake, for "
                               "include() in a CMake project.")
    return parser


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the process is: a KeyboardInterrupt, so that
    whatever cleans up after Ctrl-C (the staging folder, a running
    iree-compile that subprocess.run kills) does so after `kill` too."""


@contextmanager
def _sigterm_raises():
    """Turns SIGTERM into ``Terminated`` while a command runs (main thread only:
    Python delivers signals there)."""
    def handler(signum, frame):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second one must not cut the cleanup
        raise Terminated()

    try:
        previous = signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread (an embedding caller): leave it alone
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def parse(argv: list[str] | None):
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    # verify's PATHs may sit on both sides of an option (MODEL --steps 9 DIR):
    # argparse leaves a variable-length positional's later part unparsed
    if args.command == "verify" and not any(e.startswith("-") for e in extra):
        args.paths += extra
    elif extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    try:
        with _sigterm_raises():
            check_arguments(args)
            if getattr(args, "allow_lambda", False):
                from .frontend.tfenv import quiet_tensorflow

                quiet_tensorflow()  # (keras imports TensorFlow, which is noisy)
                import keras

                keras.config.enable_unsafe_deserialization()
            if getattr(args, "custom_objects", None):
                from .frontend.custom_objects import register_files
                from .frontend.tfenv import quiet_tensorflow

                quiet_tensorflow()
                register_files([f for f in args.custom_objects.split(",") if f])
            status = COMMANDS[args.command](args)
            sys.stdout.flush()  # a closed pipe shows here, among the handlers below
            return status
    except BrokenPipeError:  # `tfaot inspect m.pb | head`: stop quietly, as unix tools do
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except TfaotError as e:
        print(f"tfaot: error: {printable(str(e))}", file=sys.stderr)
        return 1
    except OSError as e:  # the file system said no (disk full, permissions, ...)
        where = f"{e.filename}: " if e.filename else ""
        print(f"tfaot: error: {where}{e.strerror or e}", file=sys.stderr)
        return 1
    except Terminated:
        print("tfaot: terminated", file=sys.stderr)
        return 128 + signal.SIGTERM
    except KeyboardInterrupt:
        print("tfaot: interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # a bug in tfaot: say so plainly, traceback on request
        if os.environ.get("TFAOT_DEBUG"):
            raise
        print(f"tfaot: internal error: {type(e).__name__}: {first_line(e) if str(e) else ''}"
              " (this is a tfaot bug; set TFAOT_DEBUG=1 for the traceback)", file=sys.stderr)
        return 2


def _graph_options(args):
    from .pipeline import GraphOptions

    return GraphOptions(args.inputs, args.outputs, args.time_axis, args.state,
                        args.signature)


def check_arguments(args) -> None:
    """Values argparse accepts but no command can use: refused before any work."""
    if args.command == "verify":
        _check_verify_arguments(args)
    if hasattr(args, "inputs"):
        _check_graph_flags(args)


def _check_verify_arguments(args) -> None:
    if len(args.paths) > 2:
        raise TfaotError(f"verify takes MODEL and DIR; got {len(args.paths)} paths")
    args.model, args.dir = ([None] + args.paths)[-2:]
    if args.tol is not None and not (math.isfinite(args.tol) and args.tol >= 0):
        raise TfaotError(f"--tol {args.tol}: must be a finite number, 0 or more")
    if args.case is not None:
        given = [f for f, v in (("MODEL", args.model), ("--steps", args.steps),
                                ("--seed", args.seed), ("--save-case", args.save_case))
                 if v is not None]
        if given:
            raise TfaotError(f"--case runs a saved case; {', '.join(given)} belong to making "
                             "one (tfaot verify MODEL DIR --save-case FILE)")
        return
    if args.model is None:
        raise TfaotError("verify needs MODEL and DIR (or --case FILE DIR)")
    args.steps = 200 if args.steps is None else args.steps
    args.seed = 0 if args.seed is None else args.seed
    if args.steps < 1:
        raise TfaotError("--steps must be at least 1")
    if args.seed < 0:
        raise TfaotError(f"--seed {args.seed}: must be 0 or more")


def _check_graph_flags(args) -> None:
    """The graph flags parse (names given once, dimensions positive), and a
    Keras model, which has no use for them, says they are ignored."""
    from .frontend.load import detect_format
    from .frontend.load_graph import parse_input_specs, parse_output_specs
    from .streamify_graph.state_feedback import parse_pairs

    parse_input_specs(args.inputs, "--inputs")
    parse_output_specs(args.outputs)
    _check_state_pairs(parse_pairs(args.state) or [])
    # (--inputs sizes a Keras model's inputs: frontend/keras_inputs.py)
    given = [flag for flag, value in (("--outputs", args.outputs),
                                      ("--time-axis", args.time_axis), ("--state", args.state),
                                      ("--signature", args.signature)) if value is not None]
    if given and detect_format(Path(args.model)) in ("keras", "h5"):
        print(f"tfaot: warning: {args.model}: ignoring {', '.join(given)}: "
              f"{'it applies' if len(given) == 1 else 'they apply'} to graph formats "
              "(frozen graphs, SavedModels); a Keras model's inputs and state come from its "
              "layers", file=sys.stderr)


def _check_state_pairs(pairs) -> None:
    """Each state input fed by one output, each output feeding one input."""
    for side, names in (("input", [a for a, _ in pairs]), ("output", [b for _, b in pairs])):
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            raise TfaotError(f"--state: {side} '{repeated[0]}' is named in two pairs")


def cmd_import(args) -> int:
    from .pipeline import Progress, run_frontend, write_atomically

    out = Path(args.output) if args.output else Path(Path(args.model).name).with_suffix(".mlir")
    check_output_file(out)
    progress = Progress(enabled=not args.quiet)
    _, mlir_text = run_frontend(args.model, progress, _graph_options(args),
                                fixed_window=args.fixed_window)
    write_atomically(out, mlir_text)
    if not args.quiet:
        print(f"tfaot: wrote {out}", file=sys.stderr)
    return 0


def check_output_file(out: Path) -> None:
    """An output file's place must be a writable folder; checked before the slow stages."""
    if out.is_dir():
        raise TfaotError(f"-o {out}: is a folder; give a file name (e.g. model.mlir)")
    parent = out.parent if str(out.parent) else Path(".")
    if not parent.is_dir():
        raise TfaotError(f"-o {out}: the folder {parent} does not exist")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise TfaotError(f"-o {out}: the folder {parent} is not writable")


def cmd_inspect(args) -> int:
    from .inspect_report import inspect_json, inspect_text
    from .pipeline import Progress, load_and_streamify

    program = load_and_streamify(args.model, Progress(enabled=False), _graph_options(args),
                                 fixed_window=args.fixed_window)
    _add_id_ranges(program)
    print(inspect_json(program) if args.json else inspect_text(program))
    return 0


def _add_id_ranges(program) -> None:
    """Integer inputs: import the step to find which index a table and their
    valid ids (what the built step checks); skipped if the import fails."""
    import numpy as np

    inputs = program.signature.inputs
    if not any(np.issubdtype(np.dtype(t.dtype), np.integer) for t in inputs):
        return
    from .lower import input_ranges
    from .lower.mlir_import import import_program

    try:
        text = import_program(program)
    except TfaotError:
        return  # (build names the error)
    analysis = input_ranges.analyze(text, len(inputs))
    ranges = input_ranges.input_id_ranges(analysis, inputs)
    program.report["id_ranges"] = {inputs[i].name: r for i, r in ranges.items()}
    if analysis.unchecked:
        program.report.setdefault("notes", []).extend(
            f"{u}: those ids are not range-checked" for u in analysis.unchecked)


def cmd_build(args) -> int:
    from .pipeline import BuildOptions, Progress, build_model

    options = BuildOptions(out_dir=Path(args.output) if args.output else None, name=args.name,
                           target=args.target, triple=args.triple, cpu=_target_cpu(args),
                           keep_temps=args.keep_temps, force=args.force,
                           pack_weights=args.pack_weights, weights=args.weights,
                           matvec=args.matvec, weights_dtype=args.weights_dtype,
                           activations=args.activations, intermediates=args.intermediates,
                           fixed_window=args.fixed_window,
                           streams=args.streams,
                           graph_options=_graph_options(args), limits=_size_limits(args))
    progress = Progress(enabled=not args.quiet)
    built = build_model(args.model, options, progress)
    if not args.quiet:
        total = sum(progress.timings.values())
        print(f"tfaot: built {built.path} in {total:.1f} s", file=sys.stderr)
        fp = built.manifest["footprint"]
        print(f"tfaot: footprint: code {fp['code_bytes']} B, weights {fp['weight_bytes']} B, "
              f"RAM {fp['ram_bytes']} B per context", file=sys.stderr)
    return 0


def _target_cpu(args) -> str | None:
    """--cpu, or for --target=cuda the --cuda-arch (Target.cpu holds the NVPTX arch)."""
    if args.target != "cuda":
        if args.cuda_arch:
            raise TfaotError(f"--cuda-arch is for --target=cuda; this build is "
                             f"--target={args.target}")
        return args.cpu
    if args.cpu:
        raise TfaotError(f"--cpu={args.cpu} names a CPU for CPU kernels; for --target=cuda "
                         "choose the GPU with --cuda-arch")
    return args.cuda_arch


def cmd_cmake_path(args) -> int:
    from .resources import cmake_module

    print(cmake_module())
    return 0


def cmd_verify(args) -> int:
    if args.case is not None:
        return _verify_case(args)
    from .frontend.tfenv import quiet_tensorflow
    from .verify.compare import verify

    quiet_tensorflow()
    if args.save_case is not None:
        return _save_case(args)
    return _report(verify(args.model, Path(args.dir), steps=args.steps, seed=args.seed,
                          tol=args.tol, graph_options=_graph_options(args)))


def _save_case(args) -> int:
    from .verify import harness
    from .verify.compare import make_case

    path = Path(args.save_case)
    if not path.parent.is_dir():
        raise TfaotError(f"--save-case {path}: no folder {path.parent}")
    lib = harness.load_spec(Path(args.dir))  # the library may be for another machine
    case = make_case(args.model, lib, steps=args.steps, seed=args.seed, tol=args.tol,
                     graph_options=_graph_options(args))
    case.save(path)
    checks = sum(len(c.runs) for c in case.checks)
    print(f"wrote {path}: {checks} checks of {len(case.checks)} output(s) over "
          f"{len(case.runs)} run(s), {_tolerances(case)}; check the library with: "
          f"tfaot verify --case {path.name} DIR")
    return 0


def _tolerances(case) -> str:
    """'tolerance T', or each output's where they differ."""
    tols = case.output_tolerances or [case.tolerance]
    if len(set(tols)) == 1:
        return f"tolerance {tols[0]:g}"
    return "tolerances " + ", ".join(f"{t:g}" for t in tols)


def _verify_case(args) -> int:
    from .verify.case import Case, check_matches, run_case
    from .verify.process import load_to_run

    case = Case.load(Path(args.case))
    lib = load_to_run(Path(args.dir))
    check_matches(case, lib, args.case)
    return _report(run_case(lib, case, args.tol))


def _report(results) -> int:
    for r in results:
        print(r.describe())
    return 0 if all(r.ok for r in results) else 1


COMMANDS = {"import": cmd_import, "inspect": cmd_inspect, "build": cmd_build,
            "verify": cmd_verify, "cmake-path": cmd_cmake_path}
