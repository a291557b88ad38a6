"""The same model lowers to the same module in every process.

The micro-kernel rewrite kept a set of the values computed from constants
(hashed by address) while it erased and created ops: a new value at an
erased one's address was taken for a constant, and which of EfficientNetB0's
convolutions stayed with IREE changed from build to build (two builds of
one model: contexts of 1.9 MB and 0.9 MB). Lowered here in processes with
different string hashes and allocation patterns, the modules must match.
"""
from __future__ import annotations

import os
import subprocess
import sys

LOWER = """
import hashlib, sys
from pathlib import Path
from tfaot.backend.compile import constant_bytes
from tfaot.lower.passes import lower_for_target
from tfaot.target_options import make_target
text = Path(sys.argv[1]).read_text()
target = make_target("cpu", "x86_64-unknown-linux-gnu", "x86-64-v3").for_weights(
    constant_bytes(text))
lowered, _ = lower_for_target(text, "net", target)
print(lowered.count("stablehlo.convolution"), hashlib.sha256(lowered.encode()).hexdigest())
"""


def test_efficientnet_lowers_the_same_in_every_process(tmp_path):
    import keras

    from tfaot.lower.mlir_import import import_program
    from tfaot.streamify_keras import streamify_keras

    keras.utils.set_random_seed(0)
    model = keras.applications.EfficientNetB0(input_shape=(64, 64, 3), weights=None, classes=10,
                                              classifier_activation=None)
    path = tmp_path / "net.mlir"
    path.write_text(import_program(streamify_keras(model, "net.keras", "keras")))
    results = set()
    for seed in range(4):
        env = {**os.environ, "PYTHONHASHSEED": str(seed)}
        proc = subprocess.run([sys.executable, "-c", LOWER, path], capture_output=True,
                              text=True, env=env, cwd=tmp_path, timeout=600)
        assert proc.returncode == 0, proc.stderr
        results.add(proc.stdout.split()[-2] + " " + proc.stdout.split()[-1])
    assert len(results) == 1, results
