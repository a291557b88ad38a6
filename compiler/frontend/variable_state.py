"""A SavedModel step that keeps its state in variables, with the state as I/O.

A stateful Keras RNN (``LSTM(stateful=True)``) saved with
``tf.saved_model.save`` reads its state from a variable at every call and
assigns the new state back: DTLN's published real-time SavedModel is such a
one-frame step, and so are "internal state" keyword-spotting exports.
TensorFlow's freezing makes every variable a constant and then refuses the
graph, whose ``AssignVariableOp`` now writes to a constant. Such a
signature is rewritten here into the form state_feedback.py hoists: each
variable the call assigns becomes an input (``previous_<k>_state``, which
every read of it reads) and an output (``new_<k>_state``, the value
assigned), the pair's names saying so (k: ``v<index>_<variable name>``,
``v0_lstm_Variable``), its initial value the variable's saved one; every
other variable stays the constant freezing made it.

It takes the graph freezing made before it failed (TensorFlow's own
conversion of variables to constants, functional loops kept). A read that
runs after an assign of its variable (it would see the new value), or an
assign inside a function body, leaves the graph refused, naming the node.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

from .graph_cut import data_needed
from .graphdef import IDENTITY_OPS, node_of

_SCOPE = "tfaot_state"
#: writes of a variable other than a plain assign: the rewrite does not apply
OTHER_WRITES = {"AssignAddVariableOp", "AssignSubVariableOp", "ResourceScatterUpdate",
                "ResourceScatterAdd", "ResourceStridedSliceAssign"}


@dataclass
class StateIO:
    """The rewritten call: its graph, the state inputs and outputs added
    (node names, pairwise), and each state input's initial value."""

    graph_def: object
    inputs: list = field(default_factory=list)
    outputs: list = field(default_factory=list)
    initial: dict = field(default_factory=dict)

    def output_keys(self) -> list[str]:
        """The state outputs' names less the scope ("new_v0_lstm_Variable_state"),
        as a signature's output keys name them."""
        return [name.rsplit("/", 1)[-1] for name in self.outputs]


def variables_as_state_io(concrete) -> StateIO | None:
    """``concrete`` (a traced signature call) frozen, with its assigned
    variables as state inputs and outputs (module docstring), or None where
    that does not apply."""
    from tensorflow.python.framework import convert_to_constants as freezing

    if _reads_after_assign(concrete.graph.as_graph_def()):
        return None
    try:
        data = freezing._FunctionConverterDataInEager(
            func=concrete, lower_control_flow=False, aggressive_inlining=False)
        graph_def, _ = freezing._replace_variables_by_constants(converter_data=data)
    except Exception:  # noqa: BLE001 - freezing itself failed: the caller's error
        return None
    if any(n.op == "AssignVariableOp" for f in graph_def.library.function
           for n in f.node_def):
        return None  # (an assign inside a function body)
    nodes = {n.name: n for n in graph_def.node}
    assigns = [n for n in graph_def.node if n.op == "AssignVariableOp"]
    frozen = {a.name: _frozen_variable(nodes, a.input[0]) for a in assigns}
    if not assigns or None in frozen.values() or \
            any(n.op in OTHER_WRITES for n in graph_def.node):
        return None
    return _used_only(_rewritten(graph_def, assigns, frozen, _variable_labels(concrete)),
                      [t.name for t in concrete.outputs])


def _variable_labels(concrete) -> dict[str, str]:
    """The name of each variable ``concrete`` captures, by the name of its
    captured placeholder (the Const freezing makes of it), as a name part
    (``lstm/Variable:0`` -> ``lstm_Variable``): the state pairs say which
    layer's state they are (the header's NAME_STATEi_NAME)."""
    placeholder = {id(handle): inner.op.name for inner, handle in
                   zip(concrete.graph.internal_captures, concrete.captured_inputs)}
    return {placeholder[id(v.handle)]: re.sub(r"\W+", "_", v.name.partition(":")[0]).strip("_")
            for v in concrete.variables if id(v.handle) in placeholder}


def _frozen_variable(nodes: dict, tensor: str) -> str | None:
    """The Const that freezing made of the variable an assign writes
    (through identities), else None."""
    name = node_of(tensor)
    for _ in range(64):
        node = nodes.get(name)
        if node is None:
            return None
        if node.op == "Const":
            return name
        if node.op not in IDENTITY_OPS or not node.input:
            return None
        name = node_of(node.input[0])
    return None


