#define _POSIX_C_SOURCE 200809L /* clock_gettime, nanosleep */
/* The public comm entry points: argument checks, the world-of-one shortcuts
 * and the collective counter, then the backend's operation. Also what every
 * backend shares: fixed-order sums, timeout messages, the start-up
 * consistency check and the native-versus-ordered measurement. */
#include "comm/comm_backend.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { MAX_NAMED_RANKS = 16 };
static const double DEFAULT_TIMEOUT_S = 60.0, MAX_TIMEOUT_S = 1e6;

int dl_comm_rank(const dl_comm *c) { return c->rank; }
int dl_comm_world(const dl_comm *c) { return c->world; }
const char *dl_comm_backend(const dl_comm *c) { return c->ops->name; }
void dl_comm_set_arrival_order(dl_comm *c, bool on) { c->arrival_order = on; }
void dl_comm_set_reduce_mode(dl_comm *c, dl_reduce_mode m) { c->mode = m; }
dl_reduce_mode dl_comm_reduce_mode(const dl_comm *c) { return c->mode; }
void dl_comm_set_order_seed(dl_comm *c, uint64_t seed) { c->order_seed = seed; }
double dl_comm_timeout(const dl_comm *c) { return c->timeout_s; }

dl_status dl_comm_set_timeout(dl_comm *c, double seconds) {
  if (!(seconds > 0 && seconds <= MAX_TIMEOUT_S))
    return dl_fail(DL_ERR_INVALID, "rank %d: comm timeout %g s: expected seconds > 0 and <= %g",
                   c->rank, seconds, MAX_TIMEOUT_S);
  c->timeout_s = seconds;
  return DL_OK;
}

static dl_status timeout_from_env(double *out) {
  *out = DEFAULT_TIMEOUT_S;
  const char *s = getenv("DLCHECK_COMM_TIMEOUT");
  if (!s || !*s) return DL_OK;
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (end == s || *end || errno || !(v > 0 && v <= MAX_TIMEOUT_S))
    return dl_fail(DL_ERR_INVALID,
                   "DLCHECK_COMM_TIMEOUT=\"%s\": expected seconds > 0 and <= %g (e.g. 60)", s,
                   MAX_TIMEOUT_S);
  *out = v;
  return DL_OK;
}

dl_status dl_comm_new(const dl_comm_ops *ops, int rank, int world, void *impl, dl_comm **out) {
  *out = NULL;
  double timeout;
  DL_TRY(timeout_from_env(&timeout));
  dl_comm *c = calloc(1, sizeof *c);
  if (!c) return dl_fail(DL_ERR_NOMEM, "%s comm: out of memory (rank %d)", ops->name, rank);
  *c = (dl_comm){.ops = ops,
                 .rank = rank,
                 .world = world,
                 .mode = DL_REDUCE_ORDERED,
                 .timeout_s = timeout,
                 .impl = impl};
  *out = c;
  return DL_OK;
}

void dl_comm_destroy(dl_comm *c) {
  if (!c) return;
  c->ops->destroy(c);
  free(c);
}

void dl_comm_abort(dl_comm *c) { c->ops->abort(c); }

/* ---- the collectives ---- */

/* A world of one has nothing to exchange, unless the backend wants its
 * path exercised anyway (nccl: a one-GPU machine still tests the code). */
static bool alone(const dl_comm *c) { return c->world == 1 && !c->ops->run_alone; }

dl_status dl_comm_allreduce_sum(dl_comm *c, float *buf, int64_t n) {
  if (n < 0 || (n > 0 && !buf))
    return dl_fail(DL_ERR_INVALID,
                   "rank %d: allreduce of %" PRId64 " floats at %p: need n >= 0 "
                   "and a buffer",
                   c->rank, n, (void *)buf);
  if (alone(c) || n == 0) return DL_OK;
  c->seq++;
  return c->ops->allreduce(c, buf, n);
}

