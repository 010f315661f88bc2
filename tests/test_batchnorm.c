/* BatchNorm1d / BatchNorm2d (engine/nn/kinds/batchnorm.c): gradients against
 * finite differences, outputs and running statistics against references
 * computed here in double from PyTorch's documented formulas, mode
 * switches, error paths and thread-count independence. */
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

static dl_layer_desc bn_desc(dl_layer_kind kind, int64_t c, bool affine, bool track) {
  dl_layer_desc d = dl_layer_default(kind);
  d.out = c;
  d.affine = affine;
  d.track_running_stats = track;
  return d;
}

static void make_bn(dl_layer *l, const dl_layer_desc *d) {
  assert_int_equal(dl_layer_init(l, d, "1.", 0, 42), DL_OK);
}

static void make_input(dl_tensor *x, int ndim, int64_t n, int64_t c, int64_t s2, int64_t s3,
                       uint64_t seed) {
  assert_int_equal(dl_tensor_f32(x, ndim, n, c, s2, s3, "x"), DL_OK);
  gc_fill_uniform(x, seed, -2.0f, 3.0f);
}

static dl_ctx ctx_grad(bool grad) {
  dl_ctx c = gc_ctx();
  c.grad_enabled = grad;
  return c;
}

/* Mean and biased variance of channel c of x viewed as [n, C, s], in double. */
static void channel_stats(const dl_tensor *x, int64_t c, double *mean, double *var) {
  int64_t n = x->shape[0], ch = x->shape[1], s = x->numel / (n * ch);
  double sum = 0.0, sq = 0.0;
  for (int64_t i = 0; i < n; i++)
    for (int64_t k = 0; k < s; k++) sum += dl_f32(x)[(i * ch + c) * s + k];
  *mean = sum / (double)(n * s);
  for (int64_t i = 0; i < n; i++)
    for (int64_t k = 0; k < s; k++) {
      double v = dl_f32(x)[(i * ch + c) * s + k] - *mean;
      sq += v * v;
    }
  *var = sq / (double)(n * s);
}

/* Gradients: finite differences through the batch statistics (training) and
 * through the affine map only (eval), for 1d [N, C], [N, C, L] and 2d.
 * Tolerance 1e-2: see tests/gradcheck.h (expected error ~1e-4..1e-3, a wrong
 * formula gives O(1)). */
static void gradcheck_all_shapes_and_modes(void **state) {
  (void)state;
  struct {
    dl_layer_kind kind;
    int ndim;
    int64_t shape[4];
    bool affine, track;
  } cases[] = {
      {DL_BATCHNORM1D, 2, {5, 3, 0, 0}, true, true}, {DL_BATCHNORM1D, 3, {3, 2, 4, 0}, false, true},
      {DL_BATCHNORM1D, 2, {2, 2, 0, 0}, true, true}, /* smallest batch */
      {DL_BATCHNORM2D, 4, {2, 3, 2, 2}, true, true}, {DL_BATCHNORM2D, 4, {2, 2, 3, 1}, true, false},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    dl_layer_desc d = bn_desc(cases[i].kind, cases[i].shape[1], cases[i].affine, cases[i].track);
    dl_tensor x = {0};
    make_input(&x, cases[i].ndim, cases[i].shape[0], cases[i].shape[1], cases[i].shape[2],
               cases[i].shape[3], 10 + i);
    for (int training = 1; training >= 0; training--) {
      double err = gc_layer_max_error(&d, &x, training);
      if (!(err < 1e-2))
        print_error("case %zu training %d: %g (%s)\n", i, training, err, gc_last_report);
      assert_true(err < 1e-2);
    }
    dl_tensor_free(&x);
  }
}

/* Running statistics after three training passes against the update
 * running = (1-m)*running + m*batch with the UNBIASED batch variance, in
 * double. Tolerance: relative 1e-6. The engine rounds mean, variance sum
 * and each running value to float (about 3 roundings of 6e-8 per pass, 3
 * passes); using the biased variance would be off by n/(n-1) = 4/3. */
