/* The comm interface on the local backend (threads as ranks, 1..8): the
 * ordered allreduce against a rank-order sum computed here (bitwise), the
 * native mode within the float32 bound, broadcast, allgather, barrier,
 * abort and timeouts naming the rank, the start-up consistency check, the
 * native-versus-ordered measurement, and bad arguments. */
#define _POSIX_C_SOURCE 200809L
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cmocka.h>

#include "comm/comm.h"
#include "comm/comm_backend.h"

enum { MAX_W = 8, N = 1001 };

/* ---- running a function on W threads, one rank each ---- */

typedef struct rank_ctx rank_ctx;
typedef dl_status (*rank_fn)(rank_ctx *r);

struct rank_ctx {
  dl_comm *c;
  int rank, world;
  void *arg;
  dl_status s;
  char msg[2048]; /* dl_last_error() is per thread: copied out here */
  double seconds; /* how long fn ran */
  rank_fn fn;
};

static void *rank_main(void *p) {
  rank_ctx *r = p;
  double t0 = dl_comm_now();
  r->s = r->fn(r);
  r->seconds = dl_comm_now() - t0;
  snprintf(r->msg, sizeof r->msg, "%s", r->s ? dl_last_error() : "");
  return NULL;
}

/* cmocka's asserts are not thread-safe: threads only record, the test
 * asserts afterwards. */
static void run_ranks(int W, rank_fn fn, void *arg, double timeout, rank_ctx *ctx) {
  dl_comm *comms[MAX_W];
  assert_int_equal(dl_comm_local_create(W, comms), DL_OK);
  pthread_t th[MAX_W];
  for (int r = 0; r < W; r++) {
    if (timeout > 0) assert_int_equal(dl_comm_set_timeout(comms[r], timeout), DL_OK);
    ctx[r] = (rank_ctx){.c = comms[r], .rank = r, .world = W, .arg = arg, .fn = fn};
    assert_int_equal(pthread_create(&th[r], NULL, rank_main, &ctx[r]), 0);
  }
  for (int r = 0; r < W; r++) pthread_join(th[r], NULL);
  for (int r = 0; r < W; r++) dl_comm_destroy(comms[r]);
}

/* ---- data whose sum depends on the order of the terms ---- */

static uint32_t lcg(uint32_t *s) { return *s = *s * 1664525u + 1013904223u; }

/* Values of both signs with magnitudes from about 2^-20 to 2^11: float32
 * sums of these round differently in different orders. */
static void fill_mixed(float *x, int64_t n, uint32_t seed) {
  for (int64_t i = 0; i < n; i++) {
    float u = (float)(lcg(&seed) >> 8) / 16777216.0f - 0.5f;
    x[i] = ldexpf(u, (int)((lcg(&seed) >> 27) % 25) - 12);
  }
}

typedef struct sum_case {
  float in[MAX_W][N];  /* each rank's buffer before */
  float out[MAX_W][N]; /* and after */
  int64_t n;
  dl_reduce_mode mode;
  bool arrival;
  uint64_t order_seed;
} sum_case;

static dl_status do_allreduce(rank_ctx *r) {
  sum_case *k = r->arg;
  memcpy(k->out[r->rank], k->in[r->rank], (size_t)k->n * sizeof(float));
  dl_comm_set_reduce_mode(r->c, k->mode);
  dl_comm_set_arrival_order(r->c, k->arrival);
  dl_comm_set_order_seed(r->c, k->order_seed);
  return dl_comm_allreduce_sum(r->c, k->out[r->rank], k->n);
}

static void rank_order_sum(const sum_case *k, int W, float *ref) {
  for (int64_t i = 0; i < k->n; i++) {
    float acc = 0.0f;
    for (int r = 0; r < W; r++) acc += k->in[r][i];
    ref[i] = acc;
  }
}

static sum_case *new_case(int W, int64_t n, dl_reduce_mode mode, uint32_t seed) {
  sum_case *k = calloc(1, sizeof *k);
  assert_non_null(k);
  k->n = n;
  k->mode = mode;
  for (int r = 0; r < W; r++) fill_mixed(k->in[r], n, seed + 977u * (uint32_t)r);
  return k;
}

/* Exact: the rank-order float32 sum computed above, bit for bit, on every
 * rank, for every world size and a length not divisible by it. */
