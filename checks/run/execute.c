#define _POSIX_C_SOURCE 200809L /* clock_gettime */
/* Executing a scenario: the pipeline's runs and checks, the golden, then each
 * pitfall variant; and reloading a saved run. See execute.h. */
#include "run/exec_internal.h"

#include "store/path.h"
#include "store/trace_io.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* A scenario with a run on a device this machine lacks (backend_equiv
 * without a GPU) is skipped, saying why, rather than failed. */
static bool devices_missing(const dlc_scenario *s, const dlc_exec_options *o, char *reason,
                            size_t len) {
  for (int i = 0; i < s->nruns; i++)
    if (!s->runs[i].trace[0] &&
        !dlc_device_available(dlc_run_device(&s->runs[i], dlc_exec_device(o)), reason, len))
      return true;
  return false;
}

/* MPI fault tests (tests/cli/test_mpi.sh): DLCHECK_FAILPOINT=kill_rank_1
 * kills rank 1 as its first run starts, so that the other ranks' next
 * collective fails. Nothing else reads the variable. */
static void kill_rank_failpoint(const dlc_exec_options *o) {
  const char *armed = getenv("DLCHECK_FAILPOINT");
  if (armed && o->comm && strcmp(armed, "kill_rank_1") == 0 && dl_comm_rank(o->comm) == 1)
    raise(SIGKILL);
}

static dl_status train_traces(dlc_trace_source *src, int variant, dlc_trace *out) {
  kill_rank_failpoint(src->o);
  const dlc_scenario *s = src->s;
  const dlc_variant *v = variant < 0 ? NULL : &s->variants[variant];
  char label[DLC_NAME_MAX + 16] = "";
  if (v) snprintf(label, sizeof label, "%s: ", v->name);
  DL_TRY(dlc_exec_run_all(s, v ? v->runs : s->runs, src->o, label, out, v ? src->pipeline : NULL));
  return dlc_exec_save_traces(src, variant, out);
}

static dl_status read_traces(dlc_trace_source *src, int variant, dlc_trace *out) {
  for (int i = 0; i < src->s->nruns; i++) {
    char path[3 * DLC_PATH_MAX];
    DL_TRY(dlc_exec_trace_file(src, variant, src->s->runs[i].name, path, sizeof path));
    DL_TRY(dlc_trace_load(path, &out[i], NULL));
  }
  return DL_OK;
}

void dlc_exec_free_traces(dlc_trace *t, int n) {
  for (int i = 0; i < n; i++) dlc_trace_free(&t[i]);
}

static dl_status assess_variant(dlc_trace_source *src, int variant, dlc_pitfall_outcome *out) {
  const dlc_scenario *s = src->s;
  const dlc_variant *var = &s->variants[variant];
  dlc_trace traces[DLC_MAX_RUNS];
  memset(traces, 0, sizeof traces);
  snprintf(out->variant, sizeof out->variant, "%s", var->name);
  snprintf(out->pitfall, sizeof out->pitfall, "%s", var->pitfall);
  snprintf(out->description, sizeof out->description, "%s", var->description);
  dl_status st = src->get(src, variant, traces);
  dlc_verdict *all = calloc((size_t)s->nchecks, sizeof *all);
  if (!st && !all) st = dl_fail(DL_ERR_NOMEM, "out of memory for verdicts");
  if (!st) st = dlc_evaluate_checks(s, traces, s->nruns, var->name, var->pitfall, all);
  dlc_exec_free_traces(traces, s->nruns);
  if (st) {
    free(all);
    return dl_fail_context(st, "variant %s: ", var->name);
  }
  for (int i = 0; i < s->nchecks; i++)
    if (strcmp(s->checks[i].name, var->caught_by) == 0) out->verdict = all[i];
  /* Caught: its check failed (a waiver accepts it, but it failed), or
   * reported the divergence it expects (G5). */
  out->caught = out->verdict.kind == DLC_FAIL || out->verdict.kind == DLC_WAIVED ||
                out->verdict.kind == DLC_EXPECTED_DIVERGENCE;
  out->others = all;
  out->nothers = s->nchecks;
  return DL_OK;
}

