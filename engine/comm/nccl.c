#define _POSIX_C_SOURCE 200809L
/* The NCCL backend: one rank per GPU, either one process driving several
 * GPUs (ncclCommInitAll, a thread per rank) or one process per GPU under
 * mpirun (the unique id broadcast over MPI, as nccl-tests and llm.c do).
 * Plain C over the NCCL and CUDA runtime APIs: no kernels of its own.
 *
 * Native mode is ncclAllReduce (ring, tree, NVLS... as NCCL picks: its
 * rounding depends on NCCL_ALGO, NCCL_PROTO, the topology and the version).
 * Ordered mode gives the local backend's bits: each rank receives its chunk
 * from every rank (ncclSend/ncclRecv), adds the copies in rank order on the
 * host, and the sums are gathered back (ncclAllGather).
 *
 * Waiting polls the stream against the deadline; on a timeout or a peer's
 * abort the communicator is aborted (ncclCommAbort), which also frees the
 * GPU from the stuck kernel. */
#include "comm/comm_backend.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The handles of one ncclCommInitAll share what their threads announce. */
typedef struct nccl_group {
  pthread_mutex_t mu;
  int64_t *entered; /* per rank: the last collective it entered; -1: aborted */
  int aborter;      /* the first rank that aborted, -1 if none */
  int refs;
} nccl_group;

typedef struct nccl_state {
  ncclComm_t comm; /* NULL once aborted */
  cudaStream_t stream;
  int device;
  void *stage; /* device copy of a host buffer */
  size_t stage_bytes;
  float *work; /* device: ordered allreduce chunks and sums */
  size_t work_n;
  float *host; /* host: the chunks being added */
  size_t host_n;
  nccl_group *grp; /* one process, several GPUs */
  dl_comm *mpi;    /* one process per GPU: heartbeats and aborts over MPI */
  double deadline;
  bool failed;
  dl_status why_status;
  char why[512];
  int *order;
  const float **src;
} nccl_state;

/* ---- failures ---- */

static dl_status spent(dl_comm *c, dl_status s) {
  nccl_state *m = c->impl;
  if (!m->failed) {
    m->failed = true;
    m->why_status = s;
    snprintf(m->why, sizeof m->why, "%s", dl_last_error());
  }
  if (m->comm) {
    ncclCommAbort(m->comm);
    m->comm = NULL;
  }
  return s;
}

static dl_status cuda_error(dl_comm *c, const char *what, cudaError_t e) {
  nccl_state *m = c->impl;
  return spent(c, dl_fail(DL_ERR_IO,
                          "rank %d (GPU %d): collective %s (#%" PRId64 "): CUDA "
                          "failed: %s",
                          c->rank, m->device, what, c->seq, cudaGetErrorString(e)));
}

static dl_status nccl_error(dl_comm *c, const char *what, ncclResult_t r) {
  nccl_state *m = c->impl;
  const char *detail = m->comm ? ncclGetLastError(m->comm) : "";
  return spent(c, dl_fail(DL_ERR_IO,
                          "rank %d (GPU %d): collective %s (#%" PRId64 "): NCCL "
                          "failed: %s%s%s",
                          c->rank, m->device, what, c->seq, ncclGetErrorString(r),
                          detail && *detail ? ": " : "", detail ? detail : ""));
}

#define CUDA_TRY(c, what, call)                            \
  do {                                                     \
    cudaError_t e_ = (call);                               \
    if (e_ != cudaSuccess) return cuda_error(c, what, e_); \
  } while (0)
#define NCCL_TRY(c, what, call)                            \
  do {                                                     \
    ncclResult_t r_ = (call);                              \
    if (r_ != ncclSuccess) return nccl_error(c, what, r_); \
  } while (0)

/* ---- peers ---- */

static dl_status group_check(dl_comm *c, const char *what) {
  nccl_state *m = c->impl;
  nccl_group *g = m->grp;
  dl_status s = DL_OK;
  pthread_mutex_lock(&g->mu);
  if (g->aborter >= 0 && g->aborter != c->rank) s = dl_comm_fail_aborted(c, what, g->aborter);
  else if (dl_comm_now() > m->deadline) s = dl_comm_fail_timeout(c, what, g->entered);
  pthread_mutex_unlock(&g->mu);
  return s ? spent(c, s) : DL_OK;
}

