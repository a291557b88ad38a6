"""What one dispatch reads and writes, from its executable's source.

iree-compile dumps each executable's source before code generation
(``--iree-hal-dump-executable-sources-to``, backend/compile.py): the
dispatch function's bindings, the slices it loads from them and stores
into them, and the linalg ops between. ``elementwise_writes`` reads that for
the state reuse (emit/state_reuse.py): a dispatch that reads the old state
and writes the new one over the same bytes (an LSTM cell reads its old
``c`` and writes the new one) may write in place when every element it
stores depends on the element loaded from the same bytes only. That holds
when every op between the loads and the stores is elementwise (a
``linalg.generic`` whose loops are all parallel, whose indexing maps are
all the identity and whose body reads no tensor but constants; the state
reuse also asks for one such op only); anything else, or an offset not
known here, is answered with None and the dispatch keeps a buffer of its
own.
"""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path

#: ops that compute a scalar offset, by how they map their operands
_INT_OPS = {
    "arith.extui": lambda a: a[0], "arith.extsi": lambda a: a[0],
    "arith.index_castui": lambda a: a[0], "arith.index_cast": lambda a: a[0],
    "arith.trunci": lambda a: a[0] & 0xFFFFFFFF,
    "arith.shli": lambda a: a[0] << a[1], "arith.shrui": lambda a: a[0] >> a[1],
    "arith.ori": lambda a: a[0] | a[1], "arith.addi": lambda a: a[0] + a[1],
    "arith.muli": lambda a: a[0] * a[1],
}
#: ops that neither compute on a loaded tensor nor write memory
_INERT = {"arith.constant", "tensor.empty", "hal.interface.constant.load",
          "hal.interface.binding.subspan", "func.return"}
#: the loads and stores of a binding's slices
_SLICE_OPS = ("iree_tensor_ext.dispatch.tensor.load", "iree_tensor_ext.dispatch.tensor.store")
#: the ops ``accessed_ranges`` follows (the rest computes on loaded values)
_RANGE_OPS = {"arith.constant", "hal.interface.constant.load", "hal.interface.binding.subspan",
              "util.assume.int", *_SLICE_OPS, *_INT_OPS}
_EXPORT = re.compile(r"hal\.executable\.export public @([\w$.-]+)")
_ELEMENT_BYTES = {"f32": 4, "i32": 4, "f16": 2, "bf16": 2, "i16": 2, "i8": 1, "i1": 1,
                  "f64": 8, "i64": 8}


@dataclass(frozen=True)
class Access:
    """A slice a dispatch loads or stores: its binding and its byte range
    from the binding's start (the subspan's offset included)."""

    binding: int
    start: int
    end: int          # (of a slice with gaps: the bytes from its first to its last)
    contiguous: bool = True


def source_files(folder: Path | None) -> dict[str, Path]:
    """Export name -> the dumped source file that defines it."""
    files = {}
    for path in sorted(folder.glob("*.mlir")) if folder and folder.is_dir() else []:
        with open(path) as f:
            head = f.read(1 << 16)  # (the export line comes before any constant)
        for name in _EXPORT.findall(head):
            files[name] = path
    return files


@dataclass
class Effects:
    """A dispatch's loads, and its stores with the loads each store's value
    is elementwise of."""

    loads: list[Access]
    stores: list[tuple[Access, list[Access]]]
    generics: int = 0  # elementwise linalg.generic ops


def elementwise_writes(path: Path, export: str, constants: list[int | None]
                       ) -> Effects | None:
    """The loads and stores of dispatch ``export`` (its source at ``path``),
    or None where some op is not elementwise or some offset is unknown.
    ``constants``: the push constants' values (None where not known)."""
    return _in_function(path, export, lambda fn: _walk(fn, constants))


def accessed_ranges(path: Path, export: str, constants: list[int | None]
                    ) -> Effects | None:
    """The loads and stores of dispatch ``export``, whatever it computes
    between them (their ``stores`` list no sources), or None where an
    offset is not known or a binding is used other than by a load or a
    store of a slice (a call of tfaot's kernels takes the binding's
    pointer: what it touches is not in the source)."""
    return _in_function(path, export, lambda fn: _walk(fn, constants, ranges_only=True))


