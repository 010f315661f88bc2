/* Runs one configuration: loads the data, starts one thread per rank over
 * the in-process communicator, and gathers the evidence that needs all
 * ranks (which samples each rank saw). */
#include "run/runner_internal.h"

#include "core/mem.h"
#include "store/path.h"
#include "core/threads.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Keeps the first n rows of a dataset (the tensors keep their memory). */
static void keep_rows(dl_dataset *ds, int64_t n) {
  if (n <= 0 || n >= ds->n) return;
  dl_tensor *ts[] = {&ds->x, &ds->y, &ds->lengths};
  for (int i = 0; i < 3; i++) {
    if (!ts[i]->data) continue;
    ts[i]->numel = ts[i]->numel / ts[i]->shape[0] * n;
    ts[i]->shape[0] = n;
  }
  ds->n = n;
}

/* Moves rows [from, n) of src into a new dataset dst; src keeps [0, from). */
static dl_status split_tail(dl_dataset *src, int64_t from, dl_dataset *dst) {
  memset(dst, 0, sizeof *dst);
  dl_tensor *s[] = {&src->x, &src->y, &src->lengths}, *d[] = {&dst->x, &dst->y, &dst->lengths};
  for (int i = 0; i < 3; i++) {
    if (!s[i]->data) continue;
    int64_t shape[DL_MAX_DIMS];
    memcpy(shape, s[i]->shape, sizeof shape);
    shape[0] = src->n - from;
    DL_TRY(dl_tensor_alloc(d[i], s[i]->dtype, s[i]->ndim, shape, "evaluation split"));
    size_t row = dl_tensor_bytes(s[i]) / (size_t)src->n;
    memcpy(d[i]->data, (char *)s[i]->data + row * (size_t)from, row * (size_t)shape[0]);
  }
  dst->n = src->n - from;
  dst->n_classes = src->n_classes;
  snprintf(dst->name, sizeof dst->name, "%.200s (evaluation split)", src->name);
  keep_rows(src, from);
  return DL_OK;
}

static dl_status load_data(dlc_run_shared *sh) {
  const dlc_data_config *d = &sh->cfg->data;
  uint64_t seed = sh->cfg->seed;
  if (d->source == DLC_DATA_FIXTURE) {
    char path[2 * DLC_PATH_MAX];
    DL_TRY(dlc_path_under(path, sizeof path, sh->opt->root, d->path));
    DL_TRY(dl_dataset_load_h5(&sh->train, path, d->split));
    keep_rows(&sh->train, d->limit);
    if (d->eval_split[0]) {
      DL_TRY(dl_dataset_load_h5(&sh->eval, path, d->eval_split));
      keep_rows(&sh->eval, d->eval_limit);
      sh->has_eval = true;
    }
    return DL_OK;
  }
  /* Synthetic data: one draw of n + eval samples, split, so that both
   * halves come from the same distribution. */
  int64_t rows, n_eval;
  DL_TRY(dlc_synthetic_rows(d, &rows, &n_eval));
  if (d->source == DLC_DATA_BLOBS)
    DL_TRY(dl_dataset_blobs(&sh->train, rows, d->dim, (int)d->classes, d->spread, seed));
  else
    DL_TRY(dl_dataset_sequences(&sh->train, rows, (int)d->vocab, d->min_len, d->max_len, 0, seed));
  DL_TRY(split_tail(&sh->train, d->n, &sh->eval));
  sh->has_eval = n_eval > 0;
  return DL_OK;
}

typedef struct rank_job {
  dlc_run_shared *sh;
  int rank;
  dl_status status;
  char error[2048];
} rank_job;

