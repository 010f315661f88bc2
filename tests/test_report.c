/* The reports, on synthetic results built through the trace API: pass,
 * fail, expected-divergence and error verdicts, a caught and a missed
 * pitfall, a missing golden, evidence full of characters that need escaping
 * (< & " \ newline tab, UTF-8, a control character, a cut UTF-8 sequence)
 * and NaN/inf values.
 *
 * Each format is checked by an independent reader: Python's json module
 * for JSON, xmllint against tests/data/junit.xsd and Python's ElementTree
 * for JUnit, ElementTree for the HTML page (written as well-formed XML) and
 * its SVG coordinates. The text report is checked line by line. Nothing
 * numeric is compared with a tolerance: every value is written and read
 * back exactly (shortest round-trip digits). Python or xmllint missing:
 * those tests skip, saying so. */
#define _XOPEN_SOURCE 700 /* mkdtemp, open_memstream */

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "report/format.h"
#include "report/report.h"
#include "report/svg_plot.h"
#include "tmpdir.h"

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define PYTHON DL_PYTHON
#define XMLLINT "/usr/bin/xmllint"
#define SCHEMA DL_SOURCE_DIR "/tests/data/junit.xsd"

static char tmp_root[DL_TMP_PATH_MAX];

/* Evidence that needs escaping in every format. \x01 is legal (escaped) in
 * JSON and replaced by U+FFFD in XML, which cannot carry it. */
static const char nasty[] =
    "loss differs at step 3: <b>0.5 & 0.25</b> \"quoted\" back\\slash\nsecond line\tafter "
    "tab, \xc2\xb5=1e-3 \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x98\x80 ctrl\x01 end";
static const char nasty_xml[] =
    "loss differs at step 3: <b>0.5 & 0.25</b> \"quoted\" back\\slash\nsecond line\tafter "
    "tab, \xc2\xb5=1e-3 \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x98\x80 ctrl\xef\xbf\xbd end";
/* A three-byte character cut after its second byte, as a full evidence
 * buffer cuts it. */
static const char cut_utf8[] = "cut \xe6\x97";

/* ---- building results ---------------------------------------------------- */

static void set_verdict(dlc_verdict *v, const char *check, dlc_verdict_kind kind,
                        const char *evidence) {
  dlc_verdict_init(v, check, "", "");
  v->kind = kind;
  snprintf(v->evidence, sizeof v->evidence, "%s", evidence);
}

static void *xcalloc(size_t n, size_t size) {
  void *p = calloc(n, size);
  assert_non_null(p);
  return p;
}

/* A zeroed result named scenario with room for nchecks verdicts. */
static void new_result(dlc_scenario_result *r, const char *scenario, const char *backend,
                       int nchecks) {
  memset(r, 0, sizeof *r);
  snprintf(r->scenario, sizeof r->scenario, "%s", scenario);
  snprintf(r->backend, sizeof r->backend, "%s", backend);
  r->nchecks = nchecks;
  r->checks = xcalloc((size_t)nchecks, sizeof *r->checks);
}

/* loss 2.3 / (1 + 0.01 i) + slope * i; grad_norm 1 + i / 1000 */
static void fill_series(dlc_trace *t, int steps, double slope) {
  for (int i = 0; i < steps; i++) {
    assert_int_equal(dlc_trace_push(t, "loss", 2.3 / (1 + 0.01 * i) + slope * i), DL_OK);
    assert_int_equal(dlc_trace_push(t, "grad_norm", 1 + i / 1000.0), DL_OK);
  }
  assert_int_equal(dlc_trace_set_metric(t, "peak_bytes", 1048576), DL_OK);
}

static void push_means(dlc_trace *t, int64_t step, int nlayers, const double *means) {
  const char *names[32];
  double stat[32][DLC_STAT_COUNT];
  static char name_buf[32][32];
  for (int l = 0; l < nlayers; l++) {
    snprintf(name_buf[l], sizeof name_buf[l], "%d (%s)", l, l % 2 ? "relu" : "linear");
    names[l] = name_buf[l];
    for (int k = 0; k < DLC_STAT_COUNT; k++) stat[l][k] = 0.5 * k;
    stat[l][DLC_STAT_MEAN] = means[l];
  }
  assert_int_equal(dlc_trace_push_stats(t, step, nlayers, names,
                                        (const double(*)[DLC_STAT_COUNT])stat),
                   DL_OK);
}

/* grad_accum: every kind of verdict, a golden, a caught and a missed pitfall. */
static void build_full(dlc_scenario_result *r) {
  new_result(r, "grad_accum", "cpu", 4);
  snprintf(r->description, sizeof r->description,
           "Accumulating 4 micro-batches equals one batch of 4x (PyTorch & \"friends\").");
  r->seconds = 1.25;
  set_verdict(&r->checks[0], "params_match", DLC_PASS, "bitwise identical at every step");
  set_verdict(&r->checks[1], "loss_match", DLC_FAIL, nasty);
  r->checks[1].step = 3;
  snprintf(r->checks[1].tensor, sizeof r->checks[1].tensor, "param/0.weight");
  snprintf(r->checks[1].layer, sizeof r->checks[1].layer, "0 (linear)");
  r->checks[1].max_abs = 1.5e-3;
  r->checks[1].max_ulp = 812;
  r->checks[1].threshold = 0.1;
  r->checks[1].seconds = 0.02;
  set_verdict(&r->checks[2], "amp_vs_fp32", DLC_EXPECTED_DIVERGENCE,
              "expected divergence: max abs 2.1e-4 after 200 steps");
  r->checks[2].max_abs = 2.1e-4;
  set_verdict(&r->checks[3], "frozen", DLC_ERROR, cut_utf8);
  set_verdict(&r->golden, "golden", DLC_PASS, "matches golden/grad_accum/cpu.h5");
  r->golden_present = true;

  r->npitfalls = 2;
  r->pitfalls = xcalloc(2, sizeof *r->pitfalls);
  dlc_pitfall_outcome *g1 = &r->pitfalls[0], *g3 = &r->pitfalls[1];
  snprintf(g1->variant, sizeof g1->variant, "G1-no-zero-grad");
  snprintf(g1->pitfall, sizeof g1->pitfall, "G1");
  snprintf(g1->description, sizeof g1->description, "gradients are never zeroed");
  g1->caught = true;
  set_verdict(&g1->verdict, "params_match", DLC_FAIL, "param/0.weight differs at step 1");
  snprintf(g3->variant, sizeof g3->variant, "G3");
  snprintf(g3->pitfall, sizeof g3->pitfall, "G3");
  snprintf(g3->description, sizeof g3->description, "loss is summed, not averaged");
  set_verdict(&g3->verdict, "loss_match", DLC_PASS, "identical losses");
  g3->nothers = 1;
  g3->others = xcalloc(1, sizeof *g3->others);
  set_verdict(&g3->others[0], "params_match", DLC_PASS, "identical");

  r->ntraces = 3;
  r->traces = xcalloc(3, sizeof *r->traces);
  const char *runs[] = {"reference", "accumulated", "amp"};
  for (int i = 0; i < 3; i++) {
    dlc_trace_init(&r->traces[i], "grad_accum", runs[i]);
    fill_series(&r->traces[i], 200, i == 2 ? 1e-4 : 0);
  }
  dlc_series *amp_loss = (dlc_series *)dlc_trace_series(&r->traces[2], "loss");
  amp_loss->v[50] = NAN;
  amp_loss->v[51] = INFINITY;
  dlc_series *amp_gn = (dlc_series *)dlc_trace_series(&r->traces[2], "grad_norm");
  amp_gn->v[199] = NAN;
  const double ref_means[3] = {0.5, 0.25, 0.0}, amp_means[3] = {0.5001, 0.2501, 1e-3};
  push_means(&r->traces[0], 0, 3, ref_means);
  push_means(&r->traces[1], 0, 3, ref_means);
  push_means(&r->traces[1], 5, 3, amp_means);
  push_means(&r->traces[2], 0, 3, amp_means);

  r->golden_trace = xcalloc(1, sizeof *r->golden_trace);
  dlc_trace_init(r->golden_trace, "grad_accum", "reference");
  assert_int_equal(dlc_trace_copy(r->golden_trace, &r->traces[0]), DL_OK);
  r->golden_trace->series[0].v[10] += 1e-6;
}

