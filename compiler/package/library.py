"""The package stage's entry: the output folder of one library, with its manifest."""
from __future__ import annotations

import json
from pathlib import Path

from .. import emit as emit_mod
from ..backend.compile import CompiledModule
from ..lower.microkernel import HALF_KINDS
from ..program import ProgramSignature, StreamInfo
from ..resources import template_env
from .c_api import CTX_ALIGN, ApiModel, tfaot_version
from .ctx_size import ctx_size_for
from .footprint import measure_footprint
from .link import (C_FLAGS, add_libm_shims, add_micro_kernels, c_command, link_library,
                   non_executable_stack, rename_query_symbol)
from .shim import write_shim


def cmake_files(name: str) -> list[str]:
    """The CMake files of a build folder: for find_package and add_subdirectory."""
    return [f"{name}Config.cmake", "CMakeLists.txt"]


def package(vm: emit_mod.VMProgram, sig: ProgramSignature, compiled: CompiledModule,
            out_dir: Path, *, name: str, workdir: Path,
            stream: StreamInfo | None = None, id_ranges: dict[int, dict] | None = None) -> dict:
    """Builds the library files into ``out_dir``; returns the manifest (also NAME.json).
    ``id_ranges``: the valid ids of the inputs that index a table, by input
    index (input_ranges.input_id_ranges); the step refuses the others."""
    target = compiled.target
    stream = stream or StreamInfo()
    api = ApiModel.check(vm, sig, compiled, name, stream, id_ranges)
    out_dir, workdir = Path(out_dir).resolve(), Path(workdir).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    src = out_dir / "src"
    src.mkdir(parents=True, exist_ok=True)
    write_shim(src, target.shim_backend)
    toolchain = target.toolchain()
    kernels = None
    if target.has_kernel_object:
        kernels = src / f"{name}_kernels.o"
        rename_query_symbol(compiled.kernel_object, kernels, compiled.library_query,
                            api.query_symbol, toolchain, target.triple)
        if compiled.kernel_symbols:  # target.matvec_kernel == "tfaot" needs a toolchain
            add_micro_kernels(target, toolchain, kernels, compiled.kernel_symbols,
                              workdir / "matvec")
        if toolchain is not None:
            add_libm_shims(target, toolchain, kernels, name, workdir / "libm")
            non_executable_stack(toolchain, kernels, src)

    weights = api.weights_blob()
    if weights:
        (out_dir / f"{name}.weights").write_bytes(weights)
    c_text = api.render_c()
    ctx_size = ctx_size_for(c_text, api.render_h(0), name=name, triple=target.triple,
                            backend=target.shim_backend,
                            probe_cmd=c_command(target, toolchain), probe=workdir / "ctx_probe")
    (src / f"{name}.c").write_text(c_text)
    (src / f"{name}.h").write_text(api.render_h(ctx_size))
    built, host_object = [], None
    if toolchain is not None:
        built, host_object = link_library(target, toolchain, name=name, src=src,
                                          kernels=kernels, out_dir=out_dir, workdir=workdir)
    footprint = measure_footprint(kernels.read_bytes() if kernels else None, host_object,
                                  ctx_size)
    if target.is_gpu:
        footprint.update(gpu_footprint(api))
    h_text = api.render_h(ctx_size, footprint)
    (src / f"{name}.h").write_text(h_text)
    (out_dir / f"{name}.h").write_text(h_text)
    manifest = _manifest(api, sig, compiled, ctx_size, footprint, stream)
    manifest["files"] = sorted(built + [f"{name}.h", f"{name}.json", *cmake_files(name),
                                        *([f"{name}.weights"] if weights else [])]) + \
        sorted(f"src/{p.name}" for p in src.iterdir())
    (out_dir / f"{name}.json").write_text(json.dumps(manifest, indent=2) + "\n")
    write_cmake_files(out_dir, manifest)
    return manifest


def _manifest(api: ApiModel, sig: ProgramSignature, compiled: CompiledModule, ctx_size: int,
              footprint: dict, stream: StreamInfo) -> dict:
    target = compiled.target
    return {
        "name": api.name,
        "target": target.kind,
        "triple": target.triple,
        "cpu": target.cpu,
        "pack_weights": target.pack_weights,
        # who computes the constant-weight matvecs and convolutions
        # (compiler/lower/microkernel.py), and which of tfaot's kernels the build calls
        "matvec": "tfaot" if compiled.kernel_symbols else "iree",
        "micro_kernels": sorted(compiled.kernel_symbols),
        # how the micro-kernels' packed weights are stored (--weights-dtype)
        **_weights_dtype(target, compiled.kernel_symbols),
        "activations": "table" if target.activation_tables else "exact",
        # how the images between convolution kernels are stored (--intermediates):
        # f16 only where a kernel on f16 images was called
        "intermediates": ("f16" if any(kind in HALF_KINDS.values()
                                       for kind in compiled.kernel_symbols) else "f32"),
        "compiler_version": compiled.compiler_version,
        **_signature_json(api, sig),
        "stream": stream.to_json(),
        "state_bytes": api.state_bytes,
        "state_offsets": [s["offset"] for s in api.states],
        "ctx_size": ctx_size,
        "ctx_align": CTX_ALIGN,
        "footprint": footprint,
        "c_flags": [*C_FLAGS, *target.c_flags()],
        "arena_bytes": api.vm.arena_bytes,
        "arena_pools": [list(p) for p in api.vm.pools],
        # the direct step's temporaries (emit/direct_step.py), beside the arena
        "step_scratch_bytes": api.vm.step.direct.scratch_bytes if api.vm.step.direct else 0,
        "kernel_library": api.library_name or None,
        "kernel_query_symbol": api.query_symbol if target.has_kernel_object else None,
        "link_libs": list(target.link_libs),
        "weights": ({"mode": "file", "file": f"{api.name}.weights", **{
            k: api.weights[k] for k in ("bytes", "fnv1a64")}} if api.weights
            else {"mode": "embedded"}),
    }


