/* Envelopes of repeated runs: building, the gate, recommendations. */
#include "judge/envelope.h"

#include "judge/checks_impl.h"
#include "judge/tolerance.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

const char *const dlc_envelope_series_columns[DLC_ENV_COLS] = {"min", "max", "mean", "std"};
const char *const dlc_envelope_final_columns[DLC_FIN_COLS] = {"spread", "max_rel", "max_ulp"};

void dlc_envelope_free(dlc_envelope *e) {
  for (int i = 0; i < e->nseries; i++) free(e->series[i].v);
  free(e->series);
  free(e->finals);
  memset(e, 0, sizeof *e);
}

/* One step over the repeats (their series of one name): min, max, mean,
 * population std. */
static void step_stats(const dlc_series *const *rep, int n, int64_t s, double out[DLC_ENV_COLS]) {
  double mn = INFINITY, mx = -INFINITY, sum = 0, sq = 0;
  for (int i = 0; i < n; i++) {
    double x = rep[i]->v[s];
    mn = fmin(mn, x);
    mx = fmax(mx, x);
    sum += x;
  }
  double mean = sum / n;
  for (int i = 0; i < n; i++) {
    double d = rep[i]->v[s] - mean;
    sq += d * d;
  }
  out[DLC_ENV_MIN] = mn;
  out[DLC_ENV_MAX] = mx;
  out[DLC_ENV_MEAN] = mean;
  out[DLC_ENV_STD] = sqrt(sq / n);
}

/* Series s of the reference in every repeat, looked up once, into rep. */
static dl_status repeats_of(const dlc_trace *runs, int n, const dlc_series *s,
                            const dlc_series **rep) {
  rep[0] = s;
  for (int i = 1; i < n; i++) {
    rep[i] = dlc_trace_series(&runs[i], s->name);
    if (!rep[i] || rep[i]->n != s->n)
      return dl_fail(DL_ERR_INVALID,
                     "envelope: repeat %d (%s) %s series %s: the repeats "
                     "must be the same run",
                     i, runs[i].run, rep[i] ? "has another length of" : "lacks", s->name);
  }
  return DL_OK;
}

static dl_status build_series(const dlc_trace *runs, int n, dlc_envelope *e) {
  const dlc_trace *ref = &runs[0];
  e->series = calloc((size_t)(ref->nseries ? ref->nseries : 1), sizeof *e->series);
  const dlc_series **rep = malloc((size_t)n * sizeof *rep);
  dl_status st = e->series && rep ? DL_OK : dl_fail(DL_ERR_NOMEM, "envelope: out of memory");
  for (int k = 0; !st && k < ref->nseries; k++) {
    const dlc_series *s = &ref->series[k];
    st = repeats_of(runs, n, s, rep);
    if (st) break;
    dlc_envelope_series *es = &e->series[e->nseries];
    snprintf(es->name, sizeof es->name, "%s", s->name);
    es->n = s->n;
    es->v = calloc((size_t)(s->n ? s->n : 1), sizeof *es->v);
    if (!es->v) {
      st = dl_fail(DL_ERR_NOMEM, "envelope: out of memory for series %s", s->name);
      break;
    }
    e->nseries++;
    for (int64_t t = 0; t < s->n; t++) step_stats(rep, n, t, es->v[t]);
  }
  free(rep);
  return st;
}

static dl_status build_finals(const dlc_trace *runs, int n, dlc_envelope *e) {
  const dlc_trace *ref = &runs[0];
  dlc_tolerance exact = dlc_tolerance_bitwise();
  e->finals = calloc((size_t)(ref->nfinals ? ref->nfinals : 1), sizeof *e->finals);
  if (!e->finals) return dl_fail(DL_ERR_NOMEM, "envelope: out of memory");
  for (int k = 0; k < ref->nfinals; k++) {
    dlc_envelope_final *f = &e->finals[k];
    snprintf(f->name, sizeof f->name, "%s", ref->finals[k].name);
    for (int i = 1; i < n; i++) {
      const dl_tensor *o = dlc_trace_final(&runs[i], f->name);
      dlc_diff d = o ? dlc_compare_tensors(o, &ref->finals[k].t, &exact) : (dlc_diff){.n = -1};
      if (d.n < 0)
        return dl_fail(DL_ERR_INVALID,
                       "envelope: repeat %d (%s) %s final tensor %s: the "
                       "repeats must be the same run",
                       i, runs[i].run, o ? "has another shape or dtype of" : "lacks", f->name);
      f->v[DLC_FIN_SPREAD] = fmax(f->v[DLC_FIN_SPREAD], d.max_abs);
      f->v[DLC_FIN_MAX_REL] = fmax(f->v[DLC_FIN_MAX_REL], d.max_rel);
      f->v[DLC_FIN_MAX_ULP] = fmax(f->v[DLC_FIN_MAX_ULP], (double)d.max_ulp);
    }
    e->nfinals = k + 1;
  }
  return DL_OK;
}

