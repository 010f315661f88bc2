/* dl_sgemm's AVX-512 pieces: an 8 x 32 micro-kernel (16 zmm accumulators,
 * two B vectors, A broadcast from memory), packing that transposes 16 x 16
 * blocks in registers, and the narrow path for products of <= 16 columns.
 * Eight rows rather than the 14 the registers allow: the engine's row
 * counts (batch 64, 16 or 32 channels, 144 = 16*9 patch rows) are
 * multiples of 8 and leave 14-row panels part empty, while 16 accumulators
 * still keep both FMA ports busy (10 loads per 16 FMAs). Compiled for
 * AVX-512 per function (target attribute) and chosen at run time, so the
 * library runs on any x86-64. */
#include "backend/cpu/gemm_internal.h"

#if defined(__x86_64__) && defined(__GNUC__)

#include <immintrin.h>

#include "numerics/transpose16.h"

/* VL and FMA for the xmm and ymm edges. */
#define DL_AVX512 __attribute__((target("avx512f,avx512vl,fma")))

enum { MR = 8, NR = 32 };

#define DL_ROWS(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7)
#define DL_DECLARE(i) __m512 c##i##a, c##i##b;
#define DL_ZERO(i)               \
  c##i##a = _mm512_setzero_ps(); \
  c##i##b = _mm512_setzero_ps();
#define DL_LOAD(i)                                      \
  c##i##a = _mm512_loadu_ps(start.from + (i)*start.ld); \
  c##i##b = _mm512_loadu_ps(start.from + (i)*start.ld + 16);
#define DL_FMA(i)                              \
  {                                            \
    __m512 a = _mm512_set1_ps(ap[(i)*a_row]);  \
    c##i##a = _mm512_fmadd_ps(a, b0, c##i##a); \
    c##i##b = _mm512_fmadd_ps(a, b1, c##i##b); \
  }
#define DL_STORE(i)                       \
  _mm512_storeu_ps(c + (i)*ldc, c##i##a); \
  _mm512_storeu_ps(c + (i)*ldc + 16, c##i##b);

/* op(A)[i][k] at ap[i * a_row + k * a_k]: a packed panel (1, MR), or rows
 * of A read in place (lda, 1), which saves packing A when it is not
 * transposed; the eight rows are eight streams through L1. */
DL_AVX512 static inline __attribute__((always_inline)) void
tile_8x32(int64_t kc, const float *ap, int64_t a_row, int64_t a_k, const float *bp, float *c,
          int64_t ldc, dl_gemm_start start) {
  DL_ROWS(DL_DECLARE)
  if (start.from) {
    DL_ROWS(DL_LOAD)
  } else {
    DL_ROWS(DL_ZERO)
  }
#pragma GCC unroll 4
  for (int64_t k = 0; k < kc; k++, ap += a_k, bp += NR) {
    __m512 b0 = _mm512_loadu_ps(bp), b1 = _mm512_loadu_ps(bp + 16);
    DL_ROWS(DL_FMA)
  }
  DL_ROWS(DL_STORE)
}

DL_AVX512 static void kernel_8x32(int64_t kc, const float *ap, const float *bp, float *c,
                                  int64_t ldc, dl_gemm_start start) {
  tile_8x32(kc, ap, 1, MR, bp, c, ldc, start);
}

DL_AVX512 static void kernel_8x32_direct(int64_t kc, const float *a, int64_t lda, const float *bp,
                                         float *c, int64_t ldc, dl_gemm_start start) {
  tile_8x32(kc, a, lda, 1, bp, c, ldc, start);
}

static __mmask16 first_lanes(int64_t n) {
  return n >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << n) - 1u);
}

/* A ragged sub-tile (rows <= MR, cols <= NR) straight in C, op(A) packed
 * (a_row 1, a_k MR) or read in place (lda, 1) as in tile_8x32: C under
 * lane masks and row bounds, and lanes no wider than the columns need, so
 * that an edge of 4 columns (196 = 6*32 + 4 pixels) costs a quarter of a
 * tile rather than a whole one (on 256-bit FMA units, as Zen 4's, an xmm
 * FMA takes half a zmm's issue slots; elsewhere no more). The
 * accumulators of rows past `rows` see only A's padding zeros. */
