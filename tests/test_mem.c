/* The allocator (engine/core/mem.c): accounting of live bytes only, the cache of
 * freed blocks (reuse, zeroing of reused blocks, trim, the cap), the
 * uninitialised variants, injected failures, and use from several threads.
 * All checks are exact: byte counts and pointer identity. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <pthread.h>
#include <string.h>
#include <cmocka.h>

#include "core/mem.h"
#include "core/tensor.h"

#include <stdbool.h>

static int trim_after(void **state) {
  (void)state;
  dl_mem_fail_after(0);
  dl_mem_trim();
  return 0;
}

static bool all_zero(const unsigned char *p, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (p[i]) return false;
  return true;
}

/* A freed block comes back for the next request of its size class, zeroed
 * again by dl_mem_alloc however it was left. */
static void freed_blocks_are_reused_and_rezeroed(void **state) {
  (void)state;
  dl_mem_trim();
  unsigned char *a = dl_mem_alloc(1000, "a");
  assert_non_null(a);
  assert_int_equal((uintptr_t)a % 64, 0);
  assert_true(all_zero(a, 1000));
  memset(a, 0xAB, 1000);
  dl_mem_free(a);
  assert_true(dl_mem_cached() >= 1000);
  unsigned char *b = dl_mem_alloc(1000, "b");
  assert_ptr_equal(a, b);
  assert_true(all_zero(b, 1000));
  assert_int_equal(dl_mem_cached(), 0);
  /* A size within the same eighth-of-a-power-of-two class also reuses it. */
  dl_mem_free(b);
  unsigned char *c = dl_mem_alloc(980, "c");
  assert_ptr_equal(a, c);
  dl_mem_free(c);
  /* A different class does not. */
  unsigned char *d = dl_mem_alloc(5000, "d");
  assert_ptr_not_equal(a, d);
  dl_mem_free(d);
}

/* memory_allocated semantics: cached bytes are not allocated. */
static void accounting_counts_live_bytes_only(void **state) {
  (void)state;
  dl_mem_trim();
  const int64_t base = dl_mem_current();
  dl_mem_reset_peak();
  void *a = dl_mem_alloc(3000, "a");
  void *b = dl_mem_alloc_uninit(5000, "b");
  assert_int_equal(dl_mem_current() - base, 8000);
  assert_int_equal(dl_mem_peak() - base, 8000);
  dl_mem_free(a);
  dl_mem_free(b);
  assert_int_equal(dl_mem_current(), base);
  assert_true(dl_mem_cached() >= 8000);
  /* Reusing a cached block counts the new size, not the block's. */
  dl_mem_reset_peak();
  void *c = dl_mem_alloc(2990, "c");
  assert_int_equal(dl_mem_current() - base, 2990);
  assert_int_equal(dl_mem_peak() - base, 2990);
  dl_mem_free(c);
  dl_mem_trim();
  assert_int_equal(dl_mem_cached(), 0);
  assert_int_equal(dl_mem_current(), base);
}

/* dl_tensor_alloc_uninit makes exactly one uninitialised allocation: the
 * next dl_mem_alloc is zeroed again, even after a refused shape. */
static void uninit_tensors_leave_later_allocations_zeroed(void **state) {
  (void)state;
  dl_mem_trim();
  dl_tensor t = {0};
  const int64_t shape[2] = {16, 16};
  assert_int_equal(dl_tensor_alloc_uninit(&t, DL_F32, 2, shape, "t"), DL_OK);
  assert_int_equal(t.numel, 256);
  memset(t.data, 0x5A, dl_tensor_bytes(&t));
  void *old = t.data;
  dl_tensor_free(&t);
  const int64_t bad[2] = {16, -1};
  assert_int_equal(dl_tensor_alloc_uninit(&t, DL_F32, 2, bad, "bad tensor"), DL_ERR_INVALID);
  assert_non_null(strstr(dl_last_error(), "bad tensor: dimension 1 is negative"));
  unsigned char *p = dl_mem_alloc(1024, "p");
  assert_ptr_equal(p, old);
  assert_true(all_zero(p, 1024));
  dl_mem_free(p);
  /* An uninitialised block may keep what it held: the point of it. */
  unsigned char *q = dl_mem_alloc_uninit(1024, "q");
  assert_ptr_equal(q, old);
  dl_mem_free(q);
}

/* An injected failure happens even when the cache could serve the size;
 * the counter ticks on uninitialised allocations too. */
