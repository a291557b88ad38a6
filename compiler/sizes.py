"""How big a build will be, said before the slow stages, and refused when too big.

A model with a huge fixed input (a 1x100000x4000 window) or gigabytes of
weights is more often a wrong shape than a wish; building it anyway takes
minutes and gigabytes and ends in TensorFlow running out of memory, a
segfault or a link failure. So the build states the context and weight
sizes before compiling and refuses, in one line naming the flag that
overrides, past a default limit (``SizeLimits``) or past what the target
can address (a 32-bit target, a Cortex-M's RAM regions), which no flag
overrides.

The context size known before compiling is a lower bound: the state (ring
buffers, recurrent state), the step's input and output (the library stages
them in its arena) and, with ``--weights=file``, the weights it copies in;
the compiler's temporaries come on top.
"""
from __future__ import annotations

import math
import re
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .errors import TfaotError

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30


@dataclass(frozen=True)
class SizeLimits:
    """The largest context and weights a build makes without being asked
    (``--max-context-bytes``, ``--max-weight-bytes``; ``--allow-large``:
    no limit but the target's)."""

    context_bytes: float = 1 * GiB
    weight_bytes: float = 1 * GiB

    @classmethod
    def unlimited(cls) -> "SizeLimits":
        return cls(math.inf, math.inf)


