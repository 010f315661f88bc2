/* Elementwise activations: ReLU, GELU (erf and tanh forms), Tanh, with the
 * formulas and operation order of PyTorch's CPU kernels, using the
 * engine's own erf/tanh/exp (fmath.h) for bitwise-portable results.
 *
 * Under autocast these run in the half dtype of their input, so their
 * outputs are rounded to it. */
#include "nn/kinds/kinds.h"

#include "numerics/cpu.h"
#include "numerics/fmath.h"
#include "numerics/half.h"
#include "core/mem.h"
#include "core/threads.h"

#include <stdio.h>
#include <string.h>

/* Constants of PyTorch's GELU kernels, rounded to float as they use them. */
static const float kSqrt1_2 = 0.70710678118654752440f;     /* 1/sqrt(2) */
static const float kInvSqrt2Pi = 0.39894228040143267794f;  /* 1/sqrt(2*pi) */
static const float kSqrt2OverPi = 0.79788456080286535588f; /* sqrt(2/pi) */
static const float kKappa = 0.044715f;

enum { ACT_GRAIN = 4096 };

/* ---- the functions and their derivatives ---- */

/* x < 0 ? 0 : x keeps -0 and NaN as they are, like torch.relu. */
static float relu_f(float x) { return x < 0.0f ? 0.0f : x; }
/* Gradient from the output, 0 at x == 0, like threshold_backward(dy, y, 0). */
static float relu_grad(float dy, float y) { return y > 0.0f ? dy : 0.0f; }

/* GELU, erf form: x * Phi(x), Phi(x) = 0.5 (1 + erf(x / sqrt 2)); its
 * derivative Phi(x) + x * phi(x), phi(x) = exp(-x^2 / 2) / sqrt(2 pi).
 * Computed a block at a time (gelu_erf_loop, gelu_erf_grad_loop). */

static float gelu_tanh_f(float x) {
  float inner = kSqrt2OverPi * (x + kKappa * (x * x * x));
  return 0.5f * x * (1.0f + dl_tanhf(inner));
}
static float gelu_tanh_grad(float dy, float x) {
  float x_sq = x * x;
  float inner = kSqrt2OverPi * (x + kKappa * (x_sq * x));
  float t = dl_tanhf(inner);
  float left = 0.5f * x, right = 1.0f + t;
  float left_derivative = 0.5f * right;
  float right_derivative = left * (1.0f - t * t) * (kSqrt2OverPi * (1.0f + 3.0f * kKappa * x_sq));
  return dy * (left_derivative + right_derivative);
}

static float tanh_f(float x) { return dl_tanhf(x); }
/* From the output: 1 - tanh^2, like tanh_backward(dy, y). */
static float tanh_grad(float dy, float y) { return dy * (1.0f - y * y); }

/* ---- elementwise jobs: one tight loop per kind ---- */

typedef enum act_kind { ACT_RELU, ACT_GELU_ERF, ACT_GELU_TANH, ACT_TANH } act_kind;

typedef struct act_job {
  act_kind kind;
  const float *in; /* forward: x; backward: x or y, as the kind needs */
  const float *dy;
  float *out;
  /* GELU (erf form): erf(x / sqrt 2), written by a forward in grad mode and
   * read by the backward, which then need not compute it again; NULL: none. */
  float *erf;
} act_job;

/* Blocks of a fixed length: -O2 vectorizes them whole (ReLU's select and
 * mask), where a loop of unknown length would stay scalar. */
enum { ACT_BLOCK = 16 };

static void relu_loop(const float *restrict x, float *restrict y, int64_t n) {
  int64_t i = 0;
  for (; i + ACT_BLOCK <= n; i += ACT_BLOCK)
    for (int t = 0; t < ACT_BLOCK; t++) y[i + t] = relu_f(x[i + t]);
  for (; i < n; i++) y[i] = relu_f(x[i]);
}

/* The backward loops take g holding dy and leave dx in it (in place: the
 * activation's backward may be handed dx == dy, layer.h). */
static void relu_grad_loop(float *restrict g, const float *restrict y, int64_t n) {
  int64_t i = 0;
  for (; i + ACT_BLOCK <= n; i += ACT_BLOCK)
    for (int t = 0; t < ACT_BLOCK; t++) g[i + t] = relu_grad(g[i + t], y[i + t]);
  for (; i < n; i++) g[i] = relu_grad(g[i], y[i]);
}

