"""Streamify stage for graph formats: a frozen graph with time loops -> a step program.

The input is a ``graph_cut.LoadedGraph``: an unmodified frozen TensorFlow
graph whose recurrent layers are ``While`` loops over time, either functional
(``While``/``StatelessWhile`` with body/cond functions) or TF1 v1 control
flow (``Enter``/``Merge``/``Switch``/``NextIteration``/``Exit``), with
``TensorList`` or ``TensorArrayV3`` sequences. The output is a pure step
function ``(x_t, *states) -> (y_t, *new_states)`` (tf-import-notes §2):

1. *Loops* (``loops.py``): every loop becomes a ``Loop`` with a body
   GraphDef; v1 frames are functionalised at GraphDef level.
2. *Classification* (``classify.py``) of each loop variable: ``inlist``,
   ``outlist``, ``counter``, ``state`` or ``passthrough``. A counter the body
   compares with a bound (dynamic_rnn's ``sequence_length``) is fed from the
   stream's step counter; tf.conds become selects (``conds.py``).
3. *Probe* (``analysis.py``): the original graph runs once on a random
   sequence for the full-sequence shapes and the states' initial values.
4. *State* (``state.py``): every tensor kept between steps is registered,
   in order, with its initial value.
5. *Replay at T=1* (``replay.py``): the outer graph is copied node by node
   into a ``tf.function`` while a time meta (``meta.py``) is tracked for
   every tensor; ops on whole sequences follow their rule in ``rules.py``;
   each loop body is imported once with the states as arguments. Convolution,
   pooling, padding, crops and reductions over time follow ``time_rules.py``
   (ring buffers, registered by a discovery replay: ``timeplan.py``, which
   also picks prefix / sliding-window / stateless). An op that mixes time
   steps in a way that cannot stream (``ReverseV2``, ``SAME`` padding in time
   without a fixed window, ...) is a ``TfaotError`` naming the node.

Stateless graphs (no loop and no ``time_axis`` given) pass through: the step
is one inference on the input as it is.
"""
from __future__ import annotations

import numpy as np

from .. import stream_choice
from ..errors import TfaotError
from ..program import InputInfo, ProgramSignature, StepProgram, TensorInfo
from .analysis import analyse, probe
from .graphdef import FLOAT_TYPES, INT_TYPES, Fail, NotIncremental, dtype_name, tname
from .replay import Emitter
from .single_pass import single_pass_loops
from .state import StateRegistry
from .time_rules import probed_operands
from .transposed import TRANSPOSED_OPS
from .timeplan import NotAWindow, choose_mode, mode_text, plan_stream, recompute_program, \
    keeps_time, step_shape, stream_info, time_like, window_note

__all__ = ["streamify_graph"]


def streamify_graph(loaded, probe_T: int = 13, notify: bool = True,
                    fixed_window: str = "auto") -> StepProgram:
    """Stream a loaded frozen graph (``graph_cut.LoadedGraph``).

    ``fixed_window``: for a graph with a fixed window and no recurrence,
    "stream" streams it frame by frame as a sliding window, "whole" builds
    one whole-window inference per step (``timeplan.py``), "auto" (default)
    chooses by the input's rank (``stream_choice``).

    Returns a ``StepProgram`` whose ``pure_step`` is a ConcreteFunction
    ``(x_t, *states) -> (y_t, *new_states)`` at batch 1 (with several graph
    outputs: ``(*ys, *new_states)``).
    """
    program = _streamify_probing(loaded, probe_T, fixed_window)
    if notify:
        import sys

        for note in program.report.get("notes", []) + program.report.get("stream_notes", []):
            print(f"tfaot: note: {loaded.path}: {note}", file=sys.stderr)
        for warning in program.report.get("warnings", []):
            print(f"tfaot: warning: {loaded.path}: {warning}", file=sys.stderr)
    return program


