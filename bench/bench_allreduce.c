/* Allreduce bandwidth of the comm backends, as an nccl-tests style table:
 * for each size, the ordered (reproducible, rank-order) and native modes
 * side by side: time per in-place float32 sum, algbw = bytes / time, busbw
 * = algbw * 2(n-1)/n (the bytes each rank must move in an optimal ring,
 * comparable across world sizes), and #wrong, the elements that differ
 * from the exact sum (rank r holds small integers, so the sum is exact in
 * any order). Then the collective reproducibility figure: how far native
 * is from ordered on mixed-magnitude data. Exits 1 if any element is wrong.
 *
 *   bench_allreduce [--threads W] [--max-bytes B]    local backend, W threads
 *   mpirun -np N bench_allreduce [--max-bytes B]     mpi backend (needs
 *                                                    dlcomm_mpi linked)
 *   bench_allreduce --comm nccl                      every visible GPU, one
 *                                                    thread each (host buffers,
 *                                                    staged through the GPU) */
#define _POSIX_C_SOURCE 200809L
#include "comm/comm.h"

#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { MAX_SIZES = 32, MAX_THREADS = 64, DIFF_N = 1 << 20 };

typedef struct row {
  size_t bytes;
  int iters;
  double us[2];     /* per allreduce, slowest rank; [0] ordered, [1] native */
  int64_t wrong[2]; /* summed over ranks */
} row;

typedef struct bench {
  size_t sizes[MAX_SIZES];
  int nsizes;
  row rows[MAX_SIZES];
  dl_reduce_diff diff;
} bench;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Integers in -8..8: any sum over at most 2^20 ranks is exact in float32. */
static float small_int(int64_t i, int rank) { return (float)((i * 7 + rank * 13) % 17 - 8); }

static int64_t count_wrong(const float *buf, int64_t n, int world) {
  int64_t wrong = 0;
  for (int64_t i = 0; i < n; i++) {
    float expect = 0.0f;
    for (int r = 0; r < world; r++) expect += small_int(i, r);
    wrong += buf[i] != expect;
  }
  return wrong;
}

/* Slowest rank's time and total wrong elements, on every rank. */
static dl_status combine(dl_comm *c, double *us, int64_t *wrong) {
  int W = dl_comm_world(c);
  typedef struct part {
    double us;
    int64_t wrong;
  } part;
  part mine = {*us, *wrong}, *all = malloc((size_t)W * sizeof mine);
  if (!all) return dl_fail(DL_ERR_NOMEM, "bench: out of memory");
  dl_status s = dl_comm_allgather(c, &mine, all, sizeof mine);
  if (!s) {
    *us = 0;
    *wrong = 0;
  }
  for (int r = 0; !s && r < W; r++) {
    if (all[r].us > *us) *us = all[r].us;
    *wrong += all[r].wrong;
  }
  free(all);
  return s;
}

/* One size in one mode: a checked allreduce of fresh data, then `iters`
 * timed ones (the buffer keeps growing by W each time; only speed counts
 * there). */
static dl_status measure(dl_comm *c, float *buf, row *rw, int mode) {
  int64_t n = (int64_t)(rw->bytes / sizeof(float));
  int rank = dl_comm_rank(c);
  dl_comm_set_reduce_mode(c, mode ? DL_REDUCE_NATIVE : DL_REDUCE_ORDERED);
  for (int64_t i = 0; i < n; i++) buf[i] = small_int(i, rank);
  DL_TRY(dl_comm_allreduce_sum(c, buf, n));
  int64_t wrong = count_wrong(buf, n, dl_comm_world(c));
  DL_TRY(dl_comm_barrier(c));
  double t0 = now_s();
  for (int it = 0; it < rw->iters; it++) DL_TRY(dl_comm_allreduce_sum(c, buf, n));
  double us = (now_s() - t0) / rw->iters * 1e6;
  DL_TRY(combine(c, &us, &wrong));
  rw->us[mode] = us;
  rw->wrong[mode] = wrong;
  return DL_OK;
}

static void fill_mixed(float *x, int64_t n, uint32_t seed) {
  for (int64_t i = 0; i < n; i++) {
    seed = seed * 1664525u + 1013904223u;
    float u = (float)(seed >> 8) / 16777216.0f - 0.5f;
    seed = seed * 1664525u + 1013904223u;
    x[i] = ldexpf(u, (int)((seed >> 27) % 25) - 12);
  }
}

