"""A graph computed in float16 (a TF1 cell or a tf.Module with dtype
float16): its state is an f16 global. The reset function's mask was typed
f16 (stablehlo.is_finite must give i1: iree-compile refused the module) and
a non-uniform initial value was written as f32 bytes; verify's default
tolerance was f32's, for two f16 computations (found by sweep 7)."""
from __future__ import annotations

import re

import numpy as np

from tfaot.cli import main
from tfaot.lower.mlir_import import _dense, _reset_func
from tfaot.program import StateInfo


def _half_scan(path):
    import tensorflow as tf

    class Half(tf.Module):
        def __init__(self):
            rng = np.random.default_rng(0)
            self.w = tf.constant(rng.normal(size=(8, 6)).astype(np.float16))
            self.u = tf.constant((rng.normal(size=(6, 6)) * 0.3).astype(np.float16))

        @tf.function(input_signature=[tf.TensorSpec([1, None, 8], tf.float16, name="x")])
        def run(self, x):
            hs = tf.scan(lambda h, xi: tf.tanh(xi @ self.w + h @ self.u),
                         tf.transpose(x, [1, 0, 2]), initializer=tf.zeros([1, 6], tf.float16))
            return {"h": tf.transpose(hs, [1, 0, 2])}

    module = Half()
    tf.saved_model.save(module, str(path), signatures={"serving_default": module.run})


def test_float16_graph_builds_and_matches_tensorflow(tmp_path, capsys):
    model, out = tmp_path / "half", tmp_path / "lib"
    _half_scan(model)
    assert main(["build", str(model), "-o", str(out), "-q"]) == 0
    capsys.readouterr()
    assert main(["verify", str(model), str(out), "--steps", "150"]) == 0
    line = capsys.readouterr().out.strip()
    assert re.fullmatch(r"h: max abs error \S+ over 150 steps \(tolerance 0\.005\): ok", line)


def test_reset_of_a_half_state_masks_in_i1_and_writes_half_bytes():
    state = StateInfo("s", "float16", (1, 3), initial=np.array([[1, 2, 3]], np.float16))
    text = _reset_func([state])
    assert "stablehlo.is_finite %old0 : (tensor<1x3xf16>) -> tensor<1x3xi1>" in text
    assert _dense(state.initial, "float16") == 'dense<"0x003C00400042">'


def test_two_float16_inputs_verify(tmp_path, capsys):
    """A SavedModel of two float16 inputs: the harness's ctypes twin of the
    inputs struct had no float16 field type, and verify died with an
    internal error (NotImplementedError) on a library that was right."""
    import tensorflow as tf

    class Mix(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([1, 3], tf.float16, name="a"),
                                      tf.TensorSpec([1, 3], tf.float16, name="b")])
        def __call__(self, a, b):
            return {"y": tf.tanh(a * b + a)}

    module = Mix()
    path = tmp_path / "mix"
    tf.saved_model.save(module, str(path), signatures={"serving_default": module.__call__})
    assert main(["build", str(path), "-o", str(tmp_path / "lib"), "-q"]) == 0
    assert main(["verify", str(path), str(tmp_path / "lib"), "--steps", "100"]) == 0
    assert capsys.readouterr().out.strip().endswith(": ok")
