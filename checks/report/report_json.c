/* The JSON report (structure documented in report.h). */
#include "report/report.h"

#include "report/format.h"

#include "judge/catalogue.h"
#include "trace/json.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- a small pretty-printing JSON writer --------------------------------- */

typedef struct jw {
  FILE *f;
  int depth;
  bool first;       /* no member written yet at this depth */
  dl_status status; /* the first failure: write_json returns it */
} jw;

/* Strings are quoted and escaped by jansson (trace/json.h). */
static void jw_string(jw *w, const char *s) {
  if (w->status == DL_OK) w->status = dlc_json_write_text(w->f, s, "JSON report");
}

/* Separator, new line, indentation and the key (NULL inside arrays). */
static void jw_key(jw *w, const char *key) {
  fputs(w->first ? "\n" : ",\n", w->f);
  fprintf(w->f, "%*s", 2 * w->depth, "");
  if (key) {
    jw_string(w, key);
    fputs(": ", w->f);
  }
  w->first = false;
}

static void jw_open(jw *w, const char *key, char bracket) {
  jw_key(w, key);
  fputc(bracket, w->f);
  w->depth++;
  w->first = true;
}

static void jw_close(jw *w, char bracket) {
  w->depth--;
  if (!w->first) fprintf(w->f, "\n%*s", 2 * w->depth, "");
  fputc(bracket, w->f);
  w->first = false;
}

static void jw_str(jw *w, const char *key, const char *s) {
  jw_key(w, key);
  jw_string(w, s);
}

/* "" is null: the field does not apply. */
static void jw_str_or_null(jw *w, const char *key, const char *s) {
  jw_key(w, key);
  if (s[0]) jw_string(w, s);
  else fputs("null", w->f);
}

/* The fewest significant digits that read back as the same double. */
static void jw_num(jw *w, const char *key, double x) {
  jw_key(w, key);
  if (!isfinite(x)) {
    fputs("null", w->f);
    return;
  }
  char buf[40];
  for (int prec = 1; prec <= 17; prec++) {
    snprintf(buf, sizeof buf, "%.*g", prec, x);
    if (strtod(buf, NULL) == x) break;
  }
  fputs(buf, w->f);
}

static void jw_int(jw *w, const char *key, long long x) {
  jw_key(w, key);
  fprintf(w->f, "%lld", x);
}

static void jw_bool(jw *w, const char *key, bool b) {
  jw_key(w, key);
  fputs(b ? "true" : "false", w->f);
}

/* ---- the report ---------------------------------------------------------- */

static const char *verdict_key(dlc_verdict_kind k) {
  switch (k) {
  case DLC_PASS: return "pass";
  case DLC_FAIL: return "fail";
  case DLC_EXPECTED_DIVERGENCE: return "expected_divergence";
  case DLC_ERROR: return "error";
  case DLC_SKIP: return "not_tested";
  case DLC_WAIVED: return "waived";
  }
  return "unknown";
}

/* The structured evidence shared by checks, the golden and pitfalls. */
static void evidence_fields(jw *w, const dlc_verdict *v) {
  jw_str(w, "verdict", verdict_key(v->kind));
  jw_str(w, "evidence", v->evidence);
  if (v->step >= 0) jw_int(w, "step", (long long)v->step);
  else jw_num(w, "step", NAN);
  jw_str_or_null(w, "tensor", v->tensor);
  jw_str_or_null(w, "layer", v->layer);
  jw_num(w, "max_abs", v->max_abs);
  jw_num(w, "max_rel", v->max_rel);
  jw_key(w, "max_ulp");
  if (v->max_ulp == 0 && isnan(v->max_abs)) fputs("null", w->f); /* nothing compared */
  else fprintf(w->f, "%llu", (unsigned long long)v->max_ulp);
  jw_num(w, "value", v->value);
  jw_num(w, "threshold", v->threshold);
  jw_str_or_null(w, "waiver", v->waiver);
}

static void verdict_object(jw *w, const char *key, const dlc_verdict *v) {
  jw_open(w, key, '{');
  jw_str(w, "name", v->check);
  evidence_fields(w, v);
  jw_open(w, "catalogue", '[');
  for (int i = 0; i < v->ncatalogue; i++) jw_str(w, NULL, v->catalogue[i]);
  jw_close(w, ']');
  jw_num(w, "seconds", v->seconds);
  jw_close(w, '}');
}

