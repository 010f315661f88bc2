/* Global average pooling: [N, C, H, W] -> [N, C], the mean of each plane
 * (nn.AdaptiveAvgPool2d(1) followed by flatten). Each plane is summed in
 * order by one thread. */
#include "nn/kinds/kinds.h"

#include "numerics/cpu.h"
#include "numerics/half.h"
#include "core/threads.h"

typedef struct gap_job {
  const float *src;
  float *dst;
  int64_t plane;
  float count;
} gap_job;

DL_AVX512_CLONES static void gap_mean_planes(void *ctx, int64_t begin, int64_t end) {
  const gap_job *j = ctx;
  for (int64_t p = begin; p < end; p++) {
    const float *x = j->src + p * j->plane;
    float sum = 0.0f;
    for (int64_t i = 0; i < j->plane; i++) sum += x[i];
    j->dst[p] = sum / j->count;
  }
}

DL_AVX512_CLONES static void gap_spread_planes(void *ctx, int64_t begin, int64_t end) {
  const gap_job *j = ctx;
  for (int64_t p = begin; p < end; p++) {
    float g = j->src[p] / j->count;
    float *dx = j->dst + p * j->plane;
    for (int64_t i = 0; i < j->plane; i++) dx[i] = g;
  }
}

/* Enough planes per chunk that a thread gets ~16k elements of work. */
static int64_t grain_for(int64_t plane) { return plane >= 16384 ? 1 : 16384 / (plane + 1) + 1; }

static dl_status gap_check_input(const dl_tensor *x) {
  if (x->dtype == DL_F32 && x->ndim == 4 && x->shape[2] * x->shape[3] != 0) return DL_OK;
  char a[96];
  return dl_fail(DL_ERR_INVALID, "input %s: expected [N, C, H, W] float32, H, W > 0",
                 dl_tensor_describe(x, a, sizeof a));
}

static dl_status gap_forward(dl_layer *l, const dl_ctx *ctx, const dl_tensor *x, dl_tensor *y) {
  (void)l;
  DL_TRY(gap_check_input(x));
  const int64_t planes = x->shape[0] * x->shape[1], plane = x->shape[2] * x->shape[3];
  DL_TRY(dl_tensor_f32(y, 2, x->shape[0], x->shape[1], 0, 0, "globalavgpool output"));
  gap_job j = {dl_f32(x), dl_f32(y), plane, (float)plane};
  dl_parallel_for(planes, grain_for(plane), gap_mean_planes, &j);
  dl_round_inplace(dl_f32(y), y->numel, (int)ctx->autocast);
  return DL_OK;
}

static dl_status gap_backward(dl_layer *l, const dl_ctx *ctx, const dl_tensor *x,
                              const dl_tensor *y, const dl_tensor *dy, dl_tensor *dx) {
  (void)y;
  if (!dx) return DL_OK;
  DL_TRY(gap_check_input(x));
  DL_TRY(dl_layer_check_dy_shape(l, dy, 2, (const int64_t[]){x->shape[0], x->shape[1]}));
  DL_TRY(dl_tensor_alloc(dx, DL_F32, 4, x->shape, "globalavgpool input gradient"));
  const int64_t plane = x->shape[2] * x->shape[3];
  gap_job j = {dl_f32(dy), dl_f32(dx), plane, (float)plane};
  dl_parallel_for(dy->numel, grain_for(plane), gap_spread_planes, &j);
  dl_round_inplace(dl_f32(dx), dx->numel, (int)ctx->autocast);
  return DL_OK;
}

const dl_layer_ops dl_globalavgpool_ops = {.forward = gap_forward, .backward = gap_backward};
