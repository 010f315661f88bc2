/* Embedding: int32 ids [N] or [N, T] -> rows of W [num_embeddings, dim],
 * y [..., dim]. No padding_idx or max_norm. The ids need no gradient; dW
 * adds dy rows into W's rows in position order, so repeated ids
 * accumulate in a fixed order. */
#include "nn/kinds/kinds.h"

#include "numerics/philox.h"

#include <stdio.h>
#include <string.h>

dl_status dl_embedding_init(dl_layer *l, uint64_t seed) {
  DL_TRY(dl_layer_add_param(l, "weight", 2, (const int64_t[]){l->desc.in, l->desc.out}));
  dl_param *w = &l->params[0];
  dl_stream s = dl_param_init_stream(w, seed);
  dl_stream_normal(&s, 0, 0.0f, 1.0f, dl_f32(&w->value), w->value.numel);
  return DL_OK;
}

static dl_status check_ids(const dl_layer *l, const dl_tensor *x) {
  char a[96];
  if (x->dtype != DL_I32 || x->ndim < 1 || x->ndim > 2)
    return dl_fail(DL_ERR_INVALID, "input %s: expected int32 ids [N] or [N, T]",
                   dl_tensor_describe(x, a, sizeof a));
  const int32_t *ids = dl_i32(x);
  const int64_t cols = x->ndim == 2 ? x->shape[1] : 1;
  for (int64_t i = 0; i < x->numel; i++) {
    if (ids[i] >= 0 && ids[i] < l->desc.in) continue;
    if (x->ndim == 2)
      return dl_fail(DL_ERR_INVALID, "id %d at position [%lld, %lld] is outside [0, %lld)", ids[i],
                     (long long)(i / cols), (long long)(i % cols), (long long)l->desc.in);
    return dl_fail(DL_ERR_INVALID, "id %d at position [%lld] is outside [0, %lld)", ids[i],
                   (long long)i, (long long)l->desc.in);
  }
  return DL_OK;
}

/* The ids' shape with embedding_dim after it: y's and dy's. */
static void output_shape(const dl_layer *l, const dl_tensor *x, int64_t shape[DL_MAX_DIMS]) {
  memset(shape, 0, DL_MAX_DIMS * sizeof *shape);
  memcpy(shape, x->shape, (size_t)x->ndim * sizeof *shape);
  shape[x->ndim] = l->desc.out;
}

static dl_status embedding_forward(dl_layer *l, const dl_ctx *ctx, const dl_tensor *x,
                                   dl_tensor *y) {
  (void)ctx;
  DL_TRY(check_ids(l, x));
  const int64_t dim = l->desc.out;
  int64_t shape[DL_MAX_DIMS];
  output_shape(l, x, shape);
  DL_TRY(dl_tensor_alloc(y, DL_F32, x->ndim + 1, shape, "embedding output"));
  const float *w = dl_f32(&l->params[0].value);
  const int32_t *ids = dl_i32(x);
  float *yp = dl_f32(y);
  for (int64_t i = 0; i < x->numel; i++)
    memcpy(yp + i * dim, w + (int64_t)ids[i] * dim, (size_t)dim * sizeof *yp);
  return DL_OK;
}

static dl_status embedding_backward(dl_layer *l, const dl_ctx *ctx, const dl_tensor *x,
                                    const dl_tensor *y, const dl_tensor *dy, dl_tensor *dx) {
  (void)ctx, (void)y, (void)dx; /* ids are integers: no input gradient */
  dl_param *w = &l->params[0];
  if (!w->requires_grad) return DL_OK;
  DL_TRY(check_ids(l, x));
  int64_t shape[DL_MAX_DIMS];
  output_shape(l, x, shape);
  DL_TRY(dl_layer_check_dy_shape(l, dy, x->ndim + 1, shape));
  dl_tensor scratch = {0};
  float *g = dl_f32(&w->grad);
  if (w->has_grad) {
    DL_TRY(dl_tensor_alloc(&scratch, DL_F32, 2, w->grad.shape, w->name));
    g = dl_f32(&scratch);
  } else {
    dl_tensor_zero(&w->grad);
  }
  const int64_t dim = l->desc.out;
  const int32_t *ids = dl_i32(x);
  const float *dyp = dl_f32(dy);
  for (int64_t i = 0; i < x->numel; i++) {
    float *row = g + (int64_t)ids[i] * dim;
    for (int64_t k = 0; k < dim; k++) row[k] += dyp[i * dim + k];
  }
  if (scratch.data) dl_param_accumulate(w, g);
  w->has_grad = true;
  dl_tensor_free(&scratch);
  return DL_OK;
}

dl_status dl_embedding_check(const char *label, const dl_layer_desc *d) {
  DL_TRY(dl_layer_need_positive(label, "num_embeddings", d->in));
  return dl_layer_need_positive(label, "embedding_dim", d->out);
}

const dl_layer_ops dl_embedding_ops = {.forward = embedding_forward,
                                       .backward = embedding_backward};
