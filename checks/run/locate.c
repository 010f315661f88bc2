/* locate.h: the first divergent layer of engine runs, trained again. */
#include "run/locate.h"

#include "judge/checks_impl.h"

#include <stdio.h>

/* Run c again, stopping after step + 2, with statistics at step, step + 1. */
static dl_status rerun(const dlc_run_config *c, const dlc_run_options *o, int64_t step,
                       dlc_trace *out) {
  dlc_run_options r = *o;
  r.stats_from = step;
  r.stats_to = step + 2;
  r.stop_after = step + 2;
  r.progress = NULL;
  return dlc_run(c, &r, out);
}

dl_status dlc_locate_layer_against(const dlc_tolerance *tol, const dlc_run_config *ca,
                                   const dlc_run_options *oa, const dlc_trace *b, int64_t step,
                                   dlc_verdict *v) {
  if (!dlc_layer_stats_at(b, step) && !dlc_layer_stats_at(b, step + 1)) {
    dlc_evidence(v,
                 "The first divergent layer cannot be named: %s holds no layer statistics "
                 "at step %lld or %lld. ",
                 b->run, (long long)step, (long long)step + 1);
    return DL_OK;
  }
  dlc_trace ta;
  DL_TRY(rerun(ca, oa, step, &ta));
  snprintf(ta.run, sizeof ta.run, "%s", ca->name);
  dlc_first_divergent_layer(tol, &ta, b, step, v);
  dlc_trace_free(&ta);
  return DL_OK;
}

dl_status dlc_locate_layer(const dlc_tolerance *tol, const dlc_run_config *ca,
                           const dlc_run_options *oa, const dlc_run_config *cb,
                           const dlc_run_options *ob, int64_t step, dlc_verdict *v) {
  dlc_trace tb;
  DL_TRY(rerun(cb, ob, step, &tb));
  snprintf(tb.run, sizeof tb.run, "%s", cb->name);
  dl_status s = dlc_locate_layer_against(tol, ca, oa, &tb, step, v);
  dlc_trace_free(&tb);
  return s;
}
