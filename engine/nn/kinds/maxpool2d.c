/* MaxPool2d over NCHW planes: square kernel, stride (0 = kernel), implicit
 * -inf padding, floor output size. As PyTorch's CPU kernel: the first
 * maximum in row-major window order wins ties, NaN wins over numbers. The
 * argmax (flat index h*W + w in the plane) is kept as int32 for backward. */
#include "nn/kinds/kinds.h"

#include "numerics/cpu.h"
#include "numerics/half.h"
#include "core/mem.h"
#include "core/threads.h"

#include <math.h>
#include <string.h>

typedef struct pool_geom {
  int64_t h, w, oh, ow;
  int k, stride, pad;
} pool_geom;

typedef struct pool_job {
  pool_geom g;
  const float *x;
  float *y;
  int32_t *argmax; /* NULL when nothing is kept for backward */
  const float *dy;
  float *dx;
  bool avx512; /* the 2x2 stride-2 windows sixteen at a time */
} pool_job;

/* One window, clipped to the plane: PyTorch's rule, v > best || isnan(v),
 * first maximum wins. */
static inline float pool_window_nan(const float *x, int64_t w, int64_t h0, int64_t h1, int64_t w0,
                                    int64_t w1, int32_t *at) {
  float best = -INFINITY;
  int32_t where = (int32_t)(h0 * w + w0);
  for (int64_t h = h0; h < h1; h++) {
    for (int64_t c = w0; c < w1; c++) {
      const float v = x[h * w + c];
      if (v > best || isnan(v)) {
        best = v;
        where = (int32_t)(h * w + c);
      }
    }
  }
  *at = where;
  return best;
}

/* The same window for NaN-free data, where the rule is v > best alone: a
 * select on locals the compiler makes branch-free (comparisons of random
 * data defeat the branch predictor). *nan records whether a NaN was seen,
 * so the caller can redo the plane with the exact rule. */
static inline float pool_window(const float *x, int64_t w, int64_t h0, int64_t h1, int64_t w0,
                                int64_t w1, int32_t *at, int *nan) {
  float best = -INFINITY;
  int32_t where = (int32_t)(h0 * w + w0);
  int seen = 0;
  for (int64_t h = h0; h < h1; h++) {
    for (int64_t c = w0; c < w1; c++) {
      const float v = x[h * w + c];
      const int take = v > best;
      seen |= v != v;
      best = take ? v : best;
      where = take ? (int32_t)(h * w + c) : where;
    }
  }
  *nan |= seen;
  *at = where;
  return best;
}

/* Output plane p; returns whether a NaN was met (with exact = false). */
static int pool_plane(const pool_job *j, int64_t p, bool exact) {
  /* Locals: the int32 argmax stores could otherwise alias the geometry. */
  const int64_t H = j->g.h, W = j->g.w, OH = j->g.oh, OW = j->g.ow;
  const int64_t k = j->g.k, stride = j->g.stride, pad = j->g.pad;
  const float *x = j->x + p * H * W;
  int nan = 0;
  for (int64_t oh = 0; oh < OH; oh++) {
    int64_t h0 = oh * stride - pad, h1 = h0 + k < H ? h0 + k : H;
    h0 = h0 < 0 ? 0 : h0;
    for (int64_t ow = 0; ow < OW; ow++) {
      int64_t w0 = ow * stride - pad, w1 = w0 + k < W ? w0 + k : W;
      w0 = w0 < 0 ? 0 : w0;
      const int64_t o = (p * OH + oh) * OW + ow;
      int32_t at;
      j->y[o] = exact ? pool_window_nan(x, W, h0, h1, w0, w1, &at)
                      : pool_window(x, W, h0, h1, w0, w1, &at, &nan);
      if (j->argmax) j->argmax[o] = at;
    }
  }
  return nan;
}

/* The common 2x2 window without padding (never clipped: floor output
 * size), as two pairs: the first maximum of the top pair, of the bottom
 * pair, then of the two. For numbers that is the first maximum of the four
 * in window order. Selects, not branches: comparisons of random data
 * defeat the branch predictor. *nan records a NaN (or inf - inf), as
 * pool_window does. Returns the flat argmax; *y the maximum. */