dl_status dlc_envelope_build(const dlc_trace *runs, int n, double widen, const char *perturbation,
                             dlc_envelope *out) {
  memset(out, 0, sizeof *out);
  if (n < DLC_ENVELOPE_MIN_REPEATS)
    return dl_fail(DL_ERR_INVALID,
                   "envelope: %d repeats given; at least %d are needed for a "
                   "spread worth the name",
                   n, DLC_ENVELOPE_MIN_REPEATS);
  if (!(widen >= 1.0) || !isfinite(widen))
    return dl_fail(DL_ERR_INVALID, "envelope: widening factor %g; it must be a number >= 1", widen);
  out->repeats = n;
  out->widen = widen;
  snprintf(out->perturbation, sizeof out->perturbation, "%s", perturbation ? perturbation : "");
  dl_status s = build_series(runs, n, out);
  if (!s) s = build_finals(runs, n, out);
  if (s) dlc_envelope_free(out);
  return s;
}

/* ---- the gate ------------------------------------------------------------------ */

typedef struct outside {
  double worst; /* largest distance seen */
  char worst_what[DLC_NAME_MAX];
  int64_t worst_step;
  int64_t first_step; /* first step outside (-1: none, or a final tensor) */
  char first_what[DLC_NAME_MAX];
  bool failed;
} outside;

/* |x - c| / h, infinite where a quantity with a zero band moved. */
static double distance(double x, double c, double h) {
  double dev = fabs(x - c);
  if (isnan(dev)) return INFINITY;
  if (h > 0) return dev / h;
  return dev > 0 ? INFINITY : 0;
}

static void note(outside *o, double d, double widen, const char *what, int64_t step) {
  if (d > o->worst || !o->worst_what[0]) {
    o->worst = d;
    o->worst_step = step;
    snprintf(o->worst_what, sizeof o->worst_what, "%s", what);
  }
  if (d <= widen) return;
  bool earlier = step >= 0 && (o->first_step < 0 || step < o->first_step);
  if (!o->failed || earlier) {
    o->first_step = step;
    snprintf(o->first_what, sizeof o->first_what, "%s", what);
  }
  o->failed = true;
}

/* At least one float32 ULP (dlc_ulp32), so that a value the repeats happened
 * to round alike may still round one way or the other (0 stays exact:
 * counters, flags, skipped steps). */
double dlc_envelope_half_width(const dlc_envelope_series *es, int64_t i, double *c) {
  const double *b = es->v[i];
  *c = 0.5 * (b[DLC_ENV_MIN] + b[DLC_ENV_MAX]);
  return fmax(0.5 * (b[DLC_ENV_MAX] - b[DLC_ENV_MIN]), dlc_ulp32(*c));
}

double dlc_envelope_step_distance(const dlc_envelope_series *es, int64_t i, double x) {
  const double *b = es->v[i];
  /* Every repeat NaN: fmin/fmax skipped them all, leaving an empty band. */
  if (b[DLC_ENV_MIN] > b[DLC_ENV_MAX]) return isnan(x) ? 0 : INFINITY;
  /* An infinite edge (a step the loss scaler skipped has grad_norm inf)
   * leaves no centre or half-width: the band holds what lies between its
   * edges, inf included when a repeat was inf. */
  if (isinf(b[DLC_ENV_MIN]) || isinf(b[DLC_ENV_MAX]))
    return x >= b[DLC_ENV_MIN] && x <= b[DLC_ENV_MAX] ? 0 : INFINITY;
  double c, h = dlc_envelope_half_width(es, i, &c);
  return distance(x, c, h);
}

dlc_envelope_distance dlc_envelope_series_distance(const dlc_envelope_series *es,
                                                   const dlc_trace *t) {
  const dlc_series *s = dlc_trace_series(t, es->name);
  dlc_envelope_distance d = {.distance = 0, .step = -1};
  if (!s || s->n != es->n) return (dlc_envelope_distance){.distance = INFINITY, .step = -1};
  for (int64_t i = 0; i < s->n; i++) {
    double x = dlc_envelope_step_distance(es, i, s->v[i]);
    if (x > d.distance || d.step < 0) d = (dlc_envelope_distance){.distance = x, .step = i};
  }
  return d;
}

