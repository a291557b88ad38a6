"""What the Keras streamifier knows of a layer by its class name alone:
the layers that see one time step at a time, the elementwise keras.ops the
functional API records, why the common layers that mix time steps cannot
stream (``not_streamable_reason``), and two that do less at inference
than a call suggests: data augmentation passes its input through
(``inert_at_inference``: calling it advanced its seed generator, which
made the step unfreezable), and a TimeDistributed whose layer takes no
mask drops a masked model's mask (``mask_unused``: a Dense head after a
masked GRU, where other layers that receive a mask are refused)."""
from __future__ import annotations

import inspect


# Layers that see one time step at a time: applied unchanged to a (1, n, ...)
# chunk. The value says which attribute holds axes that must not be the time
# (or batch) axis, or None.
PER_STEP_LAYERS: dict[str, str | None] = {
    "Dense": None, "Embedding": None, "Activation": None, "Dropout": None, "GaussianDropout": None,
    "GaussianNoise": None, "AlphaDropout": None, "SpatialDropout1D": None,
    "SpatialDropout2D": None, "SpatialDropout3D": None,
    "Identity": None, "Masking": None, "ReLU": None, "LeakyReLU": None, "ELU": None, "PReLU": None,
    "ThresholdedReLU": None,  # Keras 2 layer, see keras2.py
    "Rescaling": None, "Softmax": "axis", "LayerNormalization": "axis",
    "BatchNormalization": "axis", "UnitNormalization": "axis",
    "Normalization": "axis",  # adapted mean and variance per feature: a constant affine map
    "Concatenate": "axis", "Add": None, "Subtract": None, "Multiply": None,
    "Average": None, "Maximum": None, "Minimum": None,
}

# Elementwise keras.ops that the functional API records as graph nodes
# (``x + y``, ``keras.ops.tanh(x)`` ...).
ELEMENTWISE_OPS = {
    "Add", "Subtract", "Multiply", "Divide", "TrueDivide", "Maximum", "Minimum",
    "Negative", "Abs", "Exp", "Log", "Sqrt", "Square", "Tanh", "Sigmoid", "Relu",
    "NotEqual",
}

#: keras.ops that work along an axis (or a set): per step when every such
#: axis is a feature axis (not batch or time): the mask a Masking layer
#: records (not_equal, then any over the features), ``ops.split`` of a gated
#: activation, ``ops.concatenate`` or a mean over features.
FEATURE_AXIS_OPS = {"Any", "All", "Split", "Concatenate", "Sum", "Mean", "Max", "Min", "Prod",
                    "Softmax", "LogSoftmax", "Argmax", "Argmin"}


# Why a layer cannot stream, for the common cases; anything else on a
# sequence gets the generic message. (Transposed convolutions and
# upsampling have rules: time_rules.py.)
NOT_STREAMABLE: dict[str, str] = {
    "Bidirectional": "runs the sequence backwards as well as forwards, so step t "
                     "depends on future samples",
    "RepeatVector": "creates a new time axis",
    "Attention": "attends over the whole sequence",
    "MultiHeadAttention": "attends over the whole sequence",
    "AdditiveAttention": "attends over the whole sequence",
    # (Keras' MelSpectrogram always calls stft with center=True)
    "MelSpectrogram": "centers its frames: it pads the waveform at both ends with "
                      "fft_length/2 reflected samples, so its first frames are made of "
                      "samples that come later; compute the mel features in the firmware "
                      "and stream the model from the layer after this one",
}


def needs_whole_sequence(kind: str, args, kwargs: dict, on_sequence: bool) -> bool:
    """Whether a layer of NOT_STREAMABLE's ``kind`` called on ``args`` and
    ``kwargs`` (``on_sequence``: one of them is the streamed sequence) needs
    the whole sequence. Attention whose queries are the sequence and whose
    keys and values are not (a memory input without a time axis: an
    encoder's output, a speaker embedding) gives each frame its own output
    from that frame and the memory alone: it streams frame by frame (the
    layer's probe checks it), where the memory is made of inputs alone
    (``constant``: not a value pooled from the sequence, which would have
    to be the whole sequence's). A mask or a causal mask ties positions
    together, and a Bidirectional RNN reads the sequence backwards."""
    if kind == "Bidirectional":
        return True
    if not on_sequence:
        return False
    if "Attention" not in kind or kwargs.get("use_causal_mask") or \
            any(kwargs.get(k) is not None for k in ("attention_mask", "mask")):
        return True
    if kind == "MultiHeadAttention":
        query = args[0] if args else kwargs.get("query")
        memory = [*args[1:], kwargs.get("value"), kwargs.get("key")]
    else:  # Attention, AdditiveAttention: [query, value, key]
        parts = list(args[0] if args else kwargs.get("inputs", []))
        query, memory = (parts[0], parts[1:]) if parts else (None, [])
    memory = [m for m in memory if m is not None]
    return not (_is_sequence(query) and memory and
                all(getattr(m, "meta", None) == "vec" and m.constant for m in memory))


def is_elementwise_op(op) -> bool:
    """Whether ``op`` is one of the elementwise keras.ops (ELEMENTWISE_OPS)."""
    return type(op).__module__.startswith("keras.src.ops") and \
        type(op).__name__ in ELEMENTWISE_OPS


def is_feature_axis_op(op, args) -> bool:
    """Whether ``op`` is a keras.ops reduction or the like (FEATURE_AXIS_OPS)
    over feature axes only (not batch or time) of its first argument."""
    from keras import tree

    if not type(op).__module__.startswith("keras.src.ops") or \
            type(op).__name__ not in FEATURE_AXIS_OPS:
        return False
    rank = len(tree.flatten(args)[0].value.shape)
    axis = getattr(op, "axis", None)
    axes = axis if isinstance(axis, (list, tuple)) else [axis]
    return rank > 2 and all(isinstance(a, int) and a % rank >= 2 for a in axes)


def alpha_per_time_position(op) -> bool:
    """A PReLU's alpha is shaped like its input less the batch axis, with
    1 along its shared axes; one over a fixed window not shared in time is a
    different slope at each frame position, which a frame alone cannot
    apply (it broadcast a one-frame step to the whole window)."""
    shape = tuple(op.alpha.shape)
    return len(shape) >= 2 and shape[0] != 1


def _is_sequence(value) -> bool:
    """Whether a replayed value is the streamed sequence (time_meta.Streamed, SEQ)."""
    return getattr(value, "meta", None) == "seq"


def not_streamable_reason(kind: str, kwargs: dict, op=None) -> str:
    if "Attention" in kind and kwargs.get("use_causal_mask"):
        # Causal attention is incremental, but its state (every earlier
        # frame's keys and values) grows without bound.
        return ("attends over every earlier frame (use_causal_mask=True): streamed frame "
                "by frame, its state would be all earlier keys and values (over an open "
                "time axis, without bound)")
    return NOT_STREAMABLE[kind]


#: Keras' random preprocessing layers that do something at inference too
#: (a center crop); the others pass their input through there.
CHANGE_AT_INFERENCE = {"RandomCrop"}


def inert_at_inference(op) -> bool:
    """Whether ``op`` is a data augmentation layer, its input at inference."""
    kind = type(op).__name__
    return kind.startswith("Random") and kind not in CHANGE_AT_INFERENCE


def mask_unused(op) -> bool:
    """Whether ``op`` is a TimeDistributed whose layer takes no mask."""
    inner = getattr(op, "layer", None)
    return type(op).__name__ == "TimeDistributed" and inner is not None and \
        "mask" not in inspect.signature(inner.call).parameters