#: Longer test sequences for a graph that the first one leaves empty: a
#: stack of strided and dilated convolutions before the RNN (a Keras 3
#: export of a CRNN) turns 13 frames into none, and TensorFlow failed
#: ("Tried to stack elements of an empty list"); the .keras file built.
LONGER_PROBES = (67, 257, 65543)

#: The test waveform of a graph taking one (``(None,)``, or any input the
#: graph cuts into frames): 4 s at 16 kHz. Cut into frames and those into
#: patches (YAMNet: 96 frames of 160 samples each), a short one gave a
#: single patch (padded up to one), whose size-1 axis the replay could not
#: tell from any other, or TensorFlow ran out of samples.
WAVEFORM_PROBE = 65543


def _streamify_probing(loaded, probe_T: int, fixed_window: str) -> StepProgram:
    """``_streamify_simplified`` on a test sequence of ``probe_T`` frames,
    then on longer ones while TensorFlow fails to run the graph on it."""
    first = None
    if loaded.inputs and (tuple(loaded.inputs[0].shape or ()) == (None,) or
                          _frames_as_convolutions(loaded).details.get("frames_as_convolutions")):
        probe_T = max(probe_T, WAVEFORM_PROBE)
    for T in (probe_T, *(t for t in LONGER_PROBES if t > probe_T)):
        try:
            return _streamify_simplified(loaded, T, fixed_window)
        except TfaotError as e:
            if "running the graph on a test sequence" not in str(e):
                raise
            first = first or e
    raise first  # (the first test sequence's words: a graph that fails on any)


def _streamify_simplified(loaded, probe_T: int, fixed_window: str = "auto") -> StepProgram:
    loaded = _frames_as_convolutions(_block_ops_written_out(_frame_copies_dropped(loaded)))
    simple, why = simplified(loaded)
    if simple is not None:
        try:
            program = _streamify(simple, probe_T, fixed_window)
            program.report["simplified"] = simple.details["simplified"]
            if not program.report.get("notes"):
                return program
            # Nothing streams after grappler: constant folding can make the
            # first copy of an unrolled cell differ from the others (its
            # zero state folded away); the graph as given may stream.
            try:
                original = _streamify(loaded, probe_T, fixed_window)
            except Fail:
                return program
            if original.report.get("notes"):
                return program
            original.report["simplified"] = {"used": False, "why": "the graph as given "
                                             "streams; the simplified one does not"}
            return original
        except Fail:
            pass  # the graph as given may still stream; its errors name its own nodes
    try:
        program = _streamify(loaded, probe_T, fixed_window)
    except Fail as e:
        raise TfaotError(f"{loaded.path}: {e}") from None
    program.report["simplified"] = {"used": False, "why": why or "the simplified graph "
                                    "does not stream; the graph as given does"}
    return program


def _block_ops_written_out(loaded):
    """``loaded`` with TensorFlow's fused RNN cell ops written out (block_cells.py)."""
    import dataclasses

    from .block_cells import expand_block_ops

    try:
        graph_def, count = expand_block_ops(loaded.graph_def)
    except Fail as e:
        raise TfaotError(f"{loaded.path}: {e}") from None
    if not count:
        return loaded
    details = dict(loaded.details, block_ops_written_out=count)
    return dataclasses.replace(loaded, graph_def=graph_def, details=details)


def _frame_copies_dropped(loaded):
    """``loaded`` without the loops that only copy frames (frame_copies.py:
    what tf.vectorized_map over the frames leaves)."""
    import dataclasses

    from .frame_copies import frame_copies_as_identities

    graph_def, count = frame_copies_as_identities(loaded)
    if not count:
        return loaded
    details = dict(loaded.details, frame_copy_loops_dropped=count)
    return dataclasses.replace(loaded, graph_def=graph_def, details=details)


