/* float16 / bfloat16 conversions (engine/numerics/half.c). Checked exhaustively on
 * the 2^16 half patterns, and on float32 samples against an independent
 * reference (the nearest half value found by binary search over the exact
 * values, ties to even) and, where the CPU has it, against the F16C
 * instruction. Conversions are exact operations, so every comparison is
 * bitwise (tolerance 0). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "numerics/half.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#include <immintrin.h>
#define HAVE_F16C_CHECK 1
static int cpu_has_f16c(void) {
  unsigned a, b, c, d;
  return __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 29)); /* CPUID.1:ECX.F16C */
}
__attribute__((target("f16c"))) static uint16_t hw_f32_to_f16(float x) {
  return (uint16_t)_cvtss_sh(x, _MM_FROUND_TO_NEAREST_INT);
}
__attribute__((target("f16c"))) static float hw_f16_to_f32(uint16_t h) { return _cvtsh_ss(h); }
#endif

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

/* A half format described by its field widths, with the exact value of
 * every non-negative finite pattern in a table (patterns are ordered like
 * their values). */
typedef struct format {
  const char *name;
  int mantissa_bits, bias;
  uint16_t max_finite, inf;
  double *value;   /* [max_finite + 1] */
  double overflow; /* max_finite + half an ulp: from here on, inf */
} format;

static double exact_value(const format *f, unsigned bits) {
  unsigned e = bits >> f->mantissa_bits, m = bits & ((1u << f->mantissa_bits) - 1);
  if (e == 0) return ldexp(m, 1 - f->bias - f->mantissa_bits);
  return ldexp((1u << f->mantissa_bits) + m, (int)e - f->bias - f->mantissa_bits);
}

static void format_init(format *f) {
  f->value = malloc(((size_t)f->max_finite + 1) * sizeof *f->value);
  assert_non_null(f->value);
  for (unsigned b = 0; b <= f->max_finite; b++) f->value[b] = exact_value(f, b);
  double top = f->value[f->max_finite];
  f->overflow = top + (top - f->value[f->max_finite - 1]) / 2;
}

/* Nearest representable value to x, ties to even, by search. */
static uint16_t reference_round(const format *f, float x) {
  uint16_t sign = signbit(x) ? 0x8000 : 0;
  double a = fabs((double)x);
  if (a >= f->overflow) return sign | f->inf;
  unsigned lo = 0, hi = f->max_finite; /* value[lo] <= a < value[hi] or hi==max */
  if (a >= f->value[hi]) return sign | hi;
  while (hi - lo > 1) {
    unsigned mid = (lo + hi) / 2;
    if (f->value[mid] <= a) lo = mid;
    else hi = mid;
  }
  double below = a - f->value[lo], above = f->value[hi] - a;
  unsigned pick = below < above ? lo : above < below ? hi : (lo & 1 ? hi : lo);
  return (uint16_t)(sign | pick);
}

static format f16 = {"float16", 10, 15, 0x7bff, 0x7c00, NULL, 0};
static format bf16 = {"bfloat16", 7, 127, 0x7f7f, 0x7f80, NULL, 0};

static int setup(void **state) {
  (void)state;
  format_init(&f16);
  format_init(&bf16);
  return 0;
}

static int teardown(void **state) {
  (void)state;
  free(f16.value);
  free(bf16.value);
  return 0;
}

static int is_nan16(const format *f, uint16_t h) {
  return (h & f->inf) == f->inf && (h & ((1u << f->mantissa_bits) - 1)) != 0;
}

