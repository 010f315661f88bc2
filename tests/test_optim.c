/* Optimizers (engine/optim/optim.c): a few steps of SGD, Adam and AdamW on small
 * tensors against torch.optim's formulas written here in double; which
 * params are skipped; state naming, save/load and reset; errors. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "core/mem.h"
#include "core/threads.h"
#include "optim/optim.h"

enum { P = 4, STEPS = 5 };

static void make_param(dl_param *p, const char *name, const float *v) {
  memset(p, 0, sizeof *p);
  snprintf(p->name, sizeof p->name, "%s", name);
  assert_int_equal(dl_tensor_f32(&p->value, 2, 2, 2, 0, 0, name), DL_OK);
  assert_int_equal(dl_tensor_f32(&p->grad, 2, 2, 2, 0, 0, name), DL_OK);
  memcpy(p->value.data, v, P * sizeof(float));
  p->requires_grad = p->in_optimizer = true;
}

static void free_param(dl_param *p) {
  dl_tensor_free(&p->value);
  dl_tensor_free(&p->grad);
}

static const float init[P] = {0.5f, -1.25f, 2.0f, 0.0f};

/* The gradient of step k: varies in sign and size so every term matters. */
static float grad_at(int k, int i) { return (float)(0.3 * (i + 1) * cos(1.7 * k + i) - 0.05 * k); }

static void set_grad(dl_param *p, int k) {
  for (int i = 0; i < P; i++) dl_f32(&p->grad)[i] = grad_at(k, i);
  p->has_grad = true;
}

/* torch's SGD in double. */
static void ref_sgd(const dl_optim_desc *d, const float *lrs, double *w) {
  double buf[P];
  for (int k = 0; k < STEPS; k++)
    for (int i = 0; i < P; i++) {
      double g = grad_at(k, i) + d->weight_decay * w[i];
      if (d->momentum != 0.0) {
        buf[i] = k == 0 ? g : d->momentum * buf[i] + (1.0 - d->dampening) * g;
        g = d->nesterov ? g + d->momentum * buf[i] : buf[i];
      }
      w[i] -= lrs[k] * g;
    }
}

/* torch's Adam / AdamW in double. */
static void ref_adam(const dl_optim_desc *d, const float *lrs, double *w) {
  double m[P] = {0}, v[P] = {0};
  for (int k = 0; k < STEPS; k++)
    for (int i = 0; i < P; i++) {
      double g = grad_at(k, i), lr = lrs[k];
      if (d->kind == DL_OPTIM_ADAMW) w[i] *= 1.0 - lr * d->weight_decay;
      else g += d->weight_decay * w[i];
      m[i] = d->beta1 * m[i] + (1.0 - d->beta1) * g;
      v[i] = d->beta2 * v[i] + (1.0 - d->beta2) * g * g;
      double bc1 = 1.0 - pow(d->beta1, k + 1), bc2 = 1.0 - pow(d->beta2, k + 1);
      w[i] -= lr / bc1 * m[i] / (sqrt(v[i]) / sqrt(bc2) + d->eps);
    }
}

/* Runs STEPS steps of `d` and compares with the double reference. Float32
 * rounding of a few operations per step over 5 steps: 2e-6 relative plus
 * 1e-7 absolute (for values near 0) is several times the expected error and
 * far below the effect of any wrong term (>= 1e-3 here). */
static void check_against_reference(const dl_optim_desc *d) {
  static const float lrs[STEPS] = {0.1f, 0.05f, 0.2f, 0.01f, 0.1f};
  dl_param p;
  make_param(&p, "0.weight", init);
  dl_param *ps[1] = {&p};
  dl_optim *o;
  assert_int_equal(dl_optim_create(&o, d, ps, 1), DL_OK);
  for (int k = 0; k < STEPS; k++) {
    set_grad(&p, k);
    assert_int_equal(dl_optim_step(o, lrs[k]), DL_OK);
  }
  double w[P];
  for (int i = 0; i < P; i++) w[i] = init[i];
  if (d->kind == DL_OPTIM_SGD) ref_sgd(d, lrs, w);
  else ref_adam(d, lrs, w);
  for (int i = 0; i < P; i++) {
    double got = dl_f32(&p.value)[i];
    if (fabs(got - w[i]) > 2e-6 * fabs(w[i]) + 1e-7)
      fail_msg("%s element %d: got %.9g, want %.9g", dl_optim_kind_name(d->kind), i, got, w[i]);
  }
  dl_optim_destroy(o);
  free_param(&p);
}

