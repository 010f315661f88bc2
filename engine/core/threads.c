/* The thread pool behind dl_parallel_for.
 *
 * One job runs at a time. The caller publishes it under the mutex, wakes the
 * workers and works on it too; chunks are claimed under the mutex. Thread t
 * (the caller is 0, worker w is w + 1) owns the t-th contiguous share of
 * the chunks and runs it front to back; with its share done, it takes the
 * last chunk of the share with the most left, so that a thread slowed by a
 * busy core does not hold the job up. Owning the same share job after job
 * keeps a row's data in the cache of the core that wrote it: a layer's
 * output, read by the next layer's job (with chunks taken in arrival order,
 * the small CNN's ReLU and max-pool forward at 2 threads took 2.5 times
 * their 1-thread share of samples). Which thread runs which chunk still
 * varies, which is harmless because fn computes each index independently
 * of the split (threads.h contract). A caller that finds the pool busy
 * (another thread's job, or a nested call from inside fn) runs its range
 * inline.
 *
 * Waiting polls before it sleeps. Waking a thread asleep on a condition
 * variable took 40-50 us on the 2-core VM this was measured on (an empty
 * 4-chunk job: 4 us of work took 7.3 us on 2 threads against 4 us on one,
 * 200 us took 155 us), longer than many of the engine's jobs, which come
 * back to back, one or more per layer. So an idle worker polls the job
 * generation, and a caller its job's finished count, for up to SPIN_NS
 * before sleeping on the condition variable, as OpenMP runtimes do. */
#define _POSIX_C_SOURCE 200809L
#include "core/threads.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <time.h>

/* More chunks than threads, so that a thread slowed down by another process
 * on its core does not hold everyone up; few enough that per-chunk setup
 * (gemm's packing buffers) stays cheap. */
enum { DL_MAX_THREADS = 1024, DL_CHUNKS_PER_THREAD = 4 };
static const int64_t SPIN_NS = 200 * 1000;

typedef struct pool_job {
  dl_range_fn fn;
  void *ctx;
  int64_t n, nchunks;
  int64_t unclaimed;    /* chunks no thread has taken; under the pool mutex */
  _Atomic int64_t done; /* chunks finished; written under the pool mutex */
  int helpers;          /* workers with id < helpers may join */
} pool_job;

typedef struct pool_worker {
  pthread_t tid;
  uint64_t start_generation; /* jobs up to this one predate the worker */
} pool_worker;

static struct {
  pthread_mutex_t mu;
  pthread_cond_t wake; /* workers: a new job, or stop */
  pthread_cond_t done; /* the caller: its job finished; shutdown: pool idle */
  bool in_use, stopping;
  _Atomic uint64_t generation; /* written under the mutex, polled without */
  pool_job *job;
  /* The job's unclaimed chunks of thread t's share: [share_next[t],
   * share_end[t]); under the mutex. */
  int64_t share_next[DL_MAX_THREADS], share_end[DL_MAX_THREADS];
  int n_workers;
  pool_worker workers[DL_MAX_THREADS];
} pool = {.mu = PTHREAD_MUTEX_INITIALIZER,
          .wake = PTHREAD_COND_INITIALIZER,
          .done = PTHREAD_COND_INITIALIZER};

static atomic_int num_threads;
static pthread_once_t num_threads_once = PTHREAD_ONCE_INIT;

/* ---- thread count ---- */

static int parse_thread_count(const char *s) {
  if (!s || !*s) return 0;
  char *end = NULL;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno || *end != '\0' || v < 1 || v > DL_MAX_THREADS) return 0;
  return (int)v;
}

static void read_env_thread_count(void) {
  int n = parse_thread_count(getenv("DL_NUM_THREADS"));
  atomic_store(&num_threads, n > 0 ? n : 1);
}

dl_status dl_set_num_threads(int n) {
  pthread_once(&num_threads_once, read_env_thread_count);
  if (n < 1 || n > DL_MAX_THREADS)
    return dl_fail(DL_ERR_INVALID, "dl_set_num_threads: %d threads requested; use 1 to %d", n,
                   DL_MAX_THREADS);
  atomic_store(&num_threads, n);
  return DL_OK;
}

int dl_get_num_threads(void) {
  pthread_once(&num_threads_once, read_env_thread_count);
  return atomic_load(&num_threads);
}

/* ---- waiting ---- */

static int64_t monotonic_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

/* Polls ready(arg) for at most SPIN_NS, without the mutex. */
static void spin_until(bool (*ready)(const void *), const void *arg) {
  const int64_t deadline = monotonic_ns() + SPIN_NS;
  for (;;) {
    for (int i = 0; i < 64; i++) {
      if (ready(arg)) return;
      cpu_relax();
    }
    if (monotonic_ns() >= deadline) return;
  }
}

static bool generation_moved(const void *seen) {
  return atomic_load_explicit(&pool.generation, memory_order_acquire) != *(const uint64_t *)seen;
}

static bool job_finished(const void *job) {
  const pool_job *j = job;
  return atomic_load_explicit(&j->done, memory_order_acquire) == j->nchunks;
}

/* ---- running a job ---- */

/* Chunk c of n split into nchunks near-equal contiguous pieces; each is at
 * least n / nchunks long, which the caller keeps >= grain. */
static int64_t chunk_begin(const pool_job *j, int64_t c) {
  int64_t q = j->n / j->nchunks, r = j->n % j->nchunks;
  return c * q + (c < r ? c : r);
}

/* With the mutex held: thread t's next chunk, from its own share, else the
 * last of the share with the most left; -1 when none is left. */
