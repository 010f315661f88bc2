/* The engine's own elementary functions (see fmath.h). Everything is plain
 * IEEE double arithmetic in an order fixed by the code: no libm call, no
 * table lookup that depends on the machine, so the bits are the same with
 * every libc and compiler (the build uses -ffp-contract=off).
 *
 * dl_exp and dl_log follow fdlibm's e_exp.c and e_log.c, with their
 * coefficients, accurate to < 1 ulp in double. fdlibm's notice: "Copyright
 * (C) 1993 by Sun Microsystems, Inc. All rights reserved. Developed at
 * SunPro, a Sun Microsystems, Inc. business. Permission to use, copy,
 * modify, and distribute this software is freely granted, provided that
 * this notice is preserved." The float
 * functions evaluate in double with a relative error far below 2^-30 and
 * round once, so they are within 1 ulp of the correctly rounded result (and
 * almost always equal to it). The erf and tanh polynomials are least-error
 * Chebyshev fits made with mpmath.chebyfit; each table states its range and
 * its measured error. sin and cos use Taylor coefficients 1/n!. */
#include "numerics/fmath.h"

#include "numerics/cpu.h"

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

static uint64_t bits_of(double x) {
  uint64_t u;
  memcpy(&u, &x, sizeof u);
  return u;
}

static double double_of(uint64_t u) {
  double x;
  memcpy(&x, &u, sizeof x);
  return x;
}

/* 2^k for -1022 <= k <= 1023, built from its bits. */
static double pow2i(int k) { return double_of((uint64_t)(k + 1023) << 52); }

/* c[0] + t*(c[1] + t*(c[2] + ...)), always in this order. */
static double horner(const double *c, int n, double t) {
  double acc = c[n - 1];
  for (int i = n - 2; i >= 0; i--) acc = acc * t + c[i];
  return acc;
}

/* ---- exp ---------------------------------------------------------------- */

static const double EXP_OVERFLOW = 7.09782712893383973096e+02;   /* ln(DBL_MAX) */
static const double EXP_UNDERFLOW = -7.45133219101941108420e+02; /* ln(2^-1075) */
static const double LN2_HI = 6.93147180369123816490e-01;         /* 32 bits: k*LN2_HI exact */
static const double LN2_LO = 1.90821492927058770002e-10;
static const double INV_LN2 = 1.44269504088896338700e+00;
/* r*(exp(r)+1)/(exp(r)-1) ~ 2 + P1 r^2 + ... + P5 r^10 on |r| <= ln2/2. */
static const double EXP_P[5] = {
    1.66666666666666019037e-01,  -2.77777777770155933842e-03, 6.61375632143793436117e-05,
    -1.65339022054652515390e-06, 4.13813679705723846039e-08,
};

double dl_exp(double x) {
  if (x != x) return x + x;
  if (x > EXP_OVERFLOW) return INFINITY;
  if (x < EXP_UNDERFLOW) return 0.0;
  double ax = fabs(x);
  if (ax < 0x1p-28) return 1.0 + x; /* exp(x) - 1 - x < 2^-57 */
  /* x = k ln2 + r with |r| <= ln2/2, r carried as hi - lo. */
  int k = 0;
  double hi = x, lo = 0.0;
  if (ax > 0.5 * 6.93147180559945286227e-01) {
    k = (int)(INV_LN2 * x + (x < 0 ? -0.5 : 0.5));
    double kd = (double)k;
    hi = x - kd * LN2_HI;
    lo = kd * LN2_LO;
  }
  double r = hi - lo;
  double t = r * r;
  double c = r - t * horner(EXP_P, 5, t);
  if (k == 0) return 1.0 - ((r * c) / (c - 2.0) - r);
  double y = 1.0 - ((lo - (r * c) / (2.0 - c)) - hi);
  /* y * 2^k without overflowing or flushing the scale factor itself. */
  if (k > 1023) return y * 2.0 * pow2i(k - 1);
  if (k >= -1021) return y * pow2i(k);
  return y * pow2i(k + 1000) * 0x1p-1000;
}

/* ---- log ---------------------------------------------------------------- */

/* Lg1 z + ... + Lg7 z^7 (z = s^2) approximates log((1+s)/(1-s))/s - 2 on
 * |s| <= 0.1716, where s = f/(2+f) and 1+f is the reduced argument. */
static const double LOG_LG[7] = {
    6.666666666666735130e-01, 3.999999999940941908e-01, 2.857142874366239149e-01,
    2.222219843214978396e-01, 1.818357216161805012e-01, 1.531383769920937332e-01,
    1.479819860511658591e-01,
};

