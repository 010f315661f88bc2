/* LayerNorm over the last dimension (engine/nn/kinds/layernorm.c): gradients
 * against finite differences, outputs against a double-precision
 * reference, error paths and thread-count independence. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "nn/kinds/kinds.h"
#include "gradcheck.h"
#include "core/mem.h"
#include "core/threads.h"

static dl_layer_desc ln_desc(int64_t dim, bool affine) {
  dl_layer_desc d = dl_layer_default(DL_LAYERNORM);
  d.out = dim;
  d.affine = affine;
  return d;
}

static void make_input(dl_tensor *x, int ndim, int64_t d0, int64_t d1, int64_t d2, uint64_t seed) {
  assert_int_equal(dl_tensor_f32(x, ndim, d0, d1, d2, 0, "x"), DL_OK);
  gc_fill_uniform(x, seed, -2.0f, 3.0f);
}

/* Tolerance 1e-2: see tests/gradcheck.h (expected error ~1e-4..1e-3, a wrong
 * formula gives O(1)). Training and eval behave the same for LayerNorm;
 * both are checked because a model switches modes around it. */
static void gradcheck_shapes(void **state) {
  (void)state;
  struct {
    int ndim;
    int64_t shape[3];
    bool affine;
  } cases[] = {
      {2, {3, 5, 0}, true},
      {3, {2, 3, 4}, true},
      {1, {6, 0, 0}, false},
      {2, {4, 3, 0}, false},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    dl_layer_desc d = ln_desc(cases[i].shape[cases[i].ndim - 1], cases[i].affine);
    dl_tensor x = {0};
    make_input(&x, cases[i].ndim, cases[i].shape[0], cases[i].shape[1], cases[i].shape[2], 30 + i);
    for (int training = 1; training >= 0; training--) {
      double err = gc_layer_max_error(&d, &x, training);
      if (!(err < 1e-2))
        print_error("case %zu training %d: %g (%s)\n", i, training, err, gc_last_report);
      assert_true(err < 1e-2);
    }
    dl_tensor_free(&x);
  }
}

/* y = (x - mean) / sqrt(var + eps) * w + b per row, biased variance, in
 * double. Tolerance close(rtol 1e-6, atol 1e-6): a few float roundings on
 * O(1) values. Also checks params' names and initial values. */
static void forward_matches_double_reference(void **state) {
  (void)state;
  dl_layer_desc d = ln_desc(5, true);
  d.eps = 1e-3f; /* large enough that using it wrongly shows */
  dl_layer l;
  assert_int_equal(dl_layer_init(&l, &d, "2.", 0, 1), DL_OK);
  assert_int_equal(l.nparams, 2);
  assert_int_equal(l.nbuffers, 0);
  assert_string_equal(l.params[0].name, "2.weight");
  assert_string_equal(l.params[1].name, "2.bias");
  assert_true(dl_f32(&l.params[0].value)[4] == 1.0f && dl_f32(&l.params[1].value)[4] == 0.0f);
  float w[5] = {1.5f, -0.5f, 2.0f, 0.25f, 1.0f}, b[5] = {0.1f, 0.2f, -0.3f, 0.0f, 1.0f};
  memcpy(l.params[0].value.data, w, sizeof w);
  memcpy(l.params[1].value.data, b, sizeof b);
  dl_tensor x = {0}, y = {0};
  make_input(&x, 3, 2, 3, 5, 8);
  dl_ctx ctx = gc_ctx();
  ctx.grad_enabled = false;
  assert_int_equal(l.ops->forward(&l, &ctx, &x, &y), DL_OK);
  assert_true(dl_tensor_empty(&l.saved[0]));
  for (int r = 0; r < 6; r++) {
    const float *xr = dl_f32(&x) + r * 5;
    double mean = 0.0, var = 0.0;
    for (int i = 0; i < 5; i++) mean += xr[i] / 5.0;
    for (int i = 0; i < 5; i++) var += (xr[i] - mean) * (xr[i] - mean) / 5.0;
    for (int i = 0; i < 5; i++) {
      double ref = (xr[i] - mean) / sqrt(var + (double)d.eps) * w[i] + b[i];
      assert_true(fabs(dl_f32(&y)[r * 5 + i] - ref) <= 1e-6 + 1e-6 * fabs(ref));
    }
  }
  dl_tensor_free(&x);
  dl_tensor_free(&y);
  dl_layer_destroy(&l);
}

