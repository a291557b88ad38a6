"""Token ids outside their table are refused (NAME_ERR_INPUT_RANGE), on every
target: nothing runs, the state is unchanged, the harness names the id and
the step (compiler/lower/input_ranges.py, the id checks of model.c.j2)."""
import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from toolchains import require_vulkan
from util import run

from tfaot import harness
from tfaot.lower import input_ranges
from tfaot.verify.process import run_in_child
from tfaot.pipeline import BuildOptions, Progress, build_model

ROWS = 30
BAD_IDS = (30, 31, 100, -31, 1000, -1000, 2**31 - 1, -2**31)
INPUT_RANGE = 16  # compiler/status.py


def _embedding_lstm():
    import keras

    keras.utils.set_random_seed(5)
    return keras.Sequential([keras.Input((None,), dtype="int32", batch_size=1),
                             keras.layers.Embedding(ROWS, 8),
                             keras.layers.LSTM(6, return_sequences=True),
                             keras.layers.Dense(4)])


@pytest.fixture(scope="module")
def emb(tmp_path_factory):
    """(Keras model, build folder) of Embedding(30, 8) -> LSTM for cpu."""
    tmp = tmp_path_factory.mktemp("emb")
    model = _embedding_lstm()
    path = tmp / "emb.keras"
    model.save(path)
    build_model(str(path), BuildOptions(out_dir=tmp / "lib"), Progress(enabled=False))
    return model, tmp / "lib"


def _tf(model, ids) -> np.ndarray:
    return np.asarray(model(np.asarray(ids, np.int32)[None]))[0]


def _same_state(a, b) -> bool:
    return all(np.array_equal(x, y) for x, y in zip(a, b))


def test_header_and_manifest_give_the_range(emb):
    _, lib = emb
    header = (lib / "emb.h").read_text()
    # Keras wraps negative ids (take), so TensorFlow accepts -30..-1 too.
    assert "#define EMB_INPUT0_MIN (-30)" in header and "#define EMB_INPUT0_END 30" in header
    assert "EMB_ERR_INPUT_RANGE 16" in header
    entry = json.loads((lib / "emb.json").read_text())["inputs"][0]
    assert entry["id_range"]["min"] == -ROWS and entry["id_range"]["end"] == ROWS
    assert entry["id_range"]["runs"] == [[0, 1, -ROWS, ROWS]]


