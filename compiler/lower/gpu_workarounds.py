"""GPU targets: rewrites around IREE's GPU code generation bugs (3.13.0).

* ``fence_row_reductions``: a reduction across rows is kept out of its
  consumers' kernel. IREE's SPIR-V code for a reduction over an axis other
  than the innermost, fused with an elementwise consumer of its result
  (BC-ResNet's broadcast residual: a frame plus its mean over frequency),
  sums each column into workgroup memory with one thread per column, then
  lets other threads read every column's sum with no barrier in between:
  on lavapipe half the channels read the sums of the previous step. With a
  ``stablehlo.optimization_barrier`` on the reduction's result (where it
  is broadcast back over the rows) the reduction is a dispatch of its own, whose result the next dispatch reads
  after the pipeline barrier the runtime puts between dispatches
  (runtime_shim/tfrt_vulkan.c). Reductions over the innermost axis (a
  layer norm's, a softmax's) take another code path, which is right, and
  stay fused.
* ``integer_boolean_reductions``: an ``or`` (``and``) reduction of booleans
  is a ``maximum`` (``minimum``) of 0/1 integers compared with 0. Keras'
  Masking layer asks whether any feature of a frame is not the mask value
  with one; on Vulkan every frame came out masked (the recurrent layer after
  it never left its initial state).
* ``fold_constant_windows``: a sum over windows of a constant (the count of
  valid elements an average pooling with padding 'same' divides by) is
  computed here. IREE left it to the step, and its Vulkan host program
  failed to compile ("failed to legalize operation 'util.buffer.subspan'":
  NASNetMobile, any AveragePooling2D(padding='same')). The counts vary
  along the padded axes only: the constant keeps those and is broadcast.
"""
from __future__ import annotations

import re

import numpy as np


def fence_row_reductions(mlir_text: str) -> tuple[str, int]:
    """Rewrites qualifying reductions; returns the text and how many were."""
    from .mlir_import import rewrite_each_op

    return rewrite_each_op(mlir_text, "stablehlo.reduce", _fence)


def _reduces_rows(op) -> bool:
    """Whether ``op`` reduces some axis but not its operand's innermost."""
    from iree.compiler import ir

    if op.operation.name not in ("stablehlo.reduce", "stablehlo.reduce_window"):
        return False
    last = ir.RankedTensorType(op.operands[0].type).rank - 1
    if op.operation.name == "stablehlo.reduce":
        axes = list(ir.DenseI64ArrayAttr(op.attributes["dimensions"]))
    elif op.operation.name == "stablehlo.reduce_window":
        window = list(ir.DenseI64ArrayAttr(op.attributes["window_dimensions"]))
        axes = [i for i, size in enumerate(window) if size > 1]
    return bool(axes) and last not in axes


def _broadcast_back(op, depth: int = 4) -> bool:
    """Whether a ``broadcast_in_dim`` takes ``op``'s result within ``depth``
    ops (through reshapes and elementwise math): the reduction's result is
    spread back over the rows, the fusion IREE gets wrong. A fence
    elsewhere is not only useless: before a concatenation (a max pooling
    branch of an Inception block) it made the Vulkan host program fail to
    compile ("failed to legalize operation 'util.buffer.subspan'")."""
    if depth == 0:
        return False
    for result in op.results:
        for use in result.uses:
            user = use.owner
            name = user.operation.name if hasattr(user, "operation") else user.name
            if name == "stablehlo.broadcast_in_dim":
                return True
            if name in _PASSING and _broadcast_back(user, depth - 1):
                return True
    return False


#: ops between a reduction and the broadcast of its result (an average's division)
_PASSING = {"stablehlo.reshape", "stablehlo.divide", "stablehlo.multiply", "stablehlo.add",
            "stablehlo.subtract", "stablehlo.convert", "stablehlo.sqrt", "stablehlo.rsqrt"}


def _fence(op) -> bool:
    from iree.compiler import ir

    if not _reduces_rows(op) or not _broadcast_back(op):
        return False
    results = list(op.results)
    with ir.InsertionPoint.after(op), op.location:
        fence = ir.Operation.create("stablehlo.optimization_barrier",
                                    results=[r.type for r in results], operands=results)
    for result, fenced in zip(results, fence.results):
        for use in list(result.uses):
            if use.owner.operation != fence.operation:
                use.owner.operands[use.operand_number] = fenced
    return True


_BOOLEAN_REDUCE = re.compile(
    r"^(?P<indent>[ \t]*)(?P<result>%[\w.$#-]+) = stablehlo\.reduce\((?P<x>%[\w.$#-]+) init: "
    r"(?P<init>%[\w.$#-]+)\) applies stablehlo\.(?P<op>or|and) across dimensions = "
    r"(?P<dims>\[[\d, ]*\]) : \(tensor<(?P<shape>(?:\d+x)*)i1>, tensor<i1>\) -> "
    r"tensor<(?P<out>(?:\d+x)*)i1>[ \t]*$", re.M)


