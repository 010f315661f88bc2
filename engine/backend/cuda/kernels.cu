// Kernels of the CUDA backend and their host wrappers (kernels.h). Each
// element function is __host__ __device__ where the host needs a twin, so
// the twin and the kernel run the very same code.
#include "backend/cuda/context.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/philox.cuh"

#include <stdint.h>

namespace {

constexpr int THREADS = 256;
constexpr int64_t MAX_BLOCKS = 1 << 20;

// Grid-stride loops make the grid size irrelevant to the result, so it is
// capped rather than made to cover n.
unsigned blocks_for(int64_t n) {
  int64_t b = (n + THREADS - 1) / THREADS;
  return (unsigned)(b < MAX_BLOCKS ? b : MAX_BLOCKS);
}

__device__ int64_t first_index() { return (int64_t)blockIdx.x * blockDim.x + threadIdx.x; }
__device__ int64_t grid_stride() { return (int64_t)gridDim.x * blockDim.x; }

dl_status launched(const char *kernel, int line) {
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return dl_cuda_fail(e, __FILE__, line, kernel);
  return DL_OK;
}
#define LAUNCHED(kernel) launched(#kernel "<<<>>>", __LINE__)

dl_status check_n(const char *op, int64_t n, bool pointers_ok) {
  if (n < 0) return dl_fail(DL_ERR_INVALID, "%s: n = %lld must be >= 0", op, (long long)n);
  if (n > 0 && !pointers_ok)
    return dl_fail(DL_ERR_INVALID, "%s: a NULL device pointer for %lld elements", op,
                   (long long)n);
  return DL_OK;
}

// ---- relu, bias, scale ----

__device__ float relu(float x) { return x < 0.0f ? 0.0f : x; }
__device__ float relu_grad(float dy, float y) { return y > 0.0f ? dy : 0.0f; }

__global__ void relu_forward_kernel(int64_t n, const float *x, float *y) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) y[i] = relu(x[i]);
}

__global__ void relu_backward_kernel(int64_t n, const float *dy, const float *y, float *dx) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) dx[i] = relu_grad(dy[i], y[i]);
}

__global__ void bias_add_kernel(int64_t n, int64_t cols, const float *bias, float *y) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) y[i] = y[i] + bias[i % cols];
}

__global__ void scale_kernel(int64_t n, float s, float *x) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) x[i] = x[i] * s;
}

// ---- optimizer steps: optim_elem.h's element code, shared with optim.c ----

__global__ void optim_kernel(dl_optim_coeffs c, int64_t n, float *w, const float *g, float *buf0,
                             float *buf1) {
  for (int64_t i = first_index(); i < n; i += grid_stride())
    dl_optim_elem(&c, i, w, g, buf0, buf1);
}

// ---- the sum ----

// The order of kernels.h: thread t adds x[begin + t + k*THREADS] for
// increasing k, then the lanes are added pairwise. Thread 0 gets the sum.
__device__ float block_sum(const float *x, int64_t begin, int64_t end) {
  __shared__ float lanes[DL_CUDA_SUM_THREADS];
  float acc = 0.0f;
  for (int64_t i = begin + threadIdx.x; i < end; i += DL_CUDA_SUM_THREADS) acc = acc + x[i];
  lanes[threadIdx.x] = acc;
  __syncthreads();
  for (unsigned stride = DL_CUDA_SUM_THREADS / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) lanes[threadIdx.x] = lanes[threadIdx.x] + lanes[threadIdx.x + stride];
    __syncthreads();
  }
  return lanes[0];
}

__global__ void __launch_bounds__(DL_CUDA_SUM_THREADS)
    sum_slices_kernel(int64_t n, const float *x, float *partials) {
  int64_t begin = (int64_t)blockIdx.x * DL_CUDA_SUM_SLICE;
  int64_t end = n - begin < DL_CUDA_SUM_SLICE ? n : begin + DL_CUDA_SUM_SLICE;
  float s = block_sum(x, begin, end);
  if (threadIdx.x == 0) partials[blockIdx.x] = s;
}

__global__ void __launch_bounds__(DL_CUDA_SUM_THREADS)
    sum_partials_kernel(int64_t nparts, const float *partials, float *out) {
  float s = block_sum(partials, 0, nparts);
  if (threadIdx.x == 0) *out = s;
}

// ---- Philox ----

__global__ void uniform_kernel(dl_stream s, uint64_t index, int64_t n, uint64_t first_block,
                               uint64_t nblocks, float *out) {
  for (int64_t t = first_index(); (uint64_t)t < nblocks; t += grid_stride())
    dl_cuda_philox::uniform_block(s, index, n, first_block + (uint64_t)t, out);
}

// ---- dropout masks ----

