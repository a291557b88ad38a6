"""A matrix product of several streams over many inputs is summed in chunks
(lower/long_products.py): in one running sum per output, the kernels'
result drifted 4x further from the exact one than TensorFlow's, and verify
of TensorFlow's speech_commands 'conv' model failed at --streams 2."""
from __future__ import annotations

import numpy as np

from tfaot import harness
from tfaot.lower.long_products import CHUNK, LONG_PRODUCT
from tfaot.pipeline import BuildOptions, Progress, build_model

#: inputs of the product: past LONG_PRODUCT, several chunks
K = 30000
STEPS = 100


def test_a_long_product_of_two_streams_is_close_to_the_exact_one(tmp_path):
    """Against the float64 product over 100 steps of both streams, through
    the built library: within 2e-6 of the outputs' size (in chunks: 1.2e-6;
    the one running sum: 6.2e-6; numpy's float32 product: 4.1e-7)."""
    import keras

    assert K > LONG_PRODUCT and K > 2 * CHUNK
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((None, K)), keras.layers.Dense(12)])
    model.save(tmp_path / "wide.keras")
    out = build_model(str(tmp_path / "wide.keras"),
                      BuildOptions(out_dir=tmp_path / "lib", streams=2), Progress(False))
    lib = harness.load(out.path)
    w, b = (v.astype(np.float64) for v in model.get_weights())
    # (positive inputs, as after a ReLU: the sum grows with K, its rounding too)
    xs = np.abs(np.random.default_rng(1).normal(size=(STEPS, *lib.input_shape)))
    xs = xs.astype(np.float32)
    exact = xs.astype(np.float64).reshape(STEPS, 2, K) @ w + b
    got = lib.step_n(xs).reshape(exact.shape)
    assert np.abs(got - exact).max() <= 2e-6 * np.abs(exact).max()
