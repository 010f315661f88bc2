/* The model: one top-level sequence plus flat, state-dict-ordered views of
 * every parameter and buffer, nested residual bodies included. */
#include "nn/model.h"

#include "core/mem.h"
#include "nn/seq.h"

#include <string.h>

struct dl_model {
  dl_seq seq;
  dl_param **params;
  int nparams;
  dl_buffer **buffers;
  int nbuffers;
};

/* Visits layers in state-dict order: a layer's own tensors, then its body. */
static void collect(dl_seq *s, dl_model *m, bool store) {
  for (int i = 0; i < s->n; i++) {
    dl_layer *l = &s->layers[i];
    for (int p = 0; p < l->nparams; p++) {
      if (store) m->params[m->nparams] = &l->params[p];
      m->nparams++;
    }
    for (int b = 0; b < l->nbuffers; b++) {
      if (store) m->buffers[m->nbuffers] = &l->buffers[b];
      m->nbuffers++;
    }
    if (l->body) collect(l->body, m, store);
  }
}

static dl_status index_tensors(dl_model *m) {
  collect(&m->seq, m, false);
  m->params = dl_mem_alloc((size_t)m->nparams * sizeof *m->params, "parameter list");
  m->buffers = dl_mem_alloc((size_t)m->nbuffers * sizeof *m->buffers, "buffer list");
  if (!m->params || !m->buffers) return DL_ERR_NOMEM;
  m->nparams = m->nbuffers = 0;
  collect(&m->seq, m, true);
  return DL_OK;
}

dl_status dl_model_create(dl_model **out, const dl_layer_desc *layers, int n, uint64_t seed) {
  *out = NULL;
  if (n < 1 || !layers)
    return dl_fail(DL_ERR_INVALID, "model: needs at least one layer, got %d", n);
  dl_model *m = dl_mem_alloc(sizeof *m, "model");
  if (!m) return DL_ERR_NOMEM;
  uint64_t next_rng_id = 0;
  dl_status s = dl_seq_init(&m->seq, layers, n, "", &next_rng_id, seed);
  if (s == DL_OK) s = index_tensors(m);
  if (s != DL_OK) {
    dl_model_destroy(m);
    return s;
  }
  *out = m;
  return DL_OK;
}

void dl_model_destroy(dl_model *m) {
  if (!m) return;
  dl_seq_destroy(&m->seq);
  dl_mem_free(m->params);
  dl_mem_free(m->buffers);
  dl_mem_free(m);
}

dl_status dl_model_forward(dl_model *m, const dl_ctx *ctx, const dl_tensor *x,
                           const dl_tensor **out) {
  if (!x || dl_tensor_empty(x))
    return dl_fail(DL_ERR_INVALID, "model forward: the input tensor is empty");
  return dl_seq_forward(&m->seq, ctx, x, out);
}

dl_status dl_model_backward(dl_model *m, const dl_ctx *ctx, const dl_tensor *dout) {
  /* The model's input needs no gradient: layer 0 skips computing dx. */
  return dl_seq_backward(&m->seq, ctx, dout, NULL);
}

void dl_model_release(dl_model *m) { dl_seq_release(&m->seq); }

void dl_model_zero_grad(dl_model *m) {
  for (int i = 0; i < m->nparams; i++) m->params[i]->has_grad = false;
}

static void set_training(dl_seq *s, bool training) {
  for (int i = 0; i < s->n; i++) {
    s->layers[i].training = training;
    if (s->layers[i].body) set_training(s->layers[i].body, training);
  }
}

void dl_model_train(dl_model *m, bool training) { set_training(&m->seq, training); }

int dl_model_num_params(const dl_model *m) { return m->nparams; }

dl_param *dl_model_param(dl_model *m, int i) {
  return i >= 0 && i < m->nparams ? m->params[i] : NULL;
}

int dl_model_num_buffers(const dl_model *m) { return m->nbuffers; }

dl_buffer *dl_model_buffer(dl_model *m, int i) {
  return i >= 0 && i < m->nbuffers ? m->buffers[i] : NULL;
}

dl_param *dl_model_find_param(dl_model *m, const char *name) {
  for (int i = 0; i < m->nparams; i++)
    if (strcmp(m->params[i]->name, name) == 0) return m->params[i];
  return NULL;
}

dl_buffer *dl_model_find_buffer(dl_model *m, const char *name) {
  for (int i = 0; i < m->nbuffers; i++)
    if (strcmp(m->buffers[i]->name, name) == 0) return m->buffers[i];
  return NULL;
}

int dl_model_num_layers(const dl_model *m) { return m->seq.n; }

dl_layer *dl_model_layer(dl_model *m, int i) {
  return i >= 0 && i < m->seq.n ? &m->seq.layers[i] : NULL;
}
