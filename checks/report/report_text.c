/* The terminal report: a line per verdict, evidence wrapped under it. */
#include "report/report.h"

#include "report/format.h"

#include <string.h>

enum { TEXT_WIDTH = 100, LABEL_WIDTH = 8, HANG = 12 };

#define GREEN "\x1b[32m"
#define RED "\x1b[31m"
#define YELLOW "\x1b[33m"
#define BOLD "\x1b[1m"
#define RESET "\x1b[0m"

static const char *kind_colour(dlc_verdict_kind k) {
  switch (k) {
  case DLC_PASS: return GREEN;
  case DLC_EXPECTED_DIVERGENCE:
  case DLC_WAIVED:
  case DLC_SKIP: return YELLOW;
  default: return RED;
  }
}

/* ---- wrapping ------------------------------------------------------------ */

typedef struct wrapper {
  FILE *out;
  int col;         /* current column */
  bool line_empty; /* nothing but indentation on this line yet */
  const char *sep; /* what goes before the next word on this line */
} wrapper;

static void new_line(wrapper *w) {
  fprintf(w->out, "\n%*s", HANG, "");
  w->col = HANG;
  w->line_empty = true;
}

/* Bytes of the word at s (up to a space, newline or control character) and
 * its width in characters. */
static size_t word_at(const char *s, int *width) {
  size_t len = 0;
  *width = 0;
  while (s[len] && (unsigned char)s[len] > ' ' && s[len] != 0x7f) {
    uint32_t cp;
    len += (size_t)dlc_utf8_next(s + len, &cp);
    ++*width;
  }
  return len;
}

/* Writes a word, splitting one wider than a whole line. Control characters
 * never reach the terminal (they separate words), so evidence cannot move
 * the cursor or change colours. */
static void put_word(wrapper *w, const char *s, size_t len, int width) {
  int sep = (int)strlen(w->sep);
  if (!w->line_empty && w->col + sep + width > TEXT_WIDTH) new_line(w);
  if (!w->line_empty) {
    fputs(w->sep, w->out);
    w->col += sep;
  }
  for (size_t i = 0; i < len;) {
    if (w->col >= TEXT_WIDTH) new_line(w);
    uint32_t cp;
    i += (size_t)dlc_utf8_next(s + i, &cp);
    dlc_utf8_put(w->out, cp);
    w->col++;
    w->line_empty = false;
  }
  w->sep = " ";
}

/* text from column col (after sep), continuation lines indented to HANG;
 * newlines in text start new lines. */
static void put_wrapped(FILE *out, int col, const char *sep, const char *text) {
  wrapper w = {.out = out, .col = col, .line_empty = false, .sep = sep};
  for (const char *s = text; *s;) {
    if (*s == '\n') {
      new_line(&w);
      s++;
      continue;
    }
    int width;
    size_t len = word_at(s, &width);
    if (len == 0) {
      s++; /* space, tab or another control character */
      continue;
    }
    put_word(&w, s, len, width);
    s += len;
  }
  fputc('\n', out);
}

/* ---- lines ---------------------------------------------------------------- */

static int put_label(FILE *out, const char *label, const char *colour, bool color) {
  fprintf(out, "  %s%s%s%*s", color ? colour : "", label, color ? RESET : "",
          LABEL_WIDTH + 2 - (int)strlen(label), "");
  return 2 + LABEL_WIDTH + 2;
}

static void put_line(FILE *out, const char *label, const char *colour, bool color, const char *name,
                     const char *evidence) {
  int col = put_label(out, label, colour, color);
  fputs(name, out);
  col += (int)strlen(name);
  if (evidence && evidence[0]) put_wrapped(out, col, "  ", evidence);
  else fputc('\n', out);
}

static void put_check(FILE *out, const char *scenario, const dlc_verdict *v, bool color,
                      bool verbose) {
  char name[2 * DLC_NAME_MAX + 2];
  snprintf(name, sizeof name, "%s/%s", scenario, v->check);
  /* a pass with a waiver says that the waiver is unused */
  put_line(out, dlc_report_label(v->kind), kind_colour(v->kind), color, name,
           verbose || v->kind != DLC_PASS || v->waiver[0] ? v->evidence : NULL);
}

