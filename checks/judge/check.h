/* Check kinds: invariants between runs and detectors on one run. A scenario
 * names a kind per check; the registry maps the name to its function. */
#ifndef DLC_CHECK_H
#define DLC_CHECK_H

#include "judge/tolerance.h"
#include "judge/verdict.h"

enum { DLC_MAX_QUANTITIES = 8 };

/* One check as a scenario (or an audit) asks for it. */
typedef struct dlc_check_spec {
  char name[DLC_NAME_MAX]; /* as written in the scenario: "params_match" */
  char kind[DLC_NAME_MAX]; /* registered check kind: "equivalence", ... */
  char a[DLC_NAME_MAX];    /* run names the check reads ("" unused) */
  char b[DLC_NAME_MAX];
  char quantities[DLC_MAX_QUANTITIES][DLC_NAME_MAX]; /* "loss", "params", "buffers", ... */
  int nquantities;
  dlc_tolerance tol;
  double threshold;       /* for detector checks (ratios, fractions) */
  bool expect_divergence; /* a difference is expected and reported (G5) */
  /* equivalence: a run that repeats a's arithmetic more exactly (a float64
   * shadow) or in another order ("" none). Each compared quantity then gets
   * its own band instead of tol: close(0, noise_widen x its largest
   * distance from a in that run), at least noise_widen float32 ulps of a's
   * largest value in it: the tolerance is measured on the run itself.
   * noise_b, b's own shadow ("" none): the band then holds both runs'
   * distances from their shadows added, which bounds |b - a| whenever the
   * two shadows agree (the triangle inequality), however unequal the two
   * runs' rounding is. */
  char noise[DLC_NAME_MAX];
  char noise_b[DLC_NAME_MAX];
  double noise_widen; /* 4 unless the scenario says (DLC_ENVELOPE_WIDEN_DEFAULT) */
  char reason[512];   /* not_tested: what could not be tested, and why */
  /* A reviewed, accepted difference ("" none): a FAIL of this check is
   * reported as WAIVED with this reason and does not fail the run. */
  char waived[DLC_WAIVER_MAX];
  /* Catalogue IDs a failure of this check is evidence of (an audit of a
   * team's code names its findings so): reports name them with the fix. */
  char catalogue[DLC_MAX_CATALOGUE][DLC_CATALOGUE_ID_MAX];
  int ncatalogue;
} dlc_check_spec;

/* traces[i] is the trace of run i of the scenario (same order as
 * scenario->runs); a check finds its runs a/b by name with
 * dlc_check_find_trace. Fills *out (already initialised with the check's
 * name); returns DL_OK even when the verdict is FAIL: an error return means
 * the check could not run. */
typedef dl_status (*dlc_check_fn)(const dlc_check_spec *spec, const dlc_trace *traces, int ntraces,
                                  dlc_verdict *out);

typedef struct dlc_check_kind {
  const char *kind; /* "equivalence" */
  const char *doc;  /* one line for `dlcheck list --checks` and errors */
  int runs;         /* the runs it reads: 2 (a and b), 1 (a) or 0 (none) */
  dlc_check_fn fn;
  /* It reads the quantities the check names, so a check of this kind must
   * name at least one: with none it would compare nothing and pass. */
  bool needs_quantities;
} dlc_check_kind;

const dlc_check_kind *dlc_check_kind_find(const char *kind); /* NULL if none */
int dlc_check_kind_count(void);
const dlc_check_kind *dlc_check_kind_at(int i);

const dlc_trace *dlc_check_find_trace(const dlc_trace *traces, int n, const char *run);

#endif