/* single_step: no golden, no pitfalls, one-step runs that agree exactly. */
static void build_small(dlc_scenario_result *r) {
  new_result(r, "single_step", "", 1);
  set_verdict(&r->checks[0], "loss_match", DLC_PASS, "identical");
  set_verdict(&r->golden, "golden", DLC_ERROR, "");
  r->ntraces = 2;
  r->traces = xcalloc(2, sizeof *r->traces);
  dlc_trace_init(&r->traces[0], "single_step", "only");
  dlc_trace_init(&r->traces[1], "single_step", "same");
  assert_int_equal(dlc_trace_push(&r->traces[0], "loss", 0.7), DL_OK);
  assert_int_equal(dlc_trace_push(&r->traces[1], "loss", 0.7), DL_OK);
}

/* eight runs of 200 steps with 20 layers and a golden: the size budget */
static void build_large(dlc_scenario_result *r) {
  new_result(r, "eight_runs", "cpu", 1);
  set_verdict(&r->checks[0], "all_match", DLC_PASS, "ok");
  set_verdict(&r->golden, "golden", DLC_PASS, "ok");
  r->golden_present = true;
  r->ntraces = 8;
  r->traces = xcalloc(8, sizeof *r->traces);
  uint32_t lcg = 12345;
  double means[20];
  for (int i = 0; i < 8; i++) {
    char name[16];
    snprintf(name, sizeof name, "run%d", i);
    dlc_trace_init(&r->traces[i], "eight_runs", name);
    for (int s = 0; s < 200; s++) {
      lcg = lcg * 1664525u + 1013904223u;
      assert_int_equal(dlc_trace_push(&r->traces[i], "loss",
                                      2.0 / (1 + 0.02 * s) + i * (lcg >> 8) * 1e-12),
                       DL_OK);
    }
    for (int l = 0; l < 20; l++) means[l] = 0.1 * (l + 1) + 1e-7 * i * l;
    push_means(&r->traces[i], 0, i == 7 ? 19 : 20, means); /* run7 lacks a layer */
  }
  r->golden_trace = xcalloc(1, sizeof *r->golden_trace);
  dlc_trace_init(r->golden_trace, "eight_runs", "reference");
  assert_int_equal(dlc_trace_copy(r->golden_trace, &r->traces[0]), DL_OK);
}

typedef struct fixture {
  dlc_scenario_result r[2];
} fixture;

static int setup(void **state) {
  fixture *fx = calloc(1, sizeof *fx);
  if (!fx) return -1;
  build_full(&fx->r[0]);
  build_small(&fx->r[1]);
  *state = fx;
  return 0;
}

static int teardown(void **state) {
  fixture *fx = *state;
  for (int i = 0; i < 2; i++) dlc_result_free(&fx->r[i]);
  free(fx);
  return 0;
}

/* ---- helpers --------------------------------------------------------------- */

static char *read_file(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  assert_non_null(f);
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *buf = malloc((size_t)n + 1);
  assert_non_null(buf);
  assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
  buf[n] = '\0';
  fclose(f);
  if (len) *len = (size_t)n;
  return buf;
}

static void write_text(const char *path, const char *text) {
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  fputs(text, f);
  fclose(f);
}

static const char *tmp_path(char *buf, size_t len, const char *name) {
  snprintf(buf, len, "%s/%s", tmp_root, name);
  return buf;
}

