/* tfrt_pool.h - tfaot's pooling kernel (included by tfrt_matvec.c).
 *
 * TFRT_POOL_FN(x, x_offset, y, y_offset, ih, iw, c, oh, ow, kh, kw, sh, sw,
 * top, left, mode): max or average pooling of one channels-last image x
 * [ih][iw][c] into y [oh][ow][c], window kh x kw, strides sh x sw, the
 * window of output (i, j) starting at row i * sh - top and column
 * j * sw - left (compiler/lower/pool_kernel.py). Taps outside the image are
 * skipped: they hold the reduction's neutral value (-inf for max, 0 for a
 * sum), as TensorFlow's 'same' pooling pads. mode (TFRT_POOL_*): the
 * maximum, the sum, the sum divided by the taps inside the image
 * (TensorFlow's average pooling) or by the whole window's kh * kw.
 *
 * IREE's code for a pooling window (a maximum of strided slices, or its own
 * reduce_window) ran 2-4.7x XNNPACK's time (a 3 x 3 max pool of stride 2 on
 * 112 x 112 x 64: 591 us against 127, with the copy of its padded input).
 * Here an output pixel's channels are TFRT_POOL_V vectors of accumulators,
 * in registers while the window's taps are read, stored once: 91 us. (The
 * same loops over plain arrays, or over the pixel's row of the output, ran
 * at 2-5x this: the compiler's maximum of arrays was scalar code, and a
 * store a tap bound the other.)
 */
#ifdef TFRT_POOL_FN

enum { TFRT_POOL_MAX = 0, TFRT_POOL_SUM = 1, TFRT_POOL_MEAN_INSIDE = 2, TFRT_POOL_MEAN_WINDOW = 3 };

void TFRT_POOL_FN(const float *x, size_t x_offset, float *y, size_t y_offset, size_t ih,
                  size_t iw, size_t c, size_t oh, size_t ow, size_t kh, size_t kw, size_t sh,
                  size_t sw, size_t top, size_t left, size_t mode);

/* One vector of channels (tfrt_pv) and its operations: the C compiler's
 * own code for a maximum of local arrays was scalar, with branches. The
 * maximum passes a NaN tap over, as TensorFlow's CPU MaxPool does: the
 * accumulator starts at -inf and takes a tap only where the tap is larger
 * (x86's max returns its second operand where one is NaN; Arm's maxnm the
 * number). Every path computes the same bits: the taps in the same order,
 * then an IEEE division (-DTFRT_POOL_SCALAR: the portable path, for tests). */
#if defined(TFRT_POOL_SCALAR)
#elif defined(__AVX__)
#include <immintrin.h>
typedef __m256 tfrt_pv;
#define TFRT_PV_LANES 8
#define tfrt_pv_load(p) _mm256_loadu_ps(p)
#define tfrt_pv_store(p, v) _mm256_storeu_ps(p, v)
#define tfrt_pv_splat(f) _mm256_set1_ps(f)
#define tfrt_pv_max(acc, v) _mm256_max_ps(v, acc)
#define tfrt_pv_add(acc, v) _mm256_add_ps(acc, v)
#define tfrt_pv_div(acc, d) _mm256_div_ps(acc, d)
#elif defined(__SSE2__)
#include <emmintrin.h>
typedef __m128 tfrt_pv;
#define TFRT_PV_LANES 4
#define tfrt_pv_load(p) _mm_loadu_ps(p)
#define tfrt_pv_store(p, v) _mm_storeu_ps(p, v)
#define tfrt_pv_splat(f) _mm_set1_ps(f)
#define tfrt_pv_max(acc, v) _mm_max_ps(v, acc)
#define tfrt_pv_add(acc, v) _mm_add_ps(acc, v)
#define tfrt_pv_div(acc, d) _mm_div_ps(acc, d)
#elif defined(__aarch64__) && defined(__ARM_NEON)
#include <arm_neon.h>
typedef float32x4_t tfrt_pv;
#define TFRT_PV_LANES 4
#define tfrt_pv_load(p) vld1q_f32(p)
#define tfrt_pv_store(p, v) vst1q_f32(p, v)
#define tfrt_pv_splat(f) vdupq_n_f32(f)
#define tfrt_pv_max(acc, v) vmaxnmq_f32(acc, v)
#define tfrt_pv_add(acc, v) vaddq_f32(acc, v)
#define tfrt_pv_div(acc, d) vdivq_f32(acc, d)
#endif
#if !defined(TFRT_PV_LANES)
typedef float tfrt_pv;
#define TFRT_PV_LANES 1
#define tfrt_pv_load(p) (*(p))
#define tfrt_pv_store(p, v) (*(p) = (v))
#define tfrt_pv_splat(f) (f)
#define tfrt_pv_max(acc, v) ((v) > (acc) ? (v) : (acc))
#define tfrt_pv_add(acc, v) ((acc) + (v))
#define tfrt_pv_div(acc, d) ((acc) / (d))
#endif

/* Vectors of channels a block keeps in registers over its window. */
#define TFRT_POOL_V 4

