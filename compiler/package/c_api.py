"""The C API of one model: NAME.c and NAME.h, rendered from codegen_templates/.

``ApiModel`` gathers, once, everything the templates need (tensors, state
layout, the VM entry points, statuses, the shim backend) after checking the
compiled program against the step signature.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from .. import emit as emit_mod
from .. import status as status_mod
from ..backend.compile import CompiledModule
from ..dtypes import DTYPES, dtype
from ..errors import TfaotError
from ..program import ProgramSignature, StreamInfo, TensorInfo
from ..resources import template_env
from . import gpu_kernels
from .shim import SHIM_BACKENDS, SHIM_CORE_SOURCE

CTX_ALIGN = 64
_VIEW = "!vm.ref<!hal.buffer_view>"
_TENSOR_DECL = re.compile(r"%?([\w.]+)\s*:\s*tensor<([^>]*)>")


def tfaot_version() -> str:
    try:
        from importlib.metadata import version

        return version("tfaot")
    except Exception:
        return "dev"


def fnv1a64(data: bytes) -> int:
    """FNV-1a, 64-bit (what NAME_init_with_weights checks the weights with)."""
    h = 0xcbf29ce484222325
    for b in data:
        h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return h


def tensor_dict(t: TensorInfo) -> dict:
    """One input, output or state as the templates and the manifest describe it."""
    d = dtype(t.dtype, f"tensor '{t.name}'")
    return {"name": t.name, "dtype": t.dtype, "shape": [int(s) for s in t.shape],
            "size": t.size, "bytes": t.size * d.size, "etype": d.iree_code, "ctype": d.ctype,
            "streamed": bool(getattr(t, "streamed", True)),
            "held": bool(getattr(t, "held", False)),
            "length": bool(getattr(t, "length", False))}


def stream_fill(state, streams: int) -> dict | None:
    """How reset_stream writes one stream's rows of ``state`` (a StateInfo of
    the N-stream program) back to their initial value: ``{"zero": True}``
    or ``{"word": w}`` (one 32-bit word repeated: a running max's
    -FLT_MAX); None for any other value (then the rows are reset by
    staging, ApiModel.writes_stream_rows), or when it is not known here."""
    import numpy as np

    if state.initial is None:
        return None
    one = np.ascontiguousarray(np.asarray(state.initial, dtype=state.dtype)[0]).tobytes()
    if one.count(0) == len(one):
        return {"zero": True}
    if len(one) % 4 == 0 and one == one[:4] * (len(one) // 4):
        return {"word": f"0x{int.from_bytes(one[:4], 'little'):08X}u"}
    return None


def c_int(value: int, ctype: str) -> str:
    """An integer literal of a token id bound, for comparison with ``ctype``."""
    if ctype in ("int64_t", "uint64_t") and not -(1 << 31) <= value < (1 << 31):
        return f"{'U' if ctype[0] == 'u' else ''}INT64_C({value})"
    return f"({value})" if value < 0 else str(value)


def id_checks(inputs: list[dict]) -> list[dict]:
    """What the C check of the token-id inputs needs: per checked input its
    runs of elements, each with the C condition that refuses an ``id``
    (None: every id is refused, e.g. an unsigned id of an empty table)."""
    checks = []
    for i, t in enumerate(inputs):
        r = t.get("id_range")
        if not r:
            continue
        d = dtype(t["dtype"], f"input '{t['name']}'")
        tmin = -(1 << (8 * d.size - 1)) if t["ctype"][0] == "i" else 0
        tmax = (1 << (8 * d.size - (1 if t["ctype"][0] == "i" else 0))) - 1
        runs = []
        for first, count, lo, hi in r["runs"]:
            parts = []
            if lo > tmin:
                parts.append(f"id < {c_int(lo, t['ctype'])}")
            if hi <= tmax:
                parts.append(f"id >= {c_int(hi, t['ctype'])}" if hi > tmin or tmin < 0
                             else None)
            refuse = None if None in parts else " || ".join(parts)
            runs.append({"first": first, "count": count, "lo": lo, "hi": hi, "refuse": refuse})
        checks.append({"index": i, "name": t["name"], "ctype": t["ctype"], "size": d.size,
                       "slot": t["slot"], "field": t["field"], "runs": runs,
                       "min": r["min"], "end": r["end"],
                       "min_c": c_int(r["min"], t["ctype"]), "end_c": c_int(r["end"], t["ctype"]),
                       "whole": len(r["runs"]) == 1 and r["runs"][0][:2] == [0, t["size"]],
                       "tables": r.get("tables", [])})
    return checks


def input_slots(inputs: list[dict]) -> int:
    """Adds ``slot`` to each input: its 64-byte aligned place in the context's
    input copy (kernels assume aligned bindings); returns the copy's size."""
    slot = 0
    for t in inputs:
        t["slot"] = slot
        slot += -(-t["bytes"] // CTX_ALIGN) * CTX_ALIGN
    return slot


def state_layout(states: list[dict]) -> tuple[int, int]:
    """Adds ``offset`` (packed, the public layout) and ``slot`` (64-byte aligned,
    the context's scratch copy) to each state; returns both total sizes."""
    offset = slot = 0
    for s in states:
        s["offset"], s["slot"] = offset, slot
        offset += s["bytes"]
        slot += -(-s["bytes"] // CTX_ALIGN) * CTX_ALIGN
    return offset, slot


@dataclass
class ApiModel:
    """What NAME.c and NAME.h are rendered from."""

    name: str
    vm: emit_mod.VMProgram
    compiled: CompiledModule
    library_name: str
    inputs: list[dict] = field(default_factory=list)
    outputs: list[dict] = field(default_factory=list)
    states: list[dict] = field(default_factory=list)
    state_bytes: int = 0
    state_slot_bytes: int = 0
    input_slot_bytes: int = 0
    stream: StreamInfo = field(default_factory=StreamInfo)

    @property
    def query_symbol(self) -> str:
        """The kernel object's query symbol, renamed so several models link together."""
        return f"{self.name}_kernels_library_query"

    @classmethod
    def check(cls, vm: emit_mod.VMProgram, sig: ProgramSignature, compiled: CompiledModule,
              name: str, stream: StreamInfo | None = None,
              id_ranges: dict[int, dict] | None = None) -> "ApiModel":
        """Checks the compiled program against ``sig``; raises naming the mismatch.
        ``id_ranges``: the valid ids of the inputs that index a table (by input
        index), which the step checks."""
        model = cls(name, vm, compiled, _library_name(vm, compiled),
                    [tensor_dict(t) for t in sig.inputs], [tensor_dict(t) for t in sig.outputs],
                    [tensor_dict(t) for t in sig.states], stream=stream or StreamInfo())
        for index, r in (id_ranges or {}).items():
            model.inputs[index]["id_range"] = r
        if not model.inputs or not model.outputs:
            raise TfaotError(
                f"package: model '{name}' has {len(model.inputs)} inputs and "
                f"{len(model.outputs)} outputs; the C API needs at least one of each")
        _name_fields(model.inputs)
        _name_fields(model.outputs)
        model.input_slot_bytes = input_slots(model.inputs)
        step = vm.step
        if step is None:
            raise TfaotError(f"package: the compiled program has no 'step' function "
                             f"(exports: {', '.join(vm.exports)})")
        if step.arg_types != [_VIEW] * len(model.inputs) or \
                step.result_types != [_VIEW] * len(model.outputs):
            raise TfaotError(f"package: step has VM signature {step.arg_types} -> "
                             f"{step.result_types}; expected {len(model.inputs)} tensor(s) in "
                             f"and {len(model.outputs)} tensor(s) out")
        _check_signature_against_vm(sig, step)
        if step.direct is not None:
            _check_direct_step(step.direct, model.inputs, model.outputs)
        model.state_bytes, model.state_slot_bytes = state_layout(model.states)
        if model.stream.streams > 1:
            for t, info in zip(model.states, sig.states):
                t["stream_fill"] = stream_fill(info, model.stream.streams)
        _check_state_functions(vm, name, len(model.states))
        return model

    def template_values(self, ctx_size: int, footprint: dict | None) -> dict[str, Any]:
        name, vm, target = self.name, self.vm, self.compiled.target
        statuses = status_mod.render(name=name, P=name.upper(), align=CTX_ALIGN)
        backend = SHIM_BACKENDS[target.shim_backend]
        has_states = bool(self.states)
        return dict(
            name=name, P=name.upper(), tfaot_version=tfaot_version(), triple=target.triple,
            cpu=target.cpu, compiler_version=self.compiled.compiler_version, vm=vm,
            inputs=self.inputs, outputs=self.outputs, states=self.states,
            in_ctype=self.inputs[0]["ctype"], out_ctype=self.outputs[0]["ctype"],
            in_etype=self.inputs[0]["etype"], out_etype=self.outputs[0]["etype"],
            # One input (output): a flat NAME_input_t (NAME_output_t) array;
            # several: one NAME_inputs (NAME_outputs) struct per step.
            in_type=f"{name}_input_t" if len(self.inputs) == 1 else f"{name}_inputs",
            in_count=f"{name.upper()}_INPUT_SIZE" if len(self.inputs) == 1 else "1",
            input_slot_bytes=self.input_slot_bytes,
            out_type=f"{name}_output_t" if len(self.outputs) == 1 else f"{name}_outputs",
            out_count=f"{name.upper()}_OUTPUT_SIZE" if len(self.outputs) == 1 else "1",
            ctx_size=ctx_size, ctx_align=CTX_ALIGN, arena_bytes=vm.arena_bytes,
            max_rank=max([vm.view_rank, *(len(t["shape"]) for t in
                                          (*self.inputs, *self.outputs, *self.states))]),
            libraries=[{"name": self.library_name, "symbol": self.query_symbol}]
            if target.has_kernel_object else [],
            **self._gpu_values,
            weights=self.weights,
            step_fn=vm.step, reset_fn=vm.reset, init_fn=vm.init,
            get_fn=vm.get_state if has_states else None,
            set_fn=vm.set_state if has_states else None,
            state_bytes=self.state_bytes, state_slot_bytes=self.state_slot_bytes,
            stage_state=self.stages_state, stream_rows=self.writes_stream_rows,
            footprint=footprint or {"code_bytes": 0, "weight_bytes": 0},
            signature=emit_mod.function_signature,
            statuses=statuses,
            id_checks=id_checks(self.inputs),
            status_width=max(len(st["api_name"]) + len(str(st["value"])) for st in statuses) + 1,
            stream=self.stream, streams=self.stream.streams,
            shim={"backend": target.shim_backend, "header": backend.header,
                  "sources": (SHIM_CORE_SOURCE, backend.source)},
        )

    @property
    def stages_state(self) -> bool:
        """Whether set_state copies the caller's state into the context first
        (``io.state_copy``, as large as the whole state), or hands the caller's
        memory to the program as it is. A copy is needed where a kernel may
        bind it (64-byte aligned bindings; GPU staging), and with several
        streams, where one stream's state is changed inside the whole."""
        if not self.states:
            return False
        set_state = self.vm.set_state
        many = self.stream.streams > 1 and not self.writes_stream_rows
        return (many or self.compiled.target.shim_backend != "cpu"
                or set_state is None or set_state.dispatches > 0)

    @property
    def writes_stream_rows(self) -> bool:
        """Whether set_stream_state and reset_stream write one stream's rows
        of the state where they lie, through @get_state's views: where
        those are of the state itself (emit/state_reuse.py: CPU programs)
        and every state's initial value is known (``stream_fill``). Else
        they stage the whole state in the context, change one stream's
        rows and load it back: a copy of all streams' state kept in the
        context (85 KB for 2 streams of the 49x40 DS-CNN) and written
        three times per call."""
        return (self.stream.streams > 1 and self.vm.get_state_aliases
                and self.compiled.target.shim_backend == "cpu"
                and all(t.get("stream_fill") is not None for t in self.states))

    def weights_blob(self) -> bytes:
        """NAME.weights (--weights=file); b"" when the weights are in the library."""
        return self._weights_file[0]

    @cached_property
    def _weights_file(self) -> tuple[bytes, list[dict]]:
        """NAME.weights and its parts: the external data, each part at a
        64-byte aligned offset."""
        blob, parts = bytearray(), []
        for rd in self.vm.external_rodata:
            blob += bytes(-len(blob) % CTX_ALIGN)
            parts.append({"offset": len(blob), "bytes": len(rd.data), "sym": rd.sym})
            blob += rd.data
        return bytes(blob), parts

    @cached_property
    def weights(self) -> dict | None:
        """What the templates say about NAME.weights, or None (weights embedded)."""
        blob, parts = self._weights_file
        if not parts:
            return None
        return {"parts": parts, "bytes": len(blob), "fnv1a64": f"{fnv1a64(blob):016x}"}

    @cached_property
    def _gpu_values(self) -> dict[str, Any]:
        """The GPU backend's tables (empty for CPU targets), read once."""
        if self.compiled.target.kind == "cuda":
            executables, kernels = gpu_kernels.cuda_tables(self.vm.containers)
            return dict(cu_executables=executables, cu_kernels=kernels,
                        staging_bytes=self.staging_bytes)
        if self.compiled.target.kind != "vulkan":
            return {}
        executables, pipelines = gpu_kernels.vulkan_tables(self.vm.containers)
        return dict(vk_executables=executables, vk_pipelines=pipelines,
                    staging_bytes=self.staging_bytes)

    @property
    def staging_bytes(self) -> int:
        """Device memory for the caller buffers a GPU dispatch binds (the step's
        inputs, set_state's states), each at a 64-byte aligned offset (up to
        TFRT_MAX_STAGED = 16 of them per batch, tfrt.h)."""
        return self.input_slot_bytes + self.state_slot_bytes + CTX_ALIGN * 16

    def render_c(self) -> str:
        """NAME.c: it does not depend on the context size or the footprint."""
        return template_env().get_template("model.c.j2").render(**self.template_values(0, None))

    def render_h(self, ctx_size: int, footprint: dict | None = None) -> str:
        return template_env().get_template("model.h.j2").render(
            **self.template_values(ctx_size, footprint))


def _name_fields(tensors: list[dict]) -> None:
    """Adds ``field``: the tensor's member name in NAME_inputs / NAME_outputs
    (its tensor name made a C identifier, unique, in manifest order)."""
    seen: set[str] = set()
    for i, t in enumerate(tensors):
        base = emit_mod.c_ident(t["name"])
        if base in _C_KEYWORDS:
            base += "_"
        field_name = base
        if field_name in seen:
            field_name = f"{base}_{i}"
        seen.add(field_name)
        t["field"] = field_name


#: names a struct member of the public header must not take: C's and C++'s
#: keywords (the header is C++ too) and the lower-case macros gcc predefines
#: in its GNU modes (CMake's default -std=gnu11 defines `linux` as 1)
_C_KEYWORDS = frozenset(
    "auto break case char const continue default do double else enum extern float for goto "
    "if inline int long register restrict return short signed sizeof static struct switch "
    "typedef union unsigned void volatile while bool true false "
    "alignas alignof and and_eq asm bitand bitor catch char8_t char16_t char32_t class "
    "compl concept consteval constexpr constinit const_cast co_await co_return co_yield "
    "decltype delete dynamic_cast explicit export friend mutable namespace new noexcept not "
    "not_eq nullptr operator or or_eq private protected public reinterpret_cast requires "
    "static_assert static_cast template this thread_local throw try typeid typename using "
    "virtual wchar_t xor xor_eq "
    "linux unix i386 sun sparc mips vax".split())


def _library_name(vm: emit_mod.VMProgram, compiled: CompiledModule) -> str:
    """The library name the program passes to executable.load (= query prefix);
    "" for GPU targets, whose kernels are data of the program."""
    if compiled.library_query is None:
        return ""
    name = compiled.library_query[: -len("_library_query")]
    if name not in vm.library_names:
        raise TfaotError(f"package: kernel library '{name}' is not referenced by the program "
                         f"(it loads {', '.join(vm.library_names) or 'none'})")
    return name


def _check_signature_against_vm(sig: ProgramSignature, step: emit_mod.FunctionInfo) -> None:
    """The VM step function's reflection must agree with the signature."""
    decl = step.declaration
    if not decl or "->" not in decl:
        return
    args_text, res_text = decl.split("->", 1)
    for what, text, tensors in (("input", args_text, sig.inputs), ("output", res_text, sig.outputs)):
        found = _TENSOR_DECL.findall(text)
        if len(found) != len(tensors):
            raise TfaotError(f"package: the compiled step function has {len(found)} {what}s "
                             f"({decl}), the signature declares {len(tensors)}")
        for (_, ttext), t in zip(found, tensors):
            parts = ttext.split("x")
            shape, elem = [int(p) if p.isdigit() else -1 for p in parts[:-1]], parts[-1]
            if shape != list(t.shape) or not _same_element(elem, t.dtype):
                raise TfaotError(
                    f"package: {what} '{t.name}' is {t.dtype}{list(t.shape)} in the signature "
                    f"but tensor<{ttext}> in the compiled step function")


def _same_element(elem: str, dtype_name: str) -> bool:
    """Whether the VM's element type ``elem`` holds a ``dtype_name`` tensor.
    IREE's integers are signless: a uint8 input (an image's pixels) is i8
    in the compiled function, and the buffer view keeps the unsigned code."""
    want = DTYPES.get(dtype_name)
    if want is None:
        return False
    return elem == want.mlir or (want.mlir.startswith("ui") and elem == want.mlir[1:])


def _check_direct_step(direct, inputs: list[dict], outputs: list[dict]) -> None:
    """A direct step (emit/direct_step.py) reads its inputs and hands back its
    outputs without the views whose checks the translated step makes at
    every call: their element types and sizes must be the C API's, here."""
    for what, found, tensors in (("input", direct.inputs, inputs),
                                 ("output", direct.outputs, outputs)):
        for (etype, nbytes), t in zip(found, tensors):
            if etype != t["etype"] or nbytes not in (t["bytes"], -1):
                raise TfaotError(
                    f"package: {what} '{t['name']}' is element type 0x{t['etype']:08X}, "
                    f"{t['bytes']} bytes, in the C API, but the compiled step's is "
                    f"0x{etype:08X}, {nbytes} bytes (a tfaot bug: please report)")


def _check_state_functions(vm: emit_mod.VMProgram, name: str, count: int) -> None:
    """The program's @get_state / @set_state take or return one tensor per state."""
    if not count:
        return
    for export, fn, kind in (("get_state", vm.get_state, "result_types"),
                             ("set_state", vm.set_state, "arg_types")):
        if fn is None:
            raise TfaotError(
                f"package: model '{name}' has {count} state tensors but the compiled "
                f"program has no '{export}' function (exports: {', '.join(vm.exports)}); the "
                "frontend writes get_state/set_state next to step and reset")
        if getattr(fn, kind) != [_VIEW] * count:
            raise TfaotError(f"package: {export} of model '{name}' has VM signature "
                             f"{fn.arg_types} -> {fn.result_types}; expected one tensor per "
                             f"state ({count})")
