/* immintrin.h for the tests' emulated x86-64 builds (util.x86_isa_flags
 * "avx512_emulated"): the intrinsics of AVX2, FMA, AVX-512 and AVX-512
 * VNNI in portable C, from SIMDe (Debian's libsimde-dev), so that the
 * kernels' AVX-512 paths run on any x86-64 CPU. The build defines the ISA
 * macros (__AVX512F__ ...) that select those paths, and
 * TFRT_INTRINSICS_ONLY (the paths' inline assembly as intrinsics:
 * runtime_shim/tfrt_matvec.c). SIMDe 0.7 lacks the mask types' Intel
 * names and a few intrinsics, written out below with the instructions'
 * semantics: lanes outside a mask are neither read nor written
 * (AddressSanitizer checks the kernels' buffers to the byte), and a float
 * out of int32's range truncates to INT32_MIN, as vcvttps2dq does. */
#ifndef TFAOT_TESTS_EMULATED_IMMINTRIN_H
#define TFAOT_TESTS_EMULATED_IMMINTRIN_H
#define SIMDE_ENABLE_NATIVE_ALIASES
#define SIMDE_NO_NATIVE
#include <simde/x86/avx512.h>
#include <stdint.h>

typedef simde__mmask8 __mmask8;
typedef simde__mmask16 __mmask16;
typedef simde__mmask32 __mmask32;
typedef simde__mmask64 __mmask64;

static inline simde__m512 emulated_mm512_maskz_loadu_ps(simde__mmask16 k, const void *p) {
  float lanes[16];
  for (int i = 0; i < 16; i++) lanes[i] = (k >> i) & 1 ? ((const float *)p)[i] : 0.0f;
  return simde_mm512_loadu_ps(lanes);
}
static inline void emulated_mm512_mask_storeu_ps(void *p, simde__mmask16 k, simde__m512 a) {
  float lanes[16];
  simde_mm512_storeu_ps(lanes, a);
  for (int i = 0; i < 16; i++)
    if ((k >> i) & 1) ((float *)p)[i] = lanes[i];
}
static inline simde__m512i emulated_mm512_maskz_loadu_epi32(simde__mmask16 k, const void *p) {
  int32_t lanes[16];
  for (int i = 0; i < 16; i++) lanes[i] = (k >> i) & 1 ? ((const int32_t *)p)[i] : 0;
  return simde_mm512_loadu_si512(lanes);
}
static inline simde__m512 emulated_mm512_cvtepi32_ps(simde__m512i a) {
  int32_t in[16];
  float out[16];
  simde_mm512_storeu_si512(in, a);
  for (int i = 0; i < 16; i++) out[i] = (float)in[i];
  return simde_mm512_loadu_ps(out);
}
static inline simde__m512i emulated_mm512_cvttps_epi32(simde__m512 a) {
  float in[16];
  int32_t out[16];
  simde_mm512_storeu_ps(in, a);
  for (int i = 0; i < 16; i++)
    out[i] = in[i] > -2147483904.0f && in[i] < 2147483648.0f ? (int32_t)in[i] : INT32_MIN;
  return simde_mm512_loadu_si512(out);
}
/* vpmovdb: each lane's low byte */
static inline simde__m128i emulated_mm512_cvtepi32_epi8(simde__m512i a) {
  int32_t in[16];
  int8_t out[16];
  simde_mm512_storeu_si512(in, a);
  for (int i = 0; i < 16; i++) out[i] = (int8_t)(uint8_t)((uint32_t)in[i] & 0xFF);
  return simde_mm_loadu_si128(out);
}
static inline uint32_t emulated_mm512_reduce_max_epu32(simde__m512i a) {
  uint32_t lanes[16], max = 0;
  simde_mm512_storeu_si512(lanes, a);
  for (int i = 0; i < 16; i++) max = lanes[i] > max ? lanes[i] : max;
  return max;
}
#define _mm512_maskz_loadu_ps emulated_mm512_maskz_loadu_ps
#define _mm512_mask_storeu_ps emulated_mm512_mask_storeu_ps
#define _mm512_maskz_loadu_epi32 emulated_mm512_maskz_loadu_epi32
#define _mm512_cvtepi32_ps emulated_mm512_cvtepi32_ps
#define _mm512_cvttps_epi32 emulated_mm512_cvttps_epi32
#define _mm512_cvtepi32_epi8 emulated_mm512_cvtepi32_epi8
#define _mm512_reduce_max_epu32 emulated_mm512_reduce_max_epu32
#endif
