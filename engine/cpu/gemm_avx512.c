/* dl_sgemm's AVX-512 pieces: a 14 x 32 micro-kernel (28 zmm accumulators,
 * two B vectors, A broadcast from memory) and packing that transposes
 * 16 x 16 blocks in registers. Compiled for AVX-512 per function (target
 * attribute) and chosen at run time, so the library runs on any x86-64. */
#include "cpu/gemm_internal.h"

#if defined(__x86_64__) && defined(__GNUC__)

#include <immintrin.h>

#define DL_AVX512 __attribute__((target("avx512f")))

enum { MR = 14, NR = 32 };

#define DL_ROWS(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11) X(12) X(13)
#define DL_DECLARE(i) __m512 c##i##a, c##i##b;
#define DL_ZERO(i) c##i##a = _mm512_setzero_ps(); c##i##b = _mm512_setzero_ps();
#define DL_LOAD(i)                                                             \
  c##i##a = _mm512_loadu_ps(c + (i) * ldc);                                    \
  c##i##b = _mm512_loadu_ps(c + (i) * ldc + 16);
#define DL_FMA(i)                                                              \
  {                                                                            \
    __m512 a = _mm512_set1_ps(ap[i]);                                          \
    c##i##a = _mm512_fmadd_ps(a, b0, c##i##a);                                 \
    c##i##b = _mm512_fmadd_ps(a, b1, c##i##b);                                 \
  }
#define DL_STORE(i)                                                            \
  _mm512_storeu_ps(c + (i) * ldc, c##i##a);                                    \
  _mm512_storeu_ps(c + (i) * ldc + 16, c##i##b);

DL_AVX512 static void kernel_14x32(int64_t kc, const float *ap, const float *bp,
                                   float *c, int64_t ldc, bool load_c) {
  DL_ROWS(DL_DECLARE)
  if (load_c) {
    DL_ROWS(DL_LOAD)
  } else {
    DL_ROWS(DL_ZERO)
  }
  for (int64_t k = 0; k < kc; k++, ap += MR, bp += NR) {
    __m512 b0 = _mm512_loadu_ps(bp), b1 = _mm512_loadu_ps(bp + 16);
    DL_ROWS(DL_FMA)
  }
  DL_ROWS(DL_STORE)
}

/* r[i] := column i of the 16 x 16 matrix whose rows are r[0..15]:
 * pairs of rows, then quads, interleave within 128-bit lanes; two rounds of
 * lane shuffles finish the transpose. */
DL_AVX512 static void transpose16(__m512 r[16]) {
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

static __mmask16 first_lanes(int64_t n) {
  return n >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << n) - 1u);
}

/* Loads a 16 x kn block (rows >= `rows` zero) whose row i starts at
 * src + i*ld, transposes it and stores column k (kn of them) at
 * dst + k*dst_step under `store`. */
DL_AVX512 static void transpose_block(const float *src, int64_t ld, int rows, int64_t kn,
                                      float *dst, int64_t dst_step, __mmask16 store) {
  __m512 r[16];
  __mmask16 load = first_lanes(kn);
#pragma GCC unroll 16
  for (int i = 0; i < 16; i++)
    r[i] = i < rows ? _mm512_maskz_loadu_ps(load, src + i * ld) : _mm512_setzero_ps();
  transpose16(r);
  for (int64_t k = 0; k < kn; k++) _mm512_mask_storeu_ps(dst + k * dst_step, store, r[k]);
}

DL_AVX512 static void pack_a_avx512(bool trans, const float *a, int64_t lda, int64_t m,
                                    int64_t kc, float *out) {
  const __mmask16 panel = first_lanes(MR);
  for (int64_t i0 = 0; i0 < m; i0 += MR, out += MR * kc) {
    int rows = m - i0 < MR ? (int)(m - i0) : MR;
    if (trans) {
      __mmask16 valid = first_lanes(rows);
      for (int64_t k = 0; k < kc; k++)
        _mm512_mask_storeu_ps(out + k * MR, panel,
                              _mm512_maskz_loadu_ps(valid, a + k * lda + i0));
    } else {
      for (int64_t k = 0; k < kc; k += 16)
        transpose_block(a + i0 * lda + k, lda, rows, kc - k < 16 ? kc - k : 16,
                        out + k * MR, MR, panel);
    }
  }
}

DL_AVX512 static void pack_b_avx512(bool trans, const float *b, int64_t ldb, int64_t n,
                                    int64_t kc, float *out) {
  for (int64_t j0 = 0; j0 < n; j0 += NR, out += NR * kc) {
    int64_t cols = n - j0 < NR ? n - j0 : NR;
    __mmask16 lo = first_lanes(cols), hi = first_lanes(cols > 16 ? cols - 16 : 0);
    if (!trans) {
      for (int64_t k = 0; k < kc; k++) {
        const float *row = b + k * ldb + j0;
        _mm512_storeu_ps(out + k * NR, _mm512_maskz_loadu_ps(lo, row));
        _mm512_storeu_ps(out + k * NR + 16, _mm512_maskz_loadu_ps(hi, row + 16));
      }
      continue;
    }
    for (int half = 0; half < 2; half++) {
      int64_t left = cols - 16 * half;
      if (left <= 0) {
        for (int64_t k = 0; k < kc; k++) _mm512_storeu_ps(out + k * NR + 16, _mm512_setzero_ps());
        continue;
      }
      int rows = left < 16 ? (int)left : 16;
      for (int64_t k = 0; k < kc; k += 16)
        transpose_block(b + (j0 + 16 * half) * ldb + k, ldb, rows, kc - k < 16 ? kc - k : 16,
                        out + k * NR + 16 * half, NR, (__mmask16)0xFFFF);
    }
  }
}

const dl_gemm_isa *dl_gemm_isa_avx512(void) {
  static const dl_gemm_isa isa = {"avx512", MR, NR, kernel_14x32, pack_a_avx512,
                                  pack_b_avx512};
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") ? &isa : 0;
}

#else

const dl_gemm_isa *dl_gemm_isa_avx512(void) { return 0; }

#endif
