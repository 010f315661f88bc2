#include "nn/loss.h"

#include "numerics/cpu.h"
#include "numerics/fmath.h"
#include "numerics/half.h"
#include "core/threads.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

const char *dl_reduction_name(dl_reduction r) {
  switch (r) {
  case DL_REDUCTION_MEAN: return "mean";
  case DL_REDUCTION_SUM: return "sum";
  case DL_REDUCTION_NONE: return "none";
  }
  return "unknown";
}

dl_status dl_reduction_parse(const char *name, dl_reduction *out) {
  static const dl_reduction all[] = {DL_REDUCTION_MEAN, DL_REDUCTION_SUM, DL_REDUCTION_NONE};
  for (int i = 0; i < 3; i++)
    if (name && strcmp(name, dl_reduction_name(all[i])) == 0) {
      *out = all[i];
      return DL_OK;
    }
  return dl_fail(DL_ERR_INVALID, "unknown reduction '%s': use mean, sum or none",
                 name ? name : "(null)");
}

dl_ce_desc dl_ce_default(void) {
  dl_ce_desc d = {0};
  d.reduction = DL_REDUCTION_MEAN;
  d.ignore_index = -100;
  d.label_smoothing = 0.0f;
  d.row_weight = NULL;
  d.grad_scale = 1.0f;
  d.half_dtype = 0;
  return d;
}

/* x as the half format `half` would store it (0: unchanged). */
static float to_half(float x, int half) {
  if (half == 1) return dl_round_f16(x);
  if (half == 2) return dl_round_bf16(x);
  return x;
}

static dl_status check_output_empty(const dl_tensor *t, const char *loss, const char *what) {
  if (t && !dl_tensor_empty(t))
    return dl_fail(DL_ERR_INVALID, "%s: output %s must be an empty tensor (free it first)", loss,
                   what);
  return DL_OK;
}

/* ---- cross-entropy ---------------------------------------------------- */

/* One row of logits, as the loss sees it (rounded to half if emulated). */
typedef struct ce_row {
  const float *z;
  int64_t classes;
  int half;
  float max;     /* max_c z[c] */
  float *e;      /* exp(z[c] - max), every c (scratch of `classes`) */
  double sum;    /* sum_c e[c], in order */
  double logsum; /* log(sum) */
} ce_row;

static float ce_logit(const ce_row *r, int64_t c) { return to_half(r->z[c], r->half); }

/* max_c z[c], the first NaN if there is one (as torch.max). */
static float ce_row_max(const ce_row *r) {
  float max = ce_logit(r, 0);
  for (int64_t c = 1; c < r->classes && !isnan(max); c++) {
    float v = ce_logit(r, c);
    if (v > max || isnan(v)) max = v;
  }
  return max;
}

/* The same for logits that are not rounded, in CE_LANES independent lanes
 * (the scalar loop is one long dependency chain). Without NaN the maximum
 * is one value whatever the order, and its bits are too unless it is zero
 * (then +0 or -0 is whichever came first): those rows take ce_row_max. */
enum { CE_LANES = 16 };

static float ce_row_max_fast(const ce_row *r) {
  const int64_t whole = r->classes / CE_LANES * CE_LANES;
  float lane[CE_LANES];
  bool nan = false;
  for (int l = 0; l < CE_LANES; l++) lane[l] = -INFINITY;
  for (int64_t c = 0; c < whole; c += CE_LANES)
    for (int l = 0; l < CE_LANES; l++) {
      const float v = r->z[c + l];
      nan |= v != v;
      lane[l] = v > lane[l] ? v : lane[l];
    }
  float max = -INFINITY;
  for (int l = 0; l < CE_LANES; l++) max = lane[l] > max ? lane[l] : max;
  for (int64_t c = whole; c < r->classes; c++) {
    nan |= r->z[c] != r->z[c];
    max = r->z[c] > max ? r->z[c] : max;
  }
  return nan || max == 0.0f ? ce_row_max(r) : max;
}