static void test_allreduce_ordered_bitwise(void **state) {
  (void)state;
  const int64_t lengths[] = {1, 2, 7, N};
  for (int W = 1; W <= 4; W++)
    for (size_t li = 0; li < sizeof lengths / sizeof *lengths; li++) {
      sum_case *k = new_case(W, lengths[li], DL_REDUCE_ORDERED, 11u * (uint32_t)W);
      rank_ctx ctx[MAX_W];
      run_ranks(W, do_allreduce, k, 0, ctx);
      float ref[N];
      rank_order_sum(k, W, ref);
      for (int r = 0; r < W; r++) {
        assert_int_equal(ctx[r].s, DL_OK);
        assert_memory_equal(k->out[r], ref, (size_t)k->n * sizeof(float));
      }
      free(k);
    }
}

/* The data must make order matter, or the bitwise test proves nothing. */
static void test_data_is_order_sensitive(void **state) {
  (void)state;
  sum_case *k = new_case(4, N, DL_REDUCE_ORDERED, 5u);
  int differ = 0;
  for (int64_t i = 0; i < N; i++) {
    float fwd = 0.0f, back = 0.0f;
    for (int r = 0; r < 4; r++) fwd += k->in[r][i];
    for (int r = 3; r >= 0; r--) back += k->in[r][i];
    differ += fwd != back;
  }
  assert_true(differ > N / 10);
  free(k);
}

/* Native: the same bits on every rank, and within the float32 bound of
 * the exact sum, |err| <= (W-1) * eps * sum |x| (any order of W-1
 * additions, each rounding by at most eps/2 of a partial sum); for W >= 3
 * its ring order must actually differ from rank order somewhere. */
static void test_allreduce_native_within_bound(void **state) {
  (void)state;
  for (int W = 2; W <= 4; W++) {
    sum_case *k = new_case(W, N, DL_REDUCE_NATIVE, 21u * (uint32_t)W);
    rank_ctx ctx[MAX_W];
    run_ranks(W, do_allreduce, k, 0, ctx);
    float ref[N];
    rank_order_sum(k, W, ref);
    int differ = 0;
    for (int64_t i = 0; i < N; i++) {
      double exact = 0, mag = 0;
      for (int r = 0; r < W; r++) {
        exact += k->in[r][i];
        mag += fabs((double)k->in[r][i]);
      }
      assert_true(fabs((double)k->out[0][i] - exact) <= (W - 1) * FLT_EPSILON * mag);
      differ += k->out[0][i] != ref[i];
    }
    for (int r = 0; r < W; r++) {
      assert_int_equal(ctx[r].s, DL_OK);
      assert_memory_equal(k->out[r], k->out[0], N * sizeof(float));
    }
    if (W >= 3) assert_true(differ > 0);
    free(k);
  }
}

/* Calibration orders (dl_comm_set_order_seed), ring seeds (odd): element
 * i of the chunk rank o sums is added in ring order starting
 * (seed / 2) % W + 1 ranks after o, in either mode; every rank gets the
 * same bits; seeds give different bits at W = 4, and the same ones at
 * W = 2 (a + b = b + a). Seed 0 is the mode's own order. */
static void seeded_ring_sum(const sum_case *k, int W, uint64_t seed, float *ref) {
  int rot = (int)((seed / 2) % (uint64_t)W);
  for (int o = 0; o < W; o++)
    for (int64_t i = k->n * o / W; i < k->n * (o + 1) / W; i++) {
      float acc = 0.0f;
      for (int j = 0; j < W; j++) acc += k->in[(o + rot + 1 + j) % W][i];
      ref[i] = acc;
    }
}

/* Runs the allreduce of a fresh case under seed and mode; every rank's
 * result must be `expect` (NULL: only all alike); out gets rank 0's. */
static void seeded_allreduce(int W, uint64_t seed, dl_reduce_mode mode,
                             void (*expect)(const sum_case *, int, uint64_t, float *), float *out) {
  sum_case *k = new_case(W, N, mode, 31u);
  k->order_seed = seed;
  rank_ctx ctx[MAX_W];
  run_ranks(W, do_allreduce, k, 0, ctx);
  float ref[N];
  if (expect) expect(k, W, seed, ref);
  else memcpy(ref, k->out[0], sizeof ref);
  for (int r = 0; r < W; r++) {
    assert_int_equal(ctx[r].s, DL_OK);
    assert_memory_equal(k->out[r], ref, N * sizeof(float));
  }
  memcpy(out, ref, N * sizeof(float));
  free(k);
}

