"""A real FFT whose length is not a power of two, as two matrix products.

IREE lowers ``stablehlo.fft`` of power-of-two lengths only (a 40-sample
tf.signal.stft failed inside iree-compile), but such lengths are common
where the transform is a small fixed linear map: tf.signal.dct, which
mfccs_from_log_mel_spectrograms calls, takes an RFFT of twice the number
of mel bins (80 for the usual 40). An RFFT of length n is the product of
its real input with the n x (n/2 + 1) DFT matrix, whose real and
imaginary parts are constants:

    re[j] = sum_k x[k] cos(2 pi j k / n),  im[j] = -sum_k x[k] sin(2 pi j k / n)

written here as two ``stablehlo.dot_general`` over the last axis and a
``stablehlo.complex``, for lengths up to MAX_LENGTH (two matrices of up to
4.2 MB); longer ones are refused at load time (frontend/load_graph.py).
The matrices are computed in float64 and rounded once.
"""
from __future__ import annotations

import re

import numpy as np

#: the longest RFFT written out (its two f32 matrices: 2 x 1024 x 513 x 4 bytes)
MAX_LENGTH = 1024

_RFFT = re.compile(
    r"^(?P<indent>[ \t]*)(?P<result>%[\w.$#-]+) = stablehlo\.fft (?P<operand>%[\w.$#-]+), "
    r"type = RFFT, length = \[(?P<n>\d+)\] : \(tensor<(?P<shape>(?:\d+x)*)(?P=n)xf32>\) -> "
    r"tensor<(?P=shape)(?P<bins>\d+)xcomplex<f32>>[ \t]*$", re.M)


def writes_out(length: int) -> bool:
    """Whether an RFFT of ``length`` is written out here (IREE takes the
    powers of two itself)."""
    return 1 <= length <= MAX_LENGTH and length & (length - 1) != 0


def expand_rfft(mlir_text: str) -> tuple[str, int]:
    """``mlir_text`` with each 1-D f32 RFFT of a length ``writes_out``
    takes as matrix products; returns the text and how many were."""
    count = 0

    def replace(match: re.Match) -> str:
        nonlocal count
        n, bins = int(match["n"]), int(match["bins"])
        if not writes_out(n) or bins != n // 2 + 1:
            return match[0]
        count += 1
        return "\n".join(match["indent"] + line for line in _lines(match, n, bins, count))

    return _RFFT.sub(replace, mlir_text), count


def _lines(match: re.Match, n: int, bins: int, index: int) -> list[str]:
    shape = match["shape"]
    rank = shape.count("x") + 1
    angle = 2 * np.pi * np.outer(np.arange(n), np.arange(bins)) / n
    prefix = f"%tfaot_dft{index}_"
    lines, parts = [], []
    for part, matrix in (("re", np.cos(angle)), ("im", -np.sin(angle))):
        data = matrix.astype("<f4").tobytes().hex().upper()
        lines.append(f'{prefix}{part}_m = stablehlo.constant dense<"0x{data}"> : '
                     f"tensor<{n}x{bins}xf32>")
        lines.append(f"{prefix}{part} = stablehlo.dot_general {match['operand']}, "
                     f"{prefix}{part}_m, contracting_dims = [{rank - 1}] x [0] : "
                     f"(tensor<{shape}{n}xf32>, tensor<{n}x{bins}xf32>) -> "
                     f"tensor<{shape}{bins}xf32>")
        parts.append(f"{prefix}{part}")
    lines.append(f"{match['result']} = stablehlo.complex {parts[0]}, {parts[1]} : "
                 f"tensor<{shape}{bins}xcomplex<f32>>")
    return lines
