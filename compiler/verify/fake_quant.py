"""Outputs a graph quantizes with FakeQuant ops: one grid step of tolerance.

A model trained quantization-aware (tensorflow_model_optimization's
``quantize_model``, exported as a SavedModel or frozen graph) rounds its
layers' outputs to an int8 grid with ``FakeQuantWithMinMaxVars`` ops, its
last layer's too. The library computes the same float values as
TensorFlow up to rounding, but sums in another order (a streamed pooling
adds the frames as they come); where a value lies within that rounding of
a grid boundary, one side snaps it down and the other up. So an output
right after a FakeQuant differs by exactly one grid step now and then:
a DS-CNN-shaped QAT model streamed 2 frames a step differed in 7 of
2400 values, each by 0.047, its output's step, and 0 elsewhere, where
the float bound is 1e-5.

verify allows such an output one step of its grid beside the float bound
and says so. The step is that of the FakeQuant that gives the output,
found through ops that only move values (identities, reshapes): (max -
min) / (levels - 1), the largest of a per-channel op's. Outputs computed
further from a FakeQuant (a softmax after it) keep the float bound.
"""
from __future__ import annotations

import numpy as np

from ..frontend.graphdef import source_node

FAKE_QUANT_OPS = ("FakeQuantWithMinMaxArgs", "FakeQuantWithMinMaxVars",
                  "FakeQuantWithMinMaxVarsPerChannel")
#: ops whose outputs are some of their first input's values, unchanged
_MOVES_VALUES = ("Identity", "Snapshot", "Reshape", "Squeeze", "ExpandDims", "Transpose",
                 "StridedSlice", "Slice")


def output_steps(loaded, count: int | None = None) -> list[float]:
    """Per output of a graph model (``loaded``: load.LoadedModel; ``count``:
    how many outputs are checked, by default the graph's), the grid step of
    the FakeQuant that gives it, else 0; zeros for Keras models and where
    the outputs checked are not the graph's."""
    graph = loaded.graph
    if graph is not None and loaded.keras_model is None and count is None:
        count = len(graph.outputs)
    if loaded.keras_model is not None or graph is None or len(graph.outputs) != count:
        return [0.0] * (count or 0)
    graph_def = graph.details.get("source_graph_def", graph.graph_def)
    nodes = {n.name: n for n in graph_def.node}
    return [_grid_step(nodes, tensor) for tensor in graph.outputs]


def note(step: float) -> str:
    """What verify says of an output it allows one grid step."""
    return (f"the output is rounded to steps of {step:.3g} by a FakeQuant op "
            "(quantization-aware training); the library's float rounding can put a value "
            "on the next step, so one step is allowed")


def _grid_step(nodes: dict, tensor: str) -> float:
    node = nodes.get(source_node(nodes, tensor, through=_MOVES_VALUES))
    if node is None or node.op not in FAKE_QUANT_OPS:
        return 0.0
    levels = 2 ** node.attr["num_bits"].i - (2 if node.attr["narrow_range"].b else 1)
    if node.op == "FakeQuantWithMinMaxArgs":
        low, high = node.attr["min"].f, node.attr["max"].f
    else:
        low, high = (_constant(nodes, t) for t in node.input[1:3])
        if low is None or high is None:
            return 0.0
    return float(np.max(np.asarray(high, np.float64) - np.asarray(low, np.float64))) / levels


def _constant(nodes: dict, tensor: str):
    """The value of a Const (through identities), else None."""
    import tensorflow as tf

    name = source_node(nodes, tensor)
    if name is None or nodes[name].op != "Const":
        return None
    return tf.make_ndarray(nodes[name].attr["value"].tensor)