double dl_log(double x) {
  uint64_t u = bits_of(x);
  int32_t hx = (int32_t)(u >> 32);
  int k = 0;
  if (hx < 0x00100000) { /* zero, negative, or subnormal */
    if ((u & 0x7fffffffffffffffULL) == 0) return -INFINITY;
    if (hx < 0) return NAN;
    k = -54;
    x *= 0x1p54;
    hx = (int32_t)(bits_of(x) >> 32);
  }
  if (hx >= 0x7ff00000) return x + x; /* +inf or NaN */
  k += (hx >> 20) - 1023;
  hx &= 0x000fffff;
  /* Normalize the mantissa into [sqrt(2)/2, sqrt(2)) so that |f| is small. */
  int32_t i = (hx + 0x95f64) & 0x100000;
  x = double_of(((uint64_t)(uint32_t)(hx | (i ^ 0x3ff00000)) << 32) | (bits_of(x) & 0xffffffffULL));
  k += i >> 20;
  double f = x - 1.0;
  double dk = (double)k;
  if ((0x000fffff & (2 + hx)) < 3) { /* |f| < 2^-20: short series */
    if (f == 0.0) return k == 0 ? 0.0 : dk * LN2_HI + dk * LN2_LO;
    double r = f * f * (0.5 - 0.33333333333333333 * f);
    if (k == 0) return f - r;
    return dk * LN2_HI - ((r - dk * LN2_LO) - f);
  }
  double s = f / (2.0 + f);
  double z = s * s;
  double w = z * z;
  double t1 = w * (LOG_LG[1] + w * (LOG_LG[3] + w * LOG_LG[5]));
  double t2 = z * (LOG_LG[0] + w * (LOG_LG[2] + w * (LOG_LG[4] + w * LOG_LG[6])));
  double r = t2 + t1;
  if (((hx - 0x6147a) | (0x6b851 - hx)) > 0) { /* f far from 0: f^2/2 split */
    double hfsq = 0.5 * f * f;
    if (k == 0) return f - (hfsq - s * (hfsq + r));
    return dk * LN2_HI - ((hfsq - (s * (hfsq + r) + dk * LN2_LO)) - f);
  }
  if (k == 0) return f - s * (f - r);
  return dk * LN2_HI - ((s * (f - r) - dk * LN2_LO) - f);
}

float dl_expf(float x) { return (float)dl_exp((double)x); }

float dl_logf(float x) { return (float)dl_log((double)x); }

/* ---- tanh --------------------------------------------------------------- */

/* tanh(x)/x as a polynomial in s = x^2 on [0, 0.3025] (|x| < 0.55), constant
 * term exactly 1 so that tanh(x) = x for tiny x; max relative error 9.5e-14. */
static const double TANH_SMALL[9] = {
    1.0,
    -0.3333333333330133,
    0.13333333319778815,
    -0.05396824451257416,
    0.02186923608915792,
    -0.00885990445394119,
    0.0035680076623922107,
    -0.0013570987618154516,
    0.00036903745235464236,
};

float dl_tanhf(float x) {
  double xd = (double)x;
  double a = fabs(xd);
  if (x != x) return x;
  /* tanh(20) = 1 - 8e-18: every float from here on rounds to +-1. */
  if (a >= 20.0) return x < 0 ? -1.0f : 1.0f;
  if (a < 0.55) return (float)(xd * horner(TANH_SMALL, 9, xd * xd));
  /* 1 - 2/(e^2a + 1) >= 0.5 here, so the subtraction loses < 1 bit. */
  double t = 1.0 - 2.0 / (dl_exp(2.0 * a) + 1.0);
  return (float)(x < 0 ? -t : t);
}

/* ---- erf ---------------------------------------------------------------- */

/* erf(x)/x as a polynomial in s = x^2 on [0, 1], constant term 2/sqrt(pi)
 * rounded; max relative error 8.5e-14. */
static const double ERF_SMALL[10] = {
    1.1283791670955126,      -0.3761263890317593,     0.11283791669687995,
    -0.026866170306326077,   0.005223974129231751,    -0.0008548145722759548,
    0.00012050027003858794,  -1.4833713561284692e-05, 1.5519372851262185e-06,
    -1.0955538244860366e-07,
};
/* erfc(x)*exp(x^2) as a polynomial in x - 1.5 on [1, 2]; max rel error 6.5e-14. */
static const double ERFC_MID[13] = {
    0.3215854164543175,     -0.1636229177320682,    0.07615103985533955,   -0.03293090535461383,
    0.013377340968496385,   -0.005145955789362279,  0.0018861343840868743, -0.0006619541076722324,
    0.00022331668411537935, -7.249959244299595e-05, 2.281963339455675e-05, -7.478518299832634e-06,
    2.208249202680029e-06,
};
/* erfc(x)*exp(x^2) as a polynomial in x - 3 on [2, 4]; max rel error 5.7e-12
 * (erfc < 0.005 there, so erf's absolute error stays below 3e-14). */
