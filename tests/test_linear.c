/* Linear layer (engine/nn/kinds/linear.c) and the layer framework it runs in
 * (engine/nn/layer.c): gradients against finite differences, exact answers,
 * PyTorch's init bounds, AMP emulation against a hand computation,
 * accumulation, errors and allocation failures. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "gradcheck.h"
#include "numerics/half.h"
#include "core/mem.h"
#include "numerics/philox.h"

static dl_layer_desc linear_desc(int64_t in, int64_t out, bool bias) {
  dl_layer_desc d = dl_layer_default(DL_LINEAR);
  d.in = in;
  d.out = out;
  d.bias = bias;
  return d;
}

static void gradcheck_case(int ndim, const int64_t *shape, bool bias) {
  dl_tensor x = {0};
  assert_int_equal(dl_tensor_alloc(&x, DL_F32, ndim, shape, "x"), DL_OK);
  gc_fill_uniform(&x, 5, -1.0f, 1.0f);
  dl_layer_desc d = linear_desc(shape[ndim - 1], 3, bias);
  double err = gc_layer_max_error(&d, &x, true);
  /* Tolerance 1e-2: see gradcheck.h (expected error ~1e-4 for a linear map). */
  if (!(err < 1e-2)) print_error("%s\n", gc_last_report);
  assert_true(err < 1e-2);
  dl_tensor_free(&x);
}

static void gradients_match_finite_differences(void **state) {
  (void)state;
  gradcheck_case(2, (const int64_t[]){4, 5}, true);
  gradcheck_case(2, (const int64_t[]){4, 5}, false);
  gradcheck_case(1, (const int64_t[]){6}, true);
  gradcheck_case(3, (const int64_t[]){2, 3, 5}, true);
  gradcheck_case(4, (const int64_t[]){2, 2, 2, 4}, false);
}

/* An output gradient of another shape or dtype is refused, not read by
 * the shape the forward gave. */
static void misshapen_output_gradients_are_refused(void **state) {
  (void)state;
  dl_tensor x = {0};
  assert_int_equal(dl_tensor_f32(&x, 2, 4, 5, 0, 0, "x"), DL_OK);
  dl_layer_desc d = linear_desc(5, 3, true);
  bool refused = gc_refuses_misshapen_dy(&d, &x);
  if (!refused) print_error("%s\n", gc_last_report);
  assert_true(refused);
  dl_tensor_free(&x);
}

/* Small integers: every product and sum is exact in float32, so the
 * answer is known exactly. */
static void forward_gives_exact_known_answer(void **state) {
  (void)state;
  dl_layer l;
  dl_layer_desc d = linear_desc(3, 2, true);
  assert_int_equal(dl_layer_init(&l, &d, "0.", 0, 1), DL_OK);
  const float w[6] = {1, 2, 3, -1, 0, 4}, b[2] = {10, -5};
  memcpy(dl_f32(&l.params[0].value), w, sizeof w);
  memcpy(dl_f32(&l.params[1].value), b, sizeof b);
  dl_tensor x = {0}, y = {0};
  assert_int_equal(dl_tensor_f32(&x, 2, 2, 3, 0, 0, "x"), DL_OK);
  const float xv[6] = {1, 1, 1, 2, -1, 0};
  memcpy(dl_f32(&x), xv, sizeof xv);
  dl_ctx ctx = gc_ctx();
  assert_int_equal(l.ops->forward(&l, &ctx, &x, &y), DL_OK);
  assert_int_equal(y.ndim, 2);
  assert_int_equal(y.shape[0], 2);
  assert_int_equal(y.shape[1], 2);
  const float expect[4] = {16, -2, 10, -7};
  for (int i = 0; i < 4; i++) assert_true(dl_f32(&y)[i] == expect[i]);
  dl_tensor_free(&y);
  dl_tensor_free(&x);
  dl_layer_destroy(&l);
}

