/* The model and the sequence under it (engine/nn/model.c, engine/nn/seq.c):
 * state-dict names and order, train/eval propagation, zero_grad and
 * accumulation, requires_grad, activation memory in grad vs no-grad mode,
 * hooks, whole-model gradients against finite differences, errors and
 * allocation failures. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "gradcheck.h"
#include "core/mem.h"
#include "nn/kinds/kinds.h"
#include "nn/model.h"

static dl_layer_desc linear(int64_t in, int64_t out) {
  dl_layer_desc d = dl_layer_default(DL_LINEAR);
  d.in = in;
  d.out = out;
  return d;
}

static dl_layer_desc batchnorm(int64_t features) {
  dl_layer_desc d = dl_layer_default(DL_BATCHNORM1D);
  d.out = features;
  return d;
}

static dl_layer_desc residual(const dl_layer_desc *body, int n) {
  dl_layer_desc d = dl_layer_default(DL_RESIDUAL);
  d.body = body;
  d.nbody = n;
  return d;
}

/* 0 linear, 1 batchnorm, 2 relu, 3 residual(linear, batchnorm), 4 linear */
static const dl_layer_desc *net_desc(int *n) {
  static dl_layer_desc body[2], layers[5];
  body[0] = linear(8, 8);
  body[1] = batchnorm(8);
  layers[0] = linear(4, 8);
  layers[1] = batchnorm(8);
  layers[2] = dl_layer_default(DL_RELU);
  layers[3] = residual(body, 2);
  layers[4] = linear(8, 2);
  *n = 5;
  return layers;
}

static void state_dict_names_and_order(void **state) {
  (void)state;
  int n;
  const dl_layer_desc *desc = net_desc(&n);
  dl_model *m;
  assert_int_equal(dl_model_create(&m, desc, n, 1), DL_OK);
  const char *params[] = {"0.weight",        "0.bias",        "1.weight",        "1.bias",
                          "3.body.0.weight", "3.body.0.bias", "3.body.1.weight", "3.body.1.bias",
                          "4.weight",        "4.bias"};
  assert_int_equal(dl_model_num_params(m), 10);
  for (int i = 0; i < 10; i++) assert_string_equal(dl_model_param(m, i)->name, params[i]);
  const char *buffers[] = {"1.running_mean",        "1.running_var",
                           "1.num_batches_tracked", "3.body.1.running_mean",
                           "3.body.1.running_var",  "3.body.1.num_batches_tracked"};
  assert_int_equal(dl_model_num_buffers(m), 6);
  for (int i = 0; i < 6; i++) assert_string_equal(dl_model_buffer(m, i)->name, buffers[i]);
  assert_ptr_equal(dl_model_find_param(m, "3.body.0.bias"), dl_model_param(m, 5));
  assert_ptr_equal(dl_model_find_buffer(m, "3.body.1.running_var"), dl_model_buffer(m, 4));
  assert_null(dl_model_find_param(m, "3.body.0.gamma"));
  assert_null(dl_model_find_buffer(m, "0.running_mean"));
  assert_null(dl_model_param(m, 10));
  assert_null(dl_model_param(m, -1));
  assert_null(dl_model_buffer(m, 6));
  assert_int_equal(dl_model_num_layers(m), 5);
  assert_null(dl_model_layer(m, 5));
  /* Every layer, nested too, has its own rng id (dropout streams). */
  assert_int_equal(dl_model_layer(m, 3)->rng_id, 3);
  assert_int_equal(dl_model_layer(m, 3)->body->layers[1].rng_id, 5);
  assert_int_equal(dl_model_layer(m, 4)->rng_id, 6);
  dl_model_destroy(m);
  dl_model_destroy(NULL);
}

static void train_and_eval_reach_nested_layers(void **state) {
  (void)state;
  int n;
  const dl_layer_desc *desc = net_desc(&n);
  dl_model *m;
  assert_int_equal(dl_model_create(&m, desc, n, 1), DL_OK);
  dl_layer *inner = &dl_model_layer(m, 3)->body->layers[1];
  assert_true(inner->training);
  dl_model_train(m, false);
  assert_false(inner->training);
  assert_false(dl_model_layer(m, 0)->training);
  dl_model_train(m, true);
  assert_true(inner->training && dl_model_layer(m, 4)->training);
  dl_model_destroy(m);
}

