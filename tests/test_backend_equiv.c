/* The backend_equiv scenario's tolerances, checked on the CPU: its runs
 * need a GPU, but what they compare can be reproduced with host backends
 * (host_backend.h). The CPU run against
 *   - float32 GEMMs and convolutions in another summation order (dl_sgemm's
 *     reference order, direct convolutions accumulated in double), which is
 *     what cuBLAS/cuDNN in strict FP32 amount to: must pass
 *     fp32_matches_cpu's tolerance;
 *   - the same with every operand rounded to TF32, as tensor cores do:
 *     must exceed it (tf32_drift must be able to show the drift).
 * Prints the measured differences. */
#define _POSIX_C_SOURCE 200809L /* mkdtemp */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "judge/check.h"
#include "judge/checks_impl.h"
#include "host_backend.h"
#include "run/runner.h"
#include "scenario/scenario.h"
#include "tmpdir.h"

static const dlc_check_spec *find_check(const dlc_scenario *s, const char *name) {
  for (int i = 0; i < s->nchecks; i++)
    if (strcmp(s->checks[i].name, name) == 0) return &s->checks[i];
  fail_msg("backend_equiv has no check %s", name);
  return NULL;
}

/* The scenario's `cpu` run, on the CPU or on a host backend, named `as`. */
static void run_as(const dlc_scenario *s, const dl_backend *b, const char *as, dlc_trace *t) {
  int i = dlc_scenario_find_run(s, "cpu");
  assert_true(i >= 0);
  char workdir[DL_TMP_PATH_MAX];
  assert_non_null(make_tmp_dir(workdir, sizeof workdir, "dlcheck-beq-XXXXXX"));
  dlc_run_options o = {.root = DL_SOURCE_DIR,
                       .scenario = s->name,
                       .workdir = workdir,
                       .backend_override = b};
  if (dlc_run(&s->runs[i], &o, t) != DL_OK) fail_msg("%s", dl_last_error());
  snprintf(t->run, sizeof t->run, "%s", as);
  rmdir(workdir);
}

static dlc_verdict compare(const dlc_check_spec *check, const dlc_trace *a, const dlc_trace *b) {
  dlc_check_spec spec = *check;
  spec.expect_divergence = false; /* the raw verdict: within tolerance or not */
  snprintf(spec.a, sizeof spec.a, "%s", a->run);
  snprintf(spec.b, sizeof spec.b, "%s", b->run);
  dlc_trace pair[2] = {*a, *b};
  dlc_verdict v;
  assert_int_equal(dlc_check_equivalence(&spec, pair, 2, &v), DL_OK);
  printf("%-18s max rel %.3g, max abs %.3g: %s\n", b->run, v.max_rel, v.max_abs,
         dlc_verdict_name(v.kind));
  return v;
}

static void tolerances_separate_fp32_from_tf32(void **state) {
  (void)state;
  dlc_scenario *s = NULL;
  if (dlc_scenario_load(&s, DL_SOURCE_DIR "/scenarios/backend_equiv") != DL_OK)
    fail_msg("%s", dl_last_error());
  const dlc_check_spec *fp32 = find_check(s, "fp32_matches_cpu");
  host_backend order_hb, tf32_hb;
  dl_backend order = host_backend_table(&order_hb), tf32 = host_backend_table(&tf32_hb);
  tf32_hb.tf32 = true;
  dlc_trace cpu, reordered, tensor_cores;
  run_as(s, NULL, "cpu", &cpu);
  run_as(s, &order, "fp32_other_order", &reordered);
  run_as(s, &tf32, "tf32", &tensor_cores);
  /* The host backends did the work: each GEMM/convolution went there. */
  assert_true(order_hb.sgemm_calls > 0 && order_hb.fwd_calls > 0 && order_hb.filter_calls > 0);
  dlc_verdict v = compare(fp32, &cpu, &reordered);
  assert_int_equal(v.kind, DLC_PASS);
  assert_true(v.max_abs > 0); /* another order really changed bits */
  v = compare(fp32, &cpu, &tensor_cores);
  assert_int_equal(v.kind, DLC_FAIL);
  dlc_trace_free(&cpu);
  dlc_trace_free(&reordered);
  dlc_trace_free(&tensor_cores);
  dlc_scenario_free(s);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(tolerances_separate_fp32_from_tf32),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
