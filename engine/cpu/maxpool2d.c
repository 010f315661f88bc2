/* MaxPool2d over NCHW planes: square kernel, stride (0 = kernel), implicit
 * -inf padding, floor output size. As PyTorch's CPU kernel: the first
 * maximum in row-major window order wins ties, NaN wins over numbers. The
 * argmax (flat index h*W + w in the plane) is kept as int32 for backward. */
#include "kinds.h"

#include "half.h"
#include "threads.h"

#include <math.h>

typedef struct pool_geom {
  int64_t h, w, oh, ow;
  int k, stride, pad;
} pool_geom;

typedef struct pool_job {
  pool_geom g;
  const float *x;
  float *y;
  int32_t *argmax; /* NULL when nothing is kept for backward */
  const float *dy;
  float *dx;
} pool_job;

static float pool_window(const pool_geom *g, const float *x, int64_t oh, int64_t ow,
                         int32_t *at) {
  int64_t h0 = oh * g->stride - g->pad, w0 = ow * g->stride - g->pad;
  int64_t h1 = h0 + g->k < g->h ? h0 + g->k : g->h;
  int64_t w1 = w0 + g->k < g->w ? w0 + g->k : g->w;
  if (h0 < 0) h0 = 0;
  if (w0 < 0) w0 = 0;
  float best = -INFINITY;
  int64_t where = h0 * g->w + w0;
  for (int64_t h = h0; h < h1; h++) {
    for (int64_t w = w0; w < w1; w++) {
      float v = x[h * g->w + w];
      if (v > best || isnan(v)) {
        best = v;
        where = h * g->w + w;
      }
    }
  }
  *at = (int32_t)where;
  return best;
}

static void pool_forward_planes(void *ctx, int64_t begin, int64_t end) {
  const pool_job *j = ctx;
  const pool_geom *g = &j->g;
  const int64_t in_plane = g->h * g->w, out_plane = g->oh * g->ow;
  for (int64_t p = begin; p < end; p++) {
    const float *x = j->x + p * in_plane;
    float *y = j->y + p * out_plane;
    for (int64_t oh = 0; oh < g->oh; oh++) {
      for (int64_t ow = 0; ow < g->ow; ow++) {
        int32_t at;
        y[oh * g->ow + ow] = pool_window(g, x, oh, ow, &at);
        if (j->argmax) j->argmax[p * out_plane + oh * g->ow + ow] = at;
      }
    }
  }
}

/* Overlapping windows may share an argmax: their gradients add in output
 * order, within the one thread that owns the plane. */
static void pool_backward_planes(void *ctx, int64_t begin, int64_t end) {
  const pool_job *j = ctx;
  const int64_t in_plane = j->g.h * j->g.w, out_plane = j->g.oh * j->g.ow;
  for (int64_t p = begin; p < end; p++) {
    float *dx = j->dx + p * in_plane;
    const float *dy = j->dy + p * out_plane;
    const int32_t *at = j->argmax + p * out_plane;
    for (int64_t o = 0; o < out_plane; o++) dx[at[o]] += dy[o];
  }
}

static dl_status pool_geometry(const dl_layer *l, const dl_tensor *x, pool_geom *g) {
  const dl_layer_desc *d = &l->desc;
  g->k = d->kernel;
  g->stride = d->stride > 0 ? d->stride : d->kernel;
  g->pad = d->padding;
  char a[96];
  if (x->dtype != DL_F32 || x->ndim != 4)
    return dl_fail(DL_ERR_INVALID, "input %s: expected [N, C, H, W] float32",
                   dl_tensor_describe(x, a, sizeof a));
  g->h = x->shape[2];
  g->w = x->shape[3];
  if (g->h + 2 * g->pad < g->k || g->w + 2 * g->pad < g->k)
    return dl_fail(DL_ERR_INVALID, "input %s is smaller than kernel %d with padding %d",
                   dl_tensor_describe(x, a, sizeof a), g->k, g->pad);
  if (g->h * g->w > INT32_MAX)
    return dl_fail(DL_ERR_INVALID, "input %s: plane too large for int32 indices",
                   dl_tensor_describe(x, a, sizeof a));
  g->oh = (g->h + 2 * g->pad - g->k) / g->stride + 1;
  g->ow = (g->w + 2 * g->pad - g->k) / g->stride + 1;
  return DL_OK;
}

static int64_t pool_grain(const pool_geom *g) {
  int64_t work = g->oh * g->ow * g->k * g->k;
  return work >= 16384 ? 1 : 16384 / (work + 1) + 1;
}

static dl_status maxpool_forward(dl_layer *l, const dl_ctx *ctx, const dl_tensor *x,
                                 dl_tensor *y) {
  pool_job j = {0};
  DL_TRY(pool_geometry(l, x, &j.g));
  const int64_t shape[4] = {x->shape[0], x->shape[1], j.g.oh, j.g.ow};
  DL_TRY(dl_tensor_alloc(y, DL_F32, 4, shape, "maxpool2d output"));
  dl_tensor_free(&l->saved[0]);
  if (ctx->grad_enabled) {
    dl_status s = dl_tensor_alloc(&l->saved[0], DL_I32, 4, shape, "maxpool2d argmax");
    if (s != DL_OK) {
      dl_tensor_free(y);
      return s;
    }
    j.argmax = dl_i32(&l->saved[0]);
  }
  j.x = dl_f32(x);
  j.y = dl_f32(y);
  dl_parallel_for(shape[0] * shape[1], pool_grain(&j.g), pool_forward_planes, &j);
  dl_round_inplace(dl_f32(y), y->numel, (int)ctx->autocast);
  return DL_OK;
}

static dl_status maxpool_backward(dl_layer *l, const dl_ctx *ctx, const dl_tensor *x,
                                  const dl_tensor *y, const dl_tensor *dy, dl_tensor *dx) {
  (void)y;
  if (!dx) return DL_OK;
  if (dl_tensor_empty(&l->saved[0]) || l->saved[0].numel != dy->numel)
    return dl_fail(DL_ERR_INVALID, "backward without a grad-mode forward (no argmax kept)");
  pool_job j = {0};
  DL_TRY(pool_geometry(l, x, &j.g));
  DL_TRY(dl_tensor_alloc(dx, DL_F32, 4, x->shape, "maxpool2d input gradient"));
  j.argmax = dl_i32(&l->saved[0]);
  j.dy = dl_f32(dy);
  j.dx = dl_f32(dx);
  dl_parallel_for(x->shape[0] * x->shape[1], pool_grain(&j.g), pool_backward_planes, &j);
  dl_round_inplace(dl_f32(dx), dx->numel, (int)ctx->autocast);
  return DL_OK;
}

const dl_layer_ops dl_maxpool2d_ops = {maxpool_forward, maxpool_backward};
