/* The engine's elementary functions (engine/numerics/fmath.c) against libm. The
 * float functions are compared with libm's double functions (accurate to
 * ~1 double ulp, so a reference good to 2^-29 float ulp) and must be within
 * 1 float ulp, as fmath.h promises; the double ones are compared with libm's
 * long double functions and must be within 1 double ulp (fdlibm's bound).
 * The measured maximum errors are printed. The engine may not call libm;
 * this test may. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "numerics/fmath.h"

typedef float (*float_fn)(float);
typedef double (*double_fn)(double);

static float float_of(uint32_t u) {
  float x;
  memcpy(&x, &u, sizeof x);
  return x;
}

static uint32_t bits_of(float x) {
  uint32_t u;
  memcpy(&u, &x, sizeof u);
  return u;
}

/* One float ulp at the magnitude of v (the spacing of floats around v). */
static double float_ulp(double v) {
  int e;
  frexp(fabs(v), &e); /* |v| in [2^(e-1), 2^e) */
  return e - 1 < -126 ? 0x1p-149 : ldexp(1.0, e - 1 - 23);
}

static long double double_ulp(long double v) {
  int e;
  frexpl(fabsl(v), &e);
  return e - 1 < -1022 ? 0x1p-1074L : ldexpl(1.0L, e - 1 - 52);
}

typedef struct error_stats {
  double max_ulp;
  float worst_x;
  int64_t count, not_nearest;
} error_stats;

/* Compares f(x) with ref(x); non-finite references must match exactly. */
static void check_float_point(error_stats *st, const char *name, float_fn f, double_fn ref,
                              float x) {
  float y = f(x);
  double r = ref((double)x);
  float rounded = (float)r;
  st->count++;
  if (!isfinite(rounded)) {
    if (isnan(rounded) ? !isnan(y) : y != rounded)
      fail_msg("%s(%a) = %a, reference %a", name, (double)x, (double)y, r);
    return;
  }
  if (!isfinite(y)) fail_msg("%s(%a) = %a, reference %a", name, (double)x, (double)y, r);
  double err = fabs((double)y - r) / float_ulp(r);
  if (err > 0.5) st->not_nearest++;
  if (err > st->max_ulp) {
    st->max_ulp = err;
    st->worst_x = x;
  }
}

/* n evenly spaced points in [lo, hi], then every 4099th float bit pattern
 * (4099 is odd: every exponent and low mantissa bits are covered). */
static void sweep_float(const char *name, float_fn f, double_fn ref, double lo, double hi, int n) {
  error_stats st = {0};
  for (int i = 0; i < n; i++)
    check_float_point(&st, name, f, ref, (float)(lo + (hi - lo) * i / (n - 1)));
  for (uint64_t u = 0; u <= 0xffffffffULL; u += 4099) {
    float x = float_of((uint32_t)u);
    if (!isnan(x)) check_float_point(&st, name, f, ref, x);
  }
  printf("%-6s %lld points: max error %.6f ulp at %a, %lld not the nearest float\n", name,
         (long long)st.count, st.max_ulp, (double)st.worst_x, (long long)st.not_nearest);
  assert_true(st.max_ulp <= 1.0);
}

enum { DENSE = 1000000 };

static void expf_within_one_ulp(void **state) {
  (void)state;
  sweep_float("expf", dl_expf, exp, -104.0, 89.0, DENSE);
}

static void logf_within_one_ulp(void **state) {
  (void)state;
  sweep_float("logf", dl_logf, log, 0.25, 4.0, DENSE);
}

static void tanhf_within_one_ulp(void **state) {
  (void)state;
  sweep_float("tanhf", dl_tanhf, tanh, -10.0, 10.0, DENSE);
}

static void erff_within_one_ulp(void **state) {
  (void)state;
  sweep_float("erff", dl_erff, erf, -4.5, 4.5, DENSE);
}

