"""Sequence rules for graph ops that mix time steps (issue 10).

The graph twin of ``streamify_keras/time_rules.py``, with the same
semantics and the same arithmetic (``windowed_plan``, ``Seq``): a ``seq``
tensor holds a chunk of frames whose record (``Meta.frames``) says which.

* ``Conv2D`` / ``DepthwiseConv2dNative`` / ``Conv3D`` / ``MaxPool`` /
  ``AvgPool`` with time among the spatial axes: ``VALID`` padding streams
  exactly with a ring buffer of ``dilation*(k-1)`` frames; a stride in time
  makes a step consume more frames (``NeedFrames``); ``SAME`` in time is not
  incremental (``NotIncremental``: a fixed-window graph recomputes the
  window, elsewhere an error naming the node). TensorFlow writes a dilated
  1-D convolution as ``SpaceToBatchND`` -> conv -> ``BatchToSpaceND``: the
  pair becomes the conv's dilation.
* ``Pad`` in time: zeros before the first frame (prefix mode; a causal conv).
* ``StridedSlice`` of a time range (a crop) renumbers the frames (rules.py).
* Reductions and flattening ``Reshape`` over time: in window mode the op
  runs on the window (a ring buffer of its frames); ``Mean`` / ``Max`` /
  ``Min`` / ``Sum`` over the time axis in prefix mode keep a running value.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from ..streamify_keras import circular
from ..streamify_keras.time_rules import (pad_ends, same_in_time, same_pads_nothing,
                                          tap_positions, tf_same_pad, windowed_plan)
from ..errors import first_line
from .graphdef import NotIncremental, tname
from .meta import Meta, seq, step
from .ring import take_frames
from .seq_op import SeqOp, rule

CONV_OPS = {"Conv2D", "DepthwiseConv2dNative", "Conv3D"}
POOL_OPS = {"MaxPool", "AvgPool", "MaxPool3D", "AvgPool3D"}
RUNNING = {"Mean", "Sum", "Max", "Min"}  # reductions over time with a running value


def emit_with(s: SeqOp, inputs: dict[int, object], attrs: dict | None = None):
    """The node rebuilt with data inputs ``inputs`` (position -> tensor) in
    place of its own, and attributes ``attrs`` (name -> AttrValue fields) changed."""
    import tensorflow as tf

    node = tf.compat.v1.NodeDef()
    node.CopyFrom(s.node)
    del node.input[:]
    input_map = {}
    data = [i for i in s.node.input if not i.startswith("^")]
    for pos, name in enumerate(data):
        key = f"{s.node.name}/__tfaot_in{pos}:0"  # one name per position
        node.input.append(key)
        input_map[key] = inputs[pos] if pos in inputs else s.tensor(pos)
    for name in ("_class", "_output_shapes"):
        if name in node.attr:
            del node.attr[name]
    for name, value in (attrs or {}).items():
        node.attr[name].CopyFrom(tf.compat.v1.AttrValue(**value))
    try:
        op = s.em._import([node], input_map, [s.node.name],
                          library=s.em.loaded.graph_def.library)[0]
    except Exception as e:  # noqa: BLE001 - reported with the node's name
        s.fail(f"TensorFlow cannot rebuild it on a streamed chunk: {first_line(e)}")
    return list(op.outputs)


def refuse(s: SeqOp):
    """The ``refuse`` callback of ``windowed_plan``: NotIncremental naming the node."""
    return lambda why: NotIncremental(f"node '{s.node.name}' (op {s.op}) {why}")


def mode(s: SeqOp) -> str:
    return s.em.plan.mode


# --------------------------------------------------------------------------
# convolution and pooling


def spatial_axes(s: SeqOp) -> list[int]:
    fmt = s.node.attr["data_format"].s.decode() or "NHWC"
    return list(range(1, s.rank - 1)) if fmt.endswith("C") else list(range(2, s.rank))


def time_params(s: SeqOp, spatial: list[int]) -> tuple[int, int, int, str]:
    """(kernel, stride, dilation, padding) along the time axis."""
    a, at = s.a, s.node.attr
    if s.op in POOL_OPS:
        k = int(at["ksize"].list.i[a])
    else:
        k = int(s.tensor(1).shape[spatial.index(a)])  # the filter's (static) shape
    stride = int(at["strides"].list.i[a])
    dilations = list(at["dilations"].list.i) if "dilations" in at else []
    dil = int(dilations[a]) if dilations else 1
    padding = at["padding"].s.decode().lower()
    if padding == "explicit":
        pads = list(at["explicit_paddings"].list.i)[2 * a:2 * a + 2]
        padding = "valid" if not any(pads) else "same"
    return k, stride, dil, padding


@rule(*sorted(CONV_OPS | POOL_OPS))
def _windowed(s: SeqOp):
    """Convolution or pooling with the time axis among its spatial axes."""
    import tensorflow as tf

    if s.k0 != 0:
        s.unsupported()
    s.others_static()
    spatial = spatial_axes(s)
    s2b = s.metas[0].s2b
    if s.a == 0 and not s2b:  # time on the batch axis: each frame alone
        s.set(s.emit(), [seq(0)])
        return
    if s.a not in spatial:
        s.fail(f"works across the time axis {s.a} (its channel axis)")
    k, stride, dil, padding = time_params(s, spatial)
    if s.node.attr["padding"].s == b"SAME" and not s2b and \
            same_pads_nothing(k, stride, dil, s.frames):
        padding = "valid"
    if s2b:
        if s2b[0] != "in":
            s.fail("convolves a tensor that is already space-to-batch convolved")
        dil *= s2b[1]
        padding = "same" if s2b[2] else padding
    # SAME in time: the node's own, or a space-to-batch pair's pad of the
    # same frames before (TensorFlow's dilated form; it pads the other axes)
    same = s.op in CONV_OPS and (s2b[2] == same_in_time(k, dil)[0] if s2b else
                                 s.node.attr["padding"].s == b"SAME")
    plan = windowed_plan(k, stride, dil, padding, s.frames, mode(s), refuse(s),
                         pooling=s.op in POOL_OPS, same_runs_late=same)
    out_s2b = ("out", 1, 0, s2b[3]) if s2b else None
    attrs = _time_stride_one(s) if plan["unstrided"] else {}
    if s2b:  # the space-to-batch pair's dilations, on the conv itself
        attrs["dilations"] = _s2b_dilations(s, dil, s2b[3])
    if plan["per_step"]:
        outs = emit_with(s, {}, attrs) if attrs else s.emit()
        frames = plan["out"] if plan["unstrided"] else None
        s.set(outs, [replace(seq(s.a, frames), s2b=out_s2b)])
        return
    em = s.em
    x = em.time.clean(s.x, s.a, s.frames)[0] if plan["same"] else s.x  # (its pad before)
    frames, pads = _unpadded(x, s.a)
    positions = tap_positions(plan)
    taps = circular.use_taps(dil, plan["keep"], len(positions)) and _other_dilations_one(s, attrs)
    if taps:  # (streamify_keras/circular.py: the rows the taps read, gathered)
        window = em.time.ring((s.node.name, "frames"), frames, plan["keep"], s.a, s.node.name,
                              positions)
        attrs = {**attrs, **_gathered_taps(s, k, attrs)}
    else:
        cat = em.time.buffer((s.node.name, "frames"), frames, plan["keep"], s.a, s.node.name)
        window = take_frames(cat, s.a, plan["offset"], plan["offset"] + plan["frames"])
    if pads is not None:
        with s.em_scope():
            window = tf.pad(window, pads)
    if plan["same"] and not s2b:  # a valid conv on the other axes padded as SAME pads them
        with s.em_scope():
            window = tf.pad(window, _same_pads_off_time(s, spatial, window.shape))
        attrs = {**attrs, "padding": {"s": b"VALID"}}
    (y,) = emit_with(s, {0: window}, attrs)[:1]
    out = plan["out"]
    em.row(s.node, "time conv" if s.op in CONV_OPS else "time pool", buffer=plan["keep"],
           kernel=k, stride=stride, dilation=dil, delay=out.delay,
           **({"ring": "taps"} if taps else {}))
    s.set([y], [Meta("seq", axis=s.a, frames=out, s2b=out_s2b)])


def _same_pads_off_time(s: SeqOp, spatial: list[int], shape) -> list[list[int]]:
    """A SAME convolution's zero pads of its spatial axes other than time, none
    in time (streamify_keras.time_rules.same_in_time)."""
    at = s.node.attr
    strides = list(at["strides"].list.i)
    dilations = list(at["dilations"].list.i) if "dilations" in at else [1] * s.rank
    pads = [[0, 0] for _ in range(s.rank)]
    for axis in spatial:
        if axis != s.a:
            pads[axis] = tf_same_pad(int(shape[axis]), int(s.tensor(1).shape[spatial.index(axis)]),
                                     strides[axis], dilations[axis])
    return pads


def _dilations(s: SeqOp, attrs: dict) -> list[int]:
    """The conv's dilations per axis, as it will be emitted."""
    if "dilations" in attrs:
        return list(attrs["dilations"]["list"].i)
    at = s.node.attr
    return list(at["dilations"].list.i) if "dilations" in at else [1] * s.rank