static void rank_order_expect(const sum_case *k, int W, uint64_t seed, float *ref) {
  (void)seed;
  rank_order_sum(k, W, ref);
}

static void test_allreduce_order_seed(void **state) {
  (void)state;
  const uint64_t ring_seeds[] = {1, 3, 5};
  for (int W = 2; W <= 4; W += 2) {
    float first[N], got[N];
    seeded_allreduce(W, 0, DL_REDUCE_ORDERED, rank_order_expect, first);
    int seeds_differ = 0;
    for (int j = 0; j < 3; j++) {
      dl_reduce_mode mode = j == 1 ? DL_REDUCE_NATIVE : DL_REDUCE_ORDERED;
      seeded_allreduce(W, ring_seeds[j], mode, seeded_ring_sum, got);
      seeds_differ += memcmp(first, got, sizeof first) != 0;
    }
    assert_int_equal(seeds_differ, W == 2 ? 0 : 3);
  }
}

/* The tree written another way than the backend's in-place doubling: the
 * largest power of two below n ranks on the left, the rest on the right. */
static float tree_of(const float *v, int n) {
  if (n == 1) return v[0];
  int h = 1;
  while (2 * h < n) h *= 2;
  return tree_of(v, h) + tree_of(v + h, n - h);
}

static void seeded_tree_sum(const sum_case *k, int W, uint64_t seed, float *ref) {
  int rot = (int)((seed / 2) % (uint64_t)W);
  for (int64_t i = 0; i < k->n; i++) {
    float leaves[MAX_W];
    for (int j = 0; j < W; j++) leaves[j] = k->in[(rot + j) % W][i];
    ref[i] = tree_of(leaves, W) + 0.0f;
  }
}

/* Tree seeds (even): the pairwise tree over the rotated ranks on every
 * rank, in either mode; the same seed repeats exactly; from 4 ranks on it
 * differs in bits from every ring order, with 2 it is the ring's sum. */
static void test_allreduce_tree_order(void **state) {
  (void)state;
  const int worlds[] = {2, 4, 5, 8};
  for (size_t w = 0; w < sizeof worlds / sizeof *worlds; w++) {
    int W = worlds[w];
    float tree[N], again[N], other[N], ring[N];
    seeded_allreduce(W, 2, DL_REDUCE_ORDERED, seeded_tree_sum, tree);
    seeded_allreduce(W, 2, DL_REDUCE_NATIVE, NULL, again);
    assert_memory_equal(tree, again, sizeof tree); /* an order, not noise */
    seeded_allreduce(W, 4, DL_REDUCE_ORDERED, seeded_tree_sum, other);
    for (uint64_t seed = 1; seed < 2 * (uint64_t)W; seed += 2) {
      seeded_allreduce(W, seed, DL_REDUCE_ORDERED, seeded_ring_sum, ring);
      if (W == 2) assert_memory_equal(tree, ring, sizeof tree);
      else assert_true(memcmp(tree, ring, sizeof tree) != 0);
    }
    if (W == 4) assert_true(memcmp(tree, other, sizeof tree) != 0); /* other pairs */
  }
}

/* record --repeat runs its repeats with seeds 1..n-1: any calibration
 * (n >= 3) draws a ring (seed 1) and a tree (seed 2). */
static void test_seed_orders_alternate(void **state) {
  (void)state;
  int order[MAX_W];
  for (uint64_t seed = 1; seed <= 8; seed++)
    assert_int_equal(dl_comm_seed_order(seed, 4, 0, order), seed % 2 == 0);
}

/* Pitfall N2: the order follows timing, but every rank still gets the same
 * bits, and the sum stays within the float32 bound. */