static void sinf_within_one_ulp(void **state) {
  (void)state;
  sweep_float("sinf", dl_sinf, sin, -8.0, 8.0, DENSE);
}

static void cosf_within_one_ulp(void **state) {
  (void)state;
  sweep_float("cosf", dl_cosf, cos, -8.0, 8.0, DENSE);
}

static void float_special_values(void **state) {
  (void)state;
  assert_true(dl_expf(-INFINITY) == 0.0f);
  assert_true(dl_expf(INFINITY) == INFINITY);
  assert_true(dl_expf(89.0f) == INFINITY); /* overflow */
  assert_true(dl_expf(-104.0f) == 0.0f);   /* underflow */
  float sub = dl_expf(-100.0f);            /* 3.7e-44: a subnormal */
  assert_true(sub > 0.0f && sub < FLT_MIN);
  assert_true(dl_expf(0.0f) == 1.0f && dl_expf(-0.0f) == 1.0f);
  assert_true(isnan(dl_expf(NAN)));

  assert_true(dl_logf(0.0f) == -INFINITY && dl_logf(-0.0f) == -INFINITY);
  assert_true(isnan(dl_logf(-1.0f)) && isnan(dl_logf(-INFINITY)) && isnan(dl_logf(NAN)));
  assert_true(dl_logf(INFINITY) == INFINITY);
  assert_true(dl_logf(1.0f) == 0.0f && !signbit(dl_logf(1.0f)));
  assert_true(dl_logf(0x1p-149f) == (float)log(0x1p-149));

  assert_true(dl_tanhf(INFINITY) == 1.0f && dl_tanhf(-INFINITY) == -1.0f);
  assert_true(dl_tanhf(30.0f) == 1.0f && dl_tanhf(-30.0f) == -1.0f);
  assert_true(dl_tanhf(1e-30f) == 1e-30f);
  assert_true(dl_tanhf(-0.0f) == 0.0f && signbit(dl_tanhf(-0.0f)));
  assert_true(isnan(dl_tanhf(NAN)));

  assert_true(dl_erff(INFINITY) == 1.0f && dl_erff(-INFINITY) == -1.0f);
  assert_true(dl_erff(3.9192059f) == 1.0f && dl_erff(3.9192057f) < 1.0f);
  assert_true(dl_erff(-0.0f) == 0.0f && signbit(dl_erff(-0.0f)));
  assert_true(isnan(dl_erff(NAN)));

  assert_true(dl_sinf(-0.0f) == 0.0f && signbit(dl_sinf(-0.0f)));
  assert_true(dl_cosf(0.0f) == 1.0f);
  assert_true(isnan(dl_sinf(INFINITY)) && isnan(dl_cosf(-INFINITY)));
  assert_true(isnan(dl_sinf(NAN)) && isnan(dl_cosf(NAN)));
  /* Large arguments need the full reduction (Payne-Hanek). */
  assert_true(dl_sinf(FLT_MAX) == (float)sin(FLT_MAX));
  assert_true(dl_cosf(-FLT_MAX) == (float)cos(-FLT_MAX));
  assert_true(dl_sinf(0x1p19f) == (float)sin(0x1p19));
}

/* Close to multiples of pi/2 the reduction cancels many bits: the float
 * nearest to k*pi/2 for many k, and its neighbours. */
static void sin_cos_near_multiples_of_half_pi(void **state) {
  (void)state;
  error_stats s = {0}, c = {0};
  for (int k = -200000; k <= 200000; k++) {
    float x = (float)(k * 1.5707963267948966);
    float around[3] = {x, nextafterf(x, -INFINITY), nextafterf(x, INFINITY)};
    for (int i = 0; i < 3; i++) {
      check_float_point(&s, "sinf", dl_sinf, sin, around[i]);
      check_float_point(&c, "cosf", dl_cosf, cos, around[i]);
    }
  }
  printf("near k*pi/2: sinf max %.6f ulp, cosf max %.6f ulp\n", s.max_ulp, c.max_ulp);
  assert_true(s.max_ulp <= 1.0 && c.max_ulp <= 1.0);
}