static void sgd_plain(void **state) {
  (void)state;
  dl_optim_desc d = dl_optim_default(DL_OPTIM_SGD);
  check_against_reference(&d);
}

static void sgd_momentum_dampening_weight_decay(void **state) {
  (void)state;
  dl_optim_desc d = dl_optim_default(DL_OPTIM_SGD);
  d.momentum = 0.9;
  d.dampening = 0.25;
  d.weight_decay = 0.01;
  check_against_reference(&d);
}

static void sgd_nesterov(void **state) {
  (void)state;
  dl_optim_desc d = dl_optim_default(DL_OPTIM_SGD);
  d.momentum = 0.8;
  d.weight_decay = 0.05;
  d.nesterov = true;
  check_against_reference(&d);
}

static void adam_with_l2(void **state) {
  (void)state;
  dl_optim_desc d = dl_optim_default(DL_OPTIM_ADAM);
  check_against_reference(&d);
  d.weight_decay = 0.1;
  d.beta1 = 0.8;
  d.beta2 = 0.99;
  d.eps = 1e-3;
  check_against_reference(&d);
}

static void adamw_decoupled(void **state) {
  (void)state;
  dl_optim_desc d = dl_optim_default(DL_OPTIM_ADAMW);
  assert_true(d.weight_decay == 1e-2);
  check_against_reference(&d);
  d.weight_decay = 0.5;
  check_against_reference(&d);
}

/* Adam's first step moves each param by lr * g / (|g| + eps): by hand. */
static void adam_first_step_by_hand(void **state) {
  (void)state;
  dl_param p;
  make_param(&p, "w", init);
  dl_param *ps[1] = {&p};
  dl_optim *o;
  dl_optim_desc d = dl_optim_default(DL_OPTIM_ADAM);
  assert_int_equal(dl_optim_create(&o, &d, ps, 1), DL_OK);
  const float g[P] = {2.0f, -0.5f, 1e-3f, 0.0f};
  memcpy(p.grad.data, g, sizeof g);
  p.has_grad = true;
  assert_int_equal(dl_optim_step(o, 0.01f), DL_OK);
  for (int i = 0; i < P; i++) {
    double want = init[i] - 0.01 * g[i] / (fabs(g[i]) + 1e-8);
    assert_true(fabs(dl_f32(&p.value)[i] - want) <= 1e-6 * fabs(want) + 1e-9);
  }
  dl_optim_destroy(o);
  free_param(&p);
}

/* No grad: untouched, step count stays 0. Not in the optimizer at creation:
 * never updated and has no state. Flag cleared later: skipped. */
static void params_without_grad_or_optimizer_are_skipped(void **state) {
  (void)state;
  dl_param a, b, c;
  make_param(&a, "a", init);
  make_param(&b, "b", init);
  make_param(&c, "c", init);
  c.in_optimizer = false;
  dl_param *ps[3] = {&a, &b, &c};
  dl_optim *o;
  dl_optim_desc d = dl_optim_default(DL_OPTIM_ADAM);
  assert_int_equal(dl_optim_create(&o, &d, ps, 3), DL_OK);
  assert_int_equal(dl_optim_num_params(o), 2);
  assert_int_equal(dl_optim_num_state(o), 6);
  set_grad(&a, 0);
  set_grad(&c, 0);
  assert_int_equal(dl_optim_step(o, 0.1f), DL_OK);
  assert_memory_not_equal(a.value.data, init, sizeof init);
  assert_memory_equal(b.value.data, init, sizeof init);
  assert_memory_equal(c.value.data, init, sizeof init);
  const char *name;
  dl_tensor *t;
  assert_int_equal(dl_optim_state(o, 0, &name, &t), DL_OK);
  assert_string_equal(name, "state.a.step");
  assert_true(dl_f32(t)[0] == 1.0f);
  assert_int_equal(dl_optim_state(o, 3, &name, &t), DL_OK);
  assert_string_equal(name, "state.b.step");
  assert_true(dl_f32(t)[0] == 0.0f);
  for (int i = 0; i < 6; i++) {
    assert_int_equal(dl_optim_state(o, i, &name, &t), DL_OK);
    assert_null(strstr(name, "state.c."));
  }
  float before[P];
  memcpy(before, a.value.data, sizeof before);
  a.in_optimizer = false;
  assert_int_equal(dl_optim_step(o, 0.1f), DL_OK);
  assert_memory_equal(a.value.data, before, sizeof before);
  dl_optim_destroy(o);
  free_param(&a);
  free_param(&b);
  free_param(&c);
}

