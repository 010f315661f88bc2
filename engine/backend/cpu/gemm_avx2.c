/* dl_sgemm's AVX2 + FMA pieces, for x86-64 CPUs without AVX-512: a 6 x 16
 * micro-kernel (12 ymm accumulators, two B vectors, one A broadcast) and
 * portable packing. Compiled per function for AVX2/FMA (target attribute)
 * and chosen at run time. */
#include "backend/cpu/gemm_internal.h"

#if defined(__x86_64__) && defined(__GNUC__)

#include <immintrin.h>

#define DL_AVX2 __attribute__((target("avx2,fma")))

enum { MR = 6, NR = 16 };

#define DL_ROWS(X) X(0) X(1) X(2) X(3) X(4) X(5)
#define DL_DECLARE(i) __m256 c##i##a, c##i##b;
#define DL_ZERO(i)               \
  c##i##a = _mm256_setzero_ps(); \
  c##i##b = _mm256_setzero_ps();
#define DL_LOAD(i)                                      \
  c##i##a = _mm256_loadu_ps(start.from + (i)*start.ld); \
  c##i##b = _mm256_loadu_ps(start.from + (i)*start.ld + 8);
#define DL_FMA(i)                              \
  {                                            \
    __m256 a = _mm256_broadcast_ss(ap + (i));  \
    c##i##a = _mm256_fmadd_ps(a, b0, c##i##a); \
    c##i##b = _mm256_fmadd_ps(a, b1, c##i##b); \
  }
#define DL_STORE(i)                       \
  _mm256_storeu_ps(c + (i)*ldc, c##i##a); \
  _mm256_storeu_ps(c + (i)*ldc + 8, c##i##b);

DL_AVX2 static void kernel_6x16(int64_t kc, const float *ap, const float *bp, float *c, int64_t ldc,
                                dl_gemm_start start) {
  DL_ROWS(DL_DECLARE)
  if (start.from) {
    DL_ROWS(DL_LOAD)
  } else {
    DL_ROWS(DL_ZERO)
  }
  for (int64_t k = 0; k < kc; k++, ap += MR, bp += NR) {
    __m256 b0 = _mm256_loadu_ps(bp), b1 = _mm256_loadu_ps(bp + 8);
    DL_ROWS(DL_FMA)
  }
  DL_ROWS(DL_STORE)
}

static void pack_a_avx2(bool trans, const float *a, int64_t lda, int64_t m, int64_t kc,
                        float *out) {
  dl_gemm_pack_a_generic(MR, trans, a, lda, m, kc, out);
}

static void pack_b_avx2(bool trans, const float *b, int64_t ldb, int64_t n, int64_t kc,
                        float *out) {
  dl_gemm_pack_b_generic(NR, trans, b, ldb, n, kc, out);
}

const dl_gemm_isa *dl_gemm_isa_avx2(void) {
  static const dl_gemm_isa isa = {.name = "avx2",
                                  .mr = MR,
                                  .nr = NR,
                                  .kernel = kernel_6x16,
                                  .pack_a = pack_a_avx2,
                                  .pack_b = pack_b_avx2};
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") ? &isa : 0;
}

#else

const dl_gemm_isa *dl_gemm_isa_avx2(void) { return 0; }

#endif
