"""Sequence rules: one small function per op type that takes a whole-sequence input.

The replay at T=1 (``replay.py``) calls ``seq_op.SEQ_RULES[op]`` for a node
with at least one ``seq`` input (and no ``step``, ``item`` or list input). A
rule either emits the op at T=1 and says where the time axis of each output
is, or refuses with a message naming the node (an op that mixes time steps:
those with a streaming form have their rule in ``time_rules.py``). An op
type without a rule is refused. Adding an op is adding one
``@rule("OpType")`` function here.
"""
from __future__ import annotations

import numpy as np

from ..streamify_keras.time_meta import Seq
from ..streamify_keras.time_rules import upsampled
from .graphdef import scope
from .meta import Meta, seq, step
from .seq_op import SeqOp, rule
from .time_rules import crop, emit_with, flatten_window, pad_before, reduce_over_time
from .time_rules import time_length as _time_length

# Ops that act on each element independently (with broadcasting).
ELEMENTWISE = set("""
Identity Snapshot StopGradient PreventGradient CheckNumerics EnsureShape
Add AddV2 Sub Mul RealDiv Div DivNoNan FloorDiv FloorMod Mod TruncateDiv Maximum Minimum Pow
SquaredDifference BiasAdd BiasAddV1 AddN Relu Relu6 Elu Selu LeakyRelu Gelu Sigmoid Tanh
Softplus Softsign Exp Expm1 Log Log1p Sqrt Rsqrt Square Neg Abs Sign Floor Ceil Round Rint Cast
Erf Erfc Reciprocal Inv Select SelectV2 ClipByValue Equal NotEqual Greater GreaterEqual Less
LessEqual LogicalAnd LogicalOr LogicalNot ZerosLike OnesLike Sin Cos IsNan IsFinite IsInf
HardSigmoid Swish Atan Atan2 Mish Tan Asin Acos Sinh Cosh Asinh Acosh Atanh
Xlogy Xdivy Xlog1py TruncateMod Lgamma Digamma
ComplexAbs Real Imag Angle Conj Complex
BitwiseAnd BitwiseOr BitwiseXor Invert LeftShift RightShift
FakeQuantWithMinMaxArgs FakeQuantWithMinMaxVars FakeQuantWithMinMaxVarsPerChannel
""".split())
REDUCTIONS = {"Sum", "Mean", "Max", "Min", "Prod", "All", "Any", "EuclideanNorm"}
ARG_REDUCTIONS = {"ArgMax", "ArgMin"}


@rule(*sorted(ELEMENTWISE))
def _elementwise(s: SeqOp):
    s.no_length()
    outs = s.emit()
    out_rank = outs[0].shape.rank
    if out_rank is None:
        s.fail("unknown output rank")
    axis = None
    for k, m in enumerate(s.metas):
        r = s.tensor(k).shape.rank
        if r is None:
            s.fail(f"input {k} has unknown rank")
        if m.kind == "seq":
            ax = m.axis + out_rank - r
            if axis is not None and ax != axis:
                s.fail("its inputs have their time axes at different positions after "
                       "broadcasting")
            axis = ax
    for k, m in enumerate(s.metas):
        if m.kind == "static" or m.kind == "step" and m.held:
            t = s.tensor(k)
            r = t.shape.rank
            pos = axis - (out_rank - r)
            if 0 <= pos < r and t.shape[pos] not in (None, 1):
                s.fail(f"input {k} ('{s.ins[k]}') is a constant with size {t.shape[pos]} "
                       "along the time axis (a per-time-step constant cannot be streamed)")
    s.set(outs, [seq(axis)] * len(outs))


@rule("IdentityN")
def _identity_n(s: SeqOp):
    """Each output is its input: what a tf.custom_gradient function leaves in
    a graph (tf_keras's swish, a user's own activation), around its value
    and its inputs. It was refused as an op of unknown time behaviour."""
    s.no_length()
    s.set(s.emit(), list(s.metas))


