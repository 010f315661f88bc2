/* Checkpoint round trip: save the training state after step k, throw the
 * engine state away, build a fresh one, load, continue. What is saved is
 * the scenario's choice, so that C1-C7 can leave out what users forget. */
#include "run/runner_internal.h"

#include "io/state_dict.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct ckpt_paths {
  char model[2 * DLC_PATH_MAX], optim[2 * DLC_PATH_MAX], scaler[2 * DLC_PATH_MAX],
      sched[2 * DLC_PATH_MAX], progress[2 * DLC_PATH_MAX];
} ckpt_paths;

static void make_paths(dlc_rank *r, ckpt_paths *p) {
  const char *d = r->sh->opt->workdir, *run = r->cfg->name;
  snprintf(p->model, sizeof p->model, "%s/%s-model.h5", d, run);
  snprintf(p->optim, sizeof p->optim, "%s/%s-optimizer.h5", d, run);
  snprintf(p->scaler, sizeof p->scaler, "%s/%s-scaler.h5", d, run);
  snprintf(p->sched, sizeof p->sched, "%s/%s-scheduler.h5", d, run);
  snprintf(p->progress, sizeof p->progress, "%s/%s-progress.h5", d, run);
}

/* The model's state dict as saved: C4 adds DDP's "module." prefix, C5/C6
 * leave one key out. */
static dl_status save_model(dlc_rank *r, const char *path) {
  const dlc_checkpoint_config *c = &r->cfg->checkpoint;
  dl_named_tensor *items;
  int n;
  DL_TRY(dl_model_state_items(r->net.model, &items, &n));
  char(*names)[DLC_NAME_MAX] = malloc((size_t)(n ? n : 1) * sizeof *names);
  if (!names) {
    free(items);
    return dl_fail(DL_ERR_NOMEM, "out of memory saving a checkpoint");
  }
  int kept = 0;
  for (int i = 0; i < n; i++) {
    if (c->drop_key[0] && strcmp(items[i].name, c->drop_key) == 0) continue;
    snprintf(names[kept], DLC_NAME_MAX, "%s%s", c->add_module_prefix ? "module." : "",
             items[i].name);
    items[kept].tensor = items[i].tensor;
    items[kept].name = names[kept];
    kept++;
  }
  dl_status s = dl_state_save(path, "model", items, kept);
  free(items);
  free(names);
  return s;
}

static dl_status optim_items(dlc_rank *r, dl_named_tensor **items, int *n) {
  *n = dl_optim_num_state(r->net.optim);
  *items = malloc((size_t)(*n ? *n : 1) * sizeof **items);
  if (!*items) return dl_fail(DL_ERR_NOMEM, "out of memory for optimizer state");
  for (int i = 0; i < *n; i++) {
    const char *name;
    dl_tensor *t;
    dl_status s = dl_optim_state(r->net.optim, i, &name, &t);
    if (s) {
      free(*items);
      return s;
    }
    (*items)[i] = (dl_named_tensor){name, t};
  }
  return DL_OK;
}

static dl_status save_or_load_optimizer(dlc_rank *r, const char *path, bool save) {
  dl_named_tensor *items;
  int n;
  DL_TRY(optim_items(r, &items, &n));
  dl_status s = save ? dl_state_save(path, "optimizer", items, n)
                     : dl_state_load(path, "optimizer", items, n, true, NULL);
  free(items);
  return s;
}

/* Scalars: scaler and scheduler state and the data position, as 0-D
 * tensors. */
typedef struct progress_state {
  dl_tensor scale, tracker, last_epoch, step, epoch, pos, rng_offset;
} progress_state;

static dl_status scalar(dl_tensor *t, dl_dtype dt, const char *name) {
  return dl_tensor_alloc(t, dt, 0, NULL, name);
}

