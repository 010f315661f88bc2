/* Dropout with inverted scaling: in training y = x * keep / (1 - p).
 *
 * Determinism rule 1: the mask of batch row r comes from its own stream
 * (seed, "dropout", {layer rng_id, step, global sample id}), so a sample
 * gets the same mask whatever batch, row, thread or rank it lands on.
 * Element j of a row of F = numel / N features is kept iff word j of the
 * stream, as a uniform in [0, 1), is below 1 - p. The PyTorch conformance
 * script reimplements exactly this in numpy. A backend that makes dropout
 * masks (backend.h; the CUDA one with the device Philox) makes the same. */
#include "nn/kinds/kinds.h"

#include "numerics/cpu.h"
#include "numerics/half.h"
#include "core/mem.h"
#include "numerics/philox.h"
#include "core/threads.h"

#include <stdio.h>
#include <string.h>

static dl_status dropout_check(const dl_layer *l, const dl_tensor *x, const char *what) {
  char name[128], shape[96];
  float p = l->desc.p;
  if (!(p >= 0.0f && p <= 1.0f))
    return dl_fail(DL_ERR_INVALID, "%s: dropout probability has to be between 0 and 1, but got %g",
                   dl_layer_label(l, name, sizeof name), (double)p);
  if (x->dtype != DL_F32 || x->ndim < 1)
    return dl_fail(DL_ERR_INVALID, "%s: %s is %s; expected float32 [N, ...]",
                   dl_layer_label(l, name, sizeof name), what,
                   dl_tensor_describe(x, shape, sizeof shape));
  return DL_OK;
}

/* Identity in eval mode and for p = 0, as PyTorch. */
static bool dropout_active(const dl_layer *l) { return l->training && l->desc.p > 0.0f; }

typedef struct dropout_job {
  const dl_layer *l;
  const dl_ctx *ctx;
  int64_t features;
  const float *x;
  float *y, *mask; /* mask: 1/(1-p) where kept, 0 where dropped */
  uint8_t *keep;   /* scratch, one byte per element */
} dropout_job;

/* Row r's stream: (seed, "dropout", {layer, step, global sample id}). */
static dl_stream row_stream(const dropout_job *j, int64_t r) {
  int64_t sample = j->ctx->sample_ids ? j->ctx->sample_ids[r] : r;
  uint64_t idx[3] = {j->l->rng_id, (uint64_t)j->ctx->step, (uint64_t)sample};
  return dl_stream_make(j->ctx->seed, "dropout", idx, 3);
}

DL_AVX512_CLONES static void dropout_rows(void *p, int64_t begin, int64_t end) {
  const dropout_job *j = p;
  const float keep_prob = 1.0f - j->l->desc.p;
  const float scale = 1.0f / keep_prob;
  for (int64_t r = begin; r < end; r++) {
    dl_stream stream = row_stream(j, r);
    const int64_t o = r * j->features;
    dl_stream_bernoulli(&stream, 0, keep_prob, j->keep + o, j->features);
    for (int64_t i = o; i < o + j->features; i++) {
      /* a multiply, not a select: x = inf or NaN at a dropped place gives
       * NaN, as PyTorch's input * noise does */
      j->mask[i] = j->keep[i] ? scale : 0.0f;
      j->y[i] = j->x[i] * j->mask[i];
    }
  }
}

/* The masks from the context's backend (one stream per row), then
 * y = x * mask here: the same masks as dropout_rows, bit for bit. */
static dl_status offload_masks(const dropout_job *j, int64_t rows) {
  const dl_backend *b = j->ctx->backend;
  dl_stream *streams = dl_mem_alloc_uninit((size_t)(rows ? rows : 1) * sizeof *streams,
                                           "dropout streams");
  if (!streams) return DL_ERR_NOMEM;
  for (int64_t r = 0; r < rows; r++) streams[r] = row_stream(j, r);
  const float keep_prob = 1.0f - j->l->desc.p;
  dl_status s = b->dropout_mask(b->impl, streams, rows, j->features, keep_prob, 1.0f / keep_prob,
                                j->mask);
  dl_mem_free(streams);
  DL_TRY(s);
  for (int64_t i = 0; i < rows * j->features; i++) j->y[i] = j->x[i] * j->mask[i];
  return DL_OK;
}

