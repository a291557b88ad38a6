"""Import stage: step program -> MLIR with only func, stablehlo and ml_program.

1. Freeze the pure step (variables become constants, so weights stay
   constants in the module rather than globals).
2. TensorFlow's own converter: ``convert_function`` to the TF dialect, then
   (after folding TensorFlow's SpaceToBatchND / BatchToSpaceND form of
   dilated convolutions into one convolution: dilated_conv.py; and bilinear
   resizes into gathers and lerps: bilinear_resize.py) the
   ``tf-lower-to-mlprogram-and-hlo`` pipeline, which ends in StableHLO.
3. Legality (legality.py): that pipeline keeps ops it cannot lower
   *silently* (and iree-compile then crashes), so every op is checked and
   an op outside the allowed dialects is an error naming the TF op type
   and node (after the image resizes it leaves are made matrix products:
   resize.py).
4. Wrap: one private mutable ``ml_program.global`` per state, declared before
   the functions (IREE 3.13 fails on globals declared after their users),
   ``@step`` loading the states, calling the pure step and storing the new
   states, ``@reset`` storing the initial values, and ``@get_state`` /
   ``@set_state`` for callers that save and restore the state.
"""
from __future__ import annotations

import re

import numpy as np

from .activations import expand_erf, expand_tan
from .bilinear_resize import resize_bilinear_as_gathers
from .converts import float8_rounding, unsigned_via_signed
from .dft import expand_ffts
from .dilated_conv import fold_dilated_convs
from .einsum import einsums_as_dot_generals
from .kernel_calls import retire
from .legality import check_legality, constants_as_stablehlo
from .matvec_sums import merge_matvec_sums
from .resize import resizes_as_products
from .sliced_constants import fold_constant_slices, slice_constant_operands
from ..dtypes import dtype
from ..errors import TfaotError, first_line
from ..program import StateInfo, StepProgram, TensorInfo

ALLOWED_DIALECTS = {"builtin", "func", "stablehlo", "ml_program"}
PURE_STEP = "pure_step"


def import_program(program: StepProgram, *, matvec_layout: bool = True,
                   join_products: bool = True) -> str:
    """Return the MLIR text of the streaming module for ``program``.

    ``matvec_layout=False`` keeps the weights in TensorFlow's layout (for
    benchmarks that compare against it). ``join_products``: a sum of two
    constant-matrix products as one (lower/matvec_sums.py).
    """
    tf_text, _ = fold_dilated_convs(_to_tf_dialect(program))
    tf_text, _ = resize_bilinear_as_gathers(tf_text)
    hlo_text = unpack_bool_constants(_lower_to_stablehlo(tf_text, program.source))
    # (after the wrap, which prints the module in the pretty form the rewrite reads)
    text, _ = expand_erf(_wrap(hlo_text, program, matvec_layout, join_products))
    text, _ = expand_tan(text)
    text, _ = expand_ffts(text)
    _refuse_custom_calls(text, program.source)
    return text


#: TensorFlow's ops behind the custom calls its converter leaves for XLA
_CUSTOM_CALL_OPS = {"mhlo.topk": "TopKV2 (tf.math.top_k, tf.sort, tf.argsort, Keras' sparsemax)"}


def _refuse_custom_calls(text: str, source: str) -> None:
    """A custom call left in the module is one IREE cannot compile: said here,
    naming TensorFlow's op, not by iree-compile after the slow stages."""
    for target in dict.fromkeys(re.findall(r"stablehlo\.custom_call @([\w.$-]+)", text)):
        op = _CUSTOM_CALL_OPS.get(target, f"the op behind '{target}'")
        raise TfaotError(f"{source}: the model uses {op}, which TensorFlow's converter "
                         f"leaves as a custom call ({target}) that IREE cannot compile")