typedef struct grads {
  float v[10][64];
} grads;

static void forward_backward(dl_model *m, const dl_tensor *x) {
  dl_ctx ctx = gc_ctx();
  const dl_tensor *out;
  assert_int_equal(dl_model_forward(m, &ctx, x, &out), DL_OK);
  dl_tensor dout = {0};
  assert_int_equal(dl_tensor_alloc(&dout, DL_F32, out->ndim, out->shape, "dout"), DL_OK);
  gc_fill_uniform(&dout, 3, -1.0f, 1.0f);
  assert_int_equal(dl_model_backward(m, &ctx, &dout), DL_OK);
  dl_tensor_free(&dout);
}

static void snapshot(dl_model *m, grads *g) {
  for (int i = 0; i < dl_model_num_params(m); i++) {
    dl_param *p = dl_model_param(m, i);
    assert_true(p->grad.numel <= 64);
    memcpy(g->v[i], p->grad.data, dl_tensor_bytes(&p->grad));
  }
}

/* PyTorch: grads add over backwards until zero_grad sets them to None; a
 * frozen parameter never gets one. BatchNorm in eval mode keeps the
 * forward a fixed function, so the two backwards see the same graph. */
static void zero_grad_and_accumulation(void **state) {
  (void)state;
  int n;
  const dl_layer_desc *desc = net_desc(&n);
  dl_model *m;
  assert_int_equal(dl_model_create(&m, desc, n, 1), DL_OK);
  dl_model_train(m, false);
  dl_model_find_param(m, "0.bias")->requires_grad = false;
  dl_tensor x = {0};
  assert_int_equal(dl_tensor_f32(&x, 2, 6, 4, 0, 0, "x"), DL_OK);
  gc_fill_uniform(&x, 1, -1.0f, 1.0f);
  static grads once, twice;
  forward_backward(m, &x);
  snapshot(m, &once);
  forward_backward(m, &x);
  snapshot(m, &twice);
  for (int i = 0; i < dl_model_num_params(m); i++) {
    dl_param *p = dl_model_param(m, i);
    if (strcmp(p->name, "0.bias") == 0) {
      assert_false(p->has_grad);
      continue;
    }
    assert_true(p->has_grad);
    for (int64_t k = 0; k < p->grad.numel; k++) assert_true(twice.v[i][k] == 2.0f * once.v[i][k]);
  }
  dl_model_zero_grad(m);
  for (int i = 0; i < dl_model_num_params(m); i++) assert_false(dl_model_param(m, i)->has_grad);
  forward_backward(m, &x);
  snapshot(m, &twice);
  for (int i = 0; i < dl_model_num_params(m); i++)
    assert_memory_equal(twice.v[i], once.v[i], dl_tensor_bytes(&dl_model_param(m, i)->grad));
  dl_tensor_free(&x);
  dl_model_destroy(m);
}

/* Whole-model gradients against central differences of sum(out * dout),
 * the perturbed forwards running in no-grad mode. Tolerance as in
 * gradcheck.h: smooth model (tanh), expected ~1e-4, asserted < 1e-2. */
static void model_gradients_match_finite_differences(void **state) {
  (void)state;
  const dl_layer_desc body[2] = {linear(5, 5), dl_layer_default(DL_TANH)};
  const dl_layer_desc desc[4] = {linear(3, 5), dl_layer_default(DL_TANH), residual(body, 2),
                                 linear(5, 2)};
  dl_model *m;
  assert_int_equal(dl_model_create(&m, desc, 4, 9), DL_OK);
  dl_tensor x = {0}, dout = {0};
  assert_int_equal(dl_tensor_f32(&x, 2, 4, 3, 0, 0, "x"), DL_OK);
  assert_int_equal(dl_tensor_f32(&dout, 2, 4, 2, 0, 0, "dout"), DL_OK);
  gc_fill_uniform(&x, 1, -1.0f, 1.0f);
  gc_fill_uniform(&dout, 3, -1.0f, 1.0f);
  dl_ctx ctx = gc_ctx();
  const dl_tensor *out;
  assert_int_equal(dl_model_forward(m, &ctx, &x, &out), DL_OK);
  assert_int_equal(dl_model_backward(m, &ctx, &dout), DL_OK);
  ctx.grad_enabled = false;
  double worst = 0;
  for (int i = 0; i < dl_model_num_params(m); i++) {
    dl_param *p = dl_model_param(m, i);
    for (int64_t k = 0; k < p->value.numel; k++) {
      float *v = &dl_f32(&p->value)[k], orig = *v, h = 1e-2f;
      double l[2];
      for (int side = 0; side < 2; side++) {
        *v = side ? orig - h : orig + h;
        assert_int_equal(dl_model_forward(m, &ctx, &x, &out), DL_OK);
        l[side] = 0;
        for (int64_t j = 0; j < out->numel; j++)
          l[side] += (double)dl_f32(out)[j] * dl_f32(&dout)[j];
      }
      double up = (double)(orig + h), down = (double)(orig - h);
      *v = orig;
      double numeric = (l[0] - l[1]) / (up - down);
      double err = fabs(dl_f32(&p->grad)[k] - numeric) / fmax(1e-2, fabs(numeric));
      worst = fmax(worst, err);
    }
  }
  assert_true(worst < 1e-2);
  dl_tensor_free(&x);
  dl_tensor_free(&dout);
  dl_model_destroy(m);
}