def binding_extents(path: Path, export: str, constants: list[int | None]
                    ) -> list[tuple[int, int, int, bool]] | None:
    """Each binding view of dispatch ``export`` as (binding, start, end,
    writable): the bytes of its static shape from the binding's start, and
    whether its flags let the dispatch write it; None where an offset or a
    shape is not known. For a dispatch that passes its bindings to a call
    (tfaot's kernels, which touch a view within its shape only)."""
    def extents(fn):
        ints: dict = {}
        out = []
        for op in _ops_within(fn):
            if _track_int(op, ints, constants) or op.name != "hal.interface.binding.subspan":
                continue
            extent = _extent(op, ints)
            if extent is None:
                return None
            out.append(extent)
        return out

    return _in_function(path, export, extents)


def _in_function(path: Path, export: str, visit):
    """``visit(fn)`` on dispatch ``export``'s function in the source at
    ``path``, in its MLIR context; None where it does not parse or has no
    such function."""
    parsed = _parsed(path.read_text())
    if parsed is None:
        return None
    context, module = parsed
    with context:
        fn = _function(module, export)
        return None if fn is None else visit(fn)


@functools.lru_cache(maxsize=8)
def _parsed(text: str):
    """(context, module) of one executable's source, or None: the state
    reuse asks about each dispatch of a step once per layout and analysis,
    and the sources are few. Keyed by the text: a rebuild into the same
    folder rewrites the files."""
    from iree.compiler import ir

    context = ir.Context()
    with context:
        try:
            return context, ir.Module.parse(text)
        except ir.MLIRError:
            return None


def _track_int(op, ints: dict, constants: list[int | None]) -> bool:
    """Records in ``ints`` the integer ``op`` computes where its operands'
    are known (a constant, a push constant, index arithmetic, IREE's
    ``util.assume.int`` passing its operands through); whether ``op`` is one
    of those."""
    name = op.name
    if name == "arith.constant":
        value = _int_attr(op.attributes["value"])
        if value is not None:
            ints[op.results[0]] = value
    elif name == "hal.interface.constant.load":
        ordinal = _int_attr(op.attributes["ordinal"])
        if ordinal is not None and ordinal < len(constants) and constants[ordinal] is not None:
            ints[op.results[0]] = constants[ordinal]
    elif name in _INT_OPS:
        args = [ints.get(v) for v in op.operands]
        if None not in args:
            ints[op.results[0]] = _INT_OPS[name](args)
    elif name == "util.assume.int":
        ints.update({r: ints[v] for v, r in zip(op.operands, op.results) if v in ints})
    else:
        return False
    return True


def _extent(op, ints: dict) -> tuple[int, int, int, bool] | None:
    """A subspan's (binding, start, end, writable), from its offset and the
    static shape of its memref or tensor (no strided layout)."""
    binding = _int_attr(op.attributes["binding"])
    offset = ints.get(op.operands[0]) if len(op.operands) else 0
    match = re.fullmatch(r"(?:memref<|!iree_tensor_ext\.dispatch\.tensor<\w+:tensor<)"
                         r"((?:\d+x)*)(\w+)>+", str(op.results[0].type))
    if binding is None or offset is None or match is None:
        return None
    width = _ELEMENT_BYTES.get(match.group(2))
    if width is None:
        return None
    count = 1
    for d in match.group(1).split("x")[:-1]:
        count *= int(d)
    # (IREE's descriptor flags, printed flags("ReadOnly|Indirect"): bit 0 is ReadOnly)
    flags = _int_attr(op.attributes["descriptor_flags"]) \
        if "descriptor_flags" in op.attributes else 0
    return binding, offset, offset + count * width, not (flags or 0) & 1


def _function(module, export: str):
    for op in _ops_within(module.operation):
        if op.name == "func.func" and str(op.attributes["sym_name"]).strip('"') == export:
            return op
    return None


def _ops_within(op):
    for region in op.regions:
        for block in region.blocks:
            for inner in block.operations:
                yield inner.operation
                yield from _ops_within(inner.operation)


