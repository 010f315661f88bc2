/* The runner: executes one run configuration on the engine and records its
 * trace. Data-parallel runs start one thread per rank over the in-process
 * communicator, or, given a multi-process communicator (MPI), run this
 * process's rank only; rank 0 records the trace. */
#ifndef DLC_RUNNER_H
#define DLC_RUNNER_H

#include "comm/comm.h"
#include "scenario/config.h"
#include "trace/trace.h"

typedef struct dlc_run_options {
  const char *root;     /* fixture and init_weights paths are relative to it */
  const char *scenario; /* name recorded in the trace */
  const char *workdir;  /* existing directory for checkpoints */
  /* Called by rank 0 after each optimizer step; may be NULL. */
  void (*progress)(void *user, const char *run, int64_t step, int64_t steps);
  void *user;
  /* NULL: data-parallel ranks are threads of this process. Else this
   * process is rank dl_comm_rank(comm) of every data-parallel run, whose
   * world must equal dl_comm_world(comm); only rank 0's trace is filled. */
  dl_comm *comm;
  /* The device of runs whose configuration names none (--backend);
   * DLC_DEVICE_DEFAULT is the CPU. */
  dlc_device device;
  /* Tests: every rank computes on this backend instead of opening the
   * run's device (a host backend stands in for a GPU; world 1). */
  const dl_backend *backend_override;
  /* Calibration (dlcheck record --repeat): not 0, runs on the CPU compute
   * their GEMMs and convolutions on a perturbation backend seeded with it
   * (engine/backend/perturb/perturb.h) and sum their allreduces in an order it picks
   * (dl_comm_set_order_seed: a ring for odd seeds, a tree for even ones);
   * other devices ignore it. */
  uint64_t perturb_seed;
  /* Tests: the allreduce order alone (dl_comm_set_order_seed) when not 0;
   * 0: perturb_seed's on the CPU. */
  uint64_t allreduce_seed;
  /* The first-divergent-layer search (locate.h): layer statistics also at
   * steps stats_from .. stats_to - 1 (an empty range: none), and training
   * stops after stop_after steps (0: the run's own count). */
  int64_t stats_from, stats_to, stop_after;
} dlc_run_options;

/* The most a run's trace may hold (per-step series and digests, which
 * past 1 MiB per array live in a file in $TMPDIR, trace/spill.h; layer
 * statistics, in memory): 4 GiB. A run that would record more is refused
 * before its first step, with the number of steps that would fit, and so
 * is one whose per-step arrays would not fit in $TMPDIR's free space. */
#define DLC_TRACE_MAX_BYTES ((int64_t)4 << 30)

/* out must be empty; on failure it is freed and the message names the run. */
dl_status dlc_run(const dlc_run_config *cfg, const dlc_run_options *opt, dlc_trace *out);

#endif