def _to_tf_dialect(program: StepProgram) -> str:
    from tensorflow.python.framework.convert_to_constants import (
        convert_variables_to_constants_v2,
    )

    # Functional control flow kept (an If stays tf.If, which the converter
    # lowers, or folds where its predicate is a constant): lowered to v1
    # Switch/Merge, a tf.cond in the step (Keras' Resizing with
    # pad_to_aspect_ratio) had no StableHLO lowering at all
    frozen = convert_variables_to_constants_v2(program.pure_step, lower_control_flow=False)
    try:
        text = _import_function(frozen)
    except Exception as e:
        raise TfaotError(f"{program.source}: TensorFlow could not import the step "
                         f"function to MLIR: {first_line(e)}") from None
    return _rename_single_func(text, "main")


# Call attributes that make TensorFlow's importer wrap a call in a
# tf_device.cluster_func (an XLA cluster), which has no StableHLO lowering.
# Keras 3 compiles some ops with jit_compile=True (grouped convolutions,
# channels-first 3-D ones) because TensorFlow's CPU kernels lack them; here
# the whole step is compiled anyway, so the call is imported inline.
_XLA_CALL_ATTRS = ("_XlaMustCompile", "_XlaCompile", "_XlaScope", "_XlaSeparateCompiledGradients")


def _import_function(frozen) -> str:
    """``tf.mlir.experimental.convert_function`` of ``frozen``, with every
    call into an XLA cluster (and the cluster's own calls) made a plain call."""
    from tensorflow.python import pywrap_mlir
    from tensorflow.python.eager import context

    ctx = context.context()
    ctx.ensure_initialized()
    library = {f.signature.name: f for f in frozen.graph.as_graph_def().library.function}
    fdef = frozen.function_def
    if _inline_xla_calls(fdef, library, ctx):
        # The importer reads the function from the context by its name.
        _register_renamed(fdef, ctx)
    return pywrap_mlir.ImportFunction(ctx._handle, str(fdef).encode("utf-8"),
                                      b"tf-standard-pipeline", True)


def _inline_xla_calls(fdef, library: dict, ctx) -> bool:
    """Drop the XLA attributes from ``fdef``'s calls (a callee that carries
    them is registered again without them); True if anything changed."""
    changed = False
    for node in fdef.node_def:
        for attr in _XLA_CALL_ATTRS:
            changed |= node.attr.pop(attr, None) is not None
        callee = library.get(node.attr["f"].func.name) if "f" in node.attr else None
        if callee is None:
            continue
        plain = type(callee)()
        plain.CopyFrom(callee)
        for attr in (*_XLA_CALL_ATTRS, "_noinline"):
            changed |= plain.attr.pop(attr, None) is not None
        if _inline_xla_calls(plain, library, ctx) or plain != callee:
            node.attr["f"].func.name = _register_renamed(plain, ctx)
            changed = True
    return changed


def _register_renamed(fdef, ctx) -> str:
    fdef.signature.name += "_tfaot_plain"
    if not ctx.has_function(fdef.signature.name):
        ctx.add_function_def(fdef)
    return fdef.signature.name


def _rename_single_func(text: str, new_name: str) -> str:
    names = re.findall(r"func\.func @([\w.$-]+)\(", text)
    public = [n for n in names if not re.search(rf"func\.func private @{re.escape(n)}\(", text)]
    if len(public) != 1:
        raise TfaotError(f"internal: expected one public function, found {public}")
    return re.sub(rf"@{re.escape(public[0])}\b", f"@{new_name}", text)


def _lower_to_stablehlo(tf_text: str, source: str) -> str:
    from tensorflow.python import pywrap_mlir

    try:
        return pywrap_mlir.experimental_run_pass_pipeline(
            tf_text, "tf-lower-to-mlprogram-and-hlo", True)
    except Exception as e:
        why = first_line(e)
        v1_cond = _V1_COND.search(str(e))
        if v1_cond:
            raise TfaotError(
                f"{source}: node '{v1_cond[1]}' is a TF1 conditional (Switch/Merge: a tf.cond "
                "in control flow v1, or frozen by convert_variables_to_constants) that tfaot "
                "did not stream, and TensorFlow's converter to StableHLO cannot lower it; "
                "build the model without it (static_rnn's sequence_length writes one per "
                "step: dynamic_rnn with sequence_length streams)") from None
        raise TfaotError(f"{source}: lowering to StableHLO failed: {why}") from None


