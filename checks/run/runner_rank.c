/* One rank's setup: model, optimizer, scaler, schedule, sampler, batches. */
#include "run/runner_internal.h"

#include "store/path.h"
#include "perturb.h"
#include "state_dict.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool has_prefix(const char *name, const char (*prefixes)[DLC_NAME_MAX], int n) {
  for (int i = 0; i < n; i++)
    if (strncmp(name, prefixes[i], strlen(prefixes[i])) == 0) return true;
  return false;
}

/* F3: a bad initialisation that leaves every ReLU dead from the start. */
static void kill_relus(dl_model *m) {
  int n = dl_model_num_layers(m);
  for (int i = 0; i + 1 < n; i++) {
    dl_layer *l = dl_model_layer(m, i), *next = dl_model_layer(m, i + 1);
    if (next->desc.kind != DL_RELU || l->nparams < 2) continue;
    dl_tensor *b = &l->params[1].value;
    for (int64_t j = 0; j < b->numel; j++) dl_f32(b)[j] = -10.0f;
  }
}

/* Train mode everywhere, except that a BatchNorm whose parameters are
 * frozen is put in eval mode so that its statistics stay (the fine-tuning
 * convention); M4 forgets to. */
void dlc_rank_train_modes(dlc_rank *r) {
  dl_model_train(r->model, true);
  for (int i = 0; i < dl_model_num_layers(r->model); i++) {
    dl_layer *l = dl_model_layer(r->model, i);
    bool bn = l->desc.kind == DL_BATCHNORM1D || l->desc.kind == DL_BATCHNORM2D;
    if (bn && l->nparams && !l->params[0].requires_grad && !r->cfg->bug.bn_frozen_wrongly)
      l->training = false;
  }
}

dl_status dlc_rank_build_model(dlc_rank *r, bool changed_architecture) {
  const dlc_run_config *c = r->cfg;
  dl_layer_desc descs[DLC_MAX_LAYERS];
  memcpy(descs, c->layers, sizeof descs);
  if (changed_architecture) /* C6: the last linear layer gains an output */
    for (int i = c->nlayers - 1; i >= 0; i--)
      if (descs[i].kind == DL_LINEAR) {
        descs[i].out += 1;
        break;
      }
  DL_TRY(dl_model_create(&r->model, descs, c->nlayers, c->seed));
  if (c->init_weights[0]) {
    char path[2 * DLC_PATH_MAX];
    DL_TRY(dlc_path_under(path, sizeof path, r->sh->opt->root, c->init_weights));
    dl_status s = dl_model_load_state(r->model, path, "model", true, NULL);
    if (s) return dl_fail_context(s, "init_weights: ");
  }
  if (c->bug.dead_relu) kill_relus(r->model);
  r->nparams = dl_model_num_params(r->model);
  free(r->params);
  r->params = malloc((size_t)(r->nparams ? r->nparams : 1) * sizeof *r->params);
  if (!r->params) return dl_fail(DL_ERR_NOMEM, "out of memory for the parameter list");
  for (int i = 0; i < r->nparams; i++) {
    dl_param *p = r->params[i] = dl_model_param(r->model, i);
    p->requires_grad = !has_prefix(p->name, c->frozen, c->nfrozen);
    p->in_optimizer = !has_prefix(p->name, c->not_in_optimizer, c->nnot_in_optimizer);
  }
  dlc_rank_train_modes(r);
  return dl_optim_create(&r->optim, &c->optim, r->params, r->nparams);
}

static void make_sampler(dlc_rank *r) {
  const dlc_run_config *c = r->cfg;
  dl_sampler *s = &r->sampler;
  memset(s, 0, sizeof *s);
  s->n = r->sh->train.n;
  s->seed = c->seed;
  s->rank = r->rank;
  s->world = r->world;
  s->shuffle = c->data.shuffle;
  s->drop_last = c->data.drop_last;
  if (r->world > 1 && !c->bug.no_distributed_sampler) s->kind = DL_SAMPLER_DISTRIBUTED;
  else s->kind = c->data.shuffle ? DL_SAMPLER_RANDOM : DL_SAMPLER_SEQUENTIAL;
}

dl_status dlc_rank_setup(dlc_rank *r, dlc_run_shared *sh, int rank) {
  memset(r, 0, sizeof *r);
  r->sh = sh;
  r->cfg = sh->cfg;
  r->rank = rank;
  r->world = sh->cfg->parallel.world;
  r->comm = sh->comms[rank];
  dl_comm_set_arrival_order(r->comm, r->cfg->bug.unordered_reduction);
  r->last_order_epoch = -2;
  const dlc_precision_config *pc = &r->cfg->precision;
  dl_scaler_init(&r->scaler, pc->scaler, pc->init_scale, pc->growth_factor,
                 pc->backoff_factor, pc->growth_interval);
  r->sched = dlc_run_schedule(r->cfg);
  dlc_device device = dlc_run_device(r->cfg, sh->opt->device);
  /* A CPU calibration repeat also sums the allreduce in another order (set
   * on every run: an external handle outlives it). */
  uint64_t order = sh->opt->allreduce_seed;
  if (!order && device == DLC_DEVICE_CPU) order = sh->opt->perturb_seed;
  dl_comm_set_order_seed(r->comm, order);
  if (sh->opt->backend_override) {
    r->backend = (dl_backend *)sh->opt->backend_override;
  } else if (sh->opt->perturb_seed && device == DLC_DEVICE_CPU) {
    DL_TRY(dl_perturb_backend_create(sh->opt->perturb_seed, &r->backend));
    r->backend_owned = true;
  } else {
    DL_TRY(dlc_backend_open(&r->cfg->backend, device, rank, &r->backend));
    r->backend_owned = true;
  }
  make_sampler(r);
  r->micro = calloc((size_t)r->cfg->accumulation, sizeof *r->micro);
  if (!r->micro) return dl_fail(DL_ERR_NOMEM, "out of memory for micro-batches");
  for (int k = 0; k < r->cfg->accumulation; k++)
    DL_TRY(dl_batch_alloc(&r->micro[k], &sh->train, r->cfg->data.batch));
  return dlc_rank_build_model(r, false);
}