static void init_follows_pytorch_bounds_and_streams(void **state) {
  (void)state;
  dl_layer l;
  dl_layer_desc d = linear_desc(16, 8, true);
  assert_int_equal(dl_layer_init(&l, &d, "3.", 0, 42), DL_OK);
  assert_int_equal(l.nparams, 2);
  assert_string_equal(l.params[0].name, "3.weight");
  assert_string_equal(l.params[1].name, "3.bias");
  assert_true(l.params[0].requires_grad && l.params[0].in_optimizer);
  assert_false(l.params[0].has_grad);
  /* PyTorch: U(-1/sqrt(fan_in), 1/sqrt(fan_in)) = U(-0.25, 0.25) for weight and bias. */
  float expect[128];
  dl_stream s = dl_stream_make(42, "init/3.weight", NULL, 0);
  dl_stream_uniform_range(&s, 0, -0.25f, 0.25f, expect, 128);
  assert_memory_equal(expect, dl_f32(&l.params[0].value), sizeof expect);
  s = dl_stream_make(42, "init/3.bias", NULL, 0);
  dl_stream_uniform_range(&s, 0, -0.25f, 0.25f, expect, 8);
  assert_memory_equal(expect, dl_f32(&l.params[1].value), 8 * sizeof(float));
  float lo = 1, hi = -1;
  for (int i = 0; i < 128; i++) {
    float v = dl_f32(&l.params[0].value)[i];
    lo = v < lo ? v : lo;
    hi = v > hi ? v : hi;
  }
  assert_true(lo >= -0.25f && hi < 0.25f && hi - lo > 0.4f);
  dl_layer_destroy(&l);
}

/* The same computation written out with dl_round: rounded operands, fma in
 * increasing k from the rounded bias (the GEMM contract), rounded result. */
static void autocast_matches_hand_rounding(void **state) {
  (void)state;
  const int rows = 3, in = 5, out = 4;
  for (int half = DL_F16; half <= DL_BF16; half++) {
    float (*rnd)(float) = half == DL_F16 ? dl_round_f16 : dl_round_bf16;
    dl_layer l;
    dl_layer_desc d = linear_desc(in, out, true);
    assert_int_equal(dl_layer_init(&l, &d, "", 0, 9), DL_OK);
    dl_tensor x = {0}, y = {0}, dy = {0}, dx = {0};
    assert_int_equal(dl_tensor_f32(&x, 2, rows, in, 0, 0, "x"), DL_OK);
    assert_int_equal(dl_tensor_f32(&dy, 2, rows, out, 0, 0, "dy"), DL_OK);
    gc_fill_uniform(&x, 1, -2.0f, 2.0f);
    gc_fill_uniform(&dy, 2, -1.0f, 1.0f);
    dl_ctx ctx = gc_ctx();
    ctx.autocast = (dl_dtype)half;
    float w_before[20];
    memcpy(w_before, dl_f32(&l.params[0].value), sizeof w_before);
    assert_int_equal(l.ops->forward(&l, &ctx, &x, &y), DL_OK);
    assert_int_equal(l.ops->backward(&l, &ctx, &x, &y, &dy, &dx), DL_OK);
    const float *X = dl_f32(&x), *W = dl_f32(&l.params[0].value), *B = dl_f32(&l.params[1].value),
                *DY = dl_f32(&dy);
    assert_memory_equal(w_before, W, sizeof w_before); /* master weights untouched */
    for (int r = 0; r < rows; r++) {
      for (int o = 0; o < out; o++) {
        float acc = rnd(B[o]);
        for (int k = 0; k < in; k++) acc = fmaf(rnd(X[r * in + k]), rnd(W[o * in + k]), acc);
        assert_true(dl_f32(&y)[r * out + o] == rnd(acc));
      }
      for (int k = 0; k < in; k++) {
        float acc = 0.0f;
        for (int o = 0; o < out; o++) acc = fmaf(rnd(DY[r * out + o]), rnd(W[o * in + k]), acc);
        assert_true(dl_f32(&dx)[r * in + k] == rnd(acc));
      }
    }
    for (int o = 0; o < out; o++) {
      float db = 0.0f;
      for (int r = 0; r < rows; r++) db += rnd(DY[r * out + o]);
      assert_true(dl_f32(&l.params[1].grad)[o] == rnd(db));
      for (int k = 0; k < in; k++) {
        float acc = 0.0f;
        for (int r = 0; r < rows; r++) acc = fmaf(rnd(DY[r * out + o]), rnd(X[r * in + k]), acc);
        assert_true(dl_f32(&l.params[0].grad)[o * in + k] == rnd(acc));
      }
    }
    dl_tensor_free(&x);
    dl_tensor_free(&y);
    dl_tensor_free(&dy);
    dl_tensor_free(&dx);
    dl_layer_destroy(&l);
  }
}

static void run_backward(dl_layer *l, const dl_tensor *x, const dl_tensor *dy) {
  dl_ctx ctx = gc_ctx();
  dl_tensor y = {0};
  assert_int_equal(l->ops->forward(l, &ctx, x, &y), DL_OK);
  assert_int_equal(l->ops->backward(l, &ctx, x, &y, dy, NULL), DL_OK);
  dl_tensor_free(&y);
}

/* Gradients add up over backwards (exactly: g + g = 2g), and a frozen
 * parameter gets none. */
