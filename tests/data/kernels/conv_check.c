/* conv_check.c - tfaot's convolution kernels against a plain loop, on heap
 * buffers of exactly the size each call may touch, so that AddressSanitizer
 * catches any read or write outside them (tests/test_conv_kernels.py builds
 * it with -fsanitize=address,undefined together with runtime_shim/tfrt_matvec.c).
 * Each geometry runs with an epilogue (a bias and a clamp, as the build
 * folds a bias, a batch norm and a ReLU6 into the kernel; a swish or hard
 * swish after it, by the act kernel, in two geometries of three), the depthwise
 * ones also with zero padding the kernel skips. Prints "ok N" after N
 * geometries, or the first mismatch. Also runs bare metal (a Cortex-M under
 * qemu-system-arm, with the example firmware's start-up): there the buffers
 * come from a static pool and the text goes out by semihosting. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#define CHECK_POOL_BYTES (640 * 1024)
#include "check_platform.h"

void conv(const float *w, size_t w_offset, const float *x, size_t x_offset, float *y,
          size_t y_offset, const float *post, size_t n, size_t c, size_t kh, size_t kw,
          size_t iw, size_t oh, size_t ow, size_t sh, size_t sw, size_t dh, size_t dw);
void dwconv(const float *w, size_t w_offset, const float *x, size_t x_offset, float *y,
            size_t y_offset, const float *post, size_t n, size_t c, size_t kh, size_t kw,
            size_t ih, size_t iw, size_t top, size_t left, size_t oh, size_t ow, size_t sh,
            size_t sw, size_t dh, size_t dw);
void act(float *y, size_t y_offset, size_t count, size_t act);

/* packed lanes per tile, SMALL_TILE for a layer of at most that many
 * outputs; filters of at most DOT_ROWS outputs are stored one after
 * another (tile 1: tfrt_matvec.c TFRT_MATVEC_DOT_ROWS) */
enum { TILE = 32, SMALL_TILE = 16, DOT_ROWS = 4 };

/* e^z for the reference (no libm on bare metal): (e^(z/64))^64, the
 * series to 20 terms; relative error about 1e-12 for |z| < 100 */
static double ref_exp(double z) {
  double term = 1, sum = 1;
  for (int i = 1; i < 20; i++) term *= z / 64 / i, sum += term;
  for (int i = 0; i < 6; i++) sum *= sum;
  return sum;
}

/* the kernels' activations (post[2]): none, swish, hard swish */
static double ref_act(int act, double v) {
  if (act == 1) return v / (1 + ref_exp(-v));
  if (act == 2) return v * (v + 3 < 0 ? 0 : v + 3 > 6 ? 6 : v + 3) / 6;
  return v;
}

static float value(unsigned *seed) {
  *seed = *seed * 1103515245u + 12345u;
  return (float)((*seed >> 8) & 0xffff) / 65536.0f - 0.5f;
}

/* One geometry: n outputs of c channels, a kh x kw filter over an ih x iw
 * image padded by pad = {top, bottom, left, right} (depthwise only: the
 * conv kernel takes a padded image), strides, dilations; depthwise when
 * mult > 0 (n = c * mult). Returns 0 if equal. */
