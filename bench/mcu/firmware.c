/* Bare-metal firmware of bench/bench_mcu.py: init, then STEPS calls of
 * NAME_step on inputs.h, each between two calls of tfaot_mark (which the
 * QEMU plugin insn_count.c watches), every output printed as the hex of
 * its float32 bits, and the stack's high-water mark at the end. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include TFAOT_HEADER
#include "inputs.h"
#include "semihost.h"

#define CAT_(a, b) a##b
#define CAT(a, b) CAT_(a, b)
#define FN(x) CAT(TFAOT_MODEL, x)
#define MACRO(x) CAT(TFAOT_UPPER, x)

/* Stack painted below the caller's frame to find the high-water mark. */
#define PAINT_BYTES (64u * 1024u)
#define PAINT 0xA5C3E1F7u

__attribute__((noinline)) void tfaot_mark(void) { __asm__ volatile("" ::: "memory"); }

static _Alignas(MACRO(_CTX_ALIGN)) unsigned char ctx_mem[MACRO(_CTX_SIZE)];
static float out[MACRO(_OUTPUT_SIZE)];

static void put_hex(uint32_t bits, char *p) {
  for (int k = 28; k >= 0; k -= 4) *p++ = "0123456789abcdef"[(bits >> k) & 15u];
}

static void print_floats(const float *v, size_t n) {
  char line[9 * 8 + 2];
  for (size_t i = 0; i < n; i += 8) {
    char *p = line;
    for (size_t j = i; j < n && j < i + 8; j++, p += 9) {
      uint32_t bits;
      memcpy(&bits, &v[j], 4);
      put_hex(bits, p);
      p[8] = ' ';
    }
    *p++ = '\n';
    *p = 0;
    semihost_puts(line);
  }
}

/* Paints PAINT_BYTES below this frame; returns the lowest painted word. */
__attribute__((noinline)) static volatile uint32_t *paint_stack(void) {
  volatile uint32_t *top = (volatile uint32_t *)__builtin_frame_address(0) - 64;
  volatile uint32_t *bottom = top - PAINT_BYTES / 4;
  for (volatile uint32_t *p = bottom; p < top; p++) *p = PAINT;
  return bottom;
}

int main(void) {
  volatile uint32_t *bottom = paint_stack();
  CAT(TFAOT_MODEL, _ctx) *ctx = (CAT(TFAOT_MODEL, _ctx) *)ctx_mem;
  tfaot_mark(); /* an empty pair: what the marks themselves cost */
  tfaot_mark();
  tfaot_mark();
  int status = FN(_init)(ctx);
  tfaot_mark();
  if (status != 0) return 1;
  for (size_t i = 0; i < STEPS; i++) {
    tfaot_mark();
    status = FN(_step)(ctx, inputs[i], out);
    tfaot_mark();
    if (status != 0) return 2;
    print_floats(out, MACRO(_OUTPUT_SIZE));
  }
  volatile uint32_t *p = bottom;
  while (*p == PAINT) p++;
  char line[32] = "stack ";
  put_hex((uint32_t)(PAINT_BYTES - (size_t)(p - bottom) * 4u), line + 6);
  line[14] = '\n';
  line[15] = 0;
  semihost_puts(line);
  semihost_puts("done\n");
  return 0;
}
