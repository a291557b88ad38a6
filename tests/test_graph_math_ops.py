"""Elementwise math ops of frozen graphs stream per frame (streamify_graph
rules.ELEMENTWISE): the trigonometric and hyperbolic family, xlogy and its
kin, truncatemod, lgamma and digamma were refused as ops "tfaot does not
know how it treats the time axis". One graph with each as an output, built
and compared with TensorFlow through the .so by ``tfaot verify`` (200
steps); tan is written out (lower/activations.py expand_tan: IREE's was
2.8e-3 relative off near its poles, and the random inputs reach them).
"""
from __future__ import annotations

import numpy as np

from tfaot.cli import main

OPS = ("tan", "asin", "acos", "sinh", "cosh", "asinh", "acosh", "atanh", "xlogy", "xdivy",
       "xlog1py", "truncatemod", "lgamma", "digamma")


def _outputs(h):
    """Each op of OPS on ``h`` (any real), its input moved into the op's domain."""
    import tensorflow as tf

    inside = tf.tanh(h) * 0.9  # (-1, 1): asin, acos, atanh
    positive = tf.nn.softplus(h) + 0.5
    values = {"tan": tf.math.tan(h * 2.0), "asin": tf.math.asin(inside),
              "acos": tf.math.acos(inside), "sinh": tf.math.sinh(h), "cosh": tf.math.cosh(h),
              "asinh": tf.math.asinh(h), "acosh": tf.math.acosh(1.0 + h * h),
              "atanh": tf.math.atanh(inside), "xlogy": tf.math.xlogy(h, positive),
              "xdivy": tf.math.xdivy(h, positive), "xlog1py": tf.math.xlog1py(h, positive),
              "truncatemod": tf.truncatemod(h, 1.3), "lgamma": tf.math.lgamma(positive),
              "digamma": tf.math.digamma(positive)}
    return [tf.identity(values[name], name=name) for name in OPS]


def test_math_ops_stream_and_match_tensorflow(tmp_path, capsys):
    import tensorflow as tf
    from tensorflow.python.framework.convert_to_constants import (
        convert_variables_to_constants_v2)

    w = tf.constant(np.random.default_rng(0).normal(size=(4, 4)).astype(np.float32) * 0.5)

    @tf.function(input_signature=[tf.TensorSpec([1, None, 4], tf.float32, name="x")])
    def step(x):
        return _outputs(tf.einsum("btf,fg->btg", x, w))

    frozen = convert_variables_to_constants_v2(step.get_concrete_function())
    path = tmp_path / "math.pb"
    path.write_bytes(frozen.graph.as_graph_def().SerializeToString())
    out = tmp_path / "lib"
    assert main(["-q", "build", str(path), "-o", str(out)]) == 0
    capsys.readouterr()
    assert main(["verify", str(path), str(out), "--steps", "200"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert sum(": ok" in line for line in lines) == len(OPS), lines