def test_refused_ids_change_nothing_and_valid_steps_match_tensorflow(emb):
    model, lib = emb
    m = harness.load(lib)
    rng = np.random.default_rng(0)
    ids = rng.integers(-ROWS, ROWS, 120).astype(np.int32)
    got = []
    for t, v in enumerate(ids):
        if t % 15 == 7:  # refused ids between valid steps
            bad = BAD_IDS[(t // 15) % len(BAD_IDS)]
            before = m.get_state()
            y = np.full(m.output_shape, 7.0, np.float32)
            status = m._fn["step"](m._ctx, np.array([bad], np.int32).ctypes.data, y.ctypes.data)
            assert status == INPUT_RANGE, bad
            assert np.all(y == 7.0)  # no output written
            assert _same_state(before, m.get_state()), bad
        got.append(m.step(np.array([v], np.int32)))
    want = _tf(model, ids)
    assert np.abs(np.stack(got)[:, 0] - want).max() <= 1e-5
    assert m.steps == 120


@pytest.mark.parametrize("bad", BAD_IDS)
def test_each_bad_id_raises_naming_id_and_step(emb, bad):
    _, lib = emb
    m = harness.load(lib)
    m.step_n(np.arange(3, dtype=np.int32)[:, None])
    before = m.get_state()
    with pytest.raises(harness.InputRangeError) as info:
        m.step(np.array([bad], np.int32))
    e = info.value
    assert (e.id, e.step, e.input, e.valid) == (bad, 3, "x_t", (-ROWS, ROWS))
    assert f"id {bad}" in str(e) and "step 3" in str(e) and "[-30, 30)" in str(e)
    assert _same_state(before, m.get_state())


def test_step_n_checks_every_sample_first(emb):
    model, lib = emb
    m = harness.load(lib)
    ids = np.random.default_rng(1).integers(0, ROWS, 40).astype(np.int32)
    head = m.step_n(ids[:10, None])
    before = m.get_state()
    bad = ids[10:30].copy()
    bad[12] = 1000
    with pytest.raises(harness.InputRangeError) as info:
        m.step_n(bad[:, None])
    assert (info.value.sample, info.value.step, info.value.id) == (12, 22, 1000)
    assert "sample 12" in str(info.value)
    assert _same_state(before, m.get_state())  # not even samples 0..11 ran
    tail = m.step_n(ids[10:, None])
    got = np.concatenate([head, tail])[:, 0]
    assert np.abs(got - _tf(model, ids)).max() <= 1e-5


def test_run_stops_at_the_refused_sample_and_c_builds_warning_free(emb, tmp_path):
    """The I/O-hook run loop, with NAME.c compiled from src/ under -Werror."""
    _, lib = emb
    driver = tmp_path / "drv.c"
    driver.write_text(textwrap.dedent("""\
        #include <stdio.h>
        #include <string.h>
        #include "emb.h"

        static const int32_t ids[] = {1, 2, 3, EMB_INPUT0_END, 4};
        static int pos;

        int emb_read_input(void *user, emb_input_t *in, size_t n) {
          (void)user;
          if (pos >= (int)(sizeof ids / sizeof ids[0])) return 0;
          memcpy(in, &ids[pos++], n * sizeof *in);
          return 1;
        }

        int main(void) {
          static _Alignas(EMB_CTX_ALIGN) unsigned char mem[EMB_CTX_SIZE];
          emb_ctx *ctx = (emb_ctx *)mem;
          if (emb_init(ctx) != EMB_OK) return 2;
          unsigned char before[EMB_STATE_BYTES], after[EMB_STATE_BYTES];
          long steps = emb_run(ctx, NULL, -1);
          emb_get_state(ctx, before);
          float out[EMB_OUTPUT_SIZE];
          int32_t bad[1] = {EMB_INPUT0_MIN - 1};
          int refused = emb_step(ctx, bad, out);
          int refused_n = emb_step_n(ctx, bad, out, 1);
          emb_get_state(ctx, after);
          int32_t ok[1] = {EMB_INPUT0_MIN};
          int status = emb_step(ctx, ok, out);
          printf("%ld %d %d %d %d %d\\n", steps, pos, refused, refused_n,
                 memcmp(before, after, sizeof before) == 0, status);
          emb_deinit(ctx);
          return 0;
        }
        """))
    src = lib / "src"
    exe = tmp_path / "drv"
    run(["cc", "-std=c11", "-O2", "-Wall", "-Wextra", "-Werror", "-I", src, driver,
         src / "emb.c", src / "emb_kernels.o", "-lm", "-o", exe])
    out = run([exe]).stdout.split()
    # 3 steps ran, the 4th sample was read and refused; step and step_n refuse.
    assert out == ["-16", "4", "16", "16", "1", "0"]


def _gather_graph():
    """A TF1 graph on int64 ids (1, 3): embedding_lookup of a 40-row table on
    every id, tf.gather of a 7-row table on id 1, one_hot(depth 12)."""
    import tensorflow as tf

    rng = np.random.default_rng(2)
    g = tf.Graph()
    with g.as_default():
        x = tf.compat.v1.placeholder(tf.int64, (1, 3), name="ids")
        big = tf.constant(rng.standard_normal((40, 5)).astype(np.float32))
        small = tf.constant(rng.standard_normal((7, 5)).astype(np.float32))
        e = tf.reduce_sum(tf.nn.embedding_lookup(big, x), 1)
        s = tf.gather(small, x[:, 1])
        oh = tf.reduce_sum(tf.one_hot(x, 12), 1)
        tf.identity(tf.concat([e, s, oh], 1), name="y")
    return g.as_graph_def()


def test_tf1_gather_on_int64_refuses_2_pow_32(tmp_path):
    import graph_models as gm

    gd = _gather_graph()
    path = tmp_path / "g.pb"
    path.write_bytes(gd.SerializeToString())
    build_model(str(path), BuildOptions(out_dir=tmp_path / "lib"), Progress(enabled=False))
    entry = json.loads((tmp_path / "lib" / "g.json").read_text())["inputs"][0]
    assert entry["id_range"]["runs"] == [[0, 1, 0, 40], [1, 1, 0, 7], [2, 1, 0, 40]]
    header = (tmp_path / "lib" / "g.h").read_text()
    assert "#define G_INPUT0_MIN 0" in header and "#define G_INPUT0_END 7" in header
    m = harness.load(tmp_path / "lib")
    # In range (one-hot of ids >= 12 gives zeros, as in TensorFlow).
    for ids in ([0, 0, 0], [39, 6, 15], [11, 3, 39]):
        x = np.array([ids], np.int64)
        want = gm.run_graph_def(gd, "ids", "y:0", x)
        assert np.abs(m.step(x) - want).max() <= 1e-5
    for ids, element, bad in (([2**32, 1, 1], 0, 2**32), ([1, 7, 1], 1, 7),
                              ([1, 1, -1], 2, -1), ([1, 1, 2**63 - 1], 2, 2**63 - 1),
                              ([1, -2**32, 1], 1, -2**32)):
        with pytest.raises(harness.InputRangeError) as info:
            m.step(np.array([ids], np.int64))
        assert (info.value.element, info.value.id) == (element, bad)


def test_analysis_follows_shifts_and_reports_what_it_cannot():
    """Hand-written modules: an id shifted by a constant, a dynamic slice,
    an index computed by multiplication (not checked), one from the state."""
    text = """
    module {
      func.func @step(%x0: tensor<2xi32>, %x1: tensor<1xi32>) -> tensor<2x4xf32> {
        %t = stablehlo.constant dense<1.0> : tensor<10x4xf32>
        %one = stablehlo.constant dense<1> : tensor<2xi32>
        %i = stablehlo.add %x0, %one : tensor<2xi32>
        %r = "stablehlo.torch_index_select"(%t, %i) <{batch_dims = 0 : i64, dim = 0 : i64}>
            : (tensor<10x4xf32>, tensor<2xi32>) -> tensor<2x4xf32>
        %s = stablehlo.reshape %x1 : (tensor<1xi32>) -> tensor<i32>
        %z = stablehlo.constant dense<0> : tensor<i32>
        %d = stablehlo.dynamic_slice %t, %s, %z, sizes = [2, 4]
            : (tensor<10x4xf32>, tensor<i32>, tensor<i32>) -> tensor<2x4xf32>
        %m = stablehlo.multiply %x0, %x0 : tensor<2xi32>
        %q = "stablehlo.torch_index_select"(%t, %m) <{batch_dims = 0 : i64, dim = 0 : i64}>
            : (tensor<10x4xf32>, tensor<2xi32>) -> tensor<2x4xf32>
        %a = stablehlo.add %r, %d : tensor<2x4xf32>
        %b = stablehlo.add %a, %q : tensor<2x4xf32>
        return %b : tensor<2x4xf32>
      }
    }
    """
    analysis = input_ranges.analyze(text, 2)
    assert analysis.ranges[0].runs() == [(0, 2, -1, 9)]  # x0 + 1 in [0, 10)
    assert analysis.ranges[1].runs() == [(0, 1, 0, 9)]   # slice start in [0, 10 - 2]
    assert len(analysis.unchecked) == 1 and "multiply" in analysis.unchecked[0]


def test_vulkan_refuses_out_of_range_ids(tmp_path):
    """The same check on --target=vulkan (lavapipe, in a child process)."""
    require_vulkan()
    model = _embedding_lstm()
    path = tmp_path / "emb.keras"
    model.save(path)
    lib = tmp_path / "vk"
    build_model(str(path), BuildOptions(out_dir=lib, target="vulkan"), Progress(enabled=False))
    ids = np.random.default_rng(3).integers(-ROWS, ROWS, 100).astype(np.int32)
    np.save(tmp_path / "ids.npy", ids)
    script = textwrap.dedent(f"""\
        import numpy as np
        from tfaot import harness
        m = harness.load({str(lib)!r})
        ids = np.load({str(tmp_path / 'ids.npy')!r})
        ys, refused = [], 0
        for t, v in enumerate(ids):
            if t % 10 == 5:
                before = m.get_state()
                try:
                    m.step(np.array([{BAD_IDS!r}[t // 10 % {len(BAD_IDS)}]], np.int32))
                except harness.InputRangeError:
                    refused += 1
                after = m.get_state()
                assert all(np.array_equal(a, b) for a, b in zip(before, after))
            ys.append(m.step(np.array([v], np.int32)))
        np.save({str(tmp_path / 'ys.npy')!r}, np.stack(ys))
        print("refused", refused)
        """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert "refused 10" in proc.stdout
    got = np.load(tmp_path / "ys.npy")[:, 0]
    assert np.abs(got - _tf(model, ids)).max() <= 1e-5
    # What tfaot verify uses for GPU libraries: the child's refusal comes back
    # as the same error.
    xs = np.array([[1], [2], [3], [-31], [4]], np.int32)
    with pytest.raises(harness.InputRangeError) as info:
        run_in_child(lib, [xs])
    assert (info.value.id, info.value.step, info.value.valid) == (-31, 3, (-ROWS, ROWS))


def test_multi_input_model_checks_its_token_field(tmp_path):
    """features (None, 3) -> GRU and a speaker id (1,) -> Embedding(5, 2): the
    id is one field of NAME_inputs; the feature input is not checked."""
    import keras

    keras.utils.set_random_seed(4)
    feats = keras.Input((None, 3), batch_size=1, name="features")
    tok = keras.Input((1,), dtype="int32", batch_size=1, name="speaker")
    h = keras.layers.GRU(4)(feats)
    e = keras.layers.Flatten()(keras.layers.Embedding(5, 2)(tok))
    model = keras.Model([feats, tok], keras.layers.Dense(2)(keras.layers.Concatenate()([h, e])))
    path = tmp_path / "spk.keras"
    model.save(path)
    lib = tmp_path / "lib"
    build_model(str(path), BuildOptions(out_dir=lib), Progress(enabled=False))
    manifest = json.loads((lib / "spk.json").read_text())
    assert "id_range" not in manifest["inputs"][0]
    assert manifest["inputs"][1]["id_range"]["runs"] == [[0, 1, -5, 5]]
    src = lib / "src"
    run(["cc", "-std=c11", "-Wall", "-Wextra", "-Werror", "-c", "-I", src, src / "spk.c",
         "-o", tmp_path / "spk.o"])
    m = harness.load(lib)
    m.step({"features": np.ones((1, 3), np.float32), "speaker": np.array([[4]], np.int32)})
    before = m.get_state()
    with pytest.raises(harness.InputRangeError) as info:
        m.step_n({"features": np.ones((3, 1, 3), np.float32),
                  "speaker": np.array([[[1]], [[2]], [[5]]], np.int32)})
    assert (info.value.input, info.value.id, info.value.sample) == ("speaker", 5, 2)
    assert _same_state(before, m.get_state())


def test_ids_the_build_cannot_check_are_clamped_into_the_table(tmp_path, capsys):
    """A fixed-length Embedding model built as a sliding window: its ids pass
    the window's float ring buffer, so the build cannot range-check them at
    the input (it warns). Out-of-range ids read past the table: NaN at
    -1001, a segfault at 5e6. They are clamped into the table now: an id
    past its end reads its last row, one before its start its first. (In
    a child process: a segfault must fail the test, not the run.)"""
    import subprocess
    import sys

    import keras

    from tfaot.cli import main

    keras.utils.set_random_seed(1)
    x = keras.Input((20,), dtype="int32")
    h = keras.layers.Conv1D(8, 3, padding="same", activation="relu")(
        keras.layers.Embedding(1000, 8)(x))
    keras.Model(x, keras.layers.Dense(1)(keras.layers.GlobalAveragePooling1D()(h))).save(
        tmp_path / "ids.keras")
    assert main(["build", str(tmp_path / "ids.keras"), "-o", str(tmp_path / "lib")]) == 0
    assert "the step clamps them into the table" in capsys.readouterr().err
    code = f"""
import numpy as np
from tfaot import harness
lib = harness.load({str(tmp_path / "lib")!r})
def out(i):
    lib.reset()
    return float(np.ravel(lib.step(np.full(lib.input_shape, i, np.int32)))[0])
for far, edge in ((5_000_000, 999), (100_000_000, 999), (1000, 999), (-1001, 0), (-2**31, 0)):
    assert out(far) == out(edge), (far, out(far), out(edge))
print("ok")
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", (proc.returncode, proc.stderr)
