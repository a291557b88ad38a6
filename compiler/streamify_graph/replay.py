"""The replay at T=1: the outer graph rebuilt node by node as one time step.

``Emitter.run`` is called inside the ``tf.function`` of the step. It walks
the nodes the outputs need, in order, and tracks a time meta for every
tensor (``meta.py``): static and per-step work is copied as is, ops with a
whole-sequence input go through their rule in ``seq_op.SEQ_RULES``, and every
loop body is imported once with its states as arguments (``emit_loop``).
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from ..errors import first_line
from .analysis import Graph, Probe
from .folding import folded_value, picks_other_than_time
from .graphdef import IDENTITY, READ_OPS, WHILE_OPS, Fail, calls_function, parse_tensor, \
    scope, tname
from .loops import LOOP_OP, initial_state_refusal
from .unrolled import UNROLLED_OP
from .meta import HELD, LIST_KINDS, STATIC, STATIC_KINDS, STATIC_T, STEP, Meta, seq, step
from .ring import TimePlan, TimeState, take_frames
from . import rules, transposed  # noqa: F401 - registers the sequence rules (and time_rules')
from .rules import ELEMENTWISE
from .seq_op import apply_seq_rule
from .single_pass import body_const, emit_single_pass, import_body
from .state import StateRegistry

_SHAPE_OPS = {"Shape", "ShapeN", "Size", "Rank"}


class Emitter:
    def __init__(self, g: Graph, loaded, probe: Probe, states: StateRegistry,
                 time_axis: int | None, axis_hint: str = "", *,
                 plan: TimePlan | None = None, discovering: bool = False):
        self.time_axis = time_axis
        self.axis_hint = axis_hint  # appended to axis errors when the time axis was guessed
        self.g = g
        self.loaded = loaded
        self.probe = probe
        self.states = states
        self.tensors: dict[str, Any] = {}
        self.metas: dict[str, Meta] = {}
        self.list_values: dict[str, tuple[Any, str]] = {}  # key -> (v_t or y_t, mode)
        self.ta_in: dict[str, Any] = {}
        self.state_inputs: dict[Any, Any] = {}  # state key -> this step's value
        self.new_states: dict[Any, Any] = {}  # state key -> the next step's value
        self.library_loaded = False
        # Streaming over time (ring.py, time_rules.py): the plan, the time
        # state, inputs replaced while a rule runs (delay lines), the chunk
        # records of loop lists, report rows and the outputs' first valid step.
        self.plan = plan or TimePlan("prefix")
        self.time = TimeState(self.plan, self.state_inputs, self.new_states, discovering)
        self.overrides: dict[str, Any] = {}
        self.list_frames: dict[str, Meta] = {}
        self.rows: list[dict[str, Any]] = []
        self.first_valid_step = 0
        self.output_metas: list[Meta] = []
        self.broadcasts = False  # a held value met a sequence (see emit)

    # -- helpers
    def fail(self, node, msg: str):
        raise Fail(f"node '{node.name}' (op {node.op}): {msg}")

    def const_value(self, node, pos: int):
        import tensorflow as tf

        t = self.tensors.get(tname(node.input[pos]))
        v = None if t is None else folded_value(t)
        if v is None:
            src = self.g.nodes.get(parse_tensor(node.input[pos])[0])
            if src is not None and src.op == "Const":
                v = tf.make_ndarray(src.attr["value"].tensor)
        if v is None:
            self.fail(node, f"input {pos} ('{node.input[pos]}') must be a constant")
        return np.asarray(v)

    def full_shape(self, t: str):
        return self.probe.shapes.get(tname(t))

    def _import(self, node_defs, input_map, return_elements, library=None):
        import tensorflow as tf

        gd = tf.compat.v1.GraphDef()
        gd.node.extend(node_defs)
        if library is not None and not self.library_loaded and len(library.function) and \
                any(calls_function(n) for n in node_defs):
            # Only graphs that call functions (a nested loop, a PartitionedCall)
            # need the library; it then comes along once.
            gd.library.CopyFrom(library)
            self.library_loaded = True
        return tf.graph_util.import_graph_def(gd, input_map=input_map,
                                              return_elements=return_elements, name="")

    def emit_generic(self, node):
        import tensorflow as tf

        c = tf.compat.v1.NodeDef()
        c.CopyFrom(node)
        del c.input[:]
        input_map = {}
        for i in node.input:
            if i.startswith("^"):
                continue
            t = self.overrides.get(tname(i), self.tensors.get(tname(i)))
            if t is None:
                self.fail(node, f"input '{i}' has no streamable value")
            c.input.append(i)
            input_map[tname(i)] = t
        for a in ("_class", "_output_shapes"):
            if a in c.attr:
                del c.attr[a]
        try:
            op = self._import([c], input_map, [node.name],
                              library=self.loaded.graph_def.library)[0]
        except Exception as e:
            self.fail(node, f"TensorFlow cannot rebuild it: {first_line(e)}")
        return list(op.outputs)

    def set(self, node, outs, metas):
        for k, (t, m) in enumerate(zip(outs, metas)):
            self.tensors[f"{node.name}:{k}"] = t
            self.metas[f"{node.name}:{k}"] = m

    # -- the walk
    def run(self, xs, states, streamed=None):
        """``xs``: the step inputs in ``loaded.inputs`` order (or the one input);
        ``streamed``: which of them carry the time axis (the others are the
        same whole tensor every step, per-step values)."""
        import tensorflow as tf

        self.state_inputs.update(zip(self.states.keys, states))
        xs = list(xs) if isinstance(xs, (list, tuple)) else [xs]
        flags = streamed or [True] * len(xs)
        step_inputs = {i.name: (x, f) for i, x, f in zip(self.loaded.inputs, xs, flags)}
        for name in self.g.order:
            node = self.g.nodes[name]
            if name in step_inputs:
                x_t, is_streamed = step_inputs[name]
                if self.time_axis is None or not is_streamed:
                    self.set(node, [tf.identity(x_t, name=scope(name)[:-1])], [HELD])
                    continue
                with tf.name_scope(scope(name)):
                    x = tf.expand_dims(x_t, self.time_axis) if self.plan.frames == 1 else x_t
                self.set(node, [x], [seq(self.time_axis, self.plan.input_seq())])
                continue
            if name in self.g.once:
                emit_single_pass(self, node)
                continue
            if node.op == LOOP_OP or node.op in WHILE_OPS:
                self.emit_loop(node)
                continue
            if node.op == UNROLLED_OP:
                self.emit_unrolled(node)
                continue
            self.emit(node)
        ys = []
        # A v1 loop's Exit named as an output (a TF1 SavedModel's signature
        # returning the final state) is now an output of the loop's node.
        loop_outputs = {exit_: inner for inner, exit_ in self.g.alias.items()}
        for out in self.loaded.outputs:
            inner = loop_outputs.get(tname(out), tname(out))
            t, m = self.tensors.get(inner), self.metas.get(inner)
            node = self.g.nodes[parse_tensor(inner)[0]]
            if m is not None and m.kind == "item" and int(m.key) == m.axis - 1:
                m = STEP  # the last time step: what the stream has at this step
            if m is None or t is None or m.kind in LIST_KINDS or m.kind in ("dead", "item"):
                self.fail(node, f"the output '{out}' has no streamable value ({m})")
            if m.kind == "seq":
                t, m = self._last_frame(out, t, m)
            self.output_metas.append(m)
            self.first_valid_step = max(self.first_valid_step, m.valid_from)
            ys.append(t)
        new = [self.new_states[k] for k in self.states.keys]
        return ys, new

    def _last_frame(self, out: str, t, m: Meta):
        """A sequence output's value at this step: the reference's last frame,
        or its last n along the time axis for an output with n > 1 frames a
        step (a branch without another's strides, an upsampling); where the
        reference runs past the chunk (an overlap-add's sums of frames to
        come), the chunk's final frames, late (StreamInfo.output_latency)."""
        import tensorflow as tf

        frames = m.frames or self.plan.input_seq()
        final = frames.final()
        with tf.name_scope("output"):
            cat, index = self.time.frame_at_lag(("output", out), t, m.axis, final, "output",
                                                frames.n)
            y = take_frames(cat, m.axis, index + 1 - frames.n, index + 1)
            if frames.n == 1:
                y = tf.squeeze(y, [m.axis])
        return y, Meta("seq", axis=m.axis, frames=frames,
                       valid_from=max(m.valid_from, final.first_step))

    def _graph_input_of(self, tensor: str) -> str | None:
        """The graph input that ``tensor`` is, through identities (a Keras
        export's 'Func/.../input/_12' of its 'h0'), else None."""
        inputs = {i.name for i in self.loaded.inputs}
        node = self.g.nodes.get(parse_tensor(tensor)[0])
        while node is not None and node.name not in inputs and node.op in IDENTITY \
                and node.input:
            node = self.g.nodes.get(parse_tensor(node.input[0])[0])
        return node.name if node is not None and node.name in inputs else None

    def row(self, node, role: str, **facts) -> None:
        """A line of the report's "layers": how a node streams over time."""
        if self.time.discovering:
            self.rows.append({"name": node.name, "type": node.op, "role": role, **facts})

    def emit(self, node):
        import tensorflow as tf

        ins = [i for i in node.input if not i.startswith("^")]
        metas = [self.metas.get(tname(i)) for i in ins]
        for i, m in zip(ins, metas):
            if m is None:
                self.fail(node, f"input '{i}' was not produced")
        kinds = {m.kind for m in metas}
        op = node.op
        # Sources and list creation.
        if op in ("Placeholder", "PlaceholderV2", "PlaceholderWithDefault") and not ins:
            self.fail(node, "a graph input that is not one of the step inputs "
                      "(name every input with --inputs)")
        if op in ("TensorListReserve", "EmptyTensorList"):
            if kinds - STATIC_KINDS:
                self.fail(node, "a list whose size depends on the sequence in an unsupported way")
            self.set(node, [None], [Meta("list_out", key=node.name)])
            return
        if op == "TensorArrayV3":
            self.set(node, [None, None],
                     [Meta("ta", key=node.name), Meta("ta_flow", key=node.name)])
            return
        if "dead" in kinds:
            m = next(m for m in metas if m.kind == "dead")
            self.fail(node, m.why)
        if kinds & LIST_KINDS:
            return self.emit_list_op(node, ins, metas)
        if kinds <= STATIC_KINDS:
            outs = self.emit_generic(node)
            t_dep = "static_t" in kinds and not picks_other_than_time(node, metas, self.tensors)
            self.set(node, outs, [STATIC_T if t_dep else STATIC] * len(outs))
            return
        if op in _SHAPE_OPS:
            outs = self.emit_generic(node)
            t_dep = op in ("Shape", "ShapeN", "Size") and "seq" in kinds
            # (a Shape's record keeps which of its entries is the time length)
            time_entry = metas[0].axis if op == "Shape" and metas[0].kind == "seq" else None
            self.set(node, outs, [Meta("static_t", axis=time_entry) if t_dep else STATIC]
                     * len(outs))
            return
        if op in ("ZerosLike", "OnesLike") and kinds <= {"item", "step"} | STATIC_KINDS:
            # Its value is its input's shape only: a Keras 3 masked RNN's
            # last output starts as zeros_like(its output at step 0), a
            # constant initial state (it was refused as depending on the input)
            x = self.tensors.get(tname(ins[0]))
            if x is not None and x.shape.is_fully_defined():
                fill = tf.zeros if op == "ZerosLike" else tf.ones
                self.set(node, [fill(x.shape, x.dtype)], [STATIC])
                return
        if "item" in kinds:
            return self.emit_item(node, ins, metas)
        if "seq" in kinds and "step" in kinds and op in (*ELEMENTWISE, "ConcatV2") and \
                all(m.held for m in metas if m.kind == "step"):
            # A value of the per-step inputs alone (a conditioning vector
            # Reshape((1, C)) then multiplied with the sequence, as a Keras
            # model.export() writes it, or tiled over the frames and
            # concatenated to each) is one value for the whole sequence
            # in the graph: it broadcasts over the frames (_elementwise and
            # _concat check that it has no extent in time), and the input is held.
            self.broadcasts = True
        elif "seq" in kinds and "step" in kinds:
            self.fail(node, "mixes the sequence with a value that has no time axis but "
                      "changes from step to step (inputs: " +
                      ", ".join(f"'{i}' {m}" for i, m in zip(ins, metas)) + "): in the graph "
                      "it is one value for the whole sequence (e.g. a mean over time, known "
                      "once the sequence has ended, subtracted from every frame); normalize "
                      "outside the model or with fixed statistics")
        if "seq" not in kinds:  # step (and static): a function of the current step only
            outs = self.emit_generic(node)
            held = all(m.held for m in metas if m.kind == "step")
            m = step(max(m.valid_from for m in metas))
            self.set(node, outs, [Meta("step", valid_from=m.valid_from, held=True) if held
                                  else m] * len(outs))
            return
        apply_seq_rule(self, node, ins, metas)

    # -- one time step of an unrolled sequence
    def emit_item(self, node, ins, metas):
        """Ops on one time step taken out of a sequence (an unrolled per-step map).

        Step k of a fixed-length sequence is fine as long as all T steps are
        stacked back in order (Keras' fixed-T TimeDistributed unrolls so);
        step T-1 on its own is the last step, like a ``step`` tensor.
        """
        import tensorflow as tf

        items = {(m.key, m.axis) for m in metas if m.kind == "item"}
        others = {m.kind for m in metas if m.kind != "item"}
        k, T = next(iter(items))
        # The chunk record of the unrolled sequence (a conv front end before it).
        first = next(m for m in metas if m.kind == "item")
        record = {"frames": first.frames, "valid_from": first.valid_from}
        if node.op == "Pack" and others <= {"step"}:
            keys = [int(m.key) if m.kind == "item" else T - 1 for m in metas]
            if keys != list(range(T)):
                self.fail(node, f"stacks time steps {keys}, not the whole sequence 0..{T - 1}")
            axis = node.attr["axis"].i % (self.tensors[tname(ins[0])].shape.rank + 1)
            with tf.name_scope(scope(node.name)):
                y = tf.expand_dims(self.tensors[tname(ins[0])], axis)
            self.set(node, [y], [seq(axis, **record)])
            return
        if node.op == "ConcatV2" and others - {"step"} <= STATIC_KINDS:
            # Time steps put back side by side (each of size 1 along the axis).
            keys = [int(m.key) if m.kind == "item" else T - 1 for m in metas[:-1]]
            x0 = self.tensors[tname(ins[0])]
            axis = int(self.const_value(node, len(ins) - 1)) % x0.shape.rank
            if keys == list(range(T)) and x0.shape[axis] == 1 and \
                    metas[-1].kind in STATIC_KINDS:
                with tf.name_scope(scope(node.name)):
                    y = tf.identity(x0)
                self.set(node, [y], [seq(axis, **record)])
                return
            if keys == list(range(T)) and metas[-1].kind in STATIC_KINDS and \
                    self.only_reshaped(node):
                self.emit_blocks_over_time(node, x0, axis, T, record)
                return
        if len(items) > 1 or others - STATIC_KINDS - {"step"} or \
                ("step" in others and int(k) != T - 1):
            self.fail(node, f"combines time step {k} of a sequence with other time steps or "
                      "with the whole sequence")
        if "static_t" in others:
            self.fail(node, "combines a time step with a value computed from the sequence length")
        outs = self.emit_generic(node)
        self.set(node, outs, [Meta("item", key=k, axis=T, **record)] * len(outs))

    def only_reshaped(self, node) -> bool:
        """Whether every consumer of ``node`` is a Reshape of its output."""
        users = [n for n in self.g.nodes.values()
                 if any(not i.startswith("^") and parse_tensor(i)[0] == node.name
                        for i in n.input)]
        return bool(users) and all(n.op == "Reshape" and parse_tensor(n.input[0]) ==
                                   (node.name, 0) for n in users)

    def emit_blocks_over_time(self, node, x0, axis: int, T: int, record: dict):
        """All T time steps side by side along an axis of their own (PTB's
        ``concat(outputs, 1)``: [B, size] pieces -> [B, T*size]), read only
        through reshapes.  In memory that is the stack of the pieces along a
        new time axis ([B, T, size]), so it streams as that stack: each step
        is its piece with a time axis of 1, and the reshapes see the stacked
        full shape (a reshape to one row per step then keeps time whole)."""
        import tensorflow as tf

        piece = [int(d) for d in x0.shape]
        with tf.name_scope(scope(node.name)):
            y = tf.expand_dims(x0, axis)
        self.probe.shapes[f"{node.name}:0"] = tuple(piece[:axis] + [T] + piece[axis:])
        self.set(node, [y], [seq(axis, **record)])

    def emit_list_op(self, node, ins, metas):
        import tensorflow as tf

        op = node.op
        if op in IDENTITY and len(ins) == 1:  # a list passed on unchanged
            self.set(node, [self.tensors.get(tname(ins[0]))], [metas[0]])
            return
        if op in ("TensorListStack", "TensorArrayGatherV3", "TensorArrayPack"):
            m = metas[0] if op == "TensorListStack" else metas[-1]
            if m.kind != "list_done":
                self.fail(node, f"stacks a list that is not a loop's output ({m})")
            y_t, mode = self.list_values[m.key]
            with tf.name_scope(scope(node.name)):
                y = tf.expand_dims(y_t, 0)
            done = self.list_frames.get(m.key, seq(0))
            if mode != "seq" and done.frames is not None and done.frames.lag < 0:
                self.fail(node, f"stacks the last output of a loop, but {done.frames.late_why()}")
            self.set(node, [y], [replace(done, axis=0) if mode == "seq" else
                                 step(done.valid_from)])
            return
        if op == "TensorArrayScatterV3":
            hm = metas[0]
            if hm.kind != "ta" or metas[1].kind not in STATIC_KINDS or metas[2].kind != "seq":
                self.fail(node, "an unsupported TensorArray scatter")
            if metas[2].axis != 0:
                self.fail(node, "scatters along an axis that is not the time axis" + self.axis_hint)
            if (metas[2].frames or self.plan.input_seq()).n != 1:
                self.fail(node, "feeds a loop several frames per step (time strides before "
                          "it); tfaot runs a loop body once per step")
            self.list_frames[hm.key] = metas[2]
            with tf.name_scope(scope(node.name)):
                self.ta_in[hm.key] = tf.squeeze(self.tensors[tname(ins[2])], [0])
            self.set(node, [None], [Meta("ta_flow", key=hm.key)])
            return
        if op in ("TensorArraySizeV3", "TensorListLength"):
            with tf.name_scope(scope(node.name)):
                y = tf.constant(1, tf.int32)
            self.set(node, [y], [STATIC])
            return
        if op in READ_OPS and metas[0].kind in ("list_in", "ta"):
            self.fail(node, "reads one frame of the input sequence outside a loop (tf.scan "
                      "without an initializer starts from frame 0 so), which a stream "
                      "cannot: give tf.scan an initializer (the state before frame 0)")
        self.fail(node, "an unsupported use of a TensorList/TensorArray outside a loop (inputs: "
                  + ", ".join(f"'{i}' {m}" for i, m in zip(ins, metas)) + ")")

    # -- unrolled recurrences (unrolled.py)
    def emit_unrolled(self, node):
        """The repeated cell of an unrolled RNN, imported once as this step's body."""
        import tensorflow as tf

        u = self.g.unrolled[node.name]
        sl = u.slicer
        m, x = self.metas.get(sl.source), self.tensors.get(sl.source)
        where = f"unrolled recurrence '{u.name}' (sliced by '{sl.node}')"
        if m is None or m.kind != "seq":
            raise Fail(f"{where}: the sliced tensor '{sl.source}' is not the input sequence "
                       f"({m}){self.axis_hint}")
        if m.axis != sl.axis:
            raise Fail(f"{where}: slices axis {sl.axis} of '{sl.source}', whose time axis is "
                       f"{m.axis}{self.axis_hint}")
        frames = m.frames or self.plan.input_seq()
        if frames.n != 1:
            raise Fail(f"{where}: takes {frames.n} frames per step (time strides before it); "
                       "tfaot runs the repeated cell once per step")
        valid = max(m.valid_from, frames.first_step)
        with tf.name_scope(scope(u.name)):
            item = tf.squeeze(x, [sl.axis]) if sl.squeeze else x
        input_map = {sl.items[-1]: item}
        for t in u.statics:  # weights, or a per-step input (a conditioning vector)
            mt = self.metas.get(t)
            if mt is None or self.tensors.get(t) is None or \
                    mt.kind not in STATIC_KINDS | {"step"}:
                raise Fail(f"{where}: the cell reads '{t}' ({mt}), which is neither a "
                           "constant nor a per-step input")
            if mt.kind == "static_t":
                raise Fail(f"{where}: the cell reads '{t}', which is computed from the "
                           "sequence length")
            input_map[t] = self.tensors[t]
        body_dtypes = {n.name: n.attr["dtype"].type for n in u.body if n.op == "Const"}
        for t in u.times:  # static_rnn's ``time`` (compared with a sequence_length)
            with tf.name_scope(scope(u.name + "/step_counter")):
                input_map[t] = tf.cast(self.time.frame_numbers(frames)[0],
                                       tf.as_dtype(body_dtypes[parse_tensor(t)[0]]))
        for j, st in enumerate(u.states):
            input_map[st["read"]] = self.state_inputs[(u.name, j)]
        fetch = list(dict.fromkeys([st["new"] for st in u.states] +
                                   [bt for bt, _ in u.outputs.values()]))
        defs = []
        for n in u.body:
            c = tf.compat.v1.NodeDef()
            c.CopyFrom(n)
            c.input[:] = [i for i in n.input if not i.startswith("^")]
            for a in ("_class", "_output_shapes"):
                if a in c.attr:
                    del c.attr[a]
            defs.append(c)
        try:
            res = self._import(defs, input_map, fetch, library=self.loaded.graph_def.library)
        except Exception as e:
            raise Fail(f"{where}: TensorFlow cannot rebuild its cell: {first_line(e)}") from None
        got = dict(zip(fetch, res))
        for j, st in enumerate(u.states):
            self.new_states[(u.name, j)] = self._from_stream(
                got[st["new"]], self.state_inputs[(u.name, j)], frames)
        record = replace(frames, dirty=frames.delay > 0)
        for t, (bt, k) in u.outputs.items():
            self.tensors[t] = got[bt]
            self.metas[t] = step(valid) if k == u.steps - 1 else \
                Meta("item", key=str(k), axis=u.steps, frames=record, valid_from=valid)

    # -- loops
    def _from_stream(self, new, old, frames):
        """A loop state's next value: unchanged by frames from before the stream
        (a conv front end's first outputs, made of its zero-filled buffers)."""
        import tensorflow as tf

        if not frames.dirty or frames.delay <= 0:
            return new
        started = self.time.frame_numbers(frames)[0] >= 0.0
        return tf.where(started, new, old)

    def _is_the_length(self, v) -> bool:
        """Whether loop variable ``v`` is the sequence length itself in each
        entry (dynamic_rnn's sequence_length filled with tf.shape(x)[1], as
        exported graphs have it): at the probe, every entry is its length."""
        value = self.probe.values.get(v.operand)
        return value is not None and np.size(value) > 0 and \
            np.issubdtype(np.asarray(value).dtype, np.integer) and \
            bool(np.all(np.asarray(value) == self.probe.T))

    def _loop_counter(self, loop, v, read_meta):
        """This iteration's value of a loop counter the body compares with a bound
        (``time >= sequence_length``): its start plus its increment times the
        number of the frame the loop reads, from the stream's step counter
        (which saturates: comparisons with bounds below it stay exact)."""
        import tensorflow as tf

        start = self.tensors.get(v.operand)
        start = None if start is None else tf.get_static_value(start)
        by = body_const(loop, v.detail["by"])
        if start is None or by is None:
            raise Fail(f"loop '{loop.name}': the loop counter (loop variable {v.index}) is "
                       f"compared by node '{v.detail['compared'][0]}' but does not start "
                       "from a constant and count by one")
        frames = (read_meta.frames if read_meta is not None else None) or self.plan.input_seq()
        frame = self.time.frame_numbers(frames)[0]
        with tf.name_scope(scope(loop.name + "/step_counter")):
            return tf.cast(frame * float(by) + float(start), tf.as_dtype(v.dtype))

    def _frames_of(self, loop, v, m, read_meta):
        """The meta of the sequence a loop reads as ``x[:, t]`` (loop variable
        ``v``, its operand's meta ``m``): that of the input, one frame a step,
        indexed along its time axis."""
        read = v.detail["reads"][0]
        if m.kind != "seq":
            raise Fail(f"loop '{loop.name}': node '{read}' reads loop variable {v.index} "
                       f"('{v.operand}') a frame at a time, but it is not a sequence of the "
                       f"input ({m})")
        if m.axis != v.detail["axis"]:
            raise Fail(f"loop '{loop.name}': node '{read}' indexes '{v.operand}' along axis "
                       f"{v.detail['axis']}, but its time axis is {m.axis}" + self.axis_hint)
        per_step = (m.frames or self.plan.input_seq()).n
        if per_step != 1:
            raise Fail(f"loop '{loop.name}': node '{read}' reads {per_step} frames per step "
                       "(time strides before it); tfaot runs a loop body once per step")
        return m if read_meta is None else read_meta

    def _check_counts_frames(self, loop, v):
        """A counter that indexes frames (x[:, t]) must be the frame's number,
        0, 1, 2, ...: the step reads the stream's frame where the loop read
        frame t."""
        import tensorflow as tf

        start = self.tensors.get(v.operand)
        if "by_var" in v.detail:
            by = self.tensors.get(loop.vars[v.detail["by_var"]].operand)
        else:
            by = body_const(loop, v.detail["by"])
        values = [None if x is None else tf.get_static_value(x) for x in (start, by)]
        if values[0] is None or values[1] is None or int(values[0]) != 0 or int(values[1]) != 1:
            raise Fail(f"loop '{loop.name}': loop variable {v.index} indexes the frames it "
                       f"reads but does not count 0, 1, 2, ... (it starts at "
                       f"{values[0] if values[0] is not None else 'a value known only at run time'}"
                       f", by {values[1] if values[1] is not None else 'a run-time step'}); "
                       "a stream reads every frame in order")

    def emit_loop(self, node):
        import tensorflow as tf

        loop = self.g.loops[node.name]
        input_map: dict[str, Any] = {}
        # arguments a stream has no value for (the body may not read them)
        unknown_args: dict[str, str] = {}
        replace_reads: dict[str, Any] = {}
        fetch: list[str] = []
        out_metas: dict[int, Meta] = {}
        read_meta = None  # the meta of the sequence the loop reads (its chunk record)
        for v in loop.vars:
            m = self.metas.get(v.operand)
            t = self.tensors.get(v.operand)
            if m is None:
                raise Fail(f"loop '{loop.name}': operand '{v.operand}' was not produced")
            if v.kind == "state":
                if m.kind not in STATIC_KINDS:
                    raise Fail(initial_state_refusal(loop.name, v.index, v.operand,
                                                     self._graph_input_of(v.operand), m))
                input_map[f"{v.arg}:0"] = self.state_inputs[(loop.name, v.index)]
                fetch.append(v.ret)
                out_metas[v.index] = STEP
            elif v.kind == "counter":
                if not v.detail.get("compared"):  # only indexes: any value will do
                    input_map[f"{v.arg}:0"] = tf.constant(0, tf.as_dtype(v.dtype))
                out_metas[v.index] = Meta("dead", why=f"uses the final loop counter of loop "
                                          f"'{loop.name}', which has no streaming equivalent")
            elif v.kind == "inlist":
                if m.kind == "list_in":
                    v_t = self.list_values[m.key][0]
                elif m.kind == "ta" and m.key in self.ta_in:
                    v_t = self.ta_in[m.key]
                else:
                    raise Fail(f"loop '{loop.name}': loop variable {v.index} is read as the "
                               f"input sequence but its operand '{v.operand}' is not a "
                               f"sequence of the input ({m}); where a front end (framing, "
                               "tf.signal.stft) makes it from the whole input, build from "
                               "the front end's output: --inputs NODE, its last node")
                for r in v.detail["reads"]:
                    replace_reads[r] = v_t
                read_meta = self.list_frames.get(m.key, read_meta)
                out_metas[v.index] = m
            elif v.kind == "outlist":
                if m.kind not in ("list_out", "ta_flow"):
                    raise Fail(f"loop '{loop.name}': loop variable {v.index} is written as the "
                               f"output sequence but its operand '{v.operand}' is {m}")
                fetch.append(v.detail["item"])
                key = f"{loop.name}:{v.index}"
                out_metas[v.index] = Meta("list_done", key=key, mode=v.detail["mode"])
            elif v.kind == "settled":  # (only the graph's asserts read it after the loop)
                unknown_args[v.arg] = ("AutoGraph sets once the loop has run (a variable "
                                       "first assigned in the loop's body: assign it before "
                                       "the loop)")
                out_metas[v.index] = Meta("dead", why=f"uses loop variable {v.index} of loop "
                                          f"'{loop.name}', a flag set by its first iteration")
            elif v.kind == "accumulator":
                out_metas[v.index] = Meta("dead", why=f"uses the intermediate values loop "
                                          f"'{loop.name}' keeps for gradients, which a "
                                          "stream does not keep")
            elif v.kind == "frames":  # x[:, t]: the stream's frame of x, at t = 0
                read_meta = self._frames_of(loop, v, m, read_meta)
                input_map[f"{v.arg}:0"] = t
                out_metas[v.index] = m
            else:  # passthrough
                if m.kind == "seq":  # (a condition's tf.shape(x)[1] is fine)
                    unknown_args[v.arg] = (f"is the whole input sequence '{v.operand}' (not "
                                           "one step at a time)")
                elif t is not None and m.kind != "static_t":
                    input_map[f"{v.arg}:0"] = t
                elif m.kind == "static_t" and self._is_the_length(v):
                    input_map[f"{v.arg}:0"] = _endless(v.dtype)
                elif m.kind == "static_t":
                    unknown_args[v.arg] = "is derived from the sequence length"
                out_metas[v.index] = m
        for v in loop.vars:
            if v.kind == "counter" and v.detail.get("compared"):
                input_map[f"{v.arg}:0"] = self._loop_counter(loop, v, read_meta)
            if v.kind == "counter" and any(u.kind == "frames" for u in loop.vars):
                self._check_counts_frames(loop, v)
        # Reads of the input sequence become placeholders.
        got = import_body(self, loop, input_map, replace_reads, fetch, unknown_args)
        frames = (read_meta.frames if read_meta is not None else None) or self.plan.input_seq()
        valid = max(read_meta.valid_from if read_meta is not None else 0, frames.first_step)
        for v in loop.vars:
            if v.kind == "state":
                got[v.ret] = self._from_stream(got[v.ret], self.state_inputs[(loop.name, v.index)],
                                               frames)
                self.new_states[(loop.name, v.index)] = got[v.ret]
                out_metas[v.index] = step(valid) if frames.lag >= 0 else Meta(
                    "dead", why=f"uses the final state of loop '{loop.name}', but "
                                f"{frames.late_why()}")
            elif v.kind == "outlist":
                key = f"{loop.name}:{v.index}"
                self.list_values[key] = (got[v.detail["item"]], v.detail["mode"])
                self.list_frames[key] = seq(0, replace(frames, dirty=frames.delay > 0), valid)
        for v in loop.vars:
            self.tensors[f"{node.name}:{v.index}"] = None if v.kind != "state" else \
                got[v.ret]
            self.metas[f"{node.name}:{v.index}"] = out_metas[v.index]
            if v.kind in ("passthrough", "frames") and \
                    out_metas[v.index].kind not in LIST_KINDS:
                self.tensors[f"{node.name}:{v.index}"] = self.tensors.get(v.operand)


def _endless(dtype: int):
    """A sequence length no stream reaches, of DataType ``dtype`` (int32 or
    int64): each step's time is below it, as in a sequence of that length."""
    import tensorflow as tf

    return tf.constant(2 ** 30, tf.as_dtype(dtype))
