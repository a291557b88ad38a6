"""A streamed context holds its state once (compiler/emit/state_reuse.py):
the direct step writes the new state over the old, staging the bytes that
land before the old ones are read; @reset and @set_state take the old
state's block; @get_state's views are of the state itself. Checked through
the built C library against Keras over 100+ steps, with the state saved,
restored and reset mid-stream, warnings-clean and under ASan/UBSan."""
from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from tfaot import harness
from tfaot.emit.state_reuse import InPlace, _Access, _schedule
from tfaot.pipeline import BuildOptions, Progress, build_model
from tfaot.verify import keras_reference, library_stream
from util import run as _run, stream_matches_keras

WARN = ["-std=c11", "-Wall", "-Wextra", "-Werror", "-pedantic"]
C_DIR = Path(__file__).parent / "data" / "backend" / "c"


def _kws(head: str):
    """ARM's DS-CNN shape, narrower (16 channels, 2 blocks), over its
    49-frame window: a ring buffer a layer, then ``head``: "pool", the
    global average pooling of a window kept as a circular buffer (streamify_
    keras/circular.py: IREE updates it on its own buffer, which @reset and
    @set_state pack with the rest), or "flatten", the window flattened from
    an ordered ring buffer, which the last layer reads after the step has
    copied the window's new value (the staged write: without it, the pooling
    had an error of 3e-3)."""
    import keras
    from keras import layers as L

    keras.utils.set_random_seed(0)
    x = keras.Input((49, 10), batch_size=1)
    h = L.Reshape((49, 10, 1))(x)
    h = L.Conv2D(16, (10, 4), strides=(2, 2), activation="relu",
                 kernel_initializer="he_normal")(h)
    for _ in range(2):
        h = L.ZeroPadding2D(((0, 0), (1, 1)))(h)
        h = L.DepthwiseConv2D((3, 3), activation="relu")(h)
        h = L.Conv2D(16, (1, 1), activation="relu", kernel_initializer="he_normal")(h)
    h = L.GlobalAveragePooling2D()(h) if head == "pool" else L.Flatten()(h)
    return keras.Model(x, L.Dense(12)(h))


@pytest.fixture(scope="module", params=["pool", "flatten"])
def kws(tmp_path_factory, request):
    tmp = tmp_path_factory.mktemp("reuse")
    model = _kws(request.param)
    model.save(tmp / "kws.keras")
    out = build_model(str(tmp / "kws.keras"), BuildOptions(out_dir=tmp / "lib"),
                      Progress(enabled=False)).path
    return model, out


def _function(text: str, name: str) -> str:
    """The body of the static C function ``name`` of the generated source."""
    start = re.search(rf"\nstatic int {name}\([^;{{]*\{{", text).end()
    return text[start:text.index("\n}\n", start)]


