/* The JUnit XML report (the Jenkins/Ant dialect, tests/data/junit.xsd). */
#include "report/report.h"

#include "report/format.h"

#include <math.h>
#include <string.h>

static void attr(FILE *f, const char *name, const char *value) {
  fprintf(f, " %s=\"", name);
  dlc_xml_text(f, value, true);
  fputc('"', f);
}

/* xs:decimal: never NaN or negative. */
static void time_attr(FILE *f, double seconds) {
  fprintf(f, " time=\"%.3f\"", isfinite(seconds) && seconds > 0 ? seconds : 0.0);
}

/* The structured evidence, one "key: value" per line, where it applies. */
static void details(FILE *f, const dlc_verdict *v) {
  if (v->step >= 0) fprintf(f, "\nstep: %lld", (long long)v->step);
  if (v->tensor[0]) {
    fputs("\ntensor: ", f);
    dlc_xml_text(f, v->tensor, false);
  }
  if (v->layer[0]) {
    fputs("\nlayer: ", f);
    dlc_xml_text(f, v->layer, false);
  }
  if (isfinite(v->max_abs)) fprintf(f, "\nmax abs: %.6g", v->max_abs);
  if (isfinite(v->max_rel)) fprintf(f, "\nmax rel: %.6g", v->max_rel);
  if (v->max_ulp) fprintf(f, "\nmax ulp: %llu", (unsigned long long)v->max_ulp);
  if (isfinite(v->value)) fprintf(f, "\nvalue: %.9g", v->value);
  if (isfinite(v->threshold)) fprintf(f, "\nthreshold: %.9g", v->threshold);
}

/* status: "waived" for a waived failure (a passing testcase), else NULL */
static void open_case(FILE *f, const char *scenario, const char *name, double seconds,
                      const char *status) {
  fputs("    <testcase", f);
  attr(f, "name", name);
  char classname[DLC_NAME_MAX + 8];
  snprintf(classname, sizeof classname, "dlcheck.%s", scenario);
  attr(f, "classname", classname);
  time_attr(f, seconds);
  if (status) attr(f, "status", status);
  fputs(">\n", f);
}

/* <failure> or <error>: evidence in the message and, with details, the body. */
static void problem(FILE *f, const char *element, const char *type, const char *message,
                    const dlc_verdict *v) {
  fprintf(f, "      <%s", element);
  attr(f, "message", message);
  attr(f, "type", type);
  fputs(">", f);
  dlc_xml_text(f, message, false);
  details(f, v);
  fprintf(f, "</%s>\n", element);
}

static void system_out(FILE *f, const char *prefix, const dlc_verdict *v) {
  fputs("      <system-out>", f);
  dlc_xml_text(f, prefix, false);
  dlc_xml_text(f, v->evidence, false);
  details(f, v);
  fputs("</system-out>\n", f);
}

static void skipped(FILE *f, const char *message) {
  fputs("      <skipped", f);
  attr(f, "message", message);
  fputs("/>\n", f);
}

static void verdict_case(FILE *f, const char *scenario, const char *name, const dlc_verdict *v) {
  open_case(f, scenario, name, v->seconds, v->kind == DLC_WAIVED ? "waived" : NULL);
  switch (v->kind) {
  case DLC_FAIL: problem(f, "failure", "FAIL", v->evidence, v); break;
  case DLC_ERROR: problem(f, "error", "ERROR", v->evidence, v); break;
  case DLC_EXPECTED_DIVERGENCE: system_out(f, "expected divergence: ", v); break;
  case DLC_PASS: system_out(f, "", v); break;
  case DLC_SKIP: skipped(f, v->evidence); break;
  case DLC_WAIVED: system_out(f, "waived failure (it does not fail the run): ", v); break;
  }
  fputs("    </testcase>\n", f);
}

static void golden_case(FILE *f, const dlc_scenario_result *r) {
  if (r->golden_present) {
    verdict_case(f, r->scenario, "golden", &r->golden);
    return;
  }
  open_case(f, r->scenario, "golden", 0, NULL);
  char how[DLC_NAME_MAX + 64];
  snprintf(how, sizeof how, "no golden: record with dlcheck record scenarios/%s", r->scenario);
  skipped(f, r->golden.evidence[0] ? r->golden.evidence : how);
  fputs("    </testcase>\n", f);
}

