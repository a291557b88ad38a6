"""An elementwise op with a constant operand whose result is only sliced
is sliced first (compiler/lower/sliced_constants.py): the rewrite, what it
leaves alone and the same bits through IREE. (Every LSTM build takes it,
for its bias add: the model tests check those against TensorFlow.)"""
from __future__ import annotations

import numpy as np
import pytest

from reference import compile_with_iree
from tfaot.lower.mlir_import import parse_or_none
from tfaot.lower.sliced_constants import slice_constant_operands

GATES = 4
UNITS = 8


def _module(users: str, op: str = "add") -> str:
    """``v op bias`` (v a function argument, bias a constant) and ``users``:
    lines that read ``%s``."""
    bias = np.random.default_rng(0).standard_normal((1, GATES * UNITS)).astype("<f4")
    t = f"tensor<1x{GATES * UNITS}xf32>"
    return f"""module {{
  func.func @main(%v: {t}) -> (tensor<1x{UNITS}xf32>, tensor<1x{UNITS}xf32>) {{
    %bias = stablehlo.constant dense<"0x{bias.tobytes().hex().upper()}"> : {t}
    %s = stablehlo.{op} %v, %bias : {t}
{users}
  }}
}}
"""


def _gate(i: int) -> str:
    return (f"    %g{i} = stablehlo.slice %s [0:1, {i * UNITS}:{(i + 1) * UNITS}] : "
            f"(tensor<1x{GATES * UNITS}xf32>) -> tensor<1x{UNITS}xf32>")


#: four gates of the sum, two of them combined: each gate its own slice
SLICED = "\n".join([*(_gate(i) for i in range(GATES)),
                    f"    %a = stablehlo.multiply %g0, %g1 : tensor<1x{UNITS}xf32>",
                    f"    %b = stablehlo.tanh %g2 : tensor<1x{UNITS}xf32>",
                    f"    %c = stablehlo.add %b, %g3 : tensor<1x{UNITS}xf32>",
                    f"    return %a, %c : tensor<1x{UNITS}xf32>, tensor<1x{UNITS}xf32>"])


def _rewrite(text: str) -> tuple[str, int]:
    from iree.compiler import ir

    with ir.Context():
        module = parse_or_none(text)
        assert module is not None
        func = module.body.operations[0]
        count = slice_constant_operands(func)
        assert module.operation.verify()
        return str(module), count


@pytest.mark.parametrize("op", ["add", "subtract", "multiply"])
def test_each_slice_gets_its_own_op(op):
    text, count = _rewrite(_module(SLICED, op))
    assert count == 1
    # one op per gate (besides the users' own), on slices of the argument
    # and of the constant
    assert text.count(f"stablehlo.{op} ") == GATES + SLICED.count(f"stablehlo.{op} ")
    assert text.count("stablehlo.slice %arg0") == GATES
    assert text.count("stablehlo.slice") == 2 * GATES


def test_same_results_through_iree():
    before = compile_with_iree(_module(SLICED), cpu="generic")
    after = compile_with_iree(_rewrite(_module(SLICED))[0], cpu="generic")
    v = np.random.default_rng(1).standard_normal((1, GATES * UNITS)).astype(np.float32)
    for want, got in zip(before.main(v), after.main(v)):
        np.testing.assert_array_equal(got.to_host(), want.to_host())


@pytest.mark.parametrize("users", [
    # one slice: IREE fuses the add into it already
    "\n".join([_gate(0), f"    return %g0, %g0 : tensor<1x{UNITS}xf32>, tensor<1x{UNITS}xf32>"]),
    # a user that is not a slice: the whole sum is needed anyway
    "\n".join([_gate(0), _gate(1), f"    %w = stablehlo.slice %s [0:1, 0:{UNITS}] : "
               f"(tensor<1x{GATES * UNITS}xf32>) -> tensor<1x{UNITS}xf32>",
               f"    %t = stablehlo.tanh %s : tensor<1x{GATES * UNITS}xf32>",
               f"    return %g0, %g1 : tensor<1x{UNITS}xf32>, tensor<1x{UNITS}xf32>"]),
], ids=["one-slice", "not-only-slices"])
def test_left_alone(users):
    original = _module(users)
    text, count = _rewrite(original)
    assert count == 0 and text.count("stablehlo.add") == 1


def test_no_constant_operand_left_alone():
    text = _module(SLICED).replace("%s = stablehlo.add %v, %bias", "%s = stablehlo.add %v, %v")
    assert _rewrite(text)[1] == 0
