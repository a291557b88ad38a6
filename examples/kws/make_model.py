"""Train a small keyword-spotting-style model and save it as kws.keras.

40 log-mel-like features per frame, 2 x LSTM(128), Dense(12) softmax: the
shape of a typical streaming keyword spotter. The data is synthetic (each
keyword is a distinct spectral pattern that sweeps over time, plus noise),
so the script needs no download and finishes in well under a minute:

    python examples/kws/make_model.py [-o examples/kws/kws.keras]
"""
import argparse
import os
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402

FEATURES, KEYWORDS, FRAMES = 40, 12, 49


def synthetic_keywords(n: int, rng: np.random.Generator):
    """Sequences (n, FRAMES, FEATURES) and their keyword labels (n,)."""
    labels = rng.integers(0, KEYWORDS, n)
    t = np.arange(FRAMES)[:, None]
    f = np.arange(FEATURES)[None, :]
    x = rng.normal(0, 0.3, (n, FRAMES, FEATURES))
    for i, k in enumerate(labels):
        centre = (3 * k + t * (k % 4 - 1.5) / 6) % FEATURES
        x[i] += np.exp(-0.5 * ((f - centre) / 2.0) ** 2)
    return x.astype(np.float32), labels


def build_model():
    import keras

    return keras.Sequential([
        keras.Input((None, FEATURES), batch_size=None, name="frames"),
        keras.layers.LSTM(128, return_sequences=True, name="lstm1"),
        keras.layers.LSTM(128, return_sequences=True, name="lstm2"),
        keras.layers.Dense(KEYWORDS, activation="softmax", name="keyword"),
    ], name="kws")


def main() -> None:
    import keras

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-o", "--output", default=str(Path(__file__).with_name("kws.keras")))
    parser.add_argument("--epochs", type=int, default=2)
    args = parser.parse_args()

    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    x, y = synthetic_keywords(512, rng)
    # Per-frame targets: the keyword label at every frame (streaming output).
    y_frames = np.repeat(y[:, None], FRAMES, axis=1)
    model = build_model()
    model.compile("adam", "sparse_categorical_crossentropy", metrics=["accuracy"])
    model.fit(x, y_frames, batch_size=32, epochs=args.epochs, verbose=2)
    model.save(args.output)
    print(f"saved {args.output} ({model.count_params():,} parameters)")


if __name__ == "__main__":
    main()
