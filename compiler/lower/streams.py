"""Many streams in one context (``--streams N``).

The step function of one stream is vectorised over a new leading axis
with TensorFlow's own ``vectorized_map`` (pfor): every input, output and
state gains a leading N, and a matrix-vector product of one stream becomes
one matrix product with N rows, so each weight is read once per step for
all N streams. pfor rewrites each op for the batch (it knows the batched
form of TensorFlow's ops); it is told never to fall back to a loop, so a
step it cannot batch is refused instead of running N times in sequence.

Streams are independent by construction: no op of the batched step mixes
rows of the stream axis.
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools

import numpy as np

from ..errors import TfaotError, first_line
from ..program import ProgramSignature, StepProgram

#: The most streams one context holds: beyond it the context's size and the
#: step's temporaries grow past what a single call should hold.
MAX_STREAMS = 4096


def check_streams(count: int) -> None:
    if not 1 <= count <= MAX_STREAMS:
        raise TfaotError(f"--streams must be between 1 and {MAX_STREAMS}, got {count}")


def batch_streams(program: StepProgram, count: int) -> StepProgram:
    """The program of ``count`` independent streams (``program`` if 1)."""
    check_streams(count)
    if count == 1:
        return program
    import tensorflow as tf

    one = program.pure_step
    sig = program.signature
    specs = [tf.TensorSpec((count, *t.shape), t.dtype) for t in (*sig.inputs, *sig.states)]

    def pure_step(*args):
        return tf.vectorized_map(lambda per_stream: one(*per_stream), tuple(args),
                                 fallback_to_while_loop=False)

    try:
        with _batched_forms(count), _quiet_pfor():
            batched = tf.function(pure_step, input_signature=specs,
                                  autograph=False).get_concrete_function()
    except Exception as e:  # pfor names the op it has no batched form of
        raise TfaotError(f"{program.source}: --streams {count}: TensorFlow cannot batch "
                         f"the step over streams: {first_line(e)}") from None
    return dataclasses.replace(program, signature=_batched_signature(sig, count),
                               pure_step=batched,
                               stream=dataclasses.replace(program.stream, streams=count))


def _batched_signature(sig: ProgramSignature, count: int) -> ProgramSignature:
    def widen(t, **extra):
        return dataclasses.replace(t, shape=(count, *t.shape), **extra)

    states = tuple(widen(s, initial=_repeat(s.initial, count)) for s in sig.states)
    return ProgramSignature(tuple(widen(t) for t in sig.inputs),
                            tuple(widen(t) for t in sig.outputs), states)


def _repeat(initial, count: int):
    if initial is None:
        return None
    return np.repeat(np.asarray(initial)[None], count, axis=0)


@contextlib.contextmanager
def _quiet_pfor():
    """pfor logs each op it cannot batch at ERROR level, with a Python
    traceback (200 lines for a Resizing layer): the one line tfaot says
    after it is the message; the logger is silenced meanwhile."""
    import logging

    logger = logging.getLogger("tensorflow")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        logger.setLevel(level)


#: Ops on a batch of images (their first input), the same for every image,
#: which pfor has no batched form of (a decoder's bilinear upsampling: "No
#: pfor vectorization defined for ResizeBilinear"; a video model's Conv3D;
#: AlexNet's and GoogLeNet's local response normalization; patches): the
#: streams fold into the batch axis (_batch_folded). (Not CropAndResize:
#: its boxes name images of the batch.)
BATCH_OPS = ("ResizeBilinear", "ResizeNearestNeighbor", "ResizeBicubic", "ResizeArea",
             "ScaleAndTranslate", "Conv3D", "LRN", "ExtractImagePatches")
#: Transposed convolutions (Conv2DTranspose, Conv1DTranspose, Conv3DTranspose):
#: their image is input 2, input 0 the output's size (``_transposed_conv``)
TRANSPOSED_OPS = ("Conv2DBackpropInput", "Conv3DBackpropInputV2")


@contextlib.contextmanager
def _batched_forms(count: int):
    """pfor's batched forms of ops it lacks or batches poorly, installed
    while the step is traced: a depthwise convolution of the model's filter
    (``_depthwise_conv``), a mirror padding (``_mirror_pad``: Keras'
    MelSpectrogram pads so, and --streams refused it), a BiasAdd of a
    stream's own values (``_bias_add``), the BATCH_OPS
    (``_batch_folded``) and the TRANSPOSED_OPS (``_transposed_conv``), for
    ``count`` streams."""
    from tensorflow.python.ops.parallel_for import pfor

    registry = pfor._pfor_converter_registry
    saved = {op: registry.get(op) for op in ("DepthwiseConv2dNative", "MirrorPad", "BiasAdd",
                                             *BATCH_OPS, *TRANSPOSED_OPS)}
    registry["DepthwiseConv2dNative"] = _depthwise_conv(saved["DepthwiseConv2dNative"])
    registry["BiasAdd"] = _bias_add(saved["BiasAdd"])
    registry["MirrorPad"] = _mirror_pad
    for op in BATCH_OPS:
        registry[op] = _batch_folded
    for op in TRANSPOSED_OPS:
        registry[op] = functools.partial(_transposed_conv, streams=count)
    try:
        yield
    finally:
        for op, convert in saved.items():
            if convert is None:
                registry.pop(op, None)
            else:
                registry[op] = convert


def _mirror_pad(pfor_input):
    """MirrorPad of each stream's tensor: no padding of the streams' axis
    (paddings that differ per stream are refused by pfor as before)."""
    import tensorflow as tf
    from tensorflow.python.ops.parallel_for import pfor

    if pfor_input.input(1)[1]:
        raise ValueError("No pfor vectorization defined for MirrorPad with paddings that "
                         "differ per stream")
    paddings = pfor_input.unstacked_input(1)
    paddings = tf.concat([tf.zeros((1, 2), paddings.dtype), paddings], axis=0)
    y = tf.raw_ops.MirrorPad(input=pfor_input.stacked_input(0), paddings=paddings,
                             mode=pfor_input.get_attr("mode"))
    return pfor.wrap(y, True)


def _batch_folded(pfor_input):
    """The op on each stream's batch of images (N, batch, ...): the streams
    folded into the batch axis, the op run once, unfolded. Its other inputs
    (a resize's size, a convolution's filter) must be the same for every
    stream, else it is refused."""
    from tensorflow.python.ops.parallel_for import pfor

    others = range(1, pfor_input.num_inputs)
    if any(pfor_input.input(i)[1] for i in others):
        raise ValueError(f"No pfor vectorization defined for {pfor_input.op_type} with "
                         "inputs that differ per stream")
    folded = pfor._flatten_first_two_dims(pfor_input.stacked_input(0))
    y = pfor._create_op(pfor_input.op_type,
                        [folded, *(pfor_input.unstacked_input(i) for i in others)],
                        [t.dtype for t in pfor_input.outputs],
                        attrs=pfor_input.op.node_def.attr).outputs[0]
    return pfor.wrap(pfor._unflatten_first_dim(y, pfor_input.pfor.loop_len_vector), True)


def _transposed_conv(pfor_input, streams: int):
    """A transposed convolution of each stream's batch: its image (input 2)
    folded with the streams into the batch, as ``_batch_folded``, and the
    output's size (input 0) a constant with N times the batch. pfor's own
    form computes that size from shapes at run time, and TensorFlow lowers
    the op to StableHLO only with a constant size (--streams was refused
    for any Conv2DTranspose)."""
    import tensorflow as tf
    from tensorflow.python.ops.parallel_for import pfor

    op = pfor_input.op_type
    if pfor_input.input(0)[1] or pfor_input.input(1)[1]:
        raise ValueError(f"No pfor vectorization defined for {op} with a filter or an "
                         "output size that differs per stream")
    # (one stream's output shape; Keras computes the size from tf.shape)
    shape = pfor_input.op.outputs[0].shape
    size = shape.as_list() if shape.is_fully_defined() else \
        tf.get_static_value(pfor_input.unstacked_input(0))
    if size is None:
        raise ValueError(f"No pfor vectorization defined for {op} with an output size known "
                         "only at run time")
    size = np.array(size, np.int32)
    size[0] *= streams
    folded = pfor._flatten_first_two_dims(pfor_input.stacked_input(2))
    y = pfor._create_op(op, [tf.constant(size), pfor_input.unstacked_input(1), folded],
                        [t.dtype for t in pfor_input.outputs],
                        attrs=pfor_input.op.node_def.attr).outputs[0]
    return pfor.wrap(pfor._unflatten_first_dim(y, pfor_input.pfor.loop_len_vector), True)


def _bias_add(shared):
    """pfor's BiasAdd of a bias that differs per stream reshapes it wrongly
    for data_format NCHW (Keras 3 adds a [1, T, 1] sequence to its
    residual as a BiasAdd over axis 1: --streams failed on keras.io's
    time-series transformer); here it is an Add of the bias laid along the
    channel axis. A shared bias (a layer's) keeps pfor's own form."""

    def convert(pfor_input):
        import tensorflow as tf
        from tensorflow.python.ops.parallel_for import pfor

        if not pfor_input.input(1)[1]:
            return shared(pfor_input)
        x, bias = pfor_input.stacked_input(0), pfor_input.stacked_input(1)
        channels = 2 if pfor_input.get_attr("data_format") == b"NCHW" else x.shape.rank - 1
        shape = [-1] + [1] * (x.shape.rank - 1)
        shape[channels] = bias.shape[-1]
        return pfor.wrap(tf.add(x, tf.reshape(tf.cast(bias, x.dtype), shape)), True)

    return convert


def _depthwise_conv(per_stream):
    """pfor batches a depthwise convolution only with a filter per stream
    (it folds the streams into the channels and tiles the filter N times,
    ``per_stream``); here the filter is the model's, shared by all streams,
    so the streams fold into the batch axis instead (``_batch_folded``)."""

    def convert(pfor_input):
        # (the filter per stream, or NCHW: pfor's own form)
        if pfor_input.input(1)[1] or pfor_input.get_attr("data_format") != b"NHWC":
            return per_stream(pfor_input)
        return _batch_folded(pfor_input)

    return convert
