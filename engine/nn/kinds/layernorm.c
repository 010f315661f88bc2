/* LayerNorm over the last dimension, as torch.nn.LayerNorm(D): per-row mean
 * and biased variance accumulated in double, y = (x - mean) * rstd * w + b.
 *
 * Rows are independent, so forward and dx are parallel over rows; the
 * weight and bias gradients are sums over rows, parallel over columns with
 * each column summed in row order by one thread. */
#include "nn/kinds/kinds.h"

#include "core/mem.h"
#include "core/threads.h"
#include "numerics/cpu.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* Rows of the input viewed as [rows, D]. */
static dl_status ln_rows_of(const dl_layer *l, const dl_tensor *x, const char *what,
                            int64_t *rows) {
  char name[128], shape[96];
  if (x->dtype != DL_F32 || x->ndim < 1 || x->shape[x->ndim - 1] != l->desc.out)
    return dl_fail(DL_ERR_INVALID, "%s: %s is %s; expected float32 [..., %lld]",
                   dl_layer_label(l, name, sizeof name), what,
                   dl_tensor_describe(x, shape, sizeof shape), (long long)l->desc.out);
  *rows = x->numel / l->desc.out;
  return DL_OK;
}

dl_status dl_layernorm_init(dl_layer *l, uint64_t seed) {
  (void)seed; /* constant initialisation: ones and zeros */
  char name[128];
  int64_t dim = l->desc.out;
  if (dim < 1)
    return dl_fail(DL_ERR_INVALID, "%s: normalized size is %lld; it must be at least 1",
                   dl_layer_label(l, name, sizeof name), (long long)dim);
  if (!l->desc.affine) return DL_OK;
  DL_TRY(dl_layer_add_param(l, "weight", 1, &dim));
  DL_TRY(dl_layer_add_param(l, "bias", 1, &dim));
  float *w = dl_f32(&l->params[0].value);
  for (int64_t i = 0; i < dim; i++) w[i] = 1.0f;
  return DL_OK;
}

/* ---- forward ---- */

typedef struct ln_fwd_job {
  int64_t dim, rows;
  const float *x, *w, *b;
  float *y, *mean, *rstd;
  double eps;
} ln_fwd_job;

/* LN_ROWS rows side by side: each row's sums are still one chain in column
 * order, so the bits are those of one row at a time, but the chains are
 * independent and overlap (one row's chain of double adds is latency-bound:
 * it was most of the forward's time). n <= LN_ROWS rows from r0. */
enum { LN_ROWS = 8 };

/* With AVX-512, a whole block's chains run in the lanes of one register, a
 * row per lane: each row's operations are the scalar code's, in its order. */
#if defined(__x86_64__) && defined(__GNUC__)
#include "numerics/columns8.h"
#define LN_AVX512 __attribute__((target("avx512f,avx512vl")))

/* The forward's m and sq of LN_ROWS rows at x (ln_rows_forward). */
LN_AVX512 static void ln_moments8(const float *x, int64_t dim, double m[LN_ROWS],
                                  double sq[LN_ROWS]) {
  __m256 c[8];
  __m512d sum = _mm512_setzero_pd(), acc = _mm512_setzero_pd();
  for (int64_t i = 0; i < dim; i += 8) {
    const int cols = dl_columns8(x, dim, i, c);
    for (int k = 0; k < cols; k++) sum = _mm512_add_pd(sum, _mm512_cvtps_pd(c[k]));
  }
  const __m512d mean = _mm512_div_pd(sum, _mm512_set1_pd((double)dim));
  for (int64_t i = 0; i < dim; i += 8) {
    const int cols = dl_columns8(x, dim, i, c);
    for (int k = 0; k < cols; k++) {
      const __m512d d = _mm512_sub_pd(_mm512_cvtps_pd(c[k]), mean);
      acc = _mm512_add_pd(acc, _mm512_mul_pd(d, d));
    }
  }
  _mm512_storeu_pd(m, mean);
  _mm512_storeu_pd(sq, acc);
}
#endif

/* m[r] = the mean of row r in double, sq[r] its sum of squared deviations,
 * for n <= LN_ROWS rows at x. */