static dl_status check_peers(dl_comm *c, const char *what) {
  nccl_state *m = c->impl;
  if (m->grp) return group_check(c, what);
#ifdef DL_HAVE_COMM_MPI
  dl_status s = dl_comm_mpi_check_peers(m->mpi, c, what, m->deadline);
  return s ? spent(c, s) : DL_OK;
#else
  return DL_OK; /* unreachable: without MPI every handle has a group */
#endif
}

static dl_status begin(dl_comm *c, const char *what) {
  nccl_state *m = c->impl;
  if (m->failed)
    return dl_fail(m->why_status,
                   "rank %d: collective %s not started: this communicator "
                   "failed earlier: %s",
                   c->rank, what, m->why);
  CUDA_TRY(c, what, cudaSetDevice(m->device));
  m->deadline = dl_comm_now() + c->timeout_s;
  if (m->grp) {
    pthread_mutex_lock(&m->grp->mu);
    m->grp->entered[c->rank] = c->seq;
    pthread_mutex_unlock(&m->grp->mu);
    return group_check(c, what);
  }
#ifdef DL_HAVE_COMM_MPI
  dl_status s = dl_comm_mpi_enter(m->mpi, c->seq, what);
  return s ? spent(c, s) : DL_OK;
#else
  return DL_OK;
#endif
}

/* Until the stream has run everything queued so far. */
static dl_status wait_stream(dl_comm *c, const char *what) {
  nccl_state *m = c->impl;
  for (int round = 0;; dl_comm_backoff(&round)) {
    cudaError_t e = cudaStreamQuery(m->stream);
    if (e == cudaSuccess) return DL_OK;
    if (e != cudaErrorNotReady) return cuda_error(c, what, e);
    ncclResult_t async = ncclSuccess;
    NCCL_TRY(c, what, ncclCommGetAsyncError(m->comm, &async));
    if (async != ncclSuccess && async != ncclInProgress) return nccl_error(c, what, async);
    DL_TRY(check_peers(c, what));
  }
}

/* ---- buffers ---- */

static bool on_device(const void *p) {
  struct cudaPointerAttributes a;
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    cudaGetLastError(); /* plain host memory on old runtimes: not an error */
    return false;
  }
  return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
}

static dl_status grow_device(dl_comm *c, void **p, size_t *have, size_t bytes, const char *what) {
  if (bytes <= *have) return DL_OK;
  cudaFree(*p);
  *p = NULL;
  *have = 0;
  cudaError_t e = cudaMalloc(p, bytes);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return dl_fail(DL_ERR_NOMEM,
                   "rank %d (GPU %d): %s: cannot allocate %zu bytes of GPU "
                   "scratch: %s",
                   c->rank, ((nccl_state *)c->impl)->device, what, bytes, cudaGetErrorString(e));
  }
  *have = bytes;
  return DL_OK;
}

/* A device pointer for `bytes` at buf: buf itself, or the staging buffer
 * filled from it (copy_in) in stream order. */
static dl_status device_view(dl_comm *c, void *buf, size_t bytes, bool copy_in, void **dev,
                             const char *what) {
  nccl_state *m = c->impl;
  if (on_device(buf)) {
    *dev = buf;
    return DL_OK;
  }
  DL_TRY(grow_device(c, &m->stage, &m->stage_bytes, bytes, what));
  if (copy_in)
    CUDA_TRY(c, what, cudaMemcpyAsync(m->stage, buf, bytes, cudaMemcpyHostToDevice, m->stream));
  *dev = m->stage;
  return DL_OK;
}

static dl_status copy_out(dl_comm *c, void *buf, const void *dev, size_t bytes, const char *what) {
  nccl_state *m = c->impl;
  if (dev != buf) CUDA_TRY(c, what, cudaMemcpyAsync(buf, dev, bytes, cudaMemcpyDefault, m->stream));
  return wait_stream(c, what);
}

/* ---- allreduce ---- */