static int64_t claim_chunk(pool_job *j, int t) {
  if (j->unclaimed == 0) return -1;
  j->unclaimed--;
  if (pool.share_next[t] < pool.share_end[t]) return pool.share_next[t]++;
  int most = 0;
  for (int u = 1; u <= j->helpers; u++)
    if (pool.share_end[u] - pool.share_next[u] > pool.share_end[most] - pool.share_next[most])
      most = u;
  return --pool.share_end[most];
}

/* Called and returns with the mutex held, by thread t. A claimed job stays
 * alive while we run its chunk: the caller waits until every chunk is done. */
static void work_on_current_job(int t) {
  pool_job *j;
  int64_t c;
  while ((j = pool.job) != NULL && (c = claim_chunk(j, t)) >= 0) {
    int64_t begin = chunk_begin(j, c), end = chunk_begin(j, c + 1);
    pthread_mutex_unlock(&pool.mu);
    j->fn(j->ctx, begin, end);
    pthread_mutex_lock(&pool.mu);
    if (++j->done == j->nchunks) pthread_cond_broadcast(&pool.done);
  }
}

static void *worker_main(void *arg) {
  int id = (int)(intptr_t)arg;
  pthread_mutex_lock(&pool.mu);
  uint64_t seen = pool.workers[id].start_generation;
  for (;;) {
    if (!pool.stopping && pool.generation == seen) {
      pthread_mutex_unlock(&pool.mu);
      spin_until(generation_moved, &seen);
      pthread_mutex_lock(&pool.mu);
    }
    while (!pool.stopping && pool.generation == seen) pthread_cond_wait(&pool.wake, &pool.mu);
    if (pool.stopping) break;
    seen = pool.generation;
    if (pool.job && id < pool.job->helpers) work_on_current_job(id + 1);
  }
  pthread_mutex_unlock(&pool.mu);
  return NULL;
}

/* A forked child has none of the parent's workers and must not inherit a
 * mutex some worker held: take it around fork and start the child empty. */
static void before_fork(void) { pthread_mutex_lock(&pool.mu); }
static void after_fork_parent(void) { pthread_mutex_unlock(&pool.mu); }
static void after_fork_child(void) {
  pool.n_workers = 0;
  pool.in_use = pool.stopping = false;
  pool.job = NULL;
  pthread_cond_init(&pool.wake, NULL);
  pthread_cond_init(&pool.done, NULL);
  pthread_mutex_unlock(&pool.mu);
}

static pthread_once_t fork_handlers_once = PTHREAD_ONCE_INIT;
static void install_fork_handlers(void) {
  pthread_atfork(before_fork, after_fork_parent, after_fork_child);
}

/* With the mutex held. If a thread cannot be started, the job runs on the
 * workers that exist (at worst the caller alone): slower, same result. */
static void start_workers(int wanted) {
  pthread_once(&fork_handlers_once, install_fork_handlers);
  if (wanted > DL_MAX_THREADS - 1) wanted = DL_MAX_THREADS - 1;
  while (pool.n_workers < wanted) {
    int id = pool.n_workers;
    pool.workers[id].start_generation = pool.generation;
    if (pthread_create(&pool.workers[id].tid, NULL, worker_main, (void *)(intptr_t)id) != 0) return;
    pool.n_workers++;
  }
}

void dl_parallel_for(int64_t n, int64_t grain, dl_range_fn fn, void *ctx) {
  if (n <= 0) return;
  if (grain < 1) grain = 1;
  int threads = dl_get_num_threads();
  int64_t max_chunks = (int64_t)threads * DL_CHUNKS_PER_THREAD;
  int64_t nchunks = n / grain < max_chunks ? n / grain : max_chunks;
  if (threads == 1 || nchunks < 2) {
    fn(ctx, 0, n);
    return;
  }
  pthread_mutex_lock(&pool.mu);
  if (pool.in_use) {
    pthread_mutex_unlock(&pool.mu);
    fn(ctx, 0, n);
    return;
  }
  pool.in_use = true;
  start_workers(threads - 1);
  pool_job job = {.fn = fn,
                  .ctx = ctx,
                  .n = n,
                  .nchunks = nchunks,
                  .unclaimed = nchunks,
                  .helpers = threads - 1};
  for (int t = 0; t < threads; t++) {
    pool.share_next[t] = t * nchunks / threads;
    pool.share_end[t] = (t + 1) * nchunks / threads;
  }
  pool.job = &job;
  pool.generation++;
  pthread_cond_broadcast(&pool.wake);
  work_on_current_job(0);
  if (job.done < job.nchunks) {
    pthread_mutex_unlock(&pool.mu);
    spin_until(job_finished, &job);
    pthread_mutex_lock(&pool.mu);
  }
  while (job.done < job.nchunks) pthread_cond_wait(&pool.done, &pool.mu);
  pool.job = NULL;
  pool.in_use = false;
  pthread_cond_broadcast(&pool.done);
  pthread_mutex_unlock(&pool.mu);
}

void dl_threads_shutdown(void) {
  pthread_mutex_lock(&pool.mu);
  while (pool.in_use) pthread_cond_wait(&pool.done, &pool.mu);
  pool.in_use = true; /* concurrent callers run inline meanwhile */
  pool.stopping = true;
  pthread_cond_broadcast(&pool.wake);
  int n = pool.n_workers;
  pthread_mutex_unlock(&pool.mu);
  for (int i = 0; i < n; i++) pthread_join(pool.workers[i].tid, NULL);
  pthread_mutex_lock(&pool.mu);
  pool.n_workers = 0;
  pool.stopping = false;
  pool.in_use = false;
  pthread_cond_broadcast(&pool.done);
  pthread_mutex_unlock(&pool.mu);
}
