/* The first divergent layer (locate.h) on backend_equiv's CPU run, a CNN
 * of layers 0 conv2d, 1 batchnorm2d, 2 relu, 3 maxpool2d, 4 conv2d,
 * 5 relu, 6 flatten, 7 linear, trained 12 steps. Two runs that differ in
 * one place only, compared bitwise (the engine is deterministic, so any
 * difference is the injected one):
 *   - the classifier (layer 7) sums its forward GEMM in reverse k order:
 *     named "7 (linear)", forward, at step 0;
 *   - layer 4's weights nudged by 1e-3 after optimizer step 5: the bits
 *     part after step 5 with no layer differing there, and layer 4 is the
 *     first whose forward output differs, at step 6.
 * Each as engine runs (trained again with statistics at the step the
 * digests name) and as two recorded traces with statistics at every step
 * (stats_every: 1, as the PyTorch recorder writes them), read from files. */
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
#include "inject_backend.h"
#include "run/locate.h"
#include "scenario/scenario.h"
#include "store/trace_io.h"
#include "tmpdir.h"

static dlc_scenario *scn;

static int setup(void **state) {
  (void)state;
  if (dlc_scenario_load(&scn, DL_SOURCE_DIR "/scenarios/backend_equiv") != DL_OK)
    fail_msg("%s", dl_last_error());
  return 0;
}

static int teardown(void **state) {
  (void)state;
  dlc_scenario_free(scn);
  return 0;
}

typedef struct pair {
  dlc_run_config ca, cb;
  inject plain, changed;
  dl_backend ba, bb;
  dlc_run_options oa, ob;
  char workdir[DL_TMP_PATH_MAX];
} pair;

static void make_pair(pair *p, inject changed, int64_t stats_every) {
  int i = dlc_scenario_find_run(scn, "cpu");
  assert_true(i >= 0);
  memset(p, 0, sizeof *p);
  p->ca = p->cb = scn->runs[i];
  p->ca.stats_every = p->cb.stats_every = stats_every;
  snprintf(p->cb.name, sizeof p->cb.name, "changed");
  p->changed = changed;
  p->ba = inject_table(&p->plain);
  p->bb = inject_table(&p->changed);
  assert_non_null(make_tmp_dir(p->workdir, sizeof p->workdir, "dlcheck-loc-XXXXXX"));
  p->oa = (dlc_run_options){.root = DL_SOURCE_DIR,
                            .scenario = scn->name,
                            .workdir = p->workdir,
                            .backend_override = &p->ba};
  p->ob = p->oa;
  p->ob.backend_override = &p->bb;
}

static void train(const dlc_run_config *c, const dlc_run_options *o, dlc_trace *t) {
  if (dlc_run(c, o, t) != DL_OK) fail_msg("%s", dl_last_error());
}

/* Bitwise equivalence of the two runs; the verdict of the comparison. */
static dlc_verdict compare(const dlc_trace *a, const dlc_trace *b) {
  dlc_check_spec spec = {.name = "same",
                         .kind = "equivalence",
                         .nquantities = 2,
                         .quantities = {"loss", "params"},
                         .tol = dlc_tolerance_bitwise()};
  snprintf(spec.a, sizeof spec.a, "%s", a->run);
  snprintf(spec.b, sizeof spec.b, "%s", b->run);
  dlc_trace pair[2] = {*a, *b};
  dlc_verdict v;
  dlc_verdict_init(&v, "same", "", "");
  assert_int_equal(dlc_check_equivalence(&spec, pair, 2, &v), DL_OK);
  assert_int_equal(v.kind, DLC_FAIL);
  return v;
}

/* The verdict names the layer, the direction and the step. */
static void expect_layer(const dlc_verdict *v, const char *layer, int64_t at) {
  char want[128];
  snprintf(want, sizeof want, "First divergent layer: %s (forward) at step %lld", layer,
           (long long)at);
  printf("  %s\n", strstr(v->evidence, "First divergent") ? strstr(v->evidence, "First divergent")
                                                          : v->evidence);
  assert_string_equal(v->layer, layer);
  assert_non_null(strstr(v->evidence, want));
}

/* Engine runs: the full runs record no statistics at the step (only the
 * first and last), so both are trained again with them. */
static void engine_case(inject changed, int64_t step, const char *layer, int64_t at) {
  pair p;
  make_pair(&p, changed, 0);
  dlc_trace a, b;
  train(&p.ca, &p.oa, &a);
  train(&p.cb, &p.ob, &b);
  dlc_verdict v = compare(&a, &b);
  assert_int_equal(dlc_first_digest_step(&a, &b, NULL), step);
  if (step > 0) assert_string_equal(v.layer, ""); /* the runs alone cannot tell */
  p.plain.optim_calls = p.changed.optim_calls = 0;
  v.layer[0] = '\0';
  dlc_tolerance exact = dlc_tolerance_bitwise();
  assert_int_equal(dlc_locate_layer(&exact, &p.ca, &p.oa, &p.cb, &p.ob, step, &v), DL_OK);
  expect_layer(&v, layer, at);
  dlc_trace_free(&a);
  dlc_trace_free(&b);
  rmdir(p.workdir);
}

