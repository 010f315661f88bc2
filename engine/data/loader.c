#include "data/loader.h"

#include "core/mem.h"

#include <math.h>
#include <pthread.h>
#include <string.h>

/* Batch k is filled into slot k % n_slots. A worker may claim batch k only
 * once the consumer has released batch k - n_slots, so the ring is bounded
 * and no slot is overwritten while the caller still reads it. */
struct dl_loader {
  const dl_dataset *ds;
  int64_t *idx, n_idx;
  int64_t batch, n_batches;
  dl_augment aug;
  bool has_aug;
  int64_t epoch;
  uint64_t seed;

  dl_batch *slots;
  int64_t *slot_batch;    /* batch number a slot holds, -1: none yet */
  dl_status *slot_status; /* how filling it went */
  int n_slots;

  pthread_mutex_t mu;
  pthread_cond_t filled; /* a slot was filled: the consumer waits on it */
  pthread_cond_t freed;  /* a slot was released or stop: workers wait */
  int64_t next_claim;    /* next batch a worker will fill */
  int64_t released;      /* batches the consumer is done with */
  int64_t delivered;     /* batches handed out */
  bool stop;
  pthread_t *threads;
  int n_threads; /* started */
  bool sync_ok;  /* mutex and condition variables initialised */
};

/* ---- augmentation -------------------------------------------------------- */

static void hflip(float *x, const int64_t *shape) {
  int64_t rows = shape[0] * shape[1], w = shape[2];
  for (int64_t r = 0; r < rows; r++) {
    float *row = x + r * w;
    for (int64_t a = 0, b = w - 1; a < b; a++, b--) {
      float t = row[a];
      row[a] = row[b];
      row[b] = t;
    }
  }
}

/* Normals drawn in chunks on the stack: no allocation per sample, and the
 * same values as one call, since element k always uses words 2+2k, 3+2k. */
static void add_noise(float *x, int64_t numel, float std, const dl_stream *s) {
  enum { CHUNK = 64 };
  float z[CHUNK];
  for (int64_t k0 = 0; k0 < numel; k0 += CHUNK) {
    int64_t m = numel - k0 < CHUNK ? numel - k0 : CHUNK;
    dl_stream_normal(s, 2 + 2 * (uint64_t)k0, 0.0f, 1.0f, z, m);
    for (int64_t k = 0; k < m; k++) x[k0 + k] += std * z[k];
  }
}

static void augment_sample(const dl_loader *ld, float *x, int64_t id) {
  const dl_tensor *dx = &ld->ds->x;
  const int64_t *shape = dx->shape + 1;
  int64_t numel = dl_dataset_x_row(ld->ds);
  uint64_t key[2] = {(uint64_t)ld->epoch, (uint64_t)id};
  dl_stream s = dl_stream_make(ld->seed, "augment", key, 2);
  if (ld->aug.hflip) {
    float u;
    dl_stream_uniform(&s, 0, &u, 1);
    if (u < 0.5f) hflip(x, shape);
  }
  if (ld->aug.noise_std > 0.0f) add_noise(x, numel, ld->aug.noise_std, &s);
  if (ld->aug.fn) {
    dl_stream us = dl_stream_make(ld->seed, "augment/user", key, 2);
    ld->aug.fn(ld->aug.user, &us, x, shape, dx->ndim - 1, numel);
  }
}

/* ---- filling batches ----------------------------------------------------- */

static int64_t batch_rows(const dl_loader *ld, int64_t k) {
  int64_t left = ld->n_idx - k * ld->batch;
  return left < ld->batch ? left : ld->batch;
}

static dl_status fill(const dl_loader *ld, int64_t k, dl_batch *b) {
  int64_t rows = batch_rows(ld, k);
  DL_TRY(dl_dataset_gather(ld->ds, ld->idx + k * ld->batch, rows, b));
  if (!ld->has_aug) return DL_OK;
  int64_t row = dl_dataset_x_row(ld->ds);
  for (int64_t r = 0; r < rows; r++) augment_sample(ld, dl_f32(&b->x) + r * row, b->ids[r]);
  return DL_OK;
}

