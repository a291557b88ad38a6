"""tfaot: compile recurrent TensorFlow/Keras models into streaming C libraries."""

__version__ = "0.1.0"
