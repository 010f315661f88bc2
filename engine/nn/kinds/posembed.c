/* Learned positional embeddings: x [N, T, E] -> y = x + weight[:T], weight
 * [max_len, E] (prefix + "weight"): nn.Embedding(max_len, E) applied to
 * arange(T) and added, as GPT-2's wpe. A layer of its own after the token
 * embedding (rather than an embedding kind that also adds positions), so the
 * token and position tables keep separate PyTorch names ("0.weight",
 * "1.weight") and either works alone.
 *
 * dx = dy; dweight[t] = the sum over the batch of dy[n, t] in sample order
 * (rows t >= T get zero, as nn.Embedding's dense gradient). Under autocast
 * the sum stays float32: weight is float32, so torch's type promotion makes
 * x + weight float32 whatever x's dtype. */
#include "nn/kinds/kinds.h"

#include "core/mem.h"
#include "numerics/philox.h"

#include <stdio.h>
#include <string.h>

dl_status dl_posembed_check(const char *label, const dl_layer_desc *d) {
  DL_TRY(dl_layer_need_positive(label, "max_len", d->in));
  return dl_layer_need_positive(label, "embedding_dim", d->out);
}

dl_status dl_posembed_init(dl_layer *l, uint64_t seed) {
  DL_TRY(dl_layer_add_param(l, "weight", 2, (const int64_t[]){l->desc.in, l->desc.out}));
  dl_param *w = &l->params[0];
  dl_stream s = dl_param_init_stream(w, seed);
  dl_stream_normal(&s, 0, 0.0f, 1.0f, dl_f32(&w->value), w->value.numel); /* nn.Embedding */
  return DL_OK;
}

static dl_status check_seq(const dl_layer *l, const dl_tensor *x, const char *what) {
  char name[128], shape[96];
  if (x->dtype != DL_F32 || x->ndim != 3 || x->shape[2] != l->desc.out)
    return dl_fail(DL_ERR_INVALID, "%s: %s is %s; expected float32 [N, T, %lld]",
                   dl_layer_label(l, name, sizeof name), what,
                   dl_tensor_describe(x, shape, sizeof shape), (long long)l->desc.out);
  if (x->shape[1] > l->desc.in)
    return dl_fail(DL_ERR_INVALID,
                   "%s: sequence length %lld is longer than max_len %lld; raise max_len or "
                   "shorten the sequences",
                   dl_layer_label(l, name, sizeof name), (long long)x->shape[1],
                   (long long)l->desc.in);
  return DL_OK;
}

static dl_status posembed_forward(dl_layer *l, const dl_ctx *ctx, const dl_tensor *x,
                                  dl_tensor *y) {
  (void)ctx;
  char name[128];
  DL_TRY(check_seq(l, x, "input"));
  dl_status s = dl_tensor_alloc_uninit(y, DL_F32, 3, x->shape, "posembed output");
  if (s != DL_OK) return dl_fail_context(s, "%s: ", dl_layer_label(l, name, sizeof name));
  const int64_t n = x->shape[0], te = x->shape[1] * x->shape[2];
  const float *xp = dl_f32(x), *w = dl_f32(&l->params[0].value);
  float *yp = dl_f32(y);
  for (int64_t r = 0; r < n; r++)
    for (int64_t i = 0; i < te; i++) yp[r * te + i] = xp[r * te + i] + w[i];
  return DL_OK;
}

static dl_status posembed_backward(dl_layer *l, const dl_ctx *ctx, const dl_tensor *x,
                                   const dl_tensor *y, const dl_tensor *dy, dl_tensor *dx) {
  (void)ctx, (void)y;
  char name[128];
  DL_TRY(check_seq(l, x, "input"));
  DL_TRY(dl_layer_check_dy(l, dy, x));
  dl_param *w = &l->params[0];
  const int64_t n = x->shape[0], te = x->shape[1] * x->shape[2];
  const float *g = dl_f32(dy);
  dl_tensor scratch = {0};
  dl_status s = DL_OK;
  if (w->requires_grad) s = dl_tensor_alloc(&scratch, DL_F32, 2, w->grad.shape, w->name);
  if (s == DL_OK && dx)
    s = dl_tensor_alloc_uninit(dx, DL_F32, 3, x->shape, "posembed input gradient");
  if (s != DL_OK) {
    dl_tensor_free(&scratch);
    return dl_fail_context(s, "%s: ", dl_layer_label(l, name, sizeof name));
  }
  if (dx) memcpy(dx->data, dy->data, dl_tensor_bytes(dy));
  if (w->requires_grad) {
    float *gw = dl_f32(&scratch);
    for (int64_t r = 0; r < n; r++)
      for (int64_t i = 0; i < te; i++) gw[i] += g[r * te + i];
    dl_param_accumulate(w, gw);
    dl_tensor_free(&scratch);
  }
  return DL_OK;
}

const dl_layer_ops dl_posembed_ops = {.forward = posembed_forward, .backward = posembed_backward};
