/* BatchNorm1d ([N, C] or [N, C, L]) and BatchNorm2d ([N, C, H, W]), as
 * torch.nn.BatchNorm*d on the CPU: per-channel statistics accumulated in
 * double, biased variance for normalising, unbiased for the running
 * estimate, momentum update running = (1-m)*running + m*batch.
 *
 * Every channel is independent in both directions, so one job per channel
 * computes its statistics, running update and output (or its gradients):
 * each reduction stays in one thread and runs in the order written here. */
#include "nn/kinds/kinds.h"

#include "numerics/cpu.h"
#include "core/mem.h"
#include "core/threads.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* The input viewed as [n, c, s]: s is L, H*W, or 1 for [N, C]. */
typedef struct bn_dims {
  int64_t n, c, s;
} bn_dims;

static dl_status bn_dims_of(const dl_layer *l, const dl_tensor *x, const char *what, bn_dims *d) {
  char name[128], shape[96];
  bool is2d = l->desc.kind == DL_BATCHNORM2D;
  bool rank_ok = is2d ? x->ndim == 4 : (x->ndim == 2 || x->ndim == 3);
  if (x->dtype != DL_F32 || !rank_ok || x->shape[1] != l->desc.out)
    return dl_fail(DL_ERR_INVALID, "%s: %s is %s; expected float32 %s with C = %lld",
                   dl_layer_label(l, name, sizeof name), what,
                   dl_tensor_describe(x, shape, sizeof shape),
                   is2d ? "[N, C, H, W]" : "[N, C] or [N, C, L]", (long long)l->desc.out);
  d->n = x->shape[0];
  d->c = x->shape[1];
  d->s = 1;
  for (int i = 2; i < x->ndim; i++) d->s *= x->shape[i];
  return DL_OK;
}

/* Batch statistics or running ones? As PyTorch's bn_training. */
static bool bn_uses_batch_stats(const dl_layer *l) {
  return l->training || !l->desc.track_running_stats;
}

static const float *bn_weight(const dl_layer *l) {
  return l->desc.affine ? dl_f32(&l->params[0].value) : NULL;
}
static const float *bn_bias(const dl_layer *l) {
  return l->desc.affine ? dl_f32(&l->params[1].value) : NULL;
}

dl_status dl_batchnorm_init(dl_layer *l, uint64_t seed) {
  (void)seed; /* constant initialisation: ones and zeros */
  char name[128];
  int64_t c = l->desc.out;
  if (c < 1)
    return dl_fail(DL_ERR_INVALID, "%s: num_features is %lld; it must be at least 1",
                   dl_layer_label(l, name, sizeof name), (long long)c);
  if (l->desc.affine) {
    DL_TRY(dl_layer_add_param(l, "weight", 1, &c));
    DL_TRY(dl_layer_add_param(l, "bias", 1, &c));
    float *w = dl_f32(&l->params[0].value);
    for (int64_t i = 0; i < c; i++) w[i] = 1.0f;
  }
  if (l->desc.track_running_stats) {
    DL_TRY(dl_layer_add_buffer(l, "running_mean", DL_F32, 1, &c));
    DL_TRY(dl_layer_add_buffer(l, "running_var", DL_F32, 1, &c));
    DL_TRY(dl_layer_add_buffer(l, "num_batches_tracked", DL_I64, 0, NULL));
    float *rv = dl_f32(&l->buffers[1].value);
    for (int64_t i = 0; i < c; i++) rv[i] = 1.0f;
  }
  return DL_OK;
}

/* ---- forward ---- */

typedef struct bn_fwd_job {
  bn_dims d;
  const float *x, *w, *b;
  float *y, *mean, *rstd;
  float *running_mean, *running_var; /* NULL without track_running_stats */
  double eps, momentum;
  bool batch_stats, update_running;
} bn_fwd_job;

/* Mean, then the sum of squared deviations from it (two passes, as
 * PyTorch's batch_norm_cpu_collect_stats); both rounded to float as
 * PyTorch stores them before use. */
static void bn_channel_stats(const bn_fwd_job *j, int64_t c, float *mean, float *var_sum) {
  const bn_dims d = j->d;
  double sum = 0.0;
  for (int64_t n = 0; n < d.n; n++) {
    const float *xc = j->x + (n * d.c + c) * d.s;
    for (int64_t i = 0; i < d.s; i++) sum += xc[i];
  }
  double m = sum / (double)(d.n * d.s), sq = 0.0;
  for (int64_t n = 0; n < d.n; n++) {
    const float *xc = j->x + (n * d.c + c) * d.s;
    for (int64_t i = 0; i < d.s; i++) sq += ((double)xc[i] - m) * ((double)xc[i] - m);
  }
  *mean = (float)m;
  *var_sum = (float)sq;
}