static inline int32_t pool_2x2(const float *r0, const float *r1, int32_t at, int32_t w, float *y,
                               int *nan) {
  const float a = r0[0], b = r0[1], d = r1[0], e = r1[1];
  const int top_right = b > a, bottom_right = e > d;
  const float top = top_right ? b : a, bottom = bottom_right ? e : d;
  const int take_bottom = bottom > top;
  const float sum = (a + b) + (d + e);
  *nan |= sum != sum;
  *y = take_bottom ? bottom : top;
  return take_bottom ? at + w + bottom_right : at + top_right;
}

#if defined(__SSE2__)
#include <emmintrin.h>

static inline __m128 select_ps(__m128 mask, __m128 yes, __m128 no) {
  return _mm_or_ps(_mm_and_ps(mask, yes), _mm_andnot_ps(mask, no));
}
static inline __m128i select_epi32(__m128i mask, __m128i yes, __m128i no) {
  return _mm_or_si128(_mm_and_si128(mask, yes), _mm_andnot_si128(mask, no));
}

/* Four windows of stride 2 at once, as pool_2x2 computes each (SSE2 is in
 * every x86-64). A true comparison is the integer -1, so subtracting it
 * moves an index one to the right. A ragged end is done as the last four
 * windows, recomputing some: the same values again. Returns the outputs
 * done: all n, or none if n < 4. */
static int64_t pool_row_2x2_stride2(const float *r0, const float *r1, int32_t at, int32_t w,
                                    float *y, int32_t *argmax, int64_t n, int *nan) {
  const __m128i step = _mm_setr_epi32(0, 2, 4, 6), below = _mm_set1_epi32(w);
  __m128 unordered = _mm_setzero_ps();
  if (n < 4) return 0;
  for (int64_t o = 0; o < n; o += 4) {
    if (o + 4 > n) o = n - 4;
    const __m128 t0 = _mm_loadu_ps(r0 + 2 * o), t1 = _mm_loadu_ps(r0 + 2 * o + 4);
    const __m128 b0 = _mm_loadu_ps(r1 + 2 * o), b1 = _mm_loadu_ps(r1 + 2 * o + 4);
    const __m128 a = _mm_shuffle_ps(t0, t1, _MM_SHUFFLE(2, 0, 2, 0));
    const __m128 b = _mm_shuffle_ps(t0, t1, _MM_SHUFFLE(3, 1, 3, 1));
    const __m128 d = _mm_shuffle_ps(b0, b1, _MM_SHUFFLE(2, 0, 2, 0));
    const __m128 e = _mm_shuffle_ps(b0, b1, _MM_SHUFFLE(3, 1, 3, 1));
    const __m128 top_right = _mm_cmpgt_ps(b, a), bottom_right = _mm_cmpgt_ps(e, d);
    const __m128 top = select_ps(top_right, b, a), bottom = select_ps(bottom_right, e, d);
    const __m128 take_bottom = _mm_cmpgt_ps(bottom, top);
    const __m128 sum = _mm_add_ps(_mm_add_ps(a, b), _mm_add_ps(d, e));
    unordered = _mm_or_ps(unordered, _mm_cmpunord_ps(sum, sum));
    _mm_storeu_ps(y + o, select_ps(take_bottom, bottom, top));
    if (argmax) {
      const __m128i left = _mm_add_epi32(_mm_set1_epi32(at + 2 * (int32_t)o), step);
      const __m128i top_at = _mm_sub_epi32(left, _mm_castps_si128(top_right));
      const __m128i bottom_at = _mm_sub_epi32(_mm_add_epi32(left, below),
                                              _mm_castps_si128(bottom_right));
      _mm_storeu_si128((__m128i *)(argmax + o),
                       select_epi32(_mm_castps_si128(take_bottom), bottom_at, top_at));
    }
  }
  *nan |= _mm_movemask_ps(unordered) != 0;
  return n;
}
#else
static int64_t pool_row_2x2_stride2(const float *r0, const float *r1, int32_t at, int32_t w,
                                    float *y, int32_t *argmax, int64_t n, int *nan) {
  (void)r0, (void)r1, (void)at, (void)w, (void)y, (void)argmax, (void)n, (void)nan;
  return 0;
}
#endif

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define POOL_AVX512 __attribute__((target("avx512f")))

