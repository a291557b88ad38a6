"""tanh and logistic as one exponential and one division, for cores without
vector units (Cortex-M); TensorFlow's erf, which IREE cannot compile, as
a rational function (every target, ``expand_erf``); and tan, which IREE
approximates loosely near its poles (every target, ``expand_tan``).

IREE's approximations cost about 85 estimated M4 cycles a logistic (an exp
whose rounding calls floorf: FPv4 has no VRINTM) and 67 a tanh (a degree
13/6 rational function, each FMA after a VMOV of its coefficient): a
quarter of an LSTM(64) int8 step (bench/bench_mcu.py). Written out here in
StableHLO, IREE fuses them with the gate arithmetic around them as before:

    exp(z) = 2^n * (1 + m),  n = round(z / ln 2),  r = z - n ln 2,
                             m = r + r^2 q(r)   (q of degree 4)
    logistic(x) = 1 / (1 + exp(-x))
    tanh(x)     = (e^2x - 1) / (e^2x - 1 + 2),  e^2x - 1 = 2^n m + (2^n - 1)

n is rounded by adding and subtracting 1.5 * 2^23 (round to nearest, the
FPU's default mode), and 2^n is that sum's low bits shifted into the
exponent field: no floor, no float-to-int conversion. z is clamped to
[-87, 87], so 2^n stays a normal float; past that bound both functions are
1, 0 or -1 to within 1e-37. tanh keeps its relative accuracy near 0
because e^2x - 1 is formed from m without cancelling 1 - 1. Through IREE,
against numpy in float64 (tests/test_activations.py): logistic within
8.7e-8 (1.1e-7 relative), tanh within 1.4e-7 (1.4e-7 relative); IREE's own
approximations: 8.7e-8 and 2.2e-7.

On an M4 an LSTM(64) int8 step went from 113k to 99k estimated cycles, its
gate dispatches from 30k (floorf's 3.5k included) to 17k. Other targets
keep IREE's, which vectorize. The convolution kernels' swish epilogue
(runtime_shim/tfrt_matvec.c ``tfrt_exp``) takes the same steps and
constants in C.
"""
from __future__ import annotations

import itertools
import re
import struct

#: One f32 activation in the importer's pretty form on a static shape.
_ACTIVATION = re.compile(
    r"^(?P<indent>[ \t]*)(?P<result>%[\w.$#-]+) = stablehlo\.(?P<op>logistic|tanh) "
    r"(?P<operand>%[\w.$#-]+) : (?P<type>tensor<(?:\d+x)*f32>)[ \t]*$", re.M)

_LOG2E = 1.4426950408889634
#: ln 2 in two parts (Cephes): n * _LN2_HI is exact for |n| < 2^9
_LN2_HI, _LN2_LO = 0.693359375, -2.12194440e-4
_ROUNDER = 12582912.0  # 1.5 * 2^23: adding it rounds |v| < 2^22 to an integer
_CLAMP = 87.0
#: e^r = 1 + r + r^2 q(r) on |r| <= ln(2)/2, q's coefficients highest power
#: first: a degree-4 q fitted for least maximum relative error (Lawson's
#: iteration), within 3.0e-8 of e^r evaluated in f32, as close as Cephes'
#: degree-5 q (2.9e-8) with one multiply-add fewer
_EXP_POLY = (1.381461275741458e-3, 8.368710055947304e-3, 4.166838899254799e-2,
             1.666652113199234e-1, 4.999999403953552e-1)


def expand(mlir_text: str, tables: bool = False) -> tuple[str, int]:
    """``mlir_text`` with each f32 ``stablehlo.tanh`` / ``stablehlo.logistic``
    of static shape written out (``tables``: looked up in a table, for int8
    builds); returns the text and how many were."""
    return _expand_matches(_ACTIVATION, mlir_text, _table_expansion if tables else _expansion,
                           "%tfaot_act")