static void known_values(void **state) {
  (void)state;
  assert_int_equal(dl_f32_to_f16(1.0f), 0x3c00);
  assert_int_equal(dl_f32_to_f16(-2.0f), 0xc000);
  assert_int_equal(dl_f32_to_f16(1.0f / 3.0f), 0x3555);
  assert_int_equal(dl_f32_to_f16(65504.0f), 0x7bff);
  assert_int_equal(dl_f32_to_f16(65519.996f), 0x7bff);
  assert_int_equal(dl_f32_to_f16(65520.0f), 0x7c00); /* the overflow threshold */
  assert_int_equal(dl_f32_to_f16(-1e6f), 0xfc00);
  assert_int_equal(dl_f32_to_f16(0x1p-24f), 0x0001);
  assert_int_equal(dl_f32_to_f16(0x1p-25f), 0x0000); /* tie to even: zero */
  assert_int_equal(dl_f32_to_f16(0x1.000002p-25f), 0x0001);
  assert_int_equal(dl_f32_to_f16(0x1.8p-24f), 0x0002); /* tie to even: 2 */
  assert_int_equal(dl_f32_to_f16(0x1p-14f), 0x0400);
  assert_int_equal(dl_f32_to_f16(0x1.ff8p-15f), 0x03ff); /* largest subnormal */
  assert_int_equal(dl_f32_to_f16(0x1.ffbp-15f), 0x03ff);
  assert_int_equal(dl_f32_to_f16(0x1.ffcp-15f), 0x0400); /* tie: even, into normals */
  assert_int_equal(dl_f32_to_f16(-0.0f), 0x8000);
  assert_int_equal(dl_f32_to_f16(INFINITY), 0x7c00);
  assert_int_equal(dl_f32_to_f16(-NAN), 0xfe00);
  assert_true(dl_f16_to_f32(0x0001) == 0x1p-24f);
  assert_true(dl_f16_to_f32(0x7bff) == 65504.0f);
  assert_true(dl_f16_to_f32(0xfc00) == -INFINITY);
  assert_true(isnan(dl_f16_to_f32(0x7c01)));

  assert_int_equal(dl_f32_to_bf16(1.0f), 0x3f80);
  assert_int_equal(dl_f32_to_bf16(3.14159265f), 0x4049);
  assert_int_equal(dl_f32_to_bf16(0x1.01p0f), 0x3f80);     /* tie to even: down */
  assert_int_equal(dl_f32_to_bf16(0x1.03p0f), 0x3f82);     /* tie to even: up */
  assert_int_equal(dl_f32_to_bf16(3.4028235e38f), 0x7f80); /* FLT_MAX overflows */
  assert_int_equal(dl_f32_to_bf16(0x1p-149f), 0x0000);
  assert_int_equal(dl_f32_to_bf16(-INFINITY), 0xff80);
  assert_int_equal(dl_f32_to_bf16(NAN), 0x7fc0);
  assert_int_equal(dl_f32_to_bf16(float_of(0x7f800001)), 0x7fc0); /* low payload, quiet */
  assert_true(dl_bf16_to_f32(0xc0a0) == -5.0f);
}

/* Every half pattern converts exactly to float and back to itself. */
static void every_half_round_trips(const format *f, uint16_t (*to_half)(float),
                                   float (*to_float)(uint16_t)) {
  for (unsigned h = 0; h <= 0xffff; h++) {
    float x = to_float((uint16_t)h);
    uint16_t back = to_half(x);
    if (is_nan16(f, (uint16_t)h)) {
      assert_true(isnan(x));
      assert_true(is_nan16(f, back));
      assert_int_equal(back & 0x8000, h & 0x8000);
      continue;
    }
    assert_int_equal(back, h);
    unsigned mag = h & 0x7fff;
    double want = mag == f->inf ? INFINITY : f->value[mag];
    assert_true(fabs((double)x) == want);
    assert_int_equal(signbit(x) != 0, (h & 0x8000) != 0);
  }
}

static void every_f16_round_trips(void **state) {
  (void)state;
  every_half_round_trips(&f16, dl_f32_to_f16, dl_f16_to_f32);
}

static void every_bf16_round_trips(void **state) {
  (void)state;
  every_half_round_trips(&bf16, dl_f32_to_bf16, dl_bf16_to_f32);
}

/* Float inputs: every 4099th bit pattern (4099 is odd, so all exponents and
 * low mantissa bits show up), then every halfway point between neighbouring
 * halves and the floats just either side of it. */
static void check_float(const format *f, uint16_t (*to_half)(float), float x) {
  uint16_t got = to_half(x);
  if (isnan(x)) {
    assert_true(is_nan16(f, got));
    return;
  }
  uint16_t want = reference_round(f, x);
  if (got != want) fail_msg("%s(%a): got 0x%04x, reference 0x%04x", f->name, (double)x, got, want);
}

static void floats_round_like_the_reference(const format *f, uint16_t (*to_half)(float)) {
  for (uint64_t u = 0; u <= 0xffffffffULL; u += 4099)
    check_float(f, to_half, float_of((uint32_t)u));
  for (unsigned h = 0; h <= f->max_finite; h++) {
    double next = h == f->max_finite ? 2 * f->overflow - f->value[h] : f->value[h + 1];
    float mid = (float)((f->value[h] + next) / 2); /* exact: one more bit */
    assert_true((double)mid == (f->value[h] + next) / 2);
    float around[3] = {mid, nextafterf(mid, 0.0f), nextafterf(mid, INFINITY)};
    for (int i = 0; i < 3; i++) {
      check_float(f, to_half, around[i]);
      check_float(f, to_half, -around[i]);
    }
  }
}

static void floats_round_to_nearest_f16(void **state) {
  (void)state;
  floats_round_like_the_reference(&f16, dl_f32_to_f16);
}

static void floats_round_to_nearest_bf16(void **state) {
  (void)state;
  floats_round_like_the_reference(&bf16, dl_f32_to_bf16);
}

