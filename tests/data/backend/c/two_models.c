/* Links two generated models into one program (static libraries). */
#include <stdio.h>

#include "accumulator.h"
#include "multi.h"

static _Alignas(64) unsigned char a_mem[ACCUMULATOR_CTX_SIZE];
static _Alignas(64) unsigned char m_mem[MULTI_CTX_SIZE];

int main(void) {
  accumulator_ctx *a = (accumulator_ctx *)a_mem;
  multi_ctx *m = (multi_ctx *)m_mem;
  if (accumulator_init(a) || multi_init(m)) return 1;
  float ain[ACCUMULATOR_INPUT_SIZE] = {1, 2, 3, 4}, aout[ACCUMULATOR_OUTPUT_SIZE];
  float min[MULTI_INPUT_SIZE] = {1, 2, 3}, mout[MULTI_OUTPUT_SIZE];
  for (int t = 0; t < 3; ++t) {
    if (accumulator_step(a, ain, aout) || multi_step(m, min, mout)) return 2;
  }
  printf("%g %g\n", (double)aout[3], (double)mout[4]);
  return !(aout[3] == 12.0f && mout[4] == 3.0f);
}
