#include "judge/check.h"

#include "judge/checks_impl.h"

#include <string.h>

static const dlc_check_kind kinds[] = {
    {"equivalence",
     "runs a and b agree on the quantities (loss and other series, params, buffers, grads) "
     "within the tolerance",
     2, dlc_check_equivalence, true},
    {"metric_max", "metric quantities[0] of run a is at most threshold", 1, dlc_check_metric_max,
     true},
    {"metric_min", "metric quantities[0] of run a is at least threshold", 1, dlc_check_metric_min,
     true},
    {"metric_increase", "metric quantities[0] of run b exceeds run a's by at most threshold", 2,
     dlc_check_metric_increase, true},
    {"frozen",
     "every parameter of run a changed, and none far less than the others (ratio threshold)", 1,
     dlc_check_frozen, false},
    {"nonfinite", "run a has no inf/NaN in its loss, layer outputs, gradients or parameters", 1,
     dlc_check_nonfinite, false},
    {"torch_environment",
     "E1, E2 or E3 (quantities[0]) of the PyTorch that recorded run a, from its fingerprint: "
     "its CUDA runtime, arch list and cuDNN/NCCL against the machine it ran on",
     1, dlc_check_torch_environment, true},
    {"not_tested",
     "reads no run: reported as skipped with its reason (what could not be tested, and why)", 0,
     dlc_check_not_tested, false},
};

const dlc_check_kind *dlc_check_kind_find(const char *kind) {
  for (size_t i = 0; i < sizeof kinds / sizeof *kinds; i++)
    if (strcmp(kinds[i].kind, kind) == 0) return &kinds[i];
  return NULL;
}

int dlc_check_kind_count(void) { return (int)(sizeof kinds / sizeof *kinds); }

const dlc_check_kind *dlc_check_kind_at(int i) {
  return i >= 0 && i < dlc_check_kind_count() ? &kinds[i] : NULL;
}
