#define _POSIX_C_SOURCE 200809L /* open_memstream, clock_gettime */
#include "execute.h"

#include "check.h"
#include "checks_impl.h"
#include "env.h"
#include "runner.h"
#include "trace_io.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

static double now_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef struct progress_ctx {
  const dlc_exec_options *o;
  const char *scenario;
  char what[DLC_NAME_MAX + 16];
} progress_ctx;

static void on_step(void *user, const char *run, int64_t step, int64_t steps) {
  (void)run;
  progress_ctx *p = user;
  if (p->o->progress) p->o->progress(p->o->user, p->scenario, p->what, step, steps);
}

static dl_status run_all(const dlc_scenario *s, const dlc_run_config *runs,
                         const dlc_exec_options *o, const char *label, dlc_trace *traces,
                         const dlc_trace *reuse) {
  progress_ctx p = {.o = o, .scenario = s->name};
  dlc_run_options ro = {.root = o->root, .scenario = s->name, .workdir = o->workdir,
                        .progress = on_step, .user = &p};
  for (int i = 0; i < s->nruns; i++) {
    /* A variant's run that its overrides left untouched is the correct
     * pipeline's run: its trace is reused, not recomputed. */
    if (reuse && memcmp(&runs[i], &s->runs[i], sizeof runs[i]) == 0) {
      dlc_trace_init(&traces[i], s->name, runs[i].name);
      DL_TRY(dlc_trace_copy(&traces[i], &reuse[i]));
      continue;
    }
    snprintf(p.what, sizeof p.what, "%s%s", label, runs[i].name);
    DL_TRY(dlc_run(&runs[i], &ro, &traces[i]));
    snprintf(traces[i].backend, sizeof traces[i].backend, "%s", o->backend);
    traces[i].scenario_hash = s->hash;
  }
  return DL_OK;
}

dl_status dlc_evaluate_checks(const dlc_scenario *s, const dlc_trace *traces, int ntraces,
                              const char *variant, const char *pitfall, dlc_verdict *out) {
  for (int i = 0; i < s->nchecks; i++) {
    const dlc_check_spec *spec = &s->checks[i];
    dlc_verdict *v = &out[i];
    dlc_verdict_init(v, spec->name, variant, pitfall);
    const dlc_check_kind *kind = dlc_check_kind_find(spec->kind);
    dl_status st = kind ? kind->fn(spec, traces, ntraces, v)
                        : dl_fail(DL_ERR_INVALID, "unknown check kind '%s'", spec->kind);
    if (st) {
      v->kind = DLC_ERROR;
      snprintf(v->evidence, sizeof v->evidence, "the check could not run: %s", dl_last_error());
    }
  }
  return DL_OK;
}

static void golden_path(const dlc_scenario *s, const dlc_exec_options *o, char *buf, size_t len) {
  if (o->golden_dir) snprintf(buf, len, "%s/%s/%s.h5", o->golden_dir, s->name, o->backend);
  else snprintf(buf, len, "%s/golden/%s/%s.h5", o->root, s->name, o->backend);
}

/* Portability report: which environment keys changed since the golden. */
static void describe_env_change(const char *golden_env, dlc_verdict *v) {
  char now[DLC_ENV_JSON_MAX];
  dlc_env e;
  dlc_env_fingerprint(&e);
  if (!golden_env[0] || dlc_env_to_json(&e, now, sizeof now)) return;
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  if (!f) return;
  int ndiff = 0;
  dl_status st = dlc_env_diff(golden_env, now, f, &ndiff);
  fclose(f);
  if (!st && ndiff > 0) dlc_evidence(v, " Environment changes since the golden: %s", text);
  else if (!st) dlc_evidence(v, " The environment is the same as when the golden was recorded.");
  free(text);
}

/* The reference run against the golden: bitwise on the CPU backend (the
 * engine promises it), else the tolerance recorded in the golden. */
static dl_status compare_golden(const dlc_scenario *s, const dlc_exec_options *o,
                                dlc_scenario_result *r) {
  char path[2 * DLC_PATH_MAX];
  golden_path(s, o, path, sizeof path);
  dlc_verdict_init(&r->golden, "golden", "", "");
  r->golden_trace = calloc(1, sizeof *r->golden_trace);
  if (!r->golden_trace) return dl_fail(DL_ERR_NOMEM, "out of memory for the golden trace");
  dlc_golden_meta meta;
  dl_status st = dlc_trace_load(path, r->golden_trace, &meta);
  if (st == DL_ERR_IO) {
    free(r->golden_trace);
    r->golden_trace = NULL;
    r->golden.kind = DLC_ERROR;
    snprintf(r->golden.evidence, sizeof r->golden.evidence,
             "no golden file %s: record one with `dlcheck record %s`", path, s->dir);
    return DL_OK;
  }
  if (st) {
    r->golden.kind = DLC_ERROR;
    snprintf(r->golden.evidence, sizeof r->golden.evidence, "%s", dl_last_error());
    return DL_OK;
  }
  r->golden_present = true;
  snprintf(r->golden_trace->run, sizeof r->golden_trace->run, "golden");
  dlc_check_spec spec = {.name = "golden", .kind = "equivalence", .b = "golden",
                         .nquantities = 4,
                         .quantities = {"loss", "grad_norm", "params", "buffers"}};
  snprintf(spec.a, sizeof spec.a, "%s", r->traces[0].run);
  spec.tol = dlc_tolerance_bitwise();
  const char *rule = dlc_golden_meta_tol(&meta, "params");
  if (strcmp(o->backend, "cpu") != 0 && rule && dlc_tolerance_parse(rule, &spec.tol))
    spec.tol = dlc_tolerance_default(DL_F32);
  dlc_trace pair[2] = {r->traces[0], *r->golden_trace};
  st = dlc_check_equivalence(&spec, pair, 2, &r->golden);
  if (st) {
    r->golden.kind = DLC_ERROR;
    snprintf(r->golden.evidence, sizeof r->golden.evidence, "%s", dl_last_error());
  }
  if (r->golden.kind != DLC_PASS) describe_env_change(meta.env_json, &r->golden);
  return DL_OK;
}