/* Copying every state tensor into a fresh optimizer and continuing gives
 * bitwise the uninterrupted run; reset instead (pitfall C1) restarts the
 * moments, which changes the update. */
static void run_resumed(dl_optim_kind kind, bool save_state, float *out) {
  dl_optim_desc d = dl_optim_default(kind);
  d.momentum = 0.9;
  dl_param p;
  make_param(&p, "0.weight", init);
  dl_param *ps[1] = {&p};
  dl_optim *first, *second;
  assert_int_equal(dl_optim_create(&first, &d, ps, 1), DL_OK);
  assert_int_equal(dl_optim_create(&second, &d, ps, 1), DL_OK);
  for (int k = 0; k < STEPS; k++) {
    dl_optim *o = k < 2 ? first : second;
    if (k == 2 && save_state)
      for (int i = 0; i < dl_optim_num_state(first); i++) {
        const char *n1, *n2;
        dl_tensor *t1, *t2;
        assert_int_equal(dl_optim_state(first, i, &n1, &t1), DL_OK);
        assert_int_equal(dl_optim_state(second, i, &n2, &t2), DL_OK);
        assert_string_equal(n1, n2);
        assert_int_equal(dl_tensor_copy_into(t2, t1, n2), DL_OK);
      }
    set_grad(&p, k);
    assert_int_equal(dl_optim_step(o, 0.1f), DL_OK);
  }
  memcpy(out, p.value.data, P * sizeof(float));
  dl_optim_destroy(first);
  dl_optim_destroy(second);
  free_param(&p);
}

static void run_straight(dl_optim_kind kind, float *out) {
  dl_optim_desc d = dl_optim_default(kind);
  d.momentum = 0.9;
  dl_param p;
  make_param(&p, "0.weight", init);
  dl_param *ps[1] = {&p};
  dl_optim *o;
  assert_int_equal(dl_optim_create(&o, &d, ps, 1), DL_OK);
  for (int k = 0; k < STEPS; k++) {
    set_grad(&p, k);
    if (k == 2) dl_optim_reset(o);
    assert_int_equal(dl_optim_step(o, 0.1f), DL_OK);
  }
  memcpy(out, p.value.data, P * sizeof(float));
  dl_optim_destroy(o);
  free_param(&p);
}

static void state_round_trip_and_reset(void **state) {
  (void)state;
  for (int kind = 0; kind < 3; kind++) {
    float resumed[P], fresh[P], reset[P];
    run_resumed((dl_optim_kind)kind, true, resumed);
    run_resumed((dl_optim_kind)kind, false, fresh);
    run_straight((dl_optim_kind)kind, reset);
    assert_memory_not_equal(resumed, fresh, sizeof resumed);
    assert_memory_equal(fresh, reset, sizeof fresh); /* reset == not saved */
  }
  /* And the resumed run equals the uninterrupted one. */
  dl_optim_desc d = dl_optim_default(DL_OPTIM_SGD);
  d.momentum = 0.9;
  dl_param p;
  make_param(&p, "0.weight", init);
  dl_param *ps[1] = {&p};
  dl_optim *o;
  assert_int_equal(dl_optim_create(&o, &d, ps, 1), DL_OK);
  for (int k = 0; k < STEPS; k++) {
    set_grad(&p, k);
    assert_int_equal(dl_optim_step(o, 0.1f), DL_OK);
  }
  float resumed[P];
  run_resumed(DL_OPTIM_SGD, true, resumed);
  assert_memory_equal(resumed, p.value.data, sizeof resumed);
  dl_optim_destroy(o);
  free_param(&p);
}

