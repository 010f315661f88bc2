/* The Trace: series grow in order, metrics and notes replace by name,
 * finals are copies, digests are xxhash64 of the tensors' bytes with names
 * fixed by the first step, layer statistics are copied, and a deep copy
 * shares nothing with its source.
 *
 * Digests are checked against xxhash's published test vector and against
 * XXH64 called directly on the bytes; every other value is stored, not
 * computed, so comparisons are exact. */
#define _POSIX_C_SOURCE 200809L

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "core/mem.h"
#include "trace/trace.h"

#include <string.h>
#include <xxhash.h>

static void init_names_and_defaults(void **state) {
  (void)state;
  dlc_trace t;
  memset(&t, 0x5a, sizeof t);
  dlc_trace_init(&t, "ddp_equiv", "reference");
  assert_string_equal(t.scenario, "ddp_equiv");
  assert_string_equal(t.run, "reference");
  assert_string_equal(t.backend, "cpu");
  assert_true(t.seed == 0 && t.scenario_hash == 0);
  assert_int_equal(t.nseries + t.ndigest + t.nstats + t.nfinals + t.nmetrics + t.nnotes, 0);
  assert_null(t.series);
  dlc_trace_free(&t);
  dlc_trace_init(&t, NULL, NULL);
  assert_string_equal(t.run, "");
  /* names longer than DLC_NAME_MAX - 1 are cut there, always terminated */
  char long_name[300];
  memset(long_name, 'x', sizeof long_name - 1);
  long_name[sizeof long_name - 1] = '\0';
  dlc_trace_init(&t, long_name, "r");
  assert_int_equal(strlen(t.scenario), DLC_NAME_MAX - 1);
  dlc_trace_free(&t);
  dlc_trace_free(&t); /* safe on a freed trace */
  assert_string_equal(dlc_stat_names[DLC_STAT_MEAN], "mean");
  assert_string_equal(dlc_stat_names[DLC_STAT_NONFINITE], "nonfinite");
}

static void series_grow_in_order(void **state) {
  (void)state;
  dlc_trace t;
  dlc_trace_init(&t, "s", "r");
  assert_null(dlc_trace_series(&t, "loss"));
  for (int i = 0; i < 100; i++) {
    assert_int_equal(dlc_trace_push(&t, "loss", 1.0 / (i + 1)), DL_OK);
    if (i % 2 == 0) assert_int_equal(dlc_trace_push(&t, "lr", 0.5 * i), DL_OK);
  }
  assert_int_equal(t.nseries, 2);
  assert_string_equal(t.series[0].name, "loss"); /* creation order */
  const dlc_series *loss = dlc_trace_series(&t, "loss"), *lr = dlc_trace_series(&t, "lr");
  assert_int_equal(loss->n, 100);
  assert_int_equal(lr->n, 50);
  for (int i = 0; i < 100; i++) assert_true(loss->v[i] == 1.0 / (i + 1));
  assert_true(lr->v[49] == 0.5 * 98);
  assert_null(dlc_trace_series(&t, "lo"));
  dlc_trace_free(&t);
  assert_int_equal(t.nseries, 0);
  assert_null(t.series);
}

static void metrics_and_notes_replace_by_name(void **state) {
  (void)state;
  dlc_trace t;
  dlc_trace_init(&t, "s", "r");
  double v = -1;
  assert_false(dlc_trace_metric(&t, "peak_bytes", &v));
  assert_true(v == -1);
  assert_int_equal(dlc_trace_set_metric(&t, "peak_bytes", 1024), DL_OK);
  assert_int_equal(dlc_trace_set_metric(&t, "eval_accuracy", 0.5), DL_OK);
  assert_int_equal(dlc_trace_set_metric(&t, "peak_bytes", 2048), DL_OK);
  assert_int_equal(t.nmetrics, 2);
  assert_true(dlc_trace_metric(&t, "peak_bytes", &v) && v == 2048);
  assert_true(dlc_trace_metric(&t, "eval_accuracy", NULL));

  assert_null(dlc_trace_note(&t, "ckpt"));
  char text[32] = "3 keys missing";
  assert_int_equal(dlc_trace_set_note(&t, "ckpt", text), DL_OK);
  strcpy(text, "changed");
  assert_string_equal(dlc_trace_note(&t, "ckpt"), "3 keys missing"); /* a copy */
  assert_int_equal(dlc_trace_set_note(&t, "overlap", ""), DL_OK);
  assert_int_equal(dlc_trace_set_note(&t, "ckpt", "all keys matched"), DL_OK);
  assert_int_equal(t.nnotes, 2);
  assert_string_equal(dlc_trace_note(&t, "ckpt"), "all keys matched");
  assert_string_equal(dlc_trace_note(&t, "overlap"), "");
  dlc_trace_free(&t);
}

