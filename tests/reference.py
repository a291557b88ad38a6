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


def conv_module(x_shape, kernel: np.ndarray, y_shape, layout: str, window: str,
                groups: int = 1) -> str:
    """A function @f(x) -> y of one ``stablehlo.convolution`` with the
    constant ``kernel``: ``layout`` its dim_numbers, ``window`` the text
    inside its window = {...}."""
    def ty(shape):
        return "tensor<" + "x".join(map(str, shape)) + "xf32>"

    values = np.ascontiguousarray(kernel, "<f4").tobytes().hex().upper()
    return f"""func.func @f(%x: {ty(x_shape)}) -> {ty(y_shape)} {{
  %w = stablehlo.constant dense<"0x{values}"> : {ty(kernel.shape)}
  %y = stablehlo.convolution(%x, %w) dim_numbers = {layout}, window = {{{window}}} {{batch_group_count = 1 : i64, feature_group_count = {groups} : i64}} : ({ty(x_shape)}, {ty(kernel.shape)}) -> {ty(y_shape)}
  return %y : {ty(y_shape)}
}}"""


def same_as_before(text: str, rewritten: str, x: np.ndarray) -> None:
    """IREE's runtime gives the rewritten module what it gives the original."""
    want = compile_with_iree(text, cpu="generic").f(x).to_host()
    got = compile_with_iree(rewritten, cpu="generic").f(x).to_host()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
