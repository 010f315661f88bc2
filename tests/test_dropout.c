/* Dropout (engine/nn/kinds/dropout.c): the mask follows the exact stream spec
 * (layer, step, global sample id), so it does not depend on the row a
 * sample sits in, the batch around it or the thread count; inverted
 * scaling; eval and p = 0 are the identity; backward; AMP rounding; errors. */
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
#include "core/threads.h"

static void make_dropout(dl_layer *l, float p, uint64_t rng_id) {
  dl_layer_desc d = dl_layer_default(DL_DROPOUT);
  d.p = p;
  assert_int_equal(dl_layer_init(l, &d, "4.", rng_id, 1), DL_OK);
}

static dl_ctx drop_ctx(uint64_t seed, int64_t step, const int64_t *ids) {
  dl_ctx c = gc_ctx();
  c.seed = seed;
  c.step = step;
  c.sample_ids = ids;
  return c;
}

static void ones(dl_tensor *x, int64_t n, int64_t f) {
  assert_int_equal(dl_tensor_f32(x, 2, n, f, 0, 0, "x"), DL_OK);
  for (int64_t i = 0; i < x->numel; i++) dl_f32(x)[i] = 1.0f;
}

static void forward(dl_layer *l, const dl_ctx *ctx, const dl_tensor *x, dl_tensor *y) {
  assert_int_equal(l->ops->forward(l, ctx, x, y), DL_OK);
}

static bool rows_equal(const dl_tensor *a, int ra, const dl_tensor *b, int rb) {
  int64_t f = a->numel / a->shape[0];
  return memcmp(dl_f32(a) + ra * f, dl_f32(b) + rb * f, (size_t)f * sizeof(float)) == 0;
}

/* Sample 5 at row 0 of one batch and row 3 of another gets the same mask;
 * the other shared samples too; NULL ids mean row numbers. */
static void mask_follows_the_sample_not_the_row(void **state) {
  (void)state;
  dl_layer l;
  make_dropout(&l, 0.5f, 2);
  int64_t ids_a[4] = {5, 1, 2, 3}, ids_b[4] = {0, 1, 2, 5}, ids_c[4] = {0, 1, 2, 3};
  dl_tensor x = {0}, ya = {0}, yb = {0}, yc = {0}, yn = {0};
  ones(&x, 4, 64);
  dl_ctx ca = drop_ctx(7, 3, ids_a), cb = drop_ctx(7, 3, ids_b), cc = drop_ctx(7, 3, ids_c),
         cn = drop_ctx(7, 3, NULL);
  forward(&l, &ca, &x, &ya);
  forward(&l, &cb, &x, &yb);
  forward(&l, &cc, &x, &yc);
  forward(&l, &cn, &x, &yn);
  assert_true(rows_equal(&ya, 0, &yb, 3));
  assert_true(rows_equal(&ya, 1, &yb, 1));
  assert_true(rows_equal(&ya, 2, &yb, 2));
  assert_false(rows_equal(&ya, 0, &yb, 0)); /* samples 5 and 0: 2^-64 to collide */
  assert_memory_equal(yc.data, yn.data, dl_tensor_bytes(&x));
  dl_tensor_free(&x);
  dl_tensor_free(&ya);
  dl_tensor_free(&yb);
  dl_tensor_free(&yc);
  dl_tensor_free(&yn);
  dl_layer_destroy(&l);
}

/* A different step, layer (rng_id) or seed gives a different mask. */
static void mask_changes_with_step_layer_and_seed(void **state) {
  (void)state;
  dl_layer l0, l1;
  make_dropout(&l0, 0.5f, 0);
  make_dropout(&l1, 0.5f, 1);
  dl_tensor x = {0}, y[4] = {{0}, {0}, {0}, {0}};
  ones(&x, 2, 64);
  dl_ctx base = drop_ctx(7, 3, NULL), next_step = drop_ctx(7, 4, NULL),
         other_seed = drop_ctx(8, 3, NULL);
  forward(&l0, &base, &x, &y[0]);
  forward(&l0, &next_step, &x, &y[1]);
  forward(&l1, &base, &x, &y[2]);
  forward(&l0, &other_seed, &x, &y[3]);
  for (int i = 1; i < 4; i++) assert_memory_not_equal(y[0].data, y[i].data, dl_tensor_bytes(&x));
  for (int i = 0; i < 4; i++) dl_tensor_free(&y[i]);
  dl_tensor_free(&x);
  dl_layer_destroy(&l0);
  dl_layer_destroy(&l1);
}

