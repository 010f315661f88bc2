/* The HTML report: one self-contained page (inline CSS and SVG, no
 * scripts, no external resources). It is also well-formed XML, so that
 * xmllint can check it. */
#include "report/report.h"

#include "report/format.h"
#include "report/svg_plot.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char style[] =
    "body{font-family:sans-serif;margin:1.5em;color:#222;max-width:1100px}"
    "table{border-collapse:collapse;margin:.5em 0 1em;width:100%}"
    "th,td{border:1px solid #ccc;padding:3px 6px;text-align:left;vertical-align:top;"
    "font-size:13px}"
    "th{background:#f3f3f3}td.num{text-align:right;white-space:nowrap}"
    "td.ev{white-space:pre-wrap;word-break:break-word}"
    ".pass{background:#e3f4e6}.fail,.error,.missed{background:#fbe1e1;font-weight:bold}"
    ".expected,.skip{background:#fff3d0}.caught{background:#e3f4e6}"
    ".waived{background:#e6e6f6;font-weight:bold}"
    ".badge{padding:1px 8px;border-radius:4px;font-size:14px}"
    "pre{background:#f6f6f6;padding:8px;white-space:pre-wrap;word-break:break-all;"
    "font-size:12px}"
    "svg{margin:4px 8px 8px 0;background:#fff}.note{color:#777}";

static void text(FILE *f, const char *s) { dlc_xml_text(f, s, false); }

static const char *kind_class(dlc_verdict_kind k) {
  switch (k) {
  case DLC_PASS: return "pass";
  case DLC_FAIL: return "fail";
  case DLC_EXPECTED_DIVERGENCE: return "expected";
  case DLC_ERROR: return "error";
  case DLC_SKIP: return "skip";
  case DLC_WAIVED: return "waived";
  }
  return "error";
}

static void num_cell(FILE *f, double v) {
  if (isfinite(v)) fprintf(f, "<td class=\"num\">%.3g</td>", v);
  else if (isinf(v)) fprintf(f, "<td class=\"num\">%sinf</td>", v < 0 ? "-" : "");
  else fputs("<td class=\"num\"></td>", f);
}

/* step, tensor and layer where the check found its difference */
static void where_cell(FILE *f, const dlc_verdict *v) {
  fputs("<td>", f);
  bool any = false;
  if (v->step >= 0) {
    fprintf(f, "step %lld", (long long)v->step);
    any = true;
  }
  if (v->tensor[0]) {
    fputs(any ? "<br/>" : "", f);
    text(f, v->tensor);
    any = true;
  }
  if (v->layer[0]) {
    fputs(any ? "<br/>layer " : "layer ", f);
    text(f, v->layer);
  }
  fputs("</td>", f);
}

static void verdict_row(FILE *f, const char *name, const char *cls, const char *label,
                        const dlc_verdict *v, const char *evidence) {
  fputs("<tr><td>", f);
  text(f, name);
  fprintf(f, "</td><td class=\"%s\">%s</td><td class=\"ev\">", cls, label);
  text(f, evidence);
  fputs("</td>", f);
  where_cell(f, v);
  num_cell(f, v->max_abs);
  num_cell(f, v->max_rel);
  if (v->max_ulp) fprintf(f, "<td class=\"num\">%llu</td>", (unsigned long long)v->max_ulp);
  else fputs("<td class=\"num\"></td>", f);
  num_cell(f, v->value);
  num_cell(f, v->threshold);
  fputs("</tr>\n", f);
}

static void checks_table(FILE *f, const dlc_scenario_result *r) {
  fputs("<table><tr><th>check</th><th>verdict</th><th>evidence</th><th>where</th>"
        "<th>max abs</th><th>max rel</th><th>max ulp</th><th>value</th><th>threshold</th>"
        "</tr>\n",
        f);
  for (int i = 0; i < r->nchecks; i++) {
    const dlc_verdict *v = &r->checks[i];
    verdict_row(f, v->check, kind_class(v->kind), dlc_report_label(v->kind), v, v->evidence);
  }
  if (r->golden_present)
    verdict_row(f, "golden", kind_class(r->golden.kind), dlc_report_label(r->golden.kind),
                &r->golden, r->golden.evidence);
  else {
    char how[DLC_NAME_MAX + 64];
    snprintf(how, sizeof how, "no golden: record with dlcheck record scenarios/%s", r->scenario);
    verdict_row(f, "golden", "skip", "SKIP", &r->golden,
                r->golden.evidence[0] ? r->golden.evidence : how);
  }
  fputs("</table>\n", f);
}

