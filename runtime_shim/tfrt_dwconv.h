/* tfrt_dwconv.h - the depthwise convolution (NAME_dwconv_f32), part of the
 * kernels' translation unit: tfrt_matvec.c includes it when compiled with
 * -DTFRT_DWCONV_FN, after what it uses there (the weight type and TFRT_W,
 * TFRT_MAC, the convolutions' epilogue tfrt_post and clamps, TFRT_UNROLL).
 * Paths: AVX-512 and AVX2 blocks of positions x channels (3-column filters
 * at stride 1 with the input columns shared by a block's positions), a
 * scalar FPU's (Cortex-M) 3-column block, and portable C blocks the
 * compiler vectorises; what none of them takes goes one channel at a time. */
void TFRT_DWCONV_FN(const tfrt_weight *w, size_t w_offset, const float *x, size_t x_offset,
                    float *y, size_t y_offset, const float *post, size_t n, size_t c, size_t kh,
                    size_t kw, size_t ih, size_t iw, size_t top, size_t left, size_t oh,
                    size_t ow, size_t sh, size_t sw, size_t dh, size_t dw);

/* Positions of one output row and channels computed together: each weight
 * vector loaded serves TFRT_DWCONV_P positions (4 x 16 channels: 8 AVX2
 * accumulators; one position at a time, 64 channels, ran at 2.3 GMAC/s on
 * a Zen 3 with 300 channels, this at 12). */
#define TFRT_DWCONV_P 4
#define TFRT_DWCONV_LANES 16

struct tfrt_dwconv {
  size_t n, c, kh, kw, iw, sw, dh, dw;
  const float *post; /* the epilogue (tfrt_post) */
  int act;           /* its activation, read once (tfrt_act_of) */
};

/* Where a block of positions reads: the image x, the input row of filter
 * row 0 and the input column of the first position's filter column 0
 * (negative where they start in the padding), the filter rows over the
 * image, i0..i1-1 (the same for every position of an output row), xrow the
 * input row of filter row i0; at an edge, the filter columns over the
 * image for every position of the block, all0..all1-1 (elsewhere all). */
struct tfrt_dwblock {
  const float *x;
  ptrdiff_t row, col;
  size_t i0, i1;
  const float *xrow;
  size_t all0, all1;
};

/* What a tap over the zero padding reads (the padding is not in memory):
 * as many channels as a block takes. */
static const float tfrt_dw_zeros[64];

/* The taps k < kn whose coordinate at + k*d lies in [0, size), as [*k0, *k1). */
static void tfrt_tap_range(ptrdiff_t at, size_t size, size_t kn, size_t d, size_t *k0,
                           size_t *k1) {
  const ptrdiff_t step = (ptrdiff_t)d, room = (ptrdiff_t)size - at;
  const size_t lo = at >= 0 ? 0 : (size_t)((-at + step - 1) / step);
  size_t hi = room <= 0 ? 0 : (size_t)((room + step - 1) / step);
  hi = hi < kn ? hi : kn;
  *k0 = lo < hi ? lo : hi;
  *k1 = hi;
}

/* The input row of block b's filter row i (one over the image). */
static inline const float *tfrt_dw_row(const struct tfrt_dwconv *g,
                                       const struct tfrt_dwblock *b, size_t i) {
  return b->x + (size_t)(b->row + (ptrdiff_t)(i * g->dh)) * g->iw * g->c;
}

/* Column ix of the input row xi, or zeros when it is outside the image. */
static inline const float *tfrt_dw_column(const struct tfrt_dwconv *g, const float *xi,
                                          ptrdiff_t ix) {
  return ix < 0 || ix >= (ptrdiff_t)g->iw ? tfrt_dw_zeros : xi + (size_t)ix * g->c;
}

/* The input of position q of block b for tap (i, j), from channel o0. At
 * the edge of a row (edge != 0) a column outside the image reads zeros. */
static inline const float *tfrt_dw_input(const struct tfrt_dwconv *g,
                                         const struct tfrt_dwblock *b, size_t i, size_t j,
                                         size_t q, size_t o0, int edge) {
  const ptrdiff_t ix = b->col + (ptrdiff_t)(q * g->sw + j * g->dw);
  const float *xi = tfrt_dw_row(g, b, i);
  return edge ? tfrt_dw_column(g, xi + o0, ix) : xi + (size_t)ix * g->c + o0;
}

/* At an edge, the filter columns over the image for all P positions of
 * block b, [*all0, *all1) (the first position's start, the last one's end):
 * only the columns outside need a check per position. */
static inline void tfrt_dw_inner_columns(const struct tfrt_dwconv *g,
                                         const struct tfrt_dwblock *b, size_t P, size_t *all0,
                                         size_t *all1) {
  size_t unused;
  tfrt_tap_range(b->col, g->iw, g->kw, g->dw, all0, &unused);
  tfrt_tap_range(b->col + (ptrdiff_t)((P - 1) * g->sw), g->iw, g->kw, g->dw, &unused, all1);
}

/* The walk over a block's taps: for each filter row i over the image, xi
 * is its input row from channel o0 and wt its weights, for each column j
 * the input of position q is TFRT_DW_X(q) (a column over the padding reads
 * zeros, checked only in the columns where some position needs it). */
#define TFRT_DW_TAPS_BEGIN(g, b, w, o0, edge)                                              \
  /* (the fields as locals: gcc reloaded them in the loop) */                            \
  const size_t c_ = (g)->c, sw_ = (g)->sw, step_ = sw_ * c_, kw_ = (g)->kw, n_ = (g)->n;  \
  const size_t row_ = (g)->dh * (g)->iw * c_, dw_ = (g)->dw;                             \
  const size_t all0_ = (b)->all0, all1_ = (b)->all1;                                     \
  const float *xi = (b)->xrow + (o0);                                                    \
  const tfrt_weight *wt = (w) + (b)->i0 * kw_ * n_ + (o0);                               \
  for (size_t i = (b)->i0; i < (b)->i1; i++, xi += row_) {                               \
    for (size_t j = 0; j < kw_; j++, wt += n_) {                                         \
      const ptrdiff_t ix = (b)->col + (ptrdiff_t)(j * dw_);                              \
      const int check = (edge) && (j < all0_ || j >= all1_);
#define TFRT_DW_X(g, q)                                                                  \
  (!check ? xi + (size_t)ix * c_ + (q) * step_                                           \
          : tfrt_dw_column(g, xi, ix + (ptrdiff_t)((q) * sw_)))
#define TFRT_DW_TAPS_END \
  }                      \
  }

/* P positions of block b times L = TFRT_DWCONV_LANES channels from o0,
 * depth multiplier 1; y is the first position's output. Macros
 * instantiated for P = TFRT_DWCONV_P and 1 (rows narrower than P), exactly
 * sized arrays: blocks at the image's edges walk the taps with checks
 * (TFRT_DW_TAPS_BEGIN), those inside are plain loops over one input
 * pointer per tap. */
