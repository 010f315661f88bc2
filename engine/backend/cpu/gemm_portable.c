/* dl_sgemm's portable pieces: a 4 x 8 micro-kernel in plain C, for CPUs
 * (or compilers) without the SIMD ISAs, and the generic panel packing the
 * SIMD ISAs also use. Apart from gemm.c so that the ISAs depend on it and
 * gemm.c on them, never the other way round. */
#include "backend/cpu/gemm_internal.h"

#include <math.h>
#include <string.h>

enum { PORTABLE_MR = 4, PORTABLE_NR = 8 };

static void kernel_portable(int64_t kc, const float *ap, const float *bp, float *c, int64_t ldc,
                            dl_gemm_start start) {
  float acc[PORTABLE_MR][PORTABLE_NR];
  for (int i = 0; i < PORTABLE_MR; i++)
    for (int j = 0; j < PORTABLE_NR; j++)
      acc[i][j] = start.from ? start.from[i * start.ld + j] : 0.0f;
  for (int64_t k = 0; k < kc; k++, ap += PORTABLE_MR, bp += PORTABLE_NR)
    for (int i = 0; i < PORTABLE_MR; i++)
      for (int j = 0; j < PORTABLE_NR; j++) acc[i][j] = fmaf(ap[i], bp[j], acc[i][j]);
  for (int i = 0; i < PORTABLE_MR; i++)
    for (int j = 0; j < PORTABLE_NR; j++) c[i * ldc + j] = acc[i][j];
}

void dl_gemm_pack_a_generic(int mr, bool trans, const float *a, int64_t lda, int64_t m, int64_t kc,
                            float *out) {
  for (int64_t i0 = 0; i0 < m; i0 += mr, out += (int64_t)mr * kc) {
    int rows = m - i0 < mr ? (int)(m - i0) : mr;
    for (int i = rows; i < mr; i++)
      for (int64_t k = 0; k < kc; k++) out[k * mr + i] = 0.0f;
    if (trans) {
      for (int64_t k = 0; k < kc; k++)
        memcpy(out + k * mr, a + k * lda + i0, (size_t)rows * sizeof(float));
    } else {
      for (int i = 0; i < rows; i++) {
        const float *row = a + (i0 + i) * lda;
        for (int64_t k = 0; k < kc; k++) out[k * mr + i] = row[k];
      }
    }
  }
}

void dl_gemm_pack_b_generic(int nr, bool trans, const float *b, int64_t ldb, int64_t n, int64_t kc,
                            float *out) {
  for (int64_t j0 = 0; j0 < n; j0 += nr, out += (int64_t)nr * kc) {
    int cols = n - j0 < nr ? (int)(n - j0) : nr;
    for (int j = cols; j < nr; j++)
      for (int64_t k = 0; k < kc; k++) out[k * nr + j] = 0.0f;
    if (trans) {
      for (int j = 0; j < cols; j++) {
        const float *row = b + (j0 + j) * ldb;
        for (int64_t k = 0; k < kc; k++) out[k * nr + j] = row[k];
      }
    } else {
      for (int64_t k = 0; k < kc; k++)
        memcpy(out + k * nr, b + k * ldb + j0, (size_t)cols * sizeof(float));
    }
  }
}

static void pack_a_portable(bool trans, const float *a, int64_t lda, int64_t m, int64_t kc,
                            float *out) {
  dl_gemm_pack_a_generic(PORTABLE_MR, trans, a, lda, m, kc, out);
}

static void pack_b_portable(bool trans, const float *b, int64_t ldb, int64_t n, int64_t kc,
                            float *out) {
  dl_gemm_pack_b_generic(PORTABLE_NR, trans, b, ldb, n, kc, out);
}

const dl_gemm_isa *dl_gemm_isa_portable(void) {
  static const dl_gemm_isa isa = {.name = "portable",
                                  .mr = PORTABLE_MR,
                                  .nr = PORTABLE_NR,
                                  .kernel = kernel_portable,
                                  .pack_a = pack_a_portable,
                                  .pack_b = pack_b_portable};
  return &isa;
}
