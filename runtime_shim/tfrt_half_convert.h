/* tfrt_half_convert.h - f16 <-> f32 for the convolutions on f16 images
 * (--intermediates=f16: runtime_shim/tfrt_half.h), part of the kernels'
 * translation unit: rounding to nearest even, Inf and NaN kept. A pair is
 * two neighbouring halves as one little-endian 32-bit word. */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the f16 pairs are little-endian words"
#endif

/* two neighbouring values */
struct tfrt_f2 {
  float lo, hi;
};

static inline uint32_t tfrt_h_word(const uint16_t *h) {
  uint32_t word;
  __builtin_memcpy(&word, h, 4);
  return word;
}
static inline void tfrt_h_put_word(uint16_t *h, uint32_t word) { __builtin_memcpy(h, &word, 4); }

/* The FPU's half conversions: VFPv4 and later, every M-profile FPU
 * (Cortex-M4F/M7/M33/M55, whose __ARM_FP says no half format: that is
 * about arithmetic and storage types, not the conversions). */
#if defined(__arm__) && defined(__ARM_FP) && \
    ((__ARM_FP & 2) || (defined(__ARM_ARCH_PROFILE) && __ARM_ARCH_PROFILE == 'M'))
#define TFRT_ARM_HALF_CVT 1
#endif

#ifdef TFRT_ARM_HALF_CVT
/* VCVTB on a register's bottom half, VCVTT on its top half */
static inline float tfrt_h2f(uint16_t h) {
  float f;
  __asm__("vmov %0, %1\n\tvcvtb.f32.f16 %0, %0" : "=t"(f) : "r"((uint32_t)h));
  return f;
}
static inline uint16_t tfrt_f2h(float f) {
  uint32_t bits;
  __asm__("vcvtb.f16.f32 %1, %1\n\tvmov %0, %1" : "=r"(bits), "+t"(f));
  return (uint16_t)bits;
}
static inline struct tfrt_f2 tfrt_h2f2(uint32_t two) {
  struct tfrt_f2 f;
  __asm__("vmov %0, %2\n\tvcvtt.f32.f16 %1, %0\n\tvcvtb.f32.f16 %0, %0"
          : "=&t"(f.lo), "=t"(f.hi)
          : "r"(two));
  return f;
}
static inline uint32_t tfrt_f2h2(float lo, float hi) {
  float both;
  uint32_t bits;
  __asm__("vcvtb.f16.f32 %0, %2\n\tvcvtt.f16.f32 %0, %3\n\tvmov %1, %0"
          : "=&t"(both), "=r"(bits)
          : "t"(lo), "t"(hi));
  return bits;
}
#else
#if defined(__aarch64__)
static inline float tfrt_h2f(uint16_t h) {
  __fp16 v;
  __builtin_memcpy(&v, &h, 2);
  return (float)v;
}
static inline uint16_t tfrt_f2h(float f) {
  const __fp16 v = (__fp16)f;
  uint16_t h;
  __builtin_memcpy(&h, &v, 2);
  return h;
}
#else
/* In integer operations: a half's exponent and mantissa moved to an f32's
 * and scaled by 2^(127-15) (exact for subnormals too: they become f32
 * subnormals, scaled up), Inf and NaN by their bits. */
static inline float tfrt_h2f(uint16_t h) {
  union { uint32_t u; float f; } v = {((uint32_t)(int32_t)(int16_t)h << 13) & 0x8fffe000u};
  if ((h & 0x7c00u) != 0x7c00u) return v.f * 0x1p112f;
  v.u = ((uint32_t)(h & 0x8000u) << 16) | 0x7f800000u | ((uint32_t)(h & 0x3ffu) << 13);
  return v.f;
}
static inline uint16_t tfrt_f2h(float f) {
  const union { float f; uint32_t u; } v = {f};
  const uint32_t sign = (v.u >> 16) & 0x8000u, a = v.u & 0x7fffffffu;
  if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);  /* NaN */
  if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* rounds past 65504: Inf */
  if (a < 0x38800000u) { /* under 2^-14: a multiple of 2^-24, rounded to even */
    const union { uint32_t u; float f; } m = {a};
    const float units = m.f * 0x1p24f;
    return (uint16_t)(sign | (uint32_t)((units + 0x1p23f) - 0x1p23f));
  }
  /* the mantissa rounded to 10 bits (a carry moves into the exponent) and
   * the exponent rebiased from 127 to 15 */
  return (uint16_t)(sign | ((a + 0xfffu + ((a >> 13) & 1u) - 0x38000000u) >> 13));
}
#endif
static inline struct tfrt_f2 tfrt_h2f2(uint32_t two) {
  const struct tfrt_f2 f = {tfrt_h2f((uint16_t)two), tfrt_h2f((uint16_t)(two >> 16))};
  return f;
}
static inline uint32_t tfrt_f2h2(float lo, float hi) {
  return tfrt_f2h(lo) | (uint32_t)tfrt_f2h(hi) << 16;
}
#endif

/* n halves from h as f32 into f, two at a time */
static inline void tfrt_h_load(float *restrict f, const uint16_t *restrict h, size_t n) {
  size_t i = 0;
  for (; i + 2 <= n; i += 2) {
    const struct tfrt_f2 v = tfrt_h2f2(tfrt_h_word(h + i));
    f[i] = v.lo, f[i + 1] = v.hi;
  }
  if (i < n) f[i] = tfrt_h2f(h[i]);
}

/* n f32 from f as halves into h, two at a time */
static inline void tfrt_h_store(uint16_t *restrict h, const float *restrict f, size_t n) {
  size_t i = 0;
  for (; i + 2 <= n; i += 2) tfrt_h_put_word(h + i, tfrt_f2h2(f[i], f[i + 1]));
  if (i < n) h[i] = tfrt_f2h(f[i]);
}
