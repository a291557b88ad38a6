"""A window that is only reduced over time, kept as a circular buffer.

A sliding window whose frames are only reduced along time (the mean, sum,
max or min of the last W frames: a global pooling over a keyword spotter's
window) does not need its frames in order. Its ring buffer then keeps each
frame where it was written: a step writes its newest frames over the
oldest rows, which a head index points to, and the reduction reads the
rows as they lie. The ordered ring buffer (``Replay.buffer``) instead
copies the whole window into a temporary (``concat``) and shifts its state
by the step's frames (a copy of the rest of it): for the streamed DS-CNN's
pooling window 25 rows of 64 floats a step, where this writes one row in
place (IREE's scatter updates the state's buffer itself, after the
reduction has read it). The head is the first element of one more row at
the end of the buffer (``write``).

A convolution's window stays an ordered ring buffer: its kernels read the
window's rows in order from one block of memory. Read as one slice per
row from a circular buffer, the rows became a dispatch each in IREE, and
the streamed DS-CNN's context on a Cortex-M4 grew from 18 to 74 KB. A
mirrored ring (each frame written twice, L rows apart, so that any L
consecutive slots lie in order: the window a dynamic slice whose start
became the kernel's input offset) cost more than the copies it saved: a
dilated TCN (six causal Conv1D(64, 3), dilations 1 to 32, one frame a
step) went from 4.8 to 5.3 us a step on x86-64 and from a 50.6 to a 70.3
KB context, the head's index arithmetic and the writes being IREE
dispatches of their own (13 dispatches a step became 44), the mirror
doubling the state.

The reduction combines the buffer's rows (the frames before this step's
chunk) with the chunk's frames that fall in the window. That holds where
the window ends at most ``n`` frames before the chunk's last (``lag <=
n``): then its oldest frames are exactly the buffer's. A window ending
further back would have to leave out the buffer's newest rows, and keeps
the ordered ring buffer.
"""
from __future__ import annotations

#: reductions of a window that do not depend on the order of its frames
ORDER_FREE = ("mean", "sum", "max", "min")


def applies(kind: str | None, lag: int, n: int, keep: int) -> bool:
    """Whether a window reduced by ``kind``, ending ``lag`` frames before the
    last of a chunk of ``n``, with a buffer of ``keep`` frames, can use a
    circular buffer (module docstring)."""
    return kind in ORDER_FREE and 0 <= lag <= n and keep > 0


def reduce_window(rows, fresh, kind: str, axis: int, length: int):
    """The ``kind`` reduction over ``axis`` (kept, of size 1) of a window of
    ``length`` frames: the buffer's ``rows`` and the chunk's frames ``fresh``
    (None when none of them is in the window yet)."""
    import tensorflow as tf

    parts = [rows] if fresh is None else [rows, fresh]
    if kind in ("mean", "sum"):
        total = tf.add_n([tf.reduce_sum(p, axis=axis, keepdims=True) for p in parts])
        return total / float(length) if kind == "mean" else total
    reduce, combine = ((tf.reduce_max, tf.maximum) if kind == "max"
                       else (tf.reduce_min, tf.minimum))
    out = reduce(parts[0], axis=axis, keepdims=True)
    for p in parts[1:]:
        out = combine(out, reduce(p, axis=axis, keepdims=True))
    return out


def rows(buffer, axis: int):
    """The frame rows of a circular ``buffer`` (all but its last along
    ``axis``, which holds the head: ``write``)."""
    index = [slice(None)] * len(buffer.shape)
    index[axis] = slice(0, int(buffer.shape[axis]) - 1)
    return buffer[tuple(index)]


def write(buffer, frames, axis: int):
    """The new value of a circular ``buffer``: the newest of ``frames``
    (this step's chunk, along ``axis``) written over its oldest rows, from
    the row its head names on. Every axis before ``axis`` has size 1.

    The buffer is ``keep`` frame rows and one more, whose first element is
    the head. Kept in a state of its own, the head's new value was packed
    by IREE with the other states' new values, written by a dispatch bound
    to that whole buffer before the step's last reads of the old state,
    where the step can no longer write its new state over the old one
    (emit/state_reuse.py). In the buffer, both writes are scatters that
    IREE runs on the state's own buffer once the step's reads of it are
    done."""
    import tensorflow as tf

    keep = int(buffer.shape[axis]) - 1
    count = min(int(frames.shape[axis]), keep)
    newest = tf.reshape(frames, [-1, *frames.shape[axis + 1:]])[-count:]
    head_at = [0] * len(buffer.shape)
    head_at[axis] = keep
    start = _oldest_row(buffer, axis)
    at = tf.math.floormod(start + tf.range(count), keep)
    # (zeros made from ``at``, not a constant: vectorised over streams,
    # pfor tiled a constant with an op TensorFlow's importer then refused)
    indices = tf.stack([tf.zeros_like(at)] * axis + [at], axis=1)
    buffer = tf.tensor_scatter_nd_update(buffer, indices, newest)
    next_head = tf.cast(tf.math.floormod(start + count, keep), buffer.dtype)
    return tf.tensor_scatter_nd_update(buffer, [head_at], next_head[None])


def _oldest_row(buffer, axis: int):
    """The row of a circular ``buffer`` its head names (the oldest frame's,
    where the next write goes), an int32 scalar."""
    import tensorflow as tf

    keep = int(buffer.shape[axis]) - 1
    head_at = [0] * len(buffer.shape)
    head_at[axis] = keep
    head = buffer[tuple(head_at)]
    # A head set from outside (set_state) may be any float, NaN too: the
    # row it names is clamped into the buffer before the conversion, whose
    # result would otherwise be undefined, and every access stays inside it.
    finite = tf.where(tf.math.is_finite(head), head, tf.zeros_like(head))
    return tf.cast(tf.clip_by_value(finite, 0.0, float(keep - 1)), tf.int32)


def taps(buffer, frames, positions: list[int], axis: int):
    """The frames at ``positions`` of the buffer's frames followed by the
    chunk ``frames`` (position p < keep: the buffer's p-th oldest frame,
    else the chunk's frame p - keep), in that order along ``axis``: what a
    dilated convolution's taps read (``use_taps``), gathered from the rows
    where they lie. Read before ``write`` overwrites the oldest rows."""
    import tensorflow as tf

    keep = int(buffer.shape[axis]) - 1
    old = sorted({p for p in positions if p < keep})
    parts = []
    if old:
        rows = tf.math.floormod(_oldest_row(buffer, axis) + tf.constant(old, tf.int32), keep)
        parts.append(tf.gather(buffer, rows, axis=axis))
    parts.append(frames)
    gathered = tf.concat(parts, axis=axis) if len(parts) > 1 else frames
    order = [old.index(p) if p < keep else len(old) + p - keep for p in positions]
    if order == list(range(int(gathered.shape[axis]))):
        return gathered
    return tf.gather(gathered, order, axis=axis)


def use_taps(dilation: int, keep: int, taps_read: int) -> bool:
    """Whether a convolution over time keeps its frames in a circular
    buffer and gathers the rows its taps read (``taps``), rather than in an
    ordered ring buffer that is copied whole into its window and shifted
    each step: where the dilation leaves most of the kept rows unread."""
    return dilation > 1 and keep >= TAPS_MIN_RATIO * taps_read


#: (see use_taps) kept rows per row read from which gathering wins
TAPS_MIN_RATIO = 4