def _other_dilations_one(s: SeqOp, attrs: dict) -> bool:
    """Whether the conv dilates no axis but time (TensorFlow takes no stride
    in time where another axis has a dilation: ``_gathered_taps``)."""
    return all(d == 1 for axis, d in enumerate(_dilations(s, attrs)) if axis != s.a)


def _gathered_taps(s: SeqOp, k: int, attrs: dict) -> dict:
    """The conv's attributes to run on its taps' frames (circular.taps):
    stride k and dilation 1 in time, each output reading its own k frames."""
    import tensorflow as tf

    strides = list(s.node.attr["strides"].list.i)
    dilations = _dilations(s, attrs)
    strides[s.a], dilations[s.a] = k, 1
    return {"strides": {"list": tf.compat.v1.AttrValue.ListValue(i=strides)},
            "dilations": {"list": tf.compat.v1.AttrValue.ListValue(i=dilations)}}


def _s2b_dilations(s: SeqOp, time_dilation: int, others: tuple) -> dict:
    """The ``dilations`` attribute of a conv inside a space-to-batch pair:
    its blocks along time (``time_dilation``) and the other axes
    (``others``: (axis, block) pairs)."""
    import tensorflow as tf

    dilations = [1] * s.rank
    dilations[s.a] = time_dilation
    for axis, block in others:
        if axis >= s.rank - 1:
            s.fail("convolves a space-to-batch tensor whose axes it has moved")
        dilations[axis] = block
    return {"list": tf.compat.v1.AttrValue.ListValue(i=dilations)}