static void bn_channel_forward(const bn_fwd_job *j, int64_t c) {
  const bn_dims d = j->d;
  float mean, rstd;
  if (j->batch_stats) {
    float var_sum;
    double count = (double)(d.n * d.s);
    bn_channel_stats(j, c, &mean, &var_sum);
    rstd = (float)(1.0 / sqrt((double)var_sum / count + j->eps));
    if (j->update_running) {
      double m = j->momentum;
      j->running_mean[c] = (float)(m * mean + (1.0 - m) * j->running_mean[c]);
      j->running_var[c] = (float)(m * ((double)var_sum / (count - 1.0)) +
                                  (1.0 - m) * j->running_var[c]);
    }
  } else {
    mean = j->running_mean[c];
    rstd = 1.0f / sqrtf(j->running_var[c] + (float)j->eps);
  }
  j->mean[c] = mean;
  j->rstd[c] = rstd;
  /* y = x * scale + shift, PyTorch's linear form of (x - mean) * rstd * w + b */
  float scale = j->w ? rstd * j->w[c] : rstd;
  float shift = (j->b ? j->b[c] : 0.0f) - mean * scale;
  for (int64_t n = 0; n < d.n; n++) {
    const float *xc = j->x + (n * d.c + c) * d.s;
    float *yc = j->y + (n * d.c + c) * d.s;
    for (int64_t i = 0; i < d.s; i++) yc[i] = xc[i] * scale + shift;
  }
}

DL_AVX512_CLONES static void bn_forward_range(void *p, int64_t begin, int64_t end) {
  for (int64_t c = begin; c < end; c++) bn_channel_forward(p, c);
}

/* At least ~16k elements per chunk, so small layers stay on one thread. */
static int64_t bn_grain(const bn_dims *d) {
  int64_t per = d->n * d->s;
  return per >= 16384 ? 1 : 16384 / (per > 0 ? per : 1);
}

static dl_status bn_forward(dl_layer *l, const dl_ctx *ctx, const dl_tensor *x, dl_tensor *y) {
  char name[128], shape[96];
  bn_dims d;
  DL_TRY(bn_dims_of(l, x, "input", &d));
  bool batch_stats = bn_uses_batch_stats(l);
  if (batch_stats && d.n * d.s <= 1)
    return dl_fail(DL_ERR_INVALID,
                   "%s: Expected more than 1 value per channel when training, got input "
                   "size %s; use a batch of at least 2 or put the layer in eval mode",
                   dl_layer_label(l, name, sizeof name),
                   dl_tensor_describe(x, shape, sizeof shape));
  dl_tensor_free(&l->saved[0]);
  dl_tensor_free(&l->saved[1]);
  dl_tensor mean = {0}, rstd = {0};
  dl_status s = dl_tensor_f32(&mean, 1, d.c, 0, 0, 0, "batchnorm saved mean");
  if (s == DL_OK) s = dl_tensor_f32(&rstd, 1, d.c, 0, 0, 0, "batchnorm saved rstd");
  if (s == DL_OK) s = dl_tensor_alloc_uninit(y, DL_F32, x->ndim, x->shape, "batchnorm output");
  if (s != DL_OK) {
    dl_tensor_free(&mean);
    dl_tensor_free(&rstd);
    return dl_fail_context(s, "%s: ", dl_layer_label(l, name, sizeof name));
  }
  bool track = l->desc.track_running_stats;
  bn_fwd_job job = {.d = d,
                    .x = dl_f32(x),
                    .w = bn_weight(l),
                    .b = bn_bias(l),
                    .y = dl_f32(y),
                    .mean = dl_f32(&mean),
                    .rstd = dl_f32(&rstd),
                    .running_mean = track ? dl_f32(&l->buffers[0].value) : NULL,
                    .running_var = track ? dl_f32(&l->buffers[1].value) : NULL,
                    .eps = l->desc.eps,
                    .momentum = l->desc.momentum,
                    .batch_stats = batch_stats,
                    .update_running = track && l->training};
  dl_parallel_for(d.c, bn_grain(&d), bn_forward_range, &job);
  if (track && l->training) ((int64_t *)l->buffers[2].value.data)[0] += 1;
  dl_layer_keep_saved(l, ctx, &mean, &rstd);
  return DL_OK;
}

/* ---- backward ---- */

