/* float16 / bfloat16 conversions by integer arithmetic on the bit patterns,
 * so they do not depend on the FPU's rounding mode or on F16C being there.
 * NaN keeps its sign and top payload bits and is made quiet, as the F16C
 * instruction and AVX-512 BF16 do. */
#include "numerics/half.h"

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

void dl_round_inplace(float *x, int64_t n, int half_dtype) {
  if (half_dtype == 1) {
    for (int64_t i = 0; i < n; i++) x[i] = dl_round_f16(x[i]);
  } else if (half_dtype == 2) {
    for (int64_t i = 0; i < n; i++) x[i] = dl_round_bf16(x[i]);
  }
}
