/* torch_environment: E1, E2 or E3 (quantities[0]) of the PyTorch that
 * computed run a, a recorded trace, from the fingerprint its file carries
 * (env_torch.h), as `dlcheck env TRACE` judges it. Nothing to judge (an
 * engine run, a torch without CUDA, no driver) is reported as not tested
 * with the reason: it must never read as passed. */
#include "judge/checks_impl.h"

#include "judge/env_torch.h"

#include <stdio.h>
#include <string.h>

static const char *const ids[] = {"E1", "E2", "E3"};

static dl_status which(const dlc_check_spec *spec, int *k) {
  for (*k = 0; *k < 3; (*k)++)
    if (spec->nquantities == 1 && strcmp(spec->quantities[0], ids[*k]) == 0) return DL_OK;
  return dl_fail(DL_ERR_INVALID,
                 "check %s: a torch_environment check names one of E1, E2, E3 "
                 "as its quantity (quantities: [E2])",
                 spec->name);
}

dl_status dlc_check_torch_environment(const dlc_check_spec *spec, const dlc_trace *traces, int n,
                                      dlc_verdict *v) {
  const dlc_trace *a, *b;
  int k;
  DL_TRY(dlc_check_runs(spec, traces, n, false, &a, &b));
  DL_TRY(which(spec, &k));
  snprintf(v->tensor, sizeof v->tensor, "%s", ids[k]);
  dl_cuda_check c[3];
  bool found = false;
  dl_status s = a->origin_env ? dlc_env_torch_checks(a->origin_env, c, &found) : DL_OK;
  if (s != DL_OK) return dl_fail_context(s, "check %s, run %s: ", spec->name, a->run);
  if (!found) {
    v->kind = DLC_SKIP;
    dlc_evidence(v, "not tested: run %s carries no PyTorch fingerprint (%s)", a->run,
                 a->origin_env ? "recorded by the C engine" : "computed here, not recorded");
    return DL_OK;
  }
  v->kind = !c[k].applicable ? DLC_SKIP : c[k].ok ? DLC_PASS : DLC_FAIL;
  dlc_evidence(v, "%s%s of the PyTorch that computed %s: %s",
               v->kind == DLC_SKIP ? "not tested: " : "", ids[k], a->run, c[k].message);
  return DL_OK;
}
