/* dl_sum_rows: the scalar loop that defines it and AVX-512 lanes that give
 * its bits. Each lane owns one column and adds the rows in order, as the
 * scalar loop does; IEEE addition rounds alike in any register width. The
 * lanes keep 64 columns' sums in registers over all rows, rather than
 * taking the sums back to memory on every row as the scalar loop does. */
#include "numerics/sums.h"

#include "numerics/cpu.h"

#include <string.h>

static void sum_rows_scalar(const float *x, int64_t rows, int64_t cols, int64_t ldx, float *out) {
  memset(out, 0, (size_t)cols * sizeof *out);
  for (int64_t r = 0; r < rows; r++)
    for (int64_t c = 0; c < cols; c++) out[c] += x[r * ldx + c];
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

/* SUM_COLS columns at a time: four zmm of sums, the rows in order. */
enum { SUM_COLS = 64 };

__attribute__((target("avx512f"))) static void
sum_rows_avx512(const float *x, int64_t rows, int64_t cols, int64_t ldx, float *out) {
  for (int64_t c0 = 0; c0 < cols; c0 += SUM_COLS) {
    const int64_t n = cols - c0;
    const __mmask16 k0 = dl_first_lanes16(n), k1 = dl_first_lanes16(n - 16),
                    k2 = dl_first_lanes16(n - 32), k3 = dl_first_lanes16(n - 48);
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    for (int64_t r = 0; r < rows; r++) {
      const float *row = x + r * ldx + c0;
      a0 = _mm512_add_ps(a0, _mm512_maskz_loadu_ps(k0, row));
      a1 = _mm512_add_ps(a1, _mm512_maskz_loadu_ps(k1, row + 16));
      a2 = _mm512_add_ps(a2, _mm512_maskz_loadu_ps(k2, row + 32));
      a3 = _mm512_add_ps(a3, _mm512_maskz_loadu_ps(k3, row + 48));
    }
    _mm512_mask_storeu_ps(out + c0, k0, a0);
    _mm512_mask_storeu_ps(out + c0 + 16, k1, a1);
    _mm512_mask_storeu_ps(out + c0 + 32, k2, a2);
    _mm512_mask_storeu_ps(out + c0 + 48, k3, a3);
  }
}

void dl_sum_rows(const float *x, int64_t rows, int64_t cols, int64_t ldx, float *out) {
  if (cols <= 0) return;
  if (dl_cpu_has_avx512f()) sum_rows_avx512(x, rows, cols, ldx, out);
  else sum_rows_scalar(x, rows, cols, ldx, out);
}
#else
void dl_sum_rows(const float *x, int64_t rows, int64_t cols, int64_t ldx, float *out) {
  if (cols > 0) sum_rows_scalar(x, rows, cols, ldx, out);
}
#endif
