"""The direct step (compiler/emit/direct_step.py): ``@step`` as straight C over
buffers fixed at build time where it can be, the translated ``@step`` where
it cannot.

Checked here on the VM programs iree-compile makes of small models: which
steps become direct, what their C does and does not do (no views, no
reference counts of temporaries, constant bindings checked at build time),
the memory plan (the step's temporaries in the scratch area, only the kept
state in the pools), the fallbacks (an input kept in a state, a binding out
of range, control flow), and through the built library: the numbers over
many steps and a context whose pools would run dry if a step leaked its
state. Every other test that builds for a CPU runs the direct step too.
"""
from __future__ import annotations

import re

import numpy as np
import pytest

import backend_models
from tfaot import emit
from tfaot.backend.compile import compile_module
from tfaot.target_options import make_target


@pytest.fixture(scope="module")
def vm_texts(tmp_path_factory) -> dict[str, str]:
    """The host VM programs of the accumulator (state + input -> state and
    output) and control-flow models."""
    out = {}
    for name in ("accumulator", "ctrl"):
        spec = backend_models.ALL[name]()
        compiled = compile_module(spec.mlir, tmp_path_factory.mktemp(name), name=name,
                                  target=make_target("cpu"))
        out[name] = compiled.vm_asm_path.read_text()
    return out


def test_a_straight_step_is_direct(vm_texts):
    prog = emit.translate(vm_texts["accumulator"], prefix="acc")
    direct = prog.step.direct
    assert direct is not None and not prog.step.body
    body = direct.body
    # no views, no lookups, no per-binding checks: dispatches through the
    # sites init prepared, with their bindings' pointers
    assert "tfrt_view" not in body and "tfrt_bind(" not in body and "lookup" not in body
    assert re.search(r"tfrt_direct_call\(&ctx->direct_sites\[0\], 1u, 1u, 1u, ", body)
    # the new state comes from the pools and is the only counted reference
    assert body.count("tfrt_buffer_allocate_from(") == 1
    assert body.count("tfrt_retain(") == 1 and "ctx->g.s = tfrt_retain(" in body
    assert direct.inputs == [(0x21000020, 16)] and direct.outputs == [(0x21000020, 16)]
    assert [d.binding_count for d in direct.dispatches] == [3]


def test_the_memory_plan_leaves_the_direct_steps_temporaries_out_of_the_pools(vm_texts):
    """The pools hold the state: the global's buffer and the one a step
    computes (2 blocks of its class), nothing of the step's temporaries."""
    prog = emit.translate(vm_texts["accumulator"], prefix="acc")
    assert prog.pools == [(64, 2)]


def test_an_input_kept_in_a_state_is_translated(vm_texts):
    """A step that keeps its input's buffer in a global (the next step
    would find the next input there) stays the translated @step."""
    text = vm_texts["accumulator"]
    store = re.search(r"vm\.global\.store\.ref (%[\w#]+), @s\b", text)
    buffer = re.search(r"(%\w+) = vm\.call @hal_inline\.buffer\.storage", text)
    assert store and buffer, "the accumulator's step changed shape"
    changed = text.replace(store.group(0), f"vm.global.store.ref {buffer.group(1)}, @s")
    prog = emit.translate(changed, prefix="acc")
    assert prog.step.direct is None and "tfrt_dispatch_bound" in prog.step.body


def test_a_binding_past_its_buffer_is_translated(vm_texts):
    """A constant binding range past its buffer's end (an IREE bug) is not
    compiled into a direct step; the translated @step checks it at run time."""
    text = vm_texts["accumulator"]
    step = text.index("vm.func private @step(")
    alloc = re.compile(r"(\n\s*)(%[\w:]+ = vm\.call @hal_inline\.buffer\.allocate\((%\w+)), "
                       r"(%\w+)\)").search(text, step)
    size = re.search(rf"{re.escape(alloc[4])} = vm\.const\.i64 (\d+)", text)
    assert alloc and size, "the accumulator's step changed shape"
    smaller = (text[:alloc.start()] + f"{alloc[1]}%tfaot_small = vm.const.i64 {int(size[1]) - 4}"
               f"{alloc[1]}{alloc[2]}, %tfaot_small)" + text[alloc.end():])
    prog = emit.translate(smaller, prefix="acc")
    assert prog.step.direct is None


