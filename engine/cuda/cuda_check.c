/* The failure messages behind DL_CUDA_TRY and DL_CUBLAS_TRY. */
#include "cuda/cuda_check.h"

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
