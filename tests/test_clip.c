/* Gradient norm and clipping (engine/optim/clip.c) against hand-computed norms and
 * torch.nn.utils.clip_grad_norm_'s rules. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "optim/clip.h"

static void make_param(dl_param *p, const char *name, const float *g, bool has_grad) {
  memset(p, 0, sizeof *p);
  snprintf(p->name, sizeof p->name, "%s", name);
  assert_int_equal(dl_tensor_f32(&p->value, 1, 4, 0, 0, 0, name), DL_OK);
  assert_int_equal(dl_tensor_f32(&p->grad, 1, 4, 0, 0, 0, name), DL_OK);
  memcpy(p->grad.data, g, 4 * sizeof(float));
  p->has_grad = has_grad;
  p->requires_grad = true;
}

static void free_params(dl_param *p, int n) {
  for (int i = 0; i < n; i++) {
    dl_tensor_free(&p[i].value);
    dl_tensor_free(&p[i].grad);
  }
}

/* |[1, 2, 2, 0]| = 3, |[0, 4, 0, 0]| = 4, total 5; the param without a
 * grad (values 100) must not count. Exact in float. */
static void norm_by_hand_and_skips_missing_grads(void **state) {
  (void)state;
  dl_param p[3];
  make_param(&p[0], "0.weight", (const float[]){1, 2, 2, 0}, true);
  make_param(&p[1], "0.bias", (const float[]){100, 100, 100, 100}, false);
  make_param(&p[2], "1.weight", (const float[]){0, 4, 0, 0}, true);
  p[2].in_optimizer = false; /* clipping ignores the optimizer flag */
  dl_param *ps[3] = {&p[0], &p[1], &p[2]};
  float norm = 0;
  assert_int_equal(dl_grad_norm(ps, 3, &norm), DL_OK);
  assert_true(norm == 5.0f);
  assert_true(dl_f32(&p[0].grad)[1] == 2.0f); /* not modified */

  /* max_norm 1: every grad times (1 / (5 + 1e-6)) * 1; within 1e-7
   * relative of the double value (two float roundings). */
  assert_int_equal(dl_clip_grad_norm(ps, 3, 1.0f, false, &norm), DL_OK);
  assert_true(norm == 5.0f);
  double coef = 1.0 / (5.0 + 1e-6);
  assert_true(fabs(dl_f32(&p[0].grad)[1] - 2.0 * coef) <= 1e-7 * 2.0 * coef);
  assert_true(fabs(dl_f32(&p[2].grad)[1] - 4.0 * coef) <= 1e-7 * 4.0 * coef);
  assert_true(dl_f32(&p[1].grad)[0] == 100.0f);
  assert_true(dl_f32(&p[0].grad)[3] == 0.0f);
  assert_int_equal(dl_grad_norm(ps, 3, &norm), DL_OK);
  assert_true(fabs(norm - 1.0) <= 2e-7);
  free_params(p, 3);
}

/* A norm below max_norm leaves the grads bitwise as they were (times 1). */
static void below_max_norm_is_unchanged(void **state) {
  (void)state;
  const float g[4] = {0.1f, -0.3f, 1e-20f, 0.7f};
  dl_param p;
  make_param(&p, "w", g, true);
  dl_param *ps[1] = {&p};
  float norm;
  assert_int_equal(dl_clip_grad_norm(ps, 1, 10.0f, true, &norm), DL_OK);
  assert_memory_equal(p.grad.data, g, sizeof g);
  assert_int_equal(dl_clip_grad_norm(ps, 1, INFINITY, true, NULL), DL_OK);
  assert_memory_equal(p.grad.data, g, sizeof g);
  /* No grads at all: norm 0, nothing to do. */
  p.has_grad = false;
  assert_int_equal(dl_clip_grad_norm(ps, 1, 1.0f, true, &norm), DL_OK);
  assert_true(norm == 0.0f);
  assert_int_equal(dl_grad_norm(ps, 0, &norm), DL_OK);
  assert_true(norm == 0.0f);
  free_params(&p, 1);
}

