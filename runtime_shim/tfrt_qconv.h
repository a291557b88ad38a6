/* tfrt_qconv.h - the int8 convolution (--weights-dtype=int8), part of the
 * kernels' translation unit: tfrt_matvec.c includes it when compiled with
 * -DTFRT_QCONV_FN=NAME_qconv_int8, after the int8 matvec's helpers and the
 * convolutions' epilogue (tfrt_post), which it uses.
 *
 * The scheme of XNNPACK's dynamically quantized convolution and TFLite's
 * hybrid one: W is int8 with one scale per output channel (symmetric, at
 * build time); the image is quantized once per call, symmetric, with one
 * scale (s_x = max|x| / 127) into the scratch buffer xq, which the dispatch
 * passes (IREE allocates it with the step's other temporaries); the
 * products are summed in int32 over the whole patch and
 *   y[p][o] = post(sum * s_x * s_row[o]),
 * post the f32 convolutions' epilogue (a bias, a ReLU). Quantizing the
 * image, not each patch, costs a pass over the image: a pixel is in up to
 * kh*kw patches, and quantizing patch by patch cost up to 2.5x the
 * multiplications themselves (a 10x4 filter over 28 channels). An image
 * with NaN or Inf gives NaN outputs.
 *
 * A pointwise convolution (kh = kw = 1: its patch is one pixel) quantizes
 * each position's c inputs with a scale of their own instead, TFRT_Q_BLOCK
 * positions at a time into xq (tfrt_q_pointwise): one loud pixel no longer
 * coarsens every other (a MobileNetV3's 1x1 layers: 1.8x the error of
 * LiteRT's, whose XNNPACK quantizes them by pixel too), the scratch is
 * TFRT_Q_BLOCK pixels instead of the image, and NaN or Inf in a pixel
 * gives NaN outputs at its position only (TensorFlow's).
 *
 * The patch of an output position is `runs` runs of contiguous inputs (a
 * filter row, kw*c, when dw == 1; else one tap's c channels). Each run is
 * read as run4 = run rounded up to 4 bytes, the groups of 4 that dot-product
 * instructions take; the bytes past a run's end are whatever follows it
 * (the next pixel, or the scratch's zeroed slack) and meet zero weights.
 * w is one blob: the row scales (f32), the rows' weight sums (int32: the
 * offset's share on AVX-512 VNNI, below), both for tiles * 32 rows, then
 * the weights as [tiles][runs * run4 / 4][32][4] (compiler/lower/
 * int8_weights.py pack_qconv). x is the padded image [ih][iw][c] (a pad op
 * before the dispatch), y is [oh][ow][n]. y may be x (a pointwise layer's
 * result in its image's buffer, microkernel.py): x is read once, into xq,
 * before anything is written. */
void TFRT_QCONV_FN(const int8_t *w, size_t w_offset, const float *x, size_t x_offset,
                   float *y, size_t y_offset, const float *post, int8_t *xq, size_t xq_offset,
                   size_t n, size_t c, size_t kh, size_t kw, size_t ih, size_t iw, size_t oh,
                   size_t ow, size_t sh, size_t sw, size_t dh, size_t dw);

/* Bytes of xq past the image, zeroed: the last run's rounding up to 4. */
#define TFRT_Q_SLACK 16
/* Positions a pointwise call quantizes at a time: whole AVX-512 blocks of
 * 8 and of 6 (int8_weights.py QCONV_BLOCK; 8 left a part block of 2 after
 * each block of 6 of a layer of two tiles, which costs a whole block). */
#define TFRT_Q_BLOCK 24

struct tfrt_qconv {
  size_t c, kw, iw, ow, sh, sw, dh, dw, runs, run, run4;
};

/* Where run r of a patch starts, from its first input. */
static size_t tfrt_q_run(const struct tfrt_qconv *g, size_t r) { return TFRT_RUN_START(g, r); }

/* Where the patch of output position p starts: p's pixel where positions
 * are the image's pixels (a 1x1 layer of stride 1), without the divisions
 * of TFRT_PATCH_START (perf: the block function computing them, 6% of a
 * DS-CNN's int8 inference, most of it those). */
static size_t tfrt_q_patch(const struct tfrt_qconv *g, size_t p) {
  if (g->iw == g->ow && g->sw == 1 && g->sh == 1) return p * g->c;
  return TFRT_PATCH_START(g, p);
}

