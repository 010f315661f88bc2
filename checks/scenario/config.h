/* One run's configuration: what the scenario loader produces for each run
 * (base settings with the run's overrides applied) and what the runner
 * executes. Plain data, no YAML here.
 *
 * The `bug` fields inject the catalogue's pitfalls (docs/pitfalls.md IDs in the
 * comments): a correct pipeline has them all off. */
#ifndef DLC_CONFIG_H
#define DLC_CONFIG_H

#include "optim/amp.h"
#include "nn/layer.h"
#include "nn/loss.h"
#include "optim/optim.h"
#include "optim/schedule.h"

#include <stdbool.h>
#include <stdint.h>

#include "trace/dlc_limits.h"

enum { DLC_MAX_LAYERS = 64, DLC_MAX_PATTERNS = 8 };

typedef enum { DLC_DATA_FIXTURE, DLC_DATA_BLOBS, DLC_DATA_TOKENS } dlc_data_source;

typedef struct dlc_data_config {
  dlc_data_source source;
  char path[DLC_PATH_MAX]; /* fixture: HDF5 file, relative to the repo root */
  char split[32];          /* fixture group for training: "train" */
  char eval_split[32];     /* fixture group for evaluation: "test" ("" none) */
  int64_t limit;           /* use the first `limit` training samples; 0 = all */
  int64_t eval_limit;
  int64_t n, dim, classes;         /* blobs: samples, features, classes */
  float spread;                    /* blobs: std of points around their centre */
  int64_t vocab, min_len, max_len; /* tokens */
  int64_t batch;                   /* per-rank micro-batch size */
  bool shuffle, drop_last, augment;
  int workers; /* loader threads; 0 = in the training thread */
} dlc_data_config;

/* The optimizer, schedule and loss scaler are the engine's own descriptions
 * (engine/optim/optim.h, schedule.h, amp.h), as the runner hands them over. Their
 * real-valued settings are float32 values widened to double, as scenario
 * files have always been read (goldens depend on those bits).
 *
 * optim.lr is optimizer.lr in the file: the base learning rate. The runner
 * starts the schedule from it; schedule.lr is not read. */
typedef struct dlc_precision_config {
  dl_dtype autocast;     /* DL_F32 (off), DL_F16, DL_BF16 */
  dl_scaler_mode scaler; /* off, dynamic (GradScaler) or static */
  float init_scale;      /* 65536 (GradScaler) or the static scale */
  float growth_factor, backoff_factor;
  int growth_interval; /* 2000 */
  int loss_half;       /* A4: loss/softmax in half: 0, 1 (f16), 2 (bf16) */
} dlc_precision_config;

typedef struct dlc_parallel_config {
  int world;              /* data-parallel ranks; 1 = single process */
  int threads;            /* kernel threads (dl_set_num_threads) */
  bool broadcast_buffers; /* DDP default true (rank 0's buffers each forward) */
} dlc_parallel_config;

/* The training loss (engine/nn/loss.h's dl_ce_desc). Cross-entropy only: the
 * runner's data are class labels. With reduction sum, K accumulated
 * micro-batch losses are summed, not divided by K: their sum is the big
 * batch's sum. */
typedef enum { DLC_LOSS_CROSS_ENTROPY = 0 } dlc_loss_kind;
typedef struct dlc_loss_config {
  dlc_loss_kind kind;
  dl_reduction reduction; /* mean (default) or sum */
  float label_smoothing;  /* in [0, 1]; 0 */
  int32_t ignore_index;   /* -100 */
} dlc_loss_config;

/* Where a run computes (engine/backend/backend.h). `default` takes the command
 * line's --backend, so one scenario runs on either; a run that names a
 * device always runs there (backend_equiv's CPU and CUDA runs). */
typedef enum { DLC_DEVICE_DEFAULT = 0, DLC_DEVICE_CPU, DLC_DEVICE_CUDA } dlc_device;
typedef enum { DLC_MATH_FP32 = 0, DLC_MATH_TF32 } dlc_math;                  /* cuBLAS and cuDNN */
typedef enum { DLC_CONV_DETERMINISTIC = 0, DLC_CONV_FASTEST } dlc_conv_algo; /* cuDNN */
typedef struct dlc_backend_config {
  dlc_device device;
  dlc_math math;           /* fp32 by default (docs/design.md rule 3: TF32 only on request) */
  dlc_conv_algo conv_algo; /* deterministic by default; fastest = cudnn.benchmark */
} dlc_backend_config;

typedef struct dlc_checkpoint_config {
  int64_t at_step;             /* 0 = no checkpoint; else save after this step,
                               reload into a fresh engine, continue */
  bool optimizer, scaler, rng; /* what the checkpoint holds (C1, C2, C3) */
  bool scheduler;              /* the LR scheduler's step count (C7) */
  bool add_module_prefix;      /* C4: keys saved with "module." */
  bool strict;                 /* load strictly (C5 is strict=false) */
  char drop_key[DLC_NAME_MAX]; /* C5/C6: key missing from the saved file */
  bool change_architecture;    /* C6: the resumed model differs in one layer */
} dlc_checkpoint_config;

