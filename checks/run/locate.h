/* The first divergent layer of engine runs (judge/divergence.h says how it
 * is found). Recorded traces (PyTorch recorder, stats_every: 1) have their
 * statistics already; engine runs are trained again up to S + 2 with
 * statistics forced at S and S + 1. */
#ifndef DLC_LOCATE_H
#define DLC_LOCATE_H

#include "judge/divergence.h"
#include "run/runner.h"

/* Engine run ca (options oa) trained again up to step + 2 with layer
 * statistics at step and step + 1, then dlc_first_divergent_layer against
 * b's recorded statistics (b the reference: a golden, which records them
 * at every step). Where b has none at either step, the evidence says the
 * layer cannot be named. An error means the run failed. */
dl_status dlc_locate_layer_against(const dlc_tolerance *tol, const dlc_run_config *ca,
                                   const dlc_run_options *oa, const dlc_trace *b, int64_t step,
                                   dlc_verdict *v);

/* Engine runs ca (options oa) and cb (ob) trained again up to step + 2
 * with layer statistics at step and step + 1, then
 * dlc_first_divergent_layer on them. An error means a run failed. */
dl_status dlc_locate_layer(const dlc_tolerance *tol, const dlc_run_config *ca,
                           const dlc_run_options *oa, const dlc_run_config *cb,
                           const dlc_run_options *ob, int64_t step, dlc_verdict *v);

#endif