static dl_status dropout_forward(dl_layer *l, const dl_ctx *ctx, const dl_tensor *x, dl_tensor *y) {
  char name[128];
  DL_TRY(dropout_check(l, x, "input"));
  dl_tensor_free(&l->saved[0]);
  dl_status s = dl_tensor_alloc_uninit(y, DL_F32, x->ndim, x->shape, "dropout output");
  if (s != DL_OK) return dl_fail_context(s, "%s: ", dl_layer_label(l, name, sizeof name));
  if (!dropout_active(l)) {
    memcpy(y->data, x->data, dl_tensor_bytes(x));
  } else {
    dl_tensor mask = {0};
    uint8_t *keep = NULL;
    const bool offload = ctx->backend && ctx->backend->dropout_mask;
    s = dl_tensor_alloc_uninit(&mask, DL_F32, x->ndim, x->shape, "dropout mask");
    if (s == DL_OK && !offload) {
      keep = dl_mem_alloc_uninit((size_t)x->numel, "dropout keep bytes");
      if (!keep) s = DL_ERR_NOMEM;
    }
    int64_t rows = x->shape[0];
    dropout_job job = {.l = l,
                       .ctx = ctx,
                       .features = rows ? x->numel / rows : 0,
                       .x = dl_f32(x),
                       .y = dl_f32(y),
                       .mask = dl_f32(&mask),
                       .keep = keep};
    if (s == DL_OK && offload) s = offload_masks(&job, rows);
    else if (s == DL_OK) dl_parallel_for(rows, 1, dropout_rows, &job);
    dl_mem_free(keep);
    if (s != DL_OK) {
      dl_tensor_free(&mask);
      dl_tensor_free(y);
      return dl_fail_context(s, "%s: ", dl_layer_label(l, name, sizeof name));
    }
    if (ctx->grad_enabled) l->saved[0] = mask;
    else dl_tensor_free(&mask);
  }
  /* autocast runs dropout in the half dtype of its input */
  dl_round_inplace(dl_f32(y), y->numel, (int)ctx->autocast);
  return DL_OK;
}

static dl_status dropout_backward(dl_layer *l, const dl_ctx *ctx, const dl_tensor *x,
                                  const dl_tensor *y, const dl_tensor *dy, dl_tensor *dx) {
  (void)ctx;
  (void)y;
  char name[128];
  DL_TRY(dropout_check(l, x, "input"));
  DL_TRY(dl_layer_check_dy(l, dy, x));
  bool active = dropout_active(l);
  if (active && (dl_tensor_empty(&l->saved[0]) || l->saved[0].numel != x->numel))
    return dl_fail(DL_ERR_INVALID,
                   "%s: backward without a grad-mode forward; run forward with "
                   "grad_enabled first",
                   dl_layer_label(l, name, sizeof name));
  if (!dx) return DL_OK;
  dl_status s = dl_tensor_alloc_uninit(dx, DL_F32, x->ndim, x->shape, "dropout input gradient");
  if (s != DL_OK) return dl_fail_context(s, "%s: ", dl_layer_label(l, name, sizeof name));
  const float *g = dl_f32(dy), *mask = active ? dl_f32(&l->saved[0]) : NULL;
  float *out = dl_f32(dx);
  for (int64_t i = 0; i < x->numel; i++) out[i] = mask ? g[i] * mask[i] : g[i];
  return DL_OK;
}

dl_status dl_dropout_check(const char *label, const dl_layer_desc *d) {
  if (!(d->p >= 0.0f && d->p < 1.0f))
    return dl_fail(DL_ERR_INVALID, "%s: p must be in [0, 1), got %g", label, (double)d->p);
  return DL_OK;
}

const dl_layer_ops dl_dropout_ops = {.forward = dropout_forward, .backward = dropout_backward};
