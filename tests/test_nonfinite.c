/* The nonfinite check (checks/judge/check_nonfinite.c): where the first
 * inf/NaN appeared, and advice that follows from what made it. Synthetic
 * traces: a loss series with a NaN, with and without the origin the
 * audit's replay names (note nonfinite_origin, metrics _step, _domain). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "judge/checks_impl.h"
#include "trace/trace.h"

static dlc_verdict judge(double nan_at, const char *origin, double origin_step, double domain) {
  dlc_trace t;
  dlc_trace_init(&t, "s", "trained");
  for (int s = 0; s < 4; s++)
    assert_int_equal(dlc_trace_push(&t, "loss", s >= nan_at ? NAN : 2.0 - s), DL_OK);
  if (origin) {
    assert_int_equal(dlc_trace_set_note(&t, "nonfinite_origin", origin), DL_OK);
    assert_int_equal(dlc_trace_set_metric(&t, "nonfinite_origin_step", origin_step), DL_OK);
    assert_int_equal(dlc_trace_set_metric(&t, "nonfinite_origin_domain", domain), DL_OK);
  }
  dlc_check_spec spec = {.kind = "nonfinite", .a = "trained"};
  snprintf(spec.name, sizeof spec.name, "finite");
  dlc_verdict v;
  dlc_verdict_init(&v, "finite", "", "");
  assert_int_equal(dlc_check_nonfinite(&spec, &t, 1, &v), DL_OK);
  dlc_trace_free(&t);
  return v;
}

static void finite_training_passes(void **state) {
  (void)state;
  dlc_verdict v = judge(INFINITY, NULL, 0, 0);
  assert_int_equal(v.kind, DLC_PASS);
}

/* Without an origin the advice is for an explosion, the common cause. */
static void an_unexplained_nan_is_advised_as_an_explosion(void **state) {
  (void)state;
  dlc_verdict v = judge(2, NULL, 0, 0);
  assert_int_equal(v.kind, DLC_FAIL);
  assert_int_equal(v.step, 2);
  assert_non_null(strstr(v.evidence, "Loss first non-finite at step 2"));
  assert_non_null(strstr(v.evidence, "Clip gradients"));
}

/* log(0) at step 0: the origin's step and sentence, and the domain
 * advice instead of clipping, which would not fix it. */
static void a_function_outside_its_domain_is_advised_to_clamp(void **state) {
  (void)state;
  dlc_verdict v = judge(1, "The first inf/NaN was made at step 0 by torch log.", 0, 1);
  assert_int_equal(v.kind, DLC_FAIL);
  assert_int_equal(v.step, 0);
  assert_non_null(strstr(v.evidence, "made at step 0 by torch log."));
  assert_non_null(strstr(v.evidence, "clamp it"));
  assert_null(strstr(v.evidence, "Clip gradients"));
}

static void an_overflow_origin_keeps_the_clipping_advice(void **state) {
  (void)state;
  dlc_verdict v = judge(3, "The first inf/NaN was made at step 3 by torch mse_loss.", 3, 0);
  assert_non_null(strstr(v.evidence, "by torch mse_loss."));
  assert_non_null(strstr(v.evidence, "Clip gradients"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(finite_training_passes),
      cmocka_unit_test(an_unexplained_nan_is_advised_as_an_explosion),
      cmocka_unit_test(a_function_outside_its_domain_is_advised_to_clamp),
      cmocka_unit_test(an_overflow_origin_keeps_the_clipping_advice),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
