"""A recurrent layer called at two places of a model (shared weights) has a
state per call, each with a name of its own (the second was named like the
first before: two "gru/h" in the header and manifest)."""
import json

from tfaot.cli import main


def test_a_shared_gru_keeps_a_named_state_per_call(tmp_path, capsys):
    import keras

    keras.utils.set_random_seed(0)
    x = keras.Input((None, 6))
    gru = keras.layers.GRU(6, return_sequences=True, name="gru")  # (auto names count up)
    twice = gru(keras.layers.Dense(6)(gru(x)))
    keras.Model(x, keras.layers.Dense(3)(twice)).save(tmp_path / "shared.keras")
    assert main(["build", str(tmp_path / "shared.keras"), "-o", str(tmp_path / "lib"),
                 "-q"]) == 0
    manifest = json.loads((tmp_path / "lib" / "shared.json").read_text())
    assert [s["name"] for s in manifest["state"]] == ["gru/h", "gru/h@2"], manifest["state"]
    capsys.readouterr()
    assert main(["verify", str(tmp_path / "shared.keras"), str(tmp_path / "lib")]) == 0
    out = capsys.readouterr().out
    assert "over 200 steps" in out and out.rstrip().endswith("ok"), out