def _frames_as_convolutions(loaded):
    """``loaded`` with ``tf.signal.frame`` over an open length written as a
    convolution (signal_frames.py), and ``tf.signal.overlap_and_add`` as a
    transposed one (signal_ola.py)."""
    import dataclasses

    from .signal_frames import frames_as_convolutions
    from .signal_ola import overlap_adds_as_convolutions

    graph_def, count, end_pads = frames_as_convolutions(loaded.graph_def)
    graph_def, adds = overlap_adds_as_convolutions(graph_def)
    if not count and not adds:
        return loaded
    details = dict(loaded.details, frames_as_convolutions=count, frame_end_pads=end_pads,
                   overlap_adds_as_convolutions=adds)
    return dataclasses.replace(loaded, graph_def=graph_def, details=details)


def _is_waveform(loaded) -> bool:
    """Whether the time input is a waveform of open length (``(None,)``, no
    batch axis) that the graph cuts into frames (YAMNet's signature): its
    axis is time, not a batch of scalars."""
    shape = loaded.inputs[0].shape
    return (shape is not None and tuple(shape) == (None,)
            and bool(loaded.details.get("frames_as_convolutions")))


def simplified(loaded):
    """``loaded`` with its graph run through grappler (``simplify.py``), or (None, why)."""
    import dataclasses

    from .simplify import batch_of_one, simplify_graph_def

    gd, why = simplify_graph_def(batch_of_one(loaded), [i.name for i in loaded.inputs],
                                 loaded.outputs)
    if gd is None:
        return None, f"grappler failed: {why}"
    details = dict(loaded.details)
    details["simplified"] = {"used": True, "nodes_before": len(loaded.graph_def.node),
                             "nodes_after": len(gd.node)}
    return dataclasses.replace(loaded, graph_def=gd, details=details), ""


