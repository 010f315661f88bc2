/* ReLU, GELU (erf and tanh forms) and Tanh (engine/nn/kinds/activations.c):
 * values and derivatives against double-precision formulas (libm's double
 * functions, fine in a test), gradients against finite differences, PyTorch's
 * edge cases, AMP rounding, errors and thread-count independence. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "gradcheck.h"
#include "numerics/half.h"
#include "core/mem.h"
#include "core/threads.h"

static const double kPi = 3.14159265358979323846;

static void make_act(dl_layer *l, dl_layer_kind kind, bool gelu_tanh) {
  dl_layer_desc d = dl_layer_default(kind);
  d.gelu_tanh = gelu_tanh;
  assert_int_equal(dl_layer_init(l, &d, "6.", 0, 1), DL_OK);
}

/* Distance of v from the double reference, in units of the float ulp at
 * the reference. */
static double ulps(float v, double ref) {
  double a = fabs(ref);
  int e;
  frexp(a < 0x1p-126 ? 0x1p-126 : a, &e);
  return fabs((double)v - ref) / ldexp(1.0, e - 24);
}

static double ref_gelu_erf(double x) { return 0.5 * x * erfc(-x / sqrt(2.0)); }
static double ref_gelu_tanh(double x) {
  double u = sqrt(2.0 / kPi) * (x + 0.044715 * x * x * x);
  return 0.5 * x * (1.0 + tanh(u));
}
static double ref_dgelu_erf(double x) {
  return 0.5 * erfc(-x / sqrt(2.0)) + x * exp(-0.5 * x * x) / sqrt(2.0 * kPi);
}
static double ref_dgelu_tanh(double x) {
  double k = sqrt(2.0 / kPi), u = k * (x + 0.044715 * x * x * x), t = tanh(u);
  return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * k * (1.0 + 3.0 * 0.044715 * x * x);
}

/* x on a fine grid over [-10, 10] plus tiny and huge magnitudes. */
enum { NSTEPS = 40001, NGRID = NSTEPS + 6 };
static void grid(dl_tensor *x) {
  assert_int_equal(dl_tensor_f32(x, 1, NGRID, 0, 0, 0, "x"), DL_OK);
  for (int i = 0; i < NSTEPS; i++) dl_f32(x)[i] = -10.0f + 0.0005f * (float)i;
  const float extra[6] = {1e-30f, -1e-30f, 1e-6f, -1e-6f, 30.0f, -30.0f};
  memcpy(dl_f32(x) + NSTEPS, extra, sizeof extra);
}

static void run(dl_layer *l, const dl_ctx *ctx, const dl_tensor *x, dl_tensor *y, dl_tensor *dx) {
  dl_tensor dy = {0};
  assert_int_equal(l->ops->forward(l, ctx, x, y), DL_OK);
  assert_int_equal(dl_tensor_clone(&dy, x, "dy"), DL_OK);
  for (int64_t i = 0; i < dy.numel; i++) dl_f32(&dy)[i] = 1.0f;
  assert_int_equal(l->ops->backward(l, ctx, x, y, &dy, dx), DL_OK);
  dl_tensor_free(&dy);
}

/* |v - ref| within `n` float ulps of ref, or (for x < 0, see below) within
 * the absolute bound 4 * 2^-24 * max(1, |x|). */
static bool gelu_close(float v, double ref, double x, double n) {
  if (ulps(v, ref) <= n) return true;
  return x < 0 && fabs((double)v - ref) <= 4.0 * 0x1p-24 * fmax(1.0, fabs(x));
}

/* GELU, both forms, and their derivatives against double formulas.
 * Tolerance: values 4 ulp, derivatives 8 ulp (measured: 1.7 and 4.7 with a
 * correctly rounded erf/tanh; dl_erff/dl_tanhf may add 1 ulp each, and the
 * derivative chains ~10 float operations). For x < 0 also accepted: an
 * absolute error of 4 * 2^-24 * max(1, |x|) (measured 1.8): PyTorch's float
 * formula forms 1 + erf(x/sqrt2) and 1 + tanh(u), which cancel there, so
 * erf's own error of about 2^-24 near -1 is multiplied by 0.5|x|; the
 * derivative cdf + x * pdf cancels the same way. Mixing up the forms is
 * off by up to 4.7e-4, a wrong derivative by O(0.1). */
