"""Verify stage: the built library against TensorFlow running the original model.

A random input sequence goes through TensorFlow on the whole sequence (the
original model, not our step program) and through the built .so one step
at a time via the ctypes harness; the report gives the max abs error.
Here the inputs and TensorFlow's outputs become a case (case.py), which
runs on the library at once or, saved, on another machine.
"""
from __future__ import annotations

import copy
import re
from contextlib import contextmanager, nullcontext
from pathlib import Path

import numpy as np

from ..errors import TfaotError, first_line
from ..frontend.graphdef import source_node
from . import changed_weights, fake_quant, int8_spread, sensitivity
from .case import Case, Checks, run_case, signature
from .keras_reference import (check_input_shape, defined_steps, id_limits,
                              has_stateful_layers, keras_stateful_reference,
                              fixed_time_length, keras_reference, keras_reference_model,
                              library_stream, output_heads, random_inputs, with_masked_frames)
from .keras_multi_reference import keras_multi_input_reference
from .graph import GraphReference, build_cut, feedback_reference, token_limit  # noqa: F401
from .tally import VerifyResult


#: Default tolerance by the library's matvec weight dtype (--weights-dtype):
#: f32 rounding, or the half-width weights' (measured errors: f16 <= 8e-4,
#: bf16 <= 7.2e-3 on the benchmark models). int8: each product carries the
#: rounding of its weight (half of 1/127 of its row's largest) and of its
#: input (half of 1/127 of the vector's largest), i.e. a relative error up
#: to about 1/127 of a matvec's largest terms, carried through the model;
#: measured: see docs/performance.md (int8 weights).
DEFAULT_TOLERANCE = {"f32": 1e-5, "f16": 1e-3, "bf16": 1e-2, "int8": 5e-2}
#: A library whose tanh and logistic are tables (--activations=table; each
#: within 1.1e-4): an LSTM(64) and a GRU(64) of f32 weights then differ
#: from TensorFlow by up to 2.1e-4 over 300 steps.
TABLE_ACTIVATIONS_TOLERANCE = 1e-3
#: A library whose convolutions pass f16 images (--intermediates=f16):
#: each layer's output rounded to 2^-11 relative, carried through the
#: model and grown by its depth: a DS-CNN 2.6e-4 (outputs of about 1.5), a
#: MobileNetV2 (alpha 0.35, random weights, batch norms calibrated on
#: random images) 3.0e-2 on outputs of 1.5, where its f32 build is 1.6e-5.
#: int8's tolerance: what a wrong kernel gives is far over it.
HALF_INTERMEDIATES_TOLERANCE = 5e-2
#: int8 layers in a step that DEFAULT_TOLERANCE["int8"] covers. Each int8
#: layer adds a rounding of its own, independent of the others', so the
#: errors grow as the square root of their number: the tolerance is scaled
#: by sqrt(layers / INT8_LAYERS) past it (the manifest's int8_layers).
#: Measured: the recurrent models and keyword spotters of the tests and
#: benches within 2e-2 (a DS-CNN: 5 int8 layers); a MobileNetV2 0.35 at
#: 224x224 (random weights, calibrated batch norms; 27 int8 layers) 0.10 on
#: outputs of 1.8, LiteRT's int8 error on the same model
#: (bench/bench_images.py), where the unscaled tolerance was 0.09; now
#: 0.05 x 1.8 x sqrt(27 / 8) = 0.17. Narrow models drift further; for them
#: the tolerance is the model's own (module int8_spread) where that is more.
INT8_LAYERS = 8
#: Weighted layers (convolutions, matrix products) in a step that
#: DEFAULT_TOLERANCE["f32"] covers. Each rounds its sums, differently in
#: TensorFlow and in the library, and passes the layers' errors before it
#: on: the tolerance grows with their number, by layers / F32_LAYERS past
#: it. Measured (random weights, calibrated batch norms, 200 inferences):
#: MobileNetV2 1.5e-5 (54 layers), MobileNetV3Small 2.7e-5, ResNet50
#: 8.7e-5 (54; LiteRT's f32 against TensorFlow 6.8e-5), where the unscaled
#: tolerance failed them (now 1.35e-4). EfficientNetB0 (82 layers; 224x224,
#: softmax) 1.3e-4 over 60 inferences against 2.05e-4, since its convolution
#: kernels add a batch norm's shift after their sums and its large poolings
#: sum one axis at a time (it was 3.9e-4, 10x TensorFlow's own error).
F32_LAYERS = 4
#: Keras models that compute in half precision (mixed precision policies):
#: TensorFlow's own outputs carry that rounding (f16: 2^-11 relative per op,
#: bf16: 2^-8), so a library that matches them can only match that closely
#: (an LSTM(16) under mixed_float16: 5.7e-4).
COMPUTE_DTYPE_TOLERANCE = {"float16": 5e-3, "bfloat16": 5e-2}
#: Keras layers quantized by ``model.quantize(mode)`` (Dense, EinsumDense):
#: besides their weights they round their input at every call, int8 to
#: 1/127 of its largest |value| (int4 layers too), float8 to 3 significant
#: bits. The library computes the same, but its float rounding of the
#: input (an LSTM's output, summed in another order) can put a value on
#: the neighbouring step, which moves the outputs by that step times a
#: weight: an LSTM(64) -> Dense(64) -> Dense(12) quantized int8 differed
#: by up to 7.9e-4 (12 of 2400 values; 0 elsewhere) where f32's bound is
#: 1e-5; a GRU(64) one quantized float8 by 1.4e-2 (12 values; float8
#: keeps 3 significant bits).
QUANTIZED_MODE_TOLERANCE = {"int8": 1e-2, "int4": 1e-2, "float8": 5e-2}


