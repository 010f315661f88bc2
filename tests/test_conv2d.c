/* Conv2d (engine/nn/kinds/conv2d.c): gradients against finite differences over
 * stride/padding/bias combinations, the forward against a direct
 * convolution written independently, thread-count independence, AMP
 * emulation, errors and allocation failures. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "gradcheck.h"
#include "numerics/half.h"
#include "core/mem.h"
#include "backend/cpu/sgemm.h"
#include "core/threads.h"

static dl_layer_desc conv_desc(int64_t in, int64_t out, int k, int stride, int pad, bool bias) {
  dl_layer_desc d = dl_layer_default(DL_CONV2D);
  d.in = in;
  d.out = out;
  d.kernel = k;
  d.stride = stride;
  d.padding = pad;
  d.bias = bias;
  return d;
}

typedef struct conv_case {
  int64_t n, c, h, w, o;
  int k, stride, pad;
  bool bias;
} conv_case;

static const conv_case cases[] = {
    {2, 2, 5, 5, 3, 3, 1, 1, true}, {2, 2, 5, 5, 3, 3, 2, 0, false}, {1, 3, 4, 6, 2, 2, 2, 1, true},
    {2, 1, 4, 4, 2, 1, 1, 0, true}, {1, 2, 7, 5, 2, 3, 3, 2, false}, {1, 1, 3, 3, 1, 3, 1, 0, true},
};

/* An output gradient of another shape or dtype is refused, not read by
 * the shape the forward gave. */
static void misshapen_output_gradients_are_refused(void **state) {
  (void)state;
  dl_tensor x = {0};
  assert_int_equal(dl_tensor_f32(&x, 4, 2, 3, 5, 5, "x"), DL_OK);
  dl_layer_desc d = conv_desc(3, 4, 3, 1, 1, true);
  bool refused = gc_refuses_misshapen_dy(&d, &x);
  if (!refused) print_error("%s\n", gc_last_report);
  assert_true(refused);
  dl_tensor_free(&x);
}

static void gradients_match_finite_differences(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    const conv_case *c = &cases[i];
    dl_tensor x = {0};
    assert_int_equal(dl_tensor_f32(&x, 4, c->n, c->c, c->h, c->w, "x"), DL_OK);
    gc_fill_uniform(&x, 11 + i, -1.0f, 1.0f);
    dl_layer_desc d = conv_desc(c->c, c->o, c->k, c->stride, c->pad, c->bias);
    double err = gc_layer_max_error(&d, &x, true);
    /* Tolerance 1e-2: see gradcheck.h; conv is linear, expected ~1e-4. */
    if (!(err < 1e-2)) print_error("case %zu: %s\n", i, gc_last_report);
    assert_true(err < 1e-2);
    dl_tensor_free(&x);
  }
}

/* Direct convolution: for each output, start from the (rounded) bias and
 * fma over (c, ki, kj) in order, skipping padding (a zero product would
 * leave the sum unchanged). That is the GEMM contract's order, so the
 * im2col result must be bitwise equal. rnd is the AMP operand rounding. */
static void direct_conv(const conv_case *c, const float *x, const float *w, const float *b,
                        float (*rnd)(float), float *y) {
  const int64_t oh_n = (c->h + 2 * c->pad - c->k) / c->stride + 1;
  const int64_t ow_n = (c->w + 2 * c->pad - c->k) / c->stride + 1;
  for (int64_t n = 0; n < c->n; n++)
    for (int64_t o = 0; o < c->o; o++)
      for (int64_t oh = 0; oh < oh_n; oh++)
        for (int64_t ow = 0; ow < ow_n; ow++) {
          float acc = b ? rnd(b[o]) : 0.0f;
          for (int64_t ch = 0; ch < c->c; ch++)
            for (int ki = 0; ki < c->k; ki++)
              for (int kj = 0; kj < c->k; kj++) {
                int64_t ih = oh * c->stride - c->pad + ki, iw = ow * c->stride - c->pad + kj;
                if (ih < 0 || ih >= c->h || iw < 0 || iw >= c->w) continue;
                float xv = rnd(x[((n * c->c + ch) * c->h + ih) * c->w + iw]);
                float wv = rnd(w[((o * c->c + ch) * c->k + ki) * c->k + kj]);
                acc = fmaf(xv, wv, acc);
              }
          y[((n * c->o + o) * oh_n + oh) * ow_n + ow] = rnd(acc);
        }
}

static float identity(float v) { return v; }

