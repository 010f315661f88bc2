/* The mpi comm backend. One executable, three ways to run:
 *
 *   mpirun -np 2|3|4 test_comm_mpi the collectives on every rank: ordered
 *       allreduce bitwise equal to a rank-order sum and to the local
 *       backend's, native within the float32 bound, broadcast, allgather,
 *       barrier, the consistency check, N2, the native-vs-ordered figure;
 *   test_comm_mpi                  (plain ctest) the fault tests, each of
 *       which starts `mpirun -np 3 test_comm_mpi fault-<kind>` and checks
 *       that the surviving ranks exit non-zero within the timeout with a
 *       message naming rank 1; then the world-of-one (singleton) cases;
 *   mpirun -np 3 test_comm_mpi fault-hang|fault-kill|fault-abort SECONDS
 *       the fault itself: rank 1 hangs, dies (SIGKILL) or aborts before the
 *       fourth allreduce, which waits at most SECONDS. */
#define _POSIX_C_SOURCE 200809L
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "comm/comm.h"

#ifdef DL_HAVE_COMM_MPI

/* ---- data ---- */

static uint32_t lcg(uint32_t *s) { return *s = *s * 1664525u + 1013904223u; }

/* Both signs, magnitudes about 2^-20 to 2^11: order-sensitive sums. */
static void fill_mixed(float *x, int64_t n, uint32_t seed) {
  for (int64_t i = 0; i < n; i++) {
    float u = (float)(lcg(&seed) >> 8) / 16777216.0f - 0.5f;
    x[i] = ldexpf(u, (int)((lcg(&seed) >> 27) % 25) - 12);
  }
}

static uint32_t seed_of(int rank, int64_t n) { return 7919u * (uint32_t)rank + (uint32_t)n; }

/* The rank-order float32 sum of every rank's data, regenerated here. */
static float *rank_order_sum(int world, int64_t n) {
  float *ref = calloc((size_t)n, sizeof *ref), *tmp = malloc((size_t)n * sizeof *tmp);
  assert_non_null(ref);
  assert_non_null(tmp);
  for (int r = 0; r < world; r++) {
    fill_mixed(tmp, n, seed_of(r, n));
    for (int64_t i = 0; i < n; i++) ref[i] += tmp[i];
  }
  free(tmp);
  return ref;
}

static uint64_t fnv1a(const void *p, size_t bytes) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < bytes; i++) h = (h ^ ((const unsigned char *)p)[i]) * 1099511628211ull;
  return h;
}

/* ---- under mpirun: the collectives ---- */

static dl_comm *g_comm;

static int open_comm(void **state) {
  (void)state;
  if (dl_comm_mpi_create(&g_comm)) {
    fprintf(stderr, "%s\n", dl_last_error());
    return -1;
  }
  /* A failed assert on one rank desynchronises the collectives: fail the
   * rest in 20 s rather than the default minute. */
  return dl_comm_set_timeout(g_comm, 20) ? -1 : 0;
}

static int close_comm(void **state) {
  (void)state;
  dl_comm_destroy(g_comm);
  return dl_comm_mpi_finalize() ? -1 : 0;
}

static void test_identity(void **state) {
  (void)state;
  assert_string_equal(dl_comm_backend(g_comm), "mpi");
  assert_int_equal(dl_comm_world(g_comm), atoi(getenv("OMPI_COMM_WORLD_SIZE")));
  assert_int_equal(dl_comm_rank(g_comm), atoi(getenv("OMPI_COMM_WORLD_RANK")));
}

/* Exact: bit for bit the rank-order sum, on every rank, including a
 * length over one 2^23-float segment. */
