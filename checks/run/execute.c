#define _POSIX_C_SOURCE 200809L /* open_memstream, clock_gettime */
#include "run/execute.h"

#include "judge/check.h"
#include "judge/checks_impl.h"
#include "run/backend_open.h"
#include "judge/catalogue.h"
#include "store/env.h"
#include "run/locate.h"
#include "store/path.h"
#include "run/runner.h"
#include "store/trace_io.h"

#include "atomic_file.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static bool exists(const char *path) {
  struct stat sb;
  return stat(path, &sb) == 0;
}

/* The device of runs that name none: --backend. */
static dlc_device exec_device(const dlc_exec_options *o) {
  dlc_device d = DLC_DEVICE_CPU;
  if (o->backend && dlc_device_parse(o->backend, &d) != DL_OK) d = DLC_DEVICE_CPU;
  return d;
}

/* A scenario with a run on a device this machine lacks (backend_equiv
 * without a GPU) is skipped, saying why, rather than failed. */
static bool devices_missing(const dlc_scenario *s, const dlc_exec_options *o, char *reason,
                            size_t len) {
  for (int i = 0; i < s->nruns; i++)
    if (!s->runs[i].trace[0] &&
        !dlc_device_available(dlc_run_device(&s->runs[i], exec_device(o)), reason, len))
      return true;
  return false;
}

/* A run given as a recorded trace: the file read, named and hashed as the
 * engine's runs are, so that every check finds it, with the fingerprint of
 * where it computed (out->origin_env). */
static dl_status load_trace_run(const dlc_scenario *s, const dlc_run_config *c, const char *root,
                                dlc_trace *out) {
  char path[2 * DLC_PATH_MAX];
  dlc_golden_meta *meta = calloc(1, sizeof *meta); /* 14 KiB: off the stack */
  dl_status st = meta ? dlc_path_under(path, sizeof path, root, c->trace)
                      : dl_fail(DL_ERR_NOMEM, "out of memory for a trace's metadata");
  if (!st) st = dlc_trace_load(path, out, meta);
  if (!st && meta->env_json[0] && !(out->origin_env = strdup(meta->env_json))) {
    dlc_trace_free(out);
    st = dl_fail(DL_ERR_NOMEM, "out of memory for a trace's fingerprint");
  }
  free(meta);
  if (st)
    return dl_fail_context(st, "scenario %s, run %s (trace: %s): ", s->name, c->name, c->trace);
  snprintf(out->run, sizeof out->run, "%s", c->name);
  snprintf(out->scenario, sizeof out->scenario, "%s", s->name);
  out->scenario_hash = s->hash;
  return DL_OK;
}

/* Reports say where a run computed (the "backend" note): for a trace, the
 * file, then what the recorder said, if anything. */
static dl_status note_trace_origin(const dlc_run_config *c, dlc_trace *t) {
  const char *recorded = dlc_trace_note(t, "backend");
  char text[DLC_PATH_MAX + 1024];
  snprintf(text, sizeof text, "trace: %s%s%.1000s", c->trace, recorded ? "; " : "",
           recorded ? recorded : "");
  return dlc_trace_set_note(t, "backend", text);
}

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
  dlc_run_options ro = {.root = o->root,
                        .scenario = s->name,
                        .workdir = o->workdir,
                        .progress = on_step,
                        .user = &p,
                        .comm = o->comm,
                        .device = exec_device(o)};
  for (int i = 0; i < s->nruns; i++) {
    /* A variant's run that its overrides left untouched is the correct
     * pipeline's run: its trace is reused, not recomputed. */
    if (reuse && memcmp(&runs[i], &s->runs[i], sizeof runs[i]) == 0) {
      dlc_trace_init(&traces[i], s->name, runs[i].name);
      DL_TRY(dlc_trace_copy(&traces[i], &reuse[i]));
      continue;
    }
    if (runs[i].trace[0]) {
      DL_TRY(load_trace_run(s, &runs[i], o->root, &traces[i]));
      DL_TRY(note_trace_origin(&runs[i], &traces[i]));
      continue;
    }
    snprintf(p.what, sizeof p.what, "%.60s%.60s", label, runs[i].name); /* a progress label */
    DL_TRY(dlc_run(&runs[i], &ro, &traces[i]));
    traces[i].scenario_hash = s->hash;
  }
  return DL_OK;
}