def _signature_json(api: ApiModel, sig: ProgramSignature) -> dict:
    """The signature, each input that indexes a table with its ``id_range``:
    ``min``/``end`` (valid ids [min, end) for every checked element),
    ``runs`` ([first element, count, min, end] per run of checked elements)
    and ``tables`` (what it indexes)."""
    out = sig.to_json()
    for entry, t in zip(out["inputs"], api.inputs):
        if t.get("id_range"):
            entry["id_range"] = t["id_range"]
    return out


def gpu_footprint(api: ApiModel) -> dict:
    """Device memory of one context (arena + staging) and the kernels' bytes."""
    return {"device_bytes": api.vm.arena_bytes + api.staging_bytes,
            "executable_bytes": sum(len(rd.data) for _, rd in api.vm.containers)}


def write_cmake_files(out_dir: Path, manifest: dict) -> None:
    # (the project's compiler must be the target's: its pointer size tells
    # most mismatches apart, a 64-bit triple's architecture names its width;
    # the processor family the rest, where the project's CMake names one)
    arch = manifest["triple"].split("-")[0]
    values = dict(manifest, tfaot_version=tfaot_version(), pointer_bytes=8 if "64" in arch else 4,
                  arch_family=arch_family(arch))
    for file, template in zip(cmake_files(manifest["name"]),
                              ("Config.cmake.j2", "CMakeLists.txt.j2")):
        (out_dir / file).write_text(template_env().get_template(template).render(**values))


def arch_family(arch: str) -> str:
    """The processor family of a triple's architecture, as the package's
    Config.cmake names CMAKE_SYSTEM_PROCESSOR's: x86_64, aarch64, arm
    (32-bit Arm and Thumb), riscv32, riscv64; else the architecture itself."""
    if arch in ("aarch64", "arm64"):
        return "aarch64"
    if arch.startswith(("arm", "thumb")):
        return "arm"
    return arch


#: What ``weights_scheme`` says of an int8 build (compiler/lower/microkernel.py,
#: runtime_shim/tfrt_matvec.c): its matvecs, with the input as the target's
#: kernel quantizes it (int16 on Arm's DSP path, Target.int8_paired_rows)...
INT8_SCHEME = ("matvec (and the matmul of many streams) of {fewest} weights or more: int8 "
               "weights, symmetric, one f32 scale per output row; input quantized per call "
               "{input} (symmetric; per stream). ")
INT8_INPUT = "to int8, one scale per block of 16 inputs; int32 sums per block"
INT16_INPUT = "to int16, one scale per chunk of 128 inputs; int32 sums per chunk"
#: ... and of its convolutions, with the int8 convolution kernel or without.
INT8_CONV_SCHEME = ("convolutions of {fewest} weights or more (qconv): int8 weights, one "
                    "scale per output channel; image quantized to int8 per call (symmetric, "
                    "one scale; 1x1 convolutions: one scale per pixel); int32 sums per patch. "
                    "depthwise and smaller convolutions: "
                    "f32 weights")
F32_CONV_SCHEME = ("convolutions: f32 weights (this target has no int8 dot product "
                   "instructions tfaot uses)")
NO_CONV_SCHEME = "no convolution has int8 weights"


def _weights_dtype(target, kernels: dict[str, str]) -> dict[str, str]:
    """The manifest's ``weights_dtype`` (and for int8 its scheme): what the
    kernels this build calls store, f32 when none does otherwise."""
    from ..lower.microkernel import int8_min_weights, kernel_dtype

    requested = target.weights_dtype
    stored = {kernel_dtype(kind, requested) for kind in kernels} - {"f32"}
    if not stored:
        return {"weights_dtype": "f32"}
    if requested == "int8":
        fewest = int8_min_weights(target.int8_min_weights)
        convs = (INT8_CONV_SCHEME if {"qconv", "qconv16"} & set(kernels) else
                 NO_CONV_SCHEME if target.conv_int8 else F32_CONV_SCHEME)
        matvecs = INT8_SCHEME.format(
            fewest=fewest, input=INT16_INPUT if target.int8_paired_rows else INT8_INPUT)
        return {"weights_dtype": "int8", "weights_scheme": matvecs + convs.format(fewest=fewest),
                "int8_layers": target.int8_layers, "int8_min_weights": fewest}
    return {"weights_dtype": requested}