def parse_size(text: str) -> int:
    """"1048576", "512K", "64MiB", "1.5G" -> bytes (K, M, G are powers of 1024)."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMG]?)(?:i?B)?\s*", text, re.IGNORECASE)
    if not match:
        raise ValueError(f"'{text}' is not a size (e.g. 1G, 512M, 1048576)")
    scale = {"": 1, "K": KiB, "M": MiB, "G": GiB}[match.group(2).upper()]
    return int(float(match.group(1)) * scale)


def size_text(n: float) -> str:
    """1610612736 -> "1.5 GiB" (what messages and notes show)."""
    for unit, scale in (("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{int(n)} B"


def _flag_size(n: float) -> str:
    """A value for an override flag a bit above ``n`` (e.g. "5G")."""
    for suffix, scale in (("G", GiB), ("M", MiB), ("K", KiB)):
        if n >= scale:
            return f"{math.ceil(n / scale)}{suffix}"
    return str(int(n))


# --------------------------------------------------------------------------
# what the target can address (no flag overrides these)


def target_limits(target) -> tuple[float, float, str]:
    """(context bytes, weight bytes, why) that ``target`` can hold at all."""
    if target.is_gpu:
        return math.inf, math.inf, ""
    if target.bare_metal_arm:
        # Armv7-M / Armv8-M memory map: data lives in the SRAM region
        # (0x20000000, 512 MiB) or the external RAM region (0x60000000, 1 GiB).
        return 1.5 * GiB, 4 * GiB, (f"{target.triple} (a Cortex-M) has at most 1.5 GiB of RAM "
                                    "address space (SRAM and external RAM regions)")
    if target.pointer_bytes == 4:
        return 4 * GiB, 4 * GiB, f"{target.triple} is a 32-bit target: 4 GiB of address space"
    return math.inf, math.inf, ""


# --------------------------------------------------------------------------
# before loading: the model's files


def model_file_bytes(path: Path) -> int:
    """The bytes of a model's files (uncompressed, for a .keras archive): an
    upper bound of its weights, known before TensorFlow loads anything."""
    if path.is_dir():
        return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
    if zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as archive:
            return sum(info.file_size for info in archive.infolist())
    return path.stat().st_size


def check_model_files(model_path, limits: SizeLimits, target) -> None:
    """Refuses a model whose files alone are over the weight limit, before
    TensorFlow loads them (gigabytes of weights can crash it outright)."""
    total = model_file_bytes(Path(model_path))
    _, addressable, why = target_limits(target)
    if total > addressable:
        raise TfaotError(f"{model_path}: the model's files hold {size_text(total)}, more "
                         f"than the target can address: {why}")
    # (their weights may be stored narrower: --weights-dtype=int8 a quarter)
    if total * NARROW_WEIGHTS.get(target.weights_dtype, 1.0) > limits.weight_bytes:
        raise TfaotError(f"{model_path}: the model's files hold {size_text(total)}, over the "
                         f"{size_text(limits.weight_bytes)} weight limit; pass "
                         f"--max-weight-bytes {_flag_size(total)} (or --allow-large) to build "
                         "it anyway")


# --------------------------------------------------------------------------
# after streamify: the step


def weight_bytes(loaded) -> int:
    """The bytes of the model's weights (Keras variables, or a frozen graph's
    constants), from their shapes: nothing is read or copied."""
    if loaded.keras_model is not None:
        return sum(_tensor_bytes(w.shape, w.dtype) for w in loaded.keras_model.weights)
    graph_def = loaded.graph.graph_def
    nodes = [*graph_def.node, *(n for f in graph_def.library.function for n in f.node_def)]
    return sum(_const_bytes(n) for n in nodes if n.op == "Const")


def _tensor_bytes(shape, dtype) -> int:
    dtype = getattr(dtype, "name", dtype)
    try:
        itemsize = np.dtype(dtype).itemsize
    except TypeError:
        itemsize = 4
    return int(np.prod([int(d or 1) for d in shape], dtype=np.int64)) * itemsize


def _const_bytes(node) -> int:
    import tensorflow as tf

    tensor = node.attr["value"].tensor
    try:
        itemsize = tf.dtypes.as_dtype(tensor.dtype).size
    except (TypeError, ValueError):
        return 0
    return int(np.prod([d.size for d in tensor.tensor_shape.dim], dtype=np.int64)) * itemsize


def context_parts(program) -> dict[str, int]:
    """What a context holds for certain, by part (see the module's note)."""
    sig = program.signature
    return {"state": sum(_tensor_bytes(s.shape, s.dtype) for s in sig.states),
            "step input": sum(_tensor_bytes(x.shape, x.dtype) for x in sig.inputs),
            "step output": sum(_tensor_bytes(y.shape, y.dtype) for y in sig.outputs)}


def check_step(program, loaded, limits: SizeLimits, target, note) -> None:
    """Says the context and weight sizes (``note``) and refuses past a limit."""
    weights = weight_bytes(loaded)
    parts = context_parts(program)
    if target.external_weights:
        parts["weights copied in by init"] = weights
    context = sum(parts.values())
    detail = ", ".join(f"{k} {size_text(v)}" for k, v in parts.items())
    dtype = target.weights_dtype
    # the kernels' narrower weights are known once compiled (the footprint)
    built = ("" if dtype == "f32" else
             f" as f32 (as {dtype} where the kernels take them: see the footprint)")
    note(f"{program.source}: context at least {size_text(context)} ({detail}), weights "
         f"{size_text(weights)}{built}")
    # what the kernels' weights take at least (int8: a quarter of f32's)
    weights_at_least = weights * NARROW_WEIGHTS.get(dtype, 1.0)
    max_context, max_weights, why = target_limits(target)
    if context > max_context:
        raise TfaotError(f"{program.source}: the context needs at least {size_text(context)} "
                         f"({detail}), more than the target can hold: {why}")
    if weights_at_least > max_weights:
        raise TfaotError(f"{program.source}: the weights take {size_text(weights_at_least)}, "
                         f"more than the target can address: {why}")
    if context > limits.context_bytes:
        raise TfaotError(f"{program.source}: the context needs at least {size_text(context)} "
                         f"({detail}), over the {size_text(limits.context_bytes)} limit; pass "
                         f"--max-context-bytes {_flag_size(context)} (or --allow-large) to "
                         "build it anyway")
    if weights_at_least > limits.weight_bytes:
        raise TfaotError(f"{program.source}: the weights take {size_text(weights_at_least)}, "
                         f"over the {size_text(limits.weight_bytes)} limit; pass "
                         f"--max-weight-bytes {_flag_size(weights_at_least)} (or --allow-large) "
                         "to build it anyway")


#: the fraction of its f32 bytes a weight takes at least with --weights-dtype
NARROW_WEIGHTS = {"int8": 0.25, "f16": 0.5, "bf16": 0.5}


def check_built(source: str, footprint: dict, limits: SizeLimits) -> None:
    """The built library's context (the compiler's temporaries included)
    and weights against the limits the build was given: the check before
    compiling knew a lower bound only."""
    for key, limit, flag, what in (
            ("ram_bytes", limits.context_bytes, "--max-context-bytes",
             "the context (state, step I/O and the compiler's temporaries) takes"),
            ("weight_bytes", limits.weight_bytes, "--max-weight-bytes", "the weights take")):
        got = footprint.get(key)
        if got is not None and got > limit:
            raise TfaotError(f"{source}: built, {what} {size_text(got)}, over the "
                             f"{size_text(limit)} limit; pass {flag} {_flag_size(got)} "
                             "(or --allow-large) to build it anyway")
