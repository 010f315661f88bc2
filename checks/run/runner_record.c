/* What a run records into its trace (rank 0): per-step series and digests,
 * layer statistics at chosen steps, and the final state. */
#include "run/runner_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>

static void tensor_stats(const dl_tensor *t, double out[DLC_STAT_COUNT]) {
  double sum = 0, sq = 0, mn = INFINITY, mx = -INFINITY;
  int64_t zeros = 0, bad = 0, n = 0;
  if (t->dtype == DL_F32)
    for (int64_t i = 0; i < t->numel; i++) {
      double v = dl_f32(t)[i];
      if (!isfinite(v)) {
        bad++;
        continue;
      }
      sum += v;
      sq += v * v;
      mn = v < mn ? v : mn;
      mx = v > mx ? v : mx;
      zeros += v == 0.0;
      n++;
    }
  double mean = n ? sum / (double)n : 0;
  out[DLC_STAT_MEAN] = mean;
  out[DLC_STAT_STD] = n ? sqrt(fmax(sq / (double)n - mean * mean, 0.0)) : 0;
  out[DLC_STAT_MIN] = n ? mn : 0;
  out[DLC_STAT_MAX] = n ? mx : 0;
  out[DLC_STAT_FRAC_ZERO] = t->numel ? (double)zeros / (double)t->numel : 0;
  out[DLC_STAT_NONFINITE] = (double)bad;
}

void dlc_stats_begin_step(dlc_step_stats *s, bool record) {
  s->now = record;
  s->n = 0;
}

static void add_stat(dlc_rank *r, const char *prefix, const char *layer, const dl_tensor *t) {
  if (!r->stats.now) return;
  if (r->stats.n == r->stats.cap) {
    int cap = r->stats.cap ? 2 * r->stats.cap : 32;
    void *names = realloc(r->stats.names, (size_t)cap * sizeof *r->stats.names);
    if (names) r->stats.names = names;
    void *vals = realloc(r->stats.vals, (size_t)cap * sizeof *r->stats.vals);
    if (vals) r->stats.vals = vals;
    if (!names || !vals) return; /* statistics are evidence, not results */
    r->stats.cap = cap;
  }
  snprintf(r->stats.names[r->stats.n], DLC_NAME_MAX, "%s%s", prefix, layer);
  tensor_stats(t, r->stats.vals[r->stats.n]);
  r->stats.n++;
}

void dlc_record_forward(void *user, const char *layer, const dl_tensor *y) {
  add_stat(user, "", layer, y);
}

/* Gradients are recorded unscaled: a loss scale (AMP) multiplies every
 * backward value, and would make an fp16 run's statistics differ from fp32
 * by the scale alone. */
void dlc_record_backward(void *user, const char *layer, const dl_tensor *dy) {
  dlc_rank *r = user;
  int before = r->stats.n;
  add_stat(r, "grad ", layer, dy);
  double f = dl_scaler_factor(&r->train.scaler);
  if (r->stats.n == before || f == 1.0) return;
  for (int k = DLC_STAT_MEAN; k <= DLC_STAT_MAX; k++) r->stats.vals[before][k] /= f;
}

static dl_status push_digests(dlc_rank *r) {
  int np = r->net.nparams, nb = dl_model_num_buffers(r->net.model), n = np + nb;
  const char **names = malloc((size_t)(n ? n : 1) * sizeof *names);
  const dl_tensor **ts = malloc((size_t)(n ? n : 1) * sizeof *ts);
  char(*buf)[DLC_NAME_MAX] = malloc((size_t)(n ? n : 1) * sizeof *buf);
  dl_status s = DL_OK;
  if (!names || !ts || !buf) s = dl_fail(DL_ERR_NOMEM, "out of memory for digests");
  for (int i = 0; !s && i < n; i++) {
    const char *kind = i < np ? "param" : "buffer";
    const char *name = i < np ? r->net.params[i]->name
                              : dl_model_buffer(r->net.model, i - np)->name;
    snprintf(buf[i], DLC_NAME_MAX, "%s/%s", kind, name);
    names[i] = buf[i];
    ts[i] = i < np ? &r->net.params[i]->value : &dl_model_buffer(r->net.model, i - np)->value;
  }
  if (!s) s = dlc_trace_push_digests(r->sh->trace, n, names, ts);
  free(names);
  free(ts);
  free(buf);
  return s;
}

