"""Streaming rules for Keras layers that mix time steps: one rule per layer kind.

In the style of kws_streaming's ``Stream`` wrapper, each rule knows two
things: the state it needs (``state_specs``: ring buffers, in frames) and
how to run the layer on one step's chunk with that state (``step``). Time
is axis 1 (channels_last). A chunk at step m holds frames
``[m*n - delay, m*n - delay + n)`` of its sequence (``time_meta.Seq``).

* Convolution and pooling over time (``WindowedRule``): ``valid`` padding
  streams exactly with a ring buffer of ``dilation*(k-1)`` frames before the
  chunk (``dilation*(k-1)+1`` frames with the current one); ``causal``
  (prefix mode) is the same after a left pad of zeros, which the zero-
  initialised buffer provides. A stride s in time needs the chunk to be a
  multiple of s frames: the step then consumes more frames (see
  ``NeedFrames``). ``same`` padding in time is not incremental.
* Flatten / global pooling / a flattening Reshape over a fixed window
  (``WindowReduceRule``, window mode only): a ring buffer of the window's
  frames; the layer runs on the window.
* ZeroPadding / Cropping in time (``PadRule`` / ``CropRule``): renumber the
  frames; left zero padding needs zeros before the stream (prefix mode).
"""
from __future__ import annotations

from dataclasses import replace

from . import circular
from .replay import Replay
from .time_meta import SEQ, VEC, NeedFrames, NotIncremental, Seq, Streamed, layer_error


def _pair(v):
    return tuple(v) if isinstance(v, (list, tuple)) else (v, v)


class WindowedRule:
    """Conv / depthwise / separable convolution and pooling with time among
    the spatial axes."""

    kind = "conv"

    def params(self, op) -> tuple[int, int, int, str]:
        """(kernel, stride, dilation, padding) along time."""
        if hasattr(op, "pool_size"):
            k = tuple(op.pool_size)[0]
            strides = op.strides if op.strides is not None else op.pool_size
            return int(k), int(tuple(strides)[0]), 1, op.padding
        return (int(tuple(op.kernel_size)[0]), int(tuple(op.strides)[0]),
                int(tuple(op.dilation_rate)[0]), op.padding)

    def plan(self, op, seq: Seq, mode: str) -> dict:
        """The buffer this layer needs for an input chunk ``seq`` and the
        output's ``Seq``; raises NeedFrames / NotIncremental."""
        k, s, dil, padding = self.params(op)
        if padding == "same" and same_pads_nothing(k, s, dil, seq):
            padding = "valid"
        return windowed_plan(k, s, dil, padding, seq, mode,
                             lambda why: NotIncremental(op, why),
                             pooling=hasattr(op, "pool_size"), same_runs_late=True)

    def state_specs(self, op, seq: Seq, mode: str) -> list[tuple[str, int]]:
        plan = self.plan(op, seq, mode)
        return [] if plan["per_step"] or not plan["keep"] else [("frames", plan["keep"])]

    def step(self, replay: Replay, op, x: Streamed) -> Streamed:
        import tensorflow as tf

        plan = self.plan(op, x.seq, replay.mode)
        if plan["per_step"]:
            replay.row(op, "per-step")
            with _time_stride_one(op, plan["unstrided"]):
                return replay.apply(op, (x,), {}, SEQ, seq=plan["out"], valid_from=x.valid_from)
        if plan["zeros_before"]:
            x = replay.clean(x)
        # A zero padding of the other axes commutes with the ring buffer:
        # keeping the unpadded frames makes the state smaller, and the pad of
        # the window is one a depthwise kernel skips (compiler/lower/microkernel.py)
        frames, pads = x.unpadded if x.unpadded is not None else (x.value, None)
        positions = tap_positions(plan)
        # (TF takes no stride in time where another axis has a dilation)
        other_dilations = tuple(getattr(op, "dilation_rate", ()))[1:]
        taps = circular.use_taps(plan["dilation"], plan["keep"], len(positions)) and \
            all(d == 1 for d in other_dilations)
        if taps:  # (module circular: the rows the taps read, gathered)
            window = replay.ring(f"{op.name}/frames", frames, plan["keep"], op.name, positions)
        else:
            cat = replay.buffer(f"{op.name}/frames", frames, plan["keep"], op.name)
            window = cat[:, plan["offset"]:plan["offset"] + plan["frames"]]
        if pads is not None:
            window = tf.pad(window, pads)
        if plan["same"]:  # (run as a valid one: the other axes padded here)
            window = tf.pad(window, same_pads_off_time(op, window.shape))
        with tf.name_scope(op.name), _valid_padding(op, plan["same"]), \
                _time_stride_one(op, plan["unstrided"]), _gathered_taps(op, taps):
            y = op(window)
        out = plan["out"]
        replay.row(op, "time conv" if self.kind == "conv" else "time pool",
                   buffer=plan["keep"], kernel=plan["k"], stride=plan["stride"],
                   dilation=plan["dilation"], delay=out.delay,
                   **({"ring": "taps"} if taps else {}))
        return Streamed(y, SEQ, out, x.valid_from)