// Block `block` of row r's stream: mask = scale where the word's uniform is
// below keep_prob, else 0 (cpu/dropout.c's rule, dl_stream_bernoulli's
// comparison).
__host__ __device__ void dropout_block(const dl_stream &s, int64_t features, uint64_t block,
                                       float keep_prob, float scale, float *row_mask) {
  uint32_t words[4];
  dl_philox_stream_block(&s, block, words);
  for (unsigned lane = 0; lane < 4; lane++) {
    uint64_t j = block * 4 + lane;
    if (j < (uint64_t)features)
      row_mask[j] = dl_philox_uniform(words[lane]) < keep_prob ? scale : 0.0f;
  }
}

__global__ void dropout_mask_kernel(const dl_stream *streams, int64_t rows, int64_t features,
                                    uint64_t blocks_per_row, float keep_prob, float scale,
                                    float *mask) {
  const int64_t total = rows * (int64_t)blocks_per_row;
  for (int64_t t = first_index(); t < total; t += grid_stride()) {
    int64_t r = t / (int64_t)blocks_per_row;
    dropout_block(streams[r], features, (uint64_t)(t % (int64_t)blocks_per_row), keep_prob,
                  scale, mask + r * features);
  }
}

} // namespace

// ---- the API ----

extern "C" dl_status dl_cuda_relu_forward(dl_cuda *ctx, int64_t n, const float *x, float *y) {
  DL_TRY(check_n("dl_cuda_relu_forward", n, x && y));
  DL_TRY(dl_cuda_enter(ctx, "dl_cuda_relu_forward"));
  if (n == 0) return DL_OK;
  relu_forward_kernel<<<blocks_for(n), THREADS, 0, ctx->stream>>>(n, x, y);
  return LAUNCHED(relu_forward_kernel);
}

extern "C" dl_status dl_cuda_relu_backward(dl_cuda *ctx, int64_t n, const float *dy,
                                           const float *y, float *dx) {
  DL_TRY(check_n("dl_cuda_relu_backward", n, dy && y && dx));
  DL_TRY(dl_cuda_enter(ctx, "dl_cuda_relu_backward"));
  if (n == 0) return DL_OK;
  relu_backward_kernel<<<blocks_for(n), THREADS, 0, ctx->stream>>>(n, dy, y, dx);
  return LAUNCHED(relu_backward_kernel);
}

extern "C" dl_status dl_cuda_bias_add(dl_cuda *ctx, int64_t rows, int64_t cols,
                                      const float *bias, float *y) {
  if (rows < 0 || cols < 0 || (cols > 0 && rows > INT64_MAX / cols))
    return dl_fail(DL_ERR_INVALID, "dl_cuda_bias_add: bad shape [%lld, %lld]", (long long)rows,
                   (long long)cols);
  int64_t n = rows * cols;
  DL_TRY(check_n("dl_cuda_bias_add", n, bias && y));
  DL_TRY(dl_cuda_enter(ctx, "dl_cuda_bias_add"));
  if (n == 0) return DL_OK;
  bias_add_kernel<<<blocks_for(n), THREADS, 0, ctx->stream>>>(n, cols, bias, y);
  return LAUNCHED(bias_add_kernel);
}

extern "C" dl_status dl_cuda_scale(dl_cuda *ctx, int64_t n, float s, float *x) {
  DL_TRY(check_n("dl_cuda_scale", n, x != NULL));
  DL_TRY(dl_cuda_enter(ctx, "dl_cuda_scale"));
  if (n == 0) return DL_OK;
  scale_kernel<<<blocks_for(n), THREADS, 0, ctx->stream>>>(n, s, x);
  return LAUNCHED(scale_kernel);
}

extern "C" dl_status dl_cuda_optim_step(dl_cuda *ctx, const dl_optim_coeffs *c, int64_t n,
                                        float *w, const float *g, float *buf0, float *buf1) {
  if (!c) return dl_fail(DL_ERR_INVALID, "dl_cuda_optim_step: no coefficients");
  bool need0 = c->adam || c->use_mom, need1 = c->adam;
  DL_TRY(check_n("dl_cuda_optim_step", n, w && g && (buf0 || !need0) && (buf1 || !need1)));
  DL_TRY(dl_cuda_enter(ctx, "dl_cuda_optim_step"));
  if (n == 0) return DL_OK;
  optim_kernel<<<blocks_for(n), THREADS, 0, ctx->stream>>>(*c, n, w, g, buf0, buf1);
  return LAUNCHED(optim_kernel);
}

