/* dlcheck COMMAND ...: the command line's dispatch, apart from main so that
 * the CLI fuzz target (fuzz/target_cli.c) runs the same code. */
#include "cli.h"

#include <stdio.h>
#include <string.h>

static const char usage[] =
    "usage: dlcheck COMMAND [options]\n"
    "\n"
    "commands:\n"
    "  run SCENARIO_DIR...     run scenarios, check invariants, compare with the golden\n"
    "  record SCENARIO_DIR...  write golden files (atomically); --repeat N: calibrated\n"
    "  calibrate GOLDEN.h5     tightest rules a calibrated golden's repeats support\n"
    "  compare A.h5 B.h5       compare two traces / goldens (numbers and environment)\n"
    "  report DIR              render the report of a `run --out DIR` again\n"
    "  env [--json] [G.h5]     environment fingerprint (and what differs from a golden)\n"
    "  list                    scenarios and the catalogue pitfalls each covers\n"
    "\n"
    "`dlcheck COMMAND --help` describes a command's options.\n"
    "exit codes: 0 all checks pass, 1 a check failed or a pitfall was missed,\n"
    "            2 bad usage or input, 3 the environment cannot run what was asked\n";

int cli_command(int argc, char **argv) {
  if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
    fputs(usage, argc < 2 ? stderr : stdout);
    return argc < 2 ? EXIT_USAGE : EXIT_PASS;
  }
  if (strcmp(argv[1], "--version") == 0) {
    printf("dlcheck %s\n", DLCHECK_VERSION);
    return EXIT_PASS;
  }
  const char *cmd = argv[1];
  /* Any command, not only the next run: after a kill -9 in CI the next
   * command may be `report` or `compare`, and the folder is never needed. */
  cli_sweep_scratch();
  if (strcmp(cmd, "run") == 0) return cmd_run(argc - 1, argv + 1, false);
  if (strcmp(cmd, "record") == 0) {
    for (int i = 2; i < argc; i++)
      if (strcmp(argv[i], "--repeat-from") == 0) return cmd_record_from(argc - 1, argv + 1);
    return cmd_run(argc - 1, argv + 1, true);
  }
  if (strcmp(cmd, "calibrate") == 0) return cmd_calibrate(argc - 1, argv + 1);
  if (strcmp(cmd, "list") == 0) return cmd_list(argc - 1, argv + 1);
  if (strcmp(cmd, "env") == 0) return cmd_env(argc - 1, argv + 1);
  if (strcmp(cmd, "compare") == 0) return cmd_compare(argc - 1, argv + 1);
  if (strcmp(cmd, "report") == 0) return cmd_report(argc - 1, argv + 1);
  fprintf(stderr, "dlcheck: unknown command '%s'\n\n%s", cmd, usage);
  return EXIT_USAGE;
}