/* V vectors of channels of one output pixel, out, over the taps rows
 * [h0, h1) x columns [w0, w1) of x (inlined with V and is_max constants);
 * count: the divisor (0: none). */
static inline __attribute__((always_inline)) void tfrt_pool_vectors(
    const float *x, float *out, size_t iw, size_t c, size_t h0, size_t h1, size_t w0,
    size_t w1, size_t V, int is_max, float count) {
  tfrt_pv acc[TFRT_POOL_V];
  for (size_t v = 0; v < V; v++) acc[v] = tfrt_pv_splat(is_max ? -__builtin_inff() : 0.0f);
  for (size_t h = h0; h < h1; h++) {
    for (size_t w = w0; w < w1; w++) {
      const float *tap = x + (h * iw + w) * c;
      for (size_t v = 0; v < V; v++) {
        tfrt_pv t = tfrt_pv_load(tap + v * TFRT_PV_LANES);
        acc[v] = is_max ? tfrt_pv_max(acc[v], t) : tfrt_pv_add(acc[v], t);
      }
    }
  }
  for (size_t v = 0; v < V; v++) {
    tfrt_pv r = count != 0.0f ? tfrt_pv_div(acc[v], tfrt_pv_splat(count)) : acc[v];
    tfrt_pv_store(out + v * TFRT_PV_LANES, r);
  }
}

/* The last c % TFRT_PV_LANES channels of a pixel, one at a time. */
static void tfrt_pool_scalars(const float *x, float *out, size_t iw, size_t c, size_t n,
                              size_t h0, size_t h1, size_t w0, size_t w1, int is_max,
                              float count) {
  for (size_t j = 0; j < n; j++) {
    float acc = is_max ? -__builtin_inff() : 0.0f;
    for (size_t h = h0; h < h1; h++) {
      for (size_t w = w0; w < w1; w++) {
        float t = x[(h * iw + w) * c + j];
        acc = is_max ? (t > acc ? t : acc) : acc + t;
      }
    }
    out[j] = count != 0.0f ? acc / count : acc;
  }
}

/* The taps [lo, hi) inside [0, size) of a window of k whose first tap is
 * at - pad (at and pad apart: at - pad may be negative). */
static inline void tfrt_pool_range(size_t at, size_t pad, size_t k, size_t size, size_t *lo,
                                   size_t *hi) {
  *lo = at > pad ? at - pad : 0;
  *hi = at + k > pad ? at + k - pad : 0;
  if (*hi > size) *hi = size;
  if (*lo > *hi) *lo = *hi;
}

#define TFRT_POOL_PIXEL(is_max)                                                             \
  do {                                                                                     \
    size_t j = 0;                                                                          \
    for (; j + TFRT_POOL_V * TFRT_PV_LANES <= c; j += TFRT_POOL_V * TFRT_PV_LANES)         \
      tfrt_pool_vectors(x + j, out + j, iw, c, h0, h1, w0, w1, TFRT_POOL_V, is_max, count); \
    for (; j + TFRT_PV_LANES <= c; j += TFRT_PV_LANES)                                     \
      tfrt_pool_vectors(x + j, out + j, iw, c, h0, h1, w0, w1, 1, is_max, count);          \
    tfrt_pool_scalars(x + j, out + j, iw, c, c - j, h0, h1, w0, w1, is_max, count);        \
  } while (0)

static void tfrt_pool_pixel(const float *x, float *out, size_t iw, size_t c, size_t h0,
                            size_t h1, size_t w0, size_t w1, int is_max, float count) {
  if (is_max)
    TFRT_POOL_PIXEL(1);
  else
    TFRT_POOL_PIXEL(0);
}

void TFRT_POOL_FN(const float *x, size_t x_offset, float *y, size_t y_offset, size_t ih,
                  size_t iw, size_t c, size_t oh, size_t ow, size_t kh, size_t kw, size_t sh,
                  size_t sw, size_t top, size_t left, size_t mode) {
  x += x_offset;
  y += y_offset;
  int is_max = mode == TFRT_POOL_MAX;
  for (size_t i = 0; i < oh; i++) {
    size_t h0, h1;
    tfrt_pool_range(i * sh, top, kh, ih, &h0, &h1);
    for (size_t j = 0; j < ow; j++) {
      size_t w0, w1;
      tfrt_pool_range(j * sw, left, kw, iw, &w0, &w1);
      float count = mode == TFRT_POOL_MEAN_INSIDE   ? (float)((h1 - h0) * (w1 - w0))
                    : mode == TFRT_POOL_MEAN_WINDOW ? (float)(kh * kw)
                                                    : 0.0f;
      /* no tap inside (padding past a window): 0 / 0, as TensorFlow divides */
      if (mode == TFRT_POOL_MEAN_INSIDE && count == 0.0f) count = __builtin_nanf("");
      tfrt_pool_pixel(x, y + (i * ow + j) * c, iw, c, h0, h1, w0, w1, is_max, count);
    }
  }
}

#endif