def _expand_matches(pattern: re.Pattern, mlir_text: str, write, prefix: str
                    ) -> tuple[str, int]:
    """``mlir_text`` with each match of ``pattern`` replaced by the lines
    ``write(match, names' prefix)`` makes, at the match's indent; and how
    many were."""
    count = 0

    def replace(match: re.Match) -> str:
        nonlocal count
        count += 1
        return "\n".join(match["indent"] + line for line in write(match, f"{prefix}{count}_"))

    return pattern.sub(replace, mlir_text), count


def _f32(value: float) -> str:
    """An f32 splat element, exactly: its bits in hex."""
    return "0x%08X" % struct.unpack("<I", struct.pack("<f", value))[0]


class _Writer:
    """The lines of one expansion: each op's result named ``prefix`` + a
    counter; ``ftype`` the activation's f32 tensor type."""

    def __init__(self, prefix: str, ftype: str):
        self.prefix, self.ftype = prefix, ftype
        self.lines: list[str] = []
        self._names = itertools.count()

    def op(self, text: str) -> str:
        name = f"{self.prefix}{next(self._names)}"
        self.lines.append(f"{name} = {text}")
        return name

    def const(self, value: float) -> str:
        return self.op(f"stablehlo.constant dense<{_f32(value)}> : {self.ftype}")

    def binary(self, kind: str, a: str, b: str) -> str:
        return self.op(f"stablehlo.{kind} {a}, {b} : {self.ftype}")

    def finish(self, result: str, match: re.Match) -> list[str]:
        """The lines, the last one defining ``match``'s result name."""
        self.lines[-1] = self.lines[-1].replace(result, match["result"], 1)
        return self.lines


def _expansion(match: re.Match, prefix: str) -> list[str]:
    ftype = match["type"]
    itype = ftype[:-len("f32>")] + "i32>"
    w = _Writer(prefix, ftype)
    op, const, binary = w.op, w.const, w.binary
    x = match["operand"]
    scale = const(-1.0 if match["op"] == "logistic" else 2.0)
    z = _clamp(op, binary("multiply", x, scale), const(-_CLAMP), const(_CLAMP), ftype)
    # n = round(z / ln 2), kept in `shifted`'s low mantissa bits
    rounder = const(_ROUNDER)
    shifted = binary("add", binary("multiply", z, const(_LOG2E)), rounder)
    n = binary("subtract", shifted, rounder)
    r = binary("subtract", binary("subtract", z, binary("multiply", n, const(_LN2_HI))),
               binary("multiply", n, const(_LN2_LO)))
    q = const(_EXP_POLY[0])
    for coefficient in _EXP_POLY[1:]:
        q = binary("add", binary("multiply", q, r), const(coefficient))
    m = binary("add", r, binary("multiply", binary("multiply", r, r), q))
    # 2^n: n's bits (two's complement, below bit 9) moved to the exponent
    # field (bits 23-30), plus 127 there; the rounder's own bits shift out
    bits = op(f"stablehlo.bitcast_convert {shifted} : ({ftype}) -> {itype}")
    exponent = op(f"stablehlo.shift_left {bits}, "
                  f"{op(f'stablehlo.constant dense<23> : {itype}')} : {itype}")
    biased = op(f"stablehlo.add {exponent}, "
                f"{op(f'stablehlo.constant dense<1065353216> : {itype}')} : {itype}")
    power = op(f"stablehlo.bitcast_convert {biased} : ({itype}) -> {ftype}")
    one = const(1.0)
    if match["op"] == "logistic":
        e = binary("add", binary("multiply", m, power), power)
        result = binary("divide", one, binary("add", e, one))
    else:
        em1 = binary("add", binary("multiply", m, power), binary("subtract", power, one))
        result = binary("divide", em1, binary("add", em1, const(2.0)))
    return w.finish(result, match)