static dl_status result_alloc(const dlc_scenario *s, const char *backend, dlc_scenario_result *r) {
  memset(r, 0, sizeof *r);
  snprintf(r->scenario, sizeof r->scenario, "%s", s->name);
  snprintf(r->description, sizeof r->description, "%s", s->description);
  snprintf(r->backend, sizeof r->backend, "%s", backend);
  r->traces = calloc((size_t)s->nruns + 1, sizeof *r->traces);
  r->checks = calloc((size_t)s->nchecks + 1, sizeof *r->checks);
  r->pitfalls = calloc((size_t)s->nvariants + 1, sizeof *r->pitfalls);
  if (!r->traces || !r->checks || !r->pitfalls)
    return dl_fail(DL_ERR_NOMEM, "out of memory for results");
  r->ntraces = s->nruns;
  r->nchecks = 0; /* counted once evaluated: a failed run has no verdicts */
  return DL_OK;
}

void dlc_result_set_error(dlc_scenario_result *r, const char *scenario, const char *message) {
  if (!r->scenario[0] && scenario) snprintf(r->scenario, sizeof r->scenario, "%s", scenario);
  if (!r->golden.check[0]) {
    dlc_verdict_init(&r->golden, "golden", "", "");
    r->golden.kind = DLC_ERROR;
    snprintf(r->golden.evidence, sizeof r->golden.evidence,
             "not compared: the scenario stopped with an error");
  }
  /* The golden's own failure is on its line already. */
  if (r->golden_present && r->golden.kind == DLC_ERROR && strcmp(r->golden.evidence, message) == 0)
    return;
  /* result_alloc leaves room for one verdict after the checks; a second
   * error replaces the first. */
  if (r->nchecks > 0 && r->checks[r->nchecks - 1].kind == DLC_ERROR &&
      strcmp(r->checks[r->nchecks - 1].check, "error") == 0)
    r->nchecks--;
  if (!r->checks) r->checks = calloc(1, sizeof *r->checks);
  if (!r->checks) { /* out of memory: the golden line carries it */
    r->golden_present = true;
    r->golden.kind = DLC_ERROR;
    snprintf(r->golden.evidence, sizeof r->golden.evidence, "%s", message);
    return;
  }
  dlc_verdict *v = &r->checks[r->nchecks++];
  dlc_verdict_init(v, "error", "", "");
  v->kind = DLC_ERROR;
  snprintf(v->evidence, sizeof v->evidence, "%s", message);
}

/* A scenario without runs (every check not_tested) has no reference for a
 * golden: reported as skipped, saying why. */
static dl_status no_reference(const dlc_scenario *s, dlc_scenario_result *r) {
  dlc_verdict_init(&r->golden, "golden", "", "");
  r->golden.kind = DLC_ERROR;
  snprintf(r->golden.evidence, sizeof r->golden.evidence,
           "%s has no run, so nothing to compare with a golden", s->name);
  return DL_OK;
}

/* Checks on the pipeline's traces, the golden, then each variant. */
static dl_status assess(dlc_trace_source *src, const char *golden, bool pitfalls,
                        dlc_scenario_result *r) {
  const dlc_scenario *s = src->s;
  dl_status st = src->get(src, -1, r->traces);
  if (st) { /* no half-filled runs in the reports */
    dlc_exec_free_traces(r->traces, r->ntraces);
    r->ntraces = 0;
    return st;
  }
  src->pipeline = r->traces;
  DL_TRY(dlc_evaluate_checks(s, r->traces, r->ntraces, "", "", r->checks));
  r->nchecks = s->nchecks;
  if (src->get == train_traces) DL_TRY(dlc_exec_locate_failures(s, src->o, r->traces, r->checks));
  if (!s->nruns) return no_reference(s, r);
  /* A golden that cannot be read is an error on its line; the variants are
   * still assessed, and the error returned at the end. */
  dl_status golden_st = dlc_exec_compare_golden(s, golden, r);
  if (golden_st && !r->golden_present) return golden_st;
  if (!golden_st && src->get == train_traces) DL_TRY(dlc_exec_locate_golden(s, src->o, r));
  for (int i = 0; pitfalls && i < s->nvariants; i++) {
    DL_TRY(assess_variant(src, i, &r->pitfalls[i]));
    r->npitfalls++;
  }
  return golden_st ? dl_fail(golden_st, "%s", r->golden.evidence) : DL_OK;
}

