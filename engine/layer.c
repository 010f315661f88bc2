/* The layer framework: kind names, default descriptions, validation,
 * dispatch to the per-kind files under cpu/, and the parameter/buffer
 * bookkeeping every kind shares. */
#include "layer.h"

#include "cpu/kinds.h"
#include "mem.h"
#include "seq.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static const char *const kind_names[DL_LAYER_KIND_COUNT] = {
    [DL_LINEAR] = "linear",
    [DL_CONV2D] = "conv2d",
    [DL_BATCHNORM1D] = "batchnorm1d",
    [DL_BATCHNORM2D] = "batchnorm2d",
    [DL_LAYERNORM] = "layernorm",
    [DL_DROPOUT] = "dropout",
    [DL_RELU] = "relu",
    [DL_GELU] = "gelu",
    [DL_TANH] = "tanh",
    [DL_MAXPOOL2D] = "maxpool2d",
    [DL_GLOBALAVGPOOL] = "globalavgpool",
    [DL_FLATTEN] = "flatten",
    [DL_EMBEDDING] = "embedding",
    [DL_RESIDUAL] = "residual",
};

const char *dl_layer_kind_name(dl_layer_kind k) {
  if ((unsigned)k >= DL_LAYER_KIND_COUNT) return "unknown";
  return kind_names[k];
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
  return dl_fail(DL_ERR_INVALID, "unknown layer kind '%s'; expected one of: %s", name,
                 known);
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
  d.p = 0.5f;
  return d;
}

/* "layer 3 (linear)" or "layer 2.body.0 (conv2d)"; "linear layer" when the
 * layer stands alone (empty prefix). */
static const char *layer_label(const char *prefix, dl_layer_kind kind, char *buf,
                               size_t len) {
  size_t n = strlen(prefix);
  if (n > 0 && prefix[n - 1] == '.') n--;
  if (n == 0)
    snprintf(buf, len, "%s layer", dl_layer_kind_name(kind));
  else
    snprintf(buf, len, "layer %.*s (%s)", (int)n, prefix, dl_layer_kind_name(kind));
  return buf;
}

const char *dl_layer_label(const dl_layer *l, char *buf, size_t len) {
  return layer_label(l->prefix, l->desc.kind, buf, len);
}

static dl_status need_positive(const char *label, const char *field, int64_t v) {
  if (v > 0) return DL_OK;
  return dl_fail(DL_ERR_INVALID, "%s: %s must be > 0, got %lld", label, field,
                 (long long)v);
}

static dl_status validate_window(const char *label, const dl_layer_desc *d) {
  DL_TRY(need_positive(label, "kernel", d->kernel));
  if (d->kind == DL_CONV2D) DL_TRY(need_positive(label, "stride", d->stride));
  if (d->stride < 0)
    return dl_fail(DL_ERR_INVALID, "%s: stride must be >= 0 (0 = kernel), got %d",
                   label, d->stride);
  if (d->padding < 0)
    return dl_fail(DL_ERR_INVALID, "%s: padding must be >= 0, got %d", label, d->padding);
  if (d->kind == DL_MAXPOOL2D && d->padding > d->kernel / 2)
    return dl_fail(DL_ERR_INVALID,
                   "%s: padding %d exceeds half the kernel size %d (PyTorch refuses it)",
                   label, d->padding, d->kernel);
  return DL_OK;
}

static dl_status validate_norm(const char *label, const dl_layer_desc *d) {
  DL_TRY(need_positive(label, "num_features", d->out));
  if (!(d->eps > 0.0f) || !isfinite(d->eps))
    return dl_fail(DL_ERR_INVALID, "%s: eps must be a finite number > 0, got %g", label,
                   (double)d->eps);
  if (d->kind != DL_LAYERNORM && !(d->momentum >= 0.0f && d->momentum <= 1.0f))
    return dl_fail(DL_ERR_INVALID, "%s: momentum must be in [0, 1], got %g", label,
                   (double)d->momentum);
  return DL_OK;
}

static dl_status validate_desc(const char *label, const dl_layer_desc *d) {
  switch (d->kind) {
  case DL_LINEAR:
    DL_TRY(need_positive(label, "in_features", d->in));
    return need_positive(label, "out_features", d->out);
  case DL_CONV2D:
    DL_TRY(need_positive(label, "in_channels", d->in));
    DL_TRY(need_positive(label, "out_channels", d->out));
    return validate_window(label, d);
  case DL_MAXPOOL2D: return validate_window(label, d);
  case DL_BATCHNORM1D:
  case DL_BATCHNORM2D:
  case DL_LAYERNORM: return validate_norm(label, d);
  case DL_DROPOUT:
    if (!(d->p >= 0.0f && d->p < 1.0f))
      return dl_fail(DL_ERR_INVALID, "%s: p must be in [0, 1), got %g", label,
                     (double)d->p);
    return DL_OK;
  case DL_EMBEDDING:
    DL_TRY(need_positive(label, "num_embeddings", d->in));
    return need_positive(label, "embedding_dim", d->out);
  case DL_RESIDUAL:
    if (d->nbody < 1 || !d->body)
      return dl_fail(DL_ERR_INVALID, "%s: the body needs at least one layer, got %d",
                     label, d->nbody);
    return DL_OK;
  case DL_RELU:
  case DL_GELU:
  case DL_TANH:
  case DL_GLOBALAVGPOOL:
  case DL_FLATTEN: return DL_OK;
  case DL_LAYER_KIND_COUNT: break;
  }
  return dl_fail(DL_ERR_INVALID, "%s: unknown layer kind %d", label, (int)d->kind);
}

