"""``tf.signal.frame`` over a sequence of open length, written as the
strided convolution it is.

``tf.signal.stft`` (and ``tf.signal.frame`` itself) cuts a waveform into
frames of ``L`` samples every ``S`` samples. Over a sequence of open length
TensorFlow computes the number of frames from the length and gathers
them, which a stream cannot do (it never knows the length). The frames
are a convolution over time with ``L`` taps, stride ``S`` and the identity
as filter (frame ``t``, sample ``j`` = ``x[t*S + j]``), which streams as any
strided convolution does: a ring buffer of the last ``L - 1`` samples, a
step of ``S`` new samples giving one frame (docs/streaming.md);
lower/patch_copies.py then turns that convolution back into the copy it is.

A frame op is recognised by what it computes, not by its nodes: a name
scope that reads one tensor of open length (besides constants), gives one
tensor, and on two test waveforms gives exactly the frames of some ``L``
and ``S`` is replaced; anything else is left as it is, for the
streamifier's own error. With ``pad_end`` the frames go on past the last
whole one, into zeros padded after the sequence as its length asks for; a
stream never ends, so it gives the whole frames only, as for any padding
of the end (time_rules._end_pad): the frame op's Pad node is then one of
the stream's end pads (StreamInfo), and verify's reference takes the
whole frames too (``frames_as_convolutions`` of the original graph).
"""
from __future__ import annotations

import numpy as np

#: Test lengths: frames of up to 8192 samples, two lengths that no stride
#: divides alike.
_PROBE_LENGTHS = (8229, 8352)


def frames_as_convolutions(graph_def):
    """``graph_def`` with each frame op over an open time axis written as a
    convolution (module docstring), how many were, and the Pad nodes of
    those that pad the end (``pad_end``)."""
    import tensorflow as tf

    if not any(n.op == "GatherV2" for n in graph_def.node):
        return graph_def, 0, ()
    g = tf.Graph()
    try:
        with g.as_default():
            tf.graph_util.import_graph_def(without_control_inputs(graph_def), name="")
    except Exception:  # noqa: BLE001 - a broken graph: the streamifier names its fault
        return graph_def, 0, ()
    found = []
    for scope in sorted({n.name.rsplit("/", 1)[0] for n in graph_def.node
                         if n.op == "GatherV2" and "/" in n.name}):
        frame = _frame_op(g, scope)
        if frame is not None:
            found.append(frame)
    if not found:
        return graph_def, 0, ()
    return (replaced_scopes(graph_def, found, _as_convolution, "tfaot_frames"), len(found),
            tuple(f.pad for f in found if f.pad))


def without_control_inputs(graph_def):
    """A copy of ``graph_def`` to probe: an inlined function's control edges
    made a frame op fed its input ask for the graph's placeholders too."""
    import tensorflow as tf

    copy = tf.compat.v1.GraphDef()
    copy.CopyFrom(graph_def)
    for n in copy.node:
        n.input[:] = [i for i in n.input if not i.startswith("^")]
    return copy


class _Frame:
    """A recognised frame op: its scope, input, output, length and step, and
    its Pad node if it pads the end (else None)."""

    def __init__(self, scope: str, x, y, length: int, step: int, pad: str | None):
        self.scope, self.x, self.y, self.length, self.step = scope, x, y, length, step
        self.pad = pad


def scope_io(g, scope: str):
    """(x, y) where the ops of name scope ``scope`` in graph ``g`` read one
    tensor ``x`` from outside (besides constants and its shape) and give
    one tensor ``y`` to ops outside; else None."""
    inside = {op for op in g.get_operations() if op.name.startswith(scope + "/")}
    reads, gives = set(), set()
    for op in inside:
        for t in op.inputs:
            if t.op not in inside and t.op.type not in ("Const", "Shape", "Rank"):
                reads.add(t)
        for t in op.outputs:
            if any(c not in inside for c in t.consumers()):
                gives.add(t)
    if len(reads) != 1 or len(gives) != 1:
        return None
    return next(iter(reads)), next(iter(gives))


def _frame_op(g, scope: str) -> _Frame | None:
    """The frame op of name scope ``scope`` (module docstring), or None."""
    io = scope_io(g, scope)
    if io is None:
        return None
    x, y = io
    shape = x.shape
    if x.dtype != np.float32 or shape.rank is None or y.shape.rank != shape.rank + 1:
        return None
    if shape.rank in (2, 3) and shape[1] is None:
        return _probed(g, scope, x, y, batched=True)
    if shape.rank in (1, 2) and shape[0] is None:  # (time[, channels]): no batch axis
        return _probed(g, scope, x, y, batched=False)
    return None


