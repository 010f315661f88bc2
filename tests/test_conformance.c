/* Conformance with PyTorch: the engine against reference results that
 * fixtures/pytorch/make_reference.py computed with torch (float32, one
 * thread, deterministic algorithms) and committed as HDF5.
 *
 *   layers.h5        forward and backward of each layer kind and loss, and
 *                    of a pre-LayerNorm transformer block and a tiny GPT
 *                    written as the engine composes them
 *   train_*.h5       20 training steps of an MLP (SGD/Adam/AdamW) and a CNN
 *                    (SGD momentum) with BatchNorm, dropout (Philox masks
 *                    shared with the script) and gradient clipping
 *
 * The models load PyTorch's own state dicts (strict), so the key names and
 * shapes are checked on the way.
 *
 * Tolerance everywhere: |engine - torch| <= 1e-6 + 1e-5 |torch| per element.
 * Both sides compute in float32 with different but fixed summation orders
 * (blocked GEMM and double accumulators here, vectorised kernels in torch),
 * so each reduction differs by a few ulp (~1e-7 relative); 20 optimizer steps
 * amplify that by at most ~10x on these small, well-conditioned models. A
 * wrong formula or default (momentum, eps, biased variance, smoothing,
 * clipping) moves results by far more than 1e-5. */
#define _POSIX_C_SOURCE 200809L

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "optim/clip.h"
#include "gpt_model.h"
#include "nn/loss.h"
#include "nn/model.h"
#include "optim/optim.h"
#include "io/state_dict.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define REF_DIR DL_SOURCE_DIR "/fixtures/pytorch/"
#define LAYERS REF_DIR "layers.h5"

static const double RTOL = 1e-5, ATOL = 1e-6;

/* ---- comparison ------------------------------------------------------------ */

/* Collects mismatches; keeps the first message. */
typedef struct verdict {
  int failures;
  char first[640];
  double worst;            /* largest |engine - torch| / allowed seen: the margin */
  double max_abs, max_rel; /* largest |engine - torch|, and relative where |torch| >= 1e-2 */
} verdict;

static void note(verdict *v, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void note(verdict *v, const char *fmt, ...) {
  if (v->failures++ == 0) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(v->first, sizeof v->first, fmt, ap);
    va_end(ap);
  }
}

/* numpy.isclose with want as the reference; non-finite values must agree
 * exactly (both NaN, or the same infinity). */
static bool close_enough(verdict *v, const char *what, const float *got, const float *want,
                         int64_t n, double rtol, double atol) {
  int64_t bad = 0, first = -1;
  double max_abs = 0.0;
  for (int64_t i = 0; i < n; i++) {
    double g = got[i], w = want[i], d = fabs(g - w), allowed = atol + rtol * fabs(w);
    bool ok = isfinite(w) ? isfinite(g) && d <= allowed : (isnan(w) ? isnan(g) : g == w);
    if (isfinite(d) && d > max_abs) max_abs = d;
    if (isfinite(d) && d > v->max_abs) v->max_abs = d;
    if (isfinite(d) && fabs(w) >= 1e-2 && d / fabs(w) > v->max_rel) v->max_rel = d / fabs(w);
    if (isfinite(d) && d / allowed > v->worst) v->worst = d / allowed;
    if (!ok && bad++ == 0) first = i;
  }
  if (bad == 1 && n == 1)
    note(v, "%s: engine %.9g, torch %.9g, outside rtol %g atol %g", what, (double)got[0],
         (double)want[0], rtol, atol);
  else if (bad)
    note(v,
         "%s: %lld of %lld values outside rtol %g atol %g; first at %lld: engine %.9g, "
         "torch %.9g; max abs diff %.3g",
         what, (long long)bad, (long long)n, rtol, atol, (long long)first, (double)got[first],
         (double)want[first], max_abs);
  return bad == 0;
}

static bool same_shape(verdict *v, const char *what, const dl_tensor *got, const dl_tensor *want) {
  if (got->ndim == want->ndim && got->numel == want->numel &&
      memcmp(got->shape, want->shape, (size_t)got->ndim * sizeof got->shape[0]) == 0)
    return true;
  char a[96], b[96];
  note(v, "%s: engine %s, torch %s", what, dl_tensor_describe(got, a, sizeof a),
       dl_tensor_describe(want, b, sizeof b));
  return false;
}

