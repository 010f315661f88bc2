/* Shared between the runner's files: the state of one rank and of the run. */
#ifndef DLC_RUNNER_INTERNAL_H
#define DLC_RUNNER_INTERNAL_H

#include "amp.h"
#include "run/backend_open.h"
#include "comm/comm.h"
#include "data.h"
#include "loader.h"
#include "model.h"
#include "optim.h"
#include "run/runner.h"
#include "sampler.h"
#include "schedule.h"

/* What all ranks of one run share. */
typedef struct dlc_run_shared {
  const dlc_run_config *cfg;
  const dlc_run_options *opt;
  dl_dataset train, eval;
  bool has_eval;
  dl_comm **comms;         /* per rank; only this process's rank if external */
  dl_comm *external;       /* a multi-process communicator (not owned), or NULL */
  dlc_trace *trace;        /* written by rank 0 only */
  int32_t **seen;          /* seen[rank][sample]: uses in the first epoch */
  bool epoch0_done;
} dlc_run_shared;

/* One rank's training state. */
typedef struct dlc_rank {
  dlc_run_shared *sh;
  const dlc_run_config *cfg;
  int rank, world;
  dl_comm *comm;
  dl_backend *backend;     /* where GEMMs and convolutions run; NULL: the CPU */
  bool backend_owned;      /* opened here (else the options' override) */
  dl_model *model;
  dl_param **params;       /* the model's, in state-dict order */
  int nparams;
  dl_optim *optim;
  dl_grad_scaler scaler;
  dl_schedule sched;
  /* data position: the sampler's epoch and the next index in its order */
  dl_sampler sampler;
  int64_t epoch, pos;
  uint64_t rng_offset;     /* D8: bumped by evaluation when the bug is on */
  int64_t inference_calls; /* keys the noise of each inference pass */
  dl_indices order;
  dl_batch *micro;         /* accumulation micro-batches, cfg->accumulation */
  float *flat;             /* gradients or buffers flattened for collectives */
  int64_t flat_n;
  int64_t step;
  /* evidence */
  int64_t skipped, overflow_steps;
  double zero_grad_fraction_max, buffer_diff_max, loss_op_drift_max;
  dl_loader *loader;       /* this epoch's batches (data.workers threads) */
  uint64_t last_order_hash;
  int64_t last_order_epoch; /* epoch whose order was loaded last */
  int64_t order_repeats;
  bool stats_now;          /* record layer statistics in this step */
  int nstat;
  char (*stat_names)[DLC_NAME_MAX];
  double (*stat_vals)[DLC_STAT_COUNT];
  int stat_cap;
} dlc_rank;

/* runner_rank.c */
dl_status dlc_rank_setup(dlc_rank *r, dlc_run_shared *sh, int rank);
void dlc_rank_teardown(dlc_rank *r);
dl_status dlc_rank_build_model(dlc_rank *r, bool changed_architecture);
dl_status dlc_rank_next_batch(dlc_rank *r, dl_batch *dst);
void dlc_rank_train_modes(dlc_rank *r);
void dlc_rank_reset_data(dlc_rank *r);
/* runner_step.c */
dl_status dlc_train_step(dlc_rank *r);
/* runner_eval.c */
dl_status dlc_evaluate(dlc_rank *r, bool final);
/* runner_ckpt.c */
dl_status dlc_checkpoint_roundtrip(dlc_rank *r);
/* runner_record.c */
void dlc_record_forward(void *user, const char *layer, const dl_tensor *y);
void dlc_record_backward(void *user, const char *layer, const dl_tensor *dy);
dl_status dlc_record_step(dlc_rank *r, double loss, float grad_norm, float clipped_norm,
                          float lr, bool skipped);
dl_status dlc_record_final(dlc_rank *r);
dl_status dlc_record_initial(dlc_rank *r);

#endif
