#define _POSIX_C_SOURCE 200809L /* clock_gettime */
/* The in-process backend: ranks are threads sharing one group. Each
 * collective is deposit / barrier / read / barrier, so no rank reads a
 * buffer that another is still writing. */
#include "comm.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct local_group {
  int world;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int waiting;
  uint64_t generation;
  void **slot;       /* per rank: the buffer it deposited */
  int *arrival;      /* rank order of arrival at the last deposit barrier */
  int narrived;
  bool aborted;      /* a rank failed: every collective now fails */
  _Atomic int refs;
} local_group;

struct dl_comm {
  int rank, world;
  bool arrival_order;
  local_group *g;
};

int dl_comm_rank(const dl_comm *c) { return c->rank; }
int dl_comm_world(const dl_comm *c) { return c->world; }
void dl_comm_set_arrival_order(dl_comm *c, bool on) { c->arrival_order = on; }

/* Blocks until all ranks arrive (true) or the group is aborted (false);
 * optionally records the arrival order. */
static bool group_barrier(local_group *g, int rank, bool record) {
  pthread_mutex_lock(&g->mu);
  uint64_t gen = g->generation;
  if (record) {
    if (g->waiting == 0) g->narrived = 0;
    g->arrival[g->narrived++] = rank;
  }
  if (++g->waiting == g->world) {
    g->waiting = 0;
    g->generation++;
    pthread_cond_broadcast(&g->cv);
  } else {
    while (gen == g->generation && !g->aborted) pthread_cond_wait(&g->cv, &g->mu);
  }
  bool ok = !g->aborted;
  pthread_mutex_unlock(&g->mu);
  return ok;
}

static dl_status aborted(const dl_comm *c) {
  return dl_fail(DL_ERR_INTERNAL, "rank %d: another rank failed; collective abandoned",
                 c->rank);
}

void dl_comm_abort(dl_comm *c) {
  pthread_mutex_lock(&c->g->mu);
  c->g->aborted = true;
  pthread_cond_broadcast(&c->g->cv);
  pthread_mutex_unlock(&c->g->mu);
}

dl_status dl_comm_barrier(dl_comm *c) {
  return group_barrier(c->g, c->rank, false) ? DL_OK : aborted(c);
}

/* Rank r owns the elements [lo, hi) of the result: it sums them over ranks
 * in rank order (or arrival order under N2) and writes them to everyone. */
dl_status dl_comm_allreduce_sum(dl_comm *c, float *buf, int64_t n) {
  local_group *g = c->g;
  if (c->world == 1) return DL_OK;
  g->slot[c->rank] = buf;
  if (!group_barrier(g, c->rank, true)) return aborted(c);
  int64_t lo = n * c->rank / c->world, hi = n * (c->rank + 1) / c->world;
  float *sum = malloc((size_t)(hi - lo + 1) * sizeof *sum);
  if (!sum) {
    dl_comm_abort(c);
    return dl_fail(DL_ERR_NOMEM, "allreduce: out of memory (rank %d)", c->rank);
  }
  /* N2 emulates a reduction whose order follows timing (atomics, a ring
   * that starts wherever data arrived first): the order of arrival, rotated
   * by the clock, so that two runs practically never sum alike. */
  int rot = 0;
  if (c->arrival_order) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    rot = (int)((ts.tv_nsec >> 6) % c->world);
  }
  for (int64_t i = lo; i < hi; i++) {
    float acc = 0.0f;
    for (int k = 0; k < c->world; k++) {
      int r = c->arrival_order ? g->arrival[(k + rot) % c->world] : k;
      acc += ((const float *)g->slot[r])[i];
    }
    sum[i - lo] = acc;
  }
  if (!group_barrier(g, c->rank, false)) {
    free(sum);
    return aborted(c);
  }
  for (int r = 0; r < c->world; r++)
    memcpy((float *)g->slot[r] + lo, sum, (size_t)(hi - lo) * sizeof *sum);
  free(sum);
  return group_barrier(g, c->rank, false) ? DL_OK : aborted(c);
}

dl_status dl_comm_broadcast(dl_comm *c, void *buf, size_t bytes, int root) {
  if (root < 0 || root >= c->world)
    return dl_fail(DL_ERR_INVALID, "broadcast: root %d outside 0..%d", root, c->world - 1);
  if (c->world == 1) return DL_OK;
  c->g->slot[c->rank] = buf;
  if (!group_barrier(c->g, c->rank, false)) return aborted(c);
  if (c->rank != root) memcpy(buf, c->g->slot[root], bytes);
  return group_barrier(c->g, c->rank, false) ? DL_OK : aborted(c);
}

dl_status dl_comm_allgather(dl_comm *c, const void *send, void *recv, size_t bytes) {
  c->g->slot[c->rank] = (void *)send;
  if (!group_barrier(c->g, c->rank, false)) return aborted(c);
  for (int r = 0; r < c->world; r++)
    memcpy((char *)recv + (size_t)r * bytes, c->g->slot[r], bytes);
  return group_barrier(c->g, c->rank, false) ? DL_OK : aborted(c);
}

static void group_unref(local_group *g) {
  if (atomic_fetch_sub(&g->refs, 1) != 1) return;
  pthread_mutex_destroy(&g->mu);
  pthread_cond_destroy(&g->cv);
  free(g->slot);
  free(g->arrival);
  free(g);
}

void dl_comm_destroy(dl_comm *c) {
  if (!c) return;
  group_unref(c->g);
  free(c);
}

dl_status dl_comm_local_create(int world, dl_comm **comms) {
  if (world < 1 || world > 1024)
    return dl_fail(DL_ERR_INVALID, "local comm: world size %d outside 1..1024", world);
  local_group *g = calloc(1, sizeof *g);
  if (!g) return dl_fail(DL_ERR_NOMEM, "local comm: out of memory");
  g->world = world;
  g->slot = calloc((size_t)world, sizeof *g->slot);
  g->arrival = calloc((size_t)world, sizeof *g->arrival);
  if (!g->slot || !g->arrival) {
    free(g->slot);
    free(g->arrival);
    free(g);
    return dl_fail(DL_ERR_NOMEM, "local comm: out of memory");
  }
  pthread_mutex_init(&g->mu, NULL);
  pthread_cond_init(&g->cv, NULL);
  for (int r = 0; r < world; r++) {
    comms[r] = calloc(1, sizeof **comms);
    if (!comms[r]) {
      atomic_fetch_add(&g->refs, 1); /* so that the last unref frees g */
      for (int k = 0; k < r; k++) dl_comm_destroy(comms[k]);
      group_unref(g);
      return dl_fail(DL_ERR_NOMEM, "local comm: out of memory");
    }
    atomic_fetch_add(&g->refs, 1);
    *comms[r] = (dl_comm){.rank = r, .world = world, .g = g};
  }
  return DL_OK;
}