#: TensorFlow's converter failing on a v1 conditional left in the step,
#: with the node's name in its location.
_V1_COND = re.compile(r"""loc\(fused\["(?:Switch|Merge):", "([^"]+)"\]\)[^\n]*tf_executor\.(?:Switch|Merge)""")


# TensorFlow's MLIR prints a boolean constant's hex data packed, 8 elements a
# byte; the MLIR in IREE's compiler reads one byte per element, so a mask
# constant (a causal attention mask, say) would not parse. Written as a list
# of true/false it reads the same in both.
_BOOL_HEX = re.compile(r'dense<"0x([0-9A-Fa-f]*)"> : tensor<((?:\d+x)*)i1>')


def unpack_bool_constants(text: str) -> str:
    return _BOOL_HEX.sub(_bool_literal, text)


def _bool_literal(match: re.Match) -> str:
    import numpy as np

    data, dims = bytes.fromhex(match.group(1)), match.group(2)
    shape = [int(d) for d in dims.split("x") if d]
    count = int(np.prod(shape))
    if len(data) == count:  # already one byte per element
        values = np.frombuffer(data, np.uint8) != 0
    else:
        values = np.unpackbits(np.frombuffer(data, np.uint8), bitorder="little")[:count] != 0
    return f"dense<{_nested(values.reshape(shape))}> : tensor<{dims}i1>"


def _nested(values) -> str:
    if values.ndim == 0:
        return "true" if values else "false"
    return "[" + ", ".join(_nested(v) for v in values) + "]"


# --------------------------------------------------------------------------
# wrapper


def _wrap(hlo_text: str, program: StepProgram, matvec_layout: bool,
          join_products: bool) -> str:
    from iree.compiler import ir

    with ir.Context() as ctx:
        ctx.allow_unregistered_dialects = True
        try:
            module = ir.Module.parse(hlo_text)
        except Exception as e:
            raise TfaotError(f"{program.source}: internal: cannot parse lowered "
                             f"module: {first_line(e)}") from None
        constants_as_stablehlo(module)
        pure = _single_func(module)
        resizes_as_products(pure)
        check_legality(module, program.source, ALLOWED_DIALECTS)
        fold_constant_slices(pure)
        float8_rounding(pure)
        unsigned_via_signed(pure)
        einsums_as_dot_generals(pure)
        dot_generals_as_dots(pure)
        if matvec_layout:
            use_matvec_layout(pure)
        if join_products:
            merge_matvec_sums(pure)
        slice_constant_operands(pure)
        pure.attributes["sym_name"] = ir.StringAttr.get(PURE_STEP)
        pure.attributes["sym_visibility"] = ir.StringAttr.get("private")
        body = _strip_module(module.operation.get_asm(enable_debug_info=False))
    sig = program.signature
    return "\n".join([
        f"// tfaot streaming module for {program.source.rsplit('/', 1)[-1]}",
        "module @streaming {",
        *(_global_decl(i, s) for i, s in enumerate(sig.states)),
        _step_func(sig.inputs, sig.outputs, sig.states),
        _reset_func(sig.states),
        *_state_access_funcs(sig.states),
        body,
        "}",
        "",
    ])


_CONTRACTING = re.compile(r"lhs_contracting_dimensions = \[(\d+)\], "
                         r"rhs_contracting_dimensions = \[(\d+)\]>$")


