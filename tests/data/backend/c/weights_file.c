/* A --weights=file build named "wm": init refuses to run without the
 * weights, init_with_weights refuses a wrong size or a changed byte, and
 * accepts WM.weights read from the path in argv[1]. */
#include "wm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static unsigned char *read_file(const char *path, size_t *size) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  unsigned char *data = malloc((size_t)n);
  *size = fread(data, 1, (size_t)n, f);
  fclose(f);
  return data;
}

int main(int argc, char **argv) {
  if (argc < 2) return 2;
  size_t size = 0;
  unsigned char *weights = read_file(argv[1], &size);
  if (!weights) return 2;
  wm_ctx *ctx = aligned_alloc(WM_CTX_ALIGN, WM_CTX_SIZE);
  wm_input_t in[WM_INPUT_SIZE] = {0};
  wm_output_t out[WM_OUTPUT_SIZE];
  int ok = 1;
  int s = wm_init(ctx);
  printf("init without weights: %s\n", wm_status_string(s));
  ok &= s == WM_ERR_WEIGHTS && wm_step(ctx, in, out) == WM_ERR_NOT_INITIALIZED;
  s = wm_init_with_weights(ctx, weights, size - 1);
  printf("short weights: %s\n", wm_status_string(s));
  ok &= s == WM_ERR_WEIGHTS;
  weights[size / 2] ^= 0x40u;
  s = wm_init_with_weights(ctx, weights, size);
  printf("changed weights: %s\n", wm_status_string(s));
  ok &= s == WM_ERR_WEIGHTS;
  weights[size / 2] ^= 0x40u;
  s = wm_init_with_weights(ctx, weights, size);
  printf("the right weights: %s\n", wm_status_string(s));
  ok &= s == WM_OK && size == WM_WEIGHTS_BYTES && wm_step(ctx, in, out) == WM_OK;
  wm_deinit(ctx);
  free(ctx);
  free(weights);
  puts(ok ? "ALL OK" : "FAILED");
  return ok ? 0 : 1;
}
