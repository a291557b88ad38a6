/* A context moved or copied after init is refused with NAME_ERR_MOVED by
 * every call, without touching the original; a misaligned context is refused
 * by init with NAME_ERR_ALIGNMENT.  Built with -fsanitize=address,undefined
 * by tests/test_context_moves.py (-DTFAOT_MODEL=... as step_loop.c).
 * Prints "ok" and exits 0, or names the failed check and exits 1. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include TFAOT_HEADER

#define CAT_(a, b) a##b
#define CAT(a, b) CAT_(a, b)
#define FN(x) CAT(TFAOT_MODEL, x)
#define MACRO(x) CAT(TFAOT_UPPER, x)
#define CTX CAT(TFAOT_MODEL, _ctx)
#define STEPS 40

typedef CAT(TFAOT_MODEL, _input_t) in_t;
typedef CAT(TFAOT_MODEL, _output_t) out_t;

static _Alignas(MACRO(_CTX_ALIGN)) unsigned char mem_a[MACRO(_CTX_SIZE)];
static _Alignas(MACRO(_CTX_ALIGN)) unsigned char mem_b[MACRO(_CTX_SIZE)];
static _Alignas(MACRO(_CTX_ALIGN)) unsigned char mem_ref[MACRO(_CTX_SIZE)];
static _Alignas(MACRO(_CTX_ALIGN)) unsigned char mem_odd[MACRO(_CTX_SIZE) + MACRO(_CTX_ALIGN)];
static in_t inputs[STEPS][MACRO(_INPUT_SIZE)];
static out_t want[STEPS][MACRO(_OUTPUT_SIZE)], got[STEPS][MACRO(_OUTPUT_SIZE)];
static unsigned char state[MACRO(_STATE_BYTES) + 1];

static int failures;

#define EXPECT(cond, ...)                                   \
  do {                                                      \
    if (!(cond)) {                                          \
      fprintf(stderr, "FAIL line %d: ", __LINE__);          \
      fprintf(stderr, __VA_ARGS__);                         \
      fprintf(stderr, "\n");                                \
      ++failures;                                           \
    }                                                       \
  } while (0)

/* Every public call on a moved copy returns NAME_ERR_MOVED. */
static void expect_refused(CTX *copy, const char *what) {
  out_t out[MACRO(_OUTPUT_SIZE)];
  int s;
  s = FN(_step)(copy, inputs[0], out);
  EXPECT(s == MACRO(_ERR_MOVED), "%s: step returned %d", what, s);
  s = FN(_step_n)(copy, inputs[0], out, 1);
  EXPECT(s == MACRO(_ERR_MOVED), "%s: step_n returned %d", what, s);
  s = FN(_reset)(copy);
  EXPECT(s == MACRO(_ERR_MOVED), "%s: reset returned %d", what, s);
  s = FN(_get_state)(copy, state);
  EXPECT(s == MACRO(_ERR_MOVED), "%s: get_state returned %d", what, s);
  s = FN(_set_state)(copy, state);
  EXPECT(s == MACRO(_ERR_MOVED), "%s: set_state returned %d", what, s);
  long r = FN(_run)(copy, NULL, -1);
  EXPECT(r == -(long)MACRO(_ERR_MOVED), "%s: run returned %ld", what, r);
}

int main(void) {
  for (int t = 0; t < STEPS; ++t)
    for (int i = 0; i < MACRO(_INPUT_SIZE); ++i)
      inputs[t][i] = (in_t)(((t * 5 + i * 3) % 13) * 0.1 - 0.6);

  /* Reference: one context, never moved. */
  CTX *ref = (CTX *)mem_ref;
  EXPECT(FN(_init)(ref) == MACRO(_OK), "init ref");
  for (int t = 0; t < STEPS; ++t) EXPECT(FN(_step)(ref, inputs[t], want[t]) == 0, "step ref");
  FN(_deinit)(ref);

  /* A: init, half the steps, memcpy to B; B is refused, A goes on unchanged. */
  CTX *a = (CTX *)mem_a, *b = (CTX *)mem_b;
  EXPECT(FN(_init)(a) == MACRO(_OK), "init a");
  for (int t = 0; t < STEPS / 2; ++t) EXPECT(FN(_step)(a, inputs[t], got[t]) == 0, "step a");
  memcpy(mem_b, mem_a, sizeof(mem_a));
  expect_refused(b, "memcpy'd copy");
  const char *text = FN(_status_string)(MACRO(_ERR_MOVED));
  EXPECT(strstr(text, "moved or copied") != NULL, "status text '%s'", text);
  FN(_deinit)(b);  /* releases nothing of A's */
  for (int t = STEPS / 2; t < STEPS; ++t) EXPECT(FN(_step)(a, inputs[t], got[t]) == 0, "step a");
  EXPECT(memcmp(got, want, sizeof(want)) == 0, "outputs of A differ after the copy");
  /* B can be initialised again and then works on its own. */
  EXPECT(FN(_init)(b) == MACRO(_OK), "re-init b");
  for (int t = 0; t < STEPS; ++t) EXPECT(FN(_step)(b, inputs[t], got[t]) == 0, "step b");
  EXPECT(memcmp(got, want, sizeof(want)) == 0, "outputs of re-initialised B");
  FN(_deinit)(a);
  FN(_deinit)(b);

  /* Heap: the original is freed after the copy (as realloc does); the copy
   * is refused without reading the freed memory (ASan would report it). */
  CTX *h = (CTX *)aligned_alloc(MACRO(_CTX_ALIGN), MACRO(_CTX_SIZE));
  CTX *h2 = (CTX *)aligned_alloc(MACRO(_CTX_ALIGN), MACRO(_CTX_SIZE));
  EXPECT(h && h2, "aligned_alloc");
  EXPECT(FN(_init)(h) == MACRO(_OK), "init heap ctx");
  EXPECT(FN(_step)(h, inputs[0], got[0]) == 0, "step heap ctx");
  memcpy(h2, h, MACRO(_CTX_SIZE));
  free(h);
  expect_refused(h2, "copy of a freed context");
  FN(_deinit)(h2);
  EXPECT(FN(_step)(h2, inputs[0], got[0]) == MACRO(_ERR_NOT_INITIALIZED), "step after deinit");
  EXPECT(FN(_init)(h2) == MACRO(_OK), "re-init heap copy");
  EXPECT(FN(_step)(h2, inputs[0], got[0]) == 0, "step re-initialised heap copy");
  EXPECT(memcmp(got[0], want[0], sizeof(want[0])) == 0, "outputs of re-initialised heap copy");
  FN(_deinit)(h2);
  free(h2);

  /* Misaligned memory: its own status and text. */
  CTX *odd = (CTX *)(mem_odd + 8);
  int s = FN(_init)(odd);
  EXPECT(s == MACRO(_ERR_ALIGNMENT), "init of a misaligned context returned %d", s);
  text = FN(_status_string)(s);
  EXPECT(strstr(text, "aligned") != NULL, "alignment status text '%s'", text);
  EXPECT(FN(_step)(odd, inputs[0], got[0]) == MACRO(_ERR_ALIGNMENT), "step misaligned");
  EXPECT(FN(_init)(NULL) == MACRO(_ERR_INVALID_ARGUMENT), "init NULL");

  if (failures) return 1;
  printf("ok\n");
  return 0;
}
