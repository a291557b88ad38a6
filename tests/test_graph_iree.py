"""Graph frontend end to end through the import stage and IREE's Python runtime."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import graph_models as gm

FIXTURES = Path(__file__).parent / "fixtures"
TOL = 1e-5


def _iree_steps(program, x):
    from reference import compile_with_iree

    from tfaot.lower.mlir_import import import_program

    module = compile_with_iree(import_program(program))
    return np.stack([module.step(np.ascontiguousarray(x[:, t])).to_host().copy()
                     for t in range(x.shape[1])])


@pytest.mark.parametrize("case", ["keras_while_pb", "keras_v1cf_pbtxt", "tf1_dynamic_rnn",
                                  "keras2_savedmodel"])
def test_iree_matches_tensorflow(case, tmp_path):
    pytest.importorskip("iree.runtime")
    from tfaot.frontend.load_graph import load_graph
    from tfaot.streamify_graph import streamify_graph

    if case.startswith("keras_"):
        model = gm.keras_model("lstm", (16,), 8, None, True, 0, seed=4)
        model = gm.keras_model("gru", (12,), 8, None, False, 3, seed=4) \
            if case == "keras_v1cf_pbtxt" else model
        path = tmp_path / ("m.pbtxt" if "pbtxt" in case else "m.pb")
        gm.write_graph_def(gm.freeze_keras(model, 100, 8, "v1cf" in case), path,
                           text="pbtxt" in case)
    else:
        path = FIXTURES / ("tf1_dynamic_rnn.pb" if case == "tf1_dynamic_rnn"
                           else "keras2_savedmodel")
    loaded = load_graph(path)
    program = streamify_graph(loaded)
    F = program.signature.inputs[0].shape[-1]
    x = np.random.default_rng(9).standard_normal((1, 100, F)).astype(np.float32)
    ref = gm.run_graph_def(loaded.graph_def, loaded.inputs[0].name, loaded.outputs[0], x)
    ys = _iree_steps(program, x)  # (T, 1, out)
    err = np.abs(ys[:, 0] - ref[0]).max() if ref.ndim == 3 else np.abs(ys[-1] - ref).max()
    assert err <= TOL, f"{case}: IREE vs TensorFlow max abs error {err}"
    tf_steps = gm.stream(program, x)
    assert np.abs(ys - tf_steps).max() <= TOL


def test_bool_constants_read_the_same_packed_or_not():
    """TensorFlow prints an i1 constant's hex packed 8 per byte (LSB first);
    IREE's parser wants one byte per element: both become the same list."""
    from tfaot.lower.mlir_import import unpack_bool_constants

    mask = np.tril(np.ones((3, 4), bool))
    packed = np.packbits(mask.ravel(), bitorder="little").tobytes().hex().upper()
    bytewise = mask.astype(np.uint8).tobytes().hex().upper()
    want = ("dense<[[true, false, false, false], [true, true, false, false], "
            "[true, true, true, false]]> : tensor<3x4xi1>")
    for data in (packed, bytewise):
        text = f'%c = stablehlo.constant dense<"0x{data}"> : tensor<3x4xi1>'
        assert unpack_bool_constants(text) == f"%c = stablehlo.constant {want}"
    other = 'dense<"0x0100"> : tensor<2xi8>'
    assert unpack_bool_constants(other) == other
