/* MaxPool2d, GlobalAvgPool and Flatten (engine/nn/kinds/maxpool2d.c,
 * globalavgpool.c, flatten.c): gradients against finite differences,
 * PyTorch's tie, NaN and padding rules, exact answers, AMP rounding and
 * errors. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "gradcheck.h"
#include "numerics/half.h"
#include "core/mem.h"

static dl_layer_desc pool_desc(int k, int stride, int pad) {
  dl_layer_desc d = dl_layer_default(DL_MAXPOOL2D);
  d.kernel = k;
  d.stride = stride;
  d.padding = pad;
  return d;
}

/* A shuffled ladder of values 0.05 apart within [-1, 1] (at most 40 of
 * them): no two within 2h of each other (h = 2e-2 for |v| <= 1,
 * gradcheck.h), so no finite difference crosses a tie. */
static void fill_distinct(dl_tensor *t, uint64_t seed) {
  assert_true(t->numel <= 40);
  float *v = dl_f32(t);
  for (int64_t i = 0; i < t->numel; i++) v[i] = (float)(i - t->numel / 2) * 0.05f;
  dl_stream s = dl_stream_make(seed, "test/shuffle", NULL, 0);
  for (int64_t i = t->numel - 1; i > 0; i--) {
    int64_t j = (int64_t)dl_stream_below(&s, (uint64_t)(2 * i), (uint64_t)i + 1);
    float tmp = v[i];
    v[i] = v[j];
    v[j] = tmp;
  }
}

static void maxpool_gradients_match_finite_differences(void **state) {
  (void)state;
  const int combos[][3] = {{2, 0, 0}, {3, 2, 1}, {3, 1, 1}, {2, 1, 0}, {3, 3, 0}};
  for (size_t i = 0; i < sizeof combos / sizeof combos[0]; i++) {
    dl_tensor x = {0};
    assert_int_equal(dl_tensor_f32(&x, 4, 2, 1, 4, 5, "x"), DL_OK);
    fill_distinct(&x, 30 + i);
    dl_layer_desc d = pool_desc(combos[i][0], combos[i][1], combos[i][2]);
    double err = gc_layer_max_error(&d, &x, true);
    /* Piecewise linear with no kink within h: expected error ~1e-5. */
    if (!(err < 1e-2)) print_error("combo %zu: %s\n", i, gc_last_report);
    assert_true(err < 1e-2);
    dl_tensor_free(&x);
  }
}

static void forward_backward(const dl_layer_desc *d, const dl_ctx *ctx, const dl_tensor *x,
                             dl_tensor *y, dl_tensor *dx) {
  dl_layer l;
  assert_int_equal(dl_layer_init(&l, d, "", 0, 1), DL_OK);
  assert_int_equal(l.ops->forward(&l, ctx, x, y), DL_OK);
  if (dx) {
    dl_tensor dy = {0};
    assert_int_equal(dl_tensor_alloc(&dy, DL_F32, y->ndim, y->shape, "dy"), DL_OK);
    for (int64_t i = 0; i < dy.numel; i++) dl_f32(&dy)[i] = 1.0f + (float)i;
    assert_int_equal(l.ops->backward(&l, ctx, x, y, &dy, dx), DL_OK);
    dl_tensor_free(&dy);
  }
  dl_layer_destroy(&l);
}

/* PyTorch's rules: the first maximum in window order wins a tie, padding
 * never wins (-inf), and NaN propagates. */
