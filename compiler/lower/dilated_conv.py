"""Import stage, TF dialect: TensorFlow's dilated convolutions folded into one convolution.

TensorFlow writes a convolution with dilation d > 1 (``tf.nn.convolution``
with ``dilations``, ``tf.nn.atrous_conv2d``, ``tf.nn.depthwise_conv2d`` with
a rate, hence every Keras conv with ``dilation_rate``) as

    SpaceToBatchND(x, block, paddings) -> [ExpandDims] -> Conv2D |
    DepthwiseConv2dNative (VALID, stride 1) -> [Squeeze] -> BatchToSpaceND(., block, crops)

i.e. a convolution on a batch of ``prod(block)`` phases. Lowered as it is,
that is transposes around a batched convolution, which tfaot's conv kernel
does not take (it computes one image) and IREE runs in generic code. This
pass replaces the chain by the one convolution it equals, with ``dilations
= block`` and explicit padding, the same fold as TFLite's converter
("identify dilated conv"); the StableHLO lowering then gives a
``stablehlo.convolution`` with ``rhs_dilation`` on the original batch, which
the micro-kernel takes (microkernel.py).

Why it is exact, per spatial axis with block b, paddings (p0, p1), crops
(c0, c1) and filter size k: phase r of the padded input xp is
``xp[m*b + r]``; the VALID convolution of a phase at m reads
``xp[(m + i)*b + r]``, i < k; BatchToSpaceND puts that at ``j = m*b + r``,
so before the crop ``y[j] = sum_i w[i] * xp[j + i*b]``: the convolution of
xp with dilation b. Cropping (c0, c1) off y equals padding x by
``(p0 - c0, p1 - c1)`` instead. A chain that does not have exactly this
form (strides, an inner dilation or padding, crops beyond the padding,
dynamic shapes, non-constant block or paddings) is left as it is: correct,
only slower.

Works on the TF-dialect text (``convert_function``'s output), read and
written through tf_dialect.py.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from .tf_dialect import clone, i64s, int_const, is_op, owner, props, rank, rewrite_ops, tensor

CONV_OPS = ("tf.Conv2D", "tf.DepthwiseConv2dNative")


def fold_dilated_convs(tf_text: str) -> tuple[str, int]:
    """``tf_text`` with each dilated-convolution chain as one convolution;
    returns the text (unchanged when nothing matched) and how many were folded."""
    if "tf.BatchToSpaceND" not in tf_text or "tf.SpaceToBatchND" not in tf_text:
        return tf_text, 0

    def rewrite(b2s) -> bool:
        chain = _match(b2s)
        if chain is not None:
            _rebuild(chain)
        return chain is not None

    return rewrite_ops(tf_text, "tf.BatchToSpaceND", rewrite)


@dataclass
class _Chain:
    """One SpaceToBatchND -> conv -> BatchToSpaceND chain and the convolution it equals."""

    s2b: object
    expand: object | None  # ExpandDims / Squeeze: a 1-D convolution written as 2-D
    conv: object
    squeeze: object | None
    b2s: object
    time_axis: int  # 1-D form: the conv's spatial axis (1 or 2) that holds the data's axis
    dilations: list[int]  # per conv spatial axis
    pads: list[tuple[int, int]]  # per conv spatial axis


def _match(b2s) -> _Chain | None:
    """The chain that ends in ``b2s`` when it folds exactly, else None."""
    value, squeeze = b2s.operands[0], None
    if is_op(owner(value), "tf.Squeeze"):
        squeeze = owner(value)
        value = squeeze.operands[0]
    conv = owner(value)
    if not is_op(conv, *CONV_OPS) or not _plain_conv(conv):
        return None
    value, expand = conv.operands[0], None
    if squeeze is not None:
        if not is_op(owner(value), "tf.ExpandDims"):
            return None
        expand = owner(value)
        value = expand.operands[0]
    s2b = owner(value)
    if not is_op(s2b, "tf.SpaceToBatchND"):
        return None
    block, paddings = int_const(s2b.operands[1]), int_const(s2b.operands[2])
    b2s_block, crops = int_const(b2s.operands[1]), int_const(b2s.operands[2])
    if any(v is None for v in (block, paddings, b2s_block, crops)):
        return None
    block, paddings, crops = block.ravel(), paddings.reshape(-1, 2), crops.reshape(-1, 2)
    if (block.shape != b2s_block.ravel().shape or (block != b2s_block.ravel()).any()
            or len(paddings) != len(block) or len(crops) != len(block) or (block < 1).any()):
        return None
    pads = [(int(p0 - c0), int(p1 - c1)) for (p0, p1), (c0, c1) in zip(paddings, crops)]
    if min(min(p) for p in pads) < 0:
        return None
    time_axis = 0
    if expand is not None:  # the data's one spatial axis on conv axis 1 or 2
        time_axis = _expanded_axis(expand, squeeze)
        if time_axis is None or len(block) != 1:
            return None
        dilations = [int(block[0]) if a == time_axis else 1 for a in (1, 2)]
        pads = [pads[0] if a == time_axis else (0, 0) for a in (1, 2)]
    elif len(block) == 2:
        dilations = [int(b) for b in block]
    else:
        return None
    chain = _Chain(s2b, expand, conv, squeeze, b2s, time_axis, dilations, pads)
    return chain if _shapes_agree(chain) else None


def _plain_conv(conv) -> bool:
    """NHWC, VALID, unit strides and dilations: what TensorFlow puts between the pair."""
    attrs = props(conv)
    ones = "[1, 1, 1, 1]"
    return (attrs.get("data_format", '"NHWC"') == '"NHWC"' and attrs.get("padding") == '"VALID"'
            and attrs.get("strides") == ones and attrs.get("dilations", ones) == ones)


def _expanded_axis(expand, squeeze) -> int | None:
    """The conv spatial axis of a 3-D tensor's time axis after ExpandDims at
    axis 1 or 2 (squeezed back at the same axis), else None."""
    axis = int_const(expand.operands[1])
    dims = re.findall(r"-?\d+", props(squeeze).get("squeeze_dims", ""))
    if axis is None or axis.size != 1 or len(dims) != 1 or rank(expand.operands[0]) != 3:
        return None
    e, s = int(axis.ravel()[0]) % 4, int(dims[0]) % 4
    if e != s or e not in (1, 2):
        return None
    return 2 if e == 1 else 1


def _shapes_agree(c: _Chain) -> bool:
    """Static shapes, and the folded convolution's output is the chain's."""
    from iree.compiler import ir

    x_type = ir.RankedTensorType(c.s2b.operands[0].type)
    f_type = ir.RankedTensorType(c.conv.operands[1].type)
    y_type = ir.RankedTensorType(c.b2s.results[0].type)
    if not (x_type.has_static_shape and f_type.has_static_shape and y_type.has_static_shape):
        return False
    x, y = _as_4d(list(x_type.shape), c), _as_4d(list(y_type.shape), c)
    if len(x) != 4 or len(y) != 4 or x[0] != y[0]:
        return False
    kernel = list(f_type.shape)[:2]
    return all(x[1 + a] + sum(c.pads[a]) - c.dilations[a] * (kernel[a] - 1) == y[1 + a]
               for a in range(2))


def _as_4d(shape: list[int], c: _Chain) -> list[int]:
    """A shape of the chain's data as the conv sees it (the 1-D form gets its unit axis)."""
    if c.expand is None:
        return shape
    unit = 1 if c.time_axis == 2 else 2
    return shape[:unit] + [1] + shape[unit:]


