/* resize_check.c - runtime_shim/tfrt_resize.h against a plain loop, on
 * exactly sized heap buffers (AddressSanitizer sees any read or write past
 * them): both axes, upsampling and downsampling taps, channel counts that
 * leave partial vectors, offsets into the buffers. Built with
 * -DTFRT_RESIZE_FN=resize; prints "ok N" (N cases) or the first difference
 * (tests/test_resize_kernel.py). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void resize(const float *taps, size_t taps_offset, const float *x, size_t x_offset, float *y,
            size_t y_offset, size_t h, size_t w, size_t c, size_t axis, size_t out);

struct geometry {
  size_t h, w, c, axis, out;
};

static const struct geometry CASES[] = {
    {5, 7, 16, 2, 14}, {5, 7, 16, 1, 10}, {6, 9, 3, 2, 4},  {6, 9, 3, 1, 13},
    {1, 1, 1, 2, 5},   {4, 3, 37, 1, 8},  {3, 8, 8, 2, 24}, {7, 2, 1, 1, 3},
};

/* Half-pixel taps of one axis: the lower and upper input index and the
 * lerp of each output index (TensorFlow's rule, as bilinear_resize.py). */
static void make_taps(size_t in, size_t out, float *taps) {
  const float scale = (float)in / (float)out;
  for (size_t i = 0; i < out; i++) {
    const float at = ((float)i + 0.5f) * scale - 0.5f, floor_at = floorf(at);
    const float lower = floor_at < 0 ? 0 : floor_at;
    const float upper = ceilf(at) > (float)(in - 1) ? (float)(in - 1) : ceilf(at);
    taps[i] = lower, taps[out + i] = upper, taps[2 * out + i] = at - floor_at;
  }
}

static int check(const struct geometry *g) {
  const size_t in = g->axis == 1 ? g->h : g->w, x_size = g->h * g->w * g->c;
  const size_t y_size = x_size / in * g->out;
  /* one element before each buffer's data: the offsets */
  float *taps = malloc((1 + 3 * g->out) * sizeof(float));
  float *x = malloc((1 + x_size) * sizeof(float)), *y = malloc((1 + y_size) * sizeof(float));
  make_taps(in, g->out, taps + 1);
  for (size_t i = 0; i <= x_size; i++) x[i] = (float)((i * 7919u) % 1000u) / 250.0f - 2.0f;
  y[0] = 7.0f;
  resize(taps, 1, x, 1, y, 1, g->h, g->w, g->c, g->axis, g->out);
  int bad = y[0] != 7.0f;
  const size_t rows = g->axis == 1 ? g->out : g->h, cols = g->axis == 1 ? g->w : g->out;
  for (size_t r = 0; r < rows && !bad; r++)
    for (size_t q = 0; q < cols && !bad; q++)
      for (size_t ch = 0; ch < g->c && !bad; ch++) {
        const size_t i = g->axis == 1 ? r : q;
        const size_t lo_at = (size_t)taps[1 + i], hi_at = (size_t)taps[1 + g->out + i];
        const size_t lo_r = g->axis == 1 ? lo_at : r, hi_r = g->axis == 1 ? hi_at : r;
        const size_t lo_q = g->axis == 1 ? q : lo_at, hi_q = g->axis == 1 ? q : hi_at;
        const float lo = x[1 + (lo_r * g->w + lo_q) * g->c + ch];
        const float hi = x[1 + (hi_r * g->w + hi_q) * g->c + ch];
        const float step = (hi - lo) * taps[1 + 2 * g->out + i]; /* (no FMA: clang's
                                                                     -ffp-contract=on) */
        const float want = lo + step;
        const float got = y[1 + (r * cols + q) * g->c + ch];
        if (memcmp(&got, &want, sizeof got) != 0) {
          printf("case h=%zu w=%zu c=%zu axis=%zu out=%zu at (%zu, %zu, %zu): %g, want %g\n",
                 g->h, g->w, g->c, g->axis, g->out, r, q, ch, got, want);
          bad = 1;
        }
      }
  free(taps), free(x), free(y);
  return bad;
}

int main(void) {
  const size_t cases = sizeof CASES / sizeof CASES[0];
  for (size_t k = 0; k < cases; k++)
    if (check(&CASES[k])) return 1;
  printf("ok %zu\n", cases);
  return 0;
}
