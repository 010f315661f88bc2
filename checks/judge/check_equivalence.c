/* Two runs that must compute the same thing: compare them quantity by
 * quantity and say where they first part and by how much.
 *
 * Run a is the reference (the tolerance's b, dlc_compare_*): every value,
 * name and ratio is written b first, a second, so that `dlcheck compare
 * A B` (B the reference) reads "A vs B" throughout. */
#include "judge/checks_impl.h"
#include "judge/divergence.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

typedef struct worst {
  bool ok;
  int64_t step; /* first diverging step over the series */
  char what[DLC_NAME_MAX];
  double max_abs, max_rel;
  uint64_t max_ulp;
} worst;

static void note_diff(worst *w, const dlc_diff *d, const char *what, int64_t step) {
  if (d->max_abs > w->max_abs || isnan(w->max_abs)) w->max_abs = d->max_abs;
  if (d->max_rel > w->max_rel || isnan(w->max_rel)) w->max_rel = d->max_rel;
  if (d->max_ulp > w->max_ulp) w->max_ulp = d->max_ulp;
  if (d->ok) return;
  if (w->ok || (step >= 0 && (w->step < 0 || step < w->step))) {
    w->step = step;
    snprintf(w->what, sizeof w->what, "%s", what);
  }
  w->ok = false;
}

static double series_distance(const dlc_series *sa, const dlc_series *sn, double *magnitude) {
  double d = 0;
  *magnitude = 0;
  for (int64_t i = 0; i < sa->n; i++) {
    d = fmax(d, fabs(sn->v[i] - sa->v[i])); /* both NaN: fmax keeps d */
    *magnitude = fmax(*magnitude, fabs(sa->v[i]));
    if (isnan(sn->v[i]) != isnan(sa->v[i])) return NAN;
  }
  return d;
}

/* The largest distance of quantity `name` of run x from its noise run n
 * (NaN when n does not hold it comparably), and x's largest magnitude. */
static double distance_from(const dlc_trace *x, const dlc_trace *n, const char *name, bool series,
                            double *magnitude) {
  *magnitude = 0;
  if (series) {
    const dlc_series *sx = dlc_trace_series(x, name), *sn = dlc_trace_series(n, name);
    return sx && sn && sn->n == sx->n ? series_distance(sx, sn, magnitude) : NAN;
  }
  const dl_tensor *tx = dlc_trace_final(x, name), *tn = dlc_trace_final(n, name);
  dlc_tolerance exact = dlc_tolerance_bitwise();
  dlc_diff d = tx && tn ? dlc_compare_tensors(tn, tx, &exact) : (dlc_diff){.n = -1};
  if (d.n < 0) return NAN;
  *magnitude = dlc_max_magnitude(tx);
  return d.max_abs;
}

/* The rule for one quantity: the spec's tolerance, or its band: widen x
 * its distance between a and the noise run (plus b's from noise_b), each
 * at least a float32 ulp of that run's largest value (false, with
 * evidence, when a noise run lacks the quantity). */
static bool rule_for(const dlc_check_spec *spec, const dlc_trace *const noise[2],
                     const dlc_trace *const runs[2], const char *name, bool series,
                     dlc_tolerance *t, dlc_verdict *v) {
  *t = spec->tol;
  if (!noise[0]) return true;
  double width = 0;
  for (int i = 0; i < 2 && noise[i]; i++) {
    double magnitude, d = distance_from(runs[i], noise[i], name, series, &magnitude);
    if (isnan(d)) {
      dlc_evidence(v, "%s: the noise run %s does not hold it comparably, so it has no band. ", name,
                   noise[i]->run);
      return false;
    }
    width += fmax(d, dlc_ulp32(magnitude));
  }
  *t = (dlc_tolerance){.kind = DLC_TOL_CLOSE, .rtol = 0, .atol = spec->noise_widen * width};
  return true;
}

static void compare_series(const dlc_check_spec *spec, const dlc_trace *a, const dlc_trace *b,
                           const dlc_trace *const noise[2], const char *name, worst *w,
                           dlc_verdict *v) {
  const dlc_series *sa = dlc_trace_series(a, name), *sb = dlc_trace_series(b, name);
  if (!sa || !sb || sa->n != sb->n) {
    w->ok = false;
    dlc_evidence(v, "series %s: %s. ", name,
                 !sa || !sb ? "missing from one run" : "different step counts");
    return;
  }
  dlc_tolerance tol;
  if (!rule_for(spec, noise, (const dlc_trace *const[2]){a, b}, name, true, &tol, v)) {
    w->ok = false;
    return;
  }
  dlc_diff d = dlc_compare_f64(sb->v, sa->v, sa->n, &tol);
  note_diff(w, &d, name, d.first_bad);
  if (!d.ok)
    dlc_evidence(v, "%s first differs at step %lld: %.9g (%s) vs %.9g (%s). ", name,
                 (long long)d.first_bad, d.a_at_first, b->run, d.b_at_first, a->run);
}