def compute_dtype_tolerance(model) -> float:
    """The tolerance the coarsest compute dtype of ``model``'s layers needs
    (COMPUTE_DTYPE_TOLERANCE), or their quantized inputs
    (QUANTIZED_MODE_TOLERANCE)."""
    layers = list(model._flatten_layers(include_self=False))
    dtypes = {str(getattr(layer, "compute_dtype", "float32")) for layer in layers}
    modes = {getattr(layer, "quantization_mode", None) for layer in layers}
    return max([0.0, *(COMPUTE_DTYPE_TOLERANCE.get(d, 0.0) for d in dtypes),
                *(QUANTIZED_MODE_TOLERANCE.get(m, 0.0) for m in modes)])


def default_tolerance(lib, keras_model, weighted_layers: int = 0, graph_def=None) -> float:
    """--tol's default: the library's weight dtype's (int8's grown with its
    int8 layers: INT8_LAYERS; f32's with the model's ``weighted_layers``:
    F32_LAYERS), or its table activations' or f16 intermediates', or the
    Keras model's compute dtype's when that is coarser."""
    tol = DEFAULT_TOLERANCE.get(lib.manifest.get("weights_dtype", "f32"), 1e-5)
    tol = max(tol, DEFAULT_TOLERANCE["f32"] * weighted_layers / F32_LAYERS)  # (f32: above)
    if lib.manifest.get("weights_dtype") == "int8":
        tol *= max(1.0, np.sqrt(lib.manifest.get("int8_layers", 0) / INT8_LAYERS))
    if lib.manifest.get("activations") == "table":
        tol = max(tol, TABLE_ACTIVATIONS_TOLERANCE)
    if lib.manifest.get("intermediates") == "f16":
        tol = max(tol, HALF_INTERMEDIATES_TOLERANCE)
    if keras_model is None:  # a graph computes in the dtypes of its step's tensors
        return max(tol, _graph_dtype_tolerance(lib.manifest, graph_def))
    return max(tol, compute_dtype_tolerance(keras_model))


#: Graph ops that are a weighted layer (F32_LAYERS).
WEIGHTED_OPS = ("Conv2D", "Conv3D", "DepthwiseConv2dNative", "MatMul", "BatchMatMulV2",
                "Conv2DBackpropInput", "Conv3DBackpropInputV2")


def weighted_layers(loaded) -> int:
    """How many convolutions and matrix products the model has: a Keras
    model's layers with a kernel, or a graph's such ops outside loops, one
    per weight constant (a v1 loop's body is in the graph, under its 'while'
    scope, and an unrolled cell's copies share their weights: a cell's
    products at each step add no depth; a 300-step static_rnn's tolerance
    was 75 times f32's)."""
    if loaded.keras_model is not None:
        layers = loaded.keras_model._flatten_layers(include_self=False)
        return sum(1 for layer in layers if any(
            hasattr(layer, a) for a in ("kernel", "depthwise_kernel", "pointwise_kernel")))
    nodes = {n.name: n for n in loaded.graph.graph_def.node}
    layers = set()
    for n in nodes.values():
        if n.op in WEIGHTED_OPS and "while/" not in n.name:
            weight = source_node(nodes, n.input[1]) if len(n.input) > 1 else None
            layers.add(weight if weight is not None and nodes[weight].op == "Const" else n.name)
    return len(layers)


