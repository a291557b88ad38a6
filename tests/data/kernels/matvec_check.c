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

int main(void) {
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    m_kernel(cases[c].w, 0, cases[c].x, 0, y, 0, cases[c].n, cases[c].k);
    print_hex(y, cases[c].n);
  }
  semihost_puts("done\n");
  return 0;
}