def _rebuild(c: _Chain) -> None:
    """Replaces the chain's result by the folded convolution and erases what is left unused."""
    from iree.compiler import ir

    x = c.s2b.operands[0]
    y_type = ir.RankedTensorType(c.b2s.results[0].type)
    with ir.InsertionPoint(c.b2s), c.b2s.location:
        if c.expand is not None:
            x4 = clone(c.expand, [x, c.expand.operands[1]],
                        tensor(_as_4d(list(ir.RankedTensorType(x.type).shape), c), y_type))
            x = x4.results[0]
        pads = [0, 0, *c.pads[0], *c.pads[1], 0, 0]
        any_pad = any(pads)
        conv = clone(c.conv, [x, c.conv.operands[1]],
                      tensor(_as_4d(list(y_type.shape), c), y_type),
                      dilations=i64s([1, *c.dilations, 1]),
                      padding=ir.StringAttr.get("EXPLICIT" if any_pad else "VALID"),
                      explicit_paddings=i64s(pads if any_pad else []))
        y = conv.results[0]
        if c.squeeze is not None:
            y = clone(c.squeeze, [y], y_type).results[0]
    c.b2s.results[0].replace_all_uses_with(y)
    for op in (c.b2s, c.squeeze, c.conv, c.expand, c.s2b):
        if op is not None and not any(list(r.uses) for r in op.results):
            op.erase()