def _graph_dtype_tolerance(manifest: dict, graph_def=None) -> float:
    """A float16 graph (a TF1 cell built with dtype=tf.float16), or one with
    float16 ops inside (a head cast to half and back), is computed in f16 by
    TensorFlow and the library, each rounding its own way: they failed at
    f32's 1e-5 with errors of 1.5e-3 and 9.8e-4 (an f16 ulp at 1)."""
    tensors = [*manifest.get("inputs", []), *manifest.get("outputs", []),
               *manifest.get("state", [])]
    dtypes = {t.get("dtype") for t in tensors if isinstance(t, dict)}
    if graph_def is not None:
        dtypes |= _op_dtypes(graph_def)
    return max((COMPUTE_DTYPE_TOLERANCE.get(d, 0.0) for d in dtypes), default=0.0)


def _op_dtypes(graph_def) -> set[str]:
    """The names ("float16", ...) of the dtypes the graph's ops compute in,
    functions included."""
    from tensorflow.python.framework import dtypes

    nodes = [*graph_def.node, *(n for f in graph_def.library.function for n in f.node_def)]
    found = {n.attr[key].type for n in nodes for key in ("T", "dtype", "DstT")
             if key in n.attr and n.attr[key].type}
    return {dtypes.as_dtype(d).name for d in found if d in (dtypes.float16.as_datatype_enum,
                                                            dtypes.bfloat16.as_datatype_enum)}


def verify(model_path: str, lib_dir: Path, *, steps: int, seed: int, tol: float | None,
           graph_options=None) -> list[VerifyResult]:
    """The library at ``lib_dir`` against TensorFlow running ``model_path``."""
    from .process import load_to_run

    lib = load_to_run(lib_dir)  # run_sequence inits (maybe in a child process)
    case = make_case(model_path, lib, steps=steps, seed=seed, tol=tol,
                     graph_options=graph_options)
    results = run_case(lib, case)
    if any(not r.ok and r.mismatch is None for r in results):
        # does the check say anything? (module sensitivity)
        jittered = make_case(model_path, lib, steps=steps, seed=seed, tol=case.tolerance,
                             graph_options=graph_options, jitter=True)
        for result, move, checks in zip(results, changed_weights.moves(case, jittered),
                                        case.checks):
            if move > sensitivity.NOTABLE * result.tolerance:
                result.rounding_note = sensitivity.note(
                    result.output, move, amplified=move > DEFAULT_TOLERANCE["f32"] *
                    output_scale(checks))
    return results


def make_case(model_path: str, lib, *, steps: int, seed: int, tol: float | None,
              graph_options=None, jitter: bool = False) -> Case:
    """Inputs for ``lib`` (a harness.Model or LibrarySpec) and TensorFlow's
    outputs on them; the library itself is not run. ``jitter``: TensorFlow
    runs the model with its weights moved by a rounding step (module
    sensitivity)."""
    from ..frontend.load import load_model

    graph_options = build_cut(lib, graph_options)
    # (a subclassed model as the build traced it: frontend/subclassed.py)
    loaded = load_model(model_path, graph_options,
                        keras_fixed_time=bool(lib.manifest.get("keras_fixed_time")))
    with sensitivity.with_jittered_weights(loaded) if jitter else nullcontext(loaded) as loaded:
        return _loaded_case(loaded, lib, steps, seed, tol, model_path)