DL_AVX512 static inline __attribute__((always_inline)) void
edge_tile(const int vectors, int64_t kc, const float *ap, int64_t a_row, int64_t a_k,
          const float *bp, float *c, int64_t ldc, dl_gemm_start start, int rows, __mmask16 lo,
          __mmask16 hi) {
  __m512 acc[MR][2];
#pragma GCC unroll 8
  for (int i = 0; i < MR; i++) {
    const bool load = start.from && i < rows;
    const float *from = load ? start.from + i * start.ld : NULL;
    acc[i][0] = load ? _mm512_maskz_loadu_ps(lo, from) : _mm512_setzero_ps();
    acc[i][1] = load && vectors == 2 ? _mm512_maskz_loadu_ps(hi, from + 16) : _mm512_setzero_ps();
  }
  for (int64_t k = 0; k < kc; k++, ap += a_k, bp += NR) {
    const __m512 b0 = _mm512_loadu_ps(bp);
    const __m512 b1 = vectors == 2 ? _mm512_loadu_ps(bp + 16) : b0;
#pragma GCC unroll 8
    for (int i = 0; i < MR; i++) {
      const __m512 a = _mm512_set1_ps(ap[i * a_row]);
      acc[i][0] = _mm512_fmadd_ps(a, b0, acc[i][0]);
      if (vectors == 2) acc[i][1] = _mm512_fmadd_ps(a, b1, acc[i][1]);
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < MR; i++) {
    if (i >= rows) break;
    _mm512_mask_storeu_ps(c + i * ldc, lo, acc[i][0]);
    if (vectors == 2) _mm512_mask_storeu_ps(c + i * ldc + 16, hi, acc[i][1]);
  }
}

/* The same on at most 8 (W = 256) or 4 (W empty) columns, one ymm or xmm
 * per row. */
#define DL_EDGE_TILE_NARROW(NAME, VEC, W)                                                 \
  DL_AVX512 static inline __attribute__((always_inline)) void NAME(                       \
      int64_t kc, const float *ap, int64_t a_row, int64_t a_k, const float *bp, float *c, \
      int64_t ldc, dl_gemm_start start, int rows, __mmask8 lanes) {                       \
    VEC acc[MR];                                                                          \
    _Pragma("GCC unroll 8") for (int i = 0; i < MR; i++)                                  \
        acc[i] = start.from && i < rows                                                   \
                     ? _mm##W##_maskz_loadu_ps(lanes, start.from + i * start.ld)          \
                     : _mm##W##_setzero_ps();                                             \
    for (int64_t k = 0; k < kc; k++, ap += a_k, bp += NR) {                               \
      const VEC b = _mm##W##_loadu_ps(bp);                                                \
      _Pragma("GCC unroll 8") for (int i = 0; i < MR; i++)                                \
          acc[i] = _mm##W##_fmadd_ps(_mm##W##_set1_ps(ap[i * a_row]), b, acc[i]);         \
    }                                                                                     \
    _Pragma("GCC unroll 8") for (int i = 0; i < MR; i++) if (i < rows)                    \
        _mm##W##_mask_storeu_ps(c + i * ldc, lanes, acc[i]);                              \
  }

DL_EDGE_TILE_NARROW(edge_tile_4, __m128, )
DL_EDGE_TILE_NARROW(edge_tile_8, __m256, 256)

DL_AVX512 static inline __attribute__((always_inline)) void
edge_any(int64_t kc, const float *ap, int64_t a_row, int64_t a_k, const float *bp, float *c,
         int64_t ldc, dl_gemm_start start, int rows, int cols) {
  const __mmask16 lo = first_lanes(cols), hi = first_lanes(cols > 16 ? cols - 16 : 0);
  if (cols <= 4) edge_tile_4(kc, ap, a_row, a_k, bp, c, ldc, start, rows, (__mmask8)lo);
  else if (cols <= 8) edge_tile_8(kc, ap, a_row, a_k, bp, c, ldc, start, rows, (__mmask8)lo);
  else if (cols <= 16) edge_tile(1, kc, ap, a_row, a_k, bp, c, ldc, start, rows, lo, hi);
  else edge_tile(2, kc, ap, a_row, a_k, bp, c, ldc, start, rows, lo, hi);
}

DL_AVX512 static void kernel_8x32_edge(int64_t kc, const float *ap, const float *bp, float *c,
                                       int64_t ldc, dl_gemm_start start, int rows, int cols) {
  edge_any(kc, ap, 1, MR, bp, c, ldc, start, rows, cols);
}

DL_AVX512 static void kernel_8x32_direct_edge(int64_t kc, const float *a, int64_t lda,
                                              const float *bp, float *c, int64_t ldc,
                                              dl_gemm_start start, int cols) {
  edge_any(kc, a, lda, 1, bp, c, ldc, start, MR, cols);
}

/* r[i] := the first kn floats of row i of a block whose row i starts at
 * src + i*ld; rows from `rows` on, and lanes from kn on, are zero. */
DL_AVX512 static void load_block(const float *src, int64_t ld, int rows, int64_t kn, __m512 r[16]) {
  const __mmask16 load = first_lanes(kn);
#pragma GCC unroll 16
  for (int i = 0; i < 16; i++)
    r[i] = i < rows ? _mm512_maskz_loadu_ps(load, src + i * ld) : _mm512_setzero_ps();
}

/* Loads a 16 x kn block (rows >= `rows` zero) whose row i starts at
 * src + i*ld, transposes it and stores column k (kn of them) at
 * dst + k*dst_step under `store`. */
DL_AVX512 static void transpose_block(const float *src, int64_t ld, int rows, int64_t kn,
                                      float *dst, int64_t dst_step, __mmask16 store) {
  __m512 r[16];
  load_block(src, ld, rows, kn, r);
  dl_transpose16(r);
  for (int64_t k = 0; k < kn; k++) _mm512_mask_storeu_ps(dst + k * dst_step, store, r[k]);
}

/* Two panels at a time: a 16-row block transposes to columns whose low
 * eight lanes belong to panel p and high eight to panel p + 1. */
DL_AVX512 static void pack_a_avx512(bool trans, const float *a, int64_t lda, int64_t m, int64_t kc,
                                    float *out) {
  for (int64_t i0 = 0; i0 < m; i0 += 2 * MR, out += 2 * MR * kc) {
    const int rows = m - i0 < 2 * MR ? (int)(m - i0) : 2 * MR;
    float *second = rows > MR ? out + MR * kc : NULL;
    __m512 r[16];
    for (int64_t k0 = 0; k0 < kc; k0 += 16) {
      const int64_t kn = kc - k0 < 16 ? kc - k0 : 16;
      if (trans) {
        const __mmask16 valid = first_lanes(rows);
        for (int64_t k = 0; k < kn; k++)
          r[k] = _mm512_maskz_loadu_ps(valid, a + (k0 + k) * lda + i0);
      } else {
        load_block(a + i0 * lda + k0, lda, rows, kn, r);
        dl_transpose16(r);
      }
      for (int64_t k = 0; k < kn; k++) {
        _mm256_storeu_ps(out + (k0 + k) * MR, _mm512_castps512_ps256(r[k]));
        if (second)
          _mm256_storeu_ps(second + (k0 + k) * MR,
                           _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(r[k]), 1)));
      }
    }
  }
}