/* Every rank runs this; rank 0's rows are the ones printed. */
static dl_status bench_rank(dl_comm *c, bench *b) {
  size_t most = b->sizes[b->nsizes - 1];
  float *buf = malloc(most > DIFF_N * sizeof(float) ? most : DIFF_N * sizeof(float));
  if (!buf) return dl_fail(DL_ERR_NOMEM, "bench: out of memory for %zu bytes", most);
  dl_status s = DL_OK;
  for (int k = 0; !s && k < b->nsizes; k++) {
    row rw = {.bytes = b->sizes[k]};
    double target = 1 << 26; /* bytes per size: enough to time, little on 2 cores */
    rw.iters = (int)fmax(3, fmin(100, target / (double)rw.bytes));
    for (int mode = 0; !s && mode < 2; mode++) s = measure(c, buf, &rw, mode);
    if (!s && dl_comm_rank(c) == 0) b->rows[k] = rw;
  }
  dl_reduce_diff d;
  if (!s) fill_mixed(buf, DIFF_N, 31u + 7u * (uint32_t)dl_comm_rank(c));
  if (!s) s = dl_comm_reduce_diff(c, buf, DIFF_N, &d);
  if (!s && dl_comm_rank(c) == 0) b->diff = d;
  dl_comm_set_reduce_mode(c, DL_REDUCE_ORDERED);
  free(buf);
  return s;
}

static int print_table(const bench *b, const char *backend, int world, const char *how) {
  printf("# bench_allreduce: %s backend, %d ranks (%s), in-place float32 sum\n", backend, world,
         how);
  printf("# busbw = algbw * 2(n-1)/n; #wrong: elements differing from the exact sum\n#\n");
  printf("#%30s  %-33s  %-33s\n", "", "------------ ordered ------------",
         "------------ native -------------");
  printf("# %11s %11s %5s  %10s %7s %7s %6s  %10s %7s %7s %6s\n", "size(B)", "count", "iters",
         "time(us)", "algbw", "busbw", "#wrong", "time(us)", "algbw", "busbw", "#wrong");
  int64_t wrong = 0;
  for (int k = 0; k < b->nsizes; k++) {
    const row *rw = &b->rows[k];
    printf("  %11zu %11zu %5d", rw->bytes, rw->bytes / sizeof(float), rw->iters);
    for (int m = 0; m < 2; m++) {
      double algbw = (double)rw->bytes / (rw->us[m] * 1e-6) / 1e9;
      printf("  %10.1f %7.3f %7.3f %6" PRId64, rw->us[m], algbw, algbw * 2.0 * (world - 1) / world,
             rw->wrong[m]);
      wrong += rw->wrong[m];
    }
    printf("\n");
  }
  const dl_reduce_diff *d = &b->diff;
  printf("# native vs ordered on %" PRId64 " mixed-magnitude floats: %" PRId64 " differ, max abs "
         "%.3g, max rel %.3g, max %" PRId64 " ulp\n",
         d->n, d->ndiff, d->max_abs, d->max_rel, d->max_ulp);
  printf("# %s\n", wrong ? "WRONG RESULTS" : "all results exact");
  return wrong ? 1 : 0;
}

/* ---- ranks as threads (local, nccl) ---- */

typedef struct thread_job {
  dl_comm *c;
  bench *b;
  dl_status s;
  char msg[512];
} thread_job;

static void *thread_main(void *p) {
  thread_job *j = p;
  j->s = bench_rank(j->c, j->b);
  if (j->s) {
    snprintf(j->msg, sizeof j->msg, "%s", dl_last_error());
    dl_comm_abort(j->c);
  }
  return NULL;
}

static int run_threads(dl_comm **comms, int W, bench *b, const char *how) {
  thread_job jobs[MAX_THREADS];
  pthread_t th[MAX_THREADS];
  int started = 0;
  for (; started < W; started++) {
    jobs[started] = (thread_job){.c = comms[started], .b = b};
    if (pthread_create(&th[started], NULL, thread_main, &jobs[started]) != 0) break;
  }
  if (started < W) dl_comm_abort(comms[0]);
  for (int r = 0; r < started; r++) pthread_join(th[r], NULL);
  int rc = started < W ? 2 : 0;
  for (int r = 0; r < started; r++)
    if (jobs[r].s && !rc) {
      fprintf(stderr, "bench_allreduce: %s\n", jobs[r].msg);
      rc = 2;
    }
  if (!rc) rc = print_table(b, dl_comm_backend(comms[0]), W, how);
  for (int r = 0; r < W; r++) dl_comm_destroy(comms[r]);
  return rc;
}

