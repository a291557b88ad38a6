"""Backend, build-time checks: clear errors for what the backend cannot do."""
from __future__ import annotations

from pathlib import Path

import pytest

import backend_models
from tfaot import emit
from tfaot.backend.build import build_library
from tfaot.backend.compile import compile_module, split_allocations
from tfaot.target import is_host_triple
from tfaot.target_options import make_target
from tfaot.errors import TfaotError
from tfaot.program import ProgramSignature, TensorInfo

DATA = Path(__file__).parent / "data" / "backend"
SIG_1x4 = ProgramSignature(inputs=(TensorInfo("x", "float32", (1, 4)),),
                           outputs=(TensorInfo("y", "float32", (1, 4)),), states=())


def test_null_constant_bug_is_refused_at_build_time(tmp_path):
    with pytest.raises(TfaotError) as e:
        build_library((DATA / "null_constant.mlir").read_text(), SIG_1x4, tmp_path / "out",
                      name="null_constant", workdir=tmp_path / "work")
    msg = str(e.value)
    assert "null buffer" in msg and "@reset" in msg and "dropped-constant bug" in msg
    assert "state * 0 + constant" in msg


def test_op_without_rule_is_an_error_naming_op_and_location():
    vm_asm = """module {
  vm.module public @m {
    vm.func private @step(%arg0: f32) -> f32 {
      %0 = vm.add.f32 %arg0, %arg0 : f32
      vm.return %0 : f32
    }
    vm.export @step
  }
}"""
    with pytest.raises(TfaotError, match=r"no C emit rule for VM op 'vm.add.f32'.*@step.*line 4"):
        emit.translate(vm_asm, prefix="m")


def test_unknown_import_is_an_error():
    vm_asm = """module {
  vm.module public @m {
    vm.import private @hal.devices.count() -> i32
    vm.func private @step() -> i32 {
      %0 = vm.call @hal.devices.count() : () -> i32
      vm.return %0 : i32
    }
    vm.export @step
  }
}"""
    with pytest.raises(TfaotError, match="no C emit rule for import 'hal.devices.count'"):
        emit.translate(vm_asm, prefix="m")


def test_integer_ops_and_loops_translate():
    """Block arguments, back-edges and integer rules produce C (no compile here)."""
    vm_asm = """module {
  vm.module public @m {
    vm.func private @count(%n: i32) -> i64 {
      %c0 = vm.const.i32.zero
      %c1 = vm.const.i32 1
      %z = vm.const.i64.zero
      vm.br ^bb1(%c0, %z : i32, i64)
    ^bb1(%i: i32, %acc: i64):
      %lt = vm.cmp.lt.i32.s %i, %n : i32
      vm.cond_br %lt, ^bb2, ^bb3
    ^bb2:
      %e = vm.ext.i32.i64.s %i : i32 -> i64
      %acc2 = vm.add.i64 %acc, %e : i64
      %i2 = vm.add.i32 %i, %c1 : i32
      vm.br ^bb1(%i2, %acc2 : i32, i64)
    ^bb3:
      vm.return %acc : i64
    }
    vm.export @count
  }
}"""
    prog = emit.translate(vm_asm, prefix="m")
    body = prog.functions["count"].body
    assert "goto bb1;" in body and "bb3:" in body
    assert prog.ops_used["vm.cond_br"] == 1


def test_compile_error_names_the_first_compiler_error(tmp_path):
    with pytest.raises(TfaotError, match=r"iree-compile failed .*error:"):
        compile_module("module { func.func @step( }", tmp_path, name="bad", target=make_target())


def test_bad_model_name_is_refused(tmp_path):
    with pytest.raises(TfaotError, match="not a valid C identifier"):
        build_library("module {}", SIG_1x4, tmp_path, name="my-model", workdir=tmp_path)


