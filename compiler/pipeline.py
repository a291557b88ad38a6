"""Runs the stages in order, with progress lines and timings.

load -> streamify -> import (this file's ``run_frontend``); the backend
stages (compile -> emit -> package) are in ``build_model``. Each stage lives
in its own module; this one only sequences them.
"""
from __future__ import annotations

import json
import shutil
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path

from . import output_dir, sizes
from .errors import NeedsFixedLength, TfaotError, first_line
from .frontend.load_graph import GraphOptions  # (also re-exported: cli.py imports it here)
from .names import check_name, default_name
from .program import StepProgram


@dataclass
class Progress:
    """Prints one line per stage with its wall time (to stderr)."""

    enabled: bool = True
    timings: dict[str, float] = field(default_factory=dict)

    @contextmanager
    def stage(self, name: str, detail: str = ""):
        if self.enabled:
            print(f"tfaot: {name:<10} {detail}".rstrip() + " ...", file=sys.stderr, flush=True)
        start = time.perf_counter()
        yield
        elapsed = time.perf_counter() - start
        self.timings[name] = elapsed
        if self.enabled:
            print(f"tfaot: {name:<10} done in {elapsed:.2f} s", file=sys.stderr, flush=True)

    def note(self, text: str) -> None:
        """A fact about the build the user should know (how the model streams)."""
        if self.enabled:
            print(f"tfaot: note: {text}", file=sys.stderr, flush=True)

    @staticmethod
    def warn(text: str) -> None:
        """Something asked for that the build does not do: printed even with -q."""
        print(f"tfaot: warning: {text}", file=sys.stderr, flush=True)


def load_and_streamify(model_path: str, progress: Progress,
                       graph_options: GraphOptions | None = None, *,
                       fixed_window: str = "auto", check_sizes=None,
                       streams: int = 1) -> StepProgram:
    """load -> streamify. ``fixed_window``: whether a fixed-window model
    without recurrence streams as a sliding window ("stream") or runs one
    whole-window inference per step ("whole"); "auto" chooses by the input's
    rank (``stream_choice``). ``streams``: independent streams per context
    (``lower/streams.py``). ``check_sizes(program, loaded)``: called once
    the step is known, before anything is imported or compiled."""
    from .frontend.tfenv import quiet_tensorflow

    from .frontend.load import detect_format, load_model

    fmt = detect_format(Path(model_path))  # a missing file fails before TensorFlow loads
    with progress.stage("load", str(model_path)):
        quiet_tensorflow()
        loaded = load_model(model_path, graph_options, fmt=fmt)
    if loaded.note:
        progress.note(f"{model_path}: {loaded.note}")
    _note_signature(loaded, model_path, progress)
    with progress.stage("streamify"):
        if loaded.keras_model is not None:
            program, loaded = _streamify_keras(loaded, model_path, fixed_window, progress)
        else:  # (the graph streamifier prints its own notes)
            from .streamify_graph import streamify_graph

            program = streamify_graph(loaded.graph, fixed_window=fixed_window)
            program = _fed_back_state(program, graph_options, model_path, progress,
                                      loaded.graph.details.get("loop_initial_states", ()),
                                      loaded.graph.details.get("state_initial"))
        _refuse_float64(program, model_path)
        if streams != 1:
            from .lower.streams import batch_streams

            program = batch_streams(program, streams)
    if check_sizes is not None:
        check_sizes(program, loaded)
    return program


def _streamify_keras(loaded, model_path: str, fixed_window: str, progress: Progress):
    """The Keras streamifier's step and the model it streamed; where it
    refuses a layer, the step of the model's traced graph
    (frontend/keras_graph.py) if that streams, else the Keras streamifier's
    error (it names the layer). A subclassed model that cannot stream over
    the time axis its trace opened is traced again with the length it was
    built with (frontend/subclassed.py)."""
    from .frontend.load import at_built_length
    from .streamify_keras import streamify_keras

    try:
        program = streamify_keras(loaded.keras_model, str(loaded.path), loaded.format,
                                  fixed_window=fixed_window)
    except NeedsFixedLength as refusal:
        fixed = at_built_length(loaded)
        if fixed is None:
            return _graph_of_keras(loaded, model_path, fixed_window, refusal, progress), loaded
        progress.note(f"{model_path}: the subclassed model takes the "
                      f"{fixed.keras_model.inputs[0].shape[1]} frames it was built with, "
                      f"because {refusal.why}")
        program, loaded = _streamify_keras(fixed, model_path, fixed_window, progress)
        program.report["keras_fixed_time"] = True  # (verify traces it so too)
        return program, loaded
    except TfaotError as refusal:
        return _graph_of_keras(loaded, model_path, fixed_window, refusal, progress), loaded
    progress.note(f"{model_path}: {program.report['choice']}")
    for note in program.report.get("notes", []):
        progress.note(f"{model_path}: {note}")
    for warning in program.report.get("warnings", []):
        progress.warn(f"{model_path}: {warning}")
    return program, loaded