dl_status dlc_record_step(dlc_rank *r, double loss, float grad_norm, float clipped_norm, float lr,
                          bool skipped) {
  if (r->rank != 0) return DL_OK;
  dlc_trace *t = r->sh->trace;
  _Static_assert(DLC_STEP_SERIES == 6, "the series pushed here");
  DL_TRY(dlc_trace_push(t, "loss", loss));
  DL_TRY(dlc_trace_push(t, "grad_norm", grad_norm));
  DL_TRY(dlc_trace_push(t, "grad_norm_clipped", clipped_norm));
  DL_TRY(dlc_trace_push(t, "lr", lr));
  DL_TRY(dlc_trace_push(t, "loss_scale", dl_scaler_factor(&r->train.scaler)));
  DL_TRY(dlc_trace_push(t, "skipped", skipped));
  DL_TRY(push_digests(r));
  if (r->stats.n) {
    const char **names = malloc((size_t)r->stats.n * sizeof *names);
    if (!names) return dl_fail(DL_ERR_NOMEM, "out of memory for layer statistics");
    for (int i = 0; i < r->stats.n; i++) names[i] = r->stats.names[i];
    dl_status s = dlc_trace_push_stats(t, r->train.step, r->stats.n, names,
                                       (const double(*)[DLC_STAT_COUNT])r->stats.vals);
    free(names);
    DL_TRY(s);
  }
  if (r->sh->opt->progress)
    r->sh->opt->progress(r->sh->opt->user, r->cfg->name, r->train.step + 1, r->cfg->steps);
  return DL_OK;
}

static dl_status add_final(dlc_trace *t, const char *kind, const char *name, const dl_tensor *v) {
  char full[DLC_NAME_MAX];
  snprintf(full, sizeof full, "%s/%s", kind, name);
  return dlc_trace_add_final(t, full, v);
}

dl_status dlc_record_initial(dlc_rank *r) {
  if (r->rank != 0) return DL_OK;
  for (int i = 0; i < r->net.nparams; i++)
    DL_TRY(add_final(r->sh->trace, "init", r->net.params[i]->name, &r->net.params[i]->value));
  for (int i = 0; i < dl_model_num_buffers(r->net.model); i++) {
    dl_buffer *b = dl_model_buffer(r->net.model, i);
    DL_TRY(add_final(r->sh->trace, "init_buffer", b->name, &b->value));
  }
  return DL_OK;
}

/* M4: how far the statistics of BatchNorm layers with frozen parameters
 * moved during training (they should not move at all). */
static double frozen_buffer_change(dlc_rank *r) {
  double worst = 0;
  for (int i = 0; i < dl_model_num_layers(r->net.model); i++) {
    dl_layer *l = dl_model_layer(r->net.model, i);
    bool bn = l->desc.kind == DL_BATCHNORM1D || l->desc.kind == DL_BATCHNORM2D;
    if (!bn || !l->nparams || l->params[0].requires_grad) continue;
    for (int k = 0; k < l->nbuffers; k++) {
      char name[DLC_NAME_MAX];
      snprintf(name, sizeof name, "init_buffer/%s", l->buffers[k].name);
      const dl_tensor *b0 = dlc_trace_final(r->sh->trace, name), *b = &l->buffers[k].value;
      if (!b0 || b->dtype != DL_F32 || b0->numel != b->numel) continue;
      for (int64_t j = 0; j < b->numel; j++) {
        double d = fabs((double)dl_f32(b)[j] - (double)dl_f32(b0)[j]);
        worst = d > worst ? d : worst;
      }
    }
  }
  return worst;
}

