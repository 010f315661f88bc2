/* float16 / bfloat16 conversions by integer arithmetic on the bit patterns,
 * so they do not depend on the FPU's rounding mode or on F16C being there.
 * NaN keeps its sign and top payload bits and is made quiet, as the F16C
 * instruction and AVX-512 BF16 do. */
#include "numerics/half.h"

#include "numerics/cpu.h"

#include <stdbool.h>
#include <string.h>

static uint32_t float_bits(float x) {
  uint32_t u;
  memcpy(&u, &x, sizeof u);
  return u;
}

static float float_of(uint32_t u) {
  float x;
  memcpy(&x, &u, sizeof x);
  return x;
}

/* v >> shift rounded to nearest, ties to even (1 <= shift <= 31). */
static uint32_t shift_round_even(uint32_t v, int shift) {
  uint32_t half = 1u << (shift - 1);
  uint32_t rest = v & ((half << 1) - 1);
  uint32_t q = v >> shift;
  if (rest > half || (rest == half && (q & 1))) q++;
  return q;
}

uint16_t dl_f32_to_f16(float x) {
  uint32_t u = float_bits(x);
  uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
  uint32_t a = u & 0x7fffffff;
  if (a > 0x7f800000) return (uint16_t)(sign | 0x7e00 | ((a >> 13) & 0x3ff)); /* NaN */
  /* 65520 = 65504 + half an ulp: from here on the nearest half is inf. */
  if (a >= 0x477ff000) return (uint16_t)(sign | 0x7c00);
  if (a >= 0x38800000) { /* normal half: rebias the exponent, round 13 bits */
    uint32_t rebiased = a - ((uint32_t)(127 - 15) << 23);
    /* Branch-free ties-to-even (hot in AMP emulation); a carry out of the
     * mantissa correctly bumps the exponent. */
    return (uint16_t)(sign | ((rebiased + 0x0fff + ((rebiased >> 13) & 1)) >> 13));
  }
  /* Subnormal half (units of 2^-24); 2^-25 and below round to zero. */
  if (a <= 0x33000000) return sign;
  uint32_t exponent = a >> 23; /* 102..112 */
  uint32_t mantissa = (a & 0x7fffff) | 0x800000;
  return (uint16_t)(sign | shift_round_even(mantissa, (int)(126 - exponent)));
}

float dl_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000) << 16;
  uint32_t exponent = (h >> 10) & 0x1f;
  uint32_t mantissa = h & 0x3ff;
  if (exponent == 0x1f) return float_of(sign | 0x7f800000 | (mantissa << 13));
  if (exponent != 0) return float_of(sign | ((exponent + 127 - 15) << 23) | (mantissa << 13));
  if (mantissa == 0) return float_of(sign);
  /* Subnormal half m * 2^-24: normalize, so m = 1.f * 2^(p) with p <= 9. */
  int shift = 0;
  while (!(mantissa & 0x400)) {
    mantissa <<= 1;
    shift++;
  }
  uint32_t fexp = (uint32_t)(127 - 14 - shift);
  return float_of(sign | (fexp << 23) | ((mantissa & 0x3ff) << 13));
}

