/* dlcheck compare: two traces or goldens, numbers and environment side by
 * side: the portability report of a run recorded on two machines. */
#include "cli.h"

#include "judge/checks_impl.h"
#include "store/trace_io.h"

#include <stdio.h>
#include <string.h>

static const char compare_help[] =
    "usage: dlcheck compare [--tolerance RULE] A.h5 B.h5\n"
    "\n"
    "Compares two traces or goldens (B is the reference): every per-step series\n"
    "both hold, and the final parameters and buffers, under RULE (bitwise, ulp(N)\n"
    "or close(RTOL, ATOL); default bitwise). Reports the first diverging step and\n"
    "tensor, the largest differences, and the environment keys that differ\n"
    "between the machines that recorded them, always A's value first, then B's.\n"
    "Exit 0 if they agree, 1 if not.\n";

static void add_series(dlc_check_spec *spec, const dlc_trace *a, const dlc_trace *b) {
  for (int i = 0; i < a->nseries && spec->nquantities < DLC_MAX_QUANTITIES - 2; i++)
    if (dlc_trace_series(b, a->series[i].name))
      snprintf(spec->quantities[spec->nquantities++], DLC_NAME_MAX, "%s", a->series[i].name);
  snprintf(spec->quantities[spec->nquantities++], DLC_NAME_MAX, "params");
  snprintf(spec->quantities[spec->nquantities++], DLC_NAME_MAX, "buffers");
}

/* The run name that stands for a file in the evidence: its path, or, when
 * the path does not fit, "A: ...<its end>" — the check finds the two runs
 * by name, so two long paths that share their start must not become the
 * same name (the files would be compared with themselves). */
static void run_label(char name[DLC_NAME_MAX], const char *path, const char *which) {
  size_t n = strlen(path);
  if (n < DLC_NAME_MAX) {
    memcpy(name, path, n + 1);
    return;
  }
  int keep = DLC_NAME_MAX - 1 - (int)strlen(which) - 5; /* "A: ..." */
  snprintf(name, DLC_NAME_MAX, "%s: ...%s", which, path + n - (size_t)keep);
}

static int compare(const char *pa, const char *pb, const dlc_tolerance *tol) {
  static dlc_golden_meta ma, mb;
  dlc_trace t[2];
  if (dlc_trace_load(pa, &t[0], &ma)) {
    fprintf(stderr, "dlcheck compare: %s\n", dl_last_error());
    return EXIT_USAGE;
  }
  if (dlc_trace_load(pb, &t[1], &mb)) {
    fprintf(stderr, "dlcheck compare: %s\n", dl_last_error());
    dlc_trace_free(&t[0]);
    return EXIT_USAGE;
  }
  /* Runs named by file; B is the equivalence check's reference (a), which
   * its evidence names second: "A.h5 vs B.h5". */
  run_label(t[0].run, pa, "A");
  run_label(t[1].run, pb, "B");
  dlc_check_spec spec = {.name = "compare", .kind = "equivalence", .tol = *tol};
  snprintf(spec.a, sizeof spec.a, "%s", t[1].run);
  snprintf(spec.b, sizeof spec.b, "%s", t[0].run);
  add_series(&spec, &t[0], &t[1]);
  dlc_verdict v;
  dlc_verdict_init(&v, "compare", "", "");
  int code = EXIT_USAGE;
  if (dlc_check_equivalence(&spec, t, 2, &v) == DL_OK) {
    printf("%s: %s\n", dlc_verdict_name(v.kind), v.evidence);
    code = v.kind == DLC_PASS ? EXIT_PASS : EXIT_CHECK_FAILED;
  } else {
    fprintf(stderr, "dlcheck compare: %s\n", dl_last_error());
  }
  if (ma.env_json[0] && mb.env_json[0]) {
    int ndiff = 0;
    printf("\nenvironment (%s -> %s):\n", pa, pb);
    if (dlc_env_diff(ma.env_json, mb.env_json, stdout, &ndiff) == DL_OK && ndiff == 0)
      printf("  the same\n");
  }
  dlc_trace_free(&t[0]);
  dlc_trace_free(&t[1]);
  return code;
}

int cmd_compare(int argc, char **argv) {
  dlc_tolerance tol = dlc_tolerance_bitwise();
  const char *files[2];
  int nfiles = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
      fputs(compare_help, stdout);
      return EXIT_PASS;
    }
    if (!strcmp(argv[i], "--tolerance") && i + 1 < argc) {
      if (dlc_tolerance_parse(argv[++i], &tol)) {
        fprintf(stderr, "dlcheck compare: %s\n", dl_last_error());
        return EXIT_USAGE;
      }
    } else if (argv[i][0] != '-' && nfiles < 2) {
      files[nfiles++] = argv[i];
    } else {
      fprintf(stderr, "dlcheck compare: unexpected argument '%s'\n%s", argv[i], compare_help);
      return EXIT_USAGE;
    }
  }
  if (nfiles != 2) {
    fprintf(stderr, "dlcheck compare: name two trace files\n%s", compare_help);
    return EXIT_USAGE;
  }
  return compare(files[0], files[1], &tol);
}