static void gradients_accumulate_and_respect_requires_grad(void **state) {
  (void)state;
  dl_layer l;
  dl_layer_desc d = linear_desc(4, 3, true);
  assert_int_equal(dl_layer_init(&l, &d, "", 0, 3), DL_OK);
  dl_tensor x = {0}, dy = {0}, once = {0};
  assert_int_equal(dl_tensor_f32(&x, 2, 5, 4, 0, 0, "x"), DL_OK);
  assert_int_equal(dl_tensor_f32(&dy, 2, 5, 3, 0, 0, "dy"), DL_OK);
  gc_fill_uniform(&x, 1, -1.0f, 1.0f);
  gc_fill_uniform(&dy, 2, -1.0f, 1.0f);
  l.params[1].requires_grad = false;
  run_backward(&l, &x, &dy);
  assert_true(l.params[0].has_grad);
  assert_false(l.params[1].has_grad);
  assert_int_equal(dl_tensor_clone(&once, &l.params[0].grad, "once"), DL_OK);
  run_backward(&l, &x, &dy);
  for (int i = 0; i < 12; i++) assert_true(dl_f32(&l.params[0].grad)[i] == 2.0f * dl_f32(&once)[i]);
  for (int i = 0; i < 3; i++) assert_true(dl_f32(&l.params[1].grad)[i] == 0.0f);
  dl_tensor_free(&x);
  dl_tensor_free(&dy);
  dl_tensor_free(&once);
  dl_layer_destroy(&l);
}

static void bad_input_and_desc_are_refused(void **state) {
  (void)state;
  dl_layer l;
  dl_layer_desc d = linear_desc(0, 3, true);
  assert_int_equal(dl_layer_init(&l, &d, "3.", 0, 1), DL_ERR_INVALID);
  assert_non_null(strstr(dl_last_error(), "layer 3 (linear): in_features must be > 0, got 0"));
  d = linear_desc(4, -1, true);
  assert_int_equal(dl_layer_init(&l, &d, "", 0, 1), DL_ERR_INVALID);
  assert_non_null(strstr(dl_last_error(), "linear layer: out_features must be > 0"));
  d = linear_desc(5, 3, true);
  assert_int_equal(dl_layer_init(&l, &d, "0.", 0, 1), DL_OK);
  dl_tensor x = {0}, y = {0};
  dl_ctx ctx = gc_ctx();
  assert_int_equal(dl_tensor_f32(&x, 2, 4, 6, 0, 0, "x"), DL_OK);
  assert_int_equal(l.ops->forward(&l, &ctx, &x, &y), DL_ERR_INVALID);
  assert_non_null(strstr(dl_last_error(), "[4, 6] float32"));
  assert_non_null(strstr(dl_last_error(), "in_features 5"));
  assert_null(y.data);
  dl_tensor_free(&x);
  assert_int_equal(dl_tensor_alloc(&x, DL_I32, 2, (const int64_t[]){4, 5}, "ids"), DL_OK);
  assert_int_equal(l.ops->forward(&l, &ctx, &x, &y), DL_ERR_INVALID);
  assert_non_null(strstr(dl_last_error(), "int32"));
  dl_tensor_free(&x);
  dl_layer_destroy(&l);
}

/* Every allocation of init, forward and backward fails once in turn; each
 * failure is reported as DL_ERR_NOMEM and leaks nothing. */
static void allocation_failures_leak_nothing(void **state) {
  (void)state;
  dl_layer_desc d = linear_desc(4, 3, true);
  dl_tensor x = {0}, dy = {0};
  assert_int_equal(dl_tensor_f32(&x, 2, 2, 4, 0, 0, "x"), DL_OK);
  assert_int_equal(dl_tensor_f32(&dy, 2, 2, 3, 0, 0, "dy"), DL_OK);
  /* autocast exercises the operand copies; existing grads the scratch path */
  int failures = gc_nomem_failures(&d, "", &x, &dy, DL_F16, true);
  if (failures < 5) fail_msg("%d allocations checked: %s", failures, gc_last_report);
  dl_tensor_free(&x);
  dl_tensor_free(&dy);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(gradients_match_finite_differences),
      cmocka_unit_test(forward_gives_exact_known_answer),
      cmocka_unit_test(init_follows_pytorch_bounds_and_streams),
      cmocka_unit_test(autocast_matches_hand_rounding),
      cmocka_unit_test(gradients_accumulate_and_respect_requires_grad),
      cmocka_unit_test(bad_input_and_desc_are_refused),
      cmocka_unit_test(misshapen_output_gradients_are_refused),
      cmocka_unit_test(allocation_failures_leak_nothing),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
