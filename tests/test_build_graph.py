"""Graph formats through `tfaot build` and the built .so, checked by `tfaot verify`.

The reference is TensorFlow running the original graph or SavedModel on the
whole sequence (tfaot.verify.GraphReference), not the step program.
"""
from pathlib import Path

import pytest

import graph_models as gm
from tfaot.pipeline import BuildOptions, GraphOptions, Progress, build_model
from tfaot.verify import verify

FIXTURES = Path(__file__).parent / "fixtures"
STEPS = 120


def _keras(kind, units, return_sequences, dense=3):
    return gm.keras_model(kind, units, 8, None, return_sequences, dense, seed=2)


def _make(case: str, tmp: Path) -> Path:
    """Writes the model file of one test case; returns its path."""
    if case == "pb_while_lstm2_last":
        path = tmp / "m.pb"
        gm.write_graph_def(gm.freeze_keras(_keras("lstm", (16, 12), False), None, 8, False),
                           path, text=False)
    elif case == "pbtxt_v1cf_gru_seq":
        path = tmp / "m.pbtxt"
        gm.write_graph_def(gm.freeze_keras(_keras("gru", (12,), True, 0), None, 8, True),
                           path, text=True)
    elif case == "pb_fixed_T_simplernn_seq":
        path = tmp / "m.pb"
        gm.write_graph_def(gm.freeze_keras(_keras("simplernn", (10,), True), STEPS, 8, False),
                           path, text=False)
    elif case == "savedmodel_export_lstm_gru":
        import keras

        model = _keras("lstm", (12,), True)
        model = keras.Sequential([keras.Input((None, 8)), model.layers[0],
                                  keras.layers.GRU(6), keras.layers.Dense(3)])
        path = tmp / "exported"
        model.export(path)
    elif case == "savedmodel_tf_save_gru":
        import tensorflow as tf

        path = tmp / "tf_saved"
        tf.saved_model.save(_keras("gru", (16,), False), str(path))
    elif case == "savedmodel_v1_tf1_loop":
        path = gm.save_tf1_saved_model(tmp / "v1")
    else:
        path = FIXTURES / {"tf1_dynamic_rnn": "tf1_dynamic_rnn.pb",
                           "keras2_savedmodel": "keras2_savedmodel"}[case]
    return path


CASES = ["pb_while_lstm2_last", "pbtxt_v1cf_gru_seq", "pb_fixed_T_simplernn_seq",
         "savedmodel_export_lstm_gru", "savedmodel_tf_save_gru", "savedmodel_v1_tf1_loop",
         "tf1_dynamic_rnn", "keras2_savedmodel"]


@pytest.mark.parametrize("case", CASES)
def test_built_library_matches_tensorflow(case, tmp_path):
    model_path = _make(case, tmp_path)
    out = build_model(str(model_path), BuildOptions(out_dir=tmp_path / "lib"), Progress(False)).path
    (result,) = verify(str(model_path), out, steps=STEPS, seed=1, tol=1e-5,
                       graph_options=GraphOptions())
    print(f"{case}: .so vs TensorFlow max abs error {result.max_abs_error:.3g} "
          f"over {result.steps} steps")
    assert result.steps == STEPS
    assert result.ok, result


# The full matrix of graph forms x cell kinds x depth x head, through the .so.
# About 48 builds (~4 minutes on 2 cores): run with `pytest -m slow`.
FORMS = ["pb_while", "pbtxt_v1cf", "savedmodel_export", "savedmodel_tf_save"]
MATRIX = [(form, kind, layers, head) for form in FORMS for kind in ("lstm", "gru", "simplernn")
          for layers in (1, 2) for head in (True, False)]


def _write_form(form: str, model, tmp: Path) -> Path:
    import tensorflow as tf

    if form == "pb_while":
        path = tmp / "m.pb"
        gm.write_graph_def(gm.freeze_keras(model, None, 8, False), path, text=False)
    elif form == "pbtxt_v1cf":
        path = tmp / "m.pbtxt"
        gm.write_graph_def(gm.freeze_keras(model, None, 8, True), path, text=True)
    elif form == "savedmodel_export":
        path = tmp / "exported"
        model.export(path)
    else:
        path = tmp / "saved"
        tf.saved_model.save(model, str(path))
    return path


@pytest.mark.slow
@pytest.mark.parametrize("form,kind,layers,head", MATRIX,
                         ids=[f"{f}-{k}-{n}x-{'dense' if h else 'nohead'}"
                              for f, k, n, h in MATRIX])
def test_graph_matrix_through_library(form, kind, layers, head, tmp_path):
    units = (12, 10)[:layers]
    # Two-layer models end in a last-output layer; one-layer ones return sequences.
    model = gm.keras_model(kind, units, 8, None, layers == 1, 3 if head else 0, seed=layers)
    model_path = _write_form(form, model, tmp_path)
    out = build_model(str(model_path), BuildOptions(out_dir=tmp_path / "lib"), Progress(False)).path
    (result,) = verify(str(model_path), out, steps=STEPS, seed=1, tol=1e-5,
                       graph_options=GraphOptions())
    print(f"{form} {kind} {layers}x {'dense' if head else 'nohead'}: "
          f"max abs error {result.max_abs_error:.3g} over {result.steps} steps")
    assert result.steps == STEPS and result.ok, result
