/* The 16 x 16 float transpose in registers that packing needs: the GEMM's
 * panels (backend/cpu/gemm_avx512.c) and a convolution's patches written
 * straight into them (nn/kinds/conv2d.c). */
#ifndef DL_NUMERICS_TRANSPOSE16_H
#define DL_NUMERICS_TRANSPOSE16_H

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

/* r[i] := column i of the 16 x 16 matrix whose rows are r[0..15]:
 * pairs of rows, then quads, interleave within 128-bit lanes; two rounds of
 * lane shuffles finish the transpose. */
__attribute__((target("avx512f"), always_inline)) static inline void dl_transpose16(__m512 r[16]) {
  __m512 t[16];
#pragma GCC unroll 8
  for (int i = 0; i < 8; i++) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
#pragma GCC unroll 4
  for (int g = 0; g < 4; g++) {
    __m512d t0 = _mm512_castps_pd(t[4 * g]), t1 = _mm512_castps_pd(t[4 * g + 1]);
    __m512d t2 = _mm512_castps_pd(t[4 * g + 2]), t3 = _mm512_castps_pd(t[4 * g + 3]);
    /* u[4g + c], lane L: column 4L + c of rows 4g..4g+3 */
    r[4 * g] = _mm512_castpd_ps(_mm512_unpacklo_pd(t0, t2));
    r[4 * g + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(t0, t2));
    r[4 * g + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(t1, t3));
    r[4 * g + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(t1, t3));
  }
#pragma GCC unroll 4
  for (int c = 0; c < 4; c++) {
    __m512 s0 = _mm512_shuffle_f32x4(r[c], r[4 + c], 0x44);
    __m512 s1 = _mm512_shuffle_f32x4(r[c], r[4 + c], 0xEE);
    __m512 s2 = _mm512_shuffle_f32x4(r[8 + c], r[12 + c], 0x44);
    __m512 s3 = _mm512_shuffle_f32x4(r[8 + c], r[12 + c], 0xEE);
    t[c] = _mm512_shuffle_f32x4(s0, s2, 0x88);
    t[4 + c] = _mm512_shuffle_f32x4(s0, s2, 0xDD);
    t[8 + c] = _mm512_shuffle_f32x4(s1, s3, 0x88);
    t[12 + c] = _mm512_shuffle_f32x4(s1, s3, 0xDD);
  }
#pragma GCC unroll 16
  for (int i = 0; i < 16; i++) r[i] = t[i];
}
#endif

#endif
