/* The C harness's limits that the Python package checks before it writes a
 * trace or a scenario (python/dlcheck/limits.py): that file is written from
 * the C constants by this program, never by hand, and this test fails when
 * it is out of date. `build/<preset>/tests/test_limits --write` rewrites it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "judge/check.h"
#include "judge/verdict.h"
#include "scenario/scenario.h"
#include "store/env.h"
#include "store/h5util.h"
#include "store/trace_io.h"
#include "store/trace_names.h"
#include "core/tensor.h"
#include "trace/trace.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TEXT_MAX(type, member) (sizeof(((type *)0)->member) - 1) /* NUL excluded */

static const char limits_py[] = DL_SOURCE_DIR "/python/dlcheck/limits.py";

/* The file's text: each constant with the C name it comes from. */
static size_t render(char *buf, size_t size) {
  int n = snprintf(
      buf, size,
      "\"\"\"Limits and format constants of the C harness, which the Python package\n"
      "checks before it writes a trace or a scenario. Written by\n"
      "tests/test_limits.c (`test_limits --write`) from the C headers; do not edit.\"\"\"\n"
      "\n"
      "#: DLC_TRACE_SCHEMA_VERSION, DLC_H5_USERBLOCK, DLC_TRACE_MAGIC\n"
      "SCHEMA_VERSION = %d\n"
      "USERBLOCK = %d\n"
      "MAGIC = b\"%.15s\\n\"\n"
      "#: the longest texts (bytes, NUL excluded): DLC_NAME_MAX - 1, dlc_trace.backend,\n"
      "#: DLC_ENV_JSON_MAX - 1, dlc_golden_meta.recorded_at and .version,\n"
      "#: DLC_TOL_TEXT_MAX - 1, dlc_golden_meta.golden_kind\n"
      "NAME_MAX = %zu\n"
      "BACKEND_MAX = %zu\n"
      "ENV_JSON_MAX = %zu\n"
      "SHORT_TEXT_MAX = %zu\n"
      "TOL_RULE_MAX = %zu\n"
      "KIND_MAX = %zu\n"
      "#: DL_MAX_DIMS: the rank of the tensors the engine reads\n"
      "MAX_RANK = %d\n"
      "#: DLC_MAX_RUNS, DLC_MAX_CHECKS: a scenario's runs and checks\n"
      "MAX_RUNS = %d\n"
      "MAX_CHECKS = %d\n"
      "#: dlc_check_spec.reason and .waived, DLC_MAX_CATALOGUE (a check's IDs)\n"
      "MAX_REASON = %zu\n"
      "MAX_IDS = %d\n",
      DLC_TRACE_SCHEMA_VERSION, DLC_H5_USERBLOCK, DLC_TRACE_MAGIC, (size_t)DLC_NAME_MAX - 1,
      TEXT_MAX(dlc_trace, backend), (size_t)DLC_ENV_JSON_MAX - 1,
      TEXT_MAX(dlc_golden_meta, recorded_at), (size_t)DLC_TOL_TEXT_MAX - 1,
      TEXT_MAX(dlc_golden_meta, golden_kind), DL_MAX_DIMS, DLC_MAX_RUNS, DLC_MAX_CHECKS,
      TEXT_MAX(dlc_check_spec, reason), DLC_MAX_CATALOGUE);
  assert_true(n > 0 && (size_t)n < size);
  return (size_t)n;
}

static void the_python_limits_are_the_c_ones(void **state) {
  (void)state;
  /* One field stands for two: the Python side checks both with it. */
  assert_int_equal(TEXT_MAX(dlc_golden_meta, version), TEXT_MAX(dlc_golden_meta, recorded_at));
  assert_int_equal(TEXT_MAX(dlc_check_spec, waived), TEXT_MAX(dlc_check_spec, reason));
  assert_int_equal(strlen(DLC_TRACE_MAGIC), 16);
  char want[4096], have[4097];
  size_t n = render(want, sizeof want);
  FILE *f = fopen(limits_py, "rb");
  if (!f) fail_msg("cannot open %s", limits_py);
  size_t got = fread(have, 1, sizeof have, f);
  fclose(f);
  if (got != n || memcmp(have, want, n) != 0)
    fail_msg("%s is out of date with the C headers: rewrite it with `test_limits --write`",
             limits_py);
}

int main(int argc, char **argv) {
  if (argc == 2 && strcmp(argv[1], "--write") == 0) {
    char text[4096];
    size_t n = render(text, sizeof text);
    FILE *f = fopen(limits_py, "wb");
    if (!f || fwrite(text, 1, n, f) != n || fclose(f) != 0) {
      fprintf(stderr, "test_limits: cannot write %s\n", limits_py);
      return 1;
    }
    printf("wrote %s\n", limits_py);
    return 0;
  }
  const struct CMUnitTest tests[] = {cmocka_unit_test(the_python_limits_are_the_c_ones)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
