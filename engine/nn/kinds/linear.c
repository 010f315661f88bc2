/* Linear: y = x W^T + b over the last dim, any leading dims (x [..., in],
 * W [out, in], b [out]). All products go through dl_sgemm, or the
 * context's backend (backend.h).
 *
 * AMP emulation (autocast f16/bf16): the GEMM operands (x, W, b, and dy in
 * backward) are rounded to half on copies, accumulation stays float32, and
 * y, dx, dW, db are rounded to half, as CUDA autocast's half GEMMs do. */
#include "nn/kinds/kinds.h"
#include "numerics/sums.h"

#include "backend/cpu/sgemm.h"
#include "numerics/half.h"
#include "core/mem.h"
#include "numerics/philox.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

dl_status dl_linear_init(dl_layer *l, uint64_t seed) {
  const dl_layer_desc *d = &l->desc;
  DL_TRY(dl_layer_add_param(l, "weight", 2, (const int64_t[]){d->out, d->in}));
  if (d->bias) DL_TRY(dl_layer_add_param(l, "bias", 1, (const int64_t[]){d->out}));
  /* kaiming_uniform_(a=sqrt(5)) and the bias rule both give U(-b, b),
   * b = 1/sqrt(fan_in). */
  float bound = (float)(1.0 / sqrt((double)d->in));
  dl_layer_init_uniform(l, seed, bound);
  return DL_OK;
}

static dl_status check_input(const dl_layer *l, const dl_tensor *x) {
  if (x->dtype == DL_F32 && x->ndim >= 1 && x->shape[x->ndim - 1] == l->desc.in) return DL_OK;
  char a[96];
  return dl_fail(DL_ERR_INVALID,
                 "input %s does not match in_features %lld: expected [..., %lld] float32",
                 dl_tensor_describe(x, a, sizeof a), (long long)l->desc.in, (long long)l->desc.in);
}

/* A half-rounded copy of src under autocast; src itself otherwise. */
static dl_status amp_operand(const dl_ctx *ctx, const dl_tensor *src, dl_tensor *copy,
                             const float **out) {
  *out = dl_f32(src);
  if (ctx->autocast == DL_F32) return DL_OK;
  DL_TRY(dl_tensor_clone(copy, src, "autocast operand"));
  dl_round_inplace(dl_f32(copy), copy->numel, (int)ctx->autocast);
  *out = dl_f32(copy);
  return DL_OK;
}

/* x's shape with out_features last: y's and dy's. */
static void output_shape(const dl_layer *l, const dl_tensor *x, int64_t shape[DL_MAX_DIMS]) {
  memcpy(shape, x->shape, DL_MAX_DIMS * sizeof *shape);
  shape[x->ndim - 1] = l->desc.out;
}

static dl_status linear_forward(dl_layer *l, const dl_ctx *ctx, const dl_tensor *x, dl_tensor *y) {
  DL_TRY(check_input(l, x));
  const int64_t in = l->desc.in, out = l->desc.out, rows = x->numel / in;
  int64_t shape[DL_MAX_DIMS];
  output_shape(l, x, shape);
  DL_TRY(dl_tensor_alloc_uninit(y, DL_F32, x->ndim, shape, "linear output"));
  dl_tensor xh = {0}, wh = {0}, bh = {0};
  const float *xp, *wp, *bp = NULL;
  dl_status s = amp_operand(ctx, x, &xh, &xp);
  if (s == DL_OK) s = amp_operand(ctx, &l->params[0].value, &wh, &wp);
  if (s == DL_OK && l->desc.bias) s = amp_operand(ctx, &l->params[1].value, &bh, &bp);
  if (s == DL_OK) s = dl_layer_affine_forward(ctx, xp, wp, bp, rows, in, out, dl_f32(y));
  dl_tensor_free(&xh);
  dl_tensor_free(&wh);
  dl_tensor_free(&bh);
  if (s != DL_OK) dl_tensor_free(y);
  return s;
}

/* dW = dy^T x over all rows (one GEMM, rows in order). */
static dl_status weight_grad(const dl_ctx *ctx, dl_param *w, const float *dyp, const float *xp,
                             int64_t rows, int64_t out, int64_t in) {
  if (!w->requires_grad) return DL_OK;
  dl_tensor scratch = {0};
  float *g;
  DL_TRY(dl_param_grad_target(w, &scratch, &g));
  dl_status s = dl_backend_sgemm(ctx->backend, true, false, out, in, rows, dyp, out, xp, in, 0.0f,
                                 g, in);
  if (s != DL_OK) {
    dl_tensor_free(&scratch);
    return s;
  }
  dl_param_grad_commit(w, g, &scratch, (int)ctx->autocast);
  dl_tensor_free(&scratch);
  return DL_OK;
}

/* db = sum of dy over rows, in row order. */
static dl_status bias_grad(const dl_ctx *ctx, dl_param *b, const float *dyp, int64_t rows,
                           int64_t out) {
  if (!b->requires_grad) return DL_OK;
  dl_tensor scratch = {0};
  float *g;
  DL_TRY(dl_param_grad_target(b, &scratch, &g));
  dl_sum_rows(dyp, rows, out, out, g);
  dl_param_grad_commit(b, g, &scratch, (int)ctx->autocast);
  dl_tensor_free(&scratch);
  return DL_OK;
}

static dl_status linear_backward(dl_layer *l, const dl_ctx *ctx, const dl_tensor *x,
                                 const dl_tensor *y, const dl_tensor *dy, dl_tensor *dx) {
  (void)y;
  DL_TRY(check_input(l, x));
  int64_t shape[DL_MAX_DIMS];
  output_shape(l, x, shape);
  DL_TRY(dl_layer_check_dy_shape(l, dy, x->ndim, shape));
  const int64_t in = l->desc.in, out = l->desc.out, rows = x->numel / in;
  dl_tensor dyh = {0}, xh = {0}, wh = {0};
  const float *dyp, *xp, *wp;
  dl_status s = amp_operand(ctx, dy, &dyh, &dyp);
  if (s == DL_OK) s = amp_operand(ctx, x, &xh, &xp);
  if (s == DL_OK) s = amp_operand(ctx, &l->params[0].value, &wh, &wp);
  if (s == DL_OK && dx) {
    s = dl_tensor_alloc_uninit(dx, DL_F32, x->ndim, x->shape, "linear input gradient");
    if (s == DL_OK)
      s = dl_backend_sgemm(ctx->backend, false, false, rows, in, out, dyp, out, wp, in, 0.0f,
                           dl_f32(dx), in);
    if (s == DL_OK) dl_round_inplace(dl_f32(dx), dx->numel, (int)ctx->autocast);
  }
  if (s == DL_OK) s = weight_grad(ctx, &l->params[0], dyp, xp, rows, out, in);
  if (s == DL_OK && l->desc.bias) s = bias_grad(ctx, &l->params[1], dyp, rows, out);
  dl_tensor_free(&dyh);
  dl_tensor_free(&xh);
  dl_tensor_free(&wh);
  if (s != DL_OK && dx) dl_tensor_free(dx);
  return s;
}

dl_status dl_linear_check(const char *label, const dl_layer_desc *d) {
  DL_TRY(dl_layer_need_positive(label, "in_features", d->in));
  return dl_layer_need_positive(label, "out_features", d->out);
}

const dl_layer_ops dl_linear_ops = {.forward = linear_forward, .backward = linear_backward};
