/* What the comm backends share (private to engine/comm): the handle with
 * its operations table, and the helpers every backend uses to add in a
 * fixed order and to say which ranks a collective is waiting for. */
#ifndef DL_COMM_BACKEND_H
#define DL_COMM_BACKEND_H

#include "comm/comm.h"

/* The public entry points (comm.c) validate arguments and count the
 * collective before calling these; buffers are non-NULL or empty. */
typedef struct dl_comm_ops {
  const char *name;
  bool run_alone; /* run collectives in a world of one too (else: no-ops) */
  dl_status (*allreduce)(dl_comm *c, float *buf, int64_t n); /* c->mode says how */
  dl_status (*broadcast)(dl_comm *c, void *buf, size_t bytes, int root);
  dl_status (*allgather)(dl_comm *c, const void *send, void *recv, size_t bytes);
  dl_status (*barrier)(dl_comm *c);
  void (*abort)(dl_comm *c);
  void (*destroy)(dl_comm *c); /* frees c->impl, not c */
} dl_comm_ops;

struct dl_comm {
  const dl_comm_ops *ops;
  int rank, world;
  bool arrival_order;
  dl_reduce_mode mode;
  uint64_t order_seed; /* dl_comm_set_order_seed; 0: none */
  double timeout_s;
  int64_t seq; /* collectives entered so far: #seq names the current one */
  void *impl;
};

/* A handle with the defaults (ordered, timeout from DLCHECK_COMM_TIMEOUT). */
dl_status dl_comm_new(const dl_comm_ops *ops, int rank, int world, void *impl, dl_comm **out);

double dl_comm_now(void); /* monotonic seconds */
/* Between polls of a wait that progresses without this thread (a GPU
 * stream): returns at once for the first rounds, then sleeps 10 us
 * doubling to 1 ms. MPI waits must not sleep (mpi.c says why). */
void dl_comm_backoff(int *round);

/* dst[i] = ((0 + src[o0][i]) + src[o1][i]) + ... in float32, for the rank
 * order o = order (NULL: 0..world-1). dst must not alias a source. */
void dl_comm_sum_in_order(float *dst, const float *const *src, int world, int64_t n,
                          const int *order);
/* Orders for the chunk that rank `owner` sums: ring order (the native mode
 * of the local backend: start after the owner, as a ring allreduce does),
 * and the N2 pitfall's order (`arrived`, or 0..W-1 when NULL, rotated by
 * the clock so that two runs practically never sum alike). */
void dl_comm_ring_order(int *order, int world, int owner);
void dl_comm_clock_order(int *order, int world, const int *arrived);

/* dst[i] = a pairwise tree over the ranks in `order`: ((x_o0 + x_o1) +
 * (x_o2 + x_o3)) + ..., a rank left over at each level joining the next
 * (what recursive doubling and a binary reduction tree add), in float32.
 * leaves: room for `world` floats. dst must not alias a source. */
void dl_comm_sum_tree(float *dst, const float *const *src, int world, int64_t n, const int *order,
                      float *leaves);
/* The calibration order of seed != 0 (dl_comm_set_order_seed) for the
 * chunk rank `owner` sums, into order. Odd seeds: ring order starting
 * (seed / 2) % W + 1 ranks after the owner (returns false: sum it with
 * dl_comm_sum_in_order). Even seeds: the ranks rotated by (seed / 2) % W,
 * whatever the owner (returns true: sum it with dl_comm_sum_tree). */
bool dl_comm_seed_order(uint64_t seed, int world, int owner, int *order);

/* Appends "rank 3" / "ranks 0, 2, 5" (at most 16 named, then a count). */
void dl_comm_format_ranks(char *buf, size_t cap, const int *ranks, int n);

/* The DL_ERR_IO failure of a collective that timed out: entered[r] is the
 * last collective rank r entered (-1: it aborted); ranks with entered[r] <
 * c->seq never reached this one. */
dl_status dl_comm_fail_timeout(const dl_comm *c, const char *what, const int64_t *entered);
/* The DL_ERR_INTERNAL failure of a collective abandoned because rank
 * `who` aborted (who < 0: some rank, unknown which). */
dl_status dl_comm_fail_aborted(const dl_comm *c, const char *what, int who);

/* mpi.c, for nccl.c's bootstrap and fault detection over MPI: announce
 * collective #seq on m's heartbeats; then DL_OK while every peer is alive
 * and `deadline` has not passed, else the failure, named for `caller`. */
dl_status dl_comm_mpi_enter(dl_comm *m, int64_t seq, const char *what);
dl_status dl_comm_mpi_check_peers(dl_comm *m, const dl_comm *caller, const char *what,
                                  double deadline);
int dl_comm_mpi_local_rank(const dl_comm *m); /* rank among this node's */

#endif
