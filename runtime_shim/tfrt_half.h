/* tfrt_half.h - the convolutions on f16 images (--intermediates=f16), part
 * of the kernels' translation unit: tfrt_matvec.c includes it last, after
 * the f32 kernels these use and the conversions (tfrt_half_convert.h).
 *
 * Between tfaot's convolution kernels the images are stored as IEEE halves:
 * half the RAM of the step's largest temporaries (a keyword spotter's
 * layers), for one more rounding (2^-11 relative) per layer. The math
 * stays f32, and each kernel writes an output row only after it read every
 * input of that row, so a result of the image's shape from one input row
 * per output row may take the image's buffer (compiler/lower/
 * microkernel.py). The scratch each takes (the dispatch's second result,
 * microkernel.py ConvGeometry.scratch_bytes) starts with 16 bytes of room
 * to align its f32 parts:
 * - the int8 convolution quantizes the f16 image straight into its
 *   scratch, then computes an output row at a time into an f32 row of the
 *   scratch and stores it as halves;
 * - the depthwise convolution reads halves itself on a scalar FPU's 3-column
 *   block (tfrt_dw3h_row, no scratch); elsewhere it converts the input rows
 *   of one output row into an f32 strip and runs the f32 kernel on it;
 * - the f32-weight convolution does the same with its f32 kernel. */

/* The f32 part of a kernel's scratch, 16-byte aligned. */
static float *tfrt_h_scratch(uint8_t *s, size_t s_offset) {
  const uintptr_t at = (uintptr_t)(s + s_offset);
  return (float *)(void *)(s + s_offset + ((16u - at % 16u) % 16u));
}

/* Rows r0, r0 + step, ... (count of them) of an image of rows of `row`
 * halves from x into the f32 strip, one after another. */
TFRT_UNUSED static void tfrt_h_strip(float *strip, const uint16_t *x, size_t r0, size_t step,
                                     size_t count, size_t row) {
  for (size_t i = 0; i < count; i++) tfrt_h_load(strip + i * row, x + (r0 + i * step) * row, row);
}

#ifdef TFRT_CONV16_FN
/* TFRT_CONV_FN on f16 images: x the padded image [ih][iw][c] */
void TFRT_CONV16_FN(const tfrt_weight *w, size_t w_offset, const uint16_t *x, size_t x_offset,
                    uint16_t *y, size_t y_offset, const float *post, uint8_t *s,
                    size_t s_offset, size_t n, size_t c, size_t kh, size_t kw, size_t iw,
                    size_t oh, size_t ow, size_t sh, size_t sw, size_t dh, size_t dw);
void TFRT_CONV16_FN(const tfrt_weight *w, size_t w_offset, const uint16_t *x, size_t x_offset,
                    uint16_t *y, size_t y_offset, const float *post, uint8_t *s,
                    size_t s_offset, size_t n, size_t c, size_t kh, size_t kw, size_t iw,
                    size_t oh, size_t ow, size_t sh, size_t sw, size_t dh, size_t dw) {
  float *strip = tfrt_h_scratch(s, s_offset), *out = strip + kh * iw * c;
  x += x_offset;
  y += y_offset;
  for (size_t oy = 0; oy < oh; oy++) {
    tfrt_h_strip(strip, x, oy * sh, dh, kh, iw * c);
    TFRT_CONV_FN(w, w_offset, strip, 0, out, 0, post, n, c, kh, kw, iw, 1, ow, 1, sw, 1, dw);
    tfrt_act_pass(tfrt_act_of(post), out, ow * n); /* (before the rounding) */
    tfrt_h_store(y + oy * ow * n, out, ow * n);
  }
}
#endif

#ifdef TFRT_DWCONV16_FN
/* One output row oy of the depthwise convolution, the filter rows over the
 * image i0 .. i1-1 (input row `at` for filter row 0): one position and
 * channel at a time (without a strip, where no block reads halves). */
