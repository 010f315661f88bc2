/* Learned positional embeddings (engine/nn/kinds/posembed.c): y = x + weight[:T],
 * the weight gradient summed over the batch in sample order (rows >= T
 * zero), N(0, 1) init from the parameter's stream, finite differences,
 * errors, allocation failures and autocast. PyTorch conformance is in
 * test_conformance.c. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "nn/kinds/kinds.h"
#include "gradcheck.h"
#include "core/mem.h"

static dl_layer_desc pos_desc(int64_t max_len, int64_t dim) {
  dl_layer_desc d = dl_layer_default(DL_POSEMBED);
  d.in = max_len;
  d.out = dim;
  return d;
}

static void make_input(dl_tensor *x, int64_t n, int64_t t, int64_t e, uint64_t seed) {
  assert_int_equal(dl_tensor_f32(x, 3, n, t, e, 0, "x"), DL_OK);
  gc_fill_uniform(x, seed, -2.0f, 2.0f);
}

/* Exact: one float addition per element; dx = dy bit for bit; dweight row t
 * = dy[0, t] + dy[1, t] + ... in sample order, rows T.. zero; a second
 * backward accumulates. Autocast changes nothing (float32 weight: torch's
 * type promotion keeps x + weight float32). */
static void adds_positions_and_sums_gradients_in_order(void **state) {
  (void)state;
  dl_layer_desc d = pos_desc(6, 3);
  dl_layer l;
  assert_int_equal(dl_layer_init(&l, &d, "1.", 0, 4), DL_OK);
  dl_tensor x = {0}, y = {0}, dy = {0}, dx = {0}, yamp = {0};
  make_input(&x, 3, 4, 3, 1);
  make_input(&dy, 3, 4, 3, 2);
  dl_ctx ctx = gc_ctx(), amp = gc_ctx();
  amp.autocast = DL_F16;
  assert_int_equal(l.ops->forward(&l, &ctx, &x, &y), DL_OK);
  assert_int_equal(l.ops->forward(&l, &amp, &x, &yamp), DL_OK);
  assert_memory_equal(y.data, yamp.data, dl_tensor_bytes(&y));
  const float *w = dl_f32(&l.params[0].value);
  for (int n = 0; n < 3; n++)
    for (int i = 0; i < 12; i++)
      assert_true(dl_f32(&y)[n * 12 + i] == dl_f32(&x)[n * 12 + i] + w[i]);
  for (int pass = 1; pass <= 2; pass++) {
    dl_tensor_free(&dx);
    assert_int_equal(l.ops->backward(&l, &ctx, &x, &y, &dy, &dx), DL_OK);
    assert_memory_equal(dx.data, dy.data, dl_tensor_bytes(&dy));
    const float *g = dl_f32(&l.params[0].grad), *gy = dl_f32(&dy);
    for (int i = 0; i < 18; i++) {
      float once = i < 12 ? (gy[i] + gy[12 + i]) + gy[24 + i] : 0.0f;
      assert_true(g[i] == (pass == 1 ? once : once + once));
    }
  }
  dl_tensor *all[] = {&x, &y, &dy, &dx, &yamp};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) dl_tensor_free(all[i]);
  dl_layer_destroy(&l);
}

/* nn.Embedding's init, N(0, 1), drawn from (seed, "init/1.weight"). */
static void weight_is_standard_normal_from_its_stream(void **state) {
  (void)state;
  dl_layer_desc d = pos_desc(64, 50);
  dl_layer l;
  assert_int_equal(dl_layer_init(&l, &d, "1.", 0, 8), DL_OK);
  assert_int_equal(l.nparams, 1);
  assert_string_equal(l.params[0].name, "1.weight");
  assert_int_equal(l.params[0].value.shape[0], 64);
  assert_int_equal(l.params[0].value.shape[1], 50);
  dl_tensor want = {0};
  assert_int_equal(dl_tensor_clone(&want, &l.params[0].value, "want"), DL_OK);
  dl_stream s = dl_param_init_stream(&l.params[0], 8);
  dl_stream_normal(&s, 0, 0.0f, 1.0f, dl_f32(&want), want.numel);
  assert_memory_equal(want.data, l.params[0].value.data, dl_tensor_bytes(&want));
  double mean = 0.0, sq = 0.0;
  for (int64_t i = 0; i < want.numel; i++) {
    mean += dl_f32(&want)[i] / (double)want.numel;
    sq += (double)dl_f32(&want)[i] * dl_f32(&want)[i] / (double)want.numel;
  }
  /* 3200 draws: the mean's standard error is 0.018, the variance's 0.025 */
  assert_true(fabs(mean) < 0.08 && fabs(sq - mean * mean - 1.0) < 0.12);
  dl_tensor_free(&want);
  dl_layer_destroy(&l);
}