static const double ERFC_TAIL[13] = {
    0.17900115118138996,     -0.05437225999492471,    0.015884371157223305,
    -0.004479431360758006,   0.0012230391264038756,   -0.0003241228166496818,
    8.35535497633769e-05,    -2.0998745607080147e-05, 5.1484439992365845e-06,
    -1.2181170790223378e-06, 2.8596657284839875e-07,  -7.83067162532776e-08,
    1.7542217822787558e-08,
};

float dl_erff(float x) {
  double xd = (double)x;
  double a = fabs(xd);
  if (x != x) return x;
  if (a < 1.0) return (float)(xd * horner(ERF_SMALL, 10, xd * xd));
  /* erf rounds to +-1 in float from |x| = 3.9192059 on. */
  if (a >= 4.0) return x < 0 ? -1.0f : 1.0f;
  double scaled = a < 2.0 ? horner(ERFC_MID, 13, a - 1.5) : horner(ERFC_TAIL, 13, a - 3.0);
  double e = 1.0 - dl_exp(-(a * a)) * scaled; /* a*a is exact: a has 24 bits */
  return (float)(x < 0 ? -e : e);
}

/* ---- sin, cos ----------------------------------------------------------- */

/* Taylor coefficients (-1)^n/(2n+1)! and (-1)^n/(2n)!, n >= 1; on |r| <= pi/4
 * the first omitted terms are below 1e-19. */
static const double SIN_T[8] = {
    -0.16666666666666666,   0.008333333333333333,   -0.0001984126984126984, 2.7557319223985893e-06,
    -2.505210838544172e-08, 1.6059043836821613e-10, -7.647163731819816e-13, 2.8114572543455206e-15,
};
static const double COS_T[9] = {
    -0.5,
    0.041666666666666664,
    -0.001388888888888889,
    2.48015873015873e-05,
    -2.755731922398589e-07,
    2.08767569878681e-09,
    -1.1470745597729725e-11,
    4.779477332387385e-14,
    -1.5619206968586225e-16,
};

static double sin_kernel(double r) {
  double z = r * r;
  return r + r * z * horner(SIN_T, 8, z);
}

static double cos_kernel(double r) {
  double z = r * r;
  return 1.0 + z * horner(COS_T, 9, z);
}

/* sin or cos of q*pi/2 + r, |r| <= ~pi/4. */
static double sin_quadrant(unsigned q, double r) {
  switch (q & 3) {
  case 0: return sin_kernel(r);
  case 1: return cos_kernel(r);
  case 2: return -sin_kernel(r);
  default: return -cos_kernel(r);
  }
}

static double cos_quadrant(unsigned q, double r) { return sin_quadrant(q + 1, r); }

static const double PIO2 = 1.5707963267948966;
static const double INV_PIO2 = 0.63661977236758134;
/* pi/2 = PIO2_1 + PIO2_2 + PIO2_3; the first two have 33 bits, so q*PIO2_1
 * and q*PIO2_2 are exact for q < 2^20. */
static const double PIO2_1 = 1.5707963267341256;
static const double PIO2_2 = 6.077100506303966e-11;
static const double PIO2_3 = 2.0222662487959506e-21;

/* Bits of 2/pi after the binary point, 32 to a word (enough for float's
 * largest exponent plus a 96-bit window). */
static const uint32_t TWO_OVER_PI[8] = {
    0xA2F9836E, 0x4E441529, 0xFC2757D1, 0xF534DDC0, 0xDB629599, 0x3C439041, 0xFE5163AB, 0xDEBBC561,
};

/* Bits start..start+31 of 2/pi (bit 1 is the first after the point; bits at
 * positions <= 0 are the integer part, zero). */
static uint32_t two_over_pi_bits(int start) {
  if (start <= 0) return start > -32 ? two_over_pi_bits(1) >> (1 - start) : 0;
  int word = (start - 1) / 32, shift = (start - 1) % 32;
  uint32_t v = TWO_OVER_PI[word] << shift;
  if (shift) v |= TWO_OVER_PI[word + 1] >> (32 - shift);
  return v;
}

/* Payne-Hanek for finite |x| >= 2^19: x*2/pi mod 4 from a 96-bit window of
 * 2/pi, exact integer arithmetic. Absolute error < 2^-70 quarter turns, so
 * even the float closest to a multiple of pi/2 keeps ~40 correct bits. */
