/* A run's configuration with PyTorch's defaults (see config.h). The scenario
 * loader starts every run from here; scenarios/README.md lists the same
 * values for users. */
#include "scenario/config.h"

#include <math.h>
#include <string.h>

static void data_default(dlc_data_config *d) {
  d->source = DLC_DATA_FIXTURE;
  strcpy(d->split, "train");
  strcpy(d->eval_split, "test");
  d->n = 256;
  d->dim = 16;
  d->classes = 4;
  d->spread = 0.5f;
  d->vocab = 50;
  d->min_len = 3;
  d->max_len = 12;
  d->batch = 1; /* DataLoader(batch_size=1, shuffle=False, drop_last=False) */
}

/* x rounded to float32. Through a volatile: gcc 12.2 (Debian 12's) at -O2
 * drops the rounding of some of seven consecutive fields rounded so (its
 * SLP vectorizer: beta1 and beta2 came back as 0.9 and 0.999; clang and
 * -fno-tree-slp-vectorize keep them; optimizer_defaults_are_float32_values
 * in tests/test_runner.c is the check). */
static double f32(double x) {
  volatile float f = (float)x;
  return f;
}

/* Field by field into zeroed memory: the variants' reuse test compares run
 * configurations with memcmp, padding included (execute's run_all). */
void dlc_optim_default(dl_optim_kind kind, dl_optim_desc *out) {
  const dl_optim_desc d = dl_optim_default(kind);
  memset(out, 0, sizeof *out);
  out->kind = d.kind;
  out->lr = f32(d.lr);
  out->weight_decay = f32(d.weight_decay);
  out->momentum = f32(d.momentum);
  out->dampening = f32(d.dampening);
  out->nesterov = d.nesterov;
  out->beta1 = f32(d.beta1);
  out->beta2 = f32(d.beta2);
  out->eps = f32(d.eps);
}

void dlc_run_config_resolve(dlc_run_config *c) {
  dl_optim_desc d;
  dlc_optim_default(c->optim.kind, &d);
  if (isnan(c->optim.lr)) c->optim.lr = d.lr;
  if (isnan(c->optim.weight_decay)) c->optim.weight_decay = d.weight_decay;
  dl_schedule *s = &c->schedule;
  if (s->kind == DL_SCHEDULE_COSINE && s->total_steps == 0) s->total_steps = c->steps;
}

static void precision_default(dlc_precision_config *p) {
  p->autocast = DL_F32;
  p->scaler = DL_SCALER_OFF;
  p->init_scale = 65536.0f; /* GradScaler: 2^16, x2 every 2000 good steps, x0.5 on inf */
  p->growth_factor = 2.0f;
  p->backoff_factor = 0.5f;
  p->growth_interval = 2000;
}

void dlc_run_config_default(dlc_run_config *c) {
  memset(c, 0, sizeof *c);
  data_default(&c->data);
  dlc_optim_default(DL_OPTIM_SGD, &c->optim);
  c->schedule.kind = DL_SCHEDULE_CONSTANT;
  c->schedule.gamma = 0.1f; /* StepLR */
  precision_default(&c->precision);
  c->parallel.world = 1;
  c->parallel.threads = 1;
  c->parallel.broadcast_buffers = true; /* DistributedDataParallel's default */
  c->accumulation = 1;
  c->loss_weight = 1.0f;
  c->loss.reduction = DL_REDUCTION_MEAN; /* F.cross_entropy's defaults */
  c->loss.ignore_index = -100;
  c->steps = 10;
  c->checkpoint.optimizer = true;
  c->checkpoint.scaler = true;
  c->checkpoint.rng = true;
  c->checkpoint.scheduler = true;
  c->checkpoint.strict = true; /* load_state_dict(strict=True) */
  c->eval.eval_mode = true;
  c->eval.no_grad = true;
  c->eval.repeats = 2;
}

dl_schedule dlc_run_schedule(const dlc_run_config *c) {
  dl_schedule s = c->schedule;
  s.lr = c->optim.lr;
  return s;
}
