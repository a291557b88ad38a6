"""Reference outputs and IREE runs shared by the tests."""
from __future__ import annotations

import numpy as np


def compile_with_iree(mlir_text: str, cpu: str = "host"):
    """Compile for llvm-cpu (IREE's default execution model) and load it in
    IREE's own Python runtime (local-sync); returns the module's functions.

    Results alias memory the runtime reuses: copy every one (tf-import-notes §7.3).
    """
    import iree.compiler as ic
    import iree.runtime as rt

    vmfb = ic.compile_str(mlir_text, target_backends=["llvm-cpu"], input_type="stablehlo",
                          extra_args=[f"--iree-llvmcpu-target-cpu={cpu}"])
    ctx = rt.SystemContext(config=rt.Config("local-sync"))
    vm_module = rt.VmModule.copy_buffer(ctx.instance, vmfb)
    ctx.add_vm_module(vm_module)
    return ctx.modules[vm_module.name]


def run_steps(module, x: np.ndarray) -> np.ndarray:
    # Copy each result: iree.runtime reuses result memory (tf-import-notes §7.3).
    return np.stack([module.step(np.ascontiguousarray(x[:, t])).to_host().copy()
                     for t in range(x.shape[1])])
