"""Import TensorFlow quietly.

TensorFlow's C++ side prints several lines (oneDNN, CUDA probing, absl
warnings) to stderr when it loads; for a command-line tool that is noise
that hides our own progress and errors. We raise the log level and silence
file descriptor 2 only while the import runs.
"""
from __future__ import annotations

import os
import sys

_loaded = False


def quiet_tensorflow():
    """Import and return ``tensorflow`` with its start-up chatter suppressed."""
    global _loaded
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    # TensorFlow's own kernels, not oneDNN's: verify's reference moved with
    # them (a right library of two attention blocks failed at 1.5e-5 on
    # some seeds, 4.8e-7 with oneDNN off)
    os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
    if _loaded or "tensorflow" in sys.modules:
        _loaded = True
        import tensorflow as tf

        return tf
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 2)
            import tensorflow as tf
            import keras  # noqa: F401  (also noisy on first import)
    finally:
        os.dup2(saved, 2)
        os.close(saved)
    tf.get_logger().setLevel("ERROR")
    sys.unraisablehook = _without_function_teardown_noise(sys.unraisablehook)
    _loaded = True
    return tf


#: What TensorFlow's AtomicFunction.__del__ raises when the process tears down
#: a loaded SavedModel's functions after the context dropped them (a refused
#: stateful tf_keras SavedModel printed two tracebacks after its one-line error)
_TEARDOWN_NOISE = "Tried to remove non-existent function"


def _without_function_teardown_noise(hook):
    """``hook`` (sys.unraisablehook) that says nothing of _TEARDOWN_NOISE:
    an exception in a destructor that nothing can act on."""
    def quiet(unraisable):
        if _TEARDOWN_NOISE in str(getattr(unraisable, "exc_value", "")):
            return
        hook(unraisable)
    return quiet
