#define _POSIX_C_SOURCE 200809L /* clock_gettime, pthread_condattr_setclock */
/* The in-process backend: ranks are threads sharing one group. Each
 * collective is deposit / barrier / read / barrier, so no rank reads a
 * buffer that another is still writing. */
#include "comm/comm_backend.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct local_group {
  int world;
  pthread_mutex_t mu;
  pthread_cond_t cv; /* waits on CLOCK_MONOTONIC, so timeouts ignore clock changes */
  int waiting;
  uint64_t generation;
  void **slot;  /* per rank: the buffer it deposited */
  int *arrival; /* rank order of arrival at the last deposit barrier */
  int narrived;
  int64_t *entered; /* per rank: the last collective it entered; -1: it aborted */
  bool aborted;     /* a rank failed: every collective now fails */
  bool timed_out;   /* ... because a collective timed out */
  int aborter;      /* the first rank that called abort, -1 if none did */
  _Atomic int refs;
} local_group;

static struct timespec deadline_after(double seconds) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  time_t whole = (time_t)seconds;
  ts.tv_sec += whole;
  ts.tv_nsec += (long)((seconds - (double)whole) * 1e9);
  if (ts.tv_nsec >= 1000000000L) {
    ts.tv_sec++;
    ts.tv_nsec -= 1000000000L;
  }
  return ts;
}

/* Called with the mutex held, once the group is aborted. */
static dl_status failed(const dl_comm *c, const char *what) {
  local_group *g = c->impl;
  if (g->timed_out) return dl_comm_fail_timeout(c, what, g->entered);
  return dl_comm_fail_aborted(c, what, g->aborter);
}

static void wait_for_generation(dl_comm *c, uint64_t gen) {
  local_group *g = c->impl;
  struct timespec deadline = deadline_after(c->timeout_s);
  while (gen == g->generation && !g->aborted) {
    if (pthread_cond_timedwait(&g->cv, &g->mu, &deadline) == ETIMEDOUT && gen == g->generation &&
        !g->aborted) {
      g->aborted = g->timed_out = true;
      pthread_cond_broadcast(&g->cv);
    }
  }
}

/* Blocks until all ranks arrive (DL_OK), the group is aborted or the
 * timeout passes; optionally records the arrival order. */
static dl_status group_barrier(dl_comm *c, const char *what, bool record) {
  local_group *g = c->impl;
  pthread_mutex_lock(&g->mu);
  uint64_t gen = g->generation;
  if (!g->aborted) {
    g->entered[c->rank] = c->seq;
    if (record) {
      if (g->waiting == 0) g->narrived = 0;
      g->arrival[g->narrived++] = c->rank;
    }
    if (++g->waiting == g->world) {
      g->waiting = 0;
      g->generation++;
      pthread_cond_broadcast(&g->cv);
    } else {
      wait_for_generation(c, gen);
    }
  }
  dl_status s = g->aborted ? failed(c, what) : DL_OK;
  pthread_mutex_unlock(&g->mu);
  return s;
}

static void local_abort(dl_comm *c) {
  local_group *g = c->impl;
  pthread_mutex_lock(&g->mu);
  if (g->aborter < 0 && !g->aborted) g->aborter = c->rank;
  g->entered[c->rank] = -1;
  g->aborted = true;
  pthread_cond_broadcast(&g->cv);
  pthread_mutex_unlock(&g->mu);
}

static dl_status local_barrier(dl_comm *c) { return group_barrier(c, "barrier", false); }

/* The chunk's sum, in rank order, ring order for NATIVE, arrival order
 * under N2, or a calibration repeat's ring or tree (another library's
 * order). */
static void sum_chunk(const dl_comm *c, const local_group *g, float *sum, const float **src,
                      int64_t n, int *order, float *leaves) {
  int W = c->world;
  if (c->order_seed) {
    if (dl_comm_seed_order(c->order_seed, W, c->rank, order)) {
      dl_comm_sum_tree(sum, src, W, n, order, leaves);
      return;
    }
  } else if (c->mode == DL_REDUCE_NATIVE) dl_comm_ring_order(order, W, c->rank);
  else if (c->arrival_order) dl_comm_clock_order(order, W, g->arrival);
  else
    for (int k = 0; k < W; k++) order[k] = k;
  dl_comm_sum_in_order(sum, src, W, n, order);
}

/* Rank r owns the elements [lo, hi) of the result: it sums them over ranks
 * and writes them to everyone. */
