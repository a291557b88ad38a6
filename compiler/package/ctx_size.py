"""sizeof(struct NAME_ctx) on the target: computed from the C text, measured when we can.

The size is computed from the rendered C and the target's data model
(compiler/package/c_layout.py), so it is right without the target's compiler. When a
compiler for the target is available it also measures the size (the C text
with ``TFAOT_CTX_PROBE`` defined, plus an array of sizeof(ctx) read back with
nm), and the build fails if the two disagree.
"""
from __future__ import annotations

import subprocess
from pathlib import Path

from . import c_layout
from ..errors import TfaotError
from .c_api import CTX_ALIGN
from .link import llvm_tool

#: NAME.c defines the context before this line; what follows (the weights of
#: packed builds among it: megabytes of C) is not needed to lay it out.
CONTEXT_END = "/* ---- read-only data of the host program"


def context_text(c_text: str) -> str:
    """NAME.c up to the end of the context definition."""
    head, found, _ = c_text.partition(CONTEXT_END)
    if not found:
        raise TfaotError("package: NAME.c has no read-only data marker after the context "
                         "(codegen_templates/model.c.j2 and ctx_size.py disagree; a tfaot bug)")
    return head
from .shim import shim_texts, write_shim


def compute_ctx_size(c_text: str, h_text: str, *, name: str, triple: str,
                     backend: str = "cpu") -> int:
    """sizeof(struct NAME_ctx) on ``triple``, computed from the C text (c_layout)."""
    size, align = c_layout.struct_layout([*shim_texts(backend), h_text, context_text(c_text)],
                                         f"struct {name}_ctx", c_layout.data_model(triple))
    if size <= 0 or align != CTX_ALIGN:
        raise TfaotError(f"package: computed context layout of '{name}' for {triple} is "
                         f"{size} bytes aligned to {align}; expected a positive size aligned to "
                         f"{CTX_ALIGN} (a tfaot bug: please report)")
    return size


def measure_ctx_size(c_text: str, h_text: str, *, name: str, triple: str, backend: str,
                     cmd: list[str], probe: Path) -> int:
    """sizeof(struct NAME_ctx) measured with the C compiler command ``cmd``."""
    probe.mkdir(parents=True, exist_ok=True)
    write_shim(probe, backend)
    (probe / f"{name}.h").write_text(h_text)
    (probe / "probe.c").write_text(
        context_text(c_text) + f"char {name}_ctx_probe_[sizeof(struct {name}_ctx)];\n")
    proc = subprocess.run([*cmd, "-DTFAOT_CTX_PROBE", "-fno-common", "-c", "probe.c",
                           "-o", "probe.o"], cwd=probe, capture_output=True, text=True,
                          check=False)
    if proc.returncode != 0:
        first = next((ln for ln in proc.stderr.splitlines() if "error" in ln), proc.stderr[:200])
        raise TfaotError(f"package: compiling the generated C for {triple} failed "
                         f"({cmd[0]}): {first}")
    nm = llvm_tool("llvm-nm") or "nm"
    out = subprocess.run([nm, "-S", "probe.o"], cwd=probe, capture_output=True, text=True,
                         check=False).stdout
    for line in out.splitlines():
        parts = line.split()
        if parts and parts[-1] == f"{name}_ctx_probe_" and len(parts) >= 2:
            return int(parts[1], 16)
    raise TfaotError(f"package: could not measure the context size for {triple}")


def ctx_size_for(c_text: str, h_text: str, *, name: str, triple: str, backend: str,
                 probe_cmd: list[str] | None, probe: Path) -> int:
    """The context size for the target: computed from the layout; cross-checked
    with ``probe_cmd`` (a C compiler for the target) when there is one."""
    computed = None
    try:
        c_layout.data_model(triple)
    except TfaotError:
        if probe_cmd is None:
            raise
        # an architecture c_layout does not know: the compiler's measurement is all there is
    else:
        computed = compute_ctx_size(c_text, h_text, name=name, triple=triple, backend=backend)
    if probe_cmd is None:
        return computed
    measured = measure_ctx_size(c_text, h_text, name=name, triple=triple, backend=backend,
                                cmd=probe_cmd, probe=probe)
    if computed is not None and measured != computed:
        raise TfaotError(
            f"package: the context of '{name}' is {measured} bytes for {triple} with "
            f"{probe_cmd[0]} but tfaot computed {computed} (compiler/package/c_layout.py, data model "
            f"{c_layout.data_model(triple).name}); a tfaot bug: please report")
    return measured
