/* The thread pool (engine/core/threads.c): every index exactly once in chunks of
 * at least `grain`, for many n / grain / thread counts; real parallelism;
 * jobs while workers poll and after they sleep; concurrent and nested
 * calls; shutdown and restart; fork; the thread-count setting and its
 * environment default. */
#define _POSIX_C_SOURCE 200809L
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "core/threads.h"

/* ---- a recording range function ---- */

enum { MAX_N = 20000, MAX_CHUNKS = 4096 };

typedef struct record {
  int64_t n, grain;
  atomic_int hits[MAX_N];
  atomic_int chunks;
  atomic_llong smallest_chunk;
  atomic_int calls_in_flight, most_in_flight;
  int sleep_ms; /* per chunk, to let workers join */
  bool nested;  /* call dl_parallel_for again from inside */
} record;

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

/* A nested call marks hits[n + offset + i]: the second half of hits. */
typedef struct nested_ctx {
  record *r;
  int64_t offset;
} nested_ctx;

static void mark_nested(void *ctx, int64_t begin, int64_t end) {
  nested_ctx *c = ctx;
  for (int64_t i = begin; i < end; i++) atomic_fetch_add(&c->r->hits[c->r->n + c->offset + i], 1);
}

static void mark_range(void *ctx, int64_t begin, int64_t end) {
  record *r = ctx;
  int now = atomic_fetch_add(&r->calls_in_flight, 1) + 1;
  int most = atomic_load(&r->most_in_flight);
  while (now > most && !atomic_compare_exchange_weak(&r->most_in_flight, &most, now)) {
  }
  atomic_fetch_add(&r->chunks, 1);
  long long len = end - begin, small = atomic_load(&r->smallest_chunk);
  while (len < small && !atomic_compare_exchange_weak(&r->smallest_chunk, &small, len)) {
  }
  for (int64_t i = begin; i < end; i++) atomic_fetch_add(&r->hits[i], 1);
  if (r->sleep_ms) sleep_ms(r->sleep_ms);
  /* A nested call finds the pool busy and runs inline. */
  if (r->nested) {
    nested_ctx c = {r, begin};
    dl_parallel_for(end - begin, 1, mark_nested, &c);
  }
  atomic_fetch_sub(&r->calls_in_flight, 1);
}

static record *new_record(int64_t n, int64_t grain) {
  record *r = calloc(1, sizeof *r);
  assert_non_null(r);
  r->n = n;
  r->grain = grain;
  atomic_store(&r->smallest_chunk, (long long)MAX_N + 1);
  return r;
}

static void assert_each_index_once(record *r, int64_t n) {
  for (int64_t i = 0; i < n; i++)
    if (atomic_load(&r->hits[i]) != 1)
      fail_msg("n=%lld grain=%lld: index %lld ran %d times", (long long)r->n, (long long)r->grain,
               (long long)i, atomic_load(&r->hits[i]));
  for (int64_t i = n; i < MAX_N; i++) assert_int_equal(atomic_load(&r->hits[i]), 0);
}

static int teardown(void **state) {
  (void)state;
  assert_int_equal(dl_set_num_threads(1), DL_OK);
  dl_threads_shutdown();
  return 0;
}

/* ---- tests ---- */

/* Runs first, before anything reads the thread count: the default comes
 * from DL_NUM_THREADS. Values that are not a count in 1..1024 give 1,
 * checked in child processes (the default is read once per process). */
