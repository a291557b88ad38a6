/* Check of the int8 convolution kernel (tests/test_qconv.py): runs every
 * case of qconv_cases.h (written by the test: the packed blob, the padded
 * image, the epilogue and the geometry) through q_kernel and prints each
 * output as the hex of its float32 bits. Hosted, each buffer the kernel
 * touches is a heap copy of exactly its size (the scratch: the size the
 * build gives it, scratch from qconv_cases.h), so that
 * AddressSanitizer catches a read or write outside it; Linux prints with
 * stdio, bare metal (qemu-system-arm) with semihosting, from static
 * buffers. */
#include <stddef.h>
#include <stdint.h>

#include "qconv_cases.h"
#if defined(__linux__)
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
static void semihost_puts(const char *s) { fputs(s, stdout); }
#else
#include "semihost.h"
#endif

void q_kernel(const int8_t *w, size_t w_offset, const float *x, size_t x_offset, float *y,
              size_t y_offset, const float *post, int8_t *xq, size_t xq_offset, size_t n,
              size_t c, size_t kh, size_t kw, size_t ih, size_t iw, size_t oh, size_t ow,
              size_t sh, size_t sw, size_t dh, size_t dw);


#include "print_hex.h"

#ifdef Q16
/* With -DQ16: q16_kernel, the same convolution on the image as halves
 * (--intermediates=f16), its outputs printed as f32 after them; the
 * scratch is the size the build gives it (scratch16). */
#include "tfrt_half_convert.h"
void q16_kernel(const int8_t *w, size_t w_offset, const uint16_t *x, size_t x_offset,
                uint16_t *y, size_t y_offset, const float *post, uint8_t *s, size_t s_offset,
                size_t n, size_t c, size_t kh, size_t kw, size_t ih, size_t iw, size_t oh,
                size_t ow, size_t sh, size_t sw, size_t dh, size_t dw);
#endif

#if defined(__linux__)
static void *copy_of(const void *from, size_t bytes) {
  void *to = malloc(bytes);
  memcpy(to, from, bytes);
  return to;
}

static void run(const struct qconv_case *k) {
  const size_t image = k->ih * k->iw * k->c, outputs = k->oh * k->ow * k->n;
  int8_t *w = copy_of(k->w, k->w_bytes);
  float *x = copy_of(k->x, image * sizeof(float)), *post = copy_of(k->post, k->post_count * 4);
  float *y = malloc(outputs * sizeof(float));
  int8_t *xq = malloc(k->scratch);
  q_kernel(w, 0, x, 0, y, 0, post, xq, 0, k->n, k->c, k->kh, k->kw, k->ih, k->iw, k->oh, k->ow,
           k->sh, k->sw, k->dh, k->dw);
  print_hex(y, outputs);
#ifdef Q16
  uint16_t *x16 = malloc(image * 2), *y16 = malloc(outputs * 2);
  uint8_t *scratch = malloc(k->scratch16);
  for (size_t i = 0; i < image; i++) x16[i] = tfrt_f2h(k->x[i]);
  q16_kernel(w, 0, x16, 0, y16, 0, post, scratch, 0, k->n, k->c, k->kh, k->kw, k->ih, k->iw,
             k->oh, k->ow, k->sh, k->sw, k->dh, k->dw);
  for (size_t i = 0; i < outputs; i++) y[i] = tfrt_h2f(y16[i]);
  print_hex(y, outputs);
  free(x16), free(y16), free(scratch);
#endif
  free(w), free(x), free(post), free(y), free(xq);
}
#else
static float y[MAX_OUTPUTS];
static int8_t xq[MAX_SCRATCH];

#ifdef Q16
static uint16_t half_x[MAX_IMAGE], half_y[MAX_OUTPUTS];
static _Alignas(16) uint8_t scratch16[MAX_SCRATCH16];
#endif

static void run(const struct qconv_case *k) {
  q_kernel(k->w, 0, k->x, 0, y, 0, k->post, xq, 0, k->n, k->c, k->kh, k->kw, k->ih, k->iw,
           k->oh, k->ow, k->sh, k->sw, k->dh, k->dw);
  print_hex(y, k->oh * k->ow * k->n);
#ifdef Q16
  const size_t image = k->ih * k->iw * k->c, outputs = k->oh * k->ow * k->n;
  for (size_t i = 0; i < image; i++) half_x[i] = tfrt_f2h(k->x[i]);
  q16_kernel(k->w, 0, half_x, 0, half_y, 0, k->post, scratch16, 0, k->n, k->c, k->kh, k->kw,
             k->ih, k->iw, k->oh, k->ow, k->sh, k->sw, k->dh, k->dw);
  for (size_t i = 0; i < outputs; i++) y[i] = tfrt_h2f(half_y[i]);
  print_hex(y, outputs);
#endif
}
#endif

int main(void) {
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run(&cases[i]);
  semihost_puts("done\n");
  return 0;
}
