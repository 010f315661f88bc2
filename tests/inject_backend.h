/* A dl_backend that injects one small change into backend_equiv's CNN
 * (8 parameters; the classifier is a linear 256 -> 10), for tests of
 * calibrated goldens and of the first-divergent-layer search: everything
 * else runs as on the CPU (dl_sgemm, dl_optim_elem), so the run differs
 * from the engine's only where asked. */
#ifndef DL_TEST_INJECT_BACKEND_H
#define DL_TEST_INJECT_BACKEND_H

#include <stdbool.h>
#include <stdint.h>

#include "backend/backend.h"
#include "backend/cpu/sgemm.h"
#include "numerics/half.h"

enum { INJECT_PARAMS = 8, INJECT_NUDGED = 4 /* param/4.weight, 5th in state-dict order */ };

typedef struct inject {
  bool bf16_classifier;    /* the classifier's forward GEMM with a bfloat16 accumulator */
  bool reverse_classifier; /* ... summed in reverse k order */
  bool skip_step5;         /* optimizer step 5 not applied */
  bool nudge;              /* param/4.weight[0] += 1e-3 after optimizer step 5 */
  int optim_calls;
} inject;

static inline dl_status inj_sgemm(void *impl, bool ta, bool tb, int64_t M, int64_t N, int64_t K,
                                  const float *A, int64_t lda, const float *B, int64_t ldb,
                                  float beta, float *C, int64_t ldc) {
  inject *in = impl;
  bool classifier = !ta && tb && N == 10 && K == 256;
  if (!classifier || !(in->bf16_classifier || in->reverse_classifier)) {
    dl_sgemm(ta, tb, M, N, K, A, lda, B, ldb, beta, C, ldc);
    return DL_OK;
  }
  for (int64_t m = 0; m < M; m++)
    for (int64_t n = 0; n < N; n++) {
      float acc = beta != 0.0f ? C[m * ldc + n] : 0.0f;
      for (int64_t i = 0; i < K; i++) {
        int64_t k = in->reverse_classifier ? K - 1 - i : i;
        acc += A[m * lda + k] * B[n * ldb + k];
        if (in->bf16_classifier) acc = dl_round_bf16(acc);
      }
      C[m * ldc + n] = acc;
    }
  return DL_OK;
}

static inline dl_status inj_optim(void *impl, const dl_optim_coeffs *c, int64_t n, float *w,
                                  const float *g, float *buf0, float *buf1) {
  inject *in = impl;
  int call = in->optim_calls++;
  if (in->skip_step5 && call / INJECT_PARAMS == 5) return DL_OK;
  for (int64_t i = 0; i < n; i++) dl_optim_elem(c, i, w, g, buf0, buf1);
  if (in->nudge && call == 5 * INJECT_PARAMS + INJECT_NUDGED) w[0] += 1e-3f;
  return DL_OK;
}

static inline dl_backend inject_table(inject *in) {
  return (dl_backend){.name = "inject", .impl = in, .sgemm = inj_sgemm, .optim_step = inj_optim};
}

#endif
