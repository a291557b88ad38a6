/* half_check.c - the convolutions on f16 images (runtime_shim/tfrt_half.h,
 * --intermediates=f16) and the f16 conversions they use
 * (tfrt_half_convert.h), checked by tests/test_half_images.py:
 * - every half converts to its exact value and back; every midpoint of two
 *   neighbouring halves, and the floats next to it, round to nearest even
 *   (past 65504: to Inf);
 * - each case of half_cases.h (written by the test: geometries and the
 *   scratch sizes compiler/lower/microkernel.py gives them) through
 *   conv16/dwconv16 against the f32 kernels on the same image, their
 *   outputs rounded to halves: equal within one unit of the last place;
 *   depthwise ones with the strip and without it (the scalar FPU's block
 *   or one channel at a time), pointwise ones also in place.
 * Hosted, every buffer a kernel touches is a heap block of exactly its size
 * (AddressSanitizer); bare metal (qemu-system-arm) from a static pool,
 * printing by semihosting. Prints "ok N" after N cases. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "half_cases.h"
#include "tfrt_half_convert.h"

#define CHECK_POOL_BYTES (256 * 1024)
#include "check_platform.h"

void conv(const float *w, size_t w_offset, const float *x, size_t x_offset, float *y,
          size_t y_offset, const float *post, size_t n, size_t c, size_t kh, size_t kw,
          size_t iw, size_t oh, size_t ow, size_t sh, size_t sw, size_t dh, size_t dw);
void dwconv(const float *w, size_t w_offset, const float *x, size_t x_offset, float *y,
            size_t y_offset, const float *post, size_t n, size_t c, size_t kh, size_t kw,
            size_t ih, size_t iw, size_t top, size_t left, size_t oh, size_t ow, size_t sh,
            size_t sw, size_t dh, size_t dw);
void act(float *y, size_t y_offset, size_t count, size_t act);
void conv16(const float *w, size_t w_offset, const uint16_t *x, size_t x_offset, uint16_t *y,
            size_t y_offset, const float *post, uint8_t *s, size_t s_offset, size_t n,
            size_t c, size_t kh, size_t kw, size_t iw, size_t oh, size_t ow, size_t sh,
            size_t sw, size_t dh, size_t dw);
void dwconv16(const float *w, size_t w_offset, const uint16_t *x, size_t x_offset, uint16_t *y,
              size_t y_offset, const float *post, uint8_t *s, size_t s_offset, size_t n,
              size_t c, size_t kh, size_t kw, size_t ih, size_t iw, size_t top, size_t left,
              size_t oh, size_t ow, size_t sh, size_t sw, size_t dh, size_t dw, size_t strip);

static float bits_float(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}
static uint32_t float_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}

/* The value of the finite half h, from its fields (independent of the
 * conversions under test): 65536 for 0x7c00, the rounding limit past 65504. */
static float half_value(uint32_t h) {
  const uint32_t e = (h >> 10) & 31u, m = h & 0x3ffu;
  float v = e ? (float)(1024u + m) : (float)m; /* times 2^(e-25), or 2^-24 */
  for (uint32_t k = e ? e : 1; k < 25; k++) v *= 0.5f;
  for (uint32_t k = 25; k < e; k++) v *= 2.0f;
  return h & 0x8000u ? -v : v;
}

/* Returns 0 if every conversion is exact or rounds to nearest even. */
static int check_conversions(void) {
  for (uint32_t h = 0; h < 0x10000u; h++) {
    const uint32_t e = (h >> 10) & 31u;
    const float f = tfrt_h2f((uint16_t)h);
    if (e == 31) { /* Inf stays Inf, NaN stays NaN */
      const int nan = (h & 0x3ffu) != 0;
      if ((nan ? f == f : f != bits_float((h & 0x8000u ? 0x80000000u : 0) | 0x7f800000u)) ||
          (tfrt_f2h(f) & 0x7c00u) != 0x7c00u || ((tfrt_f2h(f) & 0x3ffu) != 0) != nan) {
        say("Inf or NaN half ", h);
        return 1;
      }
      continue;
    }
    if (float_bits(f) != float_bits(half_value(h)) || tfrt_f2h(f) != h) {
      say("half ", h);
      return 1;
    }
    const struct tfrt_f2 two = tfrt_h2f2(h | (h ^ 0x8001u) << 16);
    if (float_bits(two.lo) != float_bits(f) ||
        tfrt_f2h2(two.lo, two.hi) != (h | (h ^ 0x8001u) << 16)) {
      say("half pair ", h);
      return 1;
    }
    /* the midpoint of h and the next half up in magnitude (past 65504: Inf,
     * 65536 as half_value has it), and the floats next to it */
    const uint32_t up = h + 1u;
    const float mid = (half_value(h) + half_value(up)) / 2;
    const uint16_t want[3] = {(uint16_t)h, (uint16_t)(h & 1u ? up : h), (uint16_t)up};
    const float probes[3] = {bits_float(float_bits(mid) - 1u), mid,
                             bits_float(float_bits(mid) + 1u)};
    for (int k = 0; k < 3; k++)
      if (tfrt_f2h(probes[k]) != want[k]) {
        say("rounding near half ", h);
        return 1;
      }
  }
  return 0;
}