#: The table: logistic on [-_TABLE_RANGE, _TABLE_RANGE] as _TABLE_SEGMENTS
#: straight segments. Past 12 it is within 6.2e-6 of 0 or 1; inside, a
#: segment's line is within 5.3e-5 of it (tests/test_activations.py).
_TABLE_RANGE = 12.0
_TABLE_SEGMENTS = 256
#: x in table steps: segment i is centred on u = i, u from 0 to segments - 1
_TABLE_STEP = 2 * _TABLE_RANGE / (_TABLE_SEGMENTS - 1)
#: The bits of _ROUNDER as a float: u + _ROUNDER has those plus round(u)
_ROUNDER_BITS = 0x4B400000


def _segments() -> tuple[bytes, bytes]:
    """Each segment's line, as f32 bytes: its value at u = 0 and its slope
    per table step. The line is the chord of logistic over the segment (u
    from i - 1/2 to i + 1/2, within the table), moved by half its largest
    gap to the curve so that the error falls on both sides. The two end
    segments are flat (slope 0): they also serve every u past the table,
    where logistic is within 6.2e-6 of their value."""
    import numpy as np

    def logistic(u):
        return 1 / (1 + np.exp(-(u - (_TABLE_SEGMENTS - 1) / 2) * _TABLE_STEP))

    centre = np.arange(_TABLE_SEGMENTS, dtype=np.float64)
    low = np.maximum(centre - 0.5, 0)
    high = np.minimum(centre + 0.5, _TABLE_SEGMENTS - 1)
    slopes = (logistic(high) - logistic(low)) / (high - low)
    slopes[[0, -1]] = 0.0
    u = low[:, None] + (high - low)[:, None] * np.linspace(0, 1, 257)
    gap = logistic(u) - (logistic(low)[:, None] + slopes[:, None] * (u - low[:, None]))
    values = logistic(low) + slopes * (centre - low) + (gap.max(axis=1) + gap.min(axis=1)) / 2
    # the end segments' values: halfway between logistic at their inner edge
    # and its limit (0 or 1)
    values[0], values[-1] = logistic(0.5) / 2, (1 + logistic(_TABLE_SEGMENTS - 1.5)) / 2
    intercepts = values - slopes * centre
    return intercepts.astype("<f4").tobytes(), slopes.astype("<f4").tobytes()


def _table_expansion(match: re.Match, prefix: str) -> list[str]:
    """logistic(x) as a table lookup and one multiply-add, tanh(x) as
    2 logistic(2x) - 1: about 17 M4 cycles where the exponential and the
    division take 55. Within 5.3e-5 of logistic and 1.1e-4 of tanh: an
    int8 build's weights alone move its outputs ten times that and more.

    x in table steps, u, is rounded by adding 1.5 * 2^23 (as the
    exponential's n is); the segment is that sum's bits less the bias,
    clamped to the table as an integer: no float compares (8 cycles a
    value), and no float-to-int conversion, whose result for a NaN or an
    infinity is undefined. The line is then intercept + slope * u. A NaN
    stays NaN; so does an infinity (0 * inf, where the flat end segments
    meet it), as in the int8 kernels, which give NaN for any input that is
    not finite. Every finite x reads a segment within the table."""
    ftype = match["type"]
    shape = ftype[len("tensor<"):-len("f32>")]
    itype, index_type = f"tensor<{shape}i32>", f"tensor<{shape}1xi32>"
    table_type = f"tensor<{_TABLE_SEGMENTS}xf32>"
    w = _Writer(prefix, ftype)
    op, const, binary = w.op, w.const, w.binary

    def lookup(table: bytes, index: str) -> str:
        values = op(f'stablehlo.constant dense<"0x{table.hex().upper()}"> : {table_type}')
        return op(f'"stablehlo.gather"({values}, {index}) {{dimension_numbers = '
                  f"#stablehlo.gather<collapsed_slice_dims = [0], start_index_map = [0], "
                  f"index_vector_dim = {shape.count('x')}>, slice_sizes = array<i64: 1>, "
                  f"indices_are_sorted = false}} : ({table_type}, {index_type}) -> {ftype}")

    def int_const(value: int) -> str:
        return op(f"stablehlo.constant dense<{value}> : {itype}")

    per_step = (1.0 if match["op"] == "logistic" else 2.0) / _TABLE_STEP
    u = binary("add", binary("multiply", match["operand"], const(per_step)),
               const((_TABLE_SEGMENTS - 1) / 2))
    bits = op(f"stablehlo.bitcast_convert {binary('add', u, const(_ROUNDER))} : "
              f"({ftype}) -> {itype}")
    rounded = op(f"stablehlo.subtract {bits}, {int_const(_ROUNDER_BITS)} : {itype}")
    segment = op(f"stablehlo.clamp {int_const(0)}, {rounded}, "
                 f"{int_const(_TABLE_SEGMENTS - 1)} : {itype}")
    index = op(f"stablehlo.reshape {segment} : ({itype}) -> {index_type}")
    intercepts, slopes = _segments()
    result = binary("add", lookup(intercepts, index), binary("multiply", u,
                                                               lookup(slopes, index)))
    if match["op"] == "tanh":
        result = binary("subtract", binary("multiply", result, const(2.0)), const(1.0))
    return w.finish(result, match)


