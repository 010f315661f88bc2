/* store/env_torch.h: E1-E3 of the PyTorch that recorded a fingerprint. The
 * values are those a CUDA wheel's process reports (faked: no GPU here). */
#include "judge/env_torch.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

static bool contains(const char *s, const char *part) { return strstr(s, part) != NULL; }

/* A fingerprint of a wheel for CUDA 12.1 (built with cuDNN 8.9.2 and NCCL
 * 2.18.1) with the rest given. */
static void fingerprint(char *buf, size_t len, const char *driver, const char *gpus,
                        const char *archs, const char *cudnn_loaded, const char *nccl_loaded) {
  snprintf(buf, len,
           "{\"cuda_driver\": \"%s\", \"torch_cuda\": \"12.1\", \"torch_gpus\": \"%s\", "
           "\"torch_arch_list\": \"%s\", \"torch_cudnn\": \"%s\", \"torch_cudnn_built\": "
           "\"8902\", \"torch_nccl\": \"2.18.1\", \"torch_nccl_loaded\": \"%s\"}",
           driver, gpus, archs, cudnn_loaded, nccl_loaded);
}

static void judge(const char *json, dl_cuda_check c[3]) {
  bool found = false;
  assert_int_equal(dlc_env_torch_checks(json, c, &found), DL_OK);
  assert_true(found);
}

static void a_matching_wheel_passes(void **state) {
  (void)state;
  char json[1024];
  dl_cuda_check c[3];
  fingerprint(json, sizeof json, "12.4", "0: NVIDIA A100 (sm_80)",
              "sm_50 sm_60 sm_70 sm_75 sm_80 sm_86 sm_90", "8902", "2.18.1");
  judge(json, c);
  for (int i = 0; i < 3; i++) assert_true(c[i].applicable && c[i].ok);
  assert_true(contains(c[1].message, "SASS built for '80-real'"));
  assert_true(contains(c[2].message, "cuDNN 8.9.2; NCCL 2.18.1"));
}

static void each_mismatch_fails(void **state) {
  (void)state;
  char json[1024];
  dl_cuda_check c[3];
  fingerprint(json, sizeof json, "11.8", "0: Tesla T4 (sm_75)", "sm_80 sm_90", "8700", "2.14.3");
  judge(json, c);
  assert_false(c[0].ok);
  assert_true(contains(c[0].message, "12.1") && contains(c[0].message, "11.8"));
  assert_false(c[1].ok);
  assert_true(contains(c[1].message, "7.5 has no kernel image in this PyTorch"));
  assert_false(c[2].ok);
  assert_true(contains(c[2].message, "cuDNN built against 8.9.2 but 8.7.0 is loaded"));
  assert_true(contains(c[2].message, "NCCL built against 2.18.1 but 2.14.3 is loaded"));
}

/* compute_XY is PTX: a newer GPU runs it (JIT), so E2 passes with a note. */
static void ptx_in_the_arch_list_covers_newer_gpus(void **state) {
  (void)state;
  char json[1024];
  dl_cuda_check c[3];
  fingerprint(json, sizeof json, "12.8", "0: A (sm_90); 1: B (sm_100)", "sm_80 sm_90 compute_90",
              "8902", "2.18.1");
  judge(json, c);
  assert_true(c[1].ok);
  assert_true(contains(c[1].message, "SASS built for '90-real'")); /* the first GPU's */
  fingerprint(json, sizeof json, "12.8", "0: B (sm_100)", "sm_80 sm_90 compute_90", "8902",
              "2.18.1");
  judge(json, c);
  assert_true(c[1].ok && contains(c[1].message, "PTX of '90-virtual'"));
}

static void without_torch_keys_nothing_is_found(void **state) {
  (void)state;
  dl_cuda_check c[3];
  memset(c, 0x5a, sizeof c);
  bool found = true;
  assert_int_equal(dlc_env_torch_checks("{\"cuda_driver\": \"12.4\"}", c, &found), DL_OK);
  assert_false(found);
  assert_int_equal(((unsigned char *)c)[0], 0x5a); /* untouched */
}

static void unreadable_values_are_named(void **state) {
  (void)state;
  dl_cuda_check c[3];
  bool found;
  static const char *const bad[][2] = {
      {"{\"torch_cuda\": \"12.x\", \"cuda_driver\": \"12.4\"}", "torch_cuda '12.x'"},
      {"{\"torch_cuda\": \"12.1\", \"cuda_driver\": \"12.4\", \"torch_gpus\": \"0: X (sm_9)\"}",
       "torch_gpus"},
      {"{\"torch_cuda\": \"12.1\", \"cuda_driver\": \"12.4\", \"torch_cudnn\": \"8.x\"}",
       "torch_cudnn '8.x'"},
      {"[1]", "not a JSON object"},
      {"{\"torch_cuda\": ", "not valid JSON"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    assert_int_equal(dlc_env_torch_checks(bad[i][0], c, &found), DL_ERR_FORMAT);
    if (!contains(dl_last_error(), bad[i][1])) fail_msg("%s: %s", bad[i][0], dl_last_error());
    assert_false(found);
  }
}

static void an_arch_list_too_long_is_refused(void **state) {
  (void)state;
  static char json[4096];
  int at = snprintf(json, sizeof json,
                    "{\"torch_cuda\": \"12.1\", \"cuda_driver\": \"12.4\", \"torch_gpus\": "
                    "\"0: X (sm_90)\", \"torch_arch_list\": \"");
  for (int i = 0; i < 300; i++) at += snprintf(json + at, sizeof json - (size_t)at, "sm_90 ");
  snprintf(json + at, sizeof json - (size_t)at, "\"}");
  dl_cuda_check c[3];
  bool found;
  assert_int_equal(dlc_env_torch_checks(json, c, &found), DL_ERR_FORMAT);
  assert_true(contains(dl_last_error(), "torch_arch_list is longer than"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(a_matching_wheel_passes),
      cmocka_unit_test(each_mismatch_fails),
      cmocka_unit_test(ptx_in_the_arch_list_covers_newer_gpus),
      cmocka_unit_test(without_torch_keys_nothing_is_found),
      cmocka_unit_test(unreadable_values_are_named),
      cmocka_unit_test(an_arch_list_too_long_is_refused),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