/* Sixteen windows of stride 2 at once, as pool_row_2x2_stride2 does four,
 * and a short row under masks (a 14-output row is one pass, not four).
 * The masked-off lanes load zeros, whose sums are never unordered. */
POOL_AVX512 static void pool_row_2x2_stride2_avx512(const float *r0, const float *r1, int32_t at,
                                                    int32_t w, float *y, int32_t *argmax, int64_t n,
                                                    int *nan) {
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1)), one = _mm512_set1_epi32(1);
  __mmask16 unordered = 0;
  for (int64_t o = 0; o < n; o += 16) {
    const __mmask16 outs = dl_first_lanes16(n - o);
    const __mmask16 lo = dl_first_lanes16(2 * (n - o)), hi = dl_first_lanes16(2 * (n - o) - 16);
    const __m512 t0 = _mm512_maskz_loadu_ps(lo, r0 + 2 * o);
    const __m512 t1 = _mm512_maskz_loadu_ps(hi, r0 + 2 * o + 16);
    const __m512 b0 = _mm512_maskz_loadu_ps(lo, r1 + 2 * o);
    const __m512 b1 = _mm512_maskz_loadu_ps(hi, r1 + 2 * o + 16);
    const __m512 a = _mm512_permutex2var_ps(t0, even, t1), b = _mm512_permutex2var_ps(t0, odd, t1);
    const __m512 d = _mm512_permutex2var_ps(b0, even, b1), e = _mm512_permutex2var_ps(b0, odd, b1);
    const __mmask16 top_right = _mm512_cmp_ps_mask(b, a, _CMP_GT_OQ);
    const __mmask16 bottom_right = _mm512_cmp_ps_mask(e, d, _CMP_GT_OQ);
    const __m512 top = _mm512_mask_blend_ps(top_right, a, b);
    const __m512 bottom = _mm512_mask_blend_ps(bottom_right, d, e);
    const __mmask16 take_bottom = _mm512_cmp_ps_mask(bottom, top, _CMP_GT_OQ);
    const __m512 sum = _mm512_add_ps(_mm512_add_ps(a, b), _mm512_add_ps(d, e));
    unordered |= _mm512_cmp_ps_mask(sum, sum, _CMP_UNORD_Q);
    _mm512_mask_storeu_ps(y + o, outs, _mm512_mask_blend_ps(take_bottom, top, bottom));
    if (argmax) {
      const __m512i left = _mm512_add_epi32(_mm512_set1_epi32(at + 2 * (int32_t)o), even);
      const __m512i top_at = _mm512_mask_add_epi32(left, top_right, left, one);
      const __m512i below = _mm512_add_epi32(left, _mm512_set1_epi32(w));
      const __m512i bottom_at = _mm512_mask_add_epi32(below, bottom_right, below, one);
      _mm512_mask_storeu_epi32(argmax + o, outs,
                               _mm512_mask_blend_epi32(take_bottom, top_at, bottom_at));
    }
  }
  *nan |= unordered != 0;
}

/* dx of one plane whose windows tile it (2x2, stride 2, no padding): each
 * input is in one window at most, so dx is gathered, sixteen inputs of
 * both rows of a window row at a time: dy where the input is its window's
 * argmax, else zero (also the last row and column of an odd plane, in no
 * window). The value is 0 + dy, what the scatter into zeros computes (-0
 * comes out +0). */
