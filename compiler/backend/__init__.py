"""The backend: iree-compile, then emit and package, in one call (build.py)."""