static void compare(verdict *v, const char *what, const dl_tensor *got, const dl_tensor *want) {
  if (!want) {
    note(v, "%s: no reference in the fixture", what);
    return;
  }
  if (!same_shape(v, what, got, want)) return;
  if (want->dtype == DL_I64 && got->dtype == DL_I64) {
    if (memcmp(got->data, want->data, dl_tensor_bytes(want)) != 0)
      note(v, "%s: integer values differ (engine %lld, torch %lld first)", what,
           (long long)((int64_t *)got->data)[0], (long long)((int64_t *)want->data)[0]);
    return;
  }
  if (got->dtype != DL_F32 || want->dtype != DL_F32) {
    note(v, "%s: dtypes %s and %s", what, dl_dtype_name(got->dtype), dl_dtype_name(want->dtype));
    return;
  }
  close_enough(v, what, dl_f32(got), dl_f32(want), want->numel, RTOL, ATOL);
}

static void assert_verdict(const verdict *v, const char *what) {
  print_message("%s: largest difference is %.3g of the tolerance\n", what, v->worst);
  if (v->failures) {
    print_error("%d mismatch(es) with PyTorch; first: %s\n", v->failures, v->first);
    fail();
  }
}

/* ---- reading the fixtures ----------------------------------------------------- */

static void read_group(const char *path, const char *group, dl_state_dict *sd) {
  dl_status s = dl_state_read(path, group, sd);
  if (s != DL_OK) print_error("%s\n", dl_last_error());
  assert_int_equal(s, DL_OK);
}

static const dl_tensor *need(const dl_state_dict *sd, const char *name) {
  const dl_tensor *t = dl_state_dict_find(sd, name);
  if (!t) print_error("fixture has no dataset '%s'\n", name);
  assert_non_null(t);
  return t;
}

/* A numeric attribute of object `obj` in the file, or `fallback`. */
static double attr(const char *path, const char *obj, const char *name, double fallback) {
  hid_t f;
  assert_int_equal(dl_h5_open_read(path, &f), DL_OK);
  double value = fallback;
  if (H5Aexists_by_name(f, obj, name, H5P_DEFAULT) > 0) {
    hid_t a = H5Aopen_by_name(f, obj, name, H5P_DEFAULT, H5P_DEFAULT);
    assert_true(a >= 0 && H5Aread(a, H5T_NATIVE_DOUBLE, &value) >= 0);
    H5Aclose(a);
  }
  H5Fclose(f);
  return value;
}

/* int64 labels or ids (PyTorch's dtype) as the engine's int32. */
static void to_i32(const dl_tensor *src, dl_tensor *dst, int64_t first, int64_t count) {
  int64_t inner = src->ndim > 1 ? src->numel / src->shape[0] : 1;
  int64_t shape[DL_MAX_DIMS];
  memcpy(shape, src->shape, sizeof shape);
  shape[0] = count;
  assert_int_equal(src->dtype, DL_I64);
  assert_int_equal(dl_tensor_alloc(dst, DL_I32, src->ndim, shape, "labels"), DL_OK);
  const int64_t *from = (const int64_t *)src->data + first * inner;
  for (int64_t i = 0; i < count * inner; i++) dl_i32(dst)[i] = (int32_t)from[i];
}

/* Rows first .. first+count-1 of a float tensor. */
static void rows_of(const dl_tensor *src, dl_tensor *dst, int64_t first, int64_t count) {
  int64_t shape[DL_MAX_DIMS];
  memcpy(shape, src->shape, sizeof shape);
  shape[0] = count;
  assert_int_equal(dl_tensor_alloc(dst, src->dtype, src->ndim, shape, "batch"), DL_OK);
  size_t row = dl_tensor_bytes(src) / (size_t)src->shape[0];
  memcpy(dst->data, (const char *)src->data + (size_t)first * row, (size_t)count * row);
}

static void load_state(dl_model *m, const char *path, const char *group) {
  dl_load_report r;
  dl_status s = dl_model_load_state(m, path, group, true, &r);
  if (s != DL_OK) print_error("%s\n", dl_last_error());
  assert_int_equal(s, DL_OK);
  dl_load_report_free(&r);
}

