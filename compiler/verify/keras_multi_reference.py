"""TensorFlow's outputs for a Keras model with several inputs, step by step
as a built library streams it.

Step m is the model on the streamed inputs' frames so far with the per-step
inputs' values of step m: one model call per step in general, each on a
longer prefix, which made verify quadratic in the steps (a GRU and a
TimeDistributed head on two streams, which Keras can only run eagerly:
4 minutes for 200 steps). Where every input is streamed, a causal
stream's step m is in one run on the whole sequence (as keras_reference's
``_prefix_reference`` takes it for one input): each output's last frame
there, its last n for one of n frames a step, those ``latency`` frames
before the end for a late one; checked against true prefix calls at three
steps, and the calls per step where they disagree.
"""
from __future__ import annotations

import numpy as np

from .keras_reference import any_length_call, fixed_time_length, pad_time, undefined_steps


def keras_multi_input_reference(model, xs: list, streamed: list, stream,
                                step_outputs) -> list[np.ndarray]:
    """What each step of a several-input model must return, per output:
    ``(steps, *step output)``, masked where not defined (``undefined_steps``).

    Step m is the model on the streamed inputs' frames 0..(m+1)P-1 (prefix;
    padded with zeros to T for a fixed-length model, which a causal stream
    cannot tell from the prefix), on the window ending ``delay`` frames
    before them (window), or on step m's input (stateless), with the
    per-step inputs' values of step m (module doc).
    """
    steps, p = len(xs[0]), stream.frames_per_step
    frames = [(x[:, 0] if p > 1 else x).reshape(1, steps * p, *x.shape[2 + (p > 1):])
              if s and stream.mode != "stateless" else None for x, s in zip(xs, streamed)]
    fixed = fixed_time_length(model) if stream.mode == "prefix" else None
    call = any_length_call(model, every_output=True)
    if stream.mode == "prefix" and fixed is None and all(f is not None for f in frames):
        wants = _one_run(call, frames, stream, steps, step_outputs)
        if wants is not None:
            return wants
    wants = [undefined_steps((steps, *shape)) for shape in step_outputs]
    for m in range(stream.first_valid_step, steps):
        end = (m + 1) * p
        if stream.mode == "window":
            start, end = end - stream.delay - stream.window, end - stream.delay
            if start < 0:
                continue
        else:
            start = 0
        args = [x[m] if f is None else f[:, start:end] for x, f in zip(xs, frames)]
        if fixed is not None:
            if end > fixed:
                break
            args = [a if f is None else pad_time(a, fixed) for a, f in zip(args, frames)]
        ys = call(args)  # (a dict of named outputs: by name)
        for i, (want, y, shape) in enumerate(zip(wants, ys, step_outputs)):
            if _keeps_time(stream, i, y, shape):
                last = _last_frames(y, y.shape[1], stream, i)
                if last is not None:  # (a valid convolution's output is shorter)
                    want[m] = last
            elif fixed is None or end == fixed:
                want[m] = y
    return wants


def _keeps_time(stream, i: int, y, step_shape) -> bool:
    """Whether output ``i`` of a model call (``y``) has a time axis (1)."""
    return stream.frames_of(i) > 1 or y.ndim == len(step_shape) + 1


def _last_frames(y, end: int, stream, i: int):
    """What output ``i`` returns at the step whose model output (``y``, time
    axis 1) ends at frame ``end``: its last frame, or its last n for an
    output of n frames a step, ``latency_of(i)`` frames before ``end``
    (an overlap-add's last frames are sums of frames to come); None where
    the output has no such frames yet."""
    count, lag = stream.frames_of(i), stream.latency_of(i)
    start = end - lag - count
    if start < 0:
        return None
    frames = y[:, start:end - lag]
    return frames[:, 0] if count == 1 else frames


def _one_run(call, frames, stream, steps: int, step_outputs):
    """The references from one run on the whole streams (module doc), or
    None where an output has no time axis or a prefix call disagrees."""
    p, first = stream.frames_per_step, stream.first_valid_step
    if first >= steps:
        return None
    whole = call([f for f in frames])
    shorter = call([f[:, :-p] for f in frames])
    wants = []
    for i, (y, y_short, shape) in enumerate(zip(whole, shorter, step_outputs)):
        if not _keeps_time(stream, i, y, shape):
            return None  # (a last output: the per-step calls)
        rate = y.shape[1] - y_short.shape[1]  # output frames a step
        want = undefined_steps((steps, *shape))
        for m in range(first, steps):
            last = _last_frames(y, y.shape[1] - (steps - 1 - m) * rate, stream, i)
            if last is not None:
                want[m] = last
        wants.append(want)
    for m in sorted({first, (first + steps - 1) // 2, steps - 1}):
        prefix = call([f[:, :(m + 1) * p] for f in frames])
        for i, (want, y) in enumerate(zip(wants, prefix)):
            last = _last_frames(y, y.shape[1], stream, i)
            defined = not np.ma.getmaskarray(want[m]).any()
            if defined != (last is not None) or \
                    (defined and np.abs(want[m] - last).max() > 1e-6):
                return None
    return wants
