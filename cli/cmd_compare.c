/* dlcheck compare: two traces or goldens, numbers and environment side by
 * side: the portability report of a run recorded on two machines. */
#include "cli.h"

#include "judge/checks_impl.h"
#include "judge/divergence.h"
#include "judge/envelope.h"
#include "store/trace_io.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static const char compare_help[] =
    "usage: dlcheck compare [--tolerance RULE] A.h5 B.h5\n"
    "       dlcheck compare --envelope A.h5 CALIBRATED.h5\n"
    "\n"
    "Compares two traces or goldens (B is the reference): every per-step series\n"
    "both hold, every final tensor (parameters, buffers, gradients, initial\n"
    "weights), the layer statistics at every step both recorded (two goldens: at\n"
    "the same steps), the metrics and which notes (both must hold the same), the\n"
    "seeds and scenario hashes, two goldens' tolerances and envelopes and, under\n"
    "a bitwise rule, the per-step digests, under RULE (bitwise, ulp(N) or\n"
    "close(RTOL, ATOL); default bitwise); says what it did not compare (memory\n"
    "metrics' values, the notes' texts, series only one file holds, the labels\n"
    "run/scenario/backend, when and by which version it was recorded; see\n"
    "docs/trace-format.md). Reports the first diverging step and\n"
    "tensor, the largest differences, and the environment keys that differ\n"
    "between the machines that recorded them, always A's value first, then B's.\n"
    "\n"
    "--envelope gates A by B's envelope instead, as `dlcheck run` gates a run by a\n"
    "calibrated golden (B made by record --repeat or --repeat-from): every series\n"
    "value and final tensor of the envelope must lie within its widened band\n"
    "(docs/calibrated-goldens.md).\n"
    "Exit 0 if they agree, 1 if not, 2 for bad usage or a file that cannot be read.\n";

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
  for (int k = 0; t[0].ndigest == t[1].ndigest && k < t[0].ndigest; k++)
    if (strcmp(t[0].digest_names[k], t[1].digest_names[k]) != 0) {
      say(diff, "Digests: column %d is %s in %s, %s in %s. ", k, t[0].digest_names[k], t[0].run,
          t[1].digest_names[k], t[1].run);
      return;
    }
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
 * computed: their values are listed as not compared (that both files hold
 * them is). */
static bool memory_metric(const char *name) {
  return strstr(name, "peak") || strstr(name, "bytes");
}

static void compare_metrics(const dlc_trace t[2], const dlc_tolerance *tol, text *diff,
                            text *skipped, int *compared) {
  for (int i = 0; i < t[0].nmetrics; i++) {
    const dlc_metric *a = &t[0].metrics[i], *b = metric(&t[1], a->name);
    if (!b) {
      say(diff, "Metric %s is missing from %s. ", a->name, t[1].run);
      continue;
    }
    if (memory_metric(a->name)) {
      say(skipped, "metric %s (memory: depends on how the run executed); ", a->name);
      continue;
    }
    ++*compared;
    dlc_diff d = dlc_compare_f64(&a->value, &b->value, 1, tol);
    if (!d.ok)
      say(diff, "Metric %s: %.9g (%s) vs %.9g (%s). ", a->name, a->value, t[0].run, b->value,
          t[1].run);
  }
  for (int i = 0; i < t[1].nmetrics; i++)
    if (!metric(&t[0], t[1].metrics[i].name))
      say(diff, "Metric %s is missing from %s. ", t[1].metrics[i].name, t[0].run);
}

static const dlc_note *note(const dlc_trace *t, const char *name) {
  for (int i = 0; i < t->nnotes; i++)
    if (!strcmp(t->notes[i].name, name)) return &t->notes[i];
  return NULL;
}

/* Notes are free text, evidence for people: where the run computed, the
 * command line that started it. Two recordings of the same computation
 * differ there, so texts are listed as not compared; which notes a file
 * holds is compared (rank_mismatch or finals_converted appear only when
 * that happened). */