/* Every entry of a reference state dict against the model's param or buffer
 * of the same name. */
static void compare_state(verdict *v, dl_model *m, const char *path, const char *group,
                          const char *what) {
  dl_state_dict sd;
  read_group(path, group, &sd);
  for (int i = 0; i < sd.n; i++) {
    dl_param *p = dl_model_find_param(m, sd.names[i]);
    dl_buffer *b = dl_model_find_buffer(m, sd.names[i]);
    char label[256];
    snprintf(label, sizeof label, "%s %s", what, sd.names[i]);
    if (!p && !b) note(v, "%s: the engine model has no such entry", label);
    else compare(v, label, p ? &p->value : &b->value, &sd.tensors[i]);
  }
  dl_state_dict_free(&sd);
}

static void compare_grads(verdict *v, dl_model *m, const char *path, const char *group) {
  dl_state_dict sd;
  read_group(path, group, &sd);
  for (int i = 0; i < dl_model_num_params(m); i++) {
    dl_param *p = dl_model_param(m, i);
    char label[256];
    snprintf(label, sizeof label, "grad of %s", p->name);
    if (!p->has_grad) note(v, "%s: the engine computed none", label);
    else compare(v, label, &p->grad, dl_state_dict_find(&sd, p->name));
  }
  if (sd.n != dl_model_num_params(m))
    note(v, "%s: torch has %d gradients, the engine %d params", group, sd.n,
         dl_model_num_params(m));
  dl_state_dict_free(&sd);
}

/* ---- layers ------------------------------------------------------------------ */

typedef struct layer_case {
  const char *name;
  dl_layer_kind kind;
  int64_t in, out;
  int kernel, stride, padding;
} layer_case;

static const layer_case layer_cases[] = {
    {"linear", DL_LINEAR, 5, 4, 0, 0, 0},
    {"conv2d", DL_CONV2D, 3, 4, 3, 2, 1},
    {"batchnorm1d_train", DL_BATCHNORM1D, 0, 4, 0, 0, 0},
    {"batchnorm1d_eval", DL_BATCHNORM1D, 0, 4, 0, 0, 0},
    {"batchnorm1d_3d_train", DL_BATCHNORM1D, 0, 3, 0, 0, 0},
    {"batchnorm1d_3d_eval", DL_BATCHNORM1D, 0, 3, 0, 0, 0},
    {"batchnorm2d_train", DL_BATCHNORM2D, 0, 4, 0, 0, 0},
    {"batchnorm2d_eval", DL_BATCHNORM2D, 0, 4, 0, 0, 0},
    {"layernorm", DL_LAYERNORM, 0, 6, 0, 0, 0},
    {"relu", DL_RELU, 0, 0, 0, 0, 0},
    {"gelu", DL_GELU, 0, 0, 0, 0, 0},
    {"gelu_tanh", DL_GELU, 0, 0, 0, 0, 0},
    {"tanh", DL_TANH, 0, 0, 0, 0, 0},
    {"maxpool2d", DL_MAXPOOL2D, 0, 0, 2, 2, 0},
    {"maxpool2d_pad", DL_MAXPOOL2D, 0, 0, 3, 2, 1},
    {"globalavgpool", DL_GLOBALAVGPOOL, 0, 0, 0, 0, 0},
    {"flatten", DL_FLATTEN, 0, 0, 0, 0, 0},
    {"embedding", DL_EMBEDDING, 10, 4, 0, 0, 0},
    {"dropout", DL_DROPOUT, 0, 0, 0, 0, 0},
    {"residual", DL_RESIDUAL, 0, 0, 0, 0, 0},
    {"attention", DL_ATTENTION, 0, 8, 0, 0, 0},
    {"attention_causal", DL_ATTENTION, 0, 8, 0, 0, 0},
    {"attention_dropout", DL_ATTENTION, 0, 8, 0, 0, 0},
    {"posembed", DL_POSEMBED, 7, 4, 0, 0, 0},
};

/* residual: x + GELU(Linear(LayerNorm(x))), 6 features */
static dl_layer_desc residual_body[3];