static void finals_are_copies(void **state) {
  (void)state;
  dlc_trace t;
  dlc_trace_init(&t, "s", "r");
  dl_tensor w = {0};
  assert_int_equal(dl_tensor_f32(&w, 2, 2, 3, 0, 0, "w"), DL_OK);
  for (int i = 0; i < 6; i++) dl_f32(&w)[i] = (float)i;
  assert_int_equal(dlc_trace_add_final(&t, "param/0.weight", &w), DL_OK);
  dl_f32(&w)[0] = 42;
  const dl_tensor *f = dlc_trace_final(&t, "param/0.weight");
  assert_non_null(f);
  assert_true(dl_f32(f)[0] == 0 && dl_f32(f)[5] == 5);
  assert_ptr_not_equal(f->data, w.data);
  /* replacing, with another shape and dtype */
  const int64_t two[1] = {2};
  dl_tensor ids = {0};
  assert_int_equal(dl_tensor_alloc(&ids, DL_I64, 1, two, "ids"), DL_OK);
  assert_int_equal(dlc_trace_add_final(&t, "param/0.weight", &ids), DL_OK);
  assert_int_equal(t.nfinals, 1);
  assert_int_equal(dlc_trace_final(&t, "param/0.weight")->dtype, DL_I64);
  assert_null(dlc_trace_final(&t, "param/1.weight"));
  /* an allocation that fails leaves the trace as it was */
  dl_mem_fail_after(1);
  assert_int_equal(dlc_trace_add_final(&t, "buffer/x", &w), DL_ERR_NOMEM);
  dl_mem_fail_after(0);
  assert_int_equal(t.nfinals, 1);
  assert_null(dlc_trace_final(&t, "buffer/x"));
  int64_t before = dl_mem_current();
  dlc_trace_free(&t);
  assert_true(dl_mem_current() < before); /* the copies were accounted and freed */
  dl_tensor_free(&w);
  dl_tensor_free(&ids);
}

static void digests_hash_the_bytes(void **state) {
  (void)state;
  /* xxhash's test vector: the empty input, seed 0 */
  assert_true(dlc_digest("", 0) == 0xEF46DB3751D8E999ULL);
  dlc_trace t;
  dlc_trace_init(&t, "s", "r");
  dl_tensor a = {0}, b = {0};
  assert_int_equal(dl_tensor_f32(&a, 1, 5, 0, 0, 0, "a"), DL_OK);
  const int64_t three[1] = {3};
  assert_int_equal(dl_tensor_alloc(&b, DL_I32, 1, three, "b"), DL_OK);
  const char *names[2] = {"param/0.weight", "ids"};
  const dl_tensor *tensors[2] = {&a, &b};
  uint64_t want[3][2];
  for (int s = 0; s < 3; s++) {
    dl_f32(&a)[s] = 0.5f * (float)(s + 1);
    dl_i32(&b)[2 - s] = -s;
    assert_int_equal(dlc_trace_push_digests(&t, 2, names, tensors), DL_OK);
    want[s][0] = XXH64(a.data, 5 * sizeof(float), 0);
    want[s][1] = XXH64(b.data, 3 * sizeof(int32_t), 0);
  }
  assert_int_equal(t.ndigest, 2);
  assert_int_equal(t.digest_steps, 3);
  assert_string_equal(t.digest_names[1], "ids");
  for (int s = 0; s < 3; s++)
    for (int j = 0; j < 2; j++) assert_true(t.digests[s * 2 + j] == want[s][j]);
  assert_true(t.digests[0] != t.digests[2]); /* the values changed, so did the digest */
  /* later steps must name the same tensors */
  assert_int_equal(dlc_trace_push_digests(&t, 1, names, tensors), DL_ERR_INTERNAL);
  assert_non_null(strstr(dl_last_error(), "1 tensors, earlier steps 2"));
  const char *renamed[2] = {"param/0.weight", "labels"};
  assert_int_equal(dlc_trace_push_digests(&t, 2, renamed, tensors), DL_ERR_INTERNAL);
  assert_non_null(strstr(dl_last_error(), "labels"));
  assert_non_null(strstr(dl_last_error(), "ids"));
  assert_int_equal(t.digest_steps, 3);
  dlc_trace_free(&t);
  dl_tensor_free(&a);
  dl_tensor_free(&b);
}

