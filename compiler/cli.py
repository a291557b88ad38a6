"""The `tfaot` command line."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .errors import TfaotError

DESCRIPTION = """\
tfaot compiles a recurrent TensorFlow/Keras model into a streaming step
function: the time loop is removed, the recurrent state lives in globals and
each call of step() consumes one sample.

Model formats: .keras, .h5 (Keras 3 or Keras 2), SavedModel folders, frozen
GraphDefs (.pb, .pbtxt)."""


def _add_graph_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("graph formats (frozen .pb/.pbtxt, SavedModel)")
    g.add_argument("--inputs", metavar="NAME:SHAPE,...",
                   help="input node and full shape, e.g. x:1x100x40 (default: found automatically)")
    g.add_argument("--outputs", metavar="NAME,...",
                   help="output nodes (default: nodes nothing consumes / signature outputs)")
    g.add_argument("--time-axis", type=int, metavar="AXIS",
                   help="the time axis of the input (default: found by probing)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tfaot", description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quiet", "-q", action="store_true", help="no progress lines")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    p = sub.add_parser("import", help="write the streaming module as StableHLO + ml_program MLIR",
                       description="Load, streamify and import MODEL; write MLIR that "
                                   "contains only func, stablehlo and ml_program ops.")
    p.add_argument("model", metavar="MODEL")
    p.add_argument("-o", "--output", metavar="OUT.mlir",
                   help="output file (default: MODEL's name with .mlir, in the current folder)")
    _add_graph_options(p)

    p = sub.add_parser("inspect", help="show layers, state tensors and the step signature",
                       description="Print the detected format, the layers (which are "
                                   "recurrent), each state tensor, the step input/output "
                                   "shapes and the parameter count.")
    p.add_argument("model", metavar="MODEL")
    p.add_argument("--json", action="store_true", help="print JSON instead of text")
    _add_graph_options(p)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return COMMANDS[args.command](args)
    except TfaotError as e:
        print(f"tfaot: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("tfaot: interrupted", file=sys.stderr)
        return 130


def _graph_options(args):
    from .pipeline import GraphOptions

    return GraphOptions(args.inputs, args.outputs, args.time_axis)


def cmd_import(args) -> int:
    from .pipeline import Progress, run_frontend, write_atomically

    out = Path(args.output) if args.output else Path(Path(args.model).name).with_suffix(".mlir")
    progress = Progress(enabled=not args.quiet)
    _, mlir_text = run_frontend(args.model, progress, _graph_options(args))
    write_atomically(out, mlir_text)
    if not args.quiet:
        print(f"tfaot: wrote {out}", file=sys.stderr)
    return 0


def cmd_inspect(args) -> int:
    from .inspect_report import inspect_json, inspect_text
    from .pipeline import Progress, load_and_streamify

    program = load_and_streamify(args.model, Progress(enabled=False), _graph_options(args))
    print(inspect_json(program) if args.json else inspect_text(program))
    return 0


COMMANDS = {"import": cmd_import, "inspect": cmd_inspect}