dl_status dl_comm_broadcast(dl_comm *c, void *buf, size_t bytes, int root) {
  if (root < 0 || root >= c->world)
    return dl_fail(DL_ERR_INVALID, "broadcast: root %d outside 0..%d", root, c->world - 1);
  if (bytes > 0 && !buf)
    return dl_fail(DL_ERR_INVALID, "rank %d: broadcast of %zu bytes from a NULL buffer", c->rank,
                   bytes);
  if (alone(c) || bytes == 0) return DL_OK;
  c->seq++;
  return c->ops->broadcast(c, buf, bytes, root);
}

dl_status dl_comm_allgather(dl_comm *c, const void *send, void *recv, size_t bytes) {
  if (bytes > 0 && (!send || !recv))
    return dl_fail(DL_ERR_INVALID, "rank %d: allgather of %zu bytes with a NULL %s buffer", c->rank,
                   bytes, send ? "receive" : "send");
  if (bytes == 0) return DL_OK;
  if (alone(c)) {
    memmove(recv, send, bytes);
    return DL_OK;
  }
  c->seq++;
  return c->ops->allgather(c, send, recv, bytes);
}

dl_status dl_comm_barrier(dl_comm *c) {
  if (alone(c)) return DL_OK;
  c->seq++;
  return c->ops->barrier(c);
}

/* ---- fixed-order sums ---- */

void dl_comm_sum_in_order(float *dst, const float *const *src, int world, int64_t n,
                          const int *order) {
  for (int64_t i = 0; i < n; i++) dst[i] = 0.0f;
  /* Rank by rank over the whole chunk: each element still gets its terms in
   * the given order, and the inner loop vectorises. */
  for (int k = 0; k < world; k++) {
    const float *s = src[order ? order[k] : k];
    for (int64_t i = 0; i < n; i++) dst[i] += s[i];
  }
}

void dl_comm_ring_order(int *order, int world, int owner) {
  for (int k = 0; k < world; k++) order[k] = (owner + 1 + k) % world;
}

/* -0 never comes out, as in the sums above (they start from +0), so a
 * tree over two ranks gives the same bits as any other order. */
void dl_comm_sum_tree(float *dst, const float *const *src, int world, int64_t n, const int *order,
                      float *leaves) {
  for (int64_t i = 0; i < n; i++) {
    for (int k = 0; k < world; k++) leaves[k] = src[order[k]][i];
    for (int stride = 1; stride < world; stride *= 2)
      for (int k = 0; k + stride < world; k += 2 * stride) leaves[k] += leaves[k + stride];
    dst[i] = leaves[0] + 0.0f;
  }
}

/* Odd and even seeds alternate so that the repeats 1, 2, ... of a
 * calibration draw both kinds; the rotation (seed / 2) runs through every
 * ring start and both pairings of a tree over 4 ranks. */
bool dl_comm_seed_order(uint64_t seed, int world, int owner, int *order) {
  int rot = (int)((seed / 2) % (uint64_t)world);
  if (seed % 2) {
    dl_comm_ring_order(order, world, (owner + rot) % world);
    return false;
  }
  for (int k = 0; k < world; k++) order[k] = (rot + k) % world;
  return true;
}

void dl_comm_clock_order(int *order, int world, const int *arrived) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  int rot = (int)((ts.tv_nsec >> 6) % world);
  for (int k = 0; k < world; k++) {
    int j = (k + rot) % world;
    order[k] = arrived ? arrived[j] : j;
  }
}

/* ---- waiting ---- */

double dl_comm_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void dl_comm_backoff(int *round) {
  /* ~200 polls spinning (a collective on a quiet machine completes in
   * microseconds), then sleeps from 10 us doubling up to 1 ms. */
  int r = (*round)++;
  if (r < 200) return;
  long ns = 10000L << (r - 200 < 7 ? r - 200 : 7);
  if (ns > 1000000L) ns = 1000000L;
  struct timespec ts = {0, ns};
  nanosleep(&ts, NULL);
}

/* ---- messages ---- */

