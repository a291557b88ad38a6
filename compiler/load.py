"""Load stage: find out what a model path holds and load it.

The format is detected from the content (zip for .keras, the HDF5 magic for
.h5, saved_model.pb for SavedModel folders), not only from the suffix. Keras
files become a Keras model; graph formats are handed to ``load_graph``.
"""
from __future__ import annotations

import os
import tempfile
import zipfile
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import TfaotError, first_line

HDF5_MAGIC = b"\x89HDF\r\n\x1a\n"
ZIP_MAGIC = b"PK\x03\x04"


@dataclass
class LoadedModel:
    path: Path
    format: str  # "keras", "h5", "savedmodel", "graphdef"
    keras_model: Any = None  # for "keras" and "h5"


def detect_format(path: Path) -> str:
    """Return one of 'keras', 'h5', 'savedmodel', 'graphdef' or raise."""
    if not path.exists():
        raise TfaotError(f"{path}: no such file or directory")
    if path.is_dir():
        if (path / "saved_model.pb").is_file() or (path / "saved_model.pbtxt").is_file():
            return "savedmodel"
        raise TfaotError(
            f"{path}: a folder, but not a SavedModel (no saved_model.pb inside)")
    try:
        with open(path, "rb") as f:
            head = f.read(8)
    except OSError as e:
        raise TfaotError(f"{path}: cannot read: {e.strerror}") from None
    if not head:
        raise TfaotError(f"{path}: the file is empty")
    if head.startswith(ZIP_MAGIC):
        return "keras"
    if head == HDF5_MAGIC:
        return "h5"
    # Anything else is taken as a GraphDef (binary or text); its loader
    # reports a precise error if it is neither.
    return "graphdef"


def load_model(path: str | os.PathLike) -> LoadedModel:
    path = Path(path)
    fmt = detect_format(path)
    if fmt in ("keras", "h5"):
        return LoadedModel(path, fmt, keras_model=_load_keras(path, fmt))
    return LoadedModel(path, fmt)


def _load_keras(path: Path, fmt: str):
    import keras

    if fmt == "keras" and not zipfile.is_zipfile(path):
        raise TfaotError(f"{path}: not a readable .keras archive (truncated?)")
    try:
        with _with_suffix(path, "." + fmt) as named:
            if fmt == "keras":
                return keras.models.load_model(named, compile=False)
            return _load_h5(named)
    except TfaotError:
        raise
    except Exception as e:  # Keras raises many types; keep the first line
        raise TfaotError(f"{path}: cannot load the Keras model: {first_line(e)}") from None


@contextmanager
def _with_suffix(path: Path, suffix: str):
    """Keras picks its reader by file suffix; give it one that matches the content."""
    if path.suffix == suffix:
        yield path
        return
    with tempfile.TemporaryDirectory(prefix="tfaot-") as tmp:
        link = Path(tmp) / f"model{suffix}"
        link.symlink_to(path.resolve())
        yield link


def _load_h5(path: Path):
    """Load a Keras 3 or Keras 2 (tf_keras) .h5 file.

    Keras 2 wrote a ``time_major`` argument that Keras 3's recurrent layers
    no longer accept; the subclasses below swallow it (tf-import-notes §4).
    """
    import keras

    class LSTM(keras.layers.LSTM):
        def __init__(self, *args, time_major=False, **kwargs):
            super().__init__(*args, **kwargs)

    class GRU(keras.layers.GRU):
        def __init__(self, *args, time_major=False, **kwargs):
            super().__init__(*args, **kwargs)

    class SimpleRNN(keras.layers.SimpleRNN):
        def __init__(self, *args, time_major=False, **kwargs):
            super().__init__(*args, **kwargs)

    custom = {"LSTM": LSTM, "GRU": GRU, "SimpleRNN": SimpleRNN}
    try:
        import h5py

        with h5py.File(path, "r"):
            pass
    except Exception as e:
        raise TfaotError(f"{path}: not a readable HDF5 file (truncated?): {first_line(e)}") from None
    return keras.models.load_model(path, custom_objects=custom, compile=False)