def _probed(g, scope: str, x, y, batched: bool) -> _Frame | None:
    """``_Frame`` where the scope gives the frames of ``x`` on both test
    waveforms (a ramp: every sample a different exact value). ``batched``:
    ``x`` is (batch, time[, channels]), else (time[, channels])."""
    import tensorflow as tf

    found, padded = None, False
    channels = x.shape[x.shape.rank - 1] if x.shape.rank == 2 + batched else None
    if x.shape.rank == 2 + batched and channels is None:
        return None
    for n in _PROBE_LENGTHS:
        shape = (1, n) if channels is None else (1, n, channels)
        ramp = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
        try:
            with tf.compat.v1.Session(graph=g) as sess:
                frames = sess.run(y, {_origin(x): ramp if batched else ramp[0]})
        except Exception:  # noqa: BLE001 - not a frame op this pass knows
            return None
        frames = frames if batched else frames[None]
        if frames.ndim != ramp.ndim + 1 or frames.shape[1] < 2:
            return None
        length = frames.shape[2]
        step = int(frames[0, 1, 0].ravel()[0] - frames[0, 0, 0].ravel()[0]) // (channels or 1)
        if step < 1 or (found is not None and (length, step) != found):
            return None
        whole = _frames(ramp, length, step)
        if frames.shape[1] == whole.shape[1]:
            if not np.array_equal(frames, whole):
                return None
        elif _padded_frames(frames, ramp, length, step):
            padded = True
        else:
            return None
        found = (length, step)
    pad = [op.name for op in g.get_operations()
           if op.name.startswith(scope + "/") and op.type in ("Pad", "PadV2")]
    if padded and len(pad) != 1:
        return None
    return _Frame(scope, x, y, *found, pad[0] if padded else None)


def _padded_frames(frames: np.ndarray, x: np.ndarray, length: int, step: int) -> bool:
    """Whether ``frames`` are those of ``x`` (batch, time[, channels]) with
    its end padded with zeros (``pad_end``: a frame starts at every step of
    the sequence, the last ones short of samples)."""
    count = -(-x.shape[1] // step)
    if frames.shape[1] != count:
        return False
    pad = [(0, 0)] * x.ndim
    pad[1] = (0, max(0, (count - 1) * step + length - x.shape[1]))
    return np.array_equal(frames, _frames(np.pad(x, pad), length, step))


def _origin(x):
    """``x`` or the tensor it is an identity of: fed there, shapes the scope
    takes of the graph's input (outside it) see the test waveform too."""
    while x.op.type in ("Identity", "Snapshot") and x.op.inputs:
        x = x.op.inputs[0]
    return x


def _frames(x: np.ndarray, length: int, step: int) -> np.ndarray:
    """numpy's frames of ``x`` (batch, time[, channels]) along time."""
    count = (x.shape[1] - length) // step + 1
    index = np.arange(count)[:, None] * step + np.arange(length)[None, :]
    return x[:, index]


def convolution_frames(x, length: int, step: int):
    """The frames of ``x`` (batch, time[, channels]) as a convolution with the
    identity filter: (batch, frames, length[, channels])."""
    import tensorflow as tf

    eye = np.eye(length, dtype=np.float32)
    x4 = tf.expand_dims(x, 2) if x.shape.rank == 3 else x[:, :, None, None]
    channels = x4.shape[3]
    if channels == 1:
        y = tf.nn.conv2d(x4, eye[:, None, None, :], [1, step, 1, 1], "VALID")
        return tf.squeeze(y, 2)
    taps = np.tile(eye[:, None, None, :], (1, 1, channels, 1))  # [L, 1, C, L]
    # (TensorFlow's depthwise kernel wants equal strides; the width is 1)
    y = tf.nn.depthwise_conv2d(x4, taps, [1, step, step, 1], "VALID")
    y = tf.reshape(y, [-1, tf.shape(y)[1], channels, length])
    return tf.transpose(y, [0, 1, 3, 2])


def _as_convolution(holder, f: _Frame):
    """The frames of ``holder`` (the frame op's input) as a convolution."""
    import tensorflow as tf

    if f.x.shape[0] is None and (f.x.shape.rank == 1 or f.x.shape[1] is not None):
        # (time[, channels]): the frames of a batch of one
        batch = tf.expand_dims(holder, 0)
        return tf.squeeze(convolution_frames(batch, f.length, f.step), 0)
    return convolution_frames(holder, f.length, f.step)


def replaced_scopes(graph_def, found: list, build, tag: str):
    """``graph_def`` with the ops of each recognised scope in ``found`` (a
    record with its ``scope``, the tensor ``x`` it reads and ``y`` it gives)
    replaced by ``build(placeholder of x, record)``, in scope ``scope/tag``."""
    import tensorflow as tf

    from .block_cells import outer_input

    gone = {op.name for f in found for op in f.y.graph.get_operations()
            if op.name.startswith(f.scope + "/")}
    renamed, new_nodes = {}, []
    for f in found:
        sub = tf.Graph()
        with sub.as_default():
            holder = tf.compat.v1.placeholder(tf.float32, f.x.shape, name="in0")
            out = tf.identity(build(holder, f), name="out")
        prefix = f"{f.scope}/{tag}/"
        for n in sub.as_graph_def().node:
            if n.op == "Placeholder":
                continue
            c = tf.compat.v1.NodeDef()
            c.CopyFrom(n)
            c.name = prefix + n.name
            c.input[:] = [outer_input(i, prefix, [f.x.name]) for i in n.input]
            new_nodes.append(c)
        renamed[f.y.name] = prefix + out.op.name
        if f.y.value_index == 0:
            renamed[f.y.op.name] = prefix + out.op.name
    out_def = tf.compat.v1.GraphDef()
    out_def.CopyFrom(graph_def)
    del out_def.node[:]
    for n in [n for n in graph_def.node if n.name not in gone] + new_nodes:
        c = out_def.node.add()
        c.CopyFrom(n)
        c.input[:] = [renamed.get(i, i) for i in n.input
                      if not (i.startswith("^") and i[1:] in gone)]  # (orders on what went)
    return out_def