def windowed_plan(k: int, s: int, dil: int, padding: str, seq: Seq, mode: str,
                  refuse, pooling: bool = False, same_runs_late: bool = False) -> dict:
    """How a convolution or pooling with kernel ``k``, stride ``s`` and
    dilation ``dil`` along time streams an input chunk ``seq``: the ring
    buffer (``keep`` frames before the chunk), the slice of buffer + chunk it
    runs on (``offset``, ``frames``) and the output's ``Seq``. Shared by the
    Keras and the graph streamifiers. Raises NeedFrames, or ``refuse(why)``
    (an exception) when the layer cannot stream incrementally. ``pooling``:
    the layer pools (no causal padding to suggest). ``same_runs_late``: the
    caller runs a ``same`` convolution as a valid one (``same_in_time``).
    """
    eff = dil * (k - 1) + 1
    unstrided = s > 1 and _one_output(seq.length, eff, s, padding)
    if unstrided:
        # One output position over the whole window (a pooling over all the
        # remaining frames, say): its stride never applies, so it must not
        # multiply the frames per step. The frames past the kernel's reach
        # are dropped (a crop at the end), and the layer slides by one
        # frame, with an output every step, as kws_streaming streams it.
        seq = replace(seq, end=seq.end - (seq.length - eff), length=eff)
        s = 1
    if eff == 1 and s == 1:
        return {"per_step": True, "out": seq, "unstrided": unstrided}
    same = padding == "same"
    whole = (seq.end + 1) % s == 0  # every prefix a step ends on: whole strides
    if same and not (same_runs_late and whole and not pooling and mode != "window"):
        fix = ("padding='valid' (or a causal ZeroPadding1D before it)" if pooling
               else "padding='valid' or 'causal' in time")
        raise refuse(f"pads the time axis (padding='same', kernel {k}, stride {s} in time), "
                     "so its outputs near the end depend on frames not yet received; use "
                     f"{fix} to stream it")
    if seq.n % s:
        raise NeedFrames(s // _gcd(seq.n, s))
    delay, end, length = seq.delay, seq.end, seq.length
    if padding == "causal":
        if mode == "window":
            raise refuse("pads the start of each window with zeros (padding='causal'), "
                         "so a sliding window cannot reuse earlier outputs")
        delay, end = delay - (eff - 1), end + (eff - 1)
    if same:
        delay, end = delay - same_in_time(k, dil, s)[0], end + (eff - 1)
    if length is not None:
        if (end - length + 1) % s:
            raise refuse(f"has stride {s} in time, which does not line up with the "
                         "window's first frame")
        length = (length - eff) // s + 1
    out_delay = (delay + eff - 1) // s
    keep = max(0, s * out_delay - delay)
    return {"per_step": False, "zeros_before": padding in ("causal", "same"), "same": same,
            "keep": keep,
            "offset": keep + delay - s * out_delay, "frames": (seq.n // s - 1) * s + eff,
            "out": Seq(seq.n // s, out_delay, (end - eff + 1) // s, length, True),
            "k": k, "stride": s, "dilation": dil, "unstrided": unstrided}


def same_pads_nothing(k: int, s: int, dil: int, seq: Seq) -> bool:
    """Whether ``same`` padding in time adds no frame: TensorFlow pads
    ``(ceil(T/s) - 1) * s + eff - T`` frames, none when the kernel's reach
    is at most the stride (``MaxPooling1D(2, padding='same')``) and the
    length T is a multiple of the stride: a fixed window's, or each
    prefix's a step ends on. A step holds whole strides (``NeedFrames``),
    so the prefix at step m, ``(m+1)*n + end + 1`` frames (``Seq``), is
    such a multiple when ``end + 1`` is (not after a valid convolution of
    kernel 2: the prefixes are odd, and their last pooled frame is half
    padding, which the next step's frame changes). Then the layer is a
    ``valid`` one; else it was refused, or fell back to recomputing the
    window."""
    eff = dil * (k - 1) + 1
    whole = (seq.end + 1) % s == 0 if seq.length is None else seq.length % s == 0
    return s > 1 and eff <= s and whole


def _one_output(length: int | None, eff: int, s: int, padding: str) -> bool:
    """A valid convolution or pooling over a fixed window that has one
    output position."""
    return length is not None and padding != "same" and eff <= length < eff + s


def same_in_time(k: int, dil: int, stride: int = 1) -> tuple[int, int]:
    """A ``same`` convolution in time, streamed.

    On a sequence of a whole number of strides TensorFlow pads ``max(eff -
    stride, 0)`` frames (``eff = dil * (k - 1) + 1``), half of them (rounded
    down) before the first frame and the rest after the last: a zero pad
    before the stream, which the zero ring buffer holds (as a causal
    convolution's), then a valid convolution. The frames padded after the
    last are the stream's future: an output frame is complete once the input
    frames it reads have arrived, ``after`` frames past the chunk, so the
    step returns it that late (``Seq.delay``), exactly the whole sequence's
    frame; only the last ones of a finished sequence, which read the pad
    after it, are never returned. A step ends every prefix on a whole number
    of strides (``windowed_plan``; the prefix of another length pads
    otherwise). Returns (before, after)."""
    total = max(dil * (k - 1) + 1 - stride, 0)
    return total // 2, total - total // 2


def tf_same_pad(size: int, k: int, stride: int, dilation: int) -> list[int]:
    """TensorFlow's ``same`` pad of an axis of ``size``, [before, after]:
    ``max((ceil(size / stride) - 1) * stride + dilation * (k - 1) + 1 - size,
    0)`` frames, the smaller half before."""
    total = max((-(-size // stride) - 1) * stride + dilation * (k - 1) + 1 - size, 0)
    return [total // 2, total - total // 2]


def same_pads_off_time(op, window_shape) -> list[list[int]]:
    """The zero pads of a ``same`` convolution's axes other than time (and
    none in time, ``same_in_time``): run on them, it is a valid one."""
    kernel, strides = tuple(op.kernel_size), tuple(op.strides)
    dilations = tuple(getattr(op, "dilation_rate", (1,) * len(kernel)))
    return [[0, 0], [0, 0]] + [
        tf_same_pad(int(window_shape[axis + 1]), int(kernel[axis]), int(strides[axis]),
                    int(dilations[axis])) for axis in range(1, len(kernel))] + [[0, 0]]


class _valid_padding:
    """Runs a causal convolution as a valid one (the buffer holds its left
    padding), and a same one streamed late (``same``: its other axes padded
    before); a same one that pads nothing in time keeps its padding."""

    def __init__(self, op, same: bool):
        self.op = op
        self.saved = getattr(op, "padding", None)
        self.active = self.saved == "causal" or (same and self.saved == "same")

    def __enter__(self):
        if self.active:
            self.op.padding = "valid"

    def __exit__(self, *exc):
        if self.active:
            self.op.padding = self.saved


class _time_stride_one:
    """Runs a layer whose stride in time never applies (one output position
    over the window) with stride 1 in time, so it slides one frame a step."""

    def __init__(self, op, active: bool):
        self.op = op
        self.saved = op.strides if active else None

    def __enter__(self):
        if self.saved is not None:
            self.op.strides = (1, *tuple(self.saved)[1:])

    def __exit__(self, *exc):
        if self.saved is not None:
            self.op.strides = self.saved


def tap_positions(plan: dict) -> list[int]:
    """The frames of buffer + chunk that each output's taps read, output by
    output (the window starts at ``offset``)."""
    k, s, dil = plan["k"], plan["stride"], plan["dilation"]
    return [plan["offset"] + i * s + j * dil for i in range(plan["out"].n) for j in range(k)]


class _gathered_taps:
    """Runs a convolution on its taps' frames (tap_positions): kernel k,
    stride k and dilation 1 in time, so each output reads its own k frames."""

    def __init__(self, op, active: bool):
        self.op = op
        self.saved = (op.strides, op.dilation_rate) if active else None

    def __enter__(self):
        if self.saved is not None:
            k = int(tuple(self.op.kernel_size)[0])
            self.op.strides = (k, *tuple(self.saved[0])[1:])
            self.op.dilation_rate = (1, *tuple(self.saved[1])[1:])

    def __exit__(self, *exc):
        if self.saved is not None:
            self.op.strides, self.op.dilation_rate = self.saved


class PoolRule(WindowedRule):
    kind = "pool"


class WindowReduceRule:
    """Flatten, global pooling or a flattening Reshape over a fixed window:
    the layer runs on the last ``length`` frames."""

    def state_specs(self, op, seq: Seq, mode: str) -> list[tuple[str, int]]:
        self._check(op, seq, mode)
        keep = seq.length + seq.lag - seq.n
        return [("window", keep)] if keep > 0 else []

    def _check(self, op, seq: Seq, mode: str) -> None:
        if mode != "window" or seq.length is None:
            # (a recurrent model's fixed window falls back to recomputing it;
            # open time is refused, with what to do)
            raise NotIncremental(op, "is not a per-time-step layer: it reduces the whole "
                                     "sequence, whose length grows in a streaming model")

    def step(self, replay: Replay, op, x: Streamed) -> Streamed:
        import tensorflow as tf

        seq = x.seq
        if replay.mode == "prefix" and type(op).__name__.startswith("Global"):
            return _running_pool(replay, op, x)
        self._check(op, seq, replay.mode)
        need = seq.length + seq.lag
        keep = need - seq.n
        pooled = _pooled_frames(op, x.value)
        frames = x.value if pooled is None else pooled
        kind = _pooling_kind(op, x.value)
        if circular.applies(kind, seq.lag, seq.n, keep):
            # (module circular: the frames stay where they were written)
            rows = replay.ring(f"{op.name}/window", frames, keep, op.name)
            fresh = frames[:, :seq.n - seq.lag] if seq.n > seq.lag else None
            with tf.name_scope(op.name):
                reduced = circular.reduce_window(rows, fresh, kind, 1, seq.length)
                y = _pool_over_time(op, reduced, x.value)
            role = "window in place" if pooled is None else "window of pooled frames in place"
        else:
            cat = replay.buffer(f"{op.name}/window", frames, keep, op.name)
            first = int(cat.shape[1]) - need
            window = cat[:, first:first + seq.length]
            with tf.name_scope(op.name):
                y = op(window) if pooled is None else _pool_over_time(op, window, x.value)
            role = "window" if pooled is None else "window of pooled frames"
        replay.row(op, role, buffer=max(0, keep), window=seq.length)
        return Streamed(y, VEC, valid_from=max(x.valid_from, replay.window_first_step))


def _pooling_kind(op, value) -> str | None:
    """"mean" or "max" for a global average or max pooling of channels-last
    frames (``value``: a chunk of them): the window reductions that need no
    order of their frames (module circular); else None."""
    kind = type(op).__name__
    if (not kind.startswith(("GlobalAveragePooling", "GlobalMaxPooling"))
            or getattr(op, "data_format", "channels_last") != "channels_last"
            or len(value.shape) < 3):
        return None
    return "max" if "Max" in kind else "mean"


def _pooled_frames(op, value):
    """For global average or max pooling of frames with spatial axes
    (channels last): each frame pooled over them, (1, n, channels); else
    None. The window then keeps one vector a frame, not the whole frame:
    a streamed DS-CNN's last window was 12 frames of 4 x 64 (12 KB, copied
    into and out of its state every step), now 12 x 64 (3 KB). The mean of
    the frames' means is the mean (every frame has the same size)."""
    import tensorflow as tf

    kind = _pooling_kind(op, value)
    if kind is None or len(value.shape) <= 3:
        return None
    reduce = tf.reduce_max if kind == "max" else tf.reduce_mean
    return reduce(value, axis=list(range(2, len(value.shape) - 1)))


def _pool_over_time(op, window, value):
    """The global pooling of ``window``'s pooled frames (1, length, channels),
    shaped as the layer's output for frames shaped as ``value``'s."""
    import tensorflow as tf

    reduce = tf.reduce_max if "Max" in type(op).__name__ else tf.reduce_mean
    y = reduce(window, axis=1)
    if getattr(op, "keepdims", False):
        y = tf.reshape(y, (1,) * (len(value.shape) - 1) + (int(y.shape[-1]),))
    return y


#: The running max's value before any frame (float32's lowest).
_NO_FRAME = -3.4028234663852886e38


def _running_pool(replay: Replay, op, x: Streamed) -> Streamed:
    """Global average/max pooling over a growing prefix (prefix mode): the
    mean or max of frames 0..t, kept as a running sum or max of each frame
    (its other spatial axes pooled first), plus the step counter."""
    import tensorflow as tf

    seq = x.seq
    if seq.lag < 0:
        raise NotIncremental(op, f"pools every frame of the sequence, but {seq.late_why()}")
    is_max = "Max" in type(op).__name__
    # the n frames that end at the reference's last frame (a lag is a delay line)
    cat = replay.buffer(f"{op.name}/delay", x.value, seq.lag, op.name)
    frames = cat[:, :seq.n]
    reduce = tf.reduce_max if is_max else tf.reduce_sum
    per_frame = reduce(frames, axis=list(range(2, len(frames.shape) - 1)), keepdims=False) \
        if len(frames.shape) > 3 else frames
    if not is_max:
        per_frame = per_frame / float(_spatial_size(frames))
    numbers = replay.frame_numbers(seq) - float(seq.lag)
    inside = tf.reshape(numbers >= 0.0, (1, seq.n, 1))
    with tf.name_scope(op.name):
        if is_max:
            best = tf.reduce_max(tf.where(inside, per_frame, _NO_FRAME), axis=1)
            old = replay.take_state(f"{op.name}/max", tuple(best.shape), op.name,
                                    fill=_NO_FRAME)
            y = tf.maximum(old, best)
            replay.new_values.append(y)
        else:
            y = _running_mean(replay, op, tf.where(inside, per_frame, 0.0), inside)
        if getattr(op, "keepdims", False):
            y = tf.reshape(y, (1,) * (len(x.value.shape) - 1) + (int(y.shape[-1]),))
    replay.row(op, "running " + ("max" if is_max else "mean"), buffer=max(0, seq.lag))
    return Streamed(y, VEC, valid_from=max(x.valid_from, seq.first_step))


def _running_mean(replay: Replay, op, frames, inside):
    """The mean of every frame so far, updated by this step's ``frames``
    (those ``inside`` the stream; the others zero). A running mean, not a
    sum over the saturating step counter (which stops at STEP_CAP: the
    output grew past 65536 steps); its own count is exact to 2^24 frames,
    past which each frame weighs 2^-24 (a moving average that long)."""
    import tensorflow as tf

    total = tf.reduce_sum(frames, axis=1)
    arrived = tf.reduce_sum(tf.cast(inside, tf.float32))
    old = replay.take_state(f"{op.name}/mean", tuple(total.shape), op.name)
    count = replay.take_state(f"{op.name}/count", (1,), op.name) + arrived
    mean = old + (total - arrived * old) / tf.maximum(count, 1.0)
    replay.new_values += [mean, count]  # (in the order the states were taken)
    return mean


def _spatial_size(frames) -> int:
    size = 1
    for d in frames.shape[2:-1]:
        size *= int(d)
    return size


def _time_pad(op) -> tuple[tuple[int, int], list[tuple[int, int]]]:
    """(time pair, other spatial pairs) of a ZeroPadding / Cropping layer."""
    attr = op.padding if hasattr(op, "padding") else op.cropping
    if type(op).__name__.endswith("1D"):
        return _pair(attr), []
    pairs = [_pair(p) for p in attr]
    return pairs[0], pairs[1:]


def pad_ends(before: int, after: int) -> str:
    """Where a zero padding in time goes, in words: "2 frames before"."""
    def frames(n):
        return f"{n} frame{'s' if n != 1 else ''}"
    parts = [f"{frames(before)} before"] * bool(before) + [f"{frames(after)} after"] * bool(after)
    return " and ".join(parts)


class PadRule:
    """ZeroPadding1D/2D/3D: zeros before the first frame (prefix mode)."""

    def state_specs(self, op, seq: Seq, mode: str) -> list[tuple[str, int]]:
        return []

    def step(self, replay: Replay, op, x: Streamed) -> Streamed:
        import tensorflow as tf

        (before, after), others = _time_pad(op)
        if (before or after) and replay.mode == "window":
            raise NotIncremental(op, f"pads the time axis of each window "
                                     f"({pad_ends(before, after)}), so a sliding window "
                                     "cannot reuse earlier outputs")
        if after:
            raise layer_error(op, f"pads {after} frame(s) after the last frame, which "
                                  "streaming cannot know")
        if before:
            x = replay.clean(x)
        pads = [[0, 0], [0, 0], *[list(p) for p in others]]
        pads += [[0, 0]] * (len(x.value.shape) - len(pads))
        with tf.name_scope(op.name):
            y = tf.pad(x.value, pads)
        seq = replace(x.seq, delay=x.seq.delay - before, end=x.seq.end + before)
        replay.row(op, "per-step" if not before else "time pad", pad=before)
        return Streamed(y, SEQ, seq, x.valid_from,
                        unpadded=None if before else (x.value, pads))


class CropRule:
    """Cropping1D/2D/3D: renumbers the frames (a crop at the start) and moves
    the reference's last frame back (a crop at the end)."""

    def state_specs(self, op, seq: Seq, mode: str) -> list[tuple[str, int]]:
        return []

    def step(self, replay: Replay, op, x: Streamed) -> Streamed:
        (before, after), others = _time_pad(op)
        y = x.value
        for axis, (a, b) in enumerate(others, start=2):
            size = int(y.shape[axis])
            index = [slice(None)] * len(y.shape)
            index[axis] = slice(a, size - b)
            y = y[tuple(index)]
        seq = x.seq
        length = None if seq.length is None else seq.length - before - after
        seq = Seq(seq.n, seq.delay + before, seq.end - before - after, length,
                  seq.dirty or before > 0)
        replay.row(op, "time crop" if before or after else "per-step", crop=[before, after])
        return Streamed(y, SEQ, seq, x.valid_from)


def transposed_plan(k: int, s: int, dil: int, padding: str, seq: Seq, mode: str,
                    refuse) -> dict:
    """How a transposed convolution with kernel ``k``, stride ``s`` and
    dilation ``dil`` in time streams an input chunk ``seq`` (TransposedRule):
    the ring buffer (``keep`` input frames before the chunk) and the
    output's ``Seq``. Shared by the Keras and the graph streamifiers; raises
    ``refuse(why)`` where it cannot stream incrementally."""
    if k == 1 and s == 1:
        return {"per_step": True, "out": seq}
    if dil != 1:
        raise refuse("is a transposed convolution dilated in time")
    if padding == "same" and k > s + 1:
        raise refuse(f"is a transposed convolution with padding='same' over time (kernel {k}, "
                     f"stride {s}), which centers its kernel on frames not yet received (with "
                     "padding='valid' it streams, its output running max(kernel, stride) - "
                     "stride frames past the input's end: a Cropping of those frames after it "
                     "keeps the output the input's length)")
    if mode == "window":  # (recomputed: the window rules do not follow its frames)
        raise refuse("is a transposed convolution over time in a fixed window")
    last = s - 1 if padding == "same" else max(k, s) - 1
    out = Seq(seq.n * s, seq.delay * s, seq.end * s + last,
              None if seq.length is None else seq.length * s, True)
    return {"per_step": False, "k": k, "stride": s, "keep": (k - 1) // s, "out": out}


class TransposedRule:
    """Conv1DTranspose/Conv2DTranspose/Conv3DTranspose, kernel k and stride s
    in time (a CRN or GCRN decoder: s = 1, upsampling frequency only; a
    Conv-TasNet decoder: a waveform's overlap-add, s frames a frame).

    Input frame i adds ``W[j] x_i`` to output frame ``i*s + j`` (j < k), so
    output frame f needs the input frames up to ``f // s``: once a chunk of
    n frames has arrived, its n*s output frames are complete, made of the
    chunk and the ``(k - 1) // s`` frames before it (the ring buffer). With
    padding 'valid' the output runs ``max(k, s) - s`` frames past the
    input's end (partial sums of frames to come), the frames a Cropping at
    the end removes (``Seq.end``: the reference's last frame moves on);
    'same' crops ``(k - s) // 2`` frames at the start, which would take
    frames not yet received, so only ``k <= s + 1`` streams. A dilation in
    time is refused; a fixed window falls back to recomputing it."""

    def plan(self, op, seq: Seq, mode: str) -> dict:
        k, s = int(tuple(op.kernel_size)[0]), int(tuple(op.strides)[0])
        dil = int(tuple(getattr(op, "dilation_rate", (1,)))[0])
        return transposed_plan(k, s, dil, op.padding, seq, mode,
                               lambda why: NotIncremental(op, why))

    def state_specs(self, op, seq: Seq, mode: str) -> list[tuple[str, int]]:
        plan = self.plan(op, seq, mode)
        return [] if plan["per_step"] or not plan["keep"] else [("frames", plan["keep"])]

    def step(self, replay: Replay, op, x: Streamed) -> Streamed:
        plan = self.plan(op, x.seq, replay.mode)
        if plan["per_step"]:
            replay.row(op, "per-step")
            return replay.apply(op, (x,), {}, SEQ, seq=x.seq, valid_from=x.valid_from)
        x = replay.clean(x)
        keep, s, n = plan["keep"], plan["stride"], x.seq.n
        window = replay.buffer(f"{op.name}/frames", x.value, keep, op.name)
        # (the window's output frames from keep*s on have all their taps in it)
        if _one_dimensional(op, window):
            y = transposed_frames(window, _kernel_kio(op), s)[:, keep * s:(keep + n) * s]
            y = op.activation(y + op.bias if op.use_bias else y)
        else:
            y = op(window)[:, keep * s:(keep + n) * s]
        replay.row(op, "time conv" if s == 1 else "time upsampling", buffer=keep,
                   kernel=plan["k"], stride=s, dilation=1, delay=plan["out"].delay)
        return Streamed(y, SEQ, plan["out"], x.valid_from)


def transposed_frames(window, kernel, stride: int):
    """The transposed convolution over time of ``window`` (1, W, Cin) with
    ``kernel`` (k, Cin, Cout) and ``stride``, without bias: its
    ``(W - 1) * stride + max(k, stride)`` output frames, as one matrix
    product of the frames with the kernel and their overlap-add. (IREE ran
    the op itself as a convolution of the input dilated with zeros: a
    Conv-TasNet decoder's 1k products took 11 of its step's 12 us.)"""
    import tensorflow as tf

    frames, cin = int(window.shape[1]), int(window.shape[2])
    k, cout = int(kernel.shape[0]), int(kernel.shape[2])
    products = tf.matmul(tf.reshape(window, (frames, cin)),
                         tf.reshape(tf.transpose(kernel, (1, 0, 2)), (cin, k * cout)))
    taps = tf.transpose(tf.reshape(products, (frames, k, cout)), (2, 0, 1))  # (Cout, W, k)
    y = tf.signal.overlap_and_add(taps, stride)  # (Cout, (W - 1) * stride + k)
    if k < stride:  # (frames no tap reaches)
        y = tf.pad(y, ((0, 0), (0, stride - k)))
    return tf.transpose(y)[None]


def _one_dimensional(op, window) -> bool:
    """Whether ``op`` is a Conv1DTranspose ``transposed_frames`` computes
    (no output_padding, float window)."""
    return len(window.shape) == 3 and getattr(op, "output_padding", None) is None and \
        window.dtype.is_floating


def _kernel_kio(op):
    """A Conv1DTranspose's kernel (k, Cout, Cin) as (k, Cin, Cout), in its
    compute dtype."""
    import tensorflow as tf

    return tf.transpose(tf.cast(op.kernel, op.compute_dtype), (0, 2, 1))


def upsampled(seq: Seq, factor: int) -> Seq:
    """The record of ``seq``'s chunk with each frame made ``factor`` frames
    (UpSampling1D; a graph's Reshape of (T, factor, ...) to (T * factor, ...)):
    frame t becomes frames t * factor .. t * factor + factor - 1."""
    return Seq(seq.n * factor, seq.delay * factor, seq.end * factor + factor - 1,
               None if seq.length is None else seq.length * factor, seq.dirty)


class UpSamplingRule:
    """UpSampling1D/2D/3D: each frame repeated ``s`` times in time (the other
    axes as the layer says), frame by frame; s = 1 (a decoder upsampling
    frequency) is per step. Bilinear interpolation over time mixes frames:
    a fixed window falls back to recomputing it."""

    def plan(self, op, seq: Seq, mode: str) -> dict:
        s = int(op.size[0] if isinstance(op.size, (tuple, list)) else op.size)
        if s != 1 and getattr(op, "interpolation", "nearest") != "nearest":
            raise NotIncremental(op, f"interpolates between frames in time "
                                     f"(interpolation='{op.interpolation}', size {s} in time)")
        return {"per_step": s == 1, "stride": s, "out": upsampled(seq, s)}

    def state_specs(self, op, seq: Seq, mode: str) -> list[tuple[str, int]]:
        self.plan(op, seq, mode)
        return []

    def step(self, replay: Replay, op, x: Streamed) -> Streamed:
        plan = self.plan(op, x.seq, replay.mode)
        replay.row(op, "per-step" if plan["per_step"] else "time upsampling",
                   stride=plan["stride"])
        return replay.apply(op, (x,), {}, SEQ, seq=plan["out"], valid_from=x.valid_from)


def _gcd(a: int, b: int) -> int:
    import math

    return math.gcd(a, b)


_CONV = WindowedRule()
_POOL = PoolRule()
_REDUCE = WindowReduceRule()

# kind -> rule. Adding a layer kind that mixes time steps is adding a row.
RULES = {
    **{kind: _CONV for kind in (
        "Conv1D", "Conv2D", "Conv3D", "DepthwiseConv1D", "DepthwiseConv2D",
        "SeparableConv1D", "SeparableConv2D")},
    **{kind: _POOL for kind in (
        "MaxPooling1D", "MaxPooling2D", "MaxPooling3D",
        "AveragePooling1D", "AveragePooling2D", "AveragePooling3D")},
    **{kind: _REDUCE for kind in (
        "Flatten", "GlobalAveragePooling1D", "GlobalAveragePooling2D", "GlobalAveragePooling3D",
        "GlobalMaxPooling1D", "GlobalMaxPooling2D", "GlobalMaxPooling3D")},
    **{kind: PadRule() for kind in ("ZeroPadding1D", "ZeroPadding2D", "ZeroPadding3D")},
    **{kind: CropRule() for kind in ("Cropping1D", "Cropping2D", "Cropping3D")},
    **{kind: TransposedRule() for kind in ("Conv1DTranspose", "Conv2DTranspose",
                                           "Conv3DTranspose")},
    **{kind: UpSamplingRule() for kind in ("UpSampling1D", "UpSampling2D", "UpSampling3D")},
}