def dot_generals_as_dots(func_op) -> int:
    """Rewrite ``dot_general(x[1,..,1,K], W)`` with a constant 2-D W (Keras'
    ``EinsumDense``, ``tf.einsum`` and ``tf.matmul`` on a frame of a 3-D
    sequence) as the vector-matrix ``dot`` it is, between reshapes: the
    matvec kernel takes a ``dot`` only (EinsumDense's weights stayed with
    IREE, in RAM, and --weights-dtype=int8 said the model had no matrix).
    Returns the number of products rewritten."""
    from iree.compiler import ir

    count = 0
    for op in list(func_op.regions[0].blocks[0].operations):
        if op.operation.name != "stablehlo.dot_general" or len(op.operands) != 2:
            continue
        dims = _CONTRACTING.search(str(op.attributes["dot_dimension_numbers"]))
        w_op = op.operands[1].owner
        x_type = ir.RankedTensorType(op.operands[0].type)
        if (dims is None or not isinstance(w_op, ir.OpView)
                or w_op.operation.name != "stablehlo.constant"
                or int(dims.group(1)) != x_type.rank - 1 or x_type.rank < 2
                or any(d != 1 for d in x_type.shape[:-1])):
            continue
        value = ir.DenseElementsAttr(w_op.attributes["value"])
        w_type = ir.RankedTensorType(value.type)
        if value.is_splat or w_type.rank != 2 or str(w_type.element_type) != "f32":
            continue
        w = np.array(value, dtype=np.float32).reshape(w_type.shape)
        w = w if dims.group(2) == "0" else w.T  # as [K, N]
        k, n = w.shape
        f32 = ir.F32Type.get()
        with ir.InsertionPoint(op), op.location:
            row = ir.Operation.create("stablehlo.reshape",
                                      results=[ir.RankedTensorType.get((1, k), f32)],
                                      operands=[op.operands[0]])
            weights = ir.Operation.create(
                "stablehlo.constant", results=[ir.RankedTensorType.get((k, n), f32)],
                attributes={"value": ir.DenseElementsAttr.get(np.ascontiguousarray(w))})
            product = ir.Operation.create(
                "stablehlo.dot", results=[ir.RankedTensorType.get((1, n), f32)],
                operands=[row.results[0], weights.results[0]])
            shaped = ir.Operation.create("stablehlo.reshape", results=[op.results[0].type],
                                         operands=[product.results[0]])
        retire(op, 1, shaped.results[0])
        count += 1
    return count


def use_matvec_layout(func_op) -> int:
    """Rewrite ``dot(x[1,K], W[K,N])`` with constant W as ``dot(Wt[N,K], x[K,1])``.

    Keras keeps kernels as [in, units], so a streaming step is a
    vector-matrix product that IREE compiles as a "vecmat" walking W by
    columns. With the weights stored transposed (a constant, so free at run
    time) the same product is a "matvec" of contiguous dot products, which
    IREE's CPU code runs about 1.5x faster (bench/bench_cpu.py, 2xLSTM(128):
    24.9 -> 16.7 us/step). Writing it as ``x . Wt`` with contracting dims
    [1]x[1] instead made IREE transpose Wt back inside the step (6x slower),
    hence the explicit matrix-times-column form. Returns the number of
    products rewritten.
    """
    from iree.compiler import ir

    count = 0
    for op in list(func_op.regions[0].blocks[0].operations):
        weights = _constant_matrix_rhs(op)
        if weights is None:
            continue
        values = np.ascontiguousarray(np.array(weights).T)  # [N, K]
        n, k = values.shape
        f32 = ir.F32Type.get()
        with ir.InsertionPoint(op), op.location:
            w_t = ir.Operation.create(
                "stablehlo.constant", results=[ir.RankedTensorType.get((n, k), f32)],
                attributes={"value": ir.DenseElementsAttr.get(values)})
            column = ir.Operation.create(
                "stablehlo.reshape", results=[ir.RankedTensorType.get((k, 1), f32)],
                operands=[op.operands[0]])
            product = ir.Operation.create(
                "stablehlo.dot", results=[ir.RankedTensorType.get((n, 1), f32)],
                operands=[w_t.results[0], column.results[0]])
            row = ir.Operation.create("stablehlo.reshape", results=[op.results[0].type],
                                      operands=[product.results[0]])
        retire(op, 1, row.results[0])
        count += 1
    return count


def _constant_matrix_rhs(op):
    """The f32 [K, N] constant of a vector-matrix ``stablehlo.dot``, else None."""
    from iree.compiler import ir

    if op.operation.name != "stablehlo.dot" or len(op.operands) != 2:
        return None
    lhs_type = ir.RankedTensorType(op.operands[0].type)
    if lhs_type.rank != 2 or lhs_type.shape[0] != 1:
        return None
    rhs = op.operands[1].owner
    if not isinstance(rhs, ir.OpView) or rhs.operation.name != "stablehlo.constant":
        return None
    value = ir.DenseElementsAttr(rhs.attributes["value"])
    value_type = ir.RankedTensorType(value.type)
    if value.is_splat or value_type.rank != 2 or str(value_type.element_type) != "f32":
        return None
    return value