static void maxpool_ties_padding_and_nan(void **state) {
  (void)state;
  dl_tensor x = {0}, y = {0}, dx = {0};
  assert_int_equal(dl_tensor_f32(&x, 4, 1, 1, 2, 4, "x"), DL_OK);
  const float xv[8] = {5, 1, -3, -2, 5, 5, -1, -4};
  memcpy(dl_f32(&x), xv, sizeof xv);
  dl_layer_desc d = pool_desc(2, 0, 0);
  dl_ctx ctx = gc_ctx();
  forward_backward(&d, &ctx, &x, &y, &dx);
  assert_int_equal(y.shape[2], 1);
  assert_int_equal(y.shape[3], 2);
  assert_true(dl_f32(&y)[0] == 5.0f && dl_f32(&y)[1] == -1.0f);
  const float expect_dx[8] = {1, 0, 0, 0, 0, 0, 2, 0}; /* tie: the first 5 */
  assert_memory_equal(expect_dx, dl_f32(&dx), sizeof expect_dx);
  dl_tensor_free(&y);
  dl_tensor_free(&dx);

  d = pool_desc(3, 1, 1); /* all-negative input with padding: max is real */
  forward_backward(&d, &ctx, &x, &y, NULL);
  assert_int_equal(y.shape[2], 2);
  assert_int_equal(y.shape[3], 4);
  const float expect_y[8] = {5, 5, 5, -1, 5, 5, 5, -1};
  assert_memory_equal(expect_y, dl_f32(&y), sizeof expect_y);
  dl_tensor_free(&y);

  dl_f32(&x)[1] = NAN;
  d = pool_desc(2, 0, 0);
  forward_backward(&d, &ctx, &x, &y, &dx);
  assert_true(isnan(dl_f32(&y)[0]));
  assert_true(dl_f32(&dx)[1] == 1.0f && dl_f32(&dx)[0] == 0.0f);
  dl_tensor_free(&y);
  dl_tensor_free(&dx);
  dl_tensor_free(&x);
}

/* Overlapping windows sharing one maximum add their gradients there. */
static void maxpool_overlapping_windows_accumulate(void **state) {
  (void)state;
  dl_tensor x = {0}, y = {0}, dx = {0};
  assert_int_equal(dl_tensor_f32(&x, 4, 1, 1, 3, 3, "x"), DL_OK);
  dl_f32(&x)[4] = 9.0f; /* the centre is the max of all four 2x2 windows */
  dl_layer_desc d = pool_desc(2, 1, 0);
  dl_ctx ctx = gc_ctx();
  forward_backward(&d, &ctx, &x, &y, &dx);
  for (int i = 0; i < 4; i++) assert_true(dl_f32(&y)[i] == 9.0f);
  assert_true(dl_f32(&dx)[4] == 1.0f + 2.0f + 3.0f + 4.0f);
  dl_tensor_free(&y);
  dl_tensor_free(&dx);
  dl_tensor_free(&x);
}

/* PyTorch's CPU rule written plainly: scan the clipped window in row-major
 * order, take v if v > best or v is NaN, starting from -inf at the
 * window's first element. */
static void reference_maxpool(const dl_tensor *x, int k, int stride, float *y, int32_t *at) {
  const int64_t planes = x->shape[0] * x->shape[1], H = x->shape[2], W = x->shape[3];
  const int64_t OH = (H - k) / stride + 1, OW = (W - k) / stride + 1;
  for (int64_t p = 0; p < planes; p++)
    for (int64_t oh = 0; oh < OH; oh++)
      for (int64_t ow = 0; ow < OW; ow++) {
        const float *plane = dl_f32(x) + p * H * W;
        float best = -INFINITY;
        int32_t where = (int32_t)(oh * stride * W + ow * stride);
        for (int i = 0; i < k; i++)
          for (int j = 0; j < k; j++) {
            const int32_t idx = (int32_t)((oh * stride + i) * W + ow * stride + j);
            if (plane[idx] > best || isnan(plane[idx])) {
              best = plane[idx];
              where = idx;
            }
          }
        y[(p * OH + oh) * OW + ow] = best;
        at[(p * OH + oh) * OW + ow] = where;
      }
}

/* The backward's answer written plainly: zeros, then each output's
 * gradient added at its argmax, in output order. */
static void reference_unpool(const dl_tensor *dy, const int32_t *at, int64_t in_plane, float *dx) {
  const int64_t planes = dy->shape[0] * dy->shape[1], out_plane = dy->shape[2] * dy->shape[3];
  memset(dx, 0, (size_t)(planes * in_plane) * sizeof *dx);
  for (int64_t p = 0; p < planes; p++)
    for (int64_t o = 0; o < out_plane; o++)
      dx[p * in_plane + at[p * out_plane + o]] += dl_f32(dy)[p * out_plane + o];
}

/* The 2x2 windows (sixteen or four at a time for stride 2, with a ragged
 * end under masks or by overlap, one at a time otherwise) against the
 * reference, bitwise, on data full of ties, signed zeros and -inf; a NaN
 * sends its plane down the exact path. Widths give 1, 2, 4, 7, 12, 20 and
 * 33 outputs per row; odd heights and widths leave inputs in no window.
 * The backward (gathered for stride 2) against the scatter, bitwise, with
 * gradients that include -0. */
