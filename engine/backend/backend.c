/* The CPU fallback of backend.h's dispatch. */
#include "backend/backend.h"

#include <string.h>

#include "backend/cpu/sgemm.h"

dl_status dl_backend_sgemm(const dl_backend *b, bool trans_a, bool trans_b, int64_t M, int64_t N,
                           int64_t K, const float *A, int64_t lda, const float *B, int64_t ldb,
                           float beta, float *C, int64_t ldc) {
  if (b && b->sgemm)
    return b->sgemm(b->impl, trans_a, trans_b, M, N, K, A, lda, B, ldb, beta, C, ldc);
  dl_sgemm(trans_a, trans_b, M, N, K, A, lda, B, ldb, beta, C, ldc);
  return DL_OK;
}

dl_status dl_backend_sgemm_bias(const dl_backend *b, bool trans_a, bool trans_b, int64_t M,
                                int64_t N, int64_t K, const float *A, int64_t lda, const float *B,
                                int64_t ldb, const float *bias, float *C, int64_t ldc) {
  if (!b || !b->sgemm) {
    dl_sgemm_bias(trans_a, trans_b, M, N, K, A, lda, B, ldb, bias, C, ldc);
    return DL_OK;
  }
  for (int64_t i = 0; N > 0 && i < M; i++) memcpy(C + i * ldc, bias, (size_t)N * sizeof *C);
  return b->sgemm(b->impl, trans_a, trans_b, M, N, K, A, lda, B, ldb, 1.0f, C, ldc);
}

bool dl_backend_has_conv2d(const dl_backend *b) {
  return b && b->conv2d_forward && b->conv2d_backward_data && b->conv2d_backward_filter;
}
