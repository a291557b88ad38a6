"""The verify stage: the built library against TensorFlow running the original
model (compare.py: the case TensorFlow gives; case.py: a case run on the
library, saved and loaded; tally.py: the comparison; keras_reference.py:
Keras references; graph.py: graph references), and the harness that drives a
built library from Python (harness.py; process.py: GPU libraries step in a
child process)."""
from .case import Case, run_case
from .compare import DEFAULT_TOLERANCE, compute_dtype_tolerance, make_case, verify
from .keras_reference import (keras_reference, keras_reference_model, keras_sequence_reference,
                              library_stream)
from .graph import GraphReference
from .tally import ErrorTally, VerifyResult

__all__ = ["Case", "DEFAULT_TOLERANCE", "ErrorTally", "GraphReference", "VerifyResult",
           "compute_dtype_tolerance", "keras_reference", "keras_reference_model",
           "keras_sequence_reference", "library_stream", "make_case", "run_case", "verify"]
