/* The multi-worker loader (engine/data/loader.c): order, content, bitwise
 * equality across worker counts, keyed augmentation, early shutdown. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cmocka.h>

#include "data/loader.h"
#include "core/mem.h"
#include "data/sampler.h"

enum { C = 2, H = 3, W = 4, ROW = C * H * W };

/* Images [n, 2, 3, 4] whose pixel j of sample i is i*1000 + j, exactly, so
 * that every copied or flipped value says where it came from. */
static void make_images(dl_dataset *ds, int64_t n) {
  const int64_t xs[4] = {n, C, H, W}, ys[1] = {n};
  assert_int_equal(dl_tensor_alloc(&ds->x, DL_F32, 4, xs, "x"), DL_OK);
  assert_int_equal(dl_tensor_alloc(&ds->y, DL_I32, 1, ys, "y"), DL_OK);
  for (int64_t i = 0; i < n; i++) {
    for (int j = 0; j < ROW; j++) dl_f32(&ds->x)[i * ROW + j] = (float)(i * 1000 + j);
    dl_i32(&ds->y)[i] = (int32_t)(i % 7);
  }
  ds->n = n;
  ds->n_classes = 7;
  snprintf(ds->name, sizeof ds->name, "images");
}

/* Everything a loader produced, concatenated. */
typedef struct run {
  float x[4096 * ROW];
  int32_t y[4096];
  int64_t ids[4096];
  int64_t rows, batches, sizes[512];
} run;

static run run_a, run_b;

static void collect(const dl_dataset *ds, const int64_t *idx, int64_t n, const dl_loader_opts *o,
                    run *out) {
  memset(out, 0, sizeof *out);
  dl_loader *ld = NULL;
  assert_int_equal(dl_loader_create(&ld, ds, idx, n, o), DL_OK);
  const dl_batch *b = NULL;
  for (;;) {
    assert_int_equal(dl_loader_next(ld, &b), DL_OK);
    if (!b) break;
    assert_int_equal(b->x.shape[0], b->n);
    memcpy(out->x + out->rows * ROW, b->x.data, (size_t)b->n * ROW * sizeof(float));
    memcpy(out->y + out->rows, b->y.data, (size_t)b->n * sizeof(int32_t));
    memcpy(out->ids + out->rows, b->ids, (size_t)b->n * sizeof(int64_t));
    out->sizes[out->batches++] = b->n;
    out->rows += b->n;
  }
  assert_int_equal(out->batches, dl_loader_num_batches(ld));
  assert_int_equal(dl_loader_next(ld, &b), DL_OK); /* the end stays the end */
  assert_null(b);
  dl_loader_destroy(ld);
}

static void shuffled(int64_t n, int64_t epoch, int64_t *idx) { dl_permutation(n, 77, epoch, idx); }

static void batches_follow_the_index_list(void **state) {
  (void)state;
  dl_dataset ds = {0};
  make_images(&ds, 50);
  int64_t idx[50];
  shuffled(50, 0, idx);
  for (int drop = 0; drop < 2; drop++) {
    dl_loader_opts o = {.batch = 7, .drop_last = drop, .workers = 2};
    collect(&ds, idx, 50, &o, &run_a);
    assert_int_equal(run_a.batches, drop ? 7 : 8);
    assert_int_equal(run_a.sizes[run_a.batches - 1], drop ? 7 : 1);
    assert_int_equal(run_a.rows, drop ? 49 : 50);
    for (int64_t r = 0; r < run_a.rows; r++) {
      assert_int_equal(run_a.ids[r], idx[r]);
      assert_int_equal(run_a.y[r], idx[r] % 7);
      for (int j = 0; j < ROW; j++) assert_true(run_a.x[r * ROW + j] == (float)(idx[r] * 1000 + j));
    }
  }
  dl_dataset_free(&ds);
}

static atomic_int hook_calls, hook_errors;

/* A user augmentation: scale by a per-sample factor from its stream. It runs
 * in worker threads, where cmocka's asserts must not be used. */
static void scale_hook(void *user, const dl_stream *s, float *x, const int64_t *shape, int ndim,
                       int64_t numel) {
  (void)user;
  if (ndim != 3 || shape[2] != W || numel != ROW) atomic_fetch_add(&hook_errors, 1);
  float f;
  dl_stream_uniform(s, 0, &f, 1);
  for (int64_t k = 0; k < numel; k++) x[k] *= 1.0f + f;
  atomic_fetch_add(&hook_calls, 1);
}

