/* The layer framework: the kinds' names, default descriptions, the
 * validation helpers and the parameter/buffer bookkeeping every kind
 * shares. Dispatch to the per-kind files is nn/kinds/registry.c's, so that
 * this file depends on no kind. */
#include "nn/layer.h"

#include "nn/kinds/kinds.h"
#include "core/mem.h"
#include "core/threads.h"
#include "numerics/half.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* The registry's names (layer_kinds.h), indexed by kind; the dispatch
 * table is nn/kinds/registry.c's. */
#define KIND_NAME(id, name, ops, init, check, keys) [id] = name,
static const char *const kind_names[] = {DL_LAYER_KINDS(KIND_NAME)};
#undef KIND_NAME
_Static_assert(sizeof kind_names / sizeof kind_names[0] == DL_LAYER_KIND_COUNT,
               "every layer kind has one name");

const char *dl_layer_kind_name(dl_layer_kind k) {
  return (unsigned)k < DL_LAYER_KIND_COUNT ? kind_names[k] : "unknown";
}

dl_status dl_layer_kind_parse(const char *name, dl_layer_kind *out) {
  if (!name) return dl_fail(DL_ERR_INVALID, "layer kind: no name given");
  for (int k = 0; k < DL_LAYER_KIND_COUNT; k++) {
    if (strcmp(name, kind_names[k]) == 0) {
      *out = (dl_layer_kind)k;
      return DL_OK;
    }
  }
  char known[256];
  size_t n = 0;
  for (int k = 0; k < DL_LAYER_KIND_COUNT && n < sizeof known; k++)
    n += (size_t)snprintf(known + n, sizeof known - n, k ? ", %s" : "%s", kind_names[k]);
  return dl_fail(DL_ERR_INVALID, "unknown layer kind '%s'; expected one of: %s", name, known);
}

dl_layer_desc dl_layer_default(dl_layer_kind kind) {
  dl_layer_desc d;
  memset(&d, 0, sizeof d);
  d.kind = kind;
  d.stride = kind == DL_MAXPOOL2D ? 0 : 1; /* PyTorch: pool stride = kernel */
  d.bias = true;
  d.affine = true;
  d.track_running_stats = true;
  d.eps = 1e-5f;
  d.momentum = 0.1f;
  d.p = kind == DL_ATTENTION ? 0.0f : 0.5f; /* nn.MultiheadAttention: dropout=0.0 */
  d.heads = 1;                              /* attention: num_heads (scenarios must give it) */
  return d;
}

const char *dl_layer_label_of(const char *prefix, dl_layer_kind kind, char *buf, size_t len) {
  size_t n = strlen(prefix);
  if (n > 0 && prefix[n - 1] == '.') n--;
  if (n == 0) snprintf(buf, len, "%s layer", dl_layer_kind_name(kind));
  else snprintf(buf, len, "layer %.*s (%s)", (int)n, prefix, dl_layer_kind_name(kind));
  return buf;
}

const char *dl_layer_label(const dl_layer *l, char *buf, size_t len) {
  return dl_layer_label_of(l->prefix, l->desc.kind, buf, len);
}

dl_status dl_layer_need_positive(const char *label, const char *field, int64_t v) {
  if (v > 0) return DL_OK;
  return dl_fail(DL_ERR_INVALID, "%s: %s must be > 0, got %lld", label, field, (long long)v);
}

dl_status dl_layer_check_window(const char *label, const dl_layer_desc *d, int min_stride) {
  DL_TRY(dl_layer_need_positive(label, "kernel", d->kernel));
  if (min_stride > 0) DL_TRY(dl_layer_need_positive(label, "stride", d->stride));
  if (d->stride < 0)
    return dl_fail(DL_ERR_INVALID, "%s: stride must be >= 0 (0 = kernel), got %d", label,
                   d->stride);
  if (d->padding < 0)
    return dl_fail(DL_ERR_INVALID, "%s: padding must be >= 0, got %d", label, d->padding);
  return DL_OK;
}

dl_status dl_layer_check_norm(const char *label, const dl_layer_desc *d, bool has_momentum) {
  DL_TRY(dl_layer_need_positive(label, "num_features", d->out));
  if (!(d->eps > 0.0f) || !isfinite(d->eps))
    return dl_fail(DL_ERR_INVALID, "%s: eps must be a finite number > 0, got %g", label,
                   (double)d->eps);
  if (has_momentum && !(d->momentum >= 0.0f && d->momentum <= 1.0f))
    return dl_fail(DL_ERR_INVALID, "%s: momentum must be in [0, 1], got %g", label,
                   (double)d->momentum);
  return DL_OK;
}

dl_status dl_layer_check_dy_shape(const dl_layer *l, const dl_tensor *dy, int ndim,
                                  const int64_t *shape) {
  dl_tensor want = {.dtype = DL_F32, .ndim = ndim};
  memcpy(want.shape, shape, (size_t)ndim * sizeof *shape);
  if (dy->dtype == DL_F32 && dl_tensor_same_shape(&want, dy)) return DL_OK;
  char name[128], a[96], b[96];
  return dl_fail(DL_ERR_INVALID, "%s: output gradient is %s; expected %s",
                 dl_layer_label(l, name, sizeof name), dl_tensor_describe(dy, a, sizeof a),
                 dl_tensor_describe(&want, b, sizeof b));
}

dl_status dl_layer_check_dy(const dl_layer *l, const dl_tensor *dy, const dl_tensor *like) {
  return dl_layer_check_dy_shape(l, dy, like->ndim, like->shape);
}

dl_status dl_layer_no_check(const char *label, const dl_layer_desc *d) {
  (void)label, (void)d;
  return DL_OK;
}