/* Recorded traces with statistics at every step, through files. */
static void trace_case(inject changed, const char *layer, int64_t at) {
  pair p;
  make_pair(&p, changed, 1);
  dlc_trace t[2], back[2];
  train(&p.ca, &p.oa, &t[0]);
  train(&p.cb, &p.ob, &t[1]);
  for (int i = 0; i < 2; i++) {
    char path[DL_TMP_PATH_MAX + 16];
    snprintf(path, sizeof path, "%s/%d.h5", p.workdir, i);
    assert_int_equal(dlc_trace_save(path, &t[i], NULL), DL_OK);
    assert_int_equal(dlc_trace_load(path, &back[i], NULL), DL_OK);
    unlink(path);
    dlc_trace_free(&t[i]);
  }
  dlc_verdict v = compare(&back[0], &back[1]);
  expect_layer(&v, layer, at);
  dlc_trace_free(&back[0]);
  dlc_trace_free(&back[1]);
  rmdir(p.workdir);
}

/* A golden (the plain run, statistics at every step as dlcheck record
 * keeps them, through the file) and the changed run trained again against
 * it: what a failed golden comparison does (exec_golden.c). */
static void golden_case(inject changed, int64_t step, const char *layer, int64_t at) {
  pair p;
  make_pair(&p, changed, 0);
  dlc_trace golden, saved, run;
  dlc_run_options every = p.oa;
  every.stats_from = 0;
  every.stats_to = INT64_MAX;
  train(&p.ca, &every, &saved);
  char path[DL_TMP_PATH_MAX + 16];
  snprintf(path, sizeof path, "%s/golden.h5", p.workdir);
  assert_int_equal(dlc_trace_save(path, &saved, NULL), DL_OK);
  assert_int_equal(dlc_trace_load(path, &golden, NULL), DL_OK);
  unlink(path);
  assert_int_equal(golden.nstats, saved.nstats);
  snprintf(golden.run, sizeof golden.run, "golden");
  train(&p.cb, &p.ob, &run);
  assert_int_equal(dlc_first_digest_step(&run, &golden, NULL), step);
  p.changed.optim_calls = 0;
  dlc_verdict v;
  dlc_verdict_init(&v, "golden", "", "");
  dlc_tolerance exact = dlc_tolerance_bitwise();
  assert_int_equal(dlc_locate_layer_against(&exact, &p.cb, &p.ob, &golden, step, &v), DL_OK);
  expect_layer(&v, layer, at);
  assert_non_null(strstr(v.evidence, "(golden) vs"));
  /* A golden without statistics there (recorded before they were kept; the
   * full run has them at its first and last steps only): says so, and
   * names nothing. */
  dlc_verdict_init(&v, "golden", "", "");
  if (step == 0) step = 1;
  assert_int_equal(dlc_locate_layer_against(&exact, &p.cb, &p.ob, &run, step, &v), DL_OK);
  assert_string_equal(v.layer, "");
  assert_non_null(strstr(v.evidence, "cannot be named"));
  dlc_trace_free(&saved);
  dlc_trace_free(&golden);
  dlc_trace_free(&run);
  rmdir(p.workdir);
}

static void reordered_layer_golden(void **state) {
  (void)state;
  golden_case((inject){.reverse_classifier = true}, 0, "7 (linear)", 0);
}
static void nudged_weights_golden(void **state) {
  (void)state;
  golden_case((inject){.nudge = true}, 5, "4 (conv2d)", 6);
}

static void reordered_layer_engine(void **state) {
  (void)state;
  engine_case((inject){.reverse_classifier = true}, 0, "7 (linear)", 0);
}
static void reordered_layer_traces(void **state) {
  (void)state;
  trace_case((inject){.reverse_classifier = true}, "7 (linear)", 0);
}
static void nudged_weights_engine(void **state) {
  (void)state;
  engine_case((inject){.nudge = true}, 5, "4 (conv2d)", 6);
}
static void nudged_weights_traces(void **state) {
  (void)state;
  trace_case((inject){.nudge = true}, "4 (conv2d)", 6);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(reordered_layer_engine), cmocka_unit_test(reordered_layer_traces),
      cmocka_unit_test(nudged_weights_engine),  cmocka_unit_test(nudged_weights_traces),
      cmocka_unit_test(reordered_layer_golden), cmocka_unit_test(nudged_weights_golden),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