static void gelu_matches_double_formulas(void **state) {
  (void)state;
  dl_ctx ctx = gc_ctx();
  dl_tensor x = {0};
  grid(&x);
  for (int form = 0; form < 2; form++) {
    dl_layer l;
    dl_tensor y = {0}, dx = {0};
    make_act(&l, DL_GELU, form == 1);
    run(&l, &ctx, &x, &y, &dx);
    for (int64_t i = 0; i < x.numel; i++) {
      double xv = dl_f32(&x)[i];
      double ry = form ? ref_gelu_tanh(xv) : ref_gelu_erf(xv);
      double rd = form ? ref_dgelu_tanh(xv) : ref_dgelu_erf(xv);
      float vy = dl_f32(&y)[i], vd = dl_f32(&dx)[i];
      if (!gelu_close(vy, ry, xv, 4.0) || !gelu_close(vd, rd, xv, 8.0))
        print_error("form %d x %.9g: y %.9g ref %.9g, dy %.9g ref %.9g\n", form, xv, (double)vy, ry,
                    (double)vd, rd);
      assert_true(gelu_close(vy, ry, xv, 4.0));
      assert_true(gelu_close(vd, rd, xv, 8.0));
    }
    dl_tensor_free(&y);
    dl_tensor_free(&dx);
    dl_layer_destroy(&l);
  }
  dl_tensor_free(&x);
}

/* Tanh within 2 ulp of libm's double tanh (dl_tanhf is within 1 ulp of
 * the correctly rounded value, which is within 0.5 ulp of tanh). Its
 * derivative 1 - y^2, from the float output as PyTorch computes it, within
 * 4 ulp or 4 * 2^-24 absolute: 1 - y^2 cancels as |y| -> 1, leaving
 * 2|y| times y's error (<= 1.5 ulp of 1, 2^-24 each) plus the rounding of
 * y*y; measured 1.5 * 2^-24 with a correctly rounded tanh. */
static void tanh_matches_double_formula(void **state) {
  (void)state;
  dl_ctx ctx = gc_ctx();
  dl_tensor x = {0}, y = {0}, dx = {0};
  grid(&x);
  dl_layer l;
  make_act(&l, DL_TANH, false);
  run(&l, &ctx, &x, &y, &dx);
  for (int64_t i = 0; i < x.numel; i++) {
    double xv = dl_f32(&x)[i], t = tanh(xv);
    assert_true(ulps(dl_f32(&y)[i], t) <= 2.0);
    double rd = 1.0 - t * t;
    assert_true(ulps(dl_f32(&dx)[i], rd) <= 4.0 || fabs(dl_f32(&dx)[i] - rd) <= 4 * 0x1p-24);
  }
  dl_tensor_free(&x);
  dl_tensor_free(&y);
  dl_tensor_free(&dx);
  dl_layer_destroy(&l);
}

/* PyTorch's edge cases: relu(-0) = -0, relu(NaN) = NaN, gradient 0 at
 * x == 0 (threshold_backward on the output), gelu(-0) = -0, tanh(-0) = -0. */
static void relu_gelu_tanh_edge_cases(void **state) {
  (void)state;
  dl_ctx ctx = gc_ctx();
  const float in[5] = {-0.0f, NAN, 0.0f, -1.5f, 2.5f};
  dl_tensor x = {0};
  assert_int_equal(dl_tensor_f32(&x, 1, 5, 0, 0, 0, "x"), DL_OK);
  memcpy(x.data, in, sizeof in);
  dl_layer l;
  dl_tensor y = {0}, dx = {0};
  make_act(&l, DL_RELU, false);
  run(&l, &ctx, &x, &y, &dx);
  const float *v = dl_f32(&y), *g = dl_f32(&dx);
  assert_true(v[0] == 0.0f && signbit(v[0]));
  assert_true(isnan(v[1]));
  assert_true(v[2] == 0.0f && !signbit(v[2]) && v[3] == 0.0f && v[4] == 2.5f);
  assert_true(g[0] == 0.0f && g[1] == 0.0f && g[2] == 0.0f && g[3] == 0.0f && g[4] == 1.0f);
  dl_tensor_free(&y);
  dl_tensor_free(&dx);
  dl_layer_destroy(&l);
  for (int k = 0; k < 3; k++) {
    make_act(&l, k == 2 ? DL_TANH : DL_GELU, k == 1);
    run(&l, &ctx, &x, &y, &dx);
    assert_true(dl_f32(&y)[0] == 0.0f && signbit(dl_f32(&y)[0]));
    assert_true(isnan(dl_f32(&y)[1]));
    dl_tensor_free(&y);
    dl_tensor_free(&dx);
    dl_layer_destroy(&l);
  }
  dl_tensor_free(&x);
}

