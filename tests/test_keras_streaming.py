"""Keras-level streaming: import, compile with IREE, >= 100 steps vs Keras."""
import re

import numpy as np
import pytest

import keras_models
from reference import compile_with_iree, run_steps
from tfaot.lower.mlir_import import import_program
from tfaot.streamify_keras import streamify_keras
from tfaot.verify import keras_sequence_reference

STEPS = 120
TOL = 1e-5


def _program(name):
    model = keras_models.build(name)
    return model, streamify_keras(model, f"{name}.keras", "keras")


@pytest.mark.slow  # (test_build_keras checks the same models through the library)
@pytest.mark.parametrize("name", sorted(keras_models.STREAMING))
def test_streaming_matches_keras(name):
    model, program = _program(name)
    mlir_text = import_program(program)
    module = compile_with_iree(mlir_text)
    x = np.random.default_rng(7).normal(size=(1, STEPS, keras_models.F)).astype(np.float32)
    got = run_steps(module, x)
    want = keras_sequence_reference(model, x)
    err = float(np.abs(got - want).max())
    print(f"{name}: max abs error {err:.3g} over {STEPS} steps")
    assert err <= TOL
    # reset() brings back the initial state: the first steps repeat exactly.
    module.reset()
    again = run_steps(module, x[:, :5])
    np.testing.assert_array_equal(again, got[:5])


@pytest.mark.parametrize("name", sorted(keras_models.STATELESS))
def test_stateless_step_is_one_inference(name):
    model, program = _program(name)
    assert program.signature.states == ()
    mlir_text = import_program(program)
    assert "ml_program.global" not in mlir_text
    module = compile_with_iree(mlir_text)
    rng = np.random.default_rng(11)
    shape = program.signature.inputs[0].shape
    worst = 0.0
    for _ in range(100):
        x = rng.normal(size=shape).astype(np.float32)
        got = module.step(x).to_host().copy()
        worst = max(worst, float(np.abs(got - np.asarray(model(x))).max()))
    print(f"{name}: max abs error {worst:.3g} over 100 inferences")
    assert worst <= TOL


def test_module_shape():
    """Only allowed dialects; one private mutable global per state, before the functions."""
    model, program = _program("lstm_impl2_stacked_last")
    text = import_program(program)
    ops = set(re.findall(r"\b([a-z_]+)\.[a-z_]+\b(?= |\()", text))
    assert ops <= {"func", "stablehlo", "ml_program"}, ops
    globals_ = re.findall(r"ml_program\.global private mutable @(\w+)", text)
    assert len(globals_) == len(program.signature.states) == 4
    first_func = text.index("func.func")
    assert all(text.index(f"@{g}(") < first_func for g in globals_)
    assert "func.func @step(" in text and "func.func @reset()" in text
    assert "ml_program.global public" not in text
    names = [s.name for s in program.signature.states]
    first, second = (layer.name for layer in model.layers[:2])
    assert names == [f"{first}/h", f"{first}/c", f"{second}/h", f"{second}/c"]


def _dots(mlir_text: str) -> list[tuple[int, int]]:
    """(rows, columns) of each constant-matrix matvec ``dot(W, v)``."""
    return [(int(n), int(k)) for n, k in re.findall(
        r"stablehlo\.dot %\S+, %\S+ : \(tensor<(\d+)x(\d+)xf32>, tensor<\d+x1xf32>\)",
        mlir_text)]


def test_a_cells_two_products_become_one_matvec():
    """``W . x + U . h`` is one product of ``[W U]`` and ``[x; h]``
    (lower/matvec_sums.py): a SimpleRNN(16) over 8 features has one 16 x 24
    matvec and the head; the step still matches Keras."""
    import keras

    keras.utils.set_random_seed(4)
    model = keras.Sequential([keras.Input((None, 8)), keras.layers.SimpleRNN(16),
                              keras.layers.Dense(2)])
    program = streamify_keras(model, "rnn.keras", "keras")
    mlir_text = import_program(program)
    assert sorted(_dots(mlir_text)) == [(2, 16), (16, 24)]
    module = compile_with_iree(mlir_text)
    x = np.random.default_rng(3).normal(size=(1, STEPS, 8)).astype(np.float32)
    want = np.stack([model(x[:, :t + 1]).numpy()[0] for t in range(STEPS)])
    assert float(np.abs(run_steps(module, x)[:, 0] - want).max()) <= TOL


def test_a_product_used_twice_is_not_joined():
    """``a = W . x``, ``b = U . x``, ``(a + b) * a``: a is needed alone, so
    the sum stays two products."""
    import keras
    from keras import layers as L

    keras.utils.set_random_seed(5)
    x = keras.Input((None, 4))
    a = L.Dense(6, use_bias=False)(x)
    b = L.Dense(6, use_bias=False)(x)
    model = keras.Model(x, L.Multiply()([L.Add()([a, b]), a]))
    program = streamify_keras(model, "two.keras", "keras")
    mlir_text = import_program(program)
    assert sorted(_dots(mlir_text)) == [(6, 4), (6, 4)]
    module = compile_with_iree(mlir_text)
    xs = np.random.default_rng(3).normal(size=(1, STEPS, 4)).astype(np.float32)
    np.testing.assert_allclose(run_steps(module, xs)[:, 0], model(xs).numpy()[0], atol=TOL)
