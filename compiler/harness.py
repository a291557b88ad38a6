"""The Python harness, by the name users import: ``tfaot.harness.load(DIR)``.

It lives with the verify stage (verify/harness.py); this module keeps its
public names where users find them.
"""
from .verify.harness import INPUT_RANGE_STATUS, InputRangeError, Model, load

__all__ = ["INPUT_RANGE_STATUS", "InputRangeError", "Model", "load"]
