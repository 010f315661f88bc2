/* The Trace: everything one run recorded, the one structure the harness
 * passes around. Written to and read from HDF5 by store/trace_write.c and
 * store/trace_read.c; a golden file is a trace plus tolerances and an
 * environment fingerprint.
 *
 * It is generic on purpose: named per-step series ("loss", "grad_norm",
 * "lr", "loss_scale", "skipped"), per-step digests of named tensors (so the
 * first differing step and tensor can be found without storing every
 * tensor), per-layer activation statistics at chosen steps, named final
 * tensors ("param/0.weight", "buffer/1.running_mean"), and named scalar
 * metrics ("peak_bytes", "eval_accuracy", "zero_grad_fraction"). Checks and
 * detectors look things up by name. */
#ifndef DLC_TRACE_H
#define DLC_TRACE_H

#include "core/tensor.h"

#include <stdint.h>

#include "trace/dlc_limits.h"
#include "trace/spill.h"

/* A long run's per-step arrays (a series' values, the digests) spill from
 * the heap to a mapped file (trace/spill.h): still one array to index. */
typedef struct dlc_series {
  char name[DLC_NAME_MAX];
  int64_t n; /* steps recorded */
  double *v; /* n values (double: holds float32 values and counts exactly) */
  dlc_spill spill;
} dlc_series;

typedef struct dlc_named_tensor {
  char name[DLC_NAME_MAX];
  dl_tensor t; /* owned */
} dlc_named_tensor;

/* Activation statistics of one layer output at one step. */
enum {
  DLC_STAT_MEAN,
  DLC_STAT_STD,
  DLC_STAT_MIN,
  DLC_STAT_MAX,
  DLC_STAT_FRAC_ZERO,
  DLC_STAT_NONFINITE,
  DLC_STAT_COUNT
};
extern const char *const dlc_stat_names[DLC_STAT_COUNT];

typedef struct dlc_layer_stats {
  int64_t step; /* optimizer step the forward belonged to */
  int nlayers;
  char (*layer)[DLC_NAME_MAX]; /* "3 (linear)", forward order */
  double (*stat)[DLC_STAT_COUNT];
} dlc_layer_stats;

typedef struct dlc_metric {
  char name[DLC_NAME_MAX];
  double value;
} dlc_metric;

/* A named sentence of evidence the runner found (checkpoint key diagnosis,
 * per-rank sample overlap): checks quote it in their verdicts. */
typedef struct dlc_note {
  char name[DLC_NAME_MAX];
  char *text; /* owned */
} dlc_note;

typedef struct dlc_trace {
  char run[DLC_NAME_MAX]; /* "reference", "accumulated", "G1" */
  char scenario[DLC_NAME_MAX];
  char backend[32]; /* "cpu", "cuda" */
  uint64_t seed;
  uint64_t scenario_hash; /* of the scenario file's bytes */

  dlc_series *series;
  int nseries;

  /* digests[s * ndigest + j]: xxhash64 of tensor j's bytes after step s */
  int ndigest;
  char (*digest_names)[DLC_NAME_MAX];
  int64_t digest_steps;
  uint64_t *digests;
  dlc_spill digest_spill;

  dlc_layer_stats *stats;
  int nstats;
  dlc_named_tensor *finals;
  int nfinals;
  dlc_metric *metrics;
  int nmetrics;
  dlc_note *notes;
  int nnotes;
  /* A recorded run (a trace file given as a run): the fingerprint of the
   * machine that computed it, as its file carries it; NULL for an engine
   * run or a file without one. Owned. */
  char *origin_env;
} dlc_trace;

void dlc_trace_init(dlc_trace *t, const char *scenario, const char *run);
void dlc_trace_free(dlc_trace *t);
/* dst (initialised, empty) := a deep copy of src. */
dl_status dlc_trace_copy(dlc_trace *dst, const dlc_trace *src);

/* Append value v at the next step of series `name` (created on first use). */
dl_status dlc_trace_push(dlc_trace *t, const char *name, double v);
const dlc_series *dlc_trace_series(const dlc_trace *t, const char *name);

dl_status dlc_trace_set_metric(dlc_trace *t, const char *name, double v);
/* true and *v set if present */
bool dlc_trace_metric(const dlc_trace *t, const char *name, double *v);

/* Sets note `name` to a copy of text (replacing one of that name). */
dl_status dlc_trace_set_note(dlc_trace *t, const char *name, const char *text);
const char *dlc_trace_note(const dlc_trace *t, const char *name); /* NULL if none */

/* Copies src into a new final tensor `name` (replacing one of that name). */
dl_status dlc_trace_add_final(dlc_trace *t, const char *name, const dl_tensor *src);
const dl_tensor *dlc_trace_final(const dlc_trace *t, const char *name);

/* Records one step of digests: names[0..n-1] with tensors[0..n-1]. The
 * first call fixes the names; later calls must pass the same ones. */
dl_status dlc_trace_push_digests(dlc_trace *t, int n, const char *const *names,
                                 const dl_tensor *const *tensors);
uint64_t dlc_digest(const void *data, size_t bytes); /* xxhash64, seed 0 */

dl_status dlc_trace_push_stats(dlc_trace *t, int64_t step, int nlayers,
                               const char *const *layer_names,
                               const double (*stat)[DLC_STAT_COUNT]);

#endif
