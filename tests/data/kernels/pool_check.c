/* pool_check.c - runtime_shim/tfrt_pool.h against a plain loop, on exactly
 * sized heap buffers (AddressSanitizer sees any read or write past them),
 * every mode, geometries with padding, partial vectors and a NaN tap.
 * Built with -DTFRT_POOL_FN=pool; prints "ok N" (N cases) or the first
 * difference (tests/test_pool_kernel.py). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void pool(const float *x, size_t x_offset, float *y, size_t y_offset, size_t ih, size_t iw,
          size_t c, size_t oh, size_t ow, size_t kh, size_t kw, size_t sh, size_t sw,
          size_t top, size_t left, size_t mode);

struct geometry {
  size_t ih, iw, c, kh, kw, sh, sw, top, left, oh, ow;
};

static const struct geometry CASES[] = {
    {9, 11, 64, 3, 3, 2, 2, 0, 1, 5, 6},   {7, 7, 40, 3, 3, 1, 1, 1, 1, 7, 7},
    {6, 10, 13, 2, 2, 2, 2, 0, 0, 3, 5},   {5, 5, 3, 5, 5, 1, 1, 2, 2, 5, 5},
    {1, 17, 7, 1, 3, 1, 2, 0, 1, 1, 9},    {4, 4, 1, 4, 4, 1, 1, 0, 0, 1, 1},
    {8, 8, 100, 3, 3, 3, 3, 0, 0, 3, 3},   {5, 6, 20, 3, 3, 2, 2, 2, 1, 3, 3},
    {3, 3, 36, 2, 2, 1, 1, 0, 0, 2, 2},
};

/* The plain loop: taps inside the image, row by row; a max passes NaN over. */
static float reference(const float *x, const struct geometry *g, size_t i, size_t j, size_t ch,
                       size_t mode) {
  float acc = mode == 0 ? -INFINITY : 0.0f;
  size_t inside = 0;
  for (size_t a = 0; a < g->kh; a++) {
    long h = (long)(i * g->sh + a) - (long)g->top;
    for (size_t b = 0; b < g->kw; b++) {
      long w = (long)(j * g->sw + b) - (long)g->left;
      if (h < 0 || w < 0 || h >= (long)g->ih || w >= (long)g->iw) continue;
      float v = x[((size_t)h * g->iw + (size_t)w) * g->c + ch];
      acc = mode == 0 ? (v > acc ? v : acc) : acc + v;
      inside++;
    }
  }
  if (mode == 2) return acc / (float)inside;
  if (mode == 3) return acc / (float)(g->kh * g->kw);
  return acc;
}

static int same(float a, float b) { return (isnan(a) && isnan(b)) || memcmp(&a, &b, 4) == 0; }

int main(void) {
  int cases = 0;
  srand(1);
  for (size_t k = 0; k < sizeof CASES / sizeof CASES[0]; k++) {
    const struct geometry *g = &CASES[k];
    size_t nx = g->ih * g->iw * g->c, ny = g->oh * g->ow * g->c;
    float *x = malloc(nx * sizeof *x), *y = malloc(ny * sizeof *y);
    if (!x || !y) return 2;
    for (size_t e = 0; e < nx; e++) x[e] = (float)rand() / (float)RAND_MAX - 0.5f;
    x[nx / 2] = NAN;
    for (size_t mode = 0; mode < 4; mode++, cases++) {
      pool(x, 0, y, 0, g->ih, g->iw, g->c, g->oh, g->ow, g->kh, g->kw, g->sh, g->sw, g->top,
           g->left, mode);
      for (size_t i = 0; i < g->oh; i++)
        for (size_t j = 0; j < g->ow; j++)
          for (size_t ch = 0; ch < g->c; ch++) {
            float want = reference(x, g, i, j, ch, mode), got = y[(i * g->ow + j) * g->c + ch];
            if (!same(got, want)) {
              printf("case %zu mode %zu at (%zu, %zu, %zu): %g, want %g\n", k, mode, i, j, ch,
                     (double)got, (double)want);
              return 1;
            }
          }
    }
    free(x);
    free(y);
  }
  printf("ok %d\n", cases);
  return 0;
}