static dl_status progress_alloc(progress_state *p) {
  memset(p, 0, sizeof *p);
  DL_TRY(scalar(&p->scale, DL_F32, "scale"));
  DL_TRY(scalar(&p->tracker, DL_I64, "growth_tracker"));
  DL_TRY(scalar(&p->last_epoch, DL_I64, "last_epoch"));
  DL_TRY(scalar(&p->step, DL_I64, "step"));
  DL_TRY(scalar(&p->epoch, DL_I64, "epoch"));
  DL_TRY(scalar(&p->pos, DL_I64, "position"));
  return scalar(&p->rng_offset, DL_I64, "rng_offset");
}

static void progress_free(progress_state *p) {
  dl_tensor *all[] = {&p->scale, &p->tracker, &p->last_epoch, &p->step,
                      &p->epoch, &p->pos,     &p->rng_offset};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++) dl_tensor_free(all[i]);
}

static int64_t *i64(dl_tensor *t) { return (int64_t *)t->data; }

static dl_status save_state(dlc_rank *r, const ckpt_paths *paths, progress_state *p) {
  const dlc_checkpoint_config *c = &r->cfg->checkpoint;
  DL_TRY(save_model(r, paths->model));
  if (c->optimizer) DL_TRY(save_or_load_optimizer(r, paths->optim, true));
  *dl_f32(&p->scale) = r->train.scaler.scale;
  *i64(&p->tracker) = r->train.scaler.growth_tracker;
  if (c->scaler) {
    dl_named_tensor s[] = {{"scale", &p->scale}, {"growth_tracker", &p->tracker}};
    DL_TRY(dl_state_save(paths->scaler, "scaler", s, 2));
  }
  *i64(&p->last_epoch) = r->train.sched_step;
  dl_named_tensor sched[] = {{"last_epoch", &p->last_epoch}};
  if (c->scheduler) DL_TRY(dl_state_save(paths->sched, "scheduler", sched, 1));
  *i64(&p->step) = r->train.step;
  *i64(&p->epoch) = r->data.epoch;
  *i64(&p->pos) = r->data.pos;
  *i64(&p->rng_offset) = (int64_t)r->data.rng_offset;
  dl_named_tensor items[] = {{"step", &p->step},
                             {"epoch", &p->epoch},
                             {"position", &p->pos},
                             {"rng_offset", &p->rng_offset}};
  return dl_state_save(paths->progress, "progress", items, c->rng ? 4 : 1);
}

/* The key diagnosis is evidence for C4-C6: counts as metrics, names as a note. */
static dl_status record_load(dlc_rank *r, dl_status load, const dl_load_report *rep) {
  if (r->rank != 0) return DL_OK;
  dlc_trace *t = r->sh->trace;
  char text[2048];
  dl_load_report_describe(rep, text, sizeof text);
  if (load)
    snprintf(text + strlen(text), sizeof text - strlen(text), " Load failed: %s", dl_last_error());
  DL_TRY(dlc_trace_set_note(t, "checkpoint_load", text));
  DL_TRY(dlc_trace_set_metric(t, "ckpt_missing_keys", rep->nmissing));
  DL_TRY(dlc_trace_set_metric(t, "ckpt_unexpected_keys", rep->nunexpected));
  DL_TRY(dlc_trace_set_metric(t, "ckpt_shape_mismatches", rep->nmismatched));
  DL_TRY(dlc_trace_set_metric(t, "ckpt_module_prefix", rep->module_prefix));
  DL_TRY(dlc_trace_set_metric(t, "ckpt_load_failed", load != DL_OK));
  return dlc_trace_set_metric(t, "ckpt_problems",
                              rep->nmissing + rep->nunexpected + rep->nmismatched +
                                  (load != DL_OK));
}

/* The model from the fresh engine's point of view. A failed load is
 * evidence, not the end: training goes on from the fresh weights, as a
 * pipeline that catches the exception would. */
static dl_status restore_model(dlc_rank *r, const ckpt_paths *paths) {
  const dlc_checkpoint_config *c = &r->cfg->checkpoint;
  DL_TRY(dlc_rank_rebuild_model(r, c->change_architecture));
  dl_load_report rep = {0};
  dl_status load = dl_model_load_state(r->net.model, paths->model, "model", c->strict, &rep);
  dl_status s = load != DL_OK && load != DL_ERR_INVALID ? load : record_load(r, load, &rep);
  dl_load_report_free(&rep);
  return s;
}