/* The double references need long double's extra bits; valgrind, for one,
 * computes long double in double precision. */
static int long_double_is_wider(void) {
  volatile long double one = 1.0L, tiny = 0x1p-60L;
  return one + tiny != one;
}

/* Double functions against long double libm, in double ulps. */
static double sweep_double(const char *name, double_fn f, long double (*ref)(long double),
                           double lo, double hi, int n, int geometric) {
  double worst = 0.0, worst_x = 0.0;
  for (int i = 0; i < n; i++) {
    double t = (double)i / (n - 1);
    double x = geometric ? lo * pow(hi / lo, t) : lo + (hi - lo) * t;
    long double r = ref((long double)x);
    double y = f(x);
    double err = (double)(fabsl((long double)y - r) / double_ulp(r));
    if (err > worst) {
      worst = err;
      worst_x = x;
    }
  }
  printf("%-6s %d points in [%.9g, %.9g]: max error %.4f double ulp at %a\n", name, n, lo, hi,
         worst, worst_x);
  return worst;
}

static void double_exp_and_log_within_one_ulp(void **state) {
  (void)state;
  if (!long_double_is_wider()) {
    printf("long double is no wider than double here: ulp bounds not checked\n");
  } else {
    assert_true(sweep_double("exp", dl_exp, expl, -745.0, 709.78, 400000, 0) <= 1.0);
    assert_true(sweep_double("exp", dl_exp, expl, -0.7, 0.7, 200000, 0) <= 1.0);
    assert_true(sweep_double("exp", dl_exp, expl, 1e-12, 1e-7, 10000, 1) <= 1.0);
    assert_true(sweep_double("log", dl_log, logl, 1e-320, 1e300, 400000, 1) <= 1.0);
    assert_true(sweep_double("log", dl_log, logl, 0.5, 2.0, 200000, 0) <= 1.0);
    assert_true(sweep_double("log", dl_log, logl, 1.0 - 1e-9, 1.0 + 1e-9, 20000, 0) <= 1.0);
  }

  assert_true(dl_exp(710.0) == INFINITY && dl_exp(INFINITY) == INFINITY);
  assert_true(dl_exp(-746.0) == 0.0 && dl_exp(-INFINITY) == 0.0);
  assert_true(dl_exp(0.0) == 1.0 && isnan(dl_exp(NAN)));
  assert_true(dl_exp(-740.0) > 0.0 && dl_exp(-740.0) < DBL_MIN); /* subnormal */
  assert_true(dl_log(0.0) == -INFINITY && dl_log(-0.0) == -INFINITY);
  assert_true(isnan(dl_log(-1e-300)) && isnan(dl_log(NAN)));
  assert_true(dl_log(INFINITY) == INFINITY && dl_log(1.0) == 0.0);
  assert_true(fabs(dl_log(0x1p-1074) - (-744.44007192138126)) < 1e-12);
}