def _streamify(loaded, probe_T: int, fixed_window: str = "auto", mode: str = "",
               not_window: str = "") -> StepProgram:
    """``mode``: "prefix" or "stateless" after a failed window attempt
    (``timeplan.py``), ``not_window`` saying why."""
    import tensorflow as tf

    inp = _time_input(loaded.inputs)
    if inp.shape is None:
        raise Fail(f"input '{inp.name}' has an unknown shape; give it with --inputs NAME:SHAPE")
    shape = list(inp.shape)
    g = analyse(loaded, unrolled=fixed_window != "whole")
    if g.loops and inp.time_axis is None and stream_choice.one_block_a_call(shape, inp.dtype):
        once = single_pass_loops(loaded, g, [i.shape for i in loaded.inputs])
        if once == set(g.loops):  # (one time loop left makes the graph a stream)
            g.once = {name: g.loops.pop(name) for name in once}
    stateless = not g.loops and not g.unrolled and inp.time_axis is None
    a = inp.time_axis
    axis_hint = ""  # appended to axis errors when the time axis was guessed
    if a is None:
        unknown = [d for d, s in enumerate(shape) if s is None and d != 0]
        if len(unknown) == 1:
            a = unknown[0]
        elif shape and shape[0] is None and len(shape) >= 3 and shape[1] == 1:
            a = 0  # time-major (T, 1, F)
        elif len(shape) == 2 and shape[0] in (1, None) and inp.dtype in TOKEN_DTYPES:
            a = 1  # token ids (batch, time): a text model's step of one id, [1, 1]
        else:
            a = 1 if len(shape) >= 3 else 0
        for u in g.unrolled.values():
            # The unrolled steps: the input axis of that length, if only one has it.
            if u.slicer.source == f"{inp.name}:0":
                a = u.slicer.axis
            elif shape[a] != u.steps and [s for s in shape].count(u.steps) == 1:
                a = shape.index(u.steps)
        axis_hint = (f" (the time axis of input '{inp.name}' was taken to be {a}; "
                     "set it with --time-axis if that is wrong)")
    why = not_window
    if not mode:
        mode, why = choose_mode(g, shape, a, inp.time_axis is not None or _is_waveform(loaded),
                                fixed_window, inp.dtype)
    if g.once:
        why += (f", and its {len(g.once)} loop(s) run once a call (over a time axis of one "
                "frame that the graph makes)")
    stateless = mode == "stateless"
    if stateless:
        a = None  # no loop: the step is one inference on the input as it is
    elif not 0 <= a < len(shape):
        raise Fail(f"time axis {a} is out of range for input '{inp.name}' of rank {len(shape)}")
    open_dims = [d for d, s in enumerate(shape) if s is None and d != 0]
    if inp.time_axis is None and a is not None and len(open_dims) > 1:
        raise Fail(_open_dims_message(inp.name, shape, open_dims))
    for d, s in enumerate(shape):
        if s is None and d != a:
            if d == 0:
                shape[d] = 1
            else:
                raise Fail(f"input '{inp.name}' has unknown dimension {d}"
                           + ("" if a is None else f" besides the time axis {a}")
                           + "; give the shape with --inputs NAME:SHAPE")
    if a is not None and shape[0] != 1 and a != 0 and len(shape) >= 3:
        raise Fail(f"input '{inp.name}' has batch size {shape[0]}; streaming needs batch 1: "
                   "export the model with a batch of 1 or an open one (a tf.function's "
                   "input_signature of tf.TensorSpec([None, ...]), or Keras model.export(dir))")
    dynamic = a is not None and shape[a] is None
    full = list(shape)
    if dynamic:
        full[a] = probe_T
    x_t_shape = tuple(s for d, s in enumerate(full) if d != a)
    step_inputs = [(inp, a is not None, full, x_t_shape) if other is inp else
                   _other_input(other, a, shape, full) for other in loaded.inputs]
    # States in loop order.
    loop_order = [n for n in g.order if n in g.loops]
    state_vars = [(ln, v) for ln in loop_order for v in g.loops[ln].vars if v.kind == "state"]
    shape_of = []
    for name in g.order:
        n = g.nodes[name]
        if n.op in ("Reshape", "Squeeze", "StridedSlice", "Unpack") and n.input:
            shape_of.append(tname(n.input[0]))
            shape_of.append(f"{name}:0")
        elif n.op in TRANSPOSED_OPS:  # (its rule needs the whole output's shape)
            shape_of.append(f"{name}:0")
    value_of = [v.operand for _, v in state_vars]
    value_of += [st["init"] for u in g.unrolled.values() for st in u.states]
    value_of += probed_operands(g)
    value_of += [v.operand for _, lp in sorted(g.loops.items()) for v in lp.vars
                 if v.kind == "passthrough" and v.dtype in INT_TYPES]  # (lengths: Emitter)
    pr = probe(loaded, g, tuple(full), a, shape_of, value_of,
               input_shapes=[tuple(f) for _, _, f, _ in step_inputs])

    states = StateRegistry()
    for ln, v in state_vars:
        states.add((ln, v.index), pr.values[v.operand], layer=ln)
    for u in g.unrolled.values():
        for j, st in enumerate(u.states):
            states.add((u.name, j), pr.values[st["init"]], layer=u.name)
    specs = [tf.TensorSpec(step, tf.as_dtype(i.dtype), name="x_t" if k == 0 else f"x_t{k}")
             for k, (i, _, _, step) in enumerate(step_inputs)] + states.specs()
    count, streamed = len(step_inputs), [s for _, s, _, _ in step_inputs]

    def replay(plan, discovering, args):
        em = Emitter(g, loaded, pr, states, a, axis_hint, plan=plan, discovering=discovering)
        em.ys, em.new = em.run(list(args[:count]), list(args[count:]), streamed)
        return em

    planned = None
    if not stateless:
        try:
            planned = plan_stream(
                mode, window=shape[a] if mode == "window" else None, dynamic=dynamic,
                replay=replay, states=states, arg_specs=lambda plan: [
                    (step_shape(f, a, plan.frames) if s else step, i.dtype)
                    for i, s, f, step in step_inputs])
        except NotIncremental as why:
            if mode != "window":
                raise
            if not keeps_time(loaded, inp, full, a):
                return recompute_program(loaded, inp, full, a, str(why))
            if inp.time_axis is not None:
                # asked to stream over that axis (--time-axis): frame by frame
                # from reset, as an open length would (a causal WaveNet padding
                # each window's start: the stream's start is that padding)
                return _streamify(loaded, probe_T, fixed_window, "prefix", not_window=str(why))
            return _streamify(loaded, probe_T, fixed_window, "stateless",
                              not_window=f"{why}; and the output seems to keep the time axis")
        except (NotAWindow, Fail) as why:
            if mode != "window" or isinstance(why, NotIncremental):
                raise
            if inp.time_axis is not None and not isinstance(why, NotAWindow) and \
                    not keeps_time(loaded, inp, full, a):
                # asked to stream over that axis (--time-axis), where a node
                # mixes its frames (attention's einsum): the exact sliding
                # window, as a Keras model's, not one whole inference a step
                return recompute_program(loaded, inp, full, a, str(why))
            retry = "prefix" if inp.time_axis is not None and isinstance(why, NotAWindow) \
                else "stateless"  # a given time axis reaching the output: per frame
            return _streamify(loaded, probe_T, fixed_window, retry, not_window=str(why))
        if planned.plan.frames > 1:
            step_inputs = [(i, s, f, step_shape(f, a, planned.plan.frames) if s else step)
                           for i, s, f, step in step_inputs]
            specs = [tf.TensorSpec(step, tf.as_dtype(i.dtype),
                                   name="x_t" if k == 0 else f"x_t{k}")
                     for k, (i, _, _, step) in enumerate(step_inputs)]
        specs = specs[:count] + states.specs()

    def pure_step(*args):
        em = replay(planned.plan if planned else None, False, args)
        return tuple(em.ys) + tuple(tf.identity(s) for s in em.new)

    cf = tf.function(pure_step, input_signature=specs, autograph=False).get_concrete_function()
    out_shapes = [tuple(int(d) if d is not None else 1 for d in t.shape)
                  for t in cf.structured_outputs[:len(loaded.outputs)]]
    outputs = tuple(
        TensorInfo(name, t.dtype.name, shp)
        for name, t, shp in zip(loaded.output_names, cf.structured_outputs, out_shapes))
    for s, t in zip(states.infos, cf.structured_outputs[len(loaded.outputs):]):
        if tuple(t.shape) != s.shape:
            raise Fail(f"state '{s.name}': initial value has shape {s.shape} but the loop "
                       f"body returns shape {tuple(t.shape)}")
    lengths = _length_inputs(g, [i for i, s, _, _ in step_inputs if not s])
    held = planned is not None and planned.broadcasts
    inputs = tuple(InputInfo(i.name, i.dtype, step, streamed=s, length=i.name in lengths,
                             held=held and not s and i.name not in lengths)
                   for i, s, _, step in step_inputs)
    sig = ProgramSignature(inputs, outputs, states.infos)
    notes = []
    if stateless and time_like(shape) and not_window:
        notes.append(
            "nothing streams: no time loop or unrolled recurrence found"
            + (f" ({g.not_unrolled})" if g.not_unrolled else "")
            + (f"; no sliding window either: {not_window}" if not_window else "")
            + f"; each step is one whole-window inference on input '{inp.name}' of shape "
            f"{'x'.join(str(d) for d in shape)} (give --time-axis to stream it over an axis)")
    report = {
        "mode": "stateless graph (one inference per step)" if stateless else
                "graph (unrolled recurrence, its repeated cell streamed as a loop)"
                if g.unrolled else "graph (loop bodies of the frozen graph)",
        "input": {**inp.to_json(), "time_axis": a, "probed_shape": list(full)},
        "dynamic_time": dynamic,
        "stateless": stateless,
        "loops": [
            {"name": ln, "form": g.loops[ln].form,
             "vars": {str(v.index): v.kind + (f"({v.detail['mode']})" if "mode" in v.detail
                                              else "") for v in g.loops[ln].vars},
             "states": [states.name_of((ln, v.index)) for v in g.loops[ln].vars
                        if v.kind == "state"]}
            for ln in loop_order],
        "loop_vars": [
            {"loop": ln, "body": g.loops[ln].body_fn or None,
             "vars": [{"index": v.index, "kind": v.kind, "operand": v.operand,
                       "dtype": dtype_name(v.dtype),
                       **({"mode": v.detail["mode"]} if "mode" in v.detail else {})}
                      for v in g.loops[ln].vars]}
            for ln in loop_order],
        "parameters": _count_params(loaded.graph_def),
    }
    if loaded.details.get("cut"):
        report["cut"] = loaded.details["cut"]
    others = [k for k in loaded.details.get("signatures", [])
              if k != loaded.details.get("signature")]
    if others:  # (the build says which it took; inspect said nothing)
        report["signature"] = {"name": loaded.details["signature"], "others": others}
    if g.unrolled:
        report["unrolled"] = [u.report() for u in g.unrolled.values()]
    if notes:
        report["notes"] = notes
    stream = stream_info(planned, a, dynamic, shape, loaded.details.get("frame_end_pads", ()))
    report["mode"] = mode_text(stream, report["mode"])
    report["stream"] = stream.to_json()
    if planned is not None and planned.rows:
        report["layers"] = planned.rows
    if not notes:  # (the note above says how it streams, and why)
        report["stream_notes"] = [window_note(stream, inp.name, why)]
    if stateless and fixed_window == "whole" and time_like(shape):
        report["mode"] += "; whole-window build (--whole-window)"
    if stream.end_pads:
        report["stream_notes"] = report.get("stream_notes", []) + [
            f"node '{stream.end_pads[0]}' pads the sequence's end with zeros, as many as its "
            "length asks for: they complete the last window of a sequence that ends, and a "
            "stream does not end, so they are left out (each step's output is the model's "
            "on the frames so far, unpadded)"]
    counted = _counter_notes(g, states, [i for i, s, _, _ in step_inputs if not s])
    if counted:
        report["stream_notes"] = report.get("stream_notes", []) + counted
    program = StepProgram(source=str(loaded.path), format=loaded.format, signature=sig,
                          pure_step=cf, report=report, stream=stream)
    return program


