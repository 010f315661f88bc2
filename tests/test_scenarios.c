/* Every scenario under scenarios/, with every pitfall variant: the correct
 * pipeline passes all its checks and matches its CPU golden bitwise, every
 * variant is caught by the check it names, and every catalogue ID that the
 * CPU backend can reproduce (G, A, D, M, C, F, N1-N3) is caught by some
 * variant. A new catalogue entry without a caught variant fails here.
 * backend_equiv needs a GPU: without one it must be a SKIP that says why. */
#define _POSIX_C_SOURCE 200809L /* mkdtemp */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "judge/catalogue.h"
#include "run/execute.h"
#include "tmpdir.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *const scenario_names[] = {"grad_accum",        "amp_fp32",       "ddp_equiv",
                                             "train_eval",        "ckpt_roundtrip", "frozen_params",
                                             "nan_guard",         "determinism",    "backend_equiv",
                                             "torch_conformance", "gpt_text",       "gpt_accum",
                                             "gpt_amp",           "gpt_ddp",        "gpt_ckpt"};
enum { NSCENARIOS = sizeof scenario_names / sizeof *scenario_names };

static bool caught_ids[128];

static void mark_caught(const char *id) {
  for (int k = 0; k < dlc_catalogue_count(); k++)
    if (strcmp(dlc_catalogue_at(k)->id, id) == 0) caught_ids[k] = true;
}

static void run_one(const char *name) {
  char dir[1024], work[DL_TMP_PATH_MAX];
  snprintf(dir, sizeof dir, "%s/scenarios/%s", DL_SOURCE_DIR, name);
  assert_non_null(make_tmp_dir(work, sizeof work, "dlcheck-test-XXXXXX"));
  dlc_scenario *s;
  if (dlc_scenario_load(&s, dir)) fail_msg("%s", dl_last_error());
  dlc_exec_options o = {.root = DL_SOURCE_DIR, .backend = "cpu", .workdir = work, .pitfalls = true};
  dlc_scenario_result r;
  if (dlc_scenario_execute(s, &o, &r)) fail_msg("%s: %s", name, dl_last_error());
  if (r.skipped[0]) { /* backend_equiv without a GPU: nothing ran, and it says why */
    assert_int_equal(r.nchecks + r.npitfalls + r.ntraces, 0);
    assert_true(dlc_result_ok(&r));
    print_message("%-15s skipped: %s\n", name, r.skipped);
    dlc_result_free(&r);
    dlc_scenario_free(s);
    rmdir(work);
    return;
  }
  for (int i = 0; i < r.nchecks; i++)
    if (r.checks[i].kind != DLC_PASS && r.checks[i].kind != DLC_EXPECTED_DIVERGENCE)
      fail_msg("%s: check %s: %s: %s", name, r.checks[i].check, dlc_verdict_name(r.checks[i].kind),
               r.checks[i].evidence);
  if (!r.golden_present || r.golden.kind != DLC_PASS)
    fail_msg("%s: golden: %s", name, r.golden.evidence);
  assert_int_equal(r.npitfalls, s->nvariants);
  for (int i = 0; i < r.npitfalls; i++) {
    if (!r.pitfalls[i].caught)
      fail_msg("%s: pitfall %s missed: %s", name, r.pitfalls[i].variant,
               r.pitfalls[i].verdict.evidence);
    mark_caught(r.pitfalls[i].pitfall);
  }
  print_message("%-15s %d checks pass, golden matches, %d pitfalls caught (%.2f s)\n", name,
                r.nchecks, r.npitfalls, r.seconds);
  dlc_result_free(&r);
  dlc_scenario_free(s);
  rmdir(work);
}

static void every_scenario_passes_and_catches_its_pitfalls(void **state) {
  (void)state;
  for (int i = 0; i < NSCENARIOS; i++) run_one(scenario_names[i]);
}

/* The scenarios directory holds exactly the scenarios listed above, so a
 * new one cannot be forgotten here. */
static void scenario_list_is_complete(void **state) {
  (void)state;
  char dir[1024];
  snprintf(dir, sizeof dir, "%s/scenarios", DL_SOURCE_DIR);
  DIR *d = opendir(dir);
  assert_non_null(d);
  int found = 0;
  for (struct dirent *e; (e = readdir(d));) {
    if (e->d_name[0] == '.' || strchr(e->d_name, '.')) continue;
    bool listed = false;
    for (int i = 0; i < NSCENARIOS; i++) listed |= strcmp(scenario_names[i], e->d_name) == 0;
    if (!listed) fail_msg("scenario %s is not listed in tests/test_scenarios.c", e->d_name);
    found++;
  }
  closedir(d);
  assert_int_equal(found, NSCENARIOS);
}

static void every_cpu_pitfall_is_caught(void **state) {
  (void)state;
  int missing = 0;
  for (int k = 0; k < dlc_catalogue_count(); k++) {
    const dlc_pitfall_entry *p = dlc_catalogue_at(k);
    if (p->reach != DLC_REACH_CPU || caught_ids[k]) continue;
    print_error("catalogue ID %s (%s) has no caught variant\n", p->id, p->mistake);
    missing++;
  }
  assert_int_equal(missing, 0);
}

/* C7's fixed twin: ckpt_roundtrip's variant puts a warm-up schedule on
 * both runs and loses the scheduler's count on resume; with the count
 * saved, as the scenario's default, the same schedule resumes bitwise
 * (the check, not the golden: the golden has no schedule). */
static dlc_verdict_kind resume_with_schedule(bool scheduler_saved) {
  char dir[1024], work[DL_TMP_PATH_MAX];
  snprintf(dir, sizeof dir, "%s/scenarios/ckpt_roundtrip", DL_SOURCE_DIR);
  assert_non_null(make_tmp_dir(work, sizeof work, "dlcheck-test-XXXXXX"));
  dlc_scenario *s;
  if (dlc_scenario_load(&s, dir)) fail_msg("%s", dl_last_error());
  for (int i = 0; i < s->nruns; i++) {
    s->runs[i].schedule.kind = DL_SCHEDULE_COSINE;
    s->runs[i].schedule.warmup_steps = 4;
    s->runs[i].schedule.total_steps = 16;
    s->runs[i].checkpoint.scheduler = scheduler_saved;
  }
  dlc_exec_options o = {.root = DL_SOURCE_DIR, .backend = "cpu", .workdir = work};
  dlc_scenario_result r;
  if (dlc_scenario_execute(s, &o, &r)) fail_msg("%s", dl_last_error());
  dlc_verdict_kind kind = DLC_ERROR;
  for (int i = 0; i < r.nchecks; i++)
    if (strcmp(r.checks[i].check, "resume_is_exact") == 0) kind = r.checks[i].kind;
  dlc_result_free(&r);
  dlc_scenario_free(s);
  rmdir(work);
  return kind;
}

static void a_saved_scheduler_resumes_exactly(void **state) {
  (void)state;
  assert_int_equal(resume_with_schedule(true), DLC_PASS);
  assert_int_equal(resume_with_schedule(false), DLC_FAIL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(scenario_list_is_complete),
      cmocka_unit_test(every_scenario_passes_and_catches_its_pitfalls),
      cmocka_unit_test(every_cpu_pitfall_is_caught),
      cmocka_unit_test(a_saved_scheduler_resumes_exactly),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
