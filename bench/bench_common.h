/* What bench_train.c and bench_scaling.c share: the layer descriptions of
 * their models, the training loop, the parameters' digest, the clocks and
 * the fixtures folder. Header-only: each benchmark is one executable from
 * one .c file. */
#ifndef DL_BENCH_COMMON_H
#define DL_BENCH_COMMON_H

#include "data/data.h"
#include "nn/layer.h"
#include "nn/loss.h"
#include "nn/model.h"
#include "optim/optim.h"
#include "data/sampler.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static inline dl_layer_desc bench_linear(int64_t in, int64_t out) {
  dl_layer_desc d = dl_layer_default(DL_LINEAR);
  d.in = in;
  d.out = out;
  return d;
}

static inline dl_layer_desc bench_conv3x3(int64_t in, int64_t out) {
  dl_layer_desc d = dl_layer_default(DL_CONV2D);
  d.in = in;
  d.out = out;
  d.kernel = 3;
  d.padding = 1;
  return d;
}

static inline dl_layer_desc bench_maxpool2(void) {
  dl_layer_desc d = dl_layer_default(DL_MAXPOOL2D);
  d.kernel = 2;
  return d;
}

/* FNV-1a over the bytes of every parameter in state-dict order. */
static inline uint64_t bench_param_digest(dl_model *m) {
  uint64_t h = 14695981039346656037ull;
  for (int i = 0; i < dl_model_num_params(m); i++) {
    const dl_tensor *v = &dl_model_param(m, i)->value;
    const unsigned char *p = v->data;
    for (size_t k = 0; k < dl_tensor_bytes(v); k++) h = (h ^ p[k]) * 1099511628211ull;
  }
  return h;
}

/* ---- training: PyTorch's loop over shuffled epochs, last short batch
 * dropped (DataLoader(shuffle=True, drop_last=True)) ------------------- */

typedef struct bench_trainer {
  dl_model *model;
  dl_optim *optim;
  const dl_dataset *ds;
  dl_batch batch;
  int64_t batch_size;
  int64_t *order; /* this epoch's permutation */
  int64_t pos;    /* next unread position in order */
  int64_t epoch, step;
  uint64_t seed;
  float lr;
  float loss; /* of the last step */
} bench_trainer;

static inline void bench_trainer_free(bench_trainer *t) {
  dl_optim_destroy(t->optim);
  dl_model_destroy(t->model);
  dl_batch_free(&t->batch);
  free(t->order);
  memset(t, 0, sizeof *t);
}

/* The model of `layers` (initialised from seed) and the optimizer od over
 * all its parameters, on ds in batches of batch_size. */
static inline dl_status bench_trainer_init(bench_trainer *t, const char *name,
                                           const dl_layer_desc *layers, int nlayers,
                                           const dl_dataset *ds, int64_t batch_size,
                                           const dl_optim_desc *od, float lr, uint64_t seed) {
  memset(t, 0, sizeof *t);
  if (ds->n < batch_size)
    return dl_fail(DL_ERR_INVALID, "%s: %s has %lld samples, fewer than one batch of %lld", name,
                   ds->name, (long long)ds->n, (long long)batch_size);
  t->ds = ds;
  t->batch_size = batch_size;
  t->seed = seed;
  t->lr = lr;
  t->order = malloc((size_t)ds->n * sizeof *t->order);
  if (!t->order) return dl_fail(DL_ERR_NOMEM, "out of memory for the %s epoch order", name);
  t->pos = ds->n; /* the first step starts epoch 0 */
  t->epoch = -1;
  dl_status s = dl_batch_alloc(&t->batch, ds, batch_size);
  if (s == DL_OK) s = dl_model_create(&t->model, layers, nlayers, seed);
  dl_param **params = NULL;
  int n = s == DL_OK ? dl_model_num_params(t->model) : 0;
  if (s == DL_OK && !(params = malloc((size_t)(n ? n : 1) * sizeof *params)))
    s = dl_fail(DL_ERR_NOMEM, "out of memory for the %s parameter list", name);
  for (int i = 0; s == DL_OK && i < n; i++) params[i] = dl_model_param(t->model, i);
  if (s == DL_OK) s = dl_optim_create(&t->optim, od, params, n);
  free(params);
  if (s != DL_OK) bench_trainer_free(t);
  return s;
}

/* zero_grad, forward, cross-entropy, backward, optimizer step. */
static inline dl_status bench_train_step(bench_trainer *t) {
  if (t->pos + t->batch_size > t->ds->n) {
    t->epoch++;
    dl_permutation(t->ds->n, t->seed, t->epoch, t->order);
    t->pos = 0;
  }
  DL_TRY(dl_dataset_gather(t->ds, t->order + t->pos, t->batch_size, &t->batch));
  t->pos += t->batch_size;
  dl_ctx ctx = {.grad_enabled = true, .seed = t->seed, .step = t->step, .sample_ids = t->batch.ids};
  dl_model_zero_grad(t->model);
  const dl_tensor *logits;
  DL_TRY(dl_model_forward(t->model, &ctx, &t->batch.x, &logits));
  dl_ce_desc ce = dl_ce_default();
  dl_tensor dlogits = {0};
  dl_status s = dl_cross_entropy(&ce, logits, &t->batch.y, &t->loss, NULL, &dlogits);
  if (s == DL_OK) s = dl_model_backward(t->model, &ctx, &dlogits);
  dl_tensor_free(&dlogits);
  dl_model_release(t->model);
  if (s == DL_OK) s = dl_optim_step(t->optim, t->lr);
  t->step++;
  return s;
}

/* The fixtures folder beside bench/, as the build saw the source tree. */
static inline void bench_default_fixtures(char *out, size_t len) {
  const char *self = __FILE__, *cut = strstr(self, "bench/bench_common.h");
  if (cut) snprintf(out, len, "%.*sfixtures", (int)(cut - self), self);
  else snprintf(out, len, "fixtures");
}

static inline double bench_clock_s(clockid_t which) {
  struct timespec ts;
  clock_gettime(which, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

#endif