static void running_stats_after_three_passes(void **state) {
  (void)state;
  for (int kind = 0; kind < 2; kind++) {
    dl_layer_desc d = bn_desc(kind ? DL_BATCHNORM2D : DL_BATCHNORM1D, 3, true, true);
    d.momentum = kind ? 0.3f : 0.1f;
    dl_layer l;
    make_bn(&l, &d);
    assert_int_equal(l.nbuffers, 3);
    assert_string_equal(l.buffers[0].name, "1.running_mean");
    assert_string_equal(l.buffers[1].name, "1.running_var");
    assert_string_equal(l.buffers[2].name, "1.num_batches_tracked");
    assert_int_equal(l.buffers[2].value.dtype, DL_I64);
    assert_int_equal(l.buffers[2].value.ndim, 0);
    double rm[3] = {0, 0, 0}, rv[3] = {1, 1, 1}, m = d.momentum;
    dl_ctx ctx = ctx_grad(false);
    for (int pass = 0; pass < 3; pass++) {
      dl_tensor x = {0}, y = {0};
      if (kind) make_input(&x, 4, 2, 3, 1, 2, 100 + pass); /* count 4 per channel */
      else make_input(&x, 2, 4, 3, 0, 0, 100 + pass);
      for (int c = 0; c < 3; c++) {
        double mean, var;
        channel_stats(&x, c, &mean, &var);
        rm[c] = (1 - m) * rm[c] + m * mean;
        rv[c] = (1 - m) * rv[c] + m * var * 4.0 / 3.0;
      }
      assert_int_equal(l.ops->forward(&l, &ctx, &x, &y), DL_OK);
      assert_true(dl_tensor_empty(&l.saved[0])); /* no grad: nothing kept */
      dl_tensor_free(&x);
      dl_tensor_free(&y);
    }
    for (int c = 0; c < 3; c++) {
      assert_true(fabs(dl_f32(&l.buffers[0].value)[c] - rm[c]) <= 1e-6 * fabs(rm[c]) + 1e-7);
      assert_true(fabs(dl_f32(&l.buffers[1].value)[c] - rv[c]) <= 1e-6 * rv[c]);
    }
    assert_int_equal(((int64_t *)l.buffers[2].value.data)[0], 3);
    dl_layer_destroy(&l);
  }
}

/* Eval uses the running statistics and changes no buffer. Reference in
 * double: (x - rm) / sqrt(rv + eps) * w + b. Tolerance close(rtol 1e-6,
 * atol 1e-6): a handful of float roundings on O(1) values. */
static void eval_uses_running_stats(void **state) {
  (void)state;
  dl_layer_desc d = bn_desc(DL_BATCHNORM1D, 3, true, true);
  dl_layer l;
  make_bn(&l, &d);
  float w[3] = {0.5f, 2.0f, -1.0f}, b[3] = {0.1f, -0.2f, 0.3f};
  memcpy(l.params[0].value.data, w, sizeof w);
  memcpy(l.params[1].value.data, b, sizeof b);
  dl_ctx ctx = ctx_grad(true);
  dl_tensor x = {0}, y = {0};
  make_input(&x, 3, 4, 3, 2, 0, 7);
  assert_int_equal(l.ops->forward(&l, &ctx, &x, &y), DL_OK); /* moves running stats */
  dl_tensor_free(&y);
  dl_layer_release(&l);
  float rm[3], rv[3];
  memcpy(rm, l.buffers[0].value.data, sizeof rm);
  memcpy(rv, l.buffers[1].value.data, sizeof rv);
  assert_true(rm[0] != 0.0f && rv[0] != 1.0f);
  l.training = false;
  assert_int_equal(l.ops->forward(&l, &ctx, &x, &y), DL_OK);
  assert_memory_equal(rm, l.buffers[0].value.data, sizeof rm);
  assert_memory_equal(rv, l.buffers[1].value.data, sizeof rv);
  assert_int_equal(((int64_t *)l.buffers[2].value.data)[0], 1);
  for (int64_t i = 0; i < x.numel; i++) {
    int c = (int)(i / 2 % 3);
    double ref = ((double)dl_f32(&x)[i] - rm[c]) / sqrt((double)rv[c] + (double)d.eps) * w[c] +
                 b[c];
    assert_true(fabs(dl_f32(&y)[i] - ref) <= 1e-6 + 1e-6 * fabs(ref));
  }
  /* eval backward: the statistics are constants, dx = dy * w / sqrt(rv + eps) */
  dl_tensor dy = {0}, dx = {0};
  assert_int_equal(dl_tensor_f32(&dy, 3, 4, 3, 2, 0, "dy"), DL_OK);
  for (int64_t i = 0; i < dy.numel; i++) dl_f32(&dy)[i] = 1.0f;
  assert_int_equal(l.ops->backward(&l, &ctx, &x, &y, &dy, &dx), DL_OK);
  for (int64_t i = 0; i < dx.numel; i++) {
    int c = (int)(i / 2 % 3);
    double ref = w[c] / sqrt((double)rv[c] + (double)d.eps);
    assert_true(fabs(dl_f32(&dx)[i] - ref) <= 1e-6 * fabs(ref));
  }
  assert_true(dl_f32(&l.params[1].grad)[0] == 8.0f); /* sum of dy over 8 values */
  dl_tensor_free(&x);
  dl_tensor_free(&y);
  dl_tensor_free(&dy);
  dl_tensor_free(&dx);
  dl_layer_destroy(&l);
}

