/* Datasets held in memory: features x, targets y and, for token sequences,
 * the length of each sequence. Read from HDF5 fixtures or generated from
 * Philox streams, so that sample i is a pure function of (seed, i) and never
 * of N or of who asked for it (determinism rule 1).
 *
 * Two shapes of dataset:
 *   images/features  x DL_F32 [N, ...] (rank 2..4), y DL_I32 [N] class ids
 *   token sequences  x DL_I32 [N, T] token ids,    y DL_I32 [N, T] targets,
 *                    lengths DL_I32 [N]; past a sequence's length x holds the
 *                    pad id and y holds DL_IGNORE_INDEX, as PyTorch's
 *                    CrossEntropyLoss(ignore_index=-100) expects. */
#ifndef DL_DATA_H
#define DL_DATA_H

#include "core/tensor.h"

#include <stdint.h>

enum { DL_IGNORE_INDEX = -100 };

typedef struct dl_dataset {
  dl_tensor x;       /* DL_F32 [N, ...] or DL_I32 [N, T] */
  dl_tensor y;       /* DL_I32 [N] or DL_I32 [N, T] */
  dl_tensor lengths; /* DL_I32 [N] for sequences; empty otherwise */
  int64_t n;         /* number of samples N */
  int n_classes;     /* every target is in [0, n_classes) or DL_IGNORE_INDEX */
  char name[256];    /* "fixtures/digits.h5:/train", "blobs(seed=7)" */
} dl_dataset;

/* Reads `group`/x and `group`/y (and `group`/lengths if present) of the HDF5
 * file at `path`; n_classes comes from the integer attribute "n_classes" of
 * the group, else of the file's root. x must be float32 (rank 2..4) or int32
 * [N, T] tokens; y any integer type (converted to int32) of shape [N], or
 * [N, T] for tokens. `ds` must be empty ({0} or freed); on failure it stays
 * empty. Errors name the file and dataset:
 *   DL_ERR_IO      the file is missing or unreadable
 *   DL_ERR_FORMAT  not HDF5, truncated, missing dataset or attribute, wrong
 *                  dtype or rank, x and y disagree on N
 *   DL_ERR_INVALID a target outside [0, n_classes), a length outside [0, T]
 * HDF5's own error printing is silenced during the call; its innermost
 * message is folded into ours. File locking is off (safe on NFS): the file
 * is only read. */
dl_status dl_dataset_load_h5(dl_dataset *ds, const char *path, const char *group);

/* Gaussian blobs: class c has centre m_c with components uniform in
 * [-1, 1) from stream (seed, "blobs/centers"), word c*dim + d. Sample i uses
 * stream (seed, "blobs/sample", {i}): label = dl_stream_below(word 0,
 * classes), x[i][d] = m_label[d] + spread * normal (Box-Muller words 2+2d,
 * 3+2d). x DL_F32 [n, dim], y DL_I32 [n]. */
dl_status dl_dataset_blobs(dl_dataset *ds, int64_t n, int64_t dim, int classes, float spread,
                           uint64_t seed);

/* Variable-length token sequences, T = max_len. Sample i uses stream
 * (seed, "seq/sample", {i}): length = min_len + dl_stream_below(word 0,
 * max_len - min_len + 1); token t = dl_stream_below(word 2 + 2t, vocab).
 * The target of token v is (3 v + 1) mod vocab: a per-token map that an
 * embedding followed by a linear layer can learn exactly. Positions
 * t >= length hold x = pad_id and y = DL_IGNORE_INDEX. n_classes = vocab.
 * Needs 1 <= min_len <= max_len, vocab >= 2, 0 <= pad_id < vocab. */
dl_status dl_dataset_sequences(dl_dataset *ds, int64_t n, int vocab, int64_t min_len,
                               int64_t max_len, int pad_id, uint64_t seed);

void dl_dataset_free(dl_dataset *ds); /* leaves ds empty; safe on empty */

/* Elements of one sample of x and of y (product of dims after the first). */
int64_t dl_dataset_x_row(const dl_dataset *ds);
int64_t dl_dataset_y_row(const dl_dataset *ds);

/* A batch: rows copied out of a dataset. Storage holds `capacity` rows; the
 * first dimension of x, y (and lengths) is the number of rows filled, so a
 * short last batch has the right shape without reallocating. */
typedef struct dl_batch {
  dl_tensor x, y, lengths; /* like the dataset's, with capacity rows */
  int64_t *ids;            /* dataset index of each row (for dl_ctx.sample_ids) */
  int64_t n;               /* rows filled */
  int64_t capacity;
} dl_batch;

/* Allocates a batch of `capacity` rows shaped for `ds`; `b` must be zeroed. */
dl_status dl_batch_alloc(dl_batch *b, const dl_dataset *ds, int64_t capacity);
void dl_batch_free(dl_batch *b); /* leaves b zeroed; safe on zeroed */

/* Copies rows idx[0..n-1] of ds into b (1 <= n <= capacity) and sets b->ids
 * to idx. DL_ERR_INVALID if an index is outside [0, N) or b was allocated for
 * a dataset of another shape; b is unchanged then. */
dl_status dl_dataset_gather(const dl_dataset *ds, const int64_t *idx, int64_t n, dl_batch *b);

#endif
