/* A rank's data cursor: which sampler, which epoch, where in its order,
 * and the batches from there on; the evidence only the cursor sees (which
 * samples the first epoch used, D1/D6; repeated epoch orders, D2). */
#include "run/runner_internal.h"

#include <string.h>

void dlc_cursor_init(dlc_data_cursor *d, const dlc_run_config *cfg, const dl_dataset *train,
                     int rank, int world, int32_t *seen) {
  memset(d, 0, sizeof *d);
  d->cfg = cfg;
  d->train = train;
  d->rank = rank;
  d->seen = seen;
  d->last_order_epoch = -2;
  dl_sampler *s = &d->sampler;
  s->n = train->n;
  s->seed = cfg->seed;
  s->rank = rank;
  s->world = world;
  s->shuffle = cfg->data.shuffle;
  s->drop_last = cfg->data.drop_last;
  if (world > 1 && !cfg->bug.no_distributed_sampler) s->kind = DL_SAMPLER_DISTRIBUTED;
  else s->kind = cfg->data.shuffle ? DL_SAMPLER_RANDOM : DL_SAMPLER_SEQUENTIAL;
}

void dlc_cursor_free(dlc_data_cursor *d) {
  dl_loader_destroy(d->loader);
  d->loader = NULL;
  dl_indices_free(&d->order);
}

void dlc_cursor_seek(dlc_data_cursor *d, int64_t epoch, int64_t pos, uint64_t rng_offset) {
  d->epoch = epoch;
  d->pos = pos;
  d->rng_offset = rng_offset;
  dlc_cursor_free(d);
}

void dlc_cursor_shift_key(dlc_data_cursor *d) { d->rng_offset++; }

/* Loads the order of the current epoch. D2 (no set_epoch) asks the sampler
 * for epoch 0 every time; D8 shifts the shuffle key when evaluation ran. */
static dl_status load_epoch(dlc_data_cursor *d) {
  dl_indices_free(&d->order);
  dl_sampler s = d->sampler;
  s.seed += d->rng_offset;
  int64_t epoch = d->cfg->bug.no_set_epoch ? 0 : d->epoch;
  DL_TRY(dl_sampler_indices(&s, epoch, &d->order));
  uint64_t h = dlc_digest(d->order.v, (size_t)d->order.n * sizeof *d->order.v);
  if (d->epoch == d->last_order_epoch + 1 && h == d->last_order_hash) d->order_repeats++;
  d->last_order_hash = h;
  d->last_order_epoch = d->epoch;
  return DL_OK;
}

/* The loader for the rest of the current epoch, from pos on. Batches
 * depend only on the index list, never on the worker count. */
static dl_status open_loader(dlc_data_cursor *d) {
  const dlc_data_config *c = &d->cfg->data;
  dl_augment aug = {.hflip = d->train->x.ndim == 4, .noise_std = 0.05f};
  dl_loader_opts o = {.batch = c->batch,
                      .drop_last = c->drop_last,
                      .workers = c->workers,
                      .aug = c->augment ? &aug : NULL,
                      .epoch = d->epoch,
                      .seed = d->cfg->seed};
  return dl_loader_create(&d->loader, d->train, d->order.v + d->pos, d->order.n - d->pos, &o);
}

/* The bytes of one row of t: a short batch's tensors are shaped [n, ...]
 * (dl_dataset_gather), not [capacity, ...]. */
static size_t row_bytes(const dl_tensor *t) {
  return t->shape[0] > 0 ? dl_tensor_bytes(t) / (size_t)t->shape[0] : 0;
}

static void copy_rows(dl_tensor *dst, const dl_tensor *src, int64_t rows) {
  if (!src->data) return;
  memcpy(dst->data, src->data, row_bytes(src) * (size_t)rows);
}