/* Without running statistics, eval normalises with the batch statistics:
 * the same bits as training mode, per-channel mean ~0 and variance ~1. */
static void no_tracking_uses_batch_stats_in_eval(void **state) {
  (void)state;
  dl_layer_desc d = bn_desc(DL_BATCHNORM2D, 2, true, false);
  dl_layer l;
  make_bn(&l, &d);
  assert_int_equal(l.nbuffers, 0);
  assert_int_equal(l.nparams, 2);
  dl_ctx ctx = ctx_grad(false);
  dl_tensor x = {0}, ytrain = {0}, yeval = {0};
  make_input(&x, 4, 3, 2, 2, 3, 5);
  assert_int_equal(l.ops->forward(&l, &ctx, &x, &ytrain), DL_OK);
  l.training = false;
  assert_int_equal(l.ops->forward(&l, &ctx, &x, &yeval), DL_OK);
  assert_memory_equal(ytrain.data, yeval.data, dl_tensor_bytes(&x));
  for (int c = 0; c < 2; c++) {
    double mean, var;
    channel_stats(&yeval, c, &mean, &var);
    /* float outputs of O(1): mean within 1e-6, var = v/(v+eps) within 1e-5 */
    assert_true(fabs(mean) < 1e-6);
    assert_true(fabs(var - 1.0) < 1e-5);
  }
  dl_tensor_free(&x);
  dl_tensor_free(&ytrain);
  dl_tensor_free(&yeval);
  dl_layer_destroy(&l);
}

/* affine=False: no parameters; backward still gives dx. */
static void affine_false_has_no_params(void **state) {
  (void)state;
  dl_layer_desc d = bn_desc(DL_BATCHNORM1D, 4, false, true);
  dl_layer l;
  make_bn(&l, &d);
  assert_int_equal(l.nparams, 0);
  assert_int_equal(l.nbuffers, 3);
  dl_ctx ctx = ctx_grad(true);
  dl_tensor x = {0}, y = {0}, dy = {0}, dx = {0};
  make_input(&x, 2, 3, 4, 0, 0, 9);
  assert_int_equal(l.ops->forward(&l, &ctx, &x, &y), DL_OK);
  assert_int_equal(dl_tensor_clone(&dy, &y, "dy"), DL_OK);
  assert_int_equal(l.ops->backward(&l, &ctx, &x, &y, &dy, &dx), DL_OK);
  /* dy = y is the gradient of sum(y^2)/2 = count/2 * var/(var+eps): about 0 */
  for (int64_t i = 0; i < dx.numel; i++) assert_true(fabsf(dl_f32(&dx)[i]) < 1e-4f);
  assert_int_equal(l.ops->backward(&l, &ctx, &x, &y, &dy, NULL), DL_OK);
  dl_tensor_free(&x);
  dl_tensor_free(&y);
  dl_tensor_free(&dy);
  dl_tensor_free(&dx);
  dl_layer_destroy(&l);
}