uint16_t dl_f32_to_bf16(float x) {
  uint32_t u = float_bits(x);
  if ((u & 0x7fffffff) > 0x7f800000) return (uint16_t)((u >> 16) | 0x0040); /* NaN */
  /* Round the low 16 bits away, ties to even; a carry into the exponent is
   * the correct rounding up (to inf beyond bfloat16's largest finite). */
  return (uint16_t)((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}

float dl_bf16_to_f32(uint16_t h) { return float_of((uint32_t)h << 16); }

/* dl_round_inplace in sixteen lanes: the integer operations of the scalar
 * conversions, there and back folded into one pattern per case, so every
 * lane gets the scalar function's bits (test_half compares them). AMP
 * emulation rounds every matmul operand and activation: the scalar loop
 * was a third of an AMP scenario's time. */
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#define HALF_AVX512 __attribute__((target("avx512f")))
#define HALF_AVX512_INLINE __attribute__((target("avx512f"), always_inline)) inline

static HALF_AVX512_INLINE __m512i splat(uint32_t v) { return _mm512_set1_epi32((int)v); }

/* The f16 subnormal case: m >> s rounded to nearest even (shift_round_even)
 * is the half's mantissa q, worth q * 2^-24, exact in float. Lanes where s
 * is out of 14..24 compute garbage (variable shifts past 31 give 0). */
static HALF_AVX512_INLINE __m512i f16_subnormal16(__m512i a) {
  __m512i m = _mm512_or_si512(_mm512_and_si512(a, splat(0x7fffff)), splat(0x800000));
  __m512i s = _mm512_sub_epi32(splat(126), _mm512_srli_epi32(a, 23));
  __m512i half = _mm512_sllv_epi32(splat(1), _mm512_sub_epi32(s, splat(1)));
  __m512i rest = _mm512_and_si512(m, _mm512_sub_epi32(_mm512_slli_epi32(half, 1), splat(1)));
  __m512i q = _mm512_srlv_epi32(m, s);
  __mmask16 up = _mm512_cmpgt_epu32_mask(rest, half) |
                 (_mm512_cmpeq_epi32_mask(rest, half) & _mm512_test_epi32_mask(q, splat(1)));
  q = _mm512_mask_add_epi32(q, up, q, splat(1));
  return _mm512_castps_si512(_mm512_mul_ps(_mm512_cvtepi32_ps(q), _mm512_set1_ps(0x1p-24f)));
}

static HALF_AVX512_INLINE __m512i round_f16_16(__m512i u) {
  __m512i a = _mm512_and_si512(u, splat(0x7fffffff));
  /* Normal half: rebiasing the exponent and back cancel, leaving the
   * 13-bit ties-to-even rounding of dl_f32_to_f16. */
  __m512i odd = _mm512_and_si512(_mm512_srli_epi32(a, 13), splat(1));
  __m512i r = _mm512_and_si512(_mm512_add_epi32(_mm512_add_epi32(a, splat(0x0fff)), odd),
                               splat(0xffffe000));
  __mmask16 sub = _mm512_cmplt_epu32_mask(a, splat(0x38800000));
  r = _mm512_mask_mov_epi32(r, sub, f16_subnormal16(a));
  r = _mm512_mask_mov_epi32(r, _mm512_cmple_epu32_mask(a, splat(0x33000000)), splat(0));
  r = _mm512_mask_mov_epi32(r, _mm512_cmpge_epu32_mask(a, splat(0x477ff000)), splat(0x7f800000));
  /* NaN: quiet, top ten payload bits kept. */
  __mmask16 nan = _mm512_cmpgt_epu32_mask(a, splat(0x7f800000));
  r = _mm512_mask_mov_epi32(r, nan,
                            _mm512_or_si512(_mm512_and_si512(a, splat(0xffffe000)),
                                            splat(0x00400000)));
  return _mm512_or_si512(r, _mm512_andnot_si512(splat(0x7fffffff), u));
}

static HALF_AVX512_INLINE __m512i round_bf16_16(__m512i u) {
  __m512i odd = _mm512_and_si512(_mm512_srli_epi32(u, 16), splat(1));
  __m512i r = _mm512_and_si512(_mm512_add_epi32(_mm512_add_epi32(u, splat(0x7fff)), odd),
                               splat(0xffff0000));
  __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, splat(0x7fffffff)),
                                          splat(0x7f800000));
  return _mm512_mask_mov_epi32(r, nan,
                               _mm512_or_si512(_mm512_and_si512(u, splat(0xffff0000)),
                                               splat(0x00400000)));
}

static HALF_AVX512 void round_avx512(float *x, int64_t n, int half_dtype) {
  for (int64_t i = 0; i < n; i += 16) {
    __mmask16 lanes = (__mmask16)(n - i >= 16 ? 0xffff : (1u << (n - i)) - 1u);
    __m512i u = _mm512_maskz_loadu_epi32(lanes, x + i);
    u = half_dtype == 1 ? round_f16_16(u) : round_bf16_16(u);
    _mm512_mask_storeu_epi32(x + i, lanes, u);
  }
}

#else
static void round_avx512(float *x, int64_t n, int half_dtype) {
  (void)x, (void)n, (void)half_dtype;
}
#endif

void dl_round_inplace(float *x, int64_t n, int half_dtype) {
  if ((half_dtype == 1 || half_dtype == 2) && n > 0 && dl_cpu_has_avx512f()) {
    round_avx512(x, n, half_dtype);
    return;
  }
  if (half_dtype == 1) {
    for (int64_t i = 0; i < n; i++) x[i] = dl_round_f16(x[i]);
  } else if (half_dtype == 2) {
    for (int64_t i = 0; i < n; i++) x[i] = dl_round_bf16(x[i]);
  }
}