def _graph_of_keras(loaded, model_path: str, fixed_window: str, refusal: TfaotError,
                    progress: Progress):
    """The graph streamifier's step of the Keras model's traced graph; raises
    ``refusal`` where that fails too (or the model cannot be traced)."""
    from .frontend.keras_graph import keras_as_graph
    from .streamify_graph import streamify_graph

    try:
        graph = keras_as_graph(loaded.keras_model, loaded.path)
        program = streamify_graph(graph, fixed_window=fixed_window)
    except Exception:  # (whatever the trace or the graph path says, the layer's refusal is clearer)
        raise refusal from None
    program.report["keras_graph"] = True  # (verify's reference: the same graph)
    progress.note(f"{model_path}: streams from its TensorFlow graph, not layer by "
                  f"layer, because {first_line(str(refusal)).split('; ')[0]}")
    _note_variable_state(graph.details, model_path, progress)
    return _fed_back_state(program, None, model_path, progress,
                           graph.details.get("loop_initial_states", ()),
                           graph.details.get("state_initial"))


def _note_variable_state(details: dict, model_path: str, progress: Progress) -> None:
    if details.get("variable_state"):
        progress.note(f"{model_path}: keeps the {details['variable_state']} variable(s) its "
                      "call assigns (a stateful layer's state) as the library's state "
                      "(at reset: their saved values)")
    if details.get("variable_io"):
        progress.note(f"{model_path}: the variable(s) its call assigns that are not float32 "
                      f"stay step inputs and outputs ({', '.join(details['variable_io'])}), "
                      "which the caller feeds back: tfaot keeps float32 state only (a "
                      "float32 variable, e.g. a frame counter as a float, is kept)")


def _refuse_float64(program, model_path: str) -> None:
    """IREE demotes every float64 to float32, so a float64 input, output or
    state of the step reached the compiler or the package stage as float32
    and failed there with a type mismatch that named neither; say it here,
    before the slow stages."""
    sig = program.signature
    for what, tensors in (("input", sig.inputs), ("output", sig.outputs),
                          ("state", sig.states)):
        for t in tensors:
            if t.dtype == "float64" and what == "state":
                raise TfaotError(
                    f"{model_path}: state '{t.name}' (what a recurrence carries from one "
                    "step to the next) is float64, which tfaot cannot compile (IREE "
                    "computes float64 as float32); keep the recurrence in float32 (its "
                    "initial state's and cell's dtype: tf.cast in the graph, a Keras "
                    "layer's dtype)")
            if t.dtype == "float64":
                raise TfaotError(
                    f"{model_path}: {what} '{t.name}' is float64, which tfaot cannot "
                    "compile (IREE computes float64 as float32); make the model's "
                    "inputs and outputs float32 (a Keras layer's dtype, tf.cast in a "
                    "graph, or --inputs at a float32 tensor after a cast)")


def _note_signature(loaded, model_path: str, progress: Progress) -> None:
    """A SavedModel with several signatures: which one the build took."""
    details = loaded.graph.details if loaded.graph is not None else {}
    others = [s for s in details.get("signatures", []) if s != details.get("signature")]
    if others:
        progress.note(f"{model_path}: uses signature '{details['signature']}' (also has "
                      f"{', '.join(others)}; --signature NAME for another)")
    if details.get("signature") == "__call__":  # (load_saved_model._call_as_signature)
        progress.note(f"{model_path}: has no signatures; uses the trace of its __call__")
    _note_variable_state(details, model_path, progress)
    unused = details.get("unused_inputs")
    if unused:
        progress.note(f"{model_path}: no output reads input(s) " +
                      ", ".join(f"'{k}'" for k in unused) + "; the library does not take them")


