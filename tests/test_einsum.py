"""``tf.einsum`` as a product (compiler/lower/einsum.py): TensorFlow's
converter leaves it a ``stablehlo.einsum`` that no rewrite of tfaot read, so
the weights of a SavedModel's ``tf.einsum("btf,fg->btg", x, w)`` stayed
with IREE's kernels, in f32 under --weights-dtype=int8 (the build warned
that the model had no matrix). Each einsum written as a dot_general against
numpy through IREE, and the SavedModel through the built library against
TensorFlow.
"""
from __future__ import annotations

import json

import numpy as np
import pytest

from reference import compile_with_iree
from tfaot.cli import main
from tfaot.lower.einsum import dot_plan, einsums_as_dot_generals

# config, lhs shape, rhs shape: a dense layer over a sequence, attention's
# scores and values, a transposed right side, an output in another order
# (a transpose after), a dot product and an outer product.
PRODUCTS = [
    ("btf,fg->btg", (2, 3, 5), (5, 4)),
    ("bhqd,bhkd->bhqk", (1, 2, 3, 4), (1, 2, 5, 4)),
    ("bqk,bkd->bqd", (2, 3, 4), (2, 4, 5)),
    ("ij,kj->ik", (3, 4), (5, 4)),
    ("bqk,bkd->dbq", (2, 3, 4), (2, 4, 5)),
    ("i,i->", (6,), (6,)),
    ("i,j->ji", (3,), (4,)),
]


def _module(config: str, lhs: tuple, rhs: tuple) -> str:
    out = np.einsum(config, np.zeros(lhs), np.zeros(rhs)).shape

    def t(shape):
        return "tensor<" + "".join(f"{d}x" for d in shape) + "f32>"

    return f"""module {{
  func.func @product(%a: {t(lhs)}, %b: {t(rhs)}) -> {t(out)} {{
    %y = stablehlo.einsum %a, %b, config = "{config}" : ({t(lhs)}, {t(rhs)}) -> {t(out)}
    return %y : {t(out)}
  }}
}}
"""


def _rewritten(text: str) -> tuple[str, int]:
    from iree.compiler import ir

    with ir.Context():
        module = ir.Module.parse(text)
        count = einsums_as_dot_generals(module.body.operations[0])
        return str(module), count


@pytest.mark.parametrize("config, lhs, rhs", PRODUCTS)
def test_an_einsum_product_is_a_dot_general_with_numpys_values(config, lhs, rhs):
    text, count = _rewritten(_module(config, lhs, rhs))
    assert count == 1 and "stablehlo.einsum" not in text and "dot_general" in text
    rng = np.random.default_rng(len(config))
    a, b = (rng.normal(size=s).astype(np.float32) for s in (lhs, rhs))
    got = compile_with_iree(text, cpu="generic").product(a, b).to_host()
    np.testing.assert_allclose(got, np.einsum(config, a, b), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("config", ["ii,ij->ij", "ij,jk->i", "...i,ij->...j", "ij->ji"])
def test_einsums_that_are_not_one_product_stay(config):
    """A diagonal, a sum over an axis of one side, an ellipsis, one operand."""
    assert dot_plan(config) is None


def test_an_einsum_layer_of_a_saved_model_gets_int8_weights(tmp_path, capsys):
    import tensorflow as tf

    rng = np.random.default_rng(0)
    w = tf.constant((rng.normal(size=(201, 32)) / 14).astype(np.float32))
    v = tf.constant((rng.normal(size=(32, 8)) / 6).astype(np.float32))

    class Model(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([1, None, 201], tf.float32, name="x")])
        def __call__(self, x):
            return {"y": tf.einsum("btg,gd->btd", tf.tanh(tf.einsum("btf,fg->btg", x, w)), v)}

    model = Model()
    path = tmp_path / "einsum"
    tf.saved_model.save(model, str(path), signatures=model.__call__)
    out = tmp_path / "lib"
    assert main(["-q", "build", str(path), "-o", str(out), "--weights-dtype", "int8"]) == 0
    assert "no matrix" not in capsys.readouterr().err
    manifest = json.loads((out / "einsum.json").read_text())
    assert manifest["int8_layers"] == 1, manifest  # (the 32 x 8 one is under 1024 weights)
    assert main(["verify", str(path), str(out), "--steps", "120"]) == 0
    assert ": ok" in capsys.readouterr().out