static void check_against_direct(const conv_case *c, dl_dtype autocast) {
  float (*rnd)(float) = autocast == DL_F16    ? dl_round_f16
                        : autocast == DL_BF16 ? dl_round_bf16
                                              : identity;
  dl_layer l;
  dl_layer_desc d = conv_desc(c->c, c->o, c->k, c->stride, c->pad, c->bias);
  assert_int_equal(dl_layer_init(&l, &d, "", 0, 77), DL_OK);
  dl_tensor x = {0}, y = {0};
  assert_int_equal(dl_tensor_f32(&x, 4, c->n, c->c, c->h, c->w, "x"), DL_OK);
  gc_fill_uniform(&x, 3, -2.0f, 2.0f);
  dl_ctx ctx = gc_ctx();
  ctx.autocast = autocast;
  assert_int_equal(l.ops->forward(&l, &ctx, &x, &y), DL_OK);
  float *expect = test_malloc((size_t)y.numel * sizeof *expect);
  direct_conv(c, dl_f32(&x), dl_f32(&l.params[0].value),
              c->bias ? dl_f32(&l.params[1].value) : NULL, rnd, expect);
  assert_memory_equal(expect, dl_f32(&y), (size_t)y.numel * sizeof *expect);
  test_free(expect);
  dl_tensor_free(&x);
  dl_tensor_free(&y);
  dl_layer_destroy(&l);
}

/* With the best GEMM ISA (AVX-512 im2col lanes where the CPU has them)
 * and the portable one (scalar runs). */
static void forward_equals_direct_convolution_bitwise(void **state) {
  (void)state;
  const conv_case big = {1, 2, 17, 17, 3, 3, 1, 1, true}; /* same size, > 256 pixels */
  const dl_gemm_isa_id isas[2] = {DL_GEMM_AUTO, DL_GEMM_PORTABLE};
  for (int isa = 0; isa < 2; isa++) {
    assert_true(dl_gemm_force_isa(isas[isa]));
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
      check_against_direct(&cases[i], DL_F32);
    check_against_direct(&big, DL_F32);
  }
  assert_true(dl_gemm_force_isa(DL_GEMM_AUTO));
}

static void autocast_forward_equals_rounded_direct_convolution(void **state) {
  (void)state;
  check_against_direct(&cases[0], DL_F16);
  check_against_direct(&cases[2], DL_BF16);
}

/* Patch value col_n[r][p] of the documented im2col: 0 in the padding. */
static float patch_value(const conv_case *c, const float *x, int64_t n, int64_t r, int64_t oh,
                         int64_t ow) {
  const int64_t ch = r / (c->k * c->k), ki = r / c->k % c->k, kj = r % c->k;
  const int64_t ih = oh * c->stride - c->pad + ki, iw = ow * c->stride - c->pad + kj;
  if (ih < 0 || ih >= c->h || iw < 0 || iw >= c->w) return 0.0f;
  return x[((n * c->c + ch) * c->h + ih) * c->w + iw];
}

/* The backward sums in the order the header comment documents, written
 * out plainly: dW[o][r] one fmaf chain over samples then pixels (padding
 * zeros included), db the same with adds, dx the patch rows of
 * dcol = W^T dy added in row order. */
static void direct_backward(const conv_case *c, const float *x, const float *w, const float *dy,
                            float *dx, float *dw, float *db) {
  const int64_t oh_n = (c->h + 2 * c->pad - c->k) / c->stride + 1;
  const int64_t ow_n = (c->w + 2 * c->pad - c->k) / c->stride + 1;
  const int64_t rows = c->c * c->k * c->k, pixels = oh_n * ow_n;
  for (int64_t o = 0; o < c->o; o++) {
    db[o] = 0.0f;
    for (int64_t r = 0; r < rows; r++) {
      float acc = 0.0f;
      for (int64_t n = 0; n < c->n; n++)
        for (int64_t q = 0; q < pixels; q++)
          acc = fmaf(dy[(n * c->o + o) * pixels + q], patch_value(c, x, n, r, q / ow_n, q % ow_n),
                     acc);
      dw[o * rows + r] = acc;
    }
    for (int64_t n = 0; n < c->n; n++)
      for (int64_t q = 0; q < pixels; q++) db[o] += dy[(n * c->o + o) * pixels + q];
  }
  memset(dx, 0, (size_t)(c->n * c->c * c->h * c->w) * sizeof *dx);
  for (int64_t n = 0; n < c->n; n++)
    for (int64_t r = 0; r < rows; r++) {
      const int64_t ch = r / (c->k * c->k), ki = r / c->k % c->k, kj = r % c->k;
      for (int64_t q = 0; q < pixels; q++) {
        const int64_t ih = q / ow_n * c->stride - c->pad + ki;
        const int64_t iw = q % ow_n * c->stride - c->pad + kj;
        if (ih < 0 || ih >= c->h || iw < 0 || iw >= c->w) continue;
        float dcol = 0.0f;
        for (int64_t o = 0; o < c->o; o++)
          dcol = fmaf(w[o * rows + r], dy[(n * c->o + o) * pixels + q], dcol);
        dx[((n * c->c + ch) * c->h + ih) * c->w + iw] += dcol;
      }
    }
}