static void agrees_with_f16c_instruction(void **state) {
  (void)state;
#ifdef HAVE_F16C_CHECK
  if (!cpu_has_f16c()) {
    printf("F16C not available on this CPU: hardware comparison skipped\n");
    skip();
  }
  int64_t n = 0;
  for (unsigned h = 0; h <= 0xffff; h++) {
    float hw = hw_f16_to_f32((uint16_t)h), sw = dl_f16_to_f32((uint16_t)h);
    /* The instruction quiets signalling NaN; the engine keeps the payload. */
    if (isnan(hw))
      assert_true(isnan(sw) && (bits_of(hw) & ~0x400000u) == (bits_of(sw) & ~0x400000u));
    else assert_int_equal(bits_of(hw), bits_of(sw));
  }
  for (uint64_t u = 0; u <= 0xffffffffULL; u += 4099, n++) {
    float x = float_of((uint32_t)u);
    uint16_t hw = hw_f32_to_f16(x), sw = dl_f32_to_f16(x);
    if (hw != sw) fail_msg("f16(%a): F16C 0x%04x, engine 0x%04x", (double)x, hw, sw);
  }
  for (unsigned h = 0; h < f16.max_finite; h++) {
    float mid = (float)((f16.value[h] + f16.value[h + 1]) / 2);
    float around[3] = {mid, nextafterf(mid, 0.0f), nextafterf(mid, INFINITY)};
    for (int i = 0; i < 3; i++, n++)
      assert_int_equal(hw_f32_to_f16(around[i]), dl_f32_to_f16(around[i]));
  }
  printf("F16C agrees on 65536 halves and %lld floats\n", (long long)n);
#else
  printf("not an x86-64 gcc/clang build: F16C comparison skipped\n");
  skip();
#endif
}

static void round_inplace_by_dtype_code(void **state) {
  (void)state;
  enum { N = 5 };
  const float src[N] = {1.0f / 3.0f, 65520.0f, -0x1p-26f, 1e-3f, 3.14159265f};
  float x[N];
  memcpy(x, src, sizeof x);
  dl_round_inplace(x, N, 0);
  assert_memory_equal(x, src, sizeof x);
  dl_round_inplace(x, N, 1);
  for (int i = 0; i < N; i++) assert_true(bits_of(x[i]) == bits_of(dl_round_f16(src[i])));
  assert_true(x[1] == INFINITY);
  assert_true(x[2] == 0.0f && signbit(x[2]));
  memcpy(x, src, sizeof x);
  dl_round_inplace(x, N, 2);
  for (int i = 0; i < N; i++) assert_true(bits_of(x[i]) == bits_of(dl_round_bf16(src[i])));
  assert_true(x[0] != src[0]);
  memcpy(x, src, sizeof x);
  dl_round_inplace(x, N, 3); /* not a half dtype: untouched */
  assert_memory_equal(x, src, sizeof x);
}

/* dl_round_inplace (sixteen lanes at a time where the CPU has AVX-512)
 * against the scalar dl_round_f16/bf16, bit for bit, on every high half
 * of the bit pattern with low halves at and around each rounding point:
 * bit 12/13 for f16 normals, 13..15 for its subnormals (16..23 are in the
 * high half), 15/16 for bf16. An odd length tests the masked tail. Every
 * one of the 2^32 floats was compared once when the lanes were written. */
static void round_inplace_matches_scalar(void **state) {
  (void)state;
  enum { LOWS = 48, N = 65536 * 3 + 5 };
  uint16_t low[LOWS];
  for (int k = 0; k < 16; k++) {
    low[3 * k] = (uint16_t)(k << 12);
    low[3 * k + 1] = (uint16_t)((k << 12) + 1);
    low[3 * k + 2] = (uint16_t)((k << 12) - 1);
  }
  float *x = malloc(N * sizeof *x), *y = malloc(N * sizeof *y);
  assert_non_null(x);
  assert_non_null(y);
  long long bad = 0, n = 0;
  for (int dtype = 1; dtype <= 2; dtype++)
    for (int l = 0; l < LOWS; l += 3) {
      for (int i = 0; i < N; i++)
        x[i] = float_of(((uint32_t)(i % 65536) << 16) | low[l + i / 65536 % 3]);
      memcpy(y, x, N * sizeof *x);
      dl_round_inplace(y, N, dtype);
      for (int i = 0; i < N; i++, n++) {
        float want = dtype == 1 ? dl_round_f16(x[i]) : dl_round_bf16(x[i]);
        if (bits_of(want) != bits_of(y[i]) && bad++ < 5)
          print_message("dtype %d, x 0x%08x: scalar 0x%08x, array 0x%08x\n", dtype, bits_of(x[i]),
                        bits_of(want), bits_of(y[i]));
      }
    }
  free(x);
  free(y);
  printf("dl_round_inplace: %lld floats, %lld differ from the scalar rounding\n", n, bad);
  assert_int_equal(bad, 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(known_values),
      cmocka_unit_test(every_f16_round_trips),
      cmocka_unit_test(every_bf16_round_trips),
      cmocka_unit_test(floats_round_to_nearest_f16),
      cmocka_unit_test(floats_round_to_nearest_bf16),
      cmocka_unit_test(agrees_with_f16c_instruction),
      cmocka_unit_test(round_inplace_by_dtype_code),
      cmocka_unit_test(round_inplace_matches_scalar),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
