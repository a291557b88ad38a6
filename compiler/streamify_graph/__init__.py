"""Streamify stage for graph formats: a frozen graph with time loops -> a step program.

The input is a ``load_graph.LoadedGraph``: an unmodified frozen TensorFlow
graph whose recurrent layers are ``While`` loops over time, either functional
(``While``/``StatelessWhile`` with body/cond functions) or TF1 v1 control
flow (``Enter``/``Merge``/``Switch``/``NextIteration``/``Exit``), with
``TensorList`` or ``TensorArrayV3`` sequences. The output is a pure step
function ``(x_t, *states) -> (y_t, *new_states)`` (tf-import-notes §2):

1. *Loops* (``loops.py``): every loop becomes a ``Loop`` with a body
   GraphDef; v1 frames are functionalised at GraphDef level.
2. *Classification* (``classify.py``) of each loop variable: ``inlist``,
   ``outlist``, ``counter``, ``state`` or ``passthrough``.
3. *Probe* (``analysis.py``): the original graph runs once on a random
   sequence for the full-sequence shapes and the states' initial values.
4. *State* (``state.py``): every tensor kept between steps is registered,
   in order, with its initial value.
5. *Replay at T=1* (``replay.py``): the outer graph is copied node by node
   into a ``tf.function`` while a time meta (``meta.py``) is tracked for
   every tensor; ops on whole sequences follow their rule in ``rules.py``;
   each loop body is imported once with the states as arguments. An op that
   mixes time steps (``ReverseV2``, ``Pad``, ``Mean`` over time, ...) is a
   ``TfaotError`` naming the node.

Stateless graphs (no loop and no ``time_axis`` given) pass through: the step
is one inference on the input as it is.
"""
from __future__ import annotations

import numpy as np

from ..errors import TfaotError
from ..program import ProgramSignature, StepProgram, StreamInfo, TensorInfo
from .analysis import analyse, probe
from .graphdef import FLOAT_TYPES, Fail, dtype_name, tname
from .replay import Emitter
from .state import StateRegistry

__all__ = ["streamify_graph"]


def streamify_graph(loaded, probe_T: int = 13, notify: bool = True) -> StepProgram:
    """Stream a loaded frozen graph (``load_graph.LoadedGraph``).

    Returns a ``StepProgram`` whose ``pure_step`` is a ConcreteFunction
    ``(x_t, *states) -> (y_t, *new_states)`` at batch 1 (with several graph
    outputs: ``(*ys, *new_states)``).
    """
    program = _streamify_simplified(loaded, probe_T)
    if notify:
        import sys

        for note in program.report.get("notes", []):
            print(f"tfaot: note: {loaded.path}: {note}", file=sys.stderr)
    return program


def _streamify_simplified(loaded, probe_T: int) -> StepProgram:
    simple, why = simplified(loaded)
    if simple is not None:
        try:
            program = _streamify(simple, probe_T)
            program.report["simplified"] = simple.details["simplified"]
            if not program.report.get("notes"):
                return program
            # Nothing streams after grappler: constant folding can make the
            # first copy of an unrolled cell differ from the others (its
            # zero state folded away); the graph as given may stream.
            try:
                original = _streamify(loaded, probe_T)
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
        program = _streamify(loaded, probe_T)
    except Fail as e:
        raise TfaotError(f"{loaded.path}: {e}") from None
    program.report["simplified"] = {"used": False, "why": why or "the simplified graph "
                                    "does not stream; the graph as given does"}
    return program


def simplified(loaded):
    """``loaded`` with its graph run through grappler (``simplify.py``), or (None, why)."""
    import dataclasses

    from .simplify import simplify_graph_def

    gd, why = simplify_graph_def(loaded.graph_def, [i.name for i in loaded.inputs],
                                 loaded.outputs)
    if gd is None:
        return None, f"grappler failed: {why}"
    details = dict(loaded.details)
    details["simplified"] = {"used": True, "nodes_before": len(loaded.graph_def.node),
                             "nodes_after": len(gd.node)}
    return dataclasses.replace(loaded, graph_def=gd, details=details), ""


