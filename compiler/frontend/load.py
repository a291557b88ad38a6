"""Load stage: find out what a model path holds and load it.

The format is detected from the content (zip for .keras, the HDF5 magic for
.h5, saved_model.pb for SavedModel folders), not only from the suffix. Keras
files become a Keras model; graph formats are loaded by ``load_graph`` into a
frozen graph already cut to the chosen inputs and outputs.
"""
from __future__ import annotations

import os
import re
import zipfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ..errors import TfaotError, first_line

HDF5_MAGIC = b"\x89HDF\r\n\x1a\n"
ZIP_MAGIC = b"PK\x03\x04"


@dataclass
class LoadedModel:
    path: Path
    format: str  # "keras", "h5", "savedmodel", "graphdef"
    keras_model: Any = None  # for "keras" and "h5"
    keras_original: Any = None  # the model as written where keras_model is its trace
    keras_subclassed: Any = None  # a subclassed model as loaded, where keras_model is its trace
    graph: Any = None  # for "savedmodel" and "graphdef": a graph_cut.LoadedGraph
    note: str | None = None  # how it was loaded, where the build should say so


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
    suffix = path.suffix.lower()
    if suffix in (".keras", ".h5", ".hdf5"):
        kind = "a zip archive" if suffix == ".keras" else "an HDF5 file"
        raise TfaotError(f"{path}: not a Keras {suffix} file: it is not {kind} (its first "
                         "bytes say so); the file is damaged or of another kind")
    # Anything else is taken as a GraphDef (binary or text); its loader
    # reports a precise error if it is neither.
    return "graphdef"


def load_model(path: str | os.PathLike, graph_options=None, fmt: str | None = None,
               keras_fixed_time: bool = False) -> LoadedModel:
    """Load ``path``: a Keras model, or a frozen graph cut to the chosen inputs/outputs.

    ``graph_options`` (``load_graph.GraphOptions``) applies to graph formats
    (of it, a Keras model takes --inputs shapes: keras_inputs.py);
    ``fmt`` is ``detect_format(path)`` when the caller already has it;
    ``keras_fixed_time``: a subclassed model is traced at the length it was
    built with, not over an open time axis (frontend/subclassed.py).
    """
    path = Path(path)
    fmt = fmt or detect_format(path)
    if fmt in ("keras", "h5"):
        from .keras_inputs import with_input_shapes
        from .subclassed import is_subclassed, layer_graph

        sizes = _keras_input_sizes(graph_options)
        try:
            model = _load_keras(path, fmt)
        except UnknownKerasClass as refusal:
            loaded = _keras2_graph(path, fmt, refusal)
            if sizes:
                raise TfaotError(f"{path}: --inputs cannot size this model's inputs: it is "
                                 "built from the graph tf_keras traces (a Keras 2 class of "
                                 "it is not a Keras 3 class)")
        else:
            if sizes and is_subclassed(model):
                raise TfaotError(f"{path}: --inputs cannot size this model's inputs: a "
                                 "subclassed model's graph is its Python code, with no "
                                 "Input layers to replace")
            model = with_input_shapes(model, sizes, path)
            functional, original = layer_graph(model, path, keras_fixed_time)
            loaded = LoadedModel(path, fmt, keras_model=functional, keras_original=original,
                                 keras_subclassed=model if is_subclassed(model) else None)
    else:
        from .load_graph import GraphOptions, load_graph

        from ..streamify_graph.state_feedback import parse_pairs

        options = _keeping_state_tensors(graph_options or GraphOptions())
        state_inputs = tuple(a for a, _ in parse_pairs(options.state) or ())
        loaded = LoadedModel(path, fmt, graph=load_graph(
            path, options.inputs, options.outputs, options.time_axis, options.signature,
            state_inputs))
    _refuse_empty_inputs(loaded)
    return loaded


def _keras_input_sizes(graph_options) -> list | None:
    """The --inputs a Keras model takes (shapes for its inputs:
    keras_inputs.py); the other graph options do not apply to it (the CLI
    says it ignores them)."""
    from .load_graph import parse_input_specs

    return parse_input_specs(graph_options.inputs) if graph_options is not None else None


