/* Single-precision matrix multiply on the CPU with a fixed summation order:
 * the engine's public GEMM, and the reference every backend's GEMM is
 * compared with (engine/backend/cpu/gemm.c implements it).
 *
 * C[m,n] = beta * C[m,n] + sum_k op(A)[m,k] * op(B)[k,n], row-major, where
 * beta is 0 (C overwritten) or 1 (accumulate, for gradients).
 * The sum is evaluated as acc = (beta ? C : 0); for k = 0..K-1:
 * acc = fmaf(a, b, acc), in increasing k, for every element: exactly what
 * dl_sgemm_ref computes. Blocking, SIMD width and threads only change which
 * elements are computed together, never the order within one element, so
 * results are bitwise the same as the reference for any thread count and
 * CPU (hardware FMA or libm's correctly rounded fmaf). */
#ifndef DL_SGEMM_H
#define DL_SGEMM_H

#include <stdbool.h>
#include <stdint.h>

void dl_sgemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const float *A,
              int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc);

/* C = bias + op(A) op(B), bias[j] added to every row: each element's sum
 * starts from bias[j] (acc = bias[j]; then the fused multiply-adds in
 * increasing k), exactly as filling every row of C with bias and calling
 * dl_sgemm with beta 1, but with the bias written into each tile as it is
 * computed rather than in a pass of its own over C. */
void dl_sgemm_bias(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const float *A,
                   int64_t lda, const float *B, int64_t ldb, const float *bias, float *C,
                   int64_t ldc);

/* C = beta * C + A op(B), A not transposed, with op(B) [K, N] handed over
 * already in the packed layout the GEMM's kernels read (a convolution
 * writes its patches straight into it, saving the copy): panels of nr
 * columns, element (k, j) at packed_b[(j / nr) * nr * K + k * nr + j % nr],
 * the last panel's columns past N zero. nr should be
 * dl_sgemm_panel_width(); any other is computed in the reference loop
 * (slower, the same bits). The same order per element as dl_sgemm. */
void dl_sgemm_packed_b(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda,
                       const float *packed_b, int nr, float beta, float *C, int64_t ldc);
/* The panel width dl_sgemm_packed_b wants now (the ISA's kernel width). */
int dl_sgemm_panel_width(void);

/* The plain triple loop defining the result; tests compare against it. */
void dl_sgemm_ref(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const float *A,
                  int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc);

/* Which instruction set dl_sgemm runs with. */
typedef enum dl_gemm_isa_id {
  DL_GEMM_AUTO = 0, /* the best this CPU supports */
  DL_GEMM_PORTABLE, /* C with fmaf: any CPU */
  DL_GEMM_AVX2,     /* AVX2 + FMA */
  DL_GEMM_AVX512    /* AVX-512F */
} dl_gemm_isa_id;

/* Tests and benchmarks: make dl_sgemm use `isa` from now on (process-wide;
 * not while other threads are in dl_sgemm). Returns false, changing
 * nothing, if this CPU cannot run it. Results are the same bits for every
 * ISA (the order above); only the speed differs. */
bool dl_gemm_force_isa(dl_gemm_isa_id isa);
/* "avx512", "avx2" or "portable": the ISA dl_sgemm uses now. */
const char *dl_gemm_isa_name(void);

#endif
