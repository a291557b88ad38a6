"""The load stage: what a model path holds, loaded as a Keras model or a cut graph."""