static void test_allreduce_arrival_order(void **state) {
  (void)state;
  sum_case *k = new_case(3, N, DL_REDUCE_ORDERED, 99u);
  k->arrival = true;
  rank_ctx ctx[MAX_W];
  run_ranks(3, do_allreduce, k, 0, ctx);
  for (int r = 0; r < 3; r++) {
    assert_int_equal(ctx[r].s, DL_OK);
    assert_memory_equal(k->out[r], k->out[0], N * sizeof(float));
  }
  for (int64_t i = 0; i < N; i++) {
    double exact = 0, mag = 0;
    for (int r = 0; r < 3; r++) {
      exact += k->in[r][i];
      mag += fabs((double)k->in[r][i]);
    }
    assert_true(fabs((double)k->out[0][i] - exact) <= 2 * FLT_EPSILON * mag);
  }
  free(k);
}

/* ---- broadcast, allgather, barrier ---- */

typedef struct bytes_case {
  int root;
  unsigned char buf[MAX_W][64];
  unsigned char all[MAX_W][MAX_W * 8];
} bytes_case;

static dl_status do_broadcast(rank_ctx *r) {
  bytes_case *k = r->arg;
  memset(k->buf[r->rank], 100 + r->rank, sizeof k->buf[0]);
  return dl_comm_broadcast(r->c, k->buf[r->rank], sizeof k->buf[0], k->root);
}

static void test_broadcast_every_root(void **state) {
  (void)state;
  for (int W = 1; W <= 4; W++)
    for (int root = 0; root < W; root++) {
      bytes_case k = {.root = root};
      rank_ctx ctx[MAX_W];
      run_ranks(W, do_broadcast, &k, 0, ctx);
      for (int r = 0; r < W; r++) {
        assert_int_equal(ctx[r].s, DL_OK);
        for (size_t i = 0; i < sizeof k.buf[0]; i++) assert_int_equal(k.buf[r][i], 100 + root);
      }
    }
}

static dl_status do_allgather(rank_ctx *r) {
  bytes_case *k = r->arg;
  unsigned char send[8];
  for (int i = 0; i < 8; i++) send[i] = (unsigned char)(16 * r->rank + i);
  return dl_comm_allgather(r->c, send, k->all[r->rank], sizeof send);
}

static void test_allgather(void **state) {
  (void)state;
  for (int W = 1; W <= 4; W++) {
    bytes_case k = {0};
    rank_ctx ctx[MAX_W];
    run_ranks(W, do_allgather, &k, 0, ctx);
    for (int r = 0; r < W; r++) {
      assert_int_equal(ctx[r].s, DL_OK);
      for (int q = 0; q < W; q++)
        for (int i = 0; i < 8; i++) assert_int_equal(k.all[r][8 * q + i], 16 * q + i);
    }
  }
}

typedef struct barrier_case {
  atomic_int before;
  int seen_after[MAX_W];
} barrier_case;

/* Ranks arrive staggered; none may leave before all have arrived. */
static dl_status do_barrier(rank_ctx *r) {
  barrier_case *k = r->arg;
  struct timespec ts = {0, 2000000L * r->rank};
  nanosleep(&ts, NULL);
  atomic_fetch_add(&k->before, 1);
  dl_status s = dl_comm_barrier(r->c);
  k->seen_after[r->rank] = atomic_load(&k->before);
  return s;
}

static void test_barrier(void **state) {
  (void)state;
  for (int W = 1; W <= 4; W++) {
    barrier_case k = {0};
    rank_ctx ctx[MAX_W];
    run_ranks(W, do_barrier, &k, 0, ctx);
    for (int r = 0; r < W; r++) {
      assert_int_equal(ctx[r].s, DL_OK);
      assert_int_equal(k.seen_after[r], W);
    }
  }
}

/* ---- faults ---- */

/* The last rank fails (aborts after 50 ms); the others are waiting in an
 * allreduce and must return at once with an error naming it, and so must
 * every later collective. */
static dl_status do_abort_last(rank_ctx *r) {
  float x[4] = {1, 2, 3, 4};
  if (r->rank == r->world - 1) {
    struct timespec ts = {0, 50000000L};
    nanosleep(&ts, NULL);
    dl_comm_abort(r->c);
    return dl_fail(DL_ERR_IO, "rank %d: injected failure", r->rank);
  }
  dl_status s = dl_comm_allreduce_sum(r->c, x, 4);
  if (!s) return s;
  char first[2048];
  snprintf(first, sizeof first, "%s", dl_last_error());
  dl_status again = dl_comm_barrier(r->c);
  return again == s ? dl_fail(s, "%s", first) : DL_ERR_INTERNAL;
}