static void maxpool_2x2_matches_reference_on_ties(void **state) {
  (void)state;
  const float values[] = {0.0f, -0.0f, 1.0f, 1.0f, -2.0f, -INFINITY, 3.5f, 1.0f};
  const float grads[] = {-0.0f, 0.0f, 0.5f, -1.25f};
  const int64_t widths[] = {3, 5, 9, 15, 24, 41, 66};
  for (int stride = 1; stride <= 2; stride++)
    for (size_t wi = 0; wi < sizeof widths / sizeof widths[0]; wi++)
      for (int with_nan = 0; with_nan < 2; with_nan++) {
        dl_tensor x = {0}, y = {0}, dy = {0}, dx = {0};
        assert_int_equal(dl_tensor_f32(&x, 4, 2, 3, 6 + with_nan, widths[wi], "x"), DL_OK);
        dl_stream s = dl_stream_make(7 + wi, "test/pool", NULL, 0);
        for (int64_t i = 0; i < x.numel; i++)
          dl_f32(&x)[i] = values[dl_stream_below(&s, (uint64_t)i, 8)];
        if (with_nan) dl_f32(&x)[x.numel / 2 + 1] = NAN;
        dl_layer l;
        dl_layer_desc d = pool_desc(2, stride, 0);
        assert_int_equal(dl_layer_init(&l, &d, "", 0, 1), DL_OK);
        dl_ctx ctx = gc_ctx();
        assert_int_equal(l.ops->forward(&l, &ctx, &x, &y), DL_OK);
        float *want = test_malloc((size_t)x.numel * sizeof *want);
        int32_t *want_at = test_malloc((size_t)y.numel * sizeof *want_at);
        reference_maxpool(&x, 2, stride, want, want_at);
        assert_memory_equal(want, dl_f32(&y), (size_t)y.numel * sizeof *want);
        assert_memory_equal(want_at, dl_i32(&l.saved[0]), (size_t)y.numel * sizeof *want_at);
        assert_int_equal(dl_tensor_alloc(&dy, DL_F32, y.ndim, y.shape, "dy"), DL_OK);
        for (int64_t i = 0; i < dy.numel; i++)
          dl_f32(&dy)[i] = grads[dl_stream_below(&s, (uint64_t)(x.numel + i), 4)];
        assert_int_equal(l.ops->backward(&l, &ctx, &x, &y, &dy, &dx), DL_OK);
        reference_unpool(&dy, want_at, x.shape[2] * x.shape[3], want);
        assert_memory_equal(want, dl_f32(&dx), (size_t)x.numel * sizeof *want);
        test_free(want);
        test_free(want_at);
        dl_tensor_free(&x);
        dl_tensor_free(&y);
        dl_tensor_free(&dy);
        dl_tensor_free(&dx);
        dl_layer_destroy(&l);
      }
}

static void maxpool_errors(void **state) {
  (void)state;
  dl_layer l;
  dl_layer_desc d = pool_desc(2, 0, 2);
  assert_int_equal(dl_layer_init(&l, &d, "4.", 0, 1), DL_ERR_INVALID);
  assert_non_null(strstr(dl_last_error(), "layer 4 (maxpool2d): padding 2 exceeds half"));
  d = pool_desc(2, -1, 0);
  assert_int_equal(dl_layer_init(&l, &d, "4.", 0, 1), DL_ERR_INVALID);
  assert_non_null(strstr(dl_last_error(), "stride must be >= 0"));
  d = pool_desc(3, 0, 0);
  assert_int_equal(dl_layer_init(&l, &d, "4.", 0, 1), DL_OK);
  dl_tensor x = {0}, y = {0}, dy = {0}, dx = {0};
  dl_ctx ctx = gc_ctx();
  assert_int_equal(dl_tensor_f32(&x, 3, 1, 2, 2, 0, "x"), DL_OK);
  assert_int_equal(l.ops->forward(&l, &ctx, &x, &y), DL_ERR_INVALID);
  assert_non_null(strstr(dl_last_error(), "[N, C, H, W]"));
  dl_tensor_free(&x);
  assert_int_equal(dl_tensor_f32(&x, 4, 1, 1, 2, 5, "x"), DL_OK);
  assert_int_equal(l.ops->forward(&l, &ctx, &x, &y), DL_ERR_INVALID);
  assert_non_null(strstr(dl_last_error(), "smaller than kernel 3"));
  dl_tensor_free(&x);
  /* No argmax kept without grad: backward must refuse, not guess. */
  assert_int_equal(dl_tensor_f32(&x, 4, 1, 1, 3, 3, "x"), DL_OK);
  ctx.grad_enabled = false;
  assert_int_equal(l.ops->forward(&l, &ctx, &x, &y), DL_OK);
  assert_null(l.saved[0].data);
  assert_int_equal(dl_tensor_f32(&dy, 4, 1, 1, 1, 1, "dy"), DL_OK);
  assert_int_equal(l.ops->backward(&l, &ctx, &x, &y, &dy, &dx), DL_ERR_INVALID);
  assert_non_null(strstr(dl_last_error(), "backward without a grad-mode forward"));
  /* Allocation of the argmax fails: no output left behind. */
  dl_tensor_free(&y);
  ctx.grad_enabled = true;
  const int64_t base = dl_mem_current();
  dl_mem_fail_after(2);
  assert_int_equal(l.ops->forward(&l, &ctx, &x, &y), DL_ERR_NOMEM);
  dl_mem_fail_after(0);
  assert_null(y.data);
  assert_int_equal(dl_mem_current(), base);
  dl_tensor_free(&x);
  dl_tensor_free(&dy);
  dl_layer_destroy(&l);
}

