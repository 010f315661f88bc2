#define _POSIX_C_SOURCE 200809L
/* The MPI backend: one process per rank over a duplicate of MPI_COMM_WORLD.
 *
 * Every collective is non-blocking (MPI_Iallreduce, MPI_Ialltoallv, ...)
 * polled against a deadline, so a rank that died or hung makes the others
 * fail instead of wait forever. To say which rank is missing, each rank
 * announces the number of the collective it enters to every peer with a
 * small point-to-point heartbeat; on a timeout the ranks whose last
 * announcement is older are the ones that never arrived, and an announcement
 * of -1 is dl_comm_abort().
 *
 * What Open MPI (4.1) does when a rank dies: mpirun notices the process
 * ended (killed by a signal, or exited non-zero before MPI_Finalize) and
 * kills every other rank of the job, printing "mpirun noticed that process
 * rank 1 ... exited on signal 9". The timeouts here cover what it does not:
 * a rank that hangs, or one that died under `mpirun --enable-recovery`,
 * where the job keeps running. */
#include "comm/comm_backend.h"

#include <mpi.h>

#include <inttypes.h>
#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { TAG_HEARTBEAT = 7301 };
/* Allreduce works through segments so that counts fit MPI's int and the
 * ordered mode's scratch stays about (1 + 1/W) x 32 MiB. */
enum { ORDERED_SEGMENT = 1 << 23, NATIVE_SEGMENT = 1 << 30 };
static const size_t BCAST_SEGMENT = (size_t)1 << 30;
static const int64_t ABORTED = -1;

typedef struct mpi_state {
  MPI_Comm comm;  /* duplicate of MPI_COMM_WORLD: collectives and heartbeats */
  int local_rank; /* among the ranks on this node */
  int64_t *heard; /* per rank: the last collective it announced; -1: aborted */
  int64_t *rx_val, *tx_val;
  MPI_Request *rx_req, *tx_req;
  int64_t announced; /* what this rank tells its peers */
  double deadline;   /* of the collective in progress */
  bool failed;       /* timed out, a peer aborted, MPI failed or we aborted */
  dl_status why_status;
  char why[512];  /* that first failure, repeated by later collectives */
  float *scratch; /* ordered allreduce: received chunks and their sum */
  size_t scratch_n;
  int *counts, *displs, *rcounts, *rdispls, *order;
  const float **src;
} mpi_state;

static struct {
  int handles;
  bool initialised_here; /* dl_comm_mpi_finalize finalises only then */
  bool failed;           /* some handle failed: MPI_Finalize could hang */
} g_mpi;

/* ---- failures ---- */

/* The handle is spent: later collectives repeat this failure, and its MPI
 * objects are left to MPI, since a stuck collective may still use them. */
static dl_status spent(dl_comm *c, dl_status s) {
  mpi_state *m = c->impl;
  if (!m->failed) {
    m->failed = g_mpi.failed = true;
    m->why_status = s;
    snprintf(m->why, sizeof m->why, "%s", dl_last_error());
  }
  return s;
}

static dl_status mpi_error(dl_comm *c, const char *what, int rc) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS) snprintf(text, sizeof text, "code %d", rc);
  return spent(c, dl_fail(DL_ERR_IO, "rank %d: collective %s (#%" PRId64 "): MPI failed: %s",
                          c->rank, what, c->seq, text));
}

/* ---- heartbeats ---- */

static int post_recv(mpi_state *m, int peer) {
  return MPI_Irecv(&m->rx_val[peer], 1, MPI_INT64_T, peer, TAG_HEARTBEAT, m->comm,
                   &m->rx_req[peer]);
}

static int receive_heartbeats(dl_comm *c) {
  mpi_state *m = c->impl;
  for (;;) {
    int idx = MPI_UNDEFINED, flag = 0;
    int rc = MPI_Testany(c->world, m->rx_req, &idx, &flag, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) return rc;
    if (!flag || idx == MPI_UNDEFINED) return MPI_SUCCESS;
    if (m->heard[idx] != ABORTED) m->heard[idx] = m->rx_val[idx];
    if ((rc = post_recv(m, idx)) != MPI_SUCCESS) return rc;
  }
}

/* Sends the latest announcement to each peer whose previous one has gone:
 * one message in flight per peer, so a slow peer never piles them up. */