/* GELU (erf form) over blocks: erf and exp of a block at once
 * (dl_erff_n, dl_expf_n: the scalar functions' bits, several lanes at a
 * time), then the float expressions of the formulas above. */
enum { GELU_BLOCK = 256 };

/* erf(x[i] / sqrt 2) for i < m into e. */
static void gelu_erf_block(const float *restrict x, float *restrict e, int64_t m) {
  for (int64_t i = 0; i < m; i++) e[i] = x[i] * kSqrt1_2;
  dl_erff_n(e, e, m);
}

/* keep: where the erf values go for the backward, or NULL. */
static void gelu_erf_loop(const float *restrict x, float *restrict y, float *restrict keep,
                          int64_t n) {
  float scratch[GELU_BLOCK];
  for (int64_t i0 = 0; i0 < n; i0 += GELU_BLOCK) {
    int64_t m = n - i0 < GELU_BLOCK ? n - i0 : GELU_BLOCK;
    float *e = keep ? keep + i0 : scratch;
    gelu_erf_block(x + i0, e, m);
    for (int64_t i = 0; i < m; i++) y[i0 + i] = x[i0 + i] * 0.5f * (1.0f + e[i]);
  }
}

/* kept: the forward's erf values, or NULL (then computed here). */
static void gelu_erf_grad_loop(float *restrict dy_dx, const float *restrict x,
                               const float *restrict kept, int64_t n) {
  float scratch[GELU_BLOCK], g[GELU_BLOCK];
  for (int64_t i0 = 0; i0 < n; i0 += GELU_BLOCK) {
    int64_t m = n - i0 < GELU_BLOCK ? n - i0 : GELU_BLOCK;
    const float *e = kept ? kept + i0 : scratch;
    if (!kept) gelu_erf_block(x + i0, scratch, m);
    for (int64_t i = 0; i < m; i++) g[i] = x[i0 + i] * x[i0 + i] * -0.5f;
    dl_expf_n(g, g, m);
    for (int64_t i = 0; i < m; i++) {
      float cdf = 0.5f * (1.0f + e[i]);
      float pdf = kInvSqrt2Pi * g[i];
      dy_dx[i0 + i] = dy_dx[i0 + i] * (cdf + x[i0 + i] * pdf);
    }
  }
}

DL_AVX512_CLONES static void act_forward_range(void *p, int64_t begin, int64_t end) {
  const act_job *j = p;
  const float *restrict x = j->in + begin;
  float *restrict y = j->out + begin;
  const int64_t n = end - begin;
  switch (j->kind) {
  case ACT_RELU: relu_loop(x, y, n); break;
  case ACT_GELU_ERF: gelu_erf_loop(x, y, j->erf ? j->erf + begin : NULL, n); break;
  case ACT_GELU_TANH:
    for (int64_t i = 0; i < n; i++) y[i] = gelu_tanh_f(x[i]);
    break;
  case ACT_TANH:
    for (int64_t i = 0; i < n; i++) y[i] = tanh_f(x[i]);
    break;
  }
}

/* dx over the range: dy copied into it first unless the two are one
 * buffer (in place), then each kind's loop in place. */
DL_AVX512_CLONES static void act_backward_range(void *p, int64_t begin, int64_t end) {
  const act_job *j = p;
  const float *restrict s = j->in + begin;
  float *restrict dx = j->out + begin;
  const int64_t n = end - begin;
  if (j->dy != j->out) memcpy(dx, j->dy + begin, (size_t)n * sizeof *dx);
  switch (j->kind) {
  case ACT_RELU: relu_grad_loop(dx, s, n); break;
  case ACT_GELU_ERF: gelu_erf_grad_loop(dx, s, j->erf ? j->erf + begin : NULL, n); break;
  case ACT_GELU_TANH:
    for (int64_t i = 0; i < n; i++) dx[i] = gelu_tanh_grad(dx[i], s[i]);
    break;
  case ACT_TANH:
    for (int64_t i = 0; i < n; i++) dx[i] = tanh_grad(dx[i], s[i]);
    break;
  }
}

static dl_status act_check(const dl_layer *l, const dl_tensor *t, const char *what) {
  char name[128], shape[96];
  if (t->dtype != DL_F32)
    return dl_fail(DL_ERR_INVALID, "%s: %s is %s; expected float32",
                   dl_layer_label(l, name, sizeof name), what,
                   dl_tensor_describe(t, shape, sizeof shape));
  return DL_OK;
}

