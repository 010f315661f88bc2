/* Finite-difference gradient check of one layer (header-only, for tests).
 *
 * The loss is L = sum_j y_j * dy_j with a fixed pseudo-random dy in
 * [-1, -0.25] u [0.25, 1] (never zero, so every output matters). The layer's
 * backward gives dL/dx and dL/dW; the numeric derivative of each element v
 * is a Richardson-extrapolated central difference:
 *   D(s) = (L(v+s) - L(v-s)) / (s+ + s-)   (s+, s-: the steps float32 took)
 *   numeric = (4 D(h/2) - D(h)) / 3,        h = 2e-2 * max(1, |v|),
 * with L summed in double.
 *
 * Why these choices. Truncation: D(s) = L' + s^2/6 L''' + O(s^4); the
 * extrapolation cancels the s^2 term, leaving O(h^4) ~ 1e-8 (plain central
 * differences leave ~1e-4 absolute on BatchNorm with a batch of 8, whose
 * third derivative is large). Rounding: the forward runs in float32, so an
 * output carries about 6e-8 * |y| of rounding error; an output that does
 * not depend on v is bitwise the same in every run (the engine is
 * deterministic) and cancels exactly, so only the outputs that do add
 * noise, about 6e-8 * |y| / (h/2) * 4/3 ~ 1e-5 each (the larger h keeps
 * this noise, which the extrapolation amplifies, small). Expect max errors
 * of about 1e-5 to 1e-3, so tests assert < 1e-2: ten times the expected
 * error, far below the O(1) error a wrong formula gives.
 *
 * Error measure: |analytic - numeric| / max(GC_ATOL_FLOOR, |numeric|) with
 * GC_ATOL_FLOOR = 1e-2: the gradients in these tests are O(0.1..10), and a
 * near-zero gradient is judged by its absolute error against that scale
 * rather than by a meaningless relative one.
 *
 * Caveats for callers: keep inputs more than h away from kinks (ReLU at 0)
 * and max-pool windows free of near-ties (values spaced > 2h apart), or a
 * difference straddles the kink. Layers with randomness (dropout) get the
 * same ctx in every forward, so the mask is the same each time.
 *
 * The layer is built with seed 1234 and an empty prefix (param names
 * "weight", "bias"); ctx: grad on, autocast off, seed 7, step 3, row numbers
 * as sample ids. gc_last_report says which element was worst, or what
 * failed (the result is then INFINITY). */
#ifndef DL_TESTS_GRADCHECK_H
#define DL_TESTS_GRADCHECK_H

#include "nn/layer.h"
#include "core/mem.h"
#include "numerics/philox.h"
#include "nn/seq.h"
#include "core/threads.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#define GC_ATOL_FLOOR 1e-2
#define GC_REL_STEP 2e-2f

static char gc_last_report[512];

/* Reproducible uniform values in [lo, hi) for a float32 tensor. */
static inline void gc_fill_uniform(dl_tensor *t, uint64_t seed, float lo, float hi) {
  dl_stream s = dl_stream_make(seed, "gradcheck/fill", NULL, 0);
  dl_stream_uniform_range(&s, 0, lo, hi, dl_f32(t), t->numel);
}

static inline dl_ctx gc_ctx(void) {
  dl_ctx c;
  memset(&c, 0, sizeof c);
  c.grad_enabled = true;
  c.autocast = DL_F32;
  c.seed = 7;
  c.step = 3;
  c.sample_ids = NULL;
  return c;
}

static inline void gc_set_training(dl_layer *l, bool training) {
  l->training = training;
  if (!l->body) return;
  for (int i = 0; i < l->body->n; i++) gc_set_training(&l->body->layers[i], training);
}

/* L = sum(y * dy) in double, after one forward (which is then released). */
static inline bool gc_loss(dl_layer *l, const dl_ctx *ctx, const dl_tensor *x, const dl_tensor *dy,
                           double *loss) {
  dl_tensor y = {0};
  if (l->ops->forward(l, ctx, x, &y) != DL_OK) {
    snprintf(gc_last_report, sizeof gc_last_report, "forward failed: %s", dl_last_error());
    dl_layer_release(l);
    return false;
  }
  double sum = 0.0;
  for (int64_t j = 0; j < y.numel; j++) sum += (double)dl_f32(&y)[j] * (double)dl_f32(dy)[j];
  dl_tensor_free(&y);
  dl_layer_release(l);
  *loss = sum;
  return true;
}