static int run(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int run(const char *fmt, ...) {
  char cmd[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(cmd, sizeof cmd, fmt, ap);
  va_end(ap);
  return system(cmd);
}

static bool have(const char *tool) {
  if (access(tool, X_OK) == 0) return true;
  fprintf(stderr, "skipped: %s is not installed\n", tool);
  return false;
}

/* Runs a Python script (given as text) with arguments; 0 on success. */
static int python(const char *name, const char *script, const char *args) {
  char path[256];
  write_text(tmp_path(path, sizeof path, name), script);
  return run(PYTHON " %s %s", path, args);
}

static char *text_report(const dlc_scenario_result *r, int n, bool color, bool verbose) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  assert_non_null(f);
  assert_int_equal(dlc_report_text(f, r, n, color, verbose), DL_OK);
  fclose(f);
  return buf;
}

/* Characters (not bytes) of the longest line. */
static int longest_line(const char *s) {
  int longest = 0, cur = 0;
  for (; *s; s++) {
    if (*s == '\n') cur = 0;
    else if (((unsigned char)*s & 0xc0) != 0x80) cur++;
    if (cur > longest) longest = cur;
  }
  return longest;
}

static bool has_line_starting(const char *text, const char *prefix) {
  size_t n = strlen(prefix);
  for (const char *s = text; s; s = strchr(s, '\n') ? strchr(s, '\n') + 1 : NULL)
    if (strncmp(s, prefix, n) == 0) return true;
  return false;
}

/* ---- results ----------------------------------------------------------------- */

static void test_result_ok(void **state) {
  fixture *fx = *state;
  assert_false(dlc_result_ok(&fx->r[0])); /* a failed check */
  assert_true(dlc_result_ok(&fx->r[1]));  /* a missing golden is not a failure */

  dlc_verdict checks[2];
  set_verdict(&checks[0], "a", DLC_PASS, "");
  set_verdict(&checks[1], "b", DLC_EXPECTED_DIVERGENCE, "");
  dlc_pitfall_outcome p = {.caught = true};
  dlc_scenario_result r = {.checks = checks,
                           .nchecks = 2,
                           .pitfalls = &p,
                           .npitfalls = 1,
                           .golden_present = true};
  set_verdict(&r.golden, "golden", DLC_PASS, "");
  assert_true(dlc_result_ok(&r));
  p.caught = false;
  assert_false(dlc_result_ok(&r));
  p.caught = true;
  r.golden.kind = DLC_FAIL;
  assert_false(dlc_result_ok(&r));
  r.golden_present = false; /* its verdict no longer counts */
  assert_true(dlc_result_ok(&r));
  checks[1].kind = DLC_ERROR;
  assert_false(dlc_result_ok(&r));
}

static void test_result_free(void **state) {
  (void)state;
  dlc_scenario_result r;
  build_full(&r);
  dlc_result_free(&r);
  assert_null(r.checks);
  assert_null(r.traces);
  assert_null(r.golden_trace);
  assert_int_equal(r.npitfalls, 0);
  dlc_result_free(&r); /* twice is harmless */
  dlc_result_free(NULL);
}

/* ---- text ------------------------------------------------------------------- */

static void test_text_plain(void **state) {
  fixture *fx = *state;
  char *out = text_report(fx->r, 2, false, false);
  assert_null(strchr(out, '\x1b'));
  assert_null(strchr(out, '\t'));
  assert_null(strchr(out, '\x01'));
  assert_true(has_line_starting(out, "grad_accum (cpu): Accumulating 4 micro-batches"));
  assert_true(has_line_starting(out, "  PASS      grad_accum/params_match\n"));
  assert_true(has_line_starting(out, "  FAIL      grad_accum/loss_match  loss differs at step 3:"));
  assert_true(has_line_starting(out, "            second line after tab,"));
  assert_true(has_line_starting(out, "  EXPECTED  grad_accum/amp_vs_fp32  expected divergence:"));
  assert_true(
      has_line_starting(out, "  ERROR     grad_accum/frozen  cut \xef\xbf\xbd\xef\xbf\xbd\n"));
  assert_true(has_line_starting(out, "  PASS      grad_accum/golden\n"));
  assert_true(has_line_starting(
      out, "  caught    G1  G1-no-zero-grad  (params_match: param/0.weight differs at step 1)"));
  assert_true(has_line_starting(out, "  MISSED    G3  (loss_match: identical losses)"));
  assert_true(has_line_starting(
      out, "  FAILED  grad_accum: 4 passed, 3 failed; 1 of 2 pitfalls caught (1.25 s)"));
  assert_true(has_line_starting(out, "single_step (?)\n"));
  assert_true(
      has_line_starting(out,
                        "  SKIP      single_step/golden  no golden: record with dlcheck record "
                        "scenarios/single_step"));
  assert_true(has_line_starting(out, "  ok  single_step: 1 passed, 0 failed, 1 skipped (0.00 s)"));
  assert_true(has_line_starting(out, "5 passed, 3 failed, 1 skipped in 2 scenarios\n"));
  assert_null(strstr(out, "gradients are never zeroed")); /* descriptions: verbose only */
  assert_true(longest_line(out) <= 100);
  free(out);
}

static void test_text_color_verbose(void **state) {
  fixture *fx = *state;
  char *out = text_report(fx->r, 2, true, true);
  assert_non_null(strstr(out, "  \x1b[32mPASS\x1b[0m      grad_accum/params_match  bitwise"));
  assert_non_null(strstr(out, "  \x1b[31mFAIL\x1b[0m      grad_accum/loss_match"));
  assert_non_null(strstr(out, "  \x1b[33mEXPECTED\x1b[0m  grad_accum/amp_vs_fp32"));
  assert_non_null(strstr(out, "  \x1b[31mMISSED\x1b[0m    G3"));
  assert_non_null(strstr(out, "\x1b[32mcaught\x1b[0m"));
  assert_non_null(strstr(out, "\x1b[33mSKIP\x1b[0m"));
  assert_non_null(strstr(out, "\x1b[31m5 passed, 3 failed\x1b[0m, 1 skipped in 2 scenarios"));
  assert_non_null(strstr(out, "gradients are never zeroed"));
  free(out);
}

static void test_text_wrap(void **state) {
  (void)state;
  dlc_scenario_result r;
  build_small(&r);
  char *ev = r.checks[0].evidence;
  size_t len = 0;
  for (int i = 0; i < 40; i++) len += (size_t)snprintf(ev + len, 64, "word%02d ", i);
  memset(ev + len, 'x', 150); /* a word wider than a line */
  len += 150;
  snprintf(ev + len, 32, " \xc3\xa9t\xc3\xa9 done");
  r.checks[0].kind = DLC_FAIL;
  char *out = text_report(&r, 1, false, false);
  assert_true(longest_line(out) <= 100);
  assert_true(has_line_starting(out, "  FAIL      single_step/loss_match  word00 word01"));
  assert_non_null(strstr(out, "\n            word"));     /* continuation, hanging indent */
  assert_non_null(strstr(out, "xxxx\n            xxxx")); /* the long word is split */
  assert_non_null(strstr(out, " \xc3\xa9t\xc3\xa9 done\n"));
  free(out);
  dlc_result_free(&r);
}

static void test_text_errors(void **state) {
  fixture *fx = *state;
  assert_int_equal(dlc_report_text(NULL, fx->r, 2, false, false), DL_ERR_INVALID);
  assert_non_null(strstr(dl_last_error(), "no output stream"));
  assert_int_equal(dlc_report_text(stdout, NULL, 2, false, false), DL_ERR_INVALID);
  assert_int_equal(dlc_report_text(stdout, fx->r, -1, false, false), DL_ERR_INVALID);
  char path[256];
  write_text(tmp_path(path, sizeof path, "readonly.txt"), "x");
  FILE *ro = fopen(path, "r"); /* writes to it fail */
  assert_non_null(ro);
  assert_int_equal(dlc_report_text(ro, fx->r, 2, false, false), DL_ERR_IO);
  fclose(ro);
  char *out = text_report(NULL, 0, false, false);
  assert_string_equal(out, "0 passed, 0 failed in 0 scenarios\n");
  free(out);
}

/* ---- JSON ------------------------------------------------------------------- */

static const char json_check[] =
    "import json, sys\n"
    "d = json.load(open(sys.argv[1], encoding='utf-8'))\n"
    "ev = open(sys.argv[2], encoding='utf-8', newline='').read()\n"
    "assert d['format'] == 'dlcheck-report' and d['format_version'] == 1\n"
    "assert d['environment'] == {'host': 'test', 'threads': 2}, d['environment']\n"
    "s = d['summary']\n"
    "assert (s['scenarios'], s['passed'], s['failed'], s['skipped'], s['ok']) == "
    "(2, 5, 3, 1, False), s\n"
    "a, b = d['scenarios']\n"
    "assert a['name'] == 'grad_accum' and a['ok'] is False and b['ok'] is True\n"
    "assert a['description'].endswith('(PyTorch & \"friends\").')\n"
    "c = {x['name']: x for x in a['checks']}\n"
    "lm = c['loss_match']\n"
    "assert lm['verdict'] == 'fail' and lm['evidence'] == ev, repr(lm['evidence'])\n"
    "assert lm['step'] == 3 and lm['tensor'] == 'param/0.weight' and lm['layer'] == '0 (linear)'\n"
    "assert lm['max_abs'] == 1.5e-3 and lm['max_rel'] is None and lm['max_ulp'] == 812\n"
    "assert lm['threshold'] == 0.1 and lm['value'] is None and lm['seconds'] == 0.02\n"
    "pm = c['params_match']\n"
    "assert pm['verdict'] == 'pass' and pm['step'] is None and pm['tensor'] is None\n"
    "assert pm['max_ulp'] is None\n"
    "assert c['amp_vs_fp32']['verdict'] == 'expected_divergence'\n"
    "assert c['frozen']['verdict'] == 'error'\n"
    "assert c['frozen']['evidence'] == 'cut \\ufffd\\ufffd', repr(c['frozen']['evidence'])\n"
    "assert a['golden']['present'] is True and a['golden']['verdict'] == 'pass'\n"
    "assert b['golden']['present'] is False and b['golden']['verdict'] == 'error'\n"
    "p = a['pitfalls']\n"
    "assert [x['caught'] for x in p] == [True, False]\n"
    "assert (p[0]['id'], p[0]['variant'], p[0]['check']) == ('G1', 'G1-no-zero-grad', "
    "'params_match')\n"
    "assert p[0]['verdict'] == 'fail' and p[1]['verdict'] == 'pass'\n"
    "assert len(p[1]['others']) == 1 and p[1]['others'][0]['name'] == 'params_match'\n"
    "assert b['pitfalls'] == []\n"
    "r = a['runs']\n"
    "assert [x['name'] for x in r] == ['reference', 'accumulated', 'amp']\n"
    "assert r[0]['steps'] == 200 and r[0]['metrics']['peak_bytes'] == 1048576\n"
    "assert r[0]['final']['loss'] == 2.3 / (1 + 0.01 * 199)\n"
    "assert r[2]['final']['grad_norm'] is None\n"
    "assert a['timing'] == {'seconds': 1.25, 'checks_seconds': 0.02}, a['timing']\n";

static void test_json(void **state) {
  fixture *fx = *state;
  char path[256], ev[256], args[600];
  tmp_path(path, sizeof path, "report.json");
  assert_int_equal(dlc_report_json(path, fx->r, 2, " {\"host\": \"test\", \"threads\": 2}\n"),
                   DL_OK);
  char *json = read_file(path, NULL);
  assert_non_null(strstr(json, "\"max_abs\": 0.0015,")); /* shortest digits */
  assert_non_null(strstr(json, "\"threshold\": 0.1,"));
  assert_non_null(strstr(json, "ctrl\\u0001 end"));
  assert_non_null(strstr(json, "<b>0.5 & 0.25</b> \\\"quoted\\\" back\\\\slash\\nsecond line\\t"));
  assert_non_null(strstr(json, "\xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x98\x80")); /* UTF-8 as is */
  free(json);
  if (!have(PYTHON)) skip();
  write_text(tmp_path(ev, sizeof ev, "evidence.txt"), nasty);
  snprintf(args, sizeof args, "%s %s", path, ev);
  assert_int_equal(python("check_json.py", json_check, args), 0);
}

static void test_json_errors(void **state) {
  fixture *fx = *state;
  char path[256];
  tmp_path(path, sizeof path, "bad_env.json");
  /* the fingerprint is read as JSON (jansson), not judged by its first byte */
  static const char *const bad_env[] = {"<env/>", "{\"os\": \"Linux\"", "[1, 2] trailing"};
  for (size_t i = 0; i < sizeof bad_env / sizeof *bad_env; i++) {
    assert_int_equal(dlc_report_json(path, fx->r, 2, bad_env[i]), DL_ERR_FORMAT);
    assert_non_null(strstr(dl_last_error(), "environment fingerprint is not valid JSON"));
    assert_non_null(strstr(dl_last_error(), "line 1, column"));
    assert_int_not_equal(access(path, F_OK), 0); /* nothing left behind */
  }
  assert_int_equal(dlc_report_json(NULL, fx->r, 2, NULL), DL_ERR_INVALID);
  assert_int_equal(dlc_report_json(path, fx->r, -1, NULL), DL_ERR_INVALID);
  assert_int_equal(dlc_report_json(path, NULL, 1, NULL), DL_ERR_INVALID);
  assert_int_equal(dlc_report_json("/nonexistent-dir/r.json", fx->r, 2, NULL), DL_ERR_IO);
  assert_non_null(strstr(dl_last_error(), "/nonexistent-dir/r.json"));
  char longp[DLC_PATH_MAX + 10];
  memset(longp, 'a', sizeof longp - 1);
  longp[sizeof longp - 1] = '\0';
  assert_int_equal(dlc_report_json(longp, fx->r, 2, NULL), DL_ERR_INVALID);
  /* no environment: null */
  assert_int_equal(dlc_report_json(path, fx->r, 0, "  "), DL_OK);
  char *json = read_file(path, NULL);
  assert_non_null(strstr(json, "\"environment\": null"));
  assert_non_null(strstr(json, "\"scenarios\": []"));
  free(json);
}

/* ---- JUnit ------------------------------------------------------------------ */

static const char junit_check[] =
    "import sys, xml.etree.ElementTree as ET\n"
    "root = ET.parse(sys.argv[1]).getroot()\n"
    "ev = open(sys.argv[2], encoding='utf-8', newline='').read()\n"
    "assert root.tag == 'testsuites'\n"
    "suites = root.findall('testsuite')\n"
    "assert [s.get('name') for s in suites] == ['grad_accum', 'single_step']\n"
    "for s in suites:\n"
    "    cases = s.findall('testcase')\n"
    "    assert int(s.get('tests')) == len(cases)\n"
    "    assert int(s.get('failures')) == len(s.findall('testcase/failure'))\n"
    "    assert int(s.get('errors')) == len(s.findall('testcase/error'))\n"
    "    assert int(s.get('skipped')) == len(s.findall('testcase/skipped'))\n"
    "assert int(root.get('tests')) == 9 and int(root.get('failures')) == 2\n"
    "cases = {c.get('name'): c for c in suites[0].findall('testcase')}\n"
    "f = cases['loss_match'].find('failure')\n"
    "assert f.get('message') == ev, repr(f.get('message'))\n"
    "assert f.text.startswith(ev) and 'step: 3' in f.text and 'max ulp: 812' in f.text\n"
    "assert cases['loss_match'].get('classname') == 'dlcheck.grad_accum'\n"
    "assert cases['frozen'].find('error') is not None\n"
    "assert cases['amp_vs_fp32'].find('failure') is None\n"
    "assert cases['pitfall G1 (G1-no-zero-grad)'].find('failure') is None\n"
    "m = cases['pitfall G3'].find('failure').get('message')\n"
    "assert 'check loss_match gave pass' in m and 'identical losses' in m, m\n"
    "assert cases['golden'].find('skipped') is None\n"
    "sk = suites[1].find(\"testcase[@name='golden']/skipped\")\n"
    "m = sk.get('message')\n"
    "assert m.startswith('no golden: record with dlcheck record'), m\n";

static void test_junit(void **state) {
  fixture *fx = *state;
  char path[256], ev[256], args[600];
  tmp_path(path, sizeof path, "junit.xml");
  assert_int_equal(dlc_report_junit(path, fx->r, 2), DL_OK);
  char *xml = read_file(path, NULL);
  assert_non_null(strstr(xml, "&lt;b&gt;0.5 &amp; 0.25&lt;/b&gt; &quot;quoted&quot;"));
  assert_non_null(strstr(xml, "second line&#9;after tab"));
  free(xml);
  if (have(XMLLINT)) {
    assert_int_equal(run(XMLLINT " --noout --schema " SCHEMA " %s", path), 0);
    /* the schema can fail: a testcase without a name */
    char bad[256];
    write_text(tmp_path(bad, sizeof bad, "bad_junit.xml"),
               "<testsuites><testsuite name=\"s\" tests=\"1\"><testcase/></testsuite>"
               "</testsuites>\n");
    assert_int_not_equal(run(XMLLINT " --noout --schema " SCHEMA " %s 2>/dev/null", bad), 0);
    assert_int_equal(run("test \"$(" XMLLINT " --xpath 'count(//testcase)' %s)\" = 9", path), 0);
    assert_int_equal(run("test \"$(" XMLLINT " --xpath 'count(//failure)' %s)\" = 2", path), 0);
  }
  if (!have(PYTHON)) skip();
  write_text(tmp_path(ev, sizeof ev, "evidence_xml.txt"), nasty_xml);
  snprintf(args, sizeof args, "%s %s", path, ev);
  assert_int_equal(python("check_junit.py", junit_check, args), 0);
}

/* ---- HTML ------------------------------------------------------------------- */

/* Parses the page as XML; every <svg> coordinate is a finite number. */
static const char html_check[] =
    "import sys, math, xml.etree.ElementTree as ET\n"
    "root = ET.parse(sys.argv[1]).getroot()\n"
    "svgs = list(root.iter('svg'))\n"
    "assert len(svgs) == int(sys.argv[2]), len(svgs)\n"
    "for svg in svgs:\n"
    "    for el in svg.iter():\n"
    "        for k in ('x', 'y', 'width', 'height', 'cx', 'cy', 'r', 'x1', 'x2', 'y1', 'y2'):\n"
    "            if k in el.attrib:\n"
    "                assert math.isfinite(float(el.attrib[k])), (el.tag, k, el.attrib[k])\n"
    "        if 'points' in el.attrib:\n"
    "            pts = el.attrib['points'].split()\n"
    "            assert len(pts) >= 2\n"
    "            for p in pts:\n"
    "                assert all(math.isfinite(float(v)) for v in p.split(','))\n"
    "if len(sys.argv) > 3:\n"
    "    ev = open(sys.argv[3], encoding='utf-8', newline='').read()\n"
    "    assert ev in ''.join(root.itertext())\n";

static int count_of(const char *s, const char *what) {
  int n = 0;
  for (const char *p = strstr(s, what); p; p = strstr(p + 1, what)) n++;
  return n;
}

static void test_html(void **state) {
  fixture *fx = *state;
  char path[256], ev[256], args[600];
  tmp_path(path, sizeof path, "report.html");
  assert_int_equal(dlc_report_html(path, fx->r, 2, "{\"host\": \"<test>\"}"), DL_OK);
  char *html = read_file(path, NULL);
  assert_null(strstr(html, "http")); /* no external references */
  assert_null(strstr(html, "<script"));
  assert_non_null(strstr(html, "<pre>{\"host\": \"&lt;test&gt;\"}</pre>"));
  /* grad_accum: loss, divergence and layer plots; single_step: loss and divergence */
  assert_int_equal(count_of(html, "<svg"), 5);
  assert_non_null(strstr(html, "Per-layer divergence"));
  assert_non_null(strstr(html, "accumulated (step 0)"));
  assert_non_null(strstr(html, "<circle"));             /* single-step runs are dots */
  assert_non_null(strstr(html, "class=\"fail\">FAIL")); /* colour-coded verdicts */
  assert_non_null(strstr(html, "class=\"missed\">MISSED"));
  assert_non_null(strstr(html, "class=\"skip\">SKIP"));
  assert_non_null(strstr(html, "stroke-dasharray")); /* the golden's curve */
  free(html);
  if (!have(PYTHON)) skip();
  write_text(tmp_path(ev, sizeof ev, "evidence_xml.txt"), nasty_xml);
  snprintf(args, sizeof args, "%s 5 %s", path, ev);
  assert_int_equal(python("check_html.py", html_check, args), 0);
}

/* report.json of build_calibrated: the distance of each quantity. */
static const char envelope_json_check[] =
    "import sys, json\n"
    "e = json.load(open(sys.argv[1]))['scenarios'][0]['golden']['envelope']\n"
    "assert e['repeats'] == 5 and e['widen'] == 4, e\n"
    "q = {x['name']: x for x in e['quantities']}\n"
    "assert abs(q['loss']['distance'] - 100) < 1e-6 and q['loss']['step'] == 6, q\n"
    "assert q['loss']['outside'] is True and q['loss']['kind'] == 'series', q\n"
    "assert q['grad_norm']['distance'] == 0 and q['grad_norm']['outside'] is False, q\n"
    "assert q['param/0.bias']['distance'] == 64 and q['param/0.bias']['outside'] is True, q\n"
    "assert q['param/0.weight']['distance'] == 2 and q['buffer/steps']['distance'] == 0, q\n"
    "assert q['param/0.bias']['kind'] == 'final', q\n";

enum { FINALS_CAP = 40 };

/* Final tensor `name` of 3 elements in the golden and the run, the run's
 * last element `delta` away; the repeats spread 1/1024, so its distance
 * is delta * 1024 (exact: every number here is a short binary fraction). */
static void add_final(dlc_scenario_result *r, const char *name, float delta) {
  dl_tensor t = {0};
  assert_int_equal(dl_tensor_f32(&t, 1, 3, 0, 0, 0, name), DL_OK);
  for (int i = 0; i < 3; i++) dl_f32(&t)[i] = 0.5f * (float)(i + 1);
  assert_int_equal(dlc_trace_add_final(r->golden_trace, name, &t), DL_OK);
  dl_f32(&t)[2] += delta;
  assert_int_equal(dlc_trace_add_final(&r->traces[0], name, &t), DL_OK);
  dl_tensor_free(&t);
  dlc_envelope *e = r->envelope;
  assert_true(e->nfinals < FINALS_CAP);
  dlc_envelope_final *f = &e->finals[e->nfinals++];
  snprintf(f->name, sizeof f->name, "%s", name);
  f->v[DLC_FIN_SPREAD] = 1.0 / 1024;
}

/* A calibrated golden: loss and grad_norm over 12 steps, the run leaving
 * the loss band at step 6 only; three final tensors at distances 2, 64
 * (outside) and 0. */
static void build_calibrated(dlc_scenario_result *r) {
  memset(r, 0, sizeof *r);
  snprintf(r->scenario, sizeof r->scenario, "calibrated");
  snprintf(r->backend, sizeof r->backend, "cpu");
  set_verdict(&r->golden, "golden", DLC_FAIL, "loss leaves the envelope at step 6");
  r->golden_present = true;
  r->ntraces = 1;
  r->traces = xcalloc(1, sizeof *r->traces);
  dlc_trace_init(&r->traces[0], "calibrated", "reference");
  fill_series(&r->traces[0], 12, 0);
  r->golden_trace = xcalloc(1, sizeof *r->golden_trace);
  dlc_trace_init(r->golden_trace, "calibrated", "reference");
  assert_int_equal(dlc_trace_copy(r->golden_trace, &r->traces[0]), DL_OK);
  dlc_envelope *e = r->envelope = xcalloc(1, sizeof *r->envelope);
  e->repeats = 5;
  e->widen = 4;
  snprintf(e->perturbation, sizeof e->perturbation, "test");
  e->series = xcalloc(2, sizeof *e->series);
  for (int k = 0; k < 2; k++) {
    dlc_envelope_series *es = &e->series[e->nseries++];
    const dlc_series *x = &r->traces[0].series[k];
    snprintf(es->name, sizeof es->name, "%s", x->name);
    es->n = x->n;
    es->v = xcalloc((size_t)x->n, sizeof *es->v);
    for (int64_t i = 0; i < x->n; i++) { /* half-width 1e-3 about the run's value */
      es->v[i][DLC_ENV_MIN] = x->v[i] - 1e-3;
      es->v[i][DLC_ENV_MAX] = x->v[i] + 1e-3;
      es->v[i][DLC_ENV_MEAN] = x->v[i];
    }
  }
  ((dlc_series *)dlc_trace_series(&r->traces[0], "loss"))->v[6] += 0.1; /* 100 half-widths */
  e->finals = xcalloc(FINALS_CAP, sizeof *e->finals);
  add_final(r, "param/0.weight", 1.0f / 512);
  add_final(r, "param/0.bias", 1.0f / 16);
  add_final(r, "buffer/steps", 0);
}

static void test_envelope_band(void **state) {
  (void)state;
  dlc_scenario_result r;
  build_calibrated(&r);
  char path[256], args[300];
  tmp_path(path, sizeof path, "calibrated.html");
  assert_int_equal(dlc_report_html(path, &r, 1, NULL), DL_OK);
  char *html = read_file(path, NULL);
  /* loss and divergence plots, the distances, one band plot per envelope
   * series, the finals */
  assert_int_equal(count_of(html, "<svg"), 2 + 1 + 2 + 1);
  /* Both series on the distance plot, with the gate. */
  const char *d = strstr(html, "Distance from the envelope per step");
  assert_non_null(d);
  assert_non_null(strstr(d, "gate: 4 half-widths"));
  assert_true(strstr(d, ">loss<") && strstr(d, ">grad_norm<"));
  assert_int_equal(count_of(html, "<polygon class=\"band\""), 2);
  assert_non_null(strstr(html, "loss: 1 step outside the envelope"));
  assert_non_null(strstr(html, "grad_norm: 0 steps outside the envelope"));
  assert_int_equal(count_of(html, "class=\"outside\""), 1);
  assert_non_null(strstr(html, "at step 6: 2.26981132 outside [2.16581132, 2.17381132]"));
  free(html);
  tmp_path(path, sizeof path, "calibrated.json");
  assert_int_equal(dlc_report_json(path, &r, 1, NULL), DL_OK);
  char *json = read_file(path, NULL);
  assert_non_null(strstr(json, "\"envelope\""));
  assert_non_null(strstr(json, "\"outside\": true"));
  free(json);
  dlc_result_free(&r);
  if (!have(PYTHON)) skip();
  assert_int_equal(python("check_envelope_json.py", envelope_json_check, path), 0);
  tmp_path(path, sizeof path, "calibrated.html");
  snprintf(args, sizeof args, "%s 6", path);
  assert_int_equal(python("check_html.py", html_check, args), 0);
}

/* The finals plot's geometry: the bar outside the gate reaches above the
 * gate line, the others stay below it. */
static const char finals_geometry_check[] =
    "import sys, xml.etree.ElementTree as ET\n"
    "root = ET.parse(sys.argv[1]).getroot()\n"
    "svg = [s for s in root.iter('svg') if any(e.get('class') == 'limit' for e in s.iter())\n"
    "       and any(e.tag == 'rect' and e.find('title') is not None for e in s.iter())]\n"
    "assert len(svg) == 1, len(svg)\n"
    "line = [e for e in svg[0].iter('line') if e.get('class') == 'limit'][0]\n"
    "gate = float(line.get('y1'))\n"
    "bars = [e for e in svg[0].iter('rect') if e.find('title') is not None]\n"
    "assert len(bars) == 3, len(bars)\n"
    "over = [b for b in bars if b.get('class') == 'over']\n"
    "assert len(over) == 1 and float(over[0].get('y')) < gate, (gate, over[0].attrib)\n"
    "assert all(float(b.get('y')) > gate for b in bars if b not in over)\n";

static const char *after(const char *html, const char *what) {
  const char *p = strstr(html, what);
  if (!p) fail_msg("'%s' not in the page", what);
  return p;
}

/* r's report.html as tmp file `name` (path: its path), r freed. */
static char *html_of(dlc_scenario_result *r, const char *name, char path[256]) {
  tmp_path(path, 256, name);
  assert_int_equal(dlc_report_html(path, r, 1, NULL), DL_OK);
  dlc_result_free(r);
  return read_file(path, NULL);
}

/* The final tensors of a calibrated golden: one bar each, the farthest
 * first, red above the gate line at the widening. */
static void test_envelope_finals_plot(void **state) {
  (void)state;
  dlc_scenario_result r;
  build_calibrated(&r);
  char path[256];
  char *html = html_of(&r, "finals.html", path);
  assert_non_null(strstr(html, "Final tensors: 1 of 3 outside the envelope<"));
  assert_int_equal(count_of(html, "class=\"limit\""), 2); /* the distances' gate, and this */
  assert_non_null(strstr(html, ">gate: 4 times the spread</text>"));
  assert_int_equal(count_of(html, "class=\"over\""), 1);
  const char *bias = after(html, ", param/0.bias: 64</title>");
  const char *weight = after(html, ", param/0.weight: 2</title>");
  const char *steps = after(html, ", buffer/steps: 0</title>");
  assert_true(bias < weight && weight < steps);
  free(html);
  if (!have(PYTHON)) skip();
  assert_int_equal(python("check_finals.py", finals_geometry_check, path), 0);
}

/* Many final tensors: only the worst FINAL_BARS_MAX (24) are drawn, the
 * title counts every one. */
static void test_envelope_finals_worst(void **state) {
  (void)state;
  dlc_scenario_result r;
  build_calibrated(&r);
  for (int k = 1; k <= 30; k++) { /* distances 1 .. 30 */
    char name[16];
    snprintf(name, sizeof name, "t/%02d", k);
    add_final(&r, name, (float)k / 1024);
  }
  char path[256];
  char *html = html_of(&r, "finals_worst.html", path);
  /* outside: param/0.bias (64) and t/05 .. t/30 */
  assert_non_null(strstr(html, "Final tensors: 27 of 33 outside the envelope, worst 24<"));
  assert_int_equal(count_of(html, "</title></rect>"), 24);
  assert_int_equal(count_of(html, "class=\"over\""), 24);
  after(html, ", param/0.bias: 64</title>");
  after(html, ", t/08: 8</title>"); /* 64, then 30 down to 8: 24 bars */
  assert_null(strstr(html, ", t/07: "));
  assert_null(strstr(html, ", buffer/steps: "));
  free(html);
}

static void test_html_size(void **state) {
  (void)state;
  dlc_scenario_result r;
  build_large(&r);
  char path[256], args[300];
  tmp_path(path, sizeof path, "large.html");
  assert_int_equal(dlc_report_html(path, &r, 1, NULL), DL_OK);
  size_t len;
  char *html = read_file(path, &len);
  fprintf(stderr, "8 runs x 200 steps + golden, 20 layers: report.html is %zu bytes\n", len);
  assert_true(len < 300 * 1024);
  assert_int_equal(count_of(html, "<svg"), 3);
  assert_non_null(strstr(html, "No environment fingerprint"));
  free(html);
  dlc_result_free(&r);
  if (!have(PYTHON)) skip();
  snprintf(args, sizeof args, "%s 3", path);
  assert_int_equal(python("check_html.py", html_check, args), 0);
}

/* ---- all at once --------------------------------------------------------------- */

static void test_write_all(void **state) {
  fixture *fx = *state;
  char dir[256], path[300];
  snprintf(dir, sizeof dir, "%s/out/nested/dir", tmp_root);
  assert_int_equal(dlc_report_write_all(dir, fx->r, 2, "{\"a\": 1}"), DL_OK);
  const char *names[] = {"report.json", "junit.xml", "report.html"};
  for (int i = 0; i < 3; i++) {
    snprintf(path, sizeof path, "%s/%s", dir, names[i]);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_true(st.st_size > 100);
    assert_int_equal(st.st_mode & 0777, 0644);
  }
  /* again, into the existing folder; no temporary files remain */
  assert_int_equal(dlc_report_write_all(dir, fx->r, 2, NULL), DL_OK);
  DIR *d = opendir(dir);
  assert_non_null(d);
  int files = 0;
  for (struct dirent *e; (e = readdir(d));)
    if (e->d_name[0] != '.') {
      assert_null(strstr(e->d_name, ".tmp-"));
      files++;
    }
  closedir(d);
  assert_int_equal(files, 3);
}

static void test_write_all_errors(void **state) {
  fixture *fx = *state;
  char file[256], dir[300];
  write_text(tmp_path(file, sizeof file, "plain_file"), "x");
  assert_int_equal(dlc_report_write_all(file, fx->r, 2, NULL), DL_ERR_IO);
  assert_non_null(strstr(dl_last_error(), "plain_file"));
  snprintf(dir, sizeof dir, "%s/sub", file); /* a folder under a file */
  assert_int_equal(dlc_report_write_all(dir, fx->r, 2, NULL), DL_ERR_IO);
  assert_int_equal(dlc_report_write_all(NULL, fx->r, 2, NULL), DL_ERR_INVALID);
  assert_int_equal(dlc_report_write_all("", fx->r, 2, NULL), DL_ERR_INVALID);
  char longp[DLC_PATH_MAX + 10];
  memset(longp, 'a', sizeof longp - 1);
  longp[sizeof longp - 1] = '\0';
  assert_int_equal(dlc_report_write_all(longp, fx->r, 2, NULL), DL_ERR_INVALID);
  /* a folder whose report paths are too long */
  char deep[DLC_PATH_MAX];
  int n = snprintf(deep, sizeof deep, "%s/", tmp_root);
  memset(deep + n, 'b', sizeof deep - (size_t)n - 6);
  deep[sizeof deep - 6] = '\0';
  for (size_t i = (size_t)n + 100; i < sizeof deep - 6; i += 100) deep[i] = '/';
  assert_int_equal(dlc_report_write_all(deep, fx->r, 2, NULL), DL_ERR_INVALID);
  assert_non_null(strstr(dl_last_error(), "longer than"));
}

/* ---- waivers ----------------------------------------------------------------- */

/* A failure becomes WAIVED, its evidence kept and the reason added; any
 * other verdict keeps its kind and says the waiver is unused. */
static void test_verdict_waive(void **state) {
  (void)state;
  dlc_verdict v;
  set_verdict(&v, "same", DLC_FAIL, "loss differs at step 3. G2: mistake. Fix: fix.");
  dlc_verdict_waive(&v, NULL);
  dlc_verdict_waive(&v, "");
  assert_int_equal(v.kind, DLC_FAIL); /* no waiver: nothing changes */
  assert_string_equal(v.waiver, "");
  dlc_verdict_waive(&v, "summed on purpose");
  assert_int_equal(v.kind, DLC_WAIVED);
  assert_true(dlc_verdict_ok(v.kind));
  assert_string_equal(dlc_verdict_name(v.kind), "waived");
  assert_string_equal(dlc_report_label(v.kind), "WAIVED");
  assert_string_equal(v.waiver, "summed on purpose");
  assert_string_equal(v.evidence,
                      "loss differs at step 3. G2: mistake. Fix: fix. waived: summed on purpose.");
  /* full evidence is cut (at a character) to make room for the reason */
  set_verdict(&v, "same", DLC_FAIL, "");
  memset(v.evidence, 'x', sizeof v.evidence - 1);
  memcpy(v.evidence + 1522, "\xe6\x97\xa5", 3); /* a 3-byte character where the cut falls */
  char reason[DLC_WAIVER_MAX];
  memset(reason, 'r', sizeof reason - 1);
  reason[sizeof reason - 1] = '\0';
  dlc_verdict_waive(&v, reason);
  size_t len = strlen(v.evidence);
  assert_true(len < sizeof v.evidence);
  assert_int_equal(strncmp(v.evidence + len - 511 - 1, reason, 511), 0);
  assert_non_null(strstr(v.evidence, "x... waived: rrr"));
  assert_null(strchr(v.evidence, '\xe6')); /* cut before the character, not inside it */
  /* a pass, an expected divergence, not tested and an error keep their kind */
  const dlc_verdict_kind others[] = {DLC_PASS, DLC_EXPECTED_DIVERGENCE, DLC_SKIP, DLC_ERROR};
  for (size_t i = 0; i < sizeof others / sizeof others[0]; i++) {
    set_verdict(&v, "same", others[i], "identical.");
    dlc_verdict_waive(&v, "accepted");
    assert_int_equal(v.kind, others[i]);
    assert_string_equal(v.waiver, "accepted");
    assert_non_null(strstr(v.evidence, "identical. The waiver is unused: the check did not fail"));
    assert_non_null(strstr(v.evidence, "; waived: accepted."));
  }
}

/* waived: a WAIVED check and a pass whose waiver is unused. */
static void build_waived(dlc_scenario_result *r) {
  new_result(r, "waived", "cpu", 2);
  set_verdict(&r->checks[0], "loss_divided", DLC_FAIL, "ratio 4 at step 0.");
  r->checks[0].value = 4;
  dlc_verdict_waive(&r->checks[0], "summed on purpose <#412> & reviewed");
  set_verdict(&r->checks[1], "same_update", DLC_PASS, "identical.");
  dlc_verdict_waive(&r->checks[1], "old difference");
  set_verdict(&r->golden, "golden", DLC_ERROR, "");
}

static const char waived_json_check[] =
    "import json, sys\n"
    "d = json.load(open(sys.argv[1], encoding='utf-8'))\n"
    "s = d['summary']\n"
    "assert (s['passed'], s['failed'], s['waived'], s['ok']) == (2, 0, 1, True), s\n"
    "c = {x['name']: x for x in d['scenarios'][0]['checks']}\n"
    "w = c['loss_divided']\n"
    "assert w['verdict'] == 'waived' and w['waiver'] == 'summed on purpose <#412> & reviewed'\n"
    "assert w['evidence'] == 'ratio 4 at step 0. waived: summed on purpose <#412> & reviewed.'\n"
    "assert w['value'] == 4\n"
    "u = c['same_update']\n"
    "assert u['verdict'] == 'pass' and u['waiver'] == 'old difference', u\n"
    "assert 'The waiver is unused' in u['evidence']\n"
    "assert d['scenarios'][0]['golden']['waiver'] is None\n";

static const char waived_junit_check[] =
    "import sys, xml.etree.ElementTree as ET\n"
    "root = ET.parse(sys.argv[1]).getroot()\n"
    "assert root.get('failures') == '0' and root.get('errors') == '0', root.attrib\n"
    "cases = {c.get('name'): c for c in root.iter('testcase')}\n"
    "w = cases['loss_divided']\n"
    "assert w.get('status') == 'waived' and w.find('failure') is None\n"
    "assert w.find('skipped') is None and w.find('error') is None\n"
    "out = w.find('system-out').text\n"
    "assert out.startswith('waived failure (it does not fail the run): ratio 4 at step 0.'), out\n"
    "assert 'waived: summed on purpose <#412> & reviewed.' in out and 'value: 4' in out, out\n"
    "assert cases['same_update'].get('status') is None\n";

static void test_waived_reports(void **state) {
  (void)state;
  dlc_scenario_result r;
  build_waived(&r);
  assert_true(dlc_result_ok(&r));
  assert_int_equal(dlc_report_waived(&r, 1), 1);
  char *out = text_report(&r, 1, false, false);
  assert_true(has_line_starting(
      out, "  WAIVED    waived/loss_divided  ratio 4 at step 0. waived: summed on purpose"));
  assert_true(has_line_starting(out, "  PASS      waived/same_update  identical. The waiver is "
                                     "unused: the check did not fail (pass)"));
  assert_true(has_line_starting(out, "  ok  waived: 2 passed (1 waived), 0 failed, 1 skipped"));
  assert_true(has_line_starting(out, "2 passed (1 waived), 0 failed, 1 skipped in 1 scenario\n"));
  free(out);
  out = text_report(&r, 1, true, false);
  assert_non_null(strstr(out, "  \x1b[33mWAIVED\x1b[0m    waived/loss_divided"));
  free(out);

  char dir[256], path[300];
  snprintf(dir, sizeof dir, "%s/waived", tmp_root);
  assert_int_equal(dlc_report_write_all(dir, &r, 1, NULL), DL_OK);
  snprintf(path, sizeof path, "%s/report.html", dir);
  char *html = read_file(path, NULL);
  assert_non_null(strstr(html, "<td class=\"waived\">WAIVED</td>"));
  assert_non_null(strstr(html, ".waived{"));
  assert_non_null(strstr(html, "waived: summed on purpose &lt;#412&gt; &amp; reviewed."));
  free(html);
  snprintf(path, sizeof path, "%s/junit.xml", dir);
  if (have(XMLLINT)) assert_int_equal(run(XMLLINT " --noout --schema " SCHEMA " %s", path), 0);
  if (have(PYTHON)) {
    assert_int_equal(python("check_waived_junit.py", waived_junit_check, path), 0);
    snprintf(path, sizeof path, "%s/report.json", dir);
    assert_int_equal(python("check_waived_json.py", waived_json_check, path), 0);
  }
  dlc_result_free(&r);
}

/* ---- pieces ------------------------------------------------------------------ */

static void test_xml_text(void **state) {
  (void)state;
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  assert_non_null(f);
  dlc_xml_text(f, "a<b>&\"'\t\n\r\x02", true);
  fputc('|', f);
  dlc_xml_text(f, "a<b>&\"'\t\n\r", false);
  fclose(f);
  assert_string_equal(buf, "a&lt;b&gt;&amp;&quot;&apos;&#9;&#10;&#13;\xef\xbf\xbd|"
                           "a&lt;b&gt;&amp;\"'\t\n&#13;");
  free(buf);
}

static char *svg_lines(const dlc_plot *p, const dlc_plot_series *s, int ns) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  assert_non_null(f);
  dlc_svg_lines(f, p, s, ns);
  fclose(f);
  assert_null(strstr(buf, "nan"));
  assert_null(strstr(buf, "inf"));
  return buf;
}

