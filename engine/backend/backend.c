/* The CPU fallback of backend.h's dispatch. */
#include "backend/backend.h"

#include "backend/cpu/sgemm.h"

dl_status dl_backend_sgemm(const dl_backend *b, bool trans_a, bool trans_b, int64_t M, int64_t N,
                           int64_t K, const float *A, int64_t lda, const float *B, int64_t ldb,
                           float beta, float *C, int64_t ldc) {
  if (b && b->sgemm)
    return b->sgemm(b->impl, trans_a, trans_b, M, N, K, A, lda, B, ldb, beta, C, ldc);
  dl_sgemm(trans_a, trans_b, M, N, K, A, lda, B, ldb, beta, C, ldc);
  return DL_OK;
}

bool dl_backend_has_conv2d(const dl_backend *b) {
  return b && b->conv2d_forward && b->conv2d_backward_data && b->conv2d_backward_filter;
}