static void pooling_outputs_round_under_autocast(void **state) {
  (void)state;
  dl_tensor x = {0}, y = {0}, dx = {0};
  assert_int_equal(dl_tensor_f32(&x, 4, 2, 3, 4, 4, "x"), DL_OK);
  gc_fill_uniform(&x, 17, -3.0f, 3.0f);
  dl_ctx ctx = gc_ctx();
  ctx.autocast = DL_BF16;
  dl_layer_desc d = pool_desc(2, 0, 0);
  forward_backward(&d, &ctx, &x, &y, NULL);
  for (int64_t i = 0; i < y.numel; i++) {
    int64_t plane = i / 4, oh = i % 4 / 2, ow = i % 2;
    const float *p = dl_f32(&x) + plane * 16 + oh * 8 + ow * 2;
    float m = fmaxf(fmaxf(p[0], p[1]), fmaxf(p[4], p[5]));
    assert_true(dl_f32(&y)[i] == dl_round_bf16(m));
  }
  dl_tensor_free(&y);
  d = dl_layer_default(DL_GLOBALAVGPOOL);
  forward_backward(&d, &ctx, &x, &y, &dx);
  for (int64_t i = 0; i < y.numel; i++) {
    float sum = 0.0f;
    for (int k = 0; k < 16; k++) sum += dl_f32(&x)[i * 16 + k];
    assert_true(dl_f32(&y)[i] == dl_round_bf16(sum / 16.0f));
    assert_true(dl_f32(&dx)[i * 16 + 5] == dl_round_bf16((1.0f + (float)i) / 16.0f));
  }
  dl_tensor_free(&y);
  dl_tensor_free(&dx);
  d = dl_layer_default(DL_FLATTEN);
  forward_backward(&d, &ctx, &x, &y, NULL);
  for (int64_t i = 0; i < y.numel; i++) assert_true(dl_f32(&y)[i] == dl_round_bf16(dl_f32(&x)[i]));
  dl_tensor_free(&y);
  dl_tensor_free(&x);
}

/* An output gradient of another shape or dtype is refused by the pooling
 * layers, global average pooling and flatten, not read by the shape the
 * forward gave. */
static void misshapen_output_gradients_are_refused(void **state) {
  (void)state;
  dl_tensor x = {0};
  assert_int_equal(dl_tensor_f32(&x, 4, 2, 3, 4, 4, "x"), DL_OK);
  const dl_layer_kind kinds[] = {DL_GLOBALAVGPOOL, DL_FLATTEN};
  for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
    dl_layer_desc d = dl_layer_default(kinds[i]);
    bool refused = gc_refuses_misshapen_dy(&d, &x);
    if (!refused) print_error("kind %zu: %s\n", i, gc_last_report);
    assert_true(refused);
  }
  dl_tensor_free(&x);
}