static void pitfall_case(FILE *f, const char *scenario, const dlc_pitfall_outcome *p) {
  char name[DLC_NAME_MAX + 40];
  if (p->variant[0] && strcmp(p->variant, p->pitfall) != 0)
    snprintf(name, sizeof name, "pitfall %s (%s)", p->pitfall, p->variant);
  else snprintf(name, sizeof name, "pitfall %s", p->pitfall[0] ? p->pitfall : p->variant);
  open_case(f, scenario, name, p->verdict.seconds, NULL);
  const char *check = p->verdict.check[0] ? p->verdict.check : "?";
  if (p->caught) {
    char prefix[DLC_NAME_MAX + 16];
    snprintf(prefix, sizeof prefix, "caught by %s: ", check);
    system_out(f, prefix, &p->verdict);
  } else {
    char message[sizeof p->verdict.evidence + sizeof p->description + 3 * DLC_NAME_MAX];
    snprintf(message, sizeof message, "not caught: check %s gave %s, it must fail on %s%s%s. %s",
             check, dlc_verdict_name(p->verdict.kind), p->variant, p->description[0] ? ": " : "",
             p->description, p->verdict.evidence);
    problem(f, "failure", "pitfall missed", message, &p->verdict);
  }
  fputs("    </testcase>\n", f);
}

typedef struct counts {
  int tests, failures, errors, skipped;
} counts;

static counts count_scenario(const dlc_scenario_result *r) {
  counts c = {.tests = r->nchecks + 1 + r->npitfalls};
  for (int i = 0; i < r->nchecks; i++) {
    c.failures += r->checks[i].kind == DLC_FAIL;
    c.errors += r->checks[i].kind == DLC_ERROR;
    c.skipped += r->checks[i].kind == DLC_SKIP;
  }
  if (!r->golden_present) c.skipped++;
  else {
    c.failures += r->golden.kind == DLC_FAIL;
    c.errors += r->golden.kind == DLC_ERROR;
  }
  for (int i = 0; i < r->npitfalls; i++) c.failures += !r->pitfalls[i].caught;
  return c;
}

static void property(FILE *f, const char *name, const char *value) {
  fputs("      <property", f);
  attr(f, "name", name);
  attr(f, "value", value);
  fputs("/>\n", f);
}

static void suite(FILE *f, const dlc_scenario_result *r, int id) {
  counts c = count_scenario(r);
  fputs("  <testsuite", f);
  attr(f, "name", r->scenario);
  fprintf(f, " tests=\"%d\" failures=\"%d\" errors=\"%d\" skipped=\"%d\"", c.tests, c.failures,
          c.errors, c.skipped);
  time_attr(f, r->seconds);
  fprintf(f, " id=\"%d\" package=\"dlcheck\">\n    <properties>\n", id);
  property(f, "backend", r->backend);
  property(f, "description", r->description);
  fputs("    </properties>\n", f);
  for (int i = 0; i < r->nchecks; i++)
    verdict_case(f, r->scenario, r->checks[i].check, &r->checks[i]);
  golden_case(f, r);
  for (int i = 0; i < r->npitfalls; i++) pitfall_case(f, r->scenario, &r->pitfalls[i]);
  fputs("  </testsuite>\n", f);
}

static void write_junit(FILE *f, const dlc_scenario_result *results, int n) {
  counts total = {0};
  double seconds = 0;
  for (int i = 0; i < n; i++) {
    counts c = count_scenario(&results[i]);
    total.tests += c.tests;
    total.failures += c.failures;
    total.errors += c.errors;
    if (isfinite(results[i].seconds) && results[i].seconds > 0) seconds += results[i].seconds;
  }
  fputs("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n", f);
  fprintf(f, "<testsuites name=\"dlcheck\" tests=\"%d\" failures=\"%d\" errors=\"%d\"", total.tests,
          total.failures, total.errors);
  time_attr(f, seconds);
  fputs(">\n", f);
  for (int i = 0; i < n; i++) suite(f, &results[i], i);
  fputs("</testsuites>\n", f);
}

dl_status dlc_report_junit(const char *path, const dlc_scenario_result *results, int n) {
  dlc_report_file rf;
  DL_TRY(dlc_report_file_open(&rf, path, "JUnit report", results, n));
  write_junit(rf.f, results, n);
  return dlc_report_file_close(&rf, DL_OK);
}