static void ce_row_init(ce_row *r, const float *z, int64_t classes, int half, float *e) {
  r->z = z;
  r->e = e;
  r->classes = classes;
  r->half = half;
  r->max = half ? ce_row_max(r) : ce_row_max_fast(r);
  if (!half)
    for (int64_t c = 0; c < classes; c++) e[c] = z[c] - r->max;
  else
    for (int64_t c = 0; c < classes; c++) e[c] = ce_logit(r, c) - r->max;
  dl_expf_n(e, e, classes); /* dl_expf's bits, several at a time */
}

/* sum_c e[c] in class order for each of n rows, CE_BLOCK rows side by side:
 * each row is one chain, as alone, but the chains overlap. */
enum { CE_BLOCK = 8 };

static void ce_rows_sum(ce_row *rows, int n) {
  double sum[CE_BLOCK] = {0};
  for (int64_t c = 0; c < rows[0].classes; c++)
    for (int i = 0; i < n; i++) sum[i] += (double)rows[i].e[c];
  for (int i = 0; i < n; i++) {
    rows[i].sum = sum[i];
    rows[i].logsum = dl_log(sum[i]);
  }
}

static double ce_logp(const ce_row *r, int64_t c) {
  double lp = (double)(ce_logit(r, c) - r->max) - r->logsum;
  return r->half ? (double)to_half((float)lp, r->half) : lp;
}

static double ce_prob(const ce_row *r, int64_t c) {
  if (r->half) return (double)to_half(dl_expf((float)ce_logp(r, c)), r->half);
  return (double)r->e[c] / r->sum;
}

/* loss_r = (1 - eps) * nll + (eps / C) * sum_c(-logp[c]). */
static double ce_row_loss(const ce_row *r, int32_t target, double eps) {
  double nll = -ce_logp(r, target);
  double smooth = 0.0;
  if (eps != 0.0) {
    for (int64_t c = 0; c < r->classes; c++) smooth -= ce_logp(r, c);
    if (r->half) smooth = (double)to_half((float)smooth, r->half);
  }
  double loss = (1.0 - eps) * nll + eps / (double)r->classes * smooth;
  return r->half ? (double)to_half((float)loss, r->half) : loss;
}

/* dlogits of one row scaled by `coef`: coef * (p - eps/C - (1 - eps) [c == t]).
 * Without half rounding, every class takes the non-target expression in a
 * loop the compiler vectorizes (subtracting the +0 of a non-target is exact)
 * and the target is written again. */
static void ce_row_grad(const ce_row *r, int32_t target, double eps, double coef, float *dz) {
  double spread = eps / (double)r->classes;
  if (!r->half) {
    for (int64_t c = 0; c < r->classes; c++)
      dz[c] = (float)(coef * ((double)r->e[c] / r->sum - spread));
    dz[target] = (float)(coef * (ce_prob(r, target) - spread - (1.0 - eps)));
    return;
  }
  for (int64_t c = 0; c < r->classes; c++) {
    double g = ce_prob(r, c) - spread - (c == target ? 1.0 - eps : 0.0);
    dz[c] = to_half((float)(coef * g), r->half);
  }
}