typedef struct dlc_eval_config {
  int64_t every; /* evaluate every N steps (0 = at the end only) */
  bool enabled;
  bool eval_mode; /* model.eval() during inference (M1, M3) */
  bool no_grad;   /* torch.no_grad() during inference (M2) */
  int repeats;    /* identical inferences compared (M1) */
} dlc_eval_config;

/* Pitfall switches, one entry each: X(switch, catalogue ID, what it does).
 * All off in a correct pipeline. The switch is the key under `bugs:` in a
 * scenario file and a field of dlc_bugs; the runner line that honours it
 * reads cfg->bug.<switch>; the ID is its docs/pitfalls.md entry. */
#define DLC_BUGS(X)                                                                           \
  X(no_zero_grad, "G1", "optimizer.zero_grad() is never called")                              \
  X(loss_not_divided, "G2", "micro-batch losses are not divided by K")                        \
  X(zero_grad_in_micro_loop, "G3", "gradients are zeroed inside the micro-batch loop")        \
  X(token_mean_per_micro, "G4", "token mean taken per micro-batch")                           \
  X(clip_before_unscale, "A2", "gradients clipped before unscaling")                          \
  X(scaler_bypassed, "A6", "optimizer.step() on the scaled gradients, no scaler.step/update") \
  X(no_distributed_sampler, "D1", "no DistributedSampler: every rank sees all data")          \
  X(no_set_epoch, "D2", "sampler.set_epoch() is never called")                                \
  X(grad_sum_not_mean, "D3", "gradients summed over ranks, not averaged")                     \
  X(unsynced_buffers, "D4", "buffers not broadcast from rank 0")                              \
  X(metric_rank0_only, "D5", "the evaluation metric is rank 0's shard only")                  \
  X(rank_keyed_noise, "D7", "noise keyed by batch row, the same on every rank")               \
  X(eval_consumes_train_rng, "D8", "evaluation shifts the training shuffle")                  \
  X(bn_frozen_wrongly, "M4", "frozen BatchNorm left in train mode")                           \
  X(eval_mode_left_on, "M5", "training goes on in eval mode after an evaluation")             \
  X(unordered_reduction, "N2", "reduction order depends on timing")                           \
  X(thread_keyed_rng, "N3", "noise keyed by thread")                                          \
  X(dead_relu, "F3", "biases before ReLUs start at -10")

#define DLC_BUG_FIELD(name, id, doc) bool name;
typedef struct dlc_bugs {
  DLC_BUGS(DLC_BUG_FIELD)
} dlc_bugs;
#undef DLC_BUG_FIELD

typedef struct dlc_run_config {
  char name[DLC_NAME_MAX];
  /* A recorded trace (HDF5, e.g. of a PyTorch run) that stands for this run
   * instead of training it ("" = train in the engine). The loader resets
   * every other setting of such a run to its default: none of them applies. */
  char trace[DLC_PATH_MAX];
  uint64_t seed;
  dl_layer_desc layers[DLC_MAX_LAYERS];
  int nlayers;
  char init_weights[DLC_PATH_MAX]; /* HDF5 state dict to start from ("" none) */
  dlc_data_config data;
  dl_optim_desc optim;  /* with optim.lr, the base learning rate */
  dl_schedule schedule; /* schedule.lr unused: optim.lr is the base */
  float clip_max_norm;  /* 0 = no clipping */
  float loss_weight;    /* the loss is multiplied by it (an auxiliary loss's
                               weight, say); 1 by default */
  dlc_loss_config loss;
  dlc_precision_config precision;
  dlc_parallel_config parallel;
  dlc_backend_config backend;
  int accumulation; /* micro-batches per optimizer step (K) */
  int64_t steps;    /* optimizer steps */
  dlc_checkpoint_config checkpoint;
  dlc_eval_config eval;
  char frozen[DLC_MAX_PATTERNS][DLC_NAME_MAX]; /* F1: name prefixes with requires_grad off */
  int nfrozen;
  char not_in_optimizer[DLC_MAX_PATTERNS][DLC_NAME_MAX]; /* F2 */
  int nnot_in_optimizer;
  int64_t stats_every; /* layer statistics every N steps (0 = first and last) */
  dlc_bugs bug;
} dlc_run_config;

/* The engine's defaults for optimizer `kind` (dl_optim_default), each real
 * rounded to float32 as a scenario file's numbers are read. */
void dlc_optim_default(dl_optim_kind kind, dl_optim_desc *out);

/* PyTorch's defaults: dlc_optim_default(SGD) (lr 0.01), a constant
 * schedule, GradScaler 2^16 / 2.0 / 0.5 / 2000, world 1, threads 1, K 1.
 * The scenario loader starts every run from here. */
void dlc_run_config_default(dlc_run_config *c);

/* The settings whose default depends on others, once a run's file is read:
 * optim.lr and optim.weight_decay left NAN take the optimizer type's
 * (dlc_optim_default); a cosine schedule without total_steps decays over
 * all c->steps (a resumed run's schedule ends where the straight one's
 * does). */
void dlc_run_config_resolve(dlc_run_config *c);

/* The schedule a run trains with: c->schedule started from c->optim.lr. */
dl_schedule dlc_run_schedule(const dlc_run_config *c);

#endif