def _fed_back_state(program, graph_options, model_path: str, progress: Progress,
                    in_loops=(), initial=None):
    """A graph whose caller feeds its state back: that state kept inside.
    ``in_loops``: state inputs that were a time loop's initial state, the
    loop's own state now (graph_cut._loop_initial_states); ``initial``: the
    initial values of state inputs that are not zeros (a SavedModel's
    variables: frontend/variable_state.py)."""
    from .streamify_graph import state_feedback

    if in_loops:
        progress.note(f"{model_path}: keeps the time loop's state that input(s) " +
                      ", ".join(f"'{name}'" for name in in_loops) + " started from (zeros at "
                      "reset; the loop's final state is the state after each step)")
    pairs = state_feedback.parse_pairs(graph_options.state if graph_options else None)
    if pairs is not None:
        pairs = [(a, b) for a, b in pairs if a not in in_loops]
    if pairs is None:
        pairs = state_feedback.find_pairs(program.signature)
        if pairs and set(dict(pairs)) - set(initial or {}):  # (variables: said at load)
            progress.note(f"{model_path}: keeps " + ", ".join(
                f"output '{b}' as the state fed to input '{a}'" for a, b in pairs) +
                " (the graph is one step with its state as I/O; --state to change)")
    return state_feedback.hoist(program, pairs, initial) if pairs else program


def run_frontend(model_path: str, progress: Progress,
                 graph_options: GraphOptions | None = None, *,
                 fixed_window: str = "auto", check_sizes=None,
                 streams: int = 1, join_products: bool = True) -> tuple[StepProgram, str]:
    """load -> streamify -> import; returns the program and the MLIR text.
    ``join_products``: see lower/matvec_sums.py."""
    program = load_and_streamify(model_path, progress, graph_options,
                                 fixed_window=fixed_window, check_sizes=check_sizes,
                                 streams=streams)
    with progress.stage("import"):
        from .lower.mlir_import import import_program

        return program, import_program(program, join_products=join_products)


def write_atomically(path: Path, text: str) -> None:
    """Write ``text`` so that ``path`` is either complete or untouched."""
    tmp = path.with_name(f".{path.name}.tfaot-tmp")
    try:
        tmp.write_text(text)
        tmp.replace(path)
    finally:
        if tmp.exists():
            tmp.unlink()


@dataclass
class BuildOptions:
    out_dir: Path | None = None  # default: build/NAME
    name: str | None = None  # default: the model file's stem as a C identifier
    target: str = "cpu"  # the code generator (Target.kind)
    triple: str | None = None  # default: the host's
    cpu: str | None = None  # default: host for the host triple, generic otherwise
    keep_temps: bool = False
    pack_weights: bool | None = None  # default: the target's (Target.pack_weights)
    weights: str = "embedded"  # or "file": a NAME.weights sidecar (Target.external_weights)
    matvec: str | None = None  # "tfaot" or "iree"; default: the target's (Target.matvec_kernel)
    weights_dtype: str = "f32"  # or "f16"/"bf16": the micro-kernel's weights at half width
    activations: str | None = None  # "exact" or "table"; default: the target's
    # "f32" or "f16": images between convolution kernels as halves; default:
    # the target's for the step (target_options.default_intermediates)
    intermediates: str | None = None
    force: bool = False  # replace an output folder that holds files tfaot did not write
    # fixed-window models without recurrence: "stream" (a sliding window),
    # "whole" (one whole inference per step) or "auto" (by the input's rank)
    fixed_window: str = "auto"
    streams: int = 1  # independent streams per context (lower/streams.py)
    graph_options: GraphOptions = field(default_factory=GraphOptions)
    limits: sizes.SizeLimits = field(default_factory=sizes.SizeLimits)


@dataclass(frozen=True)
class BuiltLibrary:
    """What ``build_model`` made: the output folder and its manifest (also NAME.json)."""

    path: Path
    manifest: dict