static void test_ordered_bitwise(void **state) {
  (void)state;
  int W = dl_comm_world(g_comm), me = dl_comm_rank(g_comm);
  const int64_t lengths[] = {1, 2, 7, 1001, (1 << 23) + 5};
  for (size_t li = 0; li < sizeof lengths / sizeof *lengths; li++) {
    int64_t n = lengths[li];
    float *buf = malloc((size_t)n * sizeof *buf), *ref = rank_order_sum(W, n);
    assert_non_null(buf);
    fill_mixed(buf, n, seed_of(me, n));
    assert_int_equal(dl_comm_allreduce_sum(g_comm, buf, n), DL_OK);
    assert_memory_equal(buf, ref, (size_t)n * sizeof *buf);
    free(buf);
    free(ref);
  }
}

typedef struct local_rank {
  dl_comm *c;
  float *buf;
  int64_t n;
  dl_status s;
} local_rank;

static void *local_main(void *p) {
  local_rank *r = p;
  r->s = dl_comm_allreduce_sum(r->c, r->buf, r->n);
  return NULL;
}

/* The same data through the local backend (W threads in this process):
 * the same bits as through MPI. */
static void test_ordered_equals_local_backend(void **state) {
  (void)state;
  enum { N = 4099 };
  int W = dl_comm_world(g_comm), me = dl_comm_rank(g_comm);
  if (W > 4) skip(); /* room for four local ranks below */
  float mpi[N], local[4][N];
  fill_mixed(mpi, N, seed_of(me, N));
  assert_int_equal(dl_comm_allreduce_sum(g_comm, mpi, N), DL_OK);
  dl_comm *comms[4];
  assert_int_equal(dl_comm_local_create(W, comms), DL_OK);
  local_rank lr[4];
  pthread_t th[4];
  for (int r = 0; r < W; r++) {
    fill_mixed(local[r], N, seed_of(r, N));
    lr[r] = (local_rank){comms[r], local[r], N, DL_OK};
    assert_int_equal(pthread_create(&th[r], NULL, local_main, &lr[r]), 0);
  }
  for (int r = 0; r < W; r++) pthread_join(th[r], NULL);
  for (int r = 0; r < W; r++) {
    assert_int_equal(lr[r].s, DL_OK);
    dl_comm_destroy(comms[r]);
  }
  assert_memory_equal(mpi, local[0], sizeof mpi);
}

/* Native (MPI_Allreduce): within (W-1) eps sum|x| of the exact sum (any
 * order of W-1 float32 additions), and the same bits on every rank. */
static void test_native_within_bound(void **state) {
  (void)state;
  int W = dl_comm_world(g_comm), me = dl_comm_rank(g_comm);
  const int64_t n = 1 << 18;
  float *buf = malloc(n * sizeof *buf), *tmp = malloc(n * sizeof *tmp);
  double *exact = calloc(n, sizeof *exact), *mag = calloc(n, sizeof *mag);
  assert_true(buf && tmp && exact && mag);
  for (int r = 0; r < W; r++) {
    fill_mixed(tmp, n, seed_of(r, n));
    for (int64_t i = 0; i < n; i++) {
      exact[i] += tmp[i];
      mag[i] += fabs((double)tmp[i]);
    }
  }
  fill_mixed(buf, n, seed_of(me, n));
  dl_comm_set_reduce_mode(g_comm, DL_REDUCE_NATIVE);
  dl_status s = dl_comm_allreduce_sum(g_comm, buf, n);
  dl_comm_set_reduce_mode(g_comm, DL_REDUCE_ORDERED);
  assert_int_equal(s, DL_OK);
  for (int64_t i = 0; i < n; i++)
    assert_true(fabs((double)buf[i] - exact[i]) <= (W - 1) * FLT_EPSILON * mag[i]);
  assert_int_equal(dl_comm_check_consistent(g_comm, fnv1a(buf, n * sizeof *buf), "native sum"),
                   DL_OK);
  free(buf);
  free(tmp);
  free(exact);
  free(mag);
}