static dl_status ce_check_shapes(const dl_tensor *logits, const dl_tensor *targets,
                                 const dl_tensor *w) {
  char a[96], b[96];
  if (logits->dtype != DL_F32 || (logits->ndim != 2 && logits->ndim != 3))
    return dl_fail(DL_ERR_INVALID,
                   "cross_entropy: logits must be float32 [N, C] or [N, T, C], got %s",
                   dl_tensor_describe(logits, a, sizeof a));
  if (logits->shape[logits->ndim - 1] < 1)
    return dl_fail(DL_ERR_INVALID, "cross_entropy: logits %s have no classes",
                   dl_tensor_describe(logits, a, sizeof a));
  bool shape_ok = targets->dtype == DL_I32 && targets->ndim == logits->ndim - 1;
  for (int i = 0; shape_ok && i < targets->ndim; i++)
    shape_ok = targets->shape[i] == logits->shape[i];
  if (!shape_ok)
    return dl_fail(DL_ERR_INVALID,
                   "cross_entropy: targets must be int32 shaped like the logits "
                   "without the class dim; logits %s, targets %s",
                   dl_tensor_describe(logits, a, sizeof a),
                   dl_tensor_describe(targets, b, sizeof b));
  if (w && (w->dtype != DL_F32 || !dl_tensor_same_shape(w, targets)))
    return dl_fail(DL_ERR_INVALID,
                   "cross_entropy: row_weight must be float32 shaped like the "
                   "targets %s, got %s",
                   dl_tensor_describe(targets, a, sizeof a), dl_tensor_describe(w, b, sizeof b));
  return DL_OK;
}

static dl_status ce_check_desc(const dl_ce_desc *d, const dl_tensor *per_row,
                               const dl_tensor *dlogits) {
  if (d->reduction != DL_REDUCTION_MEAN && d->reduction != DL_REDUCTION_SUM &&
      d->reduction != DL_REDUCTION_NONE)
    return dl_fail(DL_ERR_INVALID, "cross_entropy: unknown reduction %d", (int)d->reduction);
  if (!(d->label_smoothing >= 0.0f && d->label_smoothing <= 1.0f))
    return dl_fail(DL_ERR_INVALID, "cross_entropy: label_smoothing %g is outside [0, 1]",
                   (double)d->label_smoothing);
  if (d->row_weight && d->reduction != DL_REDUCTION_SUM)
    return dl_fail(DL_ERR_INVALID,
                   "cross_entropy: row_weight needs reduction 'sum' (got '%s'); put "
                   "the normalisation into the weights",
                   dl_reduction_name(d->reduction));
  if (!isfinite(d->grad_scale))
    return dl_fail(DL_ERR_INVALID, "cross_entropy: grad_scale %g is not finite",
                   (double)d->grad_scale);
  if (d->half_dtype < 0 || d->half_dtype > 2)
    return dl_fail(DL_ERR_INVALID,
                   "cross_entropy: half_dtype %d is not 0 (off), 1 (f16) or 2 (bf16)",
                   d->half_dtype);
  if ((d->reduction == DL_REDUCTION_NONE) != (per_row != NULL))
    return dl_fail(DL_ERR_INVALID,
                   "cross_entropy: per_row output is required with reduction 'none' "
                   "and only then");
  DL_TRY(check_output_empty(per_row, "cross_entropy", "per_row"));
  return check_output_empty(dlogits, "cross_entropy", "dlogits");
}

/* Counts the rows that are not ignored; refuses targets outside [0, C). */
static dl_status ce_count_targets(const dl_tensor *targets, int64_t classes, int32_t ignore_index,
                                  int64_t *count) {
  const int32_t *t = dl_i32(targets);
  *count = 0;
  for (int64_t r = 0; r < targets->numel; r++) {
    if (t[r] == ignore_index) continue;
    if (t[r] < 0 || t[r] >= classes)
      return dl_fail(DL_ERR_INVALID,
                     "cross_entropy: target %d of row %lld is outside [0, %lld) and "
                     "is not ignore_index (%d)",
                     t[r], (long long)r, (long long)classes, ignore_index);
    (*count)++;
  }
  return DL_OK;
}

static dl_status ce_alloc_outputs(const dl_tensor *logits, const dl_tensor *targets,
                                  dl_tensor *per_row, dl_tensor *dlogits) {
  if (per_row)
    DL_TRY(dl_tensor_alloc(per_row, DL_F32, targets->ndim, targets->shape,
                           "cross_entropy per-row loss"));
  if (dlogits) {
    /* Uninitialised: ce_rows writes every row (an ignored row's zeros too). */
    dl_status s = dl_tensor_alloc_uninit(dlogits, DL_F32, logits->ndim, logits->shape,
                                         "cross_entropy dlogits");
    if (s != DL_OK) {
      dl_tensor_free(per_row);
      return s;
    }
  }
  return DL_OK;
}

