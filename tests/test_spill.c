/* A trace's per-step arrays (trace/spill.h): on the heap up to
 * DLC_SPILL_AFTER bytes, then in an unnamed mapped file whose written
 * chunks leave the process; the contents kept bit for bit across every
 * move, and a folder that cannot take the file an error naming it. Also
 * the trace's series and digests through it, copied and saved/loaded at a
 * length that spills. Exact comparisons throughout: nothing is computed. */
#define _POSIX_C_SOURCE 200809L

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "store/trace_io.h"
#include "trace/spill.h"
#include "trace/trace.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tmpdir.h"

/* The kB of file-backed memory the process has mapped in (RssFile). */
static long rss_file_kb(void) {
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  long kb = -1;
  while (f && fgets(line, sizeof line, f))
    if (sscanf(line, "RssFile: %ld kB", &kb) == 1) break;
  if (f) fclose(f);
  return kb;
}

static void fill(uint64_t *a, size_t from, size_t to) {
  for (size_t i = from; i < to; i++) a[i] = i * 0x9E3779B97F4A7C15ull;
}

static void expect_filled(const uint64_t *a, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (a[i] != i * 0x9E3779B97F4A7C15ull) fail_msg("item %zu changed", i);
}

static void test_heap_then_file_keeps_every_item(void **state) {
  (void)state;
  void *data = NULL;
  dlc_spill sp = {0};
  size_t n = 0, step = 100000; /* 0.8 MB at a time, past the heap's 1 MiB */
  for (int k = 0; k < 40; k++) {
    assert_int_equal(dlc_spill_grow(&data, &sp, (n + step) * 8, "test"), DL_OK);
    fill(data, n, n + step);
    n += step;
    dlc_spill_written(data, &sp, n * 8);
    if (n * 8 <= DLC_SPILL_AFTER) assert_false(sp.mapped);
  }
  assert_true(sp.mapped && sp.cap >= n * 8);
  expect_filled(data, n);
  dlc_spill_free(data, &sp);
  assert_false(sp.mapped);
  assert_int_equal(sp.cap, 0);
}

static void test_written_chunks_leave_the_process(void **state) {
  (void)state;
  void *data = NULL;
  dlc_spill sp = {0};
  size_t n = (64u << 20) / 8; /* 64 MiB */
  assert_int_equal(dlc_spill_grow(&data, &sp, n * 8, "test"), DL_OK);
  assert_true(sp.mapped);
  long before = rss_file_kb();
  fill(data, 0, n);
  long touched = rss_file_kb();
  dlc_spill_written(data, &sp, n * 8);
  long after = rss_file_kb();
  assert_true(before >= 0);
  print_message("RssFile %ld kB, %ld kB written, %ld kB after\n", before, touched, after);
  assert_true(touched - before >= 60 * 1024);                     /* all of it mapped in */
  assert_true(after - before <= 2 * DLC_SPILL_CHUNK / 1024 + 64); /* a chunk or two kept */
  expect_filled(data, n);                                         /* and read back from the file */
  dlc_spill_free(data, &sp);
}

static void test_copy_equals_the_source(void **state) {
  (void)state;
  size_t n = (12u << 20) / 8;
  uint64_t *src = malloc(n * 8);
  assert_non_null(src);
  fill(src, 0, n);
  void *data = NULL;
  dlc_spill sp = {0};
  assert_int_equal(dlc_spill_copy(&data, &sp, src, n * 8, "test"), DL_OK);
  assert_true(sp.mapped);
  assert_memory_equal(data, src, n * 8);
  dlc_spill_free(data, &sp);
  free(src);
}

