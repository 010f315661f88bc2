/* Inference on the evaluation set, as the scenario says the pipeline does
 * it (eval mode or not, no_grad or not), with the evidence the M and D5/D8
 * checks read: repeatability, buffer movement, peak memory against a
 * correct eval+no_grad pass, accuracy on the shard vs all ranks. */
#include "run/runner_internal.h"

#include "core/mem.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct eval_result {
  double correct, count; /* doubles: they go through a float allreduce */
  double loss;           /* sum of the targets' cross-entropy (natural log) */
  double *hist;          /* classes */
  dl_tensor first;       /* outputs of the first batch, if asked */
  int64_t peak;          /* bytes above the start of the pass */
} eval_result;

/* -log softmax(o)[t] over C logits, in double (the held-out loss). */
static double cross_entropy(const float *o, int64_t C, int32_t t) {
  double m = o[0];
  for (int64_t k = 1; k < C; k++) m = o[k] > m ? o[k] : m;
  double z = 0;
  for (int64_t k = 0; k < C; k++) z += exp((double)o[k] - m);
  return log(z) + m - (double)o[t];
}

static void score(const dl_tensor *out, const dl_tensor *y, int64_t rows, eval_result *res) {
  int64_t C = out->shape[out->ndim - 1];
  int64_t per = y->numel / y->shape[0];
  for (int64_t i = 0; i < rows * per; i++) {
    int32_t t = dl_i32(y)[i];
    if (t == DL_IGNORE_INDEX) continue;
    const float *o = dl_f32(out) + i * C;
    int64_t best = 0;
    for (int64_t k = 1; k < C; k++) best = o[k] > o[best] ? k : best;
    res->hist[best] += 1;
    res->correct += best == t;
    res->count += 1;
    if (t >= 0 && t < C) res->loss += cross_entropy(o, C, t);
  }
}

static dl_status eval_batches(dlc_rank *r, const dl_indices *idx, dl_batch *b, bool no_grad,
                              eval_result *res, bool keep_first) {
  int64_t B = r->cfg->data.batch;
  for (int64_t pos = 0; pos < idx->n; pos += B) {
    int64_t take = idx->n - pos < B ? idx->n - pos : B;
    DL_TRY(dl_dataset_gather(&r->sh->eval, idx->v + pos, take, b));
    dl_tensor x, y;
    dlc_batch_rows(b, take, &x, &y);
    /* Every inference call draws its own noise, as each forward call in
     * PyTorch does: dropout left on (M1) shows up as outputs that vary. */
    dl_ctx ctx = {.grad_enabled = !no_grad,
                  .autocast = r->cfg->precision.autocast,
                  .seed = r->cfg->seed,
                  .step = ((int64_t)1 << 40) + r->inference_calls,
                  .sample_ids = b->ids,
                  .backend = r->backend};
    const dl_tensor *out;
    DL_TRY(dl_model_forward(r->net.model, &ctx, &x, &out));
    score(out, &y, take, res);
    dl_status s = DL_OK;
    if (keep_first && pos == 0) s = dl_tensor_clone(&res->first, out, "first eval output");
    dl_model_release(r->net.model);
    DL_TRY(s);
  }
  return DL_OK;
}

/* One pass over this rank's shard (DistributedSampler without shuffle). */
static dl_status eval_pass(dlc_rank *r, bool eval_mode, bool no_grad, eval_result *res,
                           bool keep_first) {
  dl_sampler s = {.kind = r->world > 1 ? DL_SAMPLER_DISTRIBUTED : DL_SAMPLER_SEQUENTIAL,
                  .n = r->sh->eval.n,
                  .seed = r->cfg->seed,
                  .rank = r->rank,
                  .world = r->world};
  dl_indices idx = {0};
  dl_batch b = {0};
  DL_TRY(dl_sampler_indices(&s, 0, &idx));
  dl_status st = dl_batch_alloc(&b, &r->sh->eval, r->cfg->data.batch);
  if (eval_mode) dl_model_train(r->net.model, false);
  int64_t base = dl_mem_current();
  dl_mem_reset_peak();
  if (!st) st = eval_batches(r, &idx, &b, no_grad, res, keep_first);
  res->peak = dl_mem_peak() - base;
  r->inference_calls++;
  if (!r->cfg->bug.eval_mode_left_on) dlc_rank_train_modes(r); /* M5 forgets model.train() */
  dl_batch_free(&b);
  dl_indices_free(&idx);
  return st;
}

static dl_status buffers_snapshot(dlc_rank *r, float **out, int64_t *n) {
  *n = 0;
  for (int i = 0; i < dl_model_num_buffers(r->net.model); i++) {
    dl_tensor *t = &dl_model_buffer(r->net.model, i)->value;
    if (t->dtype == DL_F32) *n += t->numel;
  }
  *out = malloc((size_t)(*n ? *n : 1) * sizeof **out);
  if (!*out) return dl_fail(DL_ERR_NOMEM, "out of memory for a buffer snapshot");
  int64_t off = 0;
  for (int i = 0; i < dl_model_num_buffers(r->net.model); i++) {
    dl_tensor *t = &dl_model_buffer(r->net.model, i)->value;
    if (t->dtype != DL_F32) continue;
    memcpy(*out + off, t->data, dl_tensor_bytes(t));
    off += t->numel;
  }
  return DL_OK;
}