static dl_status local_allreduce(dl_comm *c, float *buf, int64_t n) {
  local_group *g = c->impl;
  int W = c->world;
  g->slot[c->rank] = buf;
  DL_TRY(group_barrier(c, "allreduce", true));
  int64_t lo = n * c->rank / W, hi = n * (c->rank + 1) / W;
  float *sum = malloc((size_t)(hi - lo + 1) * sizeof *sum);
  float *leaves = malloc((size_t)W * sizeof *leaves);
  const float **src = malloc((size_t)W * sizeof *src);
  int *order = malloc((size_t)W * sizeof *order);
  if (!sum || !leaves || !src || !order) {
    free(sum);
    free(leaves);
    free(src);
    free(order);
    local_abort(c);
    return dl_fail(DL_ERR_NOMEM, "allreduce: out of memory (rank %d)", c->rank);
  }
  for (int r = 0; r < W; r++) src[r] = (const float *)g->slot[r] + lo;
  sum_chunk(c, g, sum, src, hi - lo, order, leaves);
  free(leaves);
  free(src);
  free(order);
  dl_status s = group_barrier(c, "allreduce", false);
  for (int r = 0; !s && r < W; r++)
    memcpy((float *)g->slot[r] + lo, sum, (size_t)(hi - lo) * sizeof *sum);
  free(sum);
  return s ? s : group_barrier(c, "allreduce", false);
}

static dl_status local_broadcast(dl_comm *c, void *buf, size_t bytes, int root) {
  local_group *g = c->impl;
  g->slot[c->rank] = buf;
  DL_TRY(group_barrier(c, "broadcast", false));
  if (c->rank != root) memcpy(buf, g->slot[root], bytes);
  return group_barrier(c, "broadcast", false);
}

static dl_status local_allgather(dl_comm *c, const void *send, void *recv, size_t bytes) {
  local_group *g = c->impl;
  g->slot[c->rank] = (void *)send;
  DL_TRY(group_barrier(c, "allgather", false));
  for (int r = 0; r < c->world; r++) memcpy((char *)recv + (size_t)r * bytes, g->slot[r], bytes);
  return group_barrier(c, "allgather", false);
}

static void group_unref(local_group *g) {
  if (atomic_fetch_sub(&g->refs, 1) != 1) return;
  pthread_mutex_destroy(&g->mu);
  pthread_cond_destroy(&g->cv);
  free(g->slot);
  free(g->arrival);
  free(g->entered);
  free(g);
}

static void local_destroy(dl_comm *c) { group_unref(c->impl); }

static const dl_comm_ops local_ops = {
    .name = "local",
    .allreduce = local_allreduce,
    .broadcast = local_broadcast,
    .allgather = local_allgather,
    .barrier = local_barrier,
    .abort = local_abort,
    .destroy = local_destroy,
};

static dl_status group_create(int world, local_group **out) {
  local_group *g = calloc(1, sizeof *g);
  if (!g) return dl_fail(DL_ERR_NOMEM, "local comm: out of memory");
  g->world = world;
  g->aborter = -1;
  g->slot = calloc((size_t)world, sizeof *g->slot);
  g->arrival = calloc((size_t)world, sizeof *g->arrival);
  g->entered = calloc((size_t)world, sizeof *g->entered);
  pthread_condattr_t attr;
  bool attr_ok = pthread_condattr_init(&attr) == 0;
  if (!g->slot || !g->arrival || !g->entered || !attr_ok) {
    if (attr_ok) pthread_condattr_destroy(&attr);
    free(g->slot);
    free(g->arrival);
    free(g->entered);
    free(g);
    return dl_fail(DL_ERR_NOMEM, "local comm: out of memory");
  }
  pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
  pthread_mutex_init(&g->mu, NULL);
  pthread_cond_init(&g->cv, &attr);
  pthread_condattr_destroy(&attr);
  *out = g;
  return DL_OK;
}

dl_status dl_comm_local_create(int world, dl_comm **comms) {
  if (world < 1 || world > 1024)
    return dl_fail(DL_ERR_INVALID, "local comm: world size %d outside 1..1024", world);
  local_group *g = NULL;
  DL_TRY(group_create(world, &g));
  for (int r = 0; r < world; r++) {
    dl_status s = dl_comm_new(&local_ops, r, world, g, &comms[r]);
    if (s) {
      atomic_fetch_add(&g->refs, 1); /* so that the last unref frees g */
      for (int k = 0; k < r; k++) {
        dl_comm_destroy(comms[k]);
        comms[k] = NULL;
      }
      group_unref(g);
      return s;
    }
    atomic_fetch_add(&g->refs, 1);
  }
  return DL_OK;
}
