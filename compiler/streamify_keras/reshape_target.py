"""What a Keras ``Reshape`` does to one time step.

A CRNN with a fixed window writes ``Reshape((T, -1))`` after its
convolution: T is the time length, and the -1 is what one step's features
leave. Streaming (replay.py) and verify's open-time twin of such a model
(verify/keras_reference.py) both need the target's per-step dimensions.
"""
from __future__ import annotations

import numpy as np


def per_step_target(target: tuple, length: int | None, per_step: tuple) -> tuple:
    """A Reshape target's per-step dimensions (``target[1:]``): with the
    fixed time length ``length`` first, a -1 among the rest is resolved
    from one step's features ``per_step``."""
    rest = tuple(target[1:])
    if length is None or target[0] != length or rest.count(-1) != 1:
        return rest
    known = int(np.prod([d for d in rest if d != -1]))
    size = int(np.prod(per_step))
    if known <= 0 or size % known:
        return rest
    return tuple(size // known if d == -1 else d for d in rest)


def layer_time_length(layer) -> int | None:
    """The fixed time length of the layer's input in the model, None if open
    or not known (a layer called more than once)."""
    try:
        shape = layer.input.shape
    except (AttributeError, ValueError):
        return None
    return shape[1] if len(shape) > 2 and isinstance(shape[1], int) else None
