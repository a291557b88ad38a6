/* stream.c - run the keyword spotter on a stream of feature frames.
 *
 * The firmware pattern: the model library calls kws_read_input() for each
 * frame and kws_write_output() for each result (one frame per cycle);
 * kws_run() is the loop.  Here the "sensor" is a file of float32 frames
 * (KWS_INPUT_SIZE = 40 values each), or stdin:
 *
 *   ./stream frames.f32        prints the 12 keyword probabilities per frame
 *
 * No heap: the context is a static array of KWS_CTX_SIZE bytes. */
#include <stdio.h>

#include "kws.h"

typedef struct stream {
  FILE *in;
  long frame;
} stream;

/* Overrides the library's weak default (which has no input). */
int kws_read_input(void *user, float *in, size_t n) {
  stream *s = (stream *)user;
  size_t got = fread(in, sizeof(float), n, s->in);
  if (got == n) return 1;                  /* one frame */
  return got == 0 && feof(s->in) ? 0 : -1; /* end, or a truncated frame */
}

int kws_write_output(void *user, const float *out, size_t n) {
  stream *s = (stream *)user;
  size_t best = 0;
  for (size_t i = 0; i < n; ++i) {
    printf("%.9g ", (double)out[i]);
    if (out[i] > out[best]) best = i;
  }
  printf("| frame %ld keyword %zu\n", s->frame++, best);
  return 0; /* go on; a positive value would stop the loop */
}

static _Alignas(KWS_CTX_ALIGN) unsigned char ctx_mem[KWS_CTX_SIZE];

int main(int argc, char **argv) {
  stream s = {argc > 1 ? fopen(argv[1], "rb") : stdin, 0};
  if (!s.in) {
    perror(argv[1]);
    return 1;
  }
  kws_ctx *ctx = (kws_ctx *)ctx_mem;
  int status = kws_init(ctx);
  if (status != KWS_OK) {
    fprintf(stderr, "kws_init: %s\n", kws_status_string(status));
    return 1;
  }
  long steps = kws_run(ctx, &s, -1);
  kws_deinit(ctx);
  if (steps < 0) {
    fprintf(stderr, "kws_run: %s\n", kws_status_string((int)-steps));
    return 1;
  }
  fprintf(stderr, "%ld frames, model RAM %d bytes, weights %d bytes\n", steps, KWS_CTX_SIZE,
          KWS_WEIGHT_BYTES);
  return 0;
}
