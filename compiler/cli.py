"""The `tfaot` command line."""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from .errors import TfaotError
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
                          "and no recurrence (the default for images: inputs (batch, H, W, "
                          "C)); e.g. a keyword spotter over 49 frames, once per 49 frames")


def _add_graph_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("graph formats (frozen .pb/.pbtxt, SavedModel)")
    g.add_argument("--inputs", metavar="NAME[:INDEX][:SHAPE],...",
                   help="the streamed input: a placeholder or any tensor inside the graph, "
                        "where the graph is cut (everything that only feeds it is dropped), "
                        "optionally with its full shape, e.g. Mfcc:1x100x10 or x:0:1x100x40 "
                        "(default: found automatically)")
    g.add_argument("--outputs", metavar="NAME,...",
                   help="output nodes (default: nodes nothing consumes / signature outputs)")
    g.add_argument("--time-axis", type=int, metavar="AXIS",
                   help="the time axis of the input (default: found by probing)")
    g.add_argument("--state", metavar="IN=OUT,...",
                   help="a graph that is already one step, with its state as inputs and "
                        "outputs: keep output OUT as the state fed to input IN at the next "
                        "step (default: pairs whose names say so, e.g. "
                        "previous_state_c=new_state_c)")


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
                                 "triple, generic otherwise)")
    p.add_argument("--cuda-arch", metavar="SM",
                   help="--target=cuda: the GPU architecture of the PTX: sm_80 (default), "
                        "sm_86, sm_89 or sm_120; the driver compiles sm_80 PTX for newer "
                        "GPUs (sm_90, sm_100) at load")
    p.add_argument("--keep-temps", action="store_true",
                   help="keep every stage's artifacts (MLIR, VM program, kernels) in DIR/temps")
    p.add_argument("--weights", choices=["embedded", "file"], default="embedded",
                   help="where the weights live: embedded (default) in the library's "
                        "read-only data (flash on a microcontroller), or file: a "
                        "NAME.weights sidecar next to the library that the program loads "
                        "and passes to NAME_init_with_weights (checked against a hash in "
                        "NAME.h), so weights can be updated without relinking")
    p.add_argument("--pack-weights", action=argparse.BooleanOptionalAction, default=None,
                   help="pack the weights once at init into a RAM copy laid out for faster "
                        "steps (default: on for Linux triples when the model has 16 KiB of "
                        "weights or more; off for bare metal, where weights stay in flash)")
    p.add_argument("--matvec", choices=["tfaot", "iree"], default=None,
                   help="who computes constant-weight matrix-vector products and "
                        "convolutions (also depthwise): tfaot's own micro-kernels with weights "
                        "packed at build time in read-only data (default on Linux triples), "
                        "or IREE's generated kernels (default on bare metal)")
    p.add_argument("--weights-dtype", choices=["f32", "f16", "bf16"], default="f32",
                   help="how tfaot's micro-kernels store their weights: f32 (default), or "
                        "f16/bf16 at half width (half the weight bytes, faster on models "
                        "bound by reading them; math stays f32, error vs f32 about 1e-4 "
                        "(f16) / 1e-3 (bf16)); needs tfaot's matvec kernel (--matvec=tfaot, "
                        "the default on Linux triples)")
    _add_stream_options(p)
    _add_graph_options(p)

    p = sub.add_parser("verify", help="compare a built library with TensorFlow",
                       description="Run a random input sequence through TensorFlow on the "
                                   "original model (whole sequence) and through the built "
                                   ".so step by step; print the max abs error per output. "
                                   "Exit status 1 if it is above the tolerance.")
    p.add_argument("model", metavar="MODEL")
    p.add_argument("dir", metavar="DIR", help="the folder `tfaot build` wrote")
    p.add_argument("--steps", type=int, default=200, help="sequence length (default: 200)")
    p.add_argument("--seed", type=int, default=0, help="random seed (default: 0)")
    p.add_argument("--tol", type=float, default=None,
                   help="max abs error allowed (default: 1e-5; 1e-3 for a library built with "
                        "--weights-dtype=f16, 1e-2 with bf16)")
    _add_graph_options(p)

    sub.add_parser("cmake-path", help="print the path of tfaot.cmake (tfaot_add_model)",
                   description="Print the absolute path of tfaot.cmake, for "
                               "include() in a CMake project.")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return COMMANDS[args.command](args)
    except TfaotError as e:
        print(f"tfaot: error: {e}", file=sys.stderr)
        return 1
    except OSError as e:  # the file system said no (disk full, permissions, ...)
        where = f"{e.filename}: " if e.filename else ""
        print(f"tfaot: error: {where}{e.strerror or e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("tfaot: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # e.g. `tfaot inspect --json m.pb | head`
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except Exception as e:  # a bug in tfaot: say so plainly, traceback on request
        if os.environ.get("TFAOT_DEBUG"):
            raise
        print(f"tfaot: internal error: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
              " (this is a tfaot bug; set TFAOT_DEBUG=1 for the traceback)", file=sys.stderr)
        return 2


def _graph_options(args):
    from .pipeline import GraphOptions

    return GraphOptions(args.inputs, args.outputs, args.time_axis, args.state)


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
    print(inspect_json(program) if args.json else inspect_text(program))
    return 0


def cmd_build(args) -> int:
    from .pipeline import BuildOptions, Progress, build_model

    options = BuildOptions(out_dir=Path(args.output) if args.output else None, name=args.name,
                           target=args.target, triple=args.triple, cpu=_target_cpu(args),
                           keep_temps=args.keep_temps, force=args.force,
                           pack_weights=args.pack_weights, weights=args.weights,
                           matvec=args.matvec, weights_dtype=args.weights_dtype,
                           fixed_window=args.fixed_window,
                           graph_options=_graph_options(args))
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
    from .tfenv import quiet_tensorflow
    from .verify import verify

    if args.steps < 1:
        raise TfaotError("--steps must be at least 1")
    quiet_tensorflow()
    results = verify(args.model, Path(args.dir), steps=args.steps, seed=args.seed,
                     tol=args.tol, graph_options=_graph_options(args))
    for r in results:
        verdict = "ok" if r.ok else "FAIL"
        print(f"{r.output}: max abs error {r.max_abs_error:.3g} over {r.steps} {r.unit} "
              f"(tolerance {r.tolerance:g}): {verdict}")
    return 0 if all(r.ok for r in results) else 1


COMMANDS = {"import": cmd_import, "inspect": cmd_inspect, "build": cmd_build,
            "verify": cmd_verify, "cmake-path": cmd_cmake_path}