/* A failed check with catalogue IDs says, for each, what the mistake is
 * and the line that fixes it: the report speaks to the team. Then its
 * waiver, if the scenario accepts its failure. */
static void name_findings(const dlc_check_spec *spec, dlc_verdict *v) {
  memcpy(v->catalogue, spec->catalogue, sizeof v->catalogue);
  v->ncatalogue = spec->ncatalogue;
  for (int i = 0; v->kind == DLC_FAIL && i < spec->ncatalogue; i++) {
    const dlc_pitfall_entry *p = dlc_catalogue_find(spec->catalogue[i]);
    if (p) dlc_evidence(v, " %s: %s. Fix: %s.", p->id, p->mistake, p->fix);
  }
  dlc_verdict_waive(v, spec->waived);
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
    name_findings(spec, v);
  }
  return DL_OK;
}

/* Named for the device the reference run computes on: --backend's, unless
 * the scenario pins that run to one (backend_equiv's reference is its CPU
 * run, so its golden is cpu.h5 under any --backend). */
static dl_status golden_path(const dlc_scenario *s, const dlc_exec_options *o, char *buf,
                             size_t len) {
  const char *device = s->nruns ? dlc_device_name(dlc_run_device(&s->runs[0], exec_device(o)))
                                : o->backend;
  if (o->golden_dir) return dlc_path(buf, len, "%s/%s/%s.h5", o->golden_dir, s->name, device);
  return dlc_path(buf, len, "%s/golden/%s/%s.h5", o->root, s->name, device);
}

/* This machine's fingerprint as a trace stores it. */
static dl_status env_here(char *json, size_t len) {
  dlc_env e;
  dlc_env_fingerprint(&e);
  return dlc_env_to_json(&e, json, len);
}

