/* Where the first inf/NaN appeared: the step, and the first layer in
 * forward order, then backward order, whose output or gradient held one
 * (N1). Layer statistics must be recorded at that step (stats_every: 1).
 * A trace may also name the call that made it (the audit's replay: note
 * nonfinite_origin, metrics nonfinite_origin_step and _domain); the
 * advice then follows from it: an overflow wants clipping, a function
 * outside its domain (log of 0) an input kept inside it. */
#include "judge/checks_impl.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static int64_t first_bad_step(const dlc_series *s) {
  for (int64_t i = 0; s && i < s->n; i++)
    if (!isfinite(s->v[i])) return i;
  return -1;
}

static bool first_bad_layer(const dlc_trace *t, dlc_verdict *v) {
  for (int i = 0; i < t->nstats; i++) {
    const dlc_layer_stats *s = &t->stats[i];
    for (int l = 0; l < s->nlayers; l++) {
      if (s->stat[l][DLC_STAT_NONFINITE] == 0) continue;
      v->step = s->step;
      snprintf(v->layer, sizeof v->layer, "%s", s->layer[l]);
      dlc_evidence(v, "First non-finite value at step %lld in %s%s (%.0f values). ",
                   (long long)s->step, strncmp(s->layer[l], "grad ", 5) ? "the output of " : "",
                   s->layer[l], s->stat[l][DLC_STAT_NONFINITE]);
      return true;
    }
  }
  return false;
}

static void advise(const dlc_trace *a, dlc_verdict *v) {
  const char *origin = dlc_trace_note(a, "nonfinite_origin");
  double domain = 0, step = -1;
  if (origin) {
    dlc_evidence(v, "%s ", origin);
    dlc_trace_metric(a, "nonfinite_origin_domain", &domain);
    if (dlc_trace_metric(a, "nonfinite_origin_step", &step) && step >= 0) v->step = (int64_t)step;
  }
  if (domain > 0)
    dlc_evidence(v, "Keep that function's input inside its domain: clamp it (x.clamp_min(eps)) "
                    "or guard the division, or use the stable form (log_softmax, logsumexp, "
                    "cross_entropy on logits); clipping gradients would not fix it.");
  else
    dlc_evidence(v, "Clip gradients (scenario: clip: {max_norm: ...}; PyTorch: "
                    "torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)) or lower the "
                    "learning rate.");
}

dl_status dlc_check_nonfinite(const dlc_check_spec *spec, const dlc_trace *traces, int n,
                              dlc_verdict *v) {
  const dlc_trace *a, *b;
  DL_TRY(dlc_check_runs(spec, traces, n, false, &a, &b));
  int64_t loss_step = first_bad_step(dlc_trace_series(a, "loss"));
  int64_t norm_step = first_bad_step(dlc_trace_series(a, "grad_norm"));
  int bad_params = 0;
  for (int i = 0; i < a->nfinals; i++) {
    const dl_tensor *t = &a->finals[i].t;
    if (strncmp(a->finals[i].name, "param/", 6) != 0 || t->dtype != DL_F32) continue;
    for (int64_t j = 0; j < t->numel; j++)
      if (!isfinite(dl_f32(t)[j])) {
        bad_params++;
        break;
      }
  }
  bool located = first_bad_layer(a, v);
  if (!located && loss_step < 0 && norm_step < 0 && bad_params == 0) {
    v->kind = DLC_PASS;
    dlc_evidence(v, "no inf/NaN in %s: loss, gradient norms and parameters are finite.", a->run);
    return DL_OK;
  }
  v->kind = spec->expect_divergence ? DLC_EXPECTED_DIVERGENCE : DLC_FAIL;
  if (loss_step >= 0) dlc_evidence(v, "Loss first non-finite at step %lld. ", (long long)loss_step);
  if (norm_step >= 0)
    dlc_evidence(v, "Gradient norm first non-finite at step %lld. ", (long long)norm_step);
  if (v->step < 0) v->step = loss_step >= 0 ? loss_step : norm_step;
  if (bad_params) dlc_evidence(v, "%d parameter tensors end non-finite. ", bad_params);
  if (!located)
    dlc_evidence(v, "Record layer statistics at every step to locate the layer (scenario: "
                    "stats_every: 1; recorder: Recorder(..., stats_every=1)). ");
  advise(a, v);
  return DL_OK;
}
