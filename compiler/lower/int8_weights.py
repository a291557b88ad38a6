"""The arithmetic of the int8 kernels (--weights-dtype=int8), in numpy.

The build quantizes weights here (``quantize_int8``: symmetric, one scale
per output row); ``int8_matvec`` (``int8_matvec_dsp`` on Arm's DSP
extension) and ``int8_conv`` compute what the C kernels
(runtime_shim/tfrt_matvec.c) compute with them, with exact int32 sums, for
the tests to compare the kernels against.
"""
from __future__ import annotations

import numpy as np

from ..errors import TfaotError
from .conv_epilogue import activation


def quantize_int8(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``W[N,K]`` as int8 rows and their f32 scales: ``round(w / s)`` with
    ``s = max|w_row| / 127`` (symmetric, per output row: TFLite's and
    XNNPACK's per-channel scheme); an all-zero row gets scale 0."""
    w = np.asarray(w, np.float32)
    if not np.isfinite(w).all():
        raise TfaotError("--weights-dtype=int8: a weight is NaN or infinite; use f32")
    scale = (np.abs(w).max(axis=1) / np.float32(127)).astype(np.float32)
    safe = np.where(scale > 0, scale, np.float32(1))
    q = np.clip(np.rint(w / safe[:, None]), -127, 127).astype(np.int8)
    return q, scale


#: Inputs per quantization scale of the int8 kernel (TFRT_I8_BLOCK).
INT8_BLOCK = 16


#: Matrices of at most this many rows are stored row after row, each row a
#: dot product in f32 against the input as it is (tfrt_i8_dot_rows; the
#: f32 matvecs and the convolutions too: weight_packing.DOT_ROWS is this)
DOT_ROWS = 4


def int8_matvec(w: np.ndarray, x: np.ndarray) -> np.ndarray:
    """What the int8 kernel computes for ``W x``: each block of INT8_BLOCK
    inputs rounded to int8 with its own scale (max|x_block| / 127, in f32 as
    the kernel), exact int32 sums per block, scaled back (float64 here, so
    the C kernel's f32 scaling differs by rounding only)."""
    return _blockwise_matvec(w, x, INT8_BLOCK, 127)


#: Inputs per pass of the int8 kernel on 32-bit Arm with the DSP extension
#: (TFRT_I8_CHUNK there), and the int16 input's largest magnitude.
DSP_CHUNK = 128
DSP_INPUT_MAX = 32767


def int8_matvec_dsp(w: np.ndarray, x: np.ndarray) -> np.ndarray:
    """``int8_matvec`` as the Cortex-M4/M7/M33 kernel computes it
    (TFRT_I8_WIDE): each chunk of DSP_CHUNK inputs rounded to int16 with one
    scale (max|x_chunk| / 32767, in f32), exact sums per chunk, scaled back
    (float64 here). Its inputs round half to even (tfrt_i8_round16)."""
    return _blockwise_matvec(w, x, DSP_CHUNK, DSP_INPUT_MAX, ties_to_even=True)


def _blockwise_matvec(w: np.ndarray, x: np.ndarray, block: int, top_q: int,
                      ties_to_even: bool = False) -> np.ndarray:
    """``W x`` with W's rows in int8 (quantize_int8) and each ``block`` of x
    rounded (half away from zero, or to even) to integers of magnitude up
    to ``top_q`` with one scale, max|x_block| / top_q in f32; exact integer
    sums. A matrix of at most DOT_ROWS rows keeps x in f32."""
    q, scale = quantize_int8(w)
    x = np.asarray(x, np.float32)
    if len(q) <= DOT_ROWS:  # row after row: the input as it is (tfrt_i8_dot_rows)
        return ((q.astype(np.float64) @ x.astype(np.float64)) * scale).astype(np.float32)
    total = np.zeros(len(q))
    for first in range(0, len(x), block):
        part = x[first:first + block]
        top = np.float32(np.max(np.abs(part)))
        inv = np.float32(top_q) / top if top > 0 else np.float32(0)
        v = part * inv
        if ties_to_even:
            xq = np.rint(v).astype(np.int64)
        else:
            xq = np.trunc(v + np.where(v < 0, np.float32(-0.5), np.float32(0.5))).astype(np.int64)
        sums = q[:, first:first + block].astype(np.int64) @ xq
        total += sums * float(top / np.float32(top_q))
    return (total * scale.astype(np.float64)).astype(np.float32)


#: Bytes the int8 convolution's scratch holds past the quantized image
#: (TFRT_Q_SLACK in runtime_shim/tfrt_qconv.h; a test checks they agree):
#: the last run's read rounded up to 4 bytes.
QCONV_SLACK = 16
#: Pixels a pointwise int8 convolution quantizes at a time, each with its
#: own scale, into its scratch (TFRT_Q_BLOCK in tfrt_qconv.h; a test checks
#: they agree).
QCONV_BLOCK = 24


def qconv_scratch_bytes(c: int, kh: int, kw: int, image_pixels: int, positions: int) -> int:
    """The int8 convolution's scratch for a padded image of
    ``image_pixels`` pixels of ``c`` channels: the quantized image and the
    slack; a pointwise convolution's, its blocks of QCONV_BLOCK pixels (at
    most its ``positions``), each rounded up to 4 bytes, and their f32
    scales (after up to 3 bytes of alignment)."""
    if kh == kw == 1:
        pixels = min(QCONV_BLOCK, positions)
        return pixels * (-(-c // 4) * 4) + 3 + 4 * pixels + QCONV_SLACK
    return image_pixels * c + QCONV_SLACK


def qconv_runs(c: int, kh: int, kw: int, dw: int) -> tuple[int, int]:
    """``(runs, run)`` of the int8 convolution's patches (tfrt_qconv.h): a
    filter row of contiguous inputs when the taps of a row are adjacent,
    else one tap's channels."""
    return (kh, kw * c) if dw == 1 else (kh * kw, c)


def pack_qconv(w: np.ndarray, runs: int, run: int, tile: int = 32) -> np.ndarray:
    """The int8 convolution's blob of ``W[n, runs*run]`` (tfrt_qconv.h): the
    row scales (f32) and weight sums (int32), ``tile`` lanes per packed
    tile, then the rows as ``[tiles][runs*run4/4][tile][4]``, each run
    padded with zero weights to run4 (a multiple of 4), as bytes."""
    q, scale = quantize_int8(w)
    n = len(q)
    tiles, run4 = -(-n // tile), -(-run // 4) * 4
    padded = np.zeros((tiles * tile, runs, run4), np.int8)
    padded[:n, :, :run] = q.reshape(n, runs, run)
    packed = padded.reshape(tiles, tile, runs * run4 // 4, 4).transpose(0, 2, 1, 3)
    scales = np.zeros(tiles * tile, "<f4")
    scales[:n] = scale
    sums = padded.astype(np.int32).sum(axis=(1, 2)).astype("<i4")
    return np.concatenate([scales.view(np.uint8), sums.view(np.uint8),
                           np.ascontiguousarray(packed).view(np.uint8).reshape(-1)])


def int8_conv(w: np.ndarray, x: np.ndarray, kh: int, kw: int, strides=(1, 1),
              dilations=(1, 1), post: np.ndarray | None = None) -> np.ndarray:
    """What the int8 convolution kernel computes (tfrt_qconv.h) for
    ``W[n, kh*kw*c]`` over the padded image ``x[ih, iw, c]``: the image
    rounded to int8 with one scale (max|x| / 127, f32 as the kernel; a
    pointwise convolution's, each pixel with its own), exact int32 sums over
    each patch, times the image's and the row's scales, then ``post``
    (``[lo, hi, act, 0, bias]``, ConvGeometry.post_data). NaN or Inf in the image
    (a pointwise convolution's: in a pixel) gives NaN outputs (at its
    position). Returns ``[oh, ow, n]``; the kernel's f32 products differ by
    rounding only."""
    q, scale = quantize_int8(w)
    x = np.asarray(x, np.float32)
    ih, iw, c = x.shape
    (sh, sw), (dh, dw) = strides, dilations
    oh, ow = (ih - dh * (kh - 1) - 1) // sh + 1, (iw - dw * (kw - 1) - 1) // sw + 1
    pointwise = kh == kw == 1
    top = np.max(np.abs(x), axis=-1 if pointwise else None, keepdims=True).astype(np.float32)
    top = np.where(np.isfinite(top), top, np.float32(np.nan))
    inv = np.where(top > 0, np.float32(127) / np.where(top > 0, top, 1), 0).astype(np.float32)
    with np.errstate(invalid="ignore"):  # (Inf * 0 where the scale is NaN)
        v = np.where(np.isnan(top), 0, x * inv).astype(np.float32)
    xq = np.trunc(v + np.where(v < 0, np.float32(-0.5), np.float32(0.5))).astype(np.int64)
    patches = np.stack([xq[r * sh + i * dh, p * sw + j * dw]
                        for r in range(oh) for p in range(ow)
                        for i in range(kh) for j in range(kw)]).reshape(oh * ow, -1)
    x_scale = (top / np.float32(127)).astype(np.float32)
    x_scale = (x_scale[::sh, ::sw][:oh, :ow].reshape(-1, 1) if pointwise
               else x_scale.reshape(1, 1))
    sums = (patches @ q.T.astype(np.int64)).astype(np.float32)
    y = sums * x_scale * scale[None, :]
    if post is not None:
        y = y + post[4:4 + len(q)]
        y = np.where(y < post[0], post[0], y)
        y = np.where(y > post[1], post[1], y)
        y = activation(int(post[2]), y)
    return y.reshape(oh, ow, len(q))