static size_t chunk_len(int64_t n, size_t cs, int r) {
  int64_t lo = (int64_t)cs * r;
  return lo >= n ? 0 : (size_t)(n - lo < (int64_t)cs ? n - lo : (int64_t)cs);
}

/* Chunk r (cs floats, the last shorter) is rank r's: everyone sends it
 * there, r adds the W copies in rank order on the host, and everyone
 * gathers the sums. d holds n floats on the device. */
static dl_status ordered_allreduce(dl_comm *c, float *d, int64_t n) {
  nccl_state *m = c->impl;
  int W = c->world, me = c->rank;
  if (W == 1) return DL_OK; /* as the other backends: the bits unchanged, -0 included */
  size_t cs = (size_t)((n + W - 1) / W), mine = chunk_len(n, cs, me), Wcs = (size_t)W * cs;
  size_t work_bytes = (2 * Wcs + cs) * sizeof(float);
  DL_TRY(grow_device(c, (void **)&m->work, &m->work_n, work_bytes, "allreduce"));
  float *recv = m->work, *sum = m->work + Wcs, *all = m->work + Wcs + cs;
  if (m->host_n < Wcs + cs) {
    float *h = realloc(m->host, (Wcs + cs) * sizeof *h);
    if (!h) return dl_fail(DL_ERR_NOMEM, "rank %d: allreduce: out of host memory", c->rank);
    m->host = h;
    m->host_n = Wcs + cs;
  }
  if (mine)
    CUDA_TRY(c, "allreduce",
             cudaMemcpyAsync(recv + (size_t)me * cs, d + (size_t)me * cs, mine * sizeof(float),
                             cudaMemcpyDeviceToDevice, m->stream));
  NCCL_TRY(c, "allreduce", ncclGroupStart());
  for (int r = 0; r < W; r++) {
    size_t theirs = chunk_len(n, cs, r);
    if (r == me) continue;
    if (theirs) ncclSend(d + (size_t)r * cs, theirs, ncclFloat, r, m->comm, m->stream);
    if (mine) ncclRecv(recv + (size_t)r * cs, mine, ncclFloat, r, m->comm, m->stream);
  }
  NCCL_TRY(c, "allreduce", ncclGroupEnd());
  CUDA_TRY(c, "allreduce",
           cudaMemcpyAsync(m->host, recv, Wcs * sizeof(float), cudaMemcpyDeviceToHost, m->stream));
  DL_TRY(wait_stream(c, "allreduce"));
  for (int r = 0; r < W; r++) {
    m->src[r] = m->host + (size_t)r * cs;
    m->order[r] = r;
  }
  if (c->arrival_order) dl_comm_clock_order(m->order, W, NULL);
  float *hsum = m->host + Wcs;
  dl_comm_sum_in_order(hsum, m->src, W, (int64_t)mine, m->order);
  CUDA_TRY(c, "allreduce",
           cudaMemcpyAsync(sum, hsum, mine * sizeof(float), cudaMemcpyHostToDevice, m->stream));
  NCCL_TRY(c, "allreduce", ncclAllGather(sum, all, cs, ncclFloat, m->comm, m->stream));
  CUDA_TRY(c, "allreduce",
           cudaMemcpyAsync(d, all, (size_t)n * sizeof(float), cudaMemcpyDeviceToDevice, m->stream));
  return DL_OK;
}

static dl_status nccl_allreduce(dl_comm *c, float *buf, int64_t n) {
  nccl_state *m = c->impl;
  DL_TRY(begin(c, "allreduce"));
  size_t bytes = (size_t)n * sizeof(float);
  void *d = NULL;
  DL_TRY(device_view(c, buf, bytes, true, &d, "allreduce"));
  if (c->mode == DL_REDUCE_NATIVE)
    NCCL_TRY(c, "allreduce",
             ncclAllReduce(d, d, (size_t)n, ncclFloat, ncclSum, m->comm, m->stream));
  else DL_TRY(ordered_allreduce(c, d, n));
  return copy_out(c, buf, d, bytes, "allreduce");
}

/* ---- the other collectives ---- */

