/* Bare-metal firmware of bench/bench_mcu.py: init, then STEPS calls of
 * NAME_step on inputs.h, each between two calls of tfaot_mark (which the
 * QEMU plugin insn_count.c watches), every output printed as the hex of
 * its float32 bits, and the stack's high-water mark at the end. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include TFAOT_HEADER
#include "firmware_io.h"
#include "inputs.h"

#define CAT_(a, b) a##b
#define CAT(a, b) CAT_(a, b)
#define FN(x) CAT(TFAOT_MODEL, x)
#define MACRO(x) CAT(TFAOT_UPPER, x)

static _Alignas(MACRO(_CTX_ALIGN)) unsigned char ctx_mem[MACRO(_CTX_SIZE)];
static float out[MACRO(_OUTPUT_SIZE)];

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
  print_stack_used(bottom);
  semihost_puts("done\n");
  return 0;
}
