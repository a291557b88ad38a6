/* Drives a CUDA build of a model named "cum" (any shapes) through the C API
 * on whatever libcuda.so.1 the loader finds (tests: fake_libcuda.c):
 *   cu_driver calls     init, 3 steps, reset, get_state, set_state, a step,
 *                       deinit; prints "== PHASE STATUS" after each call, so
 *                       the driver's log lines before it are that call's
 *   cu_driver init      prints "init: STATUS" of one init (and deinit)
 * Exit 0 when every call returned the expected status. */
#include "cum.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static cum_ctx *new_ctx(void) { return (cum_ctx *)aligned_alloc(CUM_CTX_ALIGN, CUM_CTX_SIZE); }

static int phase(const char *name, int status) {
  printf("== %s %d\n", name, status);
  return status == CUM_OK;
}

static int calls(void) {
  static cum_input_t in[CUM_INPUT_SIZE];
  static cum_output_t out[CUM_OUTPUT_SIZE];
  static unsigned char state[CUM_STATE_BYTES + 1];
  for (unsigned i = 0; i < CUM_INPUT_SIZE; ++i) in[i] = (cum_input_t)(0.25 * (double)i);
  cum_ctx *ctx = new_ctx();
  printf("== begin init\n");
  int ok = phase("init", cum_init(ctx));
  for (int t = 0; t < 3 && ok; ++t) ok &= phase("step", cum_step(ctx, in, out));
  if (ok) ok &= phase("reset", cum_reset(ctx));
  if (ok) ok &= phase("get_state", cum_get_state(ctx, state));
  if (ok) ok &= phase("set_state", cum_set_state(ctx, state));
  if (ok) ok &= phase("step", cum_step(ctx, in, out));
  cum_deinit(ctx);
  printf("== deinit 0\n");
  free(ctx);
  return ok;
}

static int init_fails(void) {
  cum_ctx *ctx = new_ctx();
  int status = cum_init(ctx);
  printf("init: %d (%s)\n", status, cum_status_string(status));
  cum_deinit(ctx);
  free(ctx);
  return status == CUM_ERR_DEVICE;
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "calls";
  int ok = strcmp(mode, "init") == 0 ? init_fails() : calls();
  printf("%s\n", ok ? "ALL OK" : "FAILED");
  return ok ? 0 : 1;
}