static void compare_notes(const dlc_trace t[2], text *diff, text *skipped, int *compared) {
  for (int k = 0; k < 2; k++)
    for (int i = 0; i < t[k].nnotes; i++)
      if (!note(&t[1 - k], t[k].notes[i].name))
        say(diff, "Note %s is missing from %s. ", t[k].notes[i].name, t[1 - k].run);
      else if (k == 0) ++*compared;
  if (t[0].nnotes || t[1].nnotes) say(skipped, "the notes' texts (free text for people); ");
}

static void series_only_in(const dlc_trace *x, const dlc_trace *y, text *skipped) {
  for (int i = 0; i < x->nseries; i++)
    if (!dlc_trace_series(y, x->series[i].name))
      say(skipped, "series %s (only in %s); ", x->series[i].name, x->run);
}

static bool in_spec(const dlc_check_spec *spec, const char *name) {
  for (int i = 0; i < spec->nquantities; i++)
    if (!strcmp(spec->quantities[i], name)) return true;
  return false;
}

/* Series both hold that the equivalence check had no room for (it takes
 * DLC_MAX_QUANTITIES; gpt_ckpt's sixth, skipped, went uncompared). */
static void compare_more_series(const dlc_trace t[2], const dlc_check_spec *spec,
                                const dlc_tolerance *tol, text *diff) {
  for (int i = 0; i < t[0].nseries; i++) {
    const dlc_series *a = &t[0].series[i], *b = dlc_trace_series(&t[1], a->name);
    if (!b || in_spec(spec, a->name)) continue;
    dlc_diff d = a->n == b->n ? dlc_compare_f64(a->v, b->v, a->n, tol) : (dlc_diff){.ok = false};
    if (a->n != b->n)
      say(diff, "Series %s: %lld values in %s, %lld in %s. ", a->name, (long long)a->n, t[0].run,
          (long long)b->n, t[1].run);
    else if (!d.ok)
      say(diff, "Series %s first differs at index %lld: %.9g (%s) vs %.9g (%s). ", a->name,
          (long long)d.first_bad, d.a_at_first, t[0].run, d.b_at_first, t[1].run);
  }
}

/* Steps with layer statistics in one file only: two goldens record the
 * same schedule (every early step), so there it is a difference; a trace
 * records its own, so against a trace it is listed as not compared. */
static void stats_only_in(const dlc_trace t[2], bool goldens, text *diff, text *skipped) {
  for (int k = 0; k < 2; k++) {
    int only = 0;
    int64_t first = -1;
    for (int i = 0; i < t[k].nstats; i++)
      if (!stats_at(&t[1 - k], t[k].stats[i].step) && only++ == 0) first = t[k].stats[i].step;
    if (only && goldens)
      say(diff, "Layer statistics at %d step(s) only in %s (the first: step %lld). ", only,
          t[k].run, (long long)first);
    else if (only) say(skipped, "layer statistics at %d step(s) only in %s; ", only, t[k].run);
  }
}

/* What a golden claims besides its numbers: the rules it is compared
 * under, in order. */
static void compare_tolerances(const dlc_golden_meta *m[2], const dlc_trace t[2], text *diff) {
  bool same = m[0]->ntols == m[1]->ntols;
  for (int i = 0; same && i < m[0]->ntols; i++)
    same = !strcmp(m[0]->tols[i].quantity, m[1]->tols[i].quantity) &&
           !strcmp(m[0]->tols[i].rule, m[1]->tols[i].rule);
  if (!same) say(diff, "The goldens' tolerances differ (%s, %s). ", t[0].run, t[1].run);
}

/* The seed and the scenario file's hash decide what was computed; run,
 * scenario and backend are labels (two machines, two names), not. */
static void compare_identity(const dlc_trace t[2], text *diff) {
  if (t[0].seed != t[1].seed)
    say(diff, "Seed: %llu in %s, %llu in %s. ", (unsigned long long)t[0].seed, t[0].run,
        (unsigned long long)t[1].seed, t[1].run);
  if (t[0].scenario_hash != t[1].scenario_hash)
    say(diff, "Scenario file hash: 0x%016llx in %s, 0x%016llx in %s. ",
        (unsigned long long)t[0].scenario_hash, t[0].run, (unsigned long long)t[1].scenario_hash,
        t[1].run);
}

static bool same_envelope_series(const dlc_envelope_series *a, const dlc_envelope_series *b) {
  return !strcmp(a->name, b->name) && a->n == b->n &&
         (a->n == 0 || !memcmp(a->v, b->v, (size_t)a->n * sizeof *a->v));
}