/* N2: the order follows the clock, yet every rank gets the same bits. */
static void test_arrival_order(void **state) {
  (void)state;
  int me = dl_comm_rank(g_comm);
  float buf[999];
  fill_mixed(buf, 999, seed_of(me, 999));
  dl_comm_set_arrival_order(g_comm, true);
  dl_status s = dl_comm_allreduce_sum(g_comm, buf, 999);
  dl_comm_set_arrival_order(g_comm, false);
  assert_int_equal(s, DL_OK);
  assert_int_equal(dl_comm_check_consistent(g_comm, fnv1a(buf, sizeof buf), "N2 sum"), DL_OK);
}

static void test_broadcast(void **state) {
  (void)state;
  int W = dl_comm_world(g_comm), me = dl_comm_rank(g_comm);
  unsigned char buf[1000];
  for (int root = 0; root < W; root++) {
    memset(buf, 10 + me, sizeof buf);
    assert_int_equal(dl_comm_broadcast(g_comm, buf, sizeof buf, root), DL_OK);
    for (size_t i = 0; i < sizeof buf; i++) assert_int_equal(buf[i], 10 + root);
  }
}

static void test_allgather(void **state) {
  (void)state;
  int W = dl_comm_world(g_comm), me = dl_comm_rank(g_comm);
  if (W > 4) skip(); /* room for four ranks below */
  int64_t send[2] = {100 + me, -me}, all[8] = {0};
  assert_int_equal(dl_comm_allgather(g_comm, send, all, sizeof send), DL_OK);
  for (int r = 0; r < W; r++) {
    assert_int_equal(all[2 * r], 100 + r);
    assert_int_equal(all[2 * r + 1], -r);
  }
  /* In place: this rank's part already sits in the receive buffer. */
  int64_t inplace[8] = {0};
  inplace[2 * me] = 7 * me;
  inplace[2 * me + 1] = 8;
  assert_int_equal(dl_comm_allgather(g_comm, &inplace[2 * me], inplace, 2 * sizeof(int64_t)),
                   DL_OK);
  for (int r = 0; r < W; r++) assert_true(inplace[2 * r] == 7 * r && inplace[2 * r + 1] == 8);
}

/* Rank r arrives 40 r ms late: nobody leaves before the last arrives. */
static void test_barrier(void **state) {
  (void)state;
  int W = dl_comm_world(g_comm), me = dl_comm_rank(g_comm);
  assert_int_equal(dl_comm_barrier(g_comm), DL_OK);
  struct timespec t0, t1, nap = {0, 40000000L * me};
  clock_gettime(CLOCK_MONOTONIC, &t0);
  nanosleep(&nap, NULL);
  assert_int_equal(dl_comm_barrier(g_comm), DL_OK);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double waited = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
  assert_true(waited >= 0.040 * (W - 1) - 0.010); /* 10 ms: the first barrier's skew */
}

static void test_consistency(void **state) {
  (void)state;
  int me = dl_comm_rank(g_comm);
  assert_int_equal(dl_comm_check_consistent(g_comm, 0x5eedu, "scenario hash"), DL_OK);
  dl_status s = dl_comm_check_consistent(g_comm, me == 1 ? 2 : 1, "binary version");
  assert_int_equal(s, DL_ERR_INVALID);
  assert_non_null(strstr(dl_last_error(), "binary version differs between ranks"));
  assert_non_null(strstr(dl_last_error(), "0x0000000000000002 on rank 1"));
}

/* The collective reproducibility figure: the same on every rank, and
 * within the float32 bound where native and ordered differ. */