static int check(size_t n, size_t c, size_t kh, size_t kw, size_t ih, size_t iw,
                 const size_t pad[4], size_t sh, size_t sw, size_t dh, size_t dw, size_t mult) {
  const size_t ph = ih + pad[0] + pad[1], pw = iw + pad[2] + pad[3];
  const size_t oh = (ph - dh * (kh - 1) - 1) / sh + 1, ow = (pw - dw * (kw - 1) - 1) / sw + 1;
  const size_t groups = mult ? c : 1, cg = c / groups, k = kh * kw * cg;
  const size_t lanes = n <= DOT_ROWS ? 1 : n <= SMALL_TILE ? SMALL_TILE : TILE;
  const size_t tiles = (n + TILE - 1) / TILE;
  const size_t wsize = mult ? kh * kw * n : (n + lanes - 1) / lanes * lanes * k;
  float *filters = malloc(kh * kw * cg * n * sizeof(float)); /* [kh][kw][cg][n] */
  float *w = calloc(wsize, sizeof(float)), *x = malloc(ih * iw * c * sizeof(float));
  float *y = malloc(oh * ow * n * sizeof(float));
  float *post = calloc(4 + tiles * TILE, sizeof(float)); /* [lo, hi, act, 0, bias] */
  unsigned seed = (unsigned)(n * 31 + c * 7 + kh + pad[2]);
  for (size_t i = 0; i < kh * kw * cg * n; i++) filters[i] = value(&seed);
  for (size_t i = 0; i < ih * iw * c; i++) x[i] = value(&seed);
  for (size_t o = 0; o < n; o++) post[4 + o] = value(&seed);
  post[0] = n % 2 ? 0.0f : -INFINITY; /* ReLU, ReLU6 or no clamp */
  post[1] = n % 3 ? 0.4f : INFINITY;
  const int activation = (int)((c + kw) % 3);
  post[2] = (float)activation;
  for (size_t tap = 0; tap < kh * kw * cg; tap++)
    for (size_t o = 0; o < n; o++)
      w[mult ? tap * n + o : (o / lanes) * k * lanes + tap * lanes + o % lanes] = filters[tap * n + o];
  if (mult)
    dwconv(w, 0, x, 0, y, 0, post, n, c, kh, kw, ih, iw, pad[0], pad[2], oh, ow, sh, sw, dh, dw);
  else
    conv(w, 0, x, 0, y, 0, post, n, c, kh, kw, iw, oh, ow, sh, sw, dh, dw);
  if (activation) act(y, 0, oh * ow * n, (size_t)activation); /* as the dispatch calls it */
  int bad = 0;
  for (size_t oy = 0; oy < oh && !bad; oy++)
    for (size_t ox = 0; ox < ow && !bad; ox++)
      for (size_t o = 0; o < n && !bad; o++) {
        double sum = post[4 + o];
        const size_t g = o / (n / groups);
        for (size_t i = 0; i < kh; i++)
          for (size_t j = 0; j < kw; j++)
            for (size_t ch = 0; ch < cg; ch++) {
              const long r = (long)(oy * sh + i * dh) - (long)pad[0];
              const long q = (long)(ox * sw + j * dw) - (long)pad[2];
              if (r >= 0 && r < (long)ih && q >= 0 && q < (long)iw)
                sum += (double)filters[((i * kw + j) * cg + ch) * n + o] *
                       x[((size_t)r * iw + (size_t)q) * c + g * cg + ch];
            }
        sum = ref_act(activation, sum < post[0] ? post[0] : sum > post[1] ? post[1] : sum);
        const float got = y[(oy * ow + ox) * n + o];
        if (!(got - sum <= 1e-4 && sum - got <= 1e-4)) {
          say("mismatch at output ", (oy * ow + ox) * n + o);
          bad = 1;
        }
      }
  free(filters), free(w), free(x), free(y), free(post);
  FREE_ALL();
  return bad;
}