static dl_status nccl_broadcast(dl_comm *c, void *buf, size_t bytes, int root) {
  nccl_state *m = c->impl;
  DL_TRY(begin(c, "broadcast"));
  void *d = NULL;
  DL_TRY(device_view(c, buf, bytes, c->rank == root, &d, "broadcast"));
  NCCL_TRY(c, "broadcast", ncclBroadcast(d, d, bytes, ncclUint8, root, m->comm, m->stream));
  return copy_out(c, buf, d, bytes, "broadcast");
}

/* Host buffers go through one staging area: recv's W parts, then send. */
static dl_status nccl_allgather(dl_comm *c, const void *send, void *recv, size_t bytes) {
  nccl_state *m = c->impl;
  DL_TRY(begin(c, "allgather"));
  size_t total = (size_t)c->world * bytes;
  void *dsend = (void *)send, *drecv = recv;
  if (!on_device(send) || !on_device(recv)) {
    DL_TRY(grow_device(c, &m->stage, &m->stage_bytes, total + bytes, "allgather"));
    drecv = m->stage;
    dsend = (char *)m->stage + total;
    CUDA_TRY(c, "allgather", cudaMemcpyAsync(dsend, send, bytes, cudaMemcpyDefault, m->stream));
  }
  NCCL_TRY(c, "allgather", ncclAllGather(dsend, drecv, bytes, ncclUint8, m->comm, m->stream));
  return copy_out(c, recv, drecv, total, "allgather");
}

static dl_status nccl_barrier(dl_comm *c) {
  nccl_state *m = c->impl;
  DL_TRY(begin(c, "barrier"));
  DL_TRY(grow_device(c, (void **)&m->work, &m->work_n, sizeof(float), "barrier"));
  NCCL_TRY(c, "barrier",
           ncclAllReduce(m->work, m->work, 1, ncclFloat, ncclSum, m->comm, m->stream));
  return wait_stream(c, "barrier");
}

static void nccl_abort(dl_comm *c) {
  nccl_state *m = c->impl;
  if (!m->failed) {
    m->failed = true;
    m->why_status = DL_ERR_INTERNAL;
    snprintf(m->why, sizeof m->why, "rank %d aborted", c->rank);
  }
  if (m->grp) {
    pthread_mutex_lock(&m->grp->mu);
    if (m->grp->aborter < 0) m->grp->aborter = c->rank;
    m->grp->entered[c->rank] = -1;
    pthread_mutex_unlock(&m->grp->mu);
  }
  if (m->mpi) dl_comm_abort(m->mpi);
  if (m->comm) {
    ncclCommAbort(m->comm);
    m->comm = NULL;
  }
}

/* ---- life cycle ---- */

static void group_unref(nccl_group *g) {
  if (!g) return;
  pthread_mutex_lock(&g->mu);
  bool last = --g->refs == 0;
  pthread_mutex_unlock(&g->mu);
  if (!last) return;
  pthread_mutex_destroy(&g->mu);
  free(g->entered);
  free(g);
}

static void state_free(nccl_state *m) {
  cudaSetDevice(m->device);
  if (m->comm) ncclCommDestroy(m->comm);
  if (m->stream) cudaStreamDestroy(m->stream);
  cudaFree(m->stage);
  cudaFree(m->work);
  free(m->host);
  free(m->order);
  free(m->src);
  group_unref(m->grp);
  dl_comm_destroy(m->mpi);
  free(m);
}

static void nccl_destroy(dl_comm *c) { state_free(c->impl); }

static const dl_comm_ops nccl_ops = {
    .name = "nccl",
    .run_alone = true,
    .allreduce = nccl_allreduce,
    .broadcast = nccl_broadcast,
    .allgather = nccl_allgather,
    .barrier = nccl_barrier,
    .abort = nccl_abort,
    .destroy = nccl_destroy,
};

static dl_status device_count(int *count) {
  *count = 0;
  cudaError_t e = cudaGetDeviceCount(count);
  if (e != cudaSuccess || *count == 0) {
    cudaGetLastError();
    return dl_fail(DL_ERR_UNSUPPORTED,
                   "nccl comm: no CUDA device (%s); use the local or mpi "
                   "backend",
                   e != cudaSuccess ? cudaGetErrorString(e) : "none visible");
  }
  return DL_OK;
}

