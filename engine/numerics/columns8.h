/* Eight rows' columns, for the kernels that run eight rows' sums in the
 * lanes of one register (one row per lane, each row's operations in its
 * own order): LayerNorm's moments, attention's softmax gradient. */
#ifndef DL_NUMERICS_COLUMNS8_H
#define DL_NUMERICS_COLUMNS8_H

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#include <stdint.h>

/* Columns i .. i+cols-1 of eight rows of n floats each at x, cols =
 * min(8, n - i), returned: c[k] holds column i + k, row r in lane r;
 * columns from cols on are 0. An 8x8 transpose in registers. */
__attribute__((target("avx512f,avx512vl"), always_inline)) static inline int
dl_columns8(const float *x, int64_t n, int64_t i, __m256 c[8]) {
  const int cols = n - i < 8 ? (int)(n - i) : 8;
  const __mmask8 valid = (__mmask8)((1u << cols) - 1u);
  __m256 r[8], t[8];
  for (int row = 0; row < 8; row++) r[row] = _mm256_maskz_loadu_ps(valid, x + row * n + i);
  for (int i = 0; i < 4; i++) {
    t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int h = 0; h < 2; h++) { /* rows 4h .. 4h+3: columns k | k + 4 per 128-bit half */
    r[4 * h] = _mm256_shuffle_ps(t[4 * h], t[4 * h + 2], 0x44);
    r[4 * h + 1] = _mm256_shuffle_ps(t[4 * h], t[4 * h + 2], 0xEE);
    r[4 * h + 2] = _mm256_shuffle_ps(t[4 * h + 1], t[4 * h + 3], 0x44);
    r[4 * h + 3] = _mm256_shuffle_ps(t[4 * h + 1], t[4 * h + 3], 0xEE);
  }
  for (int k = 0; k < 4; k++) {
    c[k] = _mm256_permute2f128_ps(r[k], r[4 + k], 0x20);
    c[k + 4] = _mm256_permute2f128_ps(r[k], r[4 + k], 0x31);
  }
  return cols;
}
#endif

#endif
