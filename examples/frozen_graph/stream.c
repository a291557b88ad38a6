/* stream.c - the frozen graph's library on a stream of MFCC frames.
 *
 * The library starts at the graph's `Mfcc` tensor (tfaot build ... --inputs
 * Mfcc): the front end (DecodeWav, AudioSpectrogram, Mfcc) is the firmware's
 * job, and here it is a file of float32 frames, KWS_GRAPH_INPUT_SIZE (10)
 * values each, made by make_graph.py --frames:
 *
 *   ./stream frames.f32     prints the 12 label probabilities per frame
 *
 * One kws_graph_step per frame; the LSTM state stays in the context between
 * calls, so frame t's output is the graph's labels_softmax at frame t. */
#include <stdio.h>

#include "kws_graph.h"

static _Alignas(KWS_GRAPH_CTX_ALIGN) unsigned char ctx_mem[KWS_GRAPH_CTX_SIZE];

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s FRAMES.f32\n", argv[0]);
    return 2;
  }
  FILE *f = fopen(argv[1], "rb");
  if (!f) {
    perror(argv[1]);
    return 1;
  }
  kws_graph_ctx *ctx = (kws_graph_ctx *)ctx_mem;
  int status = kws_graph_init(ctx);
  if (status != KWS_GRAPH_OK) {
    fprintf(stderr, "kws_graph_init: %s\n", kws_graph_status_string(status));
    return 1;
  }
  float in[KWS_GRAPH_INPUT_SIZE], out[KWS_GRAPH_OUTPUT_SIZE];
  long frame = 0;
  while (fread(in, sizeof in, 1, f) == 1) {
    status = kws_graph_step(ctx, in, out);
    if (status != KWS_GRAPH_OK) {
      fprintf(stderr, "kws_graph_step: %s\n", kws_graph_status_string(status));
      return 1;
    }
    size_t best = 0;
    for (size_t i = 0; i < KWS_GRAPH_OUTPUT_SIZE; ++i) {
      printf("%.9g ", (double)out[i]);
      if (out[i] > out[best]) best = i;
    }
    printf("| frame %ld label %zu\n", frame++, best);
  }
  kws_graph_deinit(ctx);
  fclose(f);
  fprintf(stderr, "%ld frames\n", frame);
  return 0;
}