static dl_status run_variant(const dlc_scenario *s, const dlc_variant *var,
                             const dlc_exec_options *o, const dlc_trace *base,
                             dlc_pitfall_outcome *out) {
  dlc_trace traces[DLC_MAX_RUNS];
  memset(traces, 0, sizeof traces);
  snprintf(out->variant, sizeof out->variant, "%s", var->name);
  snprintf(out->pitfall, sizeof out->pitfall, "%s", var->pitfall);
  snprintf(out->description, sizeof out->description, "%s", var->description);
  char label[DLC_NAME_MAX + 16];
  snprintf(label, sizeof label, "%s: ", var->name);
  dl_status st = run_all(s, var->runs, o, label, traces, base);
  dlc_verdict *all = calloc((size_t)s->nchecks, sizeof *all);
  if (!st && !all) st = dl_fail(DL_ERR_NOMEM, "out of memory for verdicts");
  if (!st) st = dlc_evaluate_checks(s, traces, s->nruns, var->name, var->pitfall, all);
  for (int i = 0; i < s->nruns; i++) dlc_trace_free(&traces[i]);
  if (st) {
    free(all);
    return dl_fail_context(st, "variant %s: ", var->name);
  }
  for (int i = 0; i < s->nchecks; i++)
    if (strcmp(s->checks[i].name, var->caught_by) == 0) out->verdict = all[i];
  /* Caught: its check failed, or reported the divergence it expects (G5). */
  out->caught = out->verdict.kind == DLC_FAIL || out->verdict.kind == DLC_EXPECTED_DIVERGENCE;
  out->others = all;
  out->nothers = s->nchecks;
  return DL_OK;
}

dl_status dlc_scenario_execute(const dlc_scenario *s, const dlc_exec_options *o,
                               dlc_scenario_result *r) {
  double t0 = now_seconds();
  memset(r, 0, sizeof *r);
  snprintf(r->scenario, sizeof r->scenario, "%s", s->name);
  snprintf(r->description, sizeof r->description, "%s", s->description);
  snprintf(r->backend, sizeof r->backend, "%s", o->backend);
  r->traces = calloc((size_t)s->nruns, sizeof *r->traces);
  r->checks = calloc((size_t)s->nchecks + 1, sizeof *r->checks);
  r->pitfalls = calloc((size_t)s->nvariants + 1, sizeof *r->pitfalls);
  if (!r->traces || !r->checks || !r->pitfalls)
    return dl_fail(DL_ERR_NOMEM, "out of memory for results");
  r->ntraces = s->nruns;
  DL_TRY(run_all(s, s->runs, o, "", r->traces, NULL));
  r->nchecks = s->nchecks;
  DL_TRY(dlc_evaluate_checks(s, r->traces, r->ntraces, "", "", r->checks));
  DL_TRY(compare_golden(s, o, r));
  for (int i = 0; o->pitfalls && i < s->nvariants; i++) {
    DL_TRY(run_variant(s, &s->variants[i], o, r->traces, &r->pitfalls[i]));
    r->npitfalls++;
  }
  r->seconds = now_seconds() - t0;
  return DL_OK;
}

static dl_status make_dirs(const char *path) {
  char buf[2 * DLC_PATH_MAX];
  snprintf(buf, sizeof buf, "%s", path);
  for (char *p = buf + 1; *p; p++) {
    if (*p != '/') continue;
    *p = '\0';
    if (mkdir(buf, 0777) != 0 && errno != EEXIST)
      return dl_fail(DL_ERR_IO, "%s: cannot create directory: %s", buf, strerror(errno));
    *p = '/';
  }
  return DL_OK;
}

dl_status dlc_scenario_record(const dlc_scenario *s, const dlc_exec_options *o, char *written,
                              size_t len) {
  dlc_trace traces[DLC_MAX_RUNS];
  memset(traces, 0, sizeof traces);
  dl_status st = run_all(s, s->runs, o, "", traces, NULL);
  char path[2 * DLC_PATH_MAX];
  golden_path(s, o, path, sizeof path);
  dlc_golden_meta meta;
  bool cpu = strcmp(o->backend, "cpu") == 0;
  if (!st) st = dlc_golden_meta_init(&meta);
  if (!st) {
    dlc_env e;
    dlc_env_fingerprint(&e);
    st = dlc_env_to_json(&e, meta.env_json, sizeof meta.env_json);
  }
  /* The CPU engine promises the same bits everywhere; other backends get
   * float32's default closeness. */
  const char *quantities[] = {"loss", "grad_norm", "params", "buffers"};
  for (int i = 0; !st && i < 4; i++)
    st = dlc_golden_meta_set_tol(&meta, quantities[i], cpu ? "bitwise" : "close(1.3e-6, 1e-5)");
  if (!st) st = make_dirs(path);
  if (!st) st = dlc_trace_save(path, &traces[0], &meta);
  for (int i = 0; i < s->nruns; i++) dlc_trace_free(&traces[i]);
  if (!st && written) snprintf(written, len, "%s", path);
  return st;
}
