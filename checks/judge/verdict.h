/* Verdicts: what a check concluded, with evidence a person can act on. */
#ifndef DLC_VERDICT_H
#define DLC_VERDICT_H

#include "trace/trace.h"

enum { DLC_MAX_CATALOGUE = 12, DLC_CATALOGUE_ID_MAX = 8 };

#include <stdbool.h>
#include <stdint.h>

typedef enum {
  DLC_PASS,                /* the invariant holds */
  DLC_FAIL,                /* the invariant is broken: a bug (or a pitfall caught) */
  DLC_EXPECTED_DIVERGENCE, /* differs, and that is expected (G5): reported with its size */
  DLC_ERROR,               /* the check could not run (missing run, bad data) */
  DLC_SKIP,                /* not tested, and why (a not_tested check): never a pass */
  DLC_WAIVED /* failed, and the scenario accepts it (a check's waived: REASON): the failure's
              * evidence kept, with the reason; does not fail the run */
} dlc_verdict_kind;

const char *dlc_verdict_name(dlc_verdict_kind k); /* "pass", "FAIL", ... */
/* Nothing fails the run: pass, an expected divergence, not tested
 * (reported as skipped, so it can never hide as a pass) or a waived
 * failure (reported as waived, with its reason). */
bool dlc_verdict_ok(dlc_verdict_kind k);

enum { DLC_WAIVER_MAX = 512 };

typedef struct dlc_verdict {
  char check[DLC_NAME_MAX];   /* the check's name in the scenario */
  char variant[DLC_NAME_MAX]; /* "" for the correct pipeline, else the variant */
  char pitfall[16];           /* catalogue ID when this is a pitfall variant */
  dlc_verdict_kind kind;
  char evidence[2048]; /* one or two sentences: where, how much, against what */
  /* Structured evidence for JSON and plots (-1 / NAN where not applicable). */
  int64_t step;              /* first diverging step */
  char tensor[DLC_NAME_MAX]; /* first diverging tensor or quantity */
  char layer[DLC_NAME_MAX];  /* first diverging layer, where stats exist */
  double max_abs, max_rel, value, threshold;
  uint64_t max_ulp;
  double seconds; /* time the check and its runs took */
  /* The check's catalogue IDs (dlc_check_spec.catalogue): a FAIL is a
   * finding of each. */
  char catalogue[DLC_MAX_CATALOGUE][DLC_CATALOGUE_ID_MAX];
  int ncatalogue;
  char waiver[DLC_WAIVER_MAX]; /* the check's waived: reason ("" none), used or not */
} dlc_verdict;

void dlc_verdict_init(dlc_verdict *v, const char *check, const char *variant, const char *pitfall);
/* Applies a check's waiver (reason "" or NULL: none) to its verdict: a FAIL
 * becomes WAIVED, its evidence kept and " waived: REASON." added (the
 * evidence is cut to make room if it must); any other verdict keeps its
 * kind and says that the waiver is unused. */
void dlc_verdict_waive(dlc_verdict *v, const char *reason);

#endif
