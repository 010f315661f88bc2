/* dlcheck calibrate: the tightest rule every repeat of a calibrated golden
 * meets, per quantity, against the rule the gate uses today. */
#include "judge/envelope.h"

#include "judge/tolerance.h"

#include <math.h>
#include <string.h>

/* What the repeats need, per quantity: largest |repeat - reference|,
 * largest relative and ULP differences, and (series only) the smallest
 * ratio allowed/needed under a close() rule. */
typedef struct need {
  double max_abs, max_rel, max_ulp, width;
  bool rel_infinite; /* a repeat moved where the reference is 0 */
} need;

static void need_series(const dlc_envelope_series *es, const dlc_series *ref, need *n) {
  for (int64_t i = 0; i < es->n && i < ref->n; i++) {
    double r = ref->v[i], lo = es->v[i][DLC_ENV_MIN], hi = es->v[i][DLC_ENV_MAX];
    double dev = fmax(fabs(hi - r), fabs(r - lo));
    n->width = fmax(n->width, hi - lo);
    n->max_abs = fmax(n->max_abs, dev);
    if (r != 0) n->max_rel = fmax(n->max_rel, dev / fabs(r));
    else if (dev > 0) n->rel_infinite = true;
    n->max_ulp = fmax(n->max_ulp, (double)dlc_ulp_distance((float)r, (float)hi));
    n->max_ulp = fmax(n->max_ulp, (double)dlc_ulp_distance((float)r, (float)lo));
  }
}

/* How many times the largest repeat difference the rule allows: < 1 means
 * the rule rejects a repeat. Series are exact step by step; for tensors,
 * only the largest absolute and relative differences are kept, so the
 * figure is a lower bound. */
static double margin(const dlc_tolerance *t, const need *n, const dlc_envelope_series *es,
                     const dlc_series *ref) {
  if (n->max_abs == 0) return INFINITY;
  if (t->kind == DLC_TOL_BITWISE) return 0;
  if (t->kind == DLC_TOL_ULP) return n->max_ulp > 0 ? (double)t->ulp / n->max_ulp : INFINITY;
  if (!es) return fmax(t->atol / n->max_abs, n->rel_infinite ? 0 : t->rtol / n->max_rel);
  double m = INFINITY;
  for (int64_t i = 0; i < es->n && i < ref->n; i++) {
    double r = ref->v[i];
    double dev = fmax(fabs(es->v[i][DLC_ENV_MAX] - r), fabs(r - es->v[i][DLC_ENV_MIN]));
    if (dev > 0) m = fmin(m, (t->atol + t->rtol * fabs(r)) / dev);
  }
  return m;
}

static void print_row(FILE *out, const char *name, const need *n, const char *rule, double m,
                      bool bound) {
  char close_rel[48], close_abs[48], ulp[32], mtext[64];
  snprintf(close_abs, sizeof close_abs, "close(0, %.3g)", n->max_abs);
  if (n->rel_infinite) snprintf(close_rel, sizeof close_rel, "-");
  else snprintf(close_rel, sizeof close_rel, "close(%.2g, 0)", n->max_rel);
  snprintf(ulp, sizeof ulp, "ulp(%.0f)", n->max_ulp);
  if (!rule) snprintf(mtext, sizeof mtext, "-");
  else if (isinf(m)) snprintf(mtext, sizeof mtext, "holds (repeats identical)");
  else if (m == 0) snprintf(mtext, sizeof mtext, "FAILS the repeats");
  else
    snprintf(mtext, sizeof mtext, "%s%.3g x%s", bound ? ">= " : "", m,
             m < 1 ? ": FAILS the repeats" : "");
  fprintf(out, "%-28s %-10.3g %-12s %-18s %-18s %-22s %s\n", name, n->width, ulp, close_rel,
          close_abs, rule ? rule : "-", mtext);
}

void dlc_envelope_recommend(const dlc_envelope *e, const dlc_trace *ref,
                            const char *(*rule_of)(const void *user, const char *quantity),
                            const void *user, FILE *out) {
  fprintf(out, "calibration: %d repeats (%s), gate widened %g times\n", e->repeats, e->perturbation,
          e->widen);
  fprintf(out, "%-28s %-10s %-12s %-18s %-18s %-22s %s\n", "quantity", "width", "tightest",
          "tightest", "tightest", "current rule", "margin of the current rule");
  for (int k = 0; k < e->nseries; k++) {
    const dlc_series *r = dlc_trace_series(ref, e->series[k].name);
    if (!r) continue;
    need n = {0};
    need_series(&e->series[k], r, &n);
    const char *rule = rule_of ? rule_of(user, e->series[k].name) : NULL;
    dlc_tolerance t;
    bool ok = rule && dlc_tolerance_parse(rule, &t) == DL_OK;
    print_row(out, e->series[k].name, &n, ok ? rule : NULL,
              ok ? margin(&t, &n, &e->series[k], r) : 0, false);
  }
  for (int k = 0; k < e->nfinals; k++) {
    const dlc_envelope_final *f = &e->finals[k];
    need n = {.max_abs = f->v[DLC_FIN_SPREAD],
              .max_rel = f->v[DLC_FIN_MAX_REL],
              .max_ulp = f->v[DLC_FIN_MAX_ULP],
              .width = f->v[DLC_FIN_SPREAD],
              .rel_infinite = isinf(f->v[DLC_FIN_MAX_REL])};
    const char *rule = rule_of ? rule_of(user, f->name) : NULL;
    dlc_tolerance t;
    bool ok = rule && dlc_tolerance_parse(rule, &t) == DL_OK;
    print_row(out, f->name, &n, ok ? rule : NULL, ok ? margin(&t, &n, NULL, NULL) : 0,
              ok && t.kind == DLC_TOL_CLOSE);
  }
}