def _keras_sizes(graph: GraphOptions | None) -> GraphOptions | None:
    """Of ``graph``, what a Keras model takes: --inputs (its inputs' shapes)."""
    return GraphOptions(inputs=graph.inputs) if graph is not None and graph.inputs else None


def _record_graph_cut(manifest: dict, graph: GraphOptions | None, report: dict,
                      manifest_path: Path) -> None:
    """The graph options of the build and the state pairs fed back, in the
    manifest: ``tfaot verify`` cuts and runs the original graph the same way
    unless told otherwise; and whether a Keras model streamed from its
    traced graph (``_graph_of_keras``), which verify then runs."""
    cut = {} if graph is None else {
        k: v for k, v in (("inputs", graph.inputs), ("outputs", graph.outputs),
                          ("time_axis", graph.time_axis), ("state", graph.state),
                          ("signature", graph.signature))
        if v is not None}
    if cut:
        manifest["graph_cut"] = cut
    if report.get("state_feedback"):
        manifest["state_feedback"] = report["state_feedback"]
    if report.get("keras_graph"):
        manifest["keras_graph"] = True  # streamed from the Keras model's traced graph
    if report.get("keras_fixed_time"):
        manifest["keras_fixed_time"] = True  # a subclassed model traced at its built length
    if cut or report.get("state_feedback") or report.get("keras_graph") or \
            report.get("keras_fixed_time"):
        manifest_path.write_text(json.dumps(manifest, indent=2) + "\n")


def _warn_weights_not_in_file(manifest: dict, target, name: str, progress: Progress) -> None:
    """--weights=file moves only constants over 256 B; a model without any
    gets no NAME.weights and no NAME_init_with_weights, which a firmware
    written for them would only find out at its link."""
    if target.external_weights and manifest.get("weights", {}).get("mode") != "file":
        progress.warn(f"--weights=file: no constant of this model is over 256 B, so no "
                      f"{name}.weights is written and {name}.h has no "
                      f"{name}_init_with_weights; the weights stay in the library "
                      f"(call {name}_init)")


def _warn_weights_dtype_unused(manifest: dict, target, progress: Progress,
                               streams: int = 1) -> None:
    """--weights-dtype applies to the micro-kernels' weights only (int8: to
    the matrices of 1024 weights or more, 256 on bare-metal Arm, the matvec,
    or with several streams the matmul, kernel takes); say when no weight
    took it."""
    from .lower.microkernel import int8_min_weights

    asked = target.weights_dtype
    if asked != "f32" and manifest.get("weights_dtype") == "f32":
        fewest = int8_min_weights(target.int8_min_weights)
        what = ("no matvec or convolution the micro-kernels take" if asked != "int8"
                else f"no matrix of {fewest} weights or more that the "
                     f"{'matmul kernel of many streams' if streams > 1 else 'matvec kernel'} "
                     "takes (smaller ones stay f32)")
        if asked == "int8" and "conv" in manifest.get("micro_kernels", []) and \
                not target.conv_int8:
            what += (", and its convolutions stay f32 on a CPU without int8 dot products "
                     "(x86-64 has them with AVX-512 VNNI, aarch64 with dotprod: --cpu)")
        progress.warn(f"--weights-dtype={asked}: this model has {what}; its weights stay f32")


