/* Flatten: [N, ...] -> [N, prod(...)] (nn.Flatten, start_dim 1). PyTorch
 * returns a view; tensors here own their bytes, so y is a copy (into
 * memory not zeroed first: the copy writes every byte). */
#include "kinds.h"

#include "half.h"

#include <string.h>

static dl_status flatten_forward(dl_layer *l, const dl_ctx *ctx, const dl_tensor *x, dl_tensor *y) {
  (void)l;
  if (x->dtype != DL_F32 || x->ndim < 2) {
    char a[96];
    return dl_fail(DL_ERR_INVALID, "input %s: expected [N, ...] float32 of rank >= 2",
                   dl_tensor_describe(x, a, sizeof a));
  }
  int64_t features = 1;
  for (int i = 1; i < x->ndim; i++) features *= x->shape[i];
  DL_TRY(dl_tensor_alloc_uninit(y, DL_F32, 2, (const int64_t[]){x->shape[0], features},
                                "flatten output"));
  if (x->numel) memcpy(dl_f32(y), dl_f32(x), dl_tensor_bytes(x));
  dl_round_inplace(dl_f32(y), y->numel, (int)ctx->autocast);
  return DL_OK;
}

static dl_status flatten_backward(dl_layer *l, const dl_ctx *ctx, const dl_tensor *x,
                                  const dl_tensor *y, const dl_tensor *dy, dl_tensor *dx) {
  (void)ctx, (void)y;
  if (!dx) return DL_OK;
  if (dy->dtype != DL_F32 || dy->numel != x->numel) {
    char name[128], a[96], b[96];
    return dl_fail(DL_ERR_INVALID,
                   "%s: output gradient %s does not have the input %s's %lld floats",
                   dl_layer_label(l, name, sizeof name), dl_tensor_describe(dy, a, sizeof a),
                   dl_tensor_describe(x, b, sizeof b), (long long)x->numel);
  }
  DL_TRY(dl_tensor_alloc_uninit(dx, DL_F32, x->ndim, x->shape, "flatten input gradient"));
  if (dy->numel) memcpy(dl_f32(dx), dl_f32(dy), dl_tensor_bytes(dy));
  return DL_OK;
}

const dl_layer_ops dl_flatten_ops = {flatten_forward, flatten_backward};
