/* Flatten: [N, ...] -> [N, prod(...)] (nn.Flatten, start_dim 1). PyTorch
 * returns a view; tensors here own their bytes, so y is a copy (into
 * memory not zeroed first: the copy writes every byte). */
#include "nn/kinds/kinds.h"

#include "numerics/half.h"

#include <string.h>

/* y's shape, [N, prod(...)], for an input of rank >= 2. */
static dl_status flat_shape(const dl_tensor *x, int64_t shape[2]) {
  if (x->dtype != DL_F32 || x->ndim < 2) {
    char a[96];
    return dl_fail(DL_ERR_INVALID, "input %s: expected [N, ...] float32 of rank >= 2",
                   dl_tensor_describe(x, a, sizeof a));
  }
  shape[0] = x->shape[0];
  shape[1] = 1;
  for (int i = 1; i < x->ndim; i++) shape[1] *= x->shape[i];
  return DL_OK;
}

static dl_status flatten_forward(dl_layer *l, const dl_ctx *ctx, const dl_tensor *x, dl_tensor *y) {
  (void)l;
  int64_t shape[2];
  DL_TRY(flat_shape(x, shape));
  DL_TRY(dl_tensor_alloc_uninit(y, DL_F32, 2, shape, "flatten output"));
  if (x->numel) memcpy(dl_f32(y), dl_f32(x), dl_tensor_bytes(x));
  dl_round_inplace(dl_f32(y), y->numel, (int)ctx->autocast);
  return DL_OK;
}

static dl_status flatten_backward(dl_layer *l, const dl_ctx *ctx, const dl_tensor *x,
                                  const dl_tensor *y, const dl_tensor *dy, dl_tensor *dx) {
  (void)ctx, (void)y;
  if (!dx) return DL_OK;
  int64_t shape[2];
  DL_TRY(flat_shape(x, shape));
  DL_TRY(dl_layer_check_dy_shape(l, dy, 2, shape));
  DL_TRY(dl_tensor_alloc_uninit(dx, DL_F32, x->ndim, x->shape, "flatten input gradient"));
  if (dy->numel) memcpy(dl_f32(dx), dl_f32(dy), dl_tensor_bytes(dy));
  return DL_OK;
}

const dl_layer_ops dl_flatten_ops = {.forward = flatten_forward, .backward = flatten_backward};
