"""Writes inputs.h for main.c: STEPS frames of the model's step input
(seeded random values; a real firmware reads a microphone or a sensor), and
the same frames as frames.npy beside it, for comparing with the host.

    python make_inputs.py build/kws/kws.json 20 build/inputs.h
"""
import json
import sys
from pathlib import Path

import numpy as np


def main(manifest_path: str, steps: str, header_path: str) -> None:
    manifest = json.loads(Path(manifest_path).read_text())
    inputs = manifest["inputs"]
    if len(inputs) != 1 or inputs[0]["dtype"] != "float32":
        sys.exit(f"make_inputs.py: {manifest_path}: main.c feeds one float32 input, "
                 f"the model has {[(i['name'], i['dtype']) for i in inputs]}")
    size = int(np.prod(inputs[0]["shape"]))
    frames = np.random.default_rng(0).standard_normal((int(steps), size)).astype(np.float32)
    write_header(frames, Path(header_path))
    np.save(Path(header_path).with_name("frames.npy"), frames)


def write_header(frames: np.ndarray, path: Path) -> None:
    """inputs.h: ``STEPS`` and ``inputs[STEPS][size]``, one row per frame
    (the frames' floats written exactly, as repr does)."""
    frames = np.asarray(frames, np.float32).reshape(len(frames), -1)
    rows = ",\n".join("{" + ", ".join(f"{float(v)!r}f" for v in frame) + "}" for frame in frames)
    path.write_text(f"#define STEPS {len(frames)}\n"
                    f"static const float inputs[STEPS][{frames.shape[1]}] = {{\n{rows}\n}};\n")


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    main(*sys.argv[1:])
