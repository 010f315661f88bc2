/* The runner's pieces with logic of their own (checks/run/runner_*.c):
 * the data cursor (batches, epochs, seeking, the evidence it gathers),
 * the configuration handed to the engine (schedule, optimizer), the
 * pitfall switch table, and the two refusals of issue 16: synthetic data
 * sizes that overflow, and traces too large to keep in memory. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "judge/catalogue.h"
#include "run/runner_internal.h"

enum { N = 10 };

typedef struct cursor_fixture {
  dlc_run_config cfg;
  dl_dataset ds;
  dl_batch batch;
  int32_t seen[N];
  dlc_data_cursor cur;
} cursor_fixture;

/* N blob samples read by one rank in batches of `batch`, in order. */
static cursor_fixture *fixture(int64_t batch, bool drop_last) {
  cursor_fixture *f = calloc(1, sizeof *f);
  assert_non_null(f);
  dlc_run_config_default(&f->cfg);
  f->cfg.data.batch = batch;
  f->cfg.data.drop_last = drop_last;
  assert_int_equal(dl_dataset_blobs(&f->ds, N, 3, 2, 0.5f, 7), DL_OK);
  assert_int_equal(dl_batch_alloc(&f->batch, &f->ds, batch), DL_OK);
  dlc_cursor_init(&f->cur, &f->cfg, &f->ds, 0, 1, f->seen);
  return f;
}

/* The same over one shuffled epoch a batch; D2 if no_set_epoch. */
static cursor_fixture *shuffled(bool no_set_epoch) {
  cursor_fixture *f = fixture(N, false);
  f->cfg.data.shuffle = true;
  f->cfg.bug.no_set_epoch = no_set_epoch;
  dlc_cursor_init(&f->cur, &f->cfg, &f->ds, 0, 1, f->seen);
  return f;
}

static void fixture_free(cursor_fixture *f) {
  dlc_cursor_free(&f->cur);
  dl_batch_free(&f->batch);
  dl_dataset_free(&f->ds);
  free(f);
}

static void next_ok(cursor_fixture *f, int64_t rows, int64_t first_id) {
  assert_int_equal(dlc_cursor_next(&f->cur, &f->batch), DL_OK);
  assert_int_equal(f->batch.n, rows);
  assert_int_equal(f->batch.ids[0], first_id);
}

/* 10 samples in batches of 4: 4, 4, the short 2, then epoch 1 starts. */
static void cursor_walks_epochs(void **state) {
  (void)state;
  cursor_fixture *f = fixture(4, false);
  next_ok(f, 4, 0);
  next_ok(f, 4, 4);
  next_ok(f, 2, 8);
  assert_int_equal(f->cur.epoch, 0);
  assert_false(f->cur.epoch0_done);
  next_ok(f, 4, 0);
  assert_int_equal(f->cur.epoch, 1);
  assert_int_equal(f->cur.pos, 4);
  assert_true(f->cur.epoch0_done);
  for (int i = 0; i < N; i++) assert_int_equal(f->seen[i], 1); /* epoch 1 not counted */
  fixture_free(f);
}

/* Every batch holds the dataset's rows of its ids, the short last one
 * too (its tensors are shaped [n, ...], not [capacity, ...]: a row size
 * taken from the capacity copied too few bytes and left stale rows), and
 * dlc_batch_rows views exactly its rows. */
static void batches_hold_their_rows(void **state) {
  (void)state;
  cursor_fixture *f = fixture(4, false);
  const int64_t xrow = f->ds.x.numel / f->ds.n;
  static const int64_t sizes[] = {4, 4, 2};
  for (int b = 0; b < 3; b++) {
    int64_t rows = sizes[b];
    assert_int_equal(dlc_cursor_next(&f->cur, &f->batch), DL_OK);
    assert_int_equal(f->batch.n, rows);
    for (int64_t i = 0; i < rows; i++) {
      int64_t id = f->batch.ids[i];
      assert_memory_equal(dl_f32(&f->batch.x) + i * xrow, dl_f32(&f->ds.x) + id * xrow,
                          (size_t)xrow * sizeof(float));
      assert_int_equal(dl_i32(&f->batch.y)[i], dl_i32(&f->ds.y)[id]);
    }
    dl_tensor x, y;
    dlc_batch_rows(&f->batch, rows, &x, &y);
    assert_int_equal(x.shape[0], rows);
    assert_int_equal(x.numel, rows * xrow);
    assert_int_equal(y.numel, rows);
  }
  fixture_free(f);
}

/* drop_last: the short batch is skipped and its samples never seen. */
static void cursor_drops_the_short_batch(void **state) {
  (void)state;
  cursor_fixture *f = fixture(4, true);
  next_ok(f, 4, 0);
  next_ok(f, 4, 4);
  next_ok(f, 4, 0);
  assert_int_equal(f->cur.epoch, 1);
  assert_int_equal(f->seen[7], 1);
  assert_int_equal(f->seen[8], 0);
  assert_int_equal(f->seen[9], 0);
  fixture_free(f);
}