@rule("Bitcast")
def _bitcast(s: SeqOp):
    """Bits read as another type of the same width: one element to one
    element (Keras 3's argmax bitcasts its floats to integers, to order
    -0.0 and NaN); it was refused as an op of unknown time behaviour.
    Another width adds or drops a last axis."""
    import tensorflow as tf

    s.no_length()
    sizes = {tf.as_dtype(s.node.attr[k].type).size for k in ("T", "type")}
    if len(sizes) != 1:
        s.fail("reads the bits as a type of another width, which adds or drops an axis")
    s.set(s.emit(), list(s.metas))


@rule("Softmax", "LogSoftmax")
def _softmax(s: SeqOp):
    if s.a == s.rank - 1:
        s.fail("normalises over the time axis")
    s.set(s.emit(), [seq(s.a)])


#: image resizes (NHWC: over axes 1 and 2), the linear ones lower/resize.py takes
RESIZES = ("ResizeBilinear", "ResizeNearestNeighbor", "ResizeBicubic", "ResizeArea",
           "ScaleAndTranslate")


@rule(*RESIZES)
def _resize(s: SeqOp):
    """Each image on its own: per frame where time is the batch or the
    channel axis (frames resized as a batch of images, a spectrogram's
    channels)."""
    if s.a in (1, 2):
        s.fail("resizes the time axis (an image's height or width)" + s.em.axis_hint
               + "; a model of whole images takes one a step: give the image's size "
               "with --inputs NAME:1xHxWxC")
    s.others_static()
    s.set(s.emit(), [seq(s.a)])


#: the Fourier transforms, over their last 1, 2 or 3 axes
FFT_AXES = {"FFT": 1, "IFFT": 1, "RFFT": 1, "IRFFT": 1, "FFT2D": 2, "IFFT2D": 2, "RFFT2D": 2,
            "IRFFT2D": 2, "FFT3D": 3, "IFFT3D": 3, "RFFT3D": 3, "IRFFT3D": 3}


@rule(*sorted(FFT_AXES))
def _fft(s: SeqOp):
    """Each frame's spectrum (tf.signal.stft's RFFT): per frame where time is
    not among the axes transformed."""
    if s.a >= s.rank - FFT_AXES[s.op]:
        s.fail("transforms over the time axis")
    s.others_static()
    s.set(s.emit(), [seq(s.a)])


@rule("MatMul")
def _matmul(s: SeqOp):
    s.others_static()
    ta = s.node.attr["transpose_a"].b
    if s.k0 != 0 or (s.a == 1) != ta:
        s.fail("multiplies along the time axis")
    s.set(s.emit(), [seq(1 if ta else 0)])


@rule("BatchMatMul", "BatchMatMulV2", "BatchMatMulV3")
def _batch_matmul(s: SeqOp):
    if all(m.kind == "seq" for m in s.metas):
        return _per_frame_batch_matmul(s)
    s.others_static()
    a, rank = s.a, s.rank
    rows = rank - 1 if s.node.attr["adj_x"].b else rank - 2  # x's axis kept in the result
    if s.k0 != 0 or (a >= rank - 2 and a != rows):
        s.fail("multiplies along the time axis")
    outs = s.emit()
    out_rank = outs[0].shape.rank
    if a == rows:
        s.set(outs, [seq(out_rank - 2)])
        return
    b = s.tensor(1)
    pos = a + out_rank - rank - (out_rank - b.shape.rank)
    if 0 <= pos < b.shape.rank - 2 and b.shape[pos] not in (None, 1):
        s.fail("its second operand has a time-sized batch dimension")
    s.set(outs, [seq(a + out_rank - rank)])


def _per_frame_batch_matmul(s: SeqOp):
    """Two sequences multiplied frame by frame: time a batch axis of both
    (attention scores q @ k^T within each frame)."""
    ranks = [s.tensor(k).shape.rank for k in range(2)]
    out = s.emit()
    out_rank = out[0].shape.rank
    axes = {m.axis + out_rank - r for m, r in zip(s.metas, ranks)}
    if len(axes) != 1 or any(m.axis >= r - 2 for m, r in zip(s.metas, ranks)):
        s.fail("multiplies along the time axis")
    s.set(out, [seq(axes.pop())])