/* Rows are independent: threads take ranges of rows, each with its own exp
 * scratch, and leave each row's loss in row_loss; the total is summed after,
 * in row order, so the bits do not depend on the split. */
typedef struct ce_job {
  const dl_ce_desc *d;
  const float *logits, *w;
  const int32_t *t;
  int64_t classes;
  double norm;
  double *row_loss;
  float *per_row, *dz; /* either may be NULL */
  atomic_bool out_of_memory;
} ce_job;

enum { CE_GRAIN_FLOATS = 4096 }; /* logits per chunk at least */

/* Loss and gradient of one row whose sum is known. */
static void ce_row_finish(const ce_job *j, const ce_row *row, int64_t r) {
  const dl_ce_desc *d = j->d;
  double wr = j->w ? (double)j->w[r] : 1.0;
  j->row_loss[r] = ce_row_loss(row, j->t[r], d->label_smoothing);
  if (j->per_row) j->per_row[r] = (float)j->row_loss[r];
  if (j->dz)
    ce_row_grad(row, j->t[r], d->label_smoothing, wr * j->norm * (double)d->grad_scale,
                j->dz + r * j->classes);
}

/* Rows in blocks of CE_BLOCK (those not ignored), for ce_rows_sum. */
DL_AVX512_CLONES static void ce_rows(void *ctx, int64_t begin, int64_t end) {
  ce_job *j = ctx;
  const dl_ce_desc *d = j->d;
  float *e = malloc((size_t)j->classes * CE_BLOCK * sizeof *e);
  if (!e) {
    atomic_store(&j->out_of_memory, true);
    return;
  }
  ce_row rows[CE_BLOCK];
  int64_t at[CE_BLOCK];
  int n = 0;
  for (int64_t r = begin; r < end; r++) {
    j->row_loss[r] = 0.0;
    if (j->t[r] == d->ignore_index) {
      if (j->per_row) j->per_row[r] = 0.0f;
      if (j->dz) memset(j->dz + r * j->classes, 0, (size_t)j->classes * sizeof *j->dz);
    } else {
      ce_row_init(&rows[n], j->logits + r * j->classes, j->classes, d->half_dtype,
                  e + n * j->classes);
      at[n++] = r;
    }
    if (n == CE_BLOCK || (r + 1 == end && n > 0)) {
      ce_rows_sum(rows, n);
      for (int i = 0; i < n; i++) ce_row_finish(j, &rows[i], at[i]);
      n = 0;
    }
  }
  free(e);
}