dl_status dlc_record_final(dlc_rank *r) {
  if (r->rank != 0) return DL_OK;
  dlc_trace *t = r->sh->trace;
  for (int i = 0; i < r->net.nparams; i++) {
    dl_param *p = r->net.params[i];
    DL_TRY(add_final(t, "param", p->name, &p->value));
    if (p->has_grad) DL_TRY(add_final(t, "grad", p->name, &p->grad));
    char flag[DLC_NAME_MAX];
    snprintf(flag, sizeof flag, "requires_grad/%s", p->name);
    DL_TRY(dlc_trace_set_metric(t, flag, p->requires_grad));
    snprintf(flag, sizeof flag, "in_optimizer/%s", p->name);
    DL_TRY(dlc_trace_set_metric(t, flag, p->in_optimizer));
  }
  for (int i = 0; i < dl_model_num_buffers(r->net.model); i++) {
    dl_buffer *b = dl_model_buffer(r->net.model, i);
    DL_TRY(add_final(t, "buffer", b->name, &b->value));
  }
  DL_TRY(dlc_trace_set_metric(t, "skipped_steps", (double)r->ev.skipped));
  DL_TRY(dlc_trace_set_metric(t, "overflow_steps", (double)r->ev.overflow_steps));
  DL_TRY(dlc_trace_set_metric(t, "zero_grad_fraction", r->ev.zero_grad_fraction_max));
  DL_TRY(dlc_trace_set_metric(t, "rank_buffer_max_diff", r->ev.buffer_diff_max));
  DL_TRY(dlc_trace_set_metric(t, "epoch_order_repeats", (double)r->data.order_repeats));
  DL_TRY(dlc_trace_set_metric(t, "epochs_started", (double)r->data.epoch + 1));
  DL_TRY(dlc_trace_set_metric(t, "loss_op_drift", r->ev.loss_op_drift_max));
  DL_TRY(dlc_trace_set_metric(t, "frozen_buffer_change", frozen_buffer_change(r)));
  return DL_OK;
}

/* Layers whose outputs the statistics hooks see: residual bodies too. */
static int64_t hooked_layers(const dl_layer_desc *d, int n) {
  int64_t count = n;
  for (int i = 0; i < n; i++)
    if (d[i].kind == DL_RESIDUAL) count += hooked_layers(d[i].body, d[i].nbody);
  return count;
}

/* Steps at which layer statistics are recorded (dlc_train_step's rule). */
static double stats_steps(const dlc_run_config *c, const dlc_run_options *o, int64_t steps) {
  double n = c->stats_every > 0 ? (double)(steps / c->stats_every + 1) : 2;
  int64_t to = o && o->stats_to < steps ? o->stats_to : steps;
  if (o && to > o->stats_from) n += (double)(to - o->stats_from);
  return n;
}

double dlc_trace_bytes(const dlc_run_config *c, const dlc_run_options *o, int64_t steps,
                       int ntensors) {
  double per_step = DLC_STEP_SERIES * 8.0 + 8.0 * ntensors;
  double bytes = per_step * (double)steps;
  if (c->eval.enabled && c->eval.every > 0) bytes += 8.0 * (double)(steps / c->eval.every);
  double per_stats = 2.0 * (double)hooked_layers(c->layers, c->nlayers) *
                     (DLC_NAME_MAX + DLC_STAT_COUNT * 8.0);
  return bytes + per_stats * stats_steps(c, o, steps);
}

/* The per-step arrays' bytes past the heap's share must fit in the
 * spill folder (trace/spill.h): refused now rather than at step 10^7. */
static dl_status check_spill_room(double per_step_bytes, int64_t steps) {
  double spilled = per_step_bytes * (double)steps;
  if (spilled <= DLC_SPILL_AFTER) return DL_OK;
  const char *dir = getenv("TMPDIR") && *getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
  struct statvfs fs;
  if (statvfs(dir, &fs) != 0) return DL_OK; /* the spill itself will say what is wrong */
  double room = (double)fs.f_bavail * (double)fs.f_frsize;
  if (spilled <= room) return DL_OK;
  return dl_fail(DL_ERR_INVALID,
                 "its trace's per-step series and digests would need %.1f MiB in %s, which has "
                 "%.1f MiB free: free space there, set TMPDIR to a folder with room, or run "
                 "fewer steps",
                 spilled / (1 << 20), dir, room / (1 << 20));
}

dl_status dlc_record_check_size(const dlc_rank *r, int64_t steps) {
  int ntensors = r->net.nparams + dl_model_num_buffers(r->net.model);
  double bytes = dlc_trace_bytes(r->cfg, r->sh->opt, steps, ntensors);
  if (bytes <= DLC_TRACE_MAX_BYTES)
    return check_spill_room(DLC_STEP_SERIES * 8.0 + 8.0 * ntensors, steps);
  double per_step = bytes / (double)steps;
  return dl_fail(DL_ERR_INVALID,
                 "its trace would hold %.1f GiB (%lld steps of about %.0f bytes: "
                 "%d series, %d tensor digests and the layer statistics), more than the "
                 "%d GiB a run may record: use at most %.0f steps (or a larger stats_every)",
                 bytes / (1 << 30), (long long)steps, per_step, DLC_STEP_SERIES, ntensors,
                 (int)(DLC_TRACE_MAX_BYTES >> 30), floor(DLC_TRACE_MAX_BYTES / per_step));
}