/* cos(pi x) with exact reduction, against cosl(pi_l * x). */
static void cospi_is_accurate(void **state) {
  (void)state;
  const long double pi_l = 3.14159265358979323846264338327950288L;
  double worst = 0.0;
  for (int i = 0; i < 1000000; i++) {
    double x = i * 0x1p-19 - 0.25; /* [-0.25, ~1.66], exact binary steps */
    /* Near the zeros cosl(pi_l * x) itself is inaccurate: take the
     * reference at x - 0.5 or x - 1.5 (exact) there. */
    long double r = fabs(x - 0.5) < 0.25   ? -sinl(pi_l * (x - 0.5))
                    : fabs(x - 1.5) < 0.25 ? sinl(pi_l * (x - 1.5))
                                           : cosl(pi_l * x);
    double err = (double)(fabsl((long double)dl_cospi(x) - r) / double_ulp(r));
    if (err > worst) worst = err;
  }
  /* Roundings: f*pi/2 and pi/2 itself (~1 ulp), the kernel (~0.5 ulp). */
  if (long_double_is_wider()) {
    printf("cospi: max error %.4f double ulp\n", worst);
    assert_true(worst <= 2.0);
  } else {
    printf("long double is no wider than double here: cospi ulp bound not checked\n");
  }
  assert_true(dl_cospi(0.0) == 1.0 && dl_cospi(1.0) == -1.0 && dl_cospi(2.0) == 1.0);
  assert_true(fabs(dl_cospi(0.5)) == 0.0 && fabs(dl_cospi(1.5)) == 0.0);
  assert_true(dl_cospi(-1.0) == -1.0);
  assert_true(dl_cospi(0x1p52 + 1.0) == -1.0 && dl_cospi(0x1p60) == 1.0);
  assert_true(dl_cospi(0x1p51 + 0.5) == 0.0);
  assert_true(isnan(dl_cospi(INFINITY)) && isnan(dl_cospi(NAN)));
}

/* The same inputs must give the same bits on every machine, compiler and
 * optimisation level (docs/design.md rule 2): FNV-1a over the output bits of a
 * fixed sweep, recorded once. A deliberate change to a polynomial changes
 * these, and with them every golden file. */
static void outputs_have_fixed_bits(void **state) {
  (void)state;
  float_fn fns[6] = {dl_expf, dl_logf, dl_tanhf, dl_erff, dl_sinf, dl_cosf};
  const char *names[6] = {"expf", "logf", "tanhf", "erff", "sinf", "cosf"};
  static const uint64_t want[6] = {
      0xd2270e23368a82d7ULL, 0x82b3f8bcc4ed95cfULL, 0xbe61e12371681d06ULL,
      0x9fc0c2ca73cf953eULL, 0x570748908b8c4c72ULL, 0x36ec2c437a2a525cULL,
  };
  int mismatches = 0;
  for (int f = 0; f < 6; f++) {
    uint64_t h = 0xcbf29ce484222325ULL;
    for (uint64_t u = 0; u <= 0xffffffffULL; u += 65521) {
      uint32_t y = bits_of(fns[f](float_of((uint32_t)u)));
      if ((y & 0x7fffffff) > 0x7f800000) y = 0x7fc00000; /* NaN payloads may vary */
      h = (h ^ y) * 0x100000001b3ULL;
    }
    printf("%s output hash 0x%016llxULL%s\n", names[f], (unsigned long long)h,
           h == want[f] ? "" : " (differs)");
    mismatches += h != want[f];
  }
  assert_int_equal(mismatches, 0);
}

/* dl_expf_n and dl_erff_n against dl_expf and dl_erff, bit for bit: every
 * 251st float bit pattern (odd, so every exponent and low mantissa bits),
 * NaNs and infinities included, in chunks of odd lengths (the 8-lane loop
 * and its scalar tail), then the dense ranges that softmax, cross-entropy
 * and GELU use; in place once. DL_FMATH_EXHAUSTIVE=1 checks every float
 * (about a minute). */
enum { CHUNK = 4093 };

static int64_t array_mismatches(void (*fn_n)(const float *, float *, int64_t), float (*fn)(float),
                                const float *x, int64_t n) {
  static float y[CHUNK], inplace[CHUNK];
  static bool reported;
  int64_t bad = 0;
  fn_n(x, y, n);
  memcpy(inplace, x, (size_t)n * sizeof *x);
  fn_n(inplace, inplace, n);
  for (int64_t i = 0; i < n; i++) {
    uint32_t want = bits_of(fn(x[i]));
    if (bits_of(y[i]) != want || bits_of(inplace[i]) != want) {
      if (!reported)
        print_message("first mismatch at %a: %a (in place %a), scalar %a\n", (double)x[i],
                      (double)y[i], (double)inplace[i], (double)fn(x[i]));
      reported = true;
      bad++;
    }
  }
  return bad;
}

