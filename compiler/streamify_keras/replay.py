"""The replay: a Keras graph run on one step's chunk of frames.

Every value carries a *time meta*:

* ``seq``: a chunk of a sequence, shape ``(1, n, ...)`` (the time axis is
  kept, so layer axes keep their meaning), with a ``Seq`` record saying
  which frames of that sequence the chunk holds (see ``time_meta.Seq``);
* ``vec``: a value with no time axis: the last output of a recurrent layer,
  the result of Flatten / global pooling over a fixed window, or anything
  in a model without a time axis.

Recurrent layers become one call of their cell per frame of the chunk,
with the state as argument and result; per-time-step layers run as they
are on the chunk; layers that mix time steps follow their rule in
``time_rules.RULES`` (ring buffers). Every state (recurrent state, ring
buffer, step counter) is taken with ``take_state`` and its new value is
appended to ``new_values`` right away, so discovery and tracing see the
states in the same order.
"""
from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import numpy as np

from ..errors import TfaotError, first_line
from ..program import StateInfo
from .layer_kinds import (NOT_STREAMABLE, PER_STEP_LAYERS, alpha_per_time_position,
                          inert_at_inference, is_elementwise_op, is_feature_axis_op,
                          mask_unused, needs_whole_sequence, not_streamable_reason)
from .probe import LAST_FRAME, MIXED, PER_STEP, PROBE_FRAMES, ProbeFailed, time_locality
from .reshape_target import layer_time_length, per_step_target
from .rnn_states import cell_states, is_rnn, makes_mask, state_name, state_shapes
from .time_meta import (SEQ, STEP_CAP, VEC, NeedFrames, NotIncremental, Seq,  # noqa: F401
                        Streamed, layer_error, per_step_seq)

