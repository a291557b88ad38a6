"""GraphDef helpers shared by the load stage and the graph streamifier.

Tensor names (``"node:1"``), data types of node outputs and the dtype
families the stages tell apart. Nothing here depends on a later stage.
"""
from __future__ import annotations

INT_TYPES = (3, 9)  # DT_INT32, DT_INT64
FLOAT_TYPES = (1, 2, 14, 19)  # float, double, bfloat16, half
NON_DATA_TYPES = (20, 21, 7)  # DT_RESOURCE, DT_VARIANT, DT_STRING


def split_tensor(name: str) -> tuple[str, int]:
    """``"node:1"`` -> ``("node", 1)``; ``"node"`` -> ``("node", 0)``; ValueError if malformed."""
    node, _, idx = name.partition(":")
    try:
        return node, int(idx) if idx else 0
    except ValueError:
        raise ValueError(f"malformed tensor name '{name}' (expected NODE or NODE:INDEX)") \
            from None


def node_of(tensor_name: str) -> str:
    """The node of a tensor or control input name (``"^a"``, ``"a:1"`` -> ``"a"``)."""
    name = tensor_name[1:] if tensor_name.startswith("^") else tensor_name
    return name.partition(":")[0]


#: Ops that pass their input on unchanged (as the graph streamifier reads them).
IDENTITY_OPS = {"Identity", "Snapshot", "StopGradient", "PreventGradient"}


def source_node(nodes: dict, tensor: str,
                through: tuple = ("Identity", "ReadVariableOp", "Enter")) -> str | None:
    """The node that gives ``tensor`` (``nodes``: by name), through the ops
    ``through`` (by default identities, variable reads and a v1 loop's
    ``Enter``: a dynamic_rnn cell's weights), each followed to its first
    input; None if missing."""
    name = node_of(tensor)
    while name in nodes and nodes[name].op in through and nodes[name].input:
        name = node_of(nodes[name].input[0])
    return name if name in nodes else None


def static_bool(nodes: dict, t: str, through_enter: bool = True):
    """The value of a predicate known when the graph is built (a Const, or a
    PlaceholderWithDefault that is not an input: TF1's ``is_training``
    flag), else None. ``through_enter``: also through an Enter (an outer
    flag brought into a v1 loop body)."""
    import tensorflow as tf

    passes = IDENTITY_OPS | {"PlaceholderWithDefault"} | \
        ({"Enter", "RefEnter"} if through_enter else set())
    for _ in range(100):
        n = nodes.get(node_of(t))
        if n is None:
            return None
        if n.op in passes and n.input:
            t = n.input[0]
            continue
        if n.op == "Const" and n.attr["dtype"].type == tf.bool.as_datatype_enum:
            v = tf.make_ndarray(n.attr["value"].tensor)
            return bool(v) if v.size == 1 else None
        return None
    return None


def dtype_name(t: int) -> str:
    import tensorflow as tf

    try:
        return tf.dtypes.as_dtype(t).name
    except Exception:  # an unknown enum value in a malformed graph
        return str(t)


def out_dtype(node) -> int | None:
    """The DataType enum of a node's first output, read from its attributes (best effort)."""
    for a in ("T", "dtype", "out_type", "DstT", "output_type", "Tparams", "Tout"):
        if a in node.attr and node.attr[a].type:
            return node.attr[a].type
    return None


def consumers_of(graph_def) -> dict[str, list[str]]:
    """node name -> names of the nodes reading it (data or control)."""
    out: dict[str, list[str]] = {}
    for n in graph_def.node:
        for i in n.input:
            out.setdefault(node_of(i), []).append(n.name)
    return out
