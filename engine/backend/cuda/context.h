/* Inside the CUDA backend: what a dl_cuda context holds. Not for users of
 * dlcuda (they see device.h); gemm.c and kernels.cu need the stream and the
 * cuBLAS handle. */
#ifndef DL_CUDA_CONTEXT_H
#define DL_CUDA_CONTEXT_H

#include "backend/cuda/cuda_check.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "backend/cuda/device.h"

struct dl_cuda {
  int device;
  cudaStream_t stream;
  cublasHandle_t cublas; /* bound to stream */
  dl_cuda_math math;
  float *scratch; /* dl_cuda_alloc'd, for reduction partials */
  size_t scratch_bytes;
};

/* Makes ctx's device current for this thread; DL_ERR_INVALID for NULL
 * (naming `op`). Every entry point that touches the GPU starts with it.
 * Inline so that memory.c need not call into device.c, which calls it. */
static inline dl_status dl_cuda_enter(dl_cuda *ctx, const char *op) {
  if (!ctx) return dl_fail(DL_ERR_INVALID, "%s: no CUDA context (call dl_cuda_init first)", op);
  DL_CUDA_TRY(cudaSetDevice(ctx->device));
  return DL_OK;
}

/* ctx->scratch with at least `bytes`, grown (never shrunk) on demand. */
dl_status dl_cuda_scratch(dl_cuda *ctx, size_t bytes, float **p);

#ifdef __cplusplus
}
#endif

#endif