def _length_inputs(g, per_step) -> set[str]:
    """The per-step inputs a time bound (a sequence_length) comes from."""
    return {name for _, _, _, fed in _bounds(g, per_step) for name in fed}


def _bounds(g, per_step) -> list[tuple[str, str, str, list[str]]]:
    """Each loop (or unrolled recurrence) whose time index is compared with a
    bound: (kind, its name, the node comparing, the per-step inputs the bound
    comes from)."""
    from .graphdef import parse_tensor

    compared = {}  # loop or unrolled pseudo node -> (what, a node comparing its time)
    for ln, lp in g.loops.items():
        nodes = [c for v in lp.vars for c in v.detail.get("compared", [])]
        if nodes:
            compared[ln] = ("loop", nodes[0])
    for un, u in g.unrolled.items():
        times = {parse_tensor(t)[0] for t in u.times}
        compared.update({un: ("unrolled recurrence", n.name) for n in u.body
                         if any(parse_tensor(i)[0] in times for i in n.input)})
    bounds = []
    for name, (kind, node) in compared.items():
        seen, work = set(), [parse_tensor(i)[0] for i in g.nodes[name].input]
        while work:  # the nodes its operands come from
            u = work.pop()
            if u not in seen and u in g.nodes:
                seen.add(u)
                work += [parse_tensor(i)[0] for i in g.nodes[u].input if not i.startswith("^")]
        bounds.append((kind, name, node, [i.name for i in per_step if i.name in seen]))
    return bounds


