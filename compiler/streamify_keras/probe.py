"""How a layer tfaot has no rule for treats time, found by running it.

A Lambda layer or a user's own layer says nothing about time: it may work
on each frame alone (``lambda t: t * 0.5``), keep only the last frame
(``lambda t: t[:, -1]``, the classic "last output" after a sequence), or
mix frames (a cumulative sum, a mean over time). The replay asks here
before refusing such a layer: the layer runs eagerly on a few random
frames, whole and frame by frame, and the results say which it is. Random
inputs make a layer that mixes frames agree with the per-frame results
only by accident, which the tolerance below makes vanishingly unlikely.
"""
from __future__ import annotations

import numpy as np

from ..errors import TfaotError, first_line

#: Frames of the probe sequence: enough that "the last frame" and "each
#: frame" differ from any fixed offset or window a layer might use.
PROBE_FRAMES = 5
PER_STEP, LAST_FRAME, MIXED = "per-step", "last frame", "mixed"


def time_locality(op, args, kwargs, streamed_type) -> str | None:
    """PER_STEP when every output frame of ``op`` depends on its own input
    frame only, LAST_FRAME when its output has no time axis and equals its
    output on the input's last frame alone, MIXED when it ran and neither
    holds, None when the probe cannot run; ProbeFailed when the layer raised
    on the probe's frames.

    ``streamed_type`` is the replay's value class: such values in ``args``
    are sequence chunks (LAST_FRAME takes one) or values without a time axis
    that every frame sees whole (an attention's memory), each of fully
    known shape. An output whose time axis changed length (a crop, a
    stride) is MIXED: the shapes differ."""
    import tensorflow as tf
    from keras import tree

    leaves = [a for a in tree.flatten((args, kwargs)) if isinstance(a, streamed_type)]
    sequences = [a for a in leaves if a.meta == "seq"]
    if not sequences:
        return None
    rng = np.random.default_rng(0)
    probes = {}
    for a in leaves:
        shape = ((1, PROBE_FRAMES, *a.value.shape[2:]) if a.meta == "seq"
                 else tuple(a.value.shape))
        if any(d is None for d in shape):
            return None
        dtype = a.value.dtype.as_numpy_dtype if hasattr(a.value.dtype, "as_numpy_dtype") \
            else np.dtype(str(a.value.dtype))
        probes[id(a)] = (rng.normal(size=shape) if np.issubdtype(dtype, np.floating)
                         else rng.integers(0, 3, size=shape)).astype(dtype)

    def run(frames: slice):
        def probe(v):  # a sequence's frames, or the whole of a value without time
            return tf.constant(probes[id(v)][:, frames] if v.meta == "seq" else probes[id(v)])

        with tf.init_scope():  # eager, also while a step function is being traced
            given = tree.map_structure(
                lambda v: probe(v) if isinstance(v, streamed_type) else v, (args, kwargs))
            out = op(*given[0], **given[1])
        return [np.asarray(o) for o in tree.flatten(out)]  # (tf.split: several)

    try:
        whole = run(slice(None))
        if all(w.ndim >= 2 and w.shape[1] == PROBE_FRAMES for w in whole):
            alone = [run(slice(t, t + 1)) for t in range(PROBE_FRAMES)]
            return PER_STEP if all(
                _same(w, np.concatenate([a[i] for a in alone], axis=1))
                for i, w in enumerate(whole)) else MIXED
        if len(leaves) > 1 or len(whole) > 1 or whole[0].ndim != len(leaves[0].value.shape) - 1:
            return MIXED
        last = run(slice(PROBE_FRAMES - 1, PROBE_FRAMES))
        return LAST_FRAME if _same(whole[0], last[0]) else MIXED
    except NameError as e:  # (no frames, and no fixed window, would run it either)
        raise TfaotError(f"layer '{op.name}' ({type(op).__name__}) fails when run "
                         f"(NameError: {first_line(e)}): its code names something not "
                         "defined where the model loads (a saved lambda runs with Keras's "
                         "globals, not its file's); save the model with a named function "
                         "instead, and give its file with --custom-objects") from None
    except Exception as e:  # the layer does not run on such frames: its error says why
        raise ProbeFailed(f"{type(e).__name__}: {first_line(e)}") from None


class ProbeFailed(Exception):
    """The layer raised when run on the probe's frames (its message: why)."""


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and bool(np.allclose(a, b, rtol=1e-5, atol=1e-6, equal_nan=True))
