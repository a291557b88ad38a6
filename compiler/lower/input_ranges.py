"""Which integer step inputs index a table, and the ids each element may take.

A token id that indexes an embedding table outside its rows made the built
step read past the table (IREE's ``torch_index_select`` does not clamp: a
large id crashed the step, a small one returned garbage) where TensorFlow
raises ``InvalidArgumentError``. The generated ``NAME_step`` therefore
checks such inputs before anything runs (``NAME_ERR_INPUT_RANGE``) and this
module finds, at build time and from the imported StableHLO alone (so for
every frontend), the range each checked input element must lie in.

Every table read whose position comes from data is a *sink*:
``stablehlo.torch_index_select`` (TF's GatherV2 / ResourceGather, Keras
Embedding), ``stablehlo.gather`` (gather_nd, gathers with batch dims),
``stablehlo.dynamic_slice`` and ``stablehlo.dynamic_update_slice`` (Slice
with a tensor begin). A sink's index operand gets the valid range of each
of its elements ([0, rows) for a row index; for slices, [0, dim - size + 1)),
which is carried back through the ops that only move or retype elements
(reshape, transpose, broadcast_in_dim, slice, concatenate, integer convert),
through additions and subtractions of constants (the range shifts), through
a clamp into the table (no constraint left), and through the negative-id
wrap ``select(x < 0, x + N, x)`` that Keras' ``take`` emits (ids -N..-1 are
then valid, as in TensorFlow), up to an argument of the public ``@step``
(across the call of the private pure step). Ranges meeting at an input
element are intersected (several tables: the smallest).

Not covered (the build says so): an index computed from an input by any
other op (the input is then not checked), indices from the recurrent state,
and scatters (``stablehlo.scatter`` skips out-of-range updates). One-hot
needs no check: TF lowers it to compare-with-iota, which gives zeros for an
out-of-range id in both TensorFlow and the built library.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

#: Unbounded sides of a range (clipped to after every shift).
_LO, _HI = -(1 << 62), 1 << 62

_SHAPE_OPS = {"stablehlo.reshape", "stablehlo.transpose", "stablehlo.broadcast_in_dim",
              "stablehlo.slice", "stablehlo.concatenate", "stablehlo.convert"}


@dataclass
class InputRange:
    """The valid ids of one step input: per element ``lo <= id < hi``
    (``_LO`` / ``_HI`` where unbounded), and which sinks constrain it."""

    index: int
    lo: np.ndarray
    hi: np.ndarray
    tables: list[str] = field(default_factory=list)

    def runs(self) -> list[tuple[int, int, int, int]]:
        """(first element, count, lo, hi) for each run of checked elements
        with the same range, in element order (unchecked elements left out)."""
        out: list[list[int]] = []
        for e, (lo, hi) in enumerate(zip(self.lo.tolist(), self.hi.tolist())):
            if lo <= _LO and hi >= _HI:
                continue
            if out and out[-1][0] + out[-1][1] == e and out[-1][2:] == [lo, hi]:
                out[-1][1] += 1
            else:
                out.append([e, 1, lo, hi])
        return [tuple(r) for r in out]


@dataclass
class RangeAnalysis:
    ranges: dict[int, InputRange]  # input index -> its range (checked inputs only)
    unchecked: list[str]           # "input i reaches a table through OP" notes
    #: the module with the ids that reach a table unchecked clamped into it
    #: (None: none such)
    clamped_text: str | None = None


def analyze(mlir_text: str, input_count: int) -> RangeAnalysis:
    """The input ranges of the streaming module ``mlir_text`` (its ``@step``
    takes the ``input_count`` step inputs)."""
    from iree.compiler import ir

    from .mlir_import import parse_or_none

    empty = RangeAnalysis({}, [])
    if not any(s in mlir_text for s in _SINKS):
        return empty
    with ir.Context() as context:
        context.allow_unregistered_dialects = True
        module = parse_or_none(mlir_text)
        if module is None:
            return empty
        analyzer = _Analyzer(module, input_count)
        analysis = analyzer.run()
        if analyzer.to_clamp:
            for op, position, lo, hi in analyzer.to_clamp:
                _clamp_operand(op, position, lo, hi, ir)
            analysis.clamped_text = module.operation.get_asm(enable_debug_info=False)
        return analysis


def _clamp_operand(op, position: int, lo: np.ndarray, hi: np.ndarray, ir) -> None:
    """Operand ``position`` of ``op`` (an index this analysis cannot carry
    back to a checked input: a window build's ids pass a float ring buffer)
    clamped into [lo, hi - 1]: an id out of range reads the table's first or
    last row, not memory past it (a library segfaulted)."""
    value = op.operands[position]
    kind = ir.RankedTensorType(value.type)
    dtype = np.int32 if ir.IntegerType(kind.element_type).width == 32 else np.int64
    info = np.iinfo(dtype)
    bounds = [np.clip(b, info.min, info.max).astype(dtype) for b in (lo, hi - 1)]
    with ir.InsertionPoint(op), op.location:
        lo_c, hi_c = (ir.Operation.create(
            "stablehlo.constant", results=[kind],
            attributes={"value": ir.DenseElementsAttr.get(np.ascontiguousarray(b), type=kind)}
        ).results[0] for b in bounds)
        clamped = ir.Operation.create("stablehlo.clamp", results=[kind],
                                      operands=[lo_c, value, hi_c]).results[0]
    op.operands[position] = clamped


class _Unsupported(Exception):
    """An index reaches an input through an op this analysis does not follow."""


class _Analyzer:
    def __init__(self, module, input_count: int):
        from iree.compiler import ir

        self.ir = ir
        self.input_count = input_count
        self.funcs = {}
        for op in module.body.operations:
            if op.operation.name == "func.func":
                self.funcs[ir.StringAttr(op.operation.attributes["sym_name"]).value] = op.operation
        self.calls: dict[str, list] = {}
        self.sinks: list = []
        for f in self.funcs.values():
            self._walk(f)
        self.ranges: dict[int, InputRange] = {}
        self.unchecked: list[str] = []
        self.to_clamp: list = []  # (sink op, operand position, lo, hi) of unchecked ids
        self._tainted: dict = {}

    def _walk(self, op) -> None:
        for region in op.regions:
            for block in region.blocks:
                for inner in block.operations:
                    inner = inner.operation
                    if inner.name == "func.call":
                        callee = str(inner.attributes["callee"]).lstrip("@")
                        self.calls.setdefault(callee, []).append(inner)
                    elif inner.name in _SINKS:
                        self.sinks.append(inner)
                    self._walk(inner)

    def run(self) -> RangeAnalysis:
        for op in self.sinks:
            table = _describe_sink(op, self.ir)
            for value, lo, hi in _sink_constraints(op, self.ir):
                if not self._depends_on_input(value):
                    continue
                try:
                    self._back(value, lo, hi, table)
                except _Unsupported as e:
                    self.unchecked.append(f"{e} ({table})")
                    position = next(k for k, v in enumerate(op.operands) if v == value)
                    self.to_clamp.append((op, position, lo, hi))
        return RangeAnalysis(self.ranges, list(dict.fromkeys(self.unchecked)))

    # -- does a value depend on a step input? --------------------------------
    def _depends_on_input(self, value) -> bool:
        ir = self.ir
        key = value
        if key in self._tainted:
            return self._tainted[key]
        self._tainted[key] = False  # (cycles: assume not while visiting)
        result = False
        if _is_block_arg(value, ir):
            arg = ir.BlockArgument(value)
            owner = _as_operation(arg.owner.owner)
            if owner.name == "func.func":
                fname = ir.StringAttr(owner.attributes["sym_name"]).value
                if fname == "step":
                    result = arg.arg_number < self.input_count
                else:
                    result = any(self._depends_on_input(call.operands[arg.arg_number])
                                 for call in self.calls.get(fname, [])
                                 if arg.arg_number < len(call.operands))
            else:
                result = any(self._depends_on_input(v) for v in owner.operands)
        else:
            op = value.owner
            op = op.operation if hasattr(op, "operation") else op
            if op.name == "func.call":
                callee = self.funcs.get(str(op.attributes["callee"]).lstrip("@"))
                result = any(self._depends_on_input(v) for v in op.operands) or (
                    callee is not None and self._returns_depend(callee))
            else:
                result = any(self._depends_on_input(v) for v in op.operands)
        self._tainted[key] = result
        return result

    def _returns_depend(self, func) -> bool:
        for block in func.regions[0].blocks:
            for op in block.operations:
                if op.operation.name == "func.return":
                    return any(self._depends_on_input(v) for v in op.operation.operands)
        return False

    # -- carry a range back to the inputs -------------------------------------
    def _back(self, value, lo: np.ndarray, hi: np.ndarray, table: str) -> None:
        """``value`` (an integer tensor that depends on an input) must be in
        [lo, hi) element by element (arrays of its shape)."""
        ir = self.ir
        if np.all(lo <= _LO) and np.all(hi >= _HI):
            return
        if not self._depends_on_input(value):
            return
        if _is_block_arg(value, ir):
            arg = ir.BlockArgument(value)
            owner = _as_operation(arg.owner.owner)
            if owner.name != "func.func":
                raise _Unsupported(f"an id reaches a table through a loop or branch "
                                   f"('{owner.name}')")
            fname = ir.StringAttr(owner.attributes["sym_name"]).value
            if fname == "step":
                self._record(arg.arg_number, lo, hi, table)
                return
            calls = self.calls.get(fname, [])
            if len(calls) != 1:
                raise _Unsupported(f"an id reaches a table through function @{fname}, "
                                   f"called {len(calls)} times")
            self._back(calls[0].operands[arg.arg_number], lo, hi, table)
            return
        op = value.owner
        op = op.operation if hasattr(op, "operation") else op
        name = op.name
        shape = _shape(value, ir)
        if name in _SHAPE_OPS:
            for operand, olo, ohi in self._through_shape_op(op, lo, hi):
                self._back(operand, olo, ohi, table)
            return
        if name in ("stablehlo.add", "stablehlo.subtract"):
            x, c, sign = self._constant_side(op, shape)
            if sign == 1:      # x + c (or x - c: c negated)
                self._back(x, _clip(lo - c), _clip(hi - c), table)
            else:              # c - x in [lo, hi)  <=>  x in (c - hi, c - lo]
                self._back(x, _clip(c - hi + 1), _clip(c - lo + 1), table)
            return
        if name == "stablehlo.select":
            x, n = self._negative_wrap(op, shape)
            # x >= 0 gives x, x < 0 gives x + n: valid x are [lo, hi) for
            # x >= 0 and [lo - n, hi - n) for x < 0.
            a_lo, a_hi = np.maximum(lo, 0), hi
            b_lo, b_hi = _clip(lo - n), np.minimum(_clip(hi - n), 0)
            a_empty, b_empty = a_lo >= a_hi, b_lo >= b_hi
            joined = ~a_empty & ~b_empty & (b_hi >= a_lo)
            new_lo = np.where(a_empty, b_lo, np.where(joined, b_lo, a_lo))
            new_hi = np.where(a_empty, b_hi, a_hi)
            self._back(x, new_lo, new_hi, table)
            return
        if name == "stablehlo.clamp" and len(op.operands) == 3:
            cmin = self._constant(op.operands[0], shape)
            cmax = self._constant(op.operands[2], shape)
            if cmin is None or cmax is None:
                raise _Unsupported(f"an id reaches a table through '{name}'")
            inside = (cmin >= lo) & (cmax < hi)
            self._back(op.operands[1], np.where(inside, _LO, lo), np.where(inside, _HI, hi),
                       table)
            return
        raise _Unsupported(f"an id reaches a table through '{name}'")

    def _record(self, index: int, lo: np.ndarray, hi: np.ndarray, table: str) -> None:
        lo, hi = lo.ravel(), hi.ravel()
        r = self.ranges.get(index)
        if r is None:
            self.ranges[index] = InputRange(index, lo.copy(), hi.copy(), [table])
            return
        r.lo, r.hi = np.maximum(r.lo, lo), np.minimum(r.hi, hi)
        if table not in r.tables:
            r.tables.append(table)

    def _through_shape_op(self, op, lo, hi):
        """(operand, lo, hi) for the operands of an element-moving op."""
        ir = self.ir
        name = op.name
        x = op.operands[0]
        xshape = _shape(x, ir)
        if name == "stablehlo.convert":
            if not (_is_int(x, ir) and _is_int(op.results[0], ir)):
                raise _Unsupported(f"an id reaches a table through '{name}' from "
                                   f"{ir.RankedTensorType(x.type).element_type}")
            return [(x, lo, hi)]
        if name == "stablehlo.reshape":
            return [(x, lo.reshape(xshape), hi.reshape(xshape))]
        if name == "stablehlo.transpose":
            perm = _i64_array(op.attributes["permutation"])
            inv = np.argsort(perm)
            return [(x, lo.transpose(inv), hi.transpose(inv))]
        if name == "stablehlo.broadcast_in_dim":
            dims = _i64_array(op.attributes["broadcast_dimensions"])
            rshape = lo.shape
            for axis in range(len(rshape)):
                if axis not in dims or (xshape[dims.index(axis)] == 1 and rshape[axis] != 1):
                    lo = lo.max(axis=axis, keepdims=True)
                    hi = hi.min(axis=axis, keepdims=True)
            others = [a for a in range(len(rshape)) if a not in dims]
            order = list(dims) + others
            lo = lo.transpose(order).reshape(xshape)
            hi = hi.transpose(order).reshape(xshape)
            return [(x, lo, hi)]
        if name == "stablehlo.slice":
            start = _i64_array(op.attributes["start_indices"])
            limit = _i64_array(op.attributes["limit_indices"])
            strides = _i64_array(op.attributes["strides"])
            index = tuple(slice(s, e, k) for s, e, k in zip(start, limit, strides))
            xlo, xhi = np.full(xshape, _LO, np.int64), np.full(xshape, _HI, np.int64)
            xlo[index], xhi[index] = lo, hi
            return [(x, xlo, xhi)]
        if name == "stablehlo.concatenate":
            axis = int(ir.IntegerAttr(op.attributes["dimension"]).value)
            out, start = [], 0
            for operand in op.operands:
                n = _shape(operand, ir)[axis]
                index = (slice(None),) * axis + (slice(start, start + n),)
                out.append((operand, lo[index], hi[index]))
                start += n
            return out
        raise _Unsupported(f"an id reaches a table through '{name}'")

    def _constant_side(self, op, shape):
        """(x, c, sign) of ``x + c`` / ``c + x`` / ``x - c`` (sign 1, c negated
        for the subtraction) or ``c - x`` (sign -1), c a constant."""
        a, b = op.operands[0], op.operands[1]
        ca, cb = self._constant(a, shape), self._constant(b, shape)
        if op.name == "stablehlo.add":
            if cb is not None:
                return a, cb, 1
            if ca is not None:
                return b, ca, 1
        else:
            if cb is not None:
                return a, -cb, 1
            if ca is not None:
                return b, ca, -1
        raise _Unsupported(f"an id reaches a table through '{op.name}' of two computed values")

    def _negative_wrap(self, op, shape):
        """(x, n) of ``select(compare LT x, 0), x + n, x)`` (Keras' take)."""
        ir = self.ir
        pred, then, other = op.operands
        cmp_op, add_op = _owner(pred), _owner(then)
        if (cmp_op is not None and add_op is not None and cmp_op.name == "stablehlo.compare"
                and "LT" in str(cmp_op.attributes["comparison_direction"])
                and cmp_op.operands[0] == other and add_op.name == "stablehlo.add"):
            zero = self._constant(cmp_op.operands[1], shape)
            n = None
            if add_op.operands[0] == other:
                n = self._constant(add_op.operands[1], shape)
            elif add_op.operands[1] == other:
                n = self._constant(add_op.operands[0], shape)
            if zero is not None and np.all(zero == 0) and n is not None:
                return other, _clip(n)
        del ir
        raise _Unsupported("an id reaches a table through 'stablehlo.select'")

    def _constant(self, value, shape) -> np.ndarray | None:
        """An integer constant (through reshape/broadcast) as an int64 array of
        ``shape``, or None."""
        ir = self.ir
        op = _owner(value)
        if op is None or not _is_int(value, ir):
            return None
        if op.name == "stablehlo.constant":
            attr = ir.DenseElementsAttr(op.attributes["value"])
            vshape = _shape(value, ir)
            if attr.is_splat:
                c = np.full(vshape, ir.IntegerAttr(attr.get_splat_value()).value, np.int64)
            else:
                c = np.array(ir.DenseIntElementsAttr(attr), dtype=np.int64).reshape(vshape)
        elif op.name in ("stablehlo.broadcast_in_dim", "stablehlo.reshape", "stablehlo.convert"):
            inner = self._constant(op.operands[0], _shape(op.operands[0], ir))
            if inner is None:
                return None
            if op.name == "stablehlo.broadcast_in_dim":
                dims = _i64_array(op.attributes["broadcast_dimensions"])
                rshape = _shape(value, ir)
                expanded = [1] * len(rshape)
                for k, d in enumerate(dims):
                    expanded[d] = inner.shape[k]
                order = np.argsort(dims)
                c = np.broadcast_to(inner.transpose(order).reshape(expanded), rshape)
            else:
                c = inner.reshape(_shape(value, ir))
        else:
            return None
        return np.broadcast_to(c, shape) if tuple(c.shape) != tuple(shape) else c


# --------------------------------------------------------------------------
# sinks

_SINKS = ("stablehlo.torch_index_select", "stablehlo.gather", "stablehlo.dynamic_slice",
          "stablehlo.dynamic_update_slice")
_GATHER_FIELD = re.compile(r"(\w+) = \[([\d, ]*)\]")
_INDEX_VECTOR_DIM = re.compile(r"index_vector_dim = (\d+)")


def _sink_constraints(op, ir):
    """(index value, lo, hi) for each index operand of a table read."""
    name = op.name
    operand_shape = _shape(op.operands[0], ir)
    if name == "stablehlo.torch_index_select":
        dim = int(ir.IntegerAttr(op.attributes["dim"]).value)
        index = op.operands[1]
        ishape = _shape(index, ir)
        yield index, np.zeros(ishape, np.int64), np.full(ishape, operand_shape[dim], np.int64)
    elif name == "stablehlo.gather":
        text = str(op.attributes["dimension_numbers"])
        fields = {k: [int(v) for v in vals.split(",") if v.strip()]
                  for k, vals in _GATHER_FIELD.findall(text)}
        match = _INDEX_VECTOR_DIM.search(text)
        start_map = fields.get("start_index_map", [])
        sizes = _i64_array(op.attributes["slice_sizes"])
        index = op.operands[1]
        ishape = _shape(index, ir)
        ivd = int(match.group(1)) if match else len(ishape)
        bounds = np.array([operand_shape[d] - sizes[d] + 1 for d in start_map], np.int64)
        hi = np.empty(ishape, np.int64)
        if ivd == len(ishape):
            hi[...] = bounds[0] if len(bounds) else _HI
        else:
            view = [1] * len(ishape)
            view[ivd] = len(bounds)
            hi[...] = bounds.reshape(view)
        yield index, np.zeros(ishape, np.int64), hi
    elif name in ("stablehlo.dynamic_slice", "stablehlo.dynamic_update_slice"):
        if name == "stablehlo.dynamic_slice":
            sizes, starts = _i64_array(op.attributes["slice_sizes"]), list(op.operands[1:])
        else:
            sizes, starts = _shape(op.operands[1], ir), list(op.operands[2:])
        for k, start in enumerate(starts):
            sshape = _shape(start, ir)
            yield (start, np.zeros(sshape, np.int64),
                   np.full(sshape, operand_shape[k] - sizes[k] + 1, np.int64))


def _describe_sink(op, ir) -> str:
    table = "x".join(str(d) for d in _shape(op.operands[0], ir))
    return {"stablehlo.torch_index_select": f"the rows of a {table} table (gather)",
            "stablehlo.gather": f"a {table} table (gather_nd)",
            "stablehlo.dynamic_slice": f"a slice of a {table} tensor (dynamic slice)",
            "stablehlo.dynamic_update_slice": f"an update of a {table} tensor (dynamic slice)",
            }[op.name]


# --------------------------------------------------------------------------
# helpers


def _clip(a) -> np.ndarray:
    return np.clip(np.asarray(a, np.int64), _LO, _HI)


def _shape(value, ir) -> tuple[int, ...]:
    return tuple(ir.RankedTensorType(value.type).shape)


def _is_int(value, ir) -> bool:
    try:
        return isinstance(ir.RankedTensorType(value.type).element_type, ir.IntegerType)
    except Exception:
        return False


def _is_block_arg(value, ir) -> bool:
    return isinstance(value, ir.BlockArgument) or isinstance(value.owner, ir.Block)


def _as_operation(op):
    """An Operation from an OpView (whose ``name`` may be a symbol, e.g. FuncOp's)."""
    return op.operation if hasattr(op, "operation") else op


def _owner(value):
    """The op that defines ``value`` (as an Operation), or None for a block argument."""
    owner = value.owner
    if hasattr(owner, "operation"):
        return owner.operation
    return owner if hasattr(owner, "name") and hasattr(owner, "operands") else None


def _i64_array(attr) -> list[int]:
    text = str(attr)
    if text.startswith("array<"):
        inner = text.split(":", 1)[1].rstrip(">").strip() if ":" in text else ""
        return [int(v) for v in inner.split(",") if v.strip()]
    return [int(v) for v in re.findall(r"-?\d+", text.split(":")[0])]


# --------------------------------------------------------------------------
# what the library, the manifest and the harness use


def dtype_limits(dtype_name: str) -> tuple[int, int]:
    info = np.iinfo(np.dtype(dtype_name))
    return int(info.min), int(info.max)


def input_id_ranges(analysis: RangeAnalysis, inputs) -> dict[int, dict]:
    """For each checked input (index into ``inputs``, TensorInfo-like with
    ``name`` and ``dtype``): ``{"min", "end", "runs", "tables"}`` with every
    bound inside the input's integer type (a side the type cannot exceed is
    the type's own limit). ``runs``: [first element, count, min, end] per
    run of elements with one range; ``min``/``end``: the range valid for
    every checked element (the intersection)."""
    out: dict[int, dict] = {}
    for index, r in sorted(analysis.ranges.items()):
        t = inputs[index]
        if not np.issubdtype(np.dtype(t.dtype), np.integer):
            continue
        tmin, tmax = dtype_limits(t.dtype)
        runs = []
        for first, count, lo, hi in r.runs():
            lo, hi = max(lo, tmin), min(hi, tmax + 1)
            if lo <= tmin and hi > tmax:
                continue
            if runs and runs[-1][0] + runs[-1][1] == first and runs[-1][2:] == [lo, hi]:
                runs[-1][1] += count
            else:
                runs.append([first, count, lo, hi])
        if not runs:
            continue
        out[index] = {"min": max(run[2] for run in runs), "end": min(run[3] for run in runs),
                      "runs": runs, "tables": list(r.tables)}
    return out