POOL_AVX512 static void pool_plane_2x2_backward_avx512(const pool_geom *g, float *dx,
                                                       const float *dy, const int32_t *at) {
  const int64_t H = g->h, W = g->w, OH = g->oh, OW = g->ow;
  const __m512i pairs = _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
  const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const __m512 zero = _mm512_setzero_ps();
  for (int64_t c = 0; c < W; c += 16) {
    const __mmask16 outs = dl_first_lanes16(OW - c / 2 < 8 ? OW - c / 2 : 8);
    const __mmask16 covered = dl_first_lanes16(2 * OW - c), cols = dl_first_lanes16(W - c);
    for (int64_t oh = 0; oh < OH; oh++) {
      const int64_t o = oh * OW + c / 2, top = 2 * oh * W + c;
      const __m512 g2 = _mm512_permutexvar_ps(pairs, _mm512_maskz_loadu_ps(outs, dy + o));
      const __m512i at2 = _mm512_permutexvar_epi32(pairs, _mm512_maskz_loadu_epi32(outs, at + o));
      const __m512i here = _mm512_add_epi32(_mm512_set1_epi32((int32_t)top), lane);
      const __m512i below = _mm512_add_epi32(here, _mm512_set1_epi32((int32_t)W));
      const __mmask16 hit_top = _mm512_mask_cmpeq_epi32_mask(covered, at2, here);
      const __mmask16 hit_below = _mm512_mask_cmpeq_epi32_mask(covered, at2, below);
      _mm512_mask_storeu_ps(dx + top, cols, _mm512_maskz_add_ps(hit_top, zero, g2));
      _mm512_mask_storeu_ps(dx + top + W, cols, _mm512_maskz_add_ps(hit_below, zero, g2));
    }
  }
  if (2 * OH < H) memset(dx + 2 * OH * W, 0, (size_t)((H - 2 * OH) * W) * sizeof *dx);
}
#endif

static int pool_plane_2x2(const pool_job *j, int64_t p) {
  const int64_t W = j->g.w, OH = j->g.oh, OW = j->g.ow, stride = j->g.stride;
  const float *x = j->x + p * j->g.h * W;
  float *y = j->y + p * OH * OW;
  int32_t *argmax = j->argmax ? j->argmax + p * OH * OW : NULL;
  int nan = 0;
  for (int64_t oh = 0; oh < OH; oh++) {
    const float *r0 = x + oh * stride * W, *r1 = r0 + W;
    const int32_t row_at = (int32_t)(oh * stride * W);
    float *yrow = y + oh * OW;
    int32_t *arow = argmax ? argmax + oh * OW : NULL;
    int64_t ow = 0;
#if defined(__x86_64__) && defined(__GNUC__)
    if (stride == 2 && j->avx512) {
      pool_row_2x2_stride2_avx512(r0, r1, row_at, (int32_t)W, yrow, arow, OW, &nan);
      continue;
    }
#endif
    if (stride == 2) ow = pool_row_2x2_stride2(r0, r1, row_at, (int32_t)W, yrow, arow, OW, &nan);
    for (; ow < OW; ow++) {
      const int64_t c = ow * stride;
      const int32_t at = pool_2x2(r0 + c, r1 + c, row_at + (int32_t)c, (int32_t)W, &yrow[ow], &nan);
      if (arow) arow[ow] = at;
    }
  }
  return nan;
}

DL_AVX512_CLONES static void pool_forward_planes(void *ctx, int64_t begin, int64_t end) {
  const pool_job *j = ctx;
  const bool fast = j->g.k == 2 && j->g.pad == 0;
  for (int64_t p = begin; p < end; p++)
    if (fast ? pool_plane_2x2(j, p) : pool_plane(j, p, false)) pool_plane(j, p, true);
}

/* Overlapping windows may share an argmax: their gradients add in output
 * order, within the one thread that owns the plane. Each plane is zeroed
 * here rather than at allocation, so that it is still in cache for the
 * scatter. */
DL_AVX512_CLONES static void pool_backward_planes(void *ctx, int64_t begin, int64_t end) {
  const pool_job *j = ctx;
  const int64_t in_plane = j->g.h * j->g.w, out_plane = j->g.oh * j->g.ow;
  for (int64_t p = begin; p < end; p++) {
    float *dx = j->dx + p * in_plane;
    const float *dy = j->dy + p * out_plane;
    const int32_t *at = j->argmax + p * out_plane;
#if defined(__x86_64__) && defined(__GNUC__)
    if (j->avx512 && j->g.k == 2 && j->g.stride == 2 && j->g.pad == 0) {
      pool_plane_2x2_backward_avx512(&j->g, dx, dy, at);
      continue;
    }
#endif
    memset(dx, 0, (size_t)in_plane * sizeof *dx);
    for (int64_t o = 0; o < out_plane; o++) dx[at[o]] += dy[o];
  }
}