def _unpadded(x, axis: int):
    """``(frames, pads)`` where ``x`` is a zero pad of ``frames`` that leaves
    the time axis alone, else ``(x, None)``. Such a pad commutes with the ring
    buffer: keeping the unpadded frames makes the state smaller, and the pad
    of the window is one a depthwise kernel skips (lower/microkernel.py)."""
    import tensorflow as tf

    op = getattr(x, "op", None)
    if op is None or op.type not in ("Pad", "PadV2"):
        return x, None
    pads = tf.get_static_value(op.inputs[1])
    value = 0.0 if op.type == "Pad" else tf.get_static_value(op.inputs[2])
    if pads is None or value is None or float(value) != 0.0:
        return x, None
    pads = np.asarray(pads).astype(np.int64).reshape(-1, 2)
    if pads[axis].any():
        return x, None
    return op.inputs[0], pads.tolist()


def _time_stride_one(s: SeqOp) -> dict:
    """The node's strides with 1 on the time axis: a stride that never
    applies (one output position over the window; ``windowed_plan``)."""
    import tensorflow as tf

    strides = list(s.node.attr["strides"].list.i)
    strides[s.a] = 1
    return {"strides": {"list": tf.compat.v1.AttrValue.ListValue(i=strides)}}


@rule("SpaceToBatchND")
def _space_to_batch(s: SeqOp):
    """The first half of TensorFlow's dilated convolution: its block sizes
    become the next conv's dilations. Along time only the padding's start is
    read (TensorFlow computes the end from the length); the other axes are
    padded here as the pair pads them (BatchToSpaceND crops them)."""
    import tensorflow as tf

    s.others_static(check_length=False)
    block = [int(b) for b in np.atleast_1d(s.const(1))]
    pads = s.em.probe.values.get(tname(s.ins[2]))  # on the whole sequence
    if pads is None:
        pads = s.const(2)
    pads = np.asarray(pads).astype(np.int64).reshape(-1, 2)
    j = s.a - 1
    if s.k0 != 0 or not 0 <= j < len(block) or s.metas[0].s2b:
        s.unsupported()
    others = tuple((i + 1, b) for i, b in enumerate(block) if i != j and b != 1)
    x = s.x
    other_pads = [[0, 0]] + [[0, 0] if i == j else [int(p) for p in pads[i]]
                             for i in range(len(block))]
    other_pads += [[0, 0]] * (s.rank - len(other_pads))
    if any(p for row in other_pads for p in row):
        with s.em_scope():
            x = tf.pad(x, other_pads)
    s.set([x], [replace(s.metas[0], s2b=("in", block[j], int(pads[j][0]), others))])


