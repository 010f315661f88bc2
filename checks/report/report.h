/* Reports of scenario results: terminal text, JSON (machines), JUnit XML
 * (CI) and one self-contained HTML page with SVG plots (people).
 *
 * Every file report is written under a temporary name in the target folder
 * and renamed into place when complete, so a killed run never leaves half a
 * report. Text from results (evidence, names) is escaped for each format;
 * bytes that are not valid UTF-8 (evidence cut mid-character by a fixed
 * buffer) become U+FFFD, and control characters that XML cannot carry
 * become U+FFFD there.
 *
 * JSON structure (report.json; "format_version" changes when it does):
 *   { "format": "dlcheck-report", "format_version": 1,
 *     "environment": <env_json as passed, or null>,
 *     "summary": { "scenarios", "passed", "failed", "skipped", "waived", "ok",
 *                  "seconds" } ("passed" includes the "waived"),
 *     "catalogue": { ID: { "mistake", "effect", "fix" } } (the IDs any check names),
 *     "scenarios": [ {
 *       "name", "description", "backend", "ok",
 *       "checks": [ VERDICT... ],
 *       "golden": { "present": bool, VERDICT fields,
 *                   "envelope": { "repeats", "widen", "perturbation",
 *                                 "quantities": [ { "name", "kind": "series" |
 *                                   "final", "distance", "step", "outside" } ] } },
 *         ("envelope" only for a calibrated golden: each quantity's largest
 *         distance from the band in half-widths, the step where it is
 *         largest, and whether it exceeds "widen"; a missing quantity has
 *         distance null and outside true)
 *       "pitfalls": [ { "id", "variant", "description", "caught", "check",
 *                       "verdict", "evidence", "step", "tensor", "layer",
 *                       "max_abs", "max_rel", "max_ulp", "value",
 *                       "threshold", "others": [ VERDICT... ] } ],
 *       "runs": [ { "name", "steps", "final": { SERIES: last value },
 *                   "metrics": { NAME: value } } ],
 *       "timing": { "seconds", "checks_seconds" } } ] }
 *   VERDICT = { "name", "verdict", "evidence", "step", "tensor", "layer",
 *               "max_abs", "max_rel", "max_ulp", "value", "threshold",
 *               "waiver", "seconds", "catalogue": [ ID... ] }
 *   "verdict" is "pass", "fail", "expected_divergence", "error",
 *   "not_tested" (a not_tested check: counted as skipped) or "waived" (a
 *   failure the check's waiver accepts: counted as passed, its evidence
 *   kept). "waiver" is the check's waived: reason, or null; with another
 *   verdict than "waived" the waiver is unused. Numbers
 *   that do not apply (NaN, step -1, empty tensor/layer) and non-finite
 *   numbers are null; doubles are written with the fewest digits that read
 *   back to the same double. */
#ifndef DLC_REPORT_H
#define DLC_REPORT_H

#include "judge/result.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

/* One line per check, per pitfall variant and for the golden comparison, a
 * summary line per scenario and a final "N passed, N failed" line. Evidence
 * of passing checks only when verbose; ANSI colour only when color (the
 * caller knows whether out is a terminal). */
dl_status dlc_report_text(FILE *out, const dlc_scenario_result *results, int n, bool color,
                          bool verbose);

/* env_json: the environment fingerprint as a JSON value, or NULL. */
dl_status dlc_report_json(const char *path, const dlc_scenario_result *results, int n,
                          const char *env_json);
/* <testsuites>, one <testsuite> per scenario; one <testcase> per check, per
 * pitfall variant ("pitfall G1 (variant)", a <failure> when missed) and for
 * the golden comparison (<skipped> without a golden). A waived failure is a
 * passing <testcase status="waived"> whose <system-out> holds its evidence
 * and reason. Valid against
 * tests/data/junit.xsd (the Jenkins/Ant JUnit schema). */
dl_status dlc_report_junit(const char *path, const dlc_scenario_result *results, int n);
/* One page, no scripts, no external resources: environment, a table of
 * checks and pitfalls per scenario, and SVG plots of loss curves, per-step
 * divergence from the reference run and per-layer divergence; for a
 * calibrated golden each envelope series over its band and the final
 * tensors' distances against the gate (the worst 24). */
dl_status dlc_report_html(const char *path, const dlc_scenario_result *results, int n,
                          const char *env_json);

/* report.json, junit.xml and report.html in dir (created, with its
 * parents, if missing): all three, or none when one fails. */
dl_status dlc_report_write_all(const char *dir, const dlc_scenario_result *results, int n,
                               const char *env_json);
/* Removes the three reports from dir (those of an earlier run), so that a
 * run that fails before writing its own leaves none that claims success. */
dl_status dlc_report_remove_all(const char *dir);

/* An unfinished run's folder (docs/design.md): `run --out DIR` writes the
 * marker DIR/.incomplete before anything else it writes there (creating
 * DIR) and removes it last, once its reports are written and only if no
 * scenario ended in an error; a run stopped by a signal, killed, ended in
 * an error or unable to write its reports leaves it, and `report DIR`
 * refuses such a folder (its traces may be partial, or an earlier run's
 * beside a later one's). */
#define DLC_REPORT_INCOMPLETE ".incomplete"
dl_status dlc_report_mark_incomplete(const char *dir);
/* Removes the marker (absent: fine). */
dl_status dlc_report_mark_complete(const char *dir);
/* DL_ERR_INVALID, saying the run did not finish, if dir holds the marker. */
dl_status dlc_report_check_complete(const char *dir);

/* The scenarios of the run that wrote a folder (docs/design.md): `run
 * --out DIR` writes DIR/manifest.txt after its reports and before it
 * removes the marker, naming the scenario folders of DIR/traces it wrote,
 * in its order (a first line saying what the file is, then one name per
 * line); `report DIR` reports those and leaves out the folders an earlier
 * run of other scenarios left there. A run removes the earlier manifest
 * with the earlier reports. */
#define DLC_REPORT_MANIFEST "manifest.txt"
dl_status dlc_report_write_manifest(const char *dir, const dlc_scenario_result *results, int n);
dl_status dlc_report_remove_manifest(const char *dir);
/* *names := the manifest's scenario folders, *n of them (free with
 * dlc_report_names_free); *n = -1 and *names NULL when dir holds no
 * manifest (a folder written before manifests: every folder is the run's).
 * A manifest that is not one or names something other than a plain folder
 * name (no '/', never "." or "..") is refused with DL_ERR_FORMAT. */
dl_status dlc_report_read_manifest(const char *dir, char ***names, int *n);
void dlc_report_names_free(char **names, int n);

#endif
