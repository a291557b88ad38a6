/* tfrt_resize.h - tfaot's bilinear resize kernel (included by tfrt_matvec.c).
 *
 * TFRT_RESIZE_FN(taps, taps_offset, x, x_offset, y, y_offset, h, w, c, axis,
 * out): one axis of a bilinear resize of the channels-last image x
 * [h][w][c]: along its rows (axis 1: y [out][w][c]) or its columns (axis 2:
 * y [h][out][c]), output index i is lo + (hi - lo) * t of the input's rows
 * or columns lo = taps[i] and hi = taps[out + i], t = taps[2 * out + i]
 * (the indices as floats, exact below 2^24; compiler/lower/resize_kernel.py).
 * That is TensorFlow's CPU kernel's arithmetic, one axis at a time
 * (compiler/lower/bilinear_resize.py writes a resize as the two axes).
 *
 * IREE's code for those gathers and lerps read its indices and wrote its
 * outputs one float at a time: 0.86 ns an output of a 112 x 112 x 16 ->
 * 224 x 224 x 16 upsampling, 17% of a DeepLab-style segmenter's inference.
 * Here a row or a pixel's channels are contiguous runs of floats, which
 * the C compiler vectorizes.
 */
#ifdef TFRT_RESIZE_FN

void TFRT_RESIZE_FN(const float *taps, size_t taps_offset, const float *x, size_t x_offset,
                    float *y, size_t y_offset, size_t h, size_t w, size_t c, size_t axis,
                    size_t out);

/* y[j] = lo[j] + (hi[j] - lo[j]) * t for j < n (x and y do not overlap),
 * the product and the sum rounded apart as TensorFlow's kernel rounds
 * them: two statements, which clang (-ffp-contract=on) does not fuse into
 * an FMA as it fused the one expression */
static void tfrt_lerp_run(const float *restrict lo, const float *restrict hi, float t,
                          float *restrict y, size_t n) {
  for (size_t j = 0; j < n; j++) {
    const float step = (hi[j] - lo[j]) * t;
    y[j] = lo[j] + step;
  }
}

void TFRT_RESIZE_FN(const float *taps, size_t taps_offset, const float *x, size_t x_offset,
                    float *y, size_t y_offset, size_t h, size_t w, size_t c, size_t axis,
                    size_t out) {
  const float *lower = taps + taps_offset, *upper = lower + out, *lerp = upper + out;
  x += x_offset;
  y += y_offset;
  if (axis == 1) { /* rows: each output row a lerp of two input rows */
    const size_t row = w * c;
    for (size_t i = 0; i < out; i++)
      tfrt_lerp_run(x + (size_t)lower[i] * row, x + (size_t)upper[i] * row, lerp[i],
                    y + i * row, row);
    return;
  }
  for (size_t r = 0; r < h; r++) { /* columns: each output pixel a lerp of two */
    const float *xr = x + r * w * c;
    float *yr = y + r * out * c;
    for (size_t i = 0; i < out; i++)
      tfrt_lerp_run(xr + (size_t)lower[i] * c, xr + (size_t)upper[i] * c, lerp[i],
                    yr + i * c, c);
  }
}
#endif
