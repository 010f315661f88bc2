/* End-to-end learning: the engine trains real models on the committed
 * fixtures to a held-out accuracy that only learning reaches.
 *
 *   MLP 64-128-128-10 on digits (1437 train / 360 test images of 8x8):
 *   held-out accuracy >= 90% after 5 epochs (110 steps).
 *   CNN (conv 1->16, relu, pool, conv 16->32, relu, pool, linear) on the
 *   Fashion-MNIST subset (4096 train / 1024 test of 28x28): held-out
 *   accuracy >= 80% after 3 epochs (192 steps), the third at lr / 10.
 *
 * Both use batch 64 from shuffled epochs (the last short batch dropped),
 * cross-entropy, SGD lr 0.05 momentum 0.9, seed 0, 2 threads: the setup of
 * bench/bench_train.c. Measured (RelWithDebInfo, 2 shared cores): MLP 95.3%
 * in 0.1 s; CNN 82.8% in 3 to 12 s depending on the machine's other load.
 * Untrained, the models score 5.6% and 3.6% (chance is 10%), which the tests
 * also check, so the thresholds measure learning and not the evaluation.
 * The thresholds are the task's, below the measured values with a margin;
 * the run is bitwise deterministic, so any change of the printed accuracy
 * means the engine's numbers changed, worth a look even when it passes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "data/data.h"
#include "nn/loss.h"
#include "core/mem.h"
#include "nn/model.h"
#include "optim/optim.h"
#include "data/sampler.h"
#include "core/threads.h"

enum { BATCH = 64, EVAL_BATCH = 256, MAX_LAYERS = 10 };

static const float LR = 0.05f;
static const uint64_t SEED = 0;

static dl_layer_desc linear(int64_t in, int64_t out) {
  dl_layer_desc d = dl_layer_default(DL_LINEAR);
  d.in = in;
  d.out = out;
  return d;
}

static dl_layer_desc conv3x3(int64_t in, int64_t out) {
  dl_layer_desc d = dl_layer_default(DL_CONV2D);
  d.in = in;
  d.out = out;
  d.kernel = 3;
  d.padding = 1;
  return d;
}

static dl_layer_desc maxpool2(void) {
  dl_layer_desc d = dl_layer_default(DL_MAXPOOL2D);
  d.kernel = 2;
  return d;
}

static int mlp_layers(dl_layer_desc *l) {
  l[0] = dl_layer_default(DL_FLATTEN);
  l[1] = linear(64, 128);
  l[2] = dl_layer_default(DL_RELU);
  l[3] = linear(128, 128);
  l[4] = dl_layer_default(DL_RELU);
  l[5] = linear(128, 10);
  return 6;
}

static int cnn_layers(dl_layer_desc *l) {
  l[0] = conv3x3(1, 16);
  l[1] = dl_layer_default(DL_RELU);
  l[2] = maxpool2();
  l[3] = conv3x3(16, 32);
  l[4] = dl_layer_default(DL_RELU);
  l[5] = maxpool2();
  l[6] = dl_layer_default(DL_FLATTEN);
  l[7] = linear(32 * 7 * 7, 10);
  return 8;
}

static void load(dl_dataset *ds, const char *file, const char *group) {
  char path[512];
  snprintf(path, sizeof path, "%s/fixtures/%s", DL_SOURCE_DIR, file);
  *ds = (dl_dataset){0};
  dl_status s = dl_dataset_load_h5(ds, path, group);
  if (s != DL_OK) fail_msg("%s", dl_last_error());
}

static dl_optim *sgd(dl_model *m) {
  dl_optim_desc od = dl_optim_default(DL_OPTIM_SGD);
  od.momentum = 0.9;
  dl_param *params[2 * MAX_LAYERS];
  int n = dl_model_num_params(m);
  for (int i = 0; i < n; i++) params[i] = dl_model_param(m, i);
  dl_optim *o;
  assert_int_equal(dl_optim_create(&o, &od, params, n), DL_OK);
  return o;
}

/* One forward, cross-entropy, backward and SGD step on batch b. */
static void train_step(dl_model *m, dl_optim *o, const dl_batch *b, int64_t step, float lr) {
  dl_ctx ctx = {.grad_enabled = true, .seed = SEED, .step = step, .sample_ids = b->ids};
  dl_model_zero_grad(m);
  const dl_tensor *logits;
  assert_int_equal(dl_model_forward(m, &ctx, &b->x, &logits), DL_OK);
  dl_ce_desc ce = dl_ce_default();
  dl_tensor dlogits = {0};
  float loss;
  assert_int_equal(dl_cross_entropy(&ce, logits, &b->y, &loss, NULL, &dlogits), DL_OK);
  assert_int_equal(dl_model_backward(m, &ctx, &dlogits), DL_OK);
  dl_tensor_free(&dlogits);
  dl_model_release(m);
  assert_int_equal(dl_optim_step(o, lr), DL_OK);
}