/* The spec written out independently with dl_stream_uniform: element j of
 * row r (F = C*H*W features) is kept iff uniform word j of the stream
 * (seed, "dropout", {rng_id, step, sample}) is < 1 - p, and then
 * y = x * (1 / (1 - p)) exactly (one float multiply); otherwise 0. */
static void mask_matches_the_stream_spec_bit_for_bit(void **state) {
  (void)state;
  const float p = 0.3f;
  dl_layer l;
  make_dropout(&l, p, 9);
  int64_t ids[3] = {17, 4, 1000000007};
  dl_tensor x = {0}, y = {0};
  assert_int_equal(dl_tensor_f32(&x, 4, 3, 2, 3, 5, "x"), DL_OK);
  gc_fill_uniform(&x, 3, -2.0f, 3.0f);
  dl_ctx ctx = drop_ctx(0x123456789abcULL, 11, ids);
  forward(&l, &ctx, &x, &y);
  const int64_t f = 30;
  const float scale = 1.0f / (1.0f - p); /* in float, as 1/(1-p) is spec'd */
  int64_t kept = 0;
  for (int r = 0; r < 3; r++) {
    uint64_t idx[3] = {9, 11, (uint64_t)ids[r]};
    dl_stream s = dl_stream_make(0x123456789abcULL, "dropout", idx, 3);
    float u[30];
    dl_stream_uniform(&s, 0, u, f);
    for (int j = 0; j < f; j++) {
      float xv = dl_f32(&x)[r * f + j], yv = dl_f32(&y)[r * f + j];
      float want = xv * (u[j] < 1.0f - p ? scale : 0.0f); /* -0 where x < 0 */
      assert_memory_equal(&yv, &want, sizeof yv);
      kept += u[j] < 1.0f - p;
    }
  }
  assert_true(kept > 0 && kept < 90);
  dl_tensor_free(&x);
  dl_tensor_free(&y);
  dl_layer_destroy(&l);
}

/* Over 1e5 elements with p = 0.3 the kept fraction is 0.7 within 0.0073:
 * five binomial standard deviations, sqrt(0.21 / 1e5) = 0.00145. Kept
 * values are exactly 1 / (1 - p) in float. */
static void keep_fraction_is_one_minus_p(void **state) {
  (void)state;
  dl_layer l;
  make_dropout(&l, 0.3f, 1);
  dl_tensor x = {0}, y = {0};
  ones(&x, 100, 1000);
  dl_ctx ctx = drop_ctx(42, 0, NULL);
  ctx.grad_enabled = false;
  forward(&l, &ctx, &x, &y);
  assert_true(dl_tensor_empty(&l.saved[0]));
  int64_t kept = 0;
  for (int64_t i = 0; i < y.numel; i++) {
    float v = dl_f32(&y)[i];
    assert_true(v == 0.0f || v == 1.0f / (1.0f - 0.3f));
    kept += v != 0.0f;
  }
  double frac = (double)kept / (double)y.numel;
  assert_true(fabs(frac - 0.7) < 0.0073);
  dl_tensor_free(&x);
  dl_tensor_free(&y);
  dl_layer_destroy(&l);
}

/* Eval mode and p = 0 are the identity, forward and backward, and keep
 * nothing for backward. */
static void eval_and_p_zero_are_identity(void **state) {
  (void)state;
  dl_layer le, lz;
  make_dropout(&le, 0.5f, 0);
  make_dropout(&lz, 0.0f, 0);
  le.training = false;
  dl_tensor x = {0}, dy = {0};
  assert_int_equal(dl_tensor_f32(&x, 3, 2, 3, 4, 0, "x"), DL_OK);
  gc_fill_uniform(&x, 5, -2.0f, 3.0f);
  assert_int_equal(dl_tensor_clone(&dy, &x, "dy"), DL_OK);
  dl_ctx ctx = drop_ctx(1, 0, NULL);
  dl_layer *ls[2] = {&le, &lz};
  for (int i = 0; i < 2; i++) {
    dl_tensor y = {0}, dx = {0};
    forward(ls[i], &ctx, &x, &y);
    assert_memory_equal(x.data, y.data, dl_tensor_bytes(&x));
    assert_true(y.data != x.data);
    assert_true(dl_tensor_empty(&ls[i]->saved[0]));
    assert_int_equal(ls[i]->ops->backward(ls[i], &ctx, &x, &y, &dy, &dx), DL_OK);
    assert_memory_equal(dy.data, dx.data, dl_tensor_bytes(&x));
    dl_tensor_free(&y);
    dl_tensor_free(&dx);
  }
  dl_tensor_free(&x);
  dl_tensor_free(&dy);
  dl_layer_destroy(&le);
  dl_layer_destroy(&lz);
}

