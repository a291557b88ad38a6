/* tfrt_matvec.c - tfaot's micro-kernels: the matvec y[n] = W[n,k] . x[k], the
 * convolution and the depthwise convolution of one image with W (f32 math).
 *
 * The kernel object's matvec and convolution dispatches
 * (compiler/lower/microkernel.py) call TFRT_MATVEC_FN(w, w_offset, x, x_offset,
 * y, y_offset, n, k), TFRT_CONV_FN(...) and TFRT_DWCONV_FN(...) (depthwise);
 * the package stage compiles this file with -DTFRT_MATVEC_FN=NAME_matvec_f32
 * (and NAME_conv_f32, NAME_dwconv_f32: the kernels the model calls) and
 * merges it into NAME_kernels.o, which so stays self-contained
 * (package/link.py). A kernel whose macro is not given is left out.
 * The weights were packed at build time as [ceil(n/T)][k][T] (T =
 * TFRT_MATVEC_TILE output lanes, zero rows pad the last tile; a matvec of
 * at most TFRT_MATVEC_SMALL_TILE rows is one tile that wide; at most
 * TFRT_MATVEC_DOT_ROWS rows or outputs, T = 1: row after row) and stay in
 * the kernel object's read-only data (w_offset 0), or, with --weights=file,
 * in a buffer of the weights that init fills (w_offset: where this
 * matrix starts in it). The offsets are in elements (bytes for int8).
 *
 * Portable C: the lane loops over plain float arrays are what the C compiler
 * vectorises for the target (AVX-512/AVX2/SSE, NEON) at -O3. What makes it
 * fast is the number of independent accumulators: T lanes times 2 partial
 * sums over k (even and odd columns) are 4 AVX-512 / 8 AVX2 / 16 NEON
 * vector chains, where IREE's own kernel keeps one chain (iree-notes 7).
 *
 * int8 weights (--weights-dtype=int8, symbol NAME_matvec_int8): with
 * -DTFRT_MATVEC_INT8 the matvec is the int8 one below (int8 weights and a
 * per-call int8 input, int32 sums; paths for AVX2/VNNI, NEON/SDOT, the
 * Cortex-M DSP extension and portable C); the convolutions keep f32
 * weights.
 *
 * Half-width weights (--weights-dtype, symbol NAME_matvec_bf16/_f16): with
 * -DTFRT_MATVEC_BF16 or -DTFRT_MATVEC_F16 the packed weights are 16-bit
 * (bf16: the upper half of the f32; f16: IEEE half), converted to f32 as
 * they are loaded; math and accumulation stay f32. Big models are bound by
 * reading the weights (bench/bench_litert.py): half the bytes is the gain.
 */
#include <stddef.h>
#include <stdint.h>

#if !defined(TFRT_MATVEC_FN) && !defined(TFRT_CONV_FN) && !defined(TFRT_DWCONV_FN) && \
    !defined(TFRT_MATMUL_FN) && !defined(TFRT_QCONV_FN) && !defined(TFRT_POOL_FN) && \
    !defined(TFRT_RESIZE_FN)
#error "compile with -DTFRT_MATVEC_FN=, -DTFRT_CONV_FN=, -DTFRT_DWCONV_FN=, -DTFRT_MATMUL_FN=, -DTFRT_QCONV_FN=, -DTFRT_POOL_FN=, -DTFRT_RESIZE_FN=<the symbols the kernel object calls>"
#endif
#if (defined(TFRT_MATMUL_FN) || defined(TFRT_QCONV_FN)) && !defined(TFRT_MATVEC_INT8)
#error "TFRT_MATMUL_FN and TFRT_QCONV_FN are int8 kernels: compile them with -DTFRT_MATVEC_INT8"
#endif

/* A helper some of the kernels a build asks for leave uncalled. */
#define TFRT_UNUSED __attribute__((unused))

/* TFRT_INTRINSICS_ONLY: the AVX-512 paths' inline-assembly statements (each
 * says why it is one) become the intrinsics they stand for. The tests
 * define it to run those paths on any x86-64 CPU, their intrinsics
 * emulated in portable C (tests/data/kernels/emulated/immintrin.h); a
 * build for a real CPU never does. TFRT_IN_REGISTER(v): v is in a vector
 * register here (gcc otherwise folded such loads into each FMA). */
#ifdef TFRT_INTRINSICS_ONLY
#define TFRT_IN_REGISTER(v) ((void)0)
/* the 4 bytes at p as an int32 (an asm memory operand needs no alignment) */
TFRT_UNUSED static inline int32_t tfrt_i32_at(const void *p) {
  int32_t v;
  __builtin_memcpy(&v, p, sizeof v);
  return v;
}
#define TFRT_I32_AT(p) tfrt_i32_at(p)
#else
#define TFRT_IN_REGISTER(v) __asm__("" : "+v"(v))
#endif

/* Output lanes per packed tile; compiler/lower/microkernel.py TILE must agree.
 * Matvecs of at most TFRT_MATVEC_SMALL_TILE rows are one tile that wide
 * (microkernel.py SMALL_TILE). */
#define TFRT_MATVEC_TILE 32
#define TFRT_MATVEC_SMALL_TILE 16
/* Matrices of at most this many rows, and convolutions of at most this
 * many outputs, are stored row after row (T = 1: microkernel.py DOT_ROWS),
 * each output a dot product (tfrt_dot). In a tile, a Dense(1) over
 * 4000 inputs took 16 times its weights (and their reading) and a
 * Conv1D(1, 9) over 64 channels 32 times, their other lanes zeros. */
#define TFRT_MATVEC_DOT_ROWS 4

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
 * (compiler/lower/microkernel.py to_half). */
static inline float tfrt_w(uint16_t h) {
  const union { uint32_t u; float f; } v = {((uint32_t)(int32_t)(int16_t)h << 13) & 0x8fffe000u};
  return v.f * 0x1p112f;
}
#define TFRT_W(v) tfrt_w(v)
#else
typedef float tfrt_weight;
#define TFRT_W(v) (v)
#endif

/* The dot product of len weights w (TO_F32 converts a stored one) and
 * inputs x: TFRT_DOT_LANES partial sums over consecutive inputs, which the
 * compiler vectorises (one AVX-512 vector, two AVX2, four NEON), the rest's
 * products in one more, added pairwise at the end. (The rest added into
 * the partial sums by a counter kept them all in memory, the loop not
 * vectorised: a Dense(1) over 4000 int8 weights 2.5 us a call on AVX-512.) */
#define TFRT_DOT_LANES 16
#define TFRT_DOT_OF(NAME, WTYPE, TO_F32)                                                   \
  TFRT_UNUSED static inline float NAME(const WTYPE *w, const float *x, size_t len) {       \
    float sums[TFRT_DOT_LANES] = {0}, rest = 0;                                            \
    size_t j = 0;                                                                          \
    for (; j + TFRT_DOT_LANES <= len; j += TFRT_DOT_LANES)                                 \
      for (size_t l = 0; l < TFRT_DOT_LANES; l++) TFRT_MAC(sums[l], TO_F32(w[j + l]), x[j + l]); \
    for (; j < len; j++) TFRT_MAC(rest, TO_F32(w[j]), x[j]);                               \
    for (size_t h = TFRT_DOT_LANES / 2; h; h /= 2)                                         \
      for (size_t l = 0; l < h; l++) sums[l] += sums[l + h];                               \
    return sums[0] + rest;                                                                 \
  }
TFRT_DOT_OF(tfrt_dot, tfrt_weight, TFRT_W)
TFRT_DOT_OF(tfrt_dot_f32, float, )

/* The same over int8 weights: TFRT_DOT_CHUNK of them at a time widened to
 * f32, then tfrt_dot_f32. With the conversion in tfrt_dot's loop (or in
 * vector extensions), gcc 12 converted one weight at a time: 4000 weights
 * 1.7-2.9 us a call on AVX-512, against 0.67 like this. */
enum { TFRT_DOT_CHUNK = 64 };
TFRT_UNUSED static inline float tfrt_dot_i8(const int8_t *w, const float *x, size_t len) {
  float total = 0, wide[TFRT_DOT_CHUNK];
  for (size_t j = 0; j < len; j += TFRT_DOT_CHUNK) {
    const size_t count = len - j < TFRT_DOT_CHUNK ? len - j : TFRT_DOT_CHUNK;
    for (size_t i = 0; i < count; i++) wide[i] = (float)w[j + i];
    total += tfrt_dot_f32(wide, x + j, count);
  }
  return total;
}

/* x86-64 with AVX2 and FMA but not AVX-512 (AMD Zen 1-3, Intel before
 * Skylake-X), f32 weights, hosted: the convolutions' blocks below written
 * with intrinsics, where gcc kept plain C blocks' accumulators in memory. */
#if defined(__x86_64__) && defined(__AVX2__) && defined(__FMA__) && !defined(__AVX512F__) && \
    !defined(TFRT_MATVEC_BF16) && !defined(TFRT_MATVEC_F16) && !defined(TFRT_FREESTANDING)
#include <immintrin.h>
#define TFRT_AVX2_F32 1
#endif
/* 4-lane vectors, f32 weights, where no blocks above run: aarch64 (NEON)
 * and x86-64 without AVX2 (SSE2, which every x86-64 has; hosted): the
 * depthwise blocks in intrinsics (tfrt_dwconv.h; gcc kept the C blocks'
 * sums in memory at the image's edges, and ran the block of one position
 * on scalars). tfrt_v4_mac is fused where TFRT_MAC is. */
#if defined(__aarch64__) && defined(__ARM_NEON) && !defined(TFRT_MATVEC_BF16) && \
    !defined(TFRT_MATVEC_F16)
#include <arm_neon.h>
#define TFRT_V4_F32 1
typedef float32x4_t tfrt_v4;
#define tfrt_v4_load vld1q_f32
#define tfrt_v4_load1 vld1q_dup_f32 /* one float to every lane */
#define tfrt_v4_store vst1q_f32
#define tfrt_v4_set1 vdupq_n_f32
#define tfrt_v4_add vaddq_f32
#define tfrt_v4_max vmaxq_f32 /* (FMAX and FMIN keep a NaN) */
#define tfrt_v4_min vminq_f32
#define tfrt_v4_mac(acc, w, x) vfmaq_f32((acc), (w), (x))
#elif defined(__x86_64__) && !defined(TFRT_AVX2_F32) && !defined(__AVX512F__) && \
    !defined(TFRT_MATVEC_BF16) && !defined(TFRT_MATVEC_F16) && !defined(TFRT_FREESTANDING)
#include <immintrin.h>
#define TFRT_V4_F32 1
typedef __m128 tfrt_v4;
#define tfrt_v4_load _mm_loadu_ps
#define tfrt_v4_load1 _mm_load1_ps
#define tfrt_v4_store _mm_storeu_ps
#define tfrt_v4_set1 _mm_set1_ps
#define tfrt_v4_add _mm_add_ps
#define tfrt_v4_max _mm_max_ps /* (maxps and minps return their second operand on a NaN) */
#define tfrt_v4_min _mm_min_ps
#ifdef __FMA__
#define tfrt_v4_mac(acc, w, x) _mm_fmadd_ps((w), (x), (acc))
#else
#define tfrt_v4_mac(acc, w, x) _mm_add_ps((acc), _mm_mul_ps((w), (x)))
#endif
#endif
/* x86-64 with AVX-512, f32 weights, hosted: the depthwise block below in
 * intrinsics (gcc's code for the plain C block ran at about 20 GMAC/s on
 * a Zen 5, these at 30-37). */
#if defined(__x86_64__) && defined(__AVX512F__) && !defined(TFRT_MATVEC_BF16) && \
    !defined(TFRT_MATVEC_F16) && !defined(TFRT_FREESTANDING)
#include <immintrin.h>
#define TFRT_AVX512_F32 1
#endif

#if defined(TFRT_MATVEC_FN) || defined(TFRT_MATMUL_FN) || defined(TFRT_QCONV_FN)
/* Matrices at least this big (f32 weights) are walked back and forth. */
#define TFRT_MATVEC_BACK_AND_FORTH 32768

/* Whether this call walks the tiles of w last to first. A matrix bigger
 * than the cache, read in the same order every step, misses on every line
 * (the lines it will need first were evicted first); walked back and forth
 * across calls, each call starts with the lines the last call read last,
 * which are still cached. CNN Dense over the window, 1.28 MB on a 1.25 MB
 * L2: 23 -> 13 µs alone; LSTM(512)'s 4.7 MB, in its step: about 157 ->
 * 140 µs (bench/bench_litert.py: 0.95 -> 0.79x LiteRT). The order of
 * the tiles does not change any result (each tile is one independent set
 * of output lanes). The last direction per matrix is kept per thread, so
 * contexts on other threads do not race; without threads (bare metal, no
 * caches worth it) the walk is always forward. */
#if defined(__linux__) && !defined(TFRT_MATVEC_FORWARD_ONLY)
/* The big matrices this thread walked last (a model's step has a few),
 * searched one by one: an address hash made an LSTM's two matrices, 4 MB
 * apart, share one slot. Past 16 of them the oldest is forgotten. */
enum { TFRT_WALKS = 16 };
static _Thread_local struct {
  const void *w;
  int backwards;
} tfrt_last_walk[TFRT_WALKS];
static _Thread_local unsigned tfrt_next_walk;

TFRT_UNUSED
static int tfrt_walk_backwards(const void *w) {
  for (unsigned i = 0; i < TFRT_WALKS; i++) {
    if (tfrt_last_walk[i].w == w) {
      tfrt_last_walk[i].backwards = !tfrt_last_walk[i].backwards;
      return tfrt_last_walk[i].backwards;
    }
  }
  const unsigned slot = tfrt_next_walk++ % TFRT_WALKS;
  tfrt_last_walk[slot].w = w;
  tfrt_last_walk[slot].backwards = 0;
  return 0;
}
#else
TFRT_UNUSED
static int tfrt_walk_backwards(const void *w) {
  (void)w;
  return 0;
}
#endif

#ifndef TFRT_MATVEC_INT8
void TFRT_MATVEC_FN(const tfrt_weight *w, size_t w_offset, const float *x, size_t x_offset,
                    float *y, size_t y_offset, size_t n, size_t k);

/* One tile of L output lanes: y[l] = sum over j of wt[j][l] * x[j]. Two
 * partial sums (even and odd j) of L lanes each: several independent FMA
 * chains. A macro instantiated for L = 32 and 16 (matrices of at most 16
 * rows are packed 16 wide: no zero lanes to read and multiply), each with
 * exactly sized arrays, which gcc keeps in registers. */
#define TFRT_MATVEC_TILE_OF(L)                                                      \
  static void tfrt_matvec_tile_##L(const tfrt_weight *wt, const float *x, float *y, \
                                   size_t k, size_t lanes) {                        \
    float even[L] = {0}, odd[L] = {0};                                              \
    size_t j = 0;                                                                   \
    for (; j + 2 <= k; j += 2) {                                                    \
      const float x0 = x[j], x1 = x[j + 1];                                         \
      const tfrt_weight *w0 = wt + j * L, *w1 = w0 + L;                             \
      for (size_t l = 0; l < L; l++) TFRT_MAC(even[l], TFRT_W(w0[l]), x0);          \
      for (size_t l = 0; l < L; l++) TFRT_MAC(odd[l], TFRT_W(w1[l]), x1);           \
    }                                                                               \
    if (j < k) {                                                                    \
      for (size_t l = 0; l < L; l++) TFRT_MAC(even[l], TFRT_W(wt[j * L + l]), x[j]); \
    }                                                                               \
    for (size_t l = 0; l < lanes; l++) y[l] = even[l] + odd[l];                     \
  }
#if defined(__arm__) && defined(__ARM_FP) && !defined(__ARM_NEON)
/* 32-bit Arm with a scalar FPU and no vector unit (Cortex-M4F/M7/M33):
 * the tiles of L lanes above keep 2L sums, which do not fit its 32
 * single-precision registers, so gcc kept them in memory (about 13 cycles
 * per multiply-add on an M4). Here 8 lanes at a time: 8 sums, 8 weights
 * and the input element stay in registers, one weight load, one multiply
 * and one add per multiply-add (3 estimated M4 cycles; separate vmul and
 * vadd, which cost 1 each, where vfma costs 3; -std=c11 does not contract
 * them). Same packed layout, so the same blob serves both. */
#define TFRT_MATVEC_LANE_GROUP(q) a##q += TFRT_W(wj[q]) * xj;
#if !defined(TFRT_MATVEC_BF16) && !defined(TFRT_MATVEC_F16)
/* f32 weights: two input elements per asm statement, their 16 weights
 * loaded back to back (a load right after a load costs 1 cycle on the M4,
 * where gcc put each load between the arithmetic: 2), two statements per
 * pass of the loop: 3.75 -> 3.5 estimated M4 cycles a multiply-add on an
 * LSTM(64)'s matrices. */
#define TFRT_MATVEC_M_PAIR(L, wp_, xp_)                                                    \
  __asm__("vldr %[x0], [%[xp]]\n\t"                                                       \
          "vldr %[x1], [%[xp], #4]\n\t"                                                   \
          "vldr s16, [%[wp]]\n\tvldr s17, [%[wp], #4]\n\t"                                \
          "vldr s18, [%[wp], #8]\n\tvldr s19, [%[wp], #12]\n\t"                           \
          "vldr s20, [%[wp], #16]\n\tvldr s21, [%[wp], #20]\n\t"                          \
          "vldr s22, [%[wp], #24]\n\tvldr s23, [%[wp], #28]\n\t"                          \
          "vldr s24, [%[wp], #4*" #L "]\n\tvldr s25, [%[wp], #4*" #L "+4]\n\t"              \
          "vldr s26, [%[wp], #4*" #L "+8]\n\tvldr s27, [%[wp], #4*" #L "+12]\n\t"           \
          "vldr s28, [%[wp], #4*" #L "+16]\n\tvldr s29, [%[wp], #4*" #L "+20]\n\t"          \
          "vldr s30, [%[wp], #4*" #L "+24]\n\tvldr s31, [%[wp], #4*" #L "+28]\n\t"          \
          "vmul.f32 s16, s16, %[x0]\n\tvmul.f32 s17, s17, %[x0]\n\t"                      \
          "vmul.f32 s18, s18, %[x0]\n\tvmul.f32 s19, s19, %[x0]\n\t"                      \
          "vmul.f32 s20, s20, %[x0]\n\tvmul.f32 s21, s21, %[x0]\n\t"                      \
          "vmul.f32 s22, s22, %[x0]\n\tvmul.f32 s23, s23, %[x0]\n\t"                      \
          "vadd.f32 %[a0], %[a0], s16\n\tvadd.f32 %[a1], %[a1], s17\n\t"                  \
          "vadd.f32 %[a2], %[a2], s18\n\tvadd.f32 %[a3], %[a3], s19\n\t"                  \
          "vadd.f32 %[a4], %[a4], s20\n\tvadd.f32 %[a5], %[a5], s21\n\t"                  \
          "vadd.f32 %[a6], %[a6], s22\n\tvadd.f32 %[a7], %[a7], s23\n\t"                  \
          "vmul.f32 s24, s24, %[x1]\n\tvmul.f32 s25, s25, %[x1]\n\t"                      \
          "vmul.f32 s26, s26, %[x1]\n\tvmul.f32 s27, s27, %[x1]\n\t"                      \
          "vmul.f32 s28, s28, %[x1]\n\tvmul.f32 s29, s29, %[x1]\n\t"                      \
          "vmul.f32 s30, s30, %[x1]\n\tvmul.f32 s31, s31, %[x1]\n\t"                      \
          "vadd.f32 %[a0], %[a0], s24\n\tvadd.f32 %[a1], %[a1], s25\n\t"                  \
          "vadd.f32 %[a2], %[a2], s26\n\tvadd.f32 %[a3], %[a3], s27\n\t"                  \
          "vadd.f32 %[a4], %[a4], s28\n\tvadd.f32 %[a5], %[a5], s29\n\t"                  \
          "vadd.f32 %[a6], %[a6], s30\n\tvadd.f32 %[a7], %[a7], s31"                        \
          : [a0] "+t"(a0), [a1] "+t"(a1), [a2] "+t"(a2), [a3] "+t"(a3), [a4] "+t"(a4),       \
            [a5] "+t"(a5), [a6] "+t"(a6), [a7] "+t"(a7), [x0] "=&t"(x0_), [x1] "=&t"(x1_)   \
          : [wp] "r"(wp_), [xp] "r"(xp_)                                                   \
          : "memory", "s16", "s17", "s18", "s19", "s20", "s21", "s22", "s23", "s24", "s25", \
            "s26", "s27", "s28", "s29", "s30", "s31")
#define TFRT_MATVEC_M_PAIRS(L)                                                             \
  for (; j + 4 <= k; j += 4, wj += 4 * L) {                                                \
    float x0_, x1_;                                                                        \
    TFRT_MATVEC_M_PAIR(L, wj, x + j);                                                      \
    TFRT_MATVEC_M_PAIR(L, wj + 2 * L, x + j + 2);                                          \
  }                                                                                        \
  for (; j + 2 <= k; j += 2, wj += 2 * L) {                                                \
    float x0_, x1_;                                                                        \
    TFRT_MATVEC_M_PAIR(L, wj, x + j);                                                      \
  }

/* 16 lanes at a time over eight input elements a pass: the 16 sums in
 * s0-s15, the inputs in s16-s17 and the weights through the 14 scratch
 * registers s18-s31, each input pair's 32 weights in three runs of
 * back-to-back loads (a run's first load costs 2 cycles, the others 1).
 * Per multiply-add the same load, multiply and add as 8 lanes, in the same
 * order (the same sums, bit for bit), with half the input loads and runs
 * and a quarter of the loop passes (eight inputs a pass, not four: LSTM(64)
 * 111.4k -> 109.9k estimated M4 cycles). The whole loop is one asm
 * statement: 16 sums as operands
 * exceed gcc's 30 (a "+" operand counts twice); volatile, since its result
 * is in memory (a[]), not in its outputs. */
#define TFRT_M_LD(t, off) "vldr s" #t ", [%[wp], #" off "]\n\t"
#define TFRT_M_MAC(a, t, x) "vmul.f32 s" #t ", s" #t ", s" #x "\n\tvadd.f32 s" #a ", s" #a ", s" #t "\n\t"
/* Inputs j and j + 1 at byte XO of xp, their weights at byte W of wp
 * (W a string ending in "+"): 14 + 14 + 4 loads. */
