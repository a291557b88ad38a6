"""Per-frame ops of frozen graphs (streamify_graph/rules.py) that were
refused as ops "tfaot does not know how it treats the time axis":
elementwise math (the trigonometric and hyperbolic family, xlogy and its
kin, truncatemod, lgamma, digamma), and tf.slice, tf.tile and tf.reverse
of the other axes and tf.one_hot of token ids. Each graph is built and
compared with TensorFlow through the .so by ``tfaot verify`` (200 steps);
tan is written out (lower/activations.py expand_tan: IREE's was 2.8e-3
relative off near its poles, and the random inputs reach them). Slicing,
tiling or reversing the time axis itself is still refused, naming the node.
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


def _frozen(tmp_path, name: str, fn, spec) -> str:
    """``fn`` of one input (``spec``: [1, None, ...]) frozen into NAME.pb."""
    import tensorflow as tf
    from tensorflow.python.framework.convert_to_constants import (
        convert_variables_to_constants_v2)

    frozen = convert_variables_to_constants_v2(
        tf.function(fn, input_signature=[spec]).get_concrete_function())
    path = tmp_path / f"{name}.pb"
    path.write_bytes(frozen.graph.as_graph_def().SerializeToString())
    return str(path)


def _builds_and_verifies(tmp_path, capsys, path: str, outputs: int) -> None:
    out = str(tmp_path / "lib")
    assert main(["-q", "build", path, "-o", out]) == 0
    capsys.readouterr()
    assert main(["verify", path, out, "--steps", "200"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert sum(": ok" in line for line in lines) == outputs, lines


def _weights(rows: int, cols: int, seed: int = 0):
    import tensorflow as tf

    return tf.constant(np.random.default_rng(seed).normal(size=(rows, cols)).astype(np.float32)
                       * 0.5)


def test_math_ops_stream_and_match_tensorflow(tmp_path, capsys):
    import tensorflow as tf

    w = _weights(4, 4)
    path = _frozen(tmp_path, "math", lambda x: _outputs(tf.einsum("btf,fg->btg", x, w)),
                   tf.TensorSpec([1, None, 4], tf.float32, name="x"))
    _builds_and_verifies(tmp_path, capsys, path, len(OPS))


def test_slices_tiles_and_reversals_of_other_axes_stream(tmp_path, capsys):
    import tensorflow as tf

    w = _weights(4, 6)

    def shapes(x):
        h = tf.einsum("btf,fg->btg", x, w)
        return [tf.identity(tf.slice(h, [0, 0, 1], [-1, -1, 3]), name="sliced"),
                tf.identity(tf.tile(h, [1, 1, 2]), name="tiled"),
                tf.identity(tf.reverse(h, [2]), name="reversed")]

    path = _frozen(tmp_path, "shapes", shapes, tf.TensorSpec([1, None, 4], tf.float32, name="x"))
    _builds_and_verifies(tmp_path, capsys, path, 3)


def test_one_hot_token_ids_stream(tmp_path, capsys):
    """A character model's input as TF1 graphs write it: tf.one_hot of the
    token ids, then a matrix (a GRU would follow)."""
    import tensorflow as tf

    w = _weights(5, 3, seed=1)
    path = _frozen(tmp_path, "tokens",
                   lambda t: tf.identity(tf.einsum("btv,vg->btg", tf.one_hot(t, 5), w), name="y"),
                   tf.TensorSpec([1, None], tf.int32, name="tokens"))
    _builds_and_verifies(tmp_path, capsys, path, 1)


def test_a_constant_repeated_over_the_frames_streams(tmp_path, capsys):
    """A constant tiled or broadcast to the sequence's frames
    (``tf.shape(x)[1]``), or a Fill of that shape, then joined to or
    combined with each frame (a conditioning vector, a bias per feature):
    refused as "computed from the sequence length" or "not one with the
    same time axis"; each frame is the same value."""
    import tensorflow as tf

    w = _weights(4, 6)
    extra = tf.constant(np.linspace(-1, 1, 3, dtype=np.float32).reshape(1, 1, 3))
    bias = tf.constant(np.linspace(0, 1, 6, dtype=np.float32))

    def repeated(x):
        h = tf.einsum("btf,fg->btg", x, w)
        frames = tf.shape(x)[1]
        return [tf.identity(tf.concat([h, tf.tile(extra, [1, frames, 1])], -1), name="joined"),
                tf.identity(h * tf.broadcast_to(bias, tf.shape(h)), name="scaled"),
                tf.identity(h + tf.fill(tf.shape(h), 0.5), name="shifted")]

    path = _frozen(tmp_path, "repeated", repeated,
                   tf.TensorSpec([1, None, 4], tf.float32, name="x"))
    _builds_and_verifies(tmp_path, capsys, path, 3)


