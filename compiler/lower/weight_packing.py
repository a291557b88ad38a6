"""How tfaot's micro-kernels find their weights in memory
(runtime_shim/tfrt_matvec.c): f32 tiles, half-width patterns and the int8
blobs, packed at build time (compiler/lower/microkernel.py)."""
from __future__ import annotations

import numpy as np

from ..errors import TfaotError
from .int8_weights import DOT_ROWS, quantize_int8

#: Output lanes per packed tile; the same number as TFRT_MATVEC_TILE in
#: runtime_shim/tfrt_matvec.c (a test checks they agree).
TILE = 32
#: Matvecs of at most this many rows are packed as one tile this wide
#: (TFRT_MATVEC_SMALL_TILE): no zero lanes to read (e.g. a Dense(12) head).
SMALL_TILE = 16
#: Matvecs of at most DOT_ROWS rows, and convolutions of at most DOT_ROWS
#: outputs, are packed row after row (tile 1, TFRT_MATVEC_DOT_ROWS): each
#: output a dot product. In a tile, a Dense(1) over 4000 inputs took 16
#: times its weights in flash and a Conv1D(1, 9) over 64 channels 32 times.
#: (Defined with the int8 arithmetic, which this module imports.)


def pack(w: np.ndarray, tile: int = TILE) -> np.ndarray:
    """``W[N,K]`` as ``[ceil(N/tile)][K][tile]``: row ``p*tile+t`` of W is lane t of tile p."""
    n, k = w.shape
    tiles = -(-n // tile)
    padded = np.zeros((tiles * tile, k), np.float32)
    padded[:n] = w
    return np.ascontiguousarray(padded.reshape(tiles, tile, k).transpose(0, 2, 1))


def matvec_tile(n: int) -> int:
    """Output lanes per packed tile of an ``n``-row matvec (tfrt_matvec.c's rule)."""
    return 1 if n <= DOT_ROWS else SMALL_TILE if n <= SMALL_TILE else TILE


def conv_tile(n: int) -> int:
    """Output lanes per packed tile of a convolution of ``n`` outputs (f32
    and half-width weights; tfrt_matvec.c's TFRT_CONV_TILE_OF): a matvec's
    rule (a layer of 8 outputs took 4 times its weights in a tile of 32)."""
    return matvec_tile(n)


def pack_conv(w: np.ndarray) -> np.ndarray:
    """A convolution's filters ``W[N, taps * channels]`` as its kernel reads
    them: ``pack`` in tiles of ``conv_tile(N)`` lanes."""
    return pack(w, conv_tile(w.shape[0]))


def to_half(w: np.ndarray, dtype: str) -> np.ndarray:
    """f32 weights as the 16-bit patterns of ``dtype`` ("bf16" or "f16"), rounded
    to nearest even (f16 subnormals to zero); refuses weights that are not
    finite there (the kernel's f16 conversion has no Inf/NaN case, and such a
    weight is a broken model)."""
    w = np.ascontiguousarray(w, np.float32)
    if dtype == "bf16":
        bits = w.view(np.uint32).astype(np.uint64)
        half = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    else:
        with np.errstate(over="ignore"):
            half = w.astype(np.float16).view(np.uint16)
        # Subnormal halves (|w| < 6.1e-5) become zero (sign kept): the kernel's
        # conversion would make them subnormal f32s, which x86 multiplies on a
        # slow path (LSTM(512) stepped 2.3x slower with its ~0.1% of them).
        half = np.where(half & 0x7C00, half, half & 0x8000).astype(np.uint16)
    if not np.isfinite(from_half(half, dtype)).all():
        raise TfaotError(f"--weights-dtype={dtype}: a weight is not finite in {dtype} (largest "
                         f"|w| = {np.max(np.abs(w)):.6g}); use {'bf16 or ' * (dtype == 'f16')}f32")
    return half


#: How the int8 matvec's blob lays out its rows (Target.int8_layout)
INT8_LAYOUTS = ("lanes", "paired", "rows")


def pack_int8(w: np.ndarray, layout: str = "lanes") -> np.ndarray:
    """The int8 kernel's blob of ``W[N,K]`` (tfrt_matvec.c): the row scales
    (f32, one per packed row) then the rows, as bytes, by ``layout``
    (Target.int8_layout; K4: K rounded up to 4, zero weights pad):

    * "lanes": ``[ceil(N/T)][K4/4][T][4]``, a tile's lanes side by side per
      group of 4 inputs (the dot-product instructions' operand);
    * "paired" (Arm's DSP extension, tfrt_i8_pairs): the 8 bytes of lanes 2m
      and 2m+1 in each group of 4 inputs interleaved, lane 2m's offset by
      128 to unsigned bytes (``pair_lanes``), and each pass's groups
      together: ``[ceil(N/T)][T/4][K4/4][16]``, a pass being four lanes (two
      pairs) over all inputs;
    * "rows" (Helium, tfrt_i8_rows_tile): the rows as they are, ``[ceil(N/T) *
      T][K4]``, so that a row's 16 weights of a block of inputs are one
      vector for VMLADAV.

    A matrix of at most DOT_ROWS rows (T = 1) is ``[N][K4]`` in every
    layout (tfrt_i8_dot_rows)."""
    if layout not in INT8_LAYOUTS:
        raise ValueError(f"int8 layout {layout!r}")
    q, scale = quantize_int8(w)
    n, k = q.shape
    tile = matvec_tile(n)
    tiles, k4 = -(-n // tile), -(-k // 4) * 4
    padded = np.zeros((tiles * tile, k4), np.int8)
    padded[:n, :k] = q
    packed = padded.reshape(tiles, tile, k4 // 4, 4).transpose(0, 2, 1, 3)
    if layout == "paired" and tile > 1:
        packed = pair_lanes(packed).reshape(tiles, k4 // 4, tile // 4, 16).transpose(0, 2, 1, 3)
    elif layout == "rows":
        packed = padded
    scales = np.zeros(tiles * tile, "<f4")
    scales[:n] = scale
    return np.concatenate([scales.view(np.uint8), np.ascontiguousarray(packed).view(np.uint8)
                           .reshape(-1)])


def pair_lanes(packed: np.ndarray) -> np.ndarray:
    """``[tiles][groups][T][4]`` int8 weights as the DSP tile reads them:
    per group, lanes 2m (e) and 2m+1 (o) as ``[e0^0x80, o0, e1^0x80, o1,
    e2^0x80, o2, e3^0x80, o3]``, so that each 16-bit half of a word is
    ``e + 128 + 256 o`` (uint8 bytes, the same shape)."""
    raw = packed.view(np.uint8)
    tiles, groups, lanes, _ = raw.shape
    pairs = raw.reshape(tiles, groups, lanes // 2, 2, 4)
    even, odd = pairs[:, :, :, 0, :] ^ np.uint8(0x80), pairs[:, :, :, 1, :]
    return np.stack([even, odd], axis=-1).reshape(tiles, groups, lanes, 4)


def from_half(half: np.ndarray, dtype: str) -> np.ndarray:
    """The f32 values the kernel computes with for 16-bit ``half`` patterns."""
    if dtype == "bf16":
        return (half.astype(np.uint32) << 16).view(np.float32)
    return half.view(np.float16).astype(np.float32)


def weight_data(packed: np.ndarray, dtype: str) -> np.ndarray:
    """The packed weights' bytes as the kernel reads them (little-endian)."""
    if dtype == "int8":
        return packed  # already the blob's bytes (pack_int8)
    if dtype == "f32":
        return packed.astype("<f4")
    return to_half(packed, dtype).astype("<u2")
