/* tfrt_libm.c - the libm functions a kernel object calls where the FPU has
 * no instruction for them, as tfaot's own code.
 *
 * IREE's exp and tanh approximations round down with llvm.floor, which a
 * Cortex-M4's FPv4 (no VRINTM) and baseline x86-64 (no SSE4.1 ROUNDPS)
 * lower to a call of floorf: newlib's cost about 2.6k cycles of an int8
 * GRU(64) step on an M4 (bench/bench_mcu.py), and a firmware linked
 * without libm failed on it. The package stage (compiler/package/link.py)
 * renames the kernel object's floorf to TFRT_FLOORF_FN (NAME_floorf: no
 * clash with the firmware's own libm) and merges this file, compiled with
 * -DTFRT_FLOORF_FN=NAME_floorf, into it. */
#include <stdint.h>

#ifndef TFRT_FLOORF_FN
#error "compile with -DTFRT_FLOORF_FN=<the name the kernel object calls>"
#endif

float TFRT_FLOORF_FN(float x);

/* floor(x), exactly: every float of magnitude 2^23 or more is an integer
 * (and NaN, +-Inf are their own floor); below that the conversion to int32
 * truncates toward zero, one less for a negative non-integer. -0.0 stays
 * -0.0. */
float TFRT_FLOORF_FN(float x) {
  if (!(x > -8388608.0f && x < 8388608.0f)) return x;
  const float t = (float)(int32_t)x;
  if (t == x) return x;
  return t > x ? t - 1.0f : t;
}