typedef struct bn_bwd_job {
  bn_dims d;
  const float *x, *dy, *w, *mean, *rstd;
  float *dx, *dw, *db; /* dx NULL: not wanted; dw, db NULL without affine */
  bool batch_stats;
} bn_bwd_job;

/* Training: dx = (dy - mean(dy) - (x - mean) * k) * rstd * w with
 * k = sum((x - mean) * dy) * rstd^2 / count, the gradient through the batch
 * mean and variance (PyTorch's batch_norm_cpu_backward). Eval: the
 * statistics are constants, dx = dy * rstd * w. */
static void bn_channel_backward(const bn_bwd_job *j, int64_t c) {
  const bn_dims d = j->d;
  const float mean = j->mean[c], rstd = j->rstd[c];
  double sum_dy = 0.0, dotp = 0.0;
  for (int64_t n = 0; n < d.n; n++) {
    const int64_t o = (n * d.c + c) * d.s;
    for (int64_t i = 0; i < d.s; i++) {
      sum_dy += j->dy[o + i];
      dotp += (double)(j->x[o + i] - mean) * j->dy[o + i];
    }
  }
  if (j->dw) j->dw[c] = (float)(dotp * rstd);
  if (j->db) j->db[c] = (float)sum_dy;
  if (!j->dx) return;
  const float w = j->w ? j->w[c] : 1.0f;
  const double count = (double)(d.n * d.s);
  const float k = (float)(dotp * rstd * rstd / count);
  const float grad_mean = (float)(sum_dy / count);
  for (int64_t n = 0; n < d.n; n++) {
    const int64_t o = (n * d.c + c) * d.s;
    for (int64_t i = 0; i < d.s; i++) {
      float g = j->dy[o + i];
      if (j->batch_stats) g = g - grad_mean - (j->x[o + i] - mean) * k;
      j->dx[o + i] = g * rstd * w;
    }
  }
}

DL_AVX512_CLONES static void bn_backward_range(void *p, int64_t begin, int64_t end) {
  for (int64_t c = begin; c < end; c++) bn_channel_backward(p, c);
}

static dl_status bn_backward(dl_layer *l, const dl_ctx *ctx, const dl_tensor *x, const dl_tensor *y,
                             const dl_tensor *dy, dl_tensor *dx) {
  (void)ctx;
  (void)y;
  char name[128];
  bn_dims d;
  DL_TRY(bn_dims_of(l, x, "input", &d));
  DL_TRY(dl_layer_check_dy(l, dy, x));
  if (dl_tensor_empty(&l->saved[0]) || l->saved[0].numel != d.c)
    return dl_fail(DL_ERR_INVALID,
                   "%s: backward without a grad-mode forward; run forward with "
                   "grad_enabled first",
                   dl_layer_label(l, name, sizeof name));
  bool want_w = l->desc.affine && l->params[0].requires_grad;
  bool want_b = l->desc.affine && l->params[1].requires_grad;
  float *grads = NULL;
  if (want_w || want_b) {
    grads = dl_mem_alloc(2 * (size_t)d.c * sizeof(float), "batchnorm weight/bias gradients");
    if (!grads) return dl_fail_context(DL_ERR_NOMEM, "%s: ", dl_layer_label(l, name, sizeof name));
  }
  if (dx) {
    dl_status s = dl_tensor_alloc_uninit(dx, DL_F32, x->ndim, x->shape, "batchnorm input gradient");
    if (s != DL_OK) {
      dl_mem_free(grads);
      return dl_fail_context(s, "%s: ", dl_layer_label(l, name, sizeof name));
    }
  }
  bn_bwd_job job = {.d = d,
                    .x = dl_f32(x),
                    .dy = dl_f32(dy),
                    .w = bn_weight(l),
                    .mean = dl_f32(&l->saved[0]),
                    .rstd = dl_f32(&l->saved[1]),
                    .dx = dx ? dl_f32(dx) : NULL,
                    .dw = want_w ? grads : NULL,
                    .db = want_b ? grads + d.c : NULL,
                    .batch_stats = bn_uses_batch_stats(l)};
  dl_parallel_for(d.c, bn_grain(&d), bn_backward_range, &job);
  if (want_w) dl_param_accumulate(&l->params[0], job.dw);
  if (want_b) dl_param_accumulate(&l->params[1], job.db);
  dl_mem_free(grads);
  return DL_OK;
}

dl_status dl_batchnorm_check(const char *label, const dl_layer_desc *d) {
  return dl_layer_check_norm(label, d, true);
}

const dl_layer_ops dl_batchnorm_ops = {.forward = bn_forward, .backward = bn_backward};
