#define _POSIX_C_SOURCE 200809L /* open_memstream */
/* The reference run against the golden: found, loaded, compared (bitwise,
 * by its recorded rule or within its envelope), what changed in the
 * environment said, and a failure located to a layer. */
#include "run/exec_internal.h"

#include "judge/checks_impl.h"
#include "run/locate.h"
#include "store/env.h"
#include "store/path.h"
#include "store/trace_io.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* Named for the device the reference run computes on: --backend's, unless
 * the scenario pins that run to one (backend_equiv's reference is its CPU
 * run, so its golden is cpu.h5 under any --backend). */
dl_status dlc_exec_golden_path(const dlc_scenario *s, const dlc_exec_options *o, char *buf,
                               size_t len) {
  const char *device = s->nruns ? dlc_device_name(dlc_run_device(&s->runs[0], dlc_exec_device(o)))
                                : o->backend;
  if (o->golden_dir) return dlc_path(buf, len, "%s/%s/%s.h5", o->golden_dir, s->name, device);
  return dlc_path(buf, len, "%s/golden/%s/%s.h5", o->root, s->name, device);
}

/* This machine's fingerprint as a trace stores it. */
dl_status dlc_exec_env_here(char *json, size_t len) {
  dlc_env e;
  dlc_env_fingerprint(&e);
  return dlc_env_to_json(&e, json, len);
}

/* Portability report: which environment keys changed since the golden. */
static void describe_env_change(const char *golden_env, dlc_verdict *v) {
  char now[DLC_ENV_JSON_MAX];
  if (!golden_env[0] || dlc_exec_env_here(now, sizeof now)) return;
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

dl_status dlc_exec_compare_golden(const dlc_scenario *s, const char *path, dlc_scenario_result *r) {
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

/* A failed golden comparison of an engine run names the first divergent
 * layer: the run is trained again up to the step where it parts from the
 * golden, with statistics there, and compared with the statistics the
 * golden recorded at every step. On the CPU the engine's bits are the
 * promise, so the step is the first whose digests differ and layers are
 * compared bitwise. Elsewhere every step differs a little, so the step is
 * the first the gate rejected and layers are compared under float32's
 * default closeness (what a single non-CPU golden uses). */
dl_status dlc_exec_locate_golden(const dlc_scenario *s, const dlc_exec_options *o,
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
                        .device = dlc_exec_device(o)};
  size_t len = strlen(r->golden.evidence);
  if (len && r->golden.evidence[len - 1] != ' ') dlc_evidence(&r->golden, " ");
  return dlc_locate_layer_against(&tol, &s->runs[0], &ro, r->golden_trace, step, &r->golden);
}