/* The determinism contract: the same bits for 0, 1 and 3 workers, with and
 * without augmentation, whatever the ring size. */
static void identical_for_any_worker_count(void **state) {
  (void)state;
  dl_dataset ds = {0};
  make_images(&ds, 300);
  int64_t idx[300];
  shuffled(300, 2, idx);
  const dl_augment augs[3] = {{0},
                              {.hflip = true, .noise_std = 0.1f},
                              {.hflip = true, .noise_std = 0.5f, .fn = scale_hook}};
  for (int a = 0; a < 3; a++) {
    dl_loader_opts o = {.batch = 16, .workers = 0, .aug = &augs[a], .epoch = 3, .seed = 5};
    atomic_store(&hook_calls, 0);
    collect(&ds, idx, 300, &o, &run_a);
    assert_int_equal(atomic_load(&hook_calls), a == 2 ? 300 : 0);
    assert_int_equal(atomic_load(&hook_errors), 0);
    const int workers[3] = {1, 3, 3}, prefetch[3] = {0, 0, 7};
    for (int w = 0; w < 3; w++) {
      o.workers = workers[w];
      o.prefetch = prefetch[w];
      collect(&ds, idx, 300, &o, &run_b);
      assert_int_equal(run_b.rows, 300);
      assert_memory_equal(run_a.x, run_b.x, 300 * ROW * sizeof(float));
      assert_memory_equal(run_a.ids, run_b.ids, sizeof run_a.ids);
      assert_memory_equal(run_a.sizes, run_b.sizes, sizeof run_a.sizes);
    }
  }
  dl_dataset_free(&ds);
}

static bool row_is(const float *x, int64_t id, bool flipped) {
  for (int c = 0; c < C * H; c++)
    for (int w = 0; w < W; w++) {
      int src = c * W + (flipped ? W - 1 - w : w);
      if (x[c * W + w] != (float)(id * 1000 + src)) return false;
    }
  return true;
}

/* Flips: each sample comes out as itself or mirrored along W, both happen,
 * and whether it flips depends on (epoch, sample id), not on its position
 * in the epoch or batch. */
static void flips_are_keyed_by_epoch_and_sample(void **state) {
  (void)state;
  dl_dataset ds = {0};
  make_images(&ds, 64);
  int64_t idx[64];
  shuffled(64, 0, idx);
  const dl_augment aug = {.hflip = true};
  dl_loader_opts o = {.batch = 5, .workers = 2, .aug = &aug, .epoch = 0, .seed = 1};
  collect(&ds, idx, 64, &o, &run_a);
  bool flip0[64];
  int flipped = 0;
  for (int64_t r = 0; r < 64; r++) {
    int64_t id = run_a.ids[r];
    bool f = row_is(run_a.x + r * ROW, id, true);
    assert_true(f || row_is(run_a.x + r * ROW, id, false));
    flip0[id] = f;
    flipped += f;
  }
  /* 64 fair coins: P(fewer than 12 or more than 52 heads) < 1e-6 */
  assert_true(flipped >= 12 && flipped <= 52);

  const int64_t few[3] = {40, 3, 17}; /* other positions, other batch size */
  o.batch = 2;
  collect(&ds, few, 3, &o, &run_b);
  for (int r = 0; r < 3; r++) assert_true(row_is(run_b.x + r * ROW, few[r], flip0[few[r]]));

  o.epoch = 1;
  collect(&ds, idx, 64, &o, &run_b);
  int differ = 0;
  for (int64_t r = 0; r < 64; r++)
    differ += row_is(run_b.x + r * ROW, run_b.ids[r], true) != flip0[run_b.ids[r]];
  assert_true(differ >= 12); /* again 64 fair coins */
  dl_dataset_free(&ds);
}

/* Noise has the requested std: 200 * 24 = 4800 values, relative error of a
 * std estimate ~1/sqrt(2*4800) = 1%, so 6% is ~6 std; its mean is within
 * 6 std (6 * 0.25/sqrt(4800) = 0.022) of 0. */