def _single_func(module):
    funcs = [op for op in module.body.operations if op.operation.name == "func.func"]
    if len(funcs) != 1:
        raise TfaotError(f"internal: lowered module has {len(funcs)} functions, expected 1")
    return funcs[0].operation


def _strip_module(asm: str) -> str:
    """The body of ``module { ... }`` as printed, without the wrapper lines."""
    lines = asm.strip().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("module"))
    return "\n".join(lines[start + 1:-1])


def _tensor_type(t: TensorInfo) -> str:
    """``tensor<1x20xf32>``; a scalar's ``tensor<i64>`` (a sample rate input)."""
    dims = "".join(f"{d}x" for d in t.shape)
    return f"tensor<{dims}{dtype(t.dtype, f'tensor {t.name!r}').mlir}>"


def _dense(value: np.ndarray, name: str = "float32") -> str:
    """A state's initial value in its own element type (an f16 state's hex
    is 2 bytes an element: the f32 bytes did not parse as its tensor)."""
    flat = np.asarray(value, np.float32).ravel()
    if flat.size and np.all(flat == flat[0]):
        return f"dense<{_f32(flat[0])}>"
    raw = flat.astype(np.dtype(name).newbyteorder("<")).tobytes()
    return f'dense<"0x{raw.hex().upper()}">'


def _f32(x) -> str:
    return f"{float(x):.9e}"


def _global_decl(i: int, s: StateInfo) -> str:
    return (f"  // state {s.name}\n"
            f"  ml_program.global private mutable @state{i}({_dense(s.initial, s.dtype)} : "
            f"{_tensor_type(s)}) : {_tensor_type(s)}")


def _step_func(inputs: tuple[TensorInfo, ...], outputs, states) -> str:
    """``@step(x0, x1...) -> (y...)``: load the states, call the pure step, store them back.

    The pure step takes the inputs (in order) then the states, and returns
    the outputs first, then the new states.
    """
    in_types = [_tensor_type(x) for x in inputs]
    out_types = [_tensor_type(y) for y in outputs]
    state_types = [_tensor_type(s) for s in states]
    params = ", ".join(f"%x{i}: {t}" for i, t in enumerate(in_types))
    lines = [f"  func.func @step({params}) -> ({', '.join(out_types)}) {{"]
    for i, t in enumerate(state_types):
        lines.append(f"    %s{i} = ml_program.global_load @state{i} : {t}")
    args = ", ".join([f"%x{i}" for i in range(len(in_types))] +
                     [f"%s{i}" for i in range(len(state_types))])
    arg_types = ", ".join(in_types + state_types)
    result_types = ", ".join(out_types + state_types)
    lines.append(f"    %r:{len(out_types) + len(state_types)} = func.call @{PURE_STEP}({args}) : "
                 f"({arg_types}) -> ({result_types})")
    for i, t in enumerate(state_types):
        lines.append(f"    ml_program.global_store @state{i} = %r#{len(out_types) + i} : {t}")
    results = ", ".join(f"%r#{i}" for i in range(len(out_types)))
    lines.append(f"    return {results} : {', '.join(out_types)}")
    lines.append("  }")
    return "\n".join(lines)