static dl_status act_forward(dl_layer *l, const dl_ctx *ctx, const dl_tensor *x, dl_tensor *y,
                             act_kind kind) {
  char name[128];
  DL_TRY(act_check(l, x, "input"));
  dl_status s = dl_tensor_alloc_uninit(y, DL_F32, x->ndim, x->shape, "activation output");
  if (s != DL_OK) return dl_fail_context(s, "%s: ", dl_layer_label(l, name, sizeof name));
  act_job job = {.kind = kind, .in = dl_f32(x), .out = dl_f32(y)};
  dl_tensor_free(&l->saved[0]);
  if (kind == ACT_GELU_ERF && ctx->grad_enabled) {
    /* Without the memory the backward computes erf again: same bits. */
    if (dl_tensor_alloc_uninit(&l->saved[0], DL_F32, x->ndim, x->shape, "gelu erf of the input") ==
        DL_OK)
      job.erf = dl_f32(&l->saved[0]);
    else dl_clear_error();
  }
  dl_parallel_for(x->numel, ACT_GRAIN, act_forward_range, &job);
  dl_round_inplace(dl_f32(y), y->numel, (int)ctx->autocast);
  return DL_OK;
}

/* `saved` is the forward input or output, whichever grad() takes. */
static dl_status act_backward(dl_layer *l, const dl_tensor *saved, const dl_tensor *dy,
                              dl_tensor *dx, act_kind kind) {
  char name[128];
  DL_TRY(act_check(l, saved, "saved activation"));
  DL_TRY(dl_layer_check_dy(l, dy, saved));
  if (!dx) return DL_OK;
  if (dx != dy) {
    dl_status s = dl_tensor_alloc_uninit(dx, DL_F32, dy->ndim, dy->shape,
                                         "activation input gradient");
    if (s != DL_OK) return dl_fail_context(s, "%s: ", dl_layer_label(l, name, sizeof name));
  }
  act_job job = {.kind = kind, .in = dl_f32(saved), .dy = dl_f32(dy), .out = dl_f32(dx)};
  if (kind == ACT_GELU_ERF && !dl_tensor_empty(&l->saved[0]) &&
      dl_tensor_same_shape(&l->saved[0], saved))
    job.erf = dl_f32(&l->saved[0]);
  dl_parallel_for(dy->numel, ACT_GRAIN, act_backward_range, &job);
  return DL_OK;
}

/* ---- the ops tables: forward and backward side by side ---- */

static dl_status relu_forward(dl_layer *l, const dl_ctx *ctx, const dl_tensor *x, dl_tensor *y) {
  return act_forward(l, ctx, x, y, ACT_RELU);
}
static dl_status relu_backward(dl_layer *l, const dl_ctx *ctx, const dl_tensor *x,
                               const dl_tensor *y, const dl_tensor *dy, dl_tensor *dx) {
  (void)ctx;
  (void)x;
  return act_backward(l, y, dy, dx, ACT_RELU);
}

static dl_status gelu_forward(dl_layer *l, const dl_ctx *ctx, const dl_tensor *x, dl_tensor *y) {
  return act_forward(l, ctx, x, y, l->desc.gelu_tanh ? ACT_GELU_TANH : ACT_GELU_ERF);
}
static dl_status gelu_backward(dl_layer *l, const dl_ctx *ctx, const dl_tensor *x,
                               const dl_tensor *y, const dl_tensor *dy, dl_tensor *dx) {
  (void)ctx;
  (void)y;
  return act_backward(l, x, dy, dx, l->desc.gelu_tanh ? ACT_GELU_TANH : ACT_GELU_ERF);
}

static dl_status tanh_forward(dl_layer *l, const dl_ctx *ctx, const dl_tensor *x, dl_tensor *y) {
  return act_forward(l, ctx, x, y, ACT_TANH);
}
static dl_status tanh_backward(dl_layer *l, const dl_ctx *ctx, const dl_tensor *x,
                               const dl_tensor *y, const dl_tensor *dy, dl_tensor *dx) {
  (void)ctx;
  (void)x;
  return act_backward(l, y, dy, dx, ACT_TANH);
}

const dl_layer_ops dl_relu_ops = {.forward = relu_forward,
                                  .backward = relu_backward,
                                  .backward_in_place = true};
const dl_layer_ops dl_gelu_ops = {.forward = gelu_forward,
                                  .backward = gelu_backward,
                                  .backward_in_place = true};
const dl_layer_ops dl_tanh_ops = {.forward = tanh_forward,
                                  .backward = tanh_backward,
                                  .backward_in_place = true};
