/* tfrt_conv_v4.h - the convolution kernel's block in 4-lane vectors
 * (tfrt_v4: NEON on aarch64, SSE2 on x86-64 without AVX2), f32 weights.
 * Included by tfrt_matvec.c (TFRT_CONV_FN), which defines struct
 * tfrt_conv, TFRT_PATCH_STARTS, TFRT_RUN_START and the epilogue
 * (tfrt_clamp_of, tfrt_clamp_v4).
 *
 * The C blocks keep P x 32 sums (8 x 32 on aarch64: 64 vectors, twice
 * NEON's 32 registers), and gcc spilled them: a load and a store around
 * most multiply-adds. This block takes 16 lanes of a tile (four vectors)
 * for TFRT_CONV_V4_P positions, so that its sums, the row's four weight
 * vectors and the positions' inputs stay in registers: on aarch64 5
 * positions (20 sums, 4 weights, 5 inputs: gcc multiplies by an input's
 * lane, so each position's input holds a register; with 6, two sums
 * spilled), with SSE2 2 (8 sums, 13 or 14 of 16 registers). Counted under
 * qemu-aarch64 (gcc 12 -O3), instructions per multiply-add went from 1.17
 * to 0.40 (3 x 3, 64 -> 64 and 256 -> 256), 1.28 to 0.48 (DS-CNN's 64 ->
 * 64 pointwise), 1.31 to 0.59 (10 x 4 over one channel), 1.58 to 0.55 (24
 * outputs); the loop is 30 instructions for 80 multiply-adds. SSE2 on a
 * Zen 3 class EPYC: 3 x 3, 64 -> 64 at 28 x 28 3-4% faster. Every
 * position's sums are accumulated in the C blocks' order (the same fused
 * or unfused multiply-adds, TFRT_MAC and tfrt_v4_mac), so they give the
 * same bits. */
#if defined(__aarch64__)
#define TFRT_CONV_V4_P 5
#define TFRT_CONV_V4_EACH(M) M(0) M(1) M(2) M(3) M(4)
#else
#define TFRT_CONV_V4_P 2
#define TFRT_CONV_V4_EACH(M) M(0) M(1)
#endif

/* (q: a position) its four sums, zero */
#define TFRT_CONV_V4_ZERO(q) \
  tfrt_v4 c##q##0 = tfrt_v4_set1(0.0f), c##q##1 = c##q##0, c##q##2 = c##q##0, c##q##3 = c##q##0;
