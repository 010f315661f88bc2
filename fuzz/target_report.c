/* The report writers' fuzz target (targets.h: dlc_fuzz_report). What
 * `dlcheck report DIR` renders comes from files: scenario and tensor names,
 * series values and envelopes from traces, evidence quoting them; every
 * writer must escape and bound it, whatever it holds. */
#define _POSIX_C_SOURCE 200809L /* strnlen */
#include "targets.h"

#include "judge/envelope.h"
#include "judge/result.h"
#include "report/report.h"
#include "store/trace_io.h"
#include "trace/trace.h"

#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { NKINDS = DLC_WAIVED + 1 };

typedef struct loaded {
  bool ok;
  dlc_trace trace;
  dlc_envelope envelope;
} loaded;

static void load(const char *path, void *user) {
  loaded *l = user;
  dlc_golden_meta *meta = malloc(sizeof *meta);
  l->ok = meta && dlc_golden_load(path, &l->trace, meta, &l->envelope) == DL_OK;
  free(meta);
}

/* dst := the text's first bytes, up to its first NUL, cut to fit. */
static void copy_text(char *dst, size_t cap, const char *text, size_t n) {
  size_t k = strnlen(text, n < cap - 1 ? n : cap - 1);
  memcpy(dst, text, k);
  dst[k] = '\0';
}

/* The numbers a writer must render or leave out: NaN, the infinities, -0,
 * a subnormal, the extremes, and an ordinary one. */
static double odd_number(unsigned pick) {
  static const double odd[] = {NAN, INFINITY, -INFINITY, -0.0, DBL_MIN / 4, DBL_MAX, -DBL_MAX, 0.1};
  return odd[pick % (sizeof odd / sizeof *odd)];
}

static void make_verdict(dlc_verdict *v, dlc_verdict_kind kind, const char *text, size_t n,
                         unsigned choice) {
  dlc_verdict_init(v, "", "", "");
  copy_text(v->check, sizeof v->check, text, n);
  copy_text(v->evidence, sizeof v->evidence, text, n);
  copy_text(v->tensor, sizeof v->tensor, text, n);
  copy_text(v->layer, sizeof v->layer, text, n);
  if (choice & 0x40) copy_text(v->waiver, sizeof v->waiver, text, n);
  v->kind = kind;
  v->step = choice & 1 ? (int64_t)choice * 977 : -1;
  v->max_abs = odd_number(choice), v->max_rel = odd_number(choice >> 3);
  v->value = odd_number(choice + kind), v->threshold = odd_number(choice >> 1);
  v->max_ulp = UINT64_MAX >> (choice & 63);
  v->seconds = odd_number(choice >> 2);
  v->ncatalogue = (int)(choice % 3);
  for (int i = 0; i < v->ncatalogue; i++) copy_text(v->catalogue[i], DLC_CATALOGUE_ID_MAX, text, n);
}

/* The result: the loaded trace as the reference run, its copy as a second
 * run and as the golden (its envelope when calibrated). */
static void render(const loaded *l, unsigned choice, const char *text, size_t n, FILE *devnull) {
  dlc_scenario_result r;
  memset(&r, 0, sizeof r);
  copy_text(r.scenario, sizeof r.scenario, l->ok ? l->trace.scenario : text, l->ok ? 127 : n);
  copy_text(r.description, sizeof r.description, text, n);
  copy_text(r.backend, sizeof r.backend, l->ok ? l->trace.backend : "cpu", 31);
  dlc_verdict checks[NKINDS];
  for (int k = 0; k < NKINDS; k++)
    make_verdict(&checks[k], (dlc_verdict_kind)k, text, n, choice + k);
  r.checks = checks, r.nchecks = NKINDS;
  make_verdict(&r.golden, choice & 2 ? DLC_FAIL : DLC_PASS, text, n, choice >> 1);
  r.golden_present = choice & 0x80;
  dlc_pitfall_outcome pitfall = {.caught = choice & 4, .others = checks, .nothers = 2};
  copy_text(pitfall.variant, sizeof pitfall.variant, text, n);
  copy_text(pitfall.pitfall, sizeof pitfall.pitfall, text, n);
  copy_text(pitfall.description, sizeof pitfall.description, text, n);
  pitfall.verdict = checks[DLC_FAIL];
  r.pitfalls = &pitfall, r.npitfalls = 1;
  dlc_trace runs[2];
  dlc_trace_init(&runs[1], "", "");
  if (l->ok && dlc_trace_copy(&runs[1], &l->trace) == DL_OK) {
    runs[0] = l->trace;
    r.traces = runs, r.ntraces = 2;
    r.golden_trace = r.golden_present ? &runs[1] : NULL;
    r.envelope = r.golden_present && l->envelope.repeats ? (dlc_envelope *)&l->envelope : NULL;
  }
  r.seconds = odd_number(choice >> 4);
  if (choice & 8) copy_text(r.skipped, sizeof r.skipped, text, n);
  char dir[512];
  if (dlc_fuzz_tmp_path(dir, sizeof dir, "report")) {
    dlc_report_write_all(dir, &r, 1, NULL);
    dlc_report_remove_all(dir);
    rmdir(dir);
  }
  dlc_report_text(devnull, &r, 1, choice & 16, true);
  dlc_trace_free(&runs[1]);
}

int dlc_fuzz_report(const uint8_t *data, size_t size) {
  static FILE *devnull;
  if (!devnull && !(devnull = fopen("/dev/null", "w"))) return 0;
  if (size < 3) return 0;
  unsigned choice = data[0];
  size_t n = (size_t)data[1] | (size_t)data[2] << 8;
  if (n > size - 3) n = size - 3;
  char *text = malloc(n + 1);
  if (!text) return 0;
  memcpy(text, data + 3, n);
  text[n] = '\0';
  loaded l = {0};
  dlc_trace_init(&l.trace, "", "");
  dlc_fuzz_on_sealed_trace(data + 3 + n, size - 3 - n, "report.h5", load, &l);
  render(&l, choice, text, strlen(text), devnull);
  if (l.ok) {
    dlc_trace_free(&l.trace);
    dlc_envelope_free(&l.envelope);
  }
  free(text);
  return 0;
}