static void reduce_large(float ax, unsigned *q, double *r) {
  uint32_t u;
  memcpy(&u, &ax, sizeof u);
  int e = (int)(u >> 23) - 150; /* ax = m * 2^e */
  uint64_t m = (u & 0x7fffff) | 0x800000;
  /* Bits of 2/pi before position e-1 weigh multiples of 4: drop them. */
  int s = e - 1;
  uint64_t p2 = m * two_over_pi_bits(s + 64);
  uint64_t p1 = m * two_over_pi_bits(s + 32) + (p2 >> 32);
  uint64_t p0 = m * two_over_pi_bits(s) + (p1 >> 32);
  uint32_t w0 = (uint32_t)p0, w1 = (uint32_t)p1, w2 = (uint32_t)p2;
  /* w0:w1:w2 = x*2/pi mod 4 in units of 2^-94; top 2 bits = quadrant. */
  unsigned quad = w0 >> 30;
  uint64_t frac = ((uint64_t)w0 << 34) | ((uint64_t)w1 << 2) | (w2 >> 30);
  double low = (double)(w2 & 0x3fffffff) * 0x1p-94;
  double f;
  if (frac >> 63) { /* fraction >= 1/2: round to the next quadrant */
    quad++;
    f = -((double)(~frac + 1) * 0x1p-64) + low;
  } else {
    f = (double)frac * 0x1p-64 + low;
  }
  *q = quad;
  *r = f * PIO2;
}

/* x = q*pi/2 + r with |r| <= ~pi/4 (NaN r for inf/NaN). */
static void reduce_float(float x, unsigned *q, double *r) {
  double xd = (double)x;
  double a = fabs(xd);
  if (a < 0x1p19) { /* Cody-Waite: exact first two steps, see PIO2_1 */
    int k = (int)(xd * INV_PIO2 + (xd < 0 ? -0.5 : 0.5));
    double kd = (double)k;
    *q = (unsigned)k;
    *r = ((xd - kd * PIO2_1) - kd * PIO2_2) - kd * PIO2_3;
    return;
  }
  if (!(a <= 3.4028234663852886e+38)) {
    *q = 0;
    *r = xd - xd; /* NaN */
    return;
  }
  reduce_large((float)a, q, r);
  if (x < 0) {
    *q = 0u - *q;
    *r = -*r;
  }
}

float dl_sinf(float x) {
  if (x == 0.0f) return x; /* keeps the sign of -0, which the kernel loses */
  unsigned q;
  double r;
  reduce_float(x, &q, &r);
  return (float)sin_quadrant(q, r);
}

float dl_cosf(float x) {
  unsigned q;
  double r;
  reduce_float(x, &q, &r);
  return (float)cos_quadrant(q, r);
}

/* cos(pi*x) for Box-Muller: the reduction to quarter turns is exact, so the
 * only roundings are f*pi/2 and the kernel (~2 ulp). Not in fmath.h yet:
 * philox.c declares it. */
double dl_cospi(double x);

double dl_cospi(double x) {
  double a = fabs(x);
  if (!(a < 0x1p52)) {
    if (a != a || a == INFINITY) return x - x;
    /* An integer; odd only below 2^53. */
    return (a < 0x1p53 && ((uint64_t)a & 1)) ? -1.0 : 1.0;
  }
  double y = 2.0 * a; /* quarter turns; cos is even */
  int64_t k = (int64_t)y;
  double f = y - (double)k; /* exact, in [0, 1) */
  if (f > 0.5) {
    k++;
    f -= 1.0; /* exact */
  }
  return cos_quadrant((unsigned)(k & 3), f * PIO2);
}

/* ---- expf and erff over arrays ------------------------------------------ */

/* The lanes below repeat the scalar code's operations in the same order, one
 * double per lane: IEEE add, sub, mul and div round alike in a vector and in
 * a scalar register, float <-> double conversions round to nearest in both,
 * and the build keeps -ffp-contract=off (the intrinsics name no FMA). Lanes
 * the fast path does not cover (NaN, infinities, tiny or huge arguments) are
 * recomputed with the scalar function. */
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#define DL_FMATH_AVX512 __attribute__((target("avx512f")))
#define DL_FMATH_AVX512_INLINE __attribute__((target("avx512f"), always_inline)) inline

static DL_FMATH_AVX512_INLINE __m512d abs8(__m512d x) {
  return _mm512_castsi512_pd(
      _mm512_and_si512(_mm512_castpd_si512(x), _mm512_set1_epi64(0x7fffffffffffffffLL)));
}

static DL_FMATH_AVX512_INLINE __m512d negate8_where(__mmask8 m, __m512d x) {
  __m512i u = _mm512_castpd_si512(x);
  return _mm512_castsi512_pd(_mm512_mask_xor_epi64(u, m, u, _mm512_set1_epi64(INT64_MIN)));
}

