/* One optimizer step: K micro-batches forward and backward, gradient
 * synchronisation across ranks, loss-scale unscaling, clipping, the update.
 * The order of operations is PyTorch's recipe; each pitfall switch changes
 * exactly the line its catalogue entry describes. */
#include "run/runner_internal.h"

#include "optim/clip.h"
#include "nn/loss.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static dl_ctx train_ctx(dlc_rank *r, const dl_batch *b, int64_t *ids_scratch) {
  const dlc_run_config *c = r->cfg;
  dl_ctx ctx = {.grad_enabled = true,
                .autocast = c->precision.autocast,
                .seed = c->seed,
                .step = r->train.step,
                .sample_ids = b->ids,
                .backend = r->backend};
  if (c->bug.rank_keyed_noise) {
    /* D7: every rank seeds its noise the same way, by batch row. */
    ctx.sample_ids = NULL;
  } else if (c->bug.thread_keyed_rng) {
    /* N3: noise keyed by the thread that would process the row. */
    int threads = c->parallel.threads;
    for (int64_t i = 0; i < b->n; i++) ids_scratch[i] = i * threads / b->n;
    ctx.sample_ids = ids_scratch;
  }
  if (r->rank == 0) {
    ctx.hooks.user = r;
    ctx.hooks.forward = dlc_record_forward;
    ctx.hooks.backward = dlc_record_backward;
  }
  return ctx;
}

/* Tokens with a target in the K micro-batches of every rank (G4's correct
 * normaliser of a mean); 0 for one target per sample (classification) and
 * for a sum, which need no normaliser. Per-token targets ([N, T], padding
 * at ignore_index) are generated token data or a token fixture alike. */
static dl_status count_tokens(dlc_rank *r, float *total) {
  const dlc_run_config *c = r->cfg;
  *total = 0;
  if (r->train.micro[0].y.ndim < 2 || c->loss.reduction != DL_REDUCTION_MEAN) return DL_OK;
  float n = 0;
  for (int k = 0; k < c->accumulation; k++) {
    const dl_batch *b = &r->train.micro[k];
    int64_t per_row = b->y.numel / b->y.shape[0];
    for (int64_t i = 0; i < b->n * per_row; i++) n += dl_i32(&b->y)[i] != c->loss.ignore_index;
  }
  DL_TRY(dl_comm_allreduce_sum(r->comm, &n, 1));
  *total = n;
  return DL_OK;
}

/* DDP broadcasts rank 0's buffers before every forward (broadcast_buffers);
 * measures how far the ranks' buffers are apart as the forward sees them. */
static dl_status sync_buffers(dlc_rank *r) {
  if (r->world == 1) return DL_OK;
  int nb = dl_model_num_buffers(r->net.model);
  for (int i = 0; i < nb; i++) {
    dl_tensor *t = &dl_model_buffer(r->net.model, i)->value;
    if (r->cfg->parallel.broadcast_buffers && !r->cfg->bug.unsynced_buffers)
      DL_TRY(dl_comm_broadcast(r->comm, t->data, dl_tensor_bytes(t), 0));
    if (t->dtype != DL_F32) continue;
    float *all = malloc((size_t)t->numel * (size_t)r->world * sizeof *all);
    if (!all) return dl_fail(DL_ERR_NOMEM, "out of memory comparing buffers across ranks");
    dl_status s = dl_comm_allgather(r->comm, t->data, all, dl_tensor_bytes(t));
    for (int k = 1; s == DL_OK && k < r->world; k++)
      for (int64_t j = 0; j < t->numel; j++) {
        double d = fabs((double)all[k * t->numel + j] - (double)all[j]);
        if (d > r->ev.buffer_diff_max) r->ev.buffer_diff_max = d;
      }
    free(all);
    DL_TRY(s);
  }
  return DL_OK;
}

/* A4: the loss op run in half precision. The same loss in float32 from the
 * same logits says how much of the drift the loss op itself adds. */
static dl_status loss_op_drift(dlc_rank *r, const dl_ce_desc *ce, const dl_tensor *logits,
                               const dl_tensor *targets, float loss) {
  dl_ce_desc exact = *ce;
  exact.half_dtype = 0;
  float l32;
  DL_TRY(dl_cross_entropy(&exact, logits, targets, &l32, NULL, NULL));
  double drift = fabs((double)loss - (double)l32) / (fabs((double)l32) + 1e-30);
  if (drift > r->ev.loss_op_drift_max || isnan(drift)) r->ev.loss_op_drift_max = drift;
  return DL_OK;
}

