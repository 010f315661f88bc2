/* Recording a golden: the reference run once, or repeated under the
 * variation the gate must accept for a calibrated golden. See execute.h. */
#include "run/exec_internal.h"

#include "store/path.h"
#include "store/trace_io.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* record needs the reference run. */
static dl_status need_reference(const dlc_scenario *s) {
  if (s->nruns) return DL_OK;
  return dl_fail(DL_ERR_INVALID, "%s: the scenario has no run to record a golden of", s->dir);
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
                                      dlc_progress_ctx *p) {
  return (dlc_run_options){.root = o->root,
                           .scenario = s->name,
                           .workdir = o->workdir,
                           .progress = dlc_exec_on_step,
                           .user = p,
                           .comm = o->comm,
                           .device = dlc_exec_device(o),
                           .stats_from = 0,
                           .stats_to = GOLDEN_STATS_STEPS};
}

/* A golden holds the reference run only: only it is trained. */
dl_status dlc_scenario_record(const dlc_scenario *s, const dlc_exec_options *o, char *written,
                              size_t len) {
  char path[2 * DLC_PATH_MAX];
  DL_TRY(need_reference(s));
  DL_TRY(dlc_exec_golden_path(s, o, path, sizeof path));
  dlc_progress_ctx p = {.o = o, .scenario = s->name};
  snprintf(p.what, sizeof p.what, "record %s", s->runs[0].name);
  dlc_run_options ro = record_options(s, o, &p);
  dlc_trace trace;
  static dlc_golden_meta meta; /* 14 KiB: off the stack */
  if (s->runs[0].trace[0]) DL_TRY(dlc_exec_load_trace_run(s, &s->runs[0], o->root, &trace));
  else DL_TRY(dlc_run(&s->runs[0], &ro, &trace));
  if (!dlc_exec_writes_files(o)) {
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
  dlc_progress_ctx p = {.o = o, .scenario = s->name};
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
  DL_TRY(dlc_exec_golden_path(s, o, path, sizeof path));
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
  if (!st && dlc_exec_writes_files(o)) {
    st = golden_meta_for("", &runs[0], &meta);
    if (!st) st = dlc_make_parent_dirs(path);
    if (!st) st = dlc_golden_save_calibrated(path, &runs[0], &meta, &env);
  }
  dlc_envelope_free(&env);
  dlc_exec_free_traces(runs, done);
  free(runs);
  if (!st && written) st = dlc_path(written, len, "%s", path);
  return st;
}