static dl_layer_desc desc_of(const layer_case *c) {
  dl_layer_desc d = dl_layer_default(c->kind);
  d.in = c->in;
  d.out = c->out;
  d.kernel = c->kernel;
  d.stride = c->stride;
  d.padding = c->padding;
  char obj[96];
  snprintf(obj, sizeof obj, "/%s", c->name);
  d.gelu_tanh = attr(LAYERS, obj, "gelu_tanh", 0.0) != 0.0;
  d.p = (float)attr(LAYERS, obj, "p", d.p);
  d.heads = (int)attr(LAYERS, obj, "heads", d.heads);
  d.causal = attr(LAYERS, obj, "causal", 0.0) != 0.0;
  if (c->kind == DL_RESIDUAL) {
    residual_body[0] = dl_layer_default(DL_LAYERNORM);
    residual_body[0].out = 6;
    residual_body[1] = dl_layer_default(DL_LINEAR);
    residual_body[1].in = residual_body[1].out = 6;
    residual_body[2] = dl_layer_default(DL_GELU);
    d.body = residual_body;
    d.nbody = 3;
  }
  return d;
}

/* One layer, alone in a model, on the case's input: output, input gradient,
 * parameter gradients and (BatchNorm in training) the running statistics. */
static void run_layer_case(verdict *v, const layer_case *c) {
  char group[96], obj[96];
  snprintf(obj, sizeof obj, "/%s", c->name);
  dl_state_dict ref;
  read_group(LAYERS, obj, &ref);
  dl_layer_desc d = desc_of(c);
  dl_model *m;
  assert_int_equal(dl_model_create(&m, &d, 1, 99), DL_OK);
  dl_model_train(m, attr(LAYERS, obj, "training", 1.0) != 0.0);
  snprintf(group, sizeof group, "%s/state", c->name);
  load_state(m, LAYERS, group);

  const dl_tensor *xr = need(&ref, "x");
  dl_tensor ids = {0};
  if (xr->dtype == DL_I64) to_i32(xr, &ids, 0, xr->shape[0]);
  const dl_tensor *x = xr->dtype == DL_I64 ? &ids : xr;
  const dl_tensor *sample_ids = dl_state_dict_find(&ref, "sample_ids");
  dl_ctx ctx = {.grad_enabled = true,
                .autocast = DL_F32,
                .seed = (uint64_t)attr(LAYERS, obj, "seed", 0.0),
                .step = (int64_t)attr(LAYERS, obj, "step", 0.0),
                .sample_ids = sample_ids ? (const int64_t *)sample_ids->data : NULL};
  dl_layer *l = dl_model_layer(m, 0);
  dl_tensor y = {0}, dx = {0};
  dl_status s = l->ops->forward(l, &ctx, x, &y);
  if (s != DL_OK) print_error("%s: %s\n", c->name, dl_last_error());
  assert_int_equal(s, DL_OK);
  char label[128];
  snprintf(label, sizeof label, "%s output", c->name);
  compare(v, label, &y, need(&ref, "y"));

  const dl_tensor *dxr = dl_state_dict_find(&ref, "dx");
  s = l->ops->backward(l, &ctx, x, &y, need(&ref, "dy"), dxr ? &dx : NULL);
  if (s != DL_OK) print_error("%s: %s\n", c->name, dl_last_error());
  assert_int_equal(s, DL_OK);
  if (dxr) {
    snprintf(label, sizeof label, "%s input gradient", c->name);
    compare(v, label, &dx, dxr);
  }
  snprintf(group, sizeof group, "%s/grad", c->name);
  compare_grads(v, m, LAYERS, group);
  snprintf(group, sizeof group, "%s/state_after", c->name);
  if (c->kind == DL_BATCHNORM1D || c->kind == DL_BATCHNORM2D) {
    if (strstr(c->name, "_train")) compare_state(v, m, LAYERS, group, c->name);
  }
  dl_tensor_free(&y);
  dl_tensor_free(&dx);
  dl_tensor_free(&ids);
  dl_model_destroy(m);
  dl_state_dict_free(&ref);
}