/* Tolerance 1e-2 as gradcheck.h explains (here the layer is linear, so the
 * error is rounding only). */
static void gradients_match_finite_differences(void **state) {
  (void)state;
  dl_layer_desc d = pos_desc(5, 3);
  dl_tensor x = {0};
  make_input(&x, 2, 4, 3, 3);
  double err = gc_layer_max_error(&d, &x, true);
  print_message("largest error %.3g (%s)\n", err, gc_last_report);
  assert_true(err < 1e-2);
  dl_tensor_free(&x);
}

static void bad_inputs_and_descriptions_are_refused(void **state) {
  (void)state;
  dl_layer l;
  dl_layer_desc d = pos_desc(0, 3);
  assert_int_equal(dl_layer_init(&l, &d, "1.", 0, 1), DL_ERR_INVALID);
  assert_non_null(strstr(dl_last_error(), "layer 1 (posembed): max_len must be > 0, got 0"));
  d = pos_desc(4, 3);
  assert_int_equal(dl_layer_init(&l, &d, "1.", 0, 1), DL_OK);
  dl_tensor long_seq = {0}, wide = {0}, ok = {0}, y = {0}, dx = {0};
  make_input(&long_seq, 2, 5, 3, 1);
  make_input(&wide, 2, 4, 2, 1);
  make_input(&ok, 2, 4, 3, 1);
  dl_ctx ctx = gc_ctx();
  assert_int_equal(l.ops->forward(&l, &ctx, &long_seq, &y), DL_ERR_INVALID);
  assert_non_null(strstr(dl_last_error(), "layer 1 (posembed): sequence length 5 is longer "
                                          "than max_len 4"));
  assert_int_equal(l.ops->forward(&l, &ctx, &wide, &y), DL_ERR_INVALID);
  assert_non_null(strstr(dl_last_error(), "input is [2, 4, 2] float32; expected float32 "
                                          "[N, T, 3]"));
  assert_int_equal(l.ops->forward(&l, &ctx, &ok, &y), DL_OK);
  dl_tensor short_dy = {0};
  make_input(&short_dy, 2, 3, 3, 1);
  assert_int_equal(l.ops->backward(&l, &ctx, &ok, &y, &short_dy, &dx), DL_ERR_INVALID);
  assert_non_null(strstr(dl_last_error(), "output gradient is"));
  dl_tensor *all[] = {&long_seq, &wide, &ok, &y, &short_dy};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) dl_tensor_free(all[i]);
  dl_layer_destroy(&l);
}

static void allocation_failures_leak_nothing(void **state) {
  (void)state;
  dl_layer_desc d = pos_desc(4, 3);
  dl_tensor x = {0}, dy = {0};
  make_input(&x, 2, 4, 3, 1);
  make_input(&dy, 2, 4, 3, 2);
  for (int acc = 0; acc < 2; acc++) {
    int fails = gc_nomem_failures(&d, "1.", &x, &dy, DL_F32, acc);
    if (fails < 0) fail_msg("%s", gc_last_report);
    assert_true(fails >= 4); /* weight, its grad, y, the gradient scratch, dx */
  }
  dl_tensor_free(&x);
  dl_tensor_free(&dy);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(adds_positions_and_sums_gradients_in_order),
      cmocka_unit_test(weight_is_standard_normal_from_its_stream),
      cmocka_unit_test(gradients_match_finite_differences),
      cmocka_unit_test(bad_inputs_and_descriptions_are_refused),
      cmocka_unit_test(allocation_failures_leak_nothing),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