static dl_status train(dlc_rank *r) {
  const dlc_run_config *c = r->cfg;
  int64_t steps = r->sh->opt->stop_after > 0 && r->sh->opt->stop_after < c->steps
                      ? r->sh->opt->stop_after
                      : c->steps;
  DL_TRY(dlc_record_check_size(r, steps));
  DL_TRY(dlc_record_initial(r));
  while (r->train.step < steps) {
    DL_TRY(dlc_train_step(r));
    if (c->checkpoint.at_step == r->train.step && r->train.step < steps)
      DL_TRY(dlc_checkpoint_roundtrip(r));
    if (c->eval.every > 0 && r->train.step % c->eval.every == 0 && r->train.step < steps)
      DL_TRY(dlc_evaluate(r, false));
  }
  DL_TRY(dlc_evaluate(r, true));
  if (r->rank == 0) {
    char what[1024];
    DL_TRY(dlc_trace_set_note(r->sh->trace, "backend",
                              dlc_backend_describe(r->backend, what, sizeof what)));
  }
  return dlc_record_final(r);
}

static void *rank_main(void *arg) {
  rank_job *job = arg;
  dlc_rank r;
  dl_status s = dlc_rank_setup(&r, job->sh, job->rank);
  if (!s) s = train(&r);
  if (job->rank == 0) job->sh->epoch0_done = r.data.epoch0_done;
  if (s) {
    snprintf(job->error, sizeof job->error, "rank %d: %s", job->rank, dl_last_error());
    dl_comm_abort(job->sh->comms[job->rank]);
  }
  job->status = s;
  dlc_rank_teardown(&r);
  return NULL;
}

/* uses[i] := how often sample i was used in the first epoch, all ranks
 * together: summed here for thread ranks, over the communicator for
 * processes (counts are small integers, exact in float). */
static dl_status total_uses(dlc_run_shared *sh, float *uses) {
  int64_t n = sh->train.n;
  for (int r = 0; r < sh->cfg->parallel.world; r++)
    if (sh->seen[r])
      for (int64_t i = 0; i < n; i++) uses[i] += (float)sh->seen[r][i];
  if (sh->external) DL_TRY(dl_comm_allreduce_sum(sh->external, uses, n));
  return DL_OK;
}

/* Every sample of the first epoch seen exactly once over all ranks? */
static dl_status record_samples(dlc_run_shared *sh) {
  int64_t n = sh->train.n, dup = 0, missing = 0, first_dup = -1;
  float *uses = calloc((size_t)n + 1, sizeof *uses);
  if (!uses) return dl_fail(DL_ERR_NOMEM, "out of memory counting sample uses");
  dl_status s = total_uses(sh, uses);
  for (int64_t i = 0; !s && i < n; i++) {
    if (uses[i] > 1 && first_dup < 0) first_dup = i;
    dup += uses[i] > 1 ? (int64_t)uses[i] - 1 : 0;
    missing += uses[i] == 0;
  }
  free(uses);
  DL_TRY(s);
  dlc_trace *t = sh->trace;
  DL_TRY(dlc_trace_set_metric(t, "epoch0_complete", sh->epoch0_done));
  DL_TRY(dlc_trace_set_metric(t, "samples_duplicated", (double)dup));
  DL_TRY(dlc_trace_set_metric(t, "samples_missing", sh->epoch0_done ? (double)missing : 0));
  char note[512];
  snprintf(note, sizeof note,
           "first epoch (%s): %lld samples, %lld extra uses (first duplicated sample id %lld), "
           "%lld never used",
           sh->epoch0_done ? "complete" : "incomplete", (long long)n, (long long)dup,
           (long long)first_dup, (long long)(sh->epoch0_done ? missing : 0));
  return dlc_trace_set_note(t, "samples", note);
}

static dl_status check_config(const dlc_run_config *c) {
  if (c->parallel.world < 1 || c->parallel.world > 64)
    return dl_fail(DL_ERR_INVALID, "world %d outside 1..64", c->parallel.world);
  if (c->checkpoint.at_step > 0 && c->parallel.world > 1)
    return dl_fail(DL_ERR_UNSUPPORTED, "checkpoint round trips run with world 1 only");
  if (c->accumulation < 1 || c->steps < 1 || c->data.batch < 1)
    return dl_fail(DL_ERR_INVALID, "accumulation, steps and batch must be >= 1");
  return DL_OK;
}

