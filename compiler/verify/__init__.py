"""The verify stage: the built library against TensorFlow running the original
model (compare.py: the comparison; keras_reference.py: Keras references;
graph.py: graph references), and the harness that drives a built library from Python
(harness.py; process.py: GPU libraries step in a child process)."""
from .compare import (DEFAULT_TOLERANCE, ErrorTally, VerifyResult, compute_dtype_tolerance,
                      verify)
from .keras_reference import (keras_reference, keras_reference_model, keras_sequence_reference,
                              library_stream)
from .graph import GraphReference

__all__ = ["DEFAULT_TOLERANCE", "ErrorTally", "GraphReference", "VerifyResult",
           "compute_dtype_tolerance", "keras_reference", "keras_reference_model",
           "keras_sequence_reference", "library_stream", "verify"]