static void globalavgpool_mean_and_gradients(void **state) {
  (void)state;
  dl_tensor x = {0}, y = {0}, dx = {0};
  assert_int_equal(dl_tensor_f32(&x, 4, 1, 2, 2, 2, "x"), DL_OK);
  const float xv[8] = {1, 2, 3, 6, -4, 0, 0, 0};
  memcpy(dl_f32(&x), xv, sizeof xv);
  dl_layer_desc d = dl_layer_default(DL_GLOBALAVGPOOL);
  dl_ctx ctx = gc_ctx();
  forward_backward(&d, &ctx, &x, &y, &dx);
  assert_int_equal(y.ndim, 2);
  assert_int_equal(y.shape[1], 2);
  assert_true(dl_f32(&y)[0] == 3.0f && dl_f32(&y)[1] == -1.0f);
  assert_true(dl_f32(&dx)[0] == 0.25f && dl_f32(&dx)[7] == 0.5f);
  dl_tensor_free(&y);
  dl_tensor_free(&dx);
  dl_tensor_free(&x);
  assert_int_equal(dl_tensor_f32(&x, 4, 2, 3, 3, 5, "x"), DL_OK);
  gc_fill_uniform(&x, 3, -1.0f, 1.0f);
  double err = gc_layer_max_error(&d, &x, true);
  assert_true(err < 1e-2); /* linear map: see gradcheck.h */
  dl_tensor_free(&x);
  assert_int_equal(dl_tensor_f32(&x, 3, 2, 3, 3, 0, "x"), DL_OK);
  dl_layer l;
  assert_int_equal(dl_layer_init(&l, &d, "5.", 0, 1), DL_OK);
  assert_int_equal(l.ops->forward(&l, &ctx, &x, &y), DL_ERR_INVALID);
  assert_non_null(strstr(dl_last_error(), "[2, 3, 3] float32"));
  dl_layer_destroy(&l);
  dl_tensor_free(&x);
}

static void flatten_shapes_and_gradients(void **state) {
  (void)state;
  dl_tensor x = {0}, y = {0}, dx = {0};
  assert_int_equal(dl_tensor_f32(&x, 4, 2, 3, 2, 2, "x"), DL_OK);
  gc_fill_uniform(&x, 3, -1.0f, 1.0f);
  dl_layer_desc d = dl_layer_default(DL_FLATTEN);
  dl_ctx ctx = gc_ctx();
  forward_backward(&d, &ctx, &x, &y, &dx);
  assert_int_equal(y.ndim, 2);
  assert_int_equal(y.shape[0], 2);
  assert_int_equal(y.shape[1], 12);
  assert_memory_equal(dl_f32(&x), dl_f32(&y), dl_tensor_bytes(&x));
  assert_true(dl_tensor_same_shape(&dx, &x));
  assert_true(dl_f32(&dx)[13] == 14.0f);
  dl_tensor_free(&y);
  dl_tensor_free(&dx);
  assert_true(gc_layer_max_error(&d, &x, true) < 1e-2); /* identity map */
  dl_tensor_free(&x);
  assert_int_equal(dl_tensor_f32(&x, 1, 5, 0, 0, 0, "x"), DL_OK);
  dl_layer l;
  assert_int_equal(dl_layer_init(&l, &d, "", 0, 1), DL_OK);
  assert_int_equal(l.ops->forward(&l, &ctx, &x, &y), DL_ERR_INVALID);
  assert_non_null(strstr(dl_last_error(), "rank >= 2"));
  dl_tensor_free(&x);
  /* An output gradient of another size is refused, not copied past dx. */
  dl_tensor dy = {0};
  assert_int_equal(dl_tensor_f32(&x, 2, 2, 3, 0, 0, "x"), DL_OK);
  assert_int_equal(dl_tensor_f32(&dy, 2, 2, 4, 0, 0, "dy"), DL_OK);
  assert_int_equal(l.ops->backward(&l, &ctx, &x, NULL, &dy, &dx), DL_ERR_INVALID);
  assert_non_null(strstr(dl_last_error(), "output gradient is [2, 4] float32; expected [2, 3]"));
  assert_true(dl_tensor_empty(&dx));
  dl_layer_destroy(&l);
  dl_tensor_free(&x);
  dl_tensor_free(&dy);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(maxpool_gradients_match_finite_differences),
      cmocka_unit_test(maxpool_ties_padding_and_nan),
      cmocka_unit_test(maxpool_overlapping_windows_accumulate),
      cmocka_unit_test(maxpool_2x2_matches_reference_on_ties),
      cmocka_unit_test(maxpool_errors),
      cmocka_unit_test(pooling_outputs_round_under_autocast),
      cmocka_unit_test(globalavgpool_mean_and_gradients),
      cmocka_unit_test(misshapen_output_gradients_are_refused),
      cmocka_unit_test(flatten_shapes_and_gradients),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