def _counter_notes(g, states, per_step) -> list[str]:
    """What the build says about loops (and unrolled recurrences) whose time index
    is compared with a bound (a sequence_length): the step counter it keeps, and
    which per-step inputs the bound comes from (taken every step)."""
    from ..streamify_keras.time_meta import STEP_CAP

    notes = []
    for kind, name, node, fed in _bounds(g, per_step):
        fed = ", ".join(map(repr, fed))
        note = (f"{kind} '{name}': its time index is compared with a bound by node '{node}' "
                "(a sequence_length); the stream keeps a step counter (state "
                f"'{states.name_of(('stream', 'step'))}', reset by reset()) so step t sees "
                f"time t, exact up to {STEP_CAP:.0f} steps (then it stays there)")
        if fed:
            note += (f"; the bound comes from input(s) {fed}, taken every step: give it as "
                     "the sequence's length (a length <= t freezes the state and outputs "
                     "zeros, as the graph does)")
        notes.append(note)
    return notes


def _time_input(inputs):
    """The input whose time axis the stream follows: the one given a time
    axis, else the first with an unknown dimension besides batch, else the
    first of rank >= 2 (a sequence_length vector may come first), else the first."""
    if not inputs:
        raise Fail("the graph has no input")
    for inp in inputs:
        if inp.shape is None:
            raise Fail(f"input '{inp.name}' has an unknown shape; give it with "
                       "--inputs NAME:SHAPE")
    given = [i for i in inputs if i.time_axis is not None]
    open_ = [i for i in inputs if any(d is None for d in i.shape[1:])]
    framed = [i for i in inputs if len(i.shape) >= 2]  # not a vector of lengths
    return (given or open_ or framed or inputs)[0]


