/* Runs a generated model for N steps with a fixed input sequence and prints
 * every output value.  Built by tests/test_backend_c.py with
 *   -DTFAOT_MODEL=<name> -DTFAOT_UPPER=<NAME> -DTFAOT_HEADER='"<name>.h"'
 * and optionally -DCOUNT_HEAP (links with -Wl,--wrap=malloc,... and fails if
 * any heap function is called between the first and the last step).  At
 * step 50 the state is saved and restored (no effect on the outputs), and
 * the run loop is called with the default hooks (which end it at once with
 * NAME_ERR_NO_HOOK), so the heap check covers those functions too. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include TFAOT_HEADER

#define CAT_(a, b) a##b
#define CAT(a, b) CAT_(a, b)
#define FN(x) CAT(TFAOT_MODEL, x)
#define MACRO(x) CAT(TFAOT_UPPER, x)

#ifdef COUNT_HEAP
static int counting;
static long heap_calls;
void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t m);
void *__real_realloc(void *p, size_t n);
void __real_free(void *p);
void *__wrap_malloc(size_t n) { heap_calls += counting; return __real_malloc(n); }
void *__wrap_calloc(size_t n, size_t m) { heap_calls += counting; return __real_calloc(n, m); }
void *__wrap_realloc(void *p, size_t n) { heap_calls += counting; return __real_realloc(p, n); }
void __wrap_free(void *p) { heap_calls += counting; __real_free(p); }
#endif

#define STEPS 200

static _Alignas(MACRO(_CTX_ALIGN)) unsigned char ctx_mem[MACRO(_CTX_SIZE)];
static CAT(TFAOT_MODEL, _output_t) outputs[STEPS][MACRO(_OUTPUT_SIZE)];
static unsigned char saved_state[MACRO(_STATE_BYTES) + 1];

int main(void) {
  CAT(TFAOT_MODEL, _ctx) *ctx = (CAT(TFAOT_MODEL, _ctx) *)ctx_mem;
  if (FN(_ctx_size)() > sizeof(ctx_mem)) {
    fprintf(stderr, "ctx_size %zu > %d\n", FN(_ctx_size)(), MACRO(_CTX_SIZE));
    return 2;
  }
  int status = FN(_init)(ctx);
  if (status != 0) {
    fprintf(stderr, "init: %d %s\n", status, FN(_status_string)(status));
    return 3;
  }
  CAT(TFAOT_MODEL, _input_t) in[MACRO(_INPUT_SIZE)];
#ifdef COUNT_HEAP
  counting = 1;
#endif
  for (int t = 0; t < STEPS; ++t) {
    if (t == STEPS / 2) FN(_reset)(ctx);
    if (t == 50) {
      if (FN(_get_state)(ctx, saved_state) || FN(_set_state)(ctx, saved_state) ||
          FN(_run)(ctx, NULL, -1) != -MACRO(_ERR_NO_HOOK)) {
        fprintf(stderr, "state save/restore or run failed\n");
        return 6;
      }
    }
    for (int i = 0; i < MACRO(_INPUT_SIZE); ++i)
      in[i] = (CAT(TFAOT_MODEL, _input_t))(((t * 7 + i * 3) % 11) * 0.1 - 0.5);
    status = FN(_step)(ctx, in, outputs[t]);
    if (status != 0) break;
  }
#ifdef COUNT_HEAP
  counting = 0;
#endif
  if (status != 0) {
    fprintf(stderr, "step: %d %s\n", status, FN(_status_string)(status));
    return 4;
  }
  FN(_deinit)(ctx);
  for (int t = 0; t < STEPS; ++t) {
    for (int i = 0; i < MACRO(_OUTPUT_SIZE); ++i) printf("%.9g ", (double)outputs[t][i]);
    printf("\n");
  }
#ifdef COUNT_HEAP
  fprintf(stderr, "heap calls during steps: %ld\n", heap_calls);
  if (heap_calls != 0) return 5;
#endif
  return 0;
}
