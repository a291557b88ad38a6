"""verify's reference for Keras models with several streamed inputs: one run
on the whole streams where the stream is causal (verify/keras_multi_reference.py),
the same references as a model call per step on each prefix, which took
minutes for 200 steps."""
from __future__ import annotations

import numpy as np
import pytest

from tfaot.program import StreamInfo
from tfaot.verify import keras_multi_reference as multi

STEPS = 40  # (the per-step references are the slow side: one call per prefix)


def _two_stream_model(kind: str):
    import keras
    from keras import layers as L

    keras.utils.set_random_seed(3)
    a, b = keras.Input((None, 3)), keras.Input((None, 2))
    x = L.Concatenate()([a, b])
    if kind == "gru":
        y = L.TimeDistributed(L.Dense(2))(L.GRU(6, return_sequences=True)(x))
    elif kind == "strided":  # 2 frames a step: one output frame a step from step 1
        y = L.Conv1D(3, 4, strides=2)(x)
    elif kind == "transposed":  # 2 output frames a step, the last 2 partial sums: late
        y = L.Conv1DTranspose(3, 4, strides=2)(x)
    else:  # each frame sees the frames after it: not a causal stream
        y = L.Bidirectional(L.GRU(4, return_sequences=True))(x)
    return keras.Model([a, b], y)


def _references(model, p: int):
    rng = np.random.default_rng(0)
    xs = [rng.normal(size=(STEPS, 1, p, c)).astype(np.float32) if p > 1 else
          rng.normal(size=(STEPS, 1, c)).astype(np.float32) for c in (3, 2)]
    # (the strided one's first step has no output frame: a library's stream
    # starts there, one step later)
    late = model.layers[-1].__class__.__name__ == "Conv1DTranspose"
    stream = StreamInfo(mode="prefix", time_axis=1, frames_per_step=p, first_valid_step=p - 1,
                        output_frames=(2,) * late, output_latency=(2,) * late)
    shape = (1, *(2,) * late, int(model.outputs[0].shape[-1]))
    return multi.keras_multi_input_reference(model, xs, [True, True], stream, [shape])[0]


@pytest.mark.parametrize("kind,p", [("gru", 1), ("strided", 2), ("transposed", 1),
                                    ("bidirectional", 1)])
def test_one_run_gives_the_per_step_references(monkeypatch, kind, p):
    """The references from one run equal those of one call per prefix, the
    undefined steps too, also for an output 2 frames late (verify refused
    those with several inputs); a model that is not causal (a bidirectional
    GRU) fails the prefix checks and gets the per-step calls."""
    model = _two_stream_model(kind)
    calls = []
    one_run = multi._one_run
    monkeypatch.setattr(multi, "_one_run",
                        lambda *a: calls.append(one_run(*a)) or calls[-1])
    fast = _references(model, p)
    assert (calls[0] is None) == (kind == "bidirectional")
    monkeypatch.setattr(multi, "_one_run", lambda *a: None)
    slow = _references(model, p)
    np.testing.assert_array_equal(np.ma.getmaskarray(fast), np.ma.getmaskarray(slow))
    np.testing.assert_allclose(np.ma.filled(fast, 0), np.ma.filled(slow, 0), rtol=0, atol=1e-6)
    assert np.ma.getmaskarray(fast)[:p - 1].all() and not np.ma.getmaskarray(fast)[p - 1:].any()


def test_verify_checks_a_late_output_of_two_streams(tmp_path):
    """Two streams into an uncropped transposed convolution (2 frames a
    step, 2 frames late): verify refused the library ("does not check such
    an output in a model of several inputs yet"); it now compares it with
    Keras over 200 steps, and a library with another model's weights fails."""
    from tfaot.cli import main

    model = _two_stream_model("transposed")
    model.save(tmp_path / "m.keras")
    out = tmp_path / "lib"
    assert main(["build", str(tmp_path / "m.keras"), "-o", str(out), "-q"]) == 0
    assert main(["verify", str(tmp_path / "m.keras"), str(out)]) == 0
    model.layers[-1].set_weights([w + 0.01 for w in model.layers[-1].get_weights()])
    model.save(tmp_path / "other.keras")
    assert main(["verify", str(tmp_path / "other.keras"), str(out)]) == 1