void dl_comm_format_ranks(char *buf, size_t cap, const int *ranks, int n) {
  size_t len = strlen(buf);
  if (n == 0) {
    snprintf(buf + len, cap - len, "none");
    return;
  }
  len += (size_t)snprintf(buf + len, cap - len, "%s", n == 1 ? "rank " : "ranks ");
  for (int i = 0; i < n && i < MAX_NAMED_RANKS && len < cap; i++)
    len += (size_t)snprintf(buf + len, cap - len, "%s%d", i ? ", " : "", ranks[i]);
  if (n > MAX_NAMED_RANKS && len < cap)
    snprintf(buf + len, cap - len, " and %d more", n - MAX_NAMED_RANKS);
}

/* Ranks r (other than `me`) for which keep(entered[r], seq) holds. */
static int select_ranks(int *out, const int64_t *entered, int world, int me, int64_t seq,
                        int which) {
  int n = 0;
  for (int r = 0; r < world; r++) {
    bool reached = r == me || entered[r] >= seq, aborted = r != me && entered[r] < 0;
    if ((which == 0 && reached) || (which == 1 && !reached && !aborted) || (which == 2 && aborted))
      out[n++] = r;
  }
  return n;
}

dl_status dl_comm_fail_timeout(const dl_comm *c, const char *what, const int64_t *entered) {
  char reached[256] = "", missing[256] = "", aborted[256] = "";
  int *ranks = malloc((size_t)c->world * sizeof *ranks);
  if (ranks) {
    dl_comm_format_ranks(reached, sizeof reached, ranks,
                         select_ranks(ranks, entered, c->world, c->rank, c->seq, 0));
    dl_comm_format_ranks(missing, sizeof missing, ranks,
                         select_ranks(ranks, entered, c->world, c->rank, c->seq, 1));
    int na = select_ranks(ranks, entered, c->world, c->rank, c->seq, 2);
    if (na > 0) {
      snprintf(aborted, sizeof aborted, "; aborted: ");
      dl_comm_format_ranks(aborted, sizeof aborted, ranks, na);
    }
    free(ranks);
  }
  return dl_fail(DL_ERR_IO,
                 "rank %d: collective %s (#%" PRId64 ", %s backend) timed out after %g s: a "
                 "peer rank died or hung (reached it: %s; missing: %s%s); raise "
                 "DLCHECK_COMM_TIMEOUT if the ranks are only slow",
                 c->rank, what, c->seq, c->ops->name, c->timeout_s, reached, missing, aborted);
}

dl_status dl_comm_fail_aborted(const dl_comm *c, const char *what, int who) {
  if (who < 0)
    return dl_fail(DL_ERR_INTERNAL, "rank %d: another rank failed; collective %s abandoned",
                   c->rank, what);
  return dl_fail(DL_ERR_INTERNAL, "rank %d: rank %d failed (aborted); collective %s abandoned",
                 c->rank, who, what);
}

/* ---- start-up consistency ---- */

static void describe_groups(char *msg, size_t cap, const uint64_t *all, int world, int *ranks) {
  for (int r = 0; r < world; r++) {
    bool seen = false;
    for (int q = 0; q < r && !seen; q++) seen = all[q] == all[r];
    if (seen) continue;
    int n = 0;
    for (int q = r; q < world; q++)
      if (all[q] == all[r]) ranks[n++] = q;
    size_t len = strlen(msg);
    snprintf(msg + len, cap - len, "%s0x%016" PRIx64 " on ", r ? "; " : "", all[r]);
    dl_comm_format_ranks(msg, cap, ranks, n);
  }
}

dl_status dl_comm_check_consistent(dl_comm *c, uint64_t hash, const char *what) {
  if (!what) what = "value";
  int W = c->world;
  uint64_t *all = malloc((size_t)W * sizeof *all);
  int *ranks = malloc((size_t)W * sizeof *ranks);
  dl_status s = all && ranks ? DL_OK : dl_fail(DL_ERR_NOMEM, "rank %d: out of memory", c->rank);
  if (!s) s = dl_comm_allgather(c, &hash, all, sizeof hash);
  bool same = true;
  for (int r = 1; !s && r < W; r++) same = same && all[r] == all[0];
  if (!s && !same) {
    char groups[1024] = "";
    describe_groups(groups, sizeof groups, all, W, ranks);
    s = dl_fail(DL_ERR_INVALID,
                "rank %d: %s differs between ranks (%s); start every rank with "
                "the same %s",
                c->rank, what, groups, what);
  }
  free(all);
  free(ranks);
  if (s && s != DL_ERR_INVALID)
    return dl_fail_context(s, "checking that every rank has the same %s: ", what);
  return s;
}

