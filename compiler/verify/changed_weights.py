"""TensorFlow's model with some of its weights changed, for one more
reference run: verify asks how far TensorFlow's own outputs move when the
weights move by a rounding (int8_spread: an int8 or half-width build's rounding;
sensitivity: f32's own)."""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import replace
from typing import Callable, Iterable

import numpy as np


@contextmanager
def with_changed_weights(loaded, keras_changes: Callable, change_graph: Callable):
    """``loaded`` as TensorFlow would run it with its weights changed: a
    graph's copy (``change_graph(graph_def)`` returns it), or, for Keras,
    the model's own variables, assigned the (variable, new value) pairs
    ``keras_changes(model)`` gives and put back on exit, and a Keras 2
    reference loaded changed."""
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
        _assign(keras_changes(model), [])
        return model

    try:
        for model in {id(m): m for m in (loaded.keras_model, loaded.keras_original)
                      if m is not None}.values():
            _assign(keras_changes(model), saved)
        keras2.load_reference = load_changed
        yield loaded
    finally:
        keras2.load_reference = load_reference
        for variable, value in saved:
            variable.assign(value)


def _assign(changes: Iterable, saved: list) -> None:
    """Assigns each (variable, new value), keeping (variable, old value) in
    ``saved``; a variable already there (a layer the trace of a subclassed
    model shares with it) is left as it is, so that its old value is the
    one put back."""
    done = {id(variable) for variable, _ in saved}
    for variable, value in changes:
        if id(variable) in done:
            continue
        saved.append((variable, np.asarray(variable)))
        done.add(id(variable))
        variable.assign(value)


def moves(case, changed_case) -> list[float]:
    """Per output, the largest change between two cases' TensorFlow values
    (same inputs), over the values finite in both."""
    out = []
    for mine, theirs in zip(case.checks, changed_case.checks):
        largest = 0.0
        for a, b in zip(mine.values, theirs.values):
            a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
            finite = np.isfinite(a) & np.isfinite(b)
            if finite.any():
                largest = max(largest, float(np.max(np.abs(a - b)[finite])))
        out.append(largest)
    return out