static int run_local(int W, bench *b) {
  dl_comm *comms[MAX_THREADS];
  if (dl_comm_local_create(W, comms)) {
    fprintf(stderr, "bench_allreduce: %s\n", dl_last_error());
    return 2;
  }
  return run_threads(comms, W, b, "threads of one process");
}

#ifdef DL_HAVE_COMM_NCCL
static int run_nccl(int W, bench *b) {
  dl_comm *comms[MAX_THREADS];
  if (dl_comm_nccl_create_all(W, NULL, comms)) {
    fprintf(stderr, "bench_allreduce: %s\n", dl_last_error());
    return 2;
  }
  return run_threads(comms, W, b, "GPUs of one process, host buffers staged");
}
#endif

#ifdef DL_HAVE_COMM_MPI
static int run_mpi(bench *b) {
  dl_comm *c;
  if (dl_comm_mpi_create(&c)) {
    fprintf(stderr, "bench_allreduce: %s\n", dl_last_error());
    return 2;
  }
  int rc = 0;
  if (bench_rank(c, b)) {
    fprintf(stderr, "bench_allreduce: %s\n", dl_last_error());
    rc = 2;
  } else if (dl_comm_rank(c) == 0) {
    rc = print_table(b, "mpi", dl_comm_world(c), "processes");
  }
  dl_comm_destroy(c);
  if (dl_comm_mpi_finalize()) {
    fprintf(stderr, "bench_allreduce: %s\n", dl_last_error());
    rc = 2;
  }
  return rc;
}
#endif

static int usage(void) {
  fprintf(stderr,
          "usage: bench_allreduce [--comm local|mpi|nccl] [--threads W (ranks: local "
          "threads, default 2, or nccl GPUs, default 1; at most %d)] [--max-bytes B (8..2^30, "
          "default 64 MiB)]\n",
          MAX_THREADS);
  return 2;
}

int main(int argc, char **argv) {
  bool under_mpirun = getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMI_SIZE");
  const char *comm = under_mpirun ? "mpi" : "local";
  long threads = -1;
  double max_bytes = 64.0 * 1024 * 1024;
  for (int i = 1; i < argc; i++) {
    bool has_value = i + 1 < argc;
    if (has_value && strcmp(argv[i], "--comm") == 0) comm = argv[++i];
    else if (has_value && strcmp(argv[i], "--threads") == 0) threads = strtol(argv[++i], NULL, 10);
    else if (has_value && strcmp(argv[i], "--max-bytes") == 0) max_bytes = strtod(argv[++i], NULL);
    else return usage();
  }
  if (!(max_bytes >= 8 && max_bytes <= 1073741824.0) || threads == 0 || threads > MAX_THREADS)
    return usage();
  bench *b = calloc(1, sizeof *b);
  if (!b) return 2;
  size_t top = (size_t)max_bytes / sizeof(float) * sizeof(float);
  for (size_t s = 8; s <= top && b->nsizes < MAX_SIZES; s *= 4) b->sizes[b->nsizes++] = s;
  if (b->sizes[b->nsizes - 1] < top) b->sizes[b->nsizes++] = top;
  int rc = 2;
  if (strcmp(comm, "local") == 0) {
    rc = run_local(threads > 0 ? (int)threads : 2, b);
  } else if (strcmp(comm, "mpi") == 0) {
#ifdef DL_HAVE_COMM_MPI
    rc = run_mpi(b);
#else
    fprintf(stderr, "bench_allreduce: built without the mpi backend (link dlcomm_mpi)\n");
#endif
  } else if (strcmp(comm, "nccl") == 0) {
#ifdef DL_HAVE_COMM_NCCL
    rc = run_nccl(threads > 0 ? (int)threads : 1, b);
#else
    fprintf(stderr, "bench_allreduce: built without the nccl backend (link dlcomm_nccl)\n");
#endif
  } else {
    rc = usage();
  }
  free(b);
  return rc;
}