/* Same-size padding (masked 16-pixel lanes on AVX-512 up to 256 pixels,
 * whole-plane runs beyond, or with the portable GEMM ISA), strided, 1x1
 * and ragged shapes, with 1 and 3 threads (the dW rows cut in parts):
 * bitwise. */
static void backward_equals_direct_sums_bitwise(void **state) {
  (void)state;
  /* The last: 288 patch rows (whole 32-wide panels, so db's column of
   * ones starts a panel of its own) on a 16x16 plane, where col^T with that
   * column is larger than col. */
  enum { NCASES = sizeof cases / sizeof cases[0], NMORE = 5 };
  const conv_case more[NMORE] = {{2, 3, 4, 7, 5, 5, 1, 2, true},
                                 {3, 3, 3, 4, 9, 1, 1, 0, false},
                                 {2, 5, 6, 6, 4, 3, 1, 1, true},
                                 {1, 2, 17, 17, 3, 3, 1, 1, true},
                                 {1, 32, 16, 16, 3, 3, 1, 1, true}};
  const dl_gemm_isa_id isas[2] = {DL_GEMM_AUTO, DL_GEMM_PORTABLE};
  for (int isa = 0; isa < 2; isa++)
    for (size_t i = 0; i < NCASES + NMORE; i++)
      for (int threads = 1; threads <= 3; threads += 2) {
        const conv_case *c = i < NCASES ? &cases[i] : &more[i - NCASES];
        assert_true(dl_gemm_force_isa(isas[isa]));
        assert_int_equal(dl_set_num_threads(threads), DL_OK);
        dl_layer l;
        dl_layer_desc d = conv_desc(c->c, c->o, c->k, c->stride, c->pad, c->bias);
        assert_int_equal(dl_layer_init(&l, &d, "", 0, 40 + i), DL_OK);
        dl_tensor x = {0}, y = {0}, dy = {0}, dx = {0};
        assert_int_equal(dl_tensor_f32(&x, 4, c->n, c->c, c->h, c->w, "x"), DL_OK);
        gc_fill_uniform(&x, 50 + i, -2.0f, 2.0f);
        dl_ctx ctx = gc_ctx();
        assert_int_equal(l.ops->forward(&l, &ctx, &x, &y), DL_OK);
        assert_int_equal(dl_tensor_alloc(&dy, DL_F32, 4, y.shape, "dy"), DL_OK);
        gc_fill_uniform(&dy, 60 + i, -2.0f, 2.0f);
        assert_int_equal(l.ops->backward(&l, &ctx, &x, &y, &dy, &dx), DL_OK);
        float *want_dx = test_malloc((size_t)dx.numel * sizeof(float));
        float *want_dw = test_malloc((size_t)l.params[0].grad.numel * sizeof(float));
        float want_db[16];
        direct_backward(c, dl_f32(&x), dl_f32(&l.params[0].value), dl_f32(&dy), want_dx, want_dw,
                        want_db);
        assert_memory_equal(want_dx, dl_f32(&dx), dl_tensor_bytes(&dx));
        assert_memory_equal(want_dw, dl_f32(&l.params[0].grad), dl_tensor_bytes(&l.params[0].grad));
        if (c->bias)
          assert_memory_equal(want_db, dl_f32(&l.params[1].grad), (size_t)c->o * sizeof(float));
        test_free(want_dx);
        test_free(want_dw);
        dl_tensor *all[] = {&x, &y, &dy, &dx};
        for (int t = 0; t < 4; t++) dl_tensor_free(all[t]);
        dl_layer_destroy(&l);
      }
  assert_true(dl_gemm_force_isa(DL_GEMM_AUTO));
  assert_int_equal(dl_set_num_threads(1), DL_OK);
  dl_threads_shutdown();
}