static void pitfall_object(jw *w, const dlc_pitfall_outcome *p) {
  jw_open(w, NULL, '{');
  jw_str(w, "id", p->pitfall);
  jw_str(w, "variant", p->variant);
  jw_str(w, "description", p->description);
  jw_bool(w, "caught", p->caught);
  jw_str(w, "check", p->verdict.check);
  evidence_fields(w, &p->verdict);
  jw_open(w, "others", '[');
  for (int i = 0; i < p->nothers; i++) verdict_object(w, NULL, &p->others[i]);
  jw_close(w, ']');
  jw_close(w, '}');
}

static void run_object(jw *w, const dlc_trace *t) {
  jw_open(w, NULL, '{');
  jw_str(w, "name", t->run);
  jw_str(w, "backend", t->backend);
  const char *where = dlc_trace_note(t, "backend"); /* device, libraries, algorithms */
  if (where) jw_str(w, "backend_detail", where);
  const dlc_series *loss = dlc_trace_series(t, "loss");
  int64_t steps = loss ? loss->n : 0;
  for (int i = 0; !loss && i < t->nseries; i++)
    if (t->series[i].n > steps) steps = t->series[i].n;
  jw_int(w, "steps", (long long)steps);
  jw_open(w, "final", '{');
  for (int i = 0; i < t->nseries; i++)
    if (t->series[i].n > 0) jw_num(w, t->series[i].name, t->series[i].v[t->series[i].n - 1]);
  jw_close(w, '}');
  jw_open(w, "metrics", '{');
  for (int i = 0; i < t->nmetrics; i++) jw_num(w, t->metrics[i].name, t->metrics[i].value);
  jw_close(w, '}');
  jw_close(w, '}');
}

static void quantity_object(jw *w, const char *name, const char *kind, dlc_envelope_distance d,
                            double widen) {
  jw_open(w, NULL, '{');
  jw_str(w, "name", name);
  jw_str(w, "kind", kind);
  jw_num(w, "distance", d.distance);
  if (d.step >= 0) jw_int(w, "step", (long long)d.step);
  else jw_num(w, "step", NAN);
  jw_bool(w, "outside", !(d.distance <= widen));
  jw_close(w, '}');
}

/* A calibrated golden: how far the run (traces[0]) lies from the band of
 * each quantity, so that a dashboard sees which one is closest to failing. */
static void envelope_object(jw *w, const dlc_scenario_result *r) {
  const dlc_envelope *e = r->envelope;
  if (!e || !r->golden_trace || r->ntraces < 1) return;
  jw_open(w, "envelope", '{');
  jw_int(w, "repeats", e->repeats);
  jw_num(w, "widen", e->widen);
  jw_str(w, "perturbation", e->perturbation);
  jw_open(w, "quantities", '[');
  for (int k = 0; k < e->nseries; k++)
    quantity_object(w, e->series[k].name, "series",
                    dlc_envelope_series_distance(&e->series[k], &r->traces[0]), e->widen);
  for (int k = 0; k < e->nfinals; k++)
    quantity_object(w, e->finals[k].name, "final",
                    dlc_envelope_final_distance(&e->finals[k], r->golden_trace, &r->traces[0]),
                    e->widen);
  jw_close(w, ']');
  jw_close(w, '}');
}