def at_built_length(loaded: LoadedModel) -> LoadedModel | None:
    """``loaded``'s subclassed model traced again at the length it was built
    with, where its trace opened its time axis (frontend/subclassed.py);
    None for other models."""
    from .subclassed import layer_graph

    if loaded.keras_subclassed is None or loaded.keras_model.inputs[0].shape[1] is not None:
        return None
    functional, original = layer_graph(loaded.keras_subclassed, loaded.path, fixed_time=True)
    if functional.inputs[0].shape[1] is None:
        return None
    return replace(loaded, keras_model=functional, keras_original=original)


def _keeping_state_tensors(options):
    """``options`` whose --inputs/--outputs cut keeps the --state pairs'
    tensors: a user names the step's own inputs and outputs (--outputs
    logits --state previous_c=new_c), and the state's were cut away before
    they could be paired ('new_c' is not an output)."""
    from dataclasses import replace

    from ..streamify_graph.state_feedback import parse_pairs

    pairs = parse_pairs(options.state)
    if not pairs:
        return options

    def with_names(spec: str | None, names: list[str]) -> str | None:
        if not spec:
            return spec
        listed = {part.split(":")[0] for part in spec.split(",")}
        return ",".join([spec, *(n for n in dict.fromkeys(names) if n not in listed)])

    return replace(options, inputs=with_names(options.inputs, [a for a, _ in pairs]),
                   outputs=with_names(options.outputs, [b for _, b in pairs]))


def input_shapes(loaded: LoadedModel) -> list[tuple[str, tuple | None]]:
    """(name, shape) of each model input; None for an unknown dimension or rank."""
    if loaded.keras_model is not None:
        return [(getattr(t, "name", f"input {i}"), tuple(t.shape))
                for i, t in enumerate(loaded.keras_model.inputs)]
    return [(i.name, i.shape) for i in loaded.graph.inputs]


def _refuse_empty_inputs(loaded: LoadedModel) -> None:
    """A dimension of length 0 holds no data; found here, not by the C
    compiler's struct layout after the slow stages."""
    for name, shape in input_shapes(loaded):
        if shape is not None and 0 in shape:
            text = "x".join("?" if d is None else str(d) for d in shape)
            raise TfaotError(f"{loaded.path}: input '{name}' has shape {text}: a dimension "
                             "of length 0 holds no data; give the model (or --inputs) a "
                             "non-empty shape")


def _load_keras(path: Path, fmt: str):
    import keras

    if fmt == "keras" and not zipfile.is_zipfile(path):
        raise TfaotError(f"{path}: not a readable .keras archive (truncated?)")
    from . import keras2

    try:
        with keras2.with_suffix(path, "." + fmt) as named:
            if fmt == "keras":
                if keras2.is_keras2_file(named, fmt):  # saved by tf_keras
                    return keras2.load_archive_as_keras3(named)
                keras2.register()  # a .keras re-saved from a Keras 2 file names them
                # (a custom weight constraint is a class the archive does not hold)
                with keras2.archive_rewritten(named, keras2.without_training_only) as readable:
                    return _rebuilt(path, keras.models.load_model(readable, compile=False))
            return _load_h5(named)
    except TfaotError:
        raise
    except Exception as e:  # Keras raises many types; keep the first line
        if "`Lambda` layer" in str(e) and "safe_mode" in str(e):
            raise TfaotError(
                f"{path}: the model has a Lambda layer, whose Python code would run as it "
                "loads, and Keras refuses that by default; if you trust the file, rerun "
                "with --allow-lambda (from Python: keras.config."
                "enable_unsafe_deserialization())") from None
        unknown = _UNKNOWN_CLASS.search(str(e))
        if unknown:  # Keras names it deep in its message, after a generic first line
            kind, name = (unknown[1], unknown[2]) if unknown[1] else (unknown[3], unknown[4])
            raise UnknownKerasClass(
                f"{path}: cannot load the Keras model: it uses the {kind} '{name}', "
                "which Keras does not know: a custom class, whose code a saved model does "
                "not hold; give the Python file that defines it with --custom-objects FILE.py "
                "(its code runs: only files you trust)", name) from None
        raise TfaotError(f"{path}: cannot load the Keras model: {_cause(e)}") from None


