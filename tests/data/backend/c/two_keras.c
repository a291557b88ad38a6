/* Two Keras-built model libraries (kws and rnn) in one program: each runs
 * its own input file through its own context, interleaved step by step.
 * Prints "kws" / "rnn" lines with the outputs. */
#include <stdio.h>

#include "kws.h"
#include "rnn.h"

static _Alignas(KWS_CTX_ALIGN) unsigned char kws_mem[KWS_CTX_SIZE];
static _Alignas(RNN_CTX_ALIGN) unsigned char rnn_mem[RNN_CTX_SIZE];

int main(int argc, char **argv) {
  if (argc < 3) return 2;
  FILE *fk = fopen(argv[1], "rb"), *fr = fopen(argv[2], "rb");
  kws_ctx *k = (kws_ctx *)kws_mem;
  rnn_ctx *r = (rnn_ctx *)rnn_mem;
  if (!fk || !fr || kws_init(k) || rnn_init(r)) return 3;
  float kin[KWS_INPUT_SIZE], kout[KWS_OUTPUT_SIZE], rin[RNN_INPUT_SIZE], rout[RNN_OUTPUT_SIZE];
  while (fread(kin, sizeof kin, 1, fk) == 1 && fread(rin, sizeof rin, 1, fr) == 1) {
    if (kws_step(k, kin, kout) || rnn_step(r, rin, rout)) return 4;
    printf("kws");
    for (int i = 0; i < KWS_OUTPUT_SIZE; ++i) printf(" %.9g", (double)kout[i]);
    printf("\nrnn");
    for (int i = 0; i < RNN_OUTPUT_SIZE; ++i) printf(" %.9g", (double)rout[i]);
    printf("\n");
  }
  return 0;
}