static void layers_match_pytorch(void **state) {
  (void)state;
  verdict v = {0};
  for (size_t i = 0; i < sizeof layer_cases / sizeof *layer_cases; i++) {
    verdict one = {0};
    run_layer_case(&one, &layer_cases[i]);
    print_message("%-22s max abs diff %.3g, max rel diff %.3g, %.3g of the tolerance\n",
                  layer_cases[i].name, one.max_abs, one.max_rel, one.worst);
    if (one.failures) note(&v, "%s", one.first);
    if (one.worst > v.worst) v.worst = one.worst;
  }
  assert_verdict(&v, "layers");
}

/* ---- transformer models ------------------------------------------------------------ */

/* A whole model of the fixture (its state dict as the model's, no
 * nn.Sequential around it) run layer by layer, so that the input gradient of
 * a float input can be compared too: output, input gradient, parameter
 * gradients. */
static void run_model_case(verdict *v, const char *name, const dl_layer_desc *d, int n) {
  char obj[96], group[96], label[128];
  snprintf(obj, sizeof obj, "/%s", name);
  dl_state_dict ref;
  read_group(LAYERS, obj, &ref);
  dl_model *m;
  assert_int_equal(dl_model_create(&m, d, n, 99), DL_OK);
  dl_model_train(m, true);
  snprintf(group, sizeof group, "%s/state", name);
  load_state(m, LAYERS, group);
  const dl_tensor *xr = need(&ref, "x");
  dl_tensor ids = {0};
  if (xr->dtype == DL_I64) to_i32(xr, &ids, 0, xr->shape[0]);
  const dl_tensor *x = xr->dtype == DL_I64 ? &ids : xr;
  dl_ctx ctx = {.grad_enabled = true, .autocast = DL_F32};
  dl_tensor acts[16] = {{0}}, grad = {0};
  assert_true(n <= 16);
  for (int i = 0; i < n; i++) {
    dl_layer *l = dl_model_layer(m, i);
    dl_status s = l->ops->forward(l, &ctx, i ? &acts[i - 1] : x, &acts[i]);
    if (s != DL_OK) print_error("%s: %s\n", name, dl_last_error());
    assert_int_equal(s, DL_OK);
  }
  snprintf(label, sizeof label, "%s output", name);
  compare(v, label, &acts[n - 1], need(&ref, "y"));
  const dl_tensor *dxr = dl_state_dict_find(&ref, "dx");
  assert_int_equal(dl_tensor_clone(&grad, need(&ref, "dy"), "dy"), DL_OK);
  for (int i = n - 1; i >= 0; i--) {
    dl_layer *l = dl_model_layer(m, i);
    dl_tensor next = {0};
    bool want_dx = i > 0 || dxr;
    dl_status s = l->ops->backward(l, &ctx, i ? &acts[i - 1] : x, &acts[i], &grad,
                                   want_dx ? &next : NULL);
    if (s != DL_OK) print_error("%s: %s\n", name, dl_last_error());
    assert_int_equal(s, DL_OK);
    dl_tensor_free(&grad);
    grad = next;
  }
  if (dxr) {
    snprintf(label, sizeof label, "%s input gradient", name);
    compare(v, label, &grad, dxr);
  }
  snprintf(group, sizeof group, "%s/grad", name);
  compare_grads(v, m, LAYERS, group);
  for (int i = 0; i < n; i++) dl_tensor_free(&acts[i]);
  dl_tensor_free(&grad);
  dl_tensor_free(&ids);
  dl_model_destroy(m);
  dl_state_dict_free(&ref);
}

/* One block on float input (its dx too) and the tiny GPT on token ids: the
 * composition of residual, layernorm, attention, linear, gelu, embedding and
 * posembed, loaded from the PyTorch modules' state dicts (strict), so their
 * key names are checked as well. */
static void transformer_models_match_pytorch(void **state) {
  (void)state;
  verdict v = {0};
  dl_layer_desc d[16];
  for (int c = 0; c < 2; c++) {
    verdict one = {0};
    const char *name = c ? "tiny_gpt" : "gpt_block";
    run_model_case(&one, name, d, c ? gpt_model(d, 11, 8, 2, 6, 2) : gpt_block(d, 8, 2));
    print_message("%-22s max abs diff %.3g, max rel diff %.3g, %.3g of the tolerance\n", name,
                  one.max_abs, one.max_rel, one.worst);
    if (one.failures) note(&v, "%s", one.first);
    if (one.worst > v.worst) v.worst = one.worst;
  }
  assert_verdict(&v, "transformer models");
}