def probed_operands(g) -> list[str]:
    """Tensors the probe must evaluate for these rules: the paddings of
    SpaceToBatchND and the crops of BatchToSpaceND, which TensorFlow
    computes from the sequence length."""
    return [tname(n.input[2]) for name in g.order
            if (n := g.nodes[name]).op in ("SpaceToBatchND", "BatchToSpaceND")
            and len(n.input) > 2]


@rule("BatchToSpaceND")
def _batch_to_space(s: SeqOp):
    """The pair's second half: along time the crops only undo the padding's
    end; the other axes are cropped as the pair crops them."""
    s.others_static(check_length=False)
    m = s.metas[0]
    if s.k0 != 0 or not m.s2b or m.s2b[0] != "out":
        s.unsupported()
    y = s.x
    if m.s2b[3]:
        crops = s.em.probe.values.get(tname(s.ins[2]))
        if crops is None:
            crops = s.const(2)
        crops = np.asarray(crops).astype(np.int64).reshape(-1, 2)
        with s.em_scope():
            for axis, _ in m.s2b[3]:
                before, after = (int(c) for c in crops[axis - 1])
                if before or after:
                    y = take_frames(y, axis, before, y.shape[axis] - after)
    s.set([y], [replace(m, s2b=None)])


# --------------------------------------------------------------------------
# padding


@rule("Pad", "PadV2", "MirrorPad")
def _pad(s: SeqOp):
    import tensorflow as tf

    if s.k0 == 0 and s.metas[1].kind == "static_t" and s.op != "MirrorPad" \
            and _pads_end_of_time_only(s):
        return _end_pad(s)
    s.others_static()
    if s.k0 != 0:
        s.unsupported()
    pads = np.asarray(s.const(1)).astype(np.int64).reshape(-1, 2)
    before, after = (int(p) for p in pads[s.a])
    if not before and not after:
        s.set(s.emit(), [seq(s.a)])
        return
    if s.op == "MirrorPad" or (s.op == "PadV2" and float(s.const(2)) != 0.0):
        s.fail("pads the time axis with values other than zeros")
    if mode(s) == "window":
        raise refuse(s)(f"pads the time axis of each window ({pad_ends(before, after)}), so "
                        "a sliding window cannot reuse earlier outputs")
    if after:
        s.fail(f"pads {after} frame(s) after the last frame, which streaming cannot know")
    pads[s.a] = (0, 0)
    pad_before(s, before, lambda x: tf.pad(x, pads.tolist()))


def pad_before(s: SeqOp, before: int, other_axes=lambda x: x):
    """``before`` frames of zeros before the sequence: a delay of the frames
    (``other_axes`` pads the frames themselves)."""
    if mode(s) == "window":
        raise refuse(s)(f"pads the time axis of each window ({pad_ends(before, 0)}), so "
                        "a sliding window cannot reuse earlier outputs")
    x, frames = s.em.time.clean(s.x, s.a, s.frames)
    with s.em_scope():
        y = other_axes(x)
    frames = replace(frames, delay=frames.delay - before, end=frames.end + before)
    s.em.row(s.node, "time pad", pad=before)
    s.set([y], [seq(s.a, frames)])