/* Where a block's sums go: rows positions' outputs from y (n apart), lanes
 * from lane t of the tile whose scales and weight sums start at t; the
 * image's scale of the block's position q is xs[q * xs_step] (xs_step 0:
 * the image's one scale; 1: a pointwise call's scale per position). */
#include <float.h>

struct tfrt_q_out {
  float *y;
  size_t n, rows, t, lanes;
  const float *xs;
  size_t xs_step;
  const float *row_scale, *post;
  const int32_t *wsum;
};

/* The image's scale of position q of the block at o. */
static inline float tfrt_q_xs(const struct tfrt_q_out *o, size_t q) {
  return o->xs[q * o->xs_step];
}

#ifdef TFRT_I8_AVX512
/* Row q's group of 4 inputs (unsigned: the image is stored offset by 128
 * on this path), broadcast from memory, times the tile's two weight
 * vectors. One asm statement: with intrinsics gcc copied every sum to
 * another register (or the stack) around each vpdpbusd, which overwrites
 * its sum: 1.5x slower. */
#ifdef TFRT_INTRINSICS_ONLY
#define TFRT_Q_ROW512(q)                                                                  \
  tmp = _mm512_set1_epi32(TFRT_I32_AT(p##q + e));                                         \
  a##q##0 = _mm512_dpbusd_epi32(a##q##0, tmp, w0);                                        \
  a##q##1 = _mm512_dpbusd_epi32(a##q##1, tmp, w1);
#else
#define TFRT_Q_ROW512(q)                                                                  \
  __asm__("vpbroadcastd %[x], %[t]\n\t"                                                    \
          "vpdpbusd %[wa], %[t], %[a0]\n\t"                                                \
          "vpdpbusd %[wb], %[t], %[a1]"                                                     \
          : [a0] "+v"(a##q##0), [a1] "+v"(a##q##1), [t] "=&v"(tmp)                        \
          : [x] "m"(*(const int32_t *)(const void *)(p##q + e)), [wa] "v"(w0),             \
            [wb] "v"(w1));
#endif
#define TFRT_Q_STORE512(q) \
  if (q < o->rows) tfrt_q_store512(o, q, a##q##0, a##q##1);

/* Position q's 32 sums of offset inputs into y: less the offset's share
 * (128 times the row's weight sum), times the scales, the epilogue. */
static inline void tfrt_q_store512(const struct tfrt_q_out *o, size_t q, __m512i a0,
                                   __m512i a1) {
  const __m512 xs = _mm512_set1_ps(tfrt_q_xs(o, q));
  const __m512i sums[2] = {a0, a1};
  float *yq = o->y + q * o->n + o->t;
  for (size_t h = 0; h < 2; h++) {
    const size_t lanes = o->lanes > 16 * h ? o->lanes - 16 * h : 0;
    const __mmask16 mask = lanes >= 16 ? 0xFFFF : (__mmask16)((1u << lanes) - 1);
    const __m512i offset = _mm512_slli_epi32(
        _mm512_loadu_si512((const void *)(o->wsum + o->t + 16 * h)), 7);
    __m512 v = _mm512_cvtepi32_ps(_mm512_sub_epi32(sums[h], offset));
    v = _mm512_mul_ps(_mm512_mul_ps(v, xs), _mm512_loadu_ps(o->row_scale + o->t + 16 * h));
    v = _mm512_add_ps(v, _mm512_loadu_ps(o->post + TFRT_POST_BIAS + o->t + 16 * h));
    /* (max and min return v where it is NaN) */
    v = _mm512_min_ps(_mm512_set1_ps(o->post[1]), _mm512_max_ps(_mm512_set1_ps(o->post[0]), v));
    _mm512_mask_storeu_ps(yq + 16 * h, mask, v);
  }
}

/* 8 positions x a 32-lane tile (AVX-512 VNNI), stored into y: the matmul's
 * trick (tfrt_i8_tile4_avx512_32), inputs offset to unsigned, weights as
 * they are; the offset's share is the blob's weight sums. 16 sums, 2
 * weight vectors and a broadcast in 32 registers (not inlined: inlined into
 * the kernel, gcc spilled the sums). */
__attribute__((noinline)) static void tfrt_q_block_avx512(const int8_t *wt,
                                                         const int8_t *const at[8],
                                                         const struct tfrt_qconv *g,
                                                         const struct tfrt_q_out *o) {
  const __m512i zero = _mm512_setzero_si512();
  __m512i a00 = zero, a01 = zero, a10 = zero, a11 = zero, a20 = zero, a21 = zero, a30 = zero,
          a31 = zero, a40 = zero, a41 = zero, a50 = zero, a51 = zero, a60 = zero, a61 = zero,
          a70 = zero, a71 = zero, tmp;
  for (size_t r = 0; r < g->runs; r++) {
    const size_t skip = tfrt_q_run(g, r);
    const int8_t *p0 = at[0] + skip, *p1 = at[1] + skip, *p2 = at[2] + skip,
                 *p3 = at[3] + skip, *p4 = at[4] + skip, *p5 = at[5] + skip,
                 *p6 = at[6] + skip, *p7 = at[7] + skip;
    for (size_t e = 0; e < g->run4; e += 4, wt += 128) {
      const __m512i w0 = _mm512_loadu_si512((const void *)wt),
                    w1 = _mm512_loadu_si512((const void *)(wt + 64));
      TFRT_Q_ROW512(0) TFRT_Q_ROW512(1) TFRT_Q_ROW512(2) TFRT_Q_ROW512(3)
      TFRT_Q_ROW512(4) TFRT_Q_ROW512(5) TFRT_Q_ROW512(6) TFRT_Q_ROW512(7)
    }
  }
  TFRT_Q_STORE512(0) TFRT_Q_STORE512(1) TFRT_Q_STORE512(2) TFRT_Q_STORE512(3)
  TFRT_Q_STORE512(4) TFRT_Q_STORE512(5) TFRT_Q_STORE512(6) TFRT_Q_STORE512(7)
}
/* Row q's group of 4 inputs times four weight vectors: two tiles. */
#ifdef TFRT_INTRINSICS_ONLY
#define TFRT_Q_ROW512_WIDE(q)                                                             \
  tmp = _mm512_set1_epi32(TFRT_I32_AT(p##q + e));                                         \
  a##q##0 = _mm512_dpbusd_epi32(a##q##0, tmp, w0);                                        \
  a##q##1 = _mm512_dpbusd_epi32(a##q##1, tmp, w1);                                        \
  a##q##2 = _mm512_dpbusd_epi32(a##q##2, tmp, w2);                                        \
  a##q##3 = _mm512_dpbusd_epi32(a##q##3, tmp, w3);
#else
#define TFRT_Q_ROW512_WIDE(q)                                                             \
  __asm__("vpbroadcastd %[x], %[t]\n\t"                                                    \
          "vpdpbusd %[wa], %[t], %[a0]\n\t"                                                \
          "vpdpbusd %[wb], %[t], %[a1]\n\t"                                                \
          "vpdpbusd %[wc], %[t], %[a2]\n\t"                                                \
          "vpdpbusd %[wd], %[t], %[a3]"                                                     \
          : [a0] "+v"(a##q##0), [a1] "+v"(a##q##1), [a2] "+v"(a##q##2), [a3] "+v"(a##q##3), \
            [t] "=&v"(tmp)                                                                \
          : [x] "m"(*(const int32_t *)(const void *)(p##q + e)), [wa] "v"(w0),             \
            [wb] "v"(w1), [wc] "v"(w2), [wd] "v"(w3));
#endif
#define TFRT_Q_STORE512_WIDE(q)                       \
  if (q < o->rows) {                                  \
    tfrt_q_store512(o, q, a##q##0, a##q##1);          \
    tfrt_q_store512(&next, q, a##q##2, a##q##3);      \
  }

/* 6 positions x two tiles (64 lanes; the weights of the second tile are
 * k4 * 32 bytes after the first's): 24 sums, 4 weight vectors and a
 * broadcast, so a broadcast serves 4 vpdpbusd instead of 2. */
__attribute__((noinline)) static void tfrt_q_block_avx512_wide(const int8_t *wt, size_t k4,
                                                              const int8_t *const at[8],
                                                              const struct tfrt_qconv *g,
                                                              const struct tfrt_q_out *o) {
  const __m512i zero = _mm512_setzero_si512();
  __m512i a00 = zero, a01 = zero, a02 = zero, a03 = zero, a10 = zero, a11 = zero, a12 = zero,
          a13 = zero, a20 = zero, a21 = zero, a22 = zero, a23 = zero, a30 = zero, a31 = zero,
          a32 = zero, a33 = zero, a40 = zero, a41 = zero, a42 = zero, a43 = zero, a50 = zero,
          a51 = zero, a52 = zero, a53 = zero, tmp;
  const int8_t *wu = wt + k4 * TFRT_MATVEC_TILE;
  for (size_t r = 0; r < g->runs; r++) {
    const size_t skip = tfrt_q_run(g, r);
    const int8_t *p0 = at[0] + skip, *p1 = at[1] + skip, *p2 = at[2] + skip,
                 *p3 = at[3] + skip, *p4 = at[4] + skip, *p5 = at[5] + skip;
    for (size_t e = 0; e < g->run4; e += 4, wt += 128, wu += 128) {
      const __m512i w0 = _mm512_loadu_si512((const void *)wt),
                    w1 = _mm512_loadu_si512((const void *)(wt + 64)),
                    w2 = _mm512_loadu_si512((const void *)wu),
                    w3 = _mm512_loadu_si512((const void *)(wu + 64));
      TFRT_Q_ROW512_WIDE(0) TFRT_Q_ROW512_WIDE(1) TFRT_Q_ROW512_WIDE(2)
      TFRT_Q_ROW512_WIDE(3) TFRT_Q_ROW512_WIDE(4) TFRT_Q_ROW512_WIDE(5)
    }
  }
  struct tfrt_q_out next = *o;
  next.t += TFRT_MATVEC_TILE;
  next.lanes = o->lanes - TFRT_MATVEC_TILE;
  TFRT_Q_STORE512_WIDE(0) TFRT_Q_STORE512_WIDE(1) TFRT_Q_STORE512_WIDE(2)
  TFRT_Q_STORE512_WIDE(3) TFRT_Q_STORE512_WIDE(4) TFRT_Q_STORE512_WIDE(5)
}

/* Positions first .. end-1 (their outputs from o.y on), in blocks of 8 (of
 * 6 where two tiles go together), times every tile; o: the outputs' scales
 * and epilogue. */
static void tfrt_q_blocks_avx512(const int8_t *wq, size_t k4, const int8_t *xq,
                                 const struct tfrt_qconv *g, size_t first, size_t end,
                                 struct tfrt_q_out o) {
  const size_t n = o.n, block = n > TFRT_MATVEC_TILE ? 6 : 8;
  float *y = o.y;
  const float *xs = o.xs;
  for (size_t p0 = first; p0 < end; p0 += block) {
    const int8_t *at[8];
    o.rows = end - p0 < block ? end - p0 : block;
    for (size_t q = 0; q < 8; q++)  /* (a part block repeats its last position) */
      at[q] = xq + tfrt_q_patch(g, p0 + (q < o.rows ? q : o.rows - 1));
    o.y = y + (p0 - first) * n;
    o.xs = xs + (p0 - first) * o.xs_step;
    for (o.t = 0; o.t < n; o.t += TFRT_MATVEC_TILE) {
      o.lanes = n - o.t; /* (the blocks store at most their own lanes) */
      if (o.lanes > TFRT_MATVEC_TILE) {
        tfrt_q_block_avx512_wide(wq + o.t * k4, k4, at, g, &o);
        o.t += TFRT_MATVEC_TILE;
      } else {
        tfrt_q_block_avx512(wq + o.t * k4, at, g, &o);
      }
    }
  }
}
#define TFRT_Q_OFFSET 0x80 /* the image's bytes are unsigned, q + 128 */
#else
#define TFRT_Q_OFFSET 0
#endif

/* y[l] = the epilogue of sums[l] (the block's position q) times the
 * scales, lanes outputs from output t: tfrt_post's bias and clamp, its
 * comparisons only on the sides that have a bound (the same values: a
 * comparison with an infinite bound never changes one; on a Cortex-M4 each
 * costs a VCMP, a VMRS and a conditional VMOV). */
TFRT_UNUSED
static void tfrt_q_finish(const struct tfrt_q_out *o, size_t q, size_t t, size_t lanes,
                          const float *sums, float *y) {
  const float lo = o->post[0], hi = o->post[1], x_scale = tfrt_q_xs(o, q);
  const int lower = lo >= -FLT_MAX, upper = hi <= FLT_MAX;
  for (size_t l = 0; l < lanes; l++) {
    float v = sums[l] * x_scale * o->row_scale[t + l] + o->post[TFRT_POST_BIAS + t + l];
    if (lower) v = v < lo ? lo : v;
    if (upper) v = v > hi ? hi : v;
    y[l] = v;
  }
}

/* One position (its patch at `at`; its outputs at o->y) times every tile,
 * with the int8 matvec's tile (the other ISAs): the patch's runs gathered
 * into a contiguous row a chunk at a time, once for all the tiles; a
 * tile's int32 sums (as f32, exact below 2^24: the DSP's sums without
 * blocks, elsewhere the tile's with block scales of 1) added up over the
 * chunks in y, then scaled and the epilogue applied. */
TFRT_UNUSED
static void tfrt_q_position(const int8_t *wq, size_t k4, const int8_t *at,
                            const struct tfrt_qconv *g, const struct tfrt_q_out *o) {
  int8_t row[TFRT_I8_CHUNK];
  float out[TFRT_MATVEC_TILE];
#ifndef TFRT_I8_SUMS_32 /* the tile with block scales of 1 */
  float ones[TFRT_I8_CHUNK / TFRT_I8_BLOCK];
  for (size_t b = 0; b < TFRT_I8_CHUNK / TFRT_I8_BLOCK; b++) ones[b] = 1.0f;
#define TFRT_I8_SUMS_32(wt, xq, groups, out) TFRT_I8_TILE_32(wt, xq, ones, groups, out)
#endif
  for (size_t k0 = 0; k0 < k4; k0 += TFRT_I8_CHUNK) {
    const size_t chunk = k4 - k0 < TFRT_I8_CHUNK ? k4 - k0 : TFRT_I8_CHUNK;
    const int last = k0 + chunk == k4;
    for (size_t done = 0; done < chunk;) {
      const size_t r = (k0 + done) / g->run4, e = (k0 + done) % g->run4;
      const size_t len = g->run4 - e < chunk - done ? g->run4 - e : chunk - done;
      __builtin_memcpy(row + done, at + tfrt_q_run(g, r) + e, len);
      done += len;
    }
    for (size_t t = 0; t < o->n; t += TFRT_MATVEC_TILE) {
      TFRT_I8_SUMS_32(wq + t * k4 + k0 * TFRT_MATVEC_TILE, row, chunk / 4, out);
      const size_t lanes = o->n - t < TFRT_MATVEC_TILE ? o->n - t : TFRT_MATVEC_TILE;
      float *y = o->y + t;
      if (k0)
        for (size_t l = 0; l < lanes; l++) out[l] += y[l];
      if (last)
        tfrt_q_finish(o, 0, t, lanes, out, y);
      else
        for (size_t l = 0; l < lanes; l++) y[l] = out[l];
    }
  }
}

#ifdef TFRT_I8_SUMS2_32
/* A tile's sums for two positions (widened: a chunk of both patches) added
 * to what the chunks before left in y (k0 > 0), or given the epilogue
 * (last). Not inlined: its sums' 256 bytes are on the stack only where a
 * tile is part full or a patch takes chunks. */
TFRT_UNUSED __attribute__((noinline))
static void tfrt_q_pair_tile(const int8_t *wt, const uint32_t *widened, size_t groups,
                             const struct tfrt_q_out *o, size_t t, size_t k0, int last) {
  float out[2][TFRT_MATVEC_TILE];
  TFRT_I8_SUMS2_32(wt, widened, groups, out[0], out[1]);
  const size_t lanes = o->n - t < TFRT_MATVEC_TILE ? o->n - t : TFRT_MATVEC_TILE;
  for (size_t q = 0; q < 2; q++) {
    float *y = o->y + q * o->n + t;
    if (k0)
      for (size_t l = 0; l < lanes; l++) out[q][l] += y[l];
    if (last)
      tfrt_q_finish(o, q, t, lanes, out[q], y);
    else
      for (size_t l = 0; l < lanes; l++) y[l] = out[q][l];
  }
}

/* Two positions (patches at at_a and at_b; outputs at o->y and o->y + n)
 * times every tile with the DSP's pair kernel: each chunk of the two
 * patches gathered and widened at once, group by group (a run is a whole
 * number of groups, padded with zero weights), then as tfrt_q_position.
 * The widened chunk is as long as the patch needs, at most a chunk (a
 * DS-CNN's 64-input patches: 256 bytes of stack, not 512); a full tile of
 * a one-chunk patch is summed straight into its outputs. */
TFRT_UNUSED
static void tfrt_q_pair(const int8_t *wq, size_t k4, const int8_t *at_a, const int8_t *at_b,
                        const struct tfrt_qconv *g, const struct tfrt_q_out *o) {
  uint32_t widened[k4 < TFRT_I8_CHUNK ? k4 : TFRT_I8_CHUNK]; /* per group: A's pair, B's */
  for (size_t k0 = 0; k0 < k4; k0 += TFRT_I8_CHUNK) {
    const size_t chunk = k4 - k0 < TFRT_I8_CHUNK ? k4 - k0 : TFRT_I8_CHUNK;
    const int last = k0 + chunk == k4;
    for (size_t done = 0; done < chunk; done += 4) {
      const size_t r = (k0 + done) / g->run4, e = (k0 + done) % g->run4;
      const size_t at = tfrt_q_run(g, r) + e;
      tfrt_i8_widen_pair(tfrt_word(at_a + at), tfrt_word(at_b + at), widened + done);
    }
    for (size_t t = 0; t < o->n; t += TFRT_MATVEC_TILE) {
      const int8_t *wt = wq + t * k4 + k0 * TFRT_MATVEC_TILE;
      if (k0 == 0 && last && o->n - t >= TFRT_MATVEC_TILE) {
        float *ya = o->y + t, *yb = o->y + o->n + t;
        TFRT_I8_SUMS2_32(wt, widened, chunk / 4, ya, yb);
        tfrt_q_finish(o, 0, t, TFRT_MATVEC_TILE, ya, ya);
        tfrt_q_finish(o, 1, t, TFRT_MATVEC_TILE, yb, yb);
      } else {
        tfrt_q_pair_tile(wt, widened, chunk / 4, o, t, k0, last);
      }
    }
  }
}
#endif

/* Output positions first .. end-1 (their outputs from o.y on). Inlined in
 * each caller: a frame of its own on top of tfrt_q_pair's cost a
 * Cortex-M4 DS-CNN 0.3 KB more stack. */
static inline __attribute__((always_inline)) void tfrt_q_range(
    const int8_t *wq, size_t k4, const int8_t *xq, const struct tfrt_qconv *g, size_t first,
    size_t end, struct tfrt_q_out o) {
#ifdef TFRT_I8_AVX512
  tfrt_q_blocks_avx512(wq, k4, xq, g, first, end, o);
#else
  size_t p = first;
#ifdef TFRT_I8_SUMS2_32 /* two positions at a time (DSP) */
  for (; p + 2 <= end; p += 2, o.y += 2 * o.n, o.xs += 2 * o.xs_step)
    tfrt_q_pair(wq, k4, xq + tfrt_q_patch(g, p), xq + tfrt_q_patch(g, p + 1), g, &o);
#endif
  for (; p < end; p++, o.y += o.n, o.xs += o.xs_step)
    tfrt_q_position(wq, k4, xq + tfrt_q_patch(g, p), g, &o);
#endif
}

/* round(v), half away from zero, as the int8 byte the kernel reads. */
static inline int8_t tfrt_q_byte(float v) {
  return (int8_t)((int32_t)(v + (v < 0 ? -0.5f : 0.5f)) ^ TFRT_Q_OFFSET);
}

/* xq = round(x / s_x), half away from zero, and the slack zeroed; returns
 * s_x (NaN if x has NaN or Inf). */
static float tfrt_q_image(const float *x, size_t size, int8_t *xq) {
  const float top = tfrt_i8_absmax(x, size);
  if (top != top) return top; /* (NaN has no int8 value) */
  const float inv = top > 0 ? 127.0f / top : 0.0f;
  for (size_t i = 0; i < size; i++) xq[i] = tfrt_q_byte(x[i] * inv);
  for (size_t i = 0; i < TFRT_Q_SLACK; i++) xq[size + i] = 0;
  return top / 127.0f;
}

/* xq[i] = tfrt_q_byte(x[i] * inv) for n inputs, 16 at a time in a loop of
 * fixed length that the compiler vectorizes whole (a pixel is 16 to a few
 * hundred channels; gcc's vectorization of a plain loop took 64 at a time
 * on AVX-512 and left shorter pixels, a MobileNet's, to its scalar
 * remainder: 2x its int8 inference). */
static inline void tfrt_q_scaled(const float *restrict x, size_t n, float inv,
                                 int8_t *restrict xq) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (size_t j = 0; j < 16; j++) xq[i + j] = tfrt_q_byte(x[i + j] * inv);
  for (; i + 4 <= n; i += 4)
    for (size_t j = 0; j < 4; j++) xq[i + j] = tfrt_q_byte(x[i + j] * inv);
  for (; i < n; i++) xq[i] = tfrt_q_byte(x[i] * inv);
}

/* A pixel's c inputs into xq as round(x / s), s = max|x| / 127 of them,
 * zeros to c4 (they meet zero weights); returns s (NaN, and xq zeros, if
 * the pixel has NaN or Inf). */
#ifdef TFRT_I8_AVX512
/* 16 inputs x * inv as bytes, the same as tfrt_q_byte's: +-0.5 by the
 * sign (-0 too: it still truncates to 0), truncation, the offset. */
static inline __m128i tfrt_q_bytes16(__m512 x, __m512 inv) {
  const __m512 v = _mm512_mul_ps(x, inv);
  const __m512 half = _mm512_castsi512_ps(_mm512_or_si512(
      _mm512_and_si512(_mm512_castps_si512(v), _mm512_set1_epi32((int)0x80000000u)),
      _mm512_castps_si512(_mm512_set1_ps(0.5f))));
  return _mm512_cvtepi32_epi8(_mm512_xor_si512(_mm512_cvttps_epi32(_mm512_add_ps(v, half)),
                                               _mm512_set1_epi32(TFRT_Q_OFFSET)));
}

/* 16 inputs a vector, the last ones masked: a pixel is often 16 to 100
 * channels, where the compiler's loops spent most of their time in their
 * scalar remainders; the same bytes as the portable loop. */
static float tfrt_q_pixel(const float *restrict x, size_t c, size_t c4, int8_t *restrict xq) {
  const size_t whole = c / 16 * 16; /* unmasked; the rest masked */
  const __mmask16 rest = (__mmask16)((1u << (c - whole)) - 1);
  const __m512i magnitude = _mm512_set1_epi32(0x7FFFFFFF);
  __m512i top_bits = _mm512_and_si512(_mm512_maskz_loadu_epi32(rest, x + whole), magnitude);
  for (size_t i = 0; i < whole; i += 16)
    top_bits = _mm512_max_epu32(top_bits, _mm512_and_si512(_mm512_loadu_si512(x + i), magnitude));
  const uint32_t bits = _mm512_reduce_max_epu32(top_bits);
  float top;
  __builtin_memcpy(&top, &bits, sizeof top);
  if (bits >= 0x7F800000u) { /* (NaN and Inf have no int8 value) */
    for (size_t i = 0; i < c4; i++) xq[i] = (int8_t)TFRT_Q_OFFSET;
    return __builtin_nanf("");
  }
  const __m512 inv = _mm512_set1_ps(top > 0 ? 127.0f / top : 0.0f);
  for (size_t i = 0; i < whole; i += 16)
    _mm_storeu_si128((__m128i *)(void *)(xq + i), tfrt_q_bytes16(_mm512_loadu_ps(x + i), inv));
  if (whole < c4) { /* the last inputs and the zeros to c4, through a buffer */
    int8_t part[16];
    _mm_storeu_si128((__m128i *)(void *)part,
                     tfrt_q_bytes16(_mm512_maskz_loadu_ps(rest, x + whole), inv));
    for (size_t k = 0; k < c4 - whole; k++) xq[whole + k] = part[k];
  }
  return top / 127.0f;
}
#else
TFRT_UNUSED
static float tfrt_q_pixel(const float *restrict x, size_t c, size_t c4, int8_t *restrict xq) {
  const float top = tfrt_i8_absmax(x, c);
  if (top == top) tfrt_q_scaled(x, c, top > 0 ? 127.0f / top : 0.0f, xq);
  /* zeros past c, or for all of a pixel with NaN or Inf (no int8 value) */
  for (size_t i = top == top ? c : 0; i < c4; i++) xq[i] = (int8_t)TFRT_Q_OFFSET;
  return top / 127.0f;
}
#endif

/* A call's geometry, its packed weights' parts and its output (from y,
 * the image's scales xs, xs_step apart: tfrt_q_out). */
struct tfrt_q_call {
  struct tfrt_qconv g;
  size_t k4;
  const int8_t *wq;
  struct tfrt_q_out o;
};
static struct tfrt_q_call tfrt_q_call_of(const int8_t *w, float *y, const float *post,
                                          const float *xs, size_t n, size_t c, size_t kh,
                                          size_t kw, size_t iw, size_t ow, size_t sh, size_t sw,
                                          size_t dh, size_t dw) {
  const size_t run = dw == 1 ? kw * c : c, run4 = (run + 3) / 4 * 4;
  const struct tfrt_qconv g = {c,  kw, iw, ow, sh, sw, dh, dw, dw == 1 ? kh : kh * kw,
                               run, run4};
  const size_t tiles = (n + TFRT_MATVEC_TILE - 1) / TFRT_MATVEC_TILE;
  const float *row_scale = (const float *)(const void *)w;
  const int32_t *wsum = (const int32_t *)(const void *)(w + tiles * TFRT_MATVEC_TILE * 4);
  const struct tfrt_q_call call = {g, g.runs * run4, w + tiles * TFRT_MATVEC_TILE * 8,
                                   {y, n, 1, 0, n, xs, 0, row_scale, post, wsum}};
  return call;
}

/* Positions first .. end-1 of a pointwise call (its outputs from
 * call->o.y on), TFRT_Q_BLOCK at a time: their pixels quantized into xq
 * (quantize: tfrt_q_pixel, or its f16 form, from x), each c4 = run4 bytes,
 * their scales after them (word-aligned: in the scratch, not on the stack,
 * which on a Cortex-M4 is as short as the context), then summed as an
 * image of one row of them. In place (y is x) a block's pixels are read
 * before its outputs are written, and each position writes only its own
 * pixel (n == c). */
static inline __attribute__((always_inline)) void tfrt_q_pointwise(
    const struct tfrt_q_call *call, const void *x,
    float (*quantize)(const void *, size_t, size_t, int8_t *), int8_t *xq,
    size_t first, size_t end) {
  const size_t c4 = call->g.run4;
  const struct tfrt_qconv row = {c4, 1, TFRT_Q_BLOCK, TFRT_Q_BLOCK, 1, 1, 1, 1, 1, c4, c4};
  const size_t most = end - first < TFRT_Q_BLOCK ? end - first : TFRT_Q_BLOCK;
  float *scales = (float *)(void *)(((uintptr_t)(xq + most * c4) + 3) & ~(uintptr_t)3);
  struct tfrt_q_out o = call->o;
  o.xs = scales;
  o.xs_step = 1;
  for (size_t p0 = first; p0 < end; p0 += TFRT_Q_BLOCK) {
    const size_t count = end - p0 < TFRT_Q_BLOCK ? end - p0 : TFRT_Q_BLOCK;
    for (size_t q = 0; q < count; q++)
      scales[q] = quantize(x, tfrt_q_patch(&call->g, p0 + q), call->g.c, xq + q * c4);
    o.y = call->o.y + (p0 - first) * call->o.n;
    tfrt_q_range(call->wq, call->k4, xq, &row, 0, count, o);
  }
}

/* tfrt_q_pixel of the f32 pixel at element `at` of x. */
static float tfrt_q_pixel_f32(const void *x, size_t at, size_t c, int8_t *xq) {
  return tfrt_q_pixel((const float *)x + at, c, (c + 3) / 4 * 4, xq);
}

void TFRT_QCONV_FN(const int8_t *w, size_t w_offset, const float *x, size_t x_offset,
                   float *y, size_t y_offset, const float *post, int8_t *xq, size_t xq_offset,
                   size_t n, size_t c, size_t kh, size_t kw, size_t ih, size_t iw, size_t oh,
                   size_t ow, size_t sh, size_t sw, size_t dh, size_t dw) {
  const size_t positions = oh * ow;
  x += x_offset;
  y += y_offset;
  xq += xq_offset;
  if (kh == 1 && kw == 1) {
    const struct tfrt_q_call call =
        tfrt_q_call_of(w + w_offset, y, post, NULL, n, c, 1, 1, iw, ow, sh, sw, dh, dw);
    tfrt_q_pointwise(&call, x, tfrt_q_pixel_f32, xq, 0, positions);
    return;
  }
  const float x_scale = tfrt_q_image(x, ih * iw * c, xq);
  if (x_scale != x_scale) { /* NaN or Inf in x: NaN outputs, never a finite guess */
    for (size_t i = 0; i < positions * n; i++) y[i] = x_scale;
    return;
  }
  const struct tfrt_q_call call =
      tfrt_q_call_of(w + w_offset, y, post, &x_scale, n, c, kh, kw, iw, ow, sh, sw, dh, dw);
  tfrt_q_range(call.wq, call.k4, xq, &call.g, 0, positions, call.o);
}