/* Final tensors whose names start with prefix ("param/"). */
static void compare_finals(const dlc_check_spec *spec, const dlc_trace *a, const dlc_trace *b,
                           const dlc_trace *const noise[2], const char *prefix, worst *w,
                           dlc_verdict *v) {
  int compared = 0, bad = 0;
  for (int i = 0; i < a->nfinals; i++) {
    const char *name = a->finals[i].name;
    if (strncmp(name, prefix, strlen(prefix)) != 0) continue;
    const dl_tensor *tb = dlc_trace_final(b, name);
    compared++;
    if (!tb) {
      bad++;
      w->ok = false;
      dlc_evidence(v, "%s is missing from %s. ", name, b->run);
      continue;
    }
    dlc_tolerance tol;
    if (!rule_for(spec, noise, (const dlc_trace *const[2]){a, b}, name, false, &tol, v)) {
      bad++;
      w->ok = false;
      continue;
    }
    dlc_diff d = dlc_compare_tensors(tb, &a->finals[i].t, &tol);
    note_diff(w, &d, name, -1);
    if (!d.ok && bad++ == 0) {
      char desc[512];
      dlc_diff_describe(&d, &tol, desc, sizeof desc);
      dlc_evidence(v, "%s differs (%s vs %s): %s. ", name, b->run, a->run, desc);
    }
  }
  if (bad > 1) dlc_evidence(v, "%d of %d %s tensors differ. ", bad, compared, prefix);
  for (int i = 0; compared == 0 && i < b->nfinals; i++)
    if (strncmp(b->finals[i].name, prefix, strlen(prefix)) == 0) {
      w->ok = false;
      dlc_evidence(v, "%s has %s tensors, %s none. ", b->run, prefix, a->run);
      break;
    }
}

/* The first step s and tensor j whose bits differ (from the per-step
 * digests; s < 0 when none do or they cannot tell). */
static void first_digest_difference(const dlc_trace *a, int64_t s, int j, dlc_verdict *v) {
  if (s < 0) return;
  dlc_evidence(v, "Bits first differ after step %lld in %s. ", (long long)s, a->digest_names[j]);
  if (v->step < 0 || s < v->step) v->step = s;
  if (!v->tensor[0]) snprintf(v->tensor, sizeof v->tensor, "%s", a->digest_names[j]);
}

/* The first layer whose output statistics differ: at the step the digests
 * first part where both runs recorded it (divergence.h), else at the first
 * step both have statistics for. */
static void first_layer_difference(const dlc_check_spec *spec, const dlc_trace *a,
                                   const dlc_trace *b, int64_t step, dlc_verdict *v) {
  if (step >= 0 && dlc_first_divergent_layer(&spec->tol, a, b, step, v)) return;
  for (int i = 0; step < 0 && i < a->nstats; i++)
    for (int j = 0; j < b->nstats; j++)
      if (a->stats[i].step == b->stats[j].step) {
        dlc_first_divergent_layer(&spec->tol, a, b, a->stats[i].step, v);
        return;
      }
}

static void gradient_ratio(const dlc_trace *a, const dlc_trace *b, dlc_verdict *v) {
  const dlc_series *ga = dlc_trace_series(a, "grad_norm"), *gb = dlc_trace_series(b, "grad_norm");
  if (!ga || !gb || ga->n < 1 || gb->n < 1 || ga->v[0] == 0) return;
  dlc_evidence(v, "Gradient norm at step 0: %.4g times as large in %s as in %s. ",
               gb->v[0] / ga->v[0], b->run, a->run);
}

dl_status dlc_check_equivalence(const dlc_check_spec *spec, const dlc_trace *traces, int n,
                                dlc_verdict *v) {
  const dlc_trace *a, *b, *noise[2] = {NULL, NULL};
  DL_TRY(dlc_check_runs(spec, traces, n, true, &a, &b));
  const char *names[2] = {spec->noise, spec->noise_b};
  for (int i = 0; i < 2; i++)
    if (names[i][0] && !(noise[i] = dlc_check_find_trace(traces, n, names[i])))
      return dl_fail(DL_ERR_INVALID, "check %s: no trace for its noise run '%s'", spec->name,
                     names[i]);
  worst w = {.ok = true, .step = -1, .max_abs = NAN, .max_rel = NAN};
  for (int q = 0; q < spec->nquantities; q++) {
    const char *name = spec->quantities[q];
    if (strcmp(name, "params") == 0) compare_finals(spec, a, b, noise, "param/", &w, v);
    else if (strcmp(name, "buffers") == 0) compare_finals(spec, a, b, noise, "buffer/", &w, v);
    else if (strcmp(name, "grads") == 0) compare_finals(spec, a, b, noise, "grad/", &w, v);
    else compare_series(spec, a, b, noise, name, &w, v);
  }
  v->max_abs = w.max_abs;
  v->max_rel = w.max_rel;
  v->max_ulp = w.max_ulp;
  v->step = w.step;
  snprintf(v->tensor, sizeof v->tensor, "%s", w.what);
  char tol[448];
  if (noise[1])
    snprintf(tol, sizeof tol, "bands of %g times each quantity's distances from %s and %s added",
             spec->noise_widen, noise[0]->run, noise[1]->run);
  else if (noise[0])
    snprintf(tol, sizeof tol, "bands of %g times each quantity's distance from %s",
             spec->noise_widen, noise[0]->run);
  else dlc_tolerance_describe(&spec->tol, tol, sizeof tol);
  if (w.ok) {
    v->kind = DLC_PASS;
    dlc_evidence(v, "%s and %s agree within %s (max abs %.3g, max rel %.3g, %llu ulp).", b->run,
                 a->run, tol, w.max_abs, w.max_rel, (unsigned long long)w.max_ulp);
    return DL_OK;
  }
  v->kind = spec->expect_divergence ? DLC_EXPECTED_DIVERGENCE : DLC_FAIL;
  int tensor = 0;
  int64_t step = dlc_first_digest_step(a, b, &tensor);
  first_digest_difference(a, step, tensor, v);
  first_layer_difference(spec, a, b, step, v);
  gradient_ratio(a, b, v);
  dlc_evidence(v, "Largest difference: max abs %.3g, max rel %.3g, %llu ulp (tolerance %s).",
               w.max_abs, w.max_rel, (unsigned long long)w.max_ulp, tol);
  return DL_OK;
}
