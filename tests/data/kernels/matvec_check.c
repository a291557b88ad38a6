/* Check of a matvec micro-kernel on an emulated target
 * (tests/test_weights_int8.py): runs every case of matvec_cases.h (written
 * by the test: packed weights of type WEIGHT_T, inputs, sizes) through
 * m_kernel and prints each output as the hex of its float32 bits. Linux
 * (qemu-aarch64) prints with stdio, bare metal (qemu-system-arm) with
 * semihosting. */
#include <stddef.h>
#include <stdint.h>

#include "matvec_cases.h"
#if defined(__linux__)
#include <stdio.h>
static void semihost_puts(const char *s) { fputs(s, stdout); }
#else
#include "semihost.h"
#endif

void m_kernel(const WEIGHT_T *w, size_t w_offset, const float *x, size_t x_offset, float *y,
              size_t y_offset, size_t n, size_t k);

static float y[MAX_ROWS];

#include "print_hex.h"

#ifdef CHECK_MATMUL
/* With -DCHECK_MATMUL (and TFRT_MATMUL_FN=m_matmul): each case's input
 * also as three streams of one matmul call (x, x / 2 and -x), whose rows
 * must equal the matvec of each, bit for bit; "differs" if one does not. */
void m_matmul(const WEIGHT_T *w, size_t w_offset, const float *x, size_t x_offset, float *y,
              size_t y_offset, size_t n, size_t k, size_t streams);
static float xs[3 * MAX_K], ys[3 * MAX_ROWS], one[MAX_ROWS];

static int matmul_differs(size_t c) {
  const size_t n = cases[c].n, k = cases[c].k;
  for (size_t i = 0; i < k; i++) {
    xs[i] = cases[c].x[i];
    xs[k + i] = cases[c].x[i] * 0.5f;
    xs[2 * k + i] = -cases[c].x[i];
  }
  m_matmul(cases[c].w, 0, xs, 0, ys, 0, n, k, 3);
  for (size_t s = 0; s < 3; s++) {
    m_kernel(cases[c].w, 0, xs, s * k, one, 0, n, k);
    for (size_t i = 0; i < n; i++) {
      uint32_t a, b;
      __builtin_memcpy(&a, &one[i], 4);
      __builtin_memcpy(&b, &ys[s * n + i], 4);
      if (a != b) return 1;
    }
  }
  return 0;
}
#endif

int main(void) {
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    m_kernel(cases[c].w, 0, cases[c].x, 0, y, 0, cases[c].n, cases[c].k);
    print_hex(y, cases[c].n);
#ifdef CHECK_MATMUL
    if (matmul_differs(c)) semihost_puts("differs\n");
#endif
  }
  semihost_puts("done\n");
  return 0;
}