#define TFRT_DWCONV_BLOCK_STORE(P)                                                        \
  for (size_t q = 0; q < P; q++)                                                         \
    for (size_t l = 0; l < L; l++)                                                       \
      y[q * g->n + o0 + l] = tfrt_post(g->post, o0 + l, acc[q][l]);
#define TFRT_DWCONV_EDGE_BLOCK(P, name)                                                   \
  static void name(const struct tfrt_dwconv *g, const struct tfrt_dwblock *b,            \
                   const tfrt_weight *w, float *y, size_t o0) {                          \
    enum { L = TFRT_DWCONV_LANES };                                                      \
    float acc[P][L] = {{0}};                                                             \
    TFRT_DW_TAPS_BEGIN(g, b, w, o0, 1)                                                   \
    float wv[L];                                                                         \
    for (size_t l = 0; l < L; l++) wv[l] = TFRT_W(wt[l]);                                \
    for (size_t q = 0; q < P; q++) {                                                     \
      const float *xt = TFRT_DW_X(g, q);                                                 \
      tfrt_dw_lanes(acc[q], wv, xt);                                                     \
    }                                                                                    \
    TFRT_DW_TAPS_END                                                                     \
    TFRT_DWCONV_BLOCK_STORE(P)                                                           \
  }
#define TFRT_DWCONV_INSIDE_BLOCK(P, name)                                                 \
  static void name(const struct tfrt_dwconv *g, const struct tfrt_dwblock *b,            \
                   const tfrt_weight *w, float *y, size_t o0) {                          \
    enum { L = TFRT_DWCONV_LANES };                                                      \
    const size_t step = g->sw * g->c;                                                    \
    const float *x = b->xrow + (size_t)b->col * g->c + o0;                               \
    float acc[P][L] = {{0}};                                                             \
    for (size_t i = b->i0; i < b->i1; i++) {                                             \
      for (size_t j = 0; j < g->kw; j++) {                                               \
        const float *xt = x + ((i - b->i0) * g->dh * g->iw + j * g->dw) * g->c;          \
        const tfrt_weight *wt = w + (i * g->kw + j) * g->n + o0;                         \
        float wv[L];                                                                     \
        for (size_t l = 0; l < L; l++) wv[l] = TFRT_W(wt[l]);                            \
        for (size_t q = 0; q < P; q++) tfrt_dw_lanes(acc[q], wv, xt + q * step);         \
      }                                                                                  \
    }                                                                                    \
    TFRT_DWCONV_BLOCK_STORE(P)                                                           \
  }
#ifndef TFRT_AVX512_F32 /* (which has its own blocks below) */
/* acc[l] += wv[l] * xt[l] over a block's L channels (restrict: without it
 * clang left the blocks' lane loops scalar, 2.5x slower) */
static inline void tfrt_dw_lanes(float *restrict acc, const float *restrict wv,
                                 const float *restrict xt) {
  for (size_t l = 0; l < TFRT_DWCONV_LANES; l++) TFRT_MAC(acc[l], wv[l], xt[l]);
}
#if !defined(TFRT_AVX2_F32) && !defined(TFRT_V4_F32) /* (their own below) */
TFRT_DWCONV_EDGE_BLOCK(1, tfrt_dwconv_block_1)
#define TFRT_DWCONV_ONE tfrt_dwconv_block_1
#endif

#ifdef TFRT_AVX2_F32
/* The depthwise blocks' vectors (TFRT_DW_V_*, below): 16 channels as two
 * 8-lane vectors */
#define TFRT_DW_V_ZERO(q) __m256 a##q##0 = _mm256_setzero_ps(), a##q##1 = a##q##0;
#define TFRT_DW_V_WEIGHTS(wt) \
  const __m256 w0 = _mm256_loadu_ps(wt), w1 = _mm256_loadu_ps((wt) + 8);
#define TFRT_DW_V_MAC(q, xt)                                                            \
  a##q##0 = _mm256_fmadd_ps(w0, _mm256_loadu_ps(xt), a##q##0);                           \
  a##q##1 = _mm256_fmadd_ps(w1, _mm256_loadu_ps((xt) + 8), a##q##1);