extern "C" dl_status dl_cuda_sum(dl_cuda *ctx, int64_t n, const float *x, float *out) {
  DL_TRY(check_n("dl_cuda_sum", n, x != NULL));
  if (!out) return dl_fail(DL_ERR_INVALID, "dl_cuda_sum: no device float for the result");
  int64_t nparts = (n + DL_CUDA_SUM_SLICE - 1) / DL_CUDA_SUM_SLICE;
  if (nparts > INT32_MAX)
    return dl_fail(DL_ERR_INVALID, "dl_cuda_sum: n = %lld is more than one launch can cover",
                   (long long)n);
  DL_TRY(dl_cuda_enter(ctx, "dl_cuda_sum"));
  float *partials = NULL;
  if (nparts > 0) {
    DL_TRY(dl_cuda_scratch(ctx, (size_t)nparts * sizeof(float), &partials));
    sum_slices_kernel<<<(unsigned)nparts, DL_CUDA_SUM_THREADS, 0, ctx->stream>>>(n, x, partials);
    DL_TRY(LAUNCHED(sum_slices_kernel));
  }
  sum_partials_kernel<<<1, DL_CUDA_SUM_THREADS, 0, ctx->stream>>>(nparts, partials, out);
  return LAUNCHED(sum_partials_kernel);
}

static dl_status check_uniform(const dl_stream *s, uint64_t index, float *out, int64_t n) {
  DL_TRY(check_n("dl_cuda_uniform", n, out != NULL));
  if (!s) return dl_fail(DL_ERR_INVALID, "dl_cuda_uniform: no stream");
  if (n > 0 && index > UINT64_MAX - (uint64_t)(n - 1))
    return dl_fail(DL_ERR_INVALID, "dl_cuda_uniform: words %llu + %lld pass 2^64",
                   (unsigned long long)index, (long long)n);
  return DL_OK;
}

extern "C" dl_status dl_cuda_uniform(dl_cuda *ctx, const dl_stream *s, uint64_t index,
                                     float *out, int64_t n) {
  DL_TRY(check_uniform(s, index, out, n));
  DL_TRY(dl_cuda_enter(ctx, "dl_cuda_uniform"));
  if (n == 0) return DL_OK;
  uint64_t first = index / 4, nblocks = (index + (uint64_t)(n - 1)) / 4 - first + 1;
  uniform_kernel<<<blocks_for((int64_t)nblocks), THREADS, 0, ctx->stream>>>(*s, index, n, first,
                                                                            nblocks, out);
  return LAUNCHED(uniform_kernel);
}

extern "C" void dl_cuda_uniform_host(const dl_stream *s, uint64_t index, float *out, int64_t n) {
  if (n <= 0) return;
  uint64_t first = index / 4, last = (index + (uint64_t)(n - 1)) / 4;
  for (uint64_t b = first; b <= last; b++) dl_cuda_philox::uniform_block(*s, index, n, b, out);
}

static dl_status check_dropout(int64_t rows, int64_t features, float keep_prob,
                               bool pointers_ok) {
  if (rows < 0 || features < 0 || (features > 0 && rows > INT64_MAX / features))
    return dl_fail(DL_ERR_INVALID, "dl_cuda_dropout_mask: bad shape [%lld, %lld]",
                   (long long)rows, (long long)features);
  if (!(keep_prob > 0.0f && keep_prob <= 1.0f))
    return dl_fail(DL_ERR_INVALID, "dl_cuda_dropout_mask: keep probability %g outside (0, 1]",
                   (double)keep_prob);
  return check_n("dl_cuda_dropout_mask", rows * features, pointers_ok);
}

extern "C" dl_status dl_cuda_dropout_mask(dl_cuda *ctx, const dl_stream *streams, int64_t rows,
                                          int64_t features, float keep_prob, float scale,
                                          float *mask) {
  DL_TRY(check_dropout(rows, features, keep_prob, streams && mask));
  DL_TRY(dl_cuda_enter(ctx, "dl_cuda_dropout_mask"));
  if (rows * features == 0) return DL_OK;
  uint64_t bpr = ((uint64_t)features + 3) / 4;
  dropout_mask_kernel<<<blocks_for(rows * (int64_t)bpr), THREADS, 0, ctx->stream>>>(
      streams, rows, features, bpr, keep_prob, scale, mask);
  return LAUNCHED(dropout_mask_kernel);
}

extern "C" dl_status dl_cuda_dropout_mask_host(const dl_stream *streams, int64_t rows,
                                               int64_t features, float keep_prob, float scale,
                                               float *mask) {
  DL_TRY(check_dropout(rows, features, keep_prob, streams && mask));
  uint64_t bpr = ((uint64_t)features + 3) / 4;
  for (int64_t r = 0; r < rows; r++)
    for (uint64_t b = 0; b < bpr; b++)
      dropout_block(streams[r], features, b, keep_prob, scale, mask + r * features);
  return DL_OK;
}
