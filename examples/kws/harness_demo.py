"""Drive the built keyword spotter from Python through tfaot.harness.

    tfaot build kws.keras -o build/kws
    python harness_demo.py build/kws [frames.f32]

Feeds one synthetic keyword (or the float32 frames of a file) frame by frame,
prints the best keyword per frame, then shows state stitching: the state
saved half-way and restored replays the second half exactly.
"""
import argparse
import sys
from pathlib import Path

import numpy as np

from tfaot import harness


def frames_to_feed(path, features):
    if path:
        return np.fromfile(path, np.float32).reshape(-1, 1, features)
    sys.path.insert(0, str(Path(__file__).parent))
    from make_model import synthetic_keywords  # numpy only

    x, labels = synthetic_keywords(1, np.random.default_rng(0))
    print(f"synthetic keyword {labels[0]}")
    return x[0][:, None, :]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("build_dir", help="folder written by `tfaot build`")
    parser.add_argument("frames", nargs="?", help="float32 frames (default: synthetic)")
    args = parser.parse_args()

    model = harness.load(args.build_dir)  # loads libkws.so, calls kws_init
    xs = frames_to_feed(args.frames, model.input_shape[-1])
    ys = []
    for t, x in enumerate(xs):
        y = model.step(x)[0]
        ys.append(y)
        print(f"frame {t}: keyword {int(y.argmax())} (p={y.max():.3f})")
    print("final:", " ".join(f"{v:.9g}" for v in ys[-1]))

    half = len(xs) // 2
    model.reset()
    model.step_n(xs[:half])
    saved = model.get_state()          # 4 arrays: lstm1 h, c, lstm2 h, c
    first = model.step_n(xs[half:])
    model.set_state(saved)
    again = model.step_n(xs[half:])
    same = np.array_equal(first, again)
    print(f"state of {model.state_bytes} bytes restored at frame {half}: replay identical = {same}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