/* A handle around an initialised NCCL communicator (taken over, also on
 * failure). */
static dl_status wrap(ncclComm_t comm, int device, int rank, int world, nccl_group *grp,
                      dl_comm *mpi, dl_comm **out) {
  nccl_state *m = calloc(1, sizeof *m);
  if (!m) {
    ncclCommDestroy(comm);
    group_unref(grp);
    dl_comm_destroy(mpi);
    return dl_fail(DL_ERR_NOMEM, "nccl comm: out of memory (rank %d)", rank);
  }
  *m = (nccl_state){.comm = comm, .device = device, .grp = grp, .mpi = mpi};
  m->order = calloc((size_t)world, sizeof *m->order);
  m->src = calloc((size_t)world, sizeof *m->src);
  cudaError_t e = cudaSetDevice(device);
  if (e == cudaSuccess) e = cudaStreamCreateWithFlags(&m->stream, cudaStreamNonBlocking);
  if (e != cudaSuccess || !m->order || !m->src) {
    state_free(m);
    if (e != cudaSuccess)
      return dl_fail(DL_ERR_IO, "nccl comm: rank %d, GPU %d: cannot create a stream: %s", rank,
                     device, cudaGetErrorString(e));
    return dl_fail(DL_ERR_NOMEM, "nccl comm: out of memory (rank %d)", rank);
  }
  dl_status s = dl_comm_new(&nccl_ops, rank, world, m, out);
  if (s) state_free(m);
  return s;
}

static dl_status check_devices(int ndev, const int *devices, int *devs) {
  int count;
  DL_TRY(device_count(&count));
  for (int r = 0; r < ndev; r++) {
    devs[r] = devices ? devices[r] : r;
    if (devs[r] < 0 || devs[r] >= count)
      return dl_fail(DL_ERR_INVALID, "nccl comm: rank %d: GPU %d outside 0..%d", r, devs[r],
                     count - 1);
    for (int q = 0; q < r; q++)
      if (devs[q] == devs[r])
        return dl_fail(DL_ERR_INVALID,
                       "nccl comm: ranks %d and %d both on GPU %d; NCCL needs "
                       "one GPU per rank",
                       q, r, devs[r]);
  }
  return DL_OK;
}

static dl_status group_new(int world, nccl_group **out) {
  nccl_group *g = calloc(1, sizeof *g);
  if (g) g->entered = calloc((size_t)world, sizeof *g->entered);
  if (!g || !g->entered) {
    free(g);
    return dl_fail(DL_ERR_NOMEM, "nccl comm: out of memory");
  }
  pthread_mutex_init(&g->mu, NULL);
  g->aborter = -1;
  g->refs = 1; /* the creator's, dropped once every handle holds its own */
  *out = g;
  return DL_OK;
}

dl_status dl_comm_nccl_create_all(int ndev, const int *devices, dl_comm **comms) {
  if (ndev < 1 || ndev > 1024 || !comms)
    return dl_fail(DL_ERR_INVALID, "nccl comm: %d GPUs: need 1..1024 and an output array", ndev);
  for (int r = 0; r < ndev; r++) comms[r] = NULL;
  int *devs = malloc((size_t)ndev * sizeof *devs);
  ncclComm_t *nc = calloc((size_t)ndev, sizeof *nc);
  nccl_group *g = NULL;
  dl_status s = devs && nc ? DL_OK : dl_fail(DL_ERR_NOMEM, "nccl comm: out of memory");
  if (!s) s = check_devices(ndev, devices, devs);
  if (!s) s = group_new(ndev, &g);
  ncclResult_t r = s ? ncclSuccess : ncclCommInitAll(nc, ndev, devs);
  if (r != ncclSuccess)
    s = dl_fail(DL_ERR_IO,
                "nccl comm: ncclCommInitAll on %d GPUs failed: %s (NCCL_DEBUG=INFO "
                "says why)",
                ndev, ncclGetErrorString(r));
  int made = 0;
  for (; !s && made < ndev; made++) {
    g->refs++;
    s = wrap(nc[made], devs[made], made, ndev, g, NULL, &comms[made]);
  }
  for (int k = made; s && r == ncclSuccess && g && k < ndev; k++) ncclCommDestroy(nc[k]);
  if (s)
    for (int k = 0; k < ndev; k++) {
      dl_comm_destroy(comms[k]);
      comms[k] = NULL;
    }
  group_unref(g);
  free(devs);
  free(nc);
  return s;
}

