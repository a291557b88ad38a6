"""Real FFTs written out as matrix products, where IREE cannot compile them.

IREE lowers ``stablehlo.fft`` of power-of-two lengths only (a 40-sample
tf.signal.stft failed inside iree-compile), and on the GPU targets not even
those: its butterflies read a bit-reversal table of i64 that the
inline-dynamic host program loses (docs/notes/iree-notes.md 1.4) and that
SPIR-V cannot hold inlined. Other lengths are common where the transform is
a small fixed linear map: tf.signal.dct, which
mfccs_from_log_mel_spectrograms calls, takes an RFFT of twice the number of
mel bins (80 for the usual 40), and Whisper-style front ends take frames of
400 samples.

A length n = n1 * n2 is split once (Cooley-Tukey): with the input index
k = n2 a + b and the output index j = c + n1 d,

    X[c + n1 d] = sum_b W2^(b d) * ( W^(b c) * sum_a x[n2 a + b] W1^(a c) )

where W, W1 and W2 are the n-th, n1-th and n2-th roots of unity: a product
with the n1 x n1 DFT matrix over a, a twiddle factor per (b, c), a product
with the n2 x n2 DFT matrix over b, and a transpose. That is about
n (n1 + n2) multiply-adds instead of n^2, and matrices of n1^2 + n2^2
instead of n^2 entries. A length without such a split (a prime) is one
product with its DFT matrix. Complex values are carried as a real and an
imaginary f32 tensor; every matrix is computed in float64 and rounded once.

An inverse real FFT (IRFFT, tf.signal.inverse_stft) of length n first
completes the n/2 + 1 bins to the whole Hermitian spectrum (the rest are
the mirrored conjugates), transforms it with the conjugate roots and keeps
the real part; the imaginary parts of the DC and Nyquist bins drop out, as
in TensorFlow.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

import numpy as np

#: the most constant bytes one written-out FFT may take (what one product
#: with the DFT matrix of 1024 takes: 2 x 1024 x 513 x 4)
MAX_CONSTANT_BYTES = 2 * 1024 * 513 * 4

_NAME = r"%[\w.$#-]+"
_FFT = re.compile(
    rf"^(?P<indent>[ \t]*)(?P<result>{_NAME}) = stablehlo\.fft (?P<operand>{_NAME}), "
    r"type = (?P<kind>RFFT|IRFFT), length = \[(?P<n>\d+)\] : "
    r"\(tensor<(?P<shape>(?:\d+x)*)(?P<in_last>\d+)x(?P<in_type>f32|complex<f32>)>\) -> "
    r"tensor<(?P=shape)(?P<out_last>\d+)x(?P<out_type>f32|complex<f32>)>[ \t]*$", re.M)


def is_power_of_two(n: int) -> bool:
    return n >= 1 and n & (n - 1) == 0


def split(n: int) -> tuple[int, int] | None:
    """The factors (n1, n2) of ``n`` nearest its square root, n1 <= n2; None
    for a prime (or n < 4)."""
    for n1 in range(math.isqrt(n), 1, -1):
        if n % n1 == 0:
            return n1, n // n1
    return None


def constant_bytes(n: int) -> int:
    """The bytes of the matrices that write out a real FFT of length ``n``."""
    factors = split(n)
    if factors is None:
        return 2 * n * (n // 2 + 1) * 4
    n1, n2 = factors
    return 2 * (n1 * n1 + n2 * n2 + n) * 4


def writes_out(length: int, *, all_lengths: bool = False) -> bool:
    """Whether a 1-D real FFT of ``length`` is written out here: every
    length IREE does not take (a power of two, except with ``all_lengths``,
    the GPU targets) whose matrices fit in MAX_CONSTANT_BYTES."""
    if length < 2 or (is_power_of_two(length) and not all_lengths):
        return False
    return constant_bytes(length) <= MAX_CONSTANT_BYTES


def compiles(length: int) -> bool:
    """Whether a 1-D real FFT of ``length`` builds for every target."""
    return is_power_of_two(length) or writes_out(length)


def expand_ffts(mlir_text: str, *, all_lengths: bool = False) -> tuple[str, int]:
    """``mlir_text`` with each 1-D f32 RFFT and IRFFT that ``writes_out``
    takes as matrix products; returns the text and how many were."""
    count = 0

    def replace(match: re.Match) -> str:
        nonlocal count
        n = int(match["n"])
        real_in = match["kind"] == "RFFT"
        bins, samples = (match["out_last"], match["in_last"]) if real_in else \
            (match["in_last"], match["out_last"])
        if (not writes_out(n, all_lengths=all_lengths) or int(bins) != n // 2 + 1
                or int(samples) != n or (match["in_type"] == "f32") != real_in):
            return match[0]
        count += 1
        batch = [int(d) for d in match["shape"].split("x") if d]
        ops = _Ops(f"%tfaot_fft{count}_", batch)
        if real_in:
            _rfft(ops, match["operand"], match["result"], n)
        else:
            _irfft(ops, match["operand"], match["result"], n)
        return "\n".join(match["indent"] + line for line in ops.lines)

    return _FFT.sub(replace, mlir_text), count


def _roots(rows: int, cols: int, n: int, sign: int, scale: float = 1.0):
    """exp(sign * 2 pi i r c / n) * scale for r < rows, c < cols: real and imaginary parts."""
    angle = 2 * np.pi * (np.outer(np.arange(rows), np.arange(cols)) % n) / n
    return np.cos(angle) * scale, sign * np.sin(angle) * scale


def _rfft(ops: "_Ops", x: str, result: str, n: int) -> None:
    bins = n // 2 + 1
    factors = split(n)
    if factors is None:
        ops.complex(ops.real_by_complex(x, [n], _roots(n, bins, n, -1)), [bins], result)
        return
    n2, n1 = factors  # the bigger factor first: its product is real by complex
    # Only the columns d of the last product that reach a bin j = c + n1 d <= n/2.
    d_cols = -(-bins // n1)
    rows = ops.reshape(x, [n], [n1, n2])
    partial = ops.real_by_complex(rows, [n1, n2], _roots(n1, n1, n1, -1))        # [.., b, c]
    twiddled = ops.twiddle(partial, [n2, n1], _roots(n2, n1, n, -1))
    spectrum = ops.complex_by_complex(twiddled, [n2, n1], _roots(n2, d_cols, n2, -1))  # [.., c, d]
    spectrum = [ops.flatten_transposed(part, [n1, d_cols]) for part in spectrum]
    spectrum = [ops.slice_last(part, n1 * d_cols, bins) for part in spectrum]
    ops.complex(spectrum, [bins], result)


def _irfft(ops: "_Ops", x: str, result: str, n: int) -> None:
    bins = n // 2 + 1
    halves = (ops.part("real", x, bins), ops.part("imag", x, bins))
    factors = split(n)
    if factors is None:
        # Each bin but DC and Nyquist stands for itself and its mirror: twice.
        weight = np.full((bins, 1), 2.0)
        weight[0] = 1.0
        if n % 2 == 0:
            weight[-1] = 1.0
        cos_m, sin_m = _roots(bins, n, n, 1)
        real = ops.add(ops.matmul(halves[0], [bins], ops.const(cos_m * weight / n)),
                       ops.matmul(halves[1], [bins], ops.const(-sin_m * weight / n)), [n])
        ops.rename(real, result)
        return
    n1, n2 = factors  # the smaller factor first: its product is complex by complex
    tail = n - bins   # bins n/2+1 .. n-1 mirror bins n-bins .. 1
    real = ops.concat(halves[0], ops.reverse(ops.slice_last(halves[0], bins, tail, start=1), tail),
                      bins, tail)
    imag = ops.concat(halves[1], ops.negate(ops.reverse(
        ops.slice_last(halves[1], bins, tail, start=1), tail), [tail]), bins, tail)
    rows = [ops.reshape(part, [n], [n1, n2]) for part in (real, imag)]
    partial = ops.complex_by_complex(rows, [n1, n2], _roots(n1, n1, n1, 1))      # [.., b, c]
    twiddled = ops.twiddle(partial, [n2, n1], _roots(n2, n1, n, 1))
    cos_m, sin_m = _roots(n2, n2, n2, 1, 1.0 / n)
    signal = ops.add(ops.matmul(twiddled[0], [n2, n1], ops.const(cos_m)),
                     ops.matmul(twiddled[1], [n2, n1], ops.const(-sin_m)), [n1, n2])  # [.., c, d]
    ops.rename(ops.flatten_transposed(signal, [n1, n2]), result)


@dataclass
class _Ops:
    """StableHLO lines over tensors of the shape ``batch`` + some last axes."""
    prefix: str
    batch: list[int]
    lines: list[str] = field(default_factory=list)
    _count: int = 0

    def _new(self) -> str:
        self._count += 1
        return f"{self.prefix}{self._count}"

    def _type(self, last: list[int], element: str = "f32") -> str:
        return "tensor<" + "".join(f"{d}x" for d in self.batch + last) + element + ">"

    def _emit(self, text: str) -> str:
        name = self._new()
        self.lines.append(f"{name} = {text}")
        return name

    def const(self, matrix) -> tuple[str, list[int]]:
        data = np.asarray(matrix, "<f4")
        shape = "x".join(str(d) for d in data.shape)
        return self._emit(f'stablehlo.constant dense<"0x{data.tobytes().hex().upper()}"> : '
                          f"tensor<{shape}xf32>"), list(data.shape)

    def matmul(self, x: str, x_last: list[int], matrix: tuple[str, list[int]]) -> str:
        """``x`` times ``matrix`` over the axis second from the end of
        ``x_last`` (its last if one): [.., k, m] x [k, p] -> [.., m, p]."""
        name, (rows, cols) = matrix
        axis = len(self.batch) + len(x_last) - (2 if len(x_last) == 2 else 1)
        out_last = x_last[1:] + [cols] if len(x_last) == 2 else [cols]
        return self._emit(
            f"stablehlo.dot_general {x}, {name}, contracting_dims = [{axis}] x [0] : "
            f"({self._type(x_last)}, tensor<{rows}x{cols}xf32>) -> {self._type(out_last)}")

    def _binary(self, op: str, a: str, b: str, last: list[int]) -> str:
        return self._emit(f"stablehlo.{op} {a}, {b} : {self._type(last)}")

    def add(self, a: str, b: str, last: list[int]) -> str:
        return self._binary("add", a, b, last)

    def negate(self, a: str, last: list[int]) -> str:
        return self._emit(f"stablehlo.negate {a} : {self._type(last)}")

    def real_by_complex(self, x: str, x_last: list[int], matrix) -> tuple[str, str]:
        return tuple(self.matmul(x, x_last, self.const(part)) for part in matrix)

    def complex_by_complex(self, x: tuple[str, str], x_last: list[int], matrix) -> tuple[str, str]:
        m_re, m_im = self.const(matrix[0]), self.const(matrix[1])
        out_last = [x_last[1], m_re[1][1]]
        rr, ii = self.matmul(x[0], x_last, m_re), self.matmul(x[1], x_last, m_im)
        ri, ir = self.matmul(x[0], x_last, m_im), self.matmul(x[1], x_last, m_re)
        return (self._binary("subtract", rr, ii, out_last), self.add(ri, ir, out_last))

    def twiddle(self, x: tuple[str, str], last: list[int], factors) -> tuple[str, str]:
        rank = len(self.batch)
        dims = f"dims = [{rank}, {rank + 1}]"
        t_re, t_im = (self._emit(f"stablehlo.broadcast_in_dim {self.const(part)[0]}, {dims} : "
                                 f"(tensor<{last[0]}x{last[1]}xf32>) -> {self._type(last)}")
                      for part in factors)
        rr, ii = self._binary("multiply", x[0], t_re, last), self._binary("multiply", x[1], t_im, last)
        ri, ir = self._binary("multiply", x[0], t_im, last), self._binary("multiply", x[1], t_re, last)
        return (self._binary("subtract", rr, ii, last), self.add(ri, ir, last))

    def reshape(self, x: str, last: list[int], new_last: list[int]) -> str:
        return self._emit(f"stablehlo.reshape {x} : ({self._type(last)}) -> "
                          f"{self._type(new_last)}")

    def flatten_transposed(self, x: str, last: list[int]) -> str:
        """[.., c, d] -> [.., d * len(c) + c]: the output index j = c + n1 d."""
        rank = len(self.batch)
        order = list(range(rank)) + [rank + 1, rank]
        swapped = self._emit(f"stablehlo.transpose {x}, dims = {order} : ({self._type(last)}) "
                             f"-> {self._type(last[::-1])}")
        return self.reshape(swapped, last[::-1], [last[0] * last[1]])

    def slice_last(self, x: str, length: int, count: int, start: int = 0) -> str:
        ranges = ", ".join([f"0:{d}" for d in self.batch] + [f"{start}:{start + count}"])
        return self._emit(f"stablehlo.slice {x} [{ranges}] : ({self._type([length])}) -> "
                          f"{self._type([count])}")

    def reverse(self, x: str, length: int) -> str:
        return self._emit(f"stablehlo.reverse {x}, dims = [{len(self.batch)}] : "
                          f"{self._type([length])}")

    def concat(self, a: str, b: str, a_length: int, b_length: int) -> str:
        return self._emit(f"stablehlo.concatenate {a}, {b}, dim = {len(self.batch)} : "
                          f"({self._type([a_length])}, {self._type([b_length])}) -> "
                          f"{self._type([a_length + b_length])}")

    def part(self, which: str, x: str, length: int) -> str:
        return self._emit(f"stablehlo.{which} {x} : ({self._type([length], 'complex<f32>')}) -> "
                          f"{self._type([length])}")

    def complex(self, parts, last: list[int], result: str) -> None:
        self.lines.append(f"{result} = stablehlo.complex {parts[0]}, {parts[1]} : "
                          f"{self._type(last, 'complex<f32>')}")

    def rename(self, value: str, result: str) -> None:
        """``result`` names the last line's value."""
        last = self.lines[-1]
        assert last.startswith(value + " = ")
        self.lines[-1] = result + last[len(value):]