def _reset_func(states) -> str:
    """Store each state's initial value.

    IREE 3.13's inline execution model drops constants stored straight into
    a global (iree-notes §1.4), so the value is computed from the current
    state: ``select(is_finite(s), s, 0) * 0 + initial``. That equals
    ``initial`` exactly for every s, NaN and Inf included.
    """
    lines = ["  func.func @reset() {"]
    for i, s in enumerate(states):
        t = _tensor_type(s)
        # (an f16 state's mask too: i1, not f16; a scalar state's, tensor<f32>, too)
        b = re.sub(r"([<x])[a-z][a-z0-9]*>$", r"\1i1>", t)
        lines += [
            f"    %old{i} = ml_program.global_load @state{i} : {t}",
            f"    %zero{i} = stablehlo.constant dense<0.0> : {t}",
            f"    %init{i} = stablehlo.constant {_dense(s.initial, s.dtype)} : {t}",
            f"    %finite{i} = stablehlo.is_finite %old{i} : ({t}) -> {b}",
            f"    %kept{i} = stablehlo.select %finite{i}, %old{i}, %zero{i} : {b}, {t}",
            f"    %cleared{i} = stablehlo.multiply %kept{i}, %zero{i} : {t}",
            f"    %new{i} = stablehlo.add %cleared{i}, %init{i} : {t}",
            f"    ml_program.global_store @state{i} = %new{i} : {t}",
        ]
    lines += ["    return", "  }"]
    return "\n".join(lines)


def _state_access_funcs(states) -> list[str]:
    """``@get_state() -> (s0, s1, ...)`` and ``@set_state(s0, s1, ...)``.

    They let the caller save and restore the recurrent state (to multiplex
    streams, or to checkpoint). IREE may pack several globals into one
    buffer with a layout of its choosing, so the C side cannot address the
    states itself; going through these functions keeps that layout private.
    """
    if not states:
        return []
    types = [_tensor_type(s) for s in states]
    names = [f"%s{i}" for i in range(len(types))]
    get = [f"  func.func @get_state() -> ({', '.join(types)}) {{"]
    get += [f"    {n} = ml_program.global_load @state{i} : {t}"
            for i, (n, t) in enumerate(zip(names, types))]
    get += [f"    return {', '.join(names)} : {', '.join(types)}", "  }"]
    args = ", ".join(f"{n}: {t}" for n, t in zip(names, types))
    put = [f"  func.func @set_state({args}) {{"]
    put += [f"    ml_program.global_store @state{i} = {n} : {t}"
            for i, (n, t) in enumerate(zip(names, types))]
    put += ["    return", "  }"]
    return ["\n".join(get), "\n".join(put)]


# --------------------------------------------------------------------------
# target-dependent rewrites (the compile stage applies them)

#: Longest dot product kept as one FMA chain by ``split_matvec_reductions``.
SPLIT_CHUNK = 32


def split_matvec_reductions(mlir_text: str, chunk: int = SPLIT_CHUNK) -> tuple[str, int]:
    """Split each long constant-matrix matvec into independent partial products.

    ``W[N,K] . x[K,1]`` becomes a batched product of ``r`` slices of ``K/r``
    columns (``W3[r,N,K/r]``, a constant, times ``x3[r,K/r,1]``) whose ``r``
    partial results are added. With packed weights (``Target.pack_weights``)
    IREE's CPU kernel for a matvec is one serial chain of vector FMAs per
    output tile, bound by FMA latency; chains of at most ``chunk`` FMAs let
    the CPU overlap several of them (bench/bench_litert.py). The sum is
    reassociated, as any BLAS does (differences ~1e-7 relative). Matvecs
    with ``K <= chunk``, or no divisor of K giving chunks of 8..chunk, are
    left alone. Returns the new text and the number of products split.
    """
    from iree.compiler import ir

    with ir.Context():
        module = ir.Module.parse(mlir_text)
        count = sum(_split_one(op, chunk) for op in function_ops(module))
        if not count:
            return mlir_text, 0
        return module.operation.get_asm(enable_debug_info=False), count


def parse_or_none(mlir_text: str):
    """``mlir_text`` parsed in the current ``ir.Context``, or None where it is
    not valid: the rewrites then leave it alone and iree-compile names the
    error."""
    from iree.compiler import ir

    try:
        return ir.Module.parse(mlir_text)
    except ir.MLIRError:
        return None


