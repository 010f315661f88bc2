/* Learning-rate schedules (engine/optim/schedule.c): values at the boundaries,
 * against the formulas of schedule.h evaluated here in double with libm. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <string.h>
#include <cmocka.h>

#include "optim/schedule.h"

static const double pi = 3.14159265358979323846;

static void constant_is_constant(void **state) {
  (void)state;
  dl_schedule s = dl_schedule_constant(3e-4);
  assert_int_equal(dl_schedule_check(&s), DL_OK);
  assert_true(dl_lr_at(&s, 0) == 3e-4f);
  assert_true(dl_lr_at(&s, 123456789) == 3e-4f);
  assert_true(dl_lr_at(&s, -5) == 3e-4f);
}

/* StepLR: exact powers of 0.5 are exact, so equality; gamma 0.1 within one
 * float rounding (1e-7 relative) of lr * 0.1^k. */
static void step_decays_at_multiples_of_step_size(void **state) {
  (void)state;
  dl_schedule s = dl_schedule_constant(0.8);
  s.kind = DL_SCHEDULE_STEP;
  s.step_size = 3;
  s.gamma = 0.5;
  assert_int_equal(dl_schedule_check(&s), DL_OK);
  const float want[8] = {0.8f, 0.8f, 0.8f, 0.4f, 0.4f, 0.4f, 0.2f, 0.2f};
  for (int k = 0; k < 8; k++) assert_true(dl_lr_at(&s, k) == want[k]);
  assert_true(dl_lr_at(&s, -1) == 0.8f);
  assert_true(dl_lr_at(&s, 3000000) == 0.0f); /* 0.5^1e6 underflows */
  s.gamma = 0.1;
  for (int k = 0; k < 40; k++) {
    double ref = 0.8 * pow(0.1, k / 3);
    assert_true(fabs(dl_lr_at(&s, k) - ref) <= 1e-7 * ref);
  }
}

/* Cosine with warmup 4, total 14, lr 1, min 0.1: warmup 0.25, 0.5, 0.75, 1;
 * then 0.1 + 0.45 (1 + cos(pi (step - 4) / 10)); min_lr from step 14 on.
 * The engine's cosine is within 1 float ulp, so 3e-7 absolute. */
static void cosine_with_warmup(void **state) {
  (void)state;
  dl_schedule s = dl_schedule_constant(1.0);
  s.kind = DL_SCHEDULE_COSINE;
  s.warmup_steps = 4;
  s.total_steps = 14;
  s.min_lr = 0.1;
  assert_int_equal(dl_schedule_check(&s), DL_OK);
  assert_true(dl_lr_at(&s, 0) == 0.25f);
  assert_true(dl_lr_at(&s, 1) == 0.5f);
  assert_true(dl_lr_at(&s, 3) == 1.0f);
  assert_true(dl_lr_at(&s, 4) == 1.0f); /* progress 0: cos 0 = 1 */
  assert_true(fabs(dl_lr_at(&s, 9) - 0.55) <= 3e-7);
  for (int k = 4; k < 14; k++) {
    double ref = 0.1 + 0.45 * (1.0 + cos(pi * (k - 4) / 10.0));
    assert_true(fabs(dl_lr_at(&s, k) - ref) <= 3e-7);
  }
  assert_true(dl_lr_at(&s, 13) > dl_lr_at(&s, 14));
  assert_true(dl_lr_at(&s, 14) == 0.1f);
  assert_true(dl_lr_at(&s, 100000) == 0.1f);
  s.warmup_steps = 0; /* no warmup: the cosine starts at lr */
  assert_true(dl_lr_at(&s, 0) == 1.0f);
  assert_true(fabs(dl_lr_at(&s, 7) - (0.1 + 0.45 * (1.0 + cos(pi * 0.5)))) <= 3e-7);
}

static void expect_invalid(const dl_schedule *s, const char *msg) {
  assert_int_equal(dl_schedule_check(s), DL_ERR_INVALID);
  if (!strstr(dl_last_error(), msg)) fail_msg("'%s' lacks '%s'", dl_last_error(), msg);
}

static void bad_schedules_are_refused(void **state) {
  (void)state;
  dl_schedule s = dl_schedule_constant(-1.0);
  expect_invalid(&s, "lr -1 must be finite");
  s = dl_schedule_constant(INFINITY);
  expect_invalid(&s, "lr inf");
  s = dl_schedule_constant(0.1);
  s.kind = (dl_schedule_kind)9;
  expect_invalid(&s, "unknown kind 9");
  s.kind = DL_SCHEDULE_STEP;
  s.step_size = 0;
  expect_invalid(&s, "step_size 0");
  s.step_size = 2;
  s.gamma = 0.0;
  expect_invalid(&s, "gamma 0");
  s = dl_schedule_constant(0.1);
  s.kind = DL_SCHEDULE_COSINE;
  s.total_steps = 10;
  s.warmup_steps = 10;
  expect_invalid(&s, "warmup_steps (10) < total_steps (10)");
  s.warmup_steps = -1;
  expect_invalid(&s, "0 <= warmup_steps (-1)");
  s.warmup_steps = 2;
  s.min_lr = 0.2;
  expect_invalid(&s, "min_lr 0.2 must be in [0, lr = 0.1]");
  s.min_lr = 0.0;
  assert_int_equal(dl_schedule_check(&s), DL_OK);
}

static void kind_names_round_trip(void **state) {
  (void)state;
  dl_schedule_kind k;
  for (int i = 0; i < 3; i++) {
    assert_int_equal(dl_schedule_kind_parse(dl_schedule_kind_name((dl_schedule_kind)i), &k), DL_OK);
    assert_int_equal(k, i);
  }
  assert_int_equal(dl_schedule_kind_parse("linear", &k), DL_ERR_INVALID);
  assert_non_null(strstr(dl_last_error(), "'linear'"));
  assert_int_equal(dl_schedule_kind_parse(NULL, &k), DL_ERR_INVALID);
  assert_string_equal(dl_schedule_kind_name((dl_schedule_kind)9), "unknown");
  dl_schedule bad = dl_schedule_constant(0.5);
  bad.kind = (dl_schedule_kind)9;
  assert_true(dl_lr_at(&bad, 3) == 0.5f); /* unchecked kind: the base lr */
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(constant_is_constant),
      cmocka_unit_test(step_decays_at_multiples_of_step_size),
      cmocka_unit_test(cosine_with_warmup),
      cmocka_unit_test(bad_schedules_are_refused),
      cmocka_unit_test(kind_names_round_trip),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
