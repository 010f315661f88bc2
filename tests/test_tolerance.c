/* The tolerance model: parsing and describing rules, defaults by dtype
 * (torch.testing's), bitwise / ulp / close semantics with signed zeros,
 * NaN and infinities, ULP distances across zero, integer and half tensors,
 * and the statistics and first failure a comparison reports.
 *
 * Every expected value here is exact: chosen so that the arithmetic the
 * rule does (|a - b| <= atol + rtol * |b| in double) has no rounding, or
 * counted by hand in representable floats. No test needs a tolerance of
 * its own. */
#define _POSIX_C_SOURCE 200809L

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "judge/tolerance.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

static float bits_f32(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

static dlc_tolerance parsed(const char *text) {
  dlc_tolerance t;
  if (dlc_tolerance_parse(text, &t) != DL_OK) fail_msg("'%s': %s", text, dl_last_error());
  return t;
}

static dlc_tolerance close_rule(double rtol, double atol) {
  return (dlc_tolerance){DLC_TOL_CLOSE, 0, rtol, atol};
}

static dlc_tolerance ulp_rule(int64_t n) { return (dlc_tolerance){DLC_TOL_ULP, n, 0, 0}; }

/* ---- rules as text ------------------------------------------------------------ */

static void parse_accepts_the_three_rules(void **state) {
  (void)state;
  assert_int_equal(parsed("bitwise").kind, DLC_TOL_BITWISE);
  assert_int_equal(parsed("  bitwise  ").kind, DLC_TOL_BITWISE);
  dlc_tolerance t = parsed("ulp(4)");
  assert_int_equal(t.kind, DLC_TOL_ULP);
  assert_int_equal(t.ulp, 4);
  assert_int_equal(parsed(" ulp( 0 ) ").ulp, 0);
  assert_int_equal(parsed("ulp(4294967296)").ulp, 4294967296LL);
  t = parsed("close(1e-5, 1e-6)");
  assert_int_equal(t.kind, DLC_TOL_CLOSE);
  assert_true(t.rtol == 1e-5 && t.atol == 1e-6);
  t = parsed("close( 0 ,0 )");
  assert_true(t.rtol == 0 && t.atol == 0);
  /* what describe writes parses back */
  t = parsed("close(rtol=1.3e-06, atol=1e-05)");
  assert_true(t.rtol == 1.3e-6 && t.atol == 1e-5);
}

static void parse_rejects_everything_else(void **state) {
  (void)state;
  static const char *const bad[] = {"",
                                    "Bitwise",
                                    "bitwise x",
                                    "exact",
                                    "ulp()",
                                    "ulp(-1)",
                                    "ulp(1.5)",
                                    "ulp(4294967297)",
                                    "ulp(1e30)",
                                    "ulp(nan)",
                                    "ulp(4",
                                    "ulp(4) 5",
                                    "close(1e-5)",
                                    "close(1e-5,)",
                                    "close(a, b)",
                                    "close(1, 2) x",
                                    "close(-1, 0)",
                                    "close(0, -1)",
                                    "close(inf, 0)",
                                    "close(nan, 0)",
                                    "close(1, 2",
                                    "close(atol=1, rtol=2)",
                                    "close(rtol 1, 2)"};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    dlc_tolerance t = {DLC_TOL_ULP, 99, 7, 7};
    dl_status s = dlc_tolerance_parse(bad[i], &t);
    if (s != DL_ERR_INVALID) fail_msg("'%s' parsed (%d)", bad[i], s);
    char quoted[64];
    snprintf(quoted, sizeof quoted, "'%s'", bad[i]);
    assert_non_null(strstr(dl_last_error(), quoted));
    assert_non_null(strstr(dl_last_error(), "expected bitwise, ulp(N) or close(RTOL, ATOL)"));
    assert_int_equal(t.ulp, 99); /* untouched on failure */
  }
}

static void describe_names_the_rule(void **state) {
  (void)state;
  char buf[64];
  dlc_tolerance t = dlc_tolerance_bitwise();
  assert_string_equal(dlc_tolerance_describe(&t, buf, sizeof buf), "bitwise");
  t = ulp_rule(4);
  assert_string_equal(dlc_tolerance_describe(&t, buf, sizeof buf), "ulp(4)");
  t = dlc_tolerance_default(DL_F32);
  assert_string_equal(dlc_tolerance_describe(&t, buf, sizeof buf),
                      "close(rtol=1.3e-06, atol=1e-05)");
  assert_ptr_equal(dlc_tolerance_describe(&t, buf, 8), buf);
  assert_string_equal(buf, "close(r"); /* cut, never overrun */
}