@rule("Einsum")
def _einsum(s: SeqOp):
    """Per frame when time keeps one label, in every time-dependent operand
    (at its time axis) and in the output, and in no constant operand: as
    'btd,df->btf', or 'btd,btd->bt' between two sequences frame by frame."""
    eq = s.node.attr["equation"].s.decode().replace(" ", "")
    lhs, _, out = eq.partition("->")
    terms = lhs.split(",")
    if "." in eq or not out or len(terms) != len(s.ins):
        s.fail(f"einsum '{eq}' on a time-dependent tensor is not supported")
    timed = [k for k, m in enumerate(s.metas) if m.kind == "seq"]
    labels = {terms[k][s.metas[k].axis] for k in timed}
    label = terms[s.k0][s.a]
    if len(labels) != 1 or label not in out or \
            any(label in t for k, t in enumerate(terms) if k not in timed):
        s.fail(f"einsum '{eq}' contracts or mixes the time axis ('{label}')")
    s.set(s.emit(), [seq(out.index(label))])


@rule("Transpose")
def _transpose(s: SeqOp):
    s.others_static()
    perm = [int(p) % s.rank for p in s.const(1)]
    s.set(s.emit(), [seq(perm.index(s.a))])


@rule("Slice")
def _slice(s: SeqOp):
    """tf.slice of the other axes: per frame, the whole time axis kept."""
    s.others_static()
    begin, size = ([int(v) for v in s.const(k)] for k in (1, 2))
    if begin[s.a] != 0 or size[s.a] != -1:
        s.fail(f"slices the time axis (begin {begin[s.a]}, size {size[s.a]}); only the "
               "whole sequence streams (a tf.slice of its other axes)")
    s.set(s.emit(), [seq(s.a)])


@rule("Tile")
def _tile(s: SeqOp):
    """Tiles of the other axes: per frame."""
    s.others_static()
    if int(s.const(1)[s.a]) != 1:
        s.fail("repeats the time axis")
    s.set(s.emit(), [seq(s.a)])


@rule("ReverseV2")
def _reverse(s: SeqOp):
    """Reversed other axes: per frame; reversed time would need the future."""
    s.others_static()
    if s.a in {int(d) % s.rank for d in np.atleast_1d(s.const(1))}:
        s.unsupported()  # (which says why a reversed time axis cannot stream)
    s.set(s.emit(), [seq(s.a)])


@rule("OneHot")
def _one_hot(s: SeqOp):
    """One-hot vectors of each frame's indices (token ids): per frame, the
    new axis at ``axis`` (-1: last)."""
    s.others_static()
    axis = s.node.attr["axis"].i
    s.set(s.emit(), [seq(s.a + 1 if 0 <= axis <= s.a else s.a)])


@rule("ExpandDims")
def _expand_dims(s: SeqOp):
    s.others_static()
    dim = int(s.const(1)) % (s.rank + 1)
    s.set(s.emit(), [seq(s.a + 1 if dim <= s.a else s.a)])


@rule("Squeeze")
def _squeeze(s: SeqOp):
    import tensorflow as tf

    dims = list(s.node.attr["squeeze_dims"].list.i)
    if not dims:
        full = s.em.full_shape(s.ins[0])
        if full is None:
            s.fail("squeezes all size-1 dims of a tensor whose full shape is unknown")
        dims = [d for d, n in enumerate(full) if n == 1]
    dims = [d % s.rank for d in dims]
    if s.a in dims and s.em.plan.mode == "window" and s.frames.length == 1:
        return reduce_over_time(s)  # a window pooled down to one frame
    if s.a in dims:
        s.fail("removes the time axis")
    with tf.name_scope(scope(s.node.name)):
        y = tf.squeeze(s.x, dims)
    s.set([y], [seq(s.a - sum(d < s.a for d in dims))])


