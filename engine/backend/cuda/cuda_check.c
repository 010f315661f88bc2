/* The failure messages behind DL_CUDA_TRY, DL_CUBLAS_TRY and DL_CUDNN_TRY. */
#include "backend/cuda/cuda_check.h"

static dl_status status_of_cuda(cudaError_t e) {
  switch (e) {
  case cudaErrorMemoryAllocation: return DL_ERR_NOMEM;
  case cudaErrorInvalidDevice:
  case cudaErrorInvalidValue: return DL_ERR_INVALID;
  case cudaErrorNoDevice:
  case cudaErrorInsufficientDriver:
  case cudaErrorCallRequiresNewerDriver:
  case cudaErrorSystemDriverMismatch:
  case cudaErrorNoKernelImageForDevice:
  case cudaErrorUnsupportedPtxVersion: return DL_ERR_UNSUPPORTED;
  default: return DL_ERR_IO;
  }
}

static dl_status status_of_cublas(cublasStatus_t st) {
  switch (st) {
  case CUBLAS_STATUS_ALLOC_FAILED: return DL_ERR_NOMEM;
  case CUBLAS_STATUS_INVALID_VALUE: return DL_ERR_INVALID;
  case CUBLAS_STATUS_ARCH_MISMATCH:
  case CUBLAS_STATUS_NOT_SUPPORTED: return DL_ERR_UNSUPPORTED;
  default: return DL_ERR_IO;
  }
}

dl_status dl_cuda_fail(cudaError_t e, const char *file, int line, const char *expr) {
  /* A non-sticky error stays as the "last error" until read: read it so a
   * later launch check does not blame the next kernel for this call. */
  (void)cudaGetLastError();
  return dl_fail(status_of_cuda(e), "%s:%d: %s failed: %s (%d)", file, line, expr,
                 cudaGetErrorString(e), (int)e);
}

dl_status dl_cublas_fail(cublasStatus_t st, const char *file, int line, const char *expr) {
  return dl_fail(status_of_cublas(st), "%s:%d: %s failed: %s (%d)", file, line, expr,
                 cublasGetStatusString(st), (int)st);
}

#ifdef DL_CUDA_HAVE_CUDNN

#include <stdio.h>

/* cuDNN 9 numbers its statuses by category (BAD_PARAM 2000-2999,
 * NOT_SUPPORTED 3000-3999, ...); the old names it keeps are deprecated
 * aliases, so the categories are tested rather than the names. */
static dl_status status_of_cudnn(cudnnStatus_t st) {
#if CUDNN_MAJOR >= 9
  if (st == CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED ||
      st == CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED)
    return DL_ERR_NOMEM;
  switch (CUDNN_STATUS_CATEGORY((int)st)) {
  case CUDNN_STATUS_BAD_PARAM: return DL_ERR_INVALID;
  case CUDNN_STATUS_NOT_SUPPORTED: return DL_ERR_UNSUPPORTED;
  default: return DL_ERR_IO;
  }
#else
  switch (st) {
  case CUDNN_STATUS_ALLOC_FAILED: return DL_ERR_NOMEM;
  case CUDNN_STATUS_BAD_PARAM: return DL_ERR_INVALID;
  case CUDNN_STATUS_ARCH_MISMATCH:
  case CUDNN_STATUS_NOT_SUPPORTED: return DL_ERR_UNSUPPORTED;
  default: return DL_ERR_IO;
  }
#endif
}

dl_status dl_cudnn_fail(cudnnStatus_t st, const char *file, int line, const char *expr) {
  /* cuDNN 9 keeps a readable explanation of the last failure (which
   * argument, which limit): worth more than the status name alone. */
  char detail[512] = "";
#if CUDNN_MAJOR >= 9
  cudnnGetLastErrorString(detail, sizeof detail);
  detail[sizeof detail - 1] = '\0';
#endif
  return dl_fail(status_of_cudnn(st), "%s:%d: %s failed: %s (%d)%s%s", file, line, expr,
                 cudnnGetErrorString(st), (int)st, detail[0] ? "; cuDNN: " : "", detail);
}

#endif