static int default_in_child(const char *value) {
  pid_t pid = fork();
  if (pid == 0) {
    if (value) setenv("DL_NUM_THREADS", value, 1);
    else unsetenv("DL_NUM_THREADS");
    _exit(dl_get_num_threads());
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static void default_comes_from_environment(void **state) {
  (void)state;
  assert_int_equal(default_in_child("3"), 3);
  assert_int_equal(default_in_child(NULL), 1);
  assert_int_equal(default_in_child(""), 1);
  assert_int_equal(default_in_child("0"), 1);
  assert_int_equal(default_in_child("-2"), 1);
  assert_int_equal(default_in_child("4x"), 1);
  assert_int_equal(default_in_child("99999"), 1);
  assert_int_equal(default_in_child("99999999999999999999"), 1);
}

static void invalid_thread_counts_are_refused(void **state) {
  (void)state;
  assert_int_equal(dl_set_num_threads(2), DL_OK);
  const int bad[] = {0, -1, 1025, 1 << 30};
  for (int i = 0; i < 4; i++) {
    dl_clear_error();
    assert_int_equal(dl_set_num_threads(bad[i]), DL_ERR_INVALID);
    assert_non_null(strstr(dl_last_error(), "dl_set_num_threads"));
    assert_non_null(strstr(dl_last_error(), "use 1 to 1024"));
    assert_int_equal(dl_get_num_threads(), 2);
  }
  assert_int_equal(dl_set_num_threads(1024), DL_OK);
  assert_int_equal(dl_get_num_threads(), 1024);
}

static void every_index_exactly_once(void **state) {
  (void)state;
  const int threads[] = {1, 2, 3, 5};
  const int64_t ns[] = {0, 1, 2, 7, 100, 1000, 12345};
  const int64_t grains[] = {-4, 0, 1, 3, 64, 5000};
  for (int t = 0; t < 4; t++) {
    assert_int_equal(dl_set_num_threads(threads[t]), DL_OK);
    for (int ni = 0; ni < 7; ni++)
      for (int gi = 0; gi < 6; gi++) {
        record *r = new_record(ns[ni], grains[gi]);
        dl_parallel_for(ns[ni], grains[gi], mark_range, r);
        assert_each_index_once(r, ns[ni]);
        int64_t grain = grains[gi] < 1 ? 1 : grains[gi];
        int64_t min_len = ns[ni] < grain ? ns[ni] : grain;
        if (ns[ni] > 0) assert_true(atomic_load(&r->smallest_chunk) >= min_len);
        else assert_int_equal(atomic_load(&r->chunks), 0);
        if (threads[t] == 1) assert_true(atomic_load(&r->chunks) <= 1);
        free(r);
      }
  }
}

/* Eight chunks that sleep chunk_ms each on 2 threads: every index once, and
 * at some moment two chunks at once (they cannot all run on the caller
 * before a worker joins). */
static void assert_two_threads_share(int chunk_ms) {
  assert_int_equal(dl_set_num_threads(2), DL_OK);
  record *r = new_record(8, 1);
  r->sleep_ms = chunk_ms;
  dl_parallel_for(8, 1, mark_range, r);
  assert_each_index_once(r, 8);
  assert_int_equal(atomic_load(&r->most_in_flight), 2);
  free(r);
}

static void chunks_run_in_parallel(void **state) {
  (void)state;
  assert_two_threads_share(30);
}

/* Workers poll for the next job for a while, then sleep: a job right after
 * another (taken while polling) and one after a pause longer than the
 * polling (a worker woken from its sleep) both reach the worker. */
static void jobs_back_to_back_and_after_idle(void **state) {
  (void)state;
  for (int pause_ms = 0; pause_ms <= 20; pause_ms += 20)
    for (int job = 0; job < 2; job++) {
      assert_two_threads_share(10);
      sleep_ms(pause_ms);
    }
}

/* Each thread runs its own share of the chunks first, then takes chunks
 * from the shares of others: chunk 0 (the caller's first) waits for all
 * the others, so the worker must finish its own share and then take the
 * rest of the caller's, or chunk 0 times out. */
typedef struct steal_ctx {
  atomic_int others_done;
  atomic_bool waited_out;
} steal_ctx;

static void wait_for_the_others(void *ctx, int64_t begin, int64_t end) {
  steal_ctx *c = ctx;
  for (int64_t i = begin; i < end; i++) {
    if (i != 0) {
      atomic_fetch_add(&c->others_done, 1);
      continue;
    }
    for (int ms = 0; atomic_load(&c->others_done) < 7; ms++) {
      if (ms == 5000) {
        atomic_store(&c->waited_out, true);
        return;
      }
      sleep_ms(1);
    }
  }
}

static void a_busy_threads_share_is_taken(void **state) {
  (void)state;
  assert_int_equal(dl_set_num_threads(2), DL_OK);
  steal_ctx c = {0};
  dl_parallel_for(8, 1, wait_for_the_others, &c);
  assert_false(atomic_load(&c.waited_out));
  assert_int_equal(atomic_load(&c.others_done), 7);
}

/* Fewer threads after more: the extra workers must stay out. */
static void fewer_threads_after_more(void **state) {
  (void)state;
  assert_int_equal(dl_set_num_threads(4), DL_OK);
  record *r = new_record(16, 1);
  r->sleep_ms = 5;
  dl_parallel_for(16, 1, mark_range, r);
  assert_each_index_once(r, 16);
  free(r);
  assert_int_equal(dl_set_num_threads(2), DL_OK);
  r = new_record(16, 1);
  r->sleep_ms = 5;
  dl_parallel_for(16, 1, mark_range, r);
  assert_each_index_once(r, 16);
  assert_true(atomic_load(&r->most_in_flight) <= 2);
  free(r);
}

static void nested_calls_run_inline(void **state) {
  (void)state;
  assert_int_equal(dl_set_num_threads(3), DL_OK);
  record *r = new_record(5000, 10);
  r->nested = true;
  dl_parallel_for(5000, 10, mark_range, r);
  /* hits[0..n) from the outer call, hits[n..2n) from the nested ones */
  assert_each_index_once(r, 10000);
  free(r);
}

/* In-process data-parallel ranks call from their own threads at once. */
static void *hammer(void *arg) {
  record *r = arg;
  for (int rep = 0; rep < 200; rep++) {
    memset(r->hits, 0, sizeof r->hits);
    dl_parallel_for(r->n, 7, mark_range, r);
    for (int64_t i = 0; i < r->n; i++)
      if (atomic_load(&r->hits[i]) != 1) return (void *)1;
  }
  return NULL;
}

static void concurrent_callers(void **state) {
  (void)state;
  assert_int_equal(dl_set_num_threads(3), DL_OK);
  record *a = new_record(3001, 7), *b = new_record(1999, 7);
  pthread_t ta, tb;
  assert_int_equal(pthread_create(&ta, NULL, hammer, a), 0);
  assert_int_equal(pthread_create(&tb, NULL, hammer, b), 0);
  void *ra = (void *)1, *rb = (void *)1;
  pthread_join(ta, &ra);
  pthread_join(tb, &rb);
  assert_null(ra);
  assert_null(rb);
  free(a);
  free(b);
}

static void shutdown_then_restart(void **state) {
  (void)state;
  assert_int_equal(dl_set_num_threads(2), DL_OK);
  dl_threads_shutdown();
  dl_threads_shutdown(); /* twice is harmless */
  record *r = new_record(8, 1);
  r->sleep_ms = 20;
  dl_parallel_for(8, 1, mark_range, r);
  assert_each_index_once(r, 8);
  assert_int_equal(atomic_load(&r->most_in_flight), 2);
  free(r);
  dl_threads_shutdown();
}

/* A child forked after the pool started has none of its workers: it must
 * start its own (two chunks in flight at once), not count on the parent's. */
static void fork_child_gets_a_fresh_pool(void **state) {
  (void)state;
#if defined(__SANITIZE_THREAD__)
  skip(); /* ThreadSanitizer cannot start threads in a forked child */
#endif
  assert_int_equal(dl_set_num_threads(2), DL_OK);
  record *r = new_record(8, 1);
  r->sleep_ms = 5;
  dl_parallel_for(8, 1, mark_range, r);
  pid_t pid = fork();
  if (pid == 0) {
    memset(r->hits, 0, sizeof r->hits);
    atomic_store(&r->most_in_flight, 0);
    r->sleep_ms = 30;
    dl_parallel_for(8, 1, mark_range, r);
    for (int i = 0; i < 8; i++)
      if (atomic_load(&r->hits[i]) != 1) _exit(1);
    dl_threads_shutdown();
    _exit(atomic_load(&r->most_in_flight) == 2 ? 0 : 2);
  }
  int status = 1;
  waitpid(pid, &status, 0);
  assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  assert_each_index_once(r, 8);
  free(r);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(default_comes_from_environment),
      cmocka_unit_test_teardown(invalid_thread_counts_are_refused, teardown),
      cmocka_unit_test_teardown(every_index_exactly_once, teardown),
      cmocka_unit_test_teardown(chunks_run_in_parallel, teardown),
      cmocka_unit_test_teardown(jobs_back_to_back_and_after_idle, teardown),
      cmocka_unit_test_teardown(a_busy_threads_share_is_taken, teardown),
      cmocka_unit_test_teardown(fewer_threads_after_more, teardown),
      cmocka_unit_test_teardown(nested_calls_run_inline, teardown),
      cmocka_unit_test_teardown(concurrent_callers, teardown),
      cmocka_unit_test_teardown(shutdown_then_restart, teardown),
      cmocka_unit_test_teardown(fork_child_gets_a_fresh_pool, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