DL_AVX512 static void pack_b_avx512(bool trans, const float *b, int64_t ldb, int64_t n, int64_t kc,
                                    float *out) {
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

/* ---- the narrow path: n <= 16 columns, one zmm of lanes ---- */

enum { NARROW_NR = 16, NARROW_ROWS = 16 };

/* `rows` (a constant once inlined) accumulators stay in registers across
 * all of k: op(A) is broadcast straight from memory, one row per
 * accumulator, and one masked load of op(B) serves them all. */
DL_AVX512 static inline __attribute__((always_inline)) void
narrow_rows(const int rows, int64_t k, const float *a, int64_t a_row, int64_t a_k, const float *b,
            int64_t b_k, __mmask16 lanes, float beta, float *c, int64_t ldc) {
  __m512 acc[NARROW_ROWS];
#pragma GCC unroll 16
  for (int i = 0; i < rows; i++)
    acc[i] = beta == 0.0f ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(lanes, c + i * ldc);
  if (beta != 0.0f && beta != 1.0f) {
#pragma GCC unroll 16
    for (int i = 0; i < rows; i++) acc[i] = _mm512_mul_ps(acc[i], _mm512_set1_ps(beta));
  }
  for (int64_t kk = 0; kk < k; kk++, a += a_k, b += b_k) {
    const __m512 bk = _mm512_maskz_loadu_ps(lanes, b);
#pragma GCC unroll 16
    for (int i = 0; i < rows; i++)
      acc[i] = _mm512_fmadd_ps(_mm512_set1_ps(a[i * a_row]), bk, acc[i]);
  }
#pragma GCC unroll 16
  for (int i = 0; i < rows; i++) _mm512_mask_storeu_ps(c + i * ldc, lanes, acc[i]);
}

#define DL_NARROW_CASE(R) \
  case R: narrow_rows(R, k, a, a_row, a_k, b, b_k, lanes, beta, c, ldc); break;

DL_AVX512 static void narrow_block(int rows, int64_t k, const float *a, int64_t a_row, int64_t a_k,
                                   const float *b, int64_t b_k, __mmask16 lanes, float beta,
                                   float *c, int64_t ldc) {
  switch (rows) {
    DL_NARROW_CASE(1)
    DL_NARROW_CASE(2)
    DL_NARROW_CASE(3)
    DL_NARROW_CASE(4)
    DL_NARROW_CASE(5)
    DL_NARROW_CASE(6)
    DL_NARROW_CASE(7)
    DL_NARROW_CASE(8)
    DL_NARROW_CASE(9)
    DL_NARROW_CASE(10)
    DL_NARROW_CASE(11)
    DL_NARROW_CASE(12)
    DL_NARROW_CASE(13)
    DL_NARROW_CASE(14)
    DL_NARROW_CASE(15)
    DL_NARROW_CASE(16)
  }
}

/* Rows in near-equal blocks of at most 16: fewer than eight accumulators
 * would wait on the FMA latency. */
DL_AVX512 static void narrow_avx512(int64_t m, int64_t n, int64_t k, const float *a, int64_t a_row,
                                    int64_t a_k, const float *b, int64_t b_k, float beta, float *c,
                                    int64_t ldc) {
  const __mmask16 lanes = first_lanes(n);
  const int64_t blocks = (m + NARROW_ROWS - 1) / NARROW_ROWS;
  for (int64_t blk = 0; blk < blocks; blk++) {
    const int64_t i0 = blk * m / blocks, i1 = (blk + 1) * m / blocks;
    narrow_block((int)(i1 - i0), k, a + i0 * a_row, a_row, a_k, b, b_k, lanes, beta, c + i0 * ldc,
                 ldc);
  }
}

/* B^T of n <= 16 rows into one 16-wide panel: out[k*16 + j] = b[j*ldb + k]. */
DL_AVX512 static void narrow_pack_bt_avx512(const float *b, int64_t ldb, int64_t n, int64_t kc,
                                            float *out) {
  for (int64_t k = 0; k < kc; k += 16)
    transpose_block(b + k, ldb, (int)n, kc - k < 16 ? kc - k : 16, out + k * NARROW_NR, NARROW_NR,
                    (__mmask16)0xFFFF);
}

const dl_gemm_isa *dl_gemm_isa_avx512(void) {
  static const dl_gemm_isa isa = {.name = "avx512",
                                  .mr = MR,
                                  .nr = NR,
                                  .kernel = kernel_8x32,
                                  .kernel_edge = kernel_8x32_edge,
                                  .kernel_direct = kernel_8x32_direct,
                                  .kernel_direct_edge = kernel_8x32_direct_edge,
                                  .pack_a = pack_a_avx512,
                                  .pack_b = pack_b_avx512,
                                  .narrow_nr = NARROW_NR,
                                  .narrow_pack_bt = narrow_pack_bt_avx512,
                                  .narrow = narrow_avx512};
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
                 __builtin_cpu_supports("fma")
             ? &isa
             : 0;
}

#else

const dl_gemm_isa *dl_gemm_isa_avx512(void) { return 0; }

#endif