@rule("Reshape")
def _reshape(s: SeqOp):
    """Fine when the time axis survives whole; the shape operand is recomputed."""
    import tensorflow as tf

    s.others_static(check_length=False)
    a = s.a
    full_in, full_out = s.em.full_shape(s.ins[0]), s.em.full_shape(f"{s.node.name}:0")
    if full_in is None or full_out is None:
        s.fail("cannot find its full-sequence shapes")
    T = full_in[a]
    if s.em.plan.mode == "window" and s.frames.length == 1 == T:
        # A window pooled down to one frame: size-1 axes are ambiguous, and
        # what follows is a function of the window (Keras' Flatten).
        return flatten_window(s, full_in, full_out)
    left = int(np.prod(full_in[:a], dtype=np.int64))
    right = int(np.prod(full_in[a + 1:], dtype=np.int64))
    b = None
    for j in range(len(full_out)):
        if int(np.prod(full_out[:j], dtype=np.int64)) == left and full_out[j] == T and \
                int(np.prod(full_out[j + 1:], dtype=np.int64)) == right:
            b = j
            break
    factor, frames = 1, s.frames
    if b is None and s.em.plan.mode == "prefix":
        b, factor = _merged_after_time(full_in, full_out, a)
        frames = upsampled(frames, factor)
    if b is None:
        return flatten_window(s, full_in, full_out)
    step_shape = list(full_out)
    step_shape[b] = frames.n
    with tf.name_scope(scope(s.node.name)):
        y = tf.reshape(s.x, step_shape)
    if factor > 1:
        s.em.row(s.node, "time upsampling", stride=factor)
    s.set([y], [seq(b, frames if factor > 1 else None)])


def _merged_after_time(full_in, full_out, a: int) -> tuple[int | None, int]:
    """(output axis, factor) where a Reshape merges the time axis ``a`` with
    the axes right after it into an axis of T * factor frames, features left
    after it (UpSampling1D's repeat: (1, T, 3, C) -> (1, 3T, C)); else
    (None, 1). Frame t's rows become frames t*factor...: an upsampling."""
    left = int(np.prod(full_in[:a], dtype=np.int64))
    for q in range(a + 2, len(full_in)):
        factor = int(np.prod(full_in[a + 1:q], dtype=np.int64))
        rest = int(np.prod(full_in[q:], dtype=np.int64))
        for j in range(len(full_out) - 1):
            if int(np.prod(full_out[:j], dtype=np.int64)) == left and \
                    full_out[j] == full_in[a] * factor and \
                    int(np.prod(full_out[j + 1:], dtype=np.int64)) == rest:
                return j, factor
    return None, 1


@rule("StridedSlice")
def _strided_slice(s: SeqOp):
    import tensorflow as tf

    s.others_static()
    a = s.a
    begin, end, strides = ([int(v) for v in s.const(k)] for k in (1, 2, 3))
    at = s.node.attr
    bm, em, sm = at["begin_mask"].i, at["end_mask"].i, at["shrink_axis_mask"].i
    if at["ellipsis_mask"].i or at["new_axis_mask"].i:
        s.set(s.emit(), [seq(_time_axis_through_slice(s, begin, end, strides))])
        return
    x = s.x
    if a >= len(begin):
        meta = seq(a - sum(1 for d in range(len(begin)) if sm >> d & 1))
    else:
        b, e, st = begin[a], end[a], strides[a]
        f = s.frames
        full = s.em.full_shape(s.ins[0])
        T = (full[a] if full else None) if f == Seq(1, 0, -1) else _time_length(s)
        kept_axis = a - sum(1 for d in range(a) if sm >> d & 1)
        if (b == -1 or (T is not None and b == T - 1)) and \
                (sm >> a & 1 or em >> a & 1 or (T is not None and e >= T)):
            # The last step: the reference's last frame of the chunk.
            if f.lag < 0:
                s.fail(f"takes the last time step, but {f.late_why()}")
            x, index = s.em.time.frame_at_lag((s.node.name, "last"), x, a, f, s.node.name)
            begin[a], end[a] = index, index + 1
            bm &= ~(1 << a)
            em &= ~(1 << a)
            meta = step(max(s.valid_from, f.first_step, s.em.plan.window_first_step))
        elif sm >> a & 1:
            if T is None or not 0 <= b < T or f != Seq(1, 0, -1):
                s.fail(f"takes time step {b} only; only the last step (-1) can be streamed")
            # Step b alone: fine only if all T steps are stacked back
            # (a fixed-T TimeDistributed unrolls like this).
            begin[a], end[a] = 0, 1
            meta = Meta("item", key=str(b), axis=T)
        elif st == 1 and (bm >> a & 1 or b == 0) and (em >> a & 1 or (T is not None and e >= T)):
            bm |= 1 << a
            em |= 1 << a
            meta = seq(kept_axis)
        elif st == 1 and (cut := _crop_range(b, e, bm >> a & 1, em >> a & 1, T)):
            bm |= 1 << a
            em |= 1 << a
            meta = seq(kept_axis, crop(s, *cut))
        else:
            s.fail(f"slices the time axis [{b}:{e}:{st}]; only the whole sequence, a "
                   "range of a known length or the last step can be streamed")
    with tf.name_scope(scope(s.node.name)):
        y = tf.strided_slice(x, begin, end, strides, begin_mask=bm, end_mask=em,
                             shrink_axis_mask=sm)
    s.set([y], [meta])