/* Weight and bias gradients are sums over all rows and accumulate across
 * calls; a constant dy gives db = rows * dy exactly and dw = sum of xhat,
 * which is ~0 per row. */
static void param_grads_sum_over_rows(void **state) {
  (void)state;
  dl_layer_desc d = ln_desc(4, true);
  dl_layer l;
  assert_int_equal(dl_layer_init(&l, &d, "", 0, 1), DL_OK);
  dl_tensor x = {0}, y = {0}, dy = {0};
  make_input(&x, 2, 6, 4, 0, 4);
  assert_int_equal(dl_tensor_f32(&dy, 2, 6, 4, 0, 0, "dy"), DL_OK);
  for (int64_t i = 0; i < dy.numel; i++) dl_f32(&dy)[i] = 0.5f;
  dl_ctx ctx = gc_ctx();
  assert_int_equal(l.ops->forward(&l, &ctx, &x, &y), DL_OK);
  assert_int_equal(l.ops->backward(&l, &ctx, &x, &y, &dy, NULL), DL_OK);
  assert_int_equal(l.ops->backward(&l, &ctx, &x, &y, &dy, NULL), DL_OK);
  for (int i = 0; i < 4; i++) assert_true(dl_f32(&l.params[1].grad)[i] == 6.0f);
  double total = 0.0;
  for (int i = 0; i < 4; i++) total += dl_f32(&l.params[0].grad)[i];
  assert_true(fabs(total) < 1e-5); /* sum over all of xhat, 24 values of O(1) */
  l.params[1].requires_grad = false;
  l.params[1].has_grad = false;
  assert_int_equal(l.ops->backward(&l, &ctx, &x, &y, &dy, NULL), DL_OK);
  assert_false(l.params[1].has_grad);
  dl_tensor_free(&x);
  dl_tensor_free(&y);
  dl_tensor_free(&dy);
  dl_layer_destroy(&l);
}

static void bad_shapes_and_misuse_are_refused(void **state) {
  (void)state;
  dl_layer_desc d = ln_desc(4, true);
  dl_layer l;
  assert_int_equal(dl_layer_init(&l, &d, "5.", 0, 1), DL_OK);
  dl_ctx ctx = gc_ctx();
  dl_tensor x = {0}, bad = {0}, y = {0}, dx = {0};
  make_input(&x, 2, 3, 4, 0, 1);
  make_input(&bad, 2, 4, 3, 0, 2);
  assert_int_equal(l.ops->forward(&l, &ctx, &bad, &y), DL_ERR_INVALID);
  assert_non_null(strstr(dl_last_error(), "layer 5 (layernorm): input is [4, 3] float32"));
  assert_non_null(strstr(dl_last_error(), "[..., 4]"));
  assert_int_equal(l.ops->backward(&l, &ctx, &x, &x, &x, &dx), DL_ERR_INVALID);
  assert_non_null(strstr(dl_last_error(), "backward without a grad-mode forward"));
  assert_int_equal(l.ops->forward(&l, &ctx, &x, &y), DL_OK);
  assert_int_equal(l.ops->backward(&l, &ctx, &x, &y, &bad, &dx), DL_ERR_INVALID);
  assert_non_null(strstr(dl_last_error(), "output gradient is [4, 3]"));
  int64_t s3[3] = {3, 1, 4};
  dl_tensor dy3 = {0};
  assert_int_equal(dl_tensor_alloc(&dy3, DL_F32, 3, s3, "dy3"), DL_OK);
  assert_int_equal(l.ops->backward(&l, &ctx, &x, &y, &dy3, &dx), DL_ERR_INVALID);
  assert_non_null(strstr(dl_last_error(), "output gradient is"));
  dl_layer zero;
  memset(&zero, 0, sizeof zero);
  zero.desc = ln_desc(0, true);
  assert_int_equal(dl_layernorm_init(&zero, 1), DL_ERR_INVALID);
  assert_non_null(strstr(dl_last_error(), "normalized size is 0"));
  dl_tensor_free(&x);
  dl_tensor_free(&bad);
  dl_tensor_free(&y);
  dl_tensor_free(&dy3);
  dl_layer_destroy(&l);
}