/* horner() in eight lanes: c[0] + t*(c[1] + ...), the same order. */
static DL_FMATH_AVX512_INLINE __m512d horner8(const double *c, int n, __m512d t) {
  __m512d acc = _mm512_set1_pd(c[n - 1]);
  for (int i = n - 2; i >= 0; i--) acc = _mm512_add_pd(_mm512_mul_pd(acc, t), _mm512_set1_pd(c[i]));
  return acc;
}

/* exp_normal in eight lanes (dl_exp's operations with k = 0 near zero, see
 * dl_exp): right for lanes with x in [-708, 709] and |x| >= 2^-28, garbage
 * (but no trap: exceptions are masked) in the others. */
static DL_FMATH_AVX512_INLINE __m512d exp_normal8(__m512d x) {
  const __m512d zero = _mm512_setzero_pd();
  __mmask8 neg = _mm512_cmp_pd_mask(x, zero, _CMP_LT_OQ);
  __m512d half = _mm512_mask_mov_pd(_mm512_set1_pd(0.5), neg, _mm512_set1_pd(-0.5));
  __m512d kf = _mm512_add_pd(_mm512_mul_pd(_mm512_set1_pd(INV_LN2), x), half);
  /* (int) truncates; |kf| < 2^31 in the lanes that count. */
  __m256i k32 = _mm512_cvttpd_epi32(kf);
  __mmask8 reduce = _mm512_cmp_pd_mask(abs8(x), _mm512_set1_pd(0.5 * 6.93147180559945286227e-01),
                                       _CMP_GT_OQ);
  __m512d kd = _mm512_maskz_mov_pd(reduce, _mm512_cvtepi32_pd(k32));
  __m512d hi = _mm512_sub_pd(x, _mm512_mul_pd(kd, _mm512_set1_pd(LN2_HI)));
  __m512d lo = _mm512_mul_pd(kd, _mm512_set1_pd(LN2_LO));
  __m512d r = _mm512_sub_pd(hi, lo);
  __m512d t = _mm512_mul_pd(r, r);
  __m512d c = _mm512_sub_pd(r, _mm512_mul_pd(t, horner8(EXP_P, 5, t)));
  __m512d q = _mm512_div_pd(_mm512_mul_pd(r, c), _mm512_sub_pd(_mm512_set1_pd(2.0), c));
  __m512d y = _mm512_sub_pd(_mm512_set1_pd(1.0), _mm512_sub_pd(_mm512_sub_pd(lo, q), hi));
  /* 2^k from its bits (pow2i); k = 0 where reduce is off, as kd. */
  __m512i k = _mm512_cvtepi32_epi64(_mm512_cvttpd_epi32(kd));
  __m512i bits = _mm512_slli_epi64(_mm512_add_epi64(k, _mm512_set1_epi64(1023)), 52);
  return _mm512_mul_pd(y, _mm512_castsi512_pd(bits));
}

/* The eight lanes of y, rounded to float, into out; the lanes of `redo`
 * from the scalar function fn instead (read from in before the store: in
 * may be out). */
static DL_FMATH_AVX512_INLINE void store8(float *out, __m512d y, __mmask8 redo, const float *in,
                                          float (*fn)(float)) {
  if (!redo) {
    _mm256_storeu_ps(out, _mm512_cvtpd_ps(y));
    return;
  }
  float ys[8];
  _mm256_storeu_ps(ys, _mm512_cvtpd_ps(y));
  for (int j = 0; j < 8; j++)
    if ((redo >> j) & 1) ys[j] = fn(in[j]);
  memcpy(out, ys, sizeof ys);
}

/* dl_expf of in[0..7] into out[0..7], with dl_exp's own operations. */
static DL_FMATH_AVX512_INLINE void expf8_exact(const float *in, float *out) {
  __m256 xf = _mm256_loadu_ps(in);
  __m512d x = _mm512_cvtps_pd(xf);
  __m512d a = abs8(x);
  /* dl_exp's cases: |x| < 2^-28 gives 1 + x (zeros included: every softmax
   * row has one); up to 256 the kernel; NaN, infinities and the rest the
   * scalar function. Other lanes get exp(0): no garbage arguments
   * (subnormal garbage would cost microcode assists). */
  __mmask8 tiny = _mm512_cmp_pd_mask(a, _mm512_set1_pd(0x1p-28), _CMP_LT_OQ);
  __mmask8 normal = _mm512_cmp_pd_mask(a, _mm512_set1_pd(0x1p-28), _CMP_GE_OQ) &
                    _mm512_cmp_pd_mask(a, _mm512_set1_pd(256.0), _CMP_LE_OQ);
  __m512d y = exp_normal8(_mm512_maskz_mov_pd(normal, x));
  y = _mm512_mask_add_pd(y, tiny, _mm512_set1_pd(1.0), x);
  store8(out, y, (__mmask8) ~(tiny | normal), in, dl_expf);
}

