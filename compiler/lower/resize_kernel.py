"""A bilinear resize's lerps along one axis go to tfaot's resize kernel.

lower/bilinear_resize.py writes ``tf.image.resize(method="bilinear")``
(Keras' ``UpSampling2D(interpolation="bilinear")``, ``Resizing``) as, per
axis, two gathers of constant indices and a lerp between them, which
reach StableHLO as

    lo = torch_index_select(x, lower, dim);  hi = torch_index_select(x, upper, dim)
    y = lo + (hi - lo) * broadcast(lerp)

IREE's code for that read an index and wrote an output one float at a time
(0.86 ns an output of a DeepLab-style segmenter's last upsampling, 112 x 112
x 16 -> 224 x 224 x 16: 17% of its inference). The kernel
(``NAME_resize_f32``, runtime_shim/tfrt_resize.h) computes the same
arithmetic over contiguous rows or pixels, with the indices and lerps as
its constant taps.

Taken: that pattern on a static f32 image ``[b, h, w, c]`` along axis 1 or
2, the lerp a constant varying along that axis only. An axis whose every
output reads one input (one gather, no lerp) stays IREE's: a copy.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import kernel_dispatch
from .conv_epilogue import constant_array


@dataclass(frozen=True)
class Resize:
    """One axis of a resize, as the kernel takes it (one image of the batch a call)."""

    batch: int
    h: int
    w: int
    c: int
    axis: int  # 1: rows, 2: columns
    out: int
    taps: bytes  # lower, upper, lerp: 3 x out float32 (the kernel's constant)

    @property
    def sizes(self) -> tuple[int, ...]:
        """The kernel's size arguments, in its order."""
        return (self.h, self.w, self.c, self.axis, self.out)

    @property
    def x_type(self) -> str:
        return f"{self.batch}x{self.h}x{self.w}x{self.c}xf32"

    @property
    def y_type(self) -> str:
        shape = [self.batch, self.h, self.w, self.c]
        shape[self.axis] = self.out
        return "x".join(map(str, shape)) + "xf32"


def applies(target, kinds: tuple[str, ...]) -> bool:
    """Whether a build for ``target`` (taking the micro-kernels ``kinds``)
    sends its resizes to the kernel: as the pooling kernel, not with f16
    images (--intermediates=f16), where IREE fuses the conversions."""
    return (target.matvec_kernel == "tfaot" and "resize" in kinds
            and target.intermediates != "f16")


def resizes_as_calls(mlir_text: str, name: str, dtype: str = "f32") -> tuple[str, int]:
    """Replaces the lerps this stage takes (module docstring) by calls of
    the resize kernel (``NAME_resize_f32``, named for the build's weights
    ``dtype`` as every kernel is); returns the text and how many it replaced."""
    from iree.compiler import ir

    from .microkernel import kernel_symbol
    from .mlir_import import function_ops, parse_or_none

    if "stablehlo.torch_index_select" not in mlir_text:
        return mlir_text, 0
    with ir.Context():
        module = parse_or_none(mlir_text)
        if module is None:
            return mlir_text, 0
        plans = [(op, resize) for op in function_ops(module)
                 if op.operation.name == "stablehlo.add"
                 for resize in [resize_of(op)] if resize is not None]
        if not plans:
            return mlir_text, 0
        functions: dict[Resize, str] = {}
        texts: list[str] = []
        for op, resize in plans:
            if resize not in functions:
                functions[resize] = f"tfaot_resize_{len(functions)}"
                texts.append(_resize_text(functions[resize], resize,
                                          kernel_symbol(name, dtype, "resize")))
            _replace(op, functions[resize])
        text = module.operation.get_asm(enable_debug_info=False, assume_verified=True)
    end = text.rstrip().rfind("}")
    return text[:end] + "".join(texts) + text[end:], len(plans)