/* A deep MLP: grad mode keeps all 16 activations, no-grad mode at most two
 * at a time (M2: inference without no_grad costs memory). */
static void no_grad_inference_keeps_little_memory(void **state) {
  (void)state;
  dl_layer_desc desc[16];
  for (int i = 0; i < 16; i++) desc[i] = i % 2 ? dl_layer_default(DL_RELU) : linear(128, 128);
  dl_model *m;
  assert_int_equal(dl_model_create(&m, desc, 16, 1), DL_OK);
  dl_tensor x = {0};
  assert_int_equal(dl_tensor_f32(&x, 2, 64, 128, 0, 0, "x"), DL_OK);
  gc_fill_uniform(&x, 1, -1.0f, 1.0f);
  const int64_t act = 64 * 128 * 4, base = dl_mem_current();
  dl_ctx ctx = gc_ctx();
  const dl_tensor *out;
  dl_mem_reset_peak();
  assert_int_equal(dl_model_forward(m, &ctx, &x, &out), DL_OK);
  const int64_t grad_peak = dl_mem_peak() - base;
  dl_model_release(m);
  assert_int_equal(dl_mem_current(), base);
  ctx.grad_enabled = false;
  dl_mem_reset_peak();
  assert_int_equal(dl_model_forward(m, &ctx, &x, &out), DL_OK);
  const int64_t nograd_peak = dl_mem_peak() - base;
  assert_int_equal(dl_mem_current() - base, act); /* only the output is left */
  assert_true(grad_peak >= 16 * act);
  assert_true(nograd_peak <= 3 * act);
  print_message("activation peak: grad %lld bytes, no-grad %lld bytes\n", (long long)grad_peak,
                (long long)nograd_peak);
  /* No graph was kept: backward must refuse. */
  dl_tensor dout = {0};
  assert_int_equal(dl_tensor_alloc(&dout, DL_F32, 2, out->shape, "dout"), DL_OK);
  assert_int_equal(dl_model_backward(m, &ctx, &dout), DL_ERR_INVALID);
  assert_non_null(strstr(dl_last_error(), "backward without a grad-mode forward"));
  dl_tensor_free(&dout);
  dl_tensor_free(&x);
  dl_model_destroy(m);
}

typedef struct hook_log {
  char text[512];
} hook_log;

static void log_forward(void *user, const char *layer, const dl_tensor *y) {
  hook_log *log = user;
  size_t n = strlen(log->text);
  snprintf(log->text + n, sizeof log->text - n, "F %s %lld|", layer, (long long)y->numel);
}

static void log_backward(void *user, const char *layer, const dl_tensor *dy) {
  hook_log *log = user;
  size_t n = strlen(log->text);
  snprintf(log->text + n, sizeof log->text - n, "B %s %lld|", layer, (long long)dy->numel);
}

