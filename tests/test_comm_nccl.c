/* The nccl comm backend. Without a GPU (CI) it checks that the library
 * links and that every constructor refuses with DL_ERR_UNSUPPORTED and a
 * message saying why; with GPUs (ci/gpu-check.sh) it runs the GPU check:
 * ordered allreduce bitwise equal to a host rank-order sum on every visible
 * GPU, and prints how far NCCL's native allreduce is from it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "comm/comm.h"

#ifdef DL_HAVE_COMM_NCCL

static void test_selfcheck(void **state) {
  (void)state;
  dl_reduce_diff d;
  dl_status s = dl_comm_nccl_selfcheck(0, &d);
  if (s == DL_ERR_UNSUPPORTED) {
    assert_non_null(strstr(dl_last_error(), "no CUDA device"));
    printf("no GPU: %s\n", dl_last_error());
    skip();
  }
  if (s) fprintf(stderr, "%s\n", dl_last_error());
  assert_int_equal(s, DL_OK);
  printf("nccl native vs ordered: %lld of %lld floats differ, max abs %.3g, max rel %.3g, "
         "max %lld ulp\n",
         (long long)d.ndiff, (long long)d.n, d.max_abs, d.max_rel, (long long)d.max_ulp);
}

/* Refusals before any GPU is touched, then the no-GPU answer. */
static void test_bad_arguments(void **state) {
  (void)state;
  dl_comm *comms[2];
  assert_int_equal(dl_comm_nccl_create_all(0, NULL, comms), DL_ERR_INVALID);
  assert_int_equal(dl_comm_nccl_create_all(2, NULL, NULL), DL_ERR_INVALID);
  int same[2] = {0, 0};
  dl_status s = dl_comm_nccl_create_all(2, same, comms);
  if (s == DL_ERR_UNSUPPORTED) {
    assert_non_null(strstr(dl_last_error(), "use the local or mpi backend"));
    assert_null(comms[0]);
    return;
  }
  assert_int_equal(s, DL_ERR_INVALID); /* both ranks on GPU 0 (or only one GPU) */
  assert_null(comms[0]);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_bad_arguments),
      cmocka_unit_test(test_selfcheck),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

#else /* no CUDA or NCCL in this build */

static void test_nccl_not_built(void **state) {
  (void)state;
  skip(); /* dlcomm_nccl is built only when CMake finds CUDA and NCCL */
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_nccl_not_built)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}

#endif
