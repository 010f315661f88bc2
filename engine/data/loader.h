/* The data loader: cuts an index list (a sampler's epoch) into batches and
 * fills them with worker threads that prefetch into a bounded ring, like
 * torch.utils.data.DataLoader with num_workers.
 *
 * Batches come out in order, and each batch's content is a function of its
 * indices, the seed and the epoch only: the same bits for 0, 1 or 8 workers.
 * Augmentation draws from the stream (seed, "augment", {epoch, sample id}),
 * never from a worker's state (determinism rule 1). */
#ifndef DL_LOADER_H
#define DL_LOADER_H

#include "data/data.h"
#include "numerics/philox.h"

#include <stdbool.h>
#include <stdint.h>

/* A user augmentation of one sample: `x` holds the sample's `numel` floats,
 * of shape shape[0..ndim-1] (the dataset's x without its first dimension).
 * `s` is the stream (seed, "augment/user", {epoch, sample id}). Called from
 * worker threads, so it must be thread-safe. */
typedef void (*dl_augment_fn)(void *user, const dl_stream *s, float *x, const int64_t *shape,
                              int ndim, int64_t numel);

/* Per-sample augmentation of float32 features, applied in this order, with
 * stream s = (seed, "augment", {epoch, sample id}):
 *   hflip      images [N, C, H, W]: reverse each row along W when
 *              uniform(s, word 0) < 0.5 (torchvision RandomHorizontalFlip)
 *   noise_std  x += noise_std * normal(s, words 2+2k, 3+2k) for element k
 *   fn         then the user hook, if any. */
typedef struct dl_augment {
  bool hflip;
  float noise_std; /* 0: no noise */
  dl_augment_fn fn;
  void *user;
} dl_augment;

typedef struct dl_loader_opts {
  int64_t batch;         /* rows per batch, >= 1 */
  bool drop_last;        /* drop a short last batch */
  int workers;           /* threads filling batches; 0: the calling thread */
  int prefetch;          /* batches in the ring; 0: 2 * workers (min 2) */
  const dl_augment *aug; /* NULL: none; copied at create */
  int64_t epoch;         /* keys augmentation */
  uint64_t seed;
} dl_loader_opts;

typedef struct dl_loader dl_loader;

/* Starts a loader over rows idx[0..n_idx-1] of `ds` (copied; `ds` is
 * borrowed and must outlive the loader). Workers start filling at once.
 * DL_ERR_INVALID for batch < 1, workers < 0, prefetch < 0, an index outside
 * [0, N), or augmentation that does not fit the data (hflip needs float32
 * [N, C, H, W]; noise and hooks need float32; noise_std finite >= 0). */
dl_status dl_loader_create(dl_loader **out, const dl_dataset *ds, const int64_t *idx, int64_t n_idx,
                           const dl_loader_opts *opts);

/* The next batch in order, or *batch = NULL after the last one. The batch is
 * owned by the loader and valid until the next call or destroy. */
dl_status dl_loader_next(dl_loader *ld, const dl_batch **batch);

/* Batches this loader yields in all: ceil(n_idx / batch), or floor with
 * drop_last. */
int64_t dl_loader_num_batches(const dl_loader *ld);

/* Stops the workers (a batch being filled is finished first), joins them and
 * frees everything. Safe at any point of the epoch and on NULL. */
void dl_loader_destroy(dl_loader *ld);

#endif
