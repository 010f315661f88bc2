/* The equivalence check (checks/judge/check_equivalence.c) with a noise
 * run: each quantity is compared within noise_widen times its own distance
 * between the reference and the noise run (its band), at least that many
 * float32 ulps of its largest value, so a noisy tensor widens only its own
 * band. Synthetic traces: a reference a, a candidate b, a noise run n. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "judge/check.h"
#include "judge/checks_impl.h"
#include "trace/trace.h"

enum { A, B, NOISE, NRUNS };
static const char *const run_names[NRUNS] = {"a", "b", "noise"};

/* Run r with two tensors (quiet: 4 elements near 1, noisy: 4 near 0) and a
 * loss series, each element offset by the given amounts. */
static void make_run(dlc_trace *t, int r, float quiet, float noisy, double loss) {
  dlc_trace_init(t, "s", run_names[r]);
  dl_tensor q = {0}, z = {0};
  assert_int_equal(dl_tensor_f32(&q, 1, 4, 0, 0, 0, "quiet"), DL_OK);
  assert_int_equal(dl_tensor_f32(&z, 1, 4, 0, 0, 0, "noisy"), DL_OK);
  for (int i = 0; i < 4; i++) {
    dl_f32(&q)[i] = 1.0f + (float)i + quiet;
    dl_f32(&z)[i] = 1e-3f * (float)i + noisy;
  }
  assert_int_equal(dlc_trace_add_final(t, "param/quiet", &q), DL_OK);
  assert_int_equal(dlc_trace_add_final(t, "param/noisy", &z), DL_OK);
  for (int s = 0; s < 3; s++) assert_int_equal(dlc_trace_push(t, "loss", 2.0 + s + loss), DL_OK);
  dl_tensor_free(&q);
  dl_tensor_free(&z);
}

static dlc_check_spec spec_of(const char *quantity) {
  dlc_check_spec s = {.kind = "equivalence",
                      .a = "a",
                      .b = "b",
                      .noise = "noise",
                      .noise_widen = 4,
                      .nquantities = 1};
  snprintf(s.name, sizeof s.name, "same");
  snprintf(s.quantities[0], sizeof s.quantities[0], "%s", quantity);
  return s;
}

/* The verdict of b against a with the noise run, each run offset as given. */
static dlc_verdict judge(const char *quantity, const float b_off[2], const float n_off[2],
                         double b_loss, double n_loss) {
  dlc_trace t[NRUNS];
  make_run(&t[A], A, 0, 0, 0);
  make_run(&t[B], B, b_off[0], b_off[1], b_loss);
  make_run(&t[NOISE], NOISE, n_off[0], n_off[1], n_loss);
  dlc_check_spec s = spec_of(quantity);
  dlc_verdict v;
  dlc_verdict_init(&v, "same", "", "");
  assert_int_equal(dlc_check_equivalence(&s, t, NRUNS, &v), DL_OK);
  for (int r = 0; r < NRUNS; r++) dlc_trace_free(&t[r]);
  return v;
}

/* The noisy tensor's band (4 x 1e-4) holds b's 3e-4 there; the quiet
 * tensor's band is its own floor (4 ulps of 4.0, 1.9e-6). */
static void each_tensor_within_its_own_band(void **state) {
  (void)state;
  dlc_verdict v = judge("params", (float[]){0, 3e-4f}, (float[]){0, 1e-4f}, 0, 0);
  assert_int_equal(v.kind, DLC_PASS);
  assert_non_null(
      strstr(v.evidence, "within bands of 4 times each quantity's distance from noise"));
}

/* A difference the noisy tensor's band would hold fails the quiet one: a
 * single tolerance for both would have passed it. */
static void a_noisy_tensor_widens_only_its_own_band(void **state) {
  (void)state;
  dlc_verdict v = judge("params", (float[]){3e-4f, 0}, (float[]){0, 1e-4f}, 0, 0);
  assert_int_equal(v.kind, DLC_FAIL);
  assert_non_null(strstr(v.evidence, "param/quiet differs"));
  assert_non_null(strstr(v.evidence, "atol=1.9"));
  assert_string_equal(v.tensor, "param/quiet");
}