static void test_abort_wakes_waiters(void **state) {
  (void)state;
  rank_ctx ctx[MAX_W];
  run_ranks(3, do_abort_last, NULL, 30, ctx);
  for (int r = 0; r < 2; r++) {
    assert_int_equal(ctx[r].s, DL_ERR_INTERNAL);
    assert_non_null(strstr(ctx[r].msg, "rank 2 failed"));
    assert_true(ctx[r].seconds < 10); /* not the 30 s timeout */
  }
  assert_non_null(strstr(ctx[2].msg, "injected"));
}

/* The last rank hangs (never enters the collective): after the 0.3 s
 * timeout the others fail with DL_ERR_IO naming it as missing. */
static dl_status do_hang_last(rank_ctx *r) {
  float x[4] = {1, 2, 3, 4};
  if (r->rank == r->world - 1) {
    struct timespec ts = {1, 0};
    nanosleep(&ts, NULL);
    return DL_OK;
  }
  return dl_comm_allreduce_sum(r->c, x, 4);
}

static void test_timeout_names_missing_rank(void **state) {
  (void)state;
  rank_ctx ctx[MAX_W];
  run_ranks(3, do_hang_last, NULL, 0.3, ctx);
  for (int r = 0; r < 2; r++) {
    assert_int_equal(ctx[r].s, DL_ERR_IO);
    assert_non_null(strstr(ctx[r].msg, "timed out after 0.3 s"));
    assert_non_null(strstr(ctx[r].msg, "missing: rank 2"));
    assert_non_null(strstr(ctx[r].msg, "reached it: ranks 0, 1"));
    assert_true(ctx[r].seconds >= 0.25 && ctx[r].seconds < 5);
  }
}

/* ---- start-up consistency ---- */

static dl_status do_consistent(rank_ctx *r) {
  const uint64_t *hashes = r->arg;
  return dl_comm_check_consistent(r->c, hashes[r->rank], "scenario hash");
}

static void test_check_consistent(void **state) {
  (void)state;
  uint64_t same[3] = {0xabcdu, 0xabcdu, 0xabcdu}, odd[4] = {7, 9, 7, 9};
  rank_ctx ctx[MAX_W];
  run_ranks(3, do_consistent, same, 0, ctx);
  for (int r = 0; r < 3; r++) assert_int_equal(ctx[r].s, DL_OK);
  run_ranks(4, do_consistent, odd, 0, ctx);
  for (int r = 0; r < 4; r++) {
    assert_int_equal(ctx[r].s, DL_ERR_INVALID);
    assert_non_null(strstr(ctx[r].msg, "scenario hash differs between ranks"));
    assert_non_null(strstr(ctx[r].msg, "0x0000000000000007 on ranks 0, 2"));
    assert_non_null(strstr(ctx[r].msg, "0x0000000000000009 on ranks 1, 3"));
  }
}

/* ---- native versus ordered ---- */

typedef struct diff_case {
  float in[MAX_W][N];
  dl_reduce_diff out[MAX_W];
  int64_t n;
} diff_case;

static dl_status do_diff(rank_ctx *r) {
  diff_case *k = r->arg;
  float before[N];
  memcpy(before, k->in[r->rank], sizeof before);
  dl_status s = dl_comm_reduce_diff(r->c, k->in[r->rank], k->n, &k->out[r->rank]);
  if (!s && memcmp(before, k->in[r->rank], sizeof before) != 0)
    return dl_fail(DL_ERR_INTERNAL, "rank %d: reduce_diff changed its input", r->rank);
  if (!s && dl_comm_reduce_mode(r->c) != DL_REDUCE_ORDERED)
    return dl_fail(DL_ERR_INTERNAL, "rank %d: reduce_diff left the mode changed", r->rank);
  return s;
}

/* Mixed magnitudes at W = 4: ring order and rank order round differently
 * somewhere, by at most the float32 bound; small integers sum exactly in
 * any order, so there the two modes agree bit for bit. */
