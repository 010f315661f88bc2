/* Calibrated goldens: what N repeats of the reference run spread over,
 * and the gate that accepts a run inside that spread widened by a factor.
 *
 * The repeats are the same run under the variation the gate must accept
 * (CPU: perturbation backends, engine/backend/perturb/perturb.h; GPU: the library's own
 * run-to-run and algorithm-choice variation; PyTorch: N recorder traces).
 * Repeat 0 is the reference, whose trace the golden stores.
 *
 * Series (loss, grad_norm, lr, ...): per step min, max, mean and std over
 * the repeats. A run passes a step when |x - c| <= widen * h, with c and h
 * the centre and half-width of [min, max]. Final tensors: the largest
 * element-wise |repeat - reference| (the spread) and, for tolerance
 * recommendations, the largest relative and ULP differences; a run passes
 * when its own largest |x - reference| <= widen * spread. Every band is
 * at least one float32 ULP of its value wide (finals: of the tensor's
 * largest element), so a value all repeats happened to round alike may
 * still round to a neighbour; a quantity that is 0 in every repeat must
 * stay 0. The distance of a value is |x - c| / h (finals: max|x - ref| /
 * spread): at most 1 for the repeats themselves, at most widen to pass. */
#ifndef DLC_ENVELOPE_H
#define DLC_ENVELOPE_H

#include "trace/trace.h"
#include "judge/verdict.h"

#include <stdio.h>

/* Default widening: with 5 Gaussian repeats a sixth value falls outside
 * the widened band c +- 4h with probability 1.2% (1 in 3 outside the
 * unwidened range); the measured distance of other summation orders is
 * in docs/calibrated-goldens.md. */
#define DLC_ENVELOPE_WIDEN_DEFAULT 4.0
enum { DLC_ENVELOPE_MIN_REPEATS = 3 };

enum { DLC_ENV_MIN, DLC_ENV_MAX, DLC_ENV_MEAN, DLC_ENV_STD, DLC_ENV_COLS };
enum { DLC_FIN_SPREAD, DLC_FIN_MAX_REL, DLC_FIN_MAX_ULP, DLC_FIN_COLS };
extern const char *const dlc_envelope_series_columns[DLC_ENV_COLS];
extern const char *const dlc_envelope_final_columns[DLC_FIN_COLS];

typedef struct dlc_envelope_series {
  char name[DLC_NAME_MAX];
  int64_t n;                 /* steps */
  double (*v)[DLC_ENV_COLS]; /* n rows */
} dlc_envelope_series;

typedef struct dlc_envelope_final {
  char name[DLC_NAME_MAX];
  double v[DLC_FIN_COLS];
} dlc_envelope_final;

typedef struct dlc_envelope {
  int repeats; /* 0: none (a single golden) */
  double widen;
  char perturbation[512]; /* what varied between the repeats */
  dlc_envelope_series *series;
  int nseries;
  dlc_envelope_final *finals;
  int nfinals;
} dlc_envelope;

void dlc_envelope_free(dlc_envelope *e); /* leaves it empty; safe on empty */

/* out := the envelope of runs[0..n-1] (runs[0] the reference), n >= 3:
 * every series and final tensor of the reference. DL_ERR_INVALID naming
 * the repeat and quantity if a repeat lacks one or has another length or
 * shape (the repeats must be the same run). */
dl_status dlc_envelope_build(const dlc_trace *runs, int n, double widen, const char *perturbation,
                             dlc_envelope *out);

/* The gate: t against the envelope (ref: the golden's reference trace).
 * v gets PASS/FAIL, the first step and quantity outside, and v->value the
 * largest distance (v->threshold the widening) with the evidence. */
dl_status dlc_envelope_check(const dlc_envelope *e, const dlc_trace *ref, const dlc_trace *t,
                             dlc_verdict *v);

/* Series es at step i: its centre *c and the half-width of the repeats'
 * band, at least one float32 ULP of the centre (0 for a band of zeros). */
double dlc_envelope_half_width(const dlc_envelope_series *es, int64_t i, double *c);

/* x's distance from es at step i, |x - c| / half-width: infinite where a
 * zero-width band moved or x is NaN and the centre is not. */
double dlc_envelope_step_distance(const dlc_envelope_series *es, int64_t i, double x);

/* A quantity's largest distance in a run (the report's per-quantity
 * numbers, the gate's verdict): step is the step of the largest one (-1
 * for a final tensor). INFINITY where the run lacks the quantity or has
 * another length, shape or dtype. */
typedef struct dlc_envelope_distance {
  double distance;
  int64_t step;
} dlc_envelope_distance;
dlc_envelope_distance dlc_envelope_series_distance(const dlc_envelope_series *es,
                                                   const dlc_trace *t);
dlc_envelope_distance dlc_envelope_final_distance(const dlc_envelope_final *f, const dlc_trace *ref,
                                                  const dlc_trace *t);

/* Per quantity, the tightest ulp(n) and close() rules every repeat meets
 * against the reference, and the margin of the current rule (rule_of
 * gives it per quantity, NULL for none) as a table on out. */
void dlc_envelope_recommend(const dlc_envelope *e, const dlc_trace *ref,
                            const char *(*rule_of)(const void *user, const char *quantity),
                            const void *user, FILE *out);

#endif
