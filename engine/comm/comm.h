/* Collective communication between data-parallel ranks.
 *
 * One interface, three backends: `local` (ranks are threads of one process,
 * the default), `mpi` (one process per rank, Open MPI; library dlcomm_mpi,
 * DL_HAVE_COMM_MPI) and `nccl` (GPUs; library dlcomm_nccl,
 * DL_HAVE_COMM_NCCL). The ordered allreduce sums in rank order 0..W-1 for
 * every element, so its result does not depend on timing or on the backend:
 * local, mpi and nccl give the same bits. The N2 pitfall switch sums in
 * arrival order instead.
 *
 * Faults: every collective waits at most dl_comm_timeout() seconds for the
 * other ranks, then fails with DL_ERR_IO naming the ranks that never reached
 * it; a rank that calls dl_comm_abort() makes the others' collectives fail
 * with DL_ERR_INTERNAL naming it. After either, the handle is spent: every
 * later collective fails at once. */
#ifndef DL_COMM_H
#define DL_COMM_H

#include "core/status.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct dl_comm dl_comm;

int dl_comm_rank(const dl_comm *c);
int dl_comm_world(const dl_comm *c);
const char *dl_comm_backend(const dl_comm *c); /* "local", "mpi" or "nccl" */

/* buf := sum over ranks of buf (every rank gets the same bits). */
dl_status dl_comm_allreduce_sum(dl_comm *c, float *buf, int64_t n);
/* buf := root's buf. */
dl_status dl_comm_broadcast(dl_comm *c, void *buf, size_t bytes, int root);
/* recv[r*bytes .. (r+1)*bytes) := rank r's send, for every r. */
dl_status dl_comm_allgather(dl_comm *c, const void *send, void *recv, size_t bytes);
dl_status dl_comm_barrier(dl_comm *c);
/* Pitfall N2: sum in the order ranks arrived (timing-dependent). Applies to
 * the ordered mode; the native mode's order is the library's anyway. */
void dl_comm_set_arrival_order(dl_comm *c, bool on);
/* A failing rank calls this so that the others' collectives return an
 * error instead of waiting for it forever. */
void dl_comm_abort(dl_comm *c);
void dl_comm_destroy(dl_comm *c); /* each rank's handle; NULL allowed */

/* `world` handles of one in-process group: comms[r] is rank r's, to be used
 * by one thread each. */
dl_status dl_comm_local_create(int world, dl_comm **comms);

/* How allreduce_sum adds. ORDERED (the default): every element summed as
 * acc = 0; acc += buf_r for r = 0..W-1 in float32, bitwise the same on every
 * backend, world size fixed. NATIVE: the backend's own algorithm
 * (MPI_Allreduce, ncclAllReduce; for local, a ring order starting after the
 * chunk's owner): faster, but its rounding depends on the library, its
 * version, the algorithm it picks and the topology. */
typedef enum dl_reduce_mode { DL_REDUCE_ORDERED = 0, DL_REDUCE_NATIVE } dl_reduce_mode;

void dl_comm_set_reduce_mode(dl_comm *c, dl_reduce_mode m);
dl_reduce_mode dl_comm_reduce_mode(const dl_comm *c);

/* Calibration (dlcheck record --repeat, engine/backend/perturb/perturb.h): seed != 0 makes
 * the local backend sum in another library's order, whatever the mode:
 * odd seeds every chunk in ring order rotated by (seed / 2) % W ranks past
 * the native one (NCCL's ring), even seeds a pairwise tree over the ranks
 * rotated by (seed / 2) % W, ((x_r + x_r+1) + (x_r+2 + x_r+3)) + ...
 * (NCCL's tree, MPI's recursive doubling); 0 (the default) leaves the
 * mode's order. The seed fixes the order, so a calibration repeats bit for
 * bit, and repeats 1, 2, ... draw both kinds. With two ranks every order
 * gives the same bits (a + b = b + a), with three a tree is one of the
 * ring orders; from four on trees add in orders no ring does. mpi and nccl
 * ignore it (their order is the library's). */
void dl_comm_set_order_seed(dl_comm *c, uint64_t seed);

/* Seconds a collective waits for the other ranks (> 0, at most 1e6).
 * Default: DLCHECK_COMM_TIMEOUT from the environment, else 60. */
dl_status dl_comm_set_timeout(dl_comm *c, double seconds);
double dl_comm_timeout(const dl_comm *c);

/* Start-up check, collective: every rank passes its `hash` of `what` (the
 * scenario file, the binary's version); if any differ, every rank fails
 * with DL_ERR_INVALID naming which ranks hold which value. */
dl_status dl_comm_check_consistent(dl_comm *c, uint64_t hash, const char *what);

/* How far the native allreduce is from the ordered one. */
typedef struct dl_reduce_diff {
  int64_t n;       /* elements compared */
  int64_t ndiff;   /* elements whose bits differ */
  double max_abs;  /* max |native - ordered| */
  double max_rel;  /* max |native - ordered| / |ordered| (inf if ordered is 0) */
  int64_t max_ulp; /* max distance in float32 steps (INT64_MAX for NaN vs number) */
} dl_reduce_diff;

/* Collective: allreduces copies of buf (left unchanged) both ways and
 * compares; `out` is the worst over all ranks, the same on every rank. */
dl_status dl_comm_reduce_diff(dl_comm *c, const float *buf, int64_t n, dl_reduce_diff *out);

/* ---- mpi backend (link dlcomm_mpi) ----
 * This process's rank of MPI_COMM_WORLD. Initialises MPI (thread level
 * SERIALIZED: one thread at a time per process may call collectives) unless
 * the program did. Handles may be created and destroyed any number of
 * times; dl_comm_mpi_finalize() ends MPI once at the end of the program. */
dl_status dl_comm_mpi_create(dl_comm **out);
/* Finalises MPI if dl_comm_mpi_create initialised it (no-op otherwise).
 * Every handle must be destroyed first. After a failed collective it does
 * not finalise (MPI_Finalize would wait for the dead or hung rank) and
 * returns DL_ERR_IO: exit with a non-zero status, and mpirun ends the job. */
dl_status dl_comm_mpi_finalize(void);

/* ---- nccl backend (link dlcomm_nccl) ----
 * Buffers may be device memory or host memory (staged through the GPU).
 * One process driving `ndev` GPUs (ncclCommInitAll): comms[r] is rank r's
 * handle on GPU devices[r] (devices NULL: 0..ndev-1), one thread each. */
dl_status dl_comm_nccl_create_all(int ndev, const int *devices, dl_comm **comms);
/* One process per GPU under mpirun: rank 0 makes the NCCL unique id and
 * broadcasts it over MPI (as nccl-tests and llm.c do). device < 0 picks
 * the node-local rank modulo the visible GPUs. Needs dlcomm_nccl built with
 * MPI; MPI is finalised with dl_comm_mpi_finalize(). */
dl_status dl_comm_nccl_create_mpi(int device, dl_comm **out);
/* The GPU check (ci/gpu-check.sh): on `ndev` GPUs (0: all visible), the
 * ordered allreduce must equal a host rank-order sum bitwise; `out` gets
 * how far NCCL's native allreduce is from it. DL_ERR_UNSUPPORTED without a
 * GPU. */
dl_status dl_comm_nccl_selfcheck(int ndev, dl_reduce_diff *out);

#endif