static inline void ln_moments(const float *x, int64_t dim, int n, double m[LN_ROWS],
                              double sq[LN_ROWS]) {
#if defined(__x86_64__) && defined(__GNUC__)
  if (n == LN_ROWS && dl_cpu_has_avx512f()) {
    ln_moments8(x, dim, m, sq);
    return;
  }
#endif
  double sum[LN_ROWS] = {0};
  for (int64_t i = 0; i < dim; i++)
    for (int r = 0; r < n; r++) sum[r] += x[r * dim + i];
  for (int r = 0; r < n; r++) {
    m[r] = sum[r] / (double)dim;
    sq[r] = 0.0;
  }
  for (int64_t i = 0; i < dim; i++)
    for (int r = 0; r < n; r++)
      sq[r] += ((double)x[r * dim + i] - m[r]) * ((double)x[r * dim + i] - m[r]);
}

static inline void ln_rows_forward(const ln_fwd_job *j, int64_t r0, int n) {
  const int64_t dim = j->dim;
  const float *x = j->x + r0 * dim;
  double sq[LN_ROWS], m[LN_ROWS];
  ln_moments(x, dim, n, m, sq);
  for (int r = 0; r < n; r++) {
    const float mean = (float)m[r];
    const float rstd = (float)(1.0 / sqrt(sq[r] / (double)dim + j->eps));
    const float *xr = x + r * dim;
    float *y = j->y + (r0 + r) * dim;
    if (j->w)
      for (int64_t i = 0; i < dim; i++) y[i] = (xr[i] - mean) * rstd * j->w[i] + j->b[i];
    else
      for (int64_t i = 0; i < dim; i++) y[i] = (xr[i] - mean) * rstd;
    j->mean[r0 + r] = mean;
    j->rstd[r0 + r] = rstd;
  }
}

/* The range is in blocks of LN_ROWS rows (the last one may be short). */
DL_AVX512_CLONES static void ln_forward_range(void *p, int64_t begin, int64_t end) {
  const ln_fwd_job *j = p;
  for (int64_t blk = begin; blk < end; blk++) {
    const int64_t r0 = blk * LN_ROWS, left = j->rows - r0;
    if (left >= LN_ROWS) ln_rows_forward(j, r0, LN_ROWS);
    else ln_rows_forward(j, r0, (int)left);
  }
}

static int64_t ln_grain(int64_t dim) { return dim >= 8192 ? 1 : 8192 / dim; }

/* ln_grain in blocks of LN_ROWS rows. */
static int64_t ln_block_grain(int64_t dim) { return (ln_grain(dim) + LN_ROWS - 1) / LN_ROWS; }

static dl_status ln_forward(dl_layer *l, const dl_ctx *ctx, const dl_tensor *x, dl_tensor *y) {
  char name[128];
  int64_t rows = 0;
  DL_TRY(ln_rows_of(l, x, "input", &rows));
  dl_tensor_free(&l->saved[0]);
  dl_tensor_free(&l->saved[1]);
  dl_tensor mean = {0}, rstd = {0};
  dl_status s = dl_tensor_f32(&mean, 1, rows, 0, 0, 0, "layernorm saved mean");
  if (s == DL_OK) s = dl_tensor_f32(&rstd, 1, rows, 0, 0, 0, "layernorm saved rstd");
  if (s == DL_OK) s = dl_tensor_alloc_uninit(y, DL_F32, x->ndim, x->shape, "layernorm output");
  if (s != DL_OK) {
    dl_tensor_free(&mean);
    dl_tensor_free(&rstd);
    return dl_fail_context(s, "%s: ", dl_layer_label(l, name, sizeof name));
  }
  bool affine = l->desc.affine;
  ln_fwd_job job = {.dim = l->desc.out,
                    .rows = rows,
                    .x = dl_f32(x),
                    .w = affine ? dl_f32(&l->params[0].value) : NULL,
                    .b = affine ? dl_f32(&l->params[1].value) : NULL,
                    .y = dl_f32(y),
                    .mean = dl_f32(&mean),
                    .rstd = dl_f32(&rstd),
                    .eps = l->desc.eps};
  dl_parallel_for((rows + LN_ROWS - 1) / LN_ROWS, ln_block_grain(job.dim), ln_forward_range, &job);
  dl_layer_keep_saved(l, ctx, &mean, &rstd);
  return DL_OK;
}

/* ---- backward ---- */

typedef struct ln_bwd_job {
  int64_t dim, rows;
  const float *x, *dy, *w, *mean, *rstd;
  float *dx, *dw, *db;
} ln_bwd_job;

/* With xhat = (x - mean) * rstd and g = dy * w:
 * dx = rstd * (g - mean(g) - xhat * mean(g * xhat)).
 * LN_ROWS rows side by side, as the forward. */
static inline float ln_g(const ln_bwd_job *j, const float *dy, int64_t i) {
  return j->w ? dy[i] * j->w[i] : dy[i];
}

