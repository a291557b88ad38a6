/* tfrt_libm.c - the libm functions a kernel object calls where the FPU has
 * no instruction for them, as tfaot's own code.
 *
 * IREE's exp and tanh approximations round down with llvm.floor, which a
 * Cortex-M4's FPv4 (no VRINTM) and baseline x86-64 (no SSE4.1 ROUNDPS)
 * lower to a call of floorf: newlib's cost about 2.6k cycles of an int8
 * GRU(64) step on an M4 (bench/bench_mcu.py), and a firmware linked
 * without libm failed on it. Without an FPU (-mfloat-abi=soft) LLVM also
 * lowers llvm.maximum and llvm.minimum (a ReLU, a max pooling) to
 * fmaximumf and fminimumf, C23 functions newlib does not have. The package
 * stage (compiler/package/link.py) renames the kernel object's calls to
 * NAME_floorf and so on (no clash with the firmware's own libm) and merges
 * this file, compiled with -DTFRT_LIBM_PREFIX=NAME_, into it. */
#include <stdint.h>
#include <string.h>

#ifndef TFRT_LIBM_PREFIX
#error "compile with -DTFRT_LIBM_PREFIX=<the prefix of the names the kernel object calls>"
#endif
#define TFRT_LIBM_CAT_(a, b) a##b
#define TFRT_LIBM_CAT(a, b) TFRT_LIBM_CAT_(a, b)
#define TFRT_LIBM(fn) TFRT_LIBM_CAT(TFRT_LIBM_PREFIX, fn)

float TFRT_LIBM(floorf)(float x);
float TFRT_LIBM(fmaximumf)(float a, float b);
float TFRT_LIBM(fminimumf)(float a, float b);

/* floor(x), exactly: every float of magnitude 2^23 or more is an integer
 * (and NaN, +-Inf are their own floor); below that the conversion to int32
 * truncates toward zero, one less for a negative non-integer. -0.0 stays
 * -0.0. */
float TFRT_LIBM(floorf)(float x) {
  if (!(x > -8388608.0f && x < 8388608.0f)) return x;
  const float t = (float)(int32_t)x;
  if (t == x) return x;
  return t > x ? t - 1.0f : t;
}

static int tfrt_libm_negative(float x) {
  uint32_t bits;
  memcpy(&bits, &x, sizeof bits);
  return (int)(bits >> 31);
}

/* IEEE 754-2019 maximum: NaN if either is NaN (where fmaxf returns the
 * other), and +0 above -0. */
float TFRT_LIBM(fmaximumf)(float a, float b) {
  if (a != a || b != b) return a + b;
  if (a == b) return tfrt_libm_negative(a) ? b : a;
  return a > b ? a : b;
}

/* IEEE 754-2019 minimum: NaN if either is NaN, and -0 below +0. */
float TFRT_LIBM(fminimumf)(float a, float b) {
  if (a != a || b != b) return a + b;
  if (a == b) return tfrt_libm_negative(a) ? a : b;
  return a < b ? a : b;
}