def test_signature_mismatch_is_refused(tmp_path):
    spec = backend_models.ALL["accumulator"]()
    sig = ProgramSignature(inputs=(TensorInfo("x", "float32", (1, 5)),),
                           outputs=(TensorInfo("y", "float32", (1, 4)),), states=())
    with pytest.raises(TfaotError, match=r"input 'x' is float32\[1, 5\].*tensor<1x4xf32>"):
        build_library(spec.mlir, sig, tmp_path / "out", name="acc", workdir=tmp_path / "w")


def test_equal_allocations_are_kept_apart():
    """Work-around for VM CSE merging equal hal_inline.buffer.allocate calls."""
    hal = """module {
  util.func public @f() -> (!hal.buffer, !hal.buffer) {
    %c64 = arith.constant 64 : index
    %c16 = arith.constant 16 : index
    %b0, %s0 = hal_inline.buffer.allocate alignment(%c64) : !hal.buffer{%c16} in !util.buffer
    %b1, %s1 = hal_inline.buffer.allocate alignment(%c64) : !hal.buffer{%c16} in !util.buffer
    util.return %b0, %b1 : !hal.buffer, !hal.buffer
  }
}"""
    out = split_allocations(hal)
    assert out.count("hal_inline.buffer.allocate") == 2
    assert "arith.addi %c16" in out


#: a Linux triple other than this machine's
OTHER_LINUX = ("x86_64-unknown-linux-gnu" if is_host_triple("aarch64-unknown-linux-gnu")
               else "aarch64-unknown-linux-gnu")


@pytest.mark.parametrize("triple,cpu", [(OTHER_LINUX, "generic"),
                                       ("thumbv7em-none-eabihf", "cortex-m4")])