#if defined(__x86_64__) && defined(__GNUC__)
/* ln_sums of LN_ROWS rows in lanes. */
LN_AVX512 static void ln_sums8(const ln_bwd_job *j, int64_t r0, double sum_g[LN_ROWS],
                               double sum_gx[LN_ROWS]) {
  const int64_t dim = j->dim;
  const float *x = j->x + r0 * dim, *dy = j->dy + r0 * dim;
  const __m256 mean = _mm256_loadu_ps(j->mean + r0), rstd = _mm256_loadu_ps(j->rstd + r0);
  __m512d sg = _mm512_setzero_pd(), sgx = _mm512_setzero_pd();
  __m256 cd[8], cx[8];
  for (int64_t i = 0; i < dim; i += 8) {
    const int cols = dl_columns8(dy, dim, i, cd);
    dl_columns8(x, dim, i, cx);
    for (int k = 0; k < cols; k++) {
      const __m256 g = j->w ? _mm256_mul_ps(cd[k], _mm256_set1_ps(j->w[i + k])) : cd[k];
      const __m256 xhat = _mm256_mul_ps(_mm256_sub_ps(cx[k], mean), rstd);
      const __m512d gd = _mm512_cvtps_pd(g);
      sg = _mm512_add_pd(sg, gd);
      sgx = _mm512_add_pd(sgx, _mm512_mul_pd(gd, _mm512_cvtps_pd(xhat)));
    }
  }
  _mm512_storeu_pd(sum_g, sg);
  _mm512_storeu_pd(sum_gx, sgx);
}
#endif

/* The sums of g and g * xhat of n <= LN_ROWS rows from r0, each in column
 * order. */
static inline void ln_sums(const ln_bwd_job *j, int64_t r0, int n, double sum_g[LN_ROWS],
                           double sum_gx[LN_ROWS]) {
#if defined(__x86_64__) && defined(__GNUC__)
  if (n == LN_ROWS && dl_cpu_has_avx512f()) {
    ln_sums8(j, r0, sum_g, sum_gx);
    return;
  }
#endif
  const int64_t dim = j->dim;
  const float *x = j->x + r0 * dim, *dy = j->dy + r0 * dim;
  const float *mean = j->mean + r0, *rstd = j->rstd + r0;
  for (int r = 0; r < n; r++) sum_g[r] = sum_gx[r] = 0.0;
  for (int64_t i = 0; i < dim; i++)
    for (int r = 0; r < n; r++) {
      float g = ln_g(j, dy + r * dim, i);
      float xhat = (x[r * dim + i] - mean[r]) * rstd[r];
      sum_g[r] += g;
      sum_gx[r] += (double)g * xhat;
    }
}

static inline void ln_rows_backward(const ln_bwd_job *j, int64_t r0, int n) {
  const int64_t dim = j->dim;
  const float *x = j->x + r0 * dim, *dy = j->dy + r0 * dim;
  const float *mean = j->mean + r0, *rstd = j->rstd + r0;
  double sum_g[LN_ROWS], sum_gx[LN_ROWS];
  ln_sums(j, r0, n, sum_g, sum_gx);
  for (int r = 0; r < n; r++) {
    const float mean_g = (float)(sum_g[r] / (double)dim);
    const float mean_gx = (float)(sum_gx[r] / (double)dim);
    const float *xr = x + r * dim, *dyr = dy + r * dim;
    float *dx = j->dx + (r0 + r) * dim;
    const float m = mean[r], rs = rstd[r];
    if (j->w)
      for (int64_t i = 0; i < dim; i++)
        dx[i] = rs * (dyr[i] * j->w[i] - mean_g - (xr[i] - m) * rs * mean_gx);
    else
      for (int64_t i = 0; i < dim; i++) dx[i] = rs * (dyr[i] - mean_g - (xr[i] - m) * rs * mean_gx);
  }
}

DL_AVX512_CLONES static void ln_dx_range(void *p, int64_t begin, int64_t end) {
  const ln_bwd_job *j = p;
  for (int64_t blk = begin; blk < end; blk++) {
    const int64_t r0 = blk * LN_ROWS, left = j->rows - r0;
    if (left >= LN_ROWS) ln_rows_backward(j, r0, LN_ROWS);
    else ln_rows_backward(j, r0, (int)left);
  }
}

/* dw[i] = sum over rows of dy * xhat, db[i] = sum of dy, rows in order.
 * LN_COLS columns side by side: each is still one chain in row order, but
 * the rows are walked once per block rather than once per column (with a
 * stride of dim), and the chains, independent, fill vector lanes. The range
 * is in blocks. */
