#include "judge/verdict.h"

#include "judge/checks_impl.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* Here, beside the other helpers the check kinds share, rather than in
 * the registry that calls the kinds: so no kind calls back into it. */
const dlc_trace *dlc_check_find_trace(const dlc_trace *traces, int n, const char *run) {
  for (int i = 0; i < n; i++)
    if (strcmp(traces[i].run, run) == 0) return &traces[i];
  return NULL;
}

const char *dlc_verdict_name(dlc_verdict_kind k) {
  switch (k) {
  case DLC_PASS: return "pass";
  case DLC_FAIL: return "FAIL";
  case DLC_EXPECTED_DIVERGENCE: return "expected divergence";
  case DLC_ERROR: return "ERROR";
  case DLC_SKIP: return "not tested";
  case DLC_WAIVED: return "waived";
  }
  return "?";
}

bool dlc_verdict_ok(dlc_verdict_kind k) {
  return k == DLC_PASS || k == DLC_EXPECTED_DIVERGENCE || k == DLC_SKIP || k == DLC_WAIVED;
}

void dlc_verdict_init(dlc_verdict *v, const char *check, const char *variant, const char *pitfall) {
  memset(v, 0, sizeof *v);
  snprintf(v->check, sizeof v->check, "%s", check ? check : "");
  snprintf(v->variant, sizeof v->variant, "%s", variant ? variant : "");
  snprintf(v->pitfall, sizeof v->pitfall, "%s", pitfall ? pitfall : "");
  v->step = -1;
  v->max_abs = v->max_rel = v->value = v->threshold = NAN;
}

void dlc_verdict_waive(dlc_verdict *v, const char *reason) {
  if (!reason || !reason[0]) return;
  snprintf(v->waiver, sizeof v->waiver, "%s", reason);
  if (v->kind != DLC_FAIL) {
    dlc_evidence(v, " The waiver is unused: the check did not fail (%s); waived: %s.",
                 dlc_verdict_name(v->kind), v->waiver);
    return;
  }
  v->kind = DLC_WAIVED;
  char tail[DLC_WAIVER_MAX + 16];
  int n = snprintf(tail, sizeof tail, " waived: %s.", v->waiver);
  size_t used = strlen(v->evidence), room = sizeof v->evidence - 1;
  if (used + (size_t)n > room) { /* cut the evidence (at a character) so the reason shows */
    size_t cut = room - (size_t)n - 3;
    while (cut > 0 && ((unsigned char)v->evidence[cut] & 0xc0) == 0x80) cut--;
    memcpy(v->evidence + cut, "...", 4);
  }
  dlc_evidence(v, "%s", tail);
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
