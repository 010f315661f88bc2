/* backend/cuda_env.h: the E1-E3 decisions on given numbers, on any
 * machine (no CUDA needed): what each finds, and the fix it names for this
 * build and for PyTorch. */
#include "backend/cuda_env.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <string.h>

#include <cmocka.h>

static bool contains(const char *s, const char *part) { return strstr(s, part) != NULL; }

static void test_e1_runtime_vs_driver(void **state) {
  (void)state;
  dl_cuda_check c;
  dl_cuda_check_runtime_vs_driver(13000, 12040, DL_CUDA_DLCHECK,
                                  &c); /* new major on an old driver */
  assert_true(c.applicable);
  assert_false(c.ok);
  assert_true(contains(c.message, "13.0") && contains(c.message, "12.4"));
  assert_true(contains(c.message, "insufficient"));
  dl_cuda_check_runtime_vs_driver(12080, 12040, DL_CUDA_DLCHECK,
                                  &c); /* newer minor: runs, with a note */
  assert_true(c.ok);
  assert_true(contains(c.message, "minor version compatibility"));
  dl_cuda_check_runtime_vs_driver(12040, 13000, DL_CUDA_DLCHECK, &c);
  assert_true(c.ok && c.applicable);
  assert_true(contains(c.message, "12.4") && contains(c.message, "13.0"));
  dl_cuda_check_runtime_vs_driver(13000, 0, DL_CUDA_DLCHECK, &c);
  assert_false(c.applicable);
  assert_true(c.ok);
  assert_true(contains(c.message, "no CUDA driver"));
}

static void expect_arch(const char *archs, int major, int minor, bool want_ok,
                        const char *want_text) {
  dl_cuda_check c;
  dl_cuda_check_arch_vs_device(archs, major, minor, DL_CUDA_DLCHECK, &c);
  if (c.ok != want_ok || !contains(c.message, want_text))
    fail_msg("archs '%s' on %d.%d: ok %d, message: %s", archs, major, minor, c.ok, c.message);
  assert_true(c.applicable);
}

static void test_e2_arch_vs_device(void **state) {
  (void)state;
  const char *ours = "80-real,90-real,90-virtual";
  expect_arch(ours, 9, 0, true, "SASS built for '90-real'");
  expect_arch(ours, 8, 0, true, "SASS built for '80-real'");
  expect_arch(ours, 8, 6, true, "SASS built for '80-real'"); /* same major, higher minor */
  expect_arch(ours, 8, 9, true, "'80-real'");
  expect_arch(ours, 10, 0, true, "JIT-compiles the PTX of '90-virtual'");
  expect_arch(ours, 12, 0, true, "PTX");
  expect_arch(ours, 7, 5, false, "no kernel image is available");
  expect_arch("80;90", 7, 0, false, "70-real");
  expect_arch("80-real;90-real", 10, 0, false, "no kernel image");
  expect_arch("90a-real", 9, 0, true, "SASS");
  expect_arch("90a", 10, 0, false, "no kernel image"); /* 'a' PTX: that GPU only */
  expect_arch("100f-real", 10, 3, true, "SASS");
  expect_arch("86", 8, 0, false, "no kernel image"); /* SASS never runs on a lower minor */
  expect_arch("all-major", 9, 0, true, "cannot be told");
  expect_arch("", 9, 0, false, "no device code at all");
  expect_arch("80,sm_90", 9, 0, false, "cannot read 'sm_90'");
  expect_arch("9", 9, 0, false, "cannot read '9'");
  expect_arch("90-fake", 9, 0, false, "cannot read");
}