#ifdef DL_HAVE_COMM_MPI
typedef struct nccl_id_msg {
  int ok; /* rank 0 made the id */
  ncclUniqueId id;
} nccl_id_msg;

static dl_status init_rank(dl_comm *mpi, int device, ncclComm_t *comm) {
  int rank = dl_comm_rank(mpi), world = dl_comm_world(mpi);
  cudaError_t e = cudaSetDevice(device);
  if (e != cudaSuccess)
    return dl_fail(DL_ERR_IO, "nccl comm: rank %d: cannot use GPU %d: %s", rank, device,
                   cudaGetErrorString(e));
  nccl_id_msg msg = {0};
  if (rank == 0) msg.ok = ncclGetUniqueId(&msg.id) == ncclSuccess;
  DL_TRY(dl_comm_broadcast(mpi, &msg, sizeof msg, 0));
  if (!msg.ok)
    return dl_fail(DL_ERR_IO,
                   "nccl comm: rank %d: rank 0 could not create the NCCL unique id "
                   "(NCCL_DEBUG=INFO says why)",
                   rank);
  /* Blocking: the broadcast just showed every rank alive. */
  ncclResult_t r = ncclCommInitRank(comm, world, msg.id, rank);
  if (r != ncclSuccess)
    return dl_fail(DL_ERR_IO, "nccl comm: rank %d: ncclCommInitRank on GPU %d failed: %s", rank,
                   device, ncclGetErrorString(r));
  return DL_OK;
}

dl_status dl_comm_nccl_create_mpi(int device, dl_comm **out) {
  if (!out) return dl_fail(DL_ERR_INVALID, "dl_comm_nccl_create_mpi: out is NULL");
  *out = NULL;
  dl_comm *mpi;
  DL_TRY(dl_comm_mpi_create(&mpi));
  int count;
  dl_status s = device_count(&count);
  if (!s && device >= count)
    s = dl_fail(DL_ERR_INVALID, "nccl comm: rank %d: GPU %d outside 0..%d", dl_comm_rank(mpi),
                device, count - 1);
  if (!s && device < 0) device = dl_comm_mpi_local_rank(mpi) % count;
  ncclComm_t comm = NULL;
  if (!s) s = init_rank(mpi, device, &comm);
  if (s) {
    dl_comm_abort(mpi); /* the others must not wait for this rank */
    dl_comm_destroy(mpi);
    return s;
  }
  int64_t seq = mpi->seq;
  DL_TRY(wrap(comm, device, dl_comm_rank(mpi), dl_comm_world(mpi), NULL, mpi, out));
  (*out)->seq = seq; /* collectives continue the heartbeat count */
  return DL_OK;
}
#else
dl_status dl_comm_nccl_create_mpi(int device, dl_comm **out) {
  (void)device;
  if (out) *out = NULL;
  return dl_fail(DL_ERR_UNSUPPORTED,
                 "nccl comm: this build has no MPI to start one process "
                 "per GPU; use dl_comm_nccl_create_all, or rebuild with Open MPI installed");
}
#endif

/* ---- the GPU check ---- */

enum { CHECK_N = (1 << 20) + 3 };

typedef struct check_rank {
  dl_comm *c;
  float *in, *out;
  const float *expect;
  dl_reduce_diff diff;
  dl_status s;
  char msg[512];
} check_rank;

static void fill_check(float *x, int64_t n, uint32_t seed) {
  for (int64_t i = 0; i < n; i++) {
    seed = seed * 1664525u + 1013904223u;
    float u = (float)(seed >> 8) / 16777216.0f - 0.5f;
    seed = seed * 1664525u + 1013904223u;
    x[i] = u * (float)(1u << ((seed >> 27) % 16)); /* both signs, |x| < 2^14 */
  }
}

