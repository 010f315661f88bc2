/* What the report writers share (checks/report/report_*.c, svg_plot.c):
 * files written under a temporary name and renamed into place,
 * XML text, verdict labels and counts. */
#ifndef DLC_REPORT_FORMAT_H
#define DLC_REPORT_FORMAT_H

#include "io/atomic_file.h"
#include "judge/result.h"
#include "trace/utf8.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

/* ---- for the report writers (checks/report_*.c) ------------------------ */

/* A report file being written: FILE on a temporary (atomic_file.h: never
 * through a link; a path that is not a regular file is refused), renamed
 * to path on success. */
typedef struct dlc_report_file {
  FILE *f;
  dl_atomic_file out;
} dlc_report_file;

/* Checks the arguments every writer takes, then opens a temporary file
 * beside path. `what` names the report in messages ("JSON report"). */
dl_status dlc_report_file_open(dlc_report_file *rf, const char *path, const char *what,
                               const dlc_scenario_result *results, int n);
/* Completes the file: with s == DL_OK, flushes, checks for write errors and
 * renames it into place; otherwise (or on any error) removes it. Returns
 * the first failure. */
dl_status dlc_report_file_close(dlc_report_file *rf, dl_status s);

/* path := dir/name, refused (DL_ERR_INVALID) when dir is empty or the
 * path too long: the files of a run's folder (the marker, the manifest). */
dl_status dlc_report_folder_file(const char *dir, const char *name, char path[DLC_PATH_MAX]);

/* s escaped as XML character data or attribute value (&amp; &lt; &gt;
 * &quot; &apos;; tab, newline and CR as character references in
 * attributes, where a parser would otherwise normalise them to spaces;
 * other control characters, which XML 1.0 forbids, as U+FFFD). */
void dlc_xml_text(FILE *f, const char *s, bool attribute);

/* The short label of a verdict in reports: "PASS", "FAIL", "EXPECTED", "ERROR",
 * "SKIP", "WAIVED". */
const char *dlc_report_label(dlc_verdict_kind k);
/* Counts over all results: passed (pass, expected divergence, waived,
 * pitfall caught), failed (fail, error, pitfall missed), skipped (no
 * golden). */
void dlc_report_count(const dlc_scenario_result *results, int n, int *passed, int *failed,
                      int *skipped);
/* The checks among the passed whose failure a waiver accepts. */
int dlc_report_waived(const dlc_scenario_result *results, int n);

#endif