/* Past 4 times the noise: fails, and the evidence gives the band it used. */
static void outside_the_band_fails(void **state) {
  (void)state;
  dlc_verdict v = judge("params", (float[]){0, 5e-4f}, (float[]){0, 1e-4f}, 0, 0);
  assert_int_equal(v.kind, DLC_FAIL);
  assert_non_null(strstr(v.evidence, "param/noisy differs"));
  assert_non_null(strstr(v.evidence, "atol=0.0004"));
}

/* Series get a band too: the loss's largest distance over the steps. */
static void series_bands(void **state) {
  (void)state;
  assert_int_equal(judge("loss", (float[]){0, 0}, (float[]){0, 0}, 3e-3, 1e-3).kind, DLC_PASS);
  dlc_verdict v = judge("loss", (float[]){0, 0}, (float[]){0, 0}, 5e-3, 1e-3);
  assert_int_equal(v.kind, DLC_FAIL);
  assert_non_null(strstr(v.evidence, "loss first differs at step 0"));
}

/* A noise run that lacks a tensor leaves it without a band: a failure that
 * says so, never a pass; a missing noise run is an error. */
static void a_missing_band_fails(void **state) {
  (void)state;
  dlc_trace t[NRUNS];
  make_run(&t[A], A, 0, 0, 0);
  make_run(&t[B], B, 0, 0, 0);
  dlc_trace_init(&t[NOISE], "s", "noise");
  dlc_check_spec s = spec_of("params");
  dlc_verdict v;
  dlc_verdict_init(&v, "same", "", "");
  assert_int_equal(dlc_check_equivalence(&s, t, NRUNS, &v), DL_OK);
  assert_int_equal(v.kind, DLC_FAIL);
  assert_non_null(strstr(v.evidence, "the noise run noise does not hold it comparably"));
  dlc_verdict_init(&v, "same", "", "");
  assert_int_equal(dlc_check_equivalence(&s, t, 2, &v), DL_ERR_INVALID);
  for (int r = 0; r < NRUNS; r++) dlc_trace_free(&t[r]);
}

/* noise_b, b's own shadow: the band adds b's distance from it, so a b
 * whose own rounding is larger than a's passes when its shadow agrees
 * with a's (b is right, only rounded worse); a b whose shadow agrees with
 * b itself but not with a differs in its arithmetic, and fails. */
static void both_shadows_bound_the_difference(void **state) {
  (void)state;
  dlc_trace t[4];
  make_run(&t[A], A, 0, 0, 0);
  make_run(&t[B], B, 3e-4f, 0, 0);
  make_run(&t[NOISE], NOISE, 0, 0, 0); /* a's shadow: a is exact */
  dlc_trace_init(&t[3], "s", "noise_b");
  make_run(&t[3], NOISE, 0, 0, 0); /* b's shadow holds a's values: b only rounds worse */
  snprintf(t[3].run, sizeof t[3].run, "noise_b");
  dlc_check_spec s = spec_of("params");
  snprintf(s.noise_b, sizeof s.noise_b, "noise_b");
  dlc_verdict v;
  dlc_verdict_init(&v, "same", "", "");
  assert_int_equal(dlc_check_equivalence(&s, t, 4, &v), DL_OK);
  assert_int_equal(v.kind, DLC_PASS);
  assert_non_null(strstr(v.evidence, "distances from noise and noise_b added"));
  dlc_trace_free(&t[3]);
  make_run(&t[3], NOISE, 3e-4f, 0, 0); /* b's shadow agrees with b: b computes another thing */
  snprintf(t[3].run, sizeof t[3].run, "noise_b");
  dlc_verdict_init(&v, "same", "", "");
  assert_int_equal(dlc_check_equivalence(&s, t, 4, &v), DL_OK);
  assert_int_equal(v.kind, DLC_FAIL);
  for (int r = 0; r < 4; r++) dlc_trace_free(&t[r]);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(each_tensor_within_its_own_band),
      cmocka_unit_test(a_noisy_tensor_widens_only_its_own_band),
      cmocka_unit_test(outside_the_band_fails),
      cmocka_unit_test(series_bands),
      cmocka_unit_test(a_missing_band_fails),
      cmocka_unit_test(both_shadows_bound_the_difference),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
