/* matmul_check.c - the int8 matmul of many streams (TFRT_MATMUL_FN, here b)
 * against the int8 matvec (TFRT_MATVEC_FN, a) row by row, on heap buffers
 * of exactly their size (tests/test_weights_int8.py builds it with
 * -fsanitize=address,undefined together with runtime_shim/tfrt_matvec.c):
 * every stream's outputs must be the matvec's, bit for bit, a stream with a
 * NaN input among them. Prints "ok", or the first stream that differs. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <math.h>
void a(const int8_t *w, size_t wo, const float *x, size_t xo, float *y, size_t yo, size_t n, size_t k);
void b(const int8_t *w, size_t wo, const float *x, size_t xo, float *y, size_t yo, size_t n, size_t k, size_t s);
static int check(size_t n, size_t k, size_t streams) {
  size_t T = n <= 16 ? 16 : 32, tiles = (n + T - 1) / T, k4 = (k + 3) / 4 * 4;
  size_t bytes = tiles * T * 4 + tiles * T * k4;
  int8_t *w = malloc(bytes);
  for (size_t i = 0; i < bytes; i++) w[i] = (int8_t)((i * 7919) % 255 - 127);
  float *sc = (float *)(void *)w; for (size_t i = 0; i < tiles * T; i++) sc[i] = 0.001f * (float)(i % 13);
  float *x = malloc(streams * k * 4), *y = malloc(streams * n * 4), *y1 = malloc(n * 4);
  for (size_t i = 0; i < streams * k; i++) x[i] = (float)((i * 31) % 97) * 0.03f - 1.4f;
  if (streams > 3) x[3 * k + 5] = NAN;
  b(w, 0, x, 0, y, 0, n, k, streams);
  int bad = 0;
  for (size_t s = 0; s < streams; s++) {
    a(w, 0, x + s * k, 0, y1, 0, n, k);
    if (memcmp(y1, y + s * n, n * 4)) { printf("stream %zu differs (n=%zu k=%zu S=%zu)\n", s, n, k, streams); bad = 1; }
  }
  free(w); free(x); free(y); free(y1);
  return bad;
}
int main(void) {
  /* (n, k, streams): more inputs than a hosted pass quantizes (2048), a
   * 16-lane tile, a group of 8 streams and one past it, one stream */
  int bad = check(100, 2100, 11) | check(12, 40, 3) | check(64, 576, 8) |
            check(2048, 576, 17) | check(33, 5, 1);
  printf(bad ? "FAIL\n" : "ok\n");
  return bad;
}
