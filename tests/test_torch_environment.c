/* The torch_environment check (checks/judge/check_torch_environment.c):
 * E1, E2 or E3 of the PyTorch that recorded run a, from the fingerprint
 * its trace carries (origin_env). Synthetic traces with the values a CUDA
 * wheel's process reports. */
#define _POSIX_C_SOURCE 200809L /* strdup */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "judge/checks_impl.h"
#include "trace/trace.h"

/* A wheel for CUDA 12.1 on a driver for 12.4, on a T4 (sm_75) that its
 * arch list leaves out: E1 and E3 hold, E2 fails. */
static const char t4_under_an_ampere_wheel[] =
    "{\"cuda_driver\": \"12.4\", \"torch_cuda\": \"12.1\", \"torch_gpus\": \"0: Tesla T4 "
    "(sm_75)\", \"torch_arch_list\": \"sm_80 sm_86 sm_90\", \"torch_cudnn\": \"8902\", "
    "\"torch_cudnn_built\": \"8902\", \"torch_nccl\": \"2.18.1\", \"torch_nccl_loaded\": "
    "\"2.18.1\"}";

static dl_status judge(const char *env, const char *quantity, dlc_verdict *v) {
  dlc_trace t;
  dlc_trace_init(&t, "s", "team");
  if (env) assert_non_null(t.origin_env = strdup(env));
  dlc_check_spec spec = {.kind = "torch_environment", .a = "team", .nquantities = 1};
  snprintf(spec.name, sizeof spec.name, "wheel");
  snprintf(spec.quantities[0], sizeof spec.quantities[0], "%s", quantity);
  dlc_verdict_init(v, "wheel", "", "");
  dl_status s = dlc_check_torch_environment(&spec, &t, 1, v);
  dlc_trace_free(&t);
  return s;
}

static void each_id_is_judged_on_its_own(void **state) {
  (void)state;
  dlc_verdict v;
  assert_int_equal(judge(t4_under_an_ampere_wheel, "E1", &v), DL_OK);
  assert_int_equal(v.kind, DLC_PASS);
  assert_int_equal(judge(t4_under_an_ampere_wheel, "E2", &v), DL_OK);
  assert_int_equal(v.kind, DLC_FAIL);
  assert_string_equal(v.tensor, "E2");
  assert_non_null(strstr(v.evidence, "E2 of the PyTorch that computed team"));
  assert_non_null(strstr(v.evidence, "7.5 has no kernel image in this PyTorch"));
  assert_int_equal(judge(t4_under_an_ampere_wheel, "E3", &v), DL_OK);
  assert_int_equal(v.kind, DLC_PASS);
}

/* Nothing to judge is never a pass. */
static void nothing_to_judge_is_not_tested(void **state) {
  (void)state;
  dlc_verdict v;
  assert_int_equal(judge(NULL, "E1", &v), DL_OK); /* an engine run */
  assert_int_equal(v.kind, DLC_SKIP);
  assert_non_null(strstr(v.evidence, "computed here, not recorded"));
  assert_int_equal(judge("{\"cuda_driver\": \"12.4\"}", "E1", &v), DL_OK); /* the C engine's */
  assert_int_equal(v.kind, DLC_SKIP);
  assert_non_null(strstr(v.evidence, "recorded by the C engine"));
  assert_int_equal(judge("{\"cuda_driver\": \"12.4\", \"torch_cuda\": \"not available\"}", "E2",
                         &v),
                   DL_OK); /* a CPU-only torch */
  assert_int_equal(v.kind, DLC_SKIP);
  assert_non_null(strstr(v.evidence, "not tested: E2"));
  assert_non_null(strstr(v.evidence, "PyTorch built without CUDA"));
}

static void a_bad_quantity_or_fingerprint_is_an_error(void **state) {
  (void)state;
  dlc_verdict v;
  assert_int_equal(judge(t4_under_an_ampere_wheel, "E4", &v), DL_ERR_INVALID);
  assert_non_null(strstr(dl_last_error(), "one of E1, E2, E3"));
  assert_int_equal(judge("{\"torch_cuda\": \"12.x\"}", "E1", &v), DL_ERR_FORMAT);
  assert_non_null(strstr(dl_last_error(), "check wheel, run team: "));
  assert_non_null(strstr(dl_last_error(), "torch_cuda '12.x'"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(each_id_is_judged_on_its_own),
      cmocka_unit_test(nothing_to_judge_is_not_tested),
      cmocka_unit_test(a_bad_quantity_or_fingerprint_is_an_error),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
