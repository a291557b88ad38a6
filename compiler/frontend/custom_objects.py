"""--custom-objects: the user's Python files that define a model's own classes.

A Keras file names the classes of its custom layers (and cells, activations,
initializers) but does not hold their code, so Keras cannot rebuild such a
model without it. The user's files run here, before the model loads, and
everything they define is registered with Keras under its own name, as
``custom_objects`` would (a class decorated with
``@keras.saving.register_keras_serializable`` registers itself under its
package's name as the file runs), and so are its constants (numbers,
strings, tuples of them): the globals a Lambda's code reads (a frame length
named in the training script), which Keras gives a Lambda from its custom
objects. tfaot builds a Keras 2 file as a Keras 3
model and verify runs it in tf_keras, so a Keras 2 file's classes are
needed in both forms: tf_keras classes are registered with tf_keras.
"""
from __future__ import annotations

import importlib.util
import inspect
import sys
import traceback
from pathlib import Path

from ..errors import TfaotError, first_line


def register_files(paths: list[str]) -> None:
    """Runs each file and registers what it defines, file by file (a Keras 3
    and a tf_keras class of one name come from two files)."""
    for text in paths:
        _register(_run_file(Path(text)))


def _run_file(path: Path) -> dict[str, object]:
    """The classes, functions and constants ``path`` defines (not those it
    imports)."""
    if path.suffix != ".py" or not path.is_file():
        raise TfaotError(f"--custom-objects: {path}: not a Python file (.py)")
    name = f"tfaot_custom_objects_{len(sys.modules)}_{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # (dataclasses and pickling look a class's module up there)
    folder = str(path.resolve().parent)
    sys.path.insert(0, folder)  # its own helper modules beside it
    try:
        spec.loader.exec_module(module)
    except Exception as e:
        raise TfaotError(f"--custom-objects: {path}{_line_in(e, path)}: {type(e).__name__}: "
                         f"{first_line(e)}") from None
    finally:
        sys.path.remove(folder)
    return {key: value for key, value in vars(module).items()
            if ((inspect.isclass(value) or inspect.isfunction(value))
                and getattr(value, "__module__", None) == name)
            or (not key.startswith("_") and _is_constant(value))}


def _is_constant(value) -> bool:
    """A number, string or bool, or a tuple of them."""
    if isinstance(value, tuple):
        return all(_is_constant(v) for v in value)
    return isinstance(value, (int, float, str, bool))


def _line_in(error: Exception, path: Path) -> str:
    """", line N": where in ``path`` the error was raised (its last frame there)."""
    if isinstance(error, SyntaxError) and error.lineno:
        return f", line {error.lineno}"
    frames = [f for f in traceback.extract_tb(error.__traceback__)
              if Path(f.filename).resolve() == path.resolve()]
    return f", line {frames[-1].lineno}" if frames else ""


def _register(found: dict[str, object]) -> None:
    """Keras 2 classes (tf_keras: verify runs a Keras 2 file in it) with
    tf_keras, the others with Keras 3 (which builds every model); functions
    and constants with both."""
    import keras
    import tf_keras

    for key, value in found.items():
        keras2 = inspect.isclass(value) and _is_tf_keras(value)
        if not keras2:
            keras.saving.get_custom_objects()[key] = value
        if keras2 or not inspect.isclass(value):
            tf_keras.utils.get_custom_objects()[key] = value


def _is_tf_keras(cls) -> bool:
    return any(base.__module__.split(".")[0] == "tf_keras" for base in cls.__mro__)