def _pads_end_of_time_only(s: SeqOp) -> bool:
    """Whether the paddings ``s`` takes (computed from the sequence length)
    are ``[[0, n]]`` at the time axis and constant zeros elsewhere, written
    as the rows of a Pack (tf.pad(x, [[0, n]]) of a length-dependent n:
    YAMNet pads its waveform to a whole number of patches so), with zeros
    as the pad value."""
    if s.op == "PadV2" and s.metas[2].kind != "static":
        return False
    rows = s.source_node(s.ins[1])
    if rows is None or rows.op != "Pack" or len(rows.input) != s.rank:
        return False
    for axis, row in enumerate(rows.input):
        pair = s.source_node(row)
        if pair is not None and pair.op == "Pack" and len(pair.input) == 2:
            entries = [_constant_of(s, pair.input[0]), None if axis == s.a else
                       _constant_of(s, pair.input[1])]
        else:
            entries = list(np.ravel(_constant_of(s, row))) if axis != s.a else [None]
        wanted = [0, None] if axis == s.a else [0, 0]
        if [None if e is None else int(e) for e in entries] != wanted:
            return False
    return s.op == "Pad" or float(s.const(2)) == 0.0


def _constant_of(s: SeqOp, name: str):
    """The value of a Const node ``name`` (through identities), else None."""
    import tensorflow as tf

    node = s.source_node(name)
    if node is None or node.op != "Const":
        return None
    return tf.make_ndarray(node.attr["value"].tensor)


def _end_pad(s: SeqOp):
    """Zeros after a sequence's last frame, as many as its length asks for:
    they only complete the last window of a sequence that ends, which a
    stream never does, so the stream passes its frames through."""
    import tensorflow as tf

    s.em.row(s.node, "end pad", pad="after the last frame (dropped)")
    with s.em_scope():
        y = tf.identity(s.x)
    s.set([y], [seq(s.a)])


# --------------------------------------------------------------------------
# crops (a StridedSlice of a time range; rules.py finds the range)


def crop(s: SeqOp, before: int, after: int):
    """The record of ``x[before : len - after]`` along time."""
    f = s.frames
    length = None if f.length is None else f.length - before - after
    if length is not None and length <= 0:
        s.fail(f"crops the whole window ({before} + {after} of {f.length} frames)")
    s.em.row(s.node, "time crop", crop=[before, after])
    return replace(f, delay=f.delay + before, end=f.end - before - after, length=length,
                   dirty=f.dirty or before > 0)


def time_length(s: SeqOp) -> int | None:
    """The sequence's length where a stream knows it: the window's, or the
    graph's fixed length in prefix mode."""
    if s.frames.length is not None:
        return s.frames.length
    full = s.em.full_shape(s.ins[s.k0])
    return None if s.em.plan.dynamic or full is None else int(full[s.a])


# --------------------------------------------------------------------------
# reductions and flattening over time


def reduce_over_time(s: SeqOp):
    """A reduction whose axes include the time axis."""
    if mode(s) == "window" and s.frames.length is not None:
        frames = _reduced_frames(s)
        reduced = _reduce_in_place(s, s.x if frames is None else frames)
        window = _window(s, "window", frames) if reduced is None else reduced
        (y,) = emit_with(s, {0: window})[:1]
        s.set([y], [step(_window_valid(s))])
        return
    if mode(s) == "prefix" and s.op in RUNNING:
        return _running(s)
    s.fail("reduces over the time axis, which needs the whole sequence (give the graph a "
           "fixed window: input (1, W, ...) without recurrence)")


def flatten_window(s: SeqOp, full_in, full_out):
    """A Reshape that merges the time axis with the features: over the window."""
    import tensorflow as tf

    if mode(s) != "window" or s.frames.length is None or \
            full_in[s.a] != s.frames.length:
        s.fail(f"reshapes {list(full_in)} (time axis {s.a}) to {list(full_out)}, which "
               "merges the time axis with other dimensions; where the result is a "
               "sequence again (frames of samples made one waveform for a front end), "
               f"build from it: --inputs {s.node.name}")
    window = _window(s, "flatten")
    with s.em_scope():
        y = tf.reshape(window, list(full_out))
    s.set([y], [step(_window_valid(s))])


def _window(s: SeqOp, role: str, frames=None):
    """The window of ``frames`` (default: the node's input) along time."""
    f = s.frames
    window, kept = s.em.time.window_of((s.node.name, "window"), s.x if frames is None else frames,
                                       s.a, f, s.node.name)
    s.em.row(s.node, role, buffer=kept, window=f.length)
    return window