/* Under autocast dW and db are the rounded sums of rounded products. */
/* db is summed inside dW's GEMM (a patch row of ones) when both are
 * wanted, by its own pass when the weight is frozen: both give the direct
 * sums' bits, and a frozen parameter's gradient is left alone. */
static void frozen_weight_or_bias_keeps_the_other_sums(void **state) {
  (void)state;
  const conv_case c = {2, 5, 6, 6, 4, 3, 1, 1, true};
  for (int frozen = 0; frozen < 2; frozen++) {
    dl_layer l;
    dl_layer_desc d = conv_desc(c.c, c.o, c.k, c.stride, c.pad, c.bias);
    assert_int_equal(dl_layer_init(&l, &d, "", 0, 91), DL_OK);
    l.params[frozen].requires_grad = false;
    dl_tensor x = {0}, y = {0}, dy = {0};
    assert_int_equal(dl_tensor_f32(&x, 4, c.n, c.c, c.h, c.w, "x"), DL_OK);
    gc_fill_uniform(&x, 92, -2.0f, 2.0f);
    dl_ctx ctx = gc_ctx();
    assert_int_equal(l.ops->forward(&l, &ctx, &x, &y), DL_OK);
    assert_int_equal(dl_tensor_alloc(&dy, DL_F32, 4, y.shape, "dy"), DL_OK);
    gc_fill_uniform(&dy, 93, -2.0f, 2.0f);
    assert_int_equal(l.ops->backward(&l, &ctx, &x, &y, &dy, NULL), DL_OK);
    float *want_dx = test_malloc((size_t)x.numel * sizeof(float));
    float *want_dw = test_malloc((size_t)l.params[0].grad.numel * sizeof(float));
    float want_db[16];
    direct_backward(&c, dl_f32(&x), dl_f32(&l.params[0].value), dl_f32(&dy), want_dx, want_dw,
                    want_db);
    const float *want[2] = {want_dw, want_db};
    const dl_param *live = &l.params[1 - frozen];
    assert_false(l.params[frozen].has_grad);
    assert_true(live->has_grad);
    assert_memory_equal(want[1 - frozen], dl_f32(&live->grad), dl_tensor_bytes(&live->grad));
    test_free(want_dx);
    test_free(want_dw);
    dl_tensor_free(&x);
    dl_tensor_free(&y);
    dl_tensor_free(&dy);
    dl_layer_destroy(&l);
  }
}

static void autocast_param_grads_are_rounded(void **state) {
  (void)state;
  const conv_case c = {2, 1, 3, 3, 2, 2, 1, 0, true}; /* output [2, 2, 2, 2] */
  dl_layer l;
  dl_layer_desc d = conv_desc(c.c, c.o, c.k, c.stride, c.pad, c.bias);
  assert_int_equal(dl_layer_init(&l, &d, "", 0, 5), DL_OK);
  dl_tensor x = {0}, y = {0}, dy = {0}, dx = {0};
  assert_int_equal(dl_tensor_f32(&x, 4, 2, 1, 3, 3, "x"), DL_OK);
  assert_int_equal(dl_tensor_f32(&dy, 4, 2, 2, 2, 2, "dy"), DL_OK);
  gc_fill_uniform(&x, 8, -1.0f, 1.0f);
  gc_fill_uniform(&dy, 9, -1.0f, 1.0f);
  dl_ctx ctx = gc_ctx();
  ctx.autocast = DL_F16;
  assert_int_equal(l.ops->forward(&l, &ctx, &x, &y), DL_OK);
  assert_int_equal(l.ops->backward(&l, &ctx, &x, &y, &dy, &dx), DL_OK);
  const float *X = dl_f32(&x), *DY = dl_f32(&dy);
  for (int o = 0; o < 2; o++) {
    float db = 0.0f;
    for (int n = 0; n < 2; n++)
      for (int p = 0; p < 4; p++) db += dl_round_f16(DY[(n * 2 + o) * 4 + p]);
    assert_true(dl_f32(&l.params[1].grad)[o] == dl_round_f16(db));
    for (int ki = 0; ki < 2; ki++)
      for (int kj = 0; kj < 2; kj++) {
        float acc = 0.0f;
        for (int n = 0; n < 2; n++)
          for (int oh = 0; oh < 2; oh++)
            for (int ow = 0; ow < 2; ow++)
              acc = fmaf(dl_round_f16(DY[((n * 2 + o) * 2 + oh) * 2 + ow]),
                         dl_round_f16(X[n * 9 + (oh + ki) * 3 + ow + kj]), acc);
        assert_true(dl_f32(&l.params[0].grad)[o * 4 + ki * 2 + kj] == dl_round_f16(acc));
      }
  }
  for (int64_t i = 0; i < dx.numel; i++)
    assert_true(dl_f32(&dx)[i] == dl_round_f16(dl_f32(&dx)[i]));
  dl_tensor_free(&x);
  dl_tensor_free(&y);
  dl_tensor_free(&dy);
  dl_tensor_free(&dx);
  dl_layer_destroy(&l);
}