static void put_golden(FILE *out, const dlc_scenario_result *r, bool color, bool verbose) {
  char name[DLC_NAME_MAX + 8];
  snprintf(name, sizeof name, "%s/golden", r->scenario);
  if (r->golden_present) {
    put_line(out, dlc_report_label(r->golden.kind), kind_colour(r->golden.kind), color, name,
             verbose || r->golden.kind != DLC_PASS ? r->golden.evidence : NULL);
    return;
  }
  char how[DLC_NAME_MAX + 64];
  snprintf(how, sizeof how, "no golden: record with dlcheck record scenarios/%s", r->scenario);
  put_line(out, "SKIP", YELLOW, color, name, r->golden.evidence[0] ? r->golden.evidence : how);
}

static void put_pitfall(FILE *out, const dlc_pitfall_outcome *p, bool color, bool verbose) {
  char name[DLC_NAME_MAX + 24];
  if (strcmp(p->variant, p->pitfall) != 0 && p->variant[0])
    snprintf(name, sizeof name, "%s  %s", p->pitfall, p->variant);
  else snprintf(name, sizeof name, "%s", p->pitfall[0] ? p->pitfall : p->variant);
  char evidence[sizeof p->verdict.evidence + DLC_NAME_MAX + 8];
  snprintf(evidence, sizeof evidence, "(%s: %s)", p->verdict.check[0] ? p->verdict.check : "?",
           p->verdict.evidence);
  put_line(out, p->caught ? "caught" : "MISSED", p->caught ? GREEN : RED, color, name, evidence);
  if (verbose && p->description[0]) {
    fprintf(out, "%*s", HANG - 2, "");
    put_wrapped(out, HANG - 2, "  ", p->description);
  }
}

/* "N passed (W waived), N failed": the passed include the waived failures */
static void put_counts(FILE *out, const dlc_scenario_result *results, int n, int passed,
                       int failed) {
  int waived = dlc_report_waived(results, n);
  fprintf(out, "%d passed", passed);
  if (waived) fprintf(out, " (%d waived)", waived);
  fprintf(out, ", %d failed", failed);
}

static void put_scenario(FILE *out, const dlc_scenario_result *r, bool color, bool verbose) {
  const char *backend = r->backend[0] ? r->backend : "?";
  fprintf(out, "%s%s%s (%s)", color ? BOLD : "", r->scenario, color ? RESET : "", backend);
  if (r->description[0]) {
    fputc(':', out);
    put_wrapped(out, (int)(strlen(r->scenario) + strlen(backend) + 4), " ", r->description);
  } else fputc('\n', out);
  for (int i = 0; i < r->nchecks; i++) put_check(out, r->scenario, &r->checks[i], color, verbose);
  put_golden(out, r, color, verbose);
  int caught = 0;
  for (int i = 0; i < r->npitfalls; i++) {
    put_pitfall(out, &r->pitfalls[i], color, verbose);
    caught += r->pitfalls[i].caught;
  }
  int passed, failed, skipped;
  dlc_report_count(r, 1, &passed, &failed, &skipped);
  bool ok = dlc_result_ok(r);
  fprintf(out, "  %s%s%s  %s: ", color ? (ok ? GREEN : RED) : "", ok ? "ok" : "FAILED",
          color ? RESET : "", r->scenario);
  put_counts(out, r, 1, passed, failed);
  if (skipped) fprintf(out, ", %d skipped", skipped);
  if (r->npitfalls) fprintf(out, "; %d of %d pitfalls caught", caught, r->npitfalls);
  fprintf(out, " (%.2f s)\n\n", r->seconds);
}

dl_status dlc_report_text(FILE *out, const dlc_scenario_result *results, int n, bool color,
                          bool verbose) {
  if (!out) return dl_fail(DL_ERR_INVALID, "text report: no output stream given");
  if (n < 0 || (n > 0 && !results))
    return dl_fail(DL_ERR_INVALID, "text report: %d results at %p; pass n >= 0 results", n,
                   (const void *)results);
  for (int i = 0; i < n; i++) put_scenario(out, &results[i], color, verbose);
  int passed, failed, skipped;
  dlc_report_count(results, n, &passed, &failed, &skipped);
  fputs(color ? (failed ? RED : GREEN) : "", out);
  put_counts(out, results, n, passed, failed);
  fputs(color ? RESET : "", out);
  if (skipped) fprintf(out, ", %d skipped", skipped);
  fprintf(out, " in %d scenario%s\n", n, n == 1 ? "" : "s");
  if (fflush(out) != 0 || ferror(out))
    return dl_fail(DL_ERR_IO, "text report: writing failed (disk full or closed stream?)");
  return DL_OK;
}