/* Where the envelopes of two calibrated goldens part (NULL: nowhere); the
 * repeats' statistics are compared bit for bit, whatever the rule. */
static const char *envelope_differs(const dlc_envelope *a, const dlc_envelope *b) {
  if (a->repeats != b->repeats || memcmp(&a->widen, &b->widen, sizeof a->widen) ||
      strcmp(a->perturbation, b->perturbation))
    return "repeats, widening or perturbation";
  if (a->nseries != b->nseries || a->nfinals != b->nfinals) return "what it covers";
  for (int i = 0; i < a->nseries; i++)
    if (!same_envelope_series(&a->series[i], &b->series[i])) return a->series[i].name;
  for (int i = 0; i < a->nfinals; i++)
    if (strcmp(a->finals[i].name, b->finals[i].name) ||
        memcmp(a->finals[i].v, b->finals[i].v, sizeof a->finals[i].v))
      return a->finals[i].name;
  return NULL;
}

/* A calibrated golden's /envelope: against another one, compared; against
 * a file without one (a trace, a single golden), listed. */
static void compare_envelopes(const dlc_envelope e[2], const dlc_trace t[2], bool goldens,
                              text *diff, text *skipped) {
  const char *where = e[0].repeats && e[1].repeats ? envelope_differs(&e[0], &e[1]) : NULL;
  if (where) say(diff, "The envelopes differ (%s). ", where);
  for (int k = 0; k < 2 && !(e[0].repeats && e[1].repeats); k++)
    if (e[k].repeats && goldens) say(diff, "Only %s is a calibrated golden. ", t[k].run);
    else if (e[k].repeats) say(skipped, "the envelope of %s (only it has one); ", t[k].run);
}

/* Everything else a trace holds, in the order the files were named;
 * returns whether it all agrees. */
