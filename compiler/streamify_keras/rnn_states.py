"""Recurrent Keras layers as the replay steps them: their states' shapes,
names and the structure their cell takes them in (streamify_keras.replay)."""
from __future__ import annotations

import numpy as np

from ..errors import TfaotError


def state_shapes(layer) -> list[tuple[int, ...]]:
    """Shapes (batch 1) of a recurrent layer's states: (1, units) for the usual
    cells, the feature-map shape for ConvLSTM cells."""
    from keras import tree

    size = layer.cell.state_size
    sizes = tree.flatten(size)  # StackedRNNCells nest one list per cell: kept flat here
    if all(isinstance(s, (int, np.integer)) and s > 0 for s in sizes):
        return [(1, int(s)) for s in sizes]
    if all(isinstance(s, (int, np.integer)) for s in sizes) and \
            hasattr(layer.cell, "get_initial_state"):
        try:
            initial = tree.flatten(layer.cell.get_initial_state(batch_size=1))
            return [tuple(int(d) for d in s.shape) for s in initial]
        except Exception:  # noqa: BLE001 - reported below
            pass
    raise TfaotError(f"layer '{layer.name}' ({type(layer).__name__}) has a state size "
                     f"{size!r} whose shapes tfaot cannot tell")


def nested_states(layer) -> bool:
    """Whether the cell takes its states as nested lists (StackedRNNCells)."""
    size = layer.cell.state_size
    return isinstance(size, (list, tuple)) and any(isinstance(s, (list, tuple)) for s in size)


def cell_states(layer, states: list):
    """The flat ``states`` in the structure the cell's call takes."""
    from keras import tree

    return tree.pack_sequence_as(layer.cell.state_size, states) if nested_states(layer) \
        else states


def state_name(layer, index: int) -> str:
    if type(layer.cell).__name__ in ("LSTMCell", "ConvLSTMCell"):
        return ("h", "c")[index]
    if len(state_shapes(layer)) == 1:
        return "h"
    return f"state{index}"


def is_rnn(layer) -> bool:
    import keras

    return isinstance(layer, keras.layers.RNN)


def makes_mask(layer) -> bool:
    return type(layer).__name__ == "Masking" or getattr(layer, "mask_zero", False)
