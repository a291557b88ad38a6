"""The verify stage: the built library against TensorFlow running the original
model (compare.py: Keras references and the comparison; graph.py: graph
references), and the harness that drives a built library from Python
(harness.py; process.py: GPU libraries step in a child process)."""
from .compare import (DEFAULT_TOLERANCE, ErrorTally, VerifyResult, compute_dtype_tolerance,
                      keras_reference, keras_reference_model, keras_sequence_reference,
                      library_stream, verify)
from .graph import GraphReference

__all__ = ["DEFAULT_TOLERANCE", "ErrorTally", "GraphReference", "VerifyResult",
           "compute_dtype_tolerance", "keras_reference", "keras_reference_model",
           "keras_sequence_reference", "library_stream", "verify"]
