/* not_tested: a check that could not be made says so, with its reason, and
 * is reported as skipped: what an audit could not run must never read as
 * passed. */
#include "judge/checks_impl.h"

#include <stdio.h>

dl_status dlc_check_not_tested(const dlc_check_spec *spec, const dlc_trace *traces, int n,
                               dlc_verdict *out) {
  (void)traces, (void)n;
  out->kind = DLC_SKIP;
  snprintf(out->evidence, sizeof out->evidence, "not tested: %s", spec->reason);
  return DL_OK;
}
