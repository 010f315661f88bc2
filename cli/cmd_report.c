/* dlcheck report DIR: the report of an earlier `run --out DIR`, rebuilt from
 * the traces it saved (the checks are evaluated again; nothing trains). */
#include "cli.h"

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
    "junit.xml and report.html in DIR. Exit codes as for run.\n";

static int reload_all(const char *dir, bool verbose) {
  char traces[4096];
  if (dlc_path(traces, sizeof traces, "%s/traces", dir)) {
    fprintf(stderr, "dlcheck report: %s\n", dl_last_error());
    return EXIT_USAGE;
  }
  DIR *d = opendir(traces);
  if (!d) {
    fprintf(stderr, "dlcheck report: %s: no traces (run `dlcheck run --out %s ...` first)\n",
            traces, dir);
    return EXIT_USAGE;
  }
  dlc_scenario_result results[64];
  int n = 0, code = EXIT_PASS;
  for (struct dirent *e; code == EXIT_PASS && (e = readdir(d)) && n < 64;) {
    if (e->d_name[0] == '.') continue;
    char sdir[4200];
    dlc_scenario *s;
    if (dlc_path(sdir, sizeof sdir, "%s/%s", traces, e->d_name) ||
        dlc_scenario_load(&s, sdir)) {
      fprintf(stderr, "dlcheck report: %s\n", dl_last_error());
      code = EXIT_USAGE;
      break;
    }
    dl_status st = dlc_scenario_reload(s, traces, &results[n]);
    dlc_scenario_free(s);
    n++;
    if (st) {
      fprintf(stderr, "dlcheck report: %s: %s\n", e->d_name, dl_last_error());
      code = EXIT_USAGE;
    } else if (!dlc_result_ok(&results[n - 1])) {
      code = EXIT_CHECK_FAILED;
    }
  }
  closedir(d);
  if (code != EXIT_USAGE) {
    dlc_report_text(stdout, results, n, cli_stdout_is_tty(), verbose);
    if (dlc_report_write_all(dir, results, n, cli_env_json())) {
      fprintf(stderr, "dlcheck report: writing %s: %s\n", dir, dl_last_error());
      code = EXIT_USAGE;
    }
  }
  for (int i = 0; i < n; i++) dlc_result_free(&results[i]);
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
  return reload_all(dir, verbose);
}