static const dl_layer_ops *ops_for(dl_layer_kind k) {
  switch (k) {
  case DL_LINEAR: return &dl_linear_ops;
  case DL_CONV2D: return &dl_conv2d_ops;
  case DL_BATCHNORM1D:
  case DL_BATCHNORM2D: return &dl_batchnorm_ops;
  case DL_LAYERNORM: return &dl_layernorm_ops;
  case DL_DROPOUT: return &dl_dropout_ops;
  case DL_RELU: return &dl_relu_ops;
  case DL_GELU: return &dl_gelu_ops;
  case DL_TANH: return &dl_tanh_ops;
  case DL_MAXPOOL2D: return &dl_maxpool2d_ops;
  case DL_GLOBALAVGPOOL: return &dl_globalavgpool_ops;
  case DL_FLATTEN: return &dl_flatten_ops;
  case DL_EMBEDDING: return &dl_embedding_ops;
  case DL_RESIDUAL: return &dl_residual_ops;
  case DL_LAYER_KIND_COUNT: break;
  }
  return NULL;
}

/* The residual body's layers take rng ids rng_id+1, rng_id+2, ... in
 * order, so ids stay distinct across the model (seq.c continues after the
 * last one). */
static dl_status init_body(dl_layer *l, uint64_t seed) {
  char prefix[DL_NAME_MAX];
  int n = snprintf(prefix, sizeof prefix, "%sbody.", l->prefix);
  if (n < 0 || (size_t)n >= sizeof prefix)
    return dl_fail(DL_ERR_INVALID, "residual %s: body name prefix is longer than %d",
                   l->prefix, DL_NAME_MAX - 1);
  l->body = dl_mem_alloc(sizeof *l->body, "residual body");
  if (!l->body) return DL_ERR_NOMEM;
  uint64_t next = l->rng_id + 1;
  return dl_seq_init(l->body, l->desc.body, l->desc.nbody, prefix, &next, seed);
}

static dl_status init_kind(dl_layer *l, uint64_t seed) {
  switch (l->desc.kind) {
  case DL_LINEAR: return dl_linear_init(l, seed);
  case DL_CONV2D: return dl_conv2d_init(l, seed);
  case DL_BATCHNORM1D:
  case DL_BATCHNORM2D: return dl_batchnorm_init(l, seed);
  case DL_LAYERNORM: return dl_layernorm_init(l, seed);
  case DL_EMBEDDING: return dl_embedding_init(l, seed);
  case DL_RESIDUAL: return init_body(l, seed);
  default: return DL_OK;
  }
}

dl_status dl_layer_init(dl_layer *l, const dl_layer_desc *d, const char *prefix,
                        uint64_t rng_id, uint64_t seed) {
  char label[DL_NAME_MAX + 32];
  memset(l, 0, sizeof *l);
  if (!prefix) prefix = "";
  layer_label(prefix, d->kind, label, sizeof label);
  if (strlen(prefix) >= DL_NAME_MAX)
    return dl_fail(DL_ERR_INVALID, "%s: name prefix is longer than %d characters", label,
                   DL_NAME_MAX - 1);
  DL_TRY(validate_desc(label, d));
  l->desc = *d;
  strcpy(l->prefix, prefix);
  l->rng_id = rng_id;
  l->training = true;
  l->ops = ops_for(d->kind);
  dl_status s = init_kind(l, seed);
  if (s != DL_OK) {
    dl_layer_destroy(l);
    return s;
  }
  return DL_OK;
}

void dl_layer_release(dl_layer *l) {
  for (int i = 0; i < 2; i++) dl_tensor_free(&l->saved[i]);
  if (l->body) dl_seq_release(l->body);
}

void dl_layer_destroy(dl_layer *l) {
  dl_layer_release(l);
  for (int i = 0; i < l->nparams; i++) {
    dl_tensor_free(&l->params[i].value);
    dl_tensor_free(&l->params[i].grad);
  }
  for (int i = 0; i < l->nbuffers; i++) dl_tensor_free(&l->buffers[i].value);
  if (l->body) {
    dl_seq_destroy(l->body);
    dl_mem_free(l->body);
  }
  memset(l, 0, sizeof *l);
}

static dl_status full_name(char *dst, const dl_layer *l, const char *suffix) {
  int n = snprintf(dst, DL_NAME_MAX, "%s%s", l->prefix, suffix);
  if (n < 0 || n >= DL_NAME_MAX)
    return dl_fail(DL_ERR_INVALID, "name '%s%s' is longer than %d characters", l->prefix,
                   suffix, DL_NAME_MAX - 1);
  return DL_OK;
}

dl_status dl_layer_add_param(dl_layer *l, const char *suffix, int ndim,
                             const int64_t *shape) {
  if (l->nparams >= (int)(sizeof l->params / sizeof l->params[0]))
    return dl_fail(DL_ERR_INTERNAL, "layer %s: more than 2 parameters", l->prefix);
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

void dl_layer_keep_saved(dl_layer *l, const dl_ctx *ctx, dl_tensor *a, dl_tensor *b) {
  if (ctx->grad_enabled) {
    l->saved[0] = *a;
    l->saved[1] = *b;
  } else {
    dl_tensor_free(a);
    dl_tensor_free(b);
  }
}
