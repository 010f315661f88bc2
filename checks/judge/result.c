/* Judging and freeing a scenario result.
 *
 * Ownership (what dlc_scenario_execute allocates and this frees): checks,
 * pitfalls and each pitfall's others are malloc'd arrays; traces is a
 * malloc'd array of ntraces initialised traces; golden_trace is one
 * malloc'd, initialised trace or NULL; envelope likewise. */
#include "judge/result.h"

#include <stdlib.h>
#include <string.h>

/* A missing golden is not a failure: the scenario has simply not been
 * recorded yet (reports show it as skipped, with how to record one). A
 * golden that exists must match. */
bool dlc_result_ok(const dlc_scenario_result *r) {
  for (int i = 0; i < r->nchecks; i++)
    if (!dlc_verdict_ok(r->checks[i].kind)) return false;
  if (r->golden_present && !dlc_verdict_ok(r->golden.kind)) return false;
  for (int i = 0; i < r->npitfalls; i++)
    if (!r->pitfalls[i].caught) return false;
  return true;
}

void dlc_result_free(dlc_scenario_result *r) {
  if (!r) return;
  free(r->checks);
  for (int i = 0; i < r->npitfalls; i++) free(r->pitfalls[i].others);
  free(r->pitfalls);
  for (int i = 0; i < r->ntraces; i++) dlc_trace_free(&r->traces[i]);
  free(r->traces);
  if (r->golden_trace) {
    dlc_trace_free(r->golden_trace);
    free(r->golden_trace);
  }
  if (r->envelope) {
    dlc_envelope_free(r->envelope);
    free(r->envelope);
  }
  memset(r, 0, sizeof *r);
}