static dl_status pool_geometry(const dl_layer *l, const dl_tensor *x, pool_geom *g) {
  const dl_layer_desc *d = &l->desc;
  g->k = d->kernel;
  g->stride = d->stride > 0 ? d->stride : d->kernel;
  g->pad = d->padding;
  char a[96];
  if (x->dtype != DL_F32 || x->ndim != 4)
    return dl_fail(DL_ERR_INVALID, "input %s: expected [N, C, H, W] float32",
                   dl_tensor_describe(x, a, sizeof a));
  g->h = x->shape[2];
  g->w = x->shape[3];
  if (g->h + 2 * g->pad < g->k || g->w + 2 * g->pad < g->k)
    return dl_fail(DL_ERR_INVALID, "input %s is smaller than kernel %d with padding %d",
                   dl_tensor_describe(x, a, sizeof a), g->k, g->pad);
  if (g->h * g->w > INT32_MAX)
    return dl_fail(DL_ERR_INVALID, "input %s: plane too large for int32 indices",
                   dl_tensor_describe(x, a, sizeof a));
  g->oh = (g->h + 2 * g->pad - g->k) / g->stride + 1;
  g->ow = (g->w + 2 * g->pad - g->k) / g->stride + 1;
  return DL_OK;
}

static int64_t pool_grain(const pool_geom *g) {
  int64_t work = g->oh * g->ow * g->k * g->k;
  return work >= 16384 ? 1 : 16384 / (work + 1) + 1;
}

static dl_status maxpool_forward(dl_layer *l, const dl_ctx *ctx, const dl_tensor *x, dl_tensor *y) {
  pool_job j = {0};
  DL_TRY(pool_geometry(l, x, &j.g));
  const int64_t shape[4] = {x->shape[0], x->shape[1], j.g.oh, j.g.ow};
  DL_TRY(dl_tensor_alloc_uninit(y, DL_F32, 4, shape, "maxpool2d output"));
  dl_tensor_free(&l->saved[0]);
  if (ctx->grad_enabled) {
    dl_status s = dl_tensor_alloc_uninit(&l->saved[0], DL_I32, 4, shape, "maxpool2d argmax");
    if (s != DL_OK) {
      dl_tensor_free(y);
      return s;
    }
    j.argmax = dl_i32(&l->saved[0]);
  }
  j.x = dl_f32(x);
  j.y = dl_f32(y);
  j.avx512 = dl_cpu_has_avx512f();
  dl_parallel_for(shape[0] * shape[1], pool_grain(&j.g), pool_forward_planes, &j);
  dl_round_inplace(dl_f32(y), y->numel, (int)ctx->autocast);
  return DL_OK;
}

static dl_status maxpool_backward(dl_layer *l, const dl_ctx *ctx, const dl_tensor *x,
                                  const dl_tensor *y, const dl_tensor *dy, dl_tensor *dx) {
  (void)y;
  if (!dx) return DL_OK;
  if (dl_tensor_empty(&l->saved[0]) || l->saved[0].numel != dy->numel)
    return dl_fail(DL_ERR_INVALID, "backward without a grad-mode forward (no argmax kept)");
  pool_job j = {0};
  DL_TRY(pool_geometry(l, x, &j.g));
  DL_TRY(dl_tensor_alloc_uninit(dx, DL_F32, 4, x->shape, "maxpool2d input gradient"));
  j.argmax = dl_i32(&l->saved[0]);
  j.dy = dl_f32(dy);
  j.dx = dl_f32(dx);
  j.avx512 = dl_cpu_has_avx512f();
  dl_parallel_for(x->shape[0] * x->shape[1], pool_grain(&j.g), pool_backward_planes, &j);
  dl_round_inplace(dl_f32(dx), dx->numel, (int)ctx->autocast);
  return DL_OK;
}

dl_status dl_maxpool2d_check(const char *label, const dl_layer_desc *d) {
  DL_TRY(dl_layer_check_window(label, d, 0));
  if (d->padding > d->kernel / 2)
    return dl_fail(DL_ERR_INVALID,
                   "%s: padding %d exceeds half the kernel size %d (PyTorch refuses it)", label,
                   d->padding, d->kernel);
  return DL_OK;
}

const dl_layer_ops dl_maxpool2d_ops = {.forward = maxpool_forward, .backward = maxpool_backward};