/* The same rules through the 16-wide blocks and the tail: 37 elements
 * cycling through signed zeros, NaN, infinities and subnormals, each
 * compared bitwise with the rule (x < 0 ? 0 : x; dy where y > 0). */
static void relu_blocks_keep_the_edge_cases(void **state) {
  (void)state;
  const float special[9] = {-0.0f, NAN, 0.0f, -1.5f, 2.5f, -INFINITY, INFINITY, 1e-45f, -1e-45f};
  enum { N = 37 };
  dl_tensor x = {0};
  assert_int_equal(dl_tensor_f32(&x, 2, 1, N, 0, 0, "x"), DL_OK);
  for (int i = 0; i < N; i++) dl_f32(&x)[i] = special[(i * 5) % 9];
  dl_ctx ctx = gc_ctx();
  dl_layer l;
  dl_tensor y = {0}, dx = {0};
  make_act(&l, DL_RELU, false);
  run(&l, &ctx, &x, &y, &dx);
  for (int i = 0; i < N; i++) {
    const float v = dl_f32(&x)[i], want = v < 0.0f ? 0.0f : v;
    assert_memory_equal(&want, &dl_f32(&y)[i], sizeof want);
    const float dy = 1.0f; /* run() feeds ones */
    const float want_dx = want > 0.0f ? dy : 0.0f;
    assert_memory_equal(&want_dx, &dl_f32(&dx)[i], sizeof want_dx);
  }
  dl_tensor_free(&y);
  dl_tensor_free(&dx);
  dl_tensor_free(&x);
  dl_layer_destroy(&l);
}

/* Finite differences for every kind over several shapes, training and eval
 * (activations ignore the mode; both are run because models switch).
 * ReLU inputs stay at least 0.1 away from the kink, more than the step 2h.
 * Tolerance 1e-2: see tests/gradcheck.h. */
static void gradcheck_every_kind(void **state) {
  (void)state;
  const int64_t shapes[3][4] = {{3, 5, 0, 0}, {2, 3, 4, 0}, {2, 2, 2, 3}};
  const int ndims[3] = {2, 3, 4};
  for (int k = 0; k < 4; k++) {
    dl_layer_desc d = dl_layer_default(k == 0 ? DL_RELU : k == 3 ? DL_TANH : DL_GELU);
    d.gelu_tanh = k == 2;
    for (int s = 0; s < 3; s++) {
      dl_tensor x = {0};
      assert_int_equal(dl_tensor_f32(&x, ndims[s], shapes[s][0], shapes[s][1], shapes[s][2],
                                     shapes[s][3], "x"),
                       DL_OK);
      gc_fill_uniform(&x, 40 + s, 0.1f, 2.5f);
      for (int64_t i = 0; i < x.numel; i += 2) dl_f32(&x)[i] = -dl_f32(&x)[i];
      for (int training = 1; training >= 0; training--) {
        double err = gc_layer_max_error(&d, &x, training);
        if (!(err < 1e-2)) print_error("kind %d shape %d: %g (%s)\n", k, s, err, gc_last_report);
        assert_true(err < 1e-2);
      }
      dl_tensor_free(&x);
    }
  }
}

/* Under autocast the outputs are rounded to the half dtype, exactly as
 * rounding the float32 result would; gradients stay float32. */