static void cursor_too_few_samples_for_a_batch(void **state) {
  (void)state;
  cursor_fixture *f = fixture(N + 1, true);
  assert_int_equal(dlc_cursor_next(&f->cur, &f->batch), DL_ERR_INVALID);
  assert_non_null(strstr(dl_last_error(), "fewer than one batch of 11 with drop_last"));
  fixture_free(f);
}

/* A restored checkpoint goes on where the saved run stood. */
static void cursor_seek_resumes(void **state) {
  (void)state;
  cursor_fixture *f = fixture(3, false);
  next_ok(f, 3, 0);
  dlc_cursor_seek(&f->cur, 2, 6, 0);
  next_ok(f, 3, 6);
  assert_int_equal(f->cur.epoch, 2);
  assert_int_equal(f->cur.pos, 9);
  assert_int_equal(f->seen[6], 0); /* only epoch 0 is counted */
  fixture_free(f);
}

/* Shuffled epochs: a new order each epoch, unless set_epoch is never
 * called (D2), which the cursor counts; D8 changes the key of later ones. */
static void cursor_counts_repeated_orders(void **state) {
  (void)state;
  for (int bug = 0; bug < 2; bug++) {
    cursor_fixture *f = shuffled(bug);
    int64_t first[N];
    assert_int_equal(dlc_cursor_next(&f->cur, &f->batch), DL_OK);
    memcpy(first, f->batch.ids, sizeof first);
    for (int e = 1; e < 4; e++) assert_int_equal(dlc_cursor_next(&f->cur, &f->batch), DL_OK);
    assert_int_equal(f->cur.order_repeats, bug ? 3 : 0); /* epochs 1-3 repeat the one before */
    assert_int_equal(memcmp(first, f->batch.ids, sizeof first) == 0, bug);
    assert_int_equal(f->cur.epoch, 3);
    fixture_free(f);
  }
}

static void cursor_shifted_key_changes_the_order(void **state) {
  (void)state;
  int64_t ids[2][N];
  for (int shift = 0; shift < 2; shift++) {
    cursor_fixture *f = shuffled(false);
    assert_int_equal(dlc_cursor_next(&f->cur, &f->batch), DL_OK);
    if (shift) dlc_cursor_shift_key(&f->cur);
    assert_int_equal(dlc_cursor_next(&f->cur, &f->batch), DL_OK);
    memcpy(ids[shift], f->batch.ids, sizeof ids[shift]);
    fixture_free(f);
  }
  assert_memory_not_equal(ids[0], ids[1], sizeof ids[0]);
}

/* Two ranks: DistributedSampler's rank::world striding, unless D1. */
static void cursor_shards_ranks(void **state) {
  (void)state;
  for (int bug = 0; bug < 2; bug++) {
    cursor_fixture *f = fixture(2, false);
    f->cfg.parallel.world = 2;
    f->cfg.bug.no_distributed_sampler = bug;
    dlc_cursor_init(&f->cur, &f->cfg, &f->ds, 1, 2, f->seen);
    assert_int_equal(dlc_cursor_next(&f->cur, &f->batch), DL_OK);
    assert_int_equal(f->batch.ids[0], bug ? 0 : 1);
    assert_int_equal(f->batch.ids[1], bug ? 1 : 3);
    fixture_free(f);
  }
}

/* ---- configuration handed to the engine --------------------------------- */

static void schedule_starts_from_the_optimizer_lr(void **state) {
  (void)state;
  dlc_run_config c;
  dlc_run_config_default(&c);
  c.optim.lr = 0.25;
  c.steps = 40;
  c.schedule.kind = DL_SCHEDULE_COSINE;
  c.schedule.warmup_steps = 4;
  dlc_run_config_resolve(&c);
  dl_schedule s = dlc_run_schedule(&c);
  assert_true(s.lr == 0.25);
  assert_int_equal(s.total_steps, 40); /* 0: the whole run */
  assert_int_equal(s.warmup_steps, 4);
  assert_int_equal(dl_schedule_check(&s), DL_OK);
  c.schedule.total_steps = 30;
  assert_int_equal(dlc_run_schedule(&c).total_steps, 30);
  c.schedule.kind = DL_SCHEDULE_STEP;
  c.schedule.step_size = 5;
  s = dlc_run_schedule(&c);
  assert_true(dl_lr_at(&s, 5) == (float)(0.25 * (double)0.1f));
}

/* Defaults are float32 values widened (the bits goldens were recorded
 * with) and make an optimizer the engine accepts as is. */