static bool compare_rest(const dlc_trace t[2], const dlc_golden_meta *m[2], const dlc_envelope e[2],
                         const dlc_check_spec *spec, const dlc_tolerance *tol, text *diff,
                         text *done, text *skipped) {
  int finals = 0, steps = 0, metrics = 0, notes = 0;
  bool goldens = m[0]->golden && m[1]->golden;
  compare_identity(t, diff);
  compare_more_series(t, spec, tol, diff);
  compare_other_finals(t, tol, diff, &finals);
  compare_stats(t, tol, diff, &steps);
  stats_only_in(t, goldens, diff, skipped);
  if (goldens) compare_tolerances(m, t, diff);
  compare_envelopes(e, t, goldens, diff, skipped);
  bool bitwise = tol->kind == DLC_TOL_BITWISE;
  if (bitwise) compare_digests(t, diff);
  compare_metrics(t, tol, diff, skipped, &metrics);
  compare_notes(t, diff, skipped, &notes);
  series_only_in(&t[0], &t[1], skipped);
  series_only_in(&t[1], &t[0], skipped);
  say(done,
      "also compared: %d other final tensors (initial weights), layer statistics at %d "
      "common step(s), %s, %d metrics, %d note names, the seeds and scenario hashes%s%s",
      finals, steps,
      bitwise ? "per-step digests" : "not the per-step digests (bit hashes: bitwise only)", metrics,
      notes, goldens ? ", the goldens' tolerances" : "",
      e[0].repeats && e[1].repeats ? ", the envelopes" : "");
  say(skipped, "the labels run, scenario and backend, the recording time and version; ");
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

/* Everything both files hold, under tol: the verdict's exit code. */
static int compare_all(dlc_trace t[2], const dlc_golden_meta *m[2], const dlc_envelope e[2],
                       const dlc_tolerance *tol) {
  dlc_check_spec spec = {.name = "compare", .kind = "equivalence", .tol = *tol};
  snprintf(spec.a, sizeof spec.a, "%s", t[1].run);
  snprintf(spec.b, sizeof spec.b, "%s", t[0].run);
  add_series(&spec, &t[0], &t[1]);
  static dlc_verdict v;
  static text diff, done, skipped;
  diff.n = done.n = skipped.n = 0;
  diff.s[0] = done.s[0] = skipped.s[0] = '\0';
  dlc_verdict_init(&v, "compare", "", "");
  if (dlc_check_equivalence(&spec, t, 2, &v)) {
    fprintf(stderr, "dlcheck compare: %s\n", dl_last_error());
    return EXIT_USAGE;
  }
  bool rest = compare_rest(t, m, e, &spec, tol, &diff, &done, &skipped);
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
  return v.kind == DLC_PASS ? EXIT_PASS : EXIT_CHECK_FAILED;
}

/* --envelope: A gated by B's envelope, as `dlcheck run` gates a run by a
 * calibrated golden (judge/envelope.h). */
static int compare_in_envelope(const dlc_trace t[2], const dlc_envelope *e, const char *pb) {
  if (!e->repeats) {
    fprintf(stderr,
            "dlcheck compare --envelope: %s is not a calibrated golden (it has no /envelope); "
            "make one from repeated runs with `dlcheck record --repeat-from`, or compare "
            "without --envelope\n",
            pb);
    return EXIT_USAGE;
  }
  static dlc_verdict v;
  dlc_verdict_init(&v, "compare", "", "");
  if (dlc_envelope_check(e, &t[1], &t[0], &v)) {
    fprintf(stderr, "dlcheck compare: %s\n", dl_last_error());
    return EXIT_USAGE;
  }
  printf("%s: %s\n", dlc_verdict_name(v.kind), v.evidence);
  printf("(compared: the %d series and %d final tensors of the envelope, each within %g times "
         "the spread of its %d repeats; not compared: layer statistics, digests, metrics, "
         "notes, seeds)\n",
         e->nseries, e->nfinals, e->widen, e->repeats);
  return v.kind == DLC_PASS ? EXIT_PASS : EXIT_CHECK_FAILED;
}

static int compare(const char *pa, const char *pb, const dlc_tolerance *tol, bool envelope) {
  static dlc_golden_meta ma, mb;
  dlc_trace t[2];
  dlc_envelope e[2] = {{0}, {0}};
  if (dlc_golden_load(pa, &t[0], &ma, &e[0])) {
    fprintf(stderr, "dlcheck compare: %s\n", dl_last_error());
    return EXIT_USAGE;
  }
  if (dlc_golden_load(pb, &t[1], &mb, &e[1])) {
    fprintf(stderr, "dlcheck compare: %s\n", dl_last_error());
    dlc_trace_free(&t[0]);
    dlc_envelope_free(&e[0]);
    return EXIT_USAGE;
  }
  /* Runs named by file; B is the equivalence check's reference (a), which
   * its evidence names second: "A.h5 vs B.h5". */
  run_label(t[0].run, pa, "A");
  run_label(t[1].run, pb, "B");
  const dlc_golden_meta *m[2] = {&ma, &mb};
  int code = envelope ? compare_in_envelope(t, &e[1], pb) : compare_all(t, m, e, tol);
  if (code != EXIT_USAGE && ma.env_json[0] && mb.env_json[0]) {
    int ndiff = 0;
    printf("\nenvironment (%s -> %s):\n", pa, pb);
    if (dlc_env_diff(ma.env_json, mb.env_json, stdout, &ndiff) == DL_OK && ndiff == 0)
      printf("  the same\n");
  }
  dlc_trace_free(&t[0]);
  dlc_trace_free(&t[1]);
  dlc_envelope_free(&e[0]);
  dlc_envelope_free(&e[1]);
  return code;
}

int cmd_compare(int argc, char **argv) {
  dlc_tolerance tol = dlc_tolerance_bitwise();
  const char *files[2];
  int nfiles = 0;
  bool envelope = false, rule = false;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
      fputs(compare_help, stdout);
      return EXIT_PASS;
    }
    if (!strcmp(argv[i], "--envelope")) {
      envelope = true;
    } else if (!strcmp(argv[i], "--tolerance") && i + 1 < argc) {
      rule = true;
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
  if (envelope && rule) {
    fprintf(stderr, "dlcheck compare: --envelope gates by the golden's envelope, not by a "
                    "--tolerance rule: give one of them\n");
    return EXIT_USAGE;
  }
  return compare(files[0], files[1], &tol, envelope);
}
