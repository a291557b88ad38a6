"""Small hand-written StableHLO + ml_program step programs for the backend tests.

Each model has: MLIR text (globals first, private mutable; ``@step`` and a
``@reset`` that stores a *computed* value, see iree-notes 1.4), its
``ProgramSignature`` and a numpy reference of one step.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from tfaot.program import ProgramSignature, StateInfo, TensorInfo

DATA = Path(__file__).parent / "data" / "backend"


_GLOBAL = re.compile(r"ml_program\.global private mutable @(\w+)\(.*\) : (tensor<[^>]*>)")


def with_state_access(mlir: str) -> str:
    """Adds @get_state/@set_state over the mutable globals, in declaration
    order, as the frontend does (compiler/lower/mlir_import.py)."""
    found = _GLOBAL.findall(mlir)
    if not found:
        return mlir
    names, types = [f"%s{i}" for i in range(len(found))], [t for _, t in found]
    get = [f"  func.func @get_state() -> ({', '.join(types)}) {{"]
    get += [f"    {n} = ml_program.global_load @{g} : {t}" for n, (g, t) in zip(names, found)]
    get += [f"    return {', '.join(names)} : {', '.join(types)}", "  }"]
    put = [f"  func.func @set_state({', '.join(f'{n}: {t}' for n, t in zip(names, types))}) {{"]
    put += [f"    ml_program.global_store @{g} = {n} : {t}" for n, (g, t) in zip(names, found)]
    put += ["    return", "  }"]
    body = mlir.rstrip()
    assert body.endswith("}"), "module must end with its closing brace"
    return body[:-1] + "\n".join(get + put) + "\n}\n"


@dataclass
class ModelSpec:
    name: str
    mlir: str
    signature: ProgramSignature
    init_state: Callable[[], list[np.ndarray]]
    step: Callable[[np.ndarray, list[np.ndarray]], tuple[np.ndarray, list[np.ndarray]]]

    @property
    def input_shape(self) -> tuple[int, ...]:
        return self.signature.inputs[0].shape

    def reference(self, xs: np.ndarray) -> np.ndarray:
        state = self.init_state()
        ys = []
        for x in xs:
            y, state = self.step(x, state)
            ys.append(y)
        return np.stack(ys)


def _sig(inp, out, states) -> ProgramSignature:
    return ProgramSignature(
        inputs=(TensorInfo("x", "float32", inp),),
        outputs=(TensorInfo("y", "float32", out),),
        states=tuple(StateInfo(n, "float32", s, initial=v) for n, s, v in states))


def accumulator() -> ModelSpec:
    z = np.zeros((1, 4), np.float32)
    return ModelSpec(
        name="accumulator",
        mlir=(DATA / "accumulator.mlir").read_text(),
        signature=_sig((1, 4), (1, 4), [("s", (1, 4), z)]),
        init_state=lambda: [z.copy()],
        step=lambda x, st: (st[0] + x, [st[0] + x]),
    )


def ginit() -> ModelSpec:
    s0 = np.array([[1.0, 2.0, 3.0, 4.0]], np.float32)

    def step(x, st):
        n = st[0] * np.float32(0.5) + x
        return n * st[0], [n]

    return ModelSpec(
        name="ginit",
        mlir=(DATA / "ginit.mlir").read_text(),
        signature=_sig((1, 4), (1, 4), [("s", (1, 4), s0)]),
        init_state=lambda: [s0.copy()],
        step=step,
    )


def multi() -> ModelSpec:
    def step(x, st):
        s, p, c = st
        s2 = s + x
        c2 = c + np.float32(1)
        mean = s2 / c2
        dd = np.prod(x - p, axis=1, keepdims=True)
        return np.concatenate([mean, dd, c2], axis=1), [s2, x.copy(), c2]

    return ModelSpec(
        name="multi",
        mlir=(DATA / "multi.mlir").read_text(),
        signature=_sig((1, 3), (1, 5), [("sum", (1, 3), np.zeros((1, 3), np.float32)),
                                        ("prev", (1, 3), np.zeros((1, 3), np.float32)),
                                        ("count", (1, 1), np.zeros((1, 1), np.float32))]),
        init_state=lambda: [np.zeros((1, 3), np.float32), np.zeros((1, 3), np.float32),
                            np.zeros((1, 1), np.float32)],
        step=step,
    )


def stateless() -> ModelSpec:
    """No state (an image model's form): its @reset does nothing, so its C
    has no exit a failure jumps to."""
    return ModelSpec(
        name="stateless",
        mlir=(DATA / "stateless.mlir").read_text(),
        signature=_sig((1, 4), (1, 4), []),
        init_state=lambda: [],
        step=lambda x, st: (x * np.float32(2) + np.float32(1), []),
    )


def ctrl() -> ModelSpec:
    z = np.zeros((1, 4), np.float32)

    def step(x, st):
        y = x
        for _ in range(3):
            y = y * np.float32(0.5) + st[0]
        out = y * np.float32(2) if x.sum(dtype=np.float32) > 0 else -y
        return out, [np.tanh(y)]

    return ModelSpec(
        name="ctrl",
        mlir=(DATA / "ctrl.mlir").read_text(),
        signature=_sig((1, 4), (1, 4), [("s", (1, 4), z)]),
        init_state=lambda: [z.copy()],
        step=step,
    )


def _dense(a: np.ndarray) -> str:
    def rec(x):
        if x.ndim == 1:
            return "[" + ", ".join(f"{float(v):.9e}" for v in x) + "]"
        return "[" + ", ".join(rec(r) for r in x) + "]"
    return f"dense<{rec(a)}> : tensor<{'x'.join(map(str, a.shape))}xf32>"


def lstm(n_in: int = 3, hidden: int = 8, n_out: int = 2, seed: int = 7) -> ModelSpec:
    """One LSTM cell plus a dense head, weights as stablehlo.constant."""
    rng = np.random.default_rng(seed)
    wx = (rng.standard_normal((n_in, 4 * hidden)) * 0.5).astype(np.float32)
    wh = (rng.standard_normal((hidden, 4 * hidden)) * 0.5).astype(np.float32)
    b = (rng.standard_normal((1, 4 * hidden)) * 0.1).astype(np.float32)
    wy = (rng.standard_normal((hidden, n_out)) * 0.5).astype(np.float32)
    by = (rng.standard_normal((1, n_out)) * 0.1).astype(np.float32)
    H, G = hidden, 4 * hidden
    t_h, t_g = f"tensor<1x{H}xf32>", f"tensor<1x{G}xf32>"

    def sl(name, k):
        return (f'    %{name} = "stablehlo.slice"(%z) {{start_indices = array<i64: 0, {k * H}>, '
                f'limit_indices = array<i64: 1, {(k + 1) * H}>, strides = array<i64: 1, 1>}} '
                f': ({t_g}) -> {t_h}')

    def zero_state(n):
        return f"""    %{n} = ml_program.global_load @{n} : {t_h}
    %{n}_f = stablehlo.is_finite %{n} : ({t_h}) -> tensor<1x{H}xi1>
    %{n}_s = stablehlo.select %{n}_f, %{n}, %zero : tensor<1x{H}xi1>, {t_h}
    %{n}_z = stablehlo.multiply %{n}_s, %zero : {t_h}
    ml_program.global_store @{n} = %{n}_z : {t_h}"""

    mlir = f"""// One LSTM cell (input {n_in}, hidden {H}) and a dense head ({n_out} outputs).
module @lstm {{
  ml_program.global private mutable @h(dense<0.0> : {t_h}) : {t_h}
  ml_program.global private mutable @c(dense<0.0> : {t_h}) : {t_h}
  func.func @step(%x: tensor<1x{n_in}xf32>) -> tensor<1x{n_out}xf32> {{
    %h = ml_program.global_load @h : {t_h}
    %c = ml_program.global_load @c : {t_h}
    %wx = stablehlo.constant {_dense(wx)}
    %wh = stablehlo.constant {_dense(wh)}
    %b = stablehlo.constant {_dense(b)}
    %zx = stablehlo.dot_general %x, %wx, contracting_dims = [1] x [0] : (tensor<1x{n_in}xf32>, tensor<{n_in}x{G}xf32>) -> {t_g}
    %zh = stablehlo.dot_general %h, %wh, contracting_dims = [1] x [0] : ({t_h}, tensor<{H}x{G}xf32>) -> {t_g}
    %z0 = stablehlo.add %zx, %zh : {t_g}
    %z = stablehlo.add %z0, %b : {t_g}
{sl("zi", 0)}
{sl("zf", 1)}
{sl("zg", 2)}
{sl("zo", 3)}
    %i = stablehlo.logistic %zi : {t_h}
    %f = stablehlo.logistic %zf : {t_h}
    %g = stablehlo.tanh %zg : {t_h}
    %o = stablehlo.logistic %zo : {t_h}
    %fc = stablehlo.multiply %f, %c : {t_h}
    %ig = stablehlo.multiply %i, %g : {t_h}
    %c2 = stablehlo.add %fc, %ig : {t_h}
    %tc = stablehlo.tanh %c2 : {t_h}
    %h2 = stablehlo.multiply %o, %tc : {t_h}
    %wy = stablehlo.constant {_dense(wy)}
    %by = stablehlo.constant {_dense(by)}
    %y0 = stablehlo.dot_general %h2, %wy, contracting_dims = [1] x [0] : ({t_h}, tensor<{H}x{n_out}xf32>) -> tensor<1x{n_out}xf32>
    %y = stablehlo.add %y0, %by : tensor<1x{n_out}xf32>
    ml_program.global_store @h = %h2 : {t_h}
    ml_program.global_store @c = %c2 : {t_h}
    return %y : tensor<1x{n_out}xf32>
  }}
  func.func @reset() {{
    %zero = stablehlo.constant dense<0.0> : {t_h}
{zero_state("h")}
{zero_state("c")}
    return
  }}
}}
"""

    def sigmoid(v):
        return np.float32(1) / (np.float32(1) + np.exp(-v))

    def step(x, st):
        h, c = st
        z = x @ wx + h @ wh + b
        i, f, g, o = (z[:, k * H:(k + 1) * H] for k in range(4))
        c2 = sigmoid(f) * c + sigmoid(i) * np.tanh(g)
        h2 = sigmoid(o) * np.tanh(c2)
        return h2 @ wy + by, [h2, c2]

    zeros = np.zeros((1, H), np.float32)
    return ModelSpec(
        name="lstm",
        mlir=mlir,
        signature=_sig((1, n_in), (1, n_out), [("h", (1, H), zeros), ("c", (1, H), zeros)]),
        init_state=lambda: [zeros.copy(), zeros.copy()],
        step=step,
    )


def _stitched(make: Callable[..., ModelSpec]) -> Callable[..., ModelSpec]:
    def make_with_state_access(*args, **kwargs) -> ModelSpec:
        spec = make(*args, **kwargs)
        spec.mlir = with_state_access(spec.mlir)
        return spec
    return make_with_state_access


def keras_branched() -> ModelSpec:
    """Real frontend output: a functional Keras model (LSTM, GRU, Dense, Add,
    Multiply, Concatenate) through streamify + import, so every C-level test
    also covers what users build. The reference is TensorFlow running the
    pure step function eagerly."""
    import keras_models
    from tfaot.lower.mlir_import import import_program
    from tfaot.streamify_keras import streamify_keras

    program = streamify_keras(keras_models.build("functional_branched"),
                              "keras_branched.keras", "keras")

    def step(x, state):
        out = program.pure_step(x, *state)
        return out[0].numpy(), [o.numpy() for o in out[1:]]

    return ModelSpec("keras_branched", import_program(program), program.signature,
                     lambda: [s.initial for s in program.signature.states], step)


#: The models as the frontend would write them (with @get_state/@set_state).
ALL = {name: _stitched(make) for name, make in
       {"accumulator": accumulator, "ginit": ginit, "multi": multi, "lstm": lstm,
        "ctrl": ctrl, "stateless": stateless}.items()}
ALL["keras_branched"] = keras_branched  # the frontend already wrote its state access


# ---------------------------------------------------------------------------
# Built libraries, shared by all backend test modules of one pytest session.

_BUILT: dict[str, tuple[ModelSpec, Path, dict]] = {}
_ROOT: list[Path] = []


def build_root() -> Path:
    if not _ROOT:
        import atexit
        import shutil
        import tempfile

        root = Path(tempfile.mkdtemp(prefix="tfaot_backend_"))
        atexit.register(shutil.rmtree, root, True)
        _ROOT.append(root)
    return _ROOT[0]


def built(name: str) -> tuple[ModelSpec, Path, dict]:
    """(spec, output folder, manifest) of a model, built once per session."""
    if name not in _BUILT:
        from tfaot.backend.build import build_library

        spec = ALL[name]()
        root = build_root() / name
        manifest = build_library(spec.mlir, spec.signature, root / "out", name=spec.name,
                                 workdir=root / "work")
        _BUILT[name] = (spec, root / "out", manifest)
    return _BUILT[name]