def test_control_flow_is_translated(vm_texts):
    prog = emit.translate(vm_texts["ctrl"], prefix="ctrl")
    assert prog.step.direct is None and prog.step.body


def test_direct_step_through_the_library_over_many_steps():
    """The built accumulator runs its direct step 300 times against numpy;
    the pools have two state blocks, so a step that kept a reference to the
    state it replaced would run out of memory at its third step."""
    from tfaot import harness

    spec, out, _ = backend_models.built("accumulator")
    assert "accumulator_vm_step_direct(" in (out / "src" / "accumulator.c").read_text()
    _check_steps(spec, harness.load(out), 300)


def _check_steps(spec, lib, steps: int) -> None:
    """The accumulator library ``lib`` over ``steps`` random steps against
    ``spec``'s numpy step."""
    xs = np.random.default_rng(steps).standard_normal((steps, 1, 4)).astype(np.float32)
    want, state = [], spec.init_state()
    for x in xs:
        y, state = spec.step(x, state)
        want.append(y)
    np.testing.assert_allclose(lib.step_n(xs).reshape(steps, 1, 4), np.stack(want), rtol=1e-6,
                               atol=1e-5)


def test_a_step_of_many_dispatches_calls_them_outlined(vm_texts, tmp_path, monkeypatch):
    """Past INLINED_CALLS_MAX dispatches the step calls the kernels through
    tfrt_direct_call_outlined (gcc's -O2 time grew with the square of the
    inlined calls); the library so built runs 100 steps as numpy does."""
    from tfaot import harness
    from tfaot.backend.build import build_library
    from tfaot.emit import direct_step

    inlined = emit.translate(vm_texts["accumulator"], prefix="acc").step.direct.body
    assert "tfrt_direct_call(" in inlined and "_outlined" not in inlined
    monkeypatch.setattr(direct_step, "INLINED_CALLS_MAX", 0)
    outlined = emit.translate(vm_texts["accumulator"], prefix="acc").step.direct.body
    assert re.search(r"tfrt_direct_call_outlined\(&ctx->direct_sites\[0\], 1u, 1u, 1u, ",
                     outlined)
    assert "tfrt_direct_call(" not in outlined

    spec = backend_models.ALL["accumulator"]()
    build_library(spec.mlir, spec.signature, tmp_path / "out", name=spec.name,
                  workdir=tmp_path / "work")
    assert "tfrt_direct_call_outlined(&" in (tmp_path / "out" / "src" / "accumulator.c").read_text()
    _check_steps(spec, harness.load(tmp_path / "out"), 100)


def test_inputs_and_outputs_of_other_types_than_the_c_api_are_refused(vm_texts):
    """The direct step reads its inputs without the views' checks: a build
    whose C API disagrees with the compiled step on an element type or a
    size fails, where a translated step failed at every call."""
    from tfaot.errors import TfaotError
    from tfaot.package.c_api import _check_direct_step

    direct = emit.translate(vm_texts["accumulator"], prefix="acc").step.direct
    f32 = {"name": "x", "etype": 0x21000020, "bytes": 16}
    _check_direct_step(direct, [f32], [dict(f32, name="y")])
    with pytest.raises(TfaotError, match=r"input 'x' is element type 0x11000008, 16 bytes"):
        _check_direct_step(direct, [dict(f32, etype=0x11000008)], [dict(f32, name="y")])
    with pytest.raises(TfaotError, match=r"output 'y' .* 12 bytes, in the C API"):
        _check_direct_step(direct, [f32], [dict(f32, name="y", bytes=12)])