#define TFRT_DW_V_STORE(q)                                                              \
  _mm256_storeu_ps(y + q * g->n + o0,                                                     \
                   tfrt_clamp256(clamp, _mm256_add_ps(a##q##0, _mm256_loadu_ps(bias))));  \
  _mm256_storeu_ps(y + q * g->n + o0 + 8,                                                 \
                   tfrt_clamp256(clamp, _mm256_add_ps(a##q##1, _mm256_loadu_ps(bias + 8))));
#elif defined(TFRT_V4_F32)
/* aarch64 and x86-64 without AVX2: 16 channels as four 4-lane vectors
 * (tfrt_v4). Of gcc's code for the C blocks, the edge block (4 positions)
 * kept its sums in memory and the one-position block was scalar: on
 * aarch64 53 instructions an output on a 3 x 3 x 336 image (qemu-aarch64,
 * counted), on x86-64 with SSE2 6.3 ns. */
/* a position's 16 sums to y, the bias added, clamped */
static inline void tfrt_dw_v4_store(float *y, const float *bias, struct tfrt_clamp clamp,
                                    tfrt_v4 a0, tfrt_v4 a1, tfrt_v4 a2, tfrt_v4 a3) {
  tfrt_v4_store(y, tfrt_clamp_v4(clamp, tfrt_v4_add(a0, tfrt_v4_load(bias))));
  tfrt_v4_store(y + 4, tfrt_clamp_v4(clamp, tfrt_v4_add(a1, tfrt_v4_load(bias + 4))));
  tfrt_v4_store(y + 8, tfrt_clamp_v4(clamp, tfrt_v4_add(a2, tfrt_v4_load(bias + 8))));
  tfrt_v4_store(y + 12, tfrt_clamp_v4(clamp, tfrt_v4_add(a3, tfrt_v4_load(bias + 12))));
}
#define TFRT_DW_V_ZERO(q)                                                               \
  tfrt_v4 a##q##0 = tfrt_v4_set1(0.0f), a##q##1 = a##q##0, a##q##2 = a##q##0,            \
          a##q##3 = a##q##0;
#define TFRT_DW_V_WEIGHTS(wt)                                                           \
  const tfrt_v4 w0 = tfrt_v4_load(wt), w1 = tfrt_v4_load((wt) + 4),                      \
                w2 = tfrt_v4_load((wt) + 8), w3 = tfrt_v4_load((wt) + 12);
#define TFRT_DW_V_MAC(q, xt)                                                            \
  a##q##0 = tfrt_v4_mac(a##q##0, w0, tfrt_v4_load(xt));                                  \
  a##q##1 = tfrt_v4_mac(a##q##1, w1, tfrt_v4_load((xt) + 4));                            \
  a##q##2 = tfrt_v4_mac(a##q##2, w2, tfrt_v4_load((xt) + 8));                            \
  a##q##3 = tfrt_v4_mac(a##q##3, w3, tfrt_v4_load((xt) + 12));
#define TFRT_DW_V_STORE(q) \
  tfrt_dw_v4_store(y + q * g->n + o0, bias, clamp, a##q##0, a##q##1, a##q##2, a##q##3);
#endif

#if defined(TFRT_AVX2_F32) || defined(TFRT_V4_F32)
/* The blocks in intrinsics, 16 channels from o0, over the vectors above:
 * TFRT_DW_V_ZERO(q) declares position q's sums, TFRT_DW_V_WEIGHTS(wt)
 * loads a tap's weights, TFRT_DW_V_MAC(q, xt) adds the tap's products with
 * the input at xt to q's sums, TFRT_DW_V_STORE(q) stores them. The sums
 * stay in registers (gcc kept the C block's on the stack: 11.5 -> 17
 * GMAC/s with AVX2, 64 or 300 channels, 3x3, on a Zen 3). The bias (post +
 * TFRT_POST_BIAS) is added at the store: summed onto a large one (a batch
 * norm's shift), each product was rounded at its scale. */
#define TFRT_DW_V_TAP(q)                                                                \
  {                                                                                     \
    const float *xt_ = TFRT_DW_X(g, q);                                                  \
    TFRT_DW_V_MAC(q, xt_)                                                               \
  }
/* 4 positions at the image's edges */
static void tfrt_dwconv_vec_edge(const struct tfrt_dwconv *g, const struct tfrt_dwblock *b,
                                 const float *w, float *y, size_t o0) {
  const struct tfrt_clamp clamp = tfrt_clamp_of(g->post);
  const float *bias = g->post + TFRT_POST_BIAS + o0;
  TFRT_DW_V_ZERO(0) TFRT_DW_V_ZERO(1) TFRT_DW_V_ZERO(2) TFRT_DW_V_ZERO(3)
  TFRT_DW_TAPS_BEGIN(g, b, w, o0, 1)
  TFRT_DW_V_WEIGHTS(wt)
  TFRT_DW_V_TAP(0) TFRT_DW_V_TAP(1) TFRT_DW_V_TAP(2) TFRT_DW_V_TAP(3)
  TFRT_DW_TAPS_END
  TFRT_DW_V_STORE(0) TFRT_DW_V_STORE(1) TFRT_DW_V_STORE(2) TFRT_DW_V_STORE(3)
}
/* 4 positions inside the image: one input pointer per tap. (Both were one
 * function with the side chosen inside: its prologue and the extra call
 * made the inner blocks 15% slower on a DS-CNN layer.) */
static void tfrt_dwconv_vec_inside(const struct tfrt_dwconv *g, const struct tfrt_dwblock *b,
                                   const float *w, float *y, size_t o0) {
  const struct tfrt_clamp clamp = tfrt_clamp_of(g->post);
  const size_t step = g->sw * g->c, i0 = b->i0, i1 = b->i1;
  const float *x = b->xrow + (size_t)b->col * g->c + o0;
  const float *bias = g->post + TFRT_POST_BIAS + o0;
  TFRT_DW_V_ZERO(0) TFRT_DW_V_ZERO(1) TFRT_DW_V_ZERO(2) TFRT_DW_V_ZERO(3)
  for (size_t i = i0; i < i1; i++) {
    for (size_t j = 0; j < g->kw; j++) {
      const float *xt = x + ((i - i0) * g->dh * g->iw + j * g->dw) * g->c;
      const float *wt = w + (i * g->kw + j) * g->n + o0;
      TFRT_DW_V_WEIGHTS(wt)
      TFRT_DW_V_MAC(0, xt) TFRT_DW_V_MAC(1, xt + step)
      TFRT_DW_V_MAC(2, xt + 2 * step) TFRT_DW_V_MAC(3, xt + 3 * step)
    }
  }
  TFRT_DW_V_STORE(0) TFRT_DW_V_STORE(1) TFRT_DW_V_STORE(2) TFRT_DW_V_STORE(3)
}
/* One position (a row narrower than a block: the last stages of a small
 * image, 3 x 3 or 6 x 6). The C block gcc compiled to scalar FMAs there:
 * with AVX2 a 3 x 3 'same' layer over 3 x 3 x 336 took 6.4 ns an output, a
 * fifth of MobileNetV2 0.35's depthwise time at 96 x 96. */
static void tfrt_dwconv_vec_one(const struct tfrt_dwconv *g, const struct tfrt_dwblock *b,
                                const float *w, float *y, size_t o0) {
  const struct tfrt_clamp clamp = tfrt_clamp_of(g->post);
  const float *bias = g->post + TFRT_POST_BIAS + o0;
  TFRT_DW_V_ZERO(0)
  TFRT_DW_TAPS_BEGIN(g, b, w, o0, 1)
  TFRT_DW_V_WEIGHTS(wt)
  TFRT_DW_V_TAP(0)
  TFRT_DW_TAPS_END
  TFRT_DW_V_STORE(0)
}
#define TFRT_DWCONV_INSIDE_P tfrt_dwconv_vec_inside
#define TFRT_DWCONV_EDGE_P tfrt_dwconv_vec_edge
#define TFRT_DWCONV_ONE tfrt_dwconv_vec_one
#endif

#ifdef TFRT_AVX2_F32
/* Three filter columns at stride and dilation 1 along the row, as the
 * AVX-512 tfrt_dw3_block: the 4 positions of a block read 6 input
 * columns, each loaded once for the taps that use it; 16 channels from o0
 * (8 accumulators, 6 weight vectors: all 16 ymm registers in use). At an
 * edge, columns outside the image are skipped. */
static inline __attribute__((always_inline)) void tfrt_dw3_block_avx2(
    const struct tfrt_dwconv *g, const struct tfrt_dwblock *b, const float *w, float *y,
    size_t o0, const int edge) {
  enum { P = TFRT_DWCONV_P, V = 2 };
  const size_t n = g->n, c = g->c, row = g->dh * g->iw * c;
  const ptrdiff_t col = b->col, width = (ptrdiff_t)g->iw;
  __m256 acc[P][V]; /* the bias is added at the store (tfrt_dwconv_vec_edge) */
  for (size_t v = 0; v < V; v++)
    for (size_t q = 0; q < P; q++) acc[q][v] = _mm256_setzero_ps();
  const float *xi = b->xrow + o0; /* input row i from channel o0 */
  const float *wi = w + b->i0 * 3 * n + o0;
  for (size_t i = b->i0; i < b->i1; i++, xi += row, wi += 3 * n) {
    __m256 wv[3][V];
    for (size_t j = 0; j < 3; j++)
      for (size_t v = 0; v < V; v++) {
        wv[j][v] = _mm256_loadu_ps(wi + j * n + 8 * v);
        __asm__("" : "+x"(wv[j][v])); /* in a register (as the AVX-512 block's) */
      }
    const float *xk = xi + (col < 0 ? 0 : (size_t)col) * c;
    for (size_t k = 0; k < P + 2; k++) { /* the block's input column k, at xk */
      const ptrdiff_t ix = col + (ptrdiff_t)k;
      if (edge && (ix < 0 || ix >= width)) continue;
      const float *at = xk;
      xk += c;
      for (size_t v = 0; v < V; v++) {
        __m256 xv = _mm256_loadu_ps(at + 8 * v);
        __asm__("" : "+x"(xv));
        for (size_t j = 0; j < 3; j++) /* position k - j takes it as its tap j */
          if (k >= j && k - j < P) acc[k - j][v] = _mm256_fmadd_ps(wv[j][v], xv, acc[k - j][v]);
      }
    }
  }
  const struct tfrt_clamp clamp = tfrt_clamp_of(g->post);
  const float *bias = g->post + TFRT_POST_BIAS + o0;
  for (size_t q = 0; q < P; q++)
    for (size_t v = 0; v < V; v++)
      _mm256_storeu_ps(y + q * n + o0 + 8 * v,
                       tfrt_clamp256(clamp, _mm256_add_ps(acc[q][v], _mm256_loadu_ps(
                                                                      bias + 8 * v))));
}

/* One output row of those layers (at least 4 positions and 16 channels):
 * blocks of 4 positions, the last one moved back to end at the row's end,
 * by groups of 16 channels, the last group overlapping the one before (its
 * channels computed twice, stored twice the same). */
static __attribute__((noinline)) void tfrt_dw3_row_avx2(const struct tfrt_dwconv *g,
                                                        struct tfrt_dwblock b, const float *w,
                                                        float *y, size_t ow, size_t left,
                                                        size_t inner0, size_t inner1) {
  enum { P = TFRT_DWCONV_P, C = 16 };
  const size_t n = g->n;
  for (size_t o = 0; o < n; o += C) {
    const size_t o0 = o + C <= n ? o : n - C;
    for (size_t ox = 0; ox < ow; ox += P) {
      const size_t first = ox + P <= ow ? ox : ow - P;
      b.col = (ptrdiff_t)first - (ptrdiff_t)left;
      if (first < inner0 || first + P > inner1)
        tfrt_dw3_block_avx2(g, &b, w, y + first * n, o0, 1);
      else
        tfrt_dw3_block_avx2(g, &b, w, y + first * n, o0, 0);
    }
  }
}
#elif !defined(TFRT_V4_F32)
TFRT_DWCONV_INSIDE_BLOCK(4, tfrt_dwconv_inside_4)
TFRT_DWCONV_EDGE_BLOCK(4, tfrt_dwconv_edge_4)
#define TFRT_DWCONV_INSIDE_P tfrt_dwconv_inside_4
#define TFRT_DWCONV_EDGE_P tfrt_dwconv_edge_4
#endif
#endif /* !TFRT_AVX512_F32 */

#ifdef TFRT_AVX512_F32
/* AVX-512: P (TFRT_DWCONV_P or 1) positions times 16V channels from o0
 * (V = 4 or 2 vectors: 4P or 2P accumulators in registers), depth
 * multiplier 1; channels past n are masked off, so any channel count takes
 * these blocks. Specialised for blocks inside the image (edge 0: no tap
 * checks) and at its edges. A block of 3x3 taps is short (72 FMAs at 32
 * channels): 64 channels a block halve what each costs around its taps. */
static inline __attribute__((always_inline)) void tfrt_dw512(const struct tfrt_dwconv *g,
                                                             const struct tfrt_dwblock *b,
                                                             const float *w, float *y,
                                                             size_t o0, const size_t P,
                                                             const size_t V, const int edge,
                                                             const int full) {
  const size_t n = g->n;
  __mmask16 m[4];
  __m512 acc[TFRT_DWCONV_P][4];
  TFRT_UNROLL
  for (size_t v = 0; v < V; v++) {
    const size_t from = o0 + 16 * v, lanes = from >= n ? 0 : n - from < 16 ? n - from : 16;
    m[v] = full ? (__mmask16)0xFFFF : (__mmask16)((1u << lanes) - 1); /* full: no masks */
  TFRT_UNROLL
    for (size_t q = 0; q < P; q++) /* the bias is added at the store (tfrt_dwconv_vec_edge) */
      acc[q][v] = _mm512_setzero_ps();
  }
  TFRT_DW_TAPS_BEGIN(g, b, w, o0, edge)
  __m512 wv[4];
  TFRT_UNROLL
  for (size_t v = 0; v < V; v++) wv[v] = _mm512_maskz_loadu_ps(m[v], wt + 16 * v);
  TFRT_UNROLL
  for (size_t q = 0; q < P; q++) {
    const float *xt = TFRT_DW_X(g, q);
    TFRT_UNROLL
    for (size_t v = 0; v < V; v++)
      acc[q][v] = _mm512_fmadd_ps(wv[v], _mm512_maskz_loadu_ps(m[v], xt + 16 * v), acc[q][v]);
  }
  TFRT_DW_TAPS_END
  const struct tfrt_clamp clamp = tfrt_clamp_of(g->post);
  const float *bias = g->post + TFRT_POST_BIAS + o0;
  TFRT_UNROLL
  for (size_t q = 0; q < P; q++)
  TFRT_UNROLL
    for (size_t v = 0; v < V; v++)
      _mm512_mask_storeu_ps(
          y + q * n + o0 + 16 * v, m[v],
          tfrt_clamp512(clamp, _mm512_add_ps(acc[q][v], _mm512_maskz_loadu_ps(
                                                            m[v], bias + 16 * v))));
}
/* (the blocks tfrt_dwconv_positions calls, each its own function: inlined
 * into one, the depthwise layers of a DS-CNN took 15% longer) */
#define TFRT_DW512_VARIANT(name, P, V, edge, full)                                           \
  static __attribute__((noinline)) void name(const struct tfrt_dwconv *g,                  \
                                             const struct tfrt_dwblock *b, const float *w, \
                                             float *y, size_t o0) {                        \
    tfrt_dw512(g, b, w, y, o0, P, V, edge, full);                                          \
  }
TFRT_DW512_VARIANT(tfrt_dw512_inside64, TFRT_DWCONV_P, 4, 0, 1)
TFRT_DW512_VARIANT(tfrt_dw512_edge64, TFRT_DWCONV_P, 4, 1, 1)
TFRT_DW512_VARIANT(tfrt_dw512_one64, 1, 4, 1, 1)
TFRT_DW512_VARIANT(tfrt_dw512_inside32, TFRT_DWCONV_P, 2, 0, 0)
TFRT_DW512_VARIANT(tfrt_dw512_edge32, TFRT_DWCONV_P, 2, 1, 0)
TFRT_DW512_VARIANT(tfrt_dw512_one32, 1, 2, 1, 0)

/* Three filter columns with stride and dilation 1 along the row (the 3x3
 * of DS-CNNs and MobileNets, kws_streaming's 10x3): the P positions of a
 * block read P + 2 input columns, each loaded once for the up to 3 taps
 * that use it. (The blocks above load an input per tap: 20 loads per 16
 * FMAs, 50 G multiply-adds/s on a DS-CNN layer on a Zen 5; this block, 32
 * channels and 8 accumulators, 65.) Channels o0..o0+31, masked past n
 * unless full; at an edge, columns outside the image are skipped. */
static inline __attribute__((always_inline)) void tfrt_dw3_block(const struct tfrt_dwconv *g,
                                                                 const struct tfrt_dwblock *b,
                                                                 const float *w, float *y,
                                                                 size_t o0, const int edge,
                                                                 const int full) {
  enum { P = TFRT_DWCONV_P, V = 2 };
  const size_t n = g->n, c = g->c, row = g->dh * g->iw * c;
  const ptrdiff_t col = b->col, width = (ptrdiff_t)g->iw;
  __mmask16 m[V];
  __m512 acc[P][V];
  TFRT_UNROLL
  for (size_t v = 0; v < V; v++) {
    const size_t from = o0 + 16 * v, lanes = from >= n ? 0 : n - from < 16 ? n - from : 16;
    m[v] = full ? (__mmask16)0xFFFF : (__mmask16)((1u << lanes) - 1);
    TFRT_UNROLL
    for (size_t q = 0; q < P; q++) acc[q][v] = _mm512_setzero_ps(); /* bias: at the store */
  }
  const float *xi = b->xrow + o0; /* input row i from channel o0 */
  const float *wi = w + b->i0 * 3 * n + o0;
  for (size_t i = b->i0; i < b->i1; i++, xi += row, wi += 3 * n) {
    __m512 wv[3][V];
    TFRT_UNROLL
    for (size_t j = 0; j < 3; j++)
      TFRT_UNROLL
      for (size_t v = 0; v < V; v++) {
        wv[j][v] = _mm512_maskz_loadu_ps(m[v], wi + j * n + 16 * v);
        /* in a register: gcc folded the loads into the FMAs, one per FMA */
        TFRT_IN_REGISTER(wv[j][v]);
      }
    /* (a pointer stepped along the columns: an index each held a register) */
    const float *xk = xi + (col < 0 ? 0 : (size_t)col) * c;
    TFRT_UNROLL
    for (size_t k = 0; k < P + 2; k++) { /* the block's input column k, at xk */
      const ptrdiff_t ix = col + (ptrdiff_t)k;
      if (edge && (ix < 0 || ix >= width)) continue;
      const float *xv_at = xk;
      xk += c;
      TFRT_UNROLL
      for (size_t v = 0; v < V; v++) {
        __m512 xv = _mm512_maskz_loadu_ps(m[v], xv_at + 16 * v);
        TFRT_IN_REGISTER(xv);
        TFRT_UNROLL
        for (size_t j = 0; j < 3; j++) /* position k - j takes it as its tap j */
          if (k >= j && k - j < P) acc[k - j][v] = _mm512_fmadd_ps(wv[j][v], xv, acc[k - j][v]);
      }
    }
  }
  const struct tfrt_clamp clamp = tfrt_clamp_of(g->post);
  const float *bias = g->post + TFRT_POST_BIAS + o0;
  TFRT_UNROLL
  for (size_t q = 0; q < P; q++)
    TFRT_UNROLL
    for (size_t v = 0; v < V; v++)
      _mm512_mask_storeu_ps(
          y + q * n + o0 + 16 * v, m[v],
          tfrt_clamp512(clamp, _mm512_add_ps(acc[q][v], _mm512_maskz_loadu_ps(
                                                            m[v], bias + 16 * v))));
}

/* One output row of tfrt_dw3_block's layers (depth multiplier 1, at least
 * P positions; left: the padding before the image; positions
 * inner0..inner1-1 have every tap over it): blocks of P positions, the
 * last one moved back to end at the row's end, by channel groups of 32,
 * the last one masked. One call a row: one a block cost as much as the
 * block's taps. */
static __attribute__((noinline)) void tfrt_dw3_row(const struct tfrt_dwconv *g,
                                                   struct tfrt_dwblock b, const float *w,
                                                   float *y, size_t ow, size_t left,
                                                   size_t inner0, size_t inner1) {
  enum { P = TFRT_DWCONV_P, C = 32 };
  const size_t n = g->n;
  for (size_t o = 0; o < n; o += C) {
    const int full = n - o >= C;
    for (size_t ox = 0; ox < ow; ox += P) {
      const size_t first = ox + P <= ow ? ox : ow - P;
      const int edge = first < inner0 || first + P > inner1;
      float *yb = y + first * n;
      b.col = (ptrdiff_t)first - (ptrdiff_t)left;
      if (full && !edge)
        tfrt_dw3_block(g, &b, w, yb, o, 0, 1);
      else if (full)
        tfrt_dw3_block(g, &b, w, yb, o, 1, 1);
      else if (!edge)
        tfrt_dw3_block(g, &b, w, yb, o, 0, 0);
      else
        tfrt_dw3_block(g, &b, w, yb, o, 1, 0);
    }
  }
}
#endif

#if defined(__arm__) && defined(__ARM_FP) && !defined(__ARM_NEON)
/* A scalar FPU (Cortex-M4F/M7/M33), 3 filter columns at stride and
 * dilation 1 along the row: one channel at a time, the 4 positions of a
 * block and their sums in registers, each of the block's 6 input columns
 * loaded once for the taps that use it, and at an edge the taps of a
 * column over the padding left out (the blocks of 16 lanes kept 64 sums in
 * memory and checked the padding per tap: 9.3 estimated M4 cycles a
 * multiply-add on a DS-CNN's streamed depthwise layers). Separate multiplies and adds
 * (-std=c11 does not contract them): 1 + 1 cycles on the M4, where VFMA
 * costs 3. Straight-line code: with arrays and loops over the columns,
 * gcc made the edge checks a jump table per row. */
#include <float.h>
/* whether the block's input column k is over the image (else: padding, no taps) */
#define TFRT_DW3S_IN(k) (!edge || ((k) >= k0 && (k) < k1))
#define TFRT_DW3S_X(k) xi[((k) + col) * (ptrdiff_t)c]
#define TFRT_DW3S_MAC(a, w, x) ((a) += (w) * (x))
/* One filter row's taps over the block's 6 input columns, into the sums
 * a0..a3 from the row's weights w0..w2: column k is tap j of position
 * k - j; a column over the padding adds nothing (a product with 0 is not
 * folded away: it could be NaN). T is the type of a column, X(k) loads
 * column k, MAC(a, w, x) adds w x to a. */
#define TFRT_DW3_ROW_TAPS(T, X, MAC)                                            \
  if (TFRT_DW3S_IN(0)) { const T x = X(0); MAC(a0, w0, x); }                    \
  if (TFRT_DW3S_IN(1)) { const T x = X(1); MAC(a0, w1, x), MAC(a1, w0, x); }    \
  if (TFRT_DW3S_IN(2)) {                                                        \
    const T x = X(2);                                                           \
    MAC(a0, w2, x), MAC(a1, w1, x), MAC(a2, w0, x);                             \
  }                                                                             \
  if (TFRT_DW3S_IN(3)) {                                                        \
    const T x = X(3);                                                           \
    MAC(a1, w2, x), MAC(a2, w1, x), MAC(a3, w0, x);                             \
  }                                                                             \
  if (TFRT_DW3S_IN(4)) { const T x = X(4); MAC(a2, w2, x), MAC(a3, w1, x); }    \
  if (TFRT_DW3S_IN(5)) { const T x = X(5); MAC(a3, w2, x); }
static inline __attribute__((always_inline)) void tfrt_dw3_channel_scalar(
    const struct tfrt_dwconv *g, const struct tfrt_dwblock *b, const tfrt_weight *w, float *y,
    size_t o, ptrdiff_t col, ptrdiff_t k0, ptrdiff_t k1, const int edge) {
  const size_t n = g->n, c = g->c, row = g->dh * g->iw * c;
  const float bias = g->post[TFRT_POST_BIAS + o]; /* added at the end (tfrt_dwconv_vec_edge) */
  float a0 = 0, a1 = 0, a2 = 0, a3 = 0;
  const float *xi = b->xrow + o;
  const tfrt_weight *wi = w + b->i0 * 3 * n + o;
  for (size_t i = b->i0; i < b->i1; i++, xi += row, wi += 3 * n) {
    const float w0 = TFRT_W(wi[0]), w1 = TFRT_W(wi[n]), w2 = TFRT_W(wi[2 * n]);
    TFRT_DW3_ROW_TAPS(float, TFRT_DW3S_X, TFRT_DW3S_MAC)
  }
  a0 += bias, a1 += bias, a2 += bias, a3 += bias;
  /* tfrt_post's clamp, on the sides that have a bound */
  const float lo = g->post[0], hi = g->post[1];
  if (lo >= -FLT_MAX)
    a0 = a0 < lo ? lo : a0, a1 = a1 < lo ? lo : a1, a2 = a2 < lo ? lo : a2, a3 = a3 < lo ? lo : a3;
  if (hi <= FLT_MAX)
    a0 = a0 > hi ? hi : a0, a1 = a1 > hi ? hi : a1, a2 = a2 > hi ? hi : a2, a3 = a3 > hi ? hi : a3;
  y[o] = a0, y[n + o] = a1, y[2 * n + o] = a2, y[3 * n + o] = a3;
}

#if defined(__ARM_FEATURE_MVE) && (__ARM_FEATURE_MVE & 2) && !defined(TFRT_MATVEC_BF16) && \
    !defined(TFRT_MATVEC_F16)
#include <arm_mve.h>
/* Helium (Cortex-M55/M85), f32 weights: the same block, 4 channels at a
 * time as vectors (channels are the image's last axis): the 4 positions'
 * sums, a row's 3 weight vectors and an input column are the 8 Q
 * registers. VFMA (fused, 4 products per instruction); the clamp as
 * compare-and-select, which keeps a NaN as the scalar block does (VMAXNM
 * would drop it). */
static inline __attribute__((always_inline)) float32x4_t tfrt_dw3_clamp_mve(float32x4_t a,
                                                                             float lo,
                                                                             float hi) {
  if (lo >= -FLT_MAX) a = vpselq_f32(vdupq_n_f32(lo), a, vcmpltq_n_f32(a, lo));
  if (hi <= FLT_MAX) a = vpselq_f32(vdupq_n_f32(hi), a, vcmpgtq_n_f32(a, hi));
  return a;
}
#define TFRT_DW3V_X(k) vld1q_f32(xi + ((k) + col) * (ptrdiff_t)c)
#define TFRT_DW3V_MAC(a, w, x) ((a) = vfmaq_f32((a), (w), (x)))
static inline __attribute__((always_inline)) void tfrt_dw3_channels_mve(
    const struct tfrt_dwconv *g, const struct tfrt_dwblock *b, const float *w, float *y,
    size_t o, ptrdiff_t col, ptrdiff_t k0, ptrdiff_t k1, const int edge) {
  const size_t n = g->n, c = g->c, row = g->dh * g->iw * c;
  const float32x4_t bias = vld1q_f32(g->post + TFRT_POST_BIAS + o); /* added at the end */
  float32x4_t a0 = vdupq_n_f32(0.0f), a1 = a0, a2 = a0, a3 = a0;
  const float *xi = b->xrow + o;
  const float *wi = w + b->i0 * 3 * n + o;
  for (size_t i = b->i0; i < b->i1; i++, xi += row, wi += 3 * n) {
    const float32x4_t w0 = vld1q_f32(wi), w1 = vld1q_f32(wi + n), w2 = vld1q_f32(wi + 2 * n);
    TFRT_DW3_ROW_TAPS(float32x4_t, TFRT_DW3V_X, TFRT_DW3V_MAC)
  }
  a0 = vaddq_f32(a0, bias), a1 = vaddq_f32(a1, bias);
  a2 = vaddq_f32(a2, bias), a3 = vaddq_f32(a3, bias);
  const float lo = g->post[0], hi = g->post[1];
  vst1q_f32(y + o, tfrt_dw3_clamp_mve(a0, lo, hi));
  vst1q_f32(y + n + o, tfrt_dw3_clamp_mve(a1, lo, hi));
  vst1q_f32(y + 2 * n + o, tfrt_dw3_clamp_mve(a2, lo, hi));
  vst1q_f32(y + 3 * n + o, tfrt_dw3_clamp_mve(a3, lo, hi));
}
#undef TFRT_DW3V_MAC
#undef TFRT_DW3V_X
/* channels 4 at a time; the rest one by one */
#define TFRT_DW3S_VECTORS(k0, k1, edge) \
  for (; o + 4 <= g->n; o += 4) tfrt_dw3_channels_mve(g, b, w, yb, o, col, k0, k1, edge);
#else
#define TFRT_DW3S_VECTORS(k0, k1, edge)
#endif

/* One output row (at least 4 positions), blocks of 4 positions, the last
 * one moved back to end at the row's end. */
#define TFRT_DW3S_CHANNELS(k0, k1, edge)                                        \
  do {                                                                          \
    size_t o = 0;                                                               \
    TFRT_DW3S_VECTORS(k0, k1, edge)                                             \
    for (; o < g->n; o++) tfrt_dw3_channel_scalar(g, b, w, yb, o, col, k0, k1, edge); \
  } while (0)
static void tfrt_dw3_row_scalar(const struct tfrt_dwconv *g, const struct tfrt_dwblock *b,
                                const tfrt_weight *w, float *y, size_t ow, size_t left) {
  _Static_assert(TFRT_DWCONV_P == 4, "the scalar block is written for 4 positions");
  for (size_t ox = 0; ox < ow; ox += 4) {
    const size_t first = ox + 4 <= ow ? ox : ow - 4;
    const ptrdiff_t col = (ptrdiff_t)first - (ptrdiff_t)left;
    /* the block's input columns over the image: k0 <= k < k1 */
    const ptrdiff_t k0 = col < 0 ? -col : 0, k1 = (ptrdiff_t)g->iw - col;
    float *yb = y + first * g->n;
    /* constant column ranges for the blocks inside, and at the edges of a
     * padding of 1 ('same' 3x3, ZeroPadding2D(1)): their checks fold away */
    if (k0 == 0 && k1 >= 6)
      TFRT_DW3S_CHANNELS(0, 6, 0);
    else if (k0 == 1 && k1 >= 6)
      TFRT_DW3S_CHANNELS(1, 6, 1);
    else if (k0 == 0 && k1 == 5)
      TFRT_DW3S_CHANNELS(0, 5, 1);
    else if (k0 == 1 && k1 == 5)
      TFRT_DW3S_CHANNELS(1, 5, 1);
    else
      TFRT_DW3S_CHANNELS(k0, k1, 1);
  }
}
#undef TFRT_DW3S_CHANNELS
#undef TFRT_DW3S_VECTORS

#if defined(TFRT_DWCONV16_FN) && defined(TFRT_ARM_HALF_CVT) && !defined(__ARM_FEATURE_MVE)
/* The same block on f16 images (--intermediates=f16; runtime_shim/
 * tfrt_half.h): two channels at a time, so that one 32-bit load brings a
 * column's two halves and VCVTB/VCVTT make them f32 (as cheap as two
 * VLDRs), and one 32-bit store takes a position's two outputs. */
#define TFRT_DW3H_X(k) tfrt_h2f2(tfrt_h_word(xi + ((k) + col) * (ptrdiff_t)c))
#define TFRT_DW3H_MAC(a, w, x) ((a).lo += (w).lo * (x).lo, (a).hi += (w).hi * (x).hi)
static inline __attribute__((always_inline)) struct tfrt_f2 tfrt_dw3h_clamp(struct tfrt_f2 a,
                                                                             float lo,
                                                                             float hi) {
  if (lo >= -FLT_MAX) a.lo = a.lo < lo ? lo : a.lo, a.hi = a.hi < lo ? lo : a.hi;
  if (hi <= FLT_MAX) a.lo = a.lo > hi ? hi : a.lo, a.hi = a.hi > hi ? hi : a.hi;
  return a;
}
static inline __attribute__((always_inline)) void tfrt_dw3h_channels(
    const struct tfrt_dwconv *g, const uint16_t *xrow, size_t i0, size_t i1,
    const tfrt_weight *w, uint16_t *y, size_t o, ptrdiff_t col, ptrdiff_t k0, ptrdiff_t k1,
    const int edge) {
  const size_t n = g->n, c = g->c, row = g->dh * g->iw * c;
  const struct tfrt_f2 bias = {g->post[TFRT_POST_BIAS + o],
                               g->post[TFRT_POST_BIAS + 1 + o]}; /* added at the end */
  struct tfrt_f2 a0 = {0.0f, 0.0f}, a1 = a0, a2 = a0, a3 = a0;
  const uint16_t *xi = xrow + o;
  const tfrt_weight *wi = w + i0 * 3 * n + o;
  for (size_t i = i0; i < i1; i++, xi += row, wi += 3 * n) {
    const struct tfrt_f2 w0 = {TFRT_W(wi[0]), TFRT_W(wi[1])};
    const struct tfrt_f2 w1 = {TFRT_W(wi[n]), TFRT_W(wi[n + 1])};
    const struct tfrt_f2 w2 = {TFRT_W(wi[2 * n]), TFRT_W(wi[2 * n + 1])};
    TFRT_DW3_ROW_TAPS(struct tfrt_f2, TFRT_DW3H_X, TFRT_DW3H_MAC)
  }
  a0.lo += bias.lo, a0.hi += bias.hi, a1.lo += bias.lo, a1.hi += bias.hi;
  a2.lo += bias.lo, a2.hi += bias.hi, a3.lo += bias.lo, a3.hi += bias.hi;
  const float lo = g->post[0], hi = g->post[1];
  const int act = g->act;
  a0 = tfrt_dw3h_clamp(a0, lo, hi), a1 = tfrt_dw3h_clamp(a1, lo, hi);
  a2 = tfrt_dw3h_clamp(a2, lo, hi), a3 = tfrt_dw3h_clamp(a3, lo, hi);
  /* before the rounding to halves, which this block does; a call (inlined
   * into each variant of this block and of the f16 kernels, the activation
   * took a Cortex-M4 DS-CNN's int8 whole window from 71.0 to 82.8 KB of
   * flash, as calls to 74.3) */
  if (act) {
    float v[8] = {a0.lo, a0.hi, a1.lo, a1.hi, a2.lo, a2.hi, a3.lo, a3.hi};
    tfrt_act_pass(act, v, 8);
    a0.lo = v[0], a0.hi = v[1], a1.lo = v[2], a1.hi = v[3];
    a2.lo = v[4], a2.hi = v[5], a3.lo = v[6], a3.hi = v[7];
  }
  tfrt_h_put_word(y + o, tfrt_f2h2(a0.lo, a0.hi));
  tfrt_h_put_word(y + n + o, tfrt_f2h2(a1.lo, a1.hi));
  tfrt_h_put_word(y + 2 * n + o, tfrt_f2h2(a2.lo, a2.hi));
  tfrt_h_put_word(y + 3 * n + o, tfrt_f2h2(a3.lo, a3.hi));
}
#undef TFRT_DW3H_MAC
#undef TFRT_DW3H_X
#define TFRT_DW3H_CHANNELS(k0, k1, edge)                                                \
  for (size_t o = 0; o < g->n; o += 2)                                                  \
    tfrt_dw3h_channels(g, xrow, i0, i1, w, yb, o, col, k0, k1, edge)
/* One output row of the f16 image (as tfrt_dw3_row_scalar): xrow is the
 * input row of filter row i0, the rows over the image are i0 .. i1-1. */
static void tfrt_dw3h_row(const struct tfrt_dwconv *g, const uint16_t *xrow, size_t i0,
                          size_t i1, const tfrt_weight *w, uint16_t *y, size_t ow,
                          size_t left) {
  for (size_t ox = 0; ox < ow; ox += 4) {
    const size_t first = ox + 4 <= ow ? ox : ow - 4;
    const ptrdiff_t col = (ptrdiff_t)first - (ptrdiff_t)left;
    const ptrdiff_t k0 = col < 0 ? -col : 0, k1 = (ptrdiff_t)g->iw - col;
    uint16_t *yb = y + first * g->n;
    if (k0 == 0 && k1 >= 6)
      TFRT_DW3H_CHANNELS(0, 6, 0);
    else if (k0 == 1 && k1 >= 6)
      TFRT_DW3H_CHANNELS(1, 6, 1);
    else if (k0 == 0 && k1 == 5)
      TFRT_DW3H_CHANNELS(0, 5, 1);
    else if (k0 == 1 && k1 == 5)
      TFRT_DW3H_CHANNELS(1, 5, 1);
    else
      TFRT_DW3H_CHANNELS(k0, k1, 1);
  }
}
#undef TFRT_DW3H_CHANNELS
/* Whether tfrt_dw3h_row computes this convolution's rows. */
#define TFRT_DW3H_ROWS(kw, sw, dw, n, c, ow, x, y)                                      \
  ((kw) == 3 && (sw) == 1 && (dw) == 1 && (n) == (c) && (c) % 2 == 0 && (ow) >= 4 &&   \
   (uintptr_t)(x) % 4 == 0 && (uintptr_t)(y) % 4 == 0)
#endif
#undef TFRT_DW3_ROW_TAPS
#undef TFRT_DW3S_MAC
#undef TFRT_DW3S_X
#undef TFRT_DW3S_IN
#endif

/* Position q of block b, any depth multiplier, one channel at a time: what
 * the blocks do not take. */
static void tfrt_dwconv_one(const struct tfrt_dwconv *g, const struct tfrt_dwblock *b,
                            const tfrt_weight *w, float *y, size_t q) {
  const size_t mult = g->n / g->c;
  for (size_t o = 0; o < g->n; o++) {
    float acc = 0;
    for (size_t i = b->i0; i < b->i1; i++)
      for (size_t j = 0; j < g->kw; j++)
        TFRT_MAC(acc, TFRT_W(w[(i * g->kw + j) * g->n + o]),
                 tfrt_dw_input(g, b, i, j, q, o / mult, 1)[0]);
    y[q * g->n + o] = tfrt_post(g->post, o, acc);
  }
}

/* The count positions of block b (count = TFRT_DWCONV_P or 1), every
 * channel; edge: some of their taps fall on the padding. */
static inline void tfrt_dwconv_positions(const struct tfrt_dwconv *g,
                                         const struct tfrt_dwblock *b, const tfrt_weight *w,
                                         float *y, size_t count, int edge) {
  const size_t n = g->n;
  if (n != g->c) { /* a depth multiplier: one by one */
    for (size_t q = 0; q < count; q++) tfrt_dwconv_one(g, b, w, y, q);
    return;
  }
/* the block of channels from o for one position, or P at an edge or inside */
#define TFRT_DW_BLOCK(one, at_edge, inside, o)                                  \
  (count == 1 ? one(g, b, w, y, o) : edge ? at_edge(g, b, w, y, o) : inside(g, b, w, y, o))
#ifdef TFRT_AVX512_F32 /* blocks of 64 channels, masked blocks of 32 at the end: any count */
  size_t o = 0;
  for (; n - o >= 64; o += 64)
    TFRT_DW_BLOCK(tfrt_dw512_one64, tfrt_dw512_edge64, tfrt_dw512_inside64, o);
  for (; o < n; o += 32)
    TFRT_DW_BLOCK(tfrt_dw512_one32, tfrt_dw512_edge32, tfrt_dw512_inside32, o);
#else
  enum { L = TFRT_DWCONV_LANES };
  if (n < L) {
    for (size_t q = 0; q < count; q++) tfrt_dwconv_one(g, b, w, y, q);
    return;
  }
  /* the last block of channels overlaps the one before: no scalar tail */
  for (size_t o = 0; o < n; o += L) {
    const size_t o0 = o + L <= n ? o : n - L;
    TFRT_DW_BLOCK(TFRT_DWCONV_ONE, TFRT_DWCONV_EDGE_P, TFRT_DWCONV_INSIDE_P, o0);
  }
#endif
#undef TFRT_DW_BLOCK
}

/* Depthwise: y[oy][ox][o] = sum over (i, j) of W[i][j][o] *
 * x[oy*sh + i*dh - top][ox*sw + j*dw - left][o / (n/c)], one image x of
 * [ih][iw][c], channels last, zero outside it (its padding: top rows above,
 * left columns before; the output's size says how much after); W is the
 * [kh][kw][n] filter as it is (n = c times the depth multiplier). The
 * padding is not in memory: filter rows over it are skipped and columns
 * over it read zeros, so no padded copy of the image is made and filled
 * (a DS-CNN's zero-padded layers spent 7% of a whole window on that). The
 * channels are the vector lanes. */
void TFRT_DWCONV_FN(const tfrt_weight *w, size_t w_offset, const float *x, size_t x_offset,
                    float *y, size_t y_offset, const float *post, size_t n, size_t c, size_t kh,
                    size_t kw, size_t ih, size_t iw, size_t top, size_t left, size_t oh,
                    size_t ow, size_t sh, size_t sw, size_t dh, size_t dw) {
  enum { P = TFRT_DWCONV_P };
  const struct tfrt_dwconv g = {n, c, kh, kw, iw, sw, dh, dw, post, tfrt_act_of(post)};
  /* the positions whose every filter column is over the image: [inner0, inner1) */
  const ptrdiff_t reach = (ptrdiff_t)(iw + left) - (ptrdiff_t)((kw - 1) * dw);
  const size_t past = reach <= 0 ? 0 : (size_t)(reach + (ptrdiff_t)sw - 1) / sw;
  const size_t inner1 = past < ow ? past : ow, start = (left + sw - 1) / sw;
  const size_t inner0 = start < inner1 ? start : inner1;
  w += w_offset;
  struct tfrt_dwblock b = {x + x_offset, 0, 0, 0, 0, x + x_offset, 0, kw};
  y += y_offset;
  for (size_t oy = 0; oy < oh; oy++, y += ow * n) {
    b.row = (ptrdiff_t)(oy * sh) - (ptrdiff_t)top;
    tfrt_tap_range(b.row, ih, kh, dh, &b.i0, &b.i1);
    b.xrow = b.i0 < b.i1 ? tfrt_dw_row(&g, &b, b.i0) : b.x;
    /* Blocks of P, the last one moved back to end at the row's end
     * (positions computed twice are stored twice, the same values: one by
     * one, the 3 positions after 4 blocks of a row of 19 cost as much as
     * the blocks); a row narrower than P one by one. */
    const size_t count = ow >= P ? P : 1;
#ifdef TFRT_AVX512_F32
    if (count == P && kw == 3 && sw == 1 && dw == 1 && n == c) {
      tfrt_dw3_row(&g, b, w, y, ow, left, inner0, inner1);
      continue;
    }
#elif defined(TFRT_AVX2_F32)
    if (count == P && kw == 3 && sw == 1 && dw == 1 && n == c && n >= 16) {
      tfrt_dw3_row_avx2(&g, b, w, y, ow, left, inner0, inner1);
      continue;
    }
#elif defined(__arm__) && defined(__ARM_FP) && !defined(__ARM_NEON)
    if (count == P && kw == 3 && sw == 1 && dw == 1 && n == c) {
      tfrt_dw3_row_scalar(&g, &b, w, y, ow, left);
      continue;
    }
#endif
    for (size_t ox = 0; ox < ow; ox += count) {
      const size_t first = ox + count <= ow ? ox : ow - count;
      b.col = (ptrdiff_t)(first * sw) - (ptrdiff_t)left;
      const int edge = first < inner0 || first + count > inner1;
      b.all0 = 0, b.all1 = kw;
      if (edge) tfrt_dw_inner_columns(&g, &b, count, &b.all0, &b.all1);
      tfrt_dwconv_positions(&g, &b, w, y + first * n, count, edge);
    }
  }
}