#: the dtypes of token ids (into an embedding's table)
TOKEN_DTYPES = ("int32", "int64")

#: placeholder names of an input's axes by rank, for an example shape
AXIS_LETTERS = {2: "NF", 3: "NTF", 4: "NHWC", 5: "NDHWC"}


def _open_dims_message(name: str, shape: list, open_dims: list[int]) -> str:
    """The error for an input with several open axes and no time axis given
    (a serving signature's image, [None, None, None, 3]): a stream runs
    along one axis at most, so the others need sizes; with an example."""
    letters = AXIS_LETTERS.get(len(shape), "N" + "S" * (len(shape) - 1))
    example = "x".join("1" if d == 0 else letters[d] if s is None else str(s)
                       for d, s in enumerate(shape))
    image = " (an image's size: one whole image a step)" if len(shape) in (4, 5) else ""
    dims = ", ".join(map(str, open_dims[:-1])) + f" and {open_dims[-1]}"
    return (f"input '{name}' has open dimensions {dims}; a stream runs along one axis at "
            f"most, and the build needs the others' sizes: give them with --inputs "
            f"{name}:{example}{image}, or name the time axis with --time-axis and give "
            "the rest")


def _other_input(inp, a: int | None, time_shape, time_full):
    """(input, streamed, probe shape, step shape) of an input besides the time
    input: streamed when its axis ``a`` has the time input's length there (it
    then takes one frame per step), else its whole value every step (a
    conditioning vector, say)."""
    shape = list(inp.shape)
    streamed = a is not None and len(shape) > max(a, 1) and shape[a] == time_shape[a]
    for d, s in enumerate(shape):
        if s is None and not (streamed and d == a):
            if d != 0:
                raise Fail(f"input '{inp.name}' has unknown dimension {d}"
                           + (" besides the time axis" if streamed else
                              " and no time axis like the streamed input's")
                           + "; give the shape with --inputs NAME:SHAPE")
            shape[d] = 1
    full = list(shape)
    if streamed:
        full[a] = time_full[a]
    step = tuple(s for d, s in enumerate(full) if not (streamed and d == a))
    return inp, streamed, full, step


def _count_params(graph_def) -> int:
    total = 0
    for n in graph_def.node:
        if n.op == "Const" and n.attr["dtype"].type in FLOAT_TYPES:
            shp = n.attr["value"].tensor.tensor_shape
            total += int(np.prod([d.size for d in shp.dim], dtype=np.int64)) if shp.dim else 1
    return total