/* A quicker way to dl_expf's bits. dl_exp is within 1 ulp of exp(x) in
 * double, so dl_expf(x) is exp(x) rounded to float unless exp(x) lies
 * within about an ulp of a midpoint between two floats. The quick path
 * computes exp(x) to within 32 ulps in double: x = (32m + j) ln2/32 + r,
 * |r| <= ln2/64, exp(x) = 2^m 2^(j/32) e^r, 2^(j/32) from a table
 * (correctly rounded, made with mpmath at 200 bits), e^r - 1 its Taylor
 * polynomial to r^5 (error below r^6/720 * 1.02 < 2^-48.6). Where its
 * result lies further than 2^10 ulps from a midpoint, exp(x) and dl_exp's
 * result both lie on its side, and it rounds as dl_expf does; a group
 * with a lane closer (one lane in about 2^18), or with a lane outside
 * [-87, 88.5] (float results subnormal, infinite or NaN), takes
 * expf8_exact instead. test_fmath compares every float. */
static const double EXP2_J32[32] = {
    0x1.0000000000000p+0, 0x1.059b0d3158574p+0, 0x1.0b5586cf9890fp+0, 0x1.11301d0125b51p+0,
    0x1.172b83c7d517bp+0, 0x1.1d4873168b9aap+0, 0x1.2387a6e756238p+0, 0x1.29e9df51fdee1p+0,
    0x1.306fe0a31b715p+0, 0x1.371a7373aa9cbp+0, 0x1.3dea64c123422p+0, 0x1.44e086061892dp+0,
    0x1.4bfdad5362a27p+0, 0x1.5342b569d4f82p+0, 0x1.5ab07dd485429p+0, 0x1.6247eb03a5585p+0,
    0x1.6a09e667f3bcdp+0, 0x1.71f75e8ec5f74p+0, 0x1.7a11473eb0187p+0, 0x1.82589994cce13p+0,
    0x1.8ace5422aa0dbp+0, 0x1.93737b0cdc5e5p+0, 0x1.9c49182a3f090p+0, 0x1.a5503b23e255dp+0,
    0x1.ae89f995ad3adp+0, 0x1.b7f76f2fb5e47p+0, 0x1.c199bdd85529cp+0, 0x1.cb720dcef9069p+0,
    0x1.d5818dcfba487p+0, 0x1.dfc97337b9b5fp+0, 0x1.ea4afa2a490dap+0, 0x1.f50765b6e4540p+0,
};
static const double EXP_INV_L = 0x1.71547652b82fep+5; /* 32 / ln2 */
static const double EXP_L_HI = 0x1.62e42fefa39efp-6;  /* ln2/32 = L_HI + L_LO */
static const double EXP_L_LO = 0x1.abc9e3b39803fp-61;
static const double EXP_TAYLOR[5] = {1.0, 1.0 / 2, 1.0 / 6, 1.0 / 24, 1.0 / 120};
enum { EXP_MIDPOINT_ULPS = 1 << 10 };

/* The quick exp in double for lanes with x in [-87, 88.5] (others:
 * garbage, no trap). */
static DL_FMATH_AVX512_INLINE __m512d exp_quick8(__m512d x) {
  /* k = 32m + j, to nearest, from the bits of x 32/ln2 + 1.5 * 2^52. */
  const __m512d shift = _mm512_set1_pd(0x1.8p52);
  const __m512d kshift = _mm512_fmadd_pd(x, _mm512_set1_pd(EXP_INV_L), shift);
  const __m512d kd = _mm512_sub_pd(kshift, shift);
  const __m512i k = _mm512_sub_epi64(_mm512_castpd_si512(kshift), _mm512_castpd_si512(shift));
  __m512d r = _mm512_fnmadd_pd(kd, _mm512_set1_pd(EXP_L_HI), x);
  r = _mm512_fnmadd_pd(kd, _mm512_set1_pd(EXP_L_LO), r);
  __m512d q = _mm512_set1_pd(EXP_TAYLOR[4]);
  for (int i = 3; i >= 0; i--) q = _mm512_fmadd_pd(q, r, _mm512_set1_pd(EXP_TAYLOR[i]));
  q = _mm512_mul_pd(q, r); /* e^r - 1 */
  const __m512i j = _mm512_and_si512(k, _mm512_set1_epi64(31));
  const __m512d t_lo = _mm512_permutex2var_pd(_mm512_loadu_pd(EXP2_J32), j,
                                              _mm512_loadu_pd(EXP2_J32 + 8));
  const __m512d t_hi = _mm512_permutex2var_pd(_mm512_loadu_pd(EXP2_J32 + 16), j,
                                              _mm512_loadu_pd(EXP2_J32 + 24));
  const __m512d t = _mm512_mask_blend_pd(_mm512_test_epi64_mask(j, _mm512_set1_epi64(16)), t_lo,
                                         t_hi);
  /* t e^r, times 2^m through the exponent field (normal in double here). */
  const __m512i y = _mm512_add_epi64(_mm512_castpd_si512(_mm512_fmadd_pd(t, q, t)),
                                     _mm512_slli_epi64(_mm512_srai_epi64(k, 5), 52));
  return _mm512_castsi512_pd(y);
}

