/* The dlcheck command line: each command in its own file. */
#ifndef DLCHECK_CLI_H
#define DLCHECK_CLI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Exit codes (docs/design.md). */
enum { EXIT_PASS = 0, EXIT_CHECK_FAILED = 1, EXIT_USAGE = 2, EXIT_ENVIRONMENT = 3 };

/* dlcheck argv[1] argv[2...]: the command's exit code (cli/dispatch.c). */
int cli_command(int argc, char **argv);

int cmd_run(int argc, char **argv, bool record);
int cmd_list(int argc, char **argv);
int cmd_env(int argc, char **argv);
int cmd_compare(int argc, char **argv);
int cmd_report(int argc, char **argv);
int cmd_calibrate(int argc, char **argv);
/* dlcheck record --repeat-from A.h5 B.h5 C.h5 --out GOLDEN.h5 */
int cmd_record_from(int argc, char **argv);
/* dlcheck calibrate's table for a calibrated golden; exit code. */
int cli_print_calibration(const char *path);

/* The repository root: $DLCHECK_ROOT, else the source tree it was built from. */
const char *cli_root(void);

/* A progress line on stderr when it is a terminal, nothing otherwise. */
void cli_progress(void *user, const char *scenario, const char *what, int64_t step, int64_t steps);
void cli_progress_done(void);
bool cli_stdout_is_tty(void);
/* run/record/report/record --repeat-from (cli/scratch.c): the scratch folder $TMPDIR/dlcheck-PID-XXXXXX
 * into out, and its removal;
 * a thread that takes SIGINT/SIGTERM/SIGHUP, removes the files being
 * written and the scratch folder and exits 128 + signal. Each returns an
 * exit code on failure (with a message), else -1. */
int cli_scratch_make(char *out, size_t len);
/* The scratch folders in $TMPDIR that killed commands (kill -9) left:
 * those of processes that are gone (atomic_file.h: dl_owner_gone). Best
 * effort, silent. Their temporaries elsewhere: dl_atomic_remove_stale_below. */
void cli_sweep_scratch(void);
void cli_scratch_remove(void);
int cli_signals_start(void);
/* Ends the signal thread, if started (main, when the command returns). */
void cli_signals_stop(void);

/* This machine's environment fingerprint as JSON (for the reports), or NULL. */
const char *cli_env_json(void);

#endif