dl_status dl_cross_entropy(const dl_ce_desc *d, const dl_tensor *logits, const dl_tensor *targets,
                           float *loss, dl_tensor *per_row, dl_tensor *dlogits) {
  DL_TRY(ce_check_desc(d, per_row, dlogits));
  DL_TRY(ce_check_shapes(logits, targets, d->row_weight));
  int64_t classes = logits->shape[logits->ndim - 1], count, rows = targets->numel;
  DL_TRY(ce_count_targets(targets, classes, d->ignore_index, &count));
  double *row_loss = malloc((size_t)(rows > 0 ? rows : 1) * sizeof *row_loss);
  if (!row_loss)
    return dl_fail(DL_ERR_NOMEM, "cross_entropy: out of memory for the losses of %lld rows",
                   (long long)rows);
  dl_status st = ce_alloc_outputs(logits, targets, per_row, dlogits);
  if (st != DL_OK) {
    free(row_loss);
    return st;
  }
  ce_job job = {.d = d,
                .logits = dl_f32(logits),
                .w = d->row_weight ? dl_f32(d->row_weight) : NULL,
                .t = dl_i32(targets),
                .classes = classes,
                .norm = d->reduction == DL_REDUCTION_MEAN ? 1.0 / (double)count : 1.0,
                .row_loss = row_loss,
                .per_row = per_row ? dl_f32(per_row) : NULL,
                .dz = dlogits ? dl_f32(dlogits) : NULL};
  dl_parallel_for(rows, classes >= CE_GRAIN_FLOATS ? 1 : CE_GRAIN_FLOATS / classes, ce_rows, &job);
  if (atomic_load(&job.out_of_memory)) {
    free(row_loss);
    dl_tensor_free(per_row);
    dl_tensor_free(dlogits);
    return dl_fail(DL_ERR_NOMEM, "cross_entropy: out of memory for a row of %lld classes",
                   (long long)classes);
  }
  double total = 0.0;
  for (int64_t r = 0; r < rows; r++)
    if (job.t[r] != d->ignore_index) total += (job.w ? (double)job.w[r] : 1.0) * row_loss[r];
  free(row_loss);
  /* 0/0 = NaN when every row is ignored, as PyTorch's mean. */
  double reduced = d->reduction == DL_REDUCTION_MEAN ? total / (double)count : total;
  *loss = to_half((float)reduced, d->half_dtype);
  return DL_OK;
}

/* ---- mean squared error ----------------------------------------------- */

dl_status dl_mse(dl_reduction reduction, float grad_scale, const dl_tensor *pred,
                 const dl_tensor *target, float *loss, dl_tensor *per_elem, dl_tensor *dpred) {
  char a[96], b[96];
  if (reduction != DL_REDUCTION_MEAN && reduction != DL_REDUCTION_SUM &&
      reduction != DL_REDUCTION_NONE)
    return dl_fail(DL_ERR_INVALID, "mse: unknown reduction %d", (int)reduction);
  if (pred->dtype != DL_F32 || target->dtype != DL_F32 || !dl_tensor_same_shape(pred, target))
    return dl_fail(DL_ERR_INVALID, "mse: pred %s and target %s must be float32 of the same shape",
                   dl_tensor_describe(pred, a, sizeof a), dl_tensor_describe(target, b, sizeof b));
  if (!isfinite(grad_scale))
    return dl_fail(DL_ERR_INVALID, "mse: grad_scale %g is not finite", (double)grad_scale);
  if ((reduction == DL_REDUCTION_NONE) != (per_elem != NULL))
    return dl_fail(DL_ERR_INVALID,
                   "mse: per_elem output is required with reduction 'none' and only then");
  DL_TRY(check_output_empty(per_elem, "mse", "per_elem"));
  DL_TRY(check_output_empty(dpred, "mse", "dpred"));
  if (per_elem)
    DL_TRY(dl_tensor_alloc(per_elem, DL_F32, pred->ndim, pred->shape, "mse per-element loss"));
  if (dpred) {
    dl_status s = dl_tensor_alloc(dpred, DL_F32, pred->ndim, pred->shape, "mse dpred");
    if (s != DL_OK) {
      dl_tensor_free(per_elem);
      return s;
    }
  }
  const float *p = dl_f32(pred), *y = dl_f32(target);
  double n = (double)pred->numel;
  double gcoef = (reduction == DL_REDUCTION_MEAN ? 2.0 / n : 2.0) * (double)grad_scale;
  double total = 0.0;
  for (int64_t i = 0; i < pred->numel; i++) {
    double diff = (double)p[i] - (double)y[i];
    total += diff * diff;
    if (per_elem) dl_f32(per_elem)[i] = (float)(diff * diff);
    if (dpred) dl_f32(dpred)[i] = (float)(gcoef * diff);
  }
  /* 0/0 = NaN for an empty mean, as PyTorch. */
  *loss = (float)(reduction == DL_REDUCTION_MEAN ? total / n : total);
  return DL_OK;
}