static void tfrt_dwh_row_one(const tfrt_weight *w, const uint16_t *x, uint16_t *y,
                             const float *post, size_t n, size_t c, size_t kw, size_t iw,
                             size_t left, size_t ow, size_t sw, size_t dh, size_t dw,
                             ptrdiff_t at, size_t i0, size_t i1) {
  const size_t mult = n / c;
  for (size_t ox = 0; ox < ow; ox++)
    for (size_t o = 0; o < n; o++) {
      float acc = 0;
      for (size_t i = i0; i < i1; i++)
        for (size_t j = 0; j < kw; j++) {
          const ptrdiff_t ix = (ptrdiff_t)(ox * sw + j * dw) - (ptrdiff_t)left;
          if (ix < 0 || ix >= (ptrdiff_t)iw) continue;
          const size_t xr = (size_t)(at + (ptrdiff_t)(i * dh));
          TFRT_MAC(acc, TFRT_W(w[(i * kw + j) * n + o]),
                   tfrt_h2f(x[(xr * iw + (size_t)ix) * c + o / mult]));
        }
      y[ox * n + o] = tfrt_f2h(tfrt_act(tfrt_act_of(post), tfrt_post(post, o, acc)));
    }
}

/* TFRT_DWCONV_FN on f16 images. strip: the f32 scratch's size in floats,
 * 0 where microkernel.py expects tfrt_dw3h_row to take the rows. */
void TFRT_DWCONV16_FN(const tfrt_weight *w, size_t w_offset, const uint16_t *x,
                      size_t x_offset, uint16_t *y, size_t y_offset, const float *post,
                      uint8_t *s, size_t s_offset, size_t n, size_t c, size_t kh, size_t kw,
                      size_t ih, size_t iw, size_t top, size_t left, size_t oh, size_t ow,
                      size_t sh, size_t sw, size_t dh, size_t dw, size_t strip);
void TFRT_DWCONV16_FN(const tfrt_weight *w, size_t w_offset, const uint16_t *x,
                      size_t x_offset, uint16_t *y, size_t y_offset, const float *post,
                      uint8_t *s, size_t s_offset, size_t n, size_t c, size_t kh, size_t kw,
                      size_t ih, size_t iw, size_t top, size_t left, size_t oh, size_t ow,
                      size_t sh, size_t sw, size_t dh, size_t dw, size_t strip) {
  float *rows = tfrt_h_scratch(s, s_offset), *out = rows + kh * iw * c;
  const int strips = strip >= kh * iw * c + ow * n;
  w += w_offset;
  x += x_offset;
  y += y_offset;
#ifdef TFRT_DW3H_ROWS
  const int blocks = TFRT_DW3H_ROWS(kw, sw, dw, n, c, ow, x, y);
  const struct tfrt_dwconv g = {n, c, kh, kw, iw, sw, dh, dw, post, tfrt_act_of(post)};
#endif
  for (size_t oy = 0; oy < oh; oy++, y += ow * n) {
    const ptrdiff_t at = (ptrdiff_t)(oy * sh) - (ptrdiff_t)top;
    size_t i0, i1;
    tfrt_tap_range(at, ih, kh, dh, &i0, &i1);
    const size_t first = i0 < i1 ? (size_t)(at + (ptrdiff_t)(i0 * dh)) : 0;
#ifdef TFRT_DW3H_ROWS
    if (blocks) {
      tfrt_dw3h_row(&g, x + first * iw * c, i0, i1, w, y, ow, left);
      continue;
    }
#endif
    if (strips) { /* the f32 kernel on the rows over the image, from filter row i0 */
      tfrt_h_strip(rows, x, first, dh, i1 - i0, iw * c);
      TFRT_DWCONV_FN(w, i0 * kw * n, rows, 0, out, 0, post, n, c, i1 - i0, kw, i1 - i0, iw, 0,
                     left, 1, ow, 1, sw, 1, dw);
      tfrt_act_pass(tfrt_act_of(post), out, ow * n);
      tfrt_h_store(y, out, ow * n);
    } else {
      tfrt_dwh_row_one(w, x, y, post, n, c, kw, iw, left, ow, sw, dh, dw, at, i0, i1);
    }
  }
}
#endif

#ifdef TFRT_QCONV16_FN
/* xq = round(x / s_x) for size halves (tfrt_q_image's arithmetic);
 * returns s_x, or NaN (xq untouched) if x has NaN or Inf. The largest |x|
 * is found on the bits: for finite halves, a larger magnitude is a larger
 * number. */