static void test_a_folder_that_cannot_take_it_is_named(void **state) {
  (void)state;
  char *old = getenv("TMPDIR") ? strdup(getenv("TMPDIR")) : NULL;
  setenv("TMPDIR", "/nonexistent/dlcheck-spill", 1);
  void *data = NULL;
  dlc_spill sp = {0};
  assert_int_equal(dlc_spill_grow(&data, &sp, 1024, "series loss"), DL_OK); /* the heap */
  memset(data, 7, 1024);
  assert_int_equal(dlc_spill_grow(&data, &sp, DLC_SPILL_AFTER + 8, "series loss"), DL_ERR_IO);
  assert_non_null(strstr(dl_last_error(), "/nonexistent/dlcheck-spill"));
  assert_non_null(strstr(dl_last_error(), "series loss"));
  assert_false(sp.mapped); /* the array as it was */
  for (int i = 0; i < 1024; i++) assert_int_equal(((unsigned char *)data)[i], 7);
  dlc_spill_free(data, &sp);
  if (old) setenv("TMPDIR", old, 1);
  else unsetenv("TMPDIR");
  free(old);
}

/* A trace of a long run: 1.5 million steps of two series and two digests
 * (12 MB per series, 24 MB of digests: past the heap's share), copied,
 * saved and loaded. */
static void test_a_long_trace_copies_saves_and_loads_bit_for_bit(void **state) {
  (void)state;
  enum { STEPS = 1500000 };
  dlc_trace t, c, back;
  dlc_trace_init(&t, "long", "reference");
  dl_tensor a = {0}, b = {0};
  int64_t shape[1] = {1};
  assert_int_equal(dl_tensor_alloc(&a, DL_F32, 1, shape, "a"), DL_OK);
  assert_int_equal(dl_tensor_alloc(&b, DL_F32, 1, shape, "b"), DL_OK);
  const char *names[2] = {"param/a", "param/b"};
  const dl_tensor *tensors[2] = {&a, &b};
  for (int64_t s = 0; s < STEPS; s++) {
    assert_int_equal(dlc_trace_push(&t, "loss", 1.0 / (double)(s + 1)), DL_OK);
    assert_int_equal(dlc_trace_push(&t, "lr", (double)s), DL_OK);
    dl_f32(&a)[0] = (float)s, dl_f32(&b)[0] = -(float)s;
    assert_int_equal(dlc_trace_push_digests(&t, 2, names, tensors), DL_OK);
  }
  assert_true(t.series[0].spill.mapped && t.digest_spill.mapped);
  dlc_trace_init(&c, "", "");
  assert_int_equal(dlc_trace_copy(&c, &t), DL_OK);
  char path[DL_TMP_PATH_MAX + 32];
  assert_non_null(tmp_path_make(path, sizeof path, "dlc_spill_long.h5"));
  assert_int_equal(dlc_trace_save(path, &c, NULL), DL_OK);
  assert_int_equal(dlc_trace_load(path, &back, NULL), DL_OK);
  remove(path);
  for (int i = 0; i < 2; i++) {
    const dlc_series *x = &t.series[i], *y = dlc_trace_series(&back, x->name);
    assert_non_null(y);
    assert_int_equal(y->n, STEPS);
    assert_true(y->spill.mapped);
    assert_memory_equal(x->v, y->v, STEPS * sizeof *x->v);
    assert_memory_equal(x->v, dlc_trace_series(&c, x->name)->v, STEPS * sizeof *x->v);
  }
  assert_int_equal(back.digest_steps, t.digest_steps);
  assert_true(back.digest_spill.mapped);
  assert_memory_equal(back.digests, t.digests, (size_t)t.digest_steps * 2 * sizeof *t.digests);
  dlc_trace_free(&back);
  dlc_trace_free(&c);
  dlc_trace_free(&t);
  dl_tensor_free(&a);
  dl_tensor_free(&b);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_heap_then_file_keeps_every_item),
      cmocka_unit_test(test_written_chunks_leave_the_process),
      cmocka_unit_test(test_copy_equals_the_source),
      cmocka_unit_test(test_a_folder_that_cannot_take_it_is_named),
      cmocka_unit_test(test_a_long_trace_copies_saves_and_loads_bit_for_bit),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