class UnknownKerasClass(TfaotError):
    """Keras 3 cannot load a file: it lacks the class ``name``."""

    def __init__(self, message: str, name: str):
        super().__init__(message)
        self.name = name


def _keras2_graph(path: Path, fmt: str, refusal: UnknownKerasClass) -> LoadedModel:
    """A Keras 2 file that Keras 3 cannot load for lack of a class, as the
    graph tf_keras traces (frontend/keras_graph.py); else ``refusal``, said
    for a Keras 2 file (its class is needed as a Keras 3 class too) or a
    quantization-aware trained model (tfmot is needed)."""
    from . import keras2
    from .keras_graph import TFMOT_CLASSES, keras2_as_graph

    with keras2.with_suffix(path, "." + fmt) as named:
        if not keras2.is_keras2_file(named, fmt):
            raise refusal
    graph = keras2_as_graph(path, fmt, refusal.name)
    if graph is not None:
        return LoadedModel(path, fmt, graph=graph, note=(
            f"built from the graph tf_keras traces: the model's '{refusal.name}' is a "
            "Keras 2 (tf_keras) class"))
    if refusal.name in TFMOT_CLASSES:
        raise TfaotError(f"{path}: the model was trained quantization-aware with "
                         f"tensorflow_model_optimization ('{refusal.name}' is its class); "
                         "install that package (pip install tensorflow-model-optimization) "
                         "and tfaot loads it with tf_keras, or give a SavedModel of it") from None
    raise TfaotError(f"{refusal} (a Keras 2 file's class is needed as a Keras 3 class too, "
                     "unless tf_keras can load the file with it)") from None


def _rebuilt(path: Path, model):
    """``model``, where Keras rebuilt its layers as it loaded it. A Sequential
    model whose layer fails while Keras rebuilds it (a Lambda whose code
    names a module its file does not import) loads without inputs, the
    error swallowed: it is raised again here by calling the model."""
    import keras

    if not isinstance(model, keras.Sequential):  # (subclassed models: frontend/subclassed.py)
        return model
    try:
        model.inputs  # noqa: B018 - the check itself
        return model
    except (AttributeError, ValueError):
        pass
    layers = model.get_config().get("layers") or [{}]
    shape = layers[0].get("config", {}).get("batch_shape")
    cause = "its layers were never built"
    if shape:
        import numpy as np

        try:
            model(np.zeros([1 if d is None else d for d in shape], np.float32))
        except Exception as e:  # noqa: BLE001 - the layer's own error, reported
            cause = f"{type(e).__name__}: {first_line(e)}"
    raise TfaotError(f"{path}: Keras loaded the model but could not rebuild it ({cause}); "
                     "a Lambda layer's saved code runs again as Keras loads it and may not "
                     "find the modules it names: import them inside its function, or make "
                     "it a custom layer (--custom-objects)")


def _cause(error: Exception) -> str:
    """What Keras says went wrong: after its generic first line ("... could not
    be deserialized properly"), the exception a layer's own code raised."""
    inner = re.findall(r"Exception encountered: (.+)", str(error))
    return inner[-1].strip() if inner else first_line(error)


#: Keras' words for a class or function that no registered code defines
_UNKNOWN_CLASS = re.compile(r"Could not locate (class|function) '([^']+)'"
                            r"|Unknown (layer|activation function|initializer): '([^']+)'")


def _load_h5(path: Path):
    """Load a Keras 3 or Keras 2 (tf_keras) .h5 file.

    Keras 2 wrote a ``time_major`` argument that Keras 3's recurrent layers
    no longer accept; the subclasses below swallow it (tf-import-notes §4).
    A Keras 2 file (``keras_version`` attribute < 3) also gets its Keras 2
    meanings mapped to Keras 3 objects (``keras2``: hard_sigmoid, ...).
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
    from . import keras2

    if keras2.is_keras2_h5(path):
        return keras2.load_h5_as_keras3(path)  # time_major handled there
    # (a custom weight constraint is a class the file does not hold)
    with keras2.h5_rewritten(path, keras2.without_training_only) as readable:
        return keras.models.load_model(readable, custom_objects=custom, compile=False,
                                       safe_mode=keras2.keras_safe_mode())