static void optimizer_defaults_are_float32_values(void **state) {
  (void)state;
  dlc_run_config c;
  dlc_run_config_default(&c);
  assert_int_equal(c.optim.kind, DL_OPTIM_SGD);
  assert_true(c.optim.lr == (double)0.01f && c.optim.lr != 0.01);
  assert_true(c.optim.beta1 == (double)0.9f && c.optim.beta2 == (double)0.999f);
  assert_true(c.optim.eps == (double)1e-8f);
  assert_int_equal(c.precision.scaler, DL_SCALER_OFF);
  float w = 1, g = 1;
  dl_param p = {.name = "w", .requires_grad = true, .in_optimizer = true, .has_grad = true};
  assert_int_equal(dl_tensor_alloc(&p.value, DL_F32, 0, NULL, "w"), DL_OK);
  assert_int_equal(dl_tensor_alloc(&p.grad, DL_F32, 0, NULL, "w grad"), DL_OK);
  *dl_f32(&p.value) = w;
  *dl_f32(&p.grad) = g;
  dl_param *ps[] = {&p};
  dl_optim *o;
  assert_int_equal(dl_optim_create(&o, &c.optim, ps, 1), DL_OK);
  assert_int_equal(dl_optim_step(o, (float)c.optim.lr), DL_OK);
  assert_true(*dl_f32(&p.value) == 1.0f - 0.01f);
  dl_optim_destroy(o);
  dl_tensor_free(&p.value);
  dl_tensor_free(&p.grad);
}

/* Every pitfall switch is a bool of dlc_bugs and names a catalogue entry. */
static void every_bug_switch_names_a_catalogue_entry(void **state) {
  (void)state;
  int n = 0;
#define CHECK_BUG(name, id, doc)           \
  assert_non_null(dlc_catalogue_find(id)); \
  assert_true(strlen(doc) > 0);            \
  n++;
  DLC_BUGS(CHECK_BUG)
#undef CHECK_BUG
  assert_int_equal((size_t)n * sizeof(bool), sizeof(dlc_bugs));
}

/* ---- issue 16: sizes that do not fit ------------------------------------ */

static void synthetic_sizes_are_checked(void **state) {
  (void)state;
  dlc_data_config d;
  dlc_run_config c;
  dlc_run_config_default(&c);
  d = c.data;
  d.source = DLC_DATA_BLOBS;
  int64_t rows, n_eval;
  assert_int_equal(dlc_synthetic_rows(&d, &rows, &n_eval), DL_OK);
  assert_int_equal(n_eval, 64); /* n / 4 */
  assert_int_equal(rows, 320);
  d.n = INT64_MAX - 10; /* n + n/4 overflows */
  assert_int_equal(dlc_synthetic_rows(&d, &rows, &n_eval), DL_ERR_INVALID);
  assert_non_null(strstr(dl_last_error(), "use a smaller data.n"));
  d.n = INT64_MAX / 8; /* rows fit, rows * dim * 4 bytes do not */
  assert_int_equal(dlc_synthetic_rows(&d, &rows, &n_eval), DL_ERR_INVALID);
  assert_non_null(strstr(dl_last_error(), "data.dim"));
  d.source = DLC_DATA_TOKENS;
  d.eval_limit = 1;
  d.n = INT64_MAX / 2;
  d.max_len = 3;
  assert_int_equal(dlc_synthetic_rows(&d, &rows, &n_eval), DL_ERR_INVALID);
  assert_non_null(strstr(dl_last_error(), "data.max_len"));
}

static void a_trace_too_large_is_refused_up_front(void **state) {
  (void)state;
  dlc_run_config c;
  dlc_run_config_default(&c);
  c.layers[0] = dl_layer_default(DL_LINEAR);
  c.layers[0].in = 4;
  c.layers[0].out = 2;
  c.nlayers = 1;
  c.data.source = DLC_DATA_BLOBS;
  c.data.n = 16;
  c.data.dim = 4;
  c.data.classes = 2;
  /* 6 series and 2 digests: 64 bytes a step, and the statistics of the
   * first and last step. */
  double stats = 2 * 2 * (DLC_NAME_MAX + DLC_STAT_COUNT * 8.0);
  assert_true(dlc_trace_bytes(&c, NULL, 1000, 2) == 64000 + stats);
  c.steps = 1000000000; /* the schema's maximum */
  assert_true(dlc_trace_bytes(&c, NULL, c.steps, 2) > (double)DLC_TRACE_MAX_BYTES);
  dlc_run_options opt = {.root = DL_SOURCE_DIR, .scenario = "t", .workdir = "."};
  dlc_trace t;
  assert_int_equal(dlc_run(&c, &opt, &t), DL_ERR_INVALID);
  assert_non_null(strstr(dl_last_error(), "more than the 4 GiB a run may record"));
  assert_non_null(strstr(dl_last_error(), "use at most 67108863 steps"));
  c.steps = 3;
  assert_int_equal(dlc_run(&c, &opt, &t), DL_OK);
  dlc_trace_free(&t);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(cursor_walks_epochs),
      cmocka_unit_test(batches_hold_their_rows),
      cmocka_unit_test(cursor_drops_the_short_batch),
      cmocka_unit_test(cursor_too_few_samples_for_a_batch),
      cmocka_unit_test(cursor_seek_resumes),
      cmocka_unit_test(cursor_counts_repeated_orders),
      cmocka_unit_test(cursor_shifted_key_changes_the_order),
      cmocka_unit_test(cursor_shards_ranks),
      cmocka_unit_test(schedule_starts_from_the_optimizer_lr),
      cmocka_unit_test(optimizer_defaults_are_float32_values),
      cmocka_unit_test(every_bug_switch_names_a_catalogue_entry),
      cmocka_unit_test(synthetic_sizes_are_checked),
      cmocka_unit_test(a_trace_too_large_is_refused_up_front),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