/* (q) where its inputs of run r start */
#define TFRT_CONV_V4_INPUTS(q) const float *x##q = at[q] + skip;
/* (q) one input, broadcast, times the row's 16 weights */
#define TFRT_CONV_V4_ROW(q)                    \
  {                                            \
    const tfrt_v4 xv = tfrt_v4_load1(x##q + e); \
    c##q##0 = tfrt_v4_mac(c##q##0, w0, xv);    \
    c##q##1 = tfrt_v4_mac(c##q##1, w1, xv);    \
    c##q##2 = tfrt_v4_mac(c##q##2, w2, xv);    \
    c##q##3 = tfrt_v4_mac(c##q##3, w3, xv);    \
  }
/* (q) its outputs, unless past the last position */
#define TFRT_CONV_V4_STORE(q)                                                      \
  if (p0 + q < positions)                                                          \
    tfrt_conv_v4_store(y + (p0 + q) * g->n + t, post + TFRT_POST_BIAS + t, clamp, lanes, \
                       c##q##0, c##q##1, c##q##2, c##q##3);

/* A position's 16 sums (its first `lanes` of them, at most 16) to y, each
 * with its bias, clamped; the bias is read for all 16 (post is padded to
 * whole tiles). */
static inline void tfrt_conv_v4_store(float *y, const float *bias, struct tfrt_clamp clamp,
                                      size_t lanes, tfrt_v4 s0, tfrt_v4 s1, tfrt_v4 s2,
                                      tfrt_v4 s3) {
  const tfrt_v4 sums[4] = {s0, s1, s2, s3};
  for (size_t v = 0; v < 4 && 4 * v < lanes; v++) {
    const tfrt_v4 out = tfrt_clamp_v4(clamp, tfrt_v4_add(sums[v], tfrt_v4_load(bias + 4 * v)));
    if (lanes >= 4 * v + 4) {
      tfrt_v4_store(y + 4 * v, out);
    } else { /* the layer's last lanes */
      float part[4];
      tfrt_v4_store(part, out);
      for (size_t l = 4 * v; l < lanes; l++) y[l] = part[l - 4 * v];
    }
  }
}

/* Positions p0 .. p0 + TFRT_CONV_V4_P - 1 (the last one repeated past the
 * end, not stored) times lanes t .. t + 15 of the packed tile (w points at
 * lane t; rows g->stride apart; lanes past the layer's n are the
 * tile's zero padding, computed and not stored). */
static inline __attribute__((always_inline)) void tfrt_conv_v4_of(
    const struct tfrt_conv *g, const float *w, const float *x, float *y, size_t p0, size_t t,
    const size_t T) {
  const size_t runs = g->runs, run = g->run, positions = g->positions;
  const float *at[TFRT_CONV_V4_P];
  TFRT_PATCH_STARTS(g, x, p0, TFRT_CONV_V4_P, positions, at);
  TFRT_CONV_V4_EACH(TFRT_CONV_V4_ZERO)
  for (size_t r = 0; r < runs; r++, w += run * T) {
    const size_t skip = TFRT_RUN_START(g, r);
    TFRT_CONV_V4_EACH(TFRT_CONV_V4_INPUTS)
    for (size_t e = 0; e < run; e++) {
      const float *we = w + e * T;
      const tfrt_v4 w0 = tfrt_v4_load(we), w1 = tfrt_v4_load(we + 4),
                    w2 = tfrt_v4_load(we + 8), w3 = tfrt_v4_load(we + 12);
      TFRT_CONV_V4_EACH(TFRT_CONV_V4_ROW)
    }
  }
  const float *post = g->post;
  const struct tfrt_clamp clamp = tfrt_clamp_of(post);
  const size_t lanes = g->n - t < 16 ? g->n - t : 16;
  TFRT_CONV_V4_EACH(TFRT_CONV_V4_STORE)
}

/* The last 8 lanes or fewer of a layer (n = 8, 24, 40, ...: a MobileNet's
 * projections), where the block above computed zeros in half its
 * multiply-adds: TFRT_CONV_V4_8_P positions times 8 lanes (two vectors),
 * summed in the same order. aarch64: 8 positions (16 sums, 2 weight
 * vectors and 8 inputs of the 32 registers); SSE2: 5 (10 sums, 2 weights
 * and a broadcast of 16). Counted under qemu-aarch64 (gcc 12 -O3), a
 * layer's instructions: 48 -> 8 at 56 x 56 0.60x, 96 -> 24 at 28 x 28
 * 0.80x, 120 -> 40 at 14 x 14 0.86x (docs/performance.md). */
#if defined(__aarch64__)
#define TFRT_CONV_V4_8_P 8
#define TFRT_CONV_V4_8_EACH(M) M(0) M(1) M(2) M(3) M(4) M(5) M(6) M(7)
#else
#define TFRT_CONV_V4_8_P 5
#define TFRT_CONV_V4_8_EACH(M) M(0) M(1) M(2) M(3) M(4)
#endif

/* (q: a position) its two sums, zero */
#define TFRT_CONV_V4_8_ZERO(q) tfrt_v4 c##q##0 = tfrt_v4_set1(0.0f), c##q##1 = c##q##0;
/* (q) one input, broadcast, times the row's 8 weights */
#define TFRT_CONV_V4_8_ROW(q)                   \
  {                                             \
    const tfrt_v4 xv = tfrt_v4_load1(x##q + e); \
    c##q##0 = tfrt_v4_mac(c##q##0, w0, xv);     \
    c##q##1 = tfrt_v4_mac(c##q##1, w1, xv);     \
  }
/* (q) its outputs, unless past the last position */
#define TFRT_CONV_V4_8_STORE(q)                                                    \
  if (p0 + q < positions)                                                          \
    tfrt_conv_v4_store(y + (p0 + q) * g->n + t, post + TFRT_POST_BIAS + t, clamp, lanes, \
                       c##q##0, c##q##1, zero, zero);

/* Positions p0 .. p0 + TFRT_CONV_V4_8_P - 1 (the last one repeated past
 * the end, not stored) times lanes t .. n - 1, at most 8, of the packed
 * tile (w points at lane t; rows g->stride apart). */
static inline __attribute__((always_inline)) void tfrt_conv_v4_8_of(
    const struct tfrt_conv *g, const float *w, const float *x, float *y, size_t p0, size_t t,
    const size_t T) {
  const size_t runs = g->runs, run = g->run, positions = g->positions;
  const float *at[TFRT_CONV_V4_8_P];
  TFRT_PATCH_STARTS(g, x, p0, TFRT_CONV_V4_8_P, positions, at);
  TFRT_CONV_V4_8_EACH(TFRT_CONV_V4_8_ZERO)
  for (size_t r = 0; r < runs; r++, w += run * T) {
    const size_t skip = TFRT_RUN_START(g, r);
    TFRT_CONV_V4_8_EACH(TFRT_CONV_V4_INPUTS)
    for (size_t e = 0; e < run; e++) {
      const float *we = w + e * T;
      const tfrt_v4 w0 = tfrt_v4_load(we), w1 = tfrt_v4_load(we + 4);
      TFRT_CONV_V4_8_EACH(TFRT_CONV_V4_8_ROW)
    }
  }
  const float *post = g->post;
  const struct tfrt_clamp clamp = tfrt_clamp_of(post);
  const tfrt_v4 zero = tfrt_v4_set1(0.0f);
  const size_t lanes = g->n - t;
  TFRT_CONV_V4_8_EACH(TFRT_CONV_V4_8_STORE)
}

/* The blocks above for the tile's width (g->stride) as a constant: read
 * from g, the rows' distance took a register and a multiply in the loop,
 * and a layer of 8 outputs (SSE2, 56 x 56) ran 1.9x slower. */
static void tfrt_conv_v4(const struct tfrt_conv *g, const float *w, const float *x, float *y,
                         size_t p0, size_t t) {
  if (g->stride == TFRT_MATVEC_SMALL_TILE)
    tfrt_conv_v4_of(g, w, x, y, p0, t, TFRT_MATVEC_SMALL_TILE);
  else
    tfrt_conv_v4_of(g, w, x, y, p0, t, TFRT_MATVEC_TILE);
}

static void tfrt_conv_v4_8(const struct tfrt_conv *g, const float *w, const float *x, float *y,
                           size_t p0, size_t t) {
  if (g->stride == TFRT_MATVEC_SMALL_TILE)
    tfrt_conv_v4_8_of(g, w, x, y, p0, t, TFRT_MATVEC_SMALL_TILE);
  else
    tfrt_conv_v4_8_of(g, w, x, y, p0, t, TFRT_MATVEC_TILE);
}