/* Portability report: which environment keys changed since the golden. */
static void describe_env_change(const char *golden_env, dlc_verdict *v) {
  char now[DLC_ENV_JSON_MAX];
  if (!golden_env[0] || env_here(now, sizeof now)) return;
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
static void drop_golden(dlc_scenario_result *r) {
  free(r->golden_trace);
  r->golden_trace = NULL;
  free(r->envelope);
  r->envelope = NULL;
}

/* The golden at path into r (*loaded). Only a golden that is not there is
 * "no golden"; one that cannot be read (damaged, a folder, unreadable) is
 * an error on the golden line, returned. */
static dl_status load_golden(const dlc_scenario *s, const char *path, dlc_scenario_result *r,
                             dlc_golden_meta *meta, bool *loaded) {
  *loaded = false;
  r->golden_trace = calloc(1, sizeof *r->golden_trace);
  r->envelope = calloc(1, sizeof *r->envelope);
  if (!r->golden_trace || !r->envelope) {
    drop_golden(r);
    return dl_fail(DL_ERR_NOMEM, "out of memory for the golden trace of %s", s->name);
  }
  struct stat sb;
  if (stat(path, &sb) != 0 && errno == ENOENT) {
    drop_golden(r);
    r->golden.kind = DLC_ERROR;
    snprintf(r->golden.evidence, sizeof r->golden.evidence,
             "no golden file %s: record one with `dlcheck record %s`", path, s->dir);
    return DL_OK;
  }
  r->golden_present = true;
  dl_status st = dlc_golden_load(path, r->golden_trace, meta, r->envelope);
  if (st) {
    drop_golden(r);
    st = dl_fail_context(st, "golden of %s: ", s->name);
    r->golden.kind = DLC_ERROR;
    snprintf(r->golden.evidence, sizeof r->golden.evidence, "%s", dl_last_error());
    return st;
  }
  snprintf(r->golden_trace->run, sizeof r->golden_trace->run, "golden");
  *loaded = true;
  return DL_OK;
}

/* A single golden: the equivalence check with the golden as reference (its
 * a), bitwise on the CPU, the golden's recorded rule on other backends. */
static void compare_single(const dlc_golden_meta *meta, dlc_scenario_result *r) {
  dlc_check_spec spec = {.name = "golden",
                         .kind = "equivalence",
                         .a = "golden",
                         .nquantities = 4,
                         .quantities = {"loss", "grad_norm", "params", "buffers"}};
  snprintf(spec.b, sizeof spec.b, "%s", r->traces[0].run);
  spec.tol = dlc_tolerance_bitwise();
  const char *rule = dlc_golden_meta_tol(meta, "params");
  if (strcmp(r->traces[0].backend, "cpu") != 0 && rule && dlc_tolerance_parse(rule, &spec.tol))
    spec.tol = dlc_tolerance_default(DL_F32);
  dlc_trace pair[2] = {r->traces[0], *r->golden_trace};
  if (dlc_check_equivalence(&spec, pair, 2, &r->golden)) {
    r->golden.kind = DLC_ERROR;
    snprintf(r->golden.evidence, sizeof r->golden.evidence, "%s", dl_last_error());
  }
}

static dl_status compare_golden(const dlc_scenario *s, const char *path, dlc_scenario_result *r) {
  dlc_verdict_init(&r->golden, "golden", "", "");
  static _Thread_local dlc_golden_meta meta; /* 14 KiB: off the stack */
  bool loaded;
  dl_status st = load_golden(s, path, r, &meta, &loaded);
  if (st || !loaded) return st;
  if (r->envelope->repeats == 0) { /* a single golden */
    free(r->envelope);
    r->envelope = NULL;
    compare_single(&meta, r);
  } else { /* a calibrated golden: the run must lie in the repeats' envelope */
    st = dlc_envelope_check(r->envelope, r->golden_trace, &r->traces[0], &r->golden);
  }
  if (!st && r->golden.kind != DLC_PASS) describe_env_change(meta.env_json, &r->golden);
  return st;
}

/* A copy of a regular file, written atomically (never through a link at
 * `to`). */
static dl_status copy_file(const char *from, const char *to) {
  FILE *in, *out = NULL;
  DL_TRY(dl_fopen_regular(from, NULL, &in));
  dl_atomic_file f;
  dl_status st = dl_atomic_open(&f, to);
  if (!st) st = dl_atomic_fdopen(&f, &out);
  char buf[65536];
  size_t n;
  bool ok = true;
  while (!st && (n = fread(buf, 1, sizeof buf, in)) > 0) ok &= fwrite(buf, 1, n, out) == n;
  ok &= !ferror(in);
  fclose(in);
  if (out) ok &= fclose(out) == 0;
  if (!st && !ok) st = dl_fail(DL_ERR_IO, "copying %s to %s failed: %s", from, to, strerror(errno));
  if (!st) return dl_atomic_commit(&f);
  dl_atomic_abort(&f);
  return st;
}

/* Where the traces of the pipeline (variant -1) or of a variant come from:
 * training them now, or reading those an earlier run saved. */
typedef struct trace_source {
  dl_status (*get)(struct trace_source *src, int variant, dlc_trace *out);
  const dlc_scenario *s;
  const dlc_exec_options *o;
  const dlc_trace *pipeline; /* for reuse by variants */
  const char *dir;           /* TRACE_DIR/<scenario> */
} trace_source;

static dl_status trace_file(const trace_source *src, int variant, const char *run, char *buf,
                            size_t len) {
  return dlc_path(buf, len, "%s/%s/%s.h5", src->dir,
                  variant < 0 ? "pipeline" : src->s->variants[variant].name, run);
}

/* mkdir -p of path's folder below the folder that holds TRACE_DIR (the
 * --out folder), never through a link (path.h). */
static dl_status make_trace_dirs(const dlc_exec_options *o, const char *path) {
  char base[2 * DLC_PATH_MAX];
  DL_TRY(dlc_path(base, sizeof base, "%s", o->trace_dir));
  char *slash = strrchr(base, '/');
  if (slash && slash != base) *slash = '\0';
  else snprintf(base, sizeof base, "%s", slash ? "/" : ".");
  if (!slash) {
    char rel[3 * DLC_PATH_MAX];
    DL_TRY(dlc_path(rel, sizeof rel, "./%s", path));
    return dlc_make_dirs_below(".", rel);
  }
  return dlc_make_dirs_below(base, path);
}

static bool writes_files(const dlc_exec_options *o) {
  return !o->comm || dl_comm_rank(o->comm) == 0;
}

/* Saved traces carry the fingerprint of where they computed, so that
 * `dlcheck compare` of two of them says what changed: this machine's
 * (m[0], taken once) for an engine run, the file's for a recorded one. */
static dl_status save_traces(trace_source *src, int variant, const dlc_trace *t) {
  if (!src->dir || !writes_files(src->o)) return DL_OK;
  const dlc_run_config *runs = variant < 0 ? src->s->runs : src->s->variants[variant].runs;
  dlc_golden_meta *m = calloc(2, sizeof *m);
  if (!m) return dl_fail(DL_ERR_NOMEM, "out of memory saving the traces of %s", src->s->name);
  dl_status st = env_here(m[0].env_json, sizeof m[0].env_json);
  for (int i = 0; !st && i < src->s->nruns; i++) {
    char path[3 * DLC_PATH_MAX];
    bool recorded = runs[i].trace[0] != '\0';
    st = trace_file(src, variant, t[i].run, path, sizeof path);
    if (recorded) /* a golden given as a run is saved as a plain trace */
      snprintf(m[1].env_json, sizeof m[1].env_json, "%s", t[i].origin_env ? t[i].origin_env : "");
    if (!st) st = make_trace_dirs(src->o, path);
    if (!st) st = dlc_trace_save(path, &t[i], &m[recorded]);
  }
  free(m);
  return st;
}

/* MPI fault tests (tests/cli/test_mpi.sh): DLCHECK_FAILPOINT=kill_rank_1
 * kills rank 1 as its first run starts, so that the other ranks' next
 * collective fails. Nothing else reads the variable. */
static void kill_rank_failpoint(const dlc_exec_options *o) {
  const char *armed = getenv("DLCHECK_FAILPOINT");
  if (armed && o->comm && strcmp(armed, "kill_rank_1") == 0 && dl_comm_rank(o->comm) == 1)
    raise(SIGKILL);
}

static dl_status train_traces(trace_source *src, int variant, dlc_trace *out) {
  kill_rank_failpoint(src->o);
  const dlc_scenario *s = src->s;
  const dlc_variant *v = variant < 0 ? NULL : &s->variants[variant];
  char label[DLC_NAME_MAX + 16] = "";
  if (v) snprintf(label, sizeof label, "%s: ", v->name);
  DL_TRY(run_all(s, v ? v->runs : s->runs, src->o, label, out, v ? src->pipeline : NULL));
  return save_traces(src, variant, out);
}

static dl_status read_traces(trace_source *src, int variant, dlc_trace *out) {
  for (int i = 0; i < src->s->nruns; i++) {
    char path[3 * DLC_PATH_MAX];
    DL_TRY(trace_file(src, variant, src->s->runs[i].name, path, sizeof path));
    DL_TRY(dlc_trace_load(path, &out[i], NULL));
  }
  return DL_OK;
}

static void free_traces(dlc_trace *t, int n) {
  for (int i = 0; i < n; i++) dlc_trace_free(&t[i]);
}

static dl_status assess_variant(trace_source *src, int variant, dlc_pitfall_outcome *out) {
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
  free_traces(traces, s->nruns);
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

/* A failed equivalence check between two engine runs whose statistics do
 * not name a layer: both are trained again up to the first differing step
 * with statistics there (locate.h). Only on failure: passing runs cost
 * nothing. */
static dl_status locate_failures(const dlc_scenario *s, const dlc_exec_options *o,
                                 const dlc_trace *traces, dlc_verdict *verdicts) {
  dlc_run_options ro = {.root = o->root,
                        .scenario = s->name,
                        .workdir = o->workdir,
                        .comm = o->comm,
                        .device = exec_device(o)};
  for (int i = 0; i < s->nchecks; i++) {
    const dlc_check_spec *c = &s->checks[i];
    int a = dlc_scenario_find_run(s, c->a), b = dlc_scenario_find_run(s, c->b);
    bool failed = verdicts[i].kind == DLC_FAIL || verdicts[i].kind == DLC_WAIVED;
    if (!failed || verdicts[i].layer[0] || strcmp(c->kind, "equivalence") || a < 0 || b < 0 ||
        s->runs[a].trace[0] || s->runs[b].trace[0])
      continue;
    int64_t step = dlc_first_digest_step(&traces[a], &traces[b], NULL);
    if (step >= 0)
      DL_TRY(dlc_locate_layer(&c->tol, &s->runs[a], &ro, &s->runs[b], &ro, step, &verdicts[i]));
  }
  return DL_OK;
}

/* A failed golden comparison of an engine run names the first divergent
 * layer: the run is trained again up to the step where it parts from the
 * golden, with statistics there, and compared with the statistics the
 * golden recorded at every step. On the CPU the engine's bits are the
 * promise, so the step is the first whose digests differ and layers are
 * compared bitwise. Elsewhere every step differs a little, so the step is
 * the first the gate rejected and layers are compared under float32's
 * default closeness (what a single non-CPU golden uses). */
static dl_status locate_golden(const dlc_scenario *s, const dlc_exec_options *o,
                               dlc_scenario_result *r) {
  if (r->golden.kind != DLC_FAIL || r->golden.layer[0] || !r->golden_trace || r->ntraces < 1 ||
      s->runs[0].trace[0])
    return DL_OK;
  bool cpu = strcmp(r->traces[0].backend, "cpu") == 0;
  dlc_tolerance tol = cpu ? dlc_tolerance_bitwise() : dlc_tolerance_default(DL_F32);
  int64_t step = cpu ? dlc_first_digest_step(&r->traces[0], r->golden_trace, NULL) : r->golden.step;
  if (step < 0) return DL_OK;
  dlc_run_options ro = {.root = o->root,
                        .scenario = s->name,
                        .workdir = o->workdir,
                        .comm = o->comm,
                        .device = exec_device(o)};
  size_t len = strlen(r->golden.evidence);
  if (len && r->golden.evidence[len - 1] != ' ') dlc_evidence(&r->golden, " ");
  return dlc_locate_layer_against(&tol, &s->runs[0], &ro, r->golden_trace, step, &r->golden);
}

/* Checks on the pipeline's traces, the golden, then each variant. */
/* A scenario without runs (every check not_tested) has no reference for a
 * golden: reported as skipped, saying why. */
static dl_status no_reference(const dlc_scenario *s, dlc_scenario_result *r) {
  dlc_verdict_init(&r->golden, "golden", "", "");
  r->golden.kind = DLC_ERROR;
  snprintf(r->golden.evidence, sizeof r->golden.evidence,
           "%s has no run, so nothing to compare with a golden", s->name);
  return DL_OK;
}

/* record needs the reference run. */
static dl_status need_reference(const dlc_scenario *s) {
  if (s->nruns) return DL_OK;
  return dl_fail(DL_ERR_INVALID, "%s: the scenario has no run to record a golden of", s->dir);
}

static dl_status assess(trace_source *src, const char *golden, bool pitfalls,
                        dlc_scenario_result *r) {
  const dlc_scenario *s = src->s;
  dl_status st = src->get(src, -1, r->traces);
  if (st) { /* no half-filled runs in the reports */
    free_traces(r->traces, r->ntraces);
    r->ntraces = 0;
    return st;
  }
  src->pipeline = r->traces;
  DL_TRY(dlc_evaluate_checks(s, r->traces, r->ntraces, "", "", r->checks));
  r->nchecks = s->nchecks;
  if (src->get == train_traces) DL_TRY(locate_failures(s, src->o, r->traces, r->checks));
  if (!s->nruns) return no_reference(s, r);
  /* A golden that cannot be read is an error on its line; the variants are
   * still assessed, and the error returned at the end. */
  dl_status golden_st = compare_golden(s, golden, r);
  if (golden_st && !r->golden_present) return golden_st;
  if (!golden_st && src->get == train_traces) DL_TRY(locate_golden(s, src->o, r));
  for (int i = 0; pitfalls && i < s->nvariants; i++) {
    DL_TRY(assess_variant(src, i, &r->pitfalls[i]));
    r->npitfalls++;
  }
  return golden_st ? dl_fail(golden_st, "%s", r->golden.evidence) : DL_OK;
}

/* Keeps scenario.yaml and the golden beside the traces, for reload. */
static dl_status keep_inputs(const dlc_scenario *s, const dlc_exec_options *o, const char *dir,
                             const char *golden) {
  char from[2 * DLC_PATH_MAX], to[2 * DLC_PATH_MAX];
  DL_TRY(dlc_path(from, sizeof from, "%s/scenario.yaml", s->dir));
  DL_TRY(dlc_path(to, sizeof to, "%s/scenario.yaml", dir));
  DL_TRY(make_trace_dirs(o, to));
  DL_TRY(copy_file(from, to));
  DL_TRY(dlc_path(to, sizeof to, "%s/golden.h5", dir));
  if (exists(golden)) return copy_file(golden, to);
  /* no golden: reload says so too, not an earlier run's copy */
  if (unlink(to) != 0 && errno != ENOENT)
    return dl_fail(DL_ERR_IO, "cannot remove the earlier run's %s: %s", to, strerror(errno));
  return DL_OK;
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
  DL_TRY(golden_path(s, o, golden, sizeof golden));
  trace_source src = {.get = train_traces, .s = s, .o = o};
  if (o->trace_dir) {
    DL_TRY(dlc_path(dir, sizeof dir, "%s/%s", o->trace_dir, s->name));
    src.dir = dir;
    if (writes_files(o)) DL_TRY(keep_inputs(s, o, dir, golden));
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
  trace_source src = {.get = read_traces, .s = s, .dir = dir};
  DL_TRY(result_alloc(s, "cpu", r));
  /* A scenario the run skipped (no traces; a device missing here too) is
   * skipped again. */
  if (s->nruns) {
    DL_TRY(trace_file(&src, -1, s->runs[0].name, probe, sizeof probe));
    dlc_exec_options here = {.backend = "cpu"};
    if (!exists(probe) && skipped_here(s, &here, r)) return DL_OK;
  }
  /* Variants are reassessed when the run saved them. */
  bool pitfalls = false;
  if (s->nvariants) {
    DL_TRY(trace_file(&src, 0, s->runs[0].name, probe, sizeof probe));
    pitfalls = exists(probe);
  }
  return assess(&src, golden, pitfalls, r);
}

dl_status dlc_scenario_reload(const dlc_scenario *s, const char *trace_dir,
                              dlc_scenario_result *r) {
  memset(r, 0, sizeof *r);
  return stopped(s, r, reload(s, trace_dir, r));
}

/* The golden's metadata for trace t of the reference run: bitwise on the
 * CPU (the engine promises the same bits everywhere). */
static dl_status golden_meta_for(const char *origin_env, const dlc_trace *trace,
                                 dlc_golden_meta *meta) {
  return dlc_golden_meta_recorded(meta, origin_env, strcmp(trace->backend, "cpu") == 0);
}

/* Goldens record layer statistics at every one of the first
 * GOLDEN_STATS_STEPS steps (then on the run's own schedule): a run that
 * later fails against the golden is trained again up to its first
 * differing step and compared layer by layer with them (locate.h); nothing
 * else can stand in for the golden's own numbers. The bound keeps a long
 * run's golden small (about 1.5 KB per step for ten layers): a changed
 * library or flag shows in the first steps. Cost: docs/calibrated-goldens.md. */
enum { GOLDEN_STATS_STEPS = 1000 };

static dlc_run_options record_options(const dlc_scenario *s, const dlc_exec_options *o,
                                      progress_ctx *p) {
  return (dlc_run_options){.root = o->root,
                           .scenario = s->name,
                           .workdir = o->workdir,
                           .progress = on_step,
                           .user = p,
                           .comm = o->comm,
                           .device = exec_device(o),
                           .stats_from = 0,
                           .stats_to = GOLDEN_STATS_STEPS};
}

/* A golden holds the reference run only: only it is trained. */
dl_status dlc_scenario_record(const dlc_scenario *s, const dlc_exec_options *o, char *written,
                              size_t len) {
  char path[2 * DLC_PATH_MAX];
  DL_TRY(need_reference(s));
  DL_TRY(golden_path(s, o, path, sizeof path));
  progress_ctx p = {.o = o, .scenario = s->name};
  snprintf(p.what, sizeof p.what, "record %s", s->runs[0].name);
  dlc_run_options ro = record_options(s, o, &p);
  dlc_trace trace;
  static dlc_golden_meta meta; /* 14 KiB: off the stack */
  if (s->runs[0].trace[0]) DL_TRY(load_trace_run(s, &s->runs[0], o->root, &trace));
  else DL_TRY(dlc_run(&s->runs[0], &ro, &trace));
  if (!writes_files(o)) {
    dlc_trace_free(&trace);
    return written ? dlc_path(written, len, "%s (by rank 0)", path) : DL_OK;
  }
  trace.scenario_hash = s->hash;
  dl_status st = golden_meta_for(trace.origin_env ? trace.origin_env : "", &trace, &meta);
  if (!st) st = dlc_make_parent_dirs(path);
  if (!st) st = dlc_trace_save(path, &trace, &meta);
  dlc_trace_free(&trace);
  if (!st && written) st = dlc_path(written, len, "%s", path);
  return st;
}

/* Repeat i of a calibration: on the CPU the engine's own order (i = 0) or
 * perturbation seed i; on a GPU the library's run-to-run variation, with
 * cuDNN's deterministic and fastest algorithms alternating. */
static dl_status run_repeat(const dlc_scenario *s, const dlc_exec_options *o, int i,
                            dlc_trace *out) {
  progress_ctx p = {.o = o, .scenario = s->name};
  snprintf(p.what, sizeof p.what, "repeat %d of %.60s", i, s->runs[0].name);
  dlc_run_options ro = record_options(s, o, &p);
  ro.perturb_seed = (uint64_t)i;
  dlc_run_config c = s->runs[0];
  if (i % 2) c.backend.conv_algo = DLC_CONV_FASTEST;
  return dlc_run(&c, &ro, out);
}

static void describe_repeats(const dlc_trace *ref, int n, char *buf, size_t len) {
  if (strcmp(ref->backend, "cpu") == 0)
    snprintf(buf, len,
             "cpu: the engine's order and perturbation seeds 1..%d (GEMM and "
             "convolution products in float, summed rotated, blocked or pairwise; "
             "allreduces in a rotated ring order for odd seeds, a pairwise tree for even ones)",
             n - 1);
  else
    snprintf(buf, len,
             "%s: %d runs, deterministic and fastest convolution algorithms "
             "alternating",
             ref->backend, n);
}

dl_status dlc_scenario_record_repeat(const dlc_scenario *s, const dlc_exec_options *o, int repeats,
                                     double widen, char *written, size_t len) {
  DL_TRY(need_reference(s));
  if (s->runs[0].trace[0])
    return dl_fail(DL_ERR_INVALID,
                   "%s: the reference run is a recorded trace (%s): calibrate "
                   "from several recordings with `dlcheck record --repeat-from A.h5 B.h5 C.h5 "
                   "--out GOLDEN.h5`",
                   s->name, s->runs[0].trace);
  if (repeats < DLC_ENVELOPE_MIN_REPEATS)
    return dl_fail(DL_ERR_INVALID, "--repeat %d: at least %d repeats are needed", repeats,
                   DLC_ENVELOPE_MIN_REPEATS);
  char path[2 * DLC_PATH_MAX], what[512];
  DL_TRY(golden_path(s, o, path, sizeof path));
  dlc_trace *runs = calloc((size_t)repeats, sizeof *runs);
  if (!runs) return dl_fail(DL_ERR_NOMEM, "out of memory for %d repeats", repeats);
  dl_status st = DL_OK;
  int done = 0;
  for (; !st && done < repeats; done++) st = run_repeat(s, o, done, &runs[done]);
  if (st) done--;              /* a failed run leaves its trace freed */
  static dlc_golden_meta meta; /* 14 KiB: off the stack */
  dlc_envelope env = {0};
  if (!st) {
    runs[0].scenario_hash = s->hash;
    describe_repeats(&runs[0], repeats, what, sizeof what);
    st = dlc_envelope_build(runs, repeats, widen, what, &env);
  }
  if (!st && writes_files(o)) {
    st = golden_meta_for("", &runs[0], &meta);
    if (!st) st = dlc_make_parent_dirs(path);
    if (!st) st = dlc_golden_save_calibrated(path, &runs[0], &meta, &env);
  }
  dlc_envelope_free(&env);
  free_traces(runs, done);
  free(runs);
  if (!st && written) st = dlc_path(written, len, "%s", path);
  return st;
}
