"""Reading and rewriting TensorFlow's MLIR (the TF dialect) before its lowering.

``convert_function`` prints the step in the TF dialect's generic form. The
passes that rewrite it there (dilated_conv.py, bilinear_resize.py) parse
that text with IREE's MLIR, in which the TF dialect is not registered: an
op's properties are not visible to the Python API, so they are read from
the op's text, and new ops are created by name with their properties in the
attribute dictionary, where TensorFlow's parser takes them too.
"""
from __future__ import annotations

import re
from contextlib import contextmanager

import numpy as np

from .legality import new_op


@contextmanager
def parsed(tf_text: str):
    """The module of ``tf_text`` in a context that allows unregistered ops;
    None where it does not parse (the lowering then reports what is wrong)."""
    from iree.compiler import ir

    with ir.Context() as ctx:
        ctx.allow_unregistered_dialects = True
        try:
            module = ir.Module.parse(tf_text)
        except ir.MLIRError:
            module = None
        yield module


def rewrite_ops(tf_text: str, name: str, rewrite) -> tuple[str, int]:
    """``tf_text`` with ``rewrite(op)`` (True where it rewrote ``op``) run on
    every op called ``name``, and how many it rewrote; the text as it was
    where nothing changed or it does not parse."""
    with parsed(tf_text) as module:
        if module is None:
            return tf_text, 0
        count = sum(bool(rewrite(op)) for op in walk(module.operation) if op.name == name)
        return (printed(module), count) if count else (tf_text, 0)


def printed(module) -> str:
    """``module``'s text, with the debug locations that name the TF nodes
    for the legality check's errors."""
    return module.operation.get_asm(enable_debug_info=True)


def walk(op) -> list:
    """Every operation nested in ``op`` (a list: the rewrites erase some)."""
    found = []
    for region in op.regions:
        for block in region.blocks:
            for inner in block.operations:
                found.append(inner.operation)
                found.extend(walk(inner.operation))
    return found


def owner(value):
    """The operation that defines ``value``; None for a block argument."""
    return getattr(value.owner, "operation", None)


def is_op(op, *names: str) -> bool:
    return op is not None and op.name in names


def props(op) -> dict[str, str]:
    """The op's properties (``<{name = value, ...}>`` in its generic form) as text."""
    text = op.get_asm(print_generic_op_form=True, large_elements_limit=16)
    body = re.search(r"<\{(.*?)\}>", text)
    if body is None:
        return {}
    return dict(re.findall(r'(\w+) = ("[^"]*"|\[[^\]]*\]|dense<[^>]*> : tensor<[^>]*>|[\w.-]+)',
                           body.group(1)))


def flag(op, name: str, default: bool) -> bool:
    """A boolean property or attribute of ``op``, else ``default``."""
    if name in op.attributes:
        return str(op.attributes[name]) == "true"
    value = props(op).get(name)
    return default if value is None else value == "true"


def int_const(value) -> np.ndarray | None:
    """The integers of a small ``tf.Const`` (through ``tf.Identity``), else None."""
    from iree.compiler import ir

    op = owner(value)
    while is_op(op, "tf.Identity"):
        op = owner(op.operands[0])
    if not is_op(op, "tf.Const"):
        return None
    t = ir.RankedTensorType(op.results[0].type)
    if not t.has_static_shape or not str(t.element_type).startswith("i") or t.rank > 2:
        return None
    dense = re.match(r"dense<([^>]*)>", props(op).get("value", ""))
    if dense is None:
        return None
    values = [int(v) for v in re.findall(r"-?\d+", dense.group(1))]
    size = int(np.prod(t.shape))
    if len(values) == 1:  # a splat
        values *= size
    return np.array(values, np.int64).reshape(t.shape) if len(values) == size else None


def rank(value) -> int:
    from iree.compiler import ir

    return ir.RankedTensorType(value.type).rank


def tensor(shape: list[int], like):
    """A ranked tensor type of ``shape`` with ``like``'s element type."""
    from iree.compiler import ir

    return ir.RankedTensorType.get(shape, like.element_type)


def i64s(values: list[int]):
    from iree.compiler import ir

    i64 = ir.IntegerType.get_signless(64)
    return ir.ArrayAttr.get([ir.IntegerAttr.get(i64, v) for v in values])


def clone(op, operands: list, result_type, **changes):
    """A new op like ``op`` (name, properties, attributes, location) on
    ``operands``, with ``changes`` to its attributes."""
    from iree.compiler import ir

    attributes = {k: ir.Attribute.parse(v) for k, v in props(op).items()}
    attributes.update({name: op.attributes[name] for name in op.attributes})
    attributes.update(changes)
    return ir.Operation.create(op.name, results=[result_type], operands=operands,
                               attributes=attributes, loc=op.location)


def const(values: np.ndarray):
    """The result of a new ``tf.Const`` holding ``values`` (int32 or float32)."""
    from iree.compiler import ir

    values = np.ascontiguousarray(values)
    element = ir.IntegerType.get_signless(32) if values.dtype == np.int32 else ir.F32Type.get()
    kind = ir.RankedTensorType.get(list(values.shape), element)
    return new_op("tf.Const", kind, [], {"value": ir.DenseElementsAttr.get(values, type=kind)})
