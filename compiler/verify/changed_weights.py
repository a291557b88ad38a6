"""TensorFlow's model with some of its weights changed, for one more
reference run: verify asks how far TensorFlow's own outputs move when the
weights move by a rounding (int8_spread: an int8 build's rounding;
sensitivity: f32's own)."""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import replace
from typing import Callable


@contextmanager
def with_changed_weights(loaded, change_keras: Callable, change_graph: Callable):
    """``loaded`` as TensorFlow would run it with its weights changed: a
    graph's copy (``change_graph(graph_def)`` returns it), or, for Keras,
    the model's own variables (``change_keras(model, saved)`` assigns them,
    keeping (variable, old value) pairs in ``saved``; put back on exit) and
    a Keras 2 reference loaded changed."""
    if loaded.keras_model is None:
        graph = loaded.graph
        details = dict(graph.details)
        if "source_graph_def" in details:  # (what the reference runs: the graph before a cut)
            details["source_graph_def"] = change_graph(details["source_graph_def"])
        yield replace(loaded, graph=replace(graph, graph_def=change_graph(graph.graph_def),
                                            details=details))
        return
    from ..frontend import keras2

    saved = []
    load_reference = keras2.load_reference

    def load_changed(*args, **kwargs):
        model = load_reference(*args, **kwargs)
        change_keras(model, [])
        return model

    try:
        for model in {id(m): m for m in (loaded.keras_model, loaded.keras_original)
                      if m is not None}.values():
            change_keras(model, saved)
        keras2.load_reference = load_changed
        yield loaded
    finally:
        keras2.load_reference = load_reference
        for variable, value in saved:
            variable.assign(value)
