/* format.h: what the report writers share. */
#define _POSIX_C_SOURCE 200809L /* mkstemp, fdopen, fchmod, fsync */

#include "report/format.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- files written under a temporary name -------------------------------- */

dl_status dlc_report_file_open(dlc_report_file *rf, const char *path, const char *what,
                               const dlc_scenario_result *results, int n) {
  memset(rf, 0, sizeof *rf);
  rf->out.fd = -1;
  if (!path || !path[0]) return dl_fail(DL_ERR_INVALID, "%s: no output path given", what);
  if (n < 0 || (n > 0 && !results))
    return dl_fail(DL_ERR_INVALID, "%s %s: %d results at %p; pass n >= 0 results", what, path, n,
                   (const void *)results);
  if (strlen(path) >= DLC_PATH_MAX)
    return dl_fail(DL_ERR_INVALID, "%s: path %.60s... is longer than %d bytes", what, path,
                   DLC_PATH_MAX - 1);
  dl_status s = dl_atomic_open(&rf->out, path);
  /* a report is for everyone who can read the folder, whatever the umask */
  if (s == DL_OK) fchmod(rf->out.fd, 0644);
  if (s == DL_OK) s = dl_atomic_fdopen(&rf->out, &rf->f);
  if (s == DL_OK) return DL_OK;
  dl_atomic_abort(&rf->out);
  return dl_fail_context(s, "%s: ", what);
}

dl_status dlc_report_file_close(dlc_report_file *rf, dl_status s) {
  if (!rf->f) return s;
  bool write_error = fflush(rf->f) != 0 || ferror(rf->f);
  int e = errno;
  if (fclose(rf->f) != 0 && !write_error) {
    write_error = true;
    e = errno;
  }
  rf->f = NULL;
  if (s == DL_OK && write_error)
    s = dl_fail(DL_ERR_IO, "writing %s failed: %s (disk full?)", rf->out.path, strerror(e));
  if (s == DL_OK) return dl_atomic_commit(&rf->out);
  dl_atomic_abort(&rf->out);
  return s;
}

/* ---- XML text ------------------------------------------------------------ */

void dlc_xml_text(FILE *f, const char *s, bool attribute) {
  while (*s) {
    uint32_t cp;
    s += dlc_utf8_next(s, &cp);
    switch (cp) {
    case '&': fputs("&amp;", f); break;
    case '<': fputs("&lt;", f); break;
    case '>': fputs("&gt;", f); break;
    case '"': fputs(attribute ? "&quot;" : "\"", f); break;
    case '\'': fputs(attribute ? "&apos;" : "'", f); break;
    case '\t': fputs(attribute ? "&#9;" : "\t", f); break;
    case '\n': fputs(attribute ? "&#10;" : "\n", f); break;
    case '\r': fputs("&#13;", f); break; /* a parser turns a raw CR into LF */
    default:
      if (cp < 0x20 || cp == 0xfffe || cp == 0xffff) dlc_utf8_put(f, 0xfffd);
      else dlc_utf8_put(f, cp);
    }
  }
}

/* ---- verdict labels and counts ------------------------------------------ */

const char *dlc_report_label(dlc_verdict_kind k) {
  switch (k) {
  case DLC_PASS: return "PASS";
  case DLC_FAIL: return "FAIL";
  case DLC_EXPECTED_DIVERGENCE: return "EXPECTED";
  case DLC_ERROR: return "ERROR";
  case DLC_SKIP: return "SKIP";
  case DLC_WAIVED: return "WAIVED";
  }
  return "?";
}

static void count_one(const dlc_scenario_result *r, int *passed, int *failed, int *skipped) {
  for (int i = 0; i < r->nchecks; i++) {
    dlc_verdict_kind k = r->checks[i].kind;
    ++*(k == DLC_SKIP ? skipped : dlc_verdict_ok(k) ? passed : failed);
  }
  if (!r->golden_present) ++*skipped;
  else ++*(dlc_verdict_ok(r->golden.kind) ? passed : failed);
  for (int i = 0; i < r->npitfalls; i++) ++*(r->pitfalls[i].caught ? passed : failed);
}

void dlc_report_count(const dlc_scenario_result *results, int n, int *passed, int *failed,
                      int *skipped) {
  *passed = *failed = *skipped = 0;
  for (int i = 0; i < n; i++) count_one(&results[i], passed, failed, skipped);
}

int dlc_report_waived(const dlc_scenario_result *results, int n) {
  int waived = 0;
  for (int i = 0; i < n; i++)
    for (int j = 0; j < results[i].nchecks; j++) waived += results[i].checks[j].kind == DLC_WAIVED;
  return waived;
}