def _time_axis_through_slice(s: SeqOp, begin: list, end: list, strides: list) -> int:
    """The output's time axis of a slice with an ellipsis or new axes
    (``x[:, :, None]``, ``x[..., 0]``) that keeps the time axis whole (else
    a failure naming the node): the spec walked as TensorFlow walks it."""
    at = s.node.attr
    bm, em, sm = at["begin_mask"].i, at["end_mask"].i, at["shrink_axis_mask"].i
    ellipsis, new_axis = at["ellipsis_mask"].i, at["new_axis_mask"].i
    n = len(begin)
    real = sum(1 for i in range(n) if not (ellipsis >> i & 1 or new_axis >> i & 1))
    in_dim = out_dim = 0
    for i in range(n):
        if ellipsis >> i & 1:
            covered = max(0, s.rank - real)
            if in_dim <= s.a < in_dim + covered:
                return out_dim + s.a - in_dim
            in_dim, out_dim = in_dim + covered, out_dim + covered
        elif new_axis >> i & 1:
            out_dim += 1
        else:
            if in_dim == s.a:
                whole = (bm >> i & 1 or begin[i] == 0) and em >> i & 1 and strides[i] == 1
                if sm >> i & 1 or not whole:
                    s.fail("slices the time axis together with an ellipsis or a new axis; "
                           "only the whole time axis can be streamed so")
                return out_dim
            in_dim += 1
            out_dim += 0 if sm >> i & 1 else 1
    return out_dim + s.a - in_dim  # past the spec: kept whole


def _crop_range(b: int, e: int, whole_begin: int, whole_end: int,
                T: int | None) -> tuple[int, int] | None:
    """(frames cut before, frames cut after) of a time slice [b:e], or None
    when the stream cannot know them (an end counted from a start whose
    length is open)."""
    before = 0 if whole_begin else b if b >= 0 else (T + b if T is not None else None)
    after = 0 if whole_end else -e if e < 0 else (T - e if T is not None else None)
    if before is None or after is None or before < 0 or after < 0:
        return None
    return before, after


@rule(*sorted(REDUCTIONS | ARG_REDUCTIONS))
def _reduction(s: SeqOp):
    s.others_static()
    axes = np.atleast_1d(s.const(1)).astype(int) % s.rank
    if s.a in axes:
        return reduce_over_time(s)
    keep = s.node.attr["keep_dims"].b if s.op in REDUCTIONS else False
    s.set(s.emit(), [seq(s.a if keep else s.a - int(sum(ax < s.a for ax in axes)))])


@rule("ConcatV2")
def _concat(s: SeqOp):
    n = s.node.attr["N"].i
    axis = int(s.const(n)) % s.rank
    if axis == s.a:
        before = _zeros_before(s, n)
        if before is None:
            s.fail("concatenates along the time axis")
        return pad_before(s, before)
    held = {}
    for k in range(n):
        if s.metas[k].kind == "step" and s.metas[k].held or s.repeats_one_frame(k):
            held[k] = _frames_of_held(s, k)
        elif s.metas[k].kind != "seq" or s.metas[k].axis != s.a:
            s.fail(f"concatenates a time-dependent tensor with input {k} ('{s.ins[k]}'), "
                   "which is not one with the same time axis")
    s.set(emit_with(s, held) if held else s.emit(), [seq(s.a)])


