/* Check kinds: invariants between runs and detectors on one run. A scenario
 * names a kind per check; the registry maps the name to its function. */
#ifndef DLC_CHECK_H
#define DLC_CHECK_H

#include "scenario.h"
#include "verdict.h"

/* traces[i] is the trace of run i of the scenario (same order as
 * scenario->runs); a check finds its runs a/b by name with
 * dlc_check_find_trace. Fills *out (already initialised with the check's
 * name); returns DL_OK even when the verdict is FAIL: an error return means
 * the check could not run. */
typedef dl_status (*dlc_check_fn)(const dlc_check_spec *spec,
                                  const dlc_trace *traces, int ntraces,
                                  dlc_verdict *out);

typedef struct dlc_check_kind {
  const char *kind;   /* "equivalence" */
  const char *doc;    /* one line for `dlcheck list --checks` and errors */
  int runs;           /* the runs it reads: 2 (a and b), 1 (a) or 0 (none) */
  dlc_check_fn fn;
} dlc_check_kind;

const dlc_check_kind *dlc_check_kind_find(const char *kind); /* NULL if none */
int dlc_check_kind_count(void);
const dlc_check_kind *dlc_check_kind_at(int i);

const dlc_trace *dlc_check_find_trace(const dlc_trace *traces, int n, const char *run);

#endif