def test_the_context_holds_the_state_once(kws):
    """One block of the state's size in the arena, and none of the state's
    functions allocates a second one; the step stages the flattened window,
    and updates the circular one where it lies."""
    model, out = kws
    manifest = json.loads((out / "kws.json").read_text())
    state_block = -(-manifest["state_bytes"] // 64) * 64
    assert manifest["arena_pools"] == [[state_block, 1]], manifest["arena_pools"]
    assert manifest["arena_bytes"] == state_block
    text = (out / "src" / "kws.c").read_text()
    step = _function(text, "kws_vm_step_direct")
    assert "allocate" not in step
    flattened = type(model.layers[-2]).__name__ == "Flatten"
    assert ("the staged bytes" in step) == flattened
    assert "allocate" not in _function(text, "kws_vm_get_state")
    for name in ("kws_vm_reset", "kws_vm_set_state"):
        assert "takes the old one's block" in _function(text, name), name


def test_outputs_match_keras_with_the_state_saved_restored_and_reset(kws):
    model, out = kws
    lib = harness.load(out)
    xs, got = stream_matches_keras(lib, model, "kws", compared=110, seed=2)

    half = len(xs) // 2
    lib.reset()
    lib.step_n(xs[:half])
    saved = lib.get_state()
    kept = [s.copy() for s in saved]
    np.testing.assert_array_equal(lib.step_n(xs[half:]), got[half:])
    # what get_state handed out was copied out of the state the step overwrites
    for s, k in zip(saved, kept):
        np.testing.assert_array_equal(s, k)
    other = harness.load(out)
    other.set_state(saved)
    np.testing.assert_array_equal(other.step_n(xs[half:]), got[half:])
    lib.set_state(saved)
    np.testing.assert_array_equal(lib.step_n(xs[half:]), got[half:])
    lib.reset()
    np.testing.assert_array_equal(lib.step_n(xs[:20]), got[:20])


@pytest.mark.parametrize("cc", [c for c in ("gcc", "clang") if shutil.which(c)])
def test_the_c_is_warning_free(kws, cc, tmp_path):
    _, out = kws
    for opt in ("-O0", "-O2"):
        _run([cc, *WARN, opt, "-c", out / "src" / "kws.c", "-o", tmp_path / "m.o"])


def test_sanitizers_clean_through_save_restore_and_reset(kws, tmp_path):
    """step_loop.c saves and restores the state at step 50 and resets at
    100: under ASan/UBSan, and the outputs are the harness's."""
    _, out = kws
    src = out / "src"
    exe = tmp_path / "loop"
    _run(["gcc", *WARN, "-O1", "-g", "-fsanitize=address,undefined", "-fno-sanitize-recover=all",
          "-fno-omit-frame-pointer", "-DTFAOT_MODEL=kws", "-DTFAOT_UPPER=KWS",
          '-DTFAOT_HEADER="kws.h"', "-I", src, C_DIR / "step_loop.c", src / "kws.c",
          src / "kws_kernels.o", "-lm", "-o", exe])
    proc = _run([exe], env={"ASAN_OPTIONS": "detect_leaks=1:abort_on_error=1",
                            "UBSAN_OPTIONS": "halt_on_error=1:print_stacktrace=1"})
    assert "runtime error" not in proc.stderr and "AddressSanitizer" not in proc.stderr
    ys = np.array([[float(v) for v in line.split()] for line in proc.stdout.splitlines()])
    lib = harness.load(out)
    n_in = int(np.prod(lib.input_shape))
    want = []
    for t in range(len(ys)):
        if t == 100:
            lib.reset()
        x = np.array([((t * 7 + i * 3) % 11) * 0.1 - 0.5 for i in range(n_in)], np.float32)
        want.append(lib.step(x.reshape(lib.input_shape)).ravel())
    assert len(ys) == 200
    np.testing.assert_allclose(ys, np.stack(want), rtol=0, atol=1e-6)


# -- the schedule of writes over the old state ---------------------------------------


def _plan(*accesses):
    return _schedule(InPlace((0, 0), "state0", 1024), [list(accesses)], scratch_end=100)


def test_a_copy_that_lands_before_a_read_of_its_bytes_is_staged():
    plan = _plan(_Access(1, "copy", [(0, 256)], [], []),
                 _Access(2, "copy", [], [(0, 256)], []),        # after its bytes were read
                 _Access(3, "copy", [], [(512, 768)], []),      # before they are
                 _Access(5, "dispatch", [(512, 768)], [], []))
    assert plan.staged == {3: (128, 256)} and plan.flush_after == 5


def test_writes_that_cannot_be_staged_keep_a_buffer_of_their_own():
    # a dispatch's write over bytes a later op reads
    assert _plan(_Access(1, "dispatch", [], [(0, 64)], [(0, 64)]),
                 _Access(2, "copy", [(0, 64)], [], [])) is None
    # a dispatch that reads and writes the same bytes, not known to be elementwise
    assert _plan(_Access(1, "dispatch", [(0, 64)], [(0, 64)], [(0, 64)])) is None
    # a staged region read back from the new state before it is flushed
    assert _plan(_Access(1, "copy", [], [(0, 64)], []),
                 _Access(2, "copy", [], [], [(0, 64)]),
                 _Access(3, "copy", [(0, 64)], [], [])) is None
    # a write whose range is not known
    assert _plan(_Access(1, "fill", [], [(0, 1 << 62)], []),
                 _Access(2, "copy", [(0, 64)], [], [])) is None


def test_an_elementwise_dispatch_writes_over_its_own_reads():
    """An LSTM cell's dispatch reads the old c and writes the new c over it,
    element by element (dispatch_source.py found it so): in place."""
    plan = _plan(_Access(1, "copy", [(256, 512)], [], []),
                 _Access(2, "dispatch", [(0, 256)], [(0, 256)], [(0, 512)], in_place=True),
                 _Access(3, "dispatch", [], [(256, 512)], [(0, 512)]))
    assert plan is not None and plan.staged == {}


def test_each_layout_the_old_state_may_have_is_scheduled():
    """The old state's offsets are the ones the function that stored it left
    (@reset and @step pack an LSTM's state in other orders): a copy staged
    under one layout is staged, and a write that is unsafe under one is
    refused."""
    step_layout = [_Access(1, "copy", [(0, 64)], [], []), _Access(2, "copy", [], [(64, 128)], [])]
    reset_layout = [_Access(1, "copy", [(64, 128)], [], []),
                    _Access(2, "copy", [], [(64, 128)], []),
                    _Access(4, "dispatch", [(64, 128)], [], [])]
    plan = _schedule(InPlace((0, 0), "state0", 1024), [step_layout, reset_layout], 0)
    assert plan.staged == {2: (0, 64)} and plan.flush_after == 4
    unsafe = [_Access(1, "dispatch", [], [(0, 64)], [(0, 64)]), _Access(2, "copy", [(0, 64)], [], [])]
    assert _schedule(InPlace((0, 0), "state0", 1024), [step_layout, unsafe], 0) is None


def _recurrent(kind: str):
    import keras
    from keras import layers as L

    keras.utils.set_random_seed(1)
    x = keras.Input((None, 12), batch_size=1)
    h = getattr(L, kind)(32)(x)
    return keras.Model(x, L.Dense(4)(h))


@pytest.mark.parametrize("kind, streams, activations", [
    ("LSTM", 1, None), ("GRU", 1, None), ("LSTM", 2, None),
    ("GRU", 1, "table")])  # (the cell's body reads a constant table: still elementwise)
def test_a_recurrent_step_writes_its_state_in_place(kind, streams, activations, tmp_path):
    """The cell's dispatch reads the old state and writes the new one over
    it element by element: no second state buffer (an LSTM(64) on a
    Cortex-M4: 3328 -> 2816 bytes of context; two streams, whose gates the
    cell reads as a slice with gaps: 8832 -> 7808), and the outputs still
    match Keras with the state saved, restored and reset mid-stream
    (@reset packs the state in another order than @step)."""
    from tfaot.verify.compare import verify

    model = _recurrent(kind)
    model.save(tmp_path / "rnn.keras")
    out = build_model(str(tmp_path / "rnn.keras"),
                      BuildOptions(out_dir=tmp_path / "lib", streams=streams,
                                   activations=activations),
                      Progress(enabled=False)).path
    step = _function((out / "src" / "rnn.c").read_text(), "rnn_vm_step_direct")
    assert "tfrt_buffer_allocate" not in step
    if streams > 1 or activations:
        (result,) = verify(str(tmp_path / "rnn.keras"), out, steps=110, seed=0,
                           tol=1e-5 if activations is None else 1e-3)
        assert result.steps >= 100 and result.mismatch is None, result
        return
    lib = harness.load(out)
    stream = library_stream(lib, model, "rnn")
    xs = np.random.default_rng(3).normal(size=(110, *lib.input_shape)).astype(np.float32)
    want = keras_reference(model, xs, stream=stream, step_output=lib.output_shape)
    got = lib.step_n(xs)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)
    lib.reset()
    lib.step_n(xs[:55])
    saved = [s.copy() for s in lib.get_state()]
    np.testing.assert_array_equal(lib.step_n(xs[55:]), got[55:])
    lib.set_state(saved)
    np.testing.assert_array_equal(lib.step_n(xs[55:]), got[55:])
    lib.reset()
    np.testing.assert_array_equal(lib.step_n(xs[:20]), got[:20])


