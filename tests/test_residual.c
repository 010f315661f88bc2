/* Residual blocks (engine/nn/kinds/residual.c, built by engine/nn/layer.c):
 * y = x + body(x) and its gradients (finite differences, nested blocks),
 * names and rng ids of the body, shape errors, AMP rounding and
 * allocation failures. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "gradcheck.h"
#include "numerics/half.h"
#include "core/mem.h"

static dl_layer_desc linear(int64_t in, int64_t out) {
  dl_layer_desc d = dl_layer_default(DL_LINEAR);
  d.in = in;
  d.out = out;
  return d;
}

static dl_layer_desc residual(const dl_layer_desc *body, int n) {
  dl_layer_desc d = dl_layer_default(DL_RESIDUAL);
  d.body = body;
  d.nbody = n;
  return d;
}

static void gradients_match_finite_differences(void **state) {
  (void)state;
  const dl_layer_desc body[3] = {linear(4, 6), dl_layer_default(DL_TANH), linear(6, 4)};
  dl_layer_desc d = residual(body, 3);
  dl_tensor x = {0};
  assert_int_equal(dl_tensor_f32(&x, 2, 3, 4, 0, 0, "x"), DL_OK);
  gc_fill_uniform(&x, 2, -1.0f, 1.0f);
  double err = gc_layer_max_error(&d, &x, true);
  /* tanh is smooth: truncation ~h^2 (see gradcheck.h), expected ~1e-4. */
  if (!(err < 1e-2)) print_error("%s\n", gc_last_report);
  assert_true(err < 1e-2);
  /* A block inside a block. */
  const dl_layer_desc inner[2] = {d, linear(4, 4)};
  dl_layer_desc outer = residual(inner, 2);
  err = gc_layer_max_error(&outer, &x, true);
  if (!(err < 1e-2)) print_error("nested: %s\n", gc_last_report);
  assert_true(err < 1e-2);
  dl_tensor_free(&x);
}

/* With W = 0 the body is the bias: y = x + b exactly; dx = dy exactly. */
static void adds_the_skip_connection(void **state) {
  (void)state;
  const dl_layer_desc body[1] = {linear(3, 3)};
  dl_layer_desc d = residual(body, 1);
  dl_layer l;
  assert_int_equal(dl_layer_init(&l, &d, "2.", 5, 1), DL_OK);
  dl_layer *lin = &l.body->layers[0];
  dl_tensor_zero(&lin->params[0].value);
  const float b[3] = {1, 2, 3};
  memcpy(dl_f32(&lin->params[1].value), b, sizeof b);
  dl_tensor x = {0}, y = {0}, dy = {0}, dx = {0};
  assert_int_equal(dl_tensor_f32(&x, 2, 2, 3, 0, 0, "x"), DL_OK);
  gc_fill_uniform(&x, 1, -1.0f, 1.0f);
  dl_ctx ctx = gc_ctx();
  assert_int_equal(l.ops->forward(&l, &ctx, &x, &y), DL_OK);
  for (int i = 0; i < 6; i++) assert_true(dl_f32(&y)[i] == dl_f32(&x)[i] + b[i % 3]);
  assert_int_equal(dl_tensor_f32(&dy, 2, 2, 3, 0, 0, "dy"), DL_OK);
  gc_fill_uniform(&dy, 2, -1.0f, 1.0f);
  assert_int_equal(l.ops->backward(&l, &ctx, &x, &y, &dy, &dx), DL_OK);
  for (int i = 0; i < 6; i++) assert_true(dl_f32(&dx)[i] == dl_f32(&dy)[i]);
  assert_true(lin->params[1].has_grad);
  assert_true(dl_f32(&lin->params[1].grad)[0] == dl_f32(&dy)[0] + dl_f32(&dy)[3]);
  dl_layer_release(&l);
  assert_null(l.body->input);
  dl_tensor_free(&x);
  dl_tensor_free(&y);
  dl_tensor_free(&dy);
  dl_tensor_free(&dx);
  dl_layer_destroy(&l);
}

static void body_is_named_and_numbered(void **state) {
  (void)state;
  const dl_layer_desc inner[1] = {linear(2, 2)};
  const dl_layer_desc body[3] = {linear(2, 2), residual(inner, 1), linear(2, 2)};
  dl_layer_desc d = residual(body, 3);
  dl_layer l;
  assert_int_equal(dl_layer_init(&l, &d, "4.", 10, 1), DL_OK);
  assert_int_equal(l.nparams, 0);
  assert_int_equal(l.body->n, 3);
  assert_string_equal(l.body->layers[0].params[0].name, "4.body.0.weight");
  assert_string_equal(l.body->layers[1].body->layers[0].params[1].name, "4.body.1.body.0.bias");
  assert_string_equal(l.body->layers[2].params[0].name, "4.body.2.weight");
  /* Ids follow the block's own, depth first, all distinct. */
  assert_int_equal(l.rng_id, 10);
  assert_int_equal(l.body->layers[0].rng_id, 11);
  assert_int_equal(l.body->layers[1].rng_id, 12);
  assert_int_equal(l.body->layers[1].body->layers[0].rng_id, 13);
  assert_int_equal(l.body->layers[2].rng_id, 14);
  dl_layer_destroy(&l);
}