static void test_reduce_diff(void **state) {
  (void)state;
  int W = dl_comm_world(g_comm), me = dl_comm_rank(g_comm);
  const int64_t n = 1 << 16;
  float *buf = malloc(n * sizeof *buf);
  assert_non_null(buf);
  fill_mixed(buf, n, seed_of(me, n));
  dl_reduce_diff d;
  assert_int_equal(dl_comm_reduce_diff(g_comm, buf, n, &d), DL_OK);
  assert_int_equal(d.n, n);
  assert_true(d.ndiff >= 0 && d.ndiff <= n);
  assert_true(d.max_abs <= (W - 1) * FLT_EPSILON * W * 2048.0);
  assert_true(d.ndiff > 0 ? d.max_ulp >= 1 : d.max_ulp == 0);
  assert_int_equal(dl_comm_check_consistent(g_comm, fnv1a(&d, sizeof d), "reduce_diff"), DL_OK);
  if (me == 0)
    printf("native vs ordered, %d ranks, %lld floats: %lld differ, max abs %.3g, max rel %.3g, "
           "max %lld ulp\n",
           W, (long long)n, (long long)d.ndiff, d.max_abs, d.max_rel, (long long)d.max_ulp);
  free(buf);
}

/* Over MPI's int count: refused on every rank before any data moves. */
static void test_allgather_too_large(void **state) {
  (void)state;
  char one = 0;
  dl_status s = dl_comm_allgather(g_comm, &one, &one, (size_t)INT_MAX + 1);
  assert_int_equal(s, DL_ERR_UNSUPPORTED);
  assert_non_null(strstr(dl_last_error(), "gather in pieces"));
  assert_int_equal(dl_comm_barrier(g_comm), DL_OK); /* still usable */
}

static int run_collectives(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_identity),
      cmocka_unit_test(test_ordered_bitwise),
      cmocka_unit_test(test_ordered_equals_local_backend),
      cmocka_unit_test(test_native_within_bound),
      cmocka_unit_test(test_arrival_order),
      cmocka_unit_test(test_broadcast),
      cmocka_unit_test(test_allgather),
      cmocka_unit_test(test_barrier),
      cmocka_unit_test(test_consistency),
      cmocka_unit_test(test_reduce_diff),
      cmocka_unit_test(test_allgather_too_large),
  };
  return cmocka_run_group_tests_name("comm_mpi collectives", tests, open_comm, close_comm);
}

/* ---- under mpirun: a fault ---- */

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Three good allreduces under the default timeout (start-up on a loaded
 * machine may be slow), then `timeout` seconds; rank 1 hangs, dies or
 * aborts, and the others report what their fourth allreduce said and exit
 * 1 (as a training program would), without MPI_Finalize. */
static int run_fault(const char *kind, double timeout) {
  dl_comm *c;
  if (dl_comm_mpi_create(&c)) {
    fprintf(stderr, "%s\n", dl_last_error());
    return 2;
  }
  int me = dl_comm_rank(c);
  float x[16] = {0};
  for (int step = 0; step < 3; step++)
    if (dl_comm_allreduce_sum(c, x, 16)) {
      fprintf(stderr, "rank %d: step %d: %s\n", me, step, dl_last_error());
      return 2;
    }
  if (dl_comm_set_timeout(c, timeout)) {
    fprintf(stderr, "%s\n", dl_last_error());
    return 2;
  }
  if (me == 1) {
    fflush(NULL);
    if (strcmp(kind, "fault-kill") == 0) raise(SIGKILL);
    if (strcmp(kind, "fault-abort") == 0) {
      dl_comm_abort(c);
      fprintf(stderr, "rank 1: aborted on purpose\n");
    }
    sleep(120); /* hangs; mpirun ends it when the others exit */
    return 0;
  }
  double t0 = now_s();
  dl_status s = dl_comm_allreduce_sum(c, x, 16);
  fprintf(stderr, "rank %d: FAULT after %.1f s: %s\n", me, now_s() - t0,
          s ? dl_last_error() : "none: the allreduce succeeded");
  s = dl_comm_barrier(c);
  fprintf(stderr, "rank %d: next collective: %s\n", me, s ? dl_last_error() : "succeeded");
  dl_comm_destroy(c);
  s = dl_comm_mpi_finalize();
  fprintf(stderr, "rank %d: finalize: %s\n", me, s ? dl_last_error() : "done");
  fprintf(stderr, "rank %d exits with status 1\n", me);
  return 1;
}

/* ---- plain run: drive the faults ---- */