/* ---- losses ----------------------------------------------------------------------- */

static void losses_match_pytorch(void **state) {
  (void)state;
  verdict v = {0};
  static const char *ce_cases[] = {"/cross_entropy", "/cross_entropy_sum"};
  for (int i = 0; i < 2; i++) {
    dl_state_dict ref;
    read_group(LAYERS, ce_cases[i], &ref);
    dl_ce_desc d = dl_ce_default();
    d.ignore_index = (int32_t)attr(LAYERS, ce_cases[i], "ignore_index", -100.0);
    d.label_smoothing = (float)attr(LAYERS, ce_cases[i], "label_smoothing", 0.0);
    d.reduction = i == 0 ? DL_REDUCTION_MEAN : DL_REDUCTION_SUM;
    const dl_tensor *target = need(&ref, "target");
    dl_tensor t = {0}, dlogits = {0}, loss_t = {0};
    to_i32(target, &t, 0, target->shape[0]);
    float loss;
    assert_int_equal(dl_cross_entropy(&d, need(&ref, "x"), &t, &loss, NULL, &dlogits), DL_OK);
    assert_int_equal(dl_tensor_alloc(&loss_t, DL_F32, 0, NULL, "loss"), DL_OK);
    dl_f32(&loss_t)[0] = loss;
    compare(&v, ce_cases[i], &loss_t, need(&ref, "y"));
    compare(&v, "cross-entropy gradient", &dlogits, need(&ref, "dx"));
    dl_tensor_free(&t);
    dl_tensor_free(&dlogits);
    dl_tensor_free(&loss_t);
    dl_state_dict_free(&ref);
  }
  dl_state_dict ref;
  read_group(LAYERS, "/mse", &ref);
  dl_tensor dpred = {0}, loss_t = {0};
  float loss;
  assert_int_equal(dl_mse(DL_REDUCTION_MEAN, 1.0f, need(&ref, "x"), need(&ref, "target"), &loss,
                          NULL, &dpred),
                   DL_OK);
  assert_int_equal(dl_tensor_alloc(&loss_t, DL_F32, 0, NULL, "loss"), DL_OK);
  dl_f32(&loss_t)[0] = loss;
  compare(&v, "mse", &loss_t, need(&ref, "y"));
  compare(&v, "mse gradient", &dpred, need(&ref, "dx"));
  dl_tensor_free(&dpred);
  dl_tensor_free(&loss_t);
  dl_state_dict_free(&ref);
  assert_verdict(&v, "losses");
}

/* ---- training traces ------------------------------------------------------------- */

typedef struct trace_case {
  const char *file;
  bool cnn;
  dl_optim_kind optim;
} trace_case;

static int build_mlp(dl_layer_desc *d, float p) {
  d[0] = dl_layer_default(DL_LINEAR);
  d[0].in = 64;
  d[0].out = 32;
  d[0].bias = false;
  d[1] = dl_layer_default(DL_BATCHNORM1D);
  d[1].out = 32;
  d[2] = dl_layer_default(DL_RELU);
  d[3] = dl_layer_default(DL_DROPOUT);
  d[3].p = p;
  d[4] = dl_layer_default(DL_LINEAR);
  d[4].in = 32;
  d[4].out = 10;
  return 5;
}

static int build_cnn(dl_layer_desc *d) {
  d[0] = dl_layer_default(DL_CONV2D);
  d[0].in = 1;
  d[0].out = 4;
  d[0].kernel = 3;
  d[0].padding = 1;
  d[0].bias = false;
  d[1] = dl_layer_default(DL_BATCHNORM2D);
  d[1].out = 4;
  d[2] = dl_layer_default(DL_RELU);
  d[3] = dl_layer_default(DL_MAXPOOL2D);
  d[3].kernel = 2;
  d[4] = dl_layer_default(DL_CONV2D);
  d[4].in = 4;
  d[4].out = 8;
  d[4].kernel = 3;
  d[5] = dl_layer_default(DL_RELU);
  d[6] = dl_layer_default(DL_GLOBALAVGPOOL);
  d[7] = dl_layer_default(DL_LINEAR);
  d[7].in = 8;
  d[7].out = 10;
  return 8;
}