/* Forward output, dx and dW with `threads` threads. */
static void run_with_threads(int threads, dl_tensor *y, dl_tensor *dx, dl_tensor *dw) {
  assert_int_equal(dl_set_num_threads(threads), DL_OK);
  dl_layer l;
  dl_layer_desc d = conv_desc(4, 8, 3, 1, 1, true);
  assert_int_equal(dl_layer_init(&l, &d, "", 0, 21), DL_OK);
  dl_tensor x = {0}, dy = {0};
  assert_int_equal(dl_tensor_f32(&x, 4, 6, 4, 10, 10, "x"), DL_OK);
  gc_fill_uniform(&x, 4, -1.0f, 1.0f);
  dl_ctx ctx = gc_ctx();
  assert_int_equal(l.ops->forward(&l, &ctx, &x, y), DL_OK);
  assert_int_equal(dl_tensor_f32(&dy, 4, 6, 8, 10, 10, "dy"), DL_OK);
  gc_fill_uniform(&dy, 6, -1.0f, 1.0f);
  assert_int_equal(l.ops->backward(&l, &ctx, &x, y, &dy, dx), DL_OK);
  assert_int_equal(dl_tensor_clone(dw, &l.params[0].grad, "dw"), DL_OK);
  dl_tensor_free(&x);
  dl_tensor_free(&dy);
  dl_layer_destroy(&l);
}

static void results_do_not_depend_on_thread_count(void **state) {
  (void)state;
  dl_tensor y1 = {0}, dx1 = {0}, dw1 = {0}, y3 = {0}, dx3 = {0}, dw3 = {0};
  run_with_threads(1, &y1, &dx1, &dw1);
  run_with_threads(3, &y3, &dx3, &dw3);
  assert_int_equal(dl_set_num_threads(1), DL_OK);
  assert_memory_equal(dl_f32(&y1), dl_f32(&y3), dl_tensor_bytes(&y1));
  assert_memory_equal(dl_f32(&dx1), dl_f32(&dx3), dl_tensor_bytes(&dx1));
  assert_memory_equal(dl_f32(&dw1), dl_f32(&dw3), dl_tensor_bytes(&dw1));
  dl_tensor *all[] = {&y1, &dx1, &dw1, &y3, &dx3, &dw3};
  for (int i = 0; i < 6; i++) dl_tensor_free(all[i]);
  dl_threads_shutdown();
}

static void init_and_accumulation(void **state) {
  (void)state;
  dl_layer l;
  dl_layer_desc d = conv_desc(2, 4, 3, 1, 0, true);
  assert_int_equal(dl_layer_init(&l, &d, "1.", 0, 5), DL_OK);
  assert_string_equal(l.params[0].name, "1.weight");
  assert_int_equal(l.params[0].value.ndim, 4);
  const float bound = (float)(1.0 / sqrt(18.0)); /* 1/sqrt(C*k*k) */
  for (int p = 0; p < 2; p++)
    for (int64_t i = 0; i < l.params[p].value.numel; i++)
      assert_true(fabsf(dl_f32(&l.params[p].value)[i]) <= bound);
  dl_tensor x = {0}, y = {0}, dy = {0}, once = {0};
  assert_int_equal(dl_tensor_f32(&x, 4, 2, 2, 4, 4, "x"), DL_OK);
  gc_fill_uniform(&x, 1, -1.0f, 1.0f);
  dl_ctx ctx = gc_ctx();
  for (int round = 0; round < 2; round++) {
    assert_int_equal(l.ops->forward(&l, &ctx, &x, &y), DL_OK);
    if (!dy.data) {
      assert_int_equal(dl_tensor_alloc(&dy, DL_F32, 4, y.shape, "dy"), DL_OK);
      gc_fill_uniform(&dy, 2, -1.0f, 1.0f);
    }
    assert_int_equal(l.ops->backward(&l, &ctx, &x, &y, &dy, NULL), DL_OK);
    dl_tensor_free(&y);
    if (round == 0) assert_int_equal(dl_tensor_clone(&once, &l.params[0].grad, "g"), DL_OK);
  }
  for (int64_t i = 0; i < once.numel; i++)
    assert_true(dl_f32(&l.params[0].grad)[i] == 2.0f * dl_f32(&once)[i]);
  dl_tensor_free(&x);
  dl_tensor_free(&dy);
  dl_tensor_free(&once);
  dl_layer_destroy(&l);
}