/* Backward multiplies by the same mask: finite differences in training
 * (gradcheck reuses its ctx, so the mask is fixed) and eval. The map is
 * linear, so the expected error is only float rounding; tolerance 1e-2
 * as in tests/gradcheck.h. Plus an exact check of dx = dy * y / x. */
static void backward_uses_the_forward_mask(void **state) {
  (void)state;
  dl_layer_desc d = dl_layer_default(DL_DROPOUT);
  d.p = 0.4f;
  dl_tensor x = {0};
  assert_int_equal(dl_tensor_f32(&x, 2, 4, 6, 0, 0, "x"), DL_OK);
  gc_fill_uniform(&x, 6, -2.0f, 3.0f);
  for (int training = 1; training >= 0; training--) {
    double err = gc_layer_max_error(&d, &x, training);
    if (!(err < 1e-2)) print_error("training %d: %g (%s)\n", training, err, gc_last_report);
    assert_true(err < 1e-2);
  }
  dl_layer l;
  make_dropout(&l, 0.4f, 3);
  dl_tensor y = {0}, ones_dy = {0}, dx = {0};
  dl_ctx ctx = drop_ctx(1, 2, NULL);
  forward(&l, &ctx, &x, &y);
  ones(&ones_dy, 4, 6);
  assert_int_equal(l.ops->backward(&l, &ctx, &x, &y, &ones_dy, &dx), DL_OK);
  for (int64_t i = 0; i < x.numel; i++) {
    float want = dl_f32(&y)[i] == 0.0f ? 0.0f : 1.0f / (1.0f - 0.4f);
    assert_true(dl_f32(&dx)[i] == want);
  }
  assert_int_equal(l.ops->backward(&l, &ctx, &x, &y, &ones_dy, NULL), DL_OK);
  dl_tensor_free(&x);
  dl_tensor_free(&y);
  dl_tensor_free(&ones_dy);
  dl_tensor_free(&dx);
  dl_layer_destroy(&l);
}

/* [64, 256] splits into several row chunks with 2 threads: same bits. */
static void bitwise_same_with_one_and_two_threads(void **state) {
  (void)state;
  dl_layer l;
  make_dropout(&l, 0.5f, 1);
  dl_tensor x = {0}, y[2] = {{0}, {0}};
  assert_int_equal(dl_tensor_f32(&x, 2, 64, 256, 0, 0, "x"), DL_OK);
  gc_fill_uniform(&x, 8, -1.0f, 1.0f);
  dl_ctx ctx = drop_ctx(3, 1, NULL);
  for (int t = 0; t < 2; t++) {
    assert_int_equal(dl_set_num_threads(t + 1), DL_OK);
    forward(&l, &ctx, &x, &y[t]);
  }
  assert_int_equal(dl_set_num_threads(1), DL_OK);
  assert_memory_equal(y[0].data, y[1].data, dl_tensor_bytes(&x));
  dl_tensor_free(&x);
  dl_tensor_free(&y[0]);
  dl_tensor_free(&y[1]);
  dl_layer_destroy(&l);
  dl_threads_shutdown();
}

/* Under autocast the output is rounded to the half dtype (dropout runs in
 * the dtype of its input there); with p = 0.1 the scale 1/0.9 makes
 * unrounded values, so rounding must have happened somewhere. */
static void autocast_rounds_outputs_to_half(void **state) {
  (void)state;
  dl_layer l;
  make_dropout(&l, 0.1f, 1);
  dl_tensor x = {0}, y32 = {0}, y16 = {0}, ybf = {0};
  assert_int_equal(dl_tensor_f32(&x, 2, 8, 16, 0, 0, "x"), DL_OK);
  gc_fill_uniform(&x, 9, -2.0f, 3.0f);
  dl_ctx ctx = drop_ctx(3, 1, NULL), f16 = ctx, bf16 = ctx;
  f16.autocast = DL_F16;
  bf16.autocast = DL_BF16;
  forward(&l, &ctx, &x, &y32);
  forward(&l, &f16, &x, &y16);
  forward(&l, &bf16, &x, &ybf);
  int changed = 0;
  for (int64_t i = 0; i < x.numel; i++) {
    float a = dl_f32(&y32)[i], h = dl_f32(&y16)[i], b = dl_f32(&ybf)[i];
    assert_true(h == dl_round_f16(a));
    assert_true(b == dl_round_bf16(a));
    changed += h != a;
  }
  assert_true(changed > 0);
  dl_tensor_free(&x);
  dl_tensor_free(&y32);
  dl_tensor_free(&y16);
  dl_tensor_free(&ybf);
  dl_layer_destroy(&l);
}

