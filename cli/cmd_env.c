/* dlcheck env: the environment fingerprint, and what changed since a golden. */
#include "cli.h"

#include "store/env.h"
#include "store/trace_io.h"
#ifdef DL_HAVE_CUDA
#include "backend/cuda/env_checks.h"
#endif

#include <stdio.h>
#include <string.h>

static const char env_help[] =
    "usage: dlcheck env [--json] [GOLDEN.h5]\n"
    "\n"
    "Prints this machine's environment fingerprint: CPU, OS, C library, compiler\n"
    "and flags, HDF5, and the CUDA driver, runtime, cuBLAS, cuDNN, NCCL and GPUs\n"
    "when present. With a golden (or trace) file, also lists every key whose value\n"
    "differs from the machine that recorded it.\n"
    "  --json   the fingerprint as one JSON object\n";

/* E1-E3: driver vs runtime, built architectures vs the GPU, built vs
 * loaded library versions. */
static void print_cuda_checks(void) {
#ifdef DL_HAVE_CUDA
  dl_cuda_check checks[3];
  dl_cuda_env_checks(0, checks);
  printf("\nCUDA environment checks:\n");
  for (int i = 0; i < 3; i++)
    printf("  %s  %-4s %s\n", checks[i].id,
           !checks[i].applicable ? "n/a"
           : checks[i].ok        ? "ok"
                                 : "FAIL",
           checks[i].message);
#else
  printf("\nCUDA environment checks (E1-E3): this build has no CUDA backend\n");
#endif
}

int cmd_env(int argc, char **argv) {
  bool json = false;
  const char *golden = NULL;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
      fputs(env_help, stdout);
      return EXIT_PASS;
    } else if (!strcmp(argv[i], "--json")) json = true;
    else if (argv[i][0] != '-' && !golden) golden = argv[i];
    else {
      fprintf(stderr, "dlcheck env: unexpected argument '%s'\n%s", argv[i], env_help);
      return EXIT_USAGE;
    }
  }
  dlc_env e;
  dlc_env_fingerprint(&e);
  static char now[DLC_ENV_JSON_MAX];
  if (dlc_env_to_json(&e, now, sizeof now)) {
    fprintf(stderr, "dlcheck env: %s\n", dl_last_error());
    return EXIT_USAGE;
  }
  if (json) printf("%s\n", now);
  else dlc_env_print(&e, stdout);
  if (!json) print_cuda_checks();
  if (!golden) return EXIT_PASS;
  static dlc_golden_meta meta;
  dlc_trace t;
  if (dlc_trace_load(golden, &t, &meta)) {
    fprintf(stderr, "dlcheck env: %s\n", dl_last_error());
    return EXIT_USAGE;
  }
  dlc_trace_free(&t);
  if (!meta.env_json[0]) {
    printf("\n%s holds no environment fingerprint\n", golden);
    return EXIT_PASS;
  }
  printf("\ndifferences from the machine that recorded %s:\n", golden);
  int ndiff = 0;
  if (dlc_env_diff(meta.env_json, now, stdout, &ndiff)) {
    fprintf(stderr, "dlcheck env: %s\n", dl_last_error());
    return EXIT_USAGE;
  }
  if (ndiff == 0) printf("  none\n");
  return EXIT_PASS;
}