static int send_heartbeats(dl_comm *c) {
  mpi_state *m = c->impl;
  for (int p = 0; p < c->world; p++) {
    if (p == c->rank) continue;
    int done = 1, rc;
    if (m->tx_req[p] != MPI_REQUEST_NULL &&
        (rc = MPI_Test(&m->tx_req[p], &done, MPI_STATUS_IGNORE)) != MPI_SUCCESS)
      return rc;
    if (!done || m->tx_val[p] == m->announced) continue;
    m->tx_val[p] = m->announced;
    rc = MPI_Isend(&m->tx_val[p], 1, MPI_INT64_T, p, TAG_HEARTBEAT, m->comm, &m->tx_req[p]);
    if (rc != MPI_SUCCESS) return rc;
  }
  return MPI_SUCCESS;
}

static int heartbeat(dl_comm *c) {
  int rc = receive_heartbeats(c);
  return rc != MPI_SUCCESS ? rc : send_heartbeats(c);
}

static bool sends_pending(const dl_comm *c) {
  const mpi_state *m = c->impl;
  for (int p = 0; p < c->world; p++)
    if (p != c->rank && (m->tx_req[p] != MPI_REQUEST_NULL || m->tx_val[p] != m->announced))
      return true;
  return false;
}

/* ---- waiting ---- */

/* Between polls: yield the core, never sleep. Open MPI moves the data of a
 * non-blocking collective (libnbc's schedule, shared-memory fragments) only
 * inside MPI calls, so a sleeping rank stalls everyone's transfer; yielding
 * still lets oversubscribed ranks run, as MPI_Wait itself does. */
static void pause_between_polls(void) { sched_yield(); }

/* Fails if a peer aborted or `deadline` passed; `caller` names the
 * collective (it may be another backend's handle riding on this one). */
static dl_status check_peers(dl_comm *c, const dl_comm *caller, const char *what, double deadline) {
  mpi_state *m = c->impl;
  int rc = heartbeat(c);
  if (rc != MPI_SUCCESS) return mpi_error(c, what, rc);
  for (int p = 0; p < c->world; p++)
    if (p != c->rank && m->heard[p] == ABORTED)
      return spent(c, dl_comm_fail_aborted(caller, what, p));
  if (dl_comm_now() > deadline) return spent(c, dl_comm_fail_timeout(caller, what, m->heard));
  return DL_OK;
}

static dl_status wait_for(dl_comm *c, MPI_Request *req, const char *what) {
  mpi_state *m = c->impl;
  for (;; pause_between_polls()) {
    int done = 0;
    int rc = MPI_Test(req, &done, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) return mpi_error(c, what, rc);
    if (done) return DL_OK;
    DL_TRY(check_peers(c, c, what, m->deadline));
  }
}

static dl_status begin(dl_comm *c, int64_t seq, const char *what) {
  mpi_state *m = c->impl;
  if (m->failed)
    return dl_fail(m->why_status,
                   "rank %d: collective %s not started: this communicator "
                   "failed earlier: %s",
                   c->rank, what, m->why);
  m->announced = seq;
  m->deadline = dl_comm_now() + c->timeout_s;
  int rc = heartbeat(c);
  return rc == MPI_SUCCESS ? DL_OK : mpi_error(c, what, rc);
}

/* Starts one non-blocking MPI collective (rc, req) and waits for it. */
static dl_status finish(dl_comm *c, int rc, MPI_Request *req, const char *what) {
  if (rc != MPI_SUCCESS) return mpi_error(c, what, rc);
  return wait_for(c, req, what);
}

/* ---- allreduce ---- */

static dl_status ensure_scratch(dl_comm *c, size_t n) {
  mpi_state *m = c->impl;
  if (n <= m->scratch_n) return DL_OK;
  /* Plain malloc, not dl_mem_alloc: the local backend's scratch is not
   * accounted either, so peak memory reads the same on both. */
  float *p = realloc(m->scratch, n * sizeof *p);
  if (!p)
    return dl_fail(DL_ERR_NOMEM, "rank %d: allreduce: out of memory for %zu floats of scratch",
                   c->rank, n);
  m->scratch = p;
  m->scratch_n = n;
  return DL_OK;
}

/* Rank r owns elements [displs[r], displs[r] + counts[r]): every rank sends
 * it that chunk (alltoallv), r adds the W copies in rank order, and every
 * rank gathers the sums (allgatherv): the local backend's sum, bit for bit. */