def _streamify(loaded, probe_T: int) -> StepProgram:
    import tensorflow as tf

    if len(loaded.inputs) != 1:
        raise Fail("the graph has {} inputs ({}); only one streamed input is supported "
                   "(choose it with --inputs)".format(
                        len(loaded.inputs), ", ".join(f"'{i.name}'" for i in loaded.inputs)))
    inp = loaded.inputs[0]
    if inp.shape is None:
        raise Fail(f"input '{inp.name}' has an unknown shape; give it with --inputs NAME:SHAPE")
    shape = list(inp.shape)
    g = analyse(loaded)
    stateless = not g.loops and not g.unrolled and inp.time_axis is None
    a = inp.time_axis
    axis_hint = ""  # appended to axis errors when the time axis was guessed
    if a is None:
        unknown = [d for d, s in enumerate(shape) if s is None and d != 0]
        if len(unknown) == 1:
            a = unknown[0]
        elif shape and shape[0] is None and len(shape) >= 3 and shape[1] == 1:
            a = 0  # time-major (T, 1, F)
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
    if stateless:
        a = None  # no loop: the step is one inference on the input as it is
    elif not 0 <= a < len(shape):
        raise Fail(f"time axis {a} is out of range for input '{inp.name}' of rank {len(shape)}")
    for d, s in enumerate(shape):
        if s is None and d != a:
            if d == 0:
                shape[d] = 1
            else:
                raise Fail(f"input '{inp.name}' has unknown dimension {d}"
                           + ("" if a is None else f" besides the time axis {a}")
                           + "; give the shape with --inputs NAME:SHAPE")
    if a is not None and shape[0] != 1 and a != 0 and len(shape) >= 3:
        raise Fail(f"input '{inp.name}' has batch size {shape[0]}; streaming needs batch 1")
    dynamic = a is not None and shape[a] is None
    full = list(shape)
    if dynamic:
        full[a] = probe_T
    x_t_shape = tuple(s for d, s in enumerate(full) if d != a)
    # States in loop order.
    loop_order = [n for n in g.order if n in g.loops]
    state_vars = [(ln, v) for ln in loop_order for v in g.loops[ln].vars if v.kind == "state"]
    shape_of = []
    for name in g.order:
        n = g.nodes[name]
        if n.op in ("Reshape", "Squeeze", "StridedSlice", "Unpack") and n.input:
            shape_of.append(tname(n.input[0]))
            shape_of.append(f"{name}:0")
    value_of = [v.operand for _, v in state_vars]
    value_of += [st["init"] for u in g.unrolled.values() for st in u.states]
    pr = probe(loaded, g, tuple(full), a, shape_of, value_of)

    states = StateRegistry()
    for ln, v in state_vars:
        states.add((ln, v.index), pr.values[v.operand], layer=ln)
    for u in g.unrolled.values():
        for j, st in enumerate(u.states):
            states.add((u.name, j), pr.values[st["init"]], layer=u.name)
    specs = [tf.TensorSpec(x_t_shape, tf.as_dtype(inp.dtype), name="x_t")] + states.specs()

    def pure_step(x_t, *st):
        em = Emitter(g, loaded, pr, states, a, axis_hint)
        ys, new = em.run(x_t, list(st))
        return tuple(ys) + tuple(tf.identity(s) for s in new)

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
    inputs = (TensorInfo(inp.name, inp.dtype, x_t_shape),)
    sig = ProgramSignature(inputs, outputs, states.infos)
    notes = []
    if stateless and _time_like(shape):
        notes.append(
            "nothing streams: no time loop or unrolled recurrence found"
            + (f" ({g.not_unrolled})" if g.not_unrolled else "")
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
    if g.unrolled:
        report["unrolled"] = [u.report() for u in g.unrolled.values()]
    if notes:
        report["notes"] = notes
    stream = StreamInfo() if stateless else StreamInfo(
        mode="prefix", time_axis=a, fixed_length=None if dynamic else int(shape[a]))
    program = StepProgram(source=str(loaded.path), format=loaded.format, signature=sig,
                          pure_step=cf, report=report, stream=stream)
    return program


def _time_like(shape) -> bool:
    """A batch-1 input with more than one axis of size > 1 (a window of frames)."""
    return len(shape) >= 3 and sum(1 for d in shape[1:] if d is None or d > 1) >= 2


def _count_params(graph_def) -> int:
    total = 0
    for n in graph_def.node:
        if n.op == "Const" and n.attr["dtype"].type in FLOAT_TYPES:
            shp = n.attr["value"].tensor.tensor_shape
            total += int(np.prod([d.size for d in shp.dim], dtype=np.int64)) if shp.dim else 1
    return total