static void autocast_rounds_outputs_to_half(void **state) {
  (void)state;
  dl_tensor x = {0};
  assert_int_equal(dl_tensor_f32(&x, 2, 8, 32, 0, 0, "x"), DL_OK);
  gc_fill_uniform(&x, 3, -3.0f, 3.0f);
  for (int k = 0; k < 3; k++) {
    dl_layer l;
    make_act(&l, k == 0 ? DL_RELU : k == 1 ? DL_GELU : DL_TANH, false);
    for (int half = DL_F16; half <= DL_BF16; half++) {
      dl_ctx ctx = gc_ctx(), amp = gc_ctx();
      amp.autocast = (dl_dtype)half;
      dl_tensor y = {0}, yh = {0};
      assert_int_equal(l.ops->forward(&l, &ctx, &x, &y), DL_OK);
      assert_int_equal(l.ops->forward(&l, &amp, &x, &yh), DL_OK);
      int changed = 0;
      for (int64_t i = 0; i < x.numel; i++) {
        float a = dl_f32(&y)[i], h = dl_f32(&yh)[i];
        assert_true(h == (half == DL_F16 ? dl_round_f16(a) : dl_round_bf16(a)));
        changed += h != a;
      }
      assert_true(changed > 0);
      dl_tensor_free(&y);
      dl_tensor_free(&yh);
    }
    dl_layer_destroy(&l);
  }
  dl_tensor_free(&x);
}

/* 3 * 4096 + 17 elements split into several chunks: the same bits with 1
 * and 2 threads, forward and backward. */
static void bitwise_same_with_one_and_two_threads(void **state) {
  (void)state;
  dl_tensor x = {0};
  assert_int_equal(dl_tensor_f32(&x, 1, 3 * 4096 + 17, 0, 0, 0, "x"), DL_OK);
  gc_fill_uniform(&x, 4, -5.0f, 5.0f);
  dl_ctx ctx = gc_ctx();
  for (int k = 0; k < 3; k++) {
    dl_tensor y[2] = {{0}, {0}}, dx[2] = {{0}, {0}};
    dl_layer l;
    make_act(&l, k == 0 ? DL_RELU : k == 1 ? DL_GELU : DL_TANH, false);
    for (int t = 0; t < 2; t++) {
      assert_int_equal(dl_set_num_threads(t + 1), DL_OK);
      run(&l, &ctx, &x, &y[t], &dx[t]);
    }
    assert_int_equal(dl_set_num_threads(1), DL_OK);
    assert_memory_equal(y[0].data, y[1].data, dl_tensor_bytes(&x));
    assert_memory_equal(dx[0].data, dx[1].data, dl_tensor_bytes(&x));
    for (int t = 0; t < 2; t++) {
      dl_tensor_free(&y[t]);
      dl_tensor_free(&dx[t]);
    }
    dl_layer_destroy(&l);
  }
  dl_tensor_free(&x);
  dl_threads_shutdown();
}

/* A grad-mode forward keeps erf(x / sqrt 2) for the backward; without it
 * (a no-grad forward, or no memory for it) the backward computes erf again:
 * dx has the same bits all three ways. */
static void gelu_backward_same_bits_with_or_without_kept_erf(void **state) {
  (void)state;
  dl_layer l;
  make_act(&l, DL_GELU, false);
  dl_ctx ctx = gc_ctx(), nograd = gc_ctx();
  nograd.grad_enabled = false;
  dl_tensor x = {0}, y[3] = {{0}}, dx[3] = {{0}};
  grid(&x);
  run(&l, &ctx, &x, &y[0], &dx[0]);
  assert_false(dl_tensor_empty(&l.saved[0]));
  run(&l, &nograd, &x, &y[1], &dx[1]);
  assert_true(dl_tensor_empty(&l.saved[0]));
  dl_mem_fail_after(2); /* the output is had, the kept erf is not */
  run(&l, &ctx, &x, &y[2], &dx[2]);
  dl_mem_fail_after(0);
  assert_true(dl_tensor_empty(&l.saved[0]));
  for (int i = 1; i < 3; i++) {
    assert_memory_equal(y[0].data, y[i].data, dl_tensor_bytes(&x));
    assert_memory_equal(dx[0].data, dx[i].data, dl_tensor_bytes(&x));
  }
  for (int i = 0; i < 3; i++) {
    dl_tensor_free(&y[i]);
    dl_tensor_free(&dx[i]);
  }
  dl_tensor_free(&x);
  dl_layer_destroy(&l);
}

/* Handed dx == dy (layer.h: backward_in_place, as seq.c does), every kind
 * writes the bits it writes into a fresh dx, at 1 and 2 threads; dy varies
 * per element, so a loop that read dy after writing dx would show. */