/* The lanes of y (doubles that round to normal floats) within
 * EXP_MIDPOINT_ULPS of a midpoint between floats: the 29 bits float
 * rounding drops, offset so that a midpoint's (2^28) lands at
 * EXP_MIDPOINT_ULPS. */
static DL_FMATH_AVX512_INLINE __mmask8 near_float_midpoint8(__m512d y) {
  const __m512i dropped = _mm512_and_si512(
      _mm512_sub_epi64(_mm512_castpd_si512(y), _mm512_set1_epi64((1 << 28) - EXP_MIDPOINT_ULPS)),
      _mm512_set1_epi64((1 << 29) - 1));
  return _mm512_cmp_epu64_mask(dropped, _mm512_set1_epi64(2 * EXP_MIDPOINT_ULPS), _MM_CMPINT_LE);
}

static DL_FMATH_AVX512_INLINE void expf8(const float *in, float *out) {
  const __m512d x = _mm512_cvtps_pd(_mm256_loadu_ps(in));
  const __mmask8 quick = _mm512_cmp_pd_mask(x, _mm512_set1_pd(-87.0), _CMP_GE_OQ) &
                         _mm512_cmp_pd_mask(x, _mm512_set1_pd(88.5), _CMP_LE_OQ);
  const __m512d y = exp_quick8(x);
  if (quick != 0xff || near_float_midpoint8(y)) {
    expf8_exact(in, out);
    return;
  }
  _mm256_storeu_ps(out, _mm512_cvtpd_ps(y));
}

/* dl_erff's range 1 <= |x| < 4 in eight lanes (x as a double; the lanes
 * outside `lanes` compute garbage, but no trap): horner(ERFC_MID, 13,
 * a - 1.5), or horner(ERFC_TAIL, 13, a - 3.0) in the lanes from 2 on
 * (chosen per coefficient), times exp(-(a*a)), from 1, with x's sign.
 * (exp_quick8 here, with the same midpoint test on the result, measured
 * within noise on GPT x1: the 13-term polynomials are most of the cost.) */
static DL_FMATH_AVX512_INLINE __m512d erf_mid8(__m512d x, __mmask8 lanes) {
  __m512d a = abs8(x);
  __mmask8 neg = _mm512_cmp_pd_mask(x, _mm512_setzero_pd(), _CMP_LT_OQ);
  __mmask8 tail = _mm512_cmp_pd_mask(a, _mm512_set1_pd(2.0), _CMP_GE_OQ) & lanes;
  __m512d u, acc;
  if (tail) {
    u = _mm512_mask_sub_pd(_mm512_sub_pd(a, _mm512_set1_pd(1.5)), tail, a, _mm512_set1_pd(3.0));
    acc = _mm512_mask_mov_pd(_mm512_set1_pd(ERFC_MID[12]), tail, _mm512_set1_pd(ERFC_TAIL[12]));
    for (int c = 11; c >= 0; c--) {
      __m512d coef = _mm512_mask_mov_pd(_mm512_set1_pd(ERFC_MID[c]), tail,
                                        _mm512_set1_pd(ERFC_TAIL[c]));
      acc = _mm512_add_pd(_mm512_mul_pd(acc, u), coef);
    }
  } else {
    u = _mm512_sub_pd(a, _mm512_set1_pd(1.5));
    acc = horner8(ERFC_MID, 13, u);
  }
  /* -(a*a) in [-16, -1] where used; -1 in the other lanes (no garbage). */
  __m512d aa = _mm512_mask_mov_pd(_mm512_set1_pd(-1.0), lanes,
                                  negate8_where(0xff, _mm512_mul_pd(a, a)));
  __m512d e = _mm512_sub_pd(_mm512_set1_pd(1.0), _mm512_mul_pd(exp_normal8(aa), acc));
  return negate8_where(neg, e);
}

/* dl_erff of in[0..n-1] into out, n <= ERF_CHUNK and a multiple of 8
 * (dl_erff_n pads a short tail, as expf_array does). Below 1, at 4 and up,
 * and NaN as dl_erff does, eight lanes at a time. The lanes in [1, 4)
 * (a third of GELU's arguments, in most groups of eight) are first
 * gathered into full vectors and then scattered back, so that the costly
 * range runs once per eight such lanes instead of once per group that
 * holds one: each lane still sees the scalar function's operations. */