#: TensorFlow's Erf as the importer writes it: a custom call IREE has no
#: lowering for (``tf.math.erf``, the exact GELU of Keras and BERT graphs)
_ERF = re.compile(
    r"^(?P<indent>[ \t]*)(?P<result>%[\w.$#-]+) = stablehlo\.custom_call @mhlo\.erf"
    r"\((?P<operand>%[\w.$#-]+)\)(?: \{(?:[^{}]|\{[^{}]*\})*\})? : "
    r"\((?P<type>tensor<(?:\d+x)*f32>)\) -> (?P=type)[ \t]*$", re.M)
#: erf(x) = x p(x^2) / q(x^2) on [-4, 4] (and +-1 to f32 precision past it):
#: the rational approximation XLA and Eigen use for f32, coefficients highest
#: power first; within 4.2e-7 of erf evaluated in f32 (TensorFlow's: 3.0e-7)
_ERF_P = (-2.72614225801306e-10, 2.77068142495902e-08, -2.10102402082508e-06,
          -5.69250639462346e-05, -7.34990630326855e-04, -2.95459980854025e-03,
          -1.60960333262415e-02)
_ERF_Q = (-1.45660718464996e-05, -2.13374055278905e-04, -1.68282697438203e-03,
          -7.37332916720468e-03, -1.42647390514189e-02)
_ERF_CLAMP = 4.0


def expand_erf(mlir_text: str) -> tuple[str, int]:
    """``mlir_text`` with each f32 ``mhlo.erf`` custom call of static shape
    written out as StableHLO arithmetic (every target: IREE cannot compile
    the call); returns the text and how many were."""
    return _expand_matches(_ERF, mlir_text, _erf_expansion, "%tfaot_erf")


def _erf_expansion(match: re.Match, prefix: str) -> list[str]:
    ftype = match["type"]
    w = _Writer(prefix, ftype)
    x = _clamp(w.op, match["operand"], w.const(-_ERF_CLAMP), w.const(_ERF_CLAMP), ftype)
    x2 = w.binary("multiply", x, x)

    def polynomial(coefficients) -> str:
        value = w.const(coefficients[0])
        for coefficient in coefficients[1:]:
            value = w.binary("add", w.binary("multiply", value, x2), w.const(coefficient))
        return value

    numerator = w.binary("multiply", x, polynomial(_ERF_P))
    result = w.binary("divide", numerator, polynomial(_ERF_Q))
    return w.finish(result, match)


_TAN = re.compile(
    r"^(?P<indent>[ \t]*)(?P<result>%[\w.$#-]+) = stablehlo\.tan (?P<operand>%[\w.$#-]+) : "
    r"(?P<type>tensor<(?:\d+x)*f32>)[ \t]*$", re.M)