/* A scenario with a run on a device this machine lacks is skipped: every
 * report shows its golden line as SKIP with the reason. */
static bool skipped_here(const dlc_scenario *s, const dlc_exec_options *o, dlc_scenario_result *r) {
  if (!devices_missing(s, o, r->skipped, sizeof r->skipped)) {
    r->skipped[0] = '\0';
    return false;
  }
  r->ntraces = r->nchecks = 0;
  dlc_verdict_init(&r->golden, "golden", "", "");
  r->golden.kind = DLC_ERROR;
  snprintf(r->golden.evidence, sizeof r->golden.evidence, "scenario not run: %s", r->skipped);
  return true;
}

static dl_status execute(const dlc_scenario *s, const dlc_exec_options *o, dlc_scenario_result *r) {
  double t0 = now_seconds();
  char golden[2 * DLC_PATH_MAX], dir[2 * DLC_PATH_MAX];
  DL_TRY(result_alloc(s, o->backend, r));
  DL_TRY(dlc_exec_golden_path(s, o, golden, sizeof golden));
  dlc_trace_source src = {.get = train_traces, .s = s, .o = o};
  if (o->trace_dir) {
    DL_TRY(dlc_path(dir, sizeof dir, "%s/%s", o->trace_dir, s->name));
    src.dir = dir;
    if (dlc_exec_writes_files(o)) DL_TRY(dlc_exec_keep_inputs(s, o, dir, golden));
  }
  if (skipped_here(s, o, r)) {
    r->seconds = now_seconds() - t0;
    return DL_OK;
  }
  dl_status st = assess(&src, golden, o->pitfalls, r);
  r->seconds = now_seconds() - t0;
  return st;
}

/* A scenario that stops with an error keeps what it finished and says so
 * (dlc_result_set_error): no report counts it as passed. */
static dl_status stopped(const dlc_scenario *s, dlc_scenario_result *r, dl_status st) {
  if (st) dlc_result_set_error(r, s->name, dl_last_error());
  return st;
}

dl_status dlc_scenario_execute(const dlc_scenario *s, const dlc_exec_options *o,
                               dlc_scenario_result *r) {
  memset(r, 0, sizeof *r);
  return stopped(s, r, execute(s, o, r));
}

static dl_status reload(const dlc_scenario *s, const char *trace_dir, dlc_scenario_result *r) {
  char dir[2 * DLC_PATH_MAX], golden[3 * DLC_PATH_MAX], probe[3 * DLC_PATH_MAX];
  DL_TRY(dlc_path(dir, sizeof dir, "%s/%s", trace_dir, s->name));
  DL_TRY(dlc_path(golden, sizeof golden, "%s/golden.h5", dir));
  dlc_trace_source src = {.get = read_traces, .s = s, .dir = dir};
  DL_TRY(result_alloc(s, "cpu", r));
  /* A scenario the run skipped (no traces; a device missing here too) is
   * skipped again. */
  if (s->nruns) {
    DL_TRY(dlc_exec_trace_file(&src, -1, s->runs[0].name, probe, sizeof probe));
    dlc_exec_options here = {.backend = "cpu"};
    if (!dlc_exec_exists(probe) && skipped_here(s, &here, r)) return DL_OK;
  }
  /* Variants are reassessed when the run saved them. */
  bool pitfalls = false;
  if (s->nvariants) {
    DL_TRY(dlc_exec_trace_file(&src, 0, s->runs[0].name, probe, sizeof probe));
    pitfalls = dlc_exec_exists(probe);
  }
  return assess(&src, golden, pitfalls, r);
}

dl_status dlc_scenario_reload(const dlc_scenario *s, const char *trace_dir,
                              dlc_scenario_result *r) {
  memset(r, 0, sizeof *r);
  return stopped(s, r, reload(s, trace_dir, r));
}
