/* Samplers: the order in which an epoch visits a dataset's samples, as an
 * index list. Shuffles are Philox permutations keyed by (seed, "shuffle",
 * epoch), so every machine, worker count and rank computes the same order
 * (determinism rule 1).
 *
 *   sequential   0, 1, ..., N-1
 *   random       the permutation of `epoch` (PyTorch's RandomSampler, but
 *                our generator, not torch.randperm)
 *   distributed  torch.utils.data.DistributedSampler exactly, the shuffle
 *                being our permutation: drop_last off pads by wrapping the
 *                list to ceil(N/world)*world; drop_last on truncates it to
 *                floor(N/world)*world; rank r takes positions r, r+world, ...
 *                `epoch` plays set_epoch's part.
 * Sequential and random ignore rank and world: every rank sees the whole
 * dataset, as in PyTorch without a DistributedSampler. */
#ifndef DL_SAMPLER_H
#define DL_SAMPLER_H

#include "core/status.h"

#include <stdbool.h>
#include <stdint.h>

typedef enum dl_sampler_kind {
  DL_SAMPLER_SEQUENTIAL = 0,
  DL_SAMPLER_RANDOM,
  DL_SAMPLER_DISTRIBUTED
} dl_sampler_kind;

typedef struct dl_sampler {
  dl_sampler_kind kind;
  int64_t n; /* dataset size N >= 0 */
  uint64_t seed;
  bool shuffle;    /* distributed only (random always shuffles) */
  bool drop_last;  /* distributed only */
  int rank, world; /* distributed only: 0 <= rank < world */
} dl_sampler;

/* An index list; `v` is accounted memory (dl_mem) owned by the list. */
typedef struct dl_indices {
  int64_t *v;
  int64_t n;
} dl_indices;

/* The indices sampler `s` yields in `epoch`. `out` must be empty ({0} or
 * freed). DL_ERR_INVALID for N < 0, world < 1, rank outside [0, world), an
 * unknown kind. */
dl_status dl_sampler_indices(const dl_sampler *s, int64_t epoch, dl_indices *out);
void dl_indices_free(dl_indices *ix); /* leaves ix empty; safe on empty */

/* Number of indices dl_sampler_indices yields (torch's len(sampler)), or -1
 * for an invalid sampler. */
int64_t dl_sampler_len(const dl_sampler *s);

/* perm := a uniform permutation of 0..n-1 for (seed, epoch): Fisher-Yates
 * from the top, step k (k = 0..n-2) swapping position i = n-1-k with
 * j = dl_stream_below(stream (seed, "shuffle", {epoch}), word 2k, i+1).
 * Each step takes words 2k and 2k+1, since dl_stream_below reads two words. */
void dl_permutation(int64_t n, uint64_t seed, int64_t epoch, int64_t *perm);

#endif
