"""Max and average pooling over channels-last images go to tfaot's pooling kernel.

IREE's CPU code for a pooling window, a maximum (or sum) of strided
slices (lower/pooling.py) or its own ``reduce_window``, ran 2-4.7x
XNNPACK's time on image models' pools: a 3x3 max pool of stride 2 on
112x112x64 (ResNet's stem) 591 us against 127, a 3x3 'same' average pool
on 35x35x192 (Inception) 321 us against 109, a 2x2 one on 28x28x256
(DenseNet's transitions) 81 against 27, each with the padded copy of its
input in the context. The kernel (``NAME_pool_f32``,
runtime_shim/tfrt_pool.h) reads the image in place, skipping the taps
outside it, and keeps a pixel's channels in registers over its window.

Taken: ``stablehlo.reduce_window`` of a non-constant f32 image ``[b, h, w,
c]`` (or ``[b, w, c]``: 1-D pooling) whose window and strides are 1 along
the batch and channel axes, padded (by at least 0) along the spatial axes
only, without dilation, whose body is one ``maximum`` with init -inf or
``add`` with init 0. An average pooling is a sum divided by a count: the
division goes into the kernel where the count is the window's size (a
splat constant) or the taps inside the image (the ``reduce_window`` of a
constant of ones with the same window: TensorFlow's 'same' average). The
rest of these pools (windows along channels, dilated ones) stay with
lower/pooling.py and IREE, as do unpadded ones of fewer than
``MIN_ELEMENTS`` inputs: a streamed step's pool over its few frames, whose
slices IREE fuses with the copy into the ring buffer after it (a streamed
CNN's two pools of 1216 and 544 inputs: 6.0 us a step that way, 6.6 through
the kernel; a padded window needs IREE's copy of its input, and a 3x3
'same' pool of stride 2 on 8x8x32 took 2.9 us through the kernel against
3.6).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

from .conv_epilogue import attr_ints, scalar_constant
from . import kernel_dispatch

#: Unpadded windows over fewer inputs stay IREE's (module docstring).
MIN_ELEMENTS = 4096
#: The kernel's modes (runtime_shim/tfrt_pool.h TFRT_POOL_*).
MODES = {"max": 0, "sum": 1, "mean_inside": 2, "mean_window": 3}
#: A window's reduction body, with the init value a pooling uses.
_BODIES = {"stablehlo.maximum": ("max", float("-inf")), "stablehlo.add": ("sum", 0.0)}


@dataclass(frozen=True)
class Pool:
    """One pooling's geometry, as the kernel takes it (one image of the
    batch a call), and the op types it replaces."""

    mode: str
    batch: int
    ih: int
    iw: int
    c: int
    oh: int
    ow: int
    kh: int
    kw: int
    sh: int
    sw: int
    top: int
    left: int
    x_type: str  # the op's input and result types, without tensor<>
    y_type: str

    @property
    def sizes(self) -> tuple[int, ...]:
        """The kernel's size arguments, in its order."""
        return (self.ih, self.iw, self.c, self.oh, self.ow, self.kh, self.kw, self.sh,
                self.sw, self.top, self.left, MODES[self.mode])


def applies(target, kinds: tuple[str, ...]) -> bool:
    """Whether a build for ``target`` (a Target, taking the micro-kernels
    ``kinds``) sends its pools to the kernel: not with f16 images
    (--intermediates=f16). There IREE fuses a pool's slices with the
    conversions from and to f16 around it, which the f32 kernel would
    need as passes of their own; not measured, so those builds stay as
    they were."""
    return (target.matvec_kernel == "tfaot" and "pool" in kinds
            and target.intermediates != "f16")


def pools_as_calls(mlir_text: str, name: str, dtype: str = "f32") -> tuple[str, int]:
    """Replaces the pooling windows this stage takes (module docstring) by
    calls of the pooling kernel (``NAME_pool_f32``, named for the build's
    weights ``dtype`` as every kernel is); returns the text and how many it
    replaced."""
    from iree.compiler import ir

    from .microkernel import kernel_symbol
    from .mlir_import import function_ops, parse_or_none

    if "stablehlo.reduce_window" not in mlir_text:
        return mlir_text, 0
    with ir.Context():
        module = parse_or_none(mlir_text)
        if module is None:
            return mlir_text, 0
        # planned before any rewrite: a rewrite erases the window that
        # counts an average's taps, which comes later in the walk
        plans = [(op, pool) for op in function_ops(module)
                 if op.operation.name == "stablehlo.reduce_window"
                 for pool in [pool_of(op)] if pool is not None]
        functions: dict[Pool, str] = {}
        texts: list[str] = []
        for op, pool in plans:
            divide = _folded_division(op, pool)
            if divide is not None:
                pool = replace(pool, mode=divide[1])
            if pool not in functions:
                functions[pool] = f"tfaot_pool_{len(functions)}"
                texts.append(_pool_text(functions[pool], pool,
                                        kernel_symbol(name, dtype, "pool")))
            _replace(op if divide is None else divide[0], functions[pool], op.operands[0])
        if not plans:
            return mlir_text, 0
        text = module.operation.get_asm(enable_debug_info=False, assume_verified=True)
    end = text.rstrip().rfind("}")
    return text[:end] + "".join(texts) + text[end:], len(plans)


def _replace(last, callee: str, x) -> None:
    """``last`` (the window, or the division of its sum) becomes a call of
    ``callee`` on the image ``x``; what made it goes where nothing else
    uses it."""
    from iree.compiler import ir

    from .kernel_calls import call, erase_unused

    with ir.InsertionPoint(last), last.location:
        result = call(callee, x, last.results[0].type).results[0]
    last.results[0].replace_all_uses_with(result)
    erase_unused(last, _ERASABLE)