def test_cross_target_build_writes_sources(triple, cpu, tmp_path):
    import shutil
    import subprocess

    spec = backend_models.ALL["lstm"]()
    name = "cross"
    manifest = build_library(spec.mlir, spec.signature, tmp_path / "out", name=name,
                             triple=triple, cpu=cpu, workdir=tmp_path / "work")
    out = tmp_path / "out"
    assert manifest["triple"] == triple and manifest["cpu"] == cpu
    assert (out / "src" / f"{name}.c").is_file() and (out / f"{name}.h").is_file()
    assert not (out / f"lib{name}.so").exists()
    syms = subprocess.run([shutil.which("llvm-nm") or "nm", out / "src" / f"{name}_kernels.o"],
                          capture_output=True, text=True).stdout
    assert f"T {name}_kernels_library_query" in syms
    if shutil.which("clang"):
        # The generated C compiles warning-free for the target (ILP32 for Cortex-M),
        # and the header's context size is the target's.
        assert manifest["ctx_size"] > 0
        assert f"#define CROSS_CTX_SIZE {manifest['ctx_size']}" in (out / f"{name}.h").read_text()
        proc = subprocess.run(
            ["clang", f"--target={triple}", "-ffreestanding", "-DTFRT_FREESTANDING", "-std=c11",
             "-Wall", "-Wextra", "-Werror", "-pedantic", "-O2", "-c", f"{name}.c",
             "-o", tmp_path / "x.o"], cwd=out / "src", capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr


def test_refs_the_function_need_not_count_are_borrowed_or_moved():
    """A ref argument (the caller holds it) and the load of a global that
    the function never stores take no reference of their own; a stored
    global's load does, and a returned local that owns one moves it to the
    result. A function that calls another, which may store any global,
    borrows no global."""
    vm_asm = """module {
  vm.module public @m {
    vm.global.ref private mutable @kept : !vm.buffer
    vm.global.ref private mutable @swapped : !vm.buffer
    vm.func private @step(%arg0: !vm.buffer) -> (!vm.buffer, !vm.buffer, !vm.buffer) {
      %k = vm.global.load.ref @kept : !vm.buffer
      %s = vm.global.load.ref @swapped : !vm.buffer
      %n = vm.buffer.length %s : !vm.buffer -> i64
      vm.global.store.ref %arg0, @swapped : !vm.buffer
      vm.return %k, %s, %arg0 : !vm.buffer, !vm.buffer, !vm.buffer
    }
    vm.func private @outer(%arg0: !vm.buffer) {
      %k = vm.global.load.ref @kept : !vm.buffer
      vm.discard.refs %arg0 : !vm.buffer
      %r:3 = vm.call @step(%k) : (!vm.buffer) -> (!vm.buffer, !vm.buffer, !vm.buffer)
      vm.return
    }
    vm.export @step
    vm.export @outer
  }
}"""
    prog = emit.translate(vm_asm, prefix="m")
    step = prog.functions["step"].body
    assert "v_arg0 = arg0;" in step and "v_kept = ctx->g.kept;" in step
    assert "v_swapped = tfrt_retain(ctx->g.swapped);" in step
    # borrowed locals are returned with a reference of the result's own
    assert "*result0 = tfrt_retain(v_kept);" in step
    assert "*result2 = tfrt_retain(v_arg0);" in step
    assert "*result1 = v_swapped; v_swapped = NULL;" in step
    exit_block = step[step.index("done:"):]
    assert "tfrt_release(rt, v_swapped);" in exit_block
    assert "v_kept)" not in exit_block and "v_arg0)" not in exit_block
    outer = prog.functions["outer"].body
    assert "v_kept = tfrt_retain(ctx->g.kept);" in outer
    # the borrowed argument's discard drops the local, not the caller's reference
    assert "v_arg0 = arg0;" in outer and "tfrt_release(rt, v_arg0)" not in outer


def test_a_retain_right_before_the_release_of_its_source_is_a_move():
    """(An allocation's buffer and its storage are one object: the storage
    local retains it, then the VM discards the buffer local.) Not where
    the source is borrowed: there the copy needs a reference of its own."""
    from tfaot.emit.function import _with_borrowed_refs

    lines = ["  v_b = tfrt_retain(v_a);", "  tfrt_release(rt, v_a); v_a = NULL;",
             "  v_d = tfrt_retain(v_c);", "  tfrt_release(rt, v_c); v_c = NULL;"]
    assert _with_borrowed_refs(lines, {"v_c"}, {}) == [
        "  v_b = v_a; v_a = NULL;  /* moved */",
        "  v_d = tfrt_retain(v_c);", "  v_c = NULL;"]


def test_the_one_return_releases_only_what_its_locals_still_hold():
    """A straight-line function's return releases the locals that hold a
    reference there (not the one discarded before) and returns; the shared
    exit, which failures reach from anywhere (here a buffer's length, of a
    null buffer), still releases every local."""
    vm_asm = """module {
  vm.module public @m {
    vm.global.ref private mutable @a : !vm.buffer
    vm.global.ref private mutable @b : !vm.buffer
    vm.func private @step(%arg0: !vm.buffer) {
      %x = vm.global.load.ref @a : !vm.buffer
      %y = vm.global.load.ref @b : !vm.buffer
      %n = vm.buffer.length %x : !vm.buffer -> i64
      vm.global.store.ref %arg0, @a : !vm.buffer
      vm.global.store.ref %arg0, @b : !vm.buffer
      vm.discard.refs %y : !vm.buffer
      vm.return
    }
    vm.export @step
  }
}"""
    body = emit.translate(vm_asm, prefix="m").functions["step"].body
    success, failure = body.split("done:")
    discard = "tfrt_release(rt, v_b); v_b = NULL;"
    tail = success[success.index(discard) + len(discard):]
    assert "tfrt_release(rt, v_a);" in tail and "tfrt_release(rt, v_b)" not in tail
    assert tail.rstrip().endswith("return status;") and "goto done" not in tail
    assert "tfrt_release(rt, v_a);" in failure and "tfrt_release(rt, v_b);" in failure


def test_a_function_nothing_in_can_fail_has_no_exit_label():
    """(A stateless model's @reset: its C has no op that jumps to the
    shared exit, and an unused label warns at -Wall.)"""
    vm_asm = """module {
  vm.module public @m {
    vm.func private @reset() {
      vm.return
    }
    vm.export @reset
  }
}"""
    body = emit.translate(vm_asm, prefix="m").functions["reset"].body
    assert "done:" not in body and "goto done" not in body
    assert body.strip().endswith("return status;")