/* The micro-batch loss: the run's cross-entropy, its gradient scaled by
 * the loss scale and weight, and divided by K for a mean (G2 forgets to). */
static dl_ce_desc micro_loss(const dlc_rank *r) {
  const dlc_run_config *c = r->cfg;
  dl_ce_desc ce = dl_ce_default();
  ce.reduction = c->loss.reduction;
  ce.label_smoothing = c->loss.label_smoothing;
  ce.ignore_index = c->loss.ignore_index;
  ce.half_dtype = c->precision.loss_half;
  /* A mean over K micro-batches is loss/K each; a sum over the big batch is
   * the plain sum of the micro-batch sums, so nothing is divided. */
  bool sum = c->loss.reduction == DL_REDUCTION_SUM;
  float k_div = c->bug.loss_not_divided || sum ? 1.0f : (float)c->accumulation;
  float scale = dl_scaler_factor(&r->train.scaler) * c->loss_weight;
  ce.grad_scale = scale / k_div;
  return ce;
}

/* Mean over all tokens of the accumulated (and data-parallel) batch:
 * weight W/total per token; DDP's gradient mean divides the W out. */
static dl_status token_weights(const dlc_rank *r, const dl_tensor *y, float tokens, dl_ce_desc *ce,
                               dl_tensor *weights) {
  DL_TRY(dl_tensor_alloc(weights, DL_F32, y->ndim, y->shape, "token weights"));
  for (int64_t i = 0; i < weights->numel; i++) dl_f32(weights)[i] = (float)r->world / tokens;
  ce->reduction = DL_REDUCTION_SUM;
  ce->row_weight = weights;
  ce->grad_scale = dl_scaler_factor(&r->train.scaler) * r->cfg->loss_weight;
  return DL_OK;
}

static dl_status micro_step(dlc_rank *r, const dl_batch *b, float tokens, double *loss) {
  const dlc_run_config *c = r->cfg;
  int64_t ids[b->n > 0 ? b->n : 1];
  dl_ctx ctx = train_ctx(r, b, ids);
  DL_TRY(sync_buffers(r));
  dl_tensor x, y;
  dlc_batch_rows(b, b->n, &x, &y);
  const dl_tensor *out;
  DL_TRY(dl_model_forward(r->net.model, &ctx, &x, &out));
  dl_ce_desc ce = micro_loss(r);
  dl_tensor weights = {0}, dlogits = {0};
  dl_status s = DL_OK;
  if (tokens > 0 && !c->bug.token_mean_per_micro) s = token_weights(r, &y, tokens, &ce, &weights);
  float l = 0;
  if (!s) s = dl_cross_entropy(&ce, out, &y, &l, NULL, &dlogits);
  if (!s && ce.half_dtype) s = loss_op_drift(r, &ce, out, &y, l);
  if (!s) s = dl_model_backward(r->net.model, &ctx, &dlogits);
  dl_tensor_free(&dlogits);
  dl_tensor_free(&weights);
  dl_model_release(r->net.model);
  /* Token weights make l a share of the whole step's loss; scale it so that
   * the step's mean over micro-batches and ranks gives the token mean. */
  *loss = (ce.row_weight ? (double)l * c->accumulation : l) * c->loss_weight;
  return s;
}

/* DDP: gradients summed over ranks, then divided by W (D3 forgets the
 * division). Flattened so that one collective carries them all. */
static dl_status sync_gradients(dlc_rank *r) {
  if (r->world == 1) return DL_OK;
  int64_t n = 0;
  for (int i = 0; i < r->net.nparams; i++)
    if (r->net.params[i]->has_grad) n += r->net.params[i]->grad.numel;
  if (n > r->train.flat_n) {
    float *f = realloc(r->train.flat, (size_t)n * sizeof *f);
    if (!f) return dl_fail(DL_ERR_NOMEM, "out of memory for the gradient bucket");
    r->train.flat = f;
    r->train.flat_n = n;
  }
  int64_t off = 0;
  for (int i = 0; i < r->net.nparams; i++) {
    dl_param *p = r->net.params[i];
    if (!p->has_grad) continue;
    memcpy(r->train.flat + off, p->grad.data, dl_tensor_bytes(&p->grad));
    off += p->grad.numel;
  }
  DL_TRY(dl_comm_allreduce_sum(r->comm, r->train.flat, n));
  float inv = r->cfg->bug.grad_sum_not_mean ? 1.0f : 1.0f / (float)r->world;
  off = 0;
  for (int i = 0; i < r->net.nparams; i++) {
    dl_param *p = r->net.params[i];
    if (!p->has_grad) continue;
    for (int64_t j = 0; j < p->grad.numel; j++) dl_f32(&p->grad)[j] = r->train.flat[off + j] * inv;
    off += p->grad.numel;
  }
  return DL_OK;
}

