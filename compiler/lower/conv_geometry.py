"""The geometry of a convolution tfaot's kernels compute (lower/microkernel.py):
its shapes, weights, epilogue and what its kernel call takes."""
from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from .int8_weights import pack_qconv, qconv_runs, qconv_scratch_bytes
from .weight_packing import TILE, pack_conv

#: The convolutions' kernels on f16 images (--intermediates=f16:
#: runtime_shim/tfrt_half.h) by the kind of f32 images' kernel each is
#: compiled with (it calls it on strips, or shares its helpers).
HALF_KINDS = {"conv": "conv16", "dwconv": "dwconv16", "qconv": "qconv16"}


@dataclass(frozen=True)
class ConvGeometry:
    """A convolution the conv kernel computes: one image, channels last,
    filter ``[kh][kw][c][n]`` (as ``weights``, ``W[n, kh*kw*c]``).

    A 1-D convolution is the 2-D one with ``kh = ih = 1``. ``pad`` is
    ``((top, bottom), (left, right))``: a pad op before the conv kernel, the
    depthwise kernel's own (it skips the taps over it). A
    depthwise convolution (``groups == c``, filter ``[kh][kw][1][n]``) keeps
    its weights as ``[kh*kw, n]``.
    """

    n: int
    c: int
    kh: int
    kw: int
    ih: int
    iw: int
    oh: int
    ow: int
    sh: int
    sw: int
    dh: int
    dw: int
    pad: tuple[tuple[int, int], tuple[int, int]]
    depthwise: bool
    x_type: str  # the op's operand and result shapes, e.g. "1x9x3xf32"
    y_type: str
    weights: np.ndarray = field(compare=False, repr=False)
    #: the epilogue the kernel applies as it stores (conv_epilogue.Epilogue),
    #: ``[lo, hi, bias]``; its activation (conv_epilogue.ACTIVATIONS) the act
    #: kernel's after it (the kernels on f16 images: theirs, row by row)
    post: np.ndarray | None = field(default=None, compare=False, repr=False)
    act: int = 0
    #: int8 weights (the int8 convolution kernel, --weights-dtype=int8)
    int8: bool = False
    #: f16 images in and out (--intermediates=f16: HALF_KINDS)
    half: bool = False
    #: depthwise on f16 images: the target's block reads the halves itself
    #: (Target.half_dw_blocks and the block's shape, ``half_block``): no strip
    half_blocks: bool = False
    #: a result of the image's shape may take the image's buffer (_conv_text)
    reuse_image: bool = True
    #: images in the op's batch (an N-stream build's: lower/streams.py), each
    #: its own kernel call in the dispatch
    batch: int = 1

    @property
    def post_data(self) -> np.ndarray:
        """``[lo, hi, act, 0, bias]`` as the kernels read them (tfrt_post), the
        bias padded with zeros to whole tiles for the vector blocks' loads."""
        lo, hi, bias = ((-np.inf, np.inf, np.zeros(self.n)) if self.post is None
                        else (self.post[0], self.post[1], self.post[2:]))
        padded = np.zeros(-(-self.n // TILE) * TILE)
        padded[:self.n] = bias
        return np.concatenate([[lo, hi, self.act, 0], padded]).astype(np.float32)

    @property
    def run(self) -> int:
        """Contiguous inputs per run of a patch (int8_weights.qconv_runs)."""
        return qconv_runs(self.c, self.kh, self.kw, self.dw)[1]

    @property
    def padded_shape(self) -> tuple[int, int]:
        """The image's height and width with the padding a pad op adds."""
        return self.ih + sum(self.pad[0]), self.iw + sum(self.pad[1])

    @property
    def half_block(self) -> bool:
        """Whether a depthwise convolution has the shape of the scalar FPU's
        f16 block (runtime_shim/tfrt_dwconv.h TFRT_DW3H_ROWS)."""
        return (self.depthwise and self.kw == 3 and self.sw == 1 and self.dw == 1
                and self.n == self.c and self.c % 2 == 0 and self.ow >= 4)

    @property
    def strip_floats(self) -> int:
        """On f16 images (runtime_shim/tfrt_half.h), the f32 strip of the
        input rows of one output row and that row's outputs; 0 where the
        depthwise block reads the halves itself and for the int8 kernel."""
        if not self.half or self.int8 or (self.half_blocks and self.half_block):
            return 0
        width = self.iw if self.depthwise else self.padded_shape[1]
        return self.kh * width * self.c + self.ow * self.n

    @property
    def scratch_bytes(self) -> int:
        """The kernel's scratch: the int8 kernel's quantized image (a
        pointwise one's blocks of pixels) and its slack (on f16 images after
        an output row's f32 outputs, rounded up to 4); on f16 images the f32
        strip (strip_floats); either with 16 bytes of room to align the f32
        part. 0 for the f32 kernels."""
        quantized = (qconv_scratch_bytes(self.c, self.kh, self.kw,
                                         self.padded_shape[0] * self.padded_shape[1],
                                         self.oh * self.ow) if self.int8 else 0)
        if self.half:
            row = -(-self.ow * self.n // 4) * 4 if self.int8 else 0
            return 16 + 4 * (self.strip_floats + row) + quantized
        return quantized

    @property
    def kind(self) -> str:
        kind = "dwconv" if self.depthwise else "qconv" if self.int8 else "conv"
        return HALF_KINDS[kind] if self.half else kind

    def packed(self) -> np.ndarray:
        """The weights as the kernel reads them (tfrt_matvec.c)."""
        if self.int8:
            return pack_qconv(self.weights, *qconv_runs(self.c, self.kh, self.kw, self.dw), TILE)
        return self.weights if self.depthwise else pack_conv(self.weights)

    @property
    def kernel_args(self) -> tuple[int, ...]:
        """The kernel's scalar arguments after post (tfrt_matvec.c): the
        depthwise kernel takes the image and its padding (it skips the
        padding's taps), the conv kernel the padded width."""
        if self.depthwise:
            (top, _), (left, _) = self.pad
            strip = (self.strip_floats,) if self.half else ()
            return (self.n, self.c, self.kh, self.kw, self.ih, self.iw, top, left, self.oh,
                    self.ow, self.sh, self.sw, self.dh, self.dw, *strip)
        padded_ih, padded_iw = self.padded_shape
        image = (padded_ih, padded_iw) if self.int8 else (padded_iw,)
        return (self.n, self.c, self.kh, self.kw, *image, self.oh, self.ow,
                self.sh, self.sw, self.dh, self.dw)


def patches_as_rows(g: ConvGeometry) -> ConvGeometry:
    """``g`` over a batch of images that are each one whole patch (one
    output position, no padding, adjacent taps) as the 1x1 convolution of
    one image of ``batch`` positions of kh*kw*c channels (the same memory,
    the same weight rows): an N-stream step's streamed convolutions, one
    position per stream, take the kernel's blocks of positions instead of a
    call per stream that fills one position of a block (bench_streams'
    conv1d64 at 8 streams: 23.6 us a step that way, 6.8 this way).
    Likewise a 1x1 convolution of stride 1 over a batch is one over an
    image of all the batch's pixels. Other geometries are returned as they
    are (a call per image)."""
    if g.batch == 1 or g.depthwise or any(sum(p) for p in g.pad):
        return g
    if (g.kh, g.kw, g.sh, g.sw) == (1, 1, 1, 1):
        pixels = g.batch * g.ih * g.iw
        return replace(g, ih=1, iw=pixels, oh=1, ow=pixels, batch=1)
    one_patch = ((g.ih, g.iw) == ((g.kh - 1) * g.dh + 1, (g.kw - 1) * g.dw + 1)
                 and (g.kh == 1 or g.dh == 1) and (g.kw == 1 or g.dw == 1))
    if (g.oh, g.ow) != (1, 1) or not one_patch:
        return g
    return replace(g, c=g.kh * g.kw * g.c, kh=1, kw=1, ih=1, iw=g.batch, oh=1, ow=g.batch,
                   sh=1, sw=1, dh=1, dw=1, batch=1)