def _loaded_case(loaded, lib, steps: int, seed: int, tol: float | None, model_path) -> Case:
    """``make_case`` for the loaded model."""
    rng = np.random.default_rng(seed)
    # Built from the Keras model's traced graph (pipeline._graph_of_keras):
    # Keras itself is the reference where it takes the library's stream,
    # else that graph, with the build's step shapes. (Traced for an open
    # time axis, the graph can be wrong where eager Keras is right: after a
    # dilated channels_first Conv1D a GRU's loop ran over a wrong length,
    # and verify failed a right library.)
    # (a model whose stateful layers' variables became the state fed back:
    # its graph, stepped with those pairs, is the reference)
    from_graph = loaded.keras_model is not None and lib.manifest.get("keras_graph")
    if not (from_graph and lib.manifest.get("state_feedback")):
        try:
            return _case_of(loaded, lib, rng, steps, tol, model_path)
        except ChannelsFirstOnCpu:
            if loaded.keras_model is None:
                raise
            case = _case_of(_traced(loaded), lib, np.random.default_rng(seed), steps, tol,
                            model_path)
            case.reference_note = CHANNELS_FIRST_NOTE
            return case
        except Exception:  # noqa: BLE001 - a stream only the graph's terms describe
            if not from_graph:
                raise
    return _case_of(_traced(loaded), lib, np.random.default_rng(seed), steps, tol, model_path)


#: What verify says where it ran a Keras model's traced graph because
#: TensorFlow has no CPU kernels for the model's channels_first layers.
CHANNELS_FIRST_NOTE = (
    "TensorFlow runs channels_first convolutions and pools only on GPUs, so the reference "
    "is the model's traced graph with those ops channels-last between transposes "
    "(TensorFlow's own kernels, the same arithmetic)")


def _traced(loaded):
    """The Keras model ``loaded`` as its traced, frozen graph (channels-last)."""
    from dataclasses import replace

    from ..frontend.keras_graph import keras_as_graph

    return replace(loaded, graph=keras_as_graph(loaded.keras_model, loaded.path),
                   keras_model=None)


def _case_of(loaded, lib, rng, steps: int, tol: float | None, model_path) -> Case:
    """``make_case`` for a loaded model; ``tol`` None: the default, scaled."""
    with _reference_errors(model_path):
        if tol is not None:
            return _make_case(loaded, lib, rng, steps, tol, model_path, lib.dir)
        graph_def = loaded.graph.graph_def if loaded.keras_model is None else None
        tol = default_tolerance(lib, loaded.keras_model, weighted_layers(loaded), graph_def)
        same_inputs = copy.deepcopy(rng)
        case = _make_case(loaded, lib, rng, steps, tol, model_path, lib.dir)
        spreads = _rounding_spreads(loaded, lib, case, same_inputs, steps, tol, model_path)
    grid_steps = fake_quant.output_steps(loaded, len(case.checks))
    rules = [tol * output_scale(checks) + step
             for checks, step in zip(case.checks, grid_steps)]
    dtype = lib.manifest.get("weights_dtype", "f32")
    margin = int8_spread.margin(dtype)
    case.output_tolerances = [max(rule, margin * spread) for rule, spread in zip(rules, spreads)]
    case.tolerance = max(case.output_tolerances, default=tol)
    notes = [int8_spread.note(spread, dtype) if margin * spread > rule
             else fake_quant.note(step) if step else None
             for rule, spread, step in zip(rules, spreads, grid_steps)]
    if any(notes):
        case.tolerance_notes = notes
    return case


def _rounding_spreads(loaded, lib, case, rng, steps: int, tol: float,
                      model_path) -> list[float]:
    """Per output, how far the int8 or half-width build's rounding of its
    weights alone moves TensorFlow's values on the case's inputs (module
    int8_spread; ``rng`` as the case's was before it); zeros for f32 builds."""
    rule = int8_spread.rule_of(lib.manifest)
    if rule is None:
        return [0.0] * len(case.checks)
    with int8_spread.with_rounded_weights(loaded, rule) as rounded:
        rounded_case = _make_case(rounded, lib, rng, steps, tol, model_path, lib.dir)
    return changed_weights.moves(case, rounded_case)


class ChannelsFirstOnCpu(TfaotError):
    """TensorFlow has no CPU kernel for one of the model's ops in its
    channels-first layout (NCHW, NCDHW)."""


@contextmanager
def _reference_errors(model_path):
    """TensorFlow failing to run the model itself (a channels_first
    convolution: "Conv2D op currently only supports the NHWC tensor format
    on the CPU") leaves verify no reference; that is said in one line, not
    as a tfaot bug."""
    import tensorflow as tf

    try:
        yield
    except tf.errors.OpError as e:
        why = re.sub(r"\{\{[^}]*\}\}\s*", "", first_line(e)).strip()
        error = ChannelsFirstOnCpu if re.search(r"\bND?HWC\b", why) else TfaotError
        raise error(f"{model_path}: TensorFlow cannot run the model on this machine, so "
                    f"verify has nothing to compare with: {why}") from None