def pool_of(op) -> Pool | None:
    """The geometry of the ``stablehlo.reduce_window`` ``op`` where the
    kernel computes it (module docstring), else None."""
    from iree.compiler import ir

    if len(op.operands) != 2 or scalar_constant(op.operands[0]) is not None:
        return None  # (a window over a constant: lower/pooling.py computes it)
    x_type = ir.RankedTensorType(op.operands[0].type)
    y_type = ir.RankedTensorType(op.results[0].type)
    rank = x_type.rank
    if (rank not in (3, 4) or str(x_type.element_type) != "f32"
            or not x_type.has_static_shape):
        return None
    attrs = _attrs(op)
    window = attr_ints(attrs["window_dimensions"])
    strides = attr_ints(attrs.get("window_strides", "")) or [1] * rank
    for name in ("base_dilations", "window_dilations"):
        if any(v != 1 for v in attr_ints(attrs.get(name, ""))):
            return None
    pads = attr_ints(attrs.get("padding", "")) or [0] * (2 * rank)
    if (len(pads) != 2 * rank or min(pads) < 0 or any(pads[:2]) or any(pads[-2:])
            or window[0] != 1 or window[-1] != 1 or strides[0] != 1 or strides[-1] != 1):
        return None
    mode = _body_mode(op)
    if mode is None or (not any(pads) and math.prod(x_type.shape) < MIN_ELEMENTS):
        return None
    x_shape, y_shape = list(x_type.shape), list(y_type.shape)
    if rank == 3:  # the 1-D form is the 2-D one with one row
        x_shape.insert(1, 1), y_shape.insert(1, 1)
        window, strides, pads = [1, 1, *window[1:]], [1, 1, *strides[1:]], [0, 0, 0, 0, *pads[2:]]
    return Pool(mode=mode, batch=x_shape[0], ih=x_shape[1], iw=x_shape[2], c=x_shape[3],
                oh=y_shape[1], ow=y_shape[2], kh=window[1], kw=window[2], sh=strides[1],
                sw=strides[2], top=pads[2], left=pads[4],
                x_type=_bare(x_type), y_type=_bare(y_type))


def _body_mode(op) -> str | None:
    """"max" or "sum" for a window whose body is one maximum or addition of
    its two arguments and whose init is that reduction's neutral value."""
    block = op.operation.regions[0].blocks[0]
    body = list(block.operations)
    if (len(body) != 2 or body[0].operation.name not in _BODIES
            or set(body[0].operands) != set(block.arguments)):
        return None
    mode, init = _BODIES[body[0].operation.name]
    return mode if scalar_constant(op.operands[1]) == init else None


def _folded_division(op, pool: Pool):
    """``(divide op, mode)`` where a sum window's only use is its division
    by a count the kernel knows (module docstring), else None."""
    from iree.compiler import ir

    uses = list(op.results[0].uses)
    if pool.mode != "sum" or len(uses) != 1:
        return None
    divide = uses[0].owner
    if (not isinstance(divide, ir.OpView) or divide.operation.name != "stablehlo.divide"
            or divide.operands[0] != op.results[0]
            or divide.results[0].type != op.results[0].type):
        return None
    count = divide.operands[1]
    if scalar_constant(count) == float(pool.kh * pool.kw):
        return divide, "mean_window"
    counter = count.owner
    if (isinstance(counter, ir.OpView) and counter.operation.name == "stablehlo.reduce_window"
            and scalar_constant(counter.operands[0]) == 1.0 and _same_window(counter, op)
            and _body_mode(counter) == "sum"):
        return divide, "mean_inside"
    return None


def _same_window(a, b) -> bool:
    """Whether two reduce_window ops have the same window attributes and types."""
    names = ("window_dimensions", "window_strides", "padding", "base_dilations",
             "window_dilations")

    def window(op):
        attrs = _attrs(op)
        return [attrs.get(name) for name in names], str(op.results[0].type)

    return window(a) == window(b)


def _attrs(op) -> dict[str, str]:
    """An op's attributes as text, by name."""
    return {a: str(op.attributes[a]) for a in op.attributes}


#: What erasing a pooling leaves unused: its window, the window counting
#: an average's taps, their constants.
_ERASABLE = ("stablehlo.reduce_window", "stablehlo.divide", "stablehlo.constant",
             "stablehlo.broadcast_in_dim")


def _bare(tensor_type) -> str:
    return str(tensor_type).removeprefix("tensor<").removesuffix(">")


def _pool_text(sym: str, pool: Pool, kernel: str) -> str:
    """A private function ``@sym(x) -> pool(x)`` and the executable it dispatches."""
    image = f"{pool.batch}x{pool.ih}x{pool.iw}x{pool.c}xf32"
    result = f"{pool.batch}x{pool.oh}x{pool.ow}x{pool.c}xf32"
    lines = [f"%x0 = stablehlo.reshape %x : (tensor<{pool.x_type}>) -> tensor<{image}>",
             *kernel_dispatch.dispatch_lines(sym, None, "%x0", image, "%y0", result),
             f"%y = stablehlo.reshape %y0 : (tensor<{result}>) -> tensor<{pool.y_type}>"]
    body = "".join(f"\n    {line}" for line in lines)
    function = f"""
  func.func private @{sym}(%x: tensor<{pool.x_type}>) -> tensor<{pool.y_type}> {{{body}
    return %y : tensor<{pool.y_type}>
  }}"""
    return function + kernel_dispatch.executable_text(sym, None, image, result, kernel,
                                                      pool.sizes, batch=pool.batch)