def build_model(model_path: str, options: BuildOptions, progress: Progress) -> BuiltLibrary:
    """load -> ... -> package into a folder that appears only when complete.

    The name, the target and the output folder are checked first, before
    the slow stages. Everything is written to a staging sibling of the
    output folder, which replaces the output folder at the end; a failed
    build leaves no folder behind and an existing one untouched.
    """
    from .backend.build import build_library
    from .frontend.load import detect_format
    from .lower.streams import check_streams
    from .target_options import default_intermediates, make_target

    name = default_name(model_path) if options.name is None else options.name
    check_name(name)  # (an empty --name too: a typo'd variable, not "the default")
    check_streams(options.streams)
    target = make_target(options.target, options.triple, options.cpu,
                         weight_packing=options.pack_weights,
                         external_weights=options.weights == "file",
                         matvec=options.matvec, weights_dtype=options.weights_dtype,
                         activations=options.activations,
                         intermediates=options.intermediates)
    target = replace(target, streams=options.streams)
    fmt = detect_format(Path(model_path))
    sizes.check_model_files(model_path, options.limits, target)
    out_path = Path(options.out_dir or Path("build") / name)
    out = output_dir.prepare(out_path, model_path, force=options.force)
    temps = out.staging / "temps"
    try:
        program, mlir_text = run_frontend(
            model_path, progress, options.graph_options, fixed_window=options.fixed_window,
            streams=options.streams, check_sizes=lambda program, loaded: sizes.check_step(
                program, loaded, options.limits, target, progress.note),
            join_products=target.join_products)
        if target.intermediates is None:
            target = replace(target, intermediates=default_intermediates(
                target, stateless=not program.signature.states))
        temps.mkdir()
        (temps / f"{name}.mlir").write_text(mlir_text)
        manifest = build_library(mlir_text, program.signature, out.staging, name=name,
                                 target=target, workdir=temps, progress=progress,
                                 stream=program.stream)
        sizes.check_built(model_path, manifest.get("footprint", {}), options.limits)
        # (of the graph options, a Keras build takes --inputs alone, as the CLI warns)
        _record_graph_cut(manifest, _keras_sizes(options.graph_options)
                          if fmt in ("keras", "h5") else options.graph_options,
                          program.report, out.staging / f"{name}.json")
        _warn_weights_not_in_file(manifest, target, name, progress)
        _warn_weights_dtype_unused(manifest, target, progress, options.streams)
        if options.intermediates == "f16" and manifest.get("intermediates") == "f32":
            why = ("the kernels of several streams (--streams) take f32 images"
                   if options.streams > 1 else
                   "this model has no convolution that tfaot's kernels compute")
            progress.warn(f"--intermediates={target.intermediates}: {why}; its tensors "
                          "stay f32")
        if options.intermediates == "f16" and manifest.get("intermediates") == "f16" and \
                program.signature.states:
            # (a streamed DS-CNN on a Cortex-M4: context 3520 -> 5312 B, code
            # 26.6 -> 36.2 KB, for images of a frame or two)
            progress.warn("--intermediates=f16 on a streamed step: its state stays f32 and "
                          "its images are a few frames, so halves save nothing and their "
                          "conversions add RAM and code; build without it (it pays for "
                          "whole-inference steps)")
        if options.activations == "table" and manifest.get("activations") == "exact":
            progress.warn("--activations=table: this model has no tanh or sigmoid to look "
                          "up; its activations are computed as they are")
        if options.intermediates is None and manifest.get("intermediates") == "f16":
            progress.note("f16 images between the convolutions (the default for int8 "
                          "whole-inference steps on a Cortex-M4/M7/M33: half their RAM; "
                          "--intermediates=f32 keeps f32)")
        _note_foreign_cpu(target, progress)
        if not options.keep_temps:
            shutil.rmtree(temps)
        out.commit()
    except TfaotError as e:
        kept = _keep_failed_temps(temps, out.path) if options.keep_temps else None
        out.discard()
        if kept is None:
            raise
        raise TfaotError(f"{e} (--keep-temps: the stages' files are in {kept})") from e
    except BaseException:
        out.discard()
        raise
    return BuiltLibrary(out_path, manifest)


def _note_foreign_cpu(target, progress) -> None:
    """A library for this machine's triple and a CPU whose instructions it
    lacks builds, but does not run here (SIGILL): said now, not at verify."""
    from .target import missing_instruction_sets

    missing = missing_instruction_sets(target.triple, target.cpu)
    if missing:
        progress.note(f"this machine lacks {', '.join(missing)}, which --cpu {target.cpu} has: "
                      "the library runs on such a CPU, not here (verify it there)")


def _keep_failed_temps(temps: Path, out: Path) -> Path | None:
    """A failed build's intermediate files, moved beside the output folder
    (which a failed build never creates) for a bug report: OUT.failed-temps."""
    if not temps.is_dir():
        return None
    kept = out.with_name(f"{out.name}.failed-temps")
    if kept.exists() and not any(kept.glob("*.mlir")):
        return None  # not an earlier failed build's: not ours to replace
    shutil.rmtree(kept, ignore_errors=True)
    try:
        temps.rename(kept)
    except OSError:
        return None
    return kept