class Replay:
    """Replays a Keras graph on one step.

    ``mode``: "prefix" (recurrent / open-time models), "window" (a fixed
    window W streamed as a sliding window) or "stateless". ``frames`` input
    frames per step; in window mode the output is the model on the window
    that ends ``delay`` frames before the step's last frame.

    With ``states=None`` it runs once, traced on the step inputs' specs
    (``streamify_keras._discover``), and records the state slots it meets
    (discovery); otherwise it takes state values from ``states`` in the same
    order and collects the new values in ``new_values``.
    """

    def __init__(self, mode: str, states: list | None, *, rules: dict, frames: int = 1,
                 window: int | None = None, delay: int = 0):
        self.mode = mode
        # layer kind -> the rule of a layer that mixes time steps
        # (time_rules.RULES; given by the caller, as those rules build on
        # this module)
        self.rules = rules
        self.frames = frames
        self.window = window
        self.delay = delay
        self.discovering = states is None
        self.incoming = states
        self.new_states: list[StateInfo] = []  # found while discovering
        self.new_values: list = []
        self.layer_rows: list[dict[str, Any]] = []
        self.broadcasts = False  # a per-step input's value broadcast over the frames
        self._counter = None

    @property
    def window_first_step(self) -> int:
        """The first step whose window lies inside the stream."""
        return max(0, math.ceil((self.window + self.delay) / self.frames) - 1)

    # -- entry points ------------------------------------------------------

    def run_model(self, model, x_t, all_outputs: bool = False, streamed=None):
        """The model's first output (a Streamed), or with ``all_outputs`` the
        list of every output in ``model.outputs`` order.

        ``x_t``: the step input, or a list of them (model input order) with
        ``streamed`` saying which carry the time axis (the others have none:
        their value is the same whole tensor every step)."""
        if isinstance(x_t, (list, tuple)):
            flags = streamed or [True] * len(x_t)
            x = [self._input(v, f) for v, f in zip(x_t, flags)]
            x = x[0] if len(x) == 1 else x
        else:
            x = self._input(x_t, True if streamed is None else streamed[0])
        y = self._run(model, x)
        if isinstance(y, dict):  # named outputs: in model.outputs' order
            import keras

            y = keras.tree.flatten(y)
        if all_outputs:
            return list(y) if isinstance(y, (list, tuple)) else [y]
        if isinstance(y, (list, tuple)):
            y = y[0]
        return y

    def _input(self, x_t, streamed: bool) -> Streamed:
        import tensorflow as tf

        if self.mode == "stateless" or not streamed:
            return Streamed(x_t, VEC, constant=True)
        value = tf.expand_dims(x_t, 1) if self.frames == 1 else x_t
        return Streamed(value, SEQ, Seq(self.frames, 0, -1 - self.delay,
                                        self.window if self.mode == "window" else None))

    def output(self, y: Streamed, index: int = 0):
        """The step output of the model's final value: its reference's last
        frame, or its last n, shape ``(1, n, ...)``, for an output with n > 1
        frames a step (upsampled in time, or a branch without another's
        strides); ``index``: which model output (names its delay buffer).

        An output whose reference runs past the chunk (``lag < 0``: a
        transposed convolution's last frames, sums of frames to come) returns
        the chunk's frames, its newest final ones: ``-lag`` frames late
        (StreamInfo.output_latency)."""
        if y.meta == VEC:
            return y.value
        n, lag = y.seq.n, y.seq.final().lag
        cat = self.buffer("output/frames" if index == 0 else f"output{index}/frames",
                          y.value, lag)
        end = int(cat.shape[1]) - lag
        return cat[:, end - 1] if n == 1 else cat[:, end - n:end]

    def _run(self, model, inputs):
        import keras

        functional = getattr(model, "_functional", None)
        if isinstance(model, keras.Sequential) and functional is not None and \
                any(makes_mask(layer) for layer in model.layers):
            model = functional  # its graph carries the mask into the recurrent layers
        if isinstance(model, keras.Sequential):
            x = inputs
            for layer in model.layers:
                x = self.call_layer(layer, x)
            return x
        return model._run_through_graph(  # private Keras 3 API: walks any DAG
            inputs, call_fn=lambda op, *a, **k: self.call_layer(op, *a, **k))

    # -- states ------------------------------------------------------------

    def take_state(self, name: str, shape: tuple[int, ...], layer: str = "",
                   fill: float = 0.0):
        import tensorflow as tf

        if self.discovering:
            # A read-only view of one value: a big state (a long window's ring
            # buffer) costs no memory until a later stage needs its bytes,
            # after the build has checked the context size.
            initial = np.broadcast_to(np.float32(fill), tuple(shape))
            self.new_states.append(StateInfo(self._unique(name), "float32", tuple(shape),
                                             initial=initial, layer=layer))
            return tf.fill(tuple(shape), np.float32(fill))
        return self.incoming.pop(0)

    def _unique(self, name: str) -> str:
        """``name``, or for a layer called at several places (a shared GRU)
        ``name@k`` at its k-th call: each call has a state of its own."""
        taken = {s.name for s in self.new_states}
        k = 1
        unique = name
        while unique in taken:
            k += 1
            unique = f"{name}@{k}"
        return unique

    def buffer(self, name: str, value, keep: int, layer: str = ""):
        """A ring buffer of the last ``keep`` frames before ``value``'s chunk:
        returns ``concat(buffer, value)`` along time; the buffer's new value
        is the last ``keep`` frames of that."""
        import tensorflow as tf

        if keep <= 0:
            return value
        old = self.take_state(name, (1, keep, *value.shape[2:]), layer)
        cat = tf.concat([old, value], axis=1)
        self.new_values.append(cat[:, -keep:])
        return cat

    def ring(self, name: str, frames, keep: int, layer: str = "",
             positions: list[int] | None = None):
        """A circular buffer of the last ``keep`` frames before ``frames``'s
        chunk (module circular): returns its rows, in no order, or with
        ``positions`` the frames there of the buffer followed by the chunk
        (circular.taps); its new value has the chunk's newest frames over
        the oldest rows, and its last row says where the next write goes."""
        from . import circular

        buffer = self.take_state(name, (1, keep + 1, *frames.shape[2:]), layer)
        # (read before the write: IREE then writes the state's own buffer
        # in place, where a read after it cost a copy of the whole buffer)
        out = (circular.rows(buffer, axis=1) if positions is None
               else circular.taps(buffer, frames, positions, axis=1))
        self.new_values.append(circular.write(buffer, frames, axis=1))
        return out

    def step_index(self):
        """m, the number of the current step (saturating), a float scalar."""
        import tensorflow as tf

        if self._counter is None:
            count = self.take_state("stream/step", (1,))
            self.new_values.append(tf.minimum(count + 1.0, STEP_CAP))
            self._counter = count[0]
        return self._counter

    def frame_numbers(self, seq: Seq):
        """The numbers of the chunk's frames (float vector of length n)."""
        import tensorflow as tf

        m = self.step_index()
        return m * float(seq.n) - float(seq.delay) + tf.range(seq.n, dtype=tf.float32)

    def clean(self, x: Streamed) -> Streamed:
        """``x`` with frames from before the stream set to zero."""
        import tensorflow as tf

        if not x.seq.dirty or x.seq.delay <= 0:
            return x if not x.seq.dirty else Streamed(x.value, SEQ, replace(x.seq, dirty=False),
                                                      x.valid_from)
        keep = tf.cast(self.frame_numbers(x.seq) >= 0.0, x.value.dtype)
        keep = tf.reshape(keep, (1, x.seq.n) + (1,) * (len(x.value.shape) - 2))
        return Streamed(x.value * keep, SEQ, replace(x.seq, dirty=False), x.valid_from)

    # -- one node ----------------------------------------------------------

    def call_layer(self, op, *args, **kwargs):
        import keras

        kind = type(op).__name__
        if kwargs.get("mask") is not None and mask_unused(op):
            kwargs = {k: v for k, v in kwargs.items() if k != "mask"}
        if kwargs.get("mask") is not None and not is_rnn(op) and self.mode != "stateless":
            # (a fixed-window model falls back to recomputing its window,
            # where the layer takes the mask as Keras gives it)
            raise NotIncremental(op, "receives a mask; tfaot streams masks only into "
                                     "LSTM, GRU, SimpleRNN and RNN layers")
        if kind == "InputLayer":
            return args[0]
        if inert_at_inference(op):
            self.row(op, "inert at inference")
            return args[0]
        if isinstance(op, keras.Model):
            self.row(op, "model")
            return self._run(op, args[0] if len(args) == 1 else list(args))
        streamed = [a for a in _leaves((args, kwargs)) if isinstance(a, Streamed)]
        if self.mode == "stateless":  # one whole inference: every layer as it is
            self.row(op, "whole")
            return self.apply(op, args, kwargs, VEC)
        on_sequence = any(s.meta == SEQ for s in streamed)
        if is_rnn(op):
            return self._recurrent(op, args[0], kwargs)
        if kind in NOT_STREAMABLE and needs_whole_sequence(kind, args, kwargs, on_sequence):
            # (a fixed-window model falls back to recomputing its window)
            raise NotIncremental(op, not_streamable_reason(kind, kwargs, op))
        if not on_sequence:
            self.row(op, "per-step")
            return self.apply(op, args, kwargs, VEC, valid_from=_valid_from(streamed),
                              constant=all(s.constant for s in streamed))
        rule = self.rules.get(kind)
        if rule is not None:
            if getattr(op, "data_format", "channels_last") != "channels_last":
                raise layer_error(op, "uses data_format='channels_first'; tfaot streams "
                                      "channels_last layers (time on axis 1); a fixed-length model "
                                      "builds with --whole-window (one whole inference "
                                      "per step)")
            return rule.step(self, op, args[0])
        return self._per_step(op, kind, args, kwargs)

    def _per_step(self, op, kind, args, kwargs):
        if kind == "TimeDistributed":
            self.row(op, "per-step")
            x = args[0]
            return self.per_frame(op.layer, x)
        if kind == "Reshape":
            return self._reshape(op, args[0])
        if kind == "Permute":
            if tuple(op.dims)[0] != 1:  # (a fixed window falls back to recomputing it)
                raise NotIncremental(op, f"moves the time axis (dims={tuple(op.dims)})")
            self.row(op, "per-step")
            return self.apply(op, args, kwargs, SEQ, seq=args[0].seq,
                              valid_from=args[0].valid_from)
        known = kind in PER_STEP_LAYERS or is_elementwise_op(op) or is_feature_axis_op(op, args)
        if known:
            self._check_axes(op, PER_STEP_LAYERS.get(kind), args)
            if kind == "PReLU" and alpha_per_time_position(op):
                # (a fixed window falls back to recomputing it)
                raise NotIncremental(op, "has its own alpha at each time position (its "
                                         "shared_axes leave out axis 1, the time axis)")
            self._check_all_sequences(op, args)
        # (else a Lambda or a user's layer: the probe finds how it treats time)
        try:
            locality = PER_STEP if known else time_locality(op, args, kwargs, Streamed)
        except ProbeFailed as e:  # (a fixed window falls back to recomputing it)
            raise NotIncremental(op, f"fails when run on {PROBE_FRAMES} random frames of the "
                                     f"sequence ({e}), so how it treats time is unknown and it "
                                     "cannot run on a streamed sequence") from None
        if locality == PER_STEP:
            args, kwargs, seq = self._align(op, args, kwargs)
            self.row(op, "per-step")
            streamed = [a for a in _leaves((args, kwargs)) if isinstance(a, Streamed)]
            self._side_inputs(op, streamed)
            return self.apply(op, args, kwargs, SEQ, seq=seq, valid_from=_valid_from(streamed))
        if locality == LAST_FRAME:
            return self._on_last_frame(op, args, kwargs)
        # (a fixed window falls back to recomputing it, where any layer runs)
        raise NotIncremental(
            op, ("mixes time steps (run on random frames, its output frames depend on "
                 "other frames)" if locality == MIXED else "is not a per-time-step layer")
            + ", so it cannot run on a streamed sequence (tfaot streams recurrent "
              "layers, layers that treat each time step alone, and convolution/pooling "
              "over time)")

    def _on_last_frame(self, op, args, kwargs) -> Streamed:
        """A layer whose output is its input's last frame's (``t[:, -1]``):
        it runs on the reference's last frame, the step's output has no
        time axis (as a recurrent layer's last output)."""
        import tensorflow as tf
        from keras import tree

        x = next(a for a in _leaves((args, kwargs)) if isinstance(a, Streamed))
        lag = x.seq.lag
        if lag < 0:  # (the frame it takes is not computed yet: keras-tcn's 'same' TCN)
            raise NotIncremental(op, f"takes its input's last frame, but {x.seq.late_why()}")
        cat = self.buffer(f"{op.name}/frames", x.value, lag + 1 - x.seq.n, op.name)
        at = int(cat.shape[1]) - 1 - lag
        frame = cat[:, at:at + 1]
        self.row(op, "last frame")
        args, kwargs = tree.map_structure(
            lambda v: frame if isinstance(v, Streamed) else v, (args, kwargs))
        with tf.name_scope(op.name):
            return Streamed(op(*args, **kwargs), VEC, valid_from=x.valid_from)

    def per_frame(self, layer, x: Streamed) -> Streamed:
        """``layer`` applied to each frame of the chunk alone (TimeDistributed)."""
        import tensorflow as tf

        v = x.value
        n = int(v.shape[1])
        y = layer(tf.reshape(v, (n, *v.shape[2:])))
        return Streamed(tf.reshape(y, (1, n, *y.shape[1:])), SEQ,
                        per_step_seq(x.seq), x.valid_from)

    def apply(self, op, args, kwargs, meta, seq: Seq | None = None, valid_from: int = 0,
              constant: bool = False):
        import tensorflow as tf

        args, kwargs = _unwrap((args, kwargs))
        with tf.name_scope(op.name):
            try:
                out = op(*args, **kwargs)
            except (TfaotError, NeedFrames, NotIncremental):
                raise
            except Exception as e:  # the model's own code (a Lambda, a custom layer) failed
                raise layer_error(op, f"fails when run on a step: {first_line(e)}") from None
        if meta == SEQ:
            seq = per_step_seq(seq)
        if isinstance(out, (list, tuple)):
            return [Streamed(o, meta, seq, valid_from, constant) for o in out]
        return Streamed(out, meta, seq, valid_from, constant)

    def _align(self, op, args, kwargs):
        """Line up the frames of several sequences combined by one layer:
        the less delayed ones go through a delay line."""
        seqs = [s for s in _leaves((args, kwargs)) if isinstance(s, Streamed) and s.meta == SEQ]
        first = seqs[0].seq
        for s in seqs[1:]:
            if (s.seq.n, s.seq.end, s.seq.length) != (first.n, first.end, first.length):
                raise NotIncremental(op, "combines sequences whose frames do not line up "
                                         "(different strides, crops or lengths in time)")
        target = max(s.seq.delay for s in seqs)
        count = [0]

        def delayed(v):
            if not isinstance(v, Streamed) or v.meta != SEQ or v.seq.delay == target:
                return v
            gap = target - v.seq.delay
            count[0] += 1
            cat = self.buffer(f"{op.name}/delay{count[0]}", v.value, gap, op.name)
            return Streamed(cat[:, :v.seq.n], SEQ, replace(v.seq, delay=target), v.valid_from)

        from keras import tree

        args, kwargs = tree.map_structure(delayed, (args, kwargs))
        dirty = any(s.seq.dirty for s in seqs)
        return args, kwargs, replace(first, delay=target, dirty=dirty)

    def _check_axes(self, op, attr: str | None, args) -> None:
        if attr is None:
            return
        rank = len(_leaves(args)[0].value.shape)
        axes = getattr(op, attr)
        axes = axes if isinstance(axes, (list, tuple)) else [axes]
        for axis in axes:
            if axis is not None and axis % rank == 0:
                raise layer_error(op, f"works along axis {axis}, the batch axis")
            if axis is not None and axis % rank == 1:
                # (a fixed window falls back to one whole inference per step)
                raise NotIncremental(op, f"works along axis {axis}, the time axis")

    def _side_inputs(self, op, streamed) -> None:
        """A layer the probe found frame by frame that also reads values
        without a time axis (a user's layer tiling a conditioning vector over
        the frames, an attention's memory): made of inputs alone, they are
        held (one value a stream, as the model has); pooled from the
        sequence, each frame would need the whole sequence's."""
        side = [s for s in streamed if s.meta == VEC]
        if not all(s.constant for s in side):
            raise NotIncremental(op, "combines a sequence with a value pooled from it")
        self.broadcasts |= bool(side)

    def _check_all_sequences(self, op, args) -> None:
        leaves = [s for s in _leaves(args) if isinstance(s, Streamed)]
        rank = max(len(s.value.shape) for s in leaves if s.meta == SEQ) if any(
            s.meta == SEQ for s in leaves) else 0
        # a conditioning vector with a time axis of 1 (Reshape((1, C))) is
        # the same at every frame in the model too: it broadcasts over the
        # step's frames as it did over the sequence
        broadcast = [s for s in leaves if s.meta == VEC and s.constant
                     and len(s.value.shape) == rank and int(s.value.shape[1]) == 1]
        metas = {s.meta for s in leaves if not any(s is b for b in broadcast)}
        self.broadcasts |= bool(broadcast) and SEQ in metas
        if len(metas) > 1:
            # e.g. a squeeze-and-excitation block: the sequence times its
            # own pooled mean (a fixed window falls back, as above)
            raise NotIncremental(op, "combines a sequence with a value that is not per time "
                                     "step (it has no time axis, or one pooled over the "
                                     "sequence); tfaot cannot tell how they align")

    def _reshape(self, op, x: Streamed) -> Streamed:
        """Reshape the features of each step; the time axis must stay first.

        The target's first entry is the time length (-1, or the model's
        fixed T); the rest must hold exactly one step's features. A reshape
        that flattens a fixed window into features is Flatten's rule.
        """
        import tensorflow as tf

        target = tuple(op.target_shape)
        per_step = tuple(int(d) for d in x.value.shape[2:])
        length = x.seq.length or layer_time_length(op)
        rest = per_step_target(target, length, per_step)
        if -1 in rest or int(np.prod(rest)) != int(np.prod(per_step)):
            if length is not None and -1 not in target and \
                    int(np.prod(target)) == length * int(np.prod(per_step)):
                if x.seq.length is not None:
                    return self.rules["Flatten"].step(self, op, x)
                # a recurrent model's fixed window: it falls back to recomputing it
                raise NotIncremental(op, f"(target shape {target}) flattens the whole "
                                         "sequence into features")
            raise layer_error(op, f"target shape {target} mixes the time axis "
                                  f"with the features {per_step}")
        self.row(op, "per-step")
        with tf.name_scope(op.name):
            return Streamed(tf.reshape(x.value, (1, x.seq.n, *rest)), SEQ, x.seq, x.valid_from)

    # -- recurrent layers --------------------------------------------------

    def _recurrent(self, layer, x: Streamed, kwargs):
        import tensorflow as tf
        from keras import tree

        self._check_recurrent(layer, x, kwargs)
        cell = layer.cell
        shapes = state_shapes(layer)
        self.row(layer, "recurrent", state=[list(s) for s in shapes])
        seq = x.seq
        # (before taking the layer's states: every state's new value follows it)
        mask = self.frame_numbers(seq) >= 0.0 if seq.dirty and seq.delay > 0 else None
        initial = _initial_states(layer, kwargs)
        first = self.frame_numbers(seq) <= 0.0 if initial else None
        # (an initial state from the model's other inputs: they are held, one
        # value a stream; a constant one holds nothing)
        self.broadcasts |= any(not isinstance(h, np.ndarray) for h in initial)
        user_mask = self._frame_mask(layer, kwargs.get("mask"), seq)
        states = [self.take_state(f"{layer.name}/{state_name(layer, i)}", shape, layer.name)
                  for i, shape in enumerate(shapes)]
        outputs, previous = [], None
        zero_output = getattr(layer, "zero_output_for_mask", False)
        with tf.name_scope(layer.name):
            for i in range(seq.n):
                if initial:  # the stream's first frame starts from the given state
                    states = [tf.where(first[i], tf.broadcast_to(h, tf.shape(s)), s)
                              for h, s in zip(initial, states)]
                y, new_states = _cell_call(cell, x.value[:, i], cell_states(layer, states))
                new_states = tree.flatten(new_states)
                # frames from before the stream, and masked frames (Keras's
                # backend rnn), leave the states alone
                keep = [k for k in (None if mask is None else mask[i],
                                    None if user_mask is None else user_mask[0, i])
                        if k is not None]
                if keep:
                    keep = keep[0] if len(keep) == 1 else tf.logical_and(*keep)
                    new_states = [tf.where(keep, new, old)
                                  for new, old in zip(new_states, states)]
                if user_mask is not None:  # a masked frame repeats the last output
                    if previous is None:
                        previous = tf.zeros_like(y) if zero_output else self.take_state(
                            f"{layer.name}/output", tuple(y.shape), layer.name)
                    y = tf.where(user_mask[0, i], y, previous if not zero_output else
                                 tf.zeros_like(y))
                    previous = y
                states = new_states
                outputs.append(y)
        self.new_values.extend(states)
        if user_mask is not None and not zero_output:
            self.new_values.append(previous)
        if layer.return_sequences:
            out = Streamed(tf.stack(outputs, axis=1), SEQ,
                           replace(seq, dirty=seq.delay > 0), x.valid_from)
        else:
            if seq.lag != 0:
                raise NotIncremental(layer, f"returns its last output, but {seq.late_why()}") \
                    if seq.lag < 0 else \
                    layer_error(layer, f"returns its last output, but its input's last frame is "
                                       f"{seq.lag} frame(s) behind the stream (a crop at the end "
                                       "of the time axis)")
            out = Streamed(outputs[-1], VEC, valid_from=max(x.valid_from, seq.first_step))
        if getattr(layer, "return_state", False):
            return [out] + [Streamed(s, VEC, valid_from=out.valid_from) for s in states]
        return out

    def _frame_mask(self, layer, mask, seq: Seq):
        """The (1, n) boolean mask (Masking) of the chunk's frames, or None."""
        if mask is None:
            return None
        if not isinstance(mask, Streamed) or mask.meta != SEQ or \
                (mask.seq.n, mask.seq.delay) != (seq.n, seq.delay):
            raise layer_error(layer, "receives a mask that is not one flag per frame "
                                     "of its input")
        return mask.value

    def _check_recurrent(self, layer, x: Streamed, kwargs) -> None:
        if layer.go_backwards:
            raise NotIncremental(layer, "has go_backwards=True: step t would depend "
                                        "on future samples")
        # Neither this nor an initial state computed from the sequence streams
        # frame by frame; over a fixed window the model still runs as one
        # whole inference per step (NotIncremental falls back).
        _initial_states(layer, kwargs)
        if x.meta != SEQ:
            raise NotIncremental(layer, "reads a tensor that has no time axis of the "
                                        "model input (e.g. after a last-output layer)")
        state_shapes(layer)  # raises on state sizes without shapes

    # -- report ------------------------------------------------------------

    def row(self, op, role: str, **extra) -> None:
        if not self.discovering:
            return
        row = {"name": op.name, "type": type(op).__name__, "role": role}
        if role == "recurrent":
            row["units"] = int(op.cell.units) if hasattr(op.cell, "units") else (
                int(op.cell.filters) if hasattr(op.cell, "filters") else None)
            row["return_sequences"] = bool(op.return_sequences)
        row.update(extra)
        self.layer_rows.append(row)


