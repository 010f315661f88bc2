#include "cli.h"

#include "store/env.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

const char *cli_root(void) {
  const char *r = getenv("DLCHECK_ROOT");
  return r && *r ? r : DL_SOURCE_DIR;
}

bool cli_stdout_is_tty(void) { return isatty(STDOUT_FILENO); }

const char *cli_env_json(void) {
  static char json[DLC_ENV_JSON_MAX];
  dlc_env e;
  dlc_env_fingerprint(&e);
  return dlc_env_to_json(&e, json, sizeof json) == DL_OK ? json : NULL;
}

static bool line_open;

void cli_progress(void *user, const char *scenario, const char *what, int64_t step, int64_t steps) {
  (void)user;
  if (!isatty(STDERR_FILENO)) return;
  fprintf(stderr, "\r\033[K[%s] %s: step %lld/%lld", scenario, what, (long long)step,
          (long long)steps);
  fflush(stderr);
  line_open = true;
}

void cli_progress_done(void) {
  if (line_open) fprintf(stderr, "\r\033[K");
  line_open = false;
}