static void *worker_main(void *arg) {
  dl_loader *ld = arg;
  pthread_mutex_lock(&ld->mu);
  for (;;) {
    while (!ld->stop && ld->next_claim < ld->n_batches &&
           ld->next_claim >= ld->released + ld->n_slots)
      pthread_cond_wait(&ld->freed, &ld->mu);
    if (ld->stop || ld->next_claim >= ld->n_batches) break;
    int64_t k = ld->next_claim++;
    int slot = (int)(k % ld->n_slots);
    pthread_mutex_unlock(&ld->mu);
    dl_status s = fill(ld, k, &ld->slots[slot]);
    pthread_mutex_lock(&ld->mu);
    ld->slot_status[slot] = s;
    ld->slot_batch[slot] = k;
    pthread_cond_broadcast(&ld->filled);
  }
  pthread_mutex_unlock(&ld->mu);
  return NULL;
}

/* ---- lifetime ------------------------------------------------------------ */

static dl_status check_opts(const dl_dataset *ds, const int64_t *idx, int64_t n_idx,
                            const dl_loader_opts *o) {
  if (o->batch < 1 || o->workers < 0 || o->prefetch < 0 || n_idx < 0 || (n_idx && !idx))
    return dl_fail(DL_ERR_INVALID,
                   "loader over %s: need batch >= 1, workers >= 0, "
                   "prefetch >= 0 and an index list (got batch=%lld, workers=%d, "
                   "prefetch=%d, %lld indices)",
                   ds->name, (long long)o->batch, o->workers, o->prefetch, (long long)n_idx);
  for (int64_t i = 0; i < n_idx; i++)
    if (idx[i] < 0 || idx[i] >= ds->n)
      return dl_fail(DL_ERR_INVALID,
                     "loader over %s: index %lld (position %lld) is "
                     "outside [0, %lld)",
                     ds->name, (long long)idx[i], (long long)i, (long long)ds->n);
  const dl_augment *a = o->aug;
  if (!a || (!a->hflip && a->noise_std == 0.0f && !a->fn)) return DL_OK;
  if (ds->x.dtype != DL_F32)
    return dl_fail(DL_ERR_INVALID,
                   "loader over %s: augmentation needs float32 x, "
                   "not %s",
                   ds->name, dl_dtype_name(ds->x.dtype));
  if (a->hflip && ds->x.ndim != 4)
    return dl_fail(DL_ERR_INVALID,
                   "loader over %s: hflip needs images [N, C, H, W], "
                   "x has rank %d",
                   ds->name, ds->x.ndim);
  if (!(a->noise_std >= 0.0f) || isinf(a->noise_std))
    return dl_fail(DL_ERR_INVALID,
                   "loader over %s: noise_std %g must be finite and "
                   ">= 0",
                   ds->name, (double)a->noise_std);
  return DL_OK;
}

static dl_status alloc_ring(dl_loader *ld, int n_slots) {
  ld->slots = dl_mem_alloc((size_t)n_slots * sizeof *ld->slots, "loader slots");
  ld->slot_batch = dl_mem_alloc((size_t)n_slots * sizeof *ld->slot_batch, "loader slots");
  ld->slot_status = dl_mem_alloc((size_t)n_slots * sizeof *ld->slot_status, "loader slots");
  if (!ld->slots || !ld->slot_batch || !ld->slot_status) return DL_ERR_NOMEM;
  ld->n_slots = n_slots;
  for (int i = 0; i < n_slots; i++) {
    ld->slot_batch[i] = -1;
    DL_TRY(dl_batch_alloc(&ld->slots[i], ld->ds, ld->batch));
  }
  return DL_OK;
}

static dl_status start_workers(dl_loader *ld, int workers) {
  if (pthread_mutex_init(&ld->mu, NULL) != 0)
    return dl_fail(DL_ERR_NOMEM, "loader: cannot create a mutex");
  if (pthread_cond_init(&ld->filled, NULL) != 0) {
    pthread_mutex_destroy(&ld->mu);
    return dl_fail(DL_ERR_NOMEM, "loader: cannot create a condition variable");
  }
  if (pthread_cond_init(&ld->freed, NULL) != 0) {
    pthread_cond_destroy(&ld->filled);
    pthread_mutex_destroy(&ld->mu);
    return dl_fail(DL_ERR_NOMEM, "loader: cannot create a condition variable");
  }
  ld->sync_ok = true;
  if (workers == 0) return DL_OK;
  ld->threads = dl_mem_alloc((size_t)workers * sizeof *ld->threads, "loader threads");
  if (!ld->threads) return DL_ERR_NOMEM;
  for (int i = 0; i < workers; i++) {
    if (pthread_create(&ld->threads[i], NULL, worker_main, ld) != 0)
      return dl_fail(DL_ERR_NOMEM, "loader: cannot start worker thread %d of %d", i, workers);
    ld->n_threads++;
  }
  return DL_OK;
}

