"""GPU targets: a reduction across rows is kept out of its consumers' kernel.

IREE's SPIR-V code for a reduction over an axis other than the innermost,
fused with an elementwise consumer of its result (BC-ResNet's broadcast
residual: a frame plus its mean over frequency), sums each column into
workgroup memory with one thread per column, then lets other threads read
every column's sum with no barrier in between (iree-base-compiler 3.13.0,
vulkan-spirv): on lavapipe half the channels read the sums of the previous
step. With an ``stablehlo.optimization_barrier`` on the reduction's result
the reduction is a dispatch of its own, whose result the next dispatch
reads after the pipeline barrier the runtime puts between dispatches
(runtime_shim/tfrt_vulkan.c). Reductions over the innermost axis (a layer
norm's, a softmax's) take another code path, which is right, and stay
fused.
"""
from __future__ import annotations


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


def _fence(op) -> bool:
    from iree.compiler import ir

    if not _reduces_rows(op):
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