/* D(s) for element *v: central difference over the steps actually taken. */
static inline bool gc_central(dl_layer *l, const dl_ctx *ctx, const dl_tensor *x,
                              const dl_tensor *dy, float *v, float s, double *d) {
  const float orig = *v, up = orig + s, down = orig - s;
  double lp = 0.0, lm = 0.0;
  *v = up;
  bool ok = gc_loss(l, ctx, x, dy, &lp);
  *v = down;
  ok = ok && gc_loss(l, ctx, x, dy, &lm);
  *v = orig;
  *d = (lp - lm) / ((double)up - (double)down);
  return ok;
}

/* max(worst, the error of `analytic` against the numeric derivative over
 * every element of `v`), an input or a parameter of l. */
static inline double gc_check_tensor(dl_layer *l, const dl_ctx *ctx, const dl_tensor *x,
                                     const dl_tensor *dy, dl_tensor *v, const float *analytic,
                                     const char *what, double worst) {
  float *data = dl_f32(v);
  for (int64_t i = 0; i < v->numel; i++) {
    const float h = GC_REL_STEP * fmaxf(1.0f, fabsf(data[i]));
    double d1, d2;
    if (!gc_central(l, ctx, x, dy, &data[i], h, &d1) ||
        !gc_central(l, ctx, x, dy, &data[i], 0.5f * h, &d2))
      return INFINITY;
    const double numeric = (4.0 * d2 - d1) / 3.0;
    double err = fabs((double)analytic[i] - numeric) / fmax(GC_ATOL_FLOOR, fabs(numeric));
    if (isnan(err)) err = INFINITY; /* a NaN must not compare as small */
    if (!(err <= worst)) {
      worst = err;
      snprintf(gc_last_report, sizeof gc_last_report,
               "worst: %s[%lld] analytic %.7g numeric %.7g error %.3g", what, (long long)i,
               (double)analytic[i], numeric, err);
    }
  }
  return worst;
}

/* dy: never zero, in [-1, -0.25] u [0.25, 1]. */
static inline bool gc_make_dy(const dl_tensor *y, dl_tensor *dy) {
  if (dl_tensor_alloc(dy, DL_F32, y->ndim, y->shape, "gradcheck dy") != DL_OK) return false;
  dl_stream s = dl_stream_make(99, "gradcheck/dy", NULL, 0);
  dl_stream_uniform_range(&s, 0, -0.75f, 0.75f, dl_f32(dy), dy->numel);
  for (int64_t j = 0; j < dy->numel; j++) {
    float *g = &dl_f32(dy)[j];
    *g += *g < 0.0f ? -0.25f : 0.25f;
  }
  return true;
}

/* Forward + backward once; copies out dx and every param grad. */
static inline bool gc_analytic(dl_layer *l, const dl_ctx *ctx, const dl_tensor *x, dl_tensor *dy,
                               dl_tensor *dx, dl_tensor grads[DL_LAYER_MAX_PARAMS]) {
  dl_tensor y = {0};
  if (l->ops->forward(l, ctx, x, &y) != DL_OK) {
    snprintf(gc_last_report, sizeof gc_last_report, "forward failed: %s", dl_last_error());
    dl_layer_release(l);
    return false;
  }
  bool ok = gc_make_dy(&y, dy);
  if (ok) {
    ok = l->ops->backward(l, ctx, x, &y, dy, x->dtype == DL_F32 ? dx : NULL) == DL_OK;
    if (!ok)
      snprintf(gc_last_report, sizeof gc_last_report, "backward failed: %s", dl_last_error());
  }
  for (int p = 0; ok && p < l->nparams; p++)
    ok = dl_tensor_clone(&grads[p], &l->params[p].grad, "gradcheck grad") == DL_OK;
  dl_tensor_free(&y);
  dl_layer_release(l);
  return ok;
}