static float tfrt_q_halves(const uint16_t *x, size_t size, int8_t *xq) {
  uint32_t top_bits = 0;
  for (size_t i = 0; i < size; i++) {
    const uint32_t m = x[i] & 0x7fffu;
    top_bits = m > top_bits ? m : top_bits;
  }
  if (top_bits >= 0x7c00u) return __builtin_nanf("");
  const float top = tfrt_h2f((uint16_t)top_bits), inv = top > 0 ? 127.0f / top : 0.0f;
  size_t i = 0;
  for (; i + 2 <= size; i += 2) {
    const struct tfrt_f2 v = tfrt_h2f2(tfrt_h_word(x + i));
    xq[i] = tfrt_q_byte(v.lo * inv);
    xq[i + 1] = tfrt_q_byte(v.hi * inv);
  }
  if (i < size) xq[i] = tfrt_q_byte(tfrt_h2f(x[i]) * inv);
  return top / 127.0f;
}

/* The image's tfrt_q_halves, the slack zeroed. */
static float tfrt_q_image16(const uint16_t *x, size_t size, int8_t *xq) {
  const float x_scale = tfrt_q_halves(x, size, xq);
  if (x_scale == x_scale)
    for (size_t k = 0; k < TFRT_Q_SLACK; k++) xq[size + k] = 0;
  return x_scale;
}

/* tfrt_q_pixel of the f16 pixel at element `at` of x: its c halves into
 * xq, zeros to c4; returns the pixel's scale, NaN (and zeros) if it has
 * NaN or Inf. */
static float tfrt_q_pixel16(const void *image, size_t at, size_t c, int8_t *xq) {
  const float scale = tfrt_q_halves((const uint16_t *)image + at, c, xq);
  for (size_t i = scale == scale ? c : 0; i < (c + 3) / 4 * 4; i++) xq[i] = (int8_t)TFRT_Q_OFFSET;
  return scale;
}

/* TFRT_QCONV_FN on f16 images: x the padded image [ih][iw][c]; the scratch
 * holds an output row's f32 outputs (rounded up to 4), then the quantized
 * image and its slack. */
void TFRT_QCONV16_FN(const int8_t *w, size_t w_offset, const uint16_t *x, size_t x_offset,
                     uint16_t *y, size_t y_offset, const float *post, uint8_t *s,
                     size_t s_offset, size_t n, size_t c, size_t kh, size_t kw, size_t ih,
                     size_t iw, size_t oh, size_t ow, size_t sh, size_t sw, size_t dh,
                     size_t dw);
void TFRT_QCONV16_FN(const int8_t *w, size_t w_offset, const uint16_t *x, size_t x_offset,
                     uint16_t *y, size_t y_offset, const float *post, uint8_t *s,
                     size_t s_offset, size_t n, size_t c, size_t kh, size_t kw, size_t ih,
                     size_t iw, size_t oh, size_t ow, size_t sh, size_t sw, size_t dh,
                     size_t dw) {
  float *row = tfrt_h_scratch(s, s_offset);
  int8_t *xq = (int8_t *)(void *)(row + (ow * n + 3) / 4 * 4);
  const int act = tfrt_act_of(post);
  x += x_offset;
  y += y_offset;
  if (kh == 1 && kw == 1) { /* a scale per pixel (tfrt_qconv.h) */
    const struct tfrt_q_call call =
        tfrt_q_call_of(w + w_offset, row, post, NULL, n, c, 1, 1, iw, ow, sh, sw, dh, dw);
    for (size_t oy = 0; oy < oh; oy++) {
      tfrt_q_pointwise(&call, x, tfrt_q_pixel16, xq, oy * ow, (oy + 1) * ow);
      tfrt_act_pass(act, row, ow * n);
      tfrt_h_store(y + oy * ow * n, row, ow * n);
    }
    return;
  }
  const float x_scale = tfrt_q_image16(x, ih * iw * c, xq);
  if (x_scale != x_scale) { /* NaN or Inf in x: NaN outputs, never a finite guess */
    for (size_t i = 0; i < oh * ow * n; i++) y[i] = 0x7e00u;
    return;
  }
  const struct tfrt_q_call call =
      tfrt_q_call_of(w + w_offset, row, post, &x_scale, n, c, kh, kw, iw, ow, sh, sw, dh, dw);
  for (size_t oy = 0; oy < oh; oy++) {
    tfrt_q_range(call.wq, call.k4, xq, &call.g, oy * ow, (oy + 1) * ow, call.o);
    tfrt_act_pass(act, row, ow * n);
    tfrt_h_store(y + oy * ow * n, row, ow * n);
  }
}
#endif
