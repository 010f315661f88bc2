/* Shared between execute.c and its parts: exec_runs.c (training or reading
 * a scenario's runs, evaluating its checks), exec_golden.c (the golden
 * comparison), exec_traces.c (the traces and inputs saved beside a run) and
 * exec_record.c (recording goldens). */
#ifndef DLC_EXEC_INTERNAL_H
#define DLC_EXEC_INTERNAL_H

#include "run/backend_open.h"
#include "run/execute.h"
#include "run/runner.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* What a run's progress callback is told: the scenario and "variant: run". */
typedef struct dlc_progress_ctx {
  const dlc_exec_options *o;
  const char *scenario;
  char what[DLC_NAME_MAX + 16];
} dlc_progress_ctx;

/* Where the traces of the pipeline (variant -1) or of a variant come from:
 * training them now, or reading those an earlier run saved. */
typedef struct dlc_trace_source {
  dl_status (*get)(struct dlc_trace_source *src, int variant, dlc_trace *out);
  const dlc_scenario *s;
  const dlc_exec_options *o;
  const dlc_trace *pipeline; /* for reuse by variants */
  const char *dir;           /* TRACE_DIR/<scenario> */
} dlc_trace_source;

/* ---- exec_runs.c ---- */
dlc_device dlc_exec_device(const dlc_exec_options *o);
dl_status dlc_exec_load_trace_run(const dlc_scenario *s, const dlc_run_config *c, const char *root,
                                  dlc_trace *out);
void dlc_exec_on_step(void *user, const char *run, int64_t step, int64_t steps);
/* traces[i] of runs[i], reused from `reuse` (NULL: none) where runs[i] is
 * the pipeline's own run; label prefixes the progress lines. */
dl_status dlc_exec_run_all(const dlc_scenario *s, const dlc_run_config *runs,
                           const dlc_exec_options *o, const char *label, dlc_trace *traces,
                           const dlc_trace *reuse);
dl_status dlc_exec_locate_failures(const dlc_scenario *s, const dlc_exec_options *o,
                                   const dlc_trace *traces, dlc_verdict *verdicts);

/* ---- exec_golden.c ---- */
dl_status dlc_exec_golden_path(const dlc_scenario *s, const dlc_exec_options *o, char *buf,
                               size_t len);
dl_status dlc_exec_env_here(char *json, size_t len);
/* r->golden from the golden at path and r->traces[0]; a golden that cannot
 * be read is an error on that line, and returned. */
dl_status dlc_exec_compare_golden(const dlc_scenario *s, const char *path, dlc_scenario_result *r);
dl_status dlc_exec_locate_golden(const dlc_scenario *s, const dlc_exec_options *o,
                                 dlc_scenario_result *r);

/* ---- exec_traces.c ---- */
bool dlc_exec_exists(const char *path);
bool dlc_exec_writes_files(const dlc_exec_options *o);
dl_status dlc_exec_trace_file(const dlc_trace_source *src, int variant, const char *run, char *buf,
                              size_t len);
dl_status dlc_exec_save_traces(dlc_trace_source *src, int variant, const dlc_trace *t);
dl_status dlc_exec_keep_inputs(const dlc_scenario *s, const dlc_exec_options *o, const char *dir,
                               const char *golden);

/* ---- execute.c ---- */
void dlc_exec_free_traces(dlc_trace *t, int n);

#endif