def _walk(fn, constants: list[int | None], ranges_only: bool = False) -> Effects | None:
    """``elementwise_writes``'s walk; ``ranges_only``: only the loads' and
    stores' ranges (``accessed_ranges``)."""
    ints: dict = {}       # value -> its integer
    spans: dict = {}      # subspan value -> (binding, byte offset)
    sources: dict = {}    # tensor value -> the loads it is elementwise of
    effects = Effects([], [])
    for op in fn.regions[0].blocks[0].operations:
        op = op.operation
        name = op.name
        if ranges_only and name not in _SLICE_OPS and any(
                v in spans for inner in [op, *_ops_within(op)] for v in inner.operands):
            return None  # (a binding used some other way, maybe in a loop's body)
        if ranges_only and name not in _RANGE_OPS:
            continue
        if _track_int(op, ints, constants):
            if name == "arith.constant":
                sources[op.results[0]] = []
        elif name == "hal.interface.binding.subspan":
            binding = _int_attr(op.attributes["binding"])
            offset = ints.get(op.operands[0]) if len(op.operands) else 0
            if binding is None or offset is None:
                return None
            spans[op.results[0]] = (binding, offset)
        elif name == "iree_tensor_ext.dispatch.tensor.load":
            access = _access(op, spans, op.operands[0], op.operands[0].type, 1)
            if access is None:
                return None
            sources[op.results[0]] = [access]
            effects.loads.append(access)
        elif name == "iree_tensor_ext.dispatch.tensor.store":
            access = _access(op, spans, op.operands[1], op.operands[1].type, 2)
            if access is None or (op.operands[0] not in sources and not ranges_only):
                return None
            if ranges_only:
                effects.stores.append((access, []))
                continue
            effects.stores.append((access, sources[op.operands[0]]))
        elif name == "tensor.empty":
            sources[op.results[0]] = []
        elif name == "tensor.extract_slice" and sources.get(op.operands[0]) == []:
            sources[op.results[0]] = []  # (a slice of a constant)
        elif name == "linalg.generic" and _elementwise(op, sources):
            if any(v not in sources for v in op.operands):
                return None
            effects.generics += 1
            read = [a for v in op.operands for a in sources[v]]
            for r in op.results:
                sources[r] = read
        elif name not in _INERT:
            return None
    return effects


def _access(op, spans: dict, span, tensor_type, fixed: int) -> Access | None:
    """The bytes a load or store ``op`` touches, where its slice has static
    offsets and sizes: no operands past its ``fixed`` ones (the source, or
    the value and the target)."""
    from iree.compiler import ir

    if span not in spans or len(op.operands) > fixed:  # (dynamic offsets or sizes)
        return None
    binding, base = spans[span]
    offsets = list(ir.DenseI64ArrayAttr(op.attributes["static_offsets"]))
    sizes = list(ir.DenseI64ArrayAttr(op.attributes["static_sizes"]))
    strides = list(ir.DenseI64ArrayAttr(op.attributes["static_strides"]))
    match = re.search(r"tensor<((?:\d+x)*)(\w+)>", str(tensor_type))
    if match is None or any(s != 1 for s in strides):
        return None
    shape = [int(d) for d in match.group(1).split("x") if d]
    width = _ELEMENT_BYTES.get(match.group(2))
    if width is None or len(shape) != len(offsets):
        return None
    # contiguous: after the first dimension of size > 1, the slice takes every element
    first = next((i for i, n in enumerate(sizes) if n > 1), len(sizes))
    contiguous = all(sizes[i] == shape[i] for i in range(first + 1, len(sizes)))
    start, last = _flat(offsets, shape), _flat([o + n - 1 for o, n in zip(offsets, sizes)], shape)
    return Access(binding, base + start * width, base + (last + 1) * width, contiguous)


def _flat(index: list[int], shape: list[int]) -> int:
    """The row-major position of ``index`` in ``shape``."""
    flat = 0
    for i, n in zip(index, shape):
        flat = flat * n + i
    return flat


def _elementwise(op, sources: dict) -> bool:
    """A linalg.generic whose loops are all parallel, whose maps are all the
    identity and whose body reads no tensor but constants (an activation
    table): element i of each result depends on element i of each operand
    only. (A body that reads a loaded tensor itself, ``tensor.extract`` at
    an index from ``linalg.index``, is how IREE writes a reversal.)"""
    maps = [str(m) for m in op.attributes["indexing_maps"]]
    kinds = str(op.attributes["iterator_types"])
    dims = re.match(r"affine_map<\(([^)]*)\) -> \(([^)]*)\)>", maps[0]) if maps else None
    if (dims is None or dims.group(1) != dims.group(2) or any(m != maps[0] for m in maps)
            or "reduction" in kinds or "window" in kinds):
        return False
    for inner in _ops_within(op):
        if inner.regions or any("tensor<" in str(v.type) and sources.get(v) != []
                                for v in inner.operands):
            return False
    return True


def _int_attr(attr) -> int | None:
    match = re.match(r"(-?\d+)( : \w+)?$", str(attr))
    return int(match.group(1)) if match else None