static void errors_name_the_body_layer(void **state) {
  (void)state;
  const dl_layer_desc body[1] = {linear(4, 3)};
  dl_layer_desc d = residual(body, 1);
  dl_layer l;
  assert_int_equal(dl_layer_init(&l, &d, "1.", 0, 1), DL_OK);
  dl_tensor x = {0}, y = {0};
  assert_int_equal(dl_tensor_f32(&x, 2, 2, 4, 0, 0, "x"), DL_OK);
  dl_ctx ctx = gc_ctx();
  assert_int_equal(l.ops->forward(&l, &ctx, &x, &y), DL_ERR_INVALID);
  assert_non_null(strstr(dl_last_error(), "body output [2, 3] float32 does not match "
                                          "the block input [2, 4] float32"));
  dl_tensor_free(&x);
  assert_int_equal(dl_tensor_f32(&x, 2, 2, 5, 0, 0, "x"), DL_OK);
  assert_int_equal(l.ops->forward(&l, &ctx, &x, &y), DL_ERR_INVALID);
  assert_non_null(strstr(dl_last_error(), "layer 1.body.0 (linear): input [2, 5]"));
  assert_null(y.data);
  dl_tensor_free(&x);
  dl_layer_destroy(&l);
  const dl_layer_desc bad[1] = {linear(0, 3)};
  d = residual(bad, 1);
  assert_int_equal(dl_layer_init(&l, &d, "1.", 0, 1), DL_ERR_INVALID);
  assert_non_null(strstr(dl_last_error(), "layer 1.body.0 (linear): in_features"));
  d = residual(bad, 0);
  assert_int_equal(dl_layer_init(&l, &d, "1.", 0, 1), DL_ERR_INVALID);
  assert_non_null(strstr(dl_last_error(), "layer 1 (residual): the body needs"));
}

static void sum_rounds_under_autocast(void **state) {
  (void)state;
  const dl_layer_desc body[1] = {dl_layer_default(DL_FLATTEN)};
  dl_layer_desc d = residual(body, 1);
  dl_layer l;
  assert_int_equal(dl_layer_init(&l, &d, "", 0, 1), DL_OK);
  dl_tensor x = {0}, y = {0}, dy = {0}, dx = {0};
  assert_int_equal(dl_tensor_f32(&x, 2, 2, 8, 0, 0, "x"), DL_OK);
  gc_fill_uniform(&x, 6, -1.0f, 1.0f);
  dl_ctx ctx = gc_ctx();
  ctx.autocast = DL_F16;
  assert_int_equal(l.ops->forward(&l, &ctx, &x, &y), DL_OK);
  for (int i = 0; i < 16; i++) {
    float xi = dl_f32(&x)[i];
    assert_true(dl_f32(&y)[i] == dl_round_f16(xi + dl_round_f16(xi)));
  }
  assert_int_equal(dl_tensor_f32(&dy, 2, 2, 8, 0, 0, "dy"), DL_OK);
  gc_fill_uniform(&dy, 7, -1.0f, 1.0f);
  assert_int_equal(l.ops->backward(&l, &ctx, &x, &y, &dy, &dx), DL_OK);
  for (int i = 0; i < 16; i++) {
    float g = dl_f32(&dy)[i];
    assert_true(dl_f32(&dx)[i] == dl_round_f16(g + g));
  }
  dl_tensor_free(&x);
  dl_tensor_free(&y);
  dl_tensor_free(&dy);
  dl_tensor_free(&dx);
  dl_layer_destroy(&l);
}

static void allocation_failures_leak_nothing(void **state) {
  (void)state;
  const dl_layer_desc body[2] = {linear(3, 3), linear(3, 3)};
  dl_layer_desc d = residual(body, 2);
  dl_tensor x = {0}, dy = {0};
  assert_int_equal(dl_tensor_f32(&x, 2, 2, 3, 0, 0, "x"), DL_OK);
  assert_int_equal(dl_tensor_f32(&dy, 2, 2, 3, 0, 0, "dy"), DL_OK);
  int failures = gc_nomem_failures(&d, "0.", &x, &dy, DL_F32, false);
  if (failures < 10) fail_msg("%d allocations checked: %s", failures, gc_last_report);
  dl_tensor_free(&x);
  dl_tensor_free(&dy);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(gradients_match_finite_differences),
      cmocka_unit_test(adds_the_skip_connection),
      cmocka_unit_test(body_is_named_and_numbered),
      cmocka_unit_test(errors_name_the_body_layer),
      cmocka_unit_test(sum_rounds_under_autocast),
      cmocka_unit_test(allocation_failures_leak_nothing),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
