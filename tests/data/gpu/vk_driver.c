/* Drives a Vulkan build of a model named "vkm" (any shapes) through the C API:
 *   vk_driver check     one context vs two contexts in two threads (bit-exact),
 *                       reset, get_state/set_state mid-stream
 *   vk_driver nodevice  init must fail with VKM_ERR_DEVICE (no driver)
 *   vk_driver reinit    init on a live context releases the first init's
 *                       device: the heap does not grow over repeated inits
 * Prints one line per check; exit 0 when all hold. */
#include "vkm.h"

#include <malloc.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STEPS 40
#define SPLIT 15

static vkm_input_t inputs[STEPS][VKM_INPUT_SIZE];

typedef struct run {
  vkm_output_t out[STEPS][VKM_OUTPUT_SIZE];
  int status;
} run;

static vkm_ctx *new_ctx(void) { return (vkm_ctx *)aligned_alloc(VKM_CTX_ALIGN, VKM_CTX_SIZE); }

static void *run_sequence(void *arg) {
  run *r = (run *)arg;
  vkm_ctx *ctx = new_ctx();
  r->status = vkm_init(ctx);
  for (int t = 0; t < STEPS && r->status == VKM_OK; ++t)
    r->status = vkm_step(ctx, inputs[t], r->out[t]);
  vkm_deinit(ctx);
  free(ctx);
  return NULL;
}

static int same(const void *a, const void *b, size_t n, const char *what) {
  int ok = memcmp(a, b, n) == 0;
  printf("%s: %s\n", what, ok ? "same" : "DIFFERENT");
  return ok;
}

static int check(void) {
  static run one, left, right, again;
  run_sequence(&one);
  printf("init+steps: %s\n", vkm_status_string(one.status));
  if (one.status != VKM_OK) return 0;
  pthread_t a, b;
  pthread_create(&a, NULL, run_sequence, &left);
  pthread_create(&b, NULL, run_sequence, &right);
  pthread_join(a, NULL);
  pthread_join(b, NULL);
  int ok = left.status == VKM_OK && right.status == VKM_OK;
  ok &= same(&one.out, &left.out, sizeof one.out, "thread 1 vs one context");
  ok &= same(&one.out, &right.out, sizeof one.out, "thread 2 vs one context");

  vkm_ctx *ctx = new_ctx();
  ok &= vkm_init(ctx) == VKM_OK;
  for (int t = 0; t < SPLIT; ++t) ok &= vkm_step(ctx, inputs[t], again.out[t]) == VKM_OK;
  ok &= vkm_reset(ctx) == VKM_OK;
  for (int t = 0; t < STEPS; ++t) ok &= vkm_step(ctx, inputs[t], again.out[t]) == VKM_OK;
  ok &= same(&one.out, &again.out, sizeof one.out, "after reset");

  static unsigned char state[VKM_STATE_BYTES + 1];
  ok &= vkm_reset(ctx) == VKM_OK;
  for (int t = 0; t < SPLIT; ++t) ok &= vkm_step(ctx, inputs[t], again.out[t]) == VKM_OK;
  ok &= vkm_get_state(ctx, state) == VKM_OK;
  for (int t = SPLIT; t < STEPS; ++t) ok &= vkm_step(ctx, inputs[t], again.out[t]) == VKM_OK;
  ok &= vkm_reset(ctx) == VKM_OK;
  ok &= vkm_set_state(ctx, state) == VKM_OK;
  for (int t = SPLIT; t < STEPS; ++t) ok &= vkm_step(ctx, inputs[t], again.out[t]) == VKM_OK;
  ok &= same(&one.out, &again.out, sizeof one.out, "get_state/set_state mid-stream");
  vkm_deinit(ctx);
  free(ctx);
  return ok;
}

static int no_device(void) {
  vkm_ctx *ctx = new_ctx();
  int status = vkm_init(ctx);
  printf("init without a driver: %d (%s)\n", status, vkm_status_string(status));
  vkm_output_t out[VKM_OUTPUT_SIZE];
  int step_status = vkm_step(ctx, inputs[0], out);
  vkm_deinit(ctx);
  free(ctx);
  return status == VKM_ERR_DEVICE && step_status == VKM_ERR_NOT_INITIALIZED;
}

/* Before the fix each extra init leaked the whole device (3-9 MB of heap);
 * the driver's own first-use caches are paid by the two inits before the
 * measurement. */
static int reinit(void) {
  enum { INITS = 10 };
  vkm_ctx *ctx = new_ctx();
  int ok = vkm_init(ctx) == VKM_OK && vkm_init(ctx) == VKM_OK;
  size_t before = mallinfo2().uordblks;
  for (int i = 0; i < INITS; ++i) ok &= vkm_init(ctx) == VKM_OK;
  size_t after = mallinfo2().uordblks;
  long growth = (long)after - (long)before;
  printf("heap growth over %d inits on a live context: %ld bytes\n", INITS, growth);
  /* lavapipe here: 94 KB with the fix (its caches), 87 MB without it. */
  ok &= growth < 1024 * 1024;
  static run r;
  for (int t = 0; t < STEPS && ok; ++t) ok &= vkm_step(ctx, inputs[t], r.out[t]) == VKM_OK;
  vkm_deinit(ctx);
  free(ctx);
  return ok;
}

int main(int argc, char **argv) {
  for (int t = 0; t < STEPS; ++t)
    for (int i = 0; i < VKM_INPUT_SIZE; ++i) inputs[t][i] = (vkm_input_t)sinf(0.37f * (float)(t * VKM_INPUT_SIZE + i));
  const char *mode = argc > 1 ? argv[1] : "check";
  int ok = strcmp(mode, "nodevice") == 0 ? no_device()
           : strcmp(mode, "reinit") == 0 ? reinit()
                                          : check();
  puts(ok ? "ALL OK" : "FAILED");
  return ok ? 0 : 1;
}
