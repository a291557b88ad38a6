/* Drives NAME_run with firmware-style I/O hooks: read_input takes samples
 * from a binary file of float32 (argv[1]), write_output prints each output.
 * argv[2] (optional) = max_steps; argv[3] (optional) = "stop:K" makes
 * write_output ask to stop after K outputs, "fail:K" makes read_input fail
 * at sample K.  Prints "run=<return value>" last.  Built by the tests with
 *   -DTFAOT_MODEL=<name> -DTFAOT_UPPER=<NAME> -DTFAOT_HEADER='"<name>.h"' */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include TFAOT_HEADER

#define CAT_(a, b) a##b
#define CAT(a, b) CAT_(a, b)
#define FN(x) CAT(TFAOT_MODEL, x)
#define MACRO(x) CAT(TFAOT_UPPER, x)

typedef struct source {
  FILE *f;
  long outputs, stop_after, fail_at, read;
} source;

int FN(_read_input)(void *user, CAT(TFAOT_MODEL, _input_t) *in, size_t n) {
  source *s = (source *)user;
  if (s->read == s->fail_at) return -1;
  size_t got = fread(in, sizeof(*in), n, s->f);
  if (got == 0 && feof(s->f)) return 0;
  if (got != n) return -2;  /* truncated sample */
  ++s->read;
  return 1;
}

int FN(_write_output)(void *user, const CAT(TFAOT_MODEL, _output_t) *out, size_t n) {
  source *s = (source *)user;
  for (size_t i = 0; i < n; ++i) printf("%.9g ", (double)out[i]);
  printf("\n");
  return ++s->outputs == s->stop_after;
}

static _Alignas(MACRO(_CTX_ALIGN)) unsigned char ctx_mem[MACRO(_CTX_SIZE)];

int main(int argc, char **argv) {
  if (argc < 2) return 2;
  source s = {fopen(argv[1], "rb"), 0, -1, -1, 0};
  if (!s.f) return 2;
  long max_steps = argc > 2 ? atol(argv[2]) : -1;
  if (argc > 3 && !strncmp(argv[3], "stop:", 5)) s.stop_after = atol(argv[3] + 5);
  if (argc > 3 && !strncmp(argv[3], "fail:", 5)) s.fail_at = atol(argv[3] + 5);
  CAT(TFAOT_MODEL, _ctx) *ctx = (CAT(TFAOT_MODEL, _ctx) *)ctx_mem;
  int status = FN(_init)(ctx);
  if (status) return 3;
  long ran = FN(_run)(ctx, &s, max_steps);
  printf("run=%ld\n", ran);
  FN(_deinit)(ctx);
  fclose(s.f);
  return 0;
}