def output_scale(checks: Checks) -> float:
    """The default tolerance is for outputs of magnitude up to 1; an f32 or
    half-width rounding error grows with the values, so it is scaled by
    TensorFlow's largest |output| where that is larger (a regression head
    giving hundreds is within f32's rounding at 1e-5 x its size). Each
    output by its own: a head of probabilities beside one of hundreds is
    held to f32's rounding of probabilities."""
    values = (np.abs(np.asarray(v, np.float64)) for v in checks.values)
    largest = max((float(np.max(a, initial=0.0, where=np.isfinite(a))) for a in values),
                  default=0.0)
    if largest <= 1.0:
        return 1.0
    digits = 10.0 ** (np.floor(np.log10(largest)) - 1)  # two significant digits, up
    return float(np.ceil(largest / digits) * digits)


def _make_case(loaded, lib, rng, steps: int, tol: float, model_path, lib_dir) -> Case:
    """The case for ``make_case``, with tolerance ``tol``."""
    if lib.streams > 1:
        return _streams_case(loaded, lib, rng, steps, tol, model_path, lib_dir)
    if loaded.keras_model is None:
        limit = token_limit(loaded.graph.graph_def)
        if lib.manifest.get("state_feedback"):
            xs = [random_inputs(rng, (steps, *shape), dt, limit)
                  for shape, dt in zip(lib.input_shapes, lib.input_dtypes)]
            return _sequence_case(lib, lib_dir, model_path, xs,
                                  feedback_reference(loaded.graph, lib, xs), tol)
        references = [GraphReference(loaded, lib, lib_dir, index=i)
                      for i in range(len(lib.output_shapes))]
        if all(r.fixed_last_output for r in references):
            return _fixed_length_case(references, lib, rng, limit, steps, tol)
        stream, length = references[0].stream, references[0].steps(steps)
        if stream.mode == "prefix" and stream.fixed_length is not None and length < steps:
            # (a graph of T frames defines T steps: several runs from reset)
            return _sequences_case(loaded, lib, rng, steps, length, tol, model_path, lib_dir,
                                   frames=stream.fixed_length)
    else:
        stream = library_stream(lib, loaded.keras_model, model_path)
        fixed = fixed_time_length(loaded.keras_model) if stream.mode == "prefix" else None
        if fixed is not None and _carries_state(loaded, lib, stream):
            return _stateful_case(loaded, lib, rng, steps, fixed, tol, model_path, lib_dir)
        if fixed is not None and steps > fixed:
            return _sequences_case(loaded, lib, rng, steps, fixed, tol, model_path, lib_dir)
    xs, wants = _inputs_and_references(loaded, lib, rng, steps, model_path, lib_dir)
    return _sequence_case(lib, lib_dir, model_path, xs, wants, tol)