/* torch.testing's defaults (torch/testing/_comparison.py, _DTYPE_PRECISIONS);
 * integers compare exactly there too. */
static void defaults_follow_torch_testing(void **state) {
  (void)state;
  dlc_tolerance t = dlc_tolerance_default(DL_F32);
  assert_true(t.kind == DLC_TOL_CLOSE && t.rtol == 1.3e-6 && t.atol == 1e-5);
  t = dlc_tolerance_default(DL_F16);
  assert_true(t.kind == DLC_TOL_CLOSE && t.rtol == 1e-3 && t.atol == 1e-5);
  t = dlc_tolerance_default(DL_BF16);
  assert_true(t.kind == DLC_TOL_CLOSE && t.rtol == 1.6e-2 && t.atol == 1e-5);
  assert_int_equal(dlc_tolerance_default(DL_I32).kind, DLC_TOL_BITWISE);
  assert_int_equal(dlc_tolerance_default(DL_I64).kind, DLC_TOL_BITWISE);
}

/* ---- ULP distance ---------------------------------------------------------------- */

static void ulp_distance_counts_floats_between(void **state) {
  (void)state;
  assert_int_equal(dlc_ulp_distance(1.0f, 1.0f), 0);
  assert_int_equal(dlc_ulp_distance(1.0f, nextafterf(1.0f, 2.0f)), 1);
  assert_int_equal(dlc_ulp_distance(nextafterf(1.0f, 2.0f), 1.0f), 1); /* symmetric */
  /* a binade holds 2^23 floats */
  assert_int_equal(dlc_ulp_distance(1.0f, 2.0f), 1 << 23);
  assert_int_equal(dlc_ulp_distance(4.0f, 8.0f), 1 << 23);
  /* across zero: -denormal, -0 = +0, +denormal */
  assert_int_equal(dlc_ulp_distance(0.0f, -0.0f), 0);
  assert_int_equal(dlc_ulp_distance(0.0f, FLT_TRUE_MIN), 1);
  assert_int_equal(dlc_ulp_distance(-FLT_TRUE_MIN, FLT_TRUE_MIN), 2);
  assert_int_equal(dlc_ulp_distance(-1.0f, 1.0f), 2 * 0x3f800000ULL);
  assert_int_equal(dlc_ulp_distance(FLT_MAX, INFINITY), 1);
  assert_int_equal(dlc_ulp_distance(-INFINITY, INFINITY), 2 * 0x7f800000ULL);
  /* NaN: the same bits are 0 apart, anything else infinitely far */
  float nan1 = bits_f32(0x7fc00001u), nan2 = bits_f32(0x7fc00002u);
  assert_int_equal(dlc_ulp_distance(nan1, nan1), 0);
  assert_true(dlc_ulp_distance(nan1, nan2) == UINT64_MAX);
  assert_true(dlc_ulp_distance(nan1, 1.0f) == UINT64_MAX);
  assert_true(dlc_ulp_distance(INFINITY, nan1) == UINT64_MAX);
}

/* ---- the three rules on floats ----------------------------------------------------- */

static bool ok_f32(float a, float b, dlc_tolerance t) { return dlc_compare_f32(&a, &b, 1, &t).ok; }

static void bitwise_means_the_same_bits(void **state) {
  (void)state;
  dlc_tolerance bw = dlc_tolerance_bitwise();
  float nan1 = bits_f32(0x7fc00001u), nan2 = bits_f32(0x7fc00002u);
  assert_true(ok_f32(1.5f, 1.5f, bw));
  assert_false(ok_f32(0.0f, -0.0f, bw)); /* equal values, different bits */
  assert_true(ok_f32(nan1, nan1, bw));
  assert_false(ok_f32(nan1, nan2, bw));
  assert_false(ok_f32(1.0f, nextafterf(1.0f, 2.0f), bw));
  assert_true(ok_f32(INFINITY, INFINITY, bw));
}

