/* dlcheck compare: two traces or goldens, numbers and environment side by
 * side: the portability report of a run recorded on two machines. */
#include "cli.h"

#include "judge/checks_impl.h"
#include "judge/divergence.h"
#include "store/trace_io.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static const char compare_help[] =
    "usage: dlcheck compare [--tolerance RULE] A.h5 B.h5\n"
    "\n"
    "Compares two traces or goldens (B is the reference): every per-step series\n"
    "both hold, every final tensor (parameters, buffers, gradients, initial\n"
    "weights), the layer statistics at every step both recorded, the metrics both\n"
    "hold and, under a bitwise rule, the per-step digests, under RULE (bitwise,\n"
    "ulp(N) or close(RTOL, ATOL); default bitwise); says what it did not compare\n"
    "(text notes, what only one file holds). Reports the first diverging step and\n"
    "tensor, the largest differences, and the environment keys that differ\n"
    "between the machines that recorded them, always A's value first, then B's.\n"
    "Exit 0 if they agree, 1 if not.\n";

/* The equivalence check's part: every series both hold, and the final
 * parameters, buffers and gradients. */
static void add_series(dlc_check_spec *spec, const dlc_trace *a, const dlc_trace *b) {
  for (int i = 0; i < a->nseries && spec->nquantities < DLC_MAX_QUANTITIES - 3; i++)
    if (dlc_trace_series(b, a->series[i].name))
      snprintf(spec->quantities[spec->nquantities++], DLC_NAME_MAX, "%s", a->series[i].name);
  snprintf(spec->quantities[spec->nquantities++], DLC_NAME_MAX, "params");
  snprintf(spec->quantities[spec->nquantities++], DLC_NAME_MAX, "buffers");
  snprintf(spec->quantities[spec->nquantities++], DLC_NAME_MAX, "grads");
}

/* ---- what the equivalence check does not cover -------------------------- */

/* Text appended to a fixed buffer (cut when full). */
typedef struct text {
  char s[8192];
  size_t n;
} text;