def rewrite_each_op(mlir_text: str, marker: str, rewrite) -> tuple[str, int]:
    """``mlir_text`` with ``rewrite(op)`` (True where it rewrote ``op``) run on
    every op of its functions, and how many it rewrote; the text as it was
    where ``marker`` is not in it, it does not parse, or nothing changed."""
    from iree.compiler import ir

    if marker not in mlir_text:
        return mlir_text, 0
    with ir.Context():
        module = parse_or_none(mlir_text)
        if module is None:
            return mlir_text, 0
        count = sum(bool(rewrite(op)) for op in function_ops(module))
        if not count:
            return mlir_text, 0
        return module.operation.get_asm(enable_debug_info=False), count


def rewrite_planned(mlir_text: str, marker: str, plan, apply) -> tuple[str, int]:
    """``rewrite_each_op`` where ``plan(op)`` says how to rewrite ``op``
    (a tuple of arguments) or None, and ``apply(op, *plan)`` rewrites it."""
    def rewrite(op) -> bool:
        how = plan(op)
        if how is not None:
            apply(op, *how)
        return how is not None

    return rewrite_each_op(mlir_text, marker, rewrite)


def function_ops(module) -> list:
    """Every op in the top-level blocks of the module's functions (a list:
    callers may insert ops while walking it)."""
    return [op for func in module.body.operations if func.operation.name == "func.func"
            for block in func.operation.regions[0].blocks for op in list(block.operations)]


def _split_parts(k: int, chunk: int) -> int:
    if k <= chunk:
        return 1
    for r in range(-(-k // chunk), k // 8 + 1):
        if k % r == 0:
            return r
    return 1


def _split_one(op, chunk: int) -> int:
    from iree.compiler import ir

    if op.operation.name != "stablehlo.dot" or len(op.operands) != 2:
        return 0
    w_op = op.operands[0].owner
    if not isinstance(w_op, ir.OpView) or w_op.operation.name != "stablehlo.constant":
        return 0
    x_type = ir.RankedTensorType(op.operands[1].type)
    value = ir.DenseElementsAttr(w_op.attributes["value"])
    w_type = ir.RankedTensorType(value.type)
    if (value.is_splat or w_type.rank != 2 or str(w_type.element_type) != "f32"
            or x_type.rank != 2 or x_type.shape[1] != 1):
        return 0
    n, k = w_type.shape
    r = _split_parts(k, chunk)
    if r == 1:
        return 0
    kc = k // r
    w3 = np.ascontiguousarray(np.array(value).reshape(n, r, kc).transpose(1, 0, 2))
    f32 = ir.F32Type.get()

    def arr(values):
        return ir.DenseI64ArrayAttr.get(values)
    with ir.InsertionPoint(op), op.location:
        w_new = ir.Operation.create(
            "stablehlo.constant", results=[ir.RankedTensorType.get((r, n, kc), f32)],
            attributes={"value": ir.DenseElementsAttr.get(w3)})
        x3 = ir.Operation.create(
            "stablehlo.reshape", results=[ir.RankedTensorType.get((r, kc, 1), f32)],
            operands=[op.operands[1]])
        dims = ir.Attribute.parse(
            "#stablehlo.dot<lhs_batching_dimensions = [0], rhs_batching_dimensions = [0], "
            "lhs_contracting_dimensions = [2], rhs_contracting_dimensions = [1]>")
        parts = ir.Operation.create(
            "stablehlo.dot_general", results=[ir.RankedTensorType.get((r, n, 1), f32)],
            operands=[w_new.results[0], x3.results[0]], attributes={"dot_dimension_numbers": dims})
        total = None
        for j in range(r):
            piece = ir.Operation.create(
                "stablehlo.slice", results=[ir.RankedTensorType.get((1, n, 1), f32)],
                operands=[parts.results[0]],
                attributes={"start_indices": arr([j, 0, 0]), "limit_indices": arr([j + 1, n, 1]),
                            "strides": arr([1, 1, 1])})
            flat = ir.Operation.create("stablehlo.reshape", results=[op.results[0].type],
                                       operands=[piece.results[0]])
            total = flat if total is None else ir.Operation.create(
                "stablehlo.add", results=[op.results[0].type],
                operands=[total.results[0], flat.results[0]])
    op.results[0].replace_all_uses_with(total.results[0])
    op.operation.erase()
    if not list(w_op.results[0].uses):
        w_op.operation.erase()
    return 1