def _reads_after_assign(graph_def) -> bool:
    """Whether a read of a variable waits for an assign of it (a control
    input, as tf.function orders a read after a write): it would see the
    new value, not the state before. Looked for in the traced call and its
    functions, before freezing, which drops those control inputs."""
    for body in [graph_def.node, *(f.node_def for f in graph_def.library.function)]:
        nodes = {n.name: n for n in body}
        for n in body:
            if n.op != "ReadVariableOp" or not n.input:
                continue
            writes = [nodes.get(node_of(i)) for i in n.input if i.startswith("^")]
            if any(w is not None and w.op == "AssignVariableOp" and w.input[0] == n.input[0]
                   for w in writes):
                return True
    return False


def _rewritten(graph_def, assigns: list, frozen: dict, labels: dict) -> StateIO:
    import tensorflow as tf

    keys = {const: f"v{i}" + (f"_{labels[const]}" if labels.get(const) else "")
            for i, const in enumerate(sorted(set(frozen.values())))}
    result = StateIO(None)
    out = tf.compat.v1.GraphDef()
    out.CopyFrom(graph_def)
    del out.node[:]
    gone = {a.name for a in assigns}
    for n in graph_def.node:
        if n.name in gone:
            continue
        node = out.node.add()
        node.CopyFrom(n)
        node.input[:] = [i for i in n.input if not (i.startswith("^") and node_of(i) in gone)]
        if n.name in keys:  # the frozen variable: now its state input
            value = tf.make_ndarray(n.attr["value"].tensor)
            holder = _placeholder(out, f"{_SCOPE}/previous_{keys[n.name]}_state", value)
            node.op = "Identity"
            node.input[:] = [holder]
            node.attr.clear()
            node.attr["T"].type = tf.as_dtype(value.dtype).as_datatype_enum
            result.inputs.append(holder)
            result.initial[holder] = value
    for a in assigns:
        value = result.initial[f"{_SCOPE}/previous_{keys[frozen[a.name]]}_state"]
        result.outputs.append(_reshaped(out, f"{_SCOPE}/new_{keys[frozen[a.name]]}_state",
                                        a.input[1], value.shape, a.attr["dtype"].type))
    result.graph_def = out
    return result


def _used_only(state: StateIO, outputs: list[str]) -> StateIO:
    """``state`` without the variables no output of the call reads (a Keras 3
    dropout's seed, which its RNN advances at inference too: no state of the
    model), its graph cut to what the outputs and the states left read."""
    needed = data_needed(state.graph_def, outputs)
    used = [i for i, name in enumerate(state.inputs) if name in needed]
    state.inputs = [state.inputs[i] for i in used]
    state.outputs = [state.outputs[i] for i in used]
    state.initial = {name: state.initial[name] for name in state.inputs}
    state.graph_def = _data_only(state.graph_def, outputs + state.outputs)
    return state


def _data_only(graph_def, outputs: list[str]):
    """``graph_def`` cut to what ``outputs`` read through data inputs, with
    control inputs on what is gone dropped: the assigns ordered the call's
    ops, and tf_keras' RNN runs its cell on the first frame outside its loop
    for the output's shape alone (a sink that read the state input)."""
    import tensorflow as tf

    kept = data_needed(graph_def, outputs)
    out = tf.compat.v1.GraphDef()
    out.CopyFrom(graph_def)
    del out.node[:]
    for n in graph_def.node:
        if n.name in kept:
            node = out.node.add()
            node.CopyFrom(n)
            node.input[:] = [i for i in n.input if node_of(i) in kept]
    return out


def _placeholder(graph_def, name: str, like: np.ndarray) -> str:
    """A Placeholder ``name`` of ``like``'s dtype and shape; its name."""
    import tensorflow as tf

    node = graph_def.node.add()
    node.name, node.op = name, "Placeholder"
    node.attr["dtype"].type = tf.as_dtype(like.dtype).as_datatype_enum
    node.attr["shape"].shape.CopyFrom(tf.TensorShape(like.shape).as_proto())
    return name


def _reshaped(graph_def, name: str, tensor: str, shape, dtype: int) -> str:
    """``tensor`` reshaped to ``shape`` as node ``name`` (the assigned value
    may come out of a call whose output shapes TensorFlow does not know)."""
    import tensorflow as tf

    dims = graph_def.node.add()
    dims.name, dims.op = f"{name}/shape", "Const"
    dims.attr["dtype"].type = tf.int32.as_datatype_enum
    dims.attr["value"].tensor.CopyFrom(tf.make_tensor_proto(np.array(shape, np.int32)))
    node = graph_def.node.add()
    node.name, node.op = name, "Reshape"
    node.input.extend([tensor, dims.name])
    node.attr["T"].type = dtype
    node.attr["Tshape"].type = tf.int32.as_datatype_enum
    return name