enum { LN_COLS = 16 };

static void ln_dwdb_block(const ln_bwd_job *j, int64_t i0, int64_t n) {
  double sw[LN_COLS] = {0}, sb[LN_COLS] = {0};
  for (int64_t r = 0; r < j->rows; r++) {
    const float *dy = j->dy + r * j->dim + i0, *x = j->x + r * j->dim + i0;
    const float mean = j->mean[r], rstd = j->rstd[r];
    if (n == LN_COLS) {
      for (int c = 0; c < LN_COLS; c++) {
        sw[c] += (double)dy[c] * ((x[c] - mean) * rstd);
        sb[c] += dy[c];
      }
    } else {
      for (int64_t c = 0; c < n; c++) {
        sw[c] += (double)dy[c] * ((x[c] - mean) * rstd);
        sb[c] += dy[c];
      }
    }
  }
  for (int64_t c = 0; c < n; c++) {
    if (j->dw) j->dw[i0 + c] = (float)sw[c];
    if (j->db) j->db[i0 + c] = (float)sb[c];
  }
}

DL_AVX512_CLONES static void ln_dwdb_range(void *p, int64_t begin, int64_t end) {
  const ln_bwd_job *j = p;
  for (int64_t blk = begin; blk < end; blk++) {
    const int64_t i0 = blk * LN_COLS;
    ln_dwdb_block(j, i0, j->dim - i0 < LN_COLS ? j->dim - i0 : LN_COLS);
  }
}

static dl_status ln_backward(dl_layer *l, const dl_ctx *ctx, const dl_tensor *x, const dl_tensor *y,
                             const dl_tensor *dy, dl_tensor *dx) {
  (void)ctx;
  (void)y;
  char name[128];
  int64_t rows = 0;
  DL_TRY(ln_rows_of(l, x, "input", &rows));
  DL_TRY(dl_layer_check_dy(l, dy, x));
  if (dl_tensor_empty(&l->saved[0]) || l->saved[0].numel != rows)
    return dl_fail(DL_ERR_INVALID,
                   "%s: backward without a grad-mode forward; run forward with "
                   "grad_enabled first",
                   dl_layer_label(l, name, sizeof name));
  const int64_t dim = l->desc.out;
  bool want_w = l->desc.affine && l->params[0].requires_grad;
  bool want_b = l->desc.affine && l->params[1].requires_grad;
  float *grads = NULL;
  if (want_w || want_b) {
    grads = dl_mem_alloc(2 * (size_t)dim * sizeof(float), "layernorm weight/bias gradients");
    if (!grads) return dl_fail_context(DL_ERR_NOMEM, "%s: ", dl_layer_label(l, name, sizeof name));
  }
  if (dx) {
    dl_status s = dl_tensor_alloc_uninit(dx, DL_F32, x->ndim, x->shape, "layernorm input gradient");
    if (s != DL_OK) {
      dl_mem_free(grads);
      return dl_fail_context(s, "%s: ", dl_layer_label(l, name, sizeof name));
    }
  }
  ln_bwd_job job = {.dim = dim,
                    .rows = rows,
                    .x = dl_f32(x),
                    .dy = dl_f32(dy),
                    .w = l->desc.affine ? dl_f32(&l->params[0].value) : NULL,
                    .mean = dl_f32(&l->saved[0]),
                    .rstd = dl_f32(&l->saved[1]),
                    .dx = dx ? dl_f32(dx) : NULL,
                    .dw = want_w ? grads : NULL,
                    .db = want_b ? grads + dim : NULL};
  if (dx) dl_parallel_for((rows + LN_ROWS - 1) / LN_ROWS, ln_block_grain(dim), ln_dx_range, &job);
  if (grads) {
    const int64_t blocks = (dim + LN_COLS - 1) / LN_COLS, per_block = rows * LN_COLS;
    dl_parallel_for(blocks, per_block >= 8192 ? 1 : 8192 / (per_block > 0 ? per_block : 1),
                    ln_dwdb_range, &job);
    if (want_w) dl_param_accumulate(&l->params[0], job.dw);
    if (want_b) dl_param_accumulate(&l->params[1], job.db);
  }
  dl_mem_free(grads);
  return DL_OK;
}

dl_status dl_layernorm_check(const char *label, const dl_layer_desc *d) {
  return dl_layer_check_norm(label, d, false);
}

const dl_layer_ops dl_layernorm_ops = {.forward = ln_forward, .backward = ln_backward};
