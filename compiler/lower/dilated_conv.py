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

Works on the TF-dialect text (``convert_function``'s output, generic op
form) parsed by IREE's MLIR with unregistered dialects: op properties are
not visible to its Python API there, so they are read from the op's text.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

CONV_OPS = ("tf.Conv2D", "tf.DepthwiseConv2dNative")


def fold_dilated_convs(tf_text: str) -> tuple[str, int]:
    """``tf_text`` with each dilated-convolution chain as one convolution;
    returns the text (unchanged when nothing matched) and how many were folded."""
    from iree.compiler import ir

    if "tf.BatchToSpaceND" not in tf_text or "tf.SpaceToBatchND" not in tf_text:
        return tf_text, 0
    with ir.Context() as ctx:
        ctx.allow_unregistered_dialects = True
        try:
            module = ir.Module.parse(tf_text)
        except ir.MLIRError:
            return tf_text, 0  # the lowering reports what is wrong with it
        count = 0
        for op in _walk(module.operation):
            if op.name == "tf.BatchToSpaceND":
                chain = _match(op)
                if chain is not None:
                    _rebuild(chain)
                    count += 1
        if not count:
            return tf_text, 0
        # debug locations name the TF nodes for the legality check's errors
        return module.operation.get_asm(enable_debug_info=True), count


def _walk(op) -> list:
    """Every operation nested in ``op`` (a list: the rewrite erases some)."""
    found = []
    for region in op.regions:
        for block in region.blocks:
            for inner in block.operations:
                found.append(inner.operation)
                found.extend(_walk(inner.operation))
    return found


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
    if _is(_owner(value), "tf.Squeeze"):
        squeeze = _owner(value)
        value = squeeze.operands[0]
    conv = _owner(value)
    if not _is(conv, *CONV_OPS) or not _plain_conv(conv):
        return None
    value, expand = conv.operands[0], None
    if squeeze is not None:
        if not _is(_owner(value), "tf.ExpandDims"):
            return None
        expand = _owner(value)
        value = expand.operands[0]
    s2b = _owner(value)
    if not _is(s2b, "tf.SpaceToBatchND"):
        return None
    block, paddings = _int_const(s2b.operands[1]), _int_const(s2b.operands[2])
    b2s_block, crops = _int_const(b2s.operands[1]), _int_const(b2s.operands[2])
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
    props = _props(conv)
    ones = "[1, 1, 1, 1]"
    return (props.get("data_format", '"NHWC"') == '"NHWC"' and props.get("padding") == '"VALID"'
            and props.get("strides") == ones and props.get("dilations", ones) == ones)


def _expanded_axis(expand, squeeze) -> int | None:
    """The conv spatial axis of a 3-D tensor's time axis after ExpandDims at
    axis 1 or 2 (squeezed back at the same axis), else None."""
    axis = _int_const(expand.operands[1])
    dims = re.findall(r"-?\d+", _props(squeeze).get("squeeze_dims", ""))
    if axis is None or axis.size != 1 or len(dims) != 1 or _rank(expand.operands[0]) != 3:
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
            x4 = _clone(c.expand, [x, c.expand.operands[1]],
                        _tensor(_as_4d(list(ir.RankedTensorType(x.type).shape), c), y_type))
            x = x4.results[0]
        pads = [0, 0, *c.pads[0], *c.pads[1], 0, 0]
        any_pad = any(pads)
        conv = _clone(c.conv, [x, c.conv.operands[1]],
                      _tensor(_as_4d(list(y_type.shape), c), y_type),
                      dilations=_i64s([1, *c.dilations, 1]),
                      padding=ir.StringAttr.get("EXPLICIT" if any_pad else "VALID"),
                      explicit_paddings=_i64s(pads if any_pad else []))
        y = conv.results[0]
        if c.squeeze is not None:
            y = _clone(c.squeeze, [y], y_type).results[0]
    c.b2s.results[0].replace_all_uses_with(y)
    for op in (c.b2s, c.squeeze, c.conv, c.expand, c.s2b):
        if op is not None and not any(list(r.uses) for r in op.results):
            op.erase()


def _clone(op, operands: list, result_type, **changes):
    """A new op like ``op`` (name, properties, attributes, location) on
    ``operands``, with ``changes`` to its attributes. The properties go into
    the attribute dictionary, where TensorFlow's parser takes them too."""
    from iree.compiler import ir

    attributes = {k: ir.Attribute.parse(v) for k, v in _props(op).items()}
    attributes.update({name: op.attributes[name] for name in op.attributes})
    attributes.update(changes)
    return ir.Operation.create(op.name, results=[result_type], operands=operands,
                               attributes=attributes, loc=op.location)


# --------------------------------------------------------------------------
# reading the TF dialect through unregistered ops


def _owner(value):
    """The operation that defines ``value``; None for a block argument."""
    return getattr(value.owner, "operation", None)


def _is(op, *names: str) -> bool:
    return op is not None and op.name in names


def _props(op) -> dict[str, str]:
    """The op's properties (``<{name = value, ...}>`` in its generic form) as text."""
    text = op.get_asm(print_generic_op_form=True, large_elements_limit=16)
    body = re.search(r"<\{(.*?)\}>", text)
    if body is None:
        return {}
    return dict(re.findall(r'(\w+) = ("[^"]*"|\[[^\]]*\]|dense<[^>]*> : tensor<[^>]*>|[\w.-]+)',
                           body.group(1)))


def _int_const(value) -> np.ndarray | None:
    """The integers of a small ``tf.Const`` (through ``tf.Identity``), else None."""
    from iree.compiler import ir

    op = _owner(value)
    while _is(op, "tf.Identity"):
        op = _owner(op.operands[0])
    if not _is(op, "tf.Const"):
        return None
    t = ir.RankedTensorType(op.results[0].type)
    if not t.has_static_shape or not str(t.element_type).startswith("i") or t.rank > 2:
        return None
    dense = re.match(r"dense<([^>]*)>", _props(op).get("value", ""))
    if dense is None:
        return None
    values = [int(v) for v in re.findall(r"-?\d+", dense.group(1))]
    size = int(np.prod(t.shape))
    if len(values) == 1:  # a splat
        values *= size
    return np.array(values, np.int64).reshape(t.shape) if len(values) == size else None


def _rank(value) -> int:
    from iree.compiler import ir

    return ir.RankedTensorType(value.type).rank


def _tensor(shape: list[int], like):
    from iree.compiler import ir

    return ir.RankedTensorType.get(shape, like.element_type)


def _i64s(values: list[int]):
    from iree.compiler import ir

    i64 = ir.IntegerType.get_signless(64)
    return ir.ArrayAttr.get([ir.IntegerAttr.get(i64, v) for v in values])