/* Gradients accumulate across backward calls; frozen params get none. */
static void param_grads_accumulate_and_respect_requires_grad(void **state) {
  (void)state;
  dl_layer_desc d = bn_desc(DL_BATCHNORM1D, 2, true, true);
  dl_layer l;
  make_bn(&l, &d);
  l.params[0].requires_grad = false;
  dl_ctx ctx = ctx_grad(true);
  dl_tensor x = {0}, y = {0}, dy = {0};
  make_input(&x, 2, 3, 2, 0, 0, 3);
  assert_int_equal(l.ops->forward(&l, &ctx, &x, &y), DL_OK);
  assert_int_equal(dl_tensor_f32(&dy, 2, 3, 2, 0, 0, "dy"), DL_OK);
  for (int64_t i = 0; i < dy.numel; i++) dl_f32(&dy)[i] = 0.5f;
  assert_int_equal(l.ops->backward(&l, &ctx, &x, &y, &dy, NULL), DL_OK);
  assert_int_equal(l.ops->backward(&l, &ctx, &x, &y, &dy, NULL), DL_OK);
  assert_false(l.params[0].has_grad);
  assert_true(l.params[1].has_grad);
  assert_true(dl_f32(&l.params[1].grad)[1] == 3.0f); /* 2 calls x 3 rows x 0.5 */
  dl_tensor_free(&x);
  dl_tensor_free(&y);
  dl_tensor_free(&dy);
  dl_layer_destroy(&l);
}

/* One value per channel in training is refused as PyTorch does; eval with
 * running statistics accepts it. */
static void one_value_per_channel_in_training_fails(void **state) {
  (void)state;
  dl_layer_desc d = bn_desc(DL_BATCHNORM1D, 3, true, true);
  dl_layer l;
  make_bn(&l, &d);
  dl_ctx ctx = ctx_grad(true);
  dl_tensor x = {0}, y = {0};
  make_input(&x, 3, 1, 3, 1, 0, 1);
  assert_int_equal(l.ops->forward(&l, &ctx, &x, &y), DL_ERR_INVALID);
  assert_non_null(strstr(dl_last_error(), "Expected more than 1 value per channel when training"));
  assert_non_null(strstr(dl_last_error(), "layer 1 (batchnorm1d)"));
  assert_true(dl_tensor_empty(&y));
  assert_int_equal(((int64_t *)l.buffers[2].value.data)[0], 0);
  l.training = false;
  assert_int_equal(l.ops->forward(&l, &ctx, &x, &y), DL_OK);
  dl_tensor_free(&x);
  dl_tensor_free(&y);
  dl_layer_destroy(&l);
}

static void bad_shapes_and_misuse_are_refused(void **state) {
  (void)state;
  dl_layer_desc d1 = bn_desc(DL_BATCHNORM1D, 3, true, true);
  dl_layer_desc d2 = bn_desc(DL_BATCHNORM2D, 3, true, true);
  dl_layer l1, l2;
  make_bn(&l1, &d1);
  make_bn(&l2, &d2);
  dl_ctx ctx = ctx_grad(true);
  dl_tensor x4 = {0}, x2 = {0}, wrong_c = {0}, y = {0}, dx = {0};
  make_input(&x4, 4, 2, 3, 2, 2, 1);
  make_input(&x2, 2, 4, 3, 0, 0, 2);
  make_input(&wrong_c, 2, 4, 5, 0, 0, 3);
  assert_int_equal(l1.ops->forward(&l1, &ctx, &x4, &y), DL_ERR_INVALID);
  assert_non_null(strstr(dl_last_error(), "input is [2, 3, 2, 2] float32"));
  assert_non_null(strstr(dl_last_error(), "[N, C] or [N, C, L]"));
  assert_int_equal(l2.ops->forward(&l2, &ctx, &x2, &y), DL_ERR_INVALID);
  assert_non_null(strstr(dl_last_error(), "[N, C, H, W]"));
  assert_int_equal(l1.ops->forward(&l1, &ctx, &wrong_c, &y), DL_ERR_INVALID);
  assert_non_null(strstr(dl_last_error(), "C = 3"));
  /* backward before any grad-mode forward */
  assert_int_equal(l1.ops->backward(&l1, &ctx, &x2, &x2, &x2, &dx), DL_ERR_INVALID);
  assert_non_null(strstr(dl_last_error(), "backward without a grad-mode forward"));
  /* gradient of another shape */
  assert_int_equal(l1.ops->forward(&l1, &ctx, &x2, &y), DL_OK);
  dl_tensor dy3 = {0};
  make_input(&dy3, 3, 4, 3, 1, 0, 4);
  assert_int_equal(l1.ops->backward(&l1, &ctx, &x2, &y, &dy3, &dx), DL_ERR_INVALID);
  assert_non_null(strstr(dl_last_error(), "output gradient is"));
  /* num_features < 1 at init (layer.c validates first; the kind checks too) */
  dl_layer bad;
  memset(&bad, 0, sizeof bad);
  bad.desc = bn_desc(DL_BATCHNORM1D, 0, true, true);
  assert_int_equal(dl_batchnorm_init(&bad, 1), DL_ERR_INVALID);
  assert_non_null(strstr(dl_last_error(), "num_features is 0"));
  dl_tensor_free(&x4);
  dl_tensor_free(&x2);
  dl_tensor_free(&wrong_c);
  dl_tensor_free(&dy3);
  dl_tensor_free(&y);
  dl_layer_destroy(&l1);
  dl_layer_destroy(&l2);
}