static void hooks_see_every_layer_in_order(void **state) {
  (void)state;
  const dl_layer_desc body[1] = {linear(3, 3)};
  const dl_layer_desc desc[2] = {linear(2, 3), residual(body, 1)};
  dl_model *m;
  assert_int_equal(dl_model_create(&m, desc, 2, 1), DL_OK);
  dl_tensor x = {0}, dout = {0};
  assert_int_equal(dl_tensor_f32(&x, 2, 1, 2, 0, 0, "x"), DL_OK);
  assert_int_equal(dl_tensor_f32(&dout, 2, 1, 3, 0, 0, "dout"), DL_OK);
  hook_log log = {{0}};
  dl_ctx ctx = gc_ctx();
  ctx.hooks = (dl_hooks){&log, log_forward, log_backward};
  const dl_tensor *out;
  assert_int_equal(dl_model_forward(m, &ctx, &x, &out), DL_OK);
  assert_int_equal(dl_model_backward(m, &ctx, &dout), DL_OK);
  assert_string_equal(log.text, "F 0 (linear) 3|F 1.body.0 (linear) 3|F 1 (residual) 3|"
                                "B 1 (residual) 3|B 1.body.0 (linear) 3|B 0 (linear) 3|");
  dl_tensor_free(&x);
  dl_tensor_free(&dout);
  dl_model_destroy(m);
}

static void errors_name_layer_and_shapes(void **state) {
  (void)state;
  dl_model *m = NULL;
  const dl_layer_desc bad[2] = {linear(4, 3), linear(0, 2)};
  assert_int_equal(dl_model_create(&m, bad, 2, 1), DL_ERR_INVALID);
  assert_null(m);
  assert_non_null(strstr(dl_last_error(), "layer 1 (linear): in_features must be > 0, got 0"));
  assert_int_equal(dl_model_create(&m, bad, 0, 1), DL_ERR_INVALID);
  assert_non_null(strstr(dl_last_error(), "at least one layer"));
  const dl_layer_desc desc[3] = {linear(4, 3), dl_layer_default(DL_RELU), linear(4, 2)};
  assert_int_equal(dl_model_create(&m, desc, 3, 1), DL_OK);
  dl_tensor x = {0}, dout = {0};
  assert_int_equal(dl_tensor_f32(&x, 2, 2, 4, 0, 0, "x"), DL_OK);
  dl_ctx ctx = gc_ctx();
  const dl_tensor *out;
  assert_int_equal(dl_model_backward(m, &ctx, &x), DL_ERR_INVALID);
  assert_non_null(strstr(dl_last_error(), "backward without a grad-mode forward"));
  assert_int_equal(dl_model_forward(m, &ctx, &x, &out), DL_ERR_INVALID);
  assert_non_null(strstr(dl_last_error(),
                         "layer 2 (linear): input [2, 3] float32 does not match in_features 4"));
  assert_int_equal(dl_model_backward(m, &ctx, &x), DL_ERR_INVALID); /* failed forward */
  dl_model_destroy(m);

  /* A layer that names itself in its message is not named twice. */
  const dl_layer_desc bn[2] = {linear(4, 3), batchnorm(5)};
  assert_int_equal(dl_model_create(&m, bn, 2, 1), DL_OK);
  assert_int_equal(dl_model_forward(m, &ctx, &x, &out), DL_ERR_INVALID);
  const char *first = strstr(dl_last_error(), "layer 1 (batchnorm1d): ");
  assert_non_null(first);
  assert_null(strstr(first + 1, "layer 1 (batchnorm1d): "));
  dl_model_destroy(m);

  const dl_layer_desc good[2] = {linear(4, 3), dl_layer_default(DL_RELU)};
  assert_int_equal(dl_model_create(&m, good, 2, 1), DL_OK);
  ctx.autocast = DL_I32;
  assert_int_equal(dl_model_forward(m, &ctx, &x, &out), DL_ERR_INVALID);
  assert_non_null(strstr(dl_last_error(), "autocast must be"));
  ctx.autocast = DL_F32;
  assert_int_equal(dl_model_forward(m, &ctx, &x, &out), DL_OK);
  assert_int_equal(dl_model_backward(m, &ctx, &x), DL_ERR_INVALID); /* wrong dout shape */
  assert_non_null(strstr(dl_last_error(), "gradient [2, 4] float32 does not match output "
                                          "[2, 3] float32"));
  assert_int_equal(dl_tensor_f32(&dout, 2, 2, 3, 0, 0, "dout"), DL_OK);
  assert_int_equal(dl_model_forward(m, &ctx, &x, &out), DL_OK);
  assert_int_equal(dl_model_backward(m, &ctx, &dout), DL_OK);
  assert_int_equal(out->numel, 6); /* the output stays readable after backward */
  assert_int_equal(dl_model_backward(m, &ctx, &dout), DL_ERR_INVALID); /* graph used up */
  dl_tensor empty = {0};
  assert_int_equal(dl_model_forward(m, &ctx, &empty, &out), DL_ERR_INVALID);
  dl_tensor_free(&x);
  dl_tensor_free(&dout);
  dl_model_destroy(m);
}

