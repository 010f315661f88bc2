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
 * device or library reports is DL_ERR_IO, as in the nccl comm backend.
 *
 * With cuDNN (DL_CUDA_HAVE_CUDNN, defined where CMake found it):
 *
 *   DL_CUDNN_TRY(cudnnConvolutionForward(...));
 *
 * an allocation failure (host or device) is DL_ERR_NOMEM, a NOT_SUPPORTED
 * status DL_ERR_UNSUPPORTED, a BAD_PARAM one DL_ERR_INVALID, anything else
 * DL_ERR_IO; the message adds cuDNN's own last error text when it has one. */
#ifndef DL_CUDA_CHECK_H
#define DL_CUDA_CHECK_H

#include <cublas_v2.h>
#include <cuda_runtime.h>
#ifdef DL_CUDA_HAVE_CUDNN
#include <cudnn.h>
#endif

#ifdef __cplusplus
extern "C" {
#endif

#include "core/status.h"

/* Set the message for a failed call `expr` at file:line and return its
 * status. dl_cuda_fail also clears the runtime's last error, so that a
 * later cudaGetLastError does not report this failure again. */
dl_status dl_cuda_fail(cudaError_t e, const char *file, int line, const char *expr);
dl_status dl_cublas_fail(cublasStatus_t st, const char *file, int line, const char *expr);
#ifdef DL_CUDA_HAVE_CUDNN
dl_status dl_cudnn_fail(cudnnStatus_t st, const char *file, int line, const char *expr);
#endif

#ifdef __cplusplus
}
#endif

#define DL_CUDA_TRY(expr)                                                                      \
  do {                                                                                         \
    cudaError_t dl_cuda_e_ = (expr);                                                           \
    if (dl_cuda_e_ != cudaSuccess) return dl_cuda_fail(dl_cuda_e_, __FILE__, __LINE__, #expr); \
  } while (0)

#define DL_CUBLAS_TRY(expr)                                            \
  do {                                                                 \
    cublasStatus_t dl_cublas_st_ = (expr);                             \
    if (dl_cublas_st_ != CUBLAS_STATUS_SUCCESS)                        \
      return dl_cublas_fail(dl_cublas_st_, __FILE__, __LINE__, #expr); \
  } while (0)

#ifdef DL_CUDA_HAVE_CUDNN
#define DL_CUDNN_TRY(expr)                                           \
  do {                                                               \
    cudnnStatus_t dl_cudnn_st_ = (expr);                             \
    if (dl_cudnn_st_ != CUDNN_STATUS_SUCCESS)                        \
      return dl_cudnn_fail(dl_cudnn_st_, __FILE__, __LINE__, #expr); \
  } while (0)
#endif

#endif
