/* Matrix multiply on the GPU through cuBLAS, with dl_sgemm's row-major
 * convention (sgemm.h):
 *
 *   C[m,n] = beta * C[m,n] + sum_k op(A)[m,k] * op(B)[k,n]
 *
 * beta 0 overwrites C without reading it (NaN in C does not leak), 1
 * accumulates. A, B, C are device pointers; the call is queued on the
 * context's stream.
 *
 * The summation order is cuBLAS's, not dl_sgemm's: results agree with the
 * CPU to float32 rounding (|error| <= about K * 2^-24 * sum_k |a||b|), not
 * bitwise. They are bitwise the same run to run on one GPU model with one
 * cuBLAS version (CUBLAS_WORKSPACE_CONFIG is fixed by dl_cuda_init, atomics
 * are off). */
#ifndef DL_CUDA_GEMM_H
#define DL_CUDA_GEMM_H

#include "backend/cuda/device.h"

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* float32 inputs and output in the context's math mode (fp32 or tf32).
 * Dimensions must be >= 0 and fit an int (cuBLAS's); leading dimensions
 * at least the stored row length (lda >= K, or M with trans_a; ldb >= N,
 * or K with trans_b; ldc >= N). Else DL_ERR_INVALID naming the argument. */
dl_status dl_cuda_sgemm(dl_cuda *ctx, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                        const float *A, int64_t lda, const float *B, int64_t ldb, float beta,
                        float *C, int64_t ldc);

/* A and B in float16 (ab = DL_F16) or bfloat16 (DL_BF16), C in float32,
 * products accumulated in float32 (CUBLAS_COMPUTE_32F), as autocast's
 * matmul before its output is rounded. The context's math mode does not
 * apply. */
dl_status dl_cuda_gemm_half(dl_cuda *ctx, dl_dtype ab, bool trans_a, bool trans_b, int64_t M,
                            int64_t N, int64_t K, const void *A, int64_t lda, const void *B,
                            int64_t ldb, float beta, float *C, int64_t ldc);

#ifdef __cplusplus
}
#endif

#endif
