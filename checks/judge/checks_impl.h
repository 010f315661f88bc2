/* The check functions behind the registry (one file each). */
#ifndef DLC_CHECKS_IMPL_H
#define DLC_CHECKS_IMPL_H

#include "judge/check.h"

dl_status dlc_check_equivalence(const dlc_check_spec *, const dlc_trace *, int, dlc_verdict *);
dl_status dlc_check_metric_max(const dlc_check_spec *, const dlc_trace *, int, dlc_verdict *);
dl_status dlc_check_metric_min(const dlc_check_spec *, const dlc_trace *, int, dlc_verdict *);
dl_status dlc_check_metric_increase(const dlc_check_spec *, const dlc_trace *, int, dlc_verdict *);
dl_status dlc_check_frozen(const dlc_check_spec *, const dlc_trace *, int, dlc_verdict *);
dl_status dlc_check_nonfinite(const dlc_check_spec *, const dlc_trace *, int, dlc_verdict *);
dl_status dlc_check_torch_environment(const dlc_check_spec *, const dlc_trace *, int,
                                      dlc_verdict *);
dl_status dlc_check_not_tested(const dlc_check_spec *, const dlc_trace *, int, dlc_verdict *);

/* Appends printf text to v->evidence (truncating at its size). */
void dlc_evidence(dlc_verdict *v, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The traces of runs a (and b, if two is set); an error verdict names the
 * missing run. */
dl_status dlc_check_runs(const dlc_check_spec *spec, const dlc_trace *traces, int n, bool two,
                         const dlc_trace **a, const dlc_trace **b);

#endif