static void allocation_failures_are_reported(void **state) {
  (void)state;
  dl_layer_desc d = ln_desc(4, true);
  dl_layer l;
  assert_int_equal(dl_layer_init(&l, &d, "5.", 0, 1), DL_OK);
  dl_ctx ctx = gc_ctx();
  dl_tensor x = {0}, y = {0}, dx = {0};
  make_input(&x, 2, 3, 4, 0, 1);
  int64_t before = dl_mem_current();
  for (int n = 1; n <= 3; n++) {
    dl_mem_fail_after(n);
    assert_int_equal(l.ops->forward(&l, &ctx, &x, &y), DL_ERR_NOMEM);
    assert_non_null(strstr(dl_last_error(), "layer 5 (layernorm)"));
    assert_int_equal(dl_mem_current(), before);
  }
  dl_mem_fail_after(0);
  assert_int_equal(l.ops->forward(&l, &ctx, &x, &y), DL_OK);
  for (int n = 1; n <= 2; n++) {
    dl_mem_fail_after(n);
    assert_int_equal(l.ops->backward(&l, &ctx, &x, &y, &x, &dx), DL_ERR_NOMEM);
    assert_true(dl_tensor_empty(&dx));
  }
  dl_mem_fail_after(0);
  for (int n = 1; n <= 4; n++) {
    dl_mem_fail_after(n);
    dl_layer bad;
    assert_int_equal(dl_layer_init(&bad, &d, "", 0, 1), DL_ERR_NOMEM);
  }
  dl_mem_fail_after(0);
  dl_tensor_free(&x);
  dl_tensor_free(&y);
  dl_layer_destroy(&l);
}

/* [512, 64]: forward and dx split over rows, dw/db over columns, into
 * several chunks; the bits must not depend on the thread count. */
static void bitwise_same_with_one_and_two_threads(void **state) {
  (void)state;
  dl_layer_desc d = ln_desc(64, true);
  dl_tensor x = {0}, dy = {0};
  make_input(&x, 2, 512, 64, 0, 11);
  make_input(&dy, 2, 512, 64, 0, 12);
  dl_ctx ctx = gc_ctx();
  if (!gc_same_bits_1_and_2_threads(&d, "", 1, &ctx, &x, &dy)) fail_msg("%s", gc_last_report);
  dl_tensor_free(&x);
  dl_tensor_free(&dy);
}

/* Rows are normalized several at a time (in independent chains; a block of
 * eight in the lanes of one register with AVX-512): 11 rows (a block and a
 * short one) of 37 columns (blocks of eight and a tail) give each row the
 * bits it gets alone, forward and dx, with a weight and bias that are not 1
 * and 0, and without them. Bitwise: it is the same arithmetic. */
