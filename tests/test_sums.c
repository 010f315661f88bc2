/* Column sums (engine/numerics/sums.c) against the plain loop that defines
 * them, bit for bit: every column count up to a few 64-column blocks and
 * ragged ends, a row stride wider than the row, and values whose sum
 * depends on the order (large and small, both signs, -0, subnormals). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "numerics/sums.h"

static float value_at(int64_t r, int64_t c) {
  switch ((r * 7 + c * 3) % 6) {
  case 0: return 1e8f;
  case 1: return -0.0f;
  case 2: return 1e-40f;
  case 3: return (float)(0.37 * sin((double)(r * 131 + c)));
  case 4: return -1e8f;
  default: return 3.0f + (float)c;
  }
}

static void check_shape(int64_t rows, int64_t cols, int64_t ldx) {
  float *x = malloc((size_t)(rows * ldx + 1) * sizeof *x);
  float *got = malloc((size_t)(cols + 1) * sizeof *got);
  float *want = malloc((size_t)(cols + 1) * sizeof *want);
  assert_true(x && got && want);
  for (int64_t r = 0; r < rows; r++)
    for (int64_t c = 0; c < ldx; c++) x[r * ldx + c] = c < cols ? value_at(r, c) : NAN;
  for (int64_t c = 0; c < cols; c++) {
    float acc = 0.0f;
    for (int64_t r = 0; r < rows; r++) acc += x[r * ldx + c];
    want[c] = acc;
  }
  got[cols] = 42.0f;
  dl_sum_rows(x, rows, cols, ldx, got);
  for (int64_t c = 0; c < cols; c++)
    if (memcmp(&got[c], &want[c], sizeof got[c]) != 0)
      fail_msg("%lld rows x %lld cols (ldx %lld): column %lld is %a, want %a", (long long)rows,
               (long long)cols, (long long)ldx, (long long)c, (double)got[c], (double)want[c]);
  assert_true(got[cols] == 42.0f); /* nothing written past the last column */
  free(x);
  free(got);
  free(want);
}

static void every_width_matches_the_loop(void **state) {
  (void)state;
  for (int64_t cols = 1; cols <= 200; cols++) check_shape(37, cols, cols);
  check_shape(1024, 256, 256);
  check_shape(5, 70, 83);
}

static void no_rows_is_zero_and_no_columns_writes_nothing(void **state) {
  (void)state;
  float x[4] = {1, 2, 3, 4}, out[4] = {9, 9, 9, 9};
  dl_sum_rows(x, 0, 3, 4, out);
  for (int c = 0; c < 3; c++) assert_true(out[c] == 0.0f && !signbit(out[c]));
  assert_true(out[3] == 9.0f);
  dl_sum_rows(x, 1, 0, 4, out);
  assert_true(out[0] == 0.0f && out[3] == 9.0f);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(every_width_matches_the_loop),
      cmocka_unit_test(no_rows_is_zero_and_no_columns_writes_nothing),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
