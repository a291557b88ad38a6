"""What a convolution's kernel takes from the ops around it (lower/microkernel.py).

* After it, ``Epilogue``: the per-channel work a model does right after a
  convolution (a bias, a batch norm in inference, a ReLU, ReLU6 or clamp),
  and a swish or hard swish after that (EfficientNet, MobileNetV3). A
  scale goes into the packed weights, the shift and the clamp into the
  kernel's stores, the activation into a kernel of tfaot's (act) that the
  dispatch calls after the convolution's, so none of it costs IREE a pass
  over the feature map.
* Before it, ``with_input_padding``: a zero ``stablehlo.pad`` (Keras'
  ZeroPadding2D) becomes the convolution's own padding, which the depthwise
  kernel skips instead of reading a padded copy of the image.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np


#: The activations the kernels apply after the clamp (runtime_shim/tfrt_matvec.c
#: TFRT_ACT_*), as they are numbered in the kernels' ``post``
ACTIVATIONS = {"none": 0, "swish": 1, "hard_swish": 2}


def activation(act: int, y: np.ndarray) -> np.ndarray:
    """What the kernels compute for activation number ``act`` (ACTIVATIONS)
    of ``y``, in y's precision: TensorFlow's formulas."""
    if act == ACTIVATIONS["swish"]:
        with np.errstate(over="ignore"):
            return y / (1 + np.exp(-y))
    if act == ACTIVATIONS["hard_swish"]:
        return y * (np.clip(y + 3, 0, 6) * (1 / 6))
    return y


@dataclass(frozen=True)
class Epilogue:
    """Per-channel work after a convolution that its kernel does instead:
    ``y = act(clamp(conv(x) * scale + shift, lo, hi))``, channels last.

    ``ops`` are the elementwise ops it replaces, in order: multiplications,
    additions and subtractions of a constant that is the same at every
    position (a bias, a batch norm in inference: ``_channel_constant``),
    then maxima and minima with a scalar (ReLU, ReLU6, ``stablehlo.clamp``);
    each the only use of the one before; then the ops of an activation
    (``_activation``). The scale goes into the weights; the shift and the
    clamp into the kernel's stores (``post``), the activation into the act
    kernel after it (runtime_shim/tfrt_matvec.c tfrt_act_pass; ``post``
    names it too, for the kernels on f16 images, which apply it per row).
    """

    scale: np.ndarray
    shift: np.ndarray
    lo: float
    hi: float
    ops: tuple
    act: str = "none"

    def folded_into(self, g):
        """``g`` (a conv_geometry.ConvGeometry) computing the convolution and
        this epilogue."""
        # weights: conv W[n, k]; depthwise [kh*kw, n]
        weights = (g.weights * self.scale[None, :] if g.depthwise
                   else g.weights * self.scale[:, None]).astype(np.float32)
        post = np.concatenate([[self.lo, self.hi], self.shift]).astype(np.float32)
        return replace(g, weights=weights, post=post, act=ACTIVATIONS[self.act])


def epilogue_of(op, n: int) -> Epilogue | None:
    """The epilogue of ``op`` (a convolution with ``n`` output channels) or None."""
    value = op.results[0]
    scale, shift = np.ones(n, np.float64), np.zeros(n, np.float64)
    lo, hi = -np.inf, np.inf
    chain: list = []
    while True:
        uses = list(value.uses)
        if len(uses) != 1:
            break
        user = uses[0].owner
        name = user.operation.name
        operands = list(user.operands)
        if (len(user.results) != 1 or str(user.results[0].type) != str(value.type)
                or operands.count(value) != 1):
            break  # (e.g. the function's return)
        others = [v for v in operands if v != value]
        if name in ("stablehlo.add", "stablehlo.multiply", "stablehlo.subtract"):
            c = _channel_constant(others[0], n)
            if c is None or lo != -np.inf or hi != np.inf:
                break  # affine work after a clamp is not a clamp's
            if name == "stablehlo.add":
                shift = shift + c
            elif name == "stablehlo.subtract" and operands[0] == value:
                shift = shift - c
            elif name == "stablehlo.multiply":
                scale, shift = scale * c, shift * c
            else:
                break  # c - y
        elif name in ("stablehlo.maximum", "stablehlo.minimum", "stablehlo.clamp"):
            bounds = [scalar_constant(v) for v in others]
            if None in bounds:
                break
            if name == "stablehlo.clamp":  # clamp(min, y, max)
                if operands[1] != value:
                    break
                lo, hi = max(lo, bounds[0]), max(hi, bounds[0])
                lo, hi = min(lo, bounds[1]), min(hi, bounds[1])
            elif name == "stablehlo.maximum":
                lo, hi = max(lo, bounds[0]), max(hi, bounds[0])
            else:
                lo, hi = min(lo, bounds[0]), min(hi, bounds[0])
        else:
            break
        chain.append(user)
        value = user.results[0]
    act, act_ops = _activation(value)
    chain += act_ops
    if not chain or not (np.all(np.isfinite(scale)) and np.all(np.isfinite(shift))):
        return None
    return Epilogue(scale, shift, float(lo), float(hi), tuple(chain), act)


def _activation(value) -> tuple[str, list]:
    """The activation applied to ``value`` (a convolution's result, after its
    affine ops and clamp), which has no other use: ``swish`` is ``v *
    logistic(v)`` as the import writes Keras' swish and silu; ``hard_swish``
    is ``v * (clamp(0, v + 3, 6) * (1/6))``, Keras' hard_silu and
    MobileNetV3's hard_swish (their division by 6 a multiplication there).
    Returns its name and ops (the last gives the result), or ``("none",
    [])``."""
    users = [use.owner.operation for use in value.uses]
    if len(users) != 2 or users[0] == users[1]:
        return "none", []
    for product, first in (users, users[::-1]):
        operands = list(product.operands)
        if (product.name == "stablehlo.multiply" and len(operands) == 2
                and operands.count(value) == 1):
            gate = _gate_chain(first, operands[1 - operands.index(value)])
            if gate is None:
                continue
            names = [op.name for op in gate]
            if names == ["stablehlo.logistic"]:
                return "swish", [*gate, product]
            if (names == ["stablehlo.add", "stablehlo.clamp", "stablehlo.multiply"]
                    and _is_hard_sigmoid(value, *gate)):
                return "hard_swish", [*gate, product]
    return "none", []


def _gate_chain(first, gate_value) -> list | None:
    """The ops from ``first`` to the one that gives ``gate_value``, each of
    one result that only the next one uses (at most 3; the last one's, the
    activation's product), or None."""
    chain, op = [], first
    while len(chain) < 3 and len(op.results) == 1:
        chain.append(op)
        uses = list(op.results[0].uses)
        if len(uses) != 1:
            return None
        if op.results[0] == gate_value:
            return chain
        op = uses[0].owner.operation
    return None


def _is_hard_sigmoid(value, add, clamp, scale) -> bool:
    """Whether the chain ``add``, ``clamp``, ``scale`` is ``clamp(0, value +
    3, 6) * (1/6)``."""
    return (_other_constant(add, value) == 3.0 and clamp.operands[1] == add.results[0]
            and [scalar_constant(clamp.operands[i]) for i in (0, 2)] == [0.0, 6.0]
            and np.float32(_other_constant(scale, clamp.results[0]) or 0) == np.float32(1 / 6))


def _other_constant(op, value) -> float | None:
    """The scalar constant that binary ``op`` combines with its operand
    ``value``, or None."""
    operands = list(op.operands)
    if len(operands) != 2 or operands.count(value) != 1:
        return None
    return scalar_constant(operands[1 - operands.index(value)])


def constant_array(value) -> np.ndarray | None:
    """The array of a ``stablehlo.constant`` (f32) or of a broadcast of one."""
    from iree.compiler import ir

    owner = value.owner
    if not isinstance(owner, ir.OpView):
        return None
    if owner.operation.name == "stablehlo.broadcast_in_dim":
        source = constant_array(owner.operands[0])
        if source is None:
            return None
        dims = attr_ints(str(owner.attributes["broadcast_dimensions"]))
        shape = ir.RankedTensorType(value.type).shape
        expanded = [1] * len(shape)
        for d, size in zip(dims, source.shape):
            expanded[d] = size
        return np.broadcast_to(source.reshape(expanded), shape)
    if owner.operation.name != "stablehlo.constant":
        return None
    attr = ir.DenseElementsAttr(owner.attributes["value"])
    if str(attr.type.element_type) != "f32":
        return None
    shape = ir.RankedTensorType(attr.type).shape
    if attr.is_splat:
        return np.full(shape, np.float32(attr.get_splat_value().value), np.float32)
    return np.array(attr, dtype=np.float32).reshape(shape)


def _channel_constant(value, n: int) -> np.ndarray | None:
    """The ``n`` values (one per channel, the last axis) of a constant that
    is the same at every position, or None."""
    array = constant_array(value)
    if array is None or array.shape[-1:] != (n,):
        return None
    rows = array.reshape(-1, n)
    if not np.all(rows == rows[:1]):
        return None
    return rows[0].astype(np.float64)


def scalar_constant(value) -> float | None:
    """The one value of a constant, or None when its elements differ."""
    array = constant_array(value)
    if array is None or array.size == 0 or not np.all(array == array.flat[0]):
        return None
    return float(array.flat[0])


def with_input_padding(op, g):
    """``g`` (a conv_geometry.ConvGeometry) with the zero padding of a
    ``stablehlo.pad`` that makes its image (Keras' ZeroPadding2D before a
    convolution) taken into its own, the convolution's input, and that pad
    op; or ``g``, its input, None."""
    from iree.compiler import ir

    x = op.operands[0]
    pad_op = x.owner
    if (not isinstance(pad_op, ir.OpView) or pad_op.operation.name != "stablehlo.pad"
            or scalar_constant(pad_op.operands[1]) != 0.0):
        return g, x, None
    low, high = (attr_ints(str(pad_op.attributes[a])) for a in ("edge_padding_low",
                                                             "edge_padding_high"))
    interior = attr_ints(str(pad_op.attributes["interior_padding"]))
    image = ir.RankedTensorType(pad_op.operands[0].type)
    if (any(interior) or min(low + high) < 0 or low[0] or high[0] or low[-1] or high[-1]
            or len(low) not in (3, 4)):
        return g, x, None
    if len(low) == 3:  # a 1-D convolution: one row
        low, high = [0, 0, *low[1:]], [0, 0, *high[1:]]
    shape = list(image.shape) if image.rank == 4 else [1, 1, *image.shape[1:]]
    (top, bottom), (left, right) = g.pad
    pad = ((top + low[1], bottom + high[1]), (left + low[2], right + high[2]))
    x_type = str(image).removeprefix("tensor<").removesuffix(">")
    return replace(g, ih=shape[1], iw=shape[2], pad=pad, x_type=x_type), pad_op.operands[0], pad_op


def constant_kernel_conv(op) -> dict[str, str] | None:
    """The attributes (as text) of a ``stablehlo.convolution`` of static f32
    tensors with a constant kernel, one batch group and no window reversal,
    which the convolution rewrites start from; else None."""
    from iree.compiler import ir

    if op.operation.name != "stablehlo.convolution" or len(op.operands) != 2:
        return None
    attrs = {a: str(op.attributes[a]) for a in op.attributes}
    kernel = op.operands[1].owner
    types = [ir.RankedTensorType(v.type) for v in (*op.operands, op.results[0])]
    if (attrs.get("batch_group_count", "1 : i64") != "1 : i64"
            or "true" in attrs.get("window_reversal", "")
            or not isinstance(kernel, ir.OpView) or kernel.operation.name != "stablehlo.constant"
            or any(not t.has_static_shape or str(t.element_type) != "f32" for t in types)):
        return None
    return attrs


def constant_kernel(op) -> np.ndarray:
    """The kernel of a convolution ``constant_kernel_conv`` took, as floats."""
    from iree.compiler import ir

    return np.array(ir.DenseElementsAttr(op.operands[1].owner.attributes["value"]),
                    dtype=np.float32)


def attr_ints(text: str) -> list[int]:
    """The integers of an attribute's text (``array<i64: 1, 2>``,
    ``dense<[[0, 1], [2, 3]]> : tensor<2x2xi64>``, ``dense<0> : ...``)."""
    import re

    body = text.split(":", 1)[-1] if text.startswith("array<") else text.split(">", 1)[0]
    values = [int(v) for v in re.findall(r"-?\d+", body)]
    if text.startswith("dense<") and len(values) == 1:  # a splat: the shape says how many
        shape = re.search(r"tensor<([\dx]+)xi64>", text)
        count = int(np.prod([int(d) for d in shape.group(1).split("x")])) if shape else 1
        values *= count
    return values


def conv_dims(text: str) -> tuple[list[str], list[str], list[str]] | None:
    """The input's, kernel's and output's dimensions of a convolution's
    ``dimension_numbers`` text (``#stablehlo.conv<[b, 0, 1, f]x[0, 1, i,
    o]->[b, 0, 1, f]>``: ``["b", "0", "1", "f"]``, ...), else None."""
    import re

    found = re.fullmatch(r"#stablehlo\.conv<\[([^\]]*)\]x\[([^\]]*)\]->\[([^\]]*)\]>",
                         " ".join(text.split()))
    if found is None:
        return None
    return tuple([d.strip() for d in part.split(",")] for part in found.groups())