static void state_names_follow_pytorch(void **state) {
  (void)state;
  dl_param p;
  make_param(&p, "2.body.1.weight", init);
  dl_param *ps[1] = {&p};
  const char *want_sgd[] = {"state.2.body.1.weight.momentum_buffer", "state.2.body.1.weight.step"};
  const char *want_adam[] = {"state.2.body.1.weight.step", "state.2.body.1.weight.exp_avg",
                             "state.2.body.1.weight.exp_avg_sq"};
  dl_optim *o;
  const char *name;
  dl_tensor *t;
  dl_optim_desc d = dl_optim_default(DL_OPTIM_SGD);
  assert_int_equal(dl_optim_create(&o, &d, ps, 1), DL_OK);
  assert_int_equal(dl_optim_num_state(o), 1); /* no momentum: step only */
  dl_optim_destroy(o);
  d.momentum = 0.5;
  assert_int_equal(dl_optim_create(&o, &d, ps, 1), DL_OK);
  assert_int_equal(dl_optim_num_state(o), 2);
  for (int i = 0; i < 2; i++) {
    assert_int_equal(dl_optim_state(o, i, &name, &t), DL_OK);
    assert_string_equal(name, want_sgd[i]);
  }
  assert_true(dl_optim_get_desc(o)->momentum == 0.5);
  assert_int_equal(dl_optim_state(o, 2, &name, &t), DL_ERR_INVALID);
  assert_int_equal(dl_optim_state(o, -1, &name, &t), DL_ERR_INVALID);
  dl_optim_destroy(o);
  d = dl_optim_default(DL_OPTIM_ADAMW);
  assert_int_equal(dl_optim_create(&o, &d, ps, 1), DL_OK);
  for (int i = 0; i < 3; i++) {
    assert_int_equal(dl_optim_state(o, i, &name, &t), DL_OK);
    assert_string_equal(name, want_adam[i]);
    assert_int_equal(t->ndim, i == 0 ? 0 : 2);
    assert_int_equal(t->dtype, DL_F32);
  }
  /* A step count that is not one (a wrong checkpoint) is refused by name. */
  assert_int_equal(dl_optim_state(o, 0, &name, &t), DL_OK);
  dl_f32(t)[0] = 2.5f;
  set_grad(&p, 0);
  assert_int_equal(dl_optim_step(o, 0.1f), DL_ERR_INVALID);
  assert_non_null(strstr(dl_last_error(), "state.2.body.1.weight.step is 2.5"));
  dl_optim_destroy(o);
  dl_optim_destroy(NULL);
  free_param(&p);
}

/* Params of many sizes in one step (so that the step's one job spans them,
 * cut across params and across 16-lane groups, on 1 and 2 threads) against
 * the element formulas (optim_elem.h) applied here one element at a time:
 * the same bits, for every kind, with gradients down to denormal squares. */
enum { NSIZES = 5 };
static const int64_t sizes[NSIZES] = {1, 17, 40001, 33, 16};

static float value_at(int64_t i, int k) {
  double mag = (i % 7 == 3) ? 1e-22 : 0.5; /* squares below FLT_MIN */
  return (float)(mag * sin(0.37 * (double)i + 1.1 * k + 0.2));
}