static void bad_input_and_misuse_are_refused(void **state) {
  (void)state;
  dl_layer l;
  make_dropout(&l, 0.5f, 1);
  dl_ctx ctx = drop_ctx(1, 0, NULL);
  dl_tensor x = {0}, y = {0}, ids = {0}, dx = {0}, dy_bad = {0};
  ones(&x, 2, 3);
  ones(&dy_bad, 3, 2);
  int64_t n[2] = {2, 3};
  assert_int_equal(dl_tensor_alloc(&ids, DL_I32, 2, n, "ids"), DL_OK);
  assert_int_equal(l.ops->forward(&l, &ctx, &ids, &y), DL_ERR_INVALID);
  assert_non_null(strstr(dl_last_error(), "layer 4 (dropout): input is [2, 3] int32"));
  /* backward after a no-grad training forward: no mask to use */
  ctx.grad_enabled = false;
  forward(&l, &ctx, &x, &y);
  ctx.grad_enabled = true;
  assert_int_equal(l.ops->backward(&l, &ctx, &x, &y, &x, &dx), DL_ERR_INVALID);
  assert_non_null(strstr(dl_last_error(), "backward without a grad-mode forward"));
  assert_int_equal(l.ops->backward(&l, &ctx, &x, &y, &dy_bad, &dx), DL_ERR_INVALID);
  assert_non_null(strstr(dl_last_error(), "output gradient is"));
  dl_tensor_free(&y);
  l.desc.p = 1.5f; /* layer.c refuses it at init; the kernel checks again */
  assert_int_equal(l.ops->forward(&l, &ctx, &x, &y), DL_ERR_INVALID);
  assert_non_null(strstr(dl_last_error(), "between 0 and 1, but got 1.5"));
  l.desc.p = 1.0f; /* PyTorch allows p = 1: everything dropped */
  forward(&l, &ctx, &x, &y);
  for (int i = 0; i < 6; i++) assert_true(dl_f32(&y)[i] == 0.0f);
  dl_tensor_free(&y);
  dl_tensor_free(&x);
  dl_tensor_free(&ids);
  dl_tensor_free(&dy_bad);
  dl_layer_destroy(&l);
}

static void allocation_failures_are_reported(void **state) {
  (void)state;
  dl_layer l;
  make_dropout(&l, 0.5f, 1);
  dl_ctx ctx = drop_ctx(1, 0, NULL);
  dl_tensor x = {0}, y = {0}, dx = {0};
  ones(&x, 2, 3);
  int64_t before = dl_mem_current();
  for (int n = 1; n <= 3; n++) { /* output, mask, keep scratch */
    dl_mem_fail_after(n);
    assert_int_equal(l.ops->forward(&l, &ctx, &x, &y), DL_ERR_NOMEM);
    assert_non_null(strstr(dl_last_error(), "layer 4 (dropout)"));
    assert_int_equal(dl_mem_current(), before);
  }
  dl_mem_fail_after(0);
  forward(&l, &ctx, &x, &y);
  dl_mem_fail_after(1);
  assert_int_equal(l.ops->backward(&l, &ctx, &x, &y, &x, &dx), DL_ERR_NOMEM);
  dl_mem_fail_after(0);
  dl_tensor_free(&x);
  dl_tensor_free(&y);
  dl_layer_destroy(&l);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(mask_follows_the_sample_not_the_row),
      cmocka_unit_test(mask_changes_with_step_layer_and_seed),
      cmocka_unit_test(mask_matches_the_stream_spec_bit_for_bit),
      cmocka_unit_test(keep_fraction_is_one_minus_p),
      cmocka_unit_test(eval_and_p_zero_are_identity),
      cmocka_unit_test(backward_uses_the_forward_mask),
      cmocka_unit_test(bitwise_same_with_one_and_two_threads),
      cmocka_unit_test(autocast_rounds_outputs_to_half),
      cmocka_unit_test(bad_input_and_misuse_are_refused),
      cmocka_unit_test(allocation_failures_are_reported),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