static void backward_in_place_same_bits(void **state) {
  (void)state;
  const struct {
    dl_layer_kind kind;
    bool gelu_tanh;
  } kinds[] = {{DL_RELU, false}, {DL_GELU, false}, {DL_GELU, true}, {DL_TANH, false}};
  for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++)
    for (int threads = 1; threads <= 2; threads++) {
      assert_int_equal(dl_set_num_threads(threads), DL_OK);
      dl_layer l;
      make_act(&l, kinds[k].kind, kinds[k].gelu_tanh);
      assert_true(l.ops->backward_in_place);
      dl_ctx ctx = gc_ctx();
      dl_tensor x = {0}, y = {0}, dy = {0}, dx = {0};
      grid(&x);
      assert_int_equal(l.ops->forward(&l, &ctx, &x, &y), DL_OK);
      assert_int_equal(dl_tensor_clone(&dy, &x, "dy"), DL_OK);
      for (int64_t i = 0; i < dy.numel; i++) dl_f32(&dy)[i] = 0.25f + 0.001f * (float)(i % 997);
      assert_int_equal(l.ops->backward(&l, &ctx, &x, &y, &dy, &dx), DL_OK);
      assert_int_equal(l.ops->backward(&l, &ctx, &x, &y, &dy, &dy), DL_OK);
      assert_memory_equal(dx.data, dy.data, dl_tensor_bytes(&x));
      dl_tensor_free(&x);
      dl_tensor_free(&y);
      dl_tensor_free(&dy);
      dl_tensor_free(&dx);
      dl_layer_destroy(&l);
    }
  assert_int_equal(dl_set_num_threads(1), DL_OK);
}

static void bad_input_and_allocation_failures(void **state) {
  (void)state;
  dl_layer l;
  make_act(&l, DL_GELU, false);
  dl_ctx ctx = gc_ctx();
  dl_tensor ids = {0}, x = {0}, y = {0}, dx = {0}, other = {0};
  int64_t n[1] = {4};
  assert_int_equal(dl_tensor_alloc(&ids, DL_I32, 1, n, "ids"), DL_OK);
  assert_int_equal(l.ops->forward(&l, &ctx, &ids, &y), DL_ERR_INVALID);
  assert_non_null(strstr(dl_last_error(), "layer 6 (gelu): input is [4] int32; expected float32"));
  assert_int_equal(dl_tensor_f32(&x, 1, 4, 0, 0, 0, "x"), DL_OK);
  assert_int_equal(dl_tensor_f32(&other, 1, 5, 0, 0, 0, "dy"), DL_OK);
  assert_int_equal(l.ops->forward(&l, &ctx, &x, &y), DL_OK);
  assert_int_equal(l.ops->backward(&l, &ctx, &x, &y, &other, &dx), DL_ERR_INVALID);
  assert_non_null(strstr(dl_last_error(), "output gradient is"));
  assert_int_equal(l.ops->backward(&l, &ctx, &x, &y, &ids, &dx), DL_ERR_INVALID);
  assert_non_null(strstr(dl_last_error(), "output gradient is [4] int32"));
  assert_int_equal(l.ops->backward(&l, &ctx, &x, &y, &x, NULL), DL_OK);
  dl_mem_fail_after(1);
  assert_int_equal(l.ops->backward(&l, &ctx, &x, &y, &x, &dx), DL_ERR_NOMEM);
  assert_non_null(strstr(dl_last_error(), "layer 6 (gelu)"));
  dl_tensor_free(&y);
  dl_mem_fail_after(1);
  assert_int_equal(l.ops->forward(&l, &ctx, &x, &y), DL_ERR_NOMEM);
  dl_mem_fail_after(0);
  assert_true(dl_tensor_empty(&y) && dl_tensor_empty(&dx));
  dl_tensor_free(&ids);
  dl_tensor_free(&x);
  dl_tensor_free(&other);
  dl_layer_destroy(&l);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(gelu_matches_double_formulas),
      cmocka_unit_test(tanh_matches_double_formula),
      cmocka_unit_test(relu_gelu_tanh_edge_cases),
      cmocka_unit_test(relu_blocks_keep_the_edge_cases),
      cmocka_unit_test(gradcheck_every_kind),
      cmocka_unit_test(autocast_rounds_outputs_to_half),
      cmocka_unit_test(bitwise_same_with_one_and_two_threads),
      cmocka_unit_test(gelu_backward_same_bits_with_or_without_kept_erf),
      cmocka_unit_test(backward_in_place_same_bits),
      cmocka_unit_test(bad_input_and_allocation_failures),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
