/* Where two traces part: the first step their digests differ, and the
 * first layer whose statistics differ at that step.
 *
 * The per-step digests give the first step S after which the bits differ.
 * Both runs computed step S from the same parameters (they were equal
 * after step S - 1), so the first layer whose statistics differ at S, in
 * the order the layers ran (forward, then backward), is where the
 * computation itself differs. If none does at S, the parameters changed
 * outside the layers (the optimizer step, an edit), and step S + 1 shows
 * the first layer that reads them. */
#ifndef DLC_DIVERGENCE_H
#define DLC_DIVERGENCE_H

#include "judge/tolerance.h"
#include "judge/verdict.h"

/* The first step after which a's and b's digests differ, *tensor its
 * index in a's digest names; -1 when none differs or they cannot be
 * compared (different names). */
int64_t dlc_first_digest_step(const dlc_trace *a, const dlc_trace *b, int *tensor);

/* Looks at a's and b's statistics at `step`, then step + 1, under tol (b
 * the reference): on the first layer beyond it, sets v->layer and appends
 * "First divergent layer: NAME (forward|backward) at step S: STAT x vs y."
 * and returns true. Where both have statistics at `step` but no layer
 * differs, says so. False when neither step has statistics in both. */
bool dlc_first_divergent_layer(const dlc_tolerance *tol, const dlc_trace *a, const dlc_trace *b,
                               int64_t step, dlc_verdict *v);

/* t's layer statistics recorded at step, or NULL. */
const dlc_layer_stats *dlc_layer_stats_at(const dlc_trace *t, int64_t step);

#endif