/* Reports the first rank that failed on its own, not one it took down. */
static dl_status first_failure(const rank_job *jobs, int n) {
  for (int pass = 0; pass < 2; pass++)
    for (int r = 0; r < n; r++)
      if (jobs[r].status && (pass == 1 || jobs[r].status != DL_ERR_INTERNAL))
        return dl_fail(jobs[r].status, "%s", jobs[r].error);
  return DL_OK;
}

static dl_status run_ranks(dlc_run_shared *sh) {
  int W = sh->cfg->parallel.world;
  rank_job jobs[64];
  pthread_t th[64];
  if (sh->external) { /* this process is one rank */
    jobs[0] = (rank_job){.sh = sh, .rank = dl_comm_rank(sh->external)};
    rank_main(&jobs[0]);
    return first_failure(jobs, 1);
  }
  for (int r = 0; r < W; r++) jobs[r] = (rank_job){.sh = sh, .rank = r};
  int started = 0;
  for (int r = 1; r < W; r++, started++)
    if (pthread_create(&th[r], NULL, rank_main, &jobs[r]) != 0) break;
  if (started == W - 1) rank_main(&jobs[0]);
  else dl_comm_abort(sh->comms[0]);
  for (int r = 1; r <= started; r++) pthread_join(th[r], NULL);
  if (started < W - 1) return dl_fail(DL_ERR_NOMEM, "cannot start rank threads");
  return first_failure(jobs, W);
}

/* The communicators of this run: the external one for a multi-process
 * data-parallel run, else a local group of W thread ranks. */
static dl_status make_comms(dlc_run_shared *sh, const dl_comm *external, dl_comm **comms) {
  int W = sh->cfg->parallel.world;
  if (!external || W == 1) return dl_comm_local_create(W, comms);
  if (dl_comm_world(external) != W)
    return dl_fail(DL_ERR_INVALID,
                   "run %s has %d ranks but %d processes were started: run with --world %d "
                   "or start %d processes",
                   sh->cfg->name, W, dl_comm_world(external), dl_comm_world(external), W);
  sh->external = (dl_comm *)external;
  comms[dl_comm_rank(external)] = sh->external;
  return DL_OK;
}

dl_status dlc_run(const dlc_run_config *cfg, const dlc_run_options *opt, dlc_trace *out) {
  dlc_trace_init(out, opt->scenario, cfg->name);
  out->seed = cfg->seed;
  snprintf(out->backend, sizeof out->backend, "%s",
           dlc_device_name(dlc_run_device(cfg, opt->device)));
  dlc_run_shared sh = {.cfg = cfg, .opt = opt, .trace = out};
  int W = cfg->parallel.world;
  dl_comm *comms[64] = {0};
  int64_t base = dl_mem_current();
  dl_mem_reset_peak();
  dl_status s = check_config(cfg);
  if (!s) s = dl_set_num_threads(cfg->parallel.threads);
  if (!s) s = load_data(&sh);
  if (!s) s = make_comms(&sh, opt->comm, comms);
  sh.comms = comms;
  sh.seen = s ? NULL : calloc((size_t)W, sizeof *sh.seen);
  if (!s && !sh.seen) s = dl_fail(DL_ERR_NOMEM, "out of memory");
  for (int r = 0; !s && r < W; r++)
    if (comms[r] && !(sh.seen[r] = calloc((size_t)sh.train.n + 1, sizeof **sh.seen)))
      s = dl_fail(DL_ERR_NOMEM, "out of memory");
  if (!s) s = run_ranks(&sh);
  if (!s) s = record_samples(&sh);
  if (!s) s = dlc_trace_set_metric(out, "peak_bytes", (double)(dl_mem_peak() - base));
  for (int r = 0; r < W; r++) {
    if (sh.seen) free(sh.seen[r]);
    if (comms[r] != sh.external) dl_comm_destroy(comms[r]);
  }
  free(sh.seen);
  dl_dataset_free(&sh.train);
  dl_dataset_free(&sh.eval);
  if (s) {
    dlc_trace_free(out);
    return dl_fail_context(s, "run %s: ", cfg->name);
  }
  return DL_OK;
}