static void pitfalls_table(FILE *f, const dlc_scenario_result *r) {
  if (r->npitfalls == 0) return;
  fputs("<h3>Pitfalls</h3>\n<table><tr><th>pitfall</th><th>variant</th><th>what it does</th>"
        "<th>result</th><th>check</th><th>evidence</th></tr>\n",
        f);
  for (int i = 0; i < r->npitfalls; i++) {
    const dlc_pitfall_outcome *p = &r->pitfalls[i];
    fputs("<tr><td>", f);
    text(f, p->pitfall);
    fputs("</td><td>", f);
    text(f, p->variant);
    fputs("</td><td>", f);
    text(f, p->description);
    fprintf(f, "</td><td class=\"%s\">%s</td><td>", p->caught ? "caught" : "missed",
            p->caught ? "caught" : "MISSED");
    text(f, p->verdict.check);
    fprintf(f, " (%s)</td><td class=\"ev\">", dlc_verdict_name(p->verdict.kind));
    text(f, p->verdict.evidence);
    fputs("</td></tr>\n", f);
  }
  fputs("</table>\n", f);
}

/* ---- plots ------------------------------------------------------------------- */

/* The runs compared with the reference (traces[0]): the other runs, then
 * the golden. */
enum { MAX_PLOT_RUNS = 32 }; /* a scenario has at most 8 runs and a golden */

typedef struct runs {
  const dlc_trace *t[MAX_PLOT_RUNS];
  int n;
} runs;

static runs all_runs(const dlc_scenario_result *r) {
  runs all = {.n = 0};
  for (int i = 0; i < r->ntraces && all.n < MAX_PLOT_RUNS - 1; i++) all.t[all.n++] = &r->traces[i];
  if (r->golden_trace) all.t[all.n++] = r->golden_trace;
  return all;
}

static const char *run_name(const dlc_scenario_result *r, const dlc_trace *t) {
  if (t == r->golden_trace) return "golden";
  return t->run[0] ? t->run : "?";
}

static void loss_plot(FILE *f, const dlc_scenario_result *r, const runs *all) {
  dlc_plot_series s[MAX_PLOT_RUNS];
  int ns = 0;
  for (int i = 0; i < all->n; i++) {
    const dlc_series *loss = dlc_trace_series(all->t[i], "loss");
    if (!loss) continue;
    bool golden = all->t[i] == r->golden_trace;
    s[ns] = (dlc_plot_series){.name = run_name(r, all->t[i]),
                              .y = loss->v,
                              .n = loss->n,
                              .dashed = golden,
                              .color = golden ? "#222222" : NULL};
    if (!golden) s[ns].color = dlc_plot_color(i);
    ns++;
  }
  if (ns == 0) {
    fputs("<p class=\"note\">No run recorded a loss series.</p>\n", f);
    return;
  }
  dlc_svg_lines(f, &(dlc_plot){.title = "Loss per step", .xlabel = "step", .ylabel = "loss"}, s,
                ns);
}