/* Every allocation of create, forward and backward fails in turn; each
 * failure is DL_ERR_NOMEM and leaves the memory count where it was. */
static void allocation_failures_leak_nothing(void **state) {
  (void)state;
  const dl_layer_desc body[2] = {linear(4, 4), dl_layer_default(DL_TANH)};
  const dl_layer_desc desc[3] = {linear(3, 4), residual(body, 2), linear(4, 2)};
  dl_tensor x = {0}, dout = {0};
  assert_int_equal(dl_tensor_f32(&x, 2, 2, 3, 0, 0, "x"), DL_OK);
  assert_int_equal(dl_tensor_f32(&dout, 2, 2, 2, 0, 0, "dout"), DL_OK);
  const int64_t base = dl_mem_current();
  int failures = 0;
  for (int64_t n = 1; n < 100; n++) {
    dl_model *m = NULL;
    dl_ctx ctx = gc_ctx();
    const dl_tensor *out;
    dl_mem_fail_after(n);
    dl_status s = dl_model_create(&m, desc, 3, 1);
    if (s == DL_OK) s = dl_model_forward(m, &ctx, &x, &out);
    if (s == DL_OK) s = dl_model_backward(m, &ctx, &dout);
    dl_mem_fail_after(0);
    dl_model_destroy(m);
    if (s != DL_OK) {
      assert_int_equal(s, DL_ERR_NOMEM);
      failures++;
    }
    assert_int_equal(dl_mem_current(), base);
    if (s == DL_OK) break;
  }
  assert_true(failures >= 20);
  dl_tensor_free(&x);
  dl_tensor_free(&dout);
}

/* The layer framework (engine/nn/layer.c): kind names, PyTorch defaults,
 * validation of every kind's description, name lengths and table limits. */
