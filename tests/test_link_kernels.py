"""A build that compiles must link (issue 19, case 4).

kws_streaming's att_rnn (a conv front end, two Bidirectional LSTMs over a
fixed window, dot-product attention) failed with ``iree-lld: error: undefined
symbol: NAME_matvec_f32``: the window's LSTMs start from zero states, so
their first recurrent matvecs have a constant input, and with packed weights
IREE evaluated those dispatches at build time, in a module it links itself
without tfaot's micro-kernels. These tests build the model through the .so,
and check each guard that keeps a kernel symbol from staying undefined.
"""
from __future__ import annotations

import subprocess
from pathlib import Path

import keras
import numpy as np
import pytest
from keras import layers as L

from tfaot.backend import compile as compile_mod
from tfaot import harness
from tfaot.lower import microkernel
from tfaot.errors import TfaotError
from tfaot.package.link import add_micro_kernels
from tfaot.pipeline import BuildOptions, Progress, build_model
from tfaot.target_options import make_target
from tfaot.verify import keras_reference, library_stream

STEPS = 100
TOL = 1e-5


def att_rnn(window: int = 10, features: int = 8, units: int = 16) -> keras.Model:
    """att_rnn (kws_streaming att_rnn.py) at toy sizes."""
    x = keras.Input((window, features))
    h = L.Reshape((window, features, 1))(x)
    h = L.Conv2D(4, (3, 1), padding="same", activation="relu")(h)
    h = L.Conv2D(1, (3, 1), padding="same", activation="relu")(h)
    h = L.Reshape((window, features))(h)
    for _ in range(2):
        h = L.Bidirectional(L.LSTM(units, return_sequences=True))(h)
    middle = L.Flatten()(L.Cropping1D((window // 2, window - window // 2 - 1))(h))
    query = L.Dense(2 * units)(middle)
    scores = L.Softmax()(L.Dot(axes=[1, 2])([query, h]))
    attention = L.Dot(axes=[1, 1])([scores, h])
    h = L.Dense(16, activation="relu")(attention)
    return keras.Model(x, L.Dense(4)(h))


@pytest.fixture(scope="module")
def model_path(tmp_path_factory):
    keras.utils.set_random_seed(19)
    model = att_rnn()
    path = tmp_path_factory.mktemp("att_rnn") / "att_rnn.keras"
    model.save(path)
    return model, path


def _build_and_compare(model, path: Path, out: Path, **options) -> dict:
    built = build_model(str(path), BuildOptions(out_dir=out, **options), Progress(False))
    lib = harness.load(built.path)
    stream = library_stream(lib, model, path)
    steps = STEPS + stream.first_valid_step
    xs = np.random.default_rng(4).normal(size=(steps, *lib.input_shape)).astype(np.float32)
    got = lib.step_n(xs)
    if stream.mode == "stateless":  # independent inferences: one batch, not 100 calls
        want = np.asarray(model(xs[:, 0])).reshape(got.shape)
    else:
        want = keras_reference(model, xs, stream=stream, step_output=lib.output_shape)
    defined = ~np.isnan(want.reshape(steps, -1)).any(axis=1)
    assert defined.sum() >= STEPS
    assert float(np.abs(got[defined] - want[defined]).max()) <= TOL
    return built.manifest


@pytest.mark.parametrize("fixed_window", ["auto", pytest.param("whole", marks=pytest.mark.slow)])
def test_att_rnn_builds_links_and_matches_keras(model_path, tmp_path, fixed_window):
    """The default build (a sliding window recomputed every step) and one
    whole inference per step: both unroll the LSTMs from zero states."""
    model, path = model_path
    out = tmp_path / "att_rnn"
    manifest = _build_and_compare(model, path, out, fixed_window=fixed_window, keep_temps=True)
    assert manifest["stream"]["mode"] == ("window" if fixed_window == "auto" else "stateless")
    # the case that failed: micro-kernels next to IREE's packed matmuls
    assert manifest["pack_weights"] and set(manifest["micro_kernels"]) == {"matvec", "conv"}
    # the root fix, not compile_module's fallback, made it link
    assert "const-eval=false" not in (out / "temps/compile/iree-compile.cmd").read_text()


def test_att_rnn_builds_with_the_rewrite_of_constant_inputs_undone(model_path, tmp_path,
                                                                   monkeypatch):
    """Without the root fix, IREE's build-time evaluation meets the kernel:
    compile_module's fallback (phase 1 again without const-eval) must still
    give a library that links and computes the model. (The products of the
    zero first state are kept apart: joined with the input's, their vector
    is no longer constant.)"""
    from tfaot.lower import mlir_import

    monkeypatch.setattr(microkernel, "_constant_values", lambda ops: set())
    monkeypatch.setattr(mlir_import, "merge_matvec_sums", lambda func: 0)
    model, path = model_path
    out = tmp_path / "att_rnn"
    _build_and_compare(model, path, out, keep_temps=True)
    assert "--iree-opt-const-eval=false" in (out / "temps/compile/iree-compile.cmd").read_text()


def _module(n: int = 24, k: int = 16) -> str:
    """``W x + W 0 + V x``: the second matvec's vector is a constant
    expression; ``V x`` (V an argument) keeps IREE's weight packing on."""
    w = np.random.default_rng(0).standard_normal((n, k)).astype("<f4")
    wt, xt, yt = f"tensor<{n}x{k}xf32>", f"tensor<{k}x1xf32>", f"tensor<{n}x1xf32>"
    return f"""module {{
  func.func @main(%x: {xt}, %v: {wt}) -> {yt} {{
    %w = stablehlo.constant dense<"0x{w.tobytes().hex().upper()}"> : {wt}
    %z = stablehlo.constant dense<0.000000e+00> : tensor<{k}xf32>
    %h = stablehlo.reshape %z : (tensor<{k}xf32>) -> {xt}
    %a = stablehlo.dot %w, %x : ({wt}, {xt}) -> {yt}
    %b = stablehlo.dot %w, %h : ({wt}, {xt}) -> {yt}
    %c = stablehlo.dot %v, %x : ({wt}, {xt}) -> {yt}
    %s = stablehlo.add %a, %b : {yt}
    %y = stablehlo.add %s, %c : {yt}
    return %y : {yt}
  }}
}}
"""


def test_matvec_of_a_constant_stays_with_iree():
    text, count = microkernel.rewrite_matvecs(_module(), "m")
    assert count == 1 and text.count("stablehlo.dot ") == 2


def _packed_target():
    return make_target("cpu", weight_packing=True, matvec="tfaot")


def test_compile_falls_back_when_iree_evaluates_a_kernel(tmp_path, monkeypatch):
    """The guard alone (root fix undone): phase 1 is retried without
    const-eval, and the kernel object's import is what package compiles."""
    monkeypatch.setattr(microkernel, "_constant_values", lambda ops: set())
    compiled = compile_mod.compile_module(_module(), tmp_path, name="m",
                                          target=_packed_target())
    assert compiled.kernel_symbols == {"matvec": "m_matvec_f32"}
    assert "--iree-opt-const-eval=false" in (tmp_path / "iree-compile.cmd").read_text()
    assert "m_matvec_f32" in compile_mod.undefined_symbols(compiled.kernel_object)


def test_compile_names_a_kernel_it_cannot_link(tmp_path, monkeypatch):
    """When even the retry fails on the kernel: a TfaotError naming the
    symbol, the model and what to do, not iree-lld's message."""
    def fail(args, workdir, *_, **__):
        (workdir / "iree-compile.stderr").write_text(
            "iree-lld: error: undefined symbol: m_matvec_f32\n")
        raise TfaotError("iree-compile failed: iree-lld: error: undefined symbol: m_matvec_f32")

    monkeypatch.setattr(compile_mod, "_run_iree_compile", fail)
    with pytest.raises(TfaotError) as e:
        compile_mod.compile_module(_module(), tmp_path, name="m", target=_packed_target())
    message = str(e.value)
    assert "model 'm'" in message and "m_matvec_f32" in message and "--matvec=iree" in message
    assert "iree-lld" not in message


def test_imported_kernels_come_from_the_object():
    found = microkernel.imported_kernels({"m_conv_f32", "memset", "m_matvec_f32"}, "m", "f32")
    assert found == {"conv": "m_conv_f32", "matvec": "m_matvec_f32"}
    for foreign in ("other_matvec_f32", "m_dwconv_bf16"):
        with pytest.raises(TfaotError, match=f"model 'm'.*{foreign}"):
            microkernel.imported_kernels({foreign}, "m", "f32")


def test_package_refuses_an_object_that_still_imports_a_kernel(tmp_path):
    """add_micro_kernels checks the merged object: a kernel the object calls
    but the build did not compile is a clear error, not an undefined symbol
    at link or load time."""
    src = tmp_path / "k.c"
    src.write_text("void m_matvec_f32(void);\nvoid m_conv_f32(void);\n"
                   "void f(void) { m_matvec_f32(); m_conv_f32(); }\n")
    target = make_target("cpu")
    toolchain = target.toolchain()
    kernels = tmp_path / "k.o"
    subprocess.run([toolchain.cc, "-c", "-fPIC", str(src), "-o", str(kernels)], check=True)
    symbols = {"conv": "m_conv_f32", "matvec": "m_matvec_f32"}
    add_micro_kernels(target, toolchain, kernels, symbols, tmp_path / "all")
    assert not set(symbols.values()) & compile_mod.undefined_symbols(kernels)
    subprocess.run([toolchain.cc, "-c", "-fPIC", str(src), "-o", str(kernels)], check=True)
    with pytest.raises(TfaotError, match="m_matvec_f32"):
        add_micro_kernels(target, toolchain, kernels, {"conv": "m_conv_f32"}, tmp_path / "one")