/* |loss of run - loss of the reference| per step, for every other run. */
static dl_status divergence_plot(FILE *f, const dlc_scenario_result *r, const runs *all) {
  const dlc_series *ref = all->n ? dlc_trace_series(all->t[0], "loss") : NULL;
  if (!ref || all->n < 2) return DL_OK;
  dlc_plot_series s[MAX_PLOT_RUNS];
  double *buf[MAX_PLOT_RUNS];
  int ns = 0;
  dl_status st = DL_OK;
  for (int i = 1; i < all->n && !st; i++) {
    const dlc_series *loss = dlc_trace_series(all->t[i], "loss");
    if (!loss) continue;
    int64_t n = loss->n < ref->n ? loss->n : ref->n;
    buf[ns] = malloc((size_t)(n > 0 ? n : 1) * sizeof(double));
    if (!buf[ns]) {
      st = dl_fail(DL_ERR_NOMEM, "HTML report: out of memory for the divergence plot of %s",
                   r->scenario);
      break;
    }
    for (int64_t j = 0; j < n; j++) buf[ns][j] = fabs(loss->v[j] - ref->v[j]);
    bool golden = all->t[i] == r->golden_trace;
    s[ns] = (dlc_plot_series){.name = run_name(r, all->t[i]),
                              .y = buf[ns],
                              .n = n,
                              .dashed = golden,
                              .color = golden ? "#222222" : dlc_plot_color(i)};
    ns++;
  }
  if (!st && ns)
    dlc_svg_lines(f,
                  &(dlc_plot){.title = "Divergence from the reference run per step",
                              .xlabel = "step",
                              .ylabel = "|loss - reference loss|",
                              .logy = true},
                  s, ns);
  for (int i = 0; i < ns; i++) free(buf[i]);
  return st;
}

/* The first step at which both a and b have layer statistics. */
static bool common_stats(const dlc_trace *a, const dlc_trace *b, const dlc_layer_stats **sa,
                         const dlc_layer_stats **sb) {
  *sa = *sb = NULL;
  for (int i = 0; i < a->nstats; i++)
    for (int j = 0; j < b->nstats; j++)
      if (a->stats[i].step == b->stats[j].step && (!*sa || a->stats[i].step < (*sa)->step)) {
        *sa = &a->stats[i];
        *sb = &b->stats[j];
      }
  return *sa != NULL;
}

/* Mean of the layer called name in s; NaN if s has no such layer. */
static double layer_mean(const dlc_layer_stats *s, const char *name) {
  for (int l = 0; l < s->nlayers; l++)
    if (strcmp(s->layer[l], name) == 0) return s->stat[l][DLC_STAT_MEAN];
  return NAN;
}

/* For each layer of cats: |mean in b - mean in a| / |mean in a| (a is the
 * reference), matched by name; NaN where either lacks the layer. */
static void layer_divergence(const dlc_layer_stats *cats, const dlc_layer_stats *a,
                             const dlc_layer_stats *b, double *out) {
  for (int l = 0; l < cats->nlayers; l++) {
    double ra = layer_mean(a, cats->layer[l]), rb = layer_mean(b, cats->layer[l]);
    double d = fabs(rb - ra);
    if (isnan(d)) out[l] = NAN;
    else out[l] = ra != 0 ? d / fabs(ra) : d == 0 ? 0 : INFINITY;
  }
}

static dl_status layer_plot(FILE *f, const dlc_scenario_result *r, const runs *all) {
  if (all->n < 2 || all->t[0]->nstats == 0) return DL_OK;
  const dlc_layer_stats *first = NULL;
  dlc_plot_series s[MAX_PLOT_RUNS];
  double *buf[MAX_PLOT_RUNS];
  char names[MAX_PLOT_RUNS][DLC_NAME_MAX + 24];
  int ns = 0;
  dl_status st = DL_OK;
  for (int i = 1; i < all->n; i++) {
    const dlc_layer_stats *sa, *sb;
    if (!common_stats(all->t[0], all->t[i], &sa, &sb)) continue;
    if (!first) first = sa;
    buf[ns] = malloc((size_t)(first->nlayers > 0 ? first->nlayers : 1) * sizeof(double));
    if (!buf[ns]) {
      st = dl_fail(DL_ERR_NOMEM, "HTML report: out of memory for the layer plot of %s",
                   r->scenario);
      break;
    }
    /* the categories are the first matched step's layers; others match by name */
    layer_divergence(first, sa, sb, buf[ns]);
    snprintf(names[ns], sizeof names[ns], "%s (step %lld)", run_name(r, all->t[i]),
             (long long)sb->step);
    bool golden = all->t[i] == r->golden_trace;
    s[ns] = (dlc_plot_series){.name = names[ns],
                              .y = buf[ns],
                              .n = first->nlayers,
                              .color = golden ? "#222222" : dlc_plot_color(i)};
    ns++;
  }
  if (!st && ns) {
    const char **cats = malloc((size_t)(first->nlayers > 0 ? first->nlayers : 1) * sizeof *cats);
    if (!cats) st = dl_fail(DL_ERR_NOMEM, "HTML report: out of memory for layer names");
    for (int l = 0; !st && l < first->nlayers; l++) cats[l] = first->layer[l];
    if (!st)
      dlc_svg_bars(f,
                   &(dlc_plot){.title = "Per-layer divergence of the output mean",
                               .xlabel = "layer",
                               .ylabel = "relative difference",
                               .logy = true,
                               .height = 300},
                   cats, first->nlayers, s, ns);
    free(cats);
  }
  for (int i = 0; i < ns; i++) free(buf[i]);
  return st;
}

