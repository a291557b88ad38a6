"""Reference outputs and IREE runs shared by the tests."""
from __future__ import annotations

import numpy as np


def compile_with_iree(mlir_text: str):
    """Compile for llvm-cpu (IREE's default execution model) and load it."""
    import iree.compiler as ic
    import iree.runtime as rt

    vmfb = ic.compile_str(mlir_text, target_backends=["llvm-cpu"], input_type="stablehlo",
                          extra_args=["--iree-llvmcpu-target-cpu=host"])
    config = rt.Config("local-sync")
    ctx = rt.SystemContext(config=config)
    ctx.add_vm_module(rt.VmModule.copy_buffer(ctx.instance, vmfb))
    return ctx.modules.streaming


def run_steps(module, x: np.ndarray) -> np.ndarray:
    # Copy each result: iree.runtime reuses result memory (tf-import-notes §7.3).
    return np.stack([module.step(np.ascontiguousarray(x[:, t])).to_host().copy()
                     for t in range(x.shape[1])])