def integer_boolean_reductions(mlir_text: str) -> tuple[str, int]:
    """``mlir_text`` with each or/and reduction of booleans over 0/1 integers;
    returns the text and how many were rewritten."""
    count = 0

    def replace(match: re.Match) -> str:
        nonlocal count
        count += 1
        name, shape, out = f"%tfaot_boolred{count}", match["shape"], match["out"]
        combine = "maximum" if match["op"] == "or" else "minimum"
        lines = [
            f"{name}_x = stablehlo.convert {match['x']} : (tensor<{shape}i1>) -> "
            f"tensor<{shape}i32>",
            f"{name}_init = stablehlo.convert {match['init']} : (tensor<i1>) -> tensor<i32>",
            f"{name}_r = stablehlo.reduce({name}_x init: {name}_init) applies "
            f"stablehlo.{combine} across dimensions = {match['dims']} : "
            f"(tensor<{shape}i32>, tensor<i32>) -> tensor<{out}i32>",
            f"{name}_zero = stablehlo.constant dense<0> : tensor<{out}i32>",
            f"{match['result']} = stablehlo.compare NE, {name}_r, {name}_zero : "
            f"(tensor<{out}i32>, tensor<{out}i32>) -> tensor<{out}i1>",
        ]
        return "\n".join(match["indent"] + line for line in lines)

    return _BOOLEAN_REDUCE.sub(replace, mlir_text), count


def fold_constant_windows(mlir_text: str) -> tuple[str, int]:
    """Rewrites each ``reduce_window`` sum of a splat constant as the
    constant it is; returns the text and how many were."""
    from .mlir_import import rewrite_each_op

    return rewrite_each_op(mlir_text, "stablehlo.reduce_window", _fold_window)


def _splat(value):
    """The one f32 value of a splat ``stablehlo.constant`` ``value``, else None."""
    from iree.compiler import ir

    owner = value.owner
    if not isinstance(owner, ir.OpView) or owner.operation.name != "stablehlo.constant":
        return None
    attr = ir.DenseElementsAttr(owner.attributes["value"])
    if not attr.is_splat or str(ir.RankedTensorType(value.type).element_type) != "f32":
        return None
    return float(np.array(attr, dtype=np.float32).ravel()[0])


def _fold_window(op) -> bool:
    from iree.compiler import ir

    if op.operation.name != "stablehlo.reduce_window" or len(op.operands) != 2:
        return False
    x, init = _splat(op.operands[0]), _splat(op.operands[1])
    body = list(op.operation.regions[0].blocks[0].operations)
    attrs = {a: op.attributes[a] for a in op.attributes}
    if (x is None or init is None or len(body) != 2 or body[0].operation.name != "stablehlo.add"
            or any(name in attrs and any(v != 1 for v in ir.DenseI64ArrayAttr(attrs[name]))
                   for name in ("base_dilations", "window_dilations"))):
        return False
    shape = ir.RankedTensorType(op.operands[0].type).shape
    window = list(ir.DenseI64ArrayAttr(attrs["window_dimensions"]))
    strides = list(ir.DenseI64ArrayAttr(attrs["window_strides"])) \
        if "window_strides" in attrs else [1] * len(shape)
    pads = np.array(ir.DenseElementsAttr(attrs["padding"]), dtype=np.int64).reshape(-1, 2) \
        if "padding" in attrs else np.zeros((len(shape), 2), np.int64)
    sums = _window_sums(np.full(shape, x, np.float64), window, strides, pads) + init
    out_type = ir.RankedTensorType(op.results[0].type)
    if list(sums.shape) != list(out_type.shape):
        return False
    # (only the padded axes vary: one row along each of the others, broadcast)
    kept = [i for i in range(sums.ndim) if pads[i].any()]
    small = sums[tuple(slice(None) if i in kept else slice(0, 1) for i in range(sums.ndim))]
    small = np.ascontiguousarray(small.astype(np.float32))
    with ir.InsertionPoint(op), op.location:
        constant = ir.Operation.create("stablehlo.constant", results=[ir.RankedTensorType.get(
            small.shape, out_type.element_type)], attributes={
            "value": ir.DenseElementsAttr.get(small)})
        full = ir.Operation.create(
            "stablehlo.broadcast_in_dim", results=[out_type], operands=[constant.results[0]],
            attributes={"broadcast_dimensions": ir.DenseI64ArrayAttr.get(range(sums.ndim))})
    op.results[0].replace_all_uses_with(full.results[0])
    op.operation.erase()
    return True


def _window_sums(x: np.ndarray, window: list[int], strides: list[int], pads) -> np.ndarray:
    """The sums over each window of ``x`` padded with zeros (float64)."""
    padded = np.pad(x, [(int(a), int(b)) for a, b in pads])
    out = padded
    for axis, (size, step) in enumerate(zip(window, strides)):
        length = (out.shape[axis] - size) // step + 1
        taps = [np.take(out, range(k, k + (length - 1) * step + 1, step), axis=axis)
                for k in range(size)]
        out = np.sum(taps, axis=0)
    return out