typedef struct child_run {
  int status;     /* waitpid status */
  double seconds; /* until mpirun ended */
  char out[65536];
} child_run;

/* Runs argv with stdout and stderr into r->out, killing its process group
 * if it outlives `limit` seconds. */
static void run_child(char *const argv[], double limit, child_run *r) {
  int fd[2];
  assert_int_equal(pipe(fd), 0);
  double t0 = now_s();
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    setpgid(0, 0);
    dup2(fd[1], 1);
    dup2(fd[1], 2);
    close(fd[0]);
    execvp(argv[0], argv);
    _exit(127);
  }
  close(fd[1]);
  size_t len = 0;
  for (;;) {
    struct timespec nap = {0, 20000000L};
    ssize_t got = read(fd[0], r->out + len, sizeof r->out - 1 - len);
    if (got > 0) len += (size_t)got;
    if (got == 0 || len == sizeof r->out - 1) break;
    if (now_s() - t0 > limit) {
      kill(-pid, SIGKILL);
      break;
    }
    if (got < 0) nanosleep(&nap, NULL);
  }
  r->out[len] = '\0';
  close(fd[0]);
  waitpid(pid, &r->status, 0);
  r->seconds = now_s() - t0;
}

static void run_fault_job(const char *kind, const char *timeout, bool recovery, child_run *r) {
  char self[4096];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  assert_true(n > 0);
  self[n] = '\0';
  char *argv[] = {DL_MPIEXEC,
                  "--allow-run-as-root",
                  "--oversubscribe",
                  "-np",
                  "3",
                  recovery ? "--enable-recovery" : "--oversubscribe",
                  self,
                  (char *)kind,
                  (char *)timeout,
                  NULL};
  run_child(argv, 90, r);
  printf("---- mpirun -np 3 %s%s: status %d, %.1f s ----\n%s\n", kind,
         recovery ? " --enable-recovery" : "", r->status, r->seconds, r->out);
}

static bool exited_nonzero(int status) {
  return WIFSIGNALED(status) || (WIFEXITED(status) && WEXITSTATUS(status) != 0);
}

/* How long rank `rank`'s fourth allreduce took to fail, from its report. */
static double fault_seconds(const child_run *r, int rank) {
  char key[64];
  snprintf(key, sizeof key, "rank %d: FAULT after ", rank);
  const char *at = strstr(r->out, key);
  assert_non_null(at);
  return strtod(at + strlen(key), NULL);
}

/* Rank 1 hangs: ranks 0 and 2 time out after 1 s, name it, exit 1. */
static void test_fault_hang(void **state) {
  (void)state;
  static child_run r;
  run_fault_job("fault-hang", "1", false, &r);
  assert_true(exited_nonzero(r.status));
  assert_true(r.seconds < 80);
  for (int rank = 0; rank <= 2; rank += 2)
    assert_true(fault_seconds(&r, rank) >= 0.95 && fault_seconds(&r, rank) < 10);
  assert_non_null(strstr(r.out, "timed out after 1 s"));
  assert_non_null(strstr(r.out, "missing: rank 1"));
  assert_non_null(strstr(r.out, "reached it: ranks 0, 2"));
  assert_non_null(strstr(r.out, "this communicator failed earlier"));
  assert_non_null(strstr(r.out, "MPI not finalised"));
  assert_non_null(strstr(r.out, "rank 0 exits with status 1"));
  assert_non_null(strstr(r.out, "rank 2 exits with status 1"));
}

/* Rank 1 aborts: the others fail at once (not after the 30 s timeout). */
static void test_fault_abort(void **state) {
  (void)state;
  static child_run r;
  run_fault_job("fault-abort", "30", false, &r);
  assert_true(exited_nonzero(r.status));
  assert_true(fault_seconds(&r, 0) < 10 && fault_seconds(&r, 2) < 10);
  assert_non_null(strstr(r.out, "rank 1 failed (aborted)"));
  assert_non_null(strstr(r.out, "rank 2 exits with status 1"));
}