static void noise_has_the_requested_std(void **state) {
  (void)state;
  dl_dataset ds = {0};
  make_images(&ds, 200);
  int64_t idx[200];
  shuffled(200, 0, idx);
  const dl_augment aug = {.noise_std = 0.25f};
  dl_loader_opts o = {.batch = 32, .workers = 1, .aug = &aug};
  collect(&ds, idx, 200, &o, &run_a);
  double sum = 0, sq = 0;
  for (int64_t r = 0; r < 200; r++)
    for (int j = 0; j < ROW; j++) {
      double e = run_a.x[r * ROW + j] - (double)(run_a.ids[r] * 1000 + j);
      sum += e;
      sq += e * e;
    }
  double n = 200.0 * ROW, mean = sum / n, std = sqrt(sq / n - mean * mean);
  assert_true(fabs(mean) < 0.022);
  assert_true(std > 0.25 * 0.94 && std < 0.25 * 1.06);
  dl_dataset_free(&ds);
}

static void sequences_bring_their_lengths(void **state) {
  (void)state;
  dl_dataset ds = {0};
  assert_int_equal(dl_dataset_sequences(&ds, 30, 9, 1, 6, 0, 4), DL_OK);
  int64_t idx[30];
  shuffled(30, 1, idx);
  dl_loader *ld = NULL;
  dl_loader_opts o = {.batch = 8, .workers = 2};
  assert_int_equal(dl_loader_create(&ld, &ds, idx, 30, &o), DL_OK);
  const dl_batch *b = NULL;
  int64_t pos = 0;
  while (dl_loader_next(ld, &b) == DL_OK && b) {
    assert_int_equal(b->lengths.shape[0], b->n);
    assert_int_equal(b->x.shape[1], 6);
    for (int64_t r = 0; r < b->n; r++, pos++) {
      assert_int_equal(dl_i32(&b->lengths)[r], dl_i32(&ds.lengths)[idx[pos]]);
      assert_memory_equal(dl_i32(&b->y) + r * 6, dl_i32(&ds.y) + idx[pos] * 6, 24);
    }
  }
  assert_int_equal(pos, 30);
  dl_loader_destroy(ld);
  dl_dataset_free(&ds);
}

/* Destroying a loader whose workers are busy or waiting for ring space
 * joins them without hanging, and frees everything (valgrind checks the
 * rest). */
static void early_destroy_is_clean(void **state) {
  (void)state;
  dl_dataset ds = {0};
  make_images(&ds, 2000);
  int64_t *idx = malloc(2000 * sizeof *idx);
  assert_non_null(idx);
  shuffled(2000, 0, idx);
  int64_t before = dl_mem_current();
  const dl_augment aug = {.noise_std = 1.0f};
  for (int take = 0; take < 6; take++) {
    dl_loader *ld = NULL;
    dl_loader_opts o = {.batch = 3, .workers = 1 + take % 4, .prefetch = take % 3, .aug = &aug};
    assert_int_equal(dl_loader_create(&ld, &ds, idx, 2000, &o), DL_OK);
    const dl_batch *b = NULL;
    for (int k = 0; k < take * 5; k++) {
      assert_int_equal(dl_loader_next(ld, &b), DL_OK);
      assert_non_null(b);
    }
    dl_loader_destroy(ld);
  }
  dl_loader_destroy(NULL);
  assert_int_equal(dl_mem_current(), before);
  free(idx);
  dl_dataset_free(&ds);
}

static void expect_error(dl_status got, dl_status want, const char *text) {
  assert_int_equal(got, want);
  if (!strstr(dl_last_error(), text)) fail_msg("message '%s' lacks '%s'", dl_last_error(), text);
}

