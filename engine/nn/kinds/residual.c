/* Residual block: y = x + body(x), dx = dy + body's dx. The body is a
 * sequence (dl_residual_init builds it) that keeps its own activations. Under
 * autocast the sum is rounded to half, like the outputs of the other
 * layers. */
#include "nn/kinds/kinds.h"

#include "numerics/cpu.h"
#include "numerics/half.h"
#include "core/mem.h"
#include "nn/seq.h"

#include <stdio.h>

DL_AVX512_CLONES static dl_status residual_forward(dl_layer *l, const dl_ctx *ctx,
                                                   const dl_tensor *x, dl_tensor *y) {
  const dl_tensor *fx;
  DL_TRY(dl_seq_forward(l->body, ctx, x, &fx));
  if (fx->dtype != DL_F32 || x->dtype != DL_F32 || !dl_tensor_same_shape(fx, x)) {
    char a[96], b[96];
    dl_fail(DL_ERR_INVALID, "body output %s does not match the block input %s",
            dl_tensor_describe(fx, a, sizeof a), dl_tensor_describe(x, b, sizeof b));
    dl_seq_release(l->body);
    return DL_ERR_INVALID;
  }
  dl_status s = dl_tensor_alloc_uninit(y, DL_F32, x->ndim, x->shape, "residual output");
  if (s != DL_OK) {
    dl_seq_release(l->body);
    return s;
  }
  const float *xp = dl_f32(x), *fp = dl_f32(fx);
  float *yp = dl_f32(y);
  for (int64_t i = 0; i < y->numel; i++) yp[i] = xp[i] + fp[i];
  dl_round_inplace(yp, y->numel, (int)ctx->autocast);
  return DL_OK;
}

DL_AVX512_CLONES static dl_status residual_backward(dl_layer *l, const dl_ctx *ctx,
                                                    const dl_tensor *x, const dl_tensor *y,
                                                    const dl_tensor *dy, dl_tensor *dx) {
  (void)x, (void)y;
  DL_TRY(dl_seq_backward(l->body, ctx, dy, dx));
  if (!dx) return DL_OK;
  float *dxp = dl_f32(dx);
  const float *dyp = dl_f32(dy);
  for (int64_t i = 0; i < dx->numel; i++) dxp[i] += dyp[i];
  dl_round_inplace(dxp, dx->numel, (int)ctx->autocast);
  return DL_OK;
}

dl_status dl_residual_check(const char *label, const dl_layer_desc *d) {
  if (d->nbody < 1 || !d->body)
    return dl_fail(DL_ERR_INVALID, "%s: the body needs at least one layer, got %d", label,
                   d->nbody);
  return DL_OK;
}

/* The body's layers take rng ids rng_id+1, rng_id+2, ... in order, so ids
 * stay distinct across the model (seq.c continues after the last one). */
dl_status dl_residual_init(dl_layer *l, uint64_t seed) {
  char prefix[DL_NAME_MAX];
  int n = snprintf(prefix, sizeof prefix, "%sbody.", l->prefix);
  if (n < 0 || (size_t)n >= sizeof prefix)
    return dl_fail(DL_ERR_INVALID, "residual %s: body name prefix is longer than %d", l->prefix,
                   DL_NAME_MAX - 1);
  l->body = dl_mem_alloc(sizeof *l->body, "residual body");
  if (!l->body) return DL_ERR_NOMEM;
  uint64_t next = l->rng_id + 1;
  return dl_seq_init(l->body, l->desc.body, l->desc.nbody, prefix, &next, seed);
}

static void residual_release(dl_layer *l) {
  if (l->body) dl_seq_release(l->body);
}

static void residual_destroy(dl_layer *l) {
  if (!l->body) return;
  dl_seq_destroy(l->body);
  dl_mem_free(l->body);
  l->body = NULL;
}

const dl_layer_ops dl_residual_ops = {.forward = residual_forward,
                                      .backward = residual_backward,
                                      .release = residual_release,
                                      .destroy = residual_destroy};