/* The final tensor's largest |x - reference| and its distance; d->n < 0
 * where it cannot be compared. */
static double final_distance(const dlc_envelope_final *f, const dlc_trace *ref, const dlc_trace *t,
                             dlc_diff *d) {
  dlc_tolerance exact = dlc_tolerance_bitwise();
  const dl_tensor *x = dlc_trace_final(t, f->name), *r = dlc_trace_final(ref, f->name);
  *d = x && r ? dlc_compare_tensors(x, r, &exact) : (dlc_diff){.n = -1};
  if (d->n < 0) return INFINITY;
  return distance(d->max_abs, 0, fmax(f->v[DLC_FIN_SPREAD], dlc_ulp32(dlc_max_magnitude(r))));
}

dlc_envelope_distance dlc_envelope_final_distance(const dlc_envelope_final *f, const dlc_trace *ref,
                                                  const dlc_trace *t) {
  dlc_diff d;
  return (dlc_envelope_distance){.distance = final_distance(f, ref, t, &d), .step = -1};
}

static void check_series(const dlc_envelope *e, const dlc_trace *t, outside *o, dlc_verdict *v) {
  for (int k = 0; k < e->nseries; k++) {
    const dlc_envelope_series *es = &e->series[k];
    const dlc_series *s = dlc_trace_series(t, es->name);
    if (!s || s->n != es->n) {
      note(o, INFINITY, e->widen, es->name, -1);
      dlc_evidence(v, "series %s: %s. ", es->name, s ? "another step count" : "missing");
      continue;
    }
    bool told = false;
    for (int64_t i = 0; i < s->n; i++) {
      const double *b = es->v[i];
      double d = dlc_envelope_step_distance(es, i, s->v[i]);
      note(o, d, e->widen, es->name, i);
      if (d > e->widen && !told) {
        told = true;
        dlc_evidence(v,
                     "%s leaves the envelope at step %lld: %.9g vs [%.9g, %.9g] (mean %.9g, "
                     "std %.3g), %.3g half-widths from its centre. ",
                     es->name, (long long)i, s->v[i], b[DLC_ENV_MIN], b[DLC_ENV_MAX],
                     b[DLC_ENV_MEAN], b[DLC_ENV_STD], d);
      }
    }
  }
}

static void check_finals(const dlc_envelope *e, const dlc_trace *ref, const dlc_trace *t,
                         outside *o, dlc_verdict *v) {
  int bad = 0;
  for (int k = 0; k < e->nfinals; k++) {
    const dlc_envelope_final *f = &e->finals[k];
    dlc_diff d;
    double dist = final_distance(f, ref, t, &d);
    note(o, dist, e->widen, f->name, -1);
    if (dist <= e->widen || bad++) continue;
    if (d.n < 0) dlc_evidence(v, "%s: missing, or another shape or dtype. ", f->name);
    else
      dlc_evidence(v,
                   "%s is %.3g from the reference at most; the repeats spread %.3g "
                   "(%.3g times). ",
                   f->name, d.max_abs, f->v[DLC_FIN_SPREAD], dist);
  }
  if (bad > 1) dlc_evidence(v, "%d of %d final tensors outside. ", bad, e->nfinals);
}

dl_status dlc_envelope_check(const dlc_envelope *e, const dlc_trace *ref, const dlc_trace *t,
                             dlc_verdict *v) {
  if (e->repeats < 1)
    return dl_fail(DL_ERR_INVALID, "envelope check of %s: the golden holds no envelope", t->run);
  outside o = {.first_step = -1, .worst_step = -1};
  check_series(e, t, &o, v);
  check_finals(e, ref, t, &o, v);
  v->kind = o.failed ? DLC_FAIL : DLC_PASS;
  v->value = o.worst;
  v->threshold = e->widen;
  v->step = o.failed ? o.first_step : -1;
  snprintf(v->tensor, sizeof v->tensor, "%s", o.failed ? o.first_what : "");
  char at[48] = "";
  if (o.worst_step >= 0) snprintf(at, sizeof at, " at step %lld", (long long)o.worst_step);
  dlc_evidence(v,
               "%s the envelope of %d repeats (%s) widened %g times: largest distance %.3g "
               "half-widths, in %s%s.",
               o.failed ? "Outside" : "Within", e->repeats, e->perturbation, e->widen, o.worst,
               o.worst_what, at);
  return DL_OK;
}