static dl_status ordered_segment(dl_comm *c, float *buf, int len) {
  mpi_state *m = c->impl;
  int W = c->world, me = c->rank;
  for (int r = 0; r < W; r++) {
    m->displs[r] = (int)((int64_t)len * r / W);
    m->counts[r] = (int)((int64_t)len * (r + 1) / W) - m->displs[r];
  }
  int mine = m->counts[me];
  for (int r = 0; r < W; r++) {
    m->rcounts[r] = mine;
    m->rdispls[r] = r * mine;
  }
  DL_TRY(ensure_scratch(c, (size_t)mine * (size_t)(W + 1) + 1));
  float *recv = m->scratch, *sum = m->scratch + (size_t)mine * (size_t)W;
  MPI_Request req;
  DL_TRY(finish(c,
                MPI_Ialltoallv(buf, m->counts, m->displs, MPI_FLOAT, recv, m->rcounts, m->rdispls,
                               MPI_FLOAT, m->comm, &req),
                &req, "allreduce"));
  for (int r = 0; r < W; r++) {
    m->src[r] = recv + (size_t)r * (size_t)mine;
    m->order[r] = r;
  }
  if (c->arrival_order) dl_comm_clock_order(m->order, W, NULL);
  dl_comm_sum_in_order(sum, m->src, W, mine, m->order);
  return finish(c,
                MPI_Iallgatherv(sum, mine, MPI_FLOAT, buf, m->counts, m->displs, MPI_FLOAT, m->comm,
                                &req),
                &req, "allreduce");
}

static dl_status mpi_allreduce(dl_comm *c, float *buf, int64_t n) {
  mpi_state *m = c->impl;
  DL_TRY(begin(c, c->seq, "allreduce"));
  bool native = c->mode == DL_REDUCE_NATIVE;
  int64_t segment = native ? NATIVE_SEGMENT : ORDERED_SEGMENT;
  for (int64_t off = 0; off < n; off += segment) {
    int len = (int)(n - off < segment ? n - off : segment);
    if (!native) {
      DL_TRY(ordered_segment(c, buf + off, len));
      continue;
    }
    MPI_Request req;
    DL_TRY(finish(c,
                  MPI_Iallreduce(MPI_IN_PLACE, buf + off, len, MPI_FLOAT, MPI_SUM, m->comm, &req),
                  &req, "allreduce"));
  }
  return DL_OK;
}

/* ---- the other collectives ---- */

static dl_status mpi_broadcast(dl_comm *c, void *buf, size_t bytes, int root) {
  mpi_state *m = c->impl;
  DL_TRY(begin(c, c->seq, "broadcast"));
  for (size_t off = 0; off < bytes; off += BCAST_SEGMENT) {
    int len = (int)(bytes - off < BCAST_SEGMENT ? bytes - off : BCAST_SEGMENT);
    MPI_Request req;
    DL_TRY(finish(c, MPI_Ibcast((char *)buf + off, len, MPI_BYTE, root, m->comm, &req), &req,
                  "broadcast"));
  }
  return DL_OK;
}

static dl_status mpi_allgather(dl_comm *c, const void *send, void *recv, size_t bytes) {
  mpi_state *m = c->impl;
  if (bytes > INT_MAX)
    return dl_fail(DL_ERR_UNSUPPORTED,
                   "rank %d: allgather of %zu bytes per rank: the mpi "
                   "backend gathers at most %d bytes per rank; gather in pieces",
                   c->rank, bytes, INT_MAX);
  DL_TRY(begin(c, c->seq, "allgather"));
  /* MPI forbids overlapping buffers; a send already in place says so. */
  const void *from = send == (const char *)recv + (size_t)c->rank * bytes ? MPI_IN_PLACE : send;
  MPI_Request req;
  return finish(c,
                MPI_Iallgather(from, (int)bytes, MPI_BYTE, recv, (int)bytes, MPI_BYTE, m->comm,
                               &req),
                &req, "allgather");
}

static dl_status mpi_barrier(dl_comm *c) {
  mpi_state *m = c->impl;
  DL_TRY(begin(c, c->seq, "barrier"));
  MPI_Request req;
  return finish(c, MPI_Ibarrier(m->comm, &req), &req, "barrier");
}

