"""GPU targets: rewrites around IREE's GPU code generation bugs (3.13.0).

* ``fence_row_reductions``: a row reduction's result broadcast back over
  the rows is computed in a kernel of its own. IREE's SPIR-V code for a
  reduction over an axis other than the innermost (a mean over frequency,
  a convolution over its taps), fused with an elementwise consumer of its
  result broadcast back (BC-ResNet's broadcast residual), sums each column
  into workgroup memory with one thread per column, then lets other
  threads read every column's sum with no barrier in between: on lavapipe
  half the channels read the sums of the previous step. With a
  ``stablehlo.optimization_barrier`` on the broadcast's operand, the
  reduction is a dispatch of its own, whose result the broadcast's
  dispatch reads after the pipeline barrier the runtime puts between
  dispatches (runtime_shim/tfrt_vulkan.c). Reductions over the innermost
  axis (a layer norm's, a softmax's, Masking's) take another code path,
  which is right, and stay fused. The fence is put nowhere else: IREE's
  Vulkan host program then failed to compile ("failed to legalize
  operation 'util.buffer.subspan'") for an Inception block (a max pooling
  before a concatenation) and a masked GRU, and still does for a whole
  BC-ResNet block (said as an IREE bug, pointing to --target cpu).
* ``integer_boolean_reductions``: an ``or`` (``and``) reduction of booleans
  is a ``maximum`` (``minimum``) of 0/1 integers compared with 0. Keras'
  Masking layer asks whether any feature of a frame is not the mask value
  with one; on Vulkan every frame came out masked (the recurrent layer after
  it never left its initial state).
"""
from __future__ import annotations

import re


def fence_row_reductions(mlir_text: str) -> tuple[str, int]:
    """Fences each broadcast of a row reduction's result; returns the text
    and how many were."""
    from .mlir_import import rewrite_each_op

    return rewrite_each_op(mlir_text, "stablehlo.broadcast_in_dim", _fence)


def _reduces_rows(op) -> bool:
    """Whether ``op`` sums across rows: a reduction of some axis but not its
    operand's innermost, a pooling window, or a convolution over taps (a
    1 x 1 one sums its input's innermost axis, the channels, alone: the
    squeeze-and-excitation layers' on a pooled vector, whose gate fenced
    made every EfficientNet fail in IREE's host program)."""
    from iree.compiler import ir

    name = op.operation.name
    if name == "stablehlo.reduce_window":
        return True
    if name == "stablehlo.convolution":
        return _has_taps(op)
    if name != "stablehlo.reduce":
        return False
    last = ir.RankedTensorType(op.operands[0].type).rank - 1
    axes = list(ir.DenseI64ArrayAttr(op.attributes["dimensions"]))
    return bool(axes) and last not in axes


def _has_taps(conv) -> bool:
    """Whether a ``stablehlo.convolution`` sums across rows: its filter spans
    more than one position along a spatial axis (its digits in the filter's
    layout), or its input's channels are not its innermost axis (channels
    first); a layout written otherwise counts."""
    from iree.compiler import ir

    from .conv_epilogue import conv_dims

    dims = conv_dims(str(conv.attributes["dimension_numbers"]))
    if dims is None or dims[0][-1] != "f":
        return True
    shape = ir.RankedTensorType(conv.operands[1].type).shape
    return any(shape[i] != 1 for i, dim in enumerate(dims[1]) if dim.isdigit())


def _from_row_reduction(value, depth: int = 6) -> bool:
    """Whether ``value`` is a row reduction's result, through at most
    ``depth`` reshapes and elementwise ops (an average's division)."""
    from iree.compiler import ir

    owner = value.owner
    if not isinstance(owner, ir.OpView) or depth == 0:
        return False
    if _reduces_rows(owner):
        return True
    return owner.operation.name in _PASSING and any(
        _from_row_reduction(v, depth - 1) for v in owner.operands)


#: ops between a row reduction and the broadcast of its result
_PASSING = {"stablehlo.reshape", "stablehlo.divide", "stablehlo.multiply", "stablehlo.add",
            "stablehlo.subtract", "stablehlo.convert", "stablehlo.sqrt", "stablehlo.rsqrt",
            "stablehlo.logistic", "stablehlo.tanh", "stablehlo.maximum", "stablehlo.minimum",
            "stablehlo.negate", "stablehlo.exponential"}


def _fence(op) -> bool:
    """A barrier between a row reduction's result and its broadcast back."""
    from iree.compiler import ir

    if op.operation.name != "stablehlo.broadcast_in_dim" or \
            not _from_row_reduction(op.operands[0]):
        return False
    value = op.operands[0]
    with ir.InsertionPoint(op), op.location:
        fence = ir.Operation.create("stablehlo.optimization_barrier", results=[value.type],
                                    operands=[value])
    op.operands[0] = fence.results[0]
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
