/* Tensors, memory accounting and error messages (engine/core/tensor.c, mem.c,
 * status.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "core/mem.h"
#include "core/tensor.h"

static void alloc_zeroed_and_accounted(void **state) {
  (void)state;
  int64_t before = dl_mem_current();
  dl_tensor t = {0};
  assert_int_equal(dl_tensor_f32(&t, 2, 3, 5, 0, 0, "t"), DL_OK);
  assert_int_equal(t.numel, 15);
  assert_int_equal(dl_mem_current() - before, 15 * 4);
  for (int i = 0; i < 15; i++) assert_true(dl_f32(&t)[i] == 0.0f);
  assert_true(dl_mem_peak() >= dl_mem_current());
  dl_tensor_free(&t);
  assert_int_equal(dl_mem_current(), before);
  assert_null(t.data);
  dl_tensor_free(&t); /* idempotent */
}

static void peak_tracks_maximum(void **state) {
  (void)state;
  dl_mem_reset_peak();
  int64_t base = dl_mem_current();
  dl_tensor a = {0}, b = {0};
  assert_int_equal(dl_tensor_f32(&a, 1, 1000, 0, 0, 0, "a"), DL_OK);
  assert_int_equal(dl_tensor_f32(&b, 1, 500, 0, 0, 0, "b"), DL_OK);
  dl_tensor_free(&a);
  dl_tensor_free(&b);
  assert_int_equal(dl_mem_peak() - base, 6000);
  assert_int_equal(dl_mem_current(), base);
}

static void bad_shapes_are_refused_with_a_message(void **state) {
  (void)state;
  dl_tensor t = {0};
  int64_t neg[2] = {3, -1};
  assert_int_equal(dl_tensor_alloc(&t, DL_F32, 2, neg, "w"), DL_ERR_INVALID);
  assert_non_null(strstr(dl_last_error(), "w: dimension 1 is negative"));
  assert_int_equal(dl_tensor_alloc(&t, DL_F32, 5, neg, "w"), DL_ERR_INVALID);
  int64_t huge[2] = {INT64_MAX / 2, 4};
  assert_int_equal(dl_tensor_alloc(&t, DL_F32, 2, huge, "w"), DL_ERR_INVALID);
  assert_int_equal(dl_tensor_alloc(&t, (dl_dtype)99, 2, huge, "w"), DL_ERR_INVALID);
}

static void injected_allocation_failure(void **state) {
  (void)state;
  dl_tensor t = {0};
  dl_mem_fail_after(1);
  assert_int_equal(dl_tensor_f32(&t, 1, 4, 0, 0, 0, "x"), DL_ERR_NOMEM);
  assert_non_null(strstr(dl_last_error(), "x"));
  assert_int_equal(dl_tensor_f32(&t, 1, 4, 0, 0, 0, "x"), DL_OK);
  dl_tensor_free(&t);
}

static void clone_copy_reshape_describe(void **state) {
  (void)state;
  dl_tensor a = {0}, b = {0}, c = {0};
  assert_int_equal(dl_tensor_f32(&a, 2, 2, 3, 0, 0, "a"), DL_OK);
  for (int i = 0; i < 6; i++) dl_f32(&a)[i] = (float)i;
  assert_int_equal(dl_tensor_clone(&b, &a, "b"), DL_OK);
  assert_memory_equal(a.data, b.data, 24);
  int64_t s3[1] = {6};
  assert_int_equal(dl_tensor_reshape(&b, 1, s3), DL_OK);
  assert_false(dl_tensor_same_shape(&a, &b));
  assert_int_equal(dl_tensor_copy_into(&a, &b, "a"), DL_ERR_INVALID);
  assert_non_null(strstr(dl_last_error(), "expected [2, 3] float32, got [6] float32"));
  int64_t s7[1] = {7};
  assert_int_equal(dl_tensor_reshape(&b, 1, s7), DL_ERR_INVALID);
  assert_int_equal(dl_tensor_f32(&c, 1, 6, 0, 0, 0, "c"), DL_OK);
  assert_int_equal(dl_tensor_copy_into(&c, &b, "c"), DL_OK);
  assert_true(dl_f32(&c)[5] == 5.0f);
  dl_tensor_zero(&c);
  assert_true(dl_f32(&c)[5] == 0.0f);
  dl_tensor_free(&a);
  dl_tensor_free(&b);
  dl_tensor_free(&c);
}

static void status_messages(void **state) {
  (void)state;
  assert_int_equal(dl_fail(DL_ERR_IO, "cannot open %s", "x.h5"), DL_ERR_IO);
  assert_int_equal(dl_fail_context(DL_ERR_IO, "loading %s: ", "digits"), DL_ERR_IO);
  assert_string_equal(dl_last_error(), "loading digits: cannot open x.h5");
  dl_clear_error();
  assert_string_equal(dl_last_error(), "");
  for (int s = DL_OK; s <= DL_ERR_INTERNAL; s++)
    assert_string_not_equal(dl_status_name((dl_status)s), "unknown error");
  assert_int_equal(dl_dtype_size(DL_BF16), 2);
  assert_string_equal(dl_dtype_name(DL_I64), "int64");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(alloc_zeroed_and_accounted),
      cmocka_unit_test(peak_tracks_maximum),
      cmocka_unit_test(bad_shapes_are_refused_with_a_message),
      cmocka_unit_test(injected_allocation_failure),
      cmocka_unit_test(clone_copy_reshape_describe),
      cmocka_unit_test(status_messages),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
