/* Detectors on a recorded metric: a count, a fraction or a ratio the runner
 * measured, against the scenario's threshold. quantities[0] names the
 * metric; quantities[1], if given, names a note quoted as evidence. */
#include "judge/checks_impl.h"

#include <math.h>
#include <stdio.h>

static dl_status metric_of(const dlc_check_spec *spec, const dlc_trace *t, double *v) {
  if (spec->nquantities < 1)
    return dl_fail(DL_ERR_INVALID, "check %s: name the metric in quantities", spec->name);
  if (!dlc_trace_metric(t, spec->quantities[0], v))
    return dl_fail(DL_ERR_INVALID, "check %s: run %s recorded no metric '%s'", spec->name, t->run,
                   spec->quantities[0]);
  return DL_OK;
}

static void quote_note(const dlc_check_spec *spec, const dlc_trace *t, dlc_verdict *v) {
  const char *note = spec->nquantities > 1 ? dlc_trace_note(t, spec->quantities[1]) : NULL;
  if (note) dlc_evidence(v, " %s", note);
}

static dl_status bound(const dlc_check_spec *spec, const dlc_trace *traces, int n, dlc_verdict *v,
                       bool is_max) {
  const dlc_trace *a, *b;
  DL_TRY(dlc_check_runs(spec, traces, n, false, &a, &b));
  double x;
  DL_TRY(metric_of(spec, a, &x));
  bool ok = is_max ? x <= spec->threshold : x >= spec->threshold;
  v->value = x;
  v->threshold = spec->threshold;
  snprintf(v->tensor, sizeof v->tensor, "%s", spec->quantities[0]);
  v->kind = ok ? DLC_PASS : spec->expect_divergence ? DLC_EXPECTED_DIVERGENCE : DLC_FAIL;
  dlc_evidence(v, "%s of run %s is %.6g, %s the %s %.6g.", spec->quantities[0], a->run, x,
               ok ? "within" : "beyond", is_max ? "maximum" : "minimum", spec->threshold);
  quote_note(spec, a, v);
  return DL_OK;
}

dl_status dlc_check_metric_max(const dlc_check_spec *spec, const dlc_trace *traces, int n,
                               dlc_verdict *v) {
  return bound(spec, traces, n, v, true);
}

dl_status dlc_check_metric_min(const dlc_check_spec *spec, const dlc_trace *traces, int n,
                               dlc_verdict *v) {
  return bound(spec, traces, n, v, false);
}

dl_status dlc_check_metric_increase(const dlc_check_spec *spec, const dlc_trace *traces, int n,
                                    dlc_verdict *v) {
  const dlc_trace *a, *b;
  DL_TRY(dlc_check_runs(spec, traces, n, true, &a, &b));
  double xa, xb;
  DL_TRY(metric_of(spec, a, &xa));
  DL_TRY(metric_of(spec, b, &xb));
  double inc = xb - xa;
  bool ok = inc <= spec->threshold;
  v->value = inc;
  v->threshold = spec->threshold;
  snprintf(v->tensor, sizeof v->tensor, "%s", spec->quantities[0]);
  v->kind = ok ? DLC_PASS : spec->expect_divergence ? DLC_EXPECTED_DIVERGENCE : DLC_FAIL;
  dlc_evidence(v, "%s: %.6g in %s against %.6g in %s, an increase of %.6g (%s %.6g).",
               spec->quantities[0], xb, b->run, xa, a->run, inc,
               ok ? "allowed up to" : "more than the allowed", spec->threshold);
  quote_note(spec, b, v);
  return DL_OK;
}