static void ulp_allows_n_floats_apart(void **state) {
  (void)state;
  float one_up = nextafterf(1.0f, 2.0f), two_up = nextafterf(one_up, 2.0f);
  assert_false(ok_f32(1.0f, one_up, ulp_rule(0)));
  assert_true(ok_f32(1.0f, one_up, ulp_rule(1)));
  assert_false(ok_f32(1.0f, two_up, ulp_rule(1)));
  assert_true(ok_f32(two_up, 1.0f, ulp_rule(2)));
  assert_true(ok_f32(-FLT_TRUE_MIN, FLT_TRUE_MIN, ulp_rule(2))); /* across zero */
  assert_true(ok_f32(0.0f, -0.0f, ulp_rule(0)));
  assert_false(ok_f32(bits_f32(0x7fc00001u), 1.0f, ulp_rule(4294967296LL)));
}

/* Inclusive at the boundary: b = 1, rtol 0.5, atol 0.25 allow exactly 0.75. */
static void close_is_torch_assert_close(void **state) {
  (void)state;
  dlc_tolerance t = close_rule(0.5, 0.25);
  assert_true(ok_f32(1.75f, 1.0f, t));
  assert_false(ok_f32(nextafterf(1.75f, 2.0f), 1.0f, t));
  assert_true(ok_f32(0.25f, 1.0f, t));
  assert_false(ok_f32(nextafterf(0.25f, 0.0f), 1.0f, t));
  /* the reference is b: rtol scales |b|, not |a| */
  assert_true(ok_f32(4.0f, 8.0f, close_rule(0.5, 0)));
  assert_false(ok_f32(8.0f, 4.0f, close_rule(0.5, 0)));
  assert_true(ok_f32(0.0f, -0.0f, close_rule(0, 0)));
  assert_true(ok_f32(INFINITY, INFINITY, close_rule(0, 0)));
  assert_false(ok_f32(INFINITY, -INFINITY, close_rule(1, 1)));
  assert_false(ok_f32(INFINITY, FLT_MAX, close_rule(1, 1)));
  assert_false(ok_f32(bits_f32(0x7fc00001u), 0.0f, close_rule(1, 1)));
  /* NaN equals NaN only with the same bits (torch's equal_nan=True, stricter) */
  assert_true(ok_f32(bits_f32(0x7fc00001u), bits_f32(0x7fc00001u), close_rule(0, 0)));
  assert_false(ok_f32(bits_f32(0x7fc00001u), bits_f32(0x7fc00002u), close_rule(1, 1)));
}

/* The report: counts, the first failure with both values, and maxima over
 * all elements, failing or not. */
static void diff_reports_first_failure_and_maxima(void **state) {
  (void)state;
  const float a[5] = {1, 2, 3, 4, 1}, b[5] = {1, 2.5f, 3, 8, 0};
  dlc_tolerance t = close_rule(0, 0.1);
  dlc_diff d = dlc_compare_f32(a, b, 5, &t);
  assert_false(d.ok);
  assert_int_equal(d.n, 5);
  assert_int_equal(d.nbad, 3);
  assert_int_equal(d.first_bad, 1);
  assert_true(d.a_at_first == 2.0 && d.b_at_first == 2.5);
  assert_true(d.max_abs == 4.0);
  assert_true(isinf(d.max_rel));           /* 1 against a reference of 0 */
  assert_int_equal(d.max_ulp, 0x3f800000); /* 1 against 0 */
  char buf[256];
  dlc_diff_describe(&d, &t, buf, sizeof buf);
  assert_string_equal(buf, "max abs 4, max rel inf, 1065353216 ulp; 3 of 5 elements outside "
                           "close(rtol=0, atol=0.1), first at [1]: 2 vs 2.5");
  /* a passing comparison still reports its maxima */
  d = dlc_compare_f32(a, b, 3, &(dlc_tolerance){DLC_TOL_CLOSE, 0, 0.25, 0});
  assert_true(d.ok);
  assert_int_equal(d.first_bad, -1);
  assert_true(d.max_abs == 0.5 && d.max_rel == 0.2);
  assert_int_equal(d.max_ulp, 1 << 21); /* 2 to 2.5: a quarter of a binade */
  dlc_diff_describe(&d, &t, buf, sizeof buf);
  assert_string_equal(buf, "max abs 0.5, max rel 0.2, 2097152 ulp, within close(rtol=0, atol=0.1)");
  /* a short buffer is cut, never overrun */
  d = dlc_compare_f32(a, b, 5, &t);
  assert_ptr_equal(dlc_diff_describe(&d, &t, buf, 12), buf);
  assert_string_equal(buf, "max abs 4, ");
  d = dlc_compare_f32(a, a, 0, &t);
  assert_true(d.ok);
  assert_int_equal(d.n, 0);
}