/* One series of a calibrated golden's envelope: the run's values over the
 * band c +- widen * h (the gate's own bounds, envelope.h), outside steps
 * circled. */
static dl_status band_plot(FILE *f, const dlc_scenario_result *r, const dlc_envelope_series *es) {
  const dlc_series *x = dlc_trace_series(&r->traces[0], es->name);
  if (!x || x->n != es->n || es->n == 0) return DL_OK; /* the verdict says why */
  double *lo = malloc((size_t)es->n * sizeof *lo), *hi = malloc((size_t)es->n * sizeof *hi);
  if (!lo || !hi) {
    free(lo);
    free(hi);
    return dl_fail(DL_ERR_NOMEM, "HTML report: out of memory for the %s band of %s", es->name,
                   r->scenario);
  }
  int64_t outside = 0;
  for (int64_t i = 0; i < es->n; i++) {
    double c, h = dlc_envelope_half_width(es, i, &c);
    lo[i] = c - r->envelope->widen * h;
    hi[i] = c + r->envelope->widen * h;
    outside += dlc_envelope_step_distance(es, i, x->v[i]) > r->envelope->widen;
  }
  char title[DLC_NAME_MAX + 96], name[DLC_NAME_MAX + 64];
  snprintf(title, sizeof title, "%s: %lld step%s outside the envelope", es->name,
           (long long)outside, outside == 1 ? "" : "s");
  snprintf(name, sizeof name, "%s; band: %d repeats widened %gx", r->traces[0].run,
           r->envelope->repeats, r->envelope->widen);
  dlc_plot_series s = {.name = name,
                       .y = x->v,
                       .n = x->n,
                       .band_lo = lo,
                       .band_hi = hi,
                       .color = dlc_plot_color(0)};
  dlc_svg_lines(f, &(dlc_plot){.title = title, .xlabel = "step", .ylabel = es->name}, &s, 1);
  free(lo);
  free(hi);
  return DL_OK;
}

/* The final tensors drawn: the worst ones, so that a model with hundreds
 * of tensors keeps the page small (report.json has every one). */
enum { FINAL_BARS_MAX = 24 };

typedef struct final_rank {
  int k;           /* in the envelope */
  double distance; /* of the run's tensor */
} final_rank;

/* Farthest first; ties in the envelope's order, so the page is the same
 * bytes everywhere (qsort is not stable). */
static int farthest_first(const void *a, const void *b) {
  const final_rank *x = a, *y = b;
  if (x->distance != y->distance) return x->distance < y->distance ? 1 : -1;
  return (x->k > y->k) - (x->k < y->k);
}