static void layer_kinds_defaults_and_validation(void **state) {
  (void)state;
  for (int k = 0; k < DL_LAYER_KIND_COUNT; k++) {
    dl_layer_kind parsed;
    assert_int_equal(dl_layer_kind_parse(dl_layer_kind_name((dl_layer_kind)k), &parsed), DL_OK);
    assert_int_equal(parsed, k);
  }
  dl_layer_kind parsed;
  assert_int_equal(dl_layer_kind_parse("conv3d", &parsed), DL_ERR_INVALID);
  assert_non_null(strstr(dl_last_error(), "unknown layer kind 'conv3d'; expected one of: "
                                          "linear, conv2d, batchnorm1d"));
  assert_int_equal(dl_layer_kind_parse(NULL, &parsed), DL_ERR_INVALID);
  assert_string_equal(dl_layer_kind_name(DL_LAYER_KIND_COUNT), "unknown");

  dl_layer_desc d = dl_layer_default(DL_BATCHNORM2D);
  assert_true(d.bias && d.affine && d.track_running_stats);
  assert_true(d.eps == 1e-5f && d.momentum == 0.1f && d.p == 0.5f && d.stride == 1);
  assert_int_equal(dl_layer_default(DL_MAXPOOL2D).stride, 0); /* = kernel */

  /* Every kind builds from a valid description. */
  dl_layer l;
  const dl_layer_desc body[1] = {dl_layer_default(DL_RELU)};
  for (int k = 0; k < DL_LAYER_KIND_COUNT; k++) {
    d = dl_layer_default((dl_layer_kind)k);
    d.in = d.out = 4;
    d.kernel = 2;
    d.body = body;
    d.nbody = 1;
    assert_int_equal(dl_layer_init(&l, &d, "7.", 0, 1), DL_OK);
    assert_non_null(l.ops);
    assert_true(l.training);
    dl_layer_destroy(&l);
  }

  struct {
    dl_layer_kind kind;
    float eps, momentum, p;
    const char *message;
  } bad[] = {
      {DL_BATCHNORM1D, 0.0f, 0.1f, 0.5f, "layer 7 (batchnorm1d): eps must be a finite number > 0"},
      {DL_BATCHNORM2D, 1e-5f, 1.5f, 0.5f, "layer 7 (batchnorm2d): momentum must be in [0, 1]"},
      {DL_LAYERNORM, NAN, 0.1f, 0.5f, "layer 7 (layernorm): eps must be"},
      {DL_DROPOUT, 1e-5f, 0.1f, 1.0f, "layer 7 (dropout): p must be in [0, 1), got 1"},
      {DL_DROPOUT, 1e-5f, 0.1f, -0.1f, "p must be in [0, 1)"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    d = dl_layer_default(bad[i].kind);
    d.out = 4;
    d.eps = bad[i].eps;
    d.momentum = bad[i].momentum;
    d.p = bad[i].p;
    assert_int_equal(dl_layer_init(&l, &d, "7.", 0, 1), DL_ERR_INVALID);
    assert_non_null(strstr(dl_last_error(), bad[i].message));
  }
  d = dl_layer_default(DL_LINEAR);
  d.kind = (dl_layer_kind)99;
  assert_int_equal(dl_layer_init(&l, &d, "7.", 0, 1), DL_ERR_INVALID);
  assert_non_null(strstr(dl_last_error(), "unknown layer kind 99"));
}

static void long_names_and_full_tables_are_refused(void **state) {
  (void)state;
  char prefix[128];
  memset(prefix, 'a', sizeof prefix);
  prefix[DL_NAME_MAX] = '\0'; /* one too long */
  dl_layer l;
  dl_layer_desc d = linear(2, 2);
  assert_int_equal(dl_layer_init(&l, &d, prefix, 0, 1), DL_ERR_INVALID);
  assert_non_null(strstr(dl_last_error(), "name prefix is longer than 95"));
  prefix[90] = '\0'; /* fits, but "...weight" does not */
  assert_int_equal(dl_layer_init(&l, &d, prefix, 0, 1), DL_ERR_INVALID);
  assert_non_null(strstr(dl_last_error(), "weight' is longer than 95"));
  const dl_layer_desc body[1] = {dl_layer_default(DL_RELU)};
  d = residual(body, 1);
  assert_int_equal(dl_layer_init(&l, &d, prefix, 0, 1), DL_ERR_INVALID);
  assert_non_null(strstr(dl_last_error(), "body.0: name is longer than 95"));
  prefix[90] = 'a';
  prefix[93] = '\0';
  assert_int_equal(dl_layer_init(&l, &d, prefix, 0, 1), DL_ERR_INVALID);
  assert_non_null(strstr(dl_last_error(), "body name prefix is longer than 95"));

  d = linear(2, 2);
  assert_int_equal(dl_layer_init(&l, &d, "0.", 0, 1), DL_OK);
  for (int i = l.nparams; i < DL_LAYER_MAX_PARAMS; i++) { /* fill the table */
    char name[24];
    snprintf(name, sizeof name, "extra%d", i);
    assert_int_equal(dl_layer_add_param(&l, name, 1, (const int64_t[]){2}), DL_OK);
  }
  assert_int_equal(dl_layer_add_param(&l, "extra", 1, (const int64_t[]){2}), DL_ERR_INTERNAL);
  dl_layer_destroy(&l);
  d = batchnorm(3);
  assert_int_equal(dl_layer_init(&l, &d, "0.", 0, 1), DL_OK);
  assert_int_equal(dl_layer_add_buffer(&l, "extra", DL_F32, 1, (const int64_t[]){2}),
                   DL_ERR_INTERNAL);
  dl_layer_destroy(&l);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(state_dict_names_and_order),
      cmocka_unit_test(train_and_eval_reach_nested_layers),
      cmocka_unit_test(zero_grad_and_accumulation),
      cmocka_unit_test(model_gradients_match_finite_differences),
      cmocka_unit_test(no_grad_inference_keeps_little_memory),
      cmocka_unit_test(hooks_see_every_layer_in_order),
      cmocka_unit_test(errors_name_layer_and_shapes),
      cmocka_unit_test(allocation_failures_leak_nothing),
      cmocka_unit_test(layer_kinds_defaults_and_validation),
      cmocka_unit_test(long_names_and_full_tables_are_refused),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