def _sequences_case(loaded, lib, rng, steps: int, length: int, tol: float, model_path,
                    lib_dir, frames: int | None = None) -> Case:
    """A model of fixed length T streamed as a prefix defines T steps from
    reset (``length`` of them; ``frames``: T, where a step takes several):
    enough sequences of them, each from a fresh init, to compare about
    ``steps`` steps."""
    runs, checks = [], [Checks() for _ in lib.output_shapes]
    # (until about ``steps`` are compared, in at most ceil(steps / T) or
    # 100 sequences, whichever is more: a last-output model whose prefixes
    # Keras cannot give defines one step a sequence, and was checked twice)
    most = max(-(-steps // length), min(steps, 100))
    while len(runs) < most and min(len(c.steps) for c in checks) < steps:
        xs, wants = _inputs_and_references(loaded, lib, rng, length, model_path, lib_dir)
        one = _sequence_case(lib, lib_dir, model_path, xs, wants, tol)
        runs.append(xs)
        for mine, its in zip(checks, one.checks):
            for step, stream, value in zip(its.steps, its.streams, its.values):
                mine.add(len(runs) - 1, step, stream, value)
    return Case(runs, checks, tol, f"steps in {len(runs)} sequences of {frames or length} "
                "frames", signature(lib))


def _carries_state(loaded, lib, stream) -> bool:
    """Whether a fixed-length Keras model keeps its state from call to call
    (``stateful=True`` recurrent layers: it streams as Keras runs it, not
    from reset every T frames), with every input streamed a frame a step."""
    return (has_stateful_layers(loaded.keras_model) and all(lib.input_streamed)
            and stream.frames_per_step == 1)


def _stateful_case(loaded, lib, rng, steps: int, length: int, tol: float, model_path,
                   lib_dir) -> Case:
    """A model with stateful recurrent layers: one run of ``steps`` frames
    (rounded up to whole calls of ``length``) against Keras called on each
    chunk in turn, its state carried between the calls."""
    check_input_shape(loaded.keras_model, lib, model_path, lib_dir,
                      library_stream(lib, loaded.keras_model, model_path))
    steps = -(-steps // length) * length
    xs = with_masked_frames(loaded.keras_model, [
        random_inputs(rng, (steps, *shape), dt, high, floats_are_ids=True)
        for shape, dt, high in zip(lib.input_shapes, lib.input_dtypes,
                                   id_limits(loaded.keras_model, lib.input_dtypes))], rng)
    wants = keras_stateful_reference(keras_reference_model(loaded, keep_stateful=True), xs,
                                     length, lib.output_shapes)
    return _sequence_case(lib, lib_dir, model_path, xs, wants, tol)


def _inputs_and_references(loaded, lib, rng, steps: int, model_path, lib_dir):
    """Random inputs for ``steps`` steps of ``lib`` (one array per input,
    (steps, *step input i)) and TensorFlow's outputs on them, per output."""
    if loaded.keras_model is None:
        limit = token_limit(loaded.graph.graph_def)
        references = [GraphReference(loaded, lib, lib_dir, index=i)
                      for i in range(len(lib.output_shapes))]
        xs = [random_inputs(rng, (references[0].steps(steps), *shape), dt, limit)
              for shape, dt in zip(lib.input_shapes, lib.input_dtypes)]
        if not references[0].stateless:
            # A per-step input may reach a loop body; the graph on the whole
            # sequence sees one value, so every step gets the same one.
            xs = [x if s else np.repeat(x[:1], len(x), axis=0)
                  for x, s in zip(xs, lib.input_streamed)]
            # A sequence_length of 0 or 1 (an integer's samples) froze the
            # state at once, and verify compared zeros: a length within the
            # steps checks the recurrence and the frozen steps after it.
            xs = [np.full_like(x, rng.integers(len(x) // 2, len(x))) if length else x
                  for x, length in zip(xs, lib.input_length)]
        return xs, [reference.outputs(xs, masked=True) for reference in references]
    model = loaded.keras_model
    stream = library_stream(lib, model, model_path)
    check_input_shape(model, lib, model_path, lib_dir, stream)
    fixed = fixed_time_length(model) if stream.mode == "prefix" else None
    if fixed is not None:
        steps = min(steps, fixed)  # the model defines only its T steps
    elif stream.mode == "window":
        steps += stream.first_valid_step  # ``steps`` compared ones
    if steps <= stream.first_valid_step:
        raise TfaotError(f"{lib_dir}: outputs are valid from step {stream.first_valid_step} "
                         f"on; verify it with --steps {stream.first_valid_step + 100}")
    # One array per input, (steps, *step input i): a streamed input's
    # frames, or the value a per-step input takes at each step.
    highs = id_limits(model, lib.input_dtypes)
    xs = with_masked_frames(model, [random_inputs(rng, (steps, *shape), dt, high,
                                                  floats_are_ids=True)
                                    for shape, dt, high in zip(lib.input_shapes, lib.input_dtypes,
                                                               highs)], rng)
    # (a held input enters the sequence: the model has one value of it)
    xs = [np.repeat(x[:1], len(x), axis=0) if held else x
          for x, held in zip(xs, lib.input_held)]
    # The reference is the file's own framework: Keras 2 files run in
    # Keras 2 (tf_keras), not in the Keras 3 model the build used.
    reference_model = keras_reference_model(loaded)
    if len(xs) == 1:
        heads = output_heads(reference_model, len(lib.output_shapes))
        wants = [keras_reference(head, xs[0], stream=stream, step_output=shape, masked=True,
                                 frames_out=stream.frames_of(i), latency=stream.latency_of(i))
                 for i, (head, shape) in enumerate(zip(heads, lib.output_shapes))]
    else:
        wants = keras_multi_input_reference(reference_model, xs, lib.input_streamed,
                                            stream, lib.output_shapes)
    return xs, wants


def _streams_case(loaded, lib, rng, steps: int, tol: float, model_path, lib_dir) -> Case:
    """A --streams N library: N different input sequences, one per stream,
    stepped together; each stream's outputs against TensorFlow on its own."""
    if loaded.keras_model is None and lib.manifest.get("state_feedback"):
        raise TfaotError(f"{lib_dir}: verify of a --streams build covers Keras models and "
                         "graphs with their loops streamed; verify a --streams 1 build of "
                         "this graph")
    one = OneStream(lib)
    cases = [_inputs_and_references(loaded, one, rng, steps, model_path, lib_dir)
             for _ in range(lib.streams)]
    # (steps, N, *step input) per input: stream i's frames in row i
    xs = [np.stack([xs_i[k] for xs_i, _ in cases], axis=1) for k in range(len(cases[0][0]))]
    checks = [Checks() for _ in lib.output_shapes]
    for i, (_, wants) in enumerate(cases):
        for k, want in enumerate(wants):
            first = len(xs[0]) - len(want)
            values = np.ma.getdata(want)
            for m in np.flatnonzero(defined_steps(want)):
                checks[k].add(0, first + m, i, values[m])
    return Case([xs], checks, tol, f"steps of {lib.streams} streams", signature(lib))


class OneStream:
    """One stream's view of a --streams N library (shapes without the streams
    axis), for the code that makes one stream's inputs and references."""

    def __init__(self, lib):
        self._lib = lib
        self.manifest = dict(lib.manifest)
        for key in ("inputs", "outputs"):
            self.manifest[key] = [dict(t, shape=t["shape"][1:]) for t in lib.manifest[key]]
        self.input_shapes = [s[1:] for s in lib.input_shapes]
        self.output_shapes = [s[1:] for s in lib.output_shapes]
        self.input_specs = [(n, dt, s[1:]) for n, dt, s in lib.input_specs]
        self.output_specs = [(n, dt, s[1:]) for n, dt, s in lib.output_specs]
        self.input_shape, self.output_shape = self.input_shapes[0], self.output_shapes[0]
        self.streams = 1

    def __getattr__(self, name):
        return getattr(self._lib, name)


def _sequence_case(lib, lib_dir, model_path, xs, wants, tol) -> Case:
    """One run over ``xs``; each output compared at its defined steps (the
    last len(want) steps: a window's first outputs are not defined)."""
    steps = len(xs[0])
    checks = []
    for i, want in enumerate(wants):
        if want.shape[1:] != tuple(lib.output_shapes[i]):
            raise TfaotError(f"{lib_dir}: the library returns {tuple(lib.output_shapes[i])} "
                             f"per step but {model_path} gives {want.shape[1:]}; was it built "
                             "from this model?")
        first = steps - len(want)  # the library's number of ``want``'s step 0
        defined = defined_steps(want)
        if not defined.any():
            raise TfaotError(f"{lib_dir}: no step of {steps} has a reference output (the "
                             "window is not full yet); use more --steps")
        checks.append(Checks())
        values = np.ma.getdata(want)
        for m in np.flatnonzero(defined):
            checks[-1].add(0, first + m, -1, values[m])
    return Case([xs], checks, tol, "steps", signature(lib))


def _fixed_length_case(references, lib, rng, limit: int, steps: int, tol: float) -> Case:
    """A graph of fixed length T that returns one output (a keyword spotter's
    softmax after its T frames) defines the stream only at its last frame:
    several sequences of T frames, each from a fresh init, are compared
    there (enough of them to cover about ``steps`` steps)."""
    st = references[0].stream
    length, p = st.fixed_length, st.frames_per_step
    per_sequence = -(-length // p)
    sequences = max(8, -(-steps // per_sequence))
    runs, checks = [], [Checks() for _ in references]
    for k in range(sequences):
        xs = [random_inputs(rng, (per_sequence, *shape), dt, limit)
              for shape, dt in zip(lib.input_shapes, lib.input_dtypes)]
        xs = [x if s else np.repeat(x[:1], len(x), axis=0)
              for x, s in zip(xs, lib.input_streamed)]
        runs.append(xs)
        for i, ref in enumerate(references):
            want, step = ref.fixed_output(xs, rng)
            checks[i].add(k, step, -1, want)
    return Case(runs, checks, tol, f"sequences of {length} frames", signature(lib))
