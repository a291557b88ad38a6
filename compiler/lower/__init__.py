"""The import stage and the MLIR rewrites a Target asks for (lower.passes)."""