/* Rank 1 dies (SIGKILL). Open MPI's mpirun notices and kills the job
 * itself, naming the rank: the job ends non-zero within seconds. */
static void test_fault_kill(void **state) {
  (void)state;
  static child_run r;
  run_fault_job("fault-kill", "30", false, &r);
  assert_true(exited_nonzero(r.status));
  assert_true(r.seconds < 30);             /* before the others' timeout ... */
  assert_null(strstr(r.out, "timed out")); /* ... which never fired */
  assert_non_null(strstr(r.out, "rank 1"));
  assert_non_null(strstr(r.out, "signal 9"));
}

/* Under --enable-recovery mpirun keeps the job running after the death
 * (and then reports status 0): the timeout names the dead rank, and the
 * others exit 1. */
static void test_fault_kill_with_recovery(void **state) {
  (void)state;
  static child_run r;
  run_fault_job("fault-kill", "1", true, &r);
  assert_true(r.seconds < 80);
  assert_true(fault_seconds(&r, 0) < 10);
  assert_non_null(strstr(r.out, "missing: rank 1"));
  assert_non_null(strstr(r.out, "rank 0 exits with status 1"));
  assert_non_null(strstr(r.out, "rank 2 exits with status 1"));
}

/* Singleton MPI (no mpirun): world of one; handles come and go; finalize
 * once; no handle after it. Runs last: it initialises MPI in this process. */
static void test_singleton(void **state) {
  (void)state;
  dl_comm *a, *b;
  assert_int_equal(dl_comm_mpi_create(&a), DL_OK);
  assert_int_equal(dl_comm_world(a), 1);
  assert_int_equal(dl_comm_rank(a), 0);
  float x[2] = {1.5f, -2};
  assert_int_equal(dl_comm_allreduce_sum(a, x, 2), DL_OK);
  assert_true(x[0] == 1.5f && x[1] == -2);
  assert_int_equal(dl_comm_check_consistent(a, 9, "hash"), DL_OK);
  dl_comm_destroy(a);
  assert_int_equal(dl_comm_mpi_create(&b), DL_OK);
  assert_int_equal(dl_comm_mpi_finalize(), DL_ERR_INVALID); /* b still open */
  assert_non_null(strstr(dl_last_error(), "destroy them first"));
  dl_comm_destroy(b);
  assert_int_equal(dl_comm_mpi_create(NULL), DL_ERR_INVALID);
  assert_int_equal(dl_comm_mpi_finalize(), DL_OK);
  assert_int_equal(dl_comm_mpi_finalize(), DL_OK); /* already done: no-op */
  assert_int_equal(dl_comm_mpi_create(&a), DL_ERR_INVALID);
  assert_non_null(strstr(dl_last_error(), "already finalised"));
}

static int run_driver(void) {
  setenv("OMPI_MCA_btl", "self,vader", 0);
  setenv("OMPI_MCA_plm_rsh_agent", "false", 0);
  setenv("OMPI_MCA_btl_vader_single_copy_mechanism", "none", 0);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_fault_hang), cmocka_unit_test(test_fault_abort),
      cmocka_unit_test(test_fault_kill), cmocka_unit_test(test_fault_kill_with_recovery),
      cmocka_unit_test(test_singleton),
  };
  return cmocka_run_group_tests_name("comm_mpi faults and singleton", tests, NULL, NULL);
}

int main(int argc, char **argv) {
  if (argc > 2 && strncmp(argv[1], "fault-", 6) == 0) return run_fault(argv[1], atof(argv[2]));
  if (getenv("OMPI_COMM_WORLD_SIZE")) return run_collectives();
  return run_driver();
}

#else /* no MPI in this build */

static void test_mpi_not_built(void **state) {
  (void)state;
  skip(); /* dlcomm_mpi is built only when CMake finds MPI */
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_mpi_not_built)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}

#endif