static void bad_options_are_refused(void **state) {
  (void)state;
  dl_dataset img = {0}, blobs = {0}, seq = {0};
  make_images(&img, 10);
  assert_int_equal(dl_dataset_blobs(&blobs, 10, 3, 2, 1.0f, 0), DL_OK);
  assert_int_equal(dl_dataset_sequences(&seq, 10, 5, 1, 3, 0, 0), DL_OK);
  const int64_t idx[3] = {0, 9, 10};
  dl_loader *ld = NULL;
  dl_loader_opts o = {.batch = 0};
  expect_error(dl_loader_create(&ld, &img, idx, 2, &o), DL_ERR_INVALID, "batch=0");
  assert_null(ld);
  o = (dl_loader_opts){.batch = 2, .workers = -1};
  expect_error(dl_loader_create(&ld, &img, idx, 2, &o), DL_ERR_INVALID, "workers=-1");
  o.workers = 0;
  expect_error(dl_loader_create(&ld, &img, idx, 3, &o), DL_ERR_INVALID,
               "loader over images: index 10 (position 2) is outside [0, 10)");
  dl_augment aug = {.hflip = true};
  o.aug = &aug;
  expect_error(dl_loader_create(&ld, &blobs, idx, 2, &o), DL_ERR_INVALID,
               "hflip needs images [N, C, H, W], x has rank 2");
  aug = (dl_augment){.noise_std = 0.1f};
  expect_error(dl_loader_create(&ld, &seq, idx, 2, &o), DL_ERR_INVALID,
               "augmentation needs float32 x, not int32");
  aug.noise_std = -1.0f;
  expect_error(dl_loader_create(&ld, &img, idx, 2, &o), DL_ERR_INVALID, "noise_std -1");
  aug.noise_std = NAN;
  expect_error(dl_loader_create(&ld, &img, idx, 2, &o), DL_ERR_INVALID, "noise_std nan");
  /* an empty index list is an empty epoch */
  o = (dl_loader_opts){.batch = 4, .workers = 2};
  assert_int_equal(dl_loader_create(&ld, &img, NULL, 0, &o), DL_OK);
  dl_batch dummy = {0};
  const dl_batch *b = &dummy;
  assert_int_equal(dl_loader_next(ld, &b), DL_OK);
  assert_null(b);
  dl_loader_destroy(ld);
  dl_dataset_free(&img);
  dl_dataset_free(&blobs);
  dl_dataset_free(&seq);
}

static void allocation_failures_leak_nothing(void **state) {
  (void)state;
  dl_dataset ds = {0};
  make_images(&ds, 10);
  const int64_t idx[4] = {1, 2, 3, 4};
  int64_t before = dl_mem_current();
  dl_loader_opts o = {.batch = 2, .workers = 2};
  /* allocations at create: loader, indices, 3 ring arrays, 2 batches of 3
   * tensors and ids, threads; failing each in turn must clean up. */
  for (int k = 1; k <= 14; k++) {
    dl_loader *ld = NULL;
    dl_mem_fail_after(k);
    dl_status s = dl_loader_create(&ld, &ds, idx, 4, &o);
    dl_mem_fail_after(0);
    if (s == DL_OK) {
      dl_loader_destroy(ld);
      continue;
    }
    assert_int_equal(s, DL_ERR_NOMEM);
    assert_null(ld);
    assert_non_null(strstr(dl_last_error(), "loader over images"));
  }
  assert_int_equal(dl_mem_current(), before);
  dl_dataset_free(&ds);
}

/* Not a pass/fail check: prints the throughput of an augmented Fashion-MNIST
 * epoch so that a slow loader shows up in the test log. */
static void fashion_epoch_throughput(void **state) {
  (void)state;
  dl_dataset ds = {0};
  assert_int_equal(dl_dataset_load_h5(&ds, DL_SOURCE_DIR "/fixtures/fashion_mnist.h5", "train"),
                   DL_OK);
  dl_sampler sp = {.kind = DL_SAMPLER_RANDOM, .n = ds.n, .seed = 3};
  dl_indices ix = {0};
  assert_int_equal(dl_sampler_indices(&sp, 0, &ix), DL_OK);
  const dl_augment aug = {.hflip = true, .noise_std = 0.05f};
  for (int workers = 0; workers <= 2; workers += 2) {
    dl_loader *ld = NULL;
    dl_loader_opts o = {.batch = 64, .workers = workers, .aug = &aug};
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    assert_int_equal(dl_loader_create(&ld, &ds, ix.v, ix.n, &o), DL_OK);
    const dl_batch *b = NULL;
    int64_t rows = 0;
    while (dl_loader_next(ld, &b) == DL_OK && b) rows += b->n;
    dl_loader_destroy(ld);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double s = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    assert_int_equal(rows, ds.n);
    printf("fashion epoch, hflip+noise, %d workers: %.3f s, %.0f samples/s\n", workers, s,
           (double)rows / s);
  }
  dl_indices_free(&ix);
  dl_dataset_free(&ds);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(batches_follow_the_index_list),
      cmocka_unit_test(identical_for_any_worker_count),
      cmocka_unit_test(flips_are_keyed_by_epoch_and_sample),
      cmocka_unit_test(noise_has_the_requested_std),
      cmocka_unit_test(sequences_bring_their_lengths),
      cmocka_unit_test(early_destroy_is_clean),
      cmocka_unit_test(bad_options_are_refused),
      cmocka_unit_test(allocation_failures_leak_nothing),
      cmocka_unit_test(fashion_epoch_throughput),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
