/* Parameters that never trained: each tensor's relative change from its
 * initial value, against the median tensor's. A tensor that did not move,
 * or moved less than `threshold` times the median, is named with its
 * requires_grad and in-optimizer flags, and the prediction histogram shows
 * whether the model collapsed to a few classes (F1-F3). */
#include "judge/checks_impl.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static double rel_change(const dl_tensor *p, const dl_tensor *p0) {
  double d = 0, n = 0;
  for (int64_t i = 0; i < p->numel; i++) {
    double a = dl_f32(p)[i], b = dl_f32(p0)[i];
    d += (a - b) * (a - b);
    n += b * b;
  }
  return sqrt(d) / (sqrt(n) + 1e-12);
}

static int cmp_double(const void *x, const void *y) {
  double a = *(const double *)x, b = *(const double *)y;
  return (a > b) - (a < b);
}

static double flag(const dlc_trace *t, const char *kind, const char *param) {
  char name[2 * DLC_NAME_MAX];
  double v = -1;
  snprintf(name, sizeof name, "%s/%s", kind, param);
  dlc_trace_metric(t, name, &v);
  return v;
}

static void name_stalled(const dlc_trace *t, const char *param, double change, int nth,
                         dlc_verdict *v) {
  if (nth == 0) snprintf(v->tensor, sizeof v->tensor, "%s", param);
  if (nth >= 6) return;
  double rg = flag(t, "requires_grad", param), opt = flag(t, "in_optimizer", param);
  dlc_evidence(v, "%s %s (relative change %.3g, requires_grad=%s, in optimizer=%s); ", param,
               change == 0 ? "never changed" : "barely changed", change,
               rg < 0 ? "?"
               : rg   ? "true"
                      : "false",
               opt < 0 ? "?"
               : opt   ? "true"
                       : "false");
}

dl_status dlc_check_frozen(const dlc_check_spec *spec, const dlc_trace *traces, int n,
                           dlc_verdict *v) {
  const dlc_trace *a, *b;
  DL_TRY(dlc_check_runs(spec, traces, n, false, &a, &b));
  double *changes = calloc((size_t)a->nfinals + 1, sizeof *changes);
  double *sorted = calloc((size_t)a->nfinals + 1, sizeof *sorted);
  if (!changes || !sorted) {
    free(changes);
    free(sorted);
    return dl_fail(DL_ERR_NOMEM, "check %s: out of memory", spec->name);
  }
  int m = 0;
  for (int i = 0; i < a->nfinals; i++) {
    const char *name = a->finals[i].name;
    if (strncmp(name, "param/", 6) != 0) continue;
    char init[2 * DLC_NAME_MAX];
    snprintf(init, sizeof init, "init/%s", name + 6);
    const dl_tensor *p0 = dlc_trace_final(a, init);
    if (!p0 || !dl_tensor_same_shape(p0, &a->finals[i].t)) continue;
    changes[i] = rel_change(&a->finals[i].t, p0);
    sorted[m++] = changes[i];
  }
  qsort(sorted, (size_t)m, sizeof *sorted, cmp_double);
  double median = m ? sorted[m / 2] : 0, ratio = spec->threshold > 0 ? spec->threshold : 0.01;
  int stalled = 0;
  for (int i = 0; i < a->nfinals; i++) {
    if (strncmp(a->finals[i].name, "param/", 6) != 0) continue;
    if (changes[i] == 0 || changes[i] < ratio * median)
      name_stalled(a, a->finals[i].name + 6, changes[i], stalled++, v);
  }
  free(changes);
  free(sorted);
  v->value = stalled;
  v->threshold = ratio;
  v->kind = stalled == 0 ? DLC_PASS : spec->expect_divergence ? DLC_EXPECTED_DIVERGENCE : DLC_FAIL;
  if (stalled == 0)
    dlc_evidence(v, "all %d parameter tensors of %s trained (median relative change %.3g). ", m,
                 a->run, median);
  else
    dlc_evidence(v, "%d of %d parameter tensors stalled (median relative change %.3g). ", stalled,
                 m, median);
  double top;
  if (dlc_trace_metric(a, "eval_top_class_fraction", &top))
    dlc_evidence(v, "Predictions: the most frequent class takes %.1f%% of the evaluation set.",
                 100 * top);
  return DL_OK;
}