void dlc_rank_teardown(dlc_rank *r) {
  dl_optim_destroy(r->optim);
  dl_model_destroy(r->model);
  if (r->backend_owned && dl_is_perturb_backend(r->backend)) dl_perturb_backend_destroy(r->backend);
  else if (r->backend_owned) dlc_backend_close(r->backend);
  free(r->params);
  if (r->micro)
    for (int k = 0; k < r->cfg->accumulation; k++) dl_batch_free(&r->micro[k]);
  free(r->micro);
  dlc_rank_reset_data(r);
  free(r->flat);
  free(r->stat_names);
  free(r->stat_vals);
  memset(r, 0, sizeof *r);
}

/* Loads the order of the current epoch. D2 (no set_epoch) asks the sampler
 * for epoch 0 every time; D8 shifts the shuffle key when evaluation ran. */
static dl_status load_epoch(dlc_rank *r) {
  dl_indices_free(&r->order);
  dl_sampler s = r->sampler;
  s.seed += r->rng_offset;
  int64_t epoch = r->cfg->bug.no_set_epoch ? 0 : r->epoch;
  DL_TRY(dl_sampler_indices(&s, epoch, &r->order));
  uint64_t h = dlc_digest(r->order.v, (size_t)r->order.n * sizeof *r->order.v);
  if (r->epoch == r->last_order_epoch + 1 && h == r->last_order_hash) r->order_repeats++;
  r->last_order_hash = h;
  r->last_order_epoch = r->epoch;
  return DL_OK;
}

/* Forgets the data position's derived state (order, loader), e.g. after a
 * checkpoint restore changed epoch and position. */
void dlc_rank_reset_data(dlc_rank *r) {
  dl_loader_destroy(r->loader);
  r->loader = NULL;
  dl_indices_free(&r->order);
}

/* The loader for the rest of the current epoch, from r->pos on. Batches
 * depend only on the index list, never on the worker count. */
static dl_status open_loader(dlc_rank *r) {
  const dlc_data_config *d = &r->cfg->data;
  dl_augment aug = {.hflip = r->sh->train.x.ndim == 4, .noise_std = 0.05f};
  dl_loader_opts o = {.batch = d->batch, .drop_last = d->drop_last, .workers = d->workers,
                      .aug = d->augment ? &aug : NULL, .epoch = r->epoch,
                      .seed = r->cfg->seed};
  return dl_loader_create(&r->loader, &r->sh->train, r->order.v + r->pos, r->order.n - r->pos,
                          &o);
}

static void copy_rows(dl_tensor *dst, const dl_tensor *src, int64_t cap, int64_t rows) {
  if (!src->data) return;
  size_t row = dl_tensor_bytes(src) / (size_t)cap;
  memcpy(dst->data, src->data, row * (size_t)rows);
}

/* The next micro-batch of this rank: a short last batch of an epoch is
 * returned as is (drop_last off) or skipped (on), as PyTorch's DataLoader. */
dl_status dlc_rank_next_batch(dlc_rank *r, dl_batch *dst) {
  for (;;) {
    if (!r->order.v) DL_TRY(load_epoch(r));
    if (!r->loader) DL_TRY(open_loader(r));
    const dl_batch *b;
    DL_TRY(dl_loader_next(r->loader, &b));
    if (b) {
      copy_rows(&dst->x, &b->x, b->capacity, b->n);
      copy_rows(&dst->y, &b->y, b->capacity, b->n);
      copy_rows(&dst->lengths, &b->lengths, b->capacity, b->n);
      memcpy(dst->ids, b->ids, (size_t)b->n * sizeof *b->ids);
      dst->n = b->n;
      if (r->epoch == 0)
        for (int64_t i = 0; i < b->n; i++) r->sh->seen[r->rank][b->ids[i]]++;
      r->pos += b->n;
      return DL_OK;
    }
    if (r->pos == 0)
      return dl_fail(DL_ERR_INVALID,
                     "rank %d: an epoch has %lld samples, fewer than one batch of %lld "
                     "with drop_last: use more data or a smaller batch",
                     r->rank, (long long)r->order.n, (long long)r->cfg->data.batch);
    if (r->epoch == 0 && r->rank == 0) r->sh->epoch0_done = true;
    r->epoch++;
    r->pos = 0;
    dlc_rank_reset_data(r);
  }
}