enum { ERF_CHUNK = 256 };

static DL_FMATH_AVX512 void erff_chunk(const float *in, float *out, int64_t n) {
  double mid_x[ERF_CHUNK + 8];
  int64_t mid_at[ERF_CHUNK + 8], mids = 0;
  for (int64_t i = 0; i < n; i += 8) {
    __m512d x = _mm512_cvtps_pd(_mm256_loadu_ps(in + i));
    __m512d a = abs8(x);
    __mmask8 nan = _mm512_cmp_pd_mask(x, x, _CMP_UNORD_Q);
    __mmask8 neg = _mm512_cmp_pd_mask(x, _mm512_setzero_pd(), _CMP_LT_OQ);
    __mmask8 small = _mm512_cmp_pd_mask(a, _mm512_set1_pd(1.0), _CMP_LT_OQ);
    __mmask8 sat = _mm512_cmp_pd_mask(a, _mm512_set1_pd(4.0), _CMP_GE_OQ);
    __mmask8 mid = (__mmask8)(~(small | sat | nan));
    /* Compressed in a register and stored whole (the buffers have 8 spare
     * slots): a compressing store to memory costs several times more. */
    _mm512_storeu_pd(mid_x + mids, _mm512_maskz_compress_pd(mid, x));
    _mm512_storeu_si512(mid_at + mids,
                        _mm512_maskz_compress_epi64(
                            mid, _mm512_add_epi64(_mm512_set1_epi64(i),
                                                  _mm512_setr_epi64(0, 1, 2, 3, 4, 5, 6, 7))));
    mids += __builtin_popcount(mid);
    __m512d r = negate8_where(neg, _mm512_set1_pd(1.0));
    r = _mm512_mask_mov_pd(r, small, _mm512_mul_pd(x, horner8(ERF_SMALL, 10, _mm512_mul_pd(x, x))));
    store8(out + i, r, nan, in + i, dl_erff);
  }
  float mid_y[ERF_CHUNK + 8];
  for (int64_t j = 0; j < mids; j += 8) {
    const __mmask8 lanes = (__mmask8)(mids - j >= 8 ? 0xff : (1u << (mids - j)) - 1u);
    __m512d e = erf_mid8(_mm512_maskz_loadu_pd(lanes, mid_x + j), lanes);
    _mm256_storeu_ps(mid_y + j, _mm512_cvtpd_ps(e));
  }
  /* Scalar stores: cheaper here than a scatter instruction. */
  for (int64_t j = 0; j < mids; j++) out[mid_at[j]] = mid_y[j];
}

/* expf8 over in[0..n-1], 32 at a time where it can (four independent
 * groups in flight: one group's chain through the division leaves the
 * units idle), then eight; a short tail through a zero-padded copy. */
static DL_FMATH_AVX512 void expf_array(const float *in, float *out, int64_t n) {
  int64_t i = 0;
  for (; i + 32 <= n; i += 32)
    for (int g = 0; g < 32; g += 8) expf8(in + i + g, out + i + g);
  for (; i + 8 <= n; i += 8) expf8(in + i, out + i);
  if (i < n) {
    float x[8] = {0}, y[8];
    memcpy(x, in + i, (size_t)(n - i) * sizeof *x);
    expf8(x, y);
    memcpy(out + i, y, (size_t)(n - i) * sizeof *y);
  }
}

#else

enum { ERF_CHUNK = 256 };
static void erff_chunk(const float *in, float *out, int64_t n) { (void)in, (void)out, (void)n; }
static void expf_array(const float *in, float *out, int64_t n) { (void)in, (void)out, (void)n; }

#endif

void dl_expf_n(const float *in, float *out, int64_t n) {
  if (n > 0 && dl_cpu_has_avx512f()) {
    expf_array(in, out, n);
    return;
  }
  for (int64_t i = 0; i < n; i++) out[i] = dl_expf(in[i]);
}

void dl_erff_n(const float *in, float *out, int64_t n) {
  if (n > 0 && dl_cpu_has_avx512f()) {
    const int64_t whole = n / 8 * 8;
    for (int64_t i = 0; i < whole; i += ERF_CHUNK)
      erff_chunk(in + i, out + i, whole - i < ERF_CHUNK ? whole - i : ERF_CHUNK);
    if (whole < n) {
      float x[8] = {0}, y[8];
      memcpy(x, in + whole, (size_t)(n - whole) * sizeof *x);
      erff_chunk(x, y, 8);
      memcpy(out + whole, y, (size_t)(n - whole) * sizeof *y);
    }
    return;
  }
  for (int64_t i = 0; i < n; i++) out[i] = dl_erff(in[i]);
}
