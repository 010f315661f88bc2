/* Row-major GEMM through column-major cuBLAS: a row-major matrix with
 * leading dimension ld is, read column-major, its transpose with the same
 * ld. So row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T:
 * cuBLAS is called with the operands swapped and the dimensions N, M, K,
 * and no data moves. */
#include "backend/cuda/gemm.h"

#include "backend/cuda/context.h"

#include <limits.h>

typedef struct gemm_call {
  bool trans_a, trans_b;
  int64_t M, N, K;
  const void *A, *B;
  int64_t lda, ldb;
  float beta;
  float *C;
  int64_t ldc;
} gemm_call;

static dl_status check_dim(const char *op, const char *name, int64_t v) {
  if (v < 0 || v > INT_MAX)
    return dl_fail(DL_ERR_INVALID, "%s: %s = %lld must lie in [0, %d] (cuBLAS takes int)", op, name,
                   (long long)v, INT_MAX);
  return DL_OK;
}

static dl_status check_ld(const char *op, const char *name, int64_t ld, int64_t row_length) {
  int64_t least = row_length > 1 ? row_length : 1;
  if (ld < least || ld > INT_MAX)
    return dl_fail(DL_ERR_INVALID,
                   "%s: %s = %lld must be at least %lld (the stored row "
                   "length) and at most %d",
                   op, name, (long long)ld, (long long)least, INT_MAX);
  return DL_OK;
}

static dl_status check_call(const char *op, const gemm_call *g) {
  DL_TRY(check_dim(op, "M", g->M));
  DL_TRY(check_dim(op, "N", g->N));
  DL_TRY(check_dim(op, "K", g->K));
  DL_TRY(check_ld(op, "lda", g->lda, g->trans_a ? g->M : g->K));
  DL_TRY(check_ld(op, "ldb", g->ldb, g->trans_b ? g->K : g->N));
  DL_TRY(check_ld(op, "ldc", g->ldc, g->N));
  if (g->M > 0 && g->N > 0 && (!g->C || (g->K > 0 && (!g->A || !g->B))))
    return dl_fail(DL_ERR_INVALID,
                   "%s: a NULL matrix (A %p, B %p, C %p) for a %lld x %lld x "
                   "%lld product",
                   op, g->A, g->B, (void *)g->C, (long long)g->M, (long long)g->N, (long long)g->K);
  return DL_OK;
}

static dl_status run(dl_cuda *ctx, const char *op, const gemm_call *g, cudaDataType_t ab,
                     cublasMath_t mode, cublasComputeType_t compute) {
  DL_TRY(check_call(op, g));
  DL_TRY(dl_cuda_enter(ctx, op));
  if (g->M == 0 || g->N == 0) return DL_OK;
  const float alpha = 1.0f;
  DL_CUBLAS_TRY(cublasSetMathMode(ctx->cublas, mode));
  DL_CUBLAS_TRY(cublasGemmEx(ctx->cublas, g->trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                             g->trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, (int)g->N, (int)g->M,
                             (int)g->K, &alpha, g->B, ab, (int)g->ldb, g->A, ab, (int)g->lda,
                             &g->beta, g->C, CUDA_R_32F, (int)g->ldc, compute,
                             CUBLAS_GEMM_DEFAULT));
  return DL_OK;
}

dl_status dl_cuda_sgemm(dl_cuda *ctx, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                        const float *A, int64_t lda, const float *B, int64_t ldb, float beta,
                        float *C, int64_t ldc) {
  gemm_call g = {trans_a, trans_b, M, N, K, A, B, lda, ldb, beta, C, ldc};
  /* PEDANTIC, not DEFAULT, for fp32: DEFAULT lets NVIDIA_TF32_OVERRIDE=1
   * turn TF32 on behind the caller's back. */
  bool tf32 = ctx && ctx->math == DL_CUDA_MATH_TF32;
  return run(ctx, "dl_cuda_sgemm", &g, CUDA_R_32F,
             tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_PEDANTIC_MATH,
             tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F_PEDANTIC);
}

dl_status dl_cuda_gemm_half(dl_cuda *ctx, dl_dtype ab, bool trans_a, bool trans_b, int64_t M,
                            int64_t N, int64_t K, const void *A, int64_t lda, const void *B,
                            int64_t ldb, float beta, float *C, int64_t ldc) {
  if (ab != DL_F16 && ab != DL_BF16)
    return dl_fail(DL_ERR_INVALID,
                   "dl_cuda_gemm_half: inputs must be float16 or bfloat16, "
                   "not %s (use dl_cuda_sgemm for float32)",
                   dl_dtype_name(ab));
  gemm_call g = {trans_a, trans_b, M, N, K, A, B, lda, ldb, beta, C, ldc};
  return run(ctx, "dl_cuda_gemm_half", &g, ab == DL_F16 ? CUDA_R_16F : CUDA_R_16BF,
             CUBLAS_DEFAULT_MATH, CUBLAS_COMPUTE_32F);
}