/* Squares of 1e30 overflow float but not the double accumulator:
 * |[1e30, 1e30, 1e30, 1e30]| = 2e30 exactly up to float rounding. */
static void large_gradients_do_not_overflow(void **state) {
  (void)state;
  dl_param p;
  make_param(&p, "w", (const float[]){1e30f, 1e30f, 1e30f, 1e30f}, true);
  dl_param *ps[1] = {&p};
  float norm;
  assert_int_equal(dl_grad_norm(ps, 1, &norm), DL_OK);
  assert_true(fabs(norm - 2e30) <= 1e-7 * 2e30);
  free_params(&p, 1);
}

/* Non-finite: with error_if_nonfinite, DL_ERR_NUMERIC naming the param and
 * grads untouched; without it, as torch: inf norm -> coefficient 0 (inf *
 * 0 = NaN), NaN norm -> every grad NaN. */
static void nonfinite_norms(void **state) {
  (void)state;
  dl_param p[2];
  make_param(&p[0], "0.weight", (const float[]){1, 2, 3, 4}, true);
  make_param(&p[1], "3.bias", (const float[]){1, INFINITY, 0, 0}, true);
  dl_param *ps[2] = {&p[0], &p[1]};
  float norm;
  assert_int_equal(dl_clip_grad_norm(ps, 2, 1.0f, true, &norm), DL_ERR_NUMERIC);
  assert_non_null(strstr(dl_last_error(), "first non-finite: 3.bias"));
  assert_true(isinf(norm));
  assert_true(dl_f32(&p[0].grad)[0] == 1.0f);
  assert_int_equal(dl_clip_grad_norm(ps, 2, 1.0f, false, &norm), DL_OK);
  assert_true(dl_f32(&p[0].grad)[0] == 0.0f);
  assert_true(isnan(dl_f32(&p[1].grad)[1]));
  dl_f32(&p[0].grad)[0] = NAN;
  assert_int_equal(dl_clip_grad_norm(ps, 1, 1.0f, false, &norm), DL_OK);
  assert_true(isnan(norm));
  for (int i = 0; i < 4; i++) assert_true(isnan(dl_f32(&p[0].grad)[i]));
  free_params(p, 2);
}

static void bad_arguments_are_refused(void **state) {
  (void)state;
  dl_param p;
  make_param(&p, "w", (const float[]){1, 2, 3, 4}, true);
  dl_param *ps[1] = {&p};
  float norm;
  assert_int_equal(dl_clip_grad_norm(ps, 1, -1.0f, false, &norm), DL_ERR_INVALID);
  assert_non_null(strstr(dl_last_error(), "max_norm -1"));
  assert_int_equal(dl_clip_grad_norm(ps, 1, NAN, false, &norm), DL_ERR_INVALID);
  assert_int_equal(dl_grad_norm(NULL, 1, &norm), DL_ERR_INVALID);
  dl_param *nul[1] = {NULL};
  assert_int_equal(dl_grad_norm(nul, 1, &norm), DL_ERR_INVALID);
  assert_non_null(strstr(dl_last_error(), "param 0 is NULL"));
  dl_tensor_free(&p.grad);
  assert_int_equal(dl_clip_grad_norm(ps, 1, 1.0f, false, &norm), DL_ERR_INVALID);
  assert_non_null(strstr(dl_last_error(), "param w has has_grad set but no float32 grad"));
  free_params(&p, 1);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(norm_by_hand_and_skips_missing_grads),
      cmocka_unit_test(below_max_norm_is_unchanged),
      cmocka_unit_test(large_gradients_do_not_overflow),
      cmocka_unit_test(nonfinite_norms),
      cmocka_unit_test(bad_arguments_are_refused),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