static void test_e3_built_vs_loaded(void **state) {
  (void)state;
  dl_cuda_versions built = {13000, 130000, 91200, 22803};
  dl_cuda_versions same = built;
  dl_cuda_check c;
  dl_cuda_check_built_vs_loaded(&built, &same, DL_CUDA_DLCHECK, &c);
  assert_true(c.ok);
  assert_true(contains(c.message, "cuBLAS 13.0.0") && contains(c.message, "cuDNN 9.12.0"));
  assert_true(contains(c.message, "NCCL 2.28.3") && contains(c.message, "CUDA runtime 13.0"));

  dl_cuda_versions other = built;
  other.cublas = 120901;
  dl_cuda_check_built_vs_loaded(&built, &other, DL_CUDA_DLCHECK, &c);
  assert_false(c.ok);
  assert_true(contains(c.message, "cuBLAS built against 13.0.0 but 12.9.1 is loaded"));
  assert_true(contains(c.message, "LD_LIBRARY_PATH"));

  other = built;
  other.cudnn = 8907; /* cuDNN 8's numbering */
  dl_cuda_check_built_vs_loaded(&built, &other, DL_CUDA_DLCHECK, &c);
  assert_false(c.ok);
  assert_true(contains(c.message, "cuDNN built against 9.12.0 but 8.9.7 is loaded"));

  other = built;
  other.nccl = 0; /* not loaded: nothing to compare */
  dl_cuda_check_built_vs_loaded(&built, &other, DL_CUDA_DLCHECK, &c);
  assert_true(c.ok);
  assert_true(contains(c.message, "NCCL 2.28.3 at build, not loaded"));

  /* NCCL before 2.9, like cuDNN 8, counts its major in thousands */
  dl_cuda_versions old_nccl = {0, 0, 0, 2708}, newer_nccl = {0, 0, 0, 2804};
  dl_cuda_check_built_vs_loaded(&old_nccl, &newer_nccl, DL_CUDA_DLCHECK, &c);
  assert_false(c.ok);
  assert_true(contains(c.message, "NCCL built against 2.7.8 but 2.8.4 is loaded"));

  dl_cuda_versions no_headers = {13000, 130000, 0, 0};
  dl_cuda_check_built_vs_loaded(&no_headers, &same, DL_CUDA_DLCHECK, &c);
  assert_true(c.ok);
  assert_false(contains(c.message, "cuDNN"));
}

/* The same decisions for PyTorch name PyTorch's fixes, never this build's. */
static void test_torch_fixes(void **state) {
  (void)state;
  dl_cuda_check c;
  dl_cuda_check_runtime_vs_driver(12010, 11080, DL_CUDA_TORCH, &c);
  assert_false(c.ok);
  assert_true(contains(c.message, "torch wheel built for the CUDA this driver supports"));
  dl_cuda_check_runtime_vs_driver(12040, 12010, DL_CUDA_TORCH, &c);
  assert_true(c.ok && contains(c.message, "PyTorch's PTX"));
  dl_cuda_check_arch_vs_device("50-real,80-real,90-real,90-virtual", 7, 5, DL_CUDA_TORCH, &c);
  assert_false(c.ok);
  assert_true(contains(c.message, "this PyTorch") && contains(c.message, "TORCH_CUDA_ARCH_LIST"));
  assert_false(contains(c.message, "CMAKE_CUDA_ARCHITECTURES"));
  dl_cuda_check_arch_vs_device("80-real,90-virtual", 10, 0, DL_CUDA_TORCH, &c);
  assert_true(c.ok && contains(c.message, "10.0 in TORCH_CUDA_ARCH_LIST"));
  dl_cuda_versions built = {0, 0, 8902, 21805}, loaded = {0, 0, 8700, 21805};
  dl_cuda_check_built_vs_loaded(&built, &loaded, DL_CUDA_TORCH, &c);
  assert_false(c.ok);
  assert_true(contains(c.message, "cuDNN built against 8.9.2 but 8.7.0 is loaded"));
  assert_true(contains(c.message, "nvidia-*"));
  assert_false(contains(c.message, "dlcheck was built with"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_e1_runtime_vs_driver),
      cmocka_unit_test(test_e2_arch_vs_device),
      cmocka_unit_test(test_e3_built_vs_loaded),
      cmocka_unit_test(test_torch_fixes),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
