/* dlcheck: checks that a training pipeline computes what it should. */
#define _POSIX_C_SOURCE 200809L /* _exit, sigaction */
#include "cli.h"

#include "io/h5.h"

#include <signal.h>
#include <stdio.h>
#include <unistd.h>

/* A file grown past `ulimit -f` raises SIGXFSZ, whose default action kills
 * the process with no message and leaves its temporaries and scratch
 * folder behind. Ignored, the write fails with EFBIG instead, which every
 * writer reports (exit 2, the file named) and cleans up after. */
static void ignore_file_size_signal(void) {
  struct sigaction ign = {.sa_handler = SIG_IGN};
  sigemptyset(&ign.sa_mask);
  sigaction(SIGXFSZ, &ign, NULL);
}

/* A failed HDF5 create or close (disk full) leaves a file HDF5's exit handler
 * crashes on (engine/io/h5.h): the exit code is kept by leaving with _exit. */
int main(int argc, char **argv) {
  ignore_file_size_signal();
  dl_h5_quiet_for_good();
  int code = cli_command(argc, argv);
  cli_signals_stop();
  if (dl_h5_close_failed()) {
    fflush(stdout);
    fflush(stderr);
    _exit(code);
  }
  return code;
}