static void array_functions_equal_scalar(void **state) {
  (void)state;
  const char *env = getenv("DL_FMATH_EXHAUSTIVE");
  const uint64_t stride = env && *env == '1' ? 1 : 251;
  static float x[CHUNK];
  int64_t bad_exp = 0, bad_erf = 0, count = 0, n = 0;
  int64_t len = 1; /* chunk lengths 1, 2, ... 17, then CHUNK */
  for (uint64_t u = 0; u <= 0xffffffffULL; u += stride) {
    x[n++] = float_of((uint32_t)u);
    if (n == len || u + stride > 0xffffffffULL) {
      bad_exp += array_mismatches(dl_expf_n, dl_expf, x, n);
      bad_erf += array_mismatches(dl_erff_n, dl_erff, x, n);
      count += n;
      n = 0;
      len = len < 17 ? len + 1 : CHUNK;
    }
  }
  /* Dense: 2^20 evenly spaced points of [-104, 0] (softmax and
   * cross-entropy's exp(x - max)) and of [-6, 6] (GELU's erf and exp). */
  for (int part = 0; part < 2; part++) {
    for (int64_t base = 0; base < (1 << 20); base += CHUNK) {
      for (int64_t i = 0; i < CHUNK; i++) {
        double t = (double)(base + i) / (1 << 20);
        x[i] = part == 0 ? (float)(-104.0 * t) : (float)(-6.0 + 12.0 * t);
      }
      bad_exp += array_mismatches(dl_expf_n, dl_expf, x, CHUNK);
      bad_erf += array_mismatches(dl_erff_n, dl_erff, x, CHUNK);
      count += CHUNK;
    }
  }
  print_message("expf_n, erff_n: %lld inputs (stride %llu), %lld and %lld differ from the "
                "scalar functions\n",
                (long long)count, (unsigned long long)stride, (long long)bad_exp,
                (long long)bad_erf);
  assert_int_equal(bad_exp, 0);
  assert_int_equal(bad_erf, 0);
  dl_expf_n(x, x, 0); /* n = 0 touches nothing */
}

/* The two floats in [-87, 88.5] whose exp lies so near a midpoint between
 * floats that dl_expf_n's quick path alone would round it the other way
 * (found by comparing every float with the midpoint test switched off):
 * the test must send them, in any lane, to the exact path. */
static void expf_n_rounds_the_hard_cases_as_scalar(void **state) {
  (void)state;
  const float hard[2] = {-0x1.e1dbe2p-8f, -0x1.d2259ap+3f};
  for (int h = 0; h < 2; h++)
    for (int lane = 0; lane < 8; lane++) {
      float x[8], y[8];
      for (int i = 0; i < 8; i++) x[i] = i == lane ? hard[h] : -0.25f * (float)i;
      dl_expf_n(x, y, 8);
      for (int i = 0; i < 8; i++) assert_true(bits_of(y[i]) == bits_of(dl_expf(x[i])));
    }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(expf_within_one_ulp),
      cmocka_unit_test(expf_n_rounds_the_hard_cases_as_scalar),
      cmocka_unit_test(logf_within_one_ulp),
      cmocka_unit_test(tanhf_within_one_ulp),
      cmocka_unit_test(erff_within_one_ulp),
      cmocka_unit_test(sinf_within_one_ulp),
      cmocka_unit_test(cosf_within_one_ulp),
      cmocka_unit_test(float_special_values),
      cmocka_unit_test(sin_cos_near_multiples_of_half_pi),
      cmocka_unit_test(double_exp_and_log_within_one_ulp),
      cmocka_unit_test(cospi_is_accurate),
      cmocka_unit_test(outputs_have_fixed_bits),
      cmocka_unit_test(array_functions_equal_scalar),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
