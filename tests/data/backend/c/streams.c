/* Drives a --streams N library from C: N streams with different frames, one
 * stream's state moved out and back, one stream reset; prints stream 0's
 * and stream N-1's outputs per step.  Built by tests/test_streams.py with
 * -Wall -Wextra -Werror and ASan + UBSan. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include TFAOT_HEADER

#define CAT_(a, b) a##b
#define CAT(a, b) CAT_(a, b)
#define FN(suffix) CAT(TFAOT_MODEL, suffix)
#define K(suffix) CAT(TFAOT_UPPER, suffix)

#define STEPS 40
#define PER_STREAM_IN (K(_INPUT_SIZE) / K(_STREAMS))
#define PER_STREAM_OUT (K(_OUTPUT_SIZE) / K(_STREAMS))

static float frame_value(int step, int stream, int k) {
  return (float)((step * 31 + stream * 17 + k * 7) % 23) / 11.0f - 1.0f;
}

int main(void) {
  void *mem = aligned_alloc(K(_CTX_ALIGN), (FN(_ctx_size)() + K(_CTX_ALIGN) - 1) /
                                              K(_CTX_ALIGN) * K(_CTX_ALIGN));
  FN(_ctx) *ctx = mem;
  static float in[K(_INPUT_SIZE)], out[K(_OUTPUT_SIZE)];
  static unsigned char saved[K(_STREAM_STATE_BYTES) + 1];
  if (FN(_init)(ctx) != 0) return 1;
  if (FN(_stream_state_size)() != K(_STREAM_STATE_BYTES)) return 2;
  /* out-of-range stream and NULL buffer are refused */
  if (FN(_reset_stream)(ctx, K(_STREAMS)) != K(_ERR_INVALID_ARGUMENT)) return 3;
  if (FN(_get_stream_state)(ctx, 0, NULL) != K(_ERR_INVALID_ARGUMENT)) return 4;
  for (int t = 0; t < STEPS; ++t) {
    for (int s = 0; s < K(_STREAMS); ++s)
      for (int k = 0; k < PER_STREAM_IN; ++k) in[s * PER_STREAM_IN + k] = frame_value(t, s, k);
    if (t == 10 && FN(_get_stream_state)(ctx, 0, saved) != 0) return 5;
    if (t == 20 && FN(_set_stream_state)(ctx, K(_STREAMS) - 1, saved) != 0) return 6;
    if (t == 30 && FN(_reset_stream)(ctx, 0) != 0) return 7;
    if (FN(_step)(ctx, in, out) != 0) return 8;
    for (int k = 0; k < PER_STREAM_OUT; ++k) printf("%.9g ", (double)out[k]);
    printf("|");
    for (int k = 0; k < PER_STREAM_OUT; ++k)
      printf(" %.9g", (double)out[(K(_STREAMS) - 1) * PER_STREAM_OUT + k]);
    printf("\n");
  }
  FN(_deinit)(ctx);
  free(mem);
  return 0;
}
