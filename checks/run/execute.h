/* Executing a scenario: its runs, its checks, the golden comparison and,
 * on request, every pitfall variant. */
#ifndef DLC_EXECUTE_H
#define DLC_EXECUTE_H

#include "judge/result.h"
#include "comm/comm.h"
#include "scenario/scenario.h"

typedef struct dlc_exec_options {
  const char *root;       /* repo root (fixtures, golden/) */
  const char *golden_dir; /* default: ROOT/golden */
  const char *backend;    /* "cpu" */
  const char *workdir;    /* scratch directory for checkpoints */
  bool pitfalls;          /* also run every pitfall variant */
  /* If set, every trace is also written to TRACE_DIR/<scenario>/<pipeline or
   * variant>/<run>.h5, with scenario.yaml and the golden beside, so that
   * dlc_scenario_reload can rebuild the result without training. */
  const char *trace_dir;
  /* A multi-process communicator (MPI): data-parallel runs use it, this
   * process being one rank; only rank 0 writes files. NULL: thread ranks. */
  dl_comm *comm;
  /* Progress, may be NULL: what = "run reference" / "variant G1", step of steps. */
  void (*progress)(void *user, const char *scenario, const char *what, int64_t step, int64_t steps);
  void *user;
} dlc_exec_options;

/* out is filled even when checks fail; an error return means the scenario
 * could not run to its end (bad data, I/O), with a message: out then holds
 * what it finished and an ERROR verdict saying what failed
 * (dlc_result_set_error), so that no report counts it as passed. Free out
 * with dlc_result_free either way. */
dl_status dlc_scenario_execute(const dlc_scenario *s, const dlc_exec_options *o,
                               dlc_scenario_result *out);

/* Rebuilds the result of an earlier execute with trace_dir set, from the
 * traces in TRACE_DIR/<scenario>/ (s loaded from its scenario.yaml there):
 * the checks are evaluated again, nothing is trained. */
dl_status dlc_scenario_reload(const dlc_scenario *s, const char *trace_dir,
                              dlc_scenario_result *out);

/* Marks r as failed: an ERROR verdict "error" with message after its
 * checks (a golden that could not be read has its error on the golden
 * line instead), and a golden line that says it was not compared. r is a
 * result a failed execute or reload filled, or a zeroed one (a scenario
 * that could not even be loaded: scenario names it). */
void dlc_result_set_error(dlc_scenario_result *r, const char *scenario, const char *message);

/* Runs the scenario's runs and writes the reference run's trace as
 * GOLDEN_DIR/<scenario>/<device>.h5, atomically: the device that run
 * computes on (--backend's unless the scenario pins it: cpu or cuda). */
dl_status dlc_scenario_record(const dlc_scenario *s, const dlc_exec_options *o, char *written,
                              size_t len);

/* A calibrated golden: the reference run `repeats` times (>= 3) under the
 * variation the gate must accept (exec_record.c's run_repeat), its trace and
 * the envelope (envelope.h) written as GOLDEN_DIR/<scenario>/<device>.h5. */
dl_status dlc_scenario_record_repeat(const dlc_scenario *s, const dlc_exec_options *o, int repeats,
                                     double widen, char *written, size_t len);

/* Evaluates every check of the scenario on traces (one per run). */
dl_status dlc_evaluate_checks(const dlc_scenario *s, const dlc_trace *traces, int ntraces,
                              const char *variant, const char *pitfall, dlc_verdict *out);

#endif