dl_status dl_layer_no_init(dl_layer *l, uint64_t seed) {
  (void)l, (void)seed;
  return DL_OK;
}

void dl_layer_release(dl_layer *l) {
  for (int i = 0; i < DL_LAYER_MAX_SAVED; i++) dl_tensor_free(&l->saved[i]);
  if (l->ops && l->ops->release) l->ops->release(l);
}

void dl_layer_destroy(dl_layer *l) {
  dl_layer_release(l);
  for (int i = 0; i < l->nparams; i++) {
    dl_tensor_free(&l->params[i].value);
    dl_tensor_free(&l->params[i].grad);
  }
  for (int i = 0; i < l->nbuffers; i++) dl_tensor_free(&l->buffers[i].value);
  if (l->ops && l->ops->destroy) l->ops->destroy(l);
  memset(l, 0, sizeof *l);
}

static dl_status full_name(char *dst, const dl_layer *l, const char *suffix) {
  int n = snprintf(dst, DL_NAME_MAX, "%s%s", l->prefix, suffix);
  if (n < 0 || n >= DL_NAME_MAX)
    return dl_fail(DL_ERR_INVALID, "name '%s%s' is longer than %d characters", l->prefix, suffix,
                   DL_NAME_MAX - 1);
  return DL_OK;
}

dl_status dl_layer_add_param(dl_layer *l, const char *suffix, int ndim, const int64_t *shape) {
  if (l->nparams >= (int)(sizeof l->params / sizeof l->params[0]))
    return dl_fail(DL_ERR_INTERNAL, "layer %s: more than %d parameters", l->prefix,
                   DL_LAYER_MAX_PARAMS);
  dl_param *p = &l->params[l->nparams];
  memset(p, 0, sizeof *p);
  DL_TRY(full_name(p->name, l, suffix));
  DL_TRY(dl_tensor_alloc(&p->value, DL_F32, ndim, shape, p->name));
  dl_status s = dl_tensor_alloc(&p->grad, DL_F32, ndim, shape, p->name);
  if (s != DL_OK) {
    dl_tensor_free(&p->value);
    return s;
  }
  p->requires_grad = true;
  p->in_optimizer = true;
  l->nparams++;
  return DL_OK;
}

dl_status dl_layer_add_buffer(dl_layer *l, const char *suffix, dl_dtype dt, int ndim,
                              const int64_t *shape) {
  if (l->nbuffers >= (int)(sizeof l->buffers / sizeof l->buffers[0]))
    return dl_fail(DL_ERR_INTERNAL, "layer %s: more than 3 buffers", l->prefix);
  dl_buffer *b = &l->buffers[l->nbuffers];
  memset(b, 0, sizeof *b);
  DL_TRY(full_name(b->name, l, suffix));
  DL_TRY(dl_tensor_alloc(&b->value, dt, ndim, shape, b->name));
  l->nbuffers++;
  return DL_OK;
}

void dl_param_accumulate(dl_param *p, const float *g) {
  if (!p->requires_grad) return;
  float *grad = dl_f32(&p->grad);
  int64_t n = p->grad.numel;
  if (!p->has_grad) {
    memcpy(grad, g, (size_t)n * sizeof *grad);
  } else {
    for (int64_t i = 0; i < n; i++) grad[i] += g[i];
  }
  p->has_grad = true;
}

dl_status dl_param_grad_target(dl_param *p, dl_tensor *scratch, float **out) {
  *out = NULL;
  if (!p->requires_grad) return DL_OK;
  *out = dl_f32(&p->grad);
  if (p->has_grad) {
    DL_TRY(dl_tensor_alloc_uninit(scratch, DL_F32, p->grad.ndim, p->grad.shape, p->name));
    *out = dl_f32(scratch);
  }
  return DL_OK;
}

void dl_param_grad_commit(dl_param *p, float *g, const dl_tensor *scratch, int half) {
  dl_round_inplace(g, p->grad.numel, half);
  if (scratch->data) dl_param_accumulate(p, g);
  p->has_grad = true;
}

dl_stream dl_param_init_stream(const dl_param *p, uint64_t seed) {
  char purpose[DL_NAME_MAX + 8];
  snprintf(purpose, sizeof purpose, "init/%s", p->name);
  return dl_stream_make(seed, purpose, NULL, 0);
}

void dl_layer_init_uniform(dl_layer *l, uint64_t seed, float bound) {
  for (int i = 0; i < l->nparams; i++) {
    dl_param *p = &l->params[i];
    dl_stream s = dl_param_init_stream(p, seed);
    dl_stream_uniform_range(&s, 0, -bound, bound, dl_f32(&p->value), p->value.numel);
  }
}

dl_status dl_layer_affine_forward(const dl_ctx *ctx, const float *x, const float *w,
                                  const float *bias, int64_t rows, int64_t in, int64_t out,
                                  float *y) {
  dl_status s = bias ? dl_backend_sgemm_bias(ctx->backend, false, true, rows, out, in, x, in, w, in,
                                             bias, y, out)
                     : dl_backend_sgemm(ctx->backend, false, true, rows, out, in, x, in, w, in,
                                        0.0f, y, out);
  if (s == DL_OK) dl_round_inplace(y, rows * out, (int)ctx->autocast);
  return s;
}

void dl_layer_keep_saved(dl_layer *l, const dl_ctx *ctx, dl_tensor *a, dl_tensor *b) {
  if (ctx->grad_enabled) {
    l->saved[0] = *a;
    l->saved[1] = *b;
  } else {
    dl_tensor_free(a);
    dl_tensor_free(b);
  }
}