static float value(unsigned *seed) {
  *seed = *seed * 1103515245u + 12345u;
  return (float)((*seed >> 8) & 0xffff) / 65536.0f - 0.5f;
}

static uint16_t *halves(size_t count, unsigned *seed) {
  uint16_t *h = malloc(count * 2);
  for (size_t i = 0; i < count; i++) h[i] = tfrt_f2h(4 * value(seed));
  return h;
}

/* Whether the halves got and want are within one unit of the last place. */
static int near(uint16_t got, uint16_t want) {
  const float a = tfrt_h2f(got), b = tfrt_h2f(want), d = a > b ? a - b : b - a;
  const float m = (a < 0 ? -a : a) > (b < 0 ? -b : b) ? (a < 0 ? -a : a) : (b < 0 ? -b : b);
  return d <= m * 0x1p-10f + 0x1p-24f;
}

static int compare(const uint16_t *got, const float *want, size_t count, const char *what) {
  for (size_t i = 0; i < count; i++)
    if (!near(got[i], tfrt_f2h(want[i]))) {
      say(what, i);
      return 1;
    }
  return 0;
}

/* One case; returns 0 if every run agrees with the f32 kernel. */
static int check(const struct half_case *k) {
  const size_t ph = k->ih + k->top + k->bottom, pw = k->iw + k->left + k->right;
  const size_t oh = (ph - k->dh * (k->kh - 1) - 1) / k->sh + 1;
  const size_t ow = (pw - k->dw * (k->kw - 1) - 1) / k->sw + 1;
  const size_t n = k->n, c = k->c, tiles = (n + 31) / 32;
  const size_t taps = k->kh * k->kw, wsize = k->depthwise ? taps * n : tiles * 32 * taps * c;
  /* (the depthwise image is unpadded: the kernel skips the padding) */
  const size_t ih = k->depthwise ? k->ih : ph, iw = k->depthwise ? k->iw : pw;
  unsigned seed = (unsigned)(n * 17 + c * 5 + k->kh);
  float *w = malloc(wsize * 4), *post = malloc((4 + tiles * 32) * 4);
  for (size_t i = 0; i < wsize; i++) w[i] = value(&seed) / 4;
  for (size_t i = 0; i < 4 + tiles * 32; i++) post[i] = value(&seed);
  post[0] = n % 2 ? 0.0f : -__builtin_inff(); /* [lo, hi, act, 0, bias] */
  post[1] = n % 3 ? 0.4f : __builtin_inff();
  post[2] = (float)((c + k->kw) % 3), post[3] = 0; /* none, swish, hard swish */
  uint16_t *x = halves(ih * iw * c, &seed), *y = malloc(oh * ow * n * 2);
  float *xf = malloc(ih * iw * c * 4), *want = malloc(oh * ow * n * 4);
  uint8_t *scratch = malloc(k->scratch_bytes);
  for (size_t i = 0; i < ih * iw * c; i++) xf[i] = tfrt_h2f(x[i]);
  int bad = 0;
  if (k->depthwise) {
    dwconv(w, 0, xf, 0, want, 0, post, n, c, k->kh, k->kw, ih, iw, k->top, k->left, oh, ow,
           k->sh, k->sw, k->dh, k->dw);
    act(want, 0, oh * ow * n, (size_t)post[2]); /* (the f16 kernels apply it themselves) */
    dwconv16(w, 0, x, 0, y, 0, post, scratch, 0, n, c, k->kh, k->kw, ih, iw, k->top, k->left,
             oh, ow, k->sh, k->sw, k->dh, k->dw, k->strip);
    bad = compare(y, want, oh * ow * n, "depthwise output ");
    if (!bad) { /* without a strip */
      dwconv16(w, 0, x, 0, y, 0, post, scratch, 0, n, c, k->kh, k->kw, ih, iw, k->top, k->left,
               oh, ow, k->sh, k->sw, k->dh, k->dw, 0);
      bad = compare(y, want, oh * ow * n, "depthwise output without a strip ");
    }
  } else {
    conv(w, 0, xf, 0, want, 0, post, n, c, k->kh, k->kw, iw, oh, ow, k->sh, k->sw, k->dh, k->dw);
    act(want, 0, oh * ow * n, (size_t)post[2]);
    conv16(w, 0, x, 0, y, 0, post, scratch, 0, n, c, k->kh, k->kw, iw, oh, ow, k->sh, k->sw,
           k->dh, k->dw);
    bad = compare(y, want, oh * ow * n, "output ");
    if (!bad && oh * ow * n == ih * iw * c && k->kh == 1) { /* in place */
      conv16(w, 0, x, 0, x, 0, post, scratch, 0, n, c, k->kh, k->kw, iw, oh, ow, k->sh, k->sw,
             k->dh, k->dw);
      bad = compare(x, want, oh * ow * n, "in-place output ");
    }
  }
  free(w), free(post), free(x), free(y), free(xf), free(want), free(scratch);
  FREE_ALL();
  return bad;
}

int main(void) {
  if (check_conversions()) return 1;
  const size_t count = sizeof cases / sizeof cases[0];
  for (size_t i = 0; i < count; i++)
    if (check(&cases[i])) {
      say("in case ", i);
      return 1;
    }
  say("ok ", count);
  return 0;
}