def _zeros_before(s: SeqOp, n: int) -> int | None:
    """How many frames of zeros a concatenation along time puts before the
    sequence (``concat([zeros, x], time)``: a delay, as tf.pad writes it),
    else None."""
    if n != 2 or s.k0 != 1 or s.metas[0].kind != "static":
        return None
    try:
        zeros = np.asarray(s.const(0))
    except Exception:  # noqa: BLE001 - not a constant: not a padding
        return None
    if zeros.ndim != s.rank or np.any(zeros != 0):
        return None
    return int(zeros.shape[s.a])


def _frames_of_held(s: SeqOp, k: int):
    """Input ``k``, one value for every frame (a held conditioning vector
    or a constant tiled over the sequence's frames: one frame in the T=1
    graph), repeated over the step's frames."""
    import tensorflow as tf

    value, frames = s.tensor(k), s.tensor(s.k0).shape[s.a]
    if value.shape.rank != s.rank or value.shape[s.a] not in (1, frames):
        s.fail(f"concatenates input {k} ('{s.ins[k]}'), one value for every frame, "
               "which does not have one frame along the time axis")
    multiples = [1] * s.rank
    multiples[s.a] = frames // value.shape[s.a]
    with s.em_scope():
        return tf.tile(value, multiples) if multiples[s.a] > 1 else value


@rule("Unpack")
def _unpack(s: SeqOp):
    """Unstacking along time gives T items, each ``time step k alone``."""
    import tensorflow as tf

    s.others_static()
    axis = s.node.attr["axis"].i % s.rank
    full = s.em.full_shape(s.ins[0])
    if axis != s.a or full is None:
        s.fail("unstacks a time-dependent tensor along another axis")
    if s.frames != Seq(1, 0, -1):
        s.fail("unstacks a sequence that a time convolution or window reshaped")
    with tf.name_scope(scope(s.node.name)):
        step = tf.squeeze(s.x, [s.a])
    T = full[s.a]
    for k in range(T):
        s.em.tensors[f"{s.node.name}:{k}"] = step
        s.em.metas[f"{s.node.name}:{k}"] = Meta("item", key=str(k), axis=T)


@rule("Pack")
def _pack(s: SeqOp):
    axis = s.node.attr["axis"].i % (s.rank + 1)
    for k, m in enumerate(s.metas):
        if m.kind != "seq" or m.axis != s.a:
            s.fail(f"stacks a time-dependent tensor with input {k} ('{s.ins[k]}')")
    s.set(s.emit(), [seq(s.a + 1 if axis <= s.a else s.a)])


@rule("Split", "SplitV")
def _split(s: SeqOp):
    vpos, dpos = (1, 0) if s.op == "Split" else (0, 2)
    if s.metas[vpos].kind != "seq" or any(m.kind != "static" for k, m in enumerate(s.metas)
                                          if k != vpos):
        s.fail("splits with a time-dependent size or axis")
    if int(s.const(dpos)) % s.rank == s.a:
        s.fail("splits along the time axis")
    outs = s.emit()
    s.set(outs, [seq(s.a)] * len(outs))


@rule("GatherV2", "ResourceGather", "Gather")
def _gather(s: SeqOp):
    """An embedding lookup: the indices carry the time axis."""
    if s.k0 != 1 or s.metas[0].kind != "static" or \
            any(m.kind != "static" for m in s.metas[2:]):
        s.unsupported()
    axis = int(s.const(2)) if s.op == "GatherV2" else 0
    if axis != 0 or s.node.attr["batch_dims"].i:
        s.fail(f"a gather with time-dependent indices along axis {axis} is not supported")
    s.set(s.emit(), [seq(s.a)])


@rule("TensorListFromTensor")
def _list_from_tensor(s: SeqOp):
    """The input sequence of a loop: the loop reads it one step at a time."""
    import tensorflow as tf

    if s.a != 0:
        s.fail(f"makes a list along axis 0, but the time axis is {s.a}" + s.em.axis_hint)
    if s.frames.n != 1:
        s.fail(f"feeds a loop {s.frames.n} frames per step (time strides before it); "
               "tfaot runs a loop body once per step")
    with tf.name_scope(scope(s.node.name)):
        v_t = tf.squeeze(s.x, [0])
    s.em.list_values[s.node.name] = (v_t, "seq")
    s.em.list_frames[s.node.name] = s.metas[s.k0]
    s.set([None], [Meta("list_in", key=s.node.name)])