def resize_of(add) -> Resize | None:
    """The resize whose lerp ends in the ``stablehlo.add`` ``add``, where
    the kernel computes it (module docstring), else None."""
    from iree.compiler import ir

    lo, step = add.operands
    mul = _owner(step, "stablehlo.multiply")
    sub = mul and _owner(mul.operands[0], "stablehlo.subtract")
    if sub is None or sub.operands[1] != lo:
        return None
    lo_gather = _owner(lo, "stablehlo.torch_index_select")
    hi_gather = _owner(sub.operands[0], "stablehlo.torch_index_select")
    if lo_gather is None or hi_gather is None or lo_gather.operands[0] != hi_gather.operands[0]:
        return None
    if _owner(lo_gather.operands[0], "stablehlo.constant") is not None:
        return None  # (a constant's resize: IREE folds it at build time)
    axis = _gather_axis(lo_gather)
    if axis is None or axis != _gather_axis(hi_gather):
        return None
    x_type = ir.RankedTensorType(lo_gather.operands[0].type)
    y_type = ir.RankedTensorType(add.results[0].type)
    if (x_type.rank != 4 or str(x_type.element_type) != "f32" or not x_type.has_static_shape
            or not y_type.has_static_shape):
        return None
    out = y_type.shape[axis]
    lower, upper = _indices(lo_gather.operands[1]), _indices(hi_gather.operands[1])
    lerp = constant_array(mul.operands[1])
    if (lower is None or upper is None or lerp is None or len(lower) != out
            or len(upper) != out or max(lower.max(), upper.max()) >= x_type.shape[axis]):
        return None
    along = np.moveaxis(np.asarray(lerp), axis, 0).reshape(out, -1)
    if not (along == along[:, :1]).all():  # (a lerp that varies across other axes)
        return None
    taps = np.concatenate([lower, upper, along[:, 0]]).astype(np.float32)
    b, h, w, c = x_type.shape
    return Resize(batch=b, h=h, w=w, c=c, axis=axis, out=out, taps=taps.tobytes())


def _owner(value, name: str):
    """The op named ``name`` that makes ``value``, else None."""
    from iree.compiler import ir

    owner = value.owner
    if isinstance(owner, ir.OpView) and owner.operation.name == name:
        return owner
    return None


def _gather_axis(gather) -> int | None:
    """The axis (1 or 2) a torch_index_select of batch_dims 0 gathers along."""
    from iree.compiler import ir

    attrs = gather.operation.attributes
    if "dim" not in attrs or "batch_dims" not in attrs:
        return None
    dim, batch_dims = (ir.IntegerAttr(attrs[a]).value for a in ("dim", "batch_dims"))
    return dim if batch_dims == 0 and dim in (1, 2) else None


def _indices(value) -> np.ndarray | None:
    """The integer values of a 1-D constant (the gathers' indices), as float32
    can hold them exactly (the kernel's taps), else None."""
    from iree.compiler import ir

    owner = _owner(value, "stablehlo.constant")
    if owner is None:
        return None
    attr = ir.DenseElementsAttr(owner.attributes["value"])
    shape = ir.RankedTensorType(attr.type).shape
    if len(shape) != 1 or not str(attr.type.element_type).startswith("i"):
        return None
    values = (np.full(shape, attr.get_splat_value().value) if attr.is_splat
              else np.array(attr).reshape(shape)).astype(np.int64)
    return values if values.min(initial=0) >= 0 and values.max(initial=0) < 1 << 24 else None


def _replace(add, callee: str) -> None:
    """``add`` becomes a call of ``callee`` on the gathers' image; the
    gathers, lerp and constants go where nothing else uses them."""
    from iree.compiler import ir

    from .kernel_calls import call, erase_unused

    x = add.operands[0].owner.operands[0]
    with ir.InsertionPoint(add), add.location:
        result = call(callee, x, add.results[0].type).results[0]
    add.results[0].replace_all_uses_with(result)
    erase_unused(add, _ERASABLE)


#: What a resize's lerp leaves unused once it is a call.
_ERASABLE = ("stablehlo.add", "stablehlo.multiply", "stablehlo.subtract",
             "stablehlo.torch_index_select", "stablehlo.constant", "stablehlo.broadcast_in_dim")


def _resize_text(sym: str, resize: Resize, kernel: str) -> str:
    """A private function ``@sym(x) -> resize(x)`` and the executable it dispatches."""
    taps = np.frombuffer(resize.taps, np.float32)
    return (kernel_dispatch.dispatch_function(sym, resize.x_type, resize.y_type, None)
            + kernel_dispatch.executable_text(sym, taps, resize.x_type, resize.y_type, kernel,
                                              resize.sizes, batch=resize.batch))
