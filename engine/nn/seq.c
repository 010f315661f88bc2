/* A sequence of layers: runs them in order, keeps the activations that
 * backward needs (grad mode) or drops each as soon as it was consumed
 * (no-grad mode), and runs backward in reverse, freeing as it goes as
 * PyTorch's autograd frees saved tensors. */
#include "nn/seq.h"

#include "core/mem.h"

#include <stdio.h>
#include <string.h>

/* The rng id of the last layer in l's subtree: residual bodies number
 * their layers after their own (residual.c), so the next sibling continues
 * after the deepest one. */
static uint64_t last_rng_id(const dl_layer *l) {
  if (!l->body || l->body->n == 0) return l->rng_id;
  return last_rng_id(&l->body->layers[l->body->n - 1]);
}

dl_status dl_seq_init(dl_seq *s, const dl_layer_desc *descs, int n, const char *prefix,
                      uint64_t *next_rng_id, uint64_t seed) {
  memset(s, 0, sizeof *s);
  if (n < 0) return dl_fail(DL_ERR_INVALID, "sequence '%s': %d layers", prefix, n);
  s->layers = dl_mem_alloc((size_t)n * sizeof *s->layers, "layer list");
  s->acts = dl_mem_alloc((size_t)n * sizeof *s->acts, "activation list");
  if (!s->layers || !s->acts) {
    dl_seq_destroy(s);
    return DL_ERR_NOMEM;
  }
  for (int i = 0; i < n; i++) {
    char child[DL_NAME_MAX];
    int len = snprintf(child, sizeof child, "%s%d.", prefix, i);
    dl_status st = DL_ERR_INVALID;
    if (len < 0 || (size_t)len >= sizeof child)
      dl_fail(st, "layer %s%d: name is longer than %d characters", prefix, i, DL_NAME_MAX - 1);
    else st = dl_layer_init(&s->layers[i], &descs[i], child, *next_rng_id, seed);
    if (st != DL_OK) {
      dl_seq_destroy(s);
      return st;
    }
    s->n = i + 1;
    *next_rng_id = last_rng_id(&s->layers[i]) + 1;
  }
  return DL_OK;
}

void dl_seq_destroy(dl_seq *s) {
  dl_seq_release(s);
  for (int i = 0; i < s->n; i++) dl_layer_destroy(&s->layers[i]);
  dl_mem_free(s->layers);
  dl_mem_free(s->acts);
  memset(s, 0, sizeof *s);
}

void dl_seq_release(dl_seq *s) {
  for (int i = 0; i < s->n; i++) {
    dl_tensor_free(&s->acts[i]);
    dl_layer_release(&s->layers[i]);
  }
  s->input = NULL;
}

/* "3 (linear)", "2.body.0 (conv2d)": the hook and error name of a layer. */
static const char *layer_name(const dl_layer *l, char *buf, size_t len) {
  size_t n = strlen(l->prefix);
  if (n > 0 && l->prefix[n - 1] == '.') n--;
  snprintf(buf, len, "%.*s (%s)", (int)n, l->prefix, dl_layer_kind_name(l->desc.kind));
  return buf;
}

/* Prefixes "layer 3 (linear): " to the failure of layer `name`, unless the
 * layer already named itself that way. */
static dl_status layer_failed(dl_status st, const char *name) {
  char label[DL_NAME_MAX + 48];
  int n = snprintf(label, sizeof label, "layer %s: ", name);
  if (n > 0 && strncmp(dl_last_error(), label, (size_t)n) == 0) return st;
  return dl_fail_context(st, "%s", label);
}

dl_status dl_seq_forward(dl_seq *s, const dl_ctx *ctx, const dl_tensor *x, const dl_tensor **out) {
  dl_seq_release(s);
  if (ctx->autocast != DL_F32 && ctx->autocast != DL_F16 && ctx->autocast != DL_BF16)
    return dl_fail(DL_ERR_INVALID, "autocast must be float32 (off), float16 or bfloat16, got %s",
                   dl_dtype_name(ctx->autocast));
  const dl_tensor *cur = x;
  for (int i = 0; i < s->n; i++) {
    dl_layer *l = &s->layers[i];
    char name[DL_NAME_MAX + 32];
    dl_status st = l->ops->forward(l, ctx, cur, &s->acts[i]);
    if (st != DL_OK) {
      dl_tensor_free(&s->acts[i]);
      dl_seq_release(s);
      return layer_failed(st, layer_name(l, name, sizeof name));
    }
    if (ctx->hooks.forward)
      ctx->hooks.forward(ctx->hooks.user, layer_name(l, name, sizeof name), &s->acts[i]);
    if (!ctx->grad_enabled) {
      /* Nothing will run backward: the input of this layer is dead. */
      if (i > 0) dl_tensor_free(&s->acts[i - 1]);
      dl_layer_release(l);
    }
    cur = &s->acts[i];
  }
  /* No input kept in no-grad mode is how backward knows it has no graph. */
  s->input = ctx->grad_enabled ? x : NULL;
  *out = s->n > 0 ? &s->acts[s->n - 1] : x;
  return DL_OK;
}

static dl_status check_backward(const dl_seq *s, const dl_tensor *dy) {
  if (!s->input || s->n == 0 || dl_tensor_empty(&s->acts[s->n - 1]))
    return dl_fail(DL_ERR_INVALID, "backward without a grad-mode forward: run forward with "
                                   "grad_enabled before backward (once per forward)");
  const dl_tensor *y = &s->acts[s->n - 1];
  if (dy->dtype != DL_F32 || !dl_tensor_same_shape(dy, y)) {
    char a[96], b[96];
    return dl_fail(DL_ERR_INVALID, "backward: gradient %s does not match output %s",
                   dl_tensor_describe(dy, a, sizeof a), dl_tensor_describe(y, b, sizeof b));
  }
  return DL_OK;
}

dl_status dl_seq_backward(dl_seq *s, const dl_ctx *ctx, const dl_tensor *dy, dl_tensor *dx) {
  DL_TRY(check_backward(s, dy));
  dl_tensor grad = {0}; /* owned gradient w.r.t. the current layer's output */
  const dl_tensor *cur = dy;
  dl_status st = DL_OK;
  for (int i = s->n - 1; i >= 0 && st == DL_OK; i--) {
    dl_layer *l = &s->layers[i];
    char name[DL_NAME_MAX + 32];
    layer_name(l, name, sizeof name);
    if (ctx->hooks.backward) ctx->hooks.backward(ctx->hooks.user, name, cur);
    const dl_tensor *xin = i > 0 ? &s->acts[i - 1] : s->input;
    dl_tensor next = {0};
    if (l->ops->backward_in_place && cur == &grad && i > 0) { /* dx over dy (layer.h) */
      next = grad;
      grad = (dl_tensor){0};
      cur = &next;
    }
    st = l->ops->backward(l, ctx, xin, &s->acts[i], cur, i > 0 ? &next : dx);
    if (st != DL_OK) {
      dl_tensor_free(&next);
      layer_failed(st, name);
    }
    dl_tensor_free(&grad);
    grad = next;
    cur = &grad;
    /* Saved tensors are dead once used; the model output stays readable. */
    dl_layer_release(l);
    if (i < s->n - 1) dl_tensor_free(&s->acts[i]);
  }
  dl_tensor_free(&grad);
  if (st != DL_OK) dl_seq_release(s);
  s->input = NULL;
  return st;
}
