/* Links a model without defining the I/O hooks: the library's weak defaults
 * apply, so NAME_run returns -NAME_ERR_NO_HOOK. */
#include <stdio.h>

#include TFAOT_HEADER

#define CAT_(a, b) a##b
#define CAT(a, b) CAT_(a, b)
#define FN(x) CAT(TFAOT_MODEL, x)
#define MACRO(x) CAT(TFAOT_UPPER, x)

static _Alignas(MACRO(_CTX_ALIGN)) unsigned char ctx_mem[MACRO(_CTX_SIZE)];

int main(void) {
  CAT(TFAOT_MODEL, _ctx) *ctx = (CAT(TFAOT_MODEL, _ctx) *)ctx_mem;
  if (FN(_init)(ctx)) return 3;
  printf("run=%ld\n", FN(_run)(ctx, NULL, -1));
  return 0;
}