static void bad_input_and_desc_are_refused(void **state) {
  (void)state;
  dl_layer l;
  dl_layer_desc d = conv_desc(3, 4, 0, 1, 0, true);
  assert_int_equal(dl_layer_init(&l, &d, "2.", 0, 1), DL_ERR_INVALID);
  assert_non_null(strstr(dl_last_error(), "layer 2 (conv2d): kernel must be > 0, got 0"));
  d = conv_desc(3, 4, 3, 0, 0, true);
  assert_int_equal(dl_layer_init(&l, &d, "2.", 0, 1), DL_ERR_INVALID);
  assert_non_null(strstr(dl_last_error(), "stride must be > 0"));
  d = conv_desc(3, 4, 3, 1, -1, true);
  assert_int_equal(dl_layer_init(&l, &d, "2.", 0, 1), DL_ERR_INVALID);
  assert_non_null(strstr(dl_last_error(), "padding must be >= 0"));
  d = conv_desc(0, 4, 3, 1, 0, true);
  assert_int_equal(dl_layer_init(&l, &d, "2.", 0, 1), DL_ERR_INVALID);
  assert_non_null(strstr(dl_last_error(), "in_channels"));
  d = conv_desc(3, 4, 3, 1, 0, true);
  assert_int_equal(dl_layer_init(&l, &d, "2.", 0, 1), DL_OK);
  dl_tensor x = {0}, y = {0};
  dl_ctx ctx = gc_ctx();
  assert_int_equal(dl_tensor_f32(&x, 4, 1, 2, 5, 5, "x"), DL_OK);
  assert_int_equal(l.ops->forward(&l, &ctx, &x, &y), DL_ERR_INVALID);
  assert_non_null(strstr(dl_last_error(), "[1, 2, 5, 5] float32"));
  assert_non_null(strstr(dl_last_error(), "[N, 3, H, W]"));
  dl_tensor_free(&x);
  assert_int_equal(dl_tensor_f32(&x, 4, 1, 3, 2, 5, "x"), DL_OK);
  assert_int_equal(l.ops->forward(&l, &ctx, &x, &y), DL_ERR_INVALID);
  assert_non_null(strstr(dl_last_error(), "smaller than kernel 3"));
  assert_null(y.data);
  dl_tensor_free(&x);
  dl_layer_destroy(&l);
}

static void allocation_failures_leak_nothing(void **state) {
  (void)state;
  dl_layer_desc d = conv_desc(2, 3, 3, 1, 1, true);
  dl_tensor x = {0}, dy = {0};
  assert_int_equal(dl_tensor_f32(&x, 4, 2, 2, 4, 4, "x"), DL_OK);
  assert_int_equal(dl_tensor_f32(&dy, 4, 2, 3, 4, 4, "dy"), DL_OK);
  int failures = gc_nomem_failures(&d, "", &x, &dy, DL_BF16, true);
  if (failures < 8) fail_msg("%d allocations checked: %s", failures, gc_last_report);
  dl_tensor_free(&x);
  dl_tensor_free(&dy);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(gradients_match_finite_differences),
      cmocka_unit_test(forward_equals_direct_convolution_bitwise),
      cmocka_unit_test(autocast_forward_equals_rounded_direct_convolution),
      cmocka_unit_test(backward_equals_direct_sums_bitwise),
      cmocka_unit_test(frozen_weight_or_bias_keeps_the_other_sums),
      cmocka_unit_test(autocast_param_grads_are_rounded),
      cmocka_unit_test(results_do_not_depend_on_thread_count),
      cmocka_unit_test(init_and_accumulation),
      cmocka_unit_test(bad_input_and_desc_are_refused),
      cmocka_unit_test(misshapen_output_gradients_are_refused),
      cmocka_unit_test(allocation_failures_leak_nothing),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
