"""Reference outputs and IREE runs shared by the tests."""
from __future__ import annotations

import numpy as np


def keras_stream_reference(model, x: np.ndarray) -> np.ndarray:
    """What step t must return: Keras on the whole sequence x[:, :t+1].

    For a return_sequences output that is full[:, t]. For a last-output
    model, calling Keras once per prefix is slow (a retrace per length), so
    a twin whose recurrent layers return sequences gives every prefix at
    once; it is checked against true prefix calls at a few t and abandoned
    for per-prefix calls if it disagrees.
    """
    full = np.asarray(model(x))
    if full.ndim == 3:
        return np.stack([full[:, t] for t in range(x.shape[1])])
    steps = x.shape[1]
    try:
        twin = np.asarray(_sequence_twin(model)(x))
        per_step = np.stack([twin[:, t] for t in range(steps)])
    except Exception:
        per_step = None
    for t in sorted({0, 9, steps // 2, steps - 1}):
        prefix = np.asarray(model(x[:, : t + 1]))
        if per_step is None or np.abs(per_step[t] - prefix).max() > 1e-6:
            return np.stack([np.asarray(model(x[:, : s + 1])) for s in range(steps)])
    return per_step


def _sequence_twin(model):
    """A copy of model whose last-output recurrent layers return sequences."""
    import keras

    def clone(layer):
        config = layer.get_config()
        if isinstance(layer, keras.layers.RNN):
            config["return_sequences"] = True
        return layer.__class__.from_config(config)

    twin = keras.models.clone_model(model, clone_function=clone)
    twin.set_weights(model.get_weights())
    return twin


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
