/* Shared between the runner's files: the state of one rank and of the run. */
#ifndef DLC_RUNNER_INTERNAL_H
#define DLC_RUNNER_INTERNAL_H

#include "optim/amp.h"
#include "run/backend_open.h"
#include "comm/comm.h"
#include "data/data.h"
#include "data/loader.h"
#include "nn/model.h"
#include "optim/optim.h"
#include "run/runner.h"
#include "data/sampler.h"
#include "optim/schedule.h"

/* What all ranks of one run share. */
typedef struct dlc_run_shared {
  const dlc_run_config *cfg;
  const dlc_run_options *opt;
  dl_dataset train, eval;
  bool has_eval;
  dl_comm **comms;   /* per rank; only this process's rank if external */
  dl_comm *external; /* a multi-process communicator (not owned), or NULL */
  dlc_trace *trace;  /* written by rank 0 only */
  int32_t **seen;    /* seen[rank][sample]: uses in the first epoch */
  bool epoch0_done;
} dlc_run_shared;

/* Where a rank is in its data: the sampler's epoch and the next index in
 * its order, and what derives from them. Owned (written) by runner_data.c
 * only; the checkpoint restores it with dlc_cursor_seek, evaluation shifts
 * its key (D8) with dlc_cursor_shift_key. */
typedef struct dlc_data_cursor {
  const dlc_run_config *cfg;
  const dl_dataset *train;
  int rank;
  int32_t *seen; /* uses of each sample in the first epoch, or NULL */
  dl_sampler sampler;
  int64_t epoch, pos;
  uint64_t rng_offset; /* added to the shuffle key (D8) */
  dl_indices order;    /* this epoch's order; NULL v: load it */
  dl_loader *loader;   /* this epoch's batches from pos on (data.workers) */
  bool epoch0_done;    /* the first epoch ran to its end (stays set) */
  /* D2 evidence: epochs whose order repeats the one before */
  uint64_t last_order_hash;
  int64_t last_order_epoch, order_repeats;
} dlc_data_cursor;

/* The model and its optimizer. Owned by runner_rank.c (built at setup and
 * again by dlc_rank_rebuild_model when a checkpoint is restored). */
typedef struct dlc_rank_net {
  dl_model *model;
  dl_param **params; /* the model's, in state-dict order */
  int nparams;
  dl_optim *optim;
} dlc_rank_net;

/* The optimizer-step state. Owned by runner_step.c (set up by
 * runner_rank.c; runner_ckpt.c restores step, scheduler and scaler). */
typedef struct dlc_rank_train {
  dl_grad_scaler scaler;
  dl_schedule sched;
  int64_t step;       /* optimizer steps taken */
  int64_t sched_step; /* the LR scheduler's own count (PyTorch's last_epoch): the step,
                         unless a resume lost it (C7) */
  dl_batch *micro;    /* accumulation micro-batches, cfg->accumulation */
  float *flat;        /* gradients or buffers flattened for collectives */
  int64_t flat_n;
} dlc_rank_train;

/* Pitfall evidence gathered while training. Owned by runner_step.c; read
 * by runner_record.c into the trace's metrics. */
typedef struct dlc_rank_evidence {
  int64_t skipped, overflow_steps;
  double zero_grad_fraction_max, buffer_diff_max, loss_op_drift_max;
} dlc_rank_evidence;

/* Layer statistics of the current step (rank 0). Owned by runner_record.c
 * (the hooks fill it; dlc_stats_begin_step starts a step). */
typedef struct dlc_step_stats {
  bool now; /* record layer statistics in this step */
  int n, cap;
  char (*names)[DLC_NAME_MAX];
  double (*vals)[DLC_STAT_COUNT];
} dlc_step_stats;

/* One rank's training state, in the parts above. runner_rank.c sets up
 * and tears down all of it and owns the fields here. */