/* Moments of another architecture: training goes on with fresh ones. */
static dl_status restore_optimizer(dlc_rank *r, const ckpt_paths *paths) {
  dl_status os = save_or_load_optimizer(r, paths->optim, false);
  if (os != DL_OK && os != DL_ERR_INVALID) return os;
  if (os == DL_OK || r->rank != 0) return DL_OK;
  double problems = 0;
  dlc_trace_metric(r->sh->trace, "ckpt_problems", &problems);
  DL_TRY(dlc_trace_set_metric(r->sh->trace, "ckpt_problems", problems + 1));
  return dlc_trace_set_note(r->sh->trace, "checkpoint_optimizer", dl_last_error());
}

/* A fresh scaler, with the saved scale when the checkpoint holds it (C2). */
static dl_status restore_scaler(dlc_rank *r, const ckpt_paths *paths, progress_state *p) {
  const dlc_precision_config *pc = &r->cfg->precision;
  dl_scaler_init(&r->train.scaler, r->train.scaler.mode, pc->init_scale, pc->growth_factor,
                 pc->backoff_factor, pc->growth_interval);
  if (!r->cfg->checkpoint.scaler) return DL_OK;
  dl_named_tensor sc[] = {{"scale", &p->scale}, {"growth_tracker", &p->tracker}};
  DL_TRY(dl_state_load(paths->scaler, "scaler", sc, 2, true, NULL));
  r->train.scaler.scale = *dl_f32(&p->scale);
  r->train.scaler.growth_tracker = (int)*i64(&p->tracker);
  return DL_OK;
}

/* A fresh scheduler counts from 0 (C7: warm-up again), unless the
 * checkpoint holds its count. */
static dl_status restore_scheduler(dlc_rank *r, const ckpt_paths *paths, progress_state *p) {
  r->train.sched_step = 0;
  if (!r->cfg->checkpoint.scheduler) return DL_OK;
  dl_named_tensor sched[] = {{"last_epoch", &p->last_epoch}};
  DL_TRY(dl_state_load(paths->sched, "scheduler", sched, 1, true, NULL));
  r->train.sched_step = *i64(&p->last_epoch);
  return DL_OK;
}

static dl_status restore_state(dlc_rank *r, const ckpt_paths *paths, progress_state *p) {
  const dlc_checkpoint_config *c = &r->cfg->checkpoint;
  DL_TRY(restore_model(r, paths));
  if (c->optimizer) DL_TRY(restore_optimizer(r, paths));
  DL_TRY(restore_scaler(r, paths, p));
  DL_TRY(restore_scheduler(r, paths, p));
  dl_named_tensor items[] = {{"step", &p->step},
                             {"epoch", &p->epoch},
                             {"position", &p->pos},
                             {"rng_offset", &p->rng_offset}};
  DL_TRY(dl_state_load(paths->progress, "progress", items, c->rng ? 4 : 1, true, NULL));
  r->train.step = *i64(&p->step);
  if (c->rng) /* C3 leaves it out: the data order restarts */
    dlc_cursor_seek(&r->data, *i64(&p->epoch), *i64(&p->pos), (uint64_t)*i64(&p->rng_offset));
  else dlc_cursor_seek(&r->data, 0, 0, 0);
  return DL_OK;
}

dl_status dlc_checkpoint_roundtrip(dlc_rank *r) {
  ckpt_paths paths;
  progress_state p;
  make_paths(r, &paths);
  dl_status s = progress_alloc(&p);
  if (!s) s = save_state(r, &paths, &p);
  if (!s) s = restore_state(r, &paths, &p);
  progress_free(&p);
  remove(paths.model);
  remove(paths.optim);
  remove(paths.scaler);
  remove(paths.sched);
  remove(paths.progress);
  return s ? dl_fail_context(s, "checkpoint at step %lld: ", (long long)r->train.step) : DL_OK;
}