static dl_optim_desc optim_of(const char *path, dl_optim_kind kind) {
  dl_optim_desc o = dl_optim_default(kind);
  o.weight_decay = attr(path, "/", "weight_decay", o.weight_decay);
  o.momentum = attr(path, "/", "momentum", o.momentum);
  o.dampening = attr(path, "/", "dampening", o.dampening);
  o.nesterov = attr(path, "/", "nesterov", 0.0) != 0.0;
  o.beta1 = attr(path, "/", "beta1", o.beta1);
  o.beta2 = attr(path, "/", "beta2", o.beta2);
  o.eps = attr(path, "/", "eps", o.eps);
  return o;
}

static void scalar_at(verdict *v, const char *what, int64_t step, float got,
                      const dl_tensor *want) {
  char label[96];
  snprintf(label, sizeof label, "%s at step %lld", what, (long long)step);
  close_enough(v, label, &got, dl_f32(want) + step, 1, RTOL, ATOL);
}

/* One optimizer step of the trace, as the script's loop: zero_grad,
 * forward, cross-entropy, backward, clip, step. */
static void train_step(verdict *v, dl_model *m, dl_optim *o, const dl_state_dict *ref, int64_t step,
                       int64_t batch, uint64_t seed, float max_norm) {
  dl_tensor xb = {0}, yb = {0}, dlogits = {0};
  rows_of(need(ref, "x"), &xb, step * batch, batch);
  to_i32(need(ref, "y"), &yb, step * batch, batch);
  dl_ctx ctx = {.grad_enabled = true, .autocast = DL_F32, .seed = seed, .step = step};
  const dl_tensor *logits;
  dl_model_zero_grad(m);
  assert_int_equal(dl_model_forward(m, &ctx, &xb, &logits), DL_OK);
  dl_ce_desc ce = dl_ce_default();
  float loss, norm;
  assert_int_equal(dl_cross_entropy(&ce, logits, &yb, &loss, NULL, &dlogits), DL_OK);
  scalar_at(v, "loss", step, loss, need(ref, "loss"));
  assert_int_equal(dl_model_backward(m, &ctx, &dlogits), DL_OK);
  dl_param *params[16];
  int n = dl_model_num_params(m);
  assert_true(n <= 16);
  for (int i = 0; i < n; i++) params[i] = dl_model_param(m, i);
  assert_int_equal(dl_clip_grad_norm(params, n, max_norm, false, &norm), DL_OK);
  scalar_at(v, "grad norm", step, norm, need(ref, "grad_norm"));
  assert_int_equal(dl_optim_step(o, dl_f32(need(ref, "lr"))[step]), DL_OK);
  dl_model_release(m);
  dl_tensor_free(&xb);
  dl_tensor_free(&yb);
  dl_tensor_free(&dlogits);
}

/* Trains as the script did and compares with the trace; `perturb` adds a
 * relative 1e-4 to the reference loss of step 5 (to show the check bites). */