/* Tells every peer (heartbeat -1), waiting up to half a second for the
 * messages to leave. Leaves this thread's error message alone: the caller
 * is usually about to report its own failure. */
static void mpi_abort(dl_comm *c) {
  mpi_state *m = c->impl;
  if (!m->failed) {
    m->failed = g_mpi.failed = true;
    m->why_status = DL_ERR_INTERNAL;
    snprintf(m->why, sizeof m->why, "rank %d aborted", c->rank);
  }
  m->announced = ABORTED;
  double until = dl_comm_now() + 0.5;
  for (; dl_comm_now() < until; pause_between_polls())
    if (heartbeat(c) != MPI_SUCCESS || !sends_pending(c)) break;
}

/* ---- life cycle ---- */

static void state_free(mpi_state *m) {
  free(m->heard);
  free(m->rx_val);
  free(m->tx_val);
  free(m->rx_req);
  free(m->tx_req);
  free(m->counts);
  free(m->displs);
  free(m->rcounts);
  free(m->rdispls);
  free(m->order);
  free(m->src);
  free(m->scratch);
  free(m);
}

/* Cancels the posted heartbeat receives and lets the last sends go (they
 * are small and leave at once; a peer that died cannot hold them long). */
static bool drain_requests(dl_comm *c) {
  mpi_state *m = c->impl;
  for (int p = 0; p < c->world; p++) {
    if (m->rx_req[p] == MPI_REQUEST_NULL) continue;
    MPI_Cancel(&m->rx_req[p]);
    MPI_Wait(&m->rx_req[p], MPI_STATUS_IGNORE);
  }
  double until = dl_comm_now() + 1.0;
  for (int p = 0; p < c->world; p++)
    for (int done = 0; m->tx_req[p] != MPI_REQUEST_NULL; pause_between_polls()) {
      if (MPI_Test(&m->tx_req[p], &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) return false;
      if (!done && dl_comm_now() > until) return false;
    }
  return true;
}

static void mpi_destroy(dl_comm *c) {
  mpi_state *m = c->impl;
  g_mpi.handles--;
  /* A failed handle's requests and buffers stay with MPI: freeing memory
   * that a stuck collective may still write would be worse than the leak,
   * and the process is about to exit anyway. */
  if (m->failed) return;
  if (m->comm == MPI_COMM_NULL) {
    state_free(m);
    return;
  }
  if (!drain_requests(c)) {
    g_mpi.failed = true;
    return;
  }
  MPI_Comm_free(&m->comm);
  state_free(m);
}

static const dl_comm_ops mpi_ops = {
    .name = "mpi",
    .allreduce = mpi_allreduce,
    .broadcast = mpi_broadcast,
    .allgather = mpi_allgather,
    .barrier = mpi_barrier,
    .abort = mpi_abort,
    .destroy = mpi_destroy,
};

static dl_status init_mpi(void) {
  int initialised = 0, finalised = 0;
  MPI_Finalized(&finalised);
  if (finalised)
    return dl_fail(DL_ERR_INVALID, "mpi comm: MPI was already finalised; create every MPI comm "
                                   "before dl_comm_mpi_finalize()");
  MPI_Initialized(&initialised);
  if (initialised) return DL_OK;
  int provided = 0;
  int rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided);
  if (rc != MPI_SUCCESS)
    return dl_fail(DL_ERR_IO,
                   "mpi comm: MPI_Init_thread failed (error %d); run the program "
                   "under mpirun or srun and check the MPI installation",
                   rc);
  g_mpi.initialised_here = true;
  return DL_OK;
}

static dl_status state_alloc(int world, mpi_state **out) {
  size_t W = (size_t)world;
  mpi_state *m = calloc(1, sizeof *m);
  if (!m) return dl_fail(DL_ERR_NOMEM, "mpi comm: out of memory");
  m->comm = MPI_COMM_NULL;
  m->heard = calloc(W, sizeof *m->heard);
  m->rx_val = calloc(W, sizeof *m->rx_val);
  m->tx_val = calloc(W, sizeof *m->tx_val);
  m->rx_req = malloc(W * sizeof *m->rx_req);
  m->tx_req = malloc(W * sizeof *m->tx_req);
  m->counts = calloc(W, sizeof(int));
  m->displs = calloc(W, sizeof(int));
  m->rcounts = calloc(W, sizeof(int));
  m->rdispls = calloc(W, sizeof(int));
  m->order = calloc(W, sizeof(int));
  m->src = calloc(W, sizeof *m->src);
  if (!m->heard || !m->rx_val || !m->tx_val || !m->rx_req || !m->tx_req || !m->counts ||
      !m->displs || !m->rcounts || !m->rdispls || !m->order || !m->src) {
    state_free(m);
    return dl_fail(DL_ERR_NOMEM, "mpi comm: out of memory for %d ranks", world);
  }
  for (size_t p = 0; p < W; p++) m->rx_req[p] = m->tx_req[p] = MPI_REQUEST_NULL;
  *out = m;
  return DL_OK;
}

