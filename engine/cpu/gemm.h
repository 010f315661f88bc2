/* Single-precision matrix multiply with a fixed summation order.
 *
 * C[m,n] = beta * C[m,n] + sum_k op(A)[m,k] * op(B)[k,n], row-major, where
 * beta is 0 (C overwritten) or 1 (accumulate, for gradients).
 * The sum is evaluated as acc = (beta ? C : 0); for k = 0..K-1:
 * acc = fmaf(a, b, acc), in increasing k, for every element: exactly what
 * dl_sgemm_ref computes. Blocking, SIMD width and threads only change which
 * elements are computed together, never the order within one element, so
 * results are bitwise the same as the reference for any thread count and
 * CPU (hardware FMA or libm's correctly rounded fmaf). */
#ifndef DL_CPU_GEMM_H
#define DL_CPU_GEMM_H

#include <stdbool.h>
#include <stdint.h>

void dl_sgemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
              const float *A, int64_t lda, const float *B, int64_t ldb,
              float beta, float *C, int64_t ldc);

/* The plain triple loop defining the result; tests compare against it. */
void dl_sgemm_ref(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                  const float *A, int64_t lda, const float *B, int64_t ldb,
                  float beta, float *C, int64_t ldc);

#endif