static void test_reduce_diff(void **state) {
  (void)state;
  diff_case *k = calloc(1, sizeof *k);
  assert_non_null(k);
  k->n = N;
  for (int r = 0; r < 4; r++) fill_mixed(k->in[r], N, 1234u + (uint32_t)r);
  rank_ctx ctx[MAX_W];
  run_ranks(4, do_diff, k, 0, ctx);
  for (int r = 0; r < 4; r++) {
    assert_int_equal(ctx[r].s, DL_OK);
    assert_memory_equal(&k->out[r], &k->out[0], sizeof k->out[0]);
  }
  dl_reduce_diff d = k->out[0];
  assert_int_equal(d.n, N);
  assert_true(d.ndiff > 0 && d.ndiff < N);
  assert_true(d.max_ulp >= 1 && d.max_ulp < INT64_MAX);
  assert_true(d.max_abs > 0 && d.max_abs <= 3 * FLT_EPSILON * 4 * 2048); /* (W-1) eps sum|x| */
  assert_true(d.max_rel > 0);
  for (int r = 0; r < 4; r++)
    for (int64_t i = 0; i < N; i++) k->in[r][i] = (float)((i * 7 + r) % 13) - 6.0f;
  run_ranks(4, do_diff, k, 0, ctx);
  assert_int_equal(ctx[0].s, DL_OK);
  assert_int_equal(k->out[0].ndiff, 0);
  assert_int_equal(k->out[0].max_ulp, 0);
  assert_true(k->out[0].max_abs == 0 && k->out[0].max_rel == 0);
  free(k);
}

/* ---- arguments, defaults, environment ---- */

static void test_bad_arguments(void **state) {
  (void)state;
  dl_comm *comms[2] = {NULL, NULL};
  assert_int_equal(dl_comm_local_create(0, comms), DL_ERR_INVALID);
  assert_non_null(strstr(dl_last_error(), "world size 0"));
  assert_int_equal(dl_comm_local_create(1025, comms), DL_ERR_INVALID);
  assert_int_equal(dl_comm_local_create(2, comms), DL_OK);
  dl_comm *c = comms[0];
  float x[2] = {0};
  unsigned char b[4] = {0};
  assert_int_equal(dl_comm_allreduce_sum(c, x, -1), DL_ERR_INVALID);
  assert_non_null(strstr(dl_last_error(), "rank 0: allreduce of -1 floats"));
  assert_int_equal(dl_comm_allreduce_sum(c, NULL, 2), DL_ERR_INVALID);
  assert_int_equal(dl_comm_allreduce_sum(c, NULL, 0), DL_OK); /* nothing to do */
  assert_int_equal(dl_comm_broadcast(c, b, 4, 2), DL_ERR_INVALID);
  assert_non_null(strstr(dl_last_error(), "root 2 outside 0..1"));
  assert_int_equal(dl_comm_broadcast(c, b, 4, -1), DL_ERR_INVALID);
  assert_int_equal(dl_comm_broadcast(c, NULL, 4, 0), DL_ERR_INVALID);
  assert_int_equal(dl_comm_broadcast(c, NULL, 0, 0), DL_OK);
  assert_int_equal(dl_comm_allgather(c, NULL, b, 2), DL_ERR_INVALID);
  assert_non_null(strstr(dl_last_error(), "NULL send buffer"));
  assert_int_equal(dl_comm_allgather(c, b, NULL, 2), DL_ERR_INVALID);
  assert_non_null(strstr(dl_last_error(), "NULL receive buffer"));
  assert_int_equal(dl_comm_allgather(c, NULL, NULL, 0), DL_OK);
  const double bad[] = {0, -1, NAN, 2e6};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    assert_int_equal(dl_comm_set_timeout(c, bad[i]), DL_ERR_INVALID);
    assert_non_null(strstr(dl_last_error(), "timeout"));
  }
  dl_reduce_diff d;
  assert_int_equal(dl_comm_reduce_diff(c, x, -1, &d), DL_ERR_INVALID);
  assert_int_equal(dl_comm_reduce_diff(c, x, 2, NULL), DL_ERR_INVALID);
  dl_comm_destroy(comms[0]);
  dl_comm_destroy(comms[1]);
  dl_comm_destroy(NULL);
}

