"""A per-channel gate before a convolution, moved into its weights.

A squeeze-and-excitation block (EfficientNet, MobileNetV3, RegNetY, SE-
ResNet) multiplies its image by a gate of one value per channel, computed
from the image itself at run time, and a convolution (a 1x1 projection)
reads the product: ``conv(x * g, W)``. That product is a pass of IREE's
over the whole image, read and written once more (about a tenth of
EfficientNetB0's inference at 224x224). Since the gate scales input
channels, ``conv(x * g, W) = conv(x, W * g)``: the dispatch multiplies the
packed weights by the gate instead (``weight_lines``) and the kernel reads
the ungated image, which is cheaper where the weights have fewer elements
than the image (``worth_it``: the early, large images of such a model).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class ChannelGate:
    """``product = image * broadcast(gate)``, the gate one value per channel
    (the last axis), maybe reshaped for the convolution (a Conv1D's
    product, as a 2-D convolution's image): ``ops`` are the reshape, the
    product and, when nothing else reads it, the broadcast, in the order
    they can be erased; ``reader`` the convolution."""

    image: object
    gate: object
    ops: tuple
    reader: object

    def kernel_input(self):
        """What the kernel reads: the image, reshaped as the product was
        (the reshape made in front of the convolution)."""
        from iree.compiler import ir

        if self.ops[0].operation.name != "stablehlo.reshape":
            return self.image
        with ir.InsertionPoint(self.reader), self.reader.location:
            return ir.Operation.create("stablehlo.reshape",
                                       results=[self.ops[0].results[0].type],
                                       operands=[self.image]).results[0]

    @property
    def gate_type(self) -> str:
        """The gate's tensor type without ``tensor<>``, e.g. ``1x1x1x96xf32``."""
        return str(self.gate.type).removeprefix("tensor<").removesuffix(">")


def gate_of(product, channels: int, reader) -> ChannelGate | None:
    """The gate ``product`` (an f32 image, channels last) is made with, when
    ``reader`` (the convolution) is its only use and it is
    ``image * broadcast_in_dim(gate)`` (either order, maybe reshaped keeping
    the channels last) with ``gate`` of ``channels`` values along the
    image's last axis; else None."""
    from iree.compiler import ir

    if _only_use(product, reader) and _is(product.owner, "stablehlo.reshape"):
        reshape = product.owner
        gate = gate_of(reshape.operands[0], channels, reshape)
        if gate is None or ir.RankedTensorType(product.type).shape[-1] != channels:
            return None
        return ChannelGate(gate.image, gate.gate, (reshape, *gate.ops), reader)
    owner = product.owner
    if not _is(owner, "stablehlo.multiply") or not _only_use(product, reader):
        return None
    for image, gated in (owner.operands, list(owner.operands)[::-1]):
        broadcast = gated.owner
        if (_is(broadcast, "stablehlo.broadcast_in_dim") and str(image.type) == str(product.type)
                and _along_last_axis(broadcast, channels)):
            return ChannelGate(image, broadcast.operands[0],
                               (owner, broadcast) if _only_use(gated, owner) else (owner,), reader)
    return None


def _is(owner, name: str) -> bool:
    """Whether ``owner`` (a value's) is an op named ``name``."""
    from iree.compiler import ir

    return isinstance(owner, ir.OpView) and owner.operation.name == name


def _only_use(value, reader) -> bool:
    """Whether ``reader`` (an op) is ``value``'s only use."""
    return [u.owner.operation for u in value.uses] == [reader.operation]


def _along_last_axis(broadcast, channels: int) -> bool:
    """Whether ``broadcast`` spreads ``channels`` values (its operand, any
    other axes 1) over everything but the last axis of its result."""
    from iree.compiler import ir

    from .conv_epilogue import attr_ints

    source = ir.RankedTensorType(broadcast.operands[0].type)
    result = ir.RankedTensorType(broadcast.results[0].type)
    if (channels < 2 or not source.has_static_shape or str(source.element_type) != "f32"
            or int(np.prod(source.shape)) != channels or result.shape[-1] != channels):
        return False
    dims = attr_ints(str(broadcast.attributes["broadcast_dimensions"]))
    return any(size == channels and dim == result.rank - 1
               for size, dim in zip(source.shape, dims))


def worth_it(packed_elements: int, image_elements: int) -> bool:
    """Whether gating the weights (a pass over them) costs less than the
    product's pass over the image: both read and write their elements."""
    return packed_elements < image_elements


def weight_lines(weights: str, tensor: str, shape: tuple[int, ...], taps: int, channels: int,
                 gate_type: str) -> list[str]:
    """MLIR lines making ``%w`` (``tensor``, the packed f32 weights of
    ``shape``, ``[tiles][taps * channels][lanes]``: weight_packing.pack) from
    ``weights`` (an SSA value of that type) times the gate ``%g`` of each
    weight's input channel."""
    tiles, rows, lanes = shape
    assert rows == taps * channels, (shape, taps, channels)
    spread = f"tensor<{tiles}x{taps}x{channels}x{lanes}xf32>"
    return [f"%w_taps = stablehlo.reshape {weights} : ({tensor}) -> {spread}",
            f"%g_c = stablehlo.reshape %g : (tensor<{gate_type}>) -> tensor<{channels}xf32>",
            f"%g_w = stablehlo.broadcast_in_dim %g_c, dims = [2] : (tensor<{channels}xf32>) "
            f"-> {spread}",
            f"%w_gated = stablehlo.multiply %w_taps, %g_w : {spread}",
            f"%w = stablehlo.reshape %w_gated : ({spread}) -> {tensor}"]