/* prepare (may be NULL) edits the freshly initialised layer first, e.g.
 * biases the default init leaves at 0, so that their use shows. */
static inline double gc_layer_max_error_with(const dl_layer_desc *d, const dl_tensor *x,
                                             bool training, void (*prepare)(dl_layer *)) {
  dl_layer l;
  dl_tensor xv = {0}, dy = {0}, dx = {0}, grads[DL_LAYER_MAX_PARAMS] = {{0}};
  dl_ctx ctx = gc_ctx();
  double worst = INFINITY;
  gc_last_report[0] = '\0';
  if (dl_layer_init(&l, d, "", 0, 1234) != DL_OK) {
    snprintf(gc_last_report, sizeof gc_last_report, "init failed: %s", dl_last_error());
    return INFINITY;
  }
  if (prepare) prepare(&l);
  gc_set_training(&l, training);
  /* A private copy: the check perturbs x in place. */
  if (dl_tensor_clone(&xv, x, "gradcheck x") == DL_OK &&
      gc_analytic(&l, &ctx, &xv, &dy, &dx, grads)) {
    worst = 0.0;
    if (xv.dtype == DL_F32)
      worst = gc_check_tensor(&l, &ctx, &xv, &dy, &xv, dl_f32(&dx), "x", worst);
    for (int p = 0; p < l.nparams; p++) {
      if (!l.params[p].requires_grad) continue;
      worst = gc_check_tensor(&l, &ctx, &xv, &dy, &l.params[p].value, dl_f32(&grads[p]),
                              l.params[p].name, worst);
    }
  }
  dl_tensor_free(&xv);
  dl_tensor_free(&dy);
  dl_tensor_free(&dx);
  for (int p = 0; p < DL_LAYER_MAX_PARAMS; p++) dl_tensor_free(&grads[p]);
  dl_layer_destroy(&l);
  return worst;
}

static inline double gc_layer_max_error(const dl_layer_desc *d, const dl_tensor *x, bool training) {
  return gc_layer_max_error_with(d, x, training, NULL);
}

/* Makes the n-th allocation of init, forward and backward fail, for n = 1,
 * 2, ... until a pass succeeds. Returns how many passes failed, all with
 * DL_ERR_NOMEM and without leaking; -1 (gc_last_report says why) if a pass
 * failed otherwise or leaked. grads_exist: parameters already hold gradients,
 * so backward accumulates (a second backward's scratch path). */
static inline int gc_nomem_failures(const dl_layer_desc *d, const char *prefix, const dl_tensor *x,
                                    const dl_tensor *dy, dl_dtype autocast, bool grads_exist) {
  const int64_t base = dl_mem_current();
  for (int64_t n = 1; n < 1000; n++) {
    dl_layer l;
    dl_tensor y = {0}, dx = {0};
    dl_ctx ctx = gc_ctx();
    ctx.autocast = autocast;
    dl_mem_fail_after(n);
    dl_status s = dl_layer_init(&l, d, prefix, 0, 1);
    if (s == DL_OK) {
      s = l.ops->forward(&l, &ctx, x, &y);
      for (int i = 0; s == DL_OK && grads_exist && i < l.nparams; i++) l.params[i].has_grad = true;
      if (s == DL_OK) s = l.ops->backward(&l, &ctx, x, &y, dy, &dx);
      dl_tensor_free(&y);
      dl_tensor_free(&dx);
      dl_layer_destroy(&l);
    }
    dl_mem_fail_after(0);
    if (dl_mem_current() != base || (s != DL_OK && s != DL_ERR_NOMEM)) {
      snprintf(gc_last_report, sizeof gc_last_report,
               "allocation %lld failing: status %d, %lld bytes leaked: %s", (long long)n, (int)s,
               (long long)(dl_mem_current() - base), dl_last_error());
      return -1;
    }
    if (s == DL_OK) return (int)(n - 1);
  }
  snprintf(gc_last_report, sizeof gc_last_report, "no pass succeeded in 1000 tries");
  return -1;
}

/* Backward with an output gradient one element longer in its last dim than
 * the forward's output, then one of another dtype: both must be refused
 * (DL_ERR_INVALID, "output gradient is"), leaving dx empty, never read past
 * dy's end. False (gc_last_report says why) otherwise. */