#define TFRT_M16_PAIR(L, W, XO)                                                            \
  "vldr s16, [%[xp], #" XO "]\n\tvldr s17, [%[xp], #" XO "+4]\n\t"                       \
  TFRT_M_LD(18, W "0") TFRT_M_LD(19, W "4") TFRT_M_LD(20, W "8") TFRT_M_LD(21, W "12")     \
  TFRT_M_LD(22, W "16") TFRT_M_LD(23, W "20") TFRT_M_LD(24, W "24") TFRT_M_LD(25, W "28")  \
  TFRT_M_LD(26, W "32") TFRT_M_LD(27, W "36") TFRT_M_LD(28, W "40") TFRT_M_LD(29, W "44")  \
  TFRT_M_LD(30, W "48") TFRT_M_LD(31, W "52")                                              \
  TFRT_M_MAC(0, 18, 16) TFRT_M_MAC(1, 19, 16) TFRT_M_MAC(2, 20, 16) TFRT_M_MAC(3, 21, 16)  \
  TFRT_M_MAC(4, 22, 16) TFRT_M_MAC(5, 23, 16) TFRT_M_MAC(6, 24, 16) TFRT_M_MAC(7, 25, 16)  \
  TFRT_M_MAC(8, 26, 16) TFRT_M_MAC(9, 27, 16) TFRT_M_MAC(10, 28, 16)                       \
  TFRT_M_MAC(11, 29, 16) TFRT_M_MAC(12, 30, 16) TFRT_M_MAC(13, 31, 16)                     \
  TFRT_M_LD(18, W "56") TFRT_M_LD(19, W "60") TFRT_M_LD(20, W "4*" #L "+0")                \
  TFRT_M_LD(21, W "4*" #L "+4") TFRT_M_LD(22, W "4*" #L "+8") TFRT_M_LD(23, W "4*" #L "+12") \
  TFRT_M_LD(24, W "4*" #L "+16") TFRT_M_LD(25, W "4*" #L "+20")                            \
  TFRT_M_LD(26, W "4*" #L "+24") TFRT_M_LD(27, W "4*" #L "+28")                            \
  TFRT_M_LD(28, W "4*" #L "+32") TFRT_M_LD(29, W "4*" #L "+36")                            \
  TFRT_M_LD(30, W "4*" #L "+40") TFRT_M_LD(31, W "4*" #L "+44")                            \
  TFRT_M_MAC(14, 18, 16) TFRT_M_MAC(15, 19, 16) TFRT_M_MAC(0, 20, 17) TFRT_M_MAC(1, 21, 17) \
  TFRT_M_MAC(2, 22, 17) TFRT_M_MAC(3, 23, 17) TFRT_M_MAC(4, 24, 17) TFRT_M_MAC(5, 25, 17)  \
  TFRT_M_MAC(6, 26, 17) TFRT_M_MAC(7, 27, 17) TFRT_M_MAC(8, 28, 17) TFRT_M_MAC(9, 29, 17)  \
  TFRT_M_MAC(10, 30, 17) TFRT_M_MAC(11, 31, 17)                                            \
  TFRT_M_LD(18, W "4*" #L "+48") TFRT_M_LD(19, W "4*" #L "+52")                            \
  TFRT_M_LD(20, W "4*" #L "+56") TFRT_M_LD(21, W "4*" #L "+60")                            \
  TFRT_M_MAC(12, 18, 17) TFRT_M_MAC(13, 19, 17) TFRT_M_MAC(14, 20, 17) TFRT_M_MAC(15, 21, 17)

/* 16 lanes of a tile of L over all k inputs into y (at most `lanes`): the
 * sums start at zero in the asm and are stored straight to y where all 16
 * lanes are wanted and no input is left over (a zeroed array and a copy
 * per call cost 6% of a GRU(64)'s matvec). */
#define TFRT_MATVEC_M16_OF(L)                                                              \
  static void tfrt_matvec_m16_##L(const tfrt_weight *wt, const float *x, float *y,         \
                                  size_t k, size_t lanes) {                                \
    float a[16];                                                                           \
    const size_t quads = k / 4;                                                            \
    float *const sums = lanes >= 16 && quads * 4 == k ? y : a;                             \
    const tfrt_weight *wp = wt;                                                            \
    const float *xp = x;                                                                   \
    size_t left = quads;                                                                   \
    __asm__ volatile(                                                                      \
        "vmov s0, s1, %[zero], %[zero]\n\tvmov s2, s3, %[zero], %[zero]\n\t"              \
        "vmov s4, s5, %[zero], %[zero]\n\tvmov s6, s7, %[zero], %[zero]\n\t"              \
        "vmov s8, s9, %[zero], %[zero]\n\tvmov s10, s11, %[zero], %[zero]\n\t"            \
        "vmov s12, s13, %[zero], %[zero]\n\tvmov s14, s15, %[zero], %[zero]\n\t"          \
        /* two quads a pass; an odd count enters the first pass half way, at \
         * its second quad, with the pointers one quad back (left: passes,  \
         * C: the count was even) */                                         \
        "adds %[left], %[left], #1\n\t"                                                    \
        "lsrs %[left], %[left], #1\n\t"                                                    \
        "beq 3f\n\t"                                                                       \
        "bcs 2f\n\t"                                                                       \
        "sub %[wp], %[wp], #16*" #L "\n\t"                                                 \
        "subs %[xp], #16\n\t"                                                              \
        "b 4f\n"                                                                           \
        "2:\n\t" TFRT_M16_PAIR(L, "", "0") TFRT_M16_PAIR(L, "8*" #L "+", "8")              \
        "4:\n\t" TFRT_M16_PAIR(L, "16*" #L "+", "16") TFRT_M16_PAIR(L, "24*" #L "+", "24") \
        "add %[wp], %[wp], #32*" #L "\n\t"                                                 \
        "adds %[xp], #32\n\t"                                                              \
        "subs %[left], #1\n\t"                                                             \
        "bne 2b\n"                                                                         \
        "3:\n\t"                                                                           \
        "vstmia %[sums], {s0-s15}"                                                         \
        : [wp] "+r"(wp), [xp] "+r"(xp), [left] "+r"(left)                                  \
        : [sums] "r"(sums), [zero] "r"(0)                                                  \
        : "cc", "memory", "s0", "s1", "s2", "s3", "s4", "s5", "s6", "s7", "s8", "s9",      \
          "s10", "s11", "s12", "s13", "s14", "s15", "s16", "s17", "s18", "s19", "s20",     \
          "s21", "s22", "s23", "s24", "s25", "s26", "s27", "s28", "s29", "s30", "s31");    \
    if (sums == y) return;                                                                 \
    for (size_t j = quads * 4; j < k; j++, wp += L)                                        \
      for (size_t i = 0; i < 16; i++) a[i] += wp[i] * x[j];                                \
    for (size_t i = 0; i < 16 && i < lanes; i++) y[i] = a[i];                              \
  }
#define TFRT_MATVEC_M16(L, wt, x, y, k, lanes, l)                                          \
  for (; (l) + 8 < (lanes); (l) += 16)                                                     \
    tfrt_matvec_m16_##L((wt) + (l), x, (y) + (l), k, (lanes) - (l))
#else
#define TFRT_MATVEC_M_PAIRS(L)
#define TFRT_MATVEC_M16_OF(L)
#define TFRT_MATVEC_M16(L, wt, x, y, k, lanes, l)
#endif
#define TFRT_MATVEC_TILE_OF_M(L)                                                      \
  TFRT_MATVEC_M16_OF(L)                                                               \
  static void tfrt_matvec_tile_##L(const tfrt_weight *wt, const float *x, float *y,   \
                                   size_t k, size_t lanes) {                          \
    size_t l = 0;                                                                     \
    TFRT_MATVEC_M16(L, wt, x, y, k, lanes, l);                                        \
    for (; l < lanes; l += 8) {                                                       \
      float a0 = 0, a1 = 0, a2 = 0, a3 = 0, a4 = 0, a5 = 0, a6 = 0, a7 = 0;           \
      const tfrt_weight *wj = wt + l;                                                 \
      size_t j = 0;                                                                   \
      TFRT_MATVEC_M_PAIRS(L)                                                          \
      for (; j < k; j++, wj += L) {                                                   \
        const float xj = x[j];                                                        \
        TFRT_MATVEC_LANE_GROUP(0) TFRT_MATVEC_LANE_GROUP(1) TFRT_MATVEC_LANE_GROUP(2) \
        TFRT_MATVEC_LANE_GROUP(3) TFRT_MATVEC_LANE_GROUP(4) TFRT_MATVEC_LANE_GROUP(5) \
        TFRT_MATVEC_LANE_GROUP(6) TFRT_MATVEC_LANE_GROUP(7)                           \
      }                                                                               \
      const float sums[8] = {a0, a1, a2, a3, a4, a5, a6, a7};                         \
      for (size_t i = 0; i < 8 && l + i < lanes; i++) y[l + i] = sums[i];             \
    }                                                                                 \
  }
#if defined(__ARM_FEATURE_MVE) && (__ARM_FEATURE_MVE & 2) && !defined(TFRT_MATVEC_BF16) && \
    !defined(TFRT_MATVEC_F16)
#include <arm_mve.h>
/* Helium with floating point (Cortex-M55/M85), f32 weights: 16 lanes a
 * pass as four vectors of sums (half of its 8 Q registers), each weight
 * vector loaded once and multiplied by the input element from a core
 * register (VFMA by a scalar): 2 instructions per 4 multiply-adds where
 * the scalar path has 12 (an LSTM(64) step on an M55: 98k -> 30k
 * instructions, bench_mcu.py --core m55). */
#define TFRT_MATVEC_TILE_OF_MVE(L)                                                    \
  static void tfrt_matvec_tile_##L(const tfrt_weight *wt, const float *x, float *y,   \
                                   size_t k, size_t lanes) {                          \
    for (size_t l = 0; l < lanes; l += 16) {                                          \
      float32x4_t a0 = vdupq_n_f32(0), a1 = a0, a2 = a0, a3 = a0;                     \
      const float *wj = wt + l;                                                       \
      for (size_t j = 0; j < k; j++, wj += L) {                                       \
        const float xj = x[j];                                                        \
        a0 = vfmaq_n_f32(a0, vld1q_f32(wj), xj);                                      \
        a1 = vfmaq_n_f32(a1, vld1q_f32(wj + 4), xj);                                  \
        a2 = vfmaq_n_f32(a2, vld1q_f32(wj + 8), xj);                                  \
        a3 = vfmaq_n_f32(a3, vld1q_f32(wj + 12), xj);                                 \
      }                                                                               \
      float sums[16];                                                                 \
      vst1q_f32(sums, a0);                                                            \
      vst1q_f32(sums + 4, a1);                                                        \
      vst1q_f32(sums + 8, a2);                                                        \
      vst1q_f32(sums + 12, a3);                                                       \
      for (size_t i = 0; i < 16 && l + i < lanes; i++) y[l + i] = sums[i];            \
    }                                                                                 \
  }
TFRT_MATVEC_TILE_OF_MVE(32)
TFRT_MATVEC_TILE_OF_MVE(16)
#else
TFRT_MATVEC_TILE_OF_M(32)
TFRT_MATVEC_TILE_OF_M(16)
#endif
#else
TFRT_MATVEC_TILE_OF(32)
TFRT_MATVEC_TILE_OF(16)
#endif

void TFRT_MATVEC_FN(const tfrt_weight *w, size_t w_offset, const float *x, size_t x_offset,
                    float *y, size_t y_offset, size_t n, size_t k) {
  w += w_offset;
  x += x_offset;
  y += y_offset;
  if (n <= TFRT_MATVEC_DOT_ROWS) {
    for (size_t i = 0; i < n; i++) y[i] = tfrt_dot(w + i * k, x, k);
    return;
  }
  if (n <= TFRT_MATVEC_SMALL_TILE) {
    tfrt_matvec_tile_16(w, x, y, k, n);
    return;
  }
  enum { T = TFRT_MATVEC_TILE };
  const size_t tiles = (n + T - 1) / T;
  const int backwards = n * k >= TFRT_MATVEC_BACK_AND_FORTH && tfrt_walk_backwards(w);
  for (size_t i = 0; i < tiles; i++) {
    const size_t tile = backwards ? tiles - 1 - i : i, t = tile * T;
    tfrt_matvec_tile_32(w + tile * k * T, x, y + t, k, n - t < T ? n - t : T);
  }
}

#else
/* ---- int8 matvec (--weights-dtype=int8) -----------------------------------
 * The scheme of TFLite's hybrid kernels and XNNPACK's dynamically quantized
 * fully connected operator: each row of W is int8 with its own scale
 * (symmetric, round(w / s_row), s_row = max|w_row| / 127, at build time);
 * the input vector is quantized the same way at every call, each block of
 * TFRT_I8_BLOCK inputs with its own scale s_b; the products are summed in
 * int32 per block and y = s_row * sum over blocks of s_b * sum_b.
 * Symmetric rather than asymmetric input:
 * an LSTM's or GRU's input is mostly a state in [-1, 1] and features around
 * 0, no zero point means no correction term per row, and the error is
 * LiteRT's own (bench/bench_litert.py measures both).
 *
 * w is one blob: the scales (f32, one per packed row, a multiple of 16, so
 * 64-byte aligned after them) and the int8 weights packed as
 * [ceil(n/T)][k4/4][T][4] (k4: k rounded up to 4; T as for f32), four
 * consecutive k of each lane together: the order of dot-product
 * instructions (x86 vpdpbusd, Arm sdot) and of 16-bit pair MACs.
 *
 * TFRT_MATMUL_FN is the product of the same blob with the input rows of
 * many streams (an N-stream step, --streams): see below. */
#ifdef TFRT_MATVEC_FN
void TFRT_MATVEC_FN(const int8_t *w, size_t w_offset, const float *x, size_t x_offset,
                    float *y, size_t y_offset, size_t n, size_t k);
#endif
#ifdef TFRT_MATMUL_FN
void TFRT_MATMUL_FN(const int8_t *w, size_t w_offset, const float *x, size_t x_offset,
                    float *y, size_t y_offset, size_t n, size_t k, size_t streams);
#endif

/* Input elements quantized per pass: the int8 copy lives on the stack
 * (and on 32-bit Arm the words widened from it: 128 keeps the kernel's
 * stack under 1 KB on a microcontroller; a multiple of TFRT_I8_BLOCK, so
 * the blocks and the result do not depend on it). Hosted, 2048: one pass
 * over the tiles for an LSTM(512)'s 576 inputs, where two passes (512 +
 * 64) cost 5% of its matvec on a Zen 5. */
#if defined(__ARM_FEATURE_DSP) && !defined(__aarch64__)
#define TFRT_I8_CHUNK 128
#elif defined(TFRT_FREESTANDING)
#define TFRT_I8_CHUNK 512
#else
#define TFRT_I8_CHUNK 2048
#endif
/* Inputs per quantization scale: the parts of a concatenated vector (an
 * LSTM's [x, h]: features of any range, a state within +-1) each get scales
 * of their own, where one scale for the whole vector left the state with a
 * few levels (more error than LiteRT's int8, which quantizes x and h
 * apart). 16 had less error than 32 at the same speed (bench_litert.py). */
#define TFRT_I8_BLOCK 16

/* Groups of 4 inputs per block (one scale). */
#define TFRT_I8_GROUPS (TFRT_I8_BLOCK / 4)

/* 32-bit Arm with the DSP extension, an FPU (tfrt_i8_pairs keeps words in
 * its registers: not with -mfloat-abi=soft) and no Helium (Cortex-M4/M7/M33): the
 * input is quantized to int16 instead, one scale per chunk, and stored as
 * the pairs SMLAD multiplies (tfrt_i8_quantize). SMLAD multiplies 16-bit
 * halves whether the input has 8 bits or 16, so the wider input costs
 * nothing there, and with one scale per chunk the int32 sums run over the
 * whole chunk: no f32 conversion and scaling per block of 16 (30 of the
 * 106 instructions per 64 multiply-adds before). The int16 input has
 * finer steps than int8 blocks wherever a block's largest |x| is over
 * 1/256 of the chunk's. Sums: 128 inputs x 127 x 32767 < 2^31. */
#if defined(__ARM_FEATURE_DSP) && defined(__ARM_FP) && !defined(__aarch64__) && \
    !(defined(__ARM_FEATURE_MVE) && (__ARM_FEATURE_MVE & 2))
#define TFRT_I8_WIDE 1
#define TFRT_I8_WIDE_MAX 32767.0f
/* The int16 inputs in pairs (2i, 2i+1), then the sum of the chunk's
 * inputs, as int32 bits, in the last word (tfrt_i8_tile_pairs needs it). */
typedef uint32_t tfrt_i8_in;
#define TFRT_I8_IN_LEN (TFRT_I8_CHUNK / 2 + 1)
#define TFRT_I8_SCALES 1
/* The matvec's blob pairs its lanes on these CPUs (tfrt_i8_tile_pairs);
 * the build packs it so where Target.int8_paired_rows says so, and tells
 * this file with -DTFRT_I8_PAIRED_BLOB: they must agree. */
#define TFRT_I8_PAIRED 1
#endif
#if defined(TFRT_I8_PAIRED_BLOB) && (TFRT_I8_PAIRED_BLOB + 0) != defined(TFRT_I8_PAIRED)
#error "the int8 weights were packed for another CPU than this one (paired lanes: Target.int8_paired_rows and TFRT_I8_PAIRED disagree)"
#endif
#ifndef TFRT_I8_WIDE
typedef int8_t tfrt_i8_in;
#define TFRT_I8_IN_LEN TFRT_I8_CHUNK
#define TFRT_I8_SCALES (TFRT_I8_CHUNK / TFRT_I8_BLOCK)
#endif

/* The T lanes of one tile over `groups` groups of 4 inputs: out[l] = sum
 * over blocks of block_scale[b] * (the block's int32 sum of lane l's
 * products). */
#define TFRT_I8_TILE_OF(T)                                                               \
  TFRT_UNUSED static void tfrt_i8_tile_##T(const int8_t *wt, const int8_t *xq,           \
                               const float *block_scale, size_t groups, float *out) {    \
    float total[T] = {0};                                                                \
    for (size_t g = 0; g < groups; g += TFRT_I8_GROUPS, block_scale++) {                 \
      const size_t end = groups - g < TFRT_I8_GROUPS ? groups : g + TFRT_I8_GROUPS;      \
      int32_t acc[T] = {0};                                                              \
      for (size_t h = g; h < end; h++, wt += 4 * T, xq += 4)                             \
        for (size_t l = 0; l < T; l++)                                                   \
          acc[l] += wt[4 * l] * xq[0] + wt[4 * l + 1] * xq[1] + wt[4 * l + 2] * xq[2] +  \
                    wt[4 * l + 3] * xq[3];                                               \
      for (size_t l = 0; l < T; l++) total[l] += (float)acc[l] * *block_scale;           \
    }                                                                                    \
    for (size_t l = 0; l < T; l++) out[l] = total[l];                                    \
  }

#if defined(__x86_64__) && defined(__AVX2__) && defined(__FMA__) && !defined(TFRT_FREESTANDING)
#include <immintrin.h>
#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
#define TFRT_I8_AVX512 1
#endif
#ifndef TFRT_I8_AVX512
/* AVX2 without VNNI: vpmaddubsw multiplies unsigned by signed bytes and
 * adds pairs to int16, so the input's signs go onto the weights (vpsignb)
 * and its magnitudes are the unsigned side: |x| <= 127 and |w| <= 127 keep
 * a pair's sum within int16 (2 * 127 * 127 < 32768: no saturation).
 * vpmaddwd by ones then adds the pairs to one int32 per lane: 32 products
 * per 4 vector operations, where sign-extending the weights to 16 bits for
 * vpmaddwd took 6 (30 -> 39 GMAC/s on a Zen 3; the trick of llama.cpp's
 * AVX2 q8 dot products). Each block's int32 sums go to f32 accumulators in
 * registers, times the block's scale. */
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
/* VNNI's vpdpbusd does the unsigned x signed products and the sum of four
 * into int32 in one instruction, without the int16 step (so the same sums
 * as the AVX2 sequence, which never saturates). */
#define TFRT_I8_DOT(acc, u, s) _mm256_dpbusd_epi32((acc), (u), (s))
#elif defined(__AVXVNNI__)
#define TFRT_I8_DOT(acc, u, s) _mm256_dpbusd_avx_epi32((acc), (u), (s))
#else
#define TFRT_I8_DOT(acc, u, s) \
  _mm256_add_epi32((acc), _mm256_madd_epi16(_mm256_maddubs_epi16((u), (s)), ones))
#endif
#define TFRT_I8_LANES8(i)                                                                  \
  a##i = TFRT_I8_DOT(                                                                     \
      a##i, xa, _mm256_sign_epi8(_mm256_loadu_si256((const __m256i *)(wt + 32 * (i))), xs));
#define TFRT_I8_SCALE8(i) f##i = _mm256_fmadd_ps(_mm256_cvtepi32_ps(a##i), scale, f##i);

TFRT_UNUSED
static void tfrt_i8_tile_avx2_32(const int8_t *wt, const int8_t *xq, const float *block_scale,
                                 size_t groups, float *out) {
  const __m256i ones = _mm256_set1_epi16(1);
  (void)ones;  /* (VNNI needs none) */
  __m256 f0 = _mm256_setzero_ps(), f1 = f0, f2 = f0, f3 = f0;
  for (size_t g = 0; g < groups; g += TFRT_I8_GROUPS, block_scale++) {
    const size_t end = groups - g < TFRT_I8_GROUPS ? groups : g + TFRT_I8_GROUPS;
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
    for (size_t h = g; h < end; h++, wt += 128, xq += 4) {
      int32_t four;
      __builtin_memcpy(&four, xq, sizeof four);
      const __m256i xs = _mm256_set1_epi32(four), xa = _mm256_abs_epi8(xs);
      TFRT_I8_LANES8(0) TFRT_I8_LANES8(1) TFRT_I8_LANES8(2) TFRT_I8_LANES8(3)
    }
    const __m256 scale = _mm256_broadcast_ss(block_scale);
    TFRT_I8_SCALE8(0) TFRT_I8_SCALE8(1) TFRT_I8_SCALE8(2) TFRT_I8_SCALE8(3)
  }
  _mm256_storeu_ps(out, f0);
  _mm256_storeu_ps(out + 8, f1);
  _mm256_storeu_ps(out + 16, f2);
  _mm256_storeu_ps(out + 24, f3);
}

/* The 16-lane tile of a matrix of at most 16 rows (a Dense(12) head, a
 * low-rank Dense(16) over a window): two ymm. The portable C tile took
 * 3x as long on a 16 x 1920 matrix. */
TFRT_UNUSED
static void tfrt_i8_tile_avx2_16(const int8_t *wt, const int8_t *xq, const float *block_scale,
                                 size_t groups, float *out) {
  const __m256i ones = _mm256_set1_epi16(1);
  (void)ones;  /* (VNNI needs none) */
  __m256 f0 = _mm256_setzero_ps(), f1 = f0;
  for (size_t g = 0; g < groups; g += TFRT_I8_GROUPS, block_scale++) {
    const size_t end = groups - g < TFRT_I8_GROUPS ? groups : g + TFRT_I8_GROUPS;
    __m256i a0 = _mm256_setzero_si256(), a1 = a0;
    for (size_t h = g; h < end; h++, wt += 64, xq += 4) {
      int32_t four;
      __builtin_memcpy(&four, xq, sizeof four);
      const __m256i xs = _mm256_set1_epi32(four), xa = _mm256_abs_epi8(xs);
      TFRT_I8_LANES8(0) TFRT_I8_LANES8(1)
    }
    const __m256 scale = _mm256_broadcast_ss(block_scale);
    TFRT_I8_SCALE8(0) TFRT_I8_SCALE8(1)
  }
  _mm256_storeu_ps(out, f0);
  _mm256_storeu_ps(out + 8, f1);
}
#define TFRT_I8_TILE_32 tfrt_i8_tile_avx2_32
#define TFRT_I8_TILE_16 tfrt_i8_tile_avx2_16
#else
/* AVX-512 VNNI: the tile's 32 lanes of a group of 4 inputs are two zmm.
 * vpdpbusd multiplies unsigned bytes by signed ones: the weights, offset to
 * unsigned (xor 0x80: w + 128), are the unsigned side, and the input's 4
 * bytes, broadcast from memory by the instruction itself, the signed one;
 * the offset's share, 128 times the block's input sum, comes from a third
 * vpdpbusd (ones times the input) and is subtracted from the block's sums,
 * which are so exactly the int32 sums of w * x. Each vpdpbusd is an asm
 * statement: gcc copied the sums of the intrinsic to other registers around
 * every one, lengthening the chain the sums form. Two blocks per pass,
 * their groups interleaved (two chains), their f32 scaling in order (the
 * matmul's tile4 sums the same way: streams equal the matvec bit for bit).
 * On a Zen 5, an LSTM(512)'s 2048 x 576 matrix 14.4 -> 10.0 us, a 1024 x
 * 256 one in L2 2.8 -> 2.0 us; the sign trick this replaced (the input's
 * signs moved onto the weights by masked subtractions) took 9 instructions
 * per group where this takes 7. */
#ifdef TFRT_INTRINSICS_ONLY
#define TFRT_I8_GROUP512(a0, a1, s, p, x)                                                  \
  {                                                                                        \
    const __m512i w0_ = _mm512_xor_si512(_mm512_loadu_si512((const void *)(p)), flip),    \
                  w1_ = _mm512_xor_si512(_mm512_loadu_si512((const void *)((p) + 64)),    \
                                         flip),                                            \
                  x_ = _mm512_set1_epi32(TFRT_I32_AT(x));                                  \
    a0 = _mm512_dpbusd_epi32(a0, w0_, x_);                                                 \
    a1 = _mm512_dpbusd_epi32(a1, w1_, x_);                                                 \
    s = _mm512_dpbusd_epi32(s, ones, x_);                                                  \
  }
#else
#define TFRT_I8_GROUP512(a0, a1, s, p, x)                                                  \
  {                                                                                        \
    const __m512i w0_ = _mm512_xor_si512(_mm512_loadu_si512((const void *)(p)), flip),    \
                  w1_ = _mm512_xor_si512(_mm512_loadu_si512((const void *)((p) + 64)),    \
                                         flip);                                            \
    __asm__("vpdpbusd %[xv]%{1to16%}, %[u0], %[b0]\n\t"                                     \
            "vpdpbusd %[xv]%{1to16%}, %[u1], %[b1]\n\t"                                     \
            "vpdpbusd %[xv]%{1to16%}, %[one], %[sv]"                                        \
            : [b0] "+v"(a0), [b1] "+v"(a1), [sv] "+v"(s)                                   \
            : [xv] "m"(*(const int32_t *)(const void *)(x)), [u0] "v"(w0_), [u1] "v"(w1_),  \
              [one] "v"(ones));                                                            \
  }
#endif
/* f += (the block's sums less the offset's share) * the block's scale */
#define TFRT_I8_ADD_BLOCK512(f, a, s, scale) \
  f = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(a, _mm512_slli_epi32(s, 7))), \
                      scale, f)

TFRT_UNUSED
static void tfrt_i8_tile_avx512_32(const int8_t *wt, const int8_t *xq,
                                   const float *block_scale, size_t groups, float *out) {
  const __m512i zero = _mm512_setzero_si512(), flip = _mm512_set1_epi8((char)0x80),
                ones = _mm512_set1_epi8(1);
  __m512 f0 = _mm512_setzero_ps(), f1 = f0;
  size_t g = 0;
  for (; g + 2 * TFRT_I8_GROUPS <= groups; g += 2 * TFRT_I8_GROUPS, block_scale += 2) {
    __m512i a0 = zero, a1 = zero, s0 = zero, b0 = zero, b1 = zero, s1 = zero;
    TFRT_I8_GROUP512(a0, a1, s0, wt, xq)
    TFRT_I8_GROUP512(b0, b1, s1, wt + 4 * 128, xq + 16)
    TFRT_I8_GROUP512(a0, a1, s0, wt + 128, xq + 4)
    TFRT_I8_GROUP512(b0, b1, s1, wt + 5 * 128, xq + 20)
    TFRT_I8_GROUP512(a0, a1, s0, wt + 2 * 128, xq + 8)
    TFRT_I8_GROUP512(b0, b1, s1, wt + 6 * 128, xq + 24)
    TFRT_I8_GROUP512(a0, a1, s0, wt + 3 * 128, xq + 12)
    TFRT_I8_GROUP512(b0, b1, s1, wt + 7 * 128, xq + 28)
    wt += 8 * 128, xq += 32;
    const __m512 scale0 = _mm512_set1_ps(block_scale[0]), scale1 = _mm512_set1_ps(block_scale[1]);
    TFRT_I8_ADD_BLOCK512(f0, a0, s0, scale0);
    TFRT_I8_ADD_BLOCK512(f1, a1, s0, scale0);
    TFRT_I8_ADD_BLOCK512(f0, b0, s1, scale1);
    TFRT_I8_ADD_BLOCK512(f1, b1, s1, scale1);
  }
  for (; g < groups; g += TFRT_I8_GROUPS, block_scale++) { /* the last, or a part block */
    const size_t end = groups - g < TFRT_I8_GROUPS ? groups : g + TFRT_I8_GROUPS;
    __m512i a0 = zero, a1 = zero, s0 = zero;
    for (size_t h = g; h < end; h++, wt += 128, xq += 4) TFRT_I8_GROUP512(a0, a1, s0, wt, xq)
    const __m512 scale = _mm512_set1_ps(*block_scale);
    TFRT_I8_ADD_BLOCK512(f0, a0, s0, scale);
    TFRT_I8_ADD_BLOCK512(f1, a1, s0, scale);
  }
  _mm512_storeu_ps(out, f0);
  _mm512_storeu_ps(out + 16, f1);
}

/* The 16-lane tile (a matrix of at most 16 rows): one zmm per group of 4
 * inputs, as above, the groups taking turns between two sums so that the
 * vpdpbusd do not wait on each other. The portable C tile took 3x as long
 * on a 16 x 1920 matrix. */
#ifdef TFRT_INTRINSICS_ONLY
#define TFRT_I8_GROUP512_16(a, s, p, x)                                                    \
  {                                                                                        \
    const __m512i w_ = _mm512_xor_si512(_mm512_loadu_si512((const void *)(p)), flip),     \
                  x_ = _mm512_set1_epi32(TFRT_I32_AT(x));                                 \
    a = _mm512_dpbusd_epi32(a, w_, x_);                                                    \
    s = _mm512_dpbusd_epi32(s, ones, x_);                                                  \
  }
#else
#define TFRT_I8_GROUP512_16(a, s, p, x)                                                    \
  {                                                                                        \
    const __m512i w_ = _mm512_xor_si512(_mm512_loadu_si512((const void *)(p)), flip);     \
    __asm__("vpdpbusd %[xv]%{1to16%}, %[u], %[b]\n\t"                                       \
            "vpdpbusd %[xv]%{1to16%}, %[one], %[sv]"                                        \
            : [b] "+v"(a), [sv] "+v"(s)                                                    \
            : [xv] "m"(*(const int32_t *)(const void *)(x)), [u] "v"(w_), [one] "v"(ones)); \
  }
#endif

TFRT_UNUSED
static void tfrt_i8_tile_avx512_16(const int8_t *wt, const int8_t *xq,
                                   const float *block_scale, size_t groups, float *out) {
  const __m512i zero = _mm512_setzero_si512(), flip = _mm512_set1_epi8((char)0x80),
                ones = _mm512_set1_epi8(1);
  __m512 f0 = _mm512_setzero_ps();
  for (size_t g = 0; g < groups; g += TFRT_I8_GROUPS, block_scale++) {
    const size_t end = groups - g < TFRT_I8_GROUPS ? groups : g + TFRT_I8_GROUPS;
    __m512i a0 = zero, a1 = zero, s0 = zero, s1 = zero;
    size_t h = g;
    for (; h + 2 <= end; h += 2, wt += 128, xq += 8) {
      TFRT_I8_GROUP512_16(a0, s0, wt, xq)
      TFRT_I8_GROUP512_16(a1, s1, wt + 64, xq + 4)
    }
    if (h < end) {
      TFRT_I8_GROUP512_16(a0, s0, wt, xq)
      wt += 64, xq += 4;
    }
    TFRT_I8_ADD_BLOCK512(f0, _mm512_add_epi32(a0, a1), _mm512_add_epi32(s0, s1),
                         _mm512_set1_ps(*block_scale));
  }
  _mm512_storeu_ps(out, f0);
}
#define TFRT_I8_TILE_32 tfrt_i8_tile_avx512_32
#define TFRT_I8_TILE_16 tfrt_i8_tile_avx512_16
#endif
#elif defined(__aarch64__) && defined(__ARM_NEON)
#include <arm_neon.h>
/* aarch64. With the dot-product extension (FEAT_DotProd: Cortex-A55/A76
 * and later, Neoverse, Apple cores; -mcpu=native finds it) SDOT adds four
 * int8 products to each int32 lane: one instruction per 4 lanes x 4 inputs,
 * which is the packed [T][4] layout. Without it, SMULL/SMULL2 widen the
 * products to int16 (|w x| <= 127 * 127), ADDP adds pairs (<= 32258, no
 * overflow) and SADALP adds the pairs of pairs into the int32 lanes: four
 * instructions per 16 products. */
static inline int32x4_t tfrt_i8_dot4(int32x4_t acc, int8x16_t w, int8x16_t x) {
#if defined(__ARM_FEATURE_DOTPROD)
  return vdotq_s32(acc, w, x);
#else
  const int16x8_t lo = vmull_s8(vget_low_s8(w), vget_low_s8(x));
  const int16x8_t hi = vmull_high_s8(w, x);
  return vpadalq_s16(acc, vpaddq_s16(lo, hi));
#endif
}

/* T lanes as T/4 vectors: int32 sums per block, f32 totals across them. */
#define TFRT_I8_TILE_NEON(T)                                                              \
  TFRT_UNUSED static void tfrt_i8_tile_neon_##T(const int8_t *wt, const int8_t *xq,       \
                                    const float *block_scale, size_t groups, float *out) { \
    float32x4_t total[T / 4];                                                            \
    for (size_t i = 0; i < T / 4; i++) total[i] = vdupq_n_f32(0);                         \
    for (size_t g = 0; g < groups; g += TFRT_I8_GROUPS, block_scale++) {                 \
      const size_t end = groups - g < TFRT_I8_GROUPS ? groups : g + TFRT_I8_GROUPS;      \
      int32x4_t acc[T / 4];                                                              \
      for (size_t i = 0; i < T / 4; i++) acc[i] = vdupq_n_s32(0);                         \
      for (size_t h = g; h < end; h++, wt += 4 * T, xq += 4) {                           \
        int32_t four;                                                                    \
        __builtin_memcpy(&four, xq, sizeof four);                                        \
        const int8x16_t x = vreinterpretq_s8_s32(vdupq_n_s32(four));                     \
        for (size_t i = 0; i < T / 4; i++)                                               \
          acc[i] = tfrt_i8_dot4(acc[i], vld1q_s8(wt + 16 * i), x);                       \
      }                                                                                  \
      const float32x4_t scale = vdupq_n_f32(*block_scale);                               \
      for (size_t i = 0; i < T / 4; i++)                                                 \
        total[i] = vfmaq_f32(total[i], vcvtq_f32_s32(acc[i]), scale);                    \
    }                                                                                    \
    for (size_t i = 0; i < T / 4; i++) vst1q_f32(out + 4 * i, total[i]);                  \
  }
TFRT_I8_TILE_NEON(32)
TFRT_I8_TILE_NEON(16)
#define TFRT_I8_TILE_32 tfrt_i8_tile_neon_32
#define TFRT_I8_TILE_16 tfrt_i8_tile_neon_16
#elif defined(__ARM_FEATURE_DSP) && !defined(__aarch64__)
#if defined(__ARM_FEATURE_MVE) && (__ARM_FEATURE_MVE & 2)
/* Helium with floating point (Cortex-M55/M85): its kernels, after the DSP
 * ones, take the matvec's tiles and the convolution's sums. */
#define TFRT_I8_MVE 1
#endif
/* 32-bit Arm with the DSP extension (Cortex-M4/M7/M33, Cortex-A in Arm
 * state): SMLAD multiplies two signed 16-bit halves pairwise and adds both
 * products to a 32-bit sum in one instruction (one cycle on the M4);
 * SXTB16 sign-extends bytes 0 and 2 of a word into the two halves (bytes 1
 * and 3 after a rotation by 8). So four products of a lane cost a word
 * load, two SXTB16 and two SMLAD; the input's words are widened once per
 * tile. The C of TFRT_I8_TILE_OF keeps T sums in memory and reads bytes
 * one at a time (about 3.5x the instructions). */
static inline uint32_t tfrt_sxtb16(uint32_t v) {
  uint32_t r;
  __asm__("sxtb16 %0, %1" : "=r"(r) : "r"(v));
  return r;
}

static inline uint32_t tfrt_sxtb16_ror8(uint32_t v) {
  uint32_t r;
  __asm__("sxtb16 %0, %1, ror #8" : "=r"(r) : "r"(v));
  return r;
}

TFRT_UNUSED static inline uint32_t tfrt_word(const int8_t *p) {
  uint32_t v;
  __builtin_memcpy(&v, p, sizeof v);
  return v;
}

/* Four lanes' products with one group of 4 inputs: the group's widened
 * input pair (LDRD) and the four lanes' weight words (LDR) loaded back to
 * back, then eight SXTB16 and eight SMLAD: 23 cycles for 16 products (a
 * load right after a load costs 1 on the M4; two LDRDs of weights between
 * the arithmetic took 25). Both pointers advance in the asm (wp by `step`
 * bytes to the next group's weights, the other words read behind it). One
 * asm statement: with C (a word load, and SXTB16 and SMLAD as
 * one-instruction asm) unrolled over a block, gcc hoisted every weight
 * load of the block to its start and spilled them to the stack, and kept a
 * pointer per group. */
#define TFRT_I8_DSP_GROUP(wptr, xptr, step)                                                  \
  do {                                                                                   \
    uint32_t w0_, w1_, w2_, w3_, t_, even_, odd_;                                        \
    __asm__("ldrd %[even], %[odd], [%[xp]], #8\n\t"                                      \
            "ldr %[w0], [%[wp]], %[next]\n\t"                                            \
            "ldr %[w1], [%[wp], %[back1]]\n\t"                                           \
            "ldr %[w2], [%[wp], %[back2]]\n\t"                                           \
            "ldr %[w3], [%[wp], %[back3]]\n\t"                                           \
            "sxtb16 %[t], %[w0]\n\t"                                                     \
            "smlad %[a0], %[t], %[even], %[a0]\n\t"                                      \
            "sxtb16 %[t], %[w0], ror #8\n\t"                                             \
            "smlad %[a0], %[t], %[odd], %[a0]\n\t"                                       \
            "sxtb16 %[t], %[w1]\n\t"                                                     \
            "smlad %[a1], %[t], %[even], %[a1]\n\t"                                      \
            "sxtb16 %[t], %[w1], ror #8\n\t"                                             \
            "smlad %[a1], %[t], %[odd], %[a1]\n\t"                                       \
            "sxtb16 %[t], %[w2]\n\t"                                                     \
            "smlad %[a2], %[t], %[even], %[a2]\n\t"                                      \
            "sxtb16 %[t], %[w2], ror #8\n\t"                                             \
            "smlad %[a2], %[t], %[odd], %[a2]\n\t"                                       \
            "sxtb16 %[t], %[w3]\n\t"                                                     \
            "smlad %[a3], %[t], %[even], %[a3]\n\t"                                      \
            "sxtb16 %[t], %[w3], ror #8\n\t"                                             \
            "smlad %[a3], %[t], %[odd], %[a3]"                                           \
            : [a0] "+r"(a0), [a1] "+r"(a1), [a2] "+r"(a2), [a3] "+r"(a3), [wp] "+r"(wptr), \
              [xp] "+r"(xptr), [w0] "=&r"(w0_), [w1] "=&r"(w1_), [w2] "=&r"(w2_),        \
              [w3] "=&r"(w3_), [t] "=&r"(t_), [even] "=&r"(even_), [odd] "=&r"(odd_)     \
            : [next] "n"(step), [back1] "n"(4 - (step)), [back2] "n"(8 - (step)),        \
              [back3] "n"(12 - (step))                                                   \
            : "memory");                                                                 \
  } while (0)

#ifdef TFRT_I8_WIDE
/* The input's words widened once per tile: per group, bytes 0 and 2, then
 * 1 and 3 (the int8 convolution's input). */
static inline void tfrt_i8_widen(const int8_t *xq, size_t groups, uint32_t *widened) {
  for (size_t h = 0; h < groups; h++) {
    const uint32_t v = tfrt_word(xq + 4 * h);
    widened[2 * h] = tfrt_sxtb16(v);
    widened[2 * h + 1] = tfrt_sxtb16_ror8(v);
  }
}

/* The matvec's passes (paired lanes). Its blob pairs lanes 2m and 2m+1
 * (pack_int8 with paired rows): per group of 4 inputs, two words
 * [e0 ^ 0x80, o0, e1 ^ 0x80, o1] and the same of inputs 2 and 3, where e
 * are lane 2m's weights (offset by 128 to unsigned bytes) and o lane
 * 2m+1's. SMLAD of such a word as it is with the input pair (x0, x1)
 * multiplies its halves, (e + 128) + 256 o as 16-bit numbers: the even
 * lane's products plus 256 times the odd lane's, in one sum. SXTB16 of the word
 * rotated by 8 gives the odd lane's weights for a sum of its own, and the
 * even lane's sum is then the first minus 256 times the second, minus 128
 * times the sum of the inputs (the offset's share). So 4 products take 3
 * instructions, where widening each lane's weights took 4: 19 estimated M4
 * cycles per group of 4 inputs and 4 lanes, from 23. The first sum wraps
 * (256 times the odd lane's is up to 2^37); the difference, modulo 2^32,
 * is exact, as the even lane's sum plus its offset's (< 255 * 32767 *
 * 128) fits in 32 bits.
 * A pass is four lanes (two pairs), and the blob keeps each pass's groups
 * together, 16 bytes a group ([tiles][T/4][k4/4][16]), so that a pass
 * reads its weights in order whatever the tile's width, and the passes
 * of all tiles are k4 * 4 bytes apart.
 * One group as asm text (a pass's body in tfrt_i8_pairs): the input pair (LDRD)
 * and the pass's four weight words loaded back to back (a load right after
 * a load costs 1 on the M4). Every instruction has a 32-bit encoding: the
 * jump table into the groups counts bytes. */
#define TFRT_I8_PAIRS_GROUP(g)                                                           \
  ".Lg%=_" #g ":\n\t"                                                                    \
  "ldrd %[x01], %[x23], [%[xp]], #8\n\t"                                                 \
  "ldr %[wa], [%[wp]], #16\n\t"                                                          \
  "ldr %[wb], [%[wp], #-12]\n\t"                                                         \
  "ldr %[wc], [%[wp], #-8]\n\t"                                                          \
  "ldr %[wd], [%[wp], #-4]\n\t"                                                          \
  "smlad %[m0], %[wa], %[x01], %[m0]\n\t"                                                \
  "sxtb16 %[wa], %[wa], ror #8\n\t"                                                      \
  "smlad %[o0], %[wa], %[x01], %[o0]\n\t"                                                \
  "smlad %[m0], %[wb], %[x23], %[m0]\n\t"                                                \
  "sxtb16 %[wb], %[wb], ror #8\n\t"                                                      \
  "smlad %[o0], %[wb], %[x23], %[o0]\n\t"                                                \
  "smlad %[m1], %[wc], %[x01], %[m1]\n\t"                                                \
  "sxtb16 %[wc], %[wc], ror #8\n\t"                                                      \
  "smlad %[o1], %[wc], %[x01], %[o1]\n\t"                                                \
  "smlad %[m1], %[wd], %[x23], %[m1]\n\t"                                                \
  "sxtb16 %[wd], %[wd], ror #8\n\t"                                                      \
  "smlad %[o1], %[wd], %[x23], %[o1]\n\t"
#define TFRT_I8_PAIRS_GROUPS8(a, b, c, d, e, f, g, h)                                    \
  TFRT_I8_PAIRS_GROUP(a) TFRT_I8_PAIRS_GROUP(b) TFRT_I8_PAIRS_GROUP(c)                   \
  TFRT_I8_PAIRS_GROUP(d) TFRT_I8_PAIRS_GROUP(e) TFRT_I8_PAIRS_GROUP(f)                   \
  TFRT_I8_PAIRS_GROUP(g) TFRT_I8_PAIRS_GROUP(h)
/* The jump table's entry for a pass of `left` groups: the group that many
 * before the end (in halfwords from the table). */
#define TFRT_I8_PAIRS_ENTRY(left) ".hword (.Lg%=_" #left " - .Lt%=) / 2\n\t"
#define TFRT_I8_PAIRS_ENTRIES8(a, b, c, d, e, f, g, h)                                   \
  TFRT_I8_PAIRS_ENTRY(a) TFRT_I8_PAIRS_ENTRY(b) TFRT_I8_PAIRS_ENTRY(c)                   \
  TFRT_I8_PAIRS_ENTRY(d) TFRT_I8_PAIRS_ENTRY(e) TFRT_I8_PAIRS_ENTRY(f)                   \
  TFRT_I8_PAIRS_ENTRY(g) TFRT_I8_PAIRS_ENTRY(h)

/* What tfrt_i8_pairs reads at its start: the first eight words into
 * s8-s15 with one VLDM (a VMOV between an s and a core register costs 1),
 * the outputs' pointer into a core register. */
struct tfrt_i8_pairs_args {
  const int8_t *w;          /* the first pass's weights; then the next one's */
  uint32_t stride;          /* bytes from a pass's weights to the next one's */
  const uint32_t *xw;       /* the int16 input pairs */
  uint32_t groups;          /* of 4 inputs, 1 to TFRT_I8_CHUNK / 4 */
  uint32_t neg_offset;      /* -128 times the inputs' sum: the even sums' start */
  float chunk_scale;        /* the input's scale */
  const float *row_scale;   /* the lanes' own scales, 4 a pass */
  const float *out_end;     /* out + 4 * passes */
  float *out;               /* 4 outputs a pass */
};

/* The outputs of `passes` passes of four lanes each, in one asm statement
 * (a C loop around a pass's asm kept its pointers on the stack, and the
 * loop over groups cost a compare and a branch every four: with them, 69
 * estimated cycles a pass besides the groups). A pass: its four sums from
 * zero (the even ones from the offset's share), the groups straight-line,
 * entered by a jump table (TBH on the count) at the group that leaves
 * exactly `groups` before the end, so no loop; then its four outputs: the
 * even lanes' sums m - 256 o (modulo 2^32 and so exact, see above) and the
 * odd lanes' o to f32, times the chunk's scale and then the lanes' own:
 * (sum * chunk's) * row's, tfrt_i8_tile_out's order, so that the matmul of
 * streams gives each stream the matvec's outputs bit for bit. 13 core
 * registers: the four sums, the two pointers, the group's six words and
 * the outputs' pointer; 2.2 KB of code for the 32 groups of a chunk. */
TFRT_UNUSED __attribute__((noinline))
static void tfrt_i8_pairs(const struct tfrt_i8_pairs_args *args) {
  const void *xp_ = args;
  uint32_t m0_, o0_, m1_, o1_, wa_, wb_, wc_, wd_, x01_, x23_;
  const void *wp_;
  float *out_;
  __asm__ volatile(
      "vldmia %[xp], {s8-s15}\n\t"
      "ldr %[out], [%[xp], #32]\n"
      ".Lp%=:\n\t"
      "vmov %[wp], s8\n\t"
      "vmov %[wa], s9\n\t"
      "add %[wa], %[wp], %[wa]\n\t"
      "vmov s8, %[wa]\n\t"
      "vmov %[xp], s10\n\t"
      "vmov %[m0], s12\n\t"
      "movs %[o0], #0\n\t"
      "vmov %[m1], s12\n\t"
      "movs %[o1], #0\n\t"
      "vmov %[wa], s11\n\t"
      "tbh [pc, %[wa], lsl #1]\n"
      ".Lt%=:\n\t"
      TFRT_I8_PAIRS_ENTRY(1) /* (no pass has 0 groups) */
      TFRT_I8_PAIRS_ENTRIES8(1, 2, 3, 4, 5, 6, 7, 8)
      TFRT_I8_PAIRS_ENTRIES8(9, 10, 11, 12, 13, 14, 15, 16)
      TFRT_I8_PAIRS_ENTRIES8(17, 18, 19, 20, 21, 22, 23, 24)
      TFRT_I8_PAIRS_ENTRIES8(25, 26, 27, 28, 29, 30, 31, 32)
      TFRT_I8_PAIRS_GROUPS8(32, 31, 30, 29, 28, 27, 26, 25)
      TFRT_I8_PAIRS_GROUPS8(24, 23, 22, 21, 20, 19, 18, 17)
      TFRT_I8_PAIRS_GROUPS8(16, 15, 14, 13, 12, 11, 10, 9)
      TFRT_I8_PAIRS_GROUPS8(8, 7, 6, 5, 4, 3, 2, 1)
      "sub %[m0], %[m0], %[o0], lsl #8\n\t"
      "sub %[m1], %[m1], %[o1], lsl #8\n\t"
      "vmov s0, s1, %[m0], %[o0]\n\t"
      "vmov s2, s3, %[m1], %[o1]\n\t"
      "vcvt.f32.s32 s0, s0\n\t"
      "vcvt.f32.s32 s1, s1\n\t"
      "vcvt.f32.s32 s2, s2\n\t"
      "vcvt.f32.s32 s3, s3\n\t"
      "vmul.f32 s0, s0, s13\n\t"
      "vmul.f32 s1, s1, s13\n\t"
      "vmul.f32 s2, s2, s13\n\t"
      "vmul.f32 s3, s3, s13\n\t"
      "vmov %[wa], s14\n\t"
      "vldmia %[wa]!, {s4-s7}\n\t"
      "vmov s14, %[wa]\n\t"
      "vmul.f32 s0, s0, s4\n\t"
      "vmul.f32 s1, s1, s5\n\t"
      "vmul.f32 s2, s2, s6\n\t"
      "vmul.f32 s3, s3, s7\n\t"
      "vstmia %[out]!, {s0-s3}\n\t"
      "vmov %[wa], s15\n\t"
      "cmp %[out], %[wa]\n\t"
      "bne .Lp%="
      : [m0] "=&r"(m0_), [o0] "=&r"(o0_), [m1] "=&r"(m1_), [o1] "=&r"(o1_), [wp] "=&r"(wp_),
        [xp] "+&r"(xp_), [wa] "=&r"(wa_), [wb] "=&r"(wb_), [wc] "=&r"(wc_), [wd] "=&r"(wd_),
        [x01] "=&r"(x01_), [x23] "=&r"(x23_), [out] "=&r"(out_)
      :
      : "cc", "memory", "s0", "s1", "s2", "s3", "s4", "s5", "s6", "s7", "s8", "s9", "s10",
        "s11", "s12", "s13", "s14", "s15");
}

/* One pass of four lanes over `groups` groups of 4 inputs: GROUP (one of
 * the asm statements above, which advance p and x and add into the pass's
 * sums) four groups at a time in straight-line code, then the rest. */
#define TFRT_I8_FOUR_LANES(GROUP, p, x, groups, T)                                       \
  do {                                                                                   \
    size_t h_ = 0;                                                                       \
    for (; h_ + 4 <= (groups); h_ += 4) {                                                \
      GROUP(p, x, 4 * (T));                                                              \
      GROUP(p, x, 4 * (T));                                                              \
      GROUP(p, x, 4 * (T));                                                              \
      GROUP(p, x, 4 * (T));                                                              \
    }                                                                                    \
    for (; h_ < (groups); h_++) GROUP(p, x, 4 * (T));                                    \
  } while (0)

/* The int32 sums of a 32-lane tile over all groups of int8 inputs (the
 * int8 convolution's image, whose blob, pack_qconv, keeps its lanes
 * apart), as f32 (exact below 2^24): the inputs widened here, four lanes
 * at a time. Not inlined: inlined into the int8 convolution, gcc kept the
 * tile's sums in FPU registers and moved them around every smlad (DS-CNN's
 * streamed int8 step: 581k -> 460k estimated M4 cycles). */
TFRT_UNUSED __attribute__((noinline))
static void tfrt_i8_sums_dsp_32(const int8_t *wt, const int8_t *xq, size_t groups, float *out) {
  enum { T = TFRT_MATVEC_TILE };
  uint32_t widened[TFRT_I8_CHUNK / 2];
  tfrt_i8_widen(xq, groups, widened);
  for (size_t l = 0; l < T; l += 4) {
    int32_t a0 = 0, a1 = 0, a2 = 0, a3 = 0;
    const int8_t *p = wt + l * 4;
    const uint32_t *x = widened;
    TFRT_I8_FOUR_LANES(TFRT_I8_DSP_GROUP, p, x, groups, T);
    out[l] = (float)a0, out[l + 1] = (float)a1, out[l + 2] = (float)a2, out[l + 3] = (float)a3;
  }
}
#define TFRT_I8_SUMS_32 tfrt_i8_sums_dsp_32
#endif

/* Two lanes' products with one group of 4 inputs of two positions (the
 * int8 convolution's pairs of positions, as CMSIS-NN's pointwise kernel
 * pairs them): each weight word widened once for both positions, and both
 * positions' input pairs loaded with two LDRDs (x: per group, A's pair then
 * B's). Three LDRDs, four SXTB16 and eight SMLAD: 21 cycles for 16
 * products, where a position at a time takes 25. */
#define TFRT_I8_DSP_PAIR_GROUP(wptr, xptr, step)                                         \
  do {                                                                                   \
    uint32_t w0_, w1_, t_, ea_, oa_, eb_, ob_;                                           \
    __asm__("ldrd %[ea], %[oa], [%[xp]], #8\n\t"                                         \
            "ldrd %[eb], %[ob], [%[xp]], #8\n\t"                                         \
            "ldrd %[w0], %[w1], [%[wp]], %[next]\n\t"                                    \
            "sxtb16 %[t], %[w0]\n\t"                                                     \
            "smlad %[a0], %[t], %[ea], %[a0]\n\t"                                        \
            "smlad %[b0], %[t], %[eb], %[b0]\n\t"                                        \
            "sxtb16 %[t], %[w0], ror #8\n\t"                                             \
            "smlad %[a0], %[t], %[oa], %[a0]\n\t"                                        \
            "smlad %[b0], %[t], %[ob], %[b0]\n\t"                                        \
            "sxtb16 %[t], %[w1]\n\t"                                                     \
            "smlad %[a1], %[t], %[ea], %[a1]\n\t"                                        \
            "smlad %[b1], %[t], %[eb], %[b1]\n\t"                                        \
            "sxtb16 %[t], %[w1], ror #8\n\t"                                             \
            "smlad %[a1], %[t], %[oa], %[a1]\n\t"                                        \
            "smlad %[b1], %[t], %[ob], %[b1]"                                            \
            : [a0] "+r"(a0), [a1] "+r"(a1), [b0] "+r"(b0), [b1] "+r"(b1),                \
              [wp] "+r"(wptr), [xp] "+r"(xptr), [w0] "=&r"(w0_), [w1] "=&r"(w1_),        \
              [t] "=&r"(t_), [ea] "=&r"(ea_), [oa] "=&r"(oa_), [eb] "=&r"(eb_),          \
              [ob] "=&r"(ob_)                                                            \
            : [next] "I"(step)                                                           \
            : "memory");                                                                 \
  } while (0)

/* The int32 sums (as f32) of a 32-lane tile for two positions at once over
 * `groups` groups of 4 inputs; `widened` holds per group A's widened pair,
 * then B's (tfrt_i8_widen_pair). Two lanes at a time: 13 registers in the
 * group's asm. */
TFRT_UNUSED __attribute__((noinline))
static void tfrt_i8_sums2_dsp_32(const int8_t *wt, const uint32_t *widened, size_t groups,
                                 float *out_a, float *out_b) {
  enum { T = TFRT_MATVEC_TILE };
  for (size_t l = 0; l < T; l += 2) {
    int32_t a0 = 0, a1 = 0, b0 = 0, b1 = 0;
    const int8_t *p = wt + l * 4;
    const uint32_t *x = widened;
    size_t h = 0;
    for (; h + 2 <= groups; h += 2) {
      TFRT_I8_DSP_PAIR_GROUP(p, x, 4 * T);
      TFRT_I8_DSP_PAIR_GROUP(p, x, 4 * T);
    }
    if (h < groups) TFRT_I8_DSP_PAIR_GROUP(p, x, 4 * T);
    out_a[l] = (float)a0, out_a[l + 1] = (float)a1;
    out_b[l] = (float)b0, out_b[l + 1] = (float)b1;
  }
}
#ifndef TFRT_I8_MVE
#define TFRT_I8_SUMS2_32 tfrt_i8_sums2_dsp_32
#endif

/* A group of 4 inputs of each of two positions, widened for the pair kernel */
TFRT_UNUSED static inline void tfrt_i8_widen_pair(uint32_t a, uint32_t b, uint32_t *widened) {
  widened[0] = tfrt_sxtb16(a);
  widened[1] = tfrt_sxtb16_ror8(a);
  widened[2] = tfrt_sxtb16(b);
  widened[3] = tfrt_sxtb16_ror8(b);
}

#ifdef TFRT_I8_MVE
#include <arm_mve.h>
/* Helium (Cortex-M55/M85) has no 4-way int8 dot product: VMULLB and VMULLT
 * multiply the even and the odd bytes into int16 (|w x| <= 127 * 127), one
 * VADD sums them to pairs (<= 32258, no overflow), VMOVLB and VMOVLT widen
 * each 32-bit lane's two pairs to int32 for the sum: 6 instructions per 4
 * lanes x 4 inputs, where the DSP path takes 19. */
static inline int32x4_t tfrt_i8_dot4_mve(int32x4_t acc, int8x16_t w, int8x16_t x) {
  const int16x8_t pairs = vaddq_s16(vmullbq_int_s8(w, x), vmulltq_int_s8(w, x));
  return vaddq_s32(acc, vaddq_s32(vmovlbq_s16(pairs), vmovltq_s16(pairs)));
}

/* The int32 sums of 8 lanes (two vectors) over `groups` groups of 4 inputs
 * from xq; p: the first lane's weights of the first group, a tile of T
 * lanes. Returns p past those groups. */
static inline __attribute__((always_inline)) const int8_t *tfrt_i8_lanes8_mve(
    const int8_t *p, const int8_t *xq, size_t groups, size_t T, int32x4_t *acc0,
    int32x4_t *acc1) {
  int32x4_t a0 = vdupq_n_s32(0), a1 = a0;
  for (size_t h = 0; h < groups; h++, p += 4 * T, xq += 4) {
    int32_t four;
    __builtin_memcpy(&four, xq, sizeof four);
    const int8x16_t x = vreinterpretq_s8_s32(vdupq_n_s32(four));
    a0 = tfrt_i8_dot4_mve(a0, vld1q_s8(p), x);
    a1 = tfrt_i8_dot4_mve(a1, vld1q_s8(p + 16), x);
  }
  *acc0 = a0, *acc1 = a1;
  return p;
}

/* 8 lanes at a time (two vectors of sums and of f32 totals: with the
 * products' temporaries, the 8 Q registers), over all blocks. */
#define TFRT_I8_TILE_MVE(T)                                                                \
  TFRT_UNUSED static void tfrt_i8_tile_mve_##T(const int8_t *wt, const int8_t *xq,         \
                                   const float *block_scale, size_t groups, float *out) {  \
    for (size_t l = 0; l < T; l += 8) {                                                    \
      float32x4_t total0 = vdupq_n_f32(0), total1 = total0;                                \
      const int8_t *p = wt + 4 * l;                                                        \
      const float *scale = block_scale;                                                    \
      for (size_t g = 0; g < groups; g += TFRT_I8_GROUPS, scale++) {                       \
        const size_t count = groups - g < TFRT_I8_GROUPS ? groups - g : TFRT_I8_GROUPS;    \
        int32x4_t acc0, acc1;                                                              \
        p = tfrt_i8_lanes8_mve(p, xq + 4 * g, count, T, &acc0, &acc1);                     \
        total0 = vfmaq_n_f32(total0, vcvtq_f32_s32(acc0), *scale);                         \
        total1 = vfmaq_n_f32(total1, vcvtq_f32_s32(acc1), *scale);                         \
      }                                                                                    \
      vst1q_f32(out + l, total0);                                                          \
      vst1q_f32(out + l + 4, total1);                                                      \
    }                                                                                      \
  }
TFRT_I8_TILE_MVE(32)
TFRT_I8_TILE_MVE(16)
#define TFRT_I8_TILE_32 tfrt_i8_tile_mve_32
#define TFRT_I8_TILE_16 tfrt_i8_tile_mve_16

/* The matvec's blob keeps its rows as they are here ("rows":
 * microkernel.pack_int8, Target.int8_layout), so a row's 16 weights of a
 * block of inputs are one vector and VMLADAV sums their 16 products into
 * one int32, as CMSIS-NN's fully connected layer does: four rows a pass
 * share each block's input vector, and their four sums, one vector, are
 * converted and scaled by the block's input scale together. The lanes'
 * layout took 7 instructions per 16 products (widening multiplies and
 * adds), this about 3. The same int32 block sums, so the same outputs. */
#define TFRT_I8_ROWS 1
/* Four rows' int32 sums of one block of 16 inputs x (w: the first row's
 * weights of it), as one vector; LOAD(p) loads a row's 16 weights. */
#define TFRT_I8_ROWS_BLOCK(w, k4, x, LOAD)                                                 \
  vsetq_lane_s32(vmladavq_s8(LOAD((w) + 3 * (k4)), x),                                     \
                 vsetq_lane_s32(vmladavq_s8(LOAD((w) + 2 * (k4)), x),                      \
                                vsetq_lane_s32(vmladavq_s8(LOAD((w) + (k4)), x),           \
                                               vdupq_n_s32(vmladavq_s8(LOAD(w), x)), 1),   \
                                2),                                                        \
                 3)

TFRT_UNUSED __attribute__((noinline))
static void tfrt_i8_rows_tile(const int8_t *w, size_t k4, const int8_t *xq,
                              const float *block_scale, size_t chunk, size_t rows, float *out) {
  const size_t full = chunk / TFRT_I8_BLOCK * TFRT_I8_BLOCK;
  const mve_pred16_t tail = vctp8q((uint32_t)(chunk - full));
#define TFRT_I8_ALL(p) vld1q_s8(p)
#define TFRT_I8_TAIL(p) vldrbq_z_s8(p, tail)
  for (size_t r = 0; r < rows; r += 4, w += 4 * k4) {
    float32x4_t total = vdupq_n_f32(0.0f);
    const float *scale = block_scale;
    for (size_t i = 0; i < full; i += TFRT_I8_BLOCK, scale++) {
      const int8x16_t x = vld1q_s8(xq + i);
      const int32x4_t sums = TFRT_I8_ROWS_BLOCK(w + i, k4, x, TFRT_I8_ALL);
      total = vfmaq_n_f32(total, vcvtq_f32_s32(sums), *scale);
    }
    if (full < chunk) {
      /* k4 need not be a multiple of 16: the last block loads zeros past
       * the chunk, so no weight of the next row is read */
      const int8x16_t x = TFRT_I8_TAIL(xq + full);
      const int32x4_t sums = TFRT_I8_ROWS_BLOCK(w + full, k4, x, TFRT_I8_TAIL);
      total = vfmaq_n_f32(total, vcvtq_f32_s32(sums), *scale);
    }
#undef TFRT_I8_ALL
#undef TFRT_I8_TAIL
    vst1q_f32(out + r, total);
  }
}

/* The int8 convolution's int32 sums of 32 lanes (no block scales), as f32
 * (exact below 2^24), one position at a time. Not inlined: inlined at each
 * of the convolution's call sites it added 12 KB of flash to a DS-CNN. */
TFRT_UNUSED __attribute__((noinline))
static void tfrt_i8_sums_mve_32(const int8_t *wt, const int8_t *xq, size_t groups, float *out) {
  enum { T = TFRT_MATVEC_TILE };
  for (size_t l = 0; l < T; l += 8) {
    int32x4_t acc0, acc1;
    tfrt_i8_lanes8_mve(wt + 4 * l, xq, groups, T, &acc0, &acc1);
    vst1q_f32(out + l, vcvtq_f32_s32(acc0));
    vst1q_f32(out + l + 4, vcvtq_f32_s32(acc1));
  }
}
#define TFRT_I8_SUMS_32 tfrt_i8_sums_mve_32
#endif
#endif
#if !defined(TFRT_I8_TILE_32) && !defined(TFRT_I8_WIDE)
/* the portable tiles (also the DSP extension without an FPU, whose
 * matvec has no paired-lane path) */
#define TFRT_I8_TILE_32 tfrt_i8_tile_32
#define TFRT_I8_TILE_16 tfrt_i8_tile_16
TFRT_I8_TILE_OF(32)
TFRT_I8_TILE_OF(16)
#endif

/* Largest |x[i]| of n inputs; NaN if one is NaN or infinite. On the bit
 * patterns with the sign cleared, whose order as integers is the order of
 * the magnitudes (Inf and NaN above every finite one): an integer maximum,
 * which compilers vectorize (a float sum that caught NaN and Inf was a
 * serial chain: 12% of an int8 LSTM(512) matvec). */
static float tfrt_i8_absmax(const float *x, size_t n) {
  uint32_t top = 0;
  for (size_t i = 0; i < n; i++) {
    uint32_t bits;
    __builtin_memcpy(&bits, x + i, sizeof bits);
    bits &= 0x7FFFFFFFu;
    top = bits > top ? bits : top;
  }
  if (top >= 0x7F800000u) top = 0x7FC00000u; /* a quiet NaN */
  float value;
  __builtin_memcpy(&value, &top, sizeof value);
  return value;
}

/* Quantizes count inputs (0 up to padded, a multiple of TFRT_I8_BLOCK) one
 * block at a time: xq = round(x / scale) with scale = max|x| / 127 of the
 * block, in block_scale. */
#ifdef TFRT_I8_MVE
/* The same with Helium, 4 inputs a vector: the same operations in the same
 * order (|x|'s bits, x * inv, +-0.5, truncation), so the same bytes; a
 * block's inputs past count load as zeros. The scalar loop took about 20
 * instructions an input on the M55 (4k of a GRU(64) int8 step). */
TFRT_UNUSED
static void tfrt_i8_quantize(const float *x, size_t count, size_t padded, int8_t *xq,
                             float *block_scale) {
  const float32x4_t half = vdupq_n_f32(0.5f), minus_half = vdupq_n_f32(-0.5f);
  const uint32x4_t magnitude = vdupq_n_u32(0x7FFFFFFFu);
  for (size_t b = 0; b * TFRT_I8_BLOCK < padded; b++) {
    const size_t first = b * TFRT_I8_BLOCK;
    const size_t n = count > first ? (count - first < TFRT_I8_BLOCK ? count - first
                                                                     : TFRT_I8_BLOCK) : 0;
    float32x4_t v[TFRT_I8_BLOCK / 4];
    uint32x4_t top4 = vdupq_n_u32(0);
    for (size_t j = 0; j < TFRT_I8_BLOCK / 4; j++) {
      const size_t left = n > 4 * j ? n - 4 * j : 0;
      v[j] = vldrwq_z_f32(x + first + 4 * j, vctp32q((uint32_t)left));
      top4 = vmaxq_u32(top4, vandq_u32(vreinterpretq_u32_f32(v[j]), magnitude));
    }
    uint32_t bits = vmaxvq_u32(0, top4);
    if (bits >= 0x7F800000u) bits = 0x7FC00000u; /* a quiet NaN */
    float top;
    __builtin_memcpy(&top, &bits, sizeof top);
    const float inv = top > 0 ? 127.0f / top : 0.0f;
    block_scale[b] = top / 127.0f;
    for (size_t j = 0; j < TFRT_I8_BLOCK / 4; j++) {
      const float32x4_t q = vmulq_n_f32(v[j], inv);
      const float32x4_t r = vaddq_f32(q, vpselq_f32(minus_half, half, vcmpltq_n_f32(q, 0.0f)));
      vstrbq_s32(xq + first + 4 * j, vcvtq_s32_f32(r));
    }
  }
}
#elif !defined(TFRT_I8_WIDE)
TFRT_UNUSED
static void tfrt_i8_quantize(const float *x, size_t count, size_t padded, int8_t *xq,
                             float *block_scale) {
  for (size_t b = 0; b * TFRT_I8_BLOCK < padded; b++) {
    const size_t first = b * TFRT_I8_BLOCK;
    const size_t n = count > first ? (count - first < TFRT_I8_BLOCK ? count - first
                                                                     : TFRT_I8_BLOCK) : 0;
    const float top = tfrt_i8_absmax(x + first, n);
    const float inv = top > 0 ? 127.0f / top : 0.0f;
    block_scale[b] = top / 127.0f;
    for (size_t i = 0; i < n; i++) {
      const float v = x[first + i] * inv;
      xq[first + i] = (int8_t)(int32_t)(v + (v < 0 ? -0.5f : 0.5f));
    }
    for (size_t i = n; i < TFRT_I8_BLOCK; i++) xq[first + i] = 0;
  }
}
#else
/* v (|v| <= 32767) rounded to the nearest integer, ties to even, in the
 * low 16 bits: v + 1.5 * 2^23 is a float whose unit in the last place is
 * 1, so the FPU's addition (round to nearest even, its default mode) does
 * the rounding and leaves the integer, in two's complement, in the low
 * mantissa bits. One add, where a compare, a select, an add and a
 * float-to-int conversion took 16 M4 cycles an input. */
static inline uint32_t tfrt_i8_round16(float v) {
  const float biased = v + 12582912.0f;
  uint32_t bits;
  __builtin_memcpy(&bits, &biased, sizeof bits);
  return bits;
}

/* The float whose bits tfrt_i8_round16 adds to: 1.5 * 2^23. */
#define TFRT_I8_ROUND_BIAS 0x4B400000u

/* The same for the DSP path (TFRT_I8_WIDE): xq = round(x / scale) in
 * int16 with one scale for all count inputs (max|x| / 32767, in
 * block_scale[0]), stored in pairs, inputs 2i and 2i+1 in word i (zeros
 * up to padded), and their sum in xw's last word (tfrt_i8_tile_pairs). The
 * sum comes from the rounded floats' bits, 1.5 * 2^23 plus the integer
 * each: their total less count times the bias. */
TFRT_UNUSED
static void tfrt_i8_quantize_top(const float *x, size_t count, size_t padded, uint32_t *xw,
                                 float *block_scale, float top) {
  const float inv = top > 0 ? TFRT_I8_WIDE_MAX / top : 0.0f;
  block_scale[0] = top / TFRT_I8_WIDE_MAX;
  uint32_t biased_sum = 0;
  size_t i = 0;
  for (uint32_t *pair = xw; i + 4 <= count; i += 4, pair += 2) {
    const float *v = x + i;
    const uint32_t a = tfrt_i8_round16(v[0] * inv), b = tfrt_i8_round16(v[1] * inv),
                   c = tfrt_i8_round16(v[2] * inv), d = tfrt_i8_round16(v[3] * inv);
    pair[0] = (a & 0xFFFFu) | b << 16;
    pair[1] = (c & 0xFFFFu) | d << 16;
    biased_sum += (a + b) + (c + d);
  }
  for (; i + 2 <= count; i += 2) {
    const uint32_t a = tfrt_i8_round16(x[i] * inv), b = tfrt_i8_round16(x[i + 1] * inv);
    xw[i / 2] = (a & 0xFFFFu) | b << 16;
    biased_sum += a + b;
  }
  if (i < count) {  /* an odd count: the last input, then a zero */
    const uint32_t a = tfrt_i8_round16(x[i] * inv);
    xw[i / 2] = a & 0xFFFFu;
    biased_sum += a;
    i += 2;
  }
  for (; i < padded; i += 2) xw[i / 2] = 0;
  const int32_t sum = (int32_t)(biased_sum - (uint32_t)count * TFRT_I8_ROUND_BIAS);
  __builtin_memcpy(xw + TFRT_I8_IN_LEN - 1, &sum, sizeof sum);
}

TFRT_UNUSED
static void tfrt_i8_quantize(const float *x, size_t count, size_t padded, uint32_t *xw,
                             float *block_scale) {
  tfrt_i8_quantize_top(x, count, padded, xw, block_scale, tfrt_i8_absmax(x, count));
}
#endif

/* The layout of an int8 blob of n rows and k inputs (see above). */
#if defined(TFRT_I8_ROWS_BLOB) && (TFRT_I8_ROWS_BLOB + 0) != defined(TFRT_I8_ROWS)
#error "the int8 weights were packed for another CPU than this one (rows: Target.int8_layout and TFRT_I8_ROWS disagree)"
#endif

struct tfrt_i8_blob {
  size_t T, tiles, k4;
  const float *row_scale; /* one per packed row */
  const int8_t *wq; /* [tiles][k4/4][T][4]; paired: [tiles][T/4][k4/4][16]; rows: [tiles*T][k4] */
};

TFRT_UNUSED
static struct tfrt_i8_blob tfrt_i8_blob_of(const int8_t *w, size_t n, size_t k) {
  const size_t T = n <= TFRT_MATVEC_DOT_ROWS     ? 1
                   : n <= TFRT_MATVEC_SMALL_TILE ? TFRT_MATVEC_SMALL_TILE
                                                 : TFRT_MATVEC_TILE;
  const size_t tiles = (n + T - 1) / T;
  const struct tfrt_i8_blob b = {T, tiles, (k + 3) / 4 * 4, (const float *)(const void *)w,
                                 w + tiles * T * sizeof(float)};
  return b;
}

/* The blob of a matrix of at most TFRT_MATVEC_DOT_ROWS rows (T = 1: its
 * rows one after another, whatever the layout) against the f32 input x:
 * each row a dot product in f32 (no quantized input: the few rows cost
 * little either way), times the row's scale. */
TFRT_UNUSED
static void tfrt_i8_dot_rows(const struct tfrt_i8_blob *b, const float *x, size_t n, size_t k,
                             float *y) {
  for (size_t i = 0; i < n; i++) y[i] = tfrt_dot_i8(b->wq + i * b->k4, x, k) * b->row_scale[i];
}

/* A tile's sums of one chunk of inputs into y (lanes outputs from lane t):
 * times the rows' scales; the first chunk sets y, the next ones add. */
TFRT_UNUSED
static void tfrt_i8_tile_out(const struct tfrt_i8_blob *b, const float *out, size_t t,
                             size_t lanes, size_t k0, float *y) {
  for (size_t l = 0; l < lanes; l++) {
    const float part = out[l] * b->row_scale[t + l];
    y[t + l] = k0 ? y[t + l] + part : part;
  }
}

#ifdef TFRT_I8_PAIRED
/* The rows [first, first + rows) of a blob (rows: a multiple of 4) over the
 * chunk of inputs at k0 (`groups` groups of 4, quantized in xw with
 * `scale`) into out: (sum * scale) * row scale. */
static void tfrt_i8_pairs_rows(const struct tfrt_i8_blob *b, size_t k0, size_t groups,
                               const uint32_t *xw, float scale, size_t first, size_t rows,
                               float *out) {
  int32_t input_sum;
  __builtin_memcpy(&input_sum, xw + TFRT_I8_IN_LEN - 1, sizeof input_sum);
  const struct tfrt_i8_pairs_args args = {
      b->wq + first * b->k4 + 4 * k0, (uint32_t)(4 * b->k4), xw, (uint32_t)groups,
      0u - 128u * (uint32_t)input_sum, scale, b->row_scale + first, out + rows, out};
  tfrt_i8_pairs(&args);
}

/* The tile at row t of a chunk of paired-lane inputs (tfrt_i8_pairs_rows)
 * into y, `lanes` of its rows: the first chunk sets y, the next ones add
 * (tfrt_i8_tile_out's arithmetic: the rows' scales are applied already). */
TFRT_UNUSED
static void tfrt_i8_pairs_tile(const struct tfrt_i8_blob *b, size_t k0, size_t groups,
                               const uint32_t *xw, float scale, size_t t, size_t lanes,
                               float *y) {
  float out[TFRT_MATVEC_TILE];
  tfrt_i8_pairs_rows(b, k0, groups, xw, scale, t, b->T, out);
  for (size_t l = 0; l < lanes; l++) y[t + l] = k0 ? y[t + l] + out[l] : out[l];
}

/* The matvec on the paired-lane blob (quantized input pairs xw of the chunk
 * at k0): a matrix of one chunk has all its full tiles written straight
 * into y by one call, the rest tile by tile. */
TFRT_UNUSED
static void tfrt_i8_pairs_chunk(const struct tfrt_i8_blob *b, size_t n, size_t k0,
                                size_t chunk, const uint32_t *xw, float scale, int backwards,
                                float *y) {
  const size_t T = b->T, groups = chunk / 4;
  const size_t tiles = b->tiles;
  if (chunk == b->k4 && !backwards) {
    const size_t full = n / T * T;
    if (full) tfrt_i8_pairs_rows(b, 0, groups, xw, scale, 0, full, y);
    if (full == n) return;
    tfrt_i8_pairs_tile(b, 0, groups, xw, scale, full, n - full, y);
    return;
  }
  for (size_t i = 0; i < tiles; i++) {
    const size_t t = (backwards ? tiles - 1 - i : i) * T;
    tfrt_i8_pairs_tile(b, k0, groups, xw, scale, t, n - t < T ? n - t : T, y);
  }
}
#endif

#ifdef TFRT_MATVEC_FN
void TFRT_MATVEC_FN(const int8_t *w, size_t w_offset, const float *x, size_t x_offset,
                    float *y, size_t y_offset, size_t n, size_t k) {
  w += w_offset;
  x += x_offset;
  y += y_offset;
  const struct tfrt_i8_blob b = tfrt_i8_blob_of(w, n, k);
  if (b.T == 1) {
    tfrt_i8_dot_rows(&b, x, n, k, y);
    return;
  }
  const size_t T = b.T, tiles = b.tiles, k4 = b.k4;
  const float bad = tfrt_i8_absmax(x, k);
  if (bad != bad) {  /* NaN or Inf in x: W x is NaN, never a finite guess */
    for (size_t i = 0; i < n; i++) y[i] = bad;
    return;
  }
  const int backwards = n * k >= 4 * TFRT_MATVEC_BACK_AND_FORTH && tfrt_walk_backwards(w);
  tfrt_i8_in xq[TFRT_I8_IN_LEN];
  float block_scale[TFRT_I8_SCALES], out[TFRT_MATVEC_TILE];
  for (size_t k0 = 0; k0 < k4; k0 += TFRT_I8_CHUNK) {
    const size_t chunk = k4 - k0 < TFRT_I8_CHUNK ? k4 - k0 : TFRT_I8_CHUNK;
    const size_t blocks = (chunk + TFRT_I8_BLOCK - 1) / TFRT_I8_BLOCK;
#ifdef TFRT_I8_WIDE
    if (chunk == k4) /* one chunk: its max|x| is the one found above */
      tfrt_i8_quantize_top(x, k, blocks * TFRT_I8_BLOCK, xq, block_scale, bad);
    else
#endif
      tfrt_i8_quantize(x + k0, k - k0 < chunk ? k - k0 : chunk, blocks * TFRT_I8_BLOCK, xq,
                       block_scale);
#ifdef TFRT_I8_PAIRED
    (void)out, (void)T, (void)tiles;
    tfrt_i8_pairs_chunk(&b, n, k0, chunk, xq, block_scale[0], backwards, y);
#elif defined(TFRT_I8_ROWS)
    for (size_t i = 0; i < tiles; i++) {
      const size_t tile = backwards ? tiles - 1 - i : i, t = tile * T;
      tfrt_i8_rows_tile(b.wq + t * k4 + k0, k4, xq, block_scale, chunk, T, out);
      tfrt_i8_tile_out(&b, out, t, n - t < T ? n - t : T, k0, y);
    }
#else
    for (size_t i = 0; i < tiles; i++) {
      const size_t tile = backwards ? tiles - 1 - i : i, t = tile * T;
      const int8_t *wt = b.wq + (tile * k4 + k0) * T;
      if (T == TFRT_MATVEC_TILE)
        TFRT_I8_TILE_32(wt, xq, block_scale, chunk / 4, out);
      else
        TFRT_I8_TILE_16(wt, xq, block_scale, chunk / 4, out);
      tfrt_i8_tile_out(&b, out, t, n - t < T ? n - t : T, k0, y);
    }
#endif
  }
}
#endif

#ifdef TFRT_MATMUL_FN
/* Streams whose int8 inputs a pass of the matmul holds at once. */
#define TFRT_I8_STREAMS 8

#ifdef TFRT_I8_AVX512
/* (q: the stream) its group of 4 inputs, offset to unsigned, into 32 lanes */
#ifdef TFRT_INTRINSICS_ONLY
#define TFRT_I8_STREAM512(q)                                                              \
  tmp = _mm512_xor_si512(_mm512_set1_epi32(TFRT_I32_AT(xq[q] + 4 * h)),                   \
                         offset);                                                         \
  a##q##0 = _mm512_dpbusd_epi32(a##q##0, tmp, w0);                                        \
  a##q##1 = _mm512_dpbusd_epi32(a##q##1, tmp, w1);
#else
#define TFRT_I8_STREAM512(q)                                                              \
  __asm__("vpxord %[x]%{1to16%}, %[off], %[t]\n\t"                                         \
          "vpdpbusd %[wa], %[t], %[a0]\n\t"                                                \
          "vpdpbusd %[wb], %[t], %[a1]"                                                     \
          : [a0] "+v"(a##q##0), [a1] "+v"(a##q##1), [t] "=&v"(tmp)                        \
          : [x] "m"(*(const int32_t *)(const void *)(xq[q] + 4 * h)), [off] "v"(offset),  \
            [wa] "v"(w0), [wb] "v"(w1));
#endif
#define TFRT_I8_SCALE512(q)                                                               \
  {                                                                                       \
    const __m512 scale = _mm512_set1_ps(block_scale[q][g / TFRT_I8_GROUPS]);              \
    f##q##0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(a##q##0, c0)), scale,   \
                              f##q##0);                                                   \
    f##q##1 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(a##q##1, c1)), scale,   \
                              f##q##1);                                                   \
  }
#define TFRT_I8_STORE512(q)                                                               \
  _mm512_storeu_ps(out[q], f##q##0);                                                      \
  _mm512_storeu_ps(out[q] + 16, f##q##1);

/* Four streams' inputs against one 32-lane tile (AVX-512 VNNI). The inputs
 * are offset by 128 to unsigned bytes (xq ^ 0x80), so that the weights are
 * vpdpbusd's signed operand as they are, loaded once for the four streams
 * (the one-stream tile offsets the weights instead: one stream gains
 * nothing from sharing them); the offset's share, 128 times each block's
 * weight sums, comes from the same instruction with 128 for input, once
 * for the four, and is subtracted. The int32 block sums, and so the
 * outputs, are the one-stream tile's exactly. 8 + 2 int32 sums, 8 f32
 * accumulators and the weights fit the 32 registers (eight streams, their
 * f32 sums in memory, were 1.2x slower). The vpdpbusd are asm, as in the
 * one-stream tile (gcc's copies around the intrinsic: 8 streams of an
 * LSTM(512)'s matrix 78 -> 49 us on a Zen 5, 1.6x the one-stream tile's
 * speed). */
static void tfrt_i8_tile4_avx512_32(const int8_t *wt, const int8_t *const xq[4],
                                    const float *const block_scale[4], size_t groups,
                                    float *const out[4]) {
  const __m512i zero = _mm512_setzero_si512(), offset = _mm512_set1_epi8((char)0x80);
  __m512 f00 = _mm512_setzero_ps(), f01 = f00, f10 = f00, f11 = f00, f20 = f00, f21 = f00,
         f30 = f00, f31 = f00;
  for (size_t g = 0; g < groups; g += TFRT_I8_GROUPS) {
    const size_t end = groups - g < TFRT_I8_GROUPS ? groups : g + TFRT_I8_GROUPS;
    __m512i c0 = zero, c1 = zero, a00 = zero, a01 = zero, a10 = zero, a11 = zero, a20 = zero,
            a21 = zero, a30 = zero, a31 = zero, tmp;
    for (size_t h = g; h < end; h++, wt += 128) {
      const __m512i w0 = _mm512_loadu_si512((const void *)wt),
                    w1 = _mm512_loadu_si512((const void *)(wt + 64));
#ifdef TFRT_INTRINSICS_ONLY
      c0 = _mm512_dpbusd_epi32(c0, offset, w0);
      c1 = _mm512_dpbusd_epi32(c1, offset, w1);
#else
      __asm__("vpdpbusd %[wa], %[off], %[c0]\n\t"
              "vpdpbusd %[wb], %[off], %[c1]"
              : [c0] "+v"(c0), [c1] "+v"(c1) : [off] "v"(offset), [wa] "v"(w0), [wb] "v"(w1));
#endif
      TFRT_I8_STREAM512(0) TFRT_I8_STREAM512(1) TFRT_I8_STREAM512(2) TFRT_I8_STREAM512(3)
    }
    TFRT_I8_SCALE512(0) TFRT_I8_SCALE512(1) TFRT_I8_SCALE512(2) TFRT_I8_SCALE512(3)
  }
  TFRT_I8_STORE512(0) TFRT_I8_STORE512(1) TFRT_I8_STORE512(2) TFRT_I8_STORE512(3)
}
#endif

#if !defined(TFRT_I8_PAIRED) && !defined(TFRT_I8_ROWS)
/* The output tile at t (T lanes) of the streams `good` (count of them: the
 * rows of xq with finite inputs, each chunk inputs with its block scales)
 * from the packed weights wt: while the streams take turns, the tile's
 * weights stay in L1, so they come from memory once per pass for all of
 * them (AVX-512 VNNI: registers, four streams at once). */
static void tfrt_i8_tile_rows(const int8_t *wt, size_t T, size_t chunk, const size_t *good,
                              size_t count, const tfrt_i8_in (*xq)[TFRT_I8_IN_LEN],
                              const float (*block_scale)[TFRT_I8_SCALES],
                              float *out) {
  size_t i = 0;
#ifdef TFRT_I8_AVX512
  for (; T == TFRT_MATVEC_TILE && i + 4 <= count; i += 4) {
    const int8_t *xs[4];
    const float *scales[4];
    float *outs[4];
    for (size_t q = 0; q < 4; q++) {
      xs[q] = xq[good[i + q]];
      scales[q] = block_scale[good[i + q]];
      outs[q] = out + good[i + q] * TFRT_MATVEC_TILE;
    }
    tfrt_i8_tile4_avx512_32(wt, xs, scales, chunk / 4, outs);
  }
#endif
  for (; i < count; i++) {
    const size_t r = good[i];
    if (T == TFRT_MATVEC_TILE)
      TFRT_I8_TILE_32(wt, xq[r], block_scale[r], chunk / 4, out + r * TFRT_MATVEC_TILE);
    else
      TFRT_I8_TILE_16(wt, xq[r], block_scale[r], chunk / 4, out + r * TFRT_MATVEC_TILE);
  }
}
#endif

/* y[s] = W x[s] for each of `streams` input rows (x is [streams][k], y
 * [streams][n]: an N-stream step's X[N,K] . W): the int8 blob of
 * TFRT_MATVEC_FN, read once per TFRT_I8_STREAMS streams instead of once
 * per stream. Each stream's arithmetic is the matvec's, chunk for chunk,
 * so its outputs are those of a one-stream build, bit for bit; a stream
 * with NaN or Inf among its inputs gets NaN outputs alone. */
void TFRT_MATMUL_FN(const int8_t *w, size_t w_offset, const float *x, size_t x_offset,
                    float *y, size_t y_offset, size_t n, size_t k, size_t streams) {
  w += w_offset;
  x += x_offset;
  y += y_offset;
  const struct tfrt_i8_blob b = tfrt_i8_blob_of(w, n, k);
  if (b.T == 1) {
    for (size_t s = 0; s < streams; s++) tfrt_i8_dot_rows(&b, x + s * k, n, k, y + s * n);
    return;
  }
  const size_t T = b.T, tiles = b.tiles, k4 = b.k4;
  tfrt_i8_in xq[TFRT_I8_STREAMS][TFRT_I8_IN_LEN];
  float block_scale[TFRT_I8_STREAMS][TFRT_I8_SCALES];
  float out[TFRT_I8_STREAMS * TFRT_MATVEC_TILE];
  size_t good[TFRT_I8_STREAMS]; /* this pass's streams with finite inputs */
  for (size_t s0 = 0; s0 < streams; s0 += TFRT_I8_STREAMS) {
    const size_t rows = streams - s0 < TFRT_I8_STREAMS ? streams - s0 : TFRT_I8_STREAMS;
    const float *xs = x + s0 * k;
    float *ys = y + s0 * n;
    size_t count = 0;
    for (size_t r = 0; r < rows; r++) {
      const float top = tfrt_i8_absmax(xs + r * k, k);
      if (top == top)
        good[count++] = r;
      else
        for (size_t i = 0; i < n; i++) ys[r * n + i] = top;
    }
    const int backwards = n * k >= 4 * TFRT_MATVEC_BACK_AND_FORTH && tfrt_walk_backwards(w);
    for (size_t k0 = 0; k0 < k4; k0 += TFRT_I8_CHUNK) {
      const size_t chunk = k4 - k0 < TFRT_I8_CHUNK ? k4 - k0 : TFRT_I8_CHUNK;
      const size_t blocks = (chunk + TFRT_I8_BLOCK - 1) / TFRT_I8_BLOCK;
      for (size_t i = 0; i < count; i++)
        tfrt_i8_quantize(xs + good[i] * k + k0, k - k0 < chunk ? k - k0 : chunk,
                         blocks * TFRT_I8_BLOCK, xq[good[i]], block_scale[good[i]]);
      for (size_t i = 0; i < tiles; i++) {
        const size_t tile = backwards ? tiles - 1 - i : i, t = tile * T;
#ifdef TFRT_I8_PAIRED
        (void)out;
        for (size_t j = 0; j < count; j++)
          tfrt_i8_pairs_tile(&b, k0, chunk / 4, xq[good[j]], block_scale[good[j]][0], t,
                             n - t < T ? n - t : T, ys + good[j] * n);
#elif defined(TFRT_I8_ROWS)
        for (size_t j = 0; j < count; j++) {
          float *o = out + good[j] * TFRT_MATVEC_TILE;
          tfrt_i8_rows_tile(b.wq + t * k4 + k0, k4, xq[good[j]], block_scale[good[j]], chunk,
                            T, o);
          tfrt_i8_tile_out(&b, o, t, n - t < T ? n - t : T, k0, ys + good[j] * n);
        }
#else
        tfrt_i8_tile_rows(b.wq + (tile * k4 + k0) * T, T, chunk, good, count,
                          (const tfrt_i8_in (*)[TFRT_I8_IN_LEN])xq,
                          (const float (*)[TFRT_I8_SCALES])block_scale, out);
        for (size_t j = 0; j < count; j++)
          tfrt_i8_tile_out(&b, out + good[j] * TFRT_MATVEC_TILE, t, n - t < T ? n - t : T, k0,
                           ys + good[j] * n);
#endif
      }
    }
  }
}
#endif
#endif /* TFRT_MATVEC_INT8 */
#endif /* TFRT_MATVEC_FN || TFRT_MATMUL_FN || TFRT_QCONV_FN */

#if defined(TFRT_CONV_FN) || defined(TFRT_DWCONV_FN) || defined(TFRT_QCONV_FN) || \
    defined(TFRT_ACT_FN)
/* The convolutions' epilogue: what followed the convolution in the model
 * and the build folded into the kernel (conv_epilogue.py Epilogue: a bias,
 * a batch norm's shift, a ReLU or ReLU6 into its stores, a swish or hard
 * swish into a pass after it, tfrt_act_pass; a scale went into the weights).
 * post is [lo, hi, act, 0, bias[0..ceil(n/32)*32)] (zeros past n, so that
 * a whole tile's bias can be loaded): each output is act(min(max(y +
 * bias[o], lo), hi)), lo = -inf and hi = +inf where there was no clamp,
 * act one of TFRT_ACT_*. The vector blocks start their sums at the bias
 * and clamp only on the sides that have a bound (an epilogue at every
 * store cost 5% of a 64-channel pointwise layer). A NaN stays NaN. */
enum { TFRT_POST_BIAS = 4 };
/* The activations, as the build writes them into post[2] (each was a pass
 * of IREE's over the feature map: EfficientNet's swish, MobileNetV3's hard
 * swish) */
enum { TFRT_ACT_NONE = 0, TFRT_ACT_SWISH = 1, TFRT_ACT_HARD_SWISH = 2 };

TFRT_UNUSED static inline int tfrt_act_of(const float *post) { return (int)post[2]; }

TFRT_UNUSED static inline float tfrt_clamp_to(float lo, float hi, float v) {
  v = v < lo ? lo : v;
  return v > hi ? hi : v;
}

/* e^z as compiler/lower/activations.py writes it out for IREE (the same
 * polynomial and steps; its docstring has the derivation and the error,
 * 1.1e-7 relative for the logistic): z clamped to [-87, 87], n = round(z
 * / ln 2) by adding and subtracting 1.5 * 2^23, r = z - n ln 2 in two
 * parts, e^r = 1 + r + r^2 q(r), 2^n from the sum's low bits shifted into
 * the exponent field. No libm call (a Cortex-M4's expf is a newlib
 * routine) and the same steps as the vector forms below. */
#define TFRT_EXP_LOG2E 1.44269504f
#define TFRT_EXP_ROUNDER 12582912.0f
#define TFRT_EXP_LN2_HI 0.693359375f
#define TFRT_EXP_LN2_LO (-2.12194440e-4f)
#define TFRT_EXP_C0 1.381461275741458e-3f
#define TFRT_EXP_C1 8.368710055947304e-3f
#define TFRT_EXP_C2 4.166838899254799e-2f
#define TFRT_EXP_C3 1.666652113199234e-1f
#define TFRT_EXP_C4 4.999999403953552e-1f
#define TFRT_EXP_ONE_BITS 0x3F800000u /* 1.0f: 2^n is 1.0f's bits plus n << 23 */
TFRT_UNUSED static inline float tfrt_exp(float z) {
  z = z < -87.0f ? -87.0f : z > 87.0f ? 87.0f : z;
  union { float f; uint32_t u; } k = {z * TFRT_EXP_LOG2E + TFRT_EXP_ROUNDER}, two_n;
  const float n = k.f - TFRT_EXP_ROUNDER;
  const float r = (z - n * TFRT_EXP_LN2_HI) - n * TFRT_EXP_LN2_LO;
  const float q = (((TFRT_EXP_C0 * r + TFRT_EXP_C1) * r + TFRT_EXP_C2) * r + TFRT_EXP_C3) * r +
                  TFRT_EXP_C4;
  two_n.u = (k.u << 23) + TFRT_EXP_ONE_BITS;
  return two_n.f + two_n.f * (r + r * r * q);
}

/* swish(v) = v * logistic(v) = v / (1 + e^-v); hard swish(v) = v *
 * (relu6(v + 3) * (1/6)), in the order TensorFlow's graph computes it
 * (Keras' hard_silu: the division by 6 is a multiplication by 1/6 there) */
TFRT_UNUSED static inline float tfrt_act(int act, float v) {
  if (act == TFRT_ACT_SWISH) return v / (1.0f + tfrt_exp(-v));
  if (act == TFRT_ACT_HARD_SWISH) return v * (tfrt_clamp_to(0.0f, 6.0f, v + 3.0f) * (1.0f / 6.0f));
  return v;
}

/* the bias and the clamp of output o (the activation: tfrt_act_pass) */
TFRT_UNUSED static inline float tfrt_post(const float *post, size_t o, float v) {
  return tfrt_clamp_to(post[0], post[1], v + post[TFRT_POST_BIAS + o]);
}

/* A convolution's geometry g (struct tfrt_conv or tfrt_qconv: c, kw, iw,
 * ow, sh, sw, dh, dw): where run r of a patch starts, counted from the
 * patch's first input (a whole filter row when dw == 1, else one tap's
 * channels), and where output position p's patch starts in the image. */
#define TFRT_RUN_START(g, r)                                                            \
  ((((g)->dw == 1 ? (r) : (r) / (g)->kw) * (g)->dh * (g)->iw +                          \
    ((g)->dw == 1 ? 0 : (r) % (g)->kw) * (g)->dw) * (g)->c)
#define TFRT_PATCH_START(g, p) \
  ((((p) / (g)->ow) * (g)->sh * (g)->iw + ((p) % (g)->ow) * (g)->sw) * (g)->c)
/* The patch starts of positions p0 .. p0 + count - 1 (the last position
 * repeated past the end) into at[]: one division for the block, then a
 * step along the output row. A division per position cost more than the
 * multiply-adds of a pointwise layer with few input channels (a MobileNet's
 * 8 -> 48 expansion: 6 divisions against 8 x 12 FMAs a block). A pointwise
 * layer of stride 1 over an unpadded image (struct tfrt_conv's apart,
 * decided once a call) has its positions' inputs c apart, found without
 * the division and the steps: on a Zen 3 class EPYC (AVX2) a MobileNet's
 * 16 -> 96 expansion went from 27.6 to 29.5-30.1 GMAC/s, its 24 -> 144
 * from 33.4 to 34.8-36.1. */
#if defined(__x86_64__) || defined(__aarch64__) /* (a Cortex-M keeps its code small) */
#define TFRT_POSITIONS_APART(g) ((g)->apart)
#else
#define TFRT_POSITIONS_APART(g) 0
#endif
#define TFRT_PATCH_STARTS(g, x, p0, count, positions, at)                              \
  do {                                                                                  \
    if (TFRT_POSITIONS_APART(g)) {                                                      \
      for (size_t q_ = 0; q_ < (count); q_++)                                           \
        (at)[q_] = (x) + ((p0) + q_ < (positions) ? (p0) + q_ : (positions) - 1) * (g)->c; \
      break;                                                                            \
    }                                                                                   \
    size_t oy_ = (p0) / (g)->ow, ox_ = (p0) % (g)->ow, p_ = (p0);                      \
    for (size_t q_ = 0; q_ < (count); q_++) {                                           \
      (at)[q_] = (x) + (oy_ * (g)->sh * (g)->iw + ox_ * (g)->sw) * (g)->c;              \
      if (p_ + 1 < (positions)) {                                                       \
        p_++;                                                                           \
        if (++ox_ == (g)->ow) ox_ = 0, oy_++;                                           \
      }                                                                                 \
    }                                                                                   \
  } while (0)
#endif
#if (defined(TFRT_AVX512_F32) || defined(TFRT_AVX2_F32) || defined(TFRT_V4_F32)) && \
    (defined(TFRT_CONV_FN) || defined(TFRT_DWCONV_FN))
#include <float.h>
/* post's bounds, and which of them clamp */
struct tfrt_clamp {
  float lo, hi;
  int lower, upper;
};
static inline struct tfrt_clamp tfrt_clamp_of(const float *post) {
  const struct tfrt_clamp c = {post[0], post[1], post[0] >= -FLT_MAX, post[1] <= FLT_MAX};
  return c;
}
#ifdef TFRT_V4_F32
/* v clamped to post's bounds (the 4-lane convolution and depthwise blocks),
 * both always, as tfrt_clamp256 (its comment says why): a bound that does
 * not clamp is -inf or +inf, and FMAX/FMIN, maxps/minps, keep v's NaN. On
 * aarch64 (instructions under qemu, 28 x 28 positions, ReLU6) a pointwise
 * 8 -> 48 layer's call 345k -> 268k, 16 -> 96 913k -> 759k, 64 -> 64
 * 1.54M -> 1.44M; SSE2 (this AMD EPYC, best of 6 runs) 8 -> 48 8.1 -> 9.7
 * GMAC/s, 16 -> 96 11.0 -> 12.3. */
static inline tfrt_v4 tfrt_clamp_v4(struct tfrt_clamp c, tfrt_v4 v) {
  return tfrt_v4_min(tfrt_v4_set1(c.hi), tfrt_v4_max(tfrt_v4_set1(c.lo), v));
}
#endif
#endif
#if defined(TFRT_AVX512_F32) && (defined(TFRT_CONV_FN) || defined(TFRT_DWCONV_FN))
/* Fully unrolls a loop over a block's positions or vectors (a constant
 * count where the block is inlined), so that its accumulator arrays are
 * registers. clang unrolls such loops itself, and reads "GCC unroll N" as
 * a factor (a block of 8 with "unroll 12" stayed a loop over memory, 4x
 * slower), and "unroll" as an order to unroll before inlining (3x slower). */
#ifdef __clang__
#define TFRT_UNROLL
#else
#define TFRT_UNROLL _Pragma("GCC unroll 16")
#endif
#endif
#if (defined(TFRT_AVX512_F32) || defined(TFRT_AVX2_F32)) && \
    (defined(TFRT_CONV_FN) || defined(TFRT_DWCONV_FN) || defined(TFRT_QCONV_FN) || \
     defined(TFRT_ACT_FN))
/* tfrt_exp and tfrt_act over the W-bit vectors V of AVX2 (W = 256) or
 * AVX-512 (512): tfrt_expW, tfrt_actW. (vmaxps/vminps return their second
 * operand when one is NaN: z and t keep a NaN.) */
#define TFRT_ACT_VECTORS(W, V)                                                                     \
  TFRT_UNUSED static inline V tfrt_exp##W(V z) {                                                   \
    z = _mm##W##_min_ps(_mm##W##_set1_ps(87.0f), _mm##W##_max_ps(_mm##W##_set1_ps(-87.0f), z));    \
    const V k = _mm##W##_fmadd_ps(z, _mm##W##_set1_ps(TFRT_EXP_LOG2E),                             \
                                  _mm##W##_set1_ps(TFRT_EXP_ROUNDER));                             \
    const V n = _mm##W##_sub_ps(k, _mm##W##_set1_ps(TFRT_EXP_ROUNDER));                            \
    V r = _mm##W##_fnmadd_ps(n, _mm##W##_set1_ps(TFRT_EXP_LN2_HI), z);                             \
    r = _mm##W##_fnmadd_ps(n, _mm##W##_set1_ps(TFRT_EXP_LN2_LO), r);                               \
    V q = _mm##W##_fmadd_ps(_mm##W##_set1_ps(TFRT_EXP_C0), r, _mm##W##_set1_ps(TFRT_EXP_C1));      \
    q = _mm##W##_fmadd_ps(q, r, _mm##W##_set1_ps(TFRT_EXP_C2));                                    \
    q = _mm##W##_fmadd_ps(q, r, _mm##W##_set1_ps(TFRT_EXP_C3));                                    \
    q = _mm##W##_fmadd_ps(q, r, _mm##W##_set1_ps(TFRT_EXP_C4));                                    \
    const V m = _mm##W##_fmadd_ps(_mm##W##_mul_ps(r, r), q, r);                                    \
    const V two_n = _mm##W##_castsi##W##_ps(                                                       \
        _mm##W##_add_epi32(_mm##W##_slli_epi32(_mm##W##_castps_si##W(k), 23),                      \
                           _mm##W##_set1_epi32(TFRT_EXP_ONE_BITS)));                               \
    return _mm##W##_fmadd_ps(two_n, m, two_n);                                                     \
  }                                                                                                \
  TFRT_UNUSED static inline V tfrt_act##W(int act, V v) {                                          \
    if (act == TFRT_ACT_SWISH)                                                                     \
      return _mm##W##_div_ps(v, _mm##W##_add_ps(_mm##W##_set1_ps(1.0f),                            \
                                                tfrt_exp##W(_mm##W##_sub_ps(                       \
                                                    _mm##W##_setzero_ps(), v))));                  \
    if (act == TFRT_ACT_HARD_SWISH) {                                                              \
      const V t = _mm##W##_add_ps(v, _mm##W##_set1_ps(3.0f));                                      \
      const V relu6 =                                                                              \
          _mm##W##_min_ps(_mm##W##_set1_ps(6.0f), _mm##W##_max_ps(_mm##W##_setzero_ps(), t));      \
      return _mm##W##_mul_ps(v, _mm##W##_mul_ps(relu6, _mm##W##_set1_ps(1.0f / 6.0f)));            \
    }                                                                                              \
    return v;                                                                                      \
  }
#ifdef TFRT_AVX512_F32
TFRT_ACT_VECTORS(512, __m512)
#else
TFRT_ACT_VECTORS(256, __m256)
#endif
#endif
#if defined(TFRT_AVX512_F32) && (defined(TFRT_CONV_FN) || defined(TFRT_DWCONV_FN))
/* (vmaxps/vminps return their second operand when one is NaN) */
static inline __m512 tfrt_clamp512(struct tfrt_clamp c, __m512 v) {
  if (c.lower) v = _mm512_max_ps(_mm512_set1_ps(c.lo), v);
  if (c.upper) v = _mm512_min_ps(_mm512_set1_ps(c.hi), v);
  return v;
}
#endif
#if defined(TFRT_AVX2_F32) && (defined(TFRT_CONV_FN) || defined(TFRT_DWCONV_FN))
/* Both bounds always, without the branches on c.lower and c.upper: a bound
 * that does not clamp is -inf or +inf (conv_epilogue.py), whose maximum or
 * minimum with v is v, NaN included (the second operand). With the
 * branches, gcc broadcast the bound again at every store of a block (no
 * register held it past the loop): a pointwise 8 -> 48 layer's blocks
 * spent more on their stores than on their 8 rows of FMAs. On a Zen 3
 * class EPYC (best of 6 alternating runs, 28 x 28 positions): 8 -> 48
 * 24.0 -> 28.9 GMAC/s, 16 -> 96 33.2 -> 38.4, 48 -> 8 33.4 -> 35.2,
 * 64 -> 64 44.7 -> 46.5; a layer that does not clamp as well. */
static inline __m256 tfrt_clamp256(struct tfrt_clamp c, __m256 v) {
  return _mm256_min_ps(_mm256_set1_ps(c.hi), _mm256_max_ps(_mm256_set1_ps(c.lo), v));
}

/* p, as a value the compiler cannot see through: what is read through it
 * is read here, after the loop before it, not hoisted into a register held
 * through that loop (where it would spill the loop's own operands). */
static inline const float *tfrt_after_sums(const float *p) {
  __asm__("" : "+r"(p));
  return p;
}

/* The first `lanes` (at most 8) of v to y, as plain stores of 8, 4, 2 and
 * 1 floats: AMD cores run a masked store (vmaskmovps) as a long microcoded
 * sequence. With masked stores a MobileNet's 16 -> 8 projection at 112 x
 * 112 took 121 us on a Zen 3 class EPYC (13 GMAC/s), with these 82. */
static inline void tfrt_store_lanes256(float *y, __m256 v, size_t lanes) {
  if (lanes >= 8) {
    _mm256_storeu_ps(y, v);
    return;
  }
  __m128 part = _mm256_castps256_ps128(v);
  if (lanes & 4) {
    _mm_storeu_ps(y, part);
    part = _mm256_extractf128_ps(v, 1), y += 4;
  }
  if (lanes & 2) {
    _mm_storel_pi((__m64 *)(void *)y, part);
    part = _mm_movehl_ps(part, part), y += 2;
  }
  if (lanes & 1) _mm_store_ss(y, part);
}
#endif

#if defined(__aarch64__) && \
    (defined(TFRT_CONV_FN) || defined(TFRT_DWCONV_FN) || defined(TFRT_QCONV_FN) || \
     defined(TFRT_ACT_FN))
#include <arm_neon.h>
/* tfrt_exp and tfrt_act, 4 lanes (aarch64: FMAX and FMIN keep a NaN) */
TFRT_UNUSED static inline float32x4_t tfrt_exp128(float32x4_t z) {
  z = vminq_f32(vdupq_n_f32(87.0f), vmaxq_f32(vdupq_n_f32(-87.0f), z));
  const float32x4_t k = vfmaq_f32(vdupq_n_f32(TFRT_EXP_ROUNDER), z, vdupq_n_f32(TFRT_EXP_LOG2E));
  const float32x4_t n = vsubq_f32(k, vdupq_n_f32(TFRT_EXP_ROUNDER));
  float32x4_t r = vfmsq_f32(z, n, vdupq_n_f32(TFRT_EXP_LN2_HI));
  r = vfmsq_f32(r, n, vdupq_n_f32(TFRT_EXP_LN2_LO));
  float32x4_t q = vfmaq_f32(vdupq_n_f32(TFRT_EXP_C1), vdupq_n_f32(TFRT_EXP_C0), r);
  q = vfmaq_f32(vdupq_n_f32(TFRT_EXP_C2), q, r);
  q = vfmaq_f32(vdupq_n_f32(TFRT_EXP_C3), q, r);
  q = vfmaq_f32(vdupq_n_f32(TFRT_EXP_C4), q, r);
  const float32x4_t m = vfmaq_f32(r, vmulq_f32(r, r), q);
  const float32x4_t two_n = vreinterpretq_f32_u32(vaddq_u32(
      vshlq_n_u32(vreinterpretq_u32_f32(k), 23), vdupq_n_u32(TFRT_EXP_ONE_BITS)));
  return vfmaq_f32(two_n, two_n, m);
}
TFRT_UNUSED static inline float32x4_t tfrt_act128(int act, float32x4_t v) {
  if (act == TFRT_ACT_SWISH)
    return vdivq_f32(v, vaddq_f32(vdupq_n_f32(1.0f), tfrt_exp128(vnegq_f32(v))));
  if (act == TFRT_ACT_HARD_SWISH) {
    const float32x4_t t = vaddq_f32(v, vdupq_n_f32(3.0f));
    const float32x4_t relu6 = vminq_f32(vdupq_n_f32(6.0f), vmaxq_f32(vdupq_n_f32(0.0f), t));
    return vmulq_f32(v, vmulq_f32(relu6, vdupq_n_f32(1.0f / 6.0f)));
  }
  return v;
}
#endif

#if defined(TFRT_ACT_FN) || defined(TFRT_CONV16_FN) || defined(TFRT_DWCONV16_FN) || \
    defined(TFRT_QCONV16_FN)
/* The epilogue's activation act (TFRT_ACT_*) over count outputs at y: a
 * pass of its own after the convolution's, which the dispatch calls where
 * the convolution has one (TFRT_ACT_FN; kernel_dispatch.py), and the
 * kernels on f16 images on each row before they round it. Computed in the
 * blocks' stores instead, the swish cost more than this pass and more than
 * IREE's own pass over the feature map: on a Zen 3 class EPYC (AVX2) a
 * pointwise 16 -> 96 layer at 80 x 80 took 0.58 ns an output more with a
 * swish in its stores, 0.38 with this pass (IREE's pass after that layer
 * in EfficientNetB0: 0.65), the blocks' accumulators leaving the
 * exponential's long chains too few registers; a depthwise 3 x 3 over 96
 * channels 0.73 more in its stores, 0.40 with this pass. A pass in the
 * convolution kernels themselves cost a Cortex-M4's DS-CNN, which has
 * none, 16 and 64 bytes more of their stack frames. */
TFRT_UNUSED __attribute__((noinline)) static void tfrt_act_pass(int act, float *y,
                                                                 size_t count) {
  if (act == TFRT_ACT_NONE) return;
  size_t i = 0;
#if defined(TFRT_AVX512_F32)
  for (; i + 16 <= count; i += 16)
    _mm512_storeu_ps(y + i, tfrt_act512(act, _mm512_loadu_ps(y + i)));
#elif defined(TFRT_AVX2_F32)
  for (; i + 8 <= count; i += 8)
    _mm256_storeu_ps(y + i, tfrt_act256(act, _mm256_loadu_ps(y + i)));
#elif defined(__aarch64__)
  for (; i + 4 <= count; i += 4) vst1q_f32(y + i, tfrt_act128(act, vld1q_f32(y + i)));
#endif
  for (; i < count; i++) y[i] = tfrt_act(act, y[i]);
}
#endif

#ifdef TFRT_ACT_FN
void TFRT_ACT_FN(float *y, size_t y_offset, size_t count, size_t act);
void TFRT_ACT_FN(float *y, size_t y_offset, size_t count, size_t act) {
  tfrt_act_pass((int)act, y + y_offset, count);
}
#endif

#ifdef TFRT_CONV_FN
void TFRT_CONV_FN(const tfrt_weight *w, size_t w_offset, const float *x, size_t x_offset,
                  float *y, size_t y_offset, const float *post, size_t n, size_t c, size_t kh,
                  size_t kw, size_t iw, size_t oh, size_t ow, size_t sh, size_t sw, size_t dh,
                  size_t dw);

/* The geometry of one convolution call, for its blocks; post: the epilogue. */
struct tfrt_conv {
  size_t n, c, kw, iw, ow, sh, sw, dh, dw, runs, run, positions;
  const float *post;
  int apart; /* a pointwise layer of stride 1, unpadded (TFRT_PATCH_STARTS) */
  /* weights per packed row: the tile's lanes, TFRT_CONV_TILE_OF(n) */
  size_t stride;
};

/* Before a loop over the 16 lanes of a tile (tfrt_conv_one_16, the C
 * blocks' tiles of 16): gcc 12 unrolled such a loop completely and then
 * kept its multiply-adds scalar (a streamed Conv1D(16, 3) frame 0.21 ->
 * 0.77 us on AVX-512); left a loop, it is vectorised. Loops over 32 lanes
 * are vectorised as they are. */
#define TFRT_LANES_16 _Pragma("GCC unroll 1")
#define TFRT_LANES_32

/* Lanes of a convolution's packed tiles: 16 for a layer of at most 16
 * outputs, else 32 (microkernel.py conv_tile; at most
 * TFRT_MATVEC_DOT_ROWS outputs: row after row, tfrt_conv_dot). A layer of
 * 8 outputs stored 4 times its weights in tiles of 32. */
#define TFRT_CONV_TILE_OF(n) ((n) <= TFRT_MATVEC_SMALL_TILE ? TFRT_MATVEC_SMALL_TILE : TFRT_MATVEC_TILE)

/* One block of P output positions from p0 (fewer at the end: the last
 * position is recomputed, not stored) times the T output lanes of the
 * packed tile w from lane t: every weight row loaded serves P positions.
 * The taps are walked as rows of contiguous inputs (a whole filter row when
 * dw == 1). A macro, instantiated for the two block sizes below and the
 * two tile widths, each with its own exactly sized array: gcc keeps those
 * in registers, not one array sized for both. */
#define TFRT_CONV_BLOCK(P, T)                                                         \
  TFRT_UNUSED static void tfrt_conv_block_##P##_##T(                                 \
      const struct tfrt_conv *g, const tfrt_weight *w, const float *x, float *y,     \
      size_t p0, size_t t) {                                                         \
    const size_t runs = g->runs, run = g->run, positions = g->positions;             \
    const float *at[P]; /* first input of each position's window */                 \
    TFRT_PATCH_STARTS(g, x, p0, P, positions, at);                                   \
    float acc[P][T] = {{0}};                                                         \
    for (size_t r = 0; r < runs; r++, w += run * T) {                                \
      const size_t skip = TFRT_RUN_START(g, r);                                      \
      for (size_t e = 0; e < run; e++) {                                             \
        const tfrt_weight *wl = w + e * T;                                           \
        for (size_t q = 0; q < P; q++) {                                             \
          const float xv = at[q][skip + e];                                          \
          TFRT_LANES_##T for (size_t l = 0; l < T; l++)                            \
              TFRT_MAC(acc[q][l], TFRT_W(wl[l]), xv);                                \
        }                                                                            \
      }                                                                              \
    }                                                                                \
    const size_t lanes = g->n - t < T ? g->n - t : T;                                \
    for (size_t q = 0; q < P && p0 + q < positions; q++)                             \
      for (size_t l = 0; l < lanes; l++)                                             \
        y[(p0 + q) * g->n + t + l] = tfrt_post(g->post, t + l, acc[q][l]);           \
  }

/* A convolution of at most TFRT_MATVEC_DOT_ROWS outputs, its filters
 * stored one after another (T = 1): each position's patch, run by run,
 * against each filter (tfrt_dot), where a tile's blocks multiplied
 * every input by 16 or 32 lanes, all but n of them zeros. */
static void tfrt_conv_dot(const struct tfrt_conv *g, const tfrt_weight *w, const float *x,
                          float *y) {
  const size_t n = g->n, runs = g->runs, run = g->run, k = runs * run;
  const float lo = g->post[0], hi = g->post[1];
  float bias[TFRT_MATVEC_DOT_ROWS];
  for (size_t o = 0; o < n; o++) bias[o] = g->post[TFRT_POST_BIAS + o];
  for (size_t p = 0; p < g->positions; p++) {
    const float *patch = x + TFRT_PATCH_START(g, p);
    for (size_t o = 0; o < n; o++) {
      float sum = 0;
      for (size_t r = 0; r < runs; r++) {
        const tfrt_weight *wr = w + o * k + r * run;
        const float *xr = patch + TFRT_RUN_START(g, r);
        if (run < TFRT_DOT_LANES) /* (a short run: one chain, no partial sums to add) */
          for (size_t e = 0; e < run; e++) TFRT_MAC(sum, TFRT_W(wr[e]), xr[e]);
        else
          sum += tfrt_dot(wr, xr, run);
      }
      y[p * n + o] = tfrt_clamp_to(lo, hi, sum + bias[o]);
    }
  }
}

/* Positions per block (TFRT_CONV_P), and per block at the end of the
 * positions (TFRT_CONV_TAIL: a streamed frame often has few), so that
 * P x 32 accumulators fit the vector registers. AVX-512 (and the ISAs
 * without blocks of their own: half-width weights, Helium, RISC-V; aarch64
 * and SSE2 take tfrt_conv_v4.h's): 8, 16 of the 32 registers (also fastest
 * with AVX2 on an Intel core). x86-64 without AVX-512: 3, 12 of AVX2's 16
 * registers, the weights read as FMA operands; 8 spilled on a Zen 3, 22 ->
 * 38 GMAC/s with 3 (a kws_streaming CNN's convolutions; 4 and 6 x 16
 * lanes were slower). */
#if defined(__x86_64__) && !defined(__AVX512F__)
#define TFRT_CONV_P 3
#define TFRT_CONV_TAIL 2
#else
#define TFRT_CONV_P 8
#define TFRT_CONV_TAIL 4
#endif
/* (the indirection expands the macros before ## pastes them) */
#define TFRT_CONV_BLOCKS(P, TAIL, T) TFRT_CONV_BLOCK(P, T) TFRT_CONV_BLOCK(TAIL, T)
#define TFRT_CONV_BLOCK_FN(P, T) tfrt_conv_block_##P##_##T
#define TFRT_CONV_BLOCK_OF(P, T) TFRT_CONV_BLOCK_FN(P, T)
TFRT_CONV_BLOCKS(TFRT_CONV_P, TFRT_CONV_TAIL, 32)
TFRT_CONV_BLOCKS(TFRT_CONV_P, TFRT_CONV_TAIL, 16)

/* A layer of one output position (a streamed Conv1D's frame: its window
 * of taps against the filter, a matrix-vector product): the tile's 32
 * lanes with two sums each (even and odd inputs of a run; a tile of 16
 * lanes four, for as many independent chains), as the matvec's tiles, where the blocks above computed the position 2 to 4 times over
 * (the last one repeated) in one chain per lane. A TCN's Conv1D(64, 3)
 * frame 0.70 -> 0.53 us, 40 outputs 1.09 -> 0.54 (AVX2, Zen 3 class). On
 * x86-64 and aarch64, whose vector registers hold the 64 sums; a Cortex-M
 * keeps its blocks (tfrt_conv_m8x2; Helium: the C blocks), which its
 * bench_mcu.py figures were measured with. */
TFRT_UNUSED static void tfrt_conv_one_32(const struct tfrt_conv *g, const tfrt_weight *w,
                                         const float *x, float *y, size_t t) {
  enum { T = TFRT_MATVEC_TILE };
  const size_t runs = g->runs, run = g->run;
  float even[T] = {0}, odd[T] = {0};
  for (size_t r = 0; r < runs; r++, w += run * T) {
    const float *xr = x + TFRT_RUN_START(g, r);
    size_t e = 0;
    for (; e + 2 <= run; e += 2) {
      const float x0 = xr[e], x1 = xr[e + 1];
      const tfrt_weight *w0 = w + e * T, *w1 = w0 + T;
      for (size_t l = 0; l < T; l++) TFRT_MAC(even[l], TFRT_W(w0[l]), x0);
      for (size_t l = 0; l < T; l++) TFRT_MAC(odd[l], TFRT_W(w1[l]), x1);
    }
    if (e < run)
      for (size_t l = 0; l < T; l++) TFRT_MAC(even[l], TFRT_W(w[e * T + l]), xr[e]);
  }
  const size_t lanes = g->n - t < T ? g->n - t : T;
  for (size_t l = 0; l < lanes; l++) y[t + l] = tfrt_post(g->post, t + l, even[l] + odd[l]);
}

/* The same for a tile of 16 lanes, four sums a lane (inputs e mod 4): as
 * many independent chains as 32 lanes' two (with AVX-512, one vector a
 * sum; two sums a lane elsewhere, whose vectors are narrower: four spilled
 * SSE2's 16 registers). */
#ifdef __AVX512F__
#define TFRT_ONE16_S2 s2
#define TFRT_ONE16_S3 s3
#else
#define TFRT_ONE16_S2 s0
#define TFRT_ONE16_S3 s1
#endif
TFRT_UNUSED static void tfrt_conv_one_16(const struct tfrt_conv *g, const tfrt_weight *w,
                                         const float *x, float *y, size_t t) {
  enum { T = TFRT_MATVEC_SMALL_TILE };
  const size_t runs = g->runs, run = g->run;
  float s0[T] = {0}, s1[T] = {0}, s2[T] = {0}, s3[T] = {0};
  for (size_t r = 0; r < runs; r++, w += run * T) {
    const float *xr = x + TFRT_RUN_START(g, r);
    size_t e = 0;
    for (; e + 4 <= run; e += 4) {
      const float x0 = xr[e], x1 = xr[e + 1], x2 = xr[e + 2], x3 = xr[e + 3];
      const tfrt_weight *w0 = w + e * T, *w1 = w0 + T, *w2 = w1 + T, *w3 = w2 + T;
      TFRT_LANES_16 for (size_t l = 0; l < T; l++) TFRT_MAC(s0[l], TFRT_W(w0[l]), x0);
      TFRT_LANES_16 for (size_t l = 0; l < T; l++) TFRT_MAC(s1[l], TFRT_W(w1[l]), x1);
      TFRT_LANES_16 for (size_t l = 0; l < T; l++) TFRT_MAC(TFRT_ONE16_S2[l], TFRT_W(w2[l]), x2);
      TFRT_LANES_16 for (size_t l = 0; l < T; l++) TFRT_MAC(TFRT_ONE16_S3[l], TFRT_W(w3[l]), x3);
    }
    for (; e < run; e++)
      TFRT_LANES_16 for (size_t l = 0; l < T; l++) TFRT_MAC(s0[l], TFRT_W(w[e * T + l]), xr[e]);
  }
  const size_t lanes = g->n - t < T ? g->n - t : T;
  for (size_t l = 0; l < lanes; l++)
    y[t + l] = tfrt_post(g->post, t + l, (s0[l] + s1[l]) + (s2[l] + s3[l]));
}

/* 32-bit Arm with a scalar FPU (Cortex-M4F/M7/M33), f32 weights: a block
 * of 2 positions times 8 of a tile's lanes, its 16 sums, the 8 weights of
 * an input and the 2 positions' inputs in the FPU's 32 registers: each
 * weight loaded serves both positions (per input 10 loads, 16 multiplies
 * and 16 adds: 47 estimated M4 cycles for 16 multiply-adds with the loop).
 * The C blocks above keep P x 32 sums in memory there, and IREE's code for
 * a convolution of one input channel (a keyword spotter's first layer)
 * reloads its operands for every multiply-add: DS-CNN's five convolutions
 * (IREE's 10 x 4 first layer alone 154k) 357k -> 247k cycles a streamed
 * step (bench/bench_mcu.py). */
#if defined(__arm__) && defined(__ARM_FP) && !defined(__ARM_NEON) && \
    !(defined(__ARM_FEATURE_MVE) && (__ARM_FEATURE_MVE & 2)) && \
    !defined(TFRT_MATVEC_BF16) && !defined(TFRT_MATVEC_F16) && defined(TFRT_CONV_FN)
#define TFRT_CONV_CORTEX_M 1
#define TFRT_M8X2_LANE(l) s0##l += w##l * u, s1##l += w##l * v;
#define TFRT_M8X2_STORE(l)                                                                  \
  if (l < lanes) {                                                                          \
    y0[l] = tfrt_clamp_to(lo, hi, s0##l + b##l);                                            \
    y1[l] = tfrt_clamp_to(lo, hi, s1##l + b##l);                                            \
  }

/* Positions p0 and p0 + 1 (p0 twice at the end) times lanes t..t+7; w
 * points at lane t of its packed tile (rows g->stride apart). */
static void tfrt_conv_m8x2(const struct tfrt_conv *g, const float *w, const float *x, float *y,
                           size_t p0, size_t t) {
  const size_t runs = g->runs, run = g->run, positions = g->positions, T = g->stride;
  const size_t p1 = p0 + 1 < positions ? p0 + 1 : p0;
  const float *a0 = x + TFRT_PATCH_START(g, p0), *a1 = x + TFRT_PATCH_START(g, p1);
  /* The bias is added at the store, not the sums' start: summed onto a
   * large bias (a batch norm's shift), each product rounded at the bias's
   * scale (a conv + batch norm 2.5x TensorFlow's error). Read now: y might
   * alias post. */
  const float *bias = g->post + TFRT_POST_BIAS + t;
  const float b0 = bias[0], b1 = bias[1], b2 = bias[2], b3 = bias[3], b4 = bias[4],
              b5 = bias[5], b6 = bias[6], b7 = bias[7];
  float s00 = 0, s01 = 0, s02 = 0, s03 = 0, s04 = 0, s05 = 0, s06 = 0, s07 = 0;
  float s10 = 0, s11 = 0, s12 = 0, s13 = 0, s14 = 0, s15 = 0, s16 = 0, s17 = 0;
  for (size_t r = 0; r < runs; r++) {
    const size_t skip = TFRT_RUN_START(g, r);
    const float *x0 = a0 + skip, *x1 = a1 + skip, *wl = w + r * run * T;
    for (size_t e = 0; e < run; e++, wl += T) {
      const float w0 = wl[0], w1 = wl[1], w2 = wl[2], w3 = wl[3], w4 = wl[4], w5 = wl[5],
                  w6 = wl[6], w7 = wl[7], u = x0[e], v = x1[e];
      TFRT_M8X2_LANE(0) TFRT_M8X2_LANE(1) TFRT_M8X2_LANE(2) TFRT_M8X2_LANE(3)
      TFRT_M8X2_LANE(4) TFRT_M8X2_LANE(5) TFRT_M8X2_LANE(6) TFRT_M8X2_LANE(7)
    }
  }
  const size_t lanes = g->n - t < 8 ? g->n - t : 8;
  const float lo = g->post[0], hi = g->post[1]; /* (read once: y might alias post) */
  float *y0 = y + p0 * g->n + t, *y1 = y + p1 * g->n + t;
  TFRT_M8X2_STORE(0) TFRT_M8X2_STORE(1) TFRT_M8X2_STORE(2) TFRT_M8X2_STORE(3)
  TFRT_M8X2_STORE(4) TFRT_M8X2_STORE(5) TFRT_M8X2_STORE(6) TFRT_M8X2_STORE(7)
}
#endif

/* x86-64 with AVX2 and FMA but not AVX-512 (AMD Zen 1-3, Intel before
 * Skylake-X), f32 weights: a block of 6 positions times 16 of a tile's 32
 * lanes, written with intrinsics. That is 12 accumulators, 2 weight vectors
 * and a broadcast in AVX2's 16 registers, the shape of BLAS kernels for
 * this ISA; as plain C, gcc kept such a block's accumulators in memory (a
 * store per FMA). On a Zen 3: 38 -> 45 GMAC/s (90% of its FMA peak) on a
 * kws_streaming CNN's convolutions; a layer of 16 or 28 output channels
 * skips the empty half of its tile. Also for short runs (one input
 * channel, a narrow filter: 64 outputs of a 10x4 filter 23 -> 37 GMAC/s,
 * 28 outputs 5% slower). The last positions (at most TFRT_CONV_TAIL) stay
 * with the blocks above. */
#ifdef TFRT_AVX2_F32
/* Rows of a packed tile ahead of the one being read that a kernel reading
 * weights from memory prefetches (4 KB; 16 to 256 rows, or into L2 only,
 * measured within the noise of it). */
enum { TFRT_PREFETCH_ROWS = 32 };
/* Prefetches both 64-byte lines of the tile row `rows` rows after w (a
 * tile row is TFRT_MATVEC_TILE floats). The address may lie past the
 * weights' end: a prefetch does not fault, and it is computed as an
 * integer, not as a pointer out of its array. */
static inline void tfrt_prefetch_row(const float *w, size_t rows) {
  const uintptr_t at = (uintptr_t)w + rows * TFRT_MATVEC_TILE * sizeof(float);
  _mm_prefetch((const char *)at, _MM_HINT_T0);
  _mm_prefetch((const char *)(at + 64), _MM_HINT_T0);
}

/* (q: the position) one broadcast input, two FMAs */
#define TFRT_AVX2_ROW(q)                                                                   \
  {                                                                                        \
    const __m256 xv = _mm256_broadcast_ss(x##q + e);                                       \
    c##q##0 = _mm256_fmadd_ps(w0, xv, c##q##0);                                            \
    c##q##1 = _mm256_fmadd_ps(w1, xv, c##q##1);                                            \
  }
/* (q) the position's 16 lanes (fewer at the end of n: under masks) to y,
 * unless past the end; the full case is two plain stores (a copy through
 * memory cost a quarter of a pointwise layer's time, and as gcc's
 * `rep movs`, 7% of a MobileNet's step) */
#define TFRT_AVX2_STORE(q)                                                                 \
  if (p0 + q < positions) {                                                                \
    float *yq = y + (p0 + q) * g->n + t;                                                   \
    if (lanes == 16) {                                                                     \
      _mm256_storeu_ps(yq, tfrt_clamp256(clamp, _mm256_add_ps(c##q##0, bias0)));           \
      _mm256_storeu_ps(yq + 8, tfrt_clamp256(clamp, _mm256_add_ps(c##q##1, bias1)));       \
    } else {                                                                               \
      tfrt_store_lanes256(yq, tfrt_clamp256(clamp, _mm256_add_ps(c##q##0, bias0)), lanes); \
      if (lanes > 8)                                                                       \
        tfrt_store_lanes256(yq + 8, tfrt_clamp256(clamp, _mm256_add_ps(c##q##1, bias1)),   \
                            lanes - 8);                                                    \
    }                                                                                      \
  }

/* Positions p0..p0+5 (clamped at the end) times lanes t..t+15; w points at
 * lane t of its packed tile (rows T apart). The tile's first block (p0 = 0,
 * its first 16 lanes) is the first to read the tile's weights, from memory
 * where they are not cached (a model of more weights than the caches hold
 * reads them all every inference: ResNet50's 95 MB): it prefetches rows
 * ahead, both halves, which the hardware prefetcher, seeing every other
 * 64-byte line read, did not (ResNet50's 6 x 6 stage, weights not cached,
 * 7.9-10.2 -> 7.6-8.2 ms in three alternating runs on a Zen 3 class EPYC). */
static void tfrt_conv_avx2(const struct tfrt_conv *g, const float *w, const float *x, float *y,
                           size_t p0, size_t t) {
  const size_t runs = g->runs, run = g->run, positions = g->positions, T = g->stride;
  const int first = p0 == 0 && t % T == 0;
  const float *at[6];
  TFRT_PATCH_STARTS(g, x, p0, 6, positions, at);
  __m256 c00 = _mm256_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00,
         c30 = c00, c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00;
  for (size_t r = 0; r < runs; r++, w += run * T) {
    const size_t skip = TFRT_RUN_START(g, r);
    const float *x0 = at[0] + skip, *x1 = at[1] + skip, *x2 = at[2] + skip,
                *x3 = at[3] + skip, *x4 = at[4] + skip, *x5 = at[5] + skip;
    for (size_t e = 0; e < run; e++) { /* (first: a predictable branch) */
      if (first) tfrt_prefetch_row(w + e * T, TFRT_PREFETCH_ROWS);
      const __m256 w0 = _mm256_loadu_ps(w + e * T), w1 = _mm256_loadu_ps(w + e * T + 8);
      TFRT_AVX2_ROW(0) TFRT_AVX2_ROW(1) TFRT_AVX2_ROW(2)
      TFRT_AVX2_ROW(3) TFRT_AVX2_ROW(4) TFRT_AVX2_ROW(5)
    }
  }
  /* the bias is added at the store (tfrt_conv_m8x2; post is padded to whole
   * tiles), read only now (tfrt_conv_avx2_8) */
  const float *post = tfrt_after_sums(g->post);
  const struct tfrt_clamp clamp = tfrt_clamp_of(post);
  const __m256 bias0 = _mm256_loadu_ps(post + TFRT_POST_BIAS + t),
               bias1 = _mm256_loadu_ps(post + TFRT_POST_BIAS + 8 + t);
  const size_t lanes = g->n - t < 16 ? g->n - t : 16;
  TFRT_AVX2_STORE(0) TFRT_AVX2_STORE(1) TFRT_AVX2_STORE(2)
  TFRT_AVX2_STORE(3) TFRT_AVX2_STORE(4) TFRT_AVX2_STORE(5)
}

/* A layer of few output positions (3 to TFRT_AVX2_FEW_P: the last stages of
 * an image model) and weights no L2 cache holds (TFRT_AVX2_FEW_WEIGHTS and
 * up) reads its tiles' weights once, where the blocks above read them
 * again for every 6 positions and for each half of a tile. The
 * positions go in blocks of 3 times the tile's 32 lanes (12 accumulators,
 * the weights read as FMA operands), all blocks over one chunk of the
 * tile's rows at a time (TFRT_AVX2_FEW_ROWS rows: 8 KB, in L1 for the
 * blocks after the first), their sums kept in memory between chunks; the
 * first block prefetches. ResNet50 at 96 x 96 on a Zen 3 class EPYC, its
 * 3 x 3 stage (9 positions, 1 to 8 MB a layer) not cached 9.5-9.8 -> 6.2-6.6 ms,
 * from L3 4.1-4.3 -> 3.8-3.9 ms. With the weights in L2 the blocks above
 * are faster (a streamed frame's 5 to 12 positions, 64 to 256 channels:
 * 35-42 GMAC/s against these blocks' 27-32; 0.3 MB at 9 and 12
 * positions: 44-47 against 34-36), so a layer under 512 KB (Zen 3's L2)
 * keeps them. From 512 KB up the two are even with the weights cached
 * (0.9 MB, 9 positions: 33-35 GMAC/s both), and these are faster where
 * they are not:
 * EfficientNetV2B0's 9-position layers of 0.6-0.9 MB in the model (timed
 * per call) 16.6-17.9 -> 19.0-20.7 GMAC/s. Deciding by the whole model's
 * size instead (a model over 2 MB cannot keep its weights in L2 from one
 * step to the next) made a streamed model of small convolutions and two
 * GRU(384) 7-12% slower: the convolutions' 70 to 440 KB stayed cached. */
enum { TFRT_AVX2_FEW_P = 12, TFRT_AVX2_FEW_ROWS = 64, TFRT_AVX2_FEW_WEIGHTS = 1 << 17 };
#define TFRT_AVX2_FEW_ROW(q)                                                                \
  {                                                                                        \
    const __m256 xv = _mm256_broadcast_ss(x##q + e);                                       \
    c##q##0 = _mm256_fmadd_ps(_mm256_loadu_ps(we), xv, c##q##0);                           \
    c##q##1 = _mm256_fmadd_ps(_mm256_loadu_ps(we + 8), xv, c##q##1);                       \
    c##q##2 = _mm256_fmadd_ps(_mm256_loadu_ps(we + 16), xv, c##q##2);                      \
    c##q##3 = _mm256_fmadd_ps(_mm256_loadu_ps(we + 24), xv, c##q##3);                      \
  }

/* Rows e0..e1 of run r (whose inputs start `skip` after each position's
 * patch) added to the sums s of positions at[0..2]; w: run r's first row.
 * The sums are taken into locals for the loop (indexed by a block, gcc
 * kept them in memory: a load and a store per FMA). */
static inline __attribute__((always_inline)) void tfrt_avx2_few_rows(
    const float *w, const float *const at[3], size_t skip, size_t e0, size_t e1, int prefetch,
    __m256 s[12]) {
  enum { T = TFRT_MATVEC_TILE };
  const float *x0 = at[0] + skip, *x1 = at[1] + skip, *x2 = at[2] + skip;
  __m256 c00 = s[0], c01 = s[1], c02 = s[2], c03 = s[3], c10 = s[4], c11 = s[5], c12 = s[6],
         c13 = s[7], c20 = s[8], c21 = s[9], c22 = s[10], c23 = s[11];
  for (size_t e = e0; e < e1; e++) {
    const float *we = w + e * T;
    if (prefetch) tfrt_prefetch_row(we, TFRT_PREFETCH_ROWS);
    TFRT_AVX2_FEW_ROW(0) TFRT_AVX2_FEW_ROW(1) TFRT_AVX2_FEW_ROW(2)
  }
  s[0] = c00, s[1] = c01, s[2] = c02, s[3] = c03, s[4] = c10, s[5] = c11, s[6] = c12;
  s[7] = c13, s[8] = c20, s[9] = c21, s[10] = c22, s[11] = c23;
}

/* Every position (at most TFRT_AVX2_FEW_P) times lanes t..t+31 (fewer at
 * the end of n: stored under tfrt_store_lanes256); w: the tile. */
static void tfrt_conv_avx2_few(const struct tfrt_conv *g, const float *w, const float *x,
                               float *y, size_t t) {
  enum { T = TFRT_MATVEC_TILE, B = (TFRT_AVX2_FEW_P + 2) / 3 };
  const size_t runs = g->runs, run = g->run, positions = g->positions;
  const size_t blocks = (positions + 2) / 3;
  const float *at[3 * B];
  TFRT_PATCH_STARTS(g, x, 0, 3 * B, positions, at);
  __m256 sums[B][12]; /* [block][position in it * 4 + vector] */
  for (size_t b = 0; b < blocks; b++)
    for (size_t v = 0; v < 12; v++) sums[b][v] = _mm256_setzero_ps();
  for (size_t r = 0; r < runs; r++, w += run * T) {
    const size_t skip = TFRT_RUN_START(g, r);
    for (size_t e0 = 0; e0 < run; e0 += TFRT_AVX2_FEW_ROWS) {
      const size_t e1 = run - e0 < TFRT_AVX2_FEW_ROWS ? run : e0 + TFRT_AVX2_FEW_ROWS;
      tfrt_avx2_few_rows(w, at, skip, e0, e1, 1, sums[0]);
      for (size_t b = 1; b < blocks; b++)
        tfrt_avx2_few_rows(w, at + 3 * b, skip, e0, e1, 0, sums[b]);
    }
  }
  /* the epilogue read before any store (y might alias post) */
  const struct tfrt_clamp clamp = tfrt_clamp_of(g->post);
  __m256 bias[4];
  for (size_t v = 0; v < 4; v++)
    bias[v] = _mm256_loadu_ps(g->post + TFRT_POST_BIAS + t + 8 * v);
  const size_t lanes = g->n - t < T ? g->n - t : T;
  for (size_t p = 0; p < positions; p++)
    for (size_t v = 0; v < 4 && 8 * v < lanes; v++) {
      const __m256 sum = _mm256_add_ps(sums[p / 3][p % 3 * 4 + v], bias[v]);
      tfrt_store_lanes256(y + p * g->n + t + 8 * v, tfrt_clamp256(clamp, sum), lanes - 8 * v);
    }
}

/* The last 8 or fewer lanes of a layer (n = 8, 24, 40, ...: a MobileNet's
 * projections), where a block of 16 lanes computed zeros in half its FMAs:
 * positions p0..p0+9 times lanes t..t+7, 10 accumulators, the weight
 * vector and a broadcast in AVX2's 16 registers, and the 10 positions'
 * pointers, the index and the weights' in the 15 general ones (with 12
 * positions gcc spilled pointers, and the weight vector where it was not
 * inlined, reloading them in the loop). The bias is read after the sums
 * (tfrt_after_sums): held in a register through the loop it took one the
 * loop needed. A 48 -> 8 projection at 56 x 56: 44 -> 41 us (Zen 3 class). */
#define TFRT_AVX2_ROW8(q) c##q = _mm256_fmadd_ps(w0, _mm256_broadcast_ss(x##q + e), c##q);
#define TFRT_AVX2_STORE8(q)                                                              \
  if (p0 + q < positions)                                                                \
    tfrt_store_lanes256(y + (p0 + q) * g->n + t,                                         \
                        tfrt_clamp256(clamp, _mm256_add_ps(c##q, bias)), lanes);
enum { TFRT_AVX2_8_P = 10 };
static void tfrt_conv_avx2_8(const struct tfrt_conv *g, const float *w, const float *x, float *y,
                             size_t p0, size_t t) {
  const size_t runs = g->runs, run = g->run, positions = g->positions, T = g->stride;
  const float *at[TFRT_AVX2_8_P];
  TFRT_PATCH_STARTS(g, x, p0, TFRT_AVX2_8_P, positions, at);
  __m256 c0 = _mm256_setzero_ps(), c1 = c0, c2 = c0, c3 = c0, c4 = c0, c5 = c0, c6 = c0,
         c7 = c0, c8 = c0, c9 = c0;
  for (size_t r = 0; r < runs; r++, w += run * T) {
    const size_t skip = TFRT_RUN_START(g, r);
    const float *x0 = at[0] + skip, *x1 = at[1] + skip, *x2 = at[2] + skip,
                *x3 = at[3] + skip, *x4 = at[4] + skip, *x5 = at[5] + skip,
                *x6 = at[6] + skip, *x7 = at[7] + skip, *x8 = at[8] + skip,
                *x9 = at[9] + skip;
    for (size_t e = 0; e < run; e++) {
      const __m256 w0 = _mm256_loadu_ps(w + e * T);
      TFRT_AVX2_ROW8(0) TFRT_AVX2_ROW8(1) TFRT_AVX2_ROW8(2) TFRT_AVX2_ROW8(3)
      TFRT_AVX2_ROW8(4) TFRT_AVX2_ROW8(5) TFRT_AVX2_ROW8(6) TFRT_AVX2_ROW8(7)
      TFRT_AVX2_ROW8(8) TFRT_AVX2_ROW8(9)
    }
  }
  const float *post = tfrt_after_sums(g->post);
  const struct tfrt_clamp clamp = tfrt_clamp_of(post);
  const __m256 bias = _mm256_loadu_ps(post + TFRT_POST_BIAS + t); /* added at the store */
  const size_t lanes = g->n - t;
  TFRT_AVX2_STORE8(0) TFRT_AVX2_STORE8(1) TFRT_AVX2_STORE8(2) TFRT_AVX2_STORE8(3)
  TFRT_AVX2_STORE8(4) TFRT_AVX2_STORE8(5) TFRT_AVX2_STORE8(6) TFRT_AVX2_STORE8(7)
  TFRT_AVX2_STORE8(8) TFRT_AVX2_STORE8(9)
}
#endif
#if defined(TFRT_V4_F32) && defined(TFRT_CONV_FN)
#include "tfrt_conv_v4.h"
#endif

/* x86-64 with AVX-512, f32 weights: blocks of 12 positions times a tile's
 * 32 lanes, 24 accumulators in registers. Unlike the C blocks above,
 * nothing goes through memory: the positions' inputs are found by stepping
 * along the output row (no division per position), the accumulators start
 * as zero registers (no memset of an array) and are stored under a lane
 * mask (a tile of fewer than 32 channels needs no copy). Each position's
 * broadcast and its two FMAs are one asm statement: clang otherwise hoists
 * all 12 broadcasts into registers and spills accumulators (half the
 * speed). On a Zen 5, DS-CNN's 64 -> 64 pointwise layers went from 114 to
 * 121-124 GMAC/s (XNNPACK's 7x32 kernel: 130), its 10x4 first layer from
 * 104 to 111-115 (XNNPACK: 111), with gcc and with clang. */
#ifdef TFRT_AVX512_F32
enum { TFRT_CONV512_P = 12 };

/* acc0 += w0 * x, acc1 += w1 * x for the float at x (see above) */
#ifdef TFRT_INTRINSICS_ONLY
#define TFRT_FMA2_BROADCAST(acc0, acc1, w0, w1, x)                                       \
  do {                                                                                   \
    const __m512 bcast_ = _mm512_set1_ps(x);                                             \
    acc0 = _mm512_fmadd_ps(w0, bcast_, acc0);                                            \
    acc1 = _mm512_fmadd_ps(w1, bcast_, acc1);                                            \
  } while (0)
#else
#define TFRT_FMA2_BROADCAST(acc0, acc1, w0, w1, x)                                       \
  do {                                                                                   \
    __m512 bcast_;                                                                       \
    __asm__("vbroadcastss %[xv], %[t]\n\t"                                              \
            "vfmadd231ps %[t], %[wa], %[a0]\n\t"                                        \
            "vfmadd231ps %[t], %[wb], %[a1]"                                             \
            : [a0] "+v"(acc0), [a1] "+v"(acc1), [t] "=&v"(bcast_)                        \
            : [wa] "v"(w0), [wb] "v"(w1), [xv] "m"(x));                                  \
  } while (0)
#endif

/* Positions p0..p0+P-1 (all below g->positions; p0 is output row oy,
 * column ox) times lanes t..t+31 (masked to n); w points at the tile's
 * first row (rows T apart). P is a constant where this is inlined: 12, 8
 * or 4. */
static inline __attribute__((always_inline)) void tfrt_conv512(const struct tfrt_conv *g,
                                                               const float *w, const float *x,
                                                               float *y, size_t t, size_t p0,
                                                               size_t oy, size_t ox,
                                                               const size_t P) {
  enum { T = TFRT_MATVEC_TILE };
  const size_t lanes = g->n - t < 32 ? g->n - t : 32;
  const __mmask16 m0 = lanes >= 16 ? 0xFFFF : (__mmask16)((1u << lanes) - 1),
                  m1 = lanes >= 32 ? 0xFFFF : lanes <= 16 ? 0 : (__mmask16)((1u << (lanes - 16)) - 1);
  const float *at[TFRT_CONV512_P];
  TFRT_UNROLL
  for (size_t q = 0; q < P; q++) {
    at[q] = x + (oy * g->sh * g->iw + ox * g->sw) * g->c;
    if (++ox == g->ow) ox = 0, oy++;
  }
  /* the bias is added at the store (tfrt_conv_m8x2; post is padded to whole tiles) */
  const __m512 bias0 = _mm512_loadu_ps(g->post + TFRT_POST_BIAS + t),
               bias1 = _mm512_loadu_ps(g->post + TFRT_POST_BIAS + 16 + t);
  __m512 a0[TFRT_CONV512_P], a1[TFRT_CONV512_P];
  TFRT_UNROLL
  for (size_t q = 0; q < P; q++) a0[q] = _mm512_setzero_ps(), a1[q] = _mm512_setzero_ps();
  for (size_t r = 0; r < g->runs; r++) {
    const size_t skip = TFRT_RUN_START(g, r);
    for (size_t e = 0; e < g->run; e++, w += T) {
      const __m512 w0 = _mm512_loadu_ps(w), w1 = _mm512_loadu_ps(w + 16);
  TFRT_UNROLL
      for (size_t q = 0; q < P; q++) TFRT_FMA2_BROADCAST(a0[q], a1[q], w0, w1, at[q][skip + e]);
    }
  }
  const struct tfrt_clamp clamp = tfrt_clamp_of(g->post);
  TFRT_UNROLL
  for (size_t q = 0; q < P; q++) {
    float *yq = y + (p0 + q) * g->n + t;
    _mm512_mask_storeu_ps(yq, m0, tfrt_clamp512(clamp, _mm512_add_ps(a0[q], bias0)));
    _mm512_mask_storeu_ps(yq + 16, m1, tfrt_clamp512(clamp, _mm512_add_ps(a1[q], bias1)));
  }
}

/* acc0..3 += w0..3 * x: one broadcast, four FMAs (as TFRT_FMA2_BROADCAST) */
#ifdef TFRT_INTRINSICS_ONLY
#define TFRT_FMA4_BROADCAST(acc, w, x)                                                     \
  do {                                                                                     \
    const __m512 bcast_ = _mm512_set1_ps(x);                                               \
    for (size_t f_ = 0; f_ < 4; f_++) (acc)[f_] = _mm512_fmadd_ps((w)[f_], bcast_, (acc)[f_]); \
  } while (0)
#else
#define TFRT_FMA4_BROADCAST(acc, w, x)                                                     \
  do {                                                                                     \
    __m512 bcast_;                                                                         \
    __asm__("vbroadcastss %[xv], %[t]\n\t"                                                \
            "vfmadd231ps %[t], %[w0], %[a0]\n\t"                                          \
            "vfmadd231ps %[t], %[w1], %[a1]\n\t"                                          \
            "vfmadd231ps %[t], %[w2], %[a2]\n\t"                                          \
            "vfmadd231ps %[t], %[w3], %[a3]"                                               \
            : [a0] "+v"((acc)[0]), [a1] "+v"((acc)[1]), [a2] "+v"((acc)[2]),               \
              [a3] "+v"((acc)[3]), [t] "=&v"(bcast_)                                       \
            : [w0] "v"((w)[0]), [w1] "v"((w)[1]), [w2] "v"((w)[2]), [w3] "v"((w)[3]),      \
              [xv] "m"(x));                                                                \
  } while (0)
#endif

/* Two whole tiles at once, lanes t..t+63 of 6 positions from p0 (output
 * row oy, column ox): 24 accumulators, and each input broadcast serves 64
 * lanes, not 32. A Zen 5, DS-CNN's 64 -> 64 pointwise layers: 122 -> 129
 * GMAC/s (XNNPACK's: 130), its 10x4 first layer 117 -> 124. */
enum { TFRT_CONV512_WIDE_P = 6 };
static void tfrt_conv512_wide(const struct tfrt_conv *g, const float *w, const float *x,
                              float *y, size_t t, size_t p0, size_t oy, size_t ox) {
  enum { T = TFRT_MATVEC_TILE, P = TFRT_CONV512_WIDE_P };
  const float *at[P];
  TFRT_UNROLL
  for (size_t q = 0; q < P; q++) {
    at[q] = x + (oy * g->sh * g->iw + ox * g->sw) * g->c;
    if (++ox == g->ow) ox = 0, oy++;
  }
  __m512 acc[P][4], bias[4]; /* the bias is added at the store (tfrt_conv_m8x2) */
  TFRT_UNROLL
  for (size_t v = 0; v < 4; v++)
    bias[v] = _mm512_loadu_ps(g->post + TFRT_POST_BIAS + t + 16 * v);
  TFRT_UNROLL
  for (size_t q = 0; q < P; q++)
    TFRT_UNROLL
    for (size_t v = 0; v < 4; v++) acc[q][v] = _mm512_setzero_ps();
  const float *w2 = w + g->runs * g->run * T; /* the second tile */
  for (size_t r = 0; r < g->runs; r++) {
    const size_t skip = TFRT_RUN_START(g, r);
    for (size_t e = 0; e < g->run; e++, w += T, w2 += T) {
      const __m512 wv[4] = {_mm512_loadu_ps(w), _mm512_loadu_ps(w + 16), _mm512_loadu_ps(w2),
                            _mm512_loadu_ps(w2 + 16)};
      TFRT_UNROLL
      for (size_t q = 0; q < P; q++) TFRT_FMA4_BROADCAST(acc[q], wv, at[q][skip + e]);
    }
  }
  const struct tfrt_clamp clamp = tfrt_clamp_of(g->post);
  TFRT_UNROLL
  for (size_t q = 0; q < P; q++)
    TFRT_UNROLL
    for (size_t v = 0; v < 4; v++)
      _mm512_storeu_ps(y + (p0 + q) * g->n + t + 16 * v,
                       tfrt_clamp512(clamp, _mm512_add_ps(acc[q][v], bias[v])));
}

/* Lanes t..t+63 (two whole tiles, w at the first) of every position (at
 * least 8; the caller asks 12): blocks of 6, the rest (fewer than 6) per tile in one block of
 * 4 or 8 moved back to end at the last position. */
static void tfrt_conv_avx512_wide(const struct tfrt_conv *g, const float *w, const float *x,
                                  float *y, size_t t) {
  enum { P = TFRT_CONV512_WIDE_P };
  const size_t positions = g->positions, k = g->runs * g->run;
  size_t p0 = 0, oy = 0, ox = 0;
  for (; p0 + P <= positions; p0 += P) {
    tfrt_conv512_wide(g, w, x, y, t, p0, oy, ox);
    for (ox += P; ox >= g->ow; ox -= g->ow) oy++;
  }
  const size_t rest = positions - p0, size = rest > 4 ? 8 : 4, start = positions - size;
  for (size_t h = 0; rest && h < 2; h++) {
    const float *wt = w + h * k * TFRT_MATVEC_TILE;
    if (size == 8)
      tfrt_conv512(g, wt, x, y, t + h * 32, start, start / g->ow, start % g->ow, 8);
    else
      tfrt_conv512(g, wt, x, y, t + h * 32, start, start / g->ow, start % g->ow, 4);
  }
}

/* acc += w0 * x for the float at x (one accumulator: tfrt_conv512_half) */
#ifdef TFRT_INTRINSICS_ONLY
#define TFRT_FMA1_BROADCAST(acc, w0, x) acc = _mm512_fmadd_ps(w0, _mm512_set1_ps(x), acc)
#else
#define TFRT_FMA1_BROADCAST(acc, w0, x)                                                   \
  do {                                                                                   \
    __m512 bcast_;                                                                       \
    __asm__("vbroadcastss %[xv], %[t]\n\t"                                              \
            "vfmadd231ps %[t], %[wa], %[a0]"                                             \
            : [a0] "+v"(acc), [t] "=&v"(bcast_)                                          \
            : [wa] "v"(w0), [xv] "m"(x));                                                \
  } while (0)
#endif

/* Positions p0..p0+P-1 times lanes t..t+15, the last tile of a layer of
 * n - t <= 16 outputs (its upper 16 lanes are past n: tfrt_conv512 would
 * spend half its FMAs on them): one accumulator a position, so P is 16
 * (or 8, 4 for the rest) and each weight load serves twice the positions.
 * A MobileNetV2 0.35's 1x1 layers of 8 and 16 outputs. */
enum { TFRT_CONV512_HALF_P = 16 };
static inline __attribute__((always_inline)) void tfrt_conv512_half(
    const struct tfrt_conv *g, const float *w, const float *x, float *y, size_t t, size_t p0,
    size_t oy, size_t ox, const size_t P) {
  const size_t T = g->stride;
  const size_t lanes = g->n - t;
  const __mmask16 m0 = lanes >= 16 ? 0xFFFF : (__mmask16)((1u << lanes) - 1);
  const float *at[TFRT_CONV512_HALF_P];
  TFRT_UNROLL
  for (size_t q = 0; q < P; q++) {
    at[q] = x + (oy * g->sh * g->iw + ox * g->sw) * g->c;
    if (++ox == g->ow) ox = 0, oy++;
  }
  const __m512 bias = _mm512_loadu_ps(g->post + TFRT_POST_BIAS + t); /* added at the store */
  __m512 a[TFRT_CONV512_HALF_P];
  TFRT_UNROLL
  for (size_t q = 0; q < P; q++) a[q] = _mm512_setzero_ps();
  for (size_t r = 0; r < g->runs; r++) {
    const size_t skip = TFRT_RUN_START(g, r);
    for (size_t e = 0; e < g->run; e++, w += T) {
      const __m512 w0 = _mm512_loadu_ps(w);
      TFRT_UNROLL
      for (size_t q = 0; q < P; q++) TFRT_FMA1_BROADCAST(a[q], w0, at[q][skip + e]);
    }
  }
  const struct tfrt_clamp clamp = tfrt_clamp_of(g->post);
  TFRT_UNROLL
  for (size_t q = 0; q < P; q++)
    _mm512_mask_storeu_ps(y + (p0 + q) * g->n + t, m0,
                          tfrt_clamp512(clamp, _mm512_add_ps(a[q], bias)));
}

/* Lanes t..t+15 (n - t <= 16) of every position (at least 4): blocks of
 * 16, the rest in the largest block of 16, 8 or 4 that fits in all the
 * positions, moved back to end at the last one (as tfrt_conv_avx512). A
 * layer of at most 16 outputs (one tile of 16 lanes, whose rows the
 * 32-lane blocks would read past) takes these from 4 positions. */
static void tfrt_conv_avx512_half(const struct tfrt_conv *g, const float *w, const float *x,
                                  float *y, size_t t) {
  const size_t positions = g->positions;
  size_t oy = 0, ox = 0; /* of p0, stepped */
  for (size_t p0 = 0; p0 < positions;) {
    const size_t rest = positions - p0;
    const size_t size = rest > 8 && positions >= 16 ? 16 : rest > 4 && positions >= 8 ? 8 : 4;
    const size_t start = p0 + size <= positions ? p0 : positions - size;
    if (start != p0) oy = start / g->ow, ox = start % g->ow;
    if (size == 16)
      tfrt_conv512_half(g, w, x, y, t, start, oy, ox, 16);
    else if (size == 8)
      tfrt_conv512_half(g, w, x, y, t, start, oy, ox, 8);
    else
      tfrt_conv512_half(g, w, x, y, t, start, oy, ox, 4);
    p0 = start + size;
    for (ox += size; ox >= g->ow; ox -= g->ow) oy++;
  }
}

/* Lanes t..t+31 of every position (at least 4): blocks of 12, the rest in
 * the largest block of 12, 8 or 4 that fits in all the positions, moved
 * back to end at the last one (positions computed twice are stored twice,
 * the same values), so that at most 3 are computed twice: a streamed
 * frame's 13 positions are 12 + 4, not 12 + 12. */
static void tfrt_conv_avx512(const struct tfrt_conv *g, const float *w, const float *x,
                             float *y, size_t t) {
  const size_t positions = g->positions;
  size_t oy = 0, ox = 0; /* of p0, stepped: a division per block cost 4% */
  for (size_t p0 = 0; p0 < positions;) {
    const size_t rest = positions - p0;
    const size_t size = rest > 8 && positions >= 12 ? 12 : rest > 4 && positions >= 8 ? 8 : 4;
    const size_t start = p0 + size <= positions ? p0 : positions - size;
    if (start != p0) oy = start / g->ow, ox = start % g->ow;
    if (size == 12)
      tfrt_conv512(g, w, x, y, t, start, oy, ox, 12);
    else if (size == 8)
      tfrt_conv512(g, w, x, y, t, start, oy, ox, 8);
    else
      tfrt_conv512(g, w, x, y, t, start, oy, ox, 4);
    p0 = start + size;
    for (ox += size; ox >= g->ow; ox -= g->ow) oy++;
  }
}
#endif

/* y[oh][ow][n] = sum over (i, j, ch) of W[n][(i*kw + j)*c + ch] *
 * x[oy*sh + i*dh][ox*sw + j*dw][ch]: one image, channels last, already
 * padded (x is [ih][iw][c], y is [oh][ow][n]); W packed as above with k =
 * kh*kw*c in the order (i, j, ch), the order of a [kh][kw][c][n] filter. */
void TFRT_CONV_FN(const tfrt_weight *w, size_t w_offset, const float *x, size_t x_offset,
                  float *y, size_t y_offset, const float *post, size_t n, size_t c, size_t kh,
                  size_t kw, size_t iw, size_t oh, size_t ow, size_t sh, size_t sw, size_t dh,
                  size_t dw) {
  const struct tfrt_conv g = {n,  c,  kw, iw, ow, sh, sw, dh, dw, dw == 1 ? kh : kh * kw,
                              dw == 1 ? kw * c : c, oh * ow, post,
                              kh == 1 && kw == 1 && sh == 1 && sw == 1 && iw == ow,
                              TFRT_CONV_TILE_OF(n)};
  const size_t k = kh * kw * c;
  w += w_offset;
  x += x_offset;
  y += y_offset;
  if (n <= TFRT_MATVEC_DOT_ROWS) {
    tfrt_conv_dot(&g, w, x, y);
    return;
  }
  /* (a layer of 16 outputs or fewer is one tile of 16 lanes) */
  const int narrow = g.stride == TFRT_MATVEC_SMALL_TILE;
  for (size_t t = 0; t < n; t += TFRT_MATVEC_TILE, w += k * TFRT_MATVEC_TILE) {
    size_t p0 = 0;
#if defined(__x86_64__) || defined(__aarch64__) /* (a Cortex-M keeps its blocks) */
    if (g.positions == 1) {
      if (narrow)
        tfrt_conv_one_16(&g, w, x, y, t);
      else
        tfrt_conv_one_32(&g, w, x, y, t);
      continue;
    }
#endif
#ifdef TFRT_AVX512_F32
    /* Two tiles at once where there are several blocks of 6 positions and
     * the tiles' weights stay in L1 between them (k at most 128: 32 KB):
     * a block of 6 reads them again for every 6 positions, where one tile
     * at a time reads each tile once for up to 12 positions, which a
     * layer whose weights come from L2 or memory needs (--streams 8:
     * 2xLSTM(128)'s step took 20% longer with blocks of 6). */
    if (g.positions >= 12 && n - t >= 2 * TFRT_MATVEC_TILE && k <= 128) {
      tfrt_conv_avx512_wide(&g, w, x, y, t);
      t += TFRT_MATVEC_TILE, w += k * TFRT_MATVEC_TILE;
      continue;
    }
    if ((g.positions >= TFRT_CONV512_HALF_P || (narrow && g.positions >= 4)) && n - t <= 16) {
      tfrt_conv_avx512_half(&g, w, x, y, t);
      continue;
    }
    if (g.positions >= 4) {
      tfrt_conv_avx512(&g, w, x, y, t);
      continue;
    }
#endif
#ifdef TFRT_CONV_CORTEX_M
    for (; p0 < g.positions; p0 += 2)
      for (size_t h = 0; h < TFRT_MATVEC_TILE && t + h < n; h += 8)
        tfrt_conv_m8x2(&g, w + h, x, y, p0, t + h);
#endif
#ifdef TFRT_AVX2_F32
    {
      /* the tile's lanes in blocks of 16, but a last one of 8 or fewer
       * alone in blocks of 8 (over every position: the C blocks below
       * recompute the last few with the rest of the tile) */
      const size_t lanes = n - t < TFRT_MATVEC_TILE ? n - t : TFRT_MATVEC_TILE;
      if (g.positions >= 3 && g.positions <= TFRT_AVX2_FEW_P && lanes > 16 &&
          k * n >= TFRT_AVX2_FEW_WEIGHTS) {
        tfrt_conv_avx2_few(&g, w, x, y, t);
        continue;
      }
      const size_t wide = lanes % 16 && lanes % 16 <= 8 ? lanes - lanes % 16 : lanes;
      if (wide < lanes)
        for (size_t p8 = 0; p8 < g.positions; p8 += TFRT_AVX2_8_P)
          tfrt_conv_avx2_8(&g, w + wide, x, y, p8, t + wide);
      for (; p0 + TFRT_CONV_TAIL < g.positions; p0 += 6)
        for (size_t h = 0; h < wide; h += 16)
          tfrt_conv_avx2(&g, w + h, x, y, p0, t + h);
    }
#endif
#ifdef TFRT_V4_F32
    {
      /* (aarch64, x86-64 with SSE2 only) every position, 16 lanes at a
       * time, but a last 8 or fewer alone in blocks of 8 lanes */
      const size_t lanes = n - t < TFRT_MATVEC_TILE ? n - t : TFRT_MATVEC_TILE;
      const size_t wide = lanes % 16 && lanes % 16 <= 8 ? lanes - lanes % 16 : lanes;
      if (wide < lanes)
        for (size_t p8 = 0; p8 < g.positions; p8 += TFRT_CONV_V4_8_P)
          tfrt_conv_v4_8(&g, w + wide, x, y, p8, t + wide);
      for (; p0 < g.positions; p0 += TFRT_CONV_V4_P)
        for (size_t h = 0; h < wide; h += 16)
          tfrt_conv_v4(&g, w + h, x, y, p0, t + h);
    }
#endif
    for (; p0 < g.positions; p0 += TFRT_CONV_P) {
      const int tail = g.positions - p0 <= TFRT_CONV_TAIL;
      if (narrow && tail)
        TFRT_CONV_BLOCK_OF(TFRT_CONV_TAIL, 16)(&g, w, x, y, p0, t);
      else if (narrow)
        TFRT_CONV_BLOCK_OF(TFRT_CONV_P, 16)(&g, w, x, y, p0, t);
      else if (tail)
        TFRT_CONV_BLOCK_OF(TFRT_CONV_TAIL, 32)(&g, w, x, y, p0, t);
      else
        TFRT_CONV_BLOCK_OF(TFRT_CONV_P, 32)(&g, w, x, y, p0, t);
    }
  }
}
#endif

#if defined(TFRT_CONV16_FN) || defined(TFRT_DWCONV16_FN) || defined(TFRT_QCONV16_FN)
/* f16 <-> f32, for the convolutions on f16 images (--intermediates=f16) */
#include "tfrt_half_convert.h"
#endif

#ifdef TFRT_DWCONV_FN
/* the depthwise convolution: its own file, part of this translation unit */
#include "tfrt_dwconv.h"
#endif

#ifdef TFRT_QCONV_FN
/* the int8 convolution: its own file, part of this translation unit (it
 * uses the int8 helpers above and the epilogue's tfrt_post) */
#include "tfrt_qconv.h"
#endif

#if defined(TFRT_CONV16_FN) || defined(TFRT_DWCONV16_FN) || defined(TFRT_QCONV16_FN)
/* the convolutions with f16 images, wrapping the f32 ones above */
#include "tfrt_half.h"
#endif

#ifdef TFRT_POOL_FN
/* max and average pooling: its own file, part of this translation unit */
#include "tfrt_pool.h"
#endif

#ifdef TFRT_RESIZE_FN
/* one axis of a bilinear resize: its own file, part of this translation unit */
#include "tfrt_resize.h"
#endif