static dl_status check_one(check_rank *k) {
  memcpy(k->out, k->in, CHECK_N * sizeof(float));
  DL_TRY(dl_comm_allreduce_sum(k->c, k->out, CHECK_N));
  for (int64_t i = 0; i < CHECK_N; i++)
    if (memcmp(&k->out[i], &k->expect[i], sizeof(float)) != 0)
      return dl_fail(DL_ERR_INTERNAL,
                     "nccl selfcheck: rank %d: ordered allreduce element %" PRId64
                     " is %.9g, the rank-order sum is %.9g",
                     dl_comm_rank(k->c), i, (double)k->out[i], (double)k->expect[i]);
  float root = (float)dl_comm_rank(k->c);
  DL_TRY(dl_comm_broadcast(k->c, &root, sizeof root, dl_comm_world(k->c) - 1));
  if (root != (float)(dl_comm_world(k->c) - 1))
    return dl_fail(DL_ERR_INTERNAL, "nccl selfcheck: rank %d: broadcast gave %g",
                   dl_comm_rank(k->c), (double)root);
  DL_TRY(dl_comm_barrier(k->c));
  return dl_comm_reduce_diff(k->c, k->in, CHECK_N, &k->diff);
}

static void *check_main(void *p) {
  check_rank *k = p;
  k->s = check_one(k);
  if (k->s) {
    snprintf(k->msg, sizeof k->msg, "%s", dl_last_error());
    dl_comm_abort(k->c);
  }
  return NULL;
}

static dl_status run_check(int ndev, dl_comm **comms, check_rank *ks, float *expect) {
  for (int r = 0; r < ndev; r++) {
    ks[r] = (check_rank){.c = comms[r], .expect = expect};
    ks[r].in = malloc(CHECK_N * sizeof(float));
    ks[r].out = malloc(CHECK_N * sizeof(float));
    if (!ks[r].in || !ks[r].out) return dl_fail(DL_ERR_NOMEM, "nccl selfcheck: out of memory");
    fill_check(ks[r].in, CHECK_N, 101u + (uint32_t)r);
    for (int64_t i = 0; i < CHECK_N; i++) expect[i] += ks[r].in[i];
  }
  pthread_t *th = calloc((size_t)ndev, sizeof *th);
  if (!th) return dl_fail(DL_ERR_NOMEM, "nccl selfcheck: out of memory");
  int started = 0;
  for (; started < ndev; started++)
    if (pthread_create(&th[started], NULL, check_main, &ks[started]) != 0) break;
  for (int r = 0; r < started; r++) pthread_join(th[r], NULL);
  free(th);
  if (started < ndev) return dl_fail(DL_ERR_NOMEM, "nccl selfcheck: cannot start threads");
  for (int r = 0; r < ndev; r++)
    if (ks[r].s) return dl_fail(ks[r].s, "%s", ks[r].msg);
  return DL_OK;
}

dl_status dl_comm_nccl_selfcheck(int ndev, dl_reduce_diff *out) {
  int count;
  DL_TRY(device_count(&count));
  if (ndev <= 0) ndev = count;
  if (ndev > count || !out)
    return dl_fail(DL_ERR_INVALID, "nccl selfcheck: %d GPUs asked, %d visible", ndev, count);
  dl_comm **comms = calloc((size_t)ndev, sizeof *comms);
  check_rank *ks = calloc((size_t)ndev, sizeof *ks);
  float *expect = calloc(CHECK_N, sizeof *expect);
  dl_status s = comms && ks && expect ? DL_OK
                                      : dl_fail(DL_ERR_NOMEM, "nccl selfcheck: out of memory");
  if (!s) s = dl_comm_nccl_create_all(ndev, NULL, comms);
  if (!s) s = run_check(ndev, comms, ks, expect);
  if (!s) *out = ks[0].diff;
  for (int r = 0; comms && ks && r < ndev; r++) {
    dl_comm_destroy(comms[r]);
    free(ks[r].in);
    free(ks[r].out);
  }
  free(comms);
  free(ks);
  free(expect);
  return s;
}
