/* tfrt_matvec.c - tfaot's matvec micro-kernel: y[n] = W[n,k] . x[k] (f32).
 *
 * The kernel object's matvec dispatches (compiler/microkernel.py) call
 * TFRT_MATVEC_FN(w, x, x_offset, y, y_offset, n, k); the package stage
 * compiles this file with -DTFRT_MATVEC_FN=NAME_matvec_f32 and merges it
 * into NAME_kernels.o, which so stays self-contained (package/link.py).
 * The weights were packed at build time as [ceil(n/T)][k][T] (T =
 * TFRT_MATVEC_TILE output lanes, zero rows pad the last tile) and stay in
 * the kernel object's read-only data; the offsets are in elements.
 *
 * Portable C: the lane loops over plain float arrays are what the C compiler
 * vectorises for the target (AVX-512/AVX2/SSE, NEON) at -O3. What makes it
 * fast is the number of independent accumulators: T lanes times 2 partial
 * sums over k (even and odd columns) are 4 AVX-512 / 8 AVX2 / 16 NEON
 * vector chains, where IREE's own kernel keeps one chain (iree-notes 7).
 *
 * Half-width weights (--weights-dtype, symbol NAME_matvec_bf16/_f16): with
 * -DTFRT_MATVEC_BF16 or -DTFRT_MATVEC_F16 the packed weights are 16-bit
 * (bf16: the upper half of the f32; f16: IEEE half), converted to f32 as
 * they are loaded; math and accumulation stay f32. Big models are bound by
 * reading the weights (bench/bench_litert.py): half the bytes is the gain.
 */
#include <stddef.h>
#include <stdint.h>

#ifndef TFRT_MATVEC_FN
#error "compile with -DTFRT_MATVEC_FN=<the symbol the kernel object calls>"
#endif

/* Output lanes per packed tile; compiler/microkernel.py TILE must agree. */
#define TFRT_MATVEC_TILE 32

/* A fused multiply-add only where the FPU has one (never a libm call; the
 * builtin needs no math.h, also freestanding); -std=c11 keeps gcc from
 * contracting a*b+c itself. */
#if (defined(__FMA__) || defined(__ARM_FEATURE_FMA)) && defined(__GNUC__)
#define TFRT_MAC(acc, w, x) ((acc) = __builtin_fmaf((w), (x), (acc)))
#else
#define TFRT_MAC(acc, w, x) ((acc) += (w) * (x))
#endif

/* The stored weight type and its conversion to f32 (TFRT_W). */
#if defined(TFRT_MATVEC_BF16)
typedef uint16_t tfrt_weight;
/* bf16 is the upper half of an f32: a shift (vectorises to a widening
 * move and a shift). */
static inline float tfrt_w(uint16_t h) {
  const union { uint32_t u; float f; } v = {(uint32_t)h << 16};
  return v.f;
}
#define TFRT_W(v) tfrt_w(v)
#elif defined(TFRT_MATVEC_F16) && defined(__aarch64__) && defined(__FLT16_MAX__)
__extension__ typedef _Float16 tfrt_weight;
/* aarch64 converts vectors of halves in one instruction (fcvtl). Not used
 * on x86-64: gcc 12 converts _Float16 one element at a time there (10x
 * slower than the routine below, measured with F16C). */
#define TFRT_W(v) ((float)(v))
#elif defined(TFRT_MATVEC_F16)
typedef uint16_t tfrt_weight;
/* IEEE half to f32 in integer and f32 operations that vectorise: the
 * half's sign, exponent and mantissa bits moved to an f32's (sign-extend,
 * shift, mask), scaled by 2^(127-15). Exact for every finite half; the
 * packing stores no Inf or NaN, and no subnormals either: those would be
 * subnormal f32s here, which x86 multiplies on a slow path
 * (compiler/microkernel.py to_half). */
static inline float tfrt_w(uint16_t h) {
  const union { uint32_t u; float f; } v = {((uint32_t)(int32_t)(int16_t)h << 13) & 0x8fffe000u};
  return v.f * 0x1p112f;
}
#define TFRT_W(v) tfrt_w(v)
#else
typedef float tfrt_weight;
#define TFRT_W(v) (v)
#endif

void TFRT_MATVEC_FN(const tfrt_weight *w, const float *x, size_t x_offset, float *y,
                    size_t y_offset, size_t n, size_t k);

void TFRT_MATVEC_FN(const tfrt_weight *w, const float *x, size_t x_offset, float *y,
                    size_t y_offset, size_t n, size_t k) {
  enum { T = TFRT_MATVEC_TILE };
  x += x_offset;
  y += y_offset;
  for (size_t t = 0; t < n; t += T, w += k * T) {
    float even[T] = {0}, odd[T] = {0};
    size_t j = 0;
    for (; j + 2 <= k; j += 2) {
      const float x0 = x[j], x1 = x[j + 1];
      const tfrt_weight *w0 = w + j * T, *w1 = w0 + T;
      for (size_t l = 0; l < T; l++) TFRT_MAC(even[l], TFRT_W(w0[l]), x0);
      for (size_t l = 0; l < T; l++) TFRT_MAC(odd[l], TFRT_W(w1[l]), x1);
    }
    if (j < k) {
      for (size_t l = 0; l < T; l++) TFRT_MAC(even[l], TFRT_W(w[j * T + l]), x[j]);
    }
    const size_t m = n - t < T ? n - t : T;
    for (size_t l = 0; l < m; l++) y[t + l] = even[l] + odd[l];
  }
}