static void finals_bars(FILE *f, const dlc_scenario_result *r, const final_rank *rank, double *y,
                        const char **cats) {
  const dlc_envelope *e = r->envelope;
  int n = e->nfinals < FINAL_BARS_MAX ? e->nfinals : FINAL_BARS_MAX, outside = 0;
  for (int i = 0; i < e->nfinals; i++) outside += !(rank[i].distance <= e->widen);
  for (int i = 0; i < n; i++) {
    y[i] = rank[i].distance;
    cats[i] = e->finals[rank[i].k].name;
  }
  char title[96], gate[48], name[DLC_NAME_MAX + 64];
  int len = snprintf(title, sizeof title, "Final tensors: %d of %d outside the envelope", outside,
                     e->nfinals);
  if (n < e->nfinals) snprintf(title + len, sizeof title - (size_t)len, ", worst %d", n);
  snprintf(gate, sizeof gate, "gate: %g times the spread", e->widen);
  snprintf(name, sizeof name, "%s: max |x - reference| / the repeats' spread", r->traces[0].run);
  dlc_plot_series s = {.name = name, .y = y, .n = n, .color = dlc_plot_color(0)};
  dlc_svg_bars(f,
               &(dlc_plot){.title = title,
                           .xlabel = "final tensor",
                           .ylabel = "distance (spreads)",
                           .logy = true,
                           .height = 300,
                           .limit = e->widen,
                           .limit_label = gate},
               cats, n, &s, 1);
}

/* A calibrated golden's final tensors: each one's largest difference from
 * the reference over the repeats' spread (its distance, envelope.h) as a
 * bar, the gate at the widening. */
static dl_status finals_plot(FILE *f, const dlc_scenario_result *r) {
  const dlc_envelope *e = r->envelope;
  if (!r->golden_trace || e->nfinals == 0) return DL_OK;
  final_rank *rank = malloc((size_t)e->nfinals * sizeof *rank);
  double *y = malloc(FINAL_BARS_MAX * sizeof *y);
  const char **cats = malloc(FINAL_BARS_MAX * sizeof *cats);
  dl_status st = DL_OK;
  if (!rank || !y || !cats)
    st = dl_fail(DL_ERR_NOMEM, "HTML report: out of memory for the final tensors of %s",
                 r->scenario);
  for (int k = 0; !st && k < e->nfinals; k++)
    rank[k] = (final_rank){
        .k = k,
        .distance =
            dlc_envelope_final_distance(&e->finals[k], r->golden_trace, &r->traces[0]).distance};
  if (!st) {
    qsort(rank, (size_t)e->nfinals, sizeof *rank, farthest_first);
    finals_bars(f, r, rank, y, cats);
  }
  free(rank);
  free(y);
  free(cats);
  return st;
}

enum { DISTANCE_LINES_MAX = 8 };

/* Every series' distance from its band, step by step, on one log axis with
 * the gate: calibrated bands are often a few ulp wide, invisible beside the
 * values in the band plots, while the distance shows how close each step
 * came to the gate. */
static dl_status distance_plot(FILE *f, const dlc_scenario_result *r) {
  const dlc_envelope *e = r->envelope;
  dlc_plot_series s[DISTANCE_LINES_MAX];
  double *y[DISTANCE_LINES_MAX] = {0};
  int ns = 0;
  dl_status st = DL_OK;
  for (int k = 0; !st && k < e->nseries && ns < DISTANCE_LINES_MAX; k++) {
    const dlc_envelope_series *es = &e->series[k];
    const dlc_series *x = dlc_trace_series(&r->traces[0], es->name);
    if (!x || x->n != es->n || es->n == 0) continue;
    if (!(y[ns] = malloc((size_t)es->n * sizeof *y[ns]))) {
      st = dl_fail(DL_ERR_NOMEM, "HTML report: out of memory for the distances of %s", r->scenario);
      break;
    }
    for (int64_t i = 0; i < es->n; i++) y[ns][i] = dlc_envelope_step_distance(es, i, x->v[i]);
    s[ns] =
        (dlc_plot_series){.name = es->name, .y = y[ns], .n = es->n, .color = dlc_plot_color(ns)};
    ns++;
  }
  char gate[48];
  snprintf(gate, sizeof gate, "gate: %g half-widths", e->widen);
  if (!st && ns)
    dlc_svg_lines(f,
                  &(dlc_plot){.title = "Distance from the envelope per step",
                              .xlabel = "step",
                              .ylabel = "distance (half-widths)",
                              .logy = true,
                              .limit = e->widen,
                              .limit_label = gate},
                  s, ns);
  for (int i = 0; i < ns; i++) free(y[i]);
  return st;
}