static void assert_rows_together_equal_rows_alone(bool affine) {
  enum { R = 11, D = 37 };
  dl_layer_desc d = ln_desc(D, affine);
  dl_layer l;
  assert_int_equal(dl_layer_init(&l, &d, "", 0, 1), DL_OK);
  if (affine) {
    gc_fill_uniform(&l.params[0].value, 3, 0.5f, 1.5f);
    gc_fill_uniform(&l.params[1].value, 4, -1.0f, 1.0f);
  }
  dl_ctx ctx = gc_ctx();
  dl_tensor x = {0}, dy = {0}, y = {0}, dx = {0};
  make_input(&x, 2, R, D, 0, 21);
  make_input(&dy, 2, R, D, 0, 22);
  /* +-1e30 two columns apart in every row of x and of dy: the double sums
   * of x, g and g * xhat then lose what came before them, so another
   * summation order shows in y and dx. */
  for (int r = 0; r < R; r++) {
    dl_f32(&x)[r * D + r % D] = dl_f32(&dy)[r * D + (r + 5) % D] = 1e30f;
    dl_f32(&x)[r * D + (r + 2) % D] = dl_f32(&dy)[r * D + (r + 7) % D] = -1e30f;
  }
  assert_int_equal(l.ops->forward(&l, &ctx, &x, &y), DL_OK);
  assert_int_equal(l.ops->backward(&l, &ctx, &x, &y, &dy, &dx), DL_OK);
  for (int r = 0; r < R; r++) {
    dl_tensor x1 = {0}, dy1 = {0}, y1 = {0}, dx1 = {0};
    assert_int_equal(dl_tensor_f32(&x1, 2, 1, D, 0, 0, "row"), DL_OK);
    assert_int_equal(dl_tensor_f32(&dy1, 2, 1, D, 0, 0, "row dy"), DL_OK);
    memcpy(x1.data, dl_f32(&x) + r * D, D * sizeof(float));
    memcpy(dy1.data, dl_f32(&dy) + r * D, D * sizeof(float));
    assert_int_equal(l.ops->forward(&l, &ctx, &x1, &y1), DL_OK);
    assert_int_equal(l.ops->backward(&l, &ctx, &x1, &y1, &dy1, &dx1), DL_OK);
    assert_memory_equal(y1.data, dl_f32(&y) + r * D, D * sizeof(float));
    assert_memory_equal(dx1.data, dl_f32(&dx) + r * D, D * sizeof(float));
    dl_tensor_free(&x1);
    dl_tensor_free(&dy1);
    dl_tensor_free(&y1);
    dl_tensor_free(&dx1);
  }
  dl_tensor_free(&x);
  dl_tensor_free(&dy);
  dl_tensor_free(&y);
  dl_tensor_free(&dx);
  dl_layer_destroy(&l);
}

static void rows_together_equal_rows_alone(void **state) {
  (void)state;
  assert_rows_together_equal_rows_alone(true);
  assert_rows_together_equal_rows_alone(false);
}

/* Autocast keeps LayerNorm in float32 (its fp32 list): same bits as off. */
static void autocast_keeps_float32_outputs(void **state) {
  (void)state;
  dl_layer_desc d = ln_desc(8, true);
  dl_layer l;
  assert_int_equal(dl_layer_init(&l, &d, "", 0, 1), DL_OK);
  dl_ctx ctx = gc_ctx(), amp = gc_ctx();
  amp.autocast = DL_BF16;
  dl_tensor x = {0}, y = {0}, yamp = {0};
  make_input(&x, 2, 3, 8, 0, 5);
  assert_int_equal(l.ops->forward(&l, &ctx, &x, &y), DL_OK);
  assert_int_equal(l.ops->forward(&l, &amp, &x, &yamp), DL_OK);
  assert_memory_equal(y.data, yamp.data, dl_tensor_bytes(&y));
  dl_tensor_free(&x);
  dl_tensor_free(&y);
  dl_tensor_free(&yamp);
  dl_layer_destroy(&l);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(gradcheck_shapes),
      cmocka_unit_test(rows_together_equal_rows_alone),
      cmocka_unit_test(forward_matches_double_reference),
      cmocka_unit_test(param_grads_sum_over_rows),
      cmocka_unit_test(bad_shapes_and_misuse_are_refused),
      cmocka_unit_test(allocation_failures_are_reported),
      cmocka_unit_test(bitwise_same_with_one_and_two_threads),
      cmocka_unit_test(autocast_keeps_float32_outputs),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
