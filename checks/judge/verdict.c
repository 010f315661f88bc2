#include "judge/verdict.h"

#include "judge/checks_impl.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

const char *dlc_verdict_name(dlc_verdict_kind k) {
  switch (k) {
  case DLC_PASS: return "pass";
  case DLC_FAIL: return "FAIL";
  case DLC_EXPECTED_DIVERGENCE: return "expected divergence";
  case DLC_ERROR: return "ERROR";
  case DLC_SKIP: return "not tested";
  }
  return "?";
}

bool dlc_verdict_ok(dlc_verdict_kind k) {
  return k == DLC_PASS || k == DLC_EXPECTED_DIVERGENCE || k == DLC_SKIP;
}

void dlc_verdict_init(dlc_verdict *v, const char *check, const char *variant, const char *pitfall) {
  memset(v, 0, sizeof *v);
  snprintf(v->check, sizeof v->check, "%s", check ? check : "");
  snprintf(v->variant, sizeof v->variant, "%s", variant ? variant : "");
  snprintf(v->pitfall, sizeof v->pitfall, "%s", pitfall ? pitfall : "");
  v->step = -1;
  v->max_abs = v->max_rel = v->value = v->threshold = NAN;
}

void dlc_evidence(dlc_verdict *v, const char *fmt, ...) {
  size_t used = strlen(v->evidence);
  if (used + 1 >= sizeof v->evidence) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(v->evidence + used, sizeof v->evidence - used, fmt, ap);
  va_end(ap);
}

dl_status dlc_check_runs(const dlc_check_spec *spec, const dlc_trace *traces, int n, bool two,
                         const dlc_trace **a, const dlc_trace **b) {
  *a = dlc_check_find_trace(traces, n, spec->a);
  *b = two ? dlc_check_find_trace(traces, n, spec->b) : NULL;
  if (!*a) return dl_fail(DL_ERR_INVALID, "check %s: no trace of run '%s'", spec->name, spec->a);
  if (two && !*b)
    return dl_fail(DL_ERR_INVALID, "check %s: no trace of run '%s'", spec->name, spec->b);
  return DL_OK;
}