static dl_status envelope_plots(FILE *f, const dlc_scenario_result *r) {
  if (!r->envelope || r->ntraces < 1) return DL_OK;
  DL_TRY(distance_plot(f, r));
  for (int k = 0; k < r->envelope->nseries; k++) DL_TRY(band_plot(f, r, &r->envelope->series[k]));
  return finals_plot(f, r);
}

/* ---- page -------------------------------------------------------------------- */

static dl_status scenario_section(FILE *f, const dlc_scenario_result *r, int index) {
  bool ok = dlc_result_ok(r);
  fprintf(f, "<section id=\"s%d\">\n<h2>", index);
  text(f, r->scenario);
  fprintf(f, " <span class=\"badge %s\">%s</span></h2>\n<p>", ok ? "pass" : "fail",
          ok ? "ok" : "FAILED");
  text(f, r->description);
  fputs("</p>\n<p class=\"note\">backend ", f);
  text(f, r->backend);
  fprintf(f, ", %.2f s</p>\n", isfinite(r->seconds) ? r->seconds : 0.0);
  if (r->skipped[0]) {
    fputs("<p>Not run: ", f);
    text(f, r->skipped);
    fputs("</p>\n", f);
  }
  for (int i = 0; i < r->ntraces; i++) { /* where each non-CPU or recorded run computed */
    const char *where = dlc_trace_note(&r->traces[i], "backend");
    bool recorded = where && strncmp(where, "trace: ", 7) == 0;
    if (!where || (!recorded && strcmp(r->traces[i].backend, "cpu") == 0)) continue;
    fputs("<p class=\"note\">", f);
    text(f, r->traces[i].run);
    fputs(": ", f);
    text(f, where);
    fputs("</p>\n", f);
  }
  checks_table(f, r);
  pitfalls_table(f, r);
  runs all = all_runs(r);
  if (all.n) {
    fputs("<h3>Plots</h3>\n<div>\n", f);
    loss_plot(f, r, &all);
    DL_TRY(divergence_plot(f, r, &all));
    DL_TRY(layer_plot(f, r, &all));
    DL_TRY(envelope_plots(f, r));
    fputs("</div>\n", f);
  }
  fputs("</section>\n", f);
  return DL_OK;
}

static void header(FILE *f, const dlc_scenario_result *results, int n, const char *env_json) {
  fprintf(f,
          "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\"/>\n"
          "<title>dlcheck report</title>\n<style>%s</style>\n</head>\n<body>\n"
          "<h1>dlcheck report</h1>\n",
          style);
  int passed, failed, skipped;
  dlc_report_count(results, n, &passed, &failed, &skipped);
  fprintf(f, "<p><span class=\"badge %s\">%d passed, %d failed", failed ? "fail" : "pass", passed,
          failed);
  if (skipped) fprintf(f, ", %d skipped", skipped);
  fprintf(f, "</span> in %d scenario%s</p>\n<ul>\n", n, n == 1 ? "" : "s");
  for (int i = 0; i < n; i++) {
    fprintf(f, "<li><a href=\"#s%d\">", i);
    text(f, results[i].scenario);
    fprintf(f, "</a> %s</li>\n", dlc_result_ok(&results[i]) ? "ok" : "FAILED");
  }
  fputs("</ul>\n<h2>Environment</h2>\n", f);
  if (env_json && env_json[0]) {
    fputs("<pre>", f);
    text(f, env_json);
    fputs("</pre>\n", f);
  } else fputs("<p class=\"note\">No environment fingerprint was recorded.</p>\n", f);
}

static dl_status write_html(FILE *f, const dlc_scenario_result *results, int n,
                            const char *env_json) {
  header(f, results, n, env_json);
  for (int i = 0; i < n; i++) DL_TRY(scenario_section(f, &results[i], i));
  fputs("</body>\n</html>\n", f);
  return DL_OK;
}

dl_status dlc_report_html(const char *path, const dlc_scenario_result *results, int n,
                          const char *env_json) {
  dlc_report_file rf;
  DL_TRY(dlc_report_file_open(&rf, path, "HTML report", results, n));
  return dlc_report_file_close(&rf, write_html(rf.f, results, n, env_json));
}