static int ring_size(const dl_loader_opts *o, int64_t n_batches) {
  int64_t n = o->workers == 0 ? 1 : o->prefetch ? o->prefetch : 2 * (int64_t)o->workers;
  if (o->workers > 0 && n < 2) n = 2; /* one slot held by the caller, one filling */
  if (n > n_batches) n = n_batches > 0 ? n_batches : 1;
  return (int)n;
}

dl_status dl_loader_create(dl_loader **out, const dl_dataset *ds, const int64_t *idx, int64_t n_idx,
                           const dl_loader_opts *opts) {
  *out = NULL;
  DL_TRY(check_opts(ds, idx, n_idx, opts));
  dl_loader *ld = dl_mem_alloc(sizeof *ld, "loader");
  if (!ld) return dl_fail_context(DL_ERR_NOMEM, "loader over %s: ", ds->name);
  ld->ds = ds;
  ld->n_idx = n_idx;
  ld->batch = opts->batch;
  ld->n_batches = opts->drop_last ? n_idx / opts->batch : (n_idx + opts->batch - 1) / opts->batch;
  ld->epoch = opts->epoch;
  ld->seed = opts->seed;
  if (opts->aug) {
    ld->aug = *opts->aug;
    ld->has_aug = ld->aug.hflip || ld->aug.noise_std > 0.0f || ld->aug.fn;
  }
  dl_status s = DL_OK;
  ld->idx = dl_mem_alloc((size_t)n_idx * sizeof *idx, "loader indices");
  if (!ld->idx) s = DL_ERR_NOMEM;
  if (s == DL_OK && n_idx) memcpy(ld->idx, idx, (size_t)n_idx * sizeof *idx);
  if (s == DL_OK) s = alloc_ring(ld, ring_size(opts, ld->n_batches));
  if (s == DL_OK) s = start_workers(ld, opts->workers);
  if (s != DL_OK) {
    dl_loader_destroy(ld);
    return dl_fail_context(s, "loader over %s: ", ds->name);
  }
  *out = ld;
  return DL_OK;
}

int64_t dl_loader_num_batches(const dl_loader *ld) { return ld->n_batches; }

dl_status dl_loader_next(dl_loader *ld, const dl_batch **batch) {
  *batch = NULL;
  int64_t k = ld->delivered;
  if (k >= ld->n_batches) return DL_OK;
  int slot = (int)(k % ld->n_slots);
  if (ld->n_threads == 0) {
    ld->slot_status[slot] = fill(ld, k, &ld->slots[slot]);
  } else {
    pthread_mutex_lock(&ld->mu);
    ld->released = k; /* the caller is done with batch k - 1 */
    pthread_cond_broadcast(&ld->freed);
    while (ld->slot_batch[slot] != k) pthread_cond_wait(&ld->filled, &ld->mu);
    pthread_mutex_unlock(&ld->mu);
  }
  if (ld->slot_status[slot] != DL_OK)
    return dl_fail(DL_ERR_INTERNAL,
                   "loader over %s: batch %lld could not be filled "
                   "(status %s)",
                   ld->ds->name, (long long)k, dl_status_name(ld->slot_status[slot]));
  ld->delivered = k + 1;
  *batch = &ld->slots[slot];
  return DL_OK;
}

void dl_loader_destroy(dl_loader *ld) {
  if (!ld) return;
  if (ld->sync_ok) {
    pthread_mutex_lock(&ld->mu);
    ld->stop = true;
    pthread_cond_broadcast(&ld->freed);
    pthread_mutex_unlock(&ld->mu);
    for (int i = 0; i < ld->n_threads; i++) pthread_join(ld->threads[i], NULL);
    pthread_cond_destroy(&ld->freed);
    pthread_cond_destroy(&ld->filled);
    pthread_mutex_destroy(&ld->mu);
  }
  for (int i = 0; ld->slots && i < ld->n_slots; i++) dl_batch_free(&ld->slots[i]);
  dl_mem_free(ld->slots);
  dl_mem_free(ld->slot_batch);
  dl_mem_free(ld->slot_status);
  dl_mem_free(ld->threads);
  dl_mem_free(ld->idx);
  dl_mem_free(ld);
}