/* Every allocation failure is reported as DL_ERR_NOMEM naming the layer and
 * leaks nothing (valgrind checks the latter). */
static void allocation_failures_are_reported(void **state) {
  (void)state;
  dl_layer_desc d = bn_desc(DL_BATCHNORM1D, 3, true, true);
  dl_layer l;
  make_bn(&l, &d);
  dl_ctx ctx = ctx_grad(true);
  dl_tensor x = {0}, y = {0}, dx = {0};
  make_input(&x, 2, 4, 3, 0, 0, 2);
  int64_t before = dl_mem_current();
  for (int n = 1; n <= 3; n++) {
    dl_mem_fail_after(n);
    assert_int_equal(l.ops->forward(&l, &ctx, &x, &y), DL_ERR_NOMEM);
    assert_non_null(strstr(dl_last_error(), "layer 1 (batchnorm1d)"));
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
  dl_tensor_free(&x);
  dl_tensor_free(&y);
  dl_layer_destroy(&l);
  for (int n = 1; n <= 7; n++) { /* init: 2 params, 2 grads, 3 buffers */
    dl_mem_fail_after(n);
    dl_layer bad;
    assert_int_equal(dl_layer_init(&bad, &d, "1.", 0, 1), DL_ERR_NOMEM);
  }
  dl_mem_fail_after(0);
}

/* Forward (with running update) and backward bits do not depend on the
 * thread count: [4, 64, 16, 16] splits into several channel chunks. */
static void bitwise_same_with_one_and_two_threads(void **state) {
  (void)state;
  dl_layer_desc d = bn_desc(DL_BATCHNORM2D, 64, true, true);
  dl_tensor x = {0}, dy = {0};
  make_input(&x, 4, 4, 64, 16, 16, 21);
  make_input(&dy, 4, 4, 64, 16, 16, 22);
  dl_ctx ctx = ctx_grad(true);
  if (!gc_same_bits_1_and_2_threads(&d, "1.", 42, &ctx, &x, &dy)) fail_msg("%s", gc_last_report);
  dl_tensor_free(&x);
  dl_tensor_free(&dy);
}

/* Under autocast BatchNorm runs in float32: outputs are not rounded. */
static void autocast_keeps_float32_outputs(void **state) {
  (void)state;
  dl_layer_desc d = bn_desc(DL_BATCHNORM1D, 3, true, true);
  dl_layer l;
  make_bn(&l, &d);
  dl_ctx ctx = ctx_grad(false), amp = ctx;
  amp.autocast = DL_F16;
  dl_tensor x = {0}, y = {0}, yamp = {0};
  make_input(&x, 2, 8, 3, 0, 0, 4);
  l.training = false; /* no running update between the two calls */
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
      cmocka_unit_test(gradcheck_all_shapes_and_modes),
      cmocka_unit_test(running_stats_after_three_passes),
      cmocka_unit_test(eval_uses_running_stats),
      cmocka_unit_test(no_tracking_uses_batch_stats_in_eval),
      cmocka_unit_test(affine_false_has_no_params),
      cmocka_unit_test(param_grads_accumulate_and_respect_requires_grad),
      cmocka_unit_test(one_value_per_channel_in_training_fails),
      cmocka_unit_test(bad_shapes_and_misuse_are_refused),
      cmocka_unit_test(allocation_failures_are_reported),
      cmocka_unit_test(bitwise_same_with_one_and_two_threads),
      cmocka_unit_test(autocast_keeps_float32_outputs),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