#: pi/2 in four parts: 8, 11 and 12 significant bits (k times each exact
#: for |k| < 2^12) and the rest. Cephes' three (its DP1..DP3 for pi/4,
#: doubled) left 10 ulps at float32(3 pi/2), where x - 3 pi/2 is 1.2e-8
#: and the third product's rounding is not small beside it.
_HALF_PI = (1.5703125, 4.837512969970703125e-4, 7.549533620476723e-08,
            2.5633440682570896e-12)
#: tan(r) = r + r^3 p(r^2) on |r| <= pi/4 (Cephes' tanf), highest power first
_TAN_POLY = (9.38540185543e-3, 3.11992232697e-3, 2.44301354525e-2, 5.34112807005e-2,
             1.33387994085e-1, 3.33331568548e-1)


def expand_tan(mlir_text: str) -> tuple[str, int]:
    """``mlir_text`` with each f32 ``stablehlo.tan`` of static shape written
    out (every target): IREE's approximation is off by 2.8e-3 relative near
    the poles, where TensorFlow's tan is within an ulp. Written out: x
    reduced by k pi/2 (k = round(x 2/pi), pi/2 in four parts), tan of the
    remainder r by Cephes' polynomial, and -1/tan(r) for odd k; within 3
    ulps for |x| < 1e4, next to the poles too (tests/test_activations.py).
    Returns the text and how many were."""
    return _expand_matches(_TAN, mlir_text, _tan_expansion, "%tfaot_tan")


def _tan_expansion(match: re.Match, prefix: str) -> list[str]:
    ftype = match["type"]
    w = _Writer(prefix, ftype)
    x = match["operand"]
    rounder = w.const(_ROUNDER)

    def rounded(v: str) -> str:  # to the nearest integer (|v| < 2^22), without a libm call
        return w.binary("subtract", w.binary("add", v, rounder), rounder)

    k = rounded(w.binary("multiply", x, w.const(2 / 3.141592653589793)))
    r = x
    for part in _HALF_PI:
        r = w.binary("subtract", r, w.binary("multiply", k, w.const(part)))
    z = w.binary("multiply", r, r)
    p = w.const(_TAN_POLY[0])
    for coefficient in _TAN_POLY[1:]:
        p = w.binary("add", w.binary("multiply", p, z), w.const(coefficient))
    t = w.binary("add", r, w.binary("multiply", w.binary("multiply", r, z), p))
    # k odd: k - 2 round((k - 1/2) / 2) is 1 (0 for even k)
    half = rounded(w.binary("multiply", w.binary("subtract", k, w.const(0.5)), w.const(0.5)))
    odd = w.binary("subtract", k, w.binary("multiply", half, w.const(2.0)))
    btype = ftype[:-len("f32>")] + "i1>"
    is_odd = w.op(f'"stablehlo.compare"({odd}, {w.const(0.5)}) {{comparison_direction = '
                  f"#stablehlo<comparison_direction GT>}} : ({ftype}, {ftype}) -> {btype}")
    cotangent = w.binary("divide", w.const(-1.0), t)
    result = w.op(f'"stablehlo.select"({is_odd}, {cotangent}, {t}) : '
                  f"({btype}, {ftype}, {ftype}) -> {ftype}")
    return w.finish(result, match)


def _clamp(op, value: str, low: str, high: str, ftype: str) -> str:
    """``value`` within [low, high] as two compare-and-selects, which keep a
    NaN (it then propagates through the arithmetic): ``stablehlo.clamp``
    tests each bound for NaN as well (13 M4 cycles where this takes 8)."""
    btype = ftype[:-len("f32>")] + "i1>"
    for bound, direction in ((low, "LT"), (high, "GT")):
        past = op(f'"stablehlo.compare"({value}, {bound}) {{comparison_direction = '
                  f"#stablehlo<comparison_direction {direction}>}} : "
                  f"({ftype}, {ftype}) -> {btype}")
        value = op(f'"stablehlo.select"({past}, {bound}, {value}) : '
                   f"({btype}, {ftype}, {ftype}) -> {ftype}")
    return value