/* Doubles (series, metrics) compare under the rule in double; their ULPs
 * are float32's, as series hold float32 values. */
static void doubles_compare_in_double(void **state) {
  (void)state;
  const double a[2] = {1.0, 0.1}, b[2] = {1.0 + 0x1p-40, 0.1};
  dlc_tolerance bw = dlc_tolerance_bitwise(), u0 = ulp_rule(0);
  dlc_diff d = dlc_compare_f64(a, b, 2, &bw);
  assert_false(d.ok);
  assert_int_equal(d.first_bad, 0);
  assert_true(d.max_abs == 0x1p-40);
  d = dlc_compare_f64(a, b, 2, &u0);
  assert_true(d.ok); /* the same float32 */
  assert_int_equal(d.max_ulp, 0);
  d = dlc_compare_f64(a, b, 2, &(dlc_tolerance){DLC_TOL_CLOSE, 0, 0, 0x1p-41});
  assert_false(d.ok);
}

/* ---- tensors ----------------------------------------------------------------------- */

static void tensor_of(dl_tensor *t, dl_dtype dt, int64_t n, const void *values) {
  memset(t, 0, sizeof *t);
  const int64_t shape[1] = {n};
  assert_int_equal(dl_tensor_alloc(t, dt, 1, shape, "t"), DL_OK);
  memcpy(t->data, values, dl_tensor_bytes(t));
}

static void int_tensors_compare_exactly(void **state) {
  (void)state;
  dl_tensor a, b;
  const int32_t ia[3] = {1, 2, 3}, ib[3] = {1, 2, 4};
  tensor_of(&a, DL_I32, 3, ia);
  tensor_of(&b, DL_I32, 3, ib);
  dlc_tolerance loose = close_rule(1, 1);
  dlc_diff d = dlc_compare_tensors(&a, &b, &loose); /* the rule does not loosen integers */
  assert_false(d.ok);
  assert_int_equal(d.nbad, 1);
  assert_int_equal(d.first_bad, 2);
  assert_true(d.a_at_first == 3 && d.b_at_first == 4);
  assert_int_equal(d.max_ulp, 1);
  assert_true(dlc_compare_tensors(&a, &a, &loose).ok);
  dl_tensor_free(&a);
  dl_tensor_free(&b);
  /* 2^53 and 2^53 + 1 are one double apart from nothing: still different */
  const int64_t la[1] = {9007199254740992LL}, lb[1] = {9007199254740993LL};
  tensor_of(&a, DL_I64, 1, la);
  tensor_of(&b, DL_I64, 1, lb);
  d = dlc_compare_tensors(&a, &b, &loose);
  assert_false(d.ok);
  assert_int_equal(d.first_bad, 0);
  dl_tensor_free(&a);
  dl_tensor_free(&b);
}

static void shapes_and_dtypes_must_match(void **state) {
  (void)state;
  dl_tensor a = {0}, b = {0}, c = {0};
  assert_int_equal(dl_tensor_f32(&a, 2, 2, 3, 0, 0, "a"), DL_OK);
  assert_int_equal(dl_tensor_f32(&b, 2, 3, 2, 0, 0, "b"), DL_OK);
  const int64_t six[1] = {6};
  assert_int_equal(dl_tensor_alloc(&c, DL_I32, 1, six, "c"), DL_OK);
  dlc_tolerance t = dlc_tolerance_default(DL_F32);
  dlc_diff d = dlc_compare_tensors(&a, &b, &t);
  assert_false(d.ok);
  assert_int_equal(d.n, -1);
  assert_int_equal(d.first_bad, -1);
  char buf[64];
  assert_string_equal(dlc_diff_describe(&d, &t, buf, sizeof buf), "shapes or dtypes differ");
  assert_int_equal(dlc_compare_tensors(&a, &c, &t).n, -1);
  /* same shape, float32: the rule applies */
  dl_f32(&a)[4] = 1.0f;
  dl_tensor_zero(&b);
  assert_int_equal(dl_tensor_reshape(&b, 2, a.shape), DL_OK);
  d = dlc_compare_tensors(&a, &b, &t);
  assert_int_equal(d.first_bad, 4);
  assert_true(dlc_compare_tensors(&a, &b, &(dlc_tolerance){DLC_TOL_CLOSE, 0, 0, 1}).ok);
  dl_tensor_free(&a);
  dl_tensor_free(&b);
  dl_tensor_free(&c);
}

