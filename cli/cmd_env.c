/* dlcheck env: the environment fingerprint, and what changed since a golden. */
#include "cli.h"

#include "store/env.h"
#include "judge/env_torch.h"
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
    "when present, and E1-E3 on them. With a golden (or trace) file, also lists\n"
    "every key whose value differs from the machine that recorded it; for a trace\n"
    "python/dlcheck's recorder wrote, E1-E3 of the PyTorch that recorded it (its\n"
    "CUDA runtime against the driver, its arch list against each GPU, the cuDNN\n"
    "and NCCL it was built with against those it loaded); one that fails makes\n"
    "the exit status 1.\n"
    "  --json   the fingerprint as one JSON object\n";

static void print_checks(const dl_cuda_check checks[3]) {
  for (int i = 0; i < 3; i++)
    printf("  %s  %-4s %s\n", checks[i].id,
           !checks[i].applicable ? "n/a"
           : checks[i].ok        ? "ok"
                                 : "FAIL",
           checks[i].message);
}

/* E1-E3 of this build: driver vs runtime, built architectures vs the GPU,
 * built vs loaded library versions. */
static void print_cuda_checks(void) {
#ifdef DL_HAVE_CUDA
  dl_cuda_check checks[3];
  dl_cuda_env_checks(0, checks);
  printf("\nCUDA environment checks:\n");
  print_checks(checks);
#else
  printf("\nCUDA environment checks (E1-E3): this build has no CUDA backend\n");
#endif
}

/* E1-E3 of the PyTorch that recorded `file`, when a recorder wrote it;
 * *failed says whether one failed. */
static dl_status print_torch_checks(const char *file, const char *env_json, bool *failed) {
  dl_cuda_check checks[3];
  bool found;
  *failed = false;
  DL_TRY(dlc_env_torch_checks(env_json, checks, &found));
  if (!found) return DL_OK;
  printf("\nCUDA environment checks of the PyTorch that recorded %s:\n", file);
  print_checks(checks);
  for (int i = 0; i < 3; i++) *failed = *failed || !checks[i].ok;
  return DL_OK;
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
  bool torch_failed = false;
  if (!json && print_torch_checks(golden, meta.env_json, &torch_failed)) {
    fprintf(stderr, "dlcheck env: %s: %s\n", golden, dl_last_error());
    return EXIT_USAGE;
  }
  printf("\ndifferences from the machine that recorded %s:\n", golden);
  int ndiff = 0;
  if (dlc_env_diff(meta.env_json, now, stdout, &ndiff)) {
    fprintf(stderr, "dlcheck env: %s\n", dl_last_error());
    return EXIT_USAGE;
  }
  if (ndiff == 0) printf("  none\n");
  return torch_failed ? EXIT_CHECK_FAILED : EXIT_PASS;
}