static void test_svg_edge_cases(void **state) {
  (void)state;
  const double gaps[] = {1, NAN, 2, 3, INFINITY, 4};
  const double nans[] = {NAN, NAN};
  const double zeros[] = {0, 0, 0};
  const double flat[] = {2.5, 2.5, 2.5};
  dlc_plot lin = {.title = "t", .xlabel = "step", .ylabel = "y"};
  dlc_plot logp = {.title = "t", .xlabel = "step", .ylabel = "y", .logy = true};

  /* 1 | gap | 2 3 | gap | 4: two dots and one line */
  char *out = svg_lines(&lin, &(dlc_plot_series){.name = "g", .y = gaps, .n = 6}, 1);
  assert_int_equal(count_of(out, "<circle"), 2);
  assert_int_equal(count_of(out, "<polyline"), 1);
  free(out);

  out = svg_lines(&lin, &(dlc_plot_series){.name = "n", .y = nans, .n = 2}, 1);
  assert_non_null(strstr(out, "no finite values"));
  free(out);

  /* all zeros on a log axis: every point on the "0" line */
  out = svg_lines(&logp, &(dlc_plot_series){.name = "z", .y = zeros, .n = 3}, 1);
  assert_non_null(strstr(out, ">0</text>"));
  assert_int_equal(count_of(out, "<polyline"), 1);
  free(out);

  /* a constant series gets a range around it */
  out = svg_lines(&lin, &(dlc_plot_series){.name = "c", .y = flat, .n = 3, .x0 = 7}, 1);
  assert_non_null(strstr(out, ">2.5</text>"));
  assert_non_null(strstr(out, ">7</text>"));
  free(out);

  /* log ticks over decades, a zero among positives */
  const double decades[] = {1e-9, 0, 1e-3, 2e-1};
  out = svg_lines(&logp, &(dlc_plot_series){.name = "d", .y = decades, .n = 4}, 1);
  assert_non_null(strstr(out, ">1e-8</text>")); /* every second decade of ten */
  assert_non_null(strstr(out, ">0.01</text>"));
  assert_non_null(strstr(out, ">0</text>"));
  free(out);

  /* a long series is reduced to two points per pixel column at most */
  enum { N = 20000 };
  double *y = malloc(N * sizeof *y);
  assert_non_null(y);
  for (int i = 0; i < N; i++) y[i] = (i % 7) * 0.1 + i * 1e-4;
  out = svg_lines(&lin, &(dlc_plot_series){.name = "long", .y = y, .n = N}, 1);
  int points = count_of(out, ",");
  assert_true(points > 500 && points < 2 * 640);
  free(out);
  free(y);

  /* bars: zero, inf and NaN values; no series at all */
  const double bars[] = {0, 1e-3, INFINITY, NAN};
  const char *cats[] = {"a", "b", "c", "d"};
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  assert_non_null(f);
  dlc_svg_bars(f, &logp, cats, 4, &(dlc_plot_series){.name = "r", .y = bars, .n = 4}, 1);
  dlc_svg_bars(f, &lin, cats, 4, &(dlc_plot_series){.name = "r", .y = bars, .n = 4}, 1);
  dlc_svg_bars(f, &lin, cats, 0, NULL, 0);
  fclose(f);
  assert_int_equal(count_of(buf, "<rect x="), 2 * (1 + 3 + 1) + 1); /* frames, bars, legends */
  assert_non_null(strstr(buf, "no finite values"));
  free(buf);
}