def _valid_from(streamed) -> int:
    return max([s.valid_from for s in streamed], default=0)


def _initial_states(layer, kwargs) -> list:
    """The values of a recurrent layer's ``initial_state`` argument (empty
    without one): each computed from the model's inputs that are not the
    sequence (a conditioning vector), which the stream's first frame starts
    from. One computed from the sequence (an encoder's last output) is
    known only once the sequence has ended."""
    initial = kwargs.get("initial_state")
    if initial is None:
        return []
    leaves = _leaves(initial)
    if not any(isinstance(v, Streamed) for v in leaves):
        # Values, not tensors of the model's graph: a subclassed call's
        # get_initial_state(batch) traced at batch 1 (zeros, the state every
        # stream starts from anyway) or a constant state of the model's own.
        return [] if all(not np.any(np.asarray(v)) for v in leaves) else \
            [np.asarray(v) for v in leaves]
    if not all(isinstance(v, Streamed) and v.meta == VEC and v.constant for v in leaves):
        raise NotIncremental(layer, "gets its initial state from a tensor computed from the "
                                    "sequence, known only once the sequence has ended; "
                                    "tfaot streams an initial state computed from the "
                                    "model's other inputs")
    return [v.value for v in leaves]


def _leaves(structure) -> list:
    from keras import tree

    return tree.flatten(structure)


def _unwrap(structure):
    from keras import tree

    return tree.map_structure(
        lambda v: v.value if isinstance(v, Streamed) else v, structure)


def _cell_call(cell, x, states):
    """One frame of a recurrent layer's cell, not training: a user's own
    cell (keras.layers.RNN(MyCell)) may not take ``training``."""
    import inspect

    params = inspect.signature(cell.call).parameters.values()
    if any(p.name == "training" or p.kind is p.VAR_KEYWORD for p in params):
        return cell.call(x, states, training=False)
    return cell.call(x, states)