def test_a_value_of_the_length_itself_is_still_refused(tmp_path, capsys):
    """A tile by the length along the features too: not one value a frame."""
    import tensorflow as tf

    def along_features(x):
        frames = tf.shape(x)[1]
        return tf.concat([x, tf.tile(tf.ones([1, 1, 1]), [1, frames, frames])], -1)

    path = _frozen(tmp_path, "features", along_features,
                   tf.TensorSpec([1, None, 4], tf.float32, name="x"))
    assert main(["-q", "build", path, "-o", str(tmp_path / "features")]) == 1
    err = capsys.readouterr().err
    assert "features.pb: node" in err and "Traceback" not in err, err


def test_the_time_axis_itself_is_still_refused(tmp_path, capsys):
    import tensorflow as tf

    spec = tf.TensorSpec([1, None, 4], tf.float32, name="x")
    for name, fn, why in (
            ("backwards", lambda x: tf.reverse(tf.tanh(x), [1]),
             "reverses the time axis (axis 1 of input"),
            ("late", lambda x: tf.slice(tf.tanh(x), [0, 2, 0], [-1, -1, -1]),
             "slices the time axis (begin 2, size -1)")):
        path = _frozen(tmp_path, name, fn, spec)
        assert main(["-q", "build", path, "-o", str(tmp_path / name)]) == 1
        err = capsys.readouterr().err
        assert why in err and "Traceback" not in err, err


def test_products_of_two_sequences_frame_by_frame_stream(tmp_path, capsys):
    """Two time-dependent operands multiplied within each frame (a per-frame
    attention score, an outer product): einsum 'btd,btd->bt' and
    'btd,bte->btde', and a BatchMatMul with time a batch axis of both, were
    refused ("only input 0 may be" time-dependent). A product across frames
    ('btd,bsd->bts') is still refused, naming the time label."""
    import tensorflow as tf

    wq, wk = _weights(4, 6, 1), _weights(4, 6, 2)

    def scores(x):
        q, k = tf.einsum("btf,fd->btd", x, wq), tf.tanh(tf.einsum("btf,fd->btd", x, wk))
        bmm = tf.matmul(q[:, :, None, :], k[:, :, :, None])[..., 0, 0]
        return [tf.einsum("btd,btd->bt", q, k), tf.einsum("btd,bte->btde", q, k), bmm]

    spec = tf.TensorSpec([1, None, 4], tf.float32, name="x")
    _builds_and_verifies(tmp_path, capsys, _frozen(tmp_path, "scores", scores, spec), 3)
    across = _frozen(tmp_path, "across", lambda x: tf.einsum("btd,bsd->bts", x, tf.tanh(x)),
                     spec)
    assert main(["-q", "build", across, "-o", str(tmp_path / "across")]) == 1
    assert "contracts or mixes the time axis ('t')" in capsys.readouterr().err


def test_a_delay_written_as_a_concatenation_of_zeros_streams(tmp_path, capsys):
    """``concat([zeros, x[:, :-d]], time)``, the sequence d frames late (a
    difference of frames), was refused ("concatenates along the time
    axis"); it is tf.pad's padding before the sequence. Zeros after it, or
    ones before it, are still refused."""
    import tensorflow as tf

    spec = tf.TensorSpec([1, None, 4], tf.float32, name="x")

    def delays(x):
        h = tf.tanh(x)
        return [tf.concat([tf.zeros([1, 1, 4]), h[:, :-1]], 1) - h,
                tf.concat([tf.zeros([1, 3, 4]), h[:, :-3]], 1) * h]

    _builds_and_verifies(tmp_path, capsys, _frozen(tmp_path, "delays", delays, spec), 2)
    for name, fn in (("after", lambda x: tf.concat([tf.tanh(x), tf.zeros([1, 1, 4])], 1)),
                     ("ones", lambda x: tf.concat([tf.ones([1, 1, 4]), tf.tanh(x)], 1))):
        path = _frozen(tmp_path, name, fn, spec)
        assert main(["-q", "build", path, "-o", str(tmp_path / name)]) == 1
        assert "concatenates along the time axis" in capsys.readouterr().err
