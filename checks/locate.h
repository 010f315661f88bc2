/* The first divergent layer: when two runs that should agree do not,
 * which layer's output, forward or backward, parts first and by how much.
 *
 * The per-step digests give the first step S after which the bits differ.
 * Both runs computed step S from the same parameters (they were equal
 * after step S - 1), so the first layer whose statistics differ at S, in
 * the order the layers ran (forward, then backward), is where the
 * computation itself differs. If none does at S, the parameters changed
 * outside the layers (the optimizer step, an edit), and step S + 1 shows
 * the first layer that reads them. Recorded traces (PyTorch recorder,
 * stats_every: 1) have their statistics already; engine runs are trained
 * again up to S + 2 with statistics forced at S and S + 1. */
#ifndef DLC_LOCATE_H
#define DLC_LOCATE_H

#include "runner.h"
#include "tolerance.h"
#include "verdict.h"

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

/* Engine run ca (options oa) trained again up to step + 2 with layer
 * statistics at step and step + 1, then dlc_first_divergent_layer against
 * b's recorded statistics (b the reference: a golden, which records them
 * at every step). Where b has none at either step, the evidence says the
 * layer cannot be named. An error means the run failed. */
dl_status dlc_locate_layer_against(const dlc_tolerance *tol, const dlc_run_config *ca,
                                   const dlc_run_options *oa, const dlc_trace *b,
                                   int64_t step, dlc_verdict *v);

/* Engine runs ca (options oa) and cb (ob) trained again up to step + 2
 * with layer statistics at step and step + 1, then
 * dlc_first_divergent_layer on them. An error means a run failed. */
dl_status dlc_locate_layer(const dlc_tolerance *tol, const dlc_run_config *ca,
                           const dlc_run_options *oa, const dlc_run_config *cb,
                           const dlc_run_options *ob, int64_t step, dlc_verdict *v);

#endif
