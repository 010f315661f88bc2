/* One rank's setup and teardown: model, optimizer, scaler, schedule, data
 * cursor, batches. */
#include "run/runner_internal.h"

#include "store/path.h"
#include "backend/perturb/perturb.h"
#include "io/state_dict.h"

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
  dl_model_train(r->net.model, true);
  for (int i = 0; i < dl_model_num_layers(r->net.model); i++) {
    dl_layer *l = dl_model_layer(r->net.model, i);
    bool bn = l->desc.kind == DL_BATCHNORM1D || l->desc.kind == DL_BATCHNORM2D;
    if (bn && l->nparams && !l->params[0].requires_grad && !r->cfg->bug.bn_frozen_wrongly)
      l->training = false;
  }
}

static dl_status build_model(dlc_rank *r, bool changed_architecture) {
  const dlc_run_config *c = r->cfg;
  dlc_rank_net *n = &r->net;
  dl_layer_desc descs[DLC_MAX_LAYERS];
  memcpy(descs, c->layers, sizeof descs);
  if (changed_architecture) /* C6: the last linear layer gains an output */
    for (int i = c->nlayers - 1; i >= 0; i--)
      if (descs[i].kind == DL_LINEAR) {
        descs[i].out += 1;
        break;
      }
  DL_TRY(dl_model_create(&n->model, descs, c->nlayers, c->seed));
  if (c->init_weights[0]) {
    char path[2 * DLC_PATH_MAX];
    DL_TRY(dlc_path_under(path, sizeof path, r->sh->opt->root, c->init_weights));
    dl_status s = dl_model_load_state(n->model, path, "model", true, NULL);
    if (s) return dl_fail_context(s, "init_weights: ");
  }
  if (c->bug.dead_relu) kill_relus(n->model);
  n->nparams = dl_model_num_params(n->model);
  free(n->params);
  n->params = malloc((size_t)(n->nparams ? n->nparams : 1) * sizeof *n->params);
  if (!n->params) return dl_fail(DL_ERR_NOMEM, "out of memory for the parameter list");
  for (int i = 0; i < n->nparams; i++) {
    dl_param *p = n->params[i] = dl_model_param(n->model, i);
    p->requires_grad = !has_prefix(p->name, c->frozen, c->nfrozen);
    p->in_optimizer = !has_prefix(p->name, c->not_in_optimizer, c->nnot_in_optimizer);
  }
  dlc_rank_train_modes(r);
  return dl_optim_create(&n->optim, &c->optim, n->params, n->nparams);
}

dl_status dlc_rank_rebuild_model(dlc_rank *r, bool changed_architecture) {
  dl_optim_destroy(r->net.optim);
  dl_model_destroy(r->net.model);
  r->net.optim = NULL;
  r->net.model = NULL;
  return build_model(r, changed_architecture);
}

dl_status dlc_rank_setup(dlc_rank *r, dlc_run_shared *sh, int rank) {
  memset(r, 0, sizeof *r);
  r->sh = sh;
  r->cfg = sh->cfg;
  r->rank = rank;
  r->world = sh->cfg->parallel.world;
  r->comm = sh->comms[rank];
  dl_comm_set_arrival_order(r->comm, r->cfg->bug.unordered_reduction);
  const dlc_precision_config *pc = &r->cfg->precision;
  dl_scaler_init(&r->train.scaler, pc->scaler, pc->init_scale, pc->growth_factor,
                 pc->backoff_factor, pc->growth_interval);
  r->train.sched = dlc_run_schedule(r->cfg);
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
    r->close_backend = dl_perturb_backend_destroy;
  } else {
    DL_TRY(dlc_backend_open(&r->cfg->backend, device, rank, &r->backend));
    r->close_backend = dlc_backend_close;
  }
  dlc_cursor_init(&r->data, r->cfg, &sh->train, rank, r->world, sh->seen[rank]);
  dlc_rank_train *t = &r->train;
  t->micro = calloc((size_t)r->cfg->accumulation, sizeof *t->micro);
  if (!t->micro) return dl_fail(DL_ERR_NOMEM, "out of memory for micro-batches");
  for (int k = 0; k < r->cfg->accumulation; k++)
    DL_TRY(dl_batch_alloc(&t->micro[k], &sh->train, r->cfg->data.batch));
  return build_model(r, false);
}

void dlc_rank_teardown(dlc_rank *r) {
  dl_optim_destroy(r->net.optim);
  dl_model_destroy(r->net.model);
  free(r->net.params);
  if (r->close_backend) r->close_backend(r->backend);
  if (r->train.micro)
    for (int k = 0; k < r->cfg->accumulation; k++) dl_batch_free(&r->train.micro[k]);
  free(r->train.micro);
  free(r->train.flat);
  dlc_cursor_free(&r->data);
  free(r->stats.names);
  free(r->stats.vals);
  memset(r, 0, sizeof *r);
}
