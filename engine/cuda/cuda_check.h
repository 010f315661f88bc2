/* Turning a failed CUDA runtime or cuBLAS call into a dl_status with a
 * message, nccl-tests style: "file:line: call failed: reason (code)".
 * Never exits: the caller decides what a failure means.
 *
 *   DL_CUDA_TRY(cudaMemcpyAsync(...));
 *   DL_CUBLAS_TRY(cublasGemmEx(...));
 *
 * The status follows the cause: out of memory is DL_ERR_NOMEM; no device,
 * too old a driver or no kernel image for this GPU is DL_ERR_UNSUPPORTED;
 * a bad argument cuBLAS refuses is DL_ERR_INVALID; anything else the
 * device or library reports is DL_ERR_IO, as in the nccl comm backend. */
#ifndef DL_CUDA_CHECK_H
#define DL_CUDA_CHECK_H

#include <cublas_v2.h>
#include <cuda_runtime.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "status.h"

/* Set the message for a failed call `expr` at file:line and return its
 * status. dl_cuda_fail also clears the runtime's last error, so that a
 * later cudaGetLastError does not report this failure again. */
dl_status dl_cuda_fail(cudaError_t e, const char *file, int line, const char *expr);
dl_status dl_cublas_fail(cublasStatus_t st, const char *file, int line, const char *expr);

#ifdef __cplusplus
}
#endif

#define DL_CUDA_TRY(expr)                                                                      \
  do {                                                                                         \
    cudaError_t dl_cuda_e_ = (expr);                                                           \
    if (dl_cuda_e_ != cudaSuccess) return dl_cuda_fail(dl_cuda_e_, __FILE__, __LINE__, #expr); \
  } while (0)

#define DL_CUBLAS_TRY(expr)                                                                    \
  do {                                                                                         \
    cublasStatus_t dl_cublas_st_ = (expr);                                                     \
    if (dl_cublas_st_ != CUBLAS_STATUS_SUCCESS)                                                \
      return dl_cublas_fail(dl_cublas_st_, __FILE__, __LINE__, #expr);                         \
  } while (0)

#endif