def test_a_state_update_that_is_not_elementwise_keeps_its_buffer(tmp_path):
    """An LSTM-shaped loop whose new c is its old one plus the old one
    reversed: the dispatch that writes the new c into the state reads the
    old c in the other order too (IREE writes the reversal as a
    ``tensor.extract`` in the elementwise op's body), so it must not write
    in place: element i would read element 31 - i after it was overwritten.
    The step keeps a buffer of its own, and the library matches TensorFlow
    over 110 steps."""
    import tensorflow as tf

    from tfaot.verify.compare import verify

    w = tf.constant(np.random.default_rng(4).normal(size=(6, 32)).astype(np.float32) * 0.5)

    class Reversing(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([1, None, 6], tf.float32)])
        def __call__(self, x):
            c, h = tf.zeros([1, 32]), tf.zeros([1, 32])
            ys = tf.TensorArray(tf.float32, size=tf.shape(x)[1])
            for t in tf.range(tf.shape(x)[1]):
                c = 0.5 * (c + tf.reverse(c, [1])) + tf.tanh(x[:, t] @ w + h)
                h = tf.tanh(c) * 0.9
                ys = ys.write(t, h)
            return tf.transpose(ys.stack(), [1, 0, 2])

    tf.saved_model.save(Reversing(), str(tmp_path / "sm"))
    out = build_model(str(tmp_path / "sm"), BuildOptions(out_dir=tmp_path / "lib"),
                      Progress(enabled=False)).path
    step = _function((out / "src" / "sm.c").read_text(), "sm_vm_step_direct")
    assert "tfrt_buffer_allocate" in step
    (result,) = verify(str(tmp_path / "sm"), tmp_path / "lib", steps=110, seed=0, tol=1e-5)
    assert result.steps >= 100 and result.mismatch is None, result
