"""GPU targets: rewrites around IREE's GPU code generation bugs (3.13.0).

* ``fence_row_reductions``: a reduction across rows is kept out of its
  consumers' kernel. IREE's SPIR-V code for a reduction over an axis other
  than the innermost, fused with an elementwise consumer of its result
  (BC-ResNet's broadcast residual: a frame plus its mean over frequency),
  sums each column into workgroup memory with one thread per column, then
  lets other threads read every column's sum with no barrier in between:
  on lavapipe half the channels read the sums of the previous step. With a
  ``stablehlo.optimization_barrier`` on the reduction's result (where it
  is broadcast back over the rows) the reduction is a dispatch of its own,
  whose result the next dispatch reads after the pipeline barrier the
  runtime puts between dispatches (runtime_shim/tfrt_vulkan.c). Reductions
  over the innermost axis (a layer norm's, a softmax's) take another code
  path, which is right, and stay fused.
* ``integer_boolean_reductions``: an ``or`` (``and``) reduction of booleans
  is a ``maximum`` (``minimum``) of 0/1 integers compared with 0. Keras'
  Masking layer asks whether any feature of a frame is not the mask value
  with one; on Vulkan every frame came out masked (the recurrent layer after
  it never left its initial state).
"""
from __future__ import annotations

import re


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