def _reduce_in_place(s: SeqOp, frames):
    """For Mean / Sum / Max / Min over a window: the window's reduction
    along time (kept, of size 1) from a circular buffer of ``frames``
    (streamify_keras/circular.py), on which the node then reduces the rest
    as it would the window; None where the window keeps an ordered ring
    buffer (a window ending more than a chunk back, frames other than
    float32, or axes before time that are not of size 1)."""
    f = s.frames
    keep = f.length + f.lag - f.n
    kind = s.op.lower() if s.op in RUNNING else None
    if (not circular.applies(kind, f.lag, f.n, keep) or frames.dtype != np.float32
            or any(d != 1 for d in frames.shape[:s.a])):
        return None
    rows = s.em.time.ring((s.node.name, "window"), frames, keep, s.a, s.node.name)
    fresh = take_frames(frames, s.a, 0, f.n - f.lag) if f.n > f.lag else None
    with s.em_scope():
        reduced = circular.reduce_window(rows, fresh, kind, s.a, f.length)
    s.em.row(s.node, "window in place", buffer=keep, window=f.length)
    return reduced


def _reduced_frames(s: SeqOp):
    """For Mean / Sum / Max / Min over time and other axes: each frame
    reduced over the other axes first (kept, of size 1), so that the window
    keeps one vector a frame instead of the whole frame (keras's twin:
    ``_pooled_frames``); the node then reduces a window of those, over axes
    of size 1 but time. None for other reductions, or time alone."""
    import tensorflow as tf

    if s.op not in RUNNING:
        return None
    others = [int(ax) for ax in np.atleast_1d(s.const(1)).astype(int) % s.rank if ax != s.a]
    if not others:
        return None
    reduce = {"Mean": tf.reduce_mean, "Sum": tf.reduce_sum, "Max": tf.reduce_max,
              "Min": tf.reduce_min}[s.op]
    with s.em_scope():
        return reduce(s.x, axis=others, keepdims=True)


def _window_valid(s: SeqOp) -> int:
    return max(s.valid_from, s.em.plan.window_first_step, s.frames.first_step)


def _running(s: SeqOp):
    """Mean / Sum / Max / Min over the prefix: a running value of the time
    reduction (shape of one frame) and, for Mean, a frame count; the node
    then reduces its other axes on that."""
    import tensorflow as tf

    f, time, a = s.frames, s.em.time, s.a
    if f.lag:
        s.fail("reduces over a time axis cropped at the end, which a running value "
               "cannot follow")
    x = s.x
    started = time.started(f, a, len(x.shape)) if f.delay > 0 else None
    is_max = s.op in ("Max", "Min")
    floor = np.finfo(np.float32).max * (-1.0 if s.op == "Max" else 1.0)
    with s.em_scope():
        if started is not None:
            x = x * started if not is_max else tf.where(started > 0, x, floor)
        reduce = {"Max": tf.reduce_max, "Min": tf.reduce_min}.get(s.op, tf.reduce_sum)
        part = reduce(x, axis=a, keepdims=True)
        shape = [int(d) for d in part.shape]
        key = (s.node.name, "running")
        initial = np.full(shape, floor if is_max else 0.0, np.float32)
        old = time.take(key, initial, s.node.name, "run")
        new = (tf.maximum if s.op == "Max" else tf.minimum)(old, part) if is_max else old + part
        time.new_states[key] = new
        value = new
        if s.op == "Mean":
            count_key = (s.node.name, "count")
            count = time.take(count_key, np.zeros((1,), np.float32), s.node.name, "count")
            frames = float(f.n) if started is None else tf.reduce_sum(started)
            time.new_states[count_key] = count + frames
            value = new / tf.maximum(count + frames, 1.0)
    s.em.row(s.node, "running " + s.op.lower(), state=shape)
    (y,) = emit_with(s, {0: value})[:1]
    s.set([y], [step(max(s.valid_from, f.first_step))])


