"""GraphDef helpers of the graph streamifier (the neutral ones are in ``..graphdef``).

Tensor names (``"node:1"``), the op families the streamifier tells apart,
and ``Fail``, the internal error that becomes a ``TfaotError`` with the
model path in front.
"""
from __future__ import annotations

import re

from ..frontend.graphdef import (  # noqa: F401
    FLOAT_TYPES,
    IDENTITY_OPS,
    INT_TYPES,
    dtype_name,
    node_of,
    split_tensor,
)

CF_V1 = {"Enter", "Exit", "Merge", "Switch", "NextIteration", "LoopCond",
         "RefEnter", "RefExit", "RefMerge", "RefSwitch", "RefNextIteration"}
WHILE_OPS = {"While", "StatelessWhile"}
IDENTITY = IDENTITY_OPS
READ_OPS = {"TensorListGetItem": 0, "TensorArrayReadV3": 0}  # op -> list/handle input
# Ordering comparisons: a time index compared with a bound (a sequence_length)
# stays exact with a saturating step counter.
COMPARISONS = {"Less", "LessEqual", "Greater", "GreaterEqual"}
# Ops that call back into the Python interpreter: never compilable.
PY_FUNC_OPS = {"PyFunc", "PyFuncStateless", "EagerPyFunc"}


class Fail(Exception):
    """Internal: becomes a TfaotError with the file name in front."""


class NotIncremental(Fail):
    """A node that cannot stream incrementally: a fixed-window graph falls back
    to recomputing the whole window each step; elsewhere it is an error."""


def parse_tensor(name: str) -> tuple[str, int]:
    """"node:1" -> ("node", 1); "node" -> ("node", 0)."""
    try:
        return split_tensor(name)
    except ValueError as e:
        raise Fail(str(e)) from None


def tname(name: str) -> str:
    """The canonical ``"node:i"`` form of a tensor name."""
    node, idx = parse_tensor(name)
    return f"{node}:{idx}"




def calls_function(node) -> bool:
    return any(v.HasField("func") or (v.HasField("list") and len(v.list.func))
               for v in node.attr.values())


def scope(name: str) -> str:
    """A TensorFlow name scope for ops emitted in place of ``name``."""
    return re.sub(r"[^A-Za-z0-9_.\-/]", "_", name) + "/"


def py_function_message(node, where: str = "") -> str:
    """Why a ``tf.py_function`` / ``tf.numpy_function`` node cannot be built."""
    return (f"node '{node.name}'{where} (op {node.op}) calls a Python function "
            "(tf.py_function / tf.numpy_function): Python functions cannot be compiled; "
            "rewrite that part with TensorFlow ops")