static void say(text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(text *t, const char *fmt, ...) {
  if (t->n >= sizeof t->s - 1) return;
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(t->s + t->n, sizeof t->s - t->n, fmt, ap);
  va_end(ap);
  if (n > 0) t->n = t->n + (size_t)n < sizeof t->s ? t->n + (size_t)n : sizeof t->s - 1;
}

static bool covered_final(const char *name) {
  return !strncmp(name, "param/", 6) || !strncmp(name, "buffer/", 7) || !strncmp(name, "grad/", 5);
}

/* Every other final tensor (init/: the initial weights, and any other
 * prefix), in A's order, then those only B holds. */
static void compare_other_finals(const dlc_trace t[2], const dlc_tolerance *tol, text *diff,
                                 int *compared) {
  for (int i = 0; i < t[0].nfinals; i++) {
    const char *name = t[0].finals[i].name;
    if (covered_final(name)) continue;
    const dl_tensor *b = dlc_trace_final(&t[1], name);
    ++*compared;
    if (!b) {
      say(diff, "%s is missing from %s. ", name, t[1].run);
      continue;
    }
    dlc_diff d = dlc_compare_tensors(&t[0].finals[i].t, b, tol);
    char desc[512];
    if (!d.ok)
      say(diff, "%s differs (%s vs %s): %s. ", name, t[0].run, t[1].run,
          dlc_diff_describe(&d, tol, desc, sizeof desc));
  }
  for (int i = 0; i < t[1].nfinals; i++)
    if (!covered_final(t[1].finals[i].name) && !dlc_trace_final(&t[0], t[1].finals[i].name))
      say(diff, "%s is missing from %s. ", t[1].finals[i].name, t[0].run);
}

static const dlc_layer_stats *stats_at(const dlc_trace *t, int64_t step) {
  for (int i = 0; i < t->nstats; i++)
    if (t->stats[i].step == step) return &t->stats[i];
  return NULL;
}

/* Layer statistics at every step both recorded them (a golden records
 * every early step, a trace its own schedule): the first that differs. */
static void compare_stats(const dlc_trace t[2], const dlc_tolerance *tol, text *diff, int *steps) {
  for (int i = 0; i < t[0].nstats; i++) {
    const dlc_layer_stats *a = &t[0].stats[i], *b = stats_at(&t[1], a->step);
    if (!b) continue;
    ++*steps;
    bool same_layers = a->nlayers == b->nlayers;
    for (int l = 0; same_layers && l < a->nlayers; l++)
      same_layers = strcmp(a->layer[l], b->layer[l]) == 0;
    if (!same_layers) {
      say(diff, "Layer statistics at step %lld: the layers differ (%d in %s, %d in %s). ",
          (long long)a->step, a->nlayers, t[0].run, b->nlayers, t[1].run);
      return;
    }
    for (int l = 0; l < a->nlayers; l++) {
      dlc_diff d = dlc_compare_f64(a->stat[l], b->stat[l], DLC_STAT_COUNT, tol);
      if (d.ok) continue;
      say(diff,
          "Layer statistics first differ at step %lld, layer %s, %s: %.9g (%s) vs %.9g "
          "(%s). ",
          (long long)a->step, a->layer[l], dlc_stat_names[d.first_bad], d.a_at_first, t[0].run,
          d.b_at_first, t[1].run);
      return;
    }
  }
}

/* The per-step digests (bit hashes of named tensors): only a bitwise rule
 * can ask for them to agree. */
static void compare_digests(const dlc_trace t[2], text *diff) {
  int j = 0;
  int64_t step = dlc_first_digest_step(&t[0], &t[1], &j);
  if (step >= 0)
    say(diff, "Digests first differ after step %lld in %s. ", (long long)step,
        t[0].digest_names[j]);
  else if (t[0].ndigest != t[1].ndigest || t[0].digest_steps != t[1].digest_steps)
    say(diff, "Digests: %d tensors over %lld steps in %s, %d over %lld in %s. ", t[0].ndigest,
        (long long)t[0].digest_steps, t[0].run, t[1].ndigest, (long long)t[1].digest_steps,
        t[1].run);
}

static const dlc_metric *metric(const dlc_trace *t, const char *name) {
  for (int i = 0; i < t->nmetrics; i++)
    if (!strcmp(t->metrics[i].name, name)) return &t->metrics[i];
  return NULL;
}

/* Memory measurements (peak_bytes, inference_peak_*) depend on how the run
 * was executed (rank threads or processes, the allocator), not on what it
 * computed: listed as not compared. */
static bool memory_metric(const char *name) {
  return strstr(name, "peak") || strstr(name, "bytes");
}

static void compare_metrics(const dlc_trace t[2], const dlc_tolerance *tol, text *diff,
                            text *skipped, int *compared) {
  for (int i = 0; i < t[0].nmetrics; i++) {
    const dlc_metric *a = &t[0].metrics[i], *b = metric(&t[1], a->name);
    if (memory_metric(a->name)) {
      say(skipped, "metric %s (memory: depends on how the run executed); ", a->name);
      continue;
    }
    if (!b) {
      say(skipped, "metric %s (only in %s); ", a->name, t[0].run);
      continue;
    }
    ++*compared;
    dlc_diff d = dlc_compare_f64(&a->value, &b->value, 1, tol);
    if (!d.ok)
      say(diff, "Metric %s: %.9g (%s) vs %.9g (%s). ", a->name, a->value, t[0].run, b->value,
          t[1].run);
  }
  for (int i = 0; i < t[1].nmetrics; i++)
    if (!metric(&t[0], t[1].metrics[i].name) && !memory_metric(t[1].metrics[i].name))
      say(skipped, "metric %s (only in %s); ", t[1].metrics[i].name, t[1].run);
}

static void series_only_in(const dlc_trace *x, const dlc_trace *y, text *skipped) {
  for (int i = 0; i < x->nseries; i++)
    if (!dlc_trace_series(y, x->series[i].name))
      say(skipped, "series %s (only in %s); ", x->series[i].name, x->run);
}

/* Everything else a trace holds, in the order the files were named;
 * returns whether it all agrees. */
static bool compare_rest(const dlc_trace t[2], const dlc_tolerance *tol, text *diff, text *done,
                         text *skipped) {
  int finals = 0, steps = 0, metrics = 0;
  compare_other_finals(t, tol, diff, &finals);
  compare_stats(t, tol, diff, &steps);
  bool bitwise = tol->kind == DLC_TOL_BITWISE;
  if (bitwise) compare_digests(t, diff);
  compare_metrics(t, tol, diff, skipped, &metrics);
  series_only_in(&t[0], &t[1], skipped);
  series_only_in(&t[1], &t[0], skipped);
  say(done,
      "also compared: %d other final tensors (initial weights), layer statistics at %d "
      "common step(s), %s, %d metrics",
      finals, steps,
      bitwise ? "per-step digests" : "not the per-step digests (bit hashes: bitwise only)",
      metrics);
  if (t[0].nnotes || t[1].nnotes) say(skipped, "notes (text: where each run computed); ");
  return diff->n == 0;
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
  static dlc_verdict v;
  static text diff, done, skipped;
  diff.n = done.n = skipped.n = 0;
  diff.s[0] = done.s[0] = skipped.s[0] = '\0';
  dlc_verdict_init(&v, "compare", "", "");
  int code = EXIT_USAGE;
  if (dlc_check_equivalence(&spec, t, 2, &v) == DL_OK) {
    bool rest = compare_rest(t, tol, &diff, &done, &skipped);
    if (!rest && v.kind == DLC_PASS) {
      v.kind = DLC_FAIL;
      size_t len = strlen(v.evidence);
      if (len && v.evidence[len - 1] == '.') len--;
      printf("%s: %.*s, but they differ in the rest: %s\n", dlc_verdict_name(v.kind), (int)len,
             v.evidence, diff.s);
    } else {
      printf("%s: %s%s%s\n", dlc_verdict_name(v.kind), v.evidence, rest ? "" : " ", diff.s);
    }
    printf("(%s", done.s);
    if (skipped.n) printf("; not compared: %.*s", (int)skipped.n - 2, skipped.s);
    printf(")\n");
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
