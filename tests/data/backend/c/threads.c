/* Runs THREADS contexts of one model at the same time, one per thread, and
 * checks each against the same sequence run alone first (each thread also
 * saves and restores its state half-way).  Built with
 * -fsanitize=thread by tests/test_backend_c.py. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include TFAOT_HEADER

#define CAT_(a, b) a##b
#define CAT(a, b) CAT_(a, b)
#define FN(x) CAT(TFAOT_MODEL, x)
#define MACRO(x) CAT(TFAOT_UPPER, x)
#define THREADS 4
#define STEPS 300

typedef struct job {
  _Alignas(64) unsigned char mem[MACRO(_CTX_SIZE)];
  int seed;
  int status;
  unsigned char state[MACRO(_STATE_BYTES) + 1];
  float out[STEPS][MACRO(_OUTPUT_SIZE)];
} job;

static job jobs[THREADS], alone[THREADS];

static void *run(void *arg) {
  job *j = (job *)arg;
  CAT(TFAOT_MODEL, _ctx) *ctx = (CAT(TFAOT_MODEL, _ctx) *)j->mem;
  float in[MACRO(_INPUT_SIZE)];
  j->status = FN(_init)(ctx);
  for (int t = 0; t < STEPS && j->status == 0; ++t) {
    for (int i = 0; i < MACRO(_INPUT_SIZE); ++i)
      in[i] = (float)(((t * 5 + i * 3 + j->seed * 7) % 13) * 0.1 - 0.6);
    j->status = FN(_step)(ctx, in, j->out[t]);
    if (t == STEPS / 2 && j->status == 0) {  /* state round trip: no effect on outputs */
      j->status = FN(_get_state)(ctx, j->state);
      if (j->status == 0) j->status = FN(_set_state)(ctx, j->state);
    }
  }
  FN(_deinit)(ctx);
  return NULL;
}

int main(void) {
  pthread_t th[THREADS];
  for (int k = 0; k < THREADS; ++k) {
    alone[k].seed = jobs[k].seed = k;
    run(&alone[k]);
  }
  for (int k = 0; k < THREADS; ++k) pthread_create(&th[k], NULL, run, &jobs[k]);
  for (int k = 0; k < THREADS; ++k) pthread_join(th[k], NULL);
  for (int k = 0; k < THREADS; ++k) {
    if (jobs[k].status || alone[k].status) return 1;
    if (memcmp(jobs[k].out, alone[k].out, sizeof(jobs[k].out)) != 0) {
      printf("thread %d differs\n", k);
      return 2;
    }
  }
  printf("ok\n");
  return 0;
}