static double max_abs_diff(const float *a, const float *b, int64_t n) {
  double m = 0;
  for (int64_t i = 0; i < n; i++) {
    double d = fabs((double)a[i] - (double)b[i]);
    if (d > m || isnan(d)) m = isnan(d) ? INFINITY : d;
  }
  return m;
}

static dl_status record_eval(dlc_rank *r, eval_result *res, eval_result *again, eval_result *ref,
                             double buf_change) {
  float sums[3] = {(float)res->correct, (float)res->count, (float)res->loss};
  DL_TRY(dl_comm_allreduce_sum(r->comm, sums, 3));
  if (r->rank != 0) return DL_OK;
  dlc_trace *t = r->sh->trace;
  double local = res->count ? res->correct / res->count : 0;
  double global = sums[1] > 0 ? sums[0] / sums[1] : 0;
  double reported = r->cfg->bug.metric_rank0_only ? local : global;
  DL_TRY(dlc_trace_set_metric(t, "eval_accuracy", reported));
  DL_TRY(dlc_trace_set_metric(t, "eval_accuracy_global", global));
  DL_TRY(dlc_trace_set_metric(t, "eval_metric_gap", fabs(reported - global)));
  DL_TRY(dlc_trace_set_metric(t, "eval_loss", sums[1] > 0 ? (double)sums[2] / sums[1] : 0));
  DL_TRY(dlc_trace_set_metric(t, "inference_buffer_change", buf_change));
  double rep = again->first.data
                   ? max_abs_diff(dl_f32(&res->first), dl_f32(&again->first), res->first.numel)
                   : 0;
  DL_TRY(dlc_trace_set_metric(t, "inference_repeat_max_diff", rep));
  DL_TRY(dlc_trace_set_metric(t, "inference_peak_bytes", (double)res->peak));
  DL_TRY(dlc_trace_set_metric(t, "inference_peak_nograd_bytes", (double)ref->peak));
  DL_TRY(dlc_trace_set_metric(t, "inference_peak_ratio",
                              ref->peak > 0 ? (double)res->peak / (double)ref->peak : 1));
  int64_t C = r->sh->eval.n_classes;
  dl_tensor h = {0};
  DL_TRY(dl_tensor_alloc(&h, DL_F32, 1, &C, "class histogram"));
  double top = 0;
  for (int64_t k = 0; k < C; k++) {
    dl_f32(&h)[k] = (float)res->hist[k];
    top = res->hist[k] > top ? res->hist[k] : top;
  }
  dl_status s = dlc_trace_add_final(t, "eval/class_histogram", &h);
  dl_tensor_free(&h);
  DL_TRY(s);
  return dlc_trace_set_metric(t, "eval_top_class_fraction", res->count ? top / res->count : 0);
}

static void result_free(eval_result *e) {
  free(e->hist);
  dl_tensor_free(&e->first);
}

dl_status dlc_evaluate(dlc_rank *r, bool final) {
  const dlc_eval_config *e = &r->cfg->eval;
  if (!e->enabled || !r->sh->has_eval) return DL_OK;
  if (r->cfg->bug.eval_consumes_train_rng) dlc_cursor_shift_key(&r->data); /* D8 */
  int64_t C = r->sh->eval.n_classes;
  eval_result res = {0}, again = {0}, ref = {0};
  res.hist = calloc((size_t)C, sizeof *res.hist);
  again.hist = calloc((size_t)C, sizeof *again.hist);
  ref.hist = calloc((size_t)C, sizeof *ref.hist);
  float *before = NULL, *after = NULL;
  int64_t nb = 0;
  dl_status s = res.hist && again.hist && ref.hist
                    ? DL_OK
                    : dl_fail(DL_ERR_NOMEM, "out of memory for evaluation");
  if (!s) s = buffers_snapshot(r, &before, &nb);
  if (!s) s = eval_pass(r, e->eval_mode, e->no_grad, &res, final);
  if (!s) s = buffers_snapshot(r, &after, &nb);
  if (!s && final && e->repeats >= 2) s = eval_pass(r, e->eval_mode, e->no_grad, &again, true);
  if (!s && final) s = eval_pass(r, true, true, &ref, false);
  if (!s && final) s = record_eval(r, &res, &again, &ref, max_abs_diff(before, after, nb));
  if (!s && !final && r->rank == 0)
    s = dlc_trace_push(r->sh->trace, "eval_accuracy", res.count ? res.correct / res.count : 0);
  free(before);
  free(after);
  result_free(&res);
  result_free(&again);
  result_free(&ref);
  return s;
}