static void check_many_params(const dl_optim_desc *d, int threads) {
  dl_param ps[NSIZES];
  dl_param *pp[NSIZES];
  float *want_w[NSIZES], *want_b0[NSIZES], *want_b1[NSIZES];
  for (int q = 0; q < NSIZES; q++) {
    memset(&ps[q], 0, sizeof ps[q]);
    snprintf(ps[q].name, sizeof ps[q].name, "p%d", q);
    assert_int_equal(dl_tensor_f32(&ps[q].value, 1, sizes[q], 0, 0, 0, "v"), DL_OK);
    assert_int_equal(dl_tensor_f32(&ps[q].grad, 1, sizes[q], 0, 0, 0, "g"), DL_OK);
    ps[q].requires_grad = ps[q].in_optimizer = true;
    want_w[q] = calloc((size_t)sizes[q], sizeof(float));
    want_b0[q] = calloc((size_t)sizes[q], sizeof(float));
    want_b1[q] = calloc((size_t)sizes[q], sizeof(float));
    assert_true(want_w[q] && want_b0[q] && want_b1[q]);
    for (int64_t i = 0; i < sizes[q]; i++)
      dl_f32(&ps[q].value)[i] = want_w[q][i] = value_at(i + 1000 * q, 7);
    pp[q] = &ps[q];
  }
  dl_optim *o;
  assert_int_equal(dl_optim_create(&o, d, pp, NSIZES), DL_OK);
  assert_int_equal(dl_set_num_threads(threads), DL_OK);
  for (int k = 0; k < 3; k++) {
    const float lr = 0.01f * (float)(k + 1);
    const dl_optim_coeffs c = dl_optim_coeffs_for(d, lr, k + 1);
    for (int q = 0; q < NSIZES; q++) {
      float *g = dl_f32(&ps[q].grad);
      for (int64_t i = 0; i < sizes[q]; i++) g[i] = value_at(i + 1000 * q, k);
      ps[q].has_grad = true;
      for (int64_t i = 0; i < sizes[q]; i++)
        dl_optim_elem(&c, i, want_w[q], g, want_b0[q], want_b1[q]);
    }
    assert_int_equal(dl_optim_step(o, lr), DL_OK);
  }
  assert_int_equal(dl_set_num_threads(1), DL_OK);
  for (int q = 0; q < NSIZES; q++) {
    const float *w = dl_f32(&ps[q].value);
    for (int64_t i = 0; i < sizes[q]; i++)
      if (memcmp(&w[i], &want_w[q][i], sizeof(float)) != 0)
        fail_msg("%s, %d threads: p%d[%lld] = %a, want %a", dl_optim_kind_name(d->kind), threads, q,
                 (long long)i, (double)w[i], (double)want_w[q][i]);
    free(want_w[q]);
    free(want_b0[q]);
    free(want_b1[q]);
    free_param(&ps[q]);
  }
  dl_optim_destroy(o);
}

static void many_params_match_the_element_formulas(void **state) {
  (void)state;
  dl_optim_desc descs[5] = {dl_optim_default(DL_OPTIM_SGD), dl_optim_default(DL_OPTIM_SGD),
                            dl_optim_default(DL_OPTIM_SGD), dl_optim_default(DL_OPTIM_ADAM),
                            dl_optim_default(DL_OPTIM_ADAMW)};
  descs[1].momentum = 0.9;
  descs[1].dampening = 0.25;
  descs[1].weight_decay = 0.01;
  descs[2].momentum = 0.8;
  descs[2].nesterov = true;
  descs[3].weight_decay = 0.1;
  for (int i = 0; i < 5; i++)
    for (int threads = 1; threads <= 2; threads++) check_many_params(&descs[i], threads);
  dl_threads_shutdown();
}

/* A bad step count on a later param refuses the whole step: the params
 * before it are not updated either. */
static void bad_step_count_updates_nothing(void **state) {
  (void)state;
  dl_param a, b;
  make_param(&a, "a", init);
  make_param(&b, "b", init);
  dl_param *ps[2] = {&a, &b};
  dl_optim *o;
  dl_optim_desc d = dl_optim_default(DL_OPTIM_ADAM);
  assert_int_equal(dl_optim_create(&o, &d, ps, 2), DL_OK);
  const char *name;
  dl_tensor *t;
  assert_int_equal(dl_optim_state(o, 3, &name, &t), DL_OK);
  assert_string_equal(name, "state.b.step");
  dl_f32(t)[0] = -1.0f;
  set_grad(&a, 0);
  set_grad(&b, 0);
  assert_int_equal(dl_optim_step(o, 0.1f), DL_ERR_INVALID);
  assert_non_null(strstr(dl_last_error(), "state.b.step is -1"));
  assert_memory_equal(a.value.data, init, sizeof init);
  assert_int_equal(dl_optim_state(o, 0, &name, &t), DL_OK);
  assert_true(dl_f32(t)[0] == 0.0f);
  dl_optim_destroy(o);
  free_param(&a);
  free_param(&b);
}

static void kind_names_round_trip(void **state) {
  (void)state;
  dl_optim_kind k;
  for (int i = 0; i < 3; i++) {
    assert_int_equal(dl_optim_kind_parse(dl_optim_kind_name((dl_optim_kind)i), &k), DL_OK);
    assert_int_equal(k, i);
  }
  assert_int_equal(dl_optim_kind_parse("rmsprop", &k), DL_ERR_INVALID);
  assert_non_null(strstr(dl_last_error(), "'rmsprop'"));
  assert_int_equal(dl_optim_kind_parse(NULL, &k), DL_ERR_INVALID);
  assert_string_equal(dl_optim_kind_name((dl_optim_kind)9), "unknown");
}

