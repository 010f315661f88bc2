/* dl_cuda_sum's order on the host: the definition its kernels follow
 * (kernels.h). Thread t of a block accumulates into lane t; the partials of
 * the slices are dealt to the lanes of the final block the same way, in
 * increasing slice order, so one pass over x needs no array of partials. */
#include "backend/cuda/kernels.h"

enum { LANES = DL_CUDA_SUM_THREADS };

/* lanes[t] += lanes[t + s] for s = LANES/2, ..., 1; the sum ends in lane 0. */
static float tree(float lanes[LANES]) {
  for (int stride = LANES / 2; stride > 0; stride /= 2)
    for (int t = 0; t < stride; t++) lanes[t] = lanes[t] + lanes[t + stride];
  return lanes[0];
}

static float slice_sum(const float *x, int64_t begin, int64_t end) {
  float lanes[LANES] = {0};
  for (int64_t i = begin; i < end; i++) {
    int t = (int)((i - begin) % LANES);
    lanes[t] = lanes[t] + x[i];
  }
  return tree(lanes);
}

float dl_cuda_sum_ref(const float *x, int64_t n) {
  float lanes[LANES] = {0};
  int64_t slice = 0;
  for (int64_t begin = 0; begin < n; begin += DL_CUDA_SUM_SLICE, slice++) {
    int64_t end = n - begin < DL_CUDA_SUM_SLICE ? n : begin + DL_CUDA_SUM_SLICE;
    int t = (int)(slice % LANES);
    lanes[t] = lanes[t] + slice_sum(x, begin, end);
  }
  return tree(lanes);
}