static void scenario_object(jw *w, const dlc_scenario_result *r) {
  jw_open(w, NULL, '{');
  jw_str(w, "name", r->scenario);
  jw_str(w, "description", r->description);
  jw_str(w, "backend", r->backend);
  jw_bool(w, "ok", dlc_result_ok(r));
  if (r->skipped[0]) jw_str(w, "skipped", r->skipped);
  double checks_seconds = 0;
  jw_open(w, "checks", '[');
  for (int i = 0; i < r->nchecks; i++) {
    verdict_object(w, NULL, &r->checks[i]);
    if (isfinite(r->checks[i].seconds)) checks_seconds += r->checks[i].seconds;
  }
  jw_close(w, ']');
  jw_open(w, "golden", '{');
  jw_bool(w, "present", r->golden_present);
  jw_str(w, "name", r->golden.check[0] ? r->golden.check : "golden");
  evidence_fields(w, &r->golden);
  jw_num(w, "seconds", r->golden.seconds);
  envelope_object(w, r);
  jw_close(w, '}');
  jw_open(w, "pitfalls", '[');
  for (int i = 0; i < r->npitfalls; i++) pitfall_object(w, &r->pitfalls[i]);
  jw_close(w, ']');
  jw_open(w, "runs", '[');
  for (int i = 0; i < r->ntraces; i++) run_object(w, &r->traces[i]);
  jw_close(w, ']');
  jw_open(w, "timing", '{');
  jw_num(w, "seconds", r->seconds);
  jw_num(w, "checks_seconds", checks_seconds);
  jw_close(w, '}');
  jw_close(w, '}');
}

/* The fingerprint is inserted as it is, once jansson has read it as JSON. */
static dl_status environment(jw *w, const char *env_json) {
  jw_key(w, "environment");
  const char *s = env_json ? env_json : "";
  while (*s == ' ' || *s == '\n' || *s == '\t' || *s == '\r') s++;
  if (!*s) {
    fputs("null", w->f);
    return DL_OK;
  }
  json_t *parsed;
  dl_status st = dlc_json_parse(s, "JSON report: the environment fingerprint", &parsed);
  if (st != DL_OK) return st;
  json_decref(parsed);
  fputs(s, w->f);
  return DL_OK;
}

/* Whether a check of any result names catalogue ID `id`. */
static bool id_named(const dlc_scenario_result *results, int n, const char *id) {
  for (int i = 0; i < n; i++)
    for (int c = 0; c < results[i].nchecks; c++)
      for (int k = 0; k < results[i].checks[c].ncatalogue; k++)
        if (strcmp(results[i].checks[c].catalogue[k], id) == 0) return true;
  return false;
}

/* The catalogue entries the checks name, so that a reader of the report
 * (a dashboard, the audit's summary) needs no other source. */
static void catalogue_object(jw *w, const dlc_scenario_result *results, int n) {
  jw_open(w, "catalogue", '{');
  for (int i = 0; i < dlc_catalogue_count(); i++) {
    const dlc_pitfall_entry *p = dlc_catalogue_at(i);
    if (!id_named(results, n, p->id)) continue;
    jw_open(w, p->id, '{');
    jw_str(w, "mistake", p->mistake);
    jw_str(w, "effect", p->effect);
    jw_str(w, "fix", p->fix);
    jw_close(w, '}');
  }
  jw_close(w, '}');
}

static dl_status write_json(FILE *f, const dlc_scenario_result *results, int n,
                            const char *env_json) {
  jw w = {.f = f, .first = true};
  fputc('{', f);
  w.depth = 1;
  jw_str(&w, "format", "dlcheck-report");
  jw_int(&w, "format_version", 1);
  DL_TRY(environment(&w, env_json));
  int passed, failed, skipped;
  dlc_report_count(results, n, &passed, &failed, &skipped);
  bool ok = true;
  double seconds = 0;
  for (int i = 0; i < n; i++) {
    ok = ok && dlc_result_ok(&results[i]);
    seconds += results[i].seconds;
  }
  jw_open(&w, "summary", '{');
  jw_int(&w, "scenarios", n);
  jw_int(&w, "passed", passed);
  jw_int(&w, "failed", failed);
  jw_int(&w, "skipped", skipped);
  jw_int(&w, "waived", dlc_report_waived(results, n));
  jw_bool(&w, "ok", ok);
  jw_num(&w, "seconds", seconds);
  jw_close(&w, '}');
  catalogue_object(&w, results, n);
  jw_open(&w, "scenarios", '[');
  for (int i = 0; i < n; i++) scenario_object(&w, &results[i]);
  jw_close(&w, ']');
  jw_close(&w, '}');
  fputc('\n', f);
  return w.status;
}

dl_status dlc_report_json(const char *path, const dlc_scenario_result *results, int n,
                          const char *env_json) {
  dlc_report_file rf;
  DL_TRY(dlc_report_file_open(&rf, path, "JSON report", results, n));
  return dlc_report_file_close(&rf, write_json(rf.f, results, n, env_json));
}