static inline bool gc_refuses_misshapen_dy(const dl_layer_desc *d, const dl_tensor *x) {
  dl_layer l;
  dl_tensor y = {0}, dx = {0}, wide = {0}, ints = {0};
  dl_ctx ctx = gc_ctx();
  bool ok = dl_layer_init(&l, d, "", 0, 1) == DL_OK && l.ops->forward(&l, &ctx, x, &y) == DL_OK;
  int64_t shape[DL_MAX_DIMS];
  memcpy(shape, y.shape, sizeof shape);
  shape[y.ndim - 1]++;
  ok = ok && dl_tensor_alloc(&wide, DL_F32, y.ndim, shape, "wide dy") == DL_OK &&
       dl_tensor_alloc(&ints, DL_I32, y.ndim, y.shape, "int dy") == DL_OK;
  const dl_tensor *bad[2] = {&wide, &ints};
  for (int i = 0; ok && i < 2; i++) {
    dl_status s = l.ops->backward(&l, &ctx, x, &y, bad[i], &dx);
    if (s != DL_ERR_INVALID || !strstr(dl_last_error(), "output gradient is") ||
        !dl_tensor_empty(&dx)) {
      snprintf(gc_last_report, sizeof gc_last_report, "dy %d: status %d, dx %s: %s", i, (int)s,
               dl_tensor_empty(&dx) ? "empty" : "allocated", dl_last_error());
      ok = false;
    }
  }
  dl_tensor_free(&dx);
  dl_tensor_free(&y);
  dl_tensor_free(&wide);
  dl_tensor_free(&ints);
  dl_layer_destroy(&l);
  return ok;
}

static inline bool gc_same_bytes(const dl_tensor *a, const dl_tensor *b, const char *what) {
  if (a->numel == b->numel && memcmp(a->data, b->data, dl_tensor_bytes(a)) == 0) return true;
  snprintf(gc_last_report, sizeof gc_last_report, "%s differs between 1 and 2 threads", what);
  return false;
}

/* Forward and backward of d on x and dy (layer seed `seed`, names prefix),
 * once with 1 and once with 2 kernel threads: true if the output, the input
 * gradient, every parameter gradient and every buffer have the same bits
 * (the engine's threads.h contract); else gc_last_report names the first. */
static inline bool gc_same_bits_1_and_2_threads(const dl_layer_desc *d, const char *prefix,
                                                uint64_t seed, const dl_ctx *ctx,
                                                const dl_tensor *x, const dl_tensor *dy) {
  dl_layer l[2];
  dl_tensor y[2] = {{0}, {0}}, dx[2] = {{0}, {0}};
  int made = 0;
  bool ok = true;
  for (int t = 0; ok && t < 2; t++) {
    dl_status s = dl_set_num_threads(t + 1);
    if (!s) s = dl_layer_init(&l[t], d, prefix, 0, seed);
    if (!s) made++;
    if (!s) s = l[t].ops->forward(&l[t], ctx, x, &y[t]);
    if (!s) s = l[t].ops->backward(&l[t], ctx, x, &y[t], dy, &dx[t]);
    if (s) {
      snprintf(gc_last_report, sizeof gc_last_report, "%d threads: %s", t + 1, dl_last_error());
      ok = false;
    }
  }
  dl_set_num_threads(1);
  ok = ok && gc_same_bytes(&y[0], &y[1], "the output") &&
       gc_same_bytes(&dx[0], &dx[1], "the input gradient");
  for (int i = 0; ok && i < l[0].nparams; i++)
    ok = gc_same_bytes(&l[0].params[i].grad, &l[1].params[i].grad, l[0].params[i].name);
  for (int i = 0; ok && i < l[0].nbuffers; i++)
    ok = gc_same_bytes(&l[0].buffers[i].value, &l[1].buffers[i].value, l[0].buffers[i].name);
  for (int t = 0; t < 2; t++) {
    dl_tensor_free(&y[t]);
    dl_tensor_free(&dx[t]);
    if (t < made) dl_layer_destroy(&l[t]);
  }
  dl_threads_shutdown();
  return ok;
}

#endif