/* Epochs of shuffled, full batches, lr divided by 10 from epoch
 * `decay_from` on; returns the number of steps taken. */
static int64_t train(dl_model *m, const dl_dataset *ds, int epochs, int decay_from) {
  dl_optim *o = sgd(m);
  dl_batch b = {0};
  assert_int_equal(dl_batch_alloc(&b, ds, BATCH), DL_OK);
  int64_t *order = malloc((size_t)ds->n * sizeof *order);
  assert_non_null(order);
  int64_t step = 0;
  dl_model_train(m, true);
  for (int e = 0; e < epochs; e++) {
    dl_permutation(ds->n, SEED, e, order);
    for (int64_t pos = 0; pos + BATCH <= ds->n; pos += BATCH) {
      assert_int_equal(dl_dataset_gather(ds, order + pos, BATCH, &b), DL_OK);
      train_step(m, o, &b, step++, e < decay_from ? LR : LR / 10);
    }
  }
  free(order);
  dl_batch_free(&b);
  dl_optim_destroy(o);
  return step;
}

static int64_t argmax_row(const float *row, int64_t n) {
  int64_t best = 0;
  for (int64_t c = 1; c < n; c++)
    if (row[c] > row[best]) best = c;
  return best;
}

/* Fraction of ds classified right, in eval mode without grad. */
static double accuracy(dl_model *m, const dl_dataset *ds) {
  dl_batch b = {0};
  assert_int_equal(dl_batch_alloc(&b, ds, EVAL_BATCH), DL_OK);
  int64_t idx[EVAL_BATCH], correct = 0;
  dl_ctx ctx = {.grad_enabled = false, .seed = SEED};
  dl_model_train(m, false);
  for (int64_t first = 0; first < ds->n; first += EVAL_BATCH) {
    int64_t n = ds->n - first < EVAL_BATCH ? ds->n - first : EVAL_BATCH;
    for (int64_t i = 0; i < n; i++) idx[i] = first + i;
    assert_int_equal(dl_dataset_gather(ds, idx, n, &b), DL_OK);
    const dl_tensor *logits;
    assert_int_equal(dl_model_forward(m, &ctx, &b.x, &logits), DL_OK);
    assert_int_equal(logits->shape[0], n);
    int64_t classes = logits->shape[1];
    for (int64_t i = 0; i < n; i++)
      correct += argmax_row(dl_f32(logits) + i * classes, classes) == dl_i32(&b.y)[i];
    dl_model_release(m);
  }
  dl_batch_free(&b);
  return (double)correct / (double)ds->n;
}

typedef struct learning_case {
  const char *fixture;
  int (*layers)(dl_layer_desc *l);
  int epochs;
  int decay_from; /* first epoch at lr / 10 */
  int64_t expect_steps;
  double min_accuracy;
} learning_case;

static void learns(const learning_case *c) {
  assert_int_equal(dl_set_num_threads(2), DL_OK);
  dl_dataset train_set, test_set;
  load(&train_set, c->fixture, "train");
  load(&test_set, c->fixture, "test");
  dl_layer_desc layers[MAX_LAYERS];
  int n = c->layers(layers);
  dl_model *m;
  assert_int_equal(dl_model_create(&m, layers, n, SEED), DL_OK);
  double before = accuracy(m, &test_set);
  int64_t steps = train(m, &train_set, c->epochs, c->decay_from);
  double after = accuracy(m, &test_set);
  printf("# %s: held-out accuracy %.1f%% untrained, %.1f%% after %d epochs (%lld steps)\n",
         c->fixture, 100 * before, 100 * after, c->epochs, (long long)steps);
  /* Chance is 10%; an untrained model well above it would mean the
   * evaluation leaks labels, and then the threshold below proves nothing. */
  assert_true(before < 0.3);
  assert_int_equal(steps, c->expect_steps);
  assert_true(after >= c->min_accuracy);
  dl_model_destroy(m);
  dl_dataset_free(&train_set);
  dl_dataset_free(&test_set);
  assert_int_equal(dl_mem_current(), 0);
}

/* 1437 / 64 = 22 full batches per epoch. */
static void mlp_learns_digits(void **state) {
  (void)state;
  const learning_case c = {"digits.h5", mlp_layers, 5, 5, 5 * 22, 0.90};
  learns(&c);
}

/* 4096 / 64 = 64 batches per epoch. At a constant lr the accuracy after 2
 * or 3 epochs wanders around 80% (77-84% over seeds, in PyTorch and here);
 * a third epoch at lr / 10 settles it at 82-85%. */
static void cnn_learns_fashion_mnist(void **state) {
  (void)state;
  const learning_case c = {"fashion_mnist.h5", cnn_layers, 3, 2, 3 * 64, 0.80};
  learns(&c);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(mlp_learns_digits),
      cmocka_unit_test(cnn_learns_fashion_mnist),
  };
  int failed = cmocka_run_group_tests(tests, NULL, NULL);
  dl_threads_shutdown();
  return failed;
}
