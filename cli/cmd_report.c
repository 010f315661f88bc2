/* dlcheck report DIR: the report of an earlier `run --out DIR`, rebuilt from
 * the traces it saved (the checks are evaluated again; nothing trains). */
#define _POSIX_C_SOURCE 200809L /* strdup */
#include "cli.h"

#include "io/atomic_file.h"
#include "run/execute.h"
#include "store/path.h"
#include "report/report.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char report_help[] =
    "usage: dlcheck report [-v] DIR\n"
    "\n"
    "DIR is the --out directory of an earlier `dlcheck run`: its traces/ hold every\n"
    "run's trace, the scenario files and the goldens they were compared with.\n"
    "Evaluates the checks again, prints the report and rewrites report.json,\n"
    "junit.xml and report.html in DIR. Exit codes as for run. A DIR whose run did\n"
    "not finish (DIR/.incomplete is there: the run was stopped, killed, or ended\n"
    "in an error) is refused with exit 2. Only the scenarios DIR/manifest.txt names\n"
    "are reported: those of the run that wrote DIR, not folders an earlier run of\n"
    "other scenarios left in DIR/traces.\n";

static int by_name(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The scenario folders under traces/, in name order (*names, *n); EXIT_USAGE
 * on failure, else -1. */
static int list_folders(const char *traces, const char *dir, char ***names, int *n) {
  *names = NULL;
  *n = 0;
  DIR *d = opendir(traces);
  if (!d) {
    fprintf(stderr, "dlcheck report: %s: no traces (run `dlcheck run --out %s ...` first)\n",
            traces, dir);
    return EXIT_USAGE;
  }
  for (struct dirent *e; (e = readdir(d));) {
    if (e->d_name[0] == '.') continue;
    char **grown = realloc(*names, (size_t)(*n + 1) * sizeof **names);
    if (grown) *names = grown;
    if (!grown || !(grown[*n] = strdup(e->d_name))) {
      closedir(d);
      fprintf(stderr, "dlcheck report: out of memory listing %s\n", traces);
      return EXIT_USAGE;
    }
    ++*n;
  }
  closedir(d);
  if (*n) qsort(*names, (size_t)*n, sizeof **names, by_name);
  return -1;
}

static bool named(char *const *names, int n, const char *name) {
  for (int i = 0; i < n; i++)
    if (!strcmp(names[i], name)) return true;
  return false;
}

/* The scenarios of the run that wrote dir: those its manifest names, in
 * the run's order, saying which folders an earlier run left beside them;
 * without a manifest (written before there were any) every folder. */
static int list_scenarios(const char *traces, const char *dir, char ***names, int *n) {
  *names = NULL, *n = 0;
  char **folders;
  int nfolders;
  int code = list_folders(traces, dir, &folders, &nfolders);
  if (code >= 0) return code;
  if (dlc_report_read_manifest(dir, names, n)) {
    fprintf(stderr, "dlcheck report: %s\n", dl_last_error());
    dlc_report_names_free(folders, nfolders);
    return EXIT_USAGE;
  }
  if (*n < 0) {
    *names = folders;
    *n = nfolders;
    return -1;
  }
  for (int i = 0; i < nfolders; i++)
    if (!named(*names, *n, folders[i]))
      fprintf(stderr,
              "dlcheck report: %s/%s: left out, an earlier run's (%s/%s names the scenarios of "
              "the run that wrote %s)\n",
              traces, folders[i], dir, DLC_REPORT_MANIFEST, dir);
  dlc_report_names_free(folders, nfolders);
  return -1;
}

/* Every scenario of the run is in the report: one that cannot be reloaded is
 * an ERROR there (and exit 2), never left out. */
static int reload_all(const char *dir, bool verbose) {
  char traces[4096];
  if (dlc_path(traces, sizeof traces, "%s/traces", dir)) {
    fprintf(stderr, "dlcheck report: %s\n", dl_last_error());
    return EXIT_USAGE;
  }
  char **names = NULL;
  int n = 0;
  int code = list_scenarios(traces, dir, &names, &n);
  dlc_scenario_result *results = code < 0 ? calloc((size_t)n + 1, sizeof *results) : NULL;
  if (code < 0 && !results) fprintf(stderr, "dlcheck report: out of memory\n");
  code = results ? EXIT_PASS : EXIT_USAGE;
  for (int i = 0; results && i < n; i++) {
    char sdir[4200];
    dlc_scenario *s = NULL;
    dl_status st = dlc_path(sdir, sizeof sdir, "%s/%s", traces, names[i]);
    if (!st) st = dlc_scenario_load(&s, sdir);
    if (!st) st = dlc_scenario_reload(s, traces, &results[i]);
    else dlc_result_set_error(&results[i], names[i], dl_last_error());
    dlc_scenario_free(s);
    if (st) {
      fprintf(stderr, "dlcheck report: %s: %s\n", names[i], dl_last_error());
      code = EXIT_USAGE;
    } else if (!dlc_result_ok(&results[i]) && code == EXIT_PASS) {
      code = EXIT_CHECK_FAILED;
    }
  }
  if (results) {
    dlc_report_text(stdout, results, n, cli_stdout_is_tty(), verbose);
    if (dlc_report_write_all(dir, results, n, cli_env_json())) {
      fprintf(stderr, "dlcheck report: writing %s: %s\n", dir, dl_last_error());
      code = EXIT_USAGE;
    }
  }
  for (int i = 0; results && i < n; i++) dlc_result_free(&results[i]);
  free(results);
  dlc_report_names_free(names, n);
  return code;
}

int cmd_report(int argc, char **argv) {
  const char *dir = NULL;
  bool verbose = false;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
      fputs(report_help, stdout);
      return EXIT_PASS;
    } else if (!strcmp(argv[i], "-v") || !strcmp(argv[i], "--verbose")) verbose = true;
    else if (argv[i][0] != '-' && !dir) dir = argv[i];
    else {
      fprintf(stderr, "dlcheck report: unexpected argument '%s'\n%s", argv[i], report_help);
      return EXIT_USAGE;
    }
  }
  if (!dir) {
    fprintf(stderr, "dlcheck report: name the directory\n%s", report_help);
    return EXIT_USAGE;
  }
  if (dlc_report_check_complete(dir)) {
    fprintf(stderr, "dlcheck report: %s\n", dl_last_error());
    return EXIT_USAGE;
  }
  /* A signal removes the reports being written; temporaries of killed
   * writers go first. */
  int code = cli_signals_start();
  if (code < 0) dl_atomic_remove_stale_below(dir);
  return code >= 0 ? code : reload_all(dir, verbose);
}