static int local_rank_from_env(int rank) {
  const char *vars[] = {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"};
  for (size_t i = 0; i < sizeof vars / sizeof *vars; i++) {
    const char *v = getenv(vars[i]);
    if (v && *v) return atoi(v);
  }
  return rank;
}

/* MPI_Comm_idup, so that a rank that never starts cannot hang the others. */
static dl_status duplicate_world(dl_comm *c) {
  mpi_state *m = c->impl;
  MPI_Request req;
  int rc = MPI_Comm_idup(MPI_COMM_WORLD, &m->comm, &req);
  if (rc != MPI_SUCCESS) return mpi_error(c, "start-up", rc);
  double deadline = dl_comm_now() + c->timeout_s;
  for (int done = 0; !done; pause_between_polls()) {
    if ((rc = MPI_Test(&req, &done, MPI_STATUS_IGNORE)) != MPI_SUCCESS)
      return mpi_error(c, "start-up", rc);
    if (!done && dl_comm_now() > deadline)
      return spent(c, dl_fail(DL_ERR_IO,
                              "rank %d: creating the MPI communicator timed out "
                              "after %g s: some of the %d ranks never called "
                              "dl_comm_mpi_create (died or hung at start-up)",
                              c->rank, c->timeout_s, c->world));
  }
  MPI_Comm_set_errhandler(m->comm, MPI_ERRORS_RETURN);
  for (int p = 0; p < c->world; p++)
    if (p != c->rank && (rc = post_recv(m, p)) != MPI_SUCCESS) return mpi_error(c, "start-up", rc);
  return DL_OK;
}

dl_status dl_comm_mpi_create(dl_comm **out) {
  if (!out) return dl_fail(DL_ERR_INVALID, "dl_comm_mpi_create: out is NULL");
  *out = NULL;
  DL_TRY(init_mpi());
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  mpi_state *m = NULL;
  DL_TRY(state_alloc(world, &m));
  m->local_rank = local_rank_from_env(rank);
  dl_comm *c = NULL;
  dl_status s = dl_comm_new(&mpi_ops, rank, world, m, &c);
  if (s) {
    state_free(m);
    return s;
  }
  g_mpi.handles++;
  if ((s = duplicate_world(c))) {
    dl_comm_destroy(c);
    return s;
  }
  *out = c;
  return DL_OK;
}

dl_status dl_comm_mpi_finalize(void) {
  int initialised = 0, finalised = 0;
  MPI_Initialized(&initialised);
  MPI_Finalized(&finalised);
  if (!initialised || finalised || !g_mpi.initialised_here) return DL_OK;
  if (g_mpi.failed)
    return dl_fail(DL_ERR_IO,
                   "MPI not finalised: a collective failed, and MPI_Finalize would "
                   "wait for the rank that died or hung; exit with a non-zero status so that "
                   "mpirun ends the other ranks");
  if (g_mpi.handles > 0)
    return dl_fail(DL_ERR_INVALID,
                   "dl_comm_mpi_finalize: %d MPI comm handle(s) still open; "
                   "destroy them first",
                   g_mpi.handles);
  MPI_Finalize();
  return DL_OK;
}

/* ---- for nccl.c ---- */

dl_status dl_comm_mpi_enter(dl_comm *m, int64_t seq, const char *what) {
  return begin(m, seq, what);
}

dl_status dl_comm_mpi_check_peers(dl_comm *m, const dl_comm *caller, const char *what,
                                  double deadline) {
  return check_peers(m, caller, what, deadline);
}

int dl_comm_mpi_local_rank(const dl_comm *m) { return ((const mpi_state *)m->impl)->local_rank; }