static void expect_create_error(const dl_optim_desc *d, dl_param *const *ps, int n,
                                const char *msg) {
  dl_optim *o = (dl_optim *)1;
  assert_int_equal(dl_optim_create(&o, d, ps, n), DL_ERR_INVALID);
  assert_null(o);
  if (!strstr(dl_last_error(), msg)) fail_msg("'%s' lacks '%s'", dl_last_error(), msg);
}

static void bad_settings_are_refused(void **state) {
  (void)state;
  dl_param p, q;
  make_param(&p, "0.weight", init);
  make_param(&q, "0.bias", init);
  dl_param *ps[2] = {&p, &p};
  dl_optim_desc d = dl_optim_default(DL_OPTIM_SGD);
  d.nesterov = true;
  expect_create_error(&d, ps, 1, "nesterov needs momentum > 0");
  d.momentum = 0.9;
  d.dampening = 0.1;
  expect_create_error(&d, ps, 1, "dampening 0.1");
  d = dl_optim_default(DL_OPTIM_SGD);
  d.momentum = -1;
  expect_create_error(&d, ps, 1, "momentum -1");
  d = dl_optim_default(DL_OPTIM_ADAM);
  d.weight_decay = NAN;
  expect_create_error(&d, ps, 1, "weight_decay nan");
  d = dl_optim_default(DL_OPTIM_ADAM);
  d.beta2 = 1.0;
  expect_create_error(&d, ps, 1, "betas (0.9, 1)");
  d = dl_optim_default(DL_OPTIM_ADAM);
  d.eps = -1e-8;
  expect_create_error(&d, ps, 1, "eps");
  d.kind = (dl_optim_kind)7;
  expect_create_error(&d, ps, 1, "unknown kind 7");
  d = dl_optim_default(DL_OPTIM_ADAM);
  expect_create_error(&d, ps, 2, "param 0.weight is given twice");
  expect_create_error(&d, NULL, 2, "2 params");
  dl_param *nul[1] = {NULL};
  expect_create_error(&d, nul, 1, "param 0 is NULL");
  p.in_optimizer = false;
  expect_create_error(&d, ps, 1, "empty parameter list");
  p.in_optimizer = true;
  dl_tensor_free(&q.grad);
  ps[1] = &q;
  expect_create_error(&d, ps, 2, "param 0.bias must be float32 with a grad of its shape");

  dl_optim *o;
  assert_int_equal(dl_optim_create(&o, &d, ps, 1), DL_OK);
  assert_int_equal(dl_optim_step(o, -0.1f), DL_ERR_INVALID);
  assert_non_null(strstr(dl_last_error(), "learning rate -0.1"));
  assert_int_equal(dl_optim_step(o, NAN), DL_ERR_INVALID);
  dl_optim_destroy(o);

  /* Every allocation of create can fail; nothing leaks. */
  int64_t before = dl_mem_current();
  for (int n = 1; n <= 5; n++) {
    dl_mem_fail_after(n);
    assert_int_equal(dl_optim_create(&o, &d, ps, 1), DL_ERR_NOMEM);
    dl_mem_fail_after(0);
    assert_null(o);
    assert_int_equal(dl_mem_current(), before);
  }
  free_param(&p);
  free_param(&q);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(sgd_plain),
      cmocka_unit_test(sgd_momentum_dampening_weight_decay),
      cmocka_unit_test(sgd_nesterov),
      cmocka_unit_test(adam_with_l2),
      cmocka_unit_test(adamw_decoupled),
      cmocka_unit_test(adam_first_step_by_hand),
      cmocka_unit_test(params_without_grad_or_optimizer_are_skipped),
      cmocka_unit_test(state_round_trip_and_reset),
      cmocka_unit_test(state_names_follow_pytorch),
      cmocka_unit_test(many_params_match_the_element_formulas),
      cmocka_unit_test(bad_step_count_updates_nothing),
      cmocka_unit_test(kind_names_round_trip),
      cmocka_unit_test(bad_settings_are_refused),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