static void layer_stats_are_copied(void **state) {
  (void)state;
  dlc_trace t;
  dlc_trace_init(&t, "s", "r");
  const char *layers[2] = {"0 (linear)", "1 (relu)"};
  double st[2][DLC_STAT_COUNT] = {{0.1, 1, -2, 3, 0, 0}, {0.5, 0.25, 0, 3, 0.5, 1}};
  assert_int_equal(dlc_trace_push_stats(&t, 7, 2, layers, (const double(*)[DLC_STAT_COUNT])st),
                   DL_OK);
  st[1][DLC_STAT_FRAC_ZERO] = 0.75;
  assert_int_equal(dlc_trace_push_stats(&t, 9, 1, layers + 1,
                                        (const double(*)[DLC_STAT_COUNT])(st + 1)),
                   DL_OK);
  assert_int_equal(dlc_trace_push_stats(&t, 10, 0, NULL, NULL), DL_OK);
  assert_int_equal(t.nstats, 3);
  assert_int_equal(t.stats[0].step, 7);
  assert_int_equal(t.stats[0].nlayers, 2);
  assert_string_equal(t.stats[0].layer[1], "1 (relu)");
  assert_true(t.stats[0].stat[1][DLC_STAT_FRAC_ZERO] == 0.5); /* copied before the change */
  assert_true(t.stats[1].stat[0][DLC_STAT_FRAC_ZERO] == 0.75);
  assert_string_equal(t.stats[1].layer[0], "1 (relu)");
  assert_int_equal(t.stats[2].nlayers, 0);
  dlc_trace_free(&t);
}

static void fill(dlc_trace *t) {
  dlc_trace_init(t, "scenario", "accumulated");
  strcpy(t->backend, "cuda");
  t->seed = 7;
  t->scenario_hash = 0xfeedULL;
  for (int i = 0; i < 4; i++) assert_int_equal(dlc_trace_push(t, "loss", i), DL_OK);
  dl_tensor w = {0};
  assert_int_equal(dl_tensor_f32(&w, 1, 3, 0, 0, 0, "w"), DL_OK);
  const char *names[1] = {"w"};
  const dl_tensor *tensors[1] = {&w};
  assert_int_equal(dlc_trace_push_digests(t, 1, names, tensors), DL_OK);
  assert_int_equal(dlc_trace_add_final(t, "param/w", &w), DL_OK);
  const char *layers[1] = {"0 (linear)"};
  const double st[1][DLC_STAT_COUNT] = {{1, 2, 3, 4, 5, 6}};
  assert_int_equal(dlc_trace_push_stats(t, 0, 1, layers, st), DL_OK);
  assert_int_equal(dlc_trace_set_metric(t, "peak_bytes", 99), DL_OK);
  assert_int_equal(dlc_trace_set_note(t, "ckpt", "ok"), DL_OK);
  dl_tensor_free(&w);
}

static void copy_is_deep(void **state) {
  (void)state;
  dlc_trace src, dst;
  fill(&src);
  dlc_trace_init(&dst, NULL, NULL);
  assert_int_equal(dlc_trace_copy(&dst, &src), DL_OK);
  assert_string_equal(dst.run, "accumulated");
  assert_string_equal(dst.backend, "cuda");
  assert_true(dst.seed == 7 && dst.scenario_hash == 0xfeedULL);
  assert_int_equal(dst.nseries, 1);
  assert_int_equal(dst.series[0].n, 4);
  assert_memory_equal(dst.series[0].v, src.series[0].v, 4 * sizeof(double));
  assert_ptr_not_equal(dst.series[0].v, src.series[0].v);
  assert_int_equal(dst.digest_steps, 1);
  assert_true(dst.digests[0] == src.digests[0]);
  assert_int_equal(dst.nstats, 1);
  assert_true(dst.stats[0].stat[0][5] == 6);
  const dl_tensor *f = dlc_trace_final(&dst, "param/w");
  assert_non_null(f);
  assert_ptr_not_equal(f->data, src.finals[0].t.data);
  double v;
  assert_true(dlc_trace_metric(&dst, "peak_bytes", &v) && v == 99);
  assert_string_equal(dlc_trace_note(&dst, "ckpt"), "ok");
  assert_ptr_not_equal(dlc_trace_note(&dst, "ckpt"), dlc_trace_note(&src, "ckpt"));
  /* changing the copy leaves the source alone */
  assert_int_equal(dlc_trace_push(&dst, "loss", 9), DL_OK);
  assert_int_equal(src.series[0].n, 4);
  dlc_trace_free(&src); /* the copy outlives its source */
  assert_int_equal(dst.series[0].n, 5);
  assert_string_equal(dlc_trace_note(&dst, "ckpt"), "ok");
  dlc_trace_free(&dst);
  /* an empty trace copies too */
  dlc_trace_init(&src, "e", "e");
  dlc_trace_init(&dst, NULL, NULL);
  assert_int_equal(dlc_trace_copy(&dst, &src), DL_OK);
  assert_int_equal(dst.nseries + dst.ndigest + dst.nfinals, 0);
  dlc_trace_free(&dst);
  dlc_trace_free(&src);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(init_names_and_defaults),
      cmocka_unit_test(series_grow_in_order),
      cmocka_unit_test(metrics_and_notes_replace_by_name),
      cmocka_unit_test(finals_are_copies),
      cmocka_unit_test(digests_hash_the_bytes),
      cmocka_unit_test(layer_stats_are_copied),
      cmocka_unit_test(copy_is_deep),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
