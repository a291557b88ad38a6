/* Context misuse: a second init on a live context starts it afresh (and
 * releases what the first made); a call that overlaps another call on the
 * same context (an I/O hook calling back into it, or a second thread) gets
 * NAME_ERR_BUSY and changes nothing; two threads hammering one context never
 * crash and only ever see OK or BUSY.  Built with -fsanitize=address,undefined
 * by tests/test_context_misuse.py (-DTFAOT_MODEL=... as step_loop.c).
 * Prints "ok" and exits 0, or names the failed check and exits 1. */
#include <pthread.h>
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
#define HAMMER 3000

typedef CAT(TFAOT_MODEL, _input_t) in_t;
typedef CAT(TFAOT_MODEL, _output_t) out_t;

static _Alignas(MACRO(_CTX_ALIGN)) unsigned char mem[MACRO(_CTX_SIZE)];
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

static void run_steps(CTX *ctx, out_t out[][MACRO(_OUTPUT_SIZE)]) {
  for (int t = 0; t < STEPS; ++t) EXPECT(FN(_step)(ctx, inputs[t], out[t]) == 0, "step %d", t);
}

/* Every call that uses the context, made while another call holds it. */
static void expect_busy(CTX *ctx, const char *who) {
  out_t out[MACRO(_OUTPUT_SIZE)];
  int s;
  s = FN(_step)(ctx, inputs[0], out);
  EXPECT(s == MACRO(_ERR_BUSY), "%s: step returned %d", who, s);
  s = FN(_step_n)(ctx, inputs[0], out, 1);
  EXPECT(s == MACRO(_ERR_BUSY), "%s: step_n returned %d", who, s);
  s = FN(_reset)(ctx);
  EXPECT(s == MACRO(_ERR_BUSY), "%s: reset returned %d", who, s);
  s = FN(_get_state)(ctx, state);
  EXPECT(s == MACRO(_ERR_BUSY), "%s: get_state returned %d", who, s);
  s = FN(_set_state)(ctx, state);
  EXPECT(s == MACRO(_ERR_BUSY), "%s: set_state returned %d", who, s);
  long r = FN(_run)(ctx, NULL, 1);
  EXPECT(r == -(long)MACRO(_ERR_BUSY), "%s: run returned %ld", who, r);
  s = FN(_init)(ctx);
  EXPECT(s == MACRO(_ERR_BUSY), "%s: init returned %d", who, s);
}

/* ---- hooks: the firmware's read_input / write_output ---------------------- */
enum hook_mode { HOOK_SAME_THREAD, HOOK_OTHER_THREAD };
static enum hook_mode mode;
static int next_step;

static void *busy_from_other_thread(void *ctx) {
  expect_busy((CTX *)ctx, "other thread during run");
  return NULL;
}

int FN(_read_input)(void *user, in_t *in, size_t n) {
  CTX *ctx = (CTX *)user;
  if (next_step == STEPS) return 0;
  if (next_step == 3) {
    if (mode == HOOK_SAME_THREAD) {
      expect_busy(ctx, "hook during run");
    } else {
      pthread_t other;
      pthread_create(&other, NULL, busy_from_other_thread, ctx);
      pthread_join(other, NULL);
    }
  }
  memcpy(in, inputs[next_step], n * sizeof *in);
  return 1;
}

int FN(_write_output)(void *user, const out_t *out, size_t n) {
  (void)user;
  memcpy(got[next_step++], out, n * sizeof *out);
  return 0;
}

/* ---- two threads on one context ------------------------------------------- */
typedef struct hammer {
  CTX *ctx;
  int ok, busy, other;
} hammer;

static void *hammer_steps(void *arg) {
  hammer *h = (hammer *)arg;
  out_t out[MACRO(_OUTPUT_SIZE)];
  for (int i = 0; i < HAMMER; ++i) {
    int s = FN(_step)(h->ctx, inputs[i % STEPS], out);
    if (s == MACRO(_OK)) ++h->ok;
    else if (s == MACRO(_ERR_BUSY)) ++h->busy;
    else ++h->other;
  }
  return NULL;
}

int main(void) {
  for (int t = 0; t < STEPS; ++t)
    for (int i = 0; i < MACRO(_INPUT_SIZE); ++i)
      inputs[t][i] = (in_t)(((t * 5 + i * 3) % 13) * 0.1 - 0.6);
  CTX *ctx = (CTX *)mem;

  /* init on a live context starts afresh. */
  EXPECT(FN(_init)(ctx) == MACRO(_OK), "first init");
  run_steps(ctx, want);
  EXPECT(FN(_init)(ctx) == MACRO(_OK), "init on a live context");
  run_steps(ctx, got);
  EXPECT(memcmp(want, got, sizeof want) == 0, "init on a live context does not restart the stream");

  /* Calls from a hook or from another thread while run holds the context. */
  for (int m = HOOK_SAME_THREAD; m <= HOOK_OTHER_THREAD; ++m) {
    mode = (enum hook_mode)m;
    next_step = 0;
    memset(got, 0, sizeof got);
    EXPECT(FN(_reset)(ctx) == MACRO(_OK), "reset before run");
    long steps = FN(_run)(ctx, ctx, -1);
    EXPECT(steps == STEPS, "run (mode %d) returned %ld", m, steps);
    EXPECT(memcmp(want, got, sizeof want) == 0, "a refused call changed the stream (mode %d)", m);
  }

  /* Two threads stepping one context: no crash, only OK or BUSY. */
  hammer a = {ctx, 0, 0, 0}, b = {ctx, 0, 0, 0};
  pthread_t ta, tb;
  pthread_create(&ta, NULL, hammer_steps, &a);
  pthread_create(&tb, NULL, hammer_steps, &b);
  pthread_join(ta, NULL);
  pthread_join(tb, NULL);
  EXPECT(a.other == 0 && b.other == 0, "statuses other than OK/BUSY: %d %d", a.other, b.other);
  EXPECT(a.ok + b.ok > 0, "no step ran");
  EXPECT(FN(_step)(ctx, inputs[0], got[0]) == MACRO(_OK), "context unusable after the threads");
  printf("threads: %d ok, %d busy\n", a.ok + b.ok, a.busy + b.busy);

  FN(_deinit)(ctx);
  if (failures) return 1;
  puts("ok");
  return 0;
}