static verdict run_trace(const trace_case *c, bool perturb) {
  char path[512];
  snprintf(path, sizeof path, REF_DIR "%s", c->file);
  dl_state_dict ref;
  dl_status s = dl_state_read(path, "/", &ref);
  if (s != DL_OK) print_error("%s\n", dl_last_error());
  assert_int_equal(s, DL_OK);
  if (perturb) dl_f32(need(&ref, "loss"))[5] *= 1.0001f;

  dl_layer_desc d[8];
  int nl = c->cnn ? build_cnn(d) : build_mlp(d, (float)attr(path, "/", "dropout_p", 0.0));
  dl_model *m;
  assert_int_equal(dl_model_create(&m, d, nl, 12345), DL_OK);
  load_state(m, path, "init");
  dl_optim_desc od = optim_of(path, c->optim);
  dl_param *params[16];
  int np = dl_model_num_params(m);
  for (int i = 0; i < np; i++) params[i] = dl_model_param(m, i);
  dl_optim *o;
  assert_int_equal(dl_optim_create(&o, &od, params, np), DL_OK);

  verdict v = {0};
  int64_t steps = (int64_t)attr(path, "/", "steps", 0.0);
  int64_t batch = (int64_t)attr(path, "/", "batch", 0.0);
  uint64_t seed = (uint64_t)attr(path, "/", "dropout_seed", 0.0);
  float max_norm = (float)attr(path, "/", "max_norm", 0.0);
  assert_true(steps > 0 && batch > 0);
  dl_model_train(m, true);
  for (int64_t step = 0; step < steps; step++)
    train_step(&v, m, o, &ref, step, batch, seed, max_norm);
  compare_state(&v, m, path, "final", "final");

  /* the trained model in eval mode: running statistics, no dropout */
  dl_model_train(m, false);
  dl_ctx ctx = {.grad_enabled = false, .autocast = DL_F32};
  const dl_tensor *logits;
  assert_int_equal(dl_model_forward(m, &ctx, need(&ref, "eval_x"), &logits), DL_OK);
  /* A logit is a sum of terms as large as the largest logits; when they
   * cancel to a small one, their rounding stays: so the absolute tolerance
   * scales with the largest logit. */
  const dl_tensor *want = need(&ref, "eval_logits");
  double scale = 1.0;
  for (int64_t i = 0; i < want->numel; i++) scale = fmax(scale, fabs(dl_f32(want)[i]));
  if (same_shape(&v, "eval logits", logits, want))
    close_enough(&v, "eval logits", dl_f32(logits), dl_f32(want), want->numel, RTOL, ATOL * scale);
  dl_model_release(m);
  dl_optim_destroy(o);
  dl_model_destroy(m);
  dl_state_dict_free(&ref);
  return v;
}

static const trace_case traces[] = {
    {"train_mlp_sgd.h5", false, DL_OPTIM_SGD},
    {"train_mlp_adam.h5", false, DL_OPTIM_ADAM},
    {"train_mlp_adamw.h5", false, DL_OPTIM_ADAMW},
    {"train_cnn_sgd.h5", true, DL_OPTIM_SGD},
};

static void trace_matches(void **state) {
  const trace_case *c = *state;
  verdict v = run_trace(c, false);
  assert_verdict(&v, c->file);
}

/* ---- the checks can fail ------------------------------------------------------------ */

static void a_perturbed_reference_fails(void **state) {
  (void)state;
  /* the helper: 1e-4 relative is outside rtol 1e-5, 1e-6 inside */
  const float want[3] = {1.0f, -2.0f, 0.0f};
  float got[3] = {1.0f, -2.0f, 0.0f};
  verdict v = {0};
  assert_true(close_enough(&v, "same", got, want, 3, RTOL, ATOL));
  got[1] = -2.0f * (1.0f + 1e-6f);
  got[2] = 5e-7f;
  assert_true(close_enough(&v, "within", got, want, 3, RTOL, ATOL));
  got[1] = -2.0f * (1.0f + 1e-4f);
  assert_false(close_enough(&v, "outside", got, want, 3, RTOL, ATOL));
  assert_int_equal(v.failures, 1);
  assert_non_null(strstr(v.first, "first at 1"));
  got[1] = NAN;
  assert_false(close_enough(&v, "nan", got, want, 3, RTOL, ATOL));

  /* a whole trace against a reference whose step-5 loss moved by 1e-4 */
  v = run_trace(&traces[0], true);
  assert_int_equal(v.failures, 1);
  assert_non_null(strstr(v.first, "loss at step 5"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(layers_match_pytorch),
      cmocka_unit_test(transformer_models_match_pytorch),
      cmocka_unit_test(losses_match_pytorch),
      cmocka_unit_test_prestate(trace_matches, (void *)&traces[0]),
      cmocka_unit_test_prestate(trace_matches, (void *)&traces[1]),
      cmocka_unit_test_prestate(trace_matches, (void *)&traces[2]),
      cmocka_unit_test_prestate(trace_matches, (void *)&traces[3]),
      cmocka_unit_test(a_perturbed_reference_fails),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