/* ---- native versus ordered ---- */

static int64_t float_steps(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return (u & 0x80000000u) ? -(int64_t)(u & 0x7fffffffu) : (int64_t)u;
}

static void compare(const float *ordered, const float *native, int64_t n, dl_reduce_diff *d) {
  *d = (dl_reduce_diff){.n = n};
  for (int64_t i = 0; i < n; i++) {
    float a = ordered[i], b = native[i];
    if (memcmp(&a, &b, sizeof a) == 0 || (isnan(a) && isnan(b))) continue;
    d->ndiff++;
    double abs_err = isnan(a) || isnan(b) ? INFINITY : fabs((double)b - (double)a);
    double rel = a == 0.0f ? (abs_err > 0 ? INFINITY : 0.0) : abs_err / fabs((double)a);
    int64_t steps = float_steps(b) - float_steps(a);
    int64_t ulp = isnan(a) || isnan(b) ? INT64_MAX : (steps < 0 ? -steps : steps);
    if (abs_err > d->max_abs) d->max_abs = abs_err;
    if (rel > d->max_rel) d->max_rel = rel;
    if (ulp > d->max_ulp) d->max_ulp = ulp;
  }
}

static void worst_of(dl_reduce_diff *out, const dl_reduce_diff *all, int world) {
  *out = all[0];
  for (int r = 1; r < world; r++) {
    const dl_reduce_diff *d = &all[r];
    if (d->ndiff > out->ndiff) out->ndiff = d->ndiff;
    if (d->max_abs > out->max_abs) out->max_abs = d->max_abs;
    if (d->max_rel > out->max_rel) out->max_rel = d->max_rel;
    if (d->max_ulp > out->max_ulp) out->max_ulp = d->max_ulp;
  }
}

static dl_status reduce_both(dl_comm *c, float *ordered, float *native, int64_t n) {
  dl_reduce_mode saved = c->mode;
  c->mode = DL_REDUCE_ORDERED;
  dl_status s = dl_comm_allreduce_sum(c, ordered, n);
  c->mode = DL_REDUCE_NATIVE;
  if (!s) s = dl_comm_allreduce_sum(c, native, n);
  c->mode = saved;
  return s;
}

dl_status dl_comm_reduce_diff(dl_comm *c, const float *buf, int64_t n, dl_reduce_diff *out) {
  if (n < 0 || (n > 0 && !buf) || !out)
    return dl_fail(DL_ERR_INVALID,
                   "rank %d: reduce_diff of %" PRId64 " floats: need n >= 0, a "
                   "buffer and an output",
                   c->rank, n);
  size_t bytes = (size_t)n * sizeof(float);
  float *ordered = malloc(bytes + 1), *native = malloc(bytes + 1);
  dl_reduce_diff *all = malloc((size_t)c->world * sizeof *all);
  dl_status s = ordered && native && all
                    ? DL_OK
                    : dl_fail(DL_ERR_NOMEM,
                              "rank %d: reduce_diff: out of memory for %" PRId64 " floats", c->rank,
                              n);
  if (!s) {
    if (n > 0) {
      memcpy(ordered, buf, bytes);
      memcpy(native, buf, bytes);
    }
    s = reduce_both(c, ordered, native, n);
  }
  dl_reduce_diff mine;
  if (!s) compare(ordered, native, n, &mine);
  if (!s) s = dl_comm_allgather(c, &mine, all, sizeof mine);
  if (!s) worst_of(out, all, c->world);
  free(ordered);
  free(native);
  free(all);
  return s;
}