typedef struct dlc_rank {
  dlc_run_shared *sh;
  const dlc_run_config *cfg;
  int rank, world;
  dl_comm *comm;
  dl_backend *backend;                 /* where GEMMs and convolutions run; NULL: the CPU */
  void (*close_backend)(dl_backend *); /* what opened it here; NULL: the options' override */
  dlc_rank_net net;
  dlc_rank_train train;
  dlc_data_cursor data;
  dlc_rank_evidence ev;
  dlc_step_stats stats;
  int64_t inference_calls; /* runner_eval.c: keys the noise of each inference pass */
} dlc_rank;

/* runner_data.c */
/* A cursor at the start of epoch 0 over `train` for rank `rank` of
 * `world`, the sampler PyTorch's pipeline would use (D1: none). */
void dlc_cursor_init(dlc_data_cursor *d, const dlc_run_config *cfg, const dl_dataset *train,
                     int rank, int world, int32_t *seen);
void dlc_cursor_free(dlc_data_cursor *d); /* the order and loader; the position stays */
/* The next micro-batch: a short last batch of an epoch is returned as is
 * (drop_last off) or skipped (on), as PyTorch's DataLoader. */
dl_status dlc_cursor_next(dlc_data_cursor *d, dl_batch *dst);
/* Moves to (epoch, pos) with the shuffle key shifted by rng_offset. */
void dlc_cursor_seek(dlc_data_cursor *d, int64_t epoch, int64_t pos, uint64_t rng_offset);
/* D8: evaluation drew from the training stream; later epochs shuffle
 * with another key (the current order stays). */
void dlc_cursor_shift_key(dlc_data_cursor *d);
/* x and y of the first `rows` rows of b: views of its tensors (a short
 * last batch uses the first rows). */
void dlc_batch_rows(const dl_batch *b, int64_t rows, dl_tensor *x, dl_tensor *y);
/* Blobs and tokens: the rows drawn (training and evaluation together) and
 * the evaluation's share; DL_ERR_INVALID naming the keys to change when a
 * size computed from them (rows x dim or max_len, in bytes) would overflow. */
dl_status dlc_synthetic_rows(const dlc_data_config *d, int64_t *rows, int64_t *n_eval);

/* runner_rank.c */
dl_status dlc_rank_setup(dlc_rank *r, dlc_run_shared *sh, int rank);
void dlc_rank_teardown(dlc_rank *r);
/* Builds the model and optimizer again (a checkpoint's fresh engine); C6
 * changes the last linear layer. */
dl_status dlc_rank_rebuild_model(dlc_rank *r, bool changed_architecture);
void dlc_rank_train_modes(dlc_rank *r);
/* runner_step.c */
dl_status dlc_train_step(dlc_rank *r);
/* runner_eval.c */
dl_status dlc_evaluate(dlc_rank *r, bool final);
/* runner_ckpt.c */
dl_status dlc_checkpoint_roundtrip(dlc_rank *r);
/* runner_record.c */
enum { DLC_STEP_SERIES = 6 }; /* series dlc_record_step pushes every step */
/* Bytes a run's trace holds after `steps` steps with `ntensors` params and
 * buffers digested each step, evaluations and layer statistics included
 * (o may be NULL: no extra statistics steps). */
double dlc_trace_bytes(const dlc_run_config *c, const dlc_run_options *o, int64_t steps,
                       int ntensors);
/* DL_ERR_INVALID, saying how many steps fit, if that exceeds
 * DLC_TRACE_MAX_BYTES (runner.h). */
dl_status dlc_record_check_size(const dlc_rank *r, int64_t steps);
void dlc_stats_begin_step(dlc_step_stats *s, bool record);
void dlc_record_forward(void *user, const char *layer, const dl_tensor *y);
void dlc_record_backward(void *user, const char *layer, const dl_tensor *dy);
dl_status dlc_record_step(dlc_rank *r, double loss, float grad_norm, float clipped_norm, float lr,
                          bool skipped);
dl_status dlc_record_final(dlc_rank *r);
dl_status dlc_record_initial(dlc_rank *r);

#endif
