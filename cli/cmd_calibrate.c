/* dlcheck calibrate GOLDEN.h5, and dlcheck record --repeat-from: calibrated
 * goldens from recorded traces and the rules their repeats support. */
#include "cli.h"

#include "store/trace_io.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char calibrate_help[] =
    "usage: dlcheck calibrate GOLDEN.h5\n"
    "\n"
    "For a calibrated golden (dlcheck record --repeat N, or --repeat-from):\n"
    "per quantity the envelope's width, the tightest ulp(N) and close() rules\n"
    "every repeat meets against the reference, the golden's current rule and\n"
    "its margin (how many times the largest repeat difference it allows; below\n"
    "1 the rule rejects runs that differ only as the repeats did).\n"
    "Exit 0; 2 for a file that is not a calibrated golden.\n";

static const char record_from_help[] =
    "usage: dlcheck record --repeat-from A.h5 B.h5 C.h5 [...] --out GOLDEN.h5 [--widen F]\n"
    "\n"
    "A calibrated golden from N >= 3 traces of the same run (PyTorch recorder\n"
    "traces of one training repeated, or engine traces): A is the reference,\n"
    "all of them make the envelope, widened F times by the gate (default 4).\n"
    "Prints what `dlcheck calibrate` prints.\n";

/* Golden tolerances are kept per quantity class: finals under the rule of
 * params/buffers, series under their own name. */
static const char *golden_rule(const void *user, const char *quantity) {
  const dlc_golden_meta *m = user;
  if (strncmp(quantity, "param/", 6) == 0) return dlc_golden_meta_tol(m, "params");
  if (strncmp(quantity, "buffer/", 7) == 0) return dlc_golden_meta_tol(m, "buffers");
  return dlc_golden_meta_tol(m, quantity);
}

int cli_print_calibration(const char *path) {
  static dlc_golden_meta meta;
  dlc_trace ref;
  dlc_envelope env;
  if (dlc_golden_load(path, &ref, &meta, &env)) {
    fprintf(stderr, "dlcheck calibrate: %s\n", dl_last_error());
    return EXIT_USAGE;
  }
  int code = EXIT_PASS;
  if (env.repeats == 0) {
    fprintf(stderr,
            "dlcheck calibrate: %s is a single-run golden: record it with "
            "`dlcheck record --repeat N` to calibrate\n",
            path);
    code = EXIT_USAGE;
  } else {
    dlc_envelope_recommend(&env, &ref, golden_rule, &meta, stdout);
  }
  dlc_envelope_free(&env);
  dlc_trace_free(&ref);
  return code;
}

int cmd_calibrate(int argc, char **argv) {
  if (argc == 2 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))) {
    fputs(calibrate_help, stdout);
    return EXIT_PASS;
  }
  if (argc != 2 || argv[1][0] == '-') {
    fprintf(stderr, "dlcheck calibrate: name one golden file\n%s", calibrate_help);
    return EXIT_USAGE;
  }
  return cli_print_calibration(argv[1]);
}

typedef struct from_args {
  const char **files;
  int n;
  const char *out;
  double widen;
} from_args;

static int parse_from(int argc, char **argv, from_args *a) {
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
      fputs(record_from_help, stdout);
      return EXIT_PASS;
    }
    char *end = NULL;
    if (!strcmp(argv[i], "--out") && i + 1 < argc) a->out = argv[++i];
    else if (!strcmp(argv[i], "--widen") && i + 1 < argc) {
      a->widen = strtod(argv[++i], &end);
      if (*end || !(a->widen >= 1.0)) {
        fprintf(stderr, "dlcheck record: --widen must be a number >= 1, got '%s'\n", argv[i]);
        return EXIT_USAGE;
      }
    } else if (!strcmp(argv[i], "--repeat-from")) continue;
    else if (argv[i][0] != '-') a->files[a->n++] = argv[i];
    else {
      fprintf(stderr, "dlcheck record: unexpected argument '%s'\n%s", argv[i], record_from_help);
      return EXIT_USAGE;
    }
  }
  if (a->n < DLC_ENVELOPE_MIN_REPEATS || !a->out) {
    fprintf(stderr, "dlcheck record: --repeat-from needs at least %d traces and --out\n%s",
            DLC_ENVELOPE_MIN_REPEATS, record_from_help);
    return EXIT_USAGE;
  }
  return -1;
}

/* The golden of the first trace, its fingerprint (origin's, read with it)
 * kept, float32 closeness. */
static dl_status save_from(const from_args *a, const dlc_trace *runs,
                           const dlc_golden_meta *origin) {
  static dlc_golden_meta meta;
  DL_TRY(dlc_golden_meta_recorded(&meta, origin->env_json, false));
  char what[512];
  snprintf(what, sizeof what, "%d recorded traces, %.400s the reference", a->n, a->files[0]);
  dlc_envelope env;
  DL_TRY(dlc_envelope_build(runs, a->n, a->widen, what, &env));
  dl_status st = dlc_golden_save_calibrated(a->out, &runs[0], &meta, &env);
  dlc_envelope_free(&env);
  return st;
}

int cmd_record_from(int argc, char **argv) {
  from_args a = {.widen = DLC_ENVELOPE_WIDEN_DEFAULT};
  a.files = calloc((size_t)argc, sizeof *a.files);
  dlc_trace *runs = calloc((size_t)argc, sizeof *runs);
  int code = a.files && runs ? parse_from(argc, argv, &a) : EXIT_USAGE;
  if (code < 0) code = cli_signals_start(); /* a signal removes the golden being written */
  int loaded = 0;
  dl_status st = DL_OK;
  static dlc_golden_meta origin; /* the reference's fingerprint */
  for (; code < 0 && !st && loaded < a.n; loaded++)
    st = dlc_trace_load(a.files[loaded], &runs[loaded], loaded ? NULL : &origin);
  if (code < 0 && !st) st = save_from(&a, runs, &origin);
  if (code < 0 && st) {
    fprintf(stderr, "dlcheck record: %s\n", dl_last_error());
    code = EXIT_USAGE;
  }
  if (code < 0) {
    printf("recorded %s (calibrated from %d traces)\n", a.out, a.n);
    code = cli_print_calibration(a.out);
  }
  for (int i = 0; i < loaded; i++) dlc_trace_free(&runs[i]);
  free(runs);
  free(a.files);
  return code;
}