static void injected_failures_and_too_large_requests(void **state) {
  (void)state;
  dl_mem_free(dl_mem_alloc(256, "warm"));
  dl_mem_fail_after(2);
  void *a = dl_mem_alloc_uninit(256, "first");
  assert_non_null(a);
  assert_null(dl_mem_alloc(256, "second tensor"));
  assert_non_null(strstr(dl_last_error(), "256 bytes for second tensor (injected)"));
  void *c = dl_mem_alloc(256, "third");
  assert_non_null(c);
  dl_mem_free(a);
  dl_mem_free(c);
  assert_null(dl_mem_alloc(SIZE_MAX / 2, "huge"));
  assert_non_null(strstr(dl_last_error(), "for huge is too large"));
#if !defined(__SANITIZE_ADDRESS__) /* ASan aborts on a failed malloc */
  /* Within the size limit but more than any address space: the system
   * refuses (after the cache is trimmed) and the caller hears of it. */
  dl_mem_free(dl_mem_alloc(512, "cached"));
  assert_null(dl_mem_alloc_uninit((size_t)1 << 61, "vast"));
  assert_non_null(
      strstr(dl_last_error(), "out of memory allocating 2305843009213693952 bytes for vast"));
  assert_int_equal(dl_mem_cached(), 0);
#endif
  dl_tensor t = {0};
  dl_mem_fail_after(1);
  assert_int_equal(dl_tensor_alloc_uninit(&t, DL_F32, 1, (const int64_t[]){4}, "t"), DL_ERR_NOMEM);
  assert_null(t.data);
}

/* Blocks that would take the cache past its cap (256 MiB) go back to the
 * system at once. Uninitialised, so that no page of it is touched. */
static void the_cache_is_capped(void **state) {
  (void)state;
  dl_mem_trim();
  const size_t big = (size_t)300 << 20;
  void *p = dl_mem_alloc_uninit(big, "big");
  assert_non_null(p);
  dl_mem_free(p);
  assert_int_equal(dl_mem_cached(), 0);
  void *small = dl_mem_alloc(64, "small");
  dl_mem_free(small);
  assert_int_equal(dl_mem_cached(), 128); /* 64 bytes and the header */
  dl_mem_trim();
  assert_int_equal(dl_mem_cached(), 0);
}

enum { THREADS = 4, ROUNDS = 300 };

/* Each thread allocates blocks of several classes, checks they are zeroed
 * and its own, dirties and frees them. */
static void *churn(void *arg) {
  const unsigned seed = (unsigned)(uintptr_t)arg;
  unsigned char *held[8] = {0};
  size_t sizes[8] = {0};
  bool ok = true;
  for (int r = 0; r < ROUNDS && ok; r++) {
    const int slot = (int)((seed * 7u + (unsigned)r * 13u) % 8u);
    if (held[slot]) {
      for (size_t i = 0; i < sizes[slot]; i++) ok &= held[slot][i] == (unsigned char)seed;
      dl_mem_free(held[slot]);
    }
    sizes[slot] = 64u + (size_t)((seed + (unsigned)r) % 5u) * 3000u;
    held[slot] = dl_mem_alloc(sizes[slot], "churn");
    if (!held[slot]) return (void *)1;
    ok &= all_zero(held[slot], sizes[slot]);
    memset(held[slot], (int)seed, sizes[slot]);
  }
  for (int s = 0; s < 8; s++) dl_mem_free(held[s]);
  return ok ? NULL : (void *)1;
}

static void threads_share_the_cache_safely(void **state) {
  (void)state;
  const int64_t base = dl_mem_current();
  pthread_t th[THREADS];
  for (int i = 0; i < THREADS; i++)
    assert_int_equal(pthread_create(&th[i], NULL, churn, (void *)(uintptr_t)(i + 1)), 0);
  for (int i = 0; i < THREADS; i++) {
    void *bad = NULL;
    assert_int_equal(pthread_join(th[i], &bad), 0);
    assert_null(bad);
  }
  assert_int_equal(dl_mem_current(), base);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_teardown(freed_blocks_are_reused_and_rezeroed, trim_after),
      cmocka_unit_test_teardown(accounting_counts_live_bytes_only, trim_after),
      cmocka_unit_test_teardown(uninit_tensors_leave_later_allocations_zeroed, trim_after),
      cmocka_unit_test_teardown(injected_failures_and_too_large_requests, trim_after),
      cmocka_unit_test_teardown(the_cache_is_capped, trim_after),
      cmocka_unit_test_teardown(threads_share_the_cache_safely, trim_after),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