int main(void) {
  static const size_t cases[][15] = {
      /* n, c, kh, kw, ih, iw, top, bottom, left, right, sh, sw, dh, dw,
       * depth multiplier (0: not depthwise, no padding) */
      {30, 28, 10, 4, 10, 18, 0, 0, 0, 0, 2, 1, 1, 1, 0},
      {16, 30, 5, 3, 5, 15, 0, 0, 0, 0, 1, 1, 1, 1, 0},
      {28, 1, 10, 4, 11, 40, 0, 0, 0, 0, 1, 1, 1, 1, 0},
      {65, 3, 3, 3, 9, 9, 0, 0, 0, 0, 2, 2, 2, 1, 0},
      {7, 5, 1, 1, 4, 6, 0, 0, 0, 0, 1, 1, 1, 1, 0},
      {8, 4, 3, 3, 7, 9, 0, 0, 0, 0, 1, 2, 1, 2, 0},
      {12, 6, 1, 5, 1, 17, 0, 0, 0, 0, 1, 1, 1, 3, 0},
      {30, 28, 10, 4, 10, 7, 0, 0, 0, 0, 2, 1, 1, 1, 0},
      {64, 64, 1, 1, 6, 19, 0, 0, 0, 0, 1, 1, 1, 1, 0}, /* pointwise: blocks of 12 */
      {20, 8, 2, 2, 3, 6, 0, 0, 0, 0, 1, 1, 1, 1, 0},   /* 10 positions: 8, then 4 */
      {16, 4, 1, 1, 1, 3, 0, 0, 0, 0, 1, 1, 1, 1, 0},   /* 3: fewer than a block */
      /* a last tile of 16 lanes or fewer (AVX-512: blocks of 16 positions) */
      {8, 24, 1, 1, 7, 7, 0, 0, 0, 0, 1, 1, 1, 1, 0},   /* 49: 3 blocks, 4 moved back */
      {48, 6, 3, 3, 8, 7, 0, 0, 0, 0, 1, 1, 1, 1, 0},   /* 32 + 16 lanes, 30: 16 + 16 */
      /* two tiles at once (AVX-512): blocks of 6, and a rest of 1 or 5 */
      {64, 16, 1, 1, 1, 13, 0, 0, 0, 0, 1, 1, 1, 1, 0},
      {96, 8, 3, 3, 3, 19, 0, 0, 0, 0, 1, 1, 1, 1, 0},
      {64, 64, 3, 3, 3, 21, 0, 0, 0, 0, 1, 1, 1, 1, 1},
      {70, 70, 3, 1, 5, 4, 0, 0, 0, 0, 1, 1, 2, 1, 1},
      {10, 5, 2, 3, 6, 7, 0, 0, 0, 0, 2, 2, 1, 1, 2},
      {6, 2, 1, 4, 1, 12, 0, 0, 0, 0, 1, 1, 1, 2, 3},
      /* fewer channels than a vector (AVX-512: masked), rows of 7 and 2 */
      {12, 12, 3, 3, 4, 9, 0, 0, 0, 0, 1, 1, 1, 1, 1},
      {20, 20, 2, 2, 3, 3, 0, 0, 0, 0, 1, 1, 1, 1, 1},
      /* depthwise over zero padding the kernel skips: DS-CNN's (width),
       * 'same' on every side with 64 + 32 channels, strided, dilated, a row
       * narrower than a block, positions wholly over the padding, a depth
       * multiplier, fewer channels than a vector */
      {64, 64, 3, 3, 5, 19, 0, 0, 1, 1, 1, 1, 1, 1, 1},
      {96, 96, 3, 3, 6, 9, 1, 1, 1, 1, 1, 1, 1, 1, 1},
      {40, 40, 3, 3, 7, 10, 1, 1, 1, 1, 2, 2, 1, 1, 1},
      {20, 20, 3, 3, 5, 11, 2, 2, 2, 2, 1, 1, 2, 2, 1},
      {64, 64, 3, 3, 3, 2, 1, 1, 1, 1, 1, 1, 1, 1, 1},
      {33, 33, 3, 3, 2, 2, 3, 3, 4, 3, 1, 1, 1, 1, 1},
      {12, 6, 3, 3, 4, 8, 1, 1, 1, 1, 1, 1, 1, 1, 2},
      {12, 12, 5, 5, 6, 9, 2, 2, 2, 2, 1, 1, 1, 1, 1},
      /* depthwise, 3 columns at stride 1 (AVX-512: input columns shared by
       * a block's positions): kws_streaming's 10x3 over 300 channels (a
       * masked group of 12), a row of one block with padding on both
       * sides, columns wholly over the padding on both sides */
      {300, 300, 10, 3, 11, 8, 0, 0, 0, 0, 1, 1, 1, 1, 1},
      {48, 48, 3, 3, 4, 4, 1, 1, 1, 1, 2, 1, 1, 1, 1},
      {32, 32, 3, 3, 4, 2, 0, 0, 2, 2, 1, 1, 1, 1, 1},
      /* (a scalar FPU's blocks: padding of 1 on one side only) */
      {24, 24, 3, 3, 4, 13, 0, 0, 1, 0, 1, 1, 1, 1, 1},
      {24, 24, 3, 3, 4, 9, 0, 0, 0, 1, 1, 1, 1, 1, 1},
      /* one position (x86-64, aarch64: two sums a lane): a Conv1D's frame
       * of 32 + 8 outputs; a 2-D patch, dilated in width, of 33 */
      {40, 64, 1, 3, 1, 3, 0, 0, 0, 0, 1, 1, 1, 1, 0},
      {33, 20, 3, 3, 3, 5, 0, 0, 0, 0, 1, 2, 1, 2, 0},
      /* at most DOT_ROWS outputs, one filter after another: a Conv1D(1, 9)
       * over 40 channels at 3 positions, 3 outputs of a strided and dilated
       * 2-D patch, a pointwise 4 of 5 channels, 2 of one input channel */
      {1, 40, 9, 1, 11, 1, 0, 0, 0, 0, 1, 1, 1, 1, 0},
      {3, 6, 3, 3, 9, 8, 0, 0, 0, 0, 2, 1, 1, 2, 0},
      {4, 5, 1, 1, 4, 6, 0, 0, 0, 0, 1, 1, 1, 1, 0},
      {2, 1, 10, 4, 12, 10, 0, 0, 0, 0, 2, 2, 1, 1, 0},
#ifndef CHECK_BARE_METAL /* (over 1 MB of weights: more than the pool) */
      /* few positions and weights no L2 holds (AVX2: all positions over a
       * chunk of rows at a time): 10 positions (a last block of 1) and
       * tiles of 32, 32 and 8 lanes; 4 positions, dilated and strided,
       * tiles of 32 and 24 lanes */
      {72, 512, 3, 3, 4, 7, 0, 0, 0, 0, 1, 1, 1, 1, 0},
      {56, 640, 3, 3, 5, 6, 0, 0, 0, 0, 2, 1, 1, 2, 0},
#endif
  };
  const size_t count = sizeof cases / sizeof cases[0];
  for (size_t i = 0; i < count; i++) {
    const size_t *g = cases[i];
    if (check(g[0], g[1], g[2], g[3], g[4], g[5], g + 6, g[10], g[11], g[12], g[13], g[14])) {
      say("in geometry ", i);
      return 1;
    }
  }
  say("ok ", count);
  return 0;
}
