/* Bare-metal program: runs the model over INPUTS (inputs.h, written by
 * make_inputs.py or a test) through NAME_run and the I/O hooks, and prints every output
 * value as the hex of its float32 bits (exact; no printf, so no heap). */
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

static _Alignas(MACRO(_CTX_ALIGN)) unsigned char ctx_mem[MACRO(_CTX_SIZE)];
static unsigned next_sample;

int FN(_read_input)(void *user, float *in, size_t n) {
  (void)user;
  if (next_sample == STEPS) return 0;
  memcpy(in, inputs[next_sample++], n * sizeof(float));
  return 1;
}

int FN(_write_output)(void *user, const float *out, size_t n) {
  char line[9 * MACRO(_OUTPUT_SIZE) + 2], *p = line;
  (void)user;
  for (size_t i = 0; i < n; ++i) {
    uint32_t bits;
    memcpy(&bits, &out[i], 4);
    for (int k = 28; k >= 0; k -= 4) *p++ = "0123456789abcdef"[(bits >> k) & 15u];
    *p++ = ' ';
  }
  *p++ = '\n';
  *p = 0;
  semihost_puts(line);
  return 0;
}

int main(void) {
  CAT(TFAOT_MODEL, _ctx) *ctx = (CAT(TFAOT_MODEL, _ctx) *)ctx_mem;
  if (FN(_init)(ctx) != 0) return 1;
  long ran = FN(_run)(ctx, NULL, -1);
  semihost_puts(ran == STEPS ? "done\n" : "run failed\n");
  return ran == STEPS ? 0 : 2;
}