@rule("Cumsum")
def _cumsum(s: SeqOp):
    """A cumulative sum: along another axis per frame; along time, in prefix
    mode, a running sum (one frame's shape) that each step's frames add to."""
    import tensorflow as tf

    s.others_static()
    axis = int(s.const(1)) % s.rank
    if s.k0 != 0:
        s.unsupported()
    if axis != s.a:
        s.set(s.emit(), [seq(s.a)])
        return
    at = s.node.attr
    if at["reverse"].b:
        s.fail("sums from the last frame backwards (reverse=True), which needs the frames "
               "to come")
    f, time, a = s.frames, s.em.time, s.a
    if mode(s) != "prefix" or f.lag:
        s.fail("sums over the time axis of a window, which tfaot streams only from the "
               "start of the stream (an open time axis)")
    x = s.x
    with s.em_scope():
        if f.delay > 0:  # frames from before the stream add nothing
            x = x * time.started(f, a, len(x.shape))
        key = (s.node.name, "running")
        frame = [int(d) for d in x.shape]
        frame[a] = 1
        old = time.take(key, np.zeros(frame, np.float32), s.node.name, "run")
        y = old + tf.cumsum(x, axis=a, exclusive=at["exclusive"].b)
        time.new_states[key] = old + tf.reduce_sum(x, axis=a, keepdims=True)
    s.em.row(s.node, "running sum", state=frame)
    s.set([y], [seq(a)])


# --------------------------------------------------------------------------
# per-channel ops TensorFlow writes for convolution stacks


@rule("FusedBatchNorm", "FusedBatchNormV2", "FusedBatchNormV3")
def _fused_batch_norm(s: SeqOp):
    from .meta import STATIC

    channels = 1 if s.node.attr["data_format"].s.decode().startswith("NC") else s.rank - 1
    if s.k0 == 0 and s.a == channels and s.node.attr["is_training"].b:
        return _layer_norm_as_batch_norm(s)
    s.others_static()
    if s.k0 != 0 or s.a == channels or s.node.attr["is_training"].b:
        s.unsupported()
    outs = s.emit()
    s.set(outs, [seq(s.a)] + [STATIC] * (len(outs) - 1))


def _layer_norm_as_batch_norm(s: SeqOp):
    """tf_keras's LayerNormalization as its graphs hold it: the frames
    reshaped to the channels of a FusedBatchNorm in training mode, which
    normalizes each channel (each frame) over its own features, with a scale
    of ones and an offset of zeros as long as the sequence (the layer's gamma
    and beta follow as a multiply and an add). Per frame, so it streams; the
    ones and zeros (a Fill, or a Const where the length was fixed) are
    remade for the step's frames (they were refused as computed from the
    sequence length)."""
    import tensorflow as tf

    fills = {k: _uniform_value(s, k) for k in (1, 2)}  # scale, offset
    for k, value in fills.items():
        if value is None:
            s.fail(f"normalizes each frame (the time axis is its channel axis) with input {k} "
                   f"('{s.ins[k]}') not one value for every frame, which tfaot cannot stream")
    for k in range(3, len(s.metas)):  # (training mode: empty mean and variance)
        if s.metas[k].kind not in ("static", "static_t"):
            s.fail(f"input {k} ('{s.ins[k]}') is time-dependent")
    with s.em_scope():
        frames = tf.shape(s.tensor(0))[s.a:s.a + 1]
        outs = emit_with(s, {k: tf.fill(frames, tf.constant(v, s.tensor(k).dtype))
                             for k, v in fills.items()})
    # (the batch statistics, one per frame, are not a layer norm's outputs)
    unused = Meta("dead", why="a per-frame statistic of a layer normalization")
    s.set(outs, [seq(s.a)] + [unused] * (len(outs) - 1))


def _uniform_value(s: SeqOp, k: int):
    """The one value of every element of input ``k``, a Fill of a constant
    or a constant whose elements are all equal; else None."""
    import tensorflow as tf

    from .graphdef import parse_tensor

    src = s.em.g.nodes.get(parse_tensor(s.ins[k])[0])
    if src is not None and src.op == "Fill":
        src = s.em.g.nodes.get(parse_tensor(src.input[1])[0])
    if src is None or src.op != "Const":
        return None
    value = tf.make_ndarray(src.attr["value"].tensor).ravel()
    return value[0] if value.size and (value == value[0]).all() else None