static void test_defaults_and_world_of_one(void **state) {
  (void)state;
  unsetenv("DLCHECK_COMM_TIMEOUT"); /* the default is what is tested */
  dl_comm *c;
  assert_int_equal(dl_comm_local_create(1, &c), DL_OK);
  assert_string_equal(dl_comm_backend(c), "local");
  assert_int_equal(dl_comm_rank(c), 0);
  assert_int_equal(dl_comm_world(c), 1);
  assert_int_equal(dl_comm_reduce_mode(c), DL_REDUCE_ORDERED);
  assert_true(dl_comm_timeout(c) == 60.0);
  dl_comm_set_reduce_mode(c, DL_REDUCE_NATIVE);
  assert_int_equal(dl_comm_reduce_mode(c), DL_REDUCE_NATIVE);
  assert_int_equal(dl_comm_set_timeout(c, 2.5), DL_OK);
  assert_true(dl_comm_timeout(c) == 2.5);
  float x[3] = {1, -0.0f, 3};
  assert_int_equal(dl_comm_allreduce_sum(c, x, 3), DL_OK);
  assert_true(x[0] == 1 && x[2] == 3);
  char send[3] = "ab", recv[3] = "";
  assert_int_equal(dl_comm_allgather(c, send, recv, 3), DL_OK);
  assert_string_equal(recv, "ab");
  assert_int_equal(dl_comm_broadcast(c, send, 3, 0), DL_OK);
  assert_int_equal(dl_comm_barrier(c), DL_OK);
  assert_int_equal(dl_comm_check_consistent(c, 42, NULL), DL_OK);
  dl_comm_destroy(c);
}

static void test_timeout_from_environment(void **state) {
  (void)state;
  dl_comm *comms[2] = {NULL, NULL};
  setenv("DLCHECK_COMM_TIMEOUT", "7.5", 1);
  assert_int_equal(dl_comm_local_create(2, comms), DL_OK);
  assert_true(dl_comm_timeout(comms[1]) == 7.5);
  dl_comm_destroy(comms[0]);
  dl_comm_destroy(comms[1]);
  const char *bad[] = {"soon", "0", "-3", "5s", "1e9"};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    setenv("DLCHECK_COMM_TIMEOUT", bad[i], 1);
    comms[0] = comms[1] = NULL;
    assert_int_equal(dl_comm_local_create(2, comms), DL_ERR_INVALID);
    assert_non_null(strstr(dl_last_error(), "DLCHECK_COMM_TIMEOUT"));
    assert_null(comms[0]);
  }
  unsetenv("DLCHECK_COMM_TIMEOUT");
}

static void test_format_ranks(void **state) {
  (void)state;
  int ranks[20];
  for (int i = 0; i < 20; i++) ranks[i] = i;
  char buf[256] = "";
  dl_comm_format_ranks(buf, sizeof buf, ranks, 0);
  assert_string_equal(buf, "none");
  buf[0] = '\0';
  dl_comm_format_ranks(buf, sizeof buf, ranks + 3, 1);
  assert_string_equal(buf, "rank 3");
  buf[0] = '\0';
  dl_comm_format_ranks(buf, sizeof buf, ranks, 20);
  assert_non_null(strstr(buf, "ranks 0, 1, 2, "));
  assert_non_null(strstr(buf, ", 15 and 4 more"));
  char tiny[12] = "";
  dl_comm_format_ranks(tiny, sizeof tiny, ranks, 20); /* truncated, not overrun */
  assert_int_equal(strlen(tiny), sizeof tiny - 1);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_allreduce_ordered_bitwise),
      cmocka_unit_test(test_data_is_order_sensitive),
      cmocka_unit_test(test_allreduce_native_within_bound),
      cmocka_unit_test(test_allreduce_arrival_order),
      cmocka_unit_test(test_allreduce_order_seed),
      cmocka_unit_test(test_allreduce_tree_order),
      cmocka_unit_test(test_seed_orders_alternate),
      cmocka_unit_test(test_broadcast_every_root),
      cmocka_unit_test(test_allgather),
      cmocka_unit_test(test_barrier),
      cmocka_unit_test(test_abort_wakes_waiters),
      cmocka_unit_test(test_timeout_names_missing_rank),
      cmocka_unit_test(test_check_consistent),
      cmocka_unit_test(test_reduce_diff),
      cmocka_unit_test(test_bad_arguments),
      cmocka_unit_test(test_defaults_and_world_of_one),
      cmocka_unit_test(test_timeout_from_environment),
      cmocka_unit_test(test_format_ranks),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