static void take_batch(dlc_data_cursor *d, const dl_batch *b, dl_batch *dst) {
  copy_rows(&dst->x, &b->x, b->n);
  copy_rows(&dst->y, &b->y, b->n);
  copy_rows(&dst->lengths, &b->lengths, b->n);
  memcpy(dst->ids, b->ids, (size_t)b->n * sizeof *b->ids);
  dst->n = b->n;
  if (d->epoch == 0 && d->seen)
    for (int64_t i = 0; i < b->n; i++) d->seen[b->ids[i]]++;
  d->pos += b->n;
}

dl_status dlc_cursor_next(dlc_data_cursor *d, dl_batch *dst) {
  for (;;) {
    if (!d->order.v) DL_TRY(load_epoch(d));
    if (!d->loader) DL_TRY(open_loader(d));
    const dl_batch *b;
    DL_TRY(dl_loader_next(d->loader, &b));
    if (b) {
      take_batch(d, b, dst);
      return DL_OK;
    }
    if (d->pos == 0)
      return dl_fail(DL_ERR_INVALID,
                     "rank %d: an epoch has %lld samples, fewer than one batch of %lld "
                     "with drop_last: use more data or a smaller batch",
                     d->rank, (long long)d->order.n, (long long)d->cfg->data.batch);
    if (d->epoch == 0) d->epoch0_done = true;
    d->epoch++;
    d->pos = 0;
    dlc_cursor_free(d);
  }
}

void dlc_batch_rows(const dl_batch *b, int64_t rows, dl_tensor *x, dl_tensor *y) {
  *x = b->x;
  *y = b->y;
  x->shape[0] = y->shape[0] = rows;
  x->numel = b->x.shape[0] > 0 ? b->x.numel / b->x.shape[0] * rows : 0;
  y->numel = b->y.shape[0] > 0 ? b->y.numel / b->y.shape[0] * rows : 0;
}

/* a * b into *out unless it leaves int64 (both >= 0). */
static bool mul_fits(int64_t a, int64_t b, int64_t *out) {
  return !__builtin_mul_overflow(a, b, out);
}

static dl_status too_large(const dlc_data_config *d, int64_t rows, const char *key, int64_t v) {
  return dl_fail(DL_ERR_INVALID,
                 "data: %lld samples (data.n %lld and %lld for evaluation) of data.%s %lld "
                 "need more bytes than a 64-bit size holds: use a smaller data.n, "
                 "data.eval_limit or data.%s",
                 (long long)rows, (long long)d->n, (long long)(rows - d->n), key, (long long)v,
                 key);
}

dl_status dlc_synthetic_rows(const dlc_data_config *d, int64_t *rows, int64_t *n_eval) {
  *n_eval = d->eval_limit > 0 ? d->eval_limit : d->n / 4;
  if (d->n < 1 || *n_eval < 0)
    return dl_fail(DL_ERR_INVALID,
                   "data: data.n %lld must be >= 1 and data.eval_limit %lld "
                   ">= 0",
                   (long long)d->n, (long long)d->eval_limit);
  if (__builtin_add_overflow(d->n, *n_eval, rows))
    return dl_fail(DL_ERR_INVALID,
                   "data: data.n %lld plus %lld evaluation samples (data.eval_limit, else "
                   "data.n / 4) overflows a 64-bit count: use a smaller data.n",
                   (long long)d->n, (long long)*n_eval);
  bool blobs = d->source == DLC_DATA_BLOBS;
  const char *key = blobs ? "dim" : "max_len";
  int64_t per_row = blobs ? d->dim : d->max_len, bytes;
  /* x (and for tokens y) are [rows, per_row] of 4-byte values; the labels,
   * lengths and per-sample counts are smaller than that. */
  if (per_row < 1 || !mul_fits(*rows, per_row, &bytes) || !mul_fits(bytes, 4, &bytes))
    return too_large(d, *rows, key, per_row);
  if (blobs && (!mul_fits(d->classes, d->dim, &bytes) || !mul_fits(bytes, 4, &bytes)))
    return too_large(d, *rows, "dim", d->dim);
  return DL_OK;
}