int main(void) {
  if (!make_tmp_dir(tmp_root, sizeof tmp_root, "dlc_report_XXXXXX")) return 1;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_result_ok, setup, teardown),
      cmocka_unit_test(test_result_free),
      cmocka_unit_test_setup_teardown(test_text_plain, setup, teardown),
      cmocka_unit_test_setup_teardown(test_text_color_verbose, setup, teardown),
      cmocka_unit_test(test_text_wrap),
      cmocka_unit_test_setup_teardown(test_text_errors, setup, teardown),
      cmocka_unit_test_setup_teardown(test_json, setup, teardown),
      cmocka_unit_test_setup_teardown(test_json_errors, setup, teardown),
      cmocka_unit_test_setup_teardown(test_junit, setup, teardown),
      cmocka_unit_test_setup_teardown(test_html, setup, teardown),
      cmocka_unit_test(test_html_size),
      cmocka_unit_test(test_envelope_band),
      cmocka_unit_test(test_envelope_finals_plot),
      cmocka_unit_test(test_envelope_finals_worst),
      cmocka_unit_test_setup_teardown(test_write_all, setup, teardown),
      cmocka_unit_test_setup_teardown(test_write_all_errors, setup, teardown),
      cmocka_unit_test(test_verdict_waive),
      cmocka_unit_test(test_waived_reports),
      cmocka_unit_test(test_xml_text),
      cmocka_unit_test(test_svg_edge_cases),
  };
  int failed = cmocka_run_group_tests(tests, NULL, NULL);
  char cmd[sizeof tmp_root + 16];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp_root);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmp_root);
  return failed;
}