/* Half tensors compare as their float32 values under the rule (fp16/bf16
 * defaults are meant for them); ULPs count steps of the half format. */
static void half_tensors_use_the_rule_in_half_ulps(void **state) {
  (void)state;
  dl_tensor a, b;
  /* 1, 1 + 2^-10, 1 + 2^-9, +denormal, NaN */
  const uint16_t ha[5] = {0x3c00, 0x3c00, 0x3c00, 0x0001, 0x7e00};
  const uint16_t hb[5] = {0x3c00, 0x3c01, 0x3c02, 0x8001, 0x7e00};
  tensor_of(&a, DL_F16, 3, ha);
  tensor_of(&b, DL_F16, 3, hb);
  dlc_tolerance def = dlc_tolerance_default(DL_F16);
  /* |b| ~ 1, allowed 1e-5 + 1e-3 * |b|: 2^-10 passes, 2^-9 does not */
  dlc_diff d = dlc_compare_tensors(&a, &b, &def);
  assert_int_equal(d.nbad, 1);
  assert_int_equal(d.first_bad, 2);
  assert_true(d.a_at_first == 1.0 && d.b_at_first == 1.0 + 0x1p-9);
  assert_int_equal(d.max_ulp, 2);
  assert_true(dlc_compare_tensors(&a, &b, &(dlc_tolerance){DLC_TOL_ULP, 2, 0, 0}).ok);
  assert_false(dlc_compare_tensors(&a, &b, &(dlc_tolerance){DLC_TOL_ULP, 1, 0, 0}).ok);
  dlc_tolerance bw = dlc_tolerance_bitwise();
  assert_int_equal(dlc_compare_tensors(&a, &b, &bw).nbad, 2);
  dl_tensor_free(&a);
  dl_tensor_free(&b);
  /* across zero, and NaN against the same NaN */
  tensor_of(&a, DL_F16, 2, ha + 3);
  tensor_of(&b, DL_F16, 2, hb + 3);
  d = dlc_compare_tensors(&a, &b, &(dlc_tolerance){DLC_TOL_ULP, 2, 0, 0});
  assert_true(d.ok);
  assert_int_equal(d.max_ulp, 2);
  ((uint16_t *)b.data)[1] = 0x7e01;
  d = dlc_compare_tensors(&a, &b, &(dlc_tolerance){DLC_TOL_ULP, 1000, 0, 0});
  assert_false(d.ok);
  assert_true(d.max_ulp == UINT64_MAX);
  dl_tensor_free(&a);
  dl_tensor_free(&b);
  /* bfloat16: 1 against 1 + 2^-7 is inside its default, one ulp */
  const uint16_t ba[1] = {0x3f80}, bb[1] = {0x3f81};
  tensor_of(&a, DL_BF16, 1, ba);
  tensor_of(&b, DL_BF16, 1, bb);
  dlc_tolerance bdef = dlc_tolerance_default(DL_BF16);
  d = dlc_compare_tensors(&a, &b, &bdef);
  assert_true(d.ok);
  assert_int_equal(d.max_ulp, 1);
  assert_true(d.max_abs == 0x1p-7);
  assert_false(dlc_compare_tensors(&a, &b, &def).ok); /* float16's rule is tighter */
  dl_tensor_free(&a);
  dl_tensor_free(&b);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(parse_accepts_the_three_rules),
      cmocka_unit_test(parse_rejects_everything_else),
      cmocka_unit_test(describe_names_the_rule),
      cmocka_unit_test(defaults_follow_torch_testing),
      cmocka_unit_test(ulp_distance_counts_floats_between),
      cmocka_unit_test(bitwise_means_the_same_bits),
      cmocka_unit_test(ulp_allows_n_floats_apart),
      cmocka_unit_test(close_is_torch_assert_close),
      cmocka_unit_test(diff_reports_first_failure_and_maxima),
      cmocka_unit_test(doubles_compare_in_double),
      cmocka_unit_test(int_tensors_compare_exactly),
      cmocka_unit_test(shapes_and_dtypes_must_match),
      cmocka_unit_test(half_tensors_use_the_rule_in_half_ulps),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