static double zero_fraction(dlc_rank *r) {
  int64_t zeros = 0, total = 0;
  for (int i = 0; i < r->net.nparams; i++) {
    dl_param *p = r->net.params[i];
    if (!p->has_grad) continue;
    for (int64_t j = 0; j < p->grad.numel; j++) zeros += dl_f32(&p->grad)[j] == 0.0f;
    total += p->grad.numel;
  }
  return total ? (double)zeros / (double)total : 0.0;
}

/* Unscale, clip, step: A2 clips the still-scaled gradients; A6 steps on
 * them, as optimizer.step() called in place of scaler.step(optimizer)
 * does (and without scaler.update(), which would raise in PyTorch). */
static dl_status update(dlc_rank *r, float lr, float *norm, float *clipped, bool *skipped) {
  const dlc_run_config *c = r->cfg;
  bool bypassed = c->bug.scaler_bypassed;
  bool unscale_first = !c->bug.clip_before_unscale && !bypassed;
  if (unscale_first) dl_scaler_unscale(&r->train.scaler, r->net.params, r->net.nparams);
  double zf = zero_fraction(r);
  if (zf > r->ev.zero_grad_fraction_max) r->ev.zero_grad_fraction_max = zf;
  if (c->clip_max_norm > 0)
    DL_TRY(dl_clip_grad_norm(r->net.params, r->net.nparams, c->clip_max_norm, false, norm));
  else DL_TRY(dl_grad_norm(r->net.params, r->net.nparams, norm));
  if (!unscale_first && !bypassed)
    dl_scaler_unscale(&r->train.scaler, r->net.params, r->net.nparams);
  DL_TRY(dl_grad_norm(r->net.params, r->net.nparams, clipped));
  if (r->train.scaler.found_inf) r->ev.overflow_steps++;
  *skipped = !bypassed && !dl_scaler_should_step(&r->train.scaler);
  if (*skipped) r->ev.skipped++;
  else DL_TRY(dl_optim_step_on(r->net.optim, lr, r->backend));
  if (!bypassed) dl_scaler_update(&r->train.scaler);
  return DL_OK;
}

/* Rank 0 records layer statistics every stats_every steps (0: the first
 * and the last), and at the steps the divergence search asks for. */
static bool stats_due(const dlc_rank *r) {
  const dlc_run_options *o = r->sh->opt;
  int64_t step = r->train.step, every = r->cfg->stats_every;
  bool asked = step >= o->stats_from && step < o->stats_to;
  bool regular = every > 0 ? step % every == 0 : step == 0 || step == r->cfg->steps - 1;
  return r->rank == 0 && (asked || regular);
}

dl_status dlc_train_step(dlc_rank *r) {
  const dlc_run_config *c = r->cfg;
  int K = c->accumulation;
  float lr = dl_lr_at(&r->train.sched, r->train.sched_step);
  dlc_stats_begin_step(&r->stats, stats_due(r));
  for (int k = 0; k < K; k++) DL_TRY(dlc_cursor_next(&r->data, &r->train.micro[k]));
  float tokens;
  DL_TRY(count_tokens(r, &tokens));
  if (!c->bug.no_zero_grad && !c->bug.zero_grad_in_micro_loop) dl_model_zero_grad(r->net.model);
  double loss_sum = 0;
  for (int k = 0; k < K; k++) {
    if (c->bug.zero_grad_in_micro_loop) dl_model_zero_grad(r->net.model);
    double l;
    DL_TRY(micro_step(r, &r->train.micro[k], tokens, &l));
    loss_sum += l;
  }
  float loss = (float)(c->loss.reduction == DL_REDUCTION_SUM ? loss_sum : loss_sum / K);
  DL_TRY(dl_comm_allreduce_sum(r->comm, &loss, 1));
  loss /= (float)r->world;
  DL_TRY(sync_gradients(r));
  float norm = 0, clipped = 0;
  bool skipped = false;
  DL_TRY(update(r, lr, &norm, &clipped, &skipped));
  DL_TRY(dlc_record_step(r, loss, norm, clipped, lr, skipped));
  r->train.step++;
  r->train.sched_step++;
  return DL_OK;
}
