/* Losses (engine/nn/loss.c): cross-entropy and MSE values and gradients against
 * a double-precision reference written here with libm (independent of the
 * engine's fmath), against finite differences, and against values PyTorch
 * 1.13 computed in float64. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <string.h>
#include <cmocka.h>

#include "numerics/half.h"
#include "nn/loss.h"
#include "core/mem.h"

/* Deterministic pseudo-random values in [-3, 3). */
static float noise(uint32_t *s) {
  *s = *s * 1664525u + 1013904223u;
  return (float)((*s >> 8) * (6.0 / 16777216.0) - 3.0);
}

static void fill(dl_tensor *t, uint32_t seed) {
  for (int64_t i = 0; i < t->numel; i++) dl_f32(t)[i] = noise(&seed);
}

static void make_i32(dl_tensor *t, int ndim, const int64_t *shape, const int32_t *v) {
  assert_int_equal(dl_tensor_alloc(t, DL_I32, ndim, shape, "targets"), DL_OK);
  memcpy(t->data, v, (size_t)t->numel * sizeof *v);
}

/* Reference per-row loss and gradient (before reduction scaling) in double. */
static double ref_row(const float *z, int c, int target, double eps, double *dz) {
  double m = z[0], s = 0.0, smooth = 0.0;
  for (int k = 1; k < c; k++) m = z[k] > m ? z[k] : m;
  for (int k = 0; k < c; k++) s += exp(z[k] - m);
  for (int k = 0; k < c; k++) smooth -= z[k] - m - log(s);
  for (int k = 0; k < c; k++) dz[k] = exp(z[k] - m) / s - eps / c - (k == target ? 1.0 - eps : 0.0);
  return (1.0 - eps) * -(z[target] - m - log(s)) + eps / c * smooth;
}

/* Mean reduction, smoothing, ignore_index: loss within 2e-6 relative (the
 * float rounding of the result plus dl_expf/dl_logf's 1-ulp float error on
 * each term), gradient within 1e-6 absolute (same reasons; |dz| <= 1). */
static void ce_matches_double_reference(void **state) {
  (void)state;
  enum { N = 6, C = 7 };
  dl_tensor x = {0}, t = {0}, dx = {0};
  assert_int_equal(dl_tensor_f32(&x, 2, N, C, 0, 0, "logits"), DL_OK);
  fill(&x, 7);
  const int32_t tv[N] = {3, 0, -100, 6, 2, 5};
  make_i32(&t, 1, (int64_t[]){N}, tv);
  dl_ce_desc d = dl_ce_default();
  d.label_smoothing = 0.1f;
  float loss;
  assert_int_equal(dl_cross_entropy(&d, &x, &t, &loss, NULL, &dx), DL_OK);
  double want = 0.0, dref[N][C] = {{0}};
  for (int r = 0; r < N; r++)
    if (tv[r] != -100) want += ref_row(dl_f32(&x) + r * C, C, tv[r], 0.1, dref[r]);
  want /= 5.0;
  assert_true(fabs(loss - want) <= 2e-6 * fabs(want));
  for (int r = 0; r < N; r++)
    for (int k = 0; k < C; k++)
      assert_true(fabs(dl_f32(&dx)[r * C + k] - dref[r][k] / 5.0) <= 1e-6);
  dl_tensor_free(&x);
  dl_tensor_free(&t);
  dl_tensor_free(&dx);
}

/* Rows are summed several at a time (independent chains, ignored rows
 * skipped): 19 rows, 4 of them ignored, give each row the loss and
 * gradient bits it gets alone. */
static void ce_rows_together_equal_rows_alone(void **state) {
  (void)state;
  enum { N = 19, C = 11 };
  dl_tensor x = {0}, t = {0}, per_row = {0}, dx = {0};
  assert_int_equal(dl_tensor_f32(&x, 2, N, C, 0, 0, "logits"), DL_OK);
  fill(&x, 13);
  int32_t tv[N];
  for (int r = 0; r < N; r++) tv[r] = r % 5 == 2 ? -100 : r % C;
  make_i32(&t, 1, (int64_t[]){N}, tv);
  dl_ce_desc d = dl_ce_default();
  d.reduction = DL_REDUCTION_NONE;
  d.label_smoothing = 0.05f;
  float loss;
  assert_int_equal(dl_cross_entropy(&d, &x, &t, &loss, &per_row, &dx), DL_OK);
  for (int r = 0; r < N; r++) {
    dl_tensor x1 = {0}, t1 = {0}, p1 = {0}, dx1 = {0};
    assert_int_equal(dl_tensor_f32(&x1, 2, 1, C, 0, 0, "row"), DL_OK);
    memcpy(x1.data, dl_f32(&x) + r * C, C * sizeof(float));
    make_i32(&t1, 1, (int64_t[]){1}, &tv[r]);
    assert_int_equal(dl_cross_entropy(&d, &x1, &t1, &loss, &p1, &dx1), DL_OK);
    assert_memory_equal(p1.data, dl_f32(&per_row) + r, sizeof(float));
    assert_memory_equal(dx1.data, dl_f32(&dx) + r * C, C * sizeof(float));
    dl_tensor_free(&x1);
    dl_tensor_free(&t1);
    dl_tensor_free(&p1);
    dl_tensor_free(&dx1);
  }
  dl_tensor_free(&x);
  dl_tensor_free(&t);
  dl_tensor_free(&per_row);
  dl_tensor_free(&dx);
}

/* Rows wider than the row maximum's lanes (37 classes: two blocks of 16
 * and a tail of 5), the maximum in a block, in the tail, exactly 0 (the
 * sign of zero comes from the scalar loop), and a NaN in a block or the
 * tail: per-row losses against ref_row within 2e-6 relative (as above),
 * NaN rows NaN. */
static void ce_wide_rows_maximum(void **state) {
  (void)state;
  enum { N = 5, C = 37 };
  dl_tensor x = {0}, t = {0}, per_row = {0};
  assert_int_equal(dl_tensor_f32(&x, 2, N, C, 0, 0, "logits"), DL_OK);
  fill(&x, 11);
  float *z = dl_f32(&x);
  z[0 * C + 20] = 9.0f; /* in the second block */
  z[1 * C + 35] = 9.0f; /* in the tail */
  for (int k = 0; k < C; k++) z[2 * C + k] = -fabsf(z[2 * C + k]);
  z[2 * C + 3] = -0.0f;
  z[2 * C + 30] = 0.0f;
  z[3 * C + 7] = NAN;
  z[4 * C + 36] = NAN;
  make_i32(&t, 1, (int64_t[]){N}, (const int32_t[]){1, 2, 3, 4, 5});
  dl_ce_desc d = dl_ce_default();
  d.reduction = DL_REDUCTION_NONE;
  float loss;
  assert_int_equal(dl_cross_entropy(&d, &x, &t, &loss, &per_row, NULL), DL_OK);
  double dz[C];
  for (int r = 0; r < 3; r++) {
    double want = ref_row(z + r * C, C, r + 1, 0.0, dz);
    assert_true(fabs(dl_f32(&per_row)[r] - want) <= 2e-6 * fabs(want));
  }
  assert_true(isnan(dl_f32(&per_row)[3]) && isnan(dl_f32(&per_row)[4]));
  dl_tensor_free(&x);
  dl_tensor_free(&t);
  dl_tensor_free(&per_row);
}

/* PyTorch 1.13, float64:
 *   F.cross_entropy([[1,2,.5],[.1,-1,2],[3,0,-2]], [2,-100,0],
 *                   label_smoothing=0.3) = 1.309677009742546
 * and its gradient. Float32 inputs are exact here, so the only error is the
 * float computation: 2e-6 relative on the loss, 1e-6 absolute on grads. */
static void ce_matches_pytorch_smoothing_example(void **state) {
  (void)state;
  dl_tensor x = {0}, t = {0}, dx = {0}, rows = {0};
  assert_int_equal(dl_tensor_f32(&x, 2, 3, 3, 0, 0, "logits"), DL_OK);
  const float xv[9] = {1.0f, 2.0f, 0.5f, 0.1f, -1.0f, 2.0f, 3.0f, 0.0f, -2.0f};
  memcpy(x.data, xv, sizeof xv);
  make_i32(&t, 1, (int64_t[]){3}, (const int32_t[]){2, -100, 0});
  dl_ce_desc d = dl_ce_default();
  d.label_smoothing = 0.3f;
  float loss;
  assert_int_equal(dl_cross_entropy(&d, &x, &t, &loss, NULL, &dx), DL_OK);
  assert_true(fabs(loss - 1.309677009742546) <= 2e-6 * 1.31);
  const double want[9] = {0.065611948811, 0.264265859606,  -0.329877808417, 0, 0, 0,
                          0.073249561276, -0.026438291738, -0.046811269539};
  for (int i = 0; i < 9; i++) assert_true(fabs(dl_f32(&dx)[i] - want[i]) <= 1e-6);
  /* reduction none: PyTorch's per-row losses, 0 for the ignored row. */
  d.reduction = DL_REDUCTION_NONE;
  assert_int_equal(dl_cross_entropy(&d, &x, &t, &loss, &rows, NULL), DL_OK);
  assert_true(fabs(dl_f32(&rows)[0] - 1.764368784108) <= 2e-6 * 1.77);
  assert_true(dl_f32(&rows)[1] == 0.0f);
  assert_true(fabs(dl_f32(&rows)[2] - 0.854985235377) <= 2e-6);
  assert_true(fabs(loss - (1.764368784108 + 0.854985235377)) <= 5e-6);
  dl_tensor_free(&x);
  dl_tensor_free(&t);
  dl_tensor_free(&dx);
  dl_tensor_free(&rows);
}

/* By hand: logits [0, ln 3] give p = [1/4, 3/4]; target 0, eps 0.1:
 * loss = 0.9 ln 4 + 0.1 (ln 4 + ln 4/3) / 2 = 1.3313637466864852,
 * dlogits = [1/4 - 0.05 - 0.9, 3/4 - 0.05] = [-0.7, 0.7]. */
static void ce_hand_computed_smoothing(void **state) {
  (void)state;
  dl_tensor x = {0}, t = {0}, dx = {0};
  assert_int_equal(dl_tensor_f32(&x, 2, 1, 2, 0, 0, "logits"), DL_OK);
  dl_f32(&x)[1] = (float)log(3.0);
  make_i32(&t, 1, (int64_t[]){1}, (const int32_t[]){0});
  dl_ce_desc d = dl_ce_default();
  d.label_smoothing = 0.1f;
  float loss;
  assert_int_equal(dl_cross_entropy(&d, &x, &t, &loss, NULL, &dx), DL_OK);
  /* 3e-7 relative: float rounding of ln 3 and of the result. */
  assert_true(fabs(loss - 1.3313637466864852) <= 3e-7 * 1.34);
  assert_true(fabs(dl_f32(&dx)[0] + 0.7) <= 1e-6);
  assert_true(fabs(dl_f32(&dx)[1] - 0.7) <= 1e-6);
  dl_tensor_free(&x);
  dl_tensor_free(&t);
  dl_tensor_free(&dx);
}

/* Central differences of the float loss (reduction sum, so that the signal
 * is large): h = 1e-2 makes truncation error O(h^2) ~ 1e-4 and rounding
 * error ~ 2 ulp(loss)/2h ~ 1e-4, so 1e-3 absolute separates a right
 * gradient from a wrong one (wrong ones are off by >= 1e-2 here). */
static void ce_gradient_matches_finite_differences(void **state) {
  (void)state;
  enum { N = 2, T = 3, C = 5 };
  dl_tensor x = {0}, t = {0}, dx = {0};
  assert_int_equal(dl_tensor_f32(&x, 3, N, T, C, 0, "logits"), DL_OK);
  fill(&x, 11);
  make_i32(&t, 2, (int64_t[]){N, T}, (const int32_t[]){4, 0, 2, -100, 1, 3});
  dl_ce_desc d = dl_ce_default();
  d.reduction = DL_REDUCTION_SUM;
  d.label_smoothing = 0.2f;
  float loss, lp, lm;
  assert_int_equal(dl_cross_entropy(&d, &x, &t, &loss, NULL, &dx), DL_OK);
  for (int i = 0; i < N * T * C; i++) {
    float keep = dl_f32(&x)[i];
    dl_f32(&x)[i] = keep + 1e-2f;
    assert_int_equal(dl_cross_entropy(&d, &x, &t, &lp, NULL, NULL), DL_OK);
    dl_f32(&x)[i] = keep - 1e-2f;
    assert_int_equal(dl_cross_entropy(&d, &x, &t, &lm, NULL, NULL), DL_OK);
    dl_f32(&x)[i] = keep;
    double fd = ((double)lp - (double)lm) / ((double)(keep + 1e-2f) - (double)(keep - 1e-2f));
    assert_true(fabs(fd - dl_f32(&dx)[i]) <= 1e-3);
  }
  dl_tensor_free(&x);
  dl_tensor_free(&t);
  dl_tensor_free(&dx);
}

/* [N, T, C] is N*T rows of [N*T, C]: bitwise the same loss and gradient. */
static void ce_sequence_equals_flat_rows(void **state) {
  (void)state;
  dl_tensor x = {0}, t = {0}, dx3 = {0}, dx2 = {0};
  assert_int_equal(dl_tensor_f32(&x, 3, 2, 4, 6, 0, "logits"), DL_OK);
  fill(&x, 5);
  const int32_t tv[8] = {1, 5, 0, 3, 3, -100, 2, 4};
  make_i32(&t, 2, (int64_t[]){2, 4}, tv);
  dl_ce_desc d = dl_ce_default();
  float l3, l2;
  assert_int_equal(dl_cross_entropy(&d, &x, &t, &l3, NULL, &dx3), DL_OK);
  assert_int_equal(dl_tensor_reshape(&x, 2, (int64_t[]){8, 6}), DL_OK);
  assert_int_equal(dl_tensor_reshape(&t, 1, (int64_t[]){8}), DL_OK);
  assert_int_equal(dl_cross_entropy(&d, &x, &t, &l2, NULL, &dx2), DL_OK);
  assert_true(l3 == l2);
  assert_int_equal(dx3.ndim, 3);
  assert_memory_equal(dx3.data, dx2.data, 48 * sizeof(float));
  dl_tensor_free(&x);
  dl_tensor_free(&t);
  dl_tensor_free(&dx3);
  dl_tensor_free(&dx2);
}

/* ignore_index inside [0, C) ignores that class's rows; all ignored with
 * mean gives NaN and zero gradient, as PyTorch. */
static void ce_ignore_index(void **state) {
  (void)state;
  dl_tensor x = {0}, t = {0}, t1 = {0}, x1 = {0}, dx = {0};
  assert_int_equal(dl_tensor_f32(&x, 2, 3, 4, 0, 0, "logits"), DL_OK);
  fill(&x, 3);
  make_i32(&t, 1, (int64_t[]){3}, (const int32_t[]){0, 2, 0});
  dl_ce_desc d = dl_ce_default();
  d.ignore_index = 0;
  float loss, only;
  assert_int_equal(dl_cross_entropy(&d, &x, &t, &loss, NULL, &dx), DL_OK);
  /* Equal to the loss of row 1 alone: same row, same arithmetic. */
  assert_int_equal(dl_tensor_f32(&x1, 2, 1, 4, 0, 0, "row"), DL_OK);
  memcpy(x1.data, dl_f32(&x) + 4, 4 * sizeof(float));
  make_i32(&t1, 1, (int64_t[]){1}, (const int32_t[]){2});
  assert_int_equal(dl_cross_entropy(&d, &x1, &t1, &only, NULL, NULL), DL_OK);
  assert_true(loss == only);
  for (int k = 0; k < 4; k++) {
    assert_true(dl_f32(&dx)[k] == 0.0f);
    assert_true(dl_f32(&dx)[8 + k] == 0.0f);
  }
  dl_tensor_free(&dx);
  dl_i32(&t)[1] = 0;
  assert_int_equal(dl_cross_entropy(&d, &x, &t, &loss, NULL, &dx), DL_OK);
  assert_true(isnan(loss));
  for (int i = 0; i < 12; i++) assert_true(dl_f32(&dx)[i] == 0.0f);
  d.reduction = DL_REDUCTION_SUM;
  assert_int_equal(dl_cross_entropy(&d, &x, &t, &loss, NULL, NULL), DL_OK);
  assert_true(loss == 0.0f);
  dl_tensor_free(&x);
  dl_tensor_free(&t);
  dl_tensor_free(&x1);
  dl_tensor_free(&t1);
  dl_tensor_free(&dx);
}

/* Row weights with sum: sum_r w_r loss_r (negative weights too), gradient
 * rows scaled by w_r and grad_scale: compared with the mean's gradient times
 * count * w_r * grad_scale, to 1e-6 relative (two float roundings). */
static void ce_row_weights_and_grad_scale(void **state) {
  (void)state;
  dl_tensor x = {0}, t = {0}, w = {0}, rows = {0}, dxw = {0}, dxm = {0};
  assert_int_equal(dl_tensor_f32(&x, 2, 4, 5, 0, 0, "logits"), DL_OK);
  fill(&x, 9);
  make_i32(&t, 1, (int64_t[]){4}, (const int32_t[]){1, 4, -100, 0});
  assert_int_equal(dl_tensor_f32(&w, 1, 4, 0, 0, 0, "w"), DL_OK);
  const float wv[4] = {0.5f, 2.0f, 7.0f, -1.0f};
  memcpy(w.data, wv, sizeof wv);
  dl_ce_desc d = dl_ce_default();
  d.reduction = DL_REDUCTION_NONE;
  float loss, sum_none;
  assert_int_equal(dl_cross_entropy(&d, &x, &t, &sum_none, &rows, NULL), DL_OK);
  d.reduction = DL_REDUCTION_SUM;
  d.row_weight = &w;
  d.grad_scale = 4.0f;
  assert_int_equal(dl_cross_entropy(&d, &x, &t, &loss, NULL, &dxw), DL_OK);
  double want = 0.0;
  for (int r = 0; r < 4; r++) want += wv[r] * (double)dl_f32(&rows)[r];
  /* 1e-6 relative: per-row losses were rounded to float in `rows`. */
  assert_true(fabs(loss - want) <= 1e-6 * fabs(want) + 1e-6);
  d = dl_ce_default();
  assert_int_equal(dl_cross_entropy(&d, &x, &t, &loss, NULL, &dxm), DL_OK);
  for (int r = 0; r < 4; r++)
    for (int k = 0; k < 5; k++) {
      double expect = r == 2 ? 0.0 : dl_f32(&dxm)[r * 5 + k] * 3.0 * wv[r] * 4.0;
      assert_true(fabs(dl_f32(&dxw)[r * 5 + k] - expect) <= 1e-6 * 8.0);
    }
  dl_tensor_free(&x);
  dl_tensor_free(&t);
  dl_tensor_free(&w);
  dl_tensor_free(&rows);
  dl_tensor_free(&dxw);
  dl_tensor_free(&dxm);
}

static bool is_f16(float v) { return dl_round_f16(v) == v; }

/* Half emulation: results are representable in the half format and near
 * float32's (f16 has 11 significant bits: 2e-3 relative covers a few
 * roundings); logits beyond f16's range (65504) overflow to inf and make
 * the loss NaN, which is what pitfall A4 looks like. */
static void ce_half_emulation(void **state) {
  (void)state;
  dl_tensor x = {0}, t = {0}, dx = {0}, dh = {0};
  assert_int_equal(dl_tensor_f32(&x, 2, 3, 8, 0, 0, "logits"), DL_OK);
  fill(&x, 21);
  make_i32(&t, 1, (int64_t[]){3}, (const int32_t[]){7, 1, 4});
  dl_ce_desc d = dl_ce_default();
  d.label_smoothing = 0.1f;
  float l32, l16, lbf;
  assert_int_equal(dl_cross_entropy(&d, &x, &t, &l32, NULL, &dx), DL_OK);
  d.half_dtype = 1;
  assert_int_equal(dl_cross_entropy(&d, &x, &t, &l16, NULL, &dh), DL_OK);
  assert_true(is_f16(l16));
  assert_true(fabs(l16 - l32) <= 2e-3 * fabs(l32));
  assert_true(l16 != l32);
  for (int i = 0; i < 24; i++) {
    assert_true(is_f16(dl_f32(&dh)[i]));
    assert_true(fabs(dl_f32(&dh)[i] - dl_f32(&dx)[i]) <= 2e-3);
  }
  dl_tensor_free(&dh);
  d.half_dtype = 2; /* bf16: 8 significant bits, 2e-2 relative */
  assert_int_equal(dl_cross_entropy(&d, &x, &t, &lbf, NULL, NULL), DL_OK);
  assert_true(dl_round_bf16(lbf) == lbf);
  assert_true(fabs(lbf - l32) <= 2e-2 * fabs(l32));
  d.half_dtype = 1;
  dl_f32(&x)[3] = 70000.0f;
  assert_int_equal(dl_cross_entropy(&d, &x, &t, &l16, NULL, NULL), DL_OK);
  assert_true(isnan(l16));
  d.half_dtype = 0;
  assert_int_equal(dl_cross_entropy(&d, &x, &t, &l32, NULL, NULL), DL_OK);
  assert_true(isfinite(l32));
  dl_tensor_free(&x);
  dl_tensor_free(&t);
  dl_tensor_free(&dx);
}

static void ce_errors_name_what_is_wrong(void **state) {
  (void)state;
  dl_tensor x = {0}, t = {0}, tf = {0}, x1 = {0}, w = {0};
  assert_int_equal(dl_tensor_f32(&x, 2, 2, 3, 0, 0, "logits"), DL_OK);
  make_i32(&t, 1, (int64_t[]){2}, (const int32_t[]){1, 3});
  dl_ce_desc d = dl_ce_default();
  float loss;
  assert_int_equal(dl_cross_entropy(&d, &x, &t, &loss, NULL, NULL), DL_ERR_INVALID);
  assert_non_null(strstr(dl_last_error(), "target 3 of row 1"));
  dl_i32(&t)[1] = -1;
  assert_int_equal(dl_cross_entropy(&d, &x, &t, &loss, NULL, NULL), DL_ERR_INVALID);
  assert_non_null(strstr(dl_last_error(), "target -1 of row 1"));
  dl_i32(&t)[1] = 2;

  assert_int_equal(dl_tensor_f32(&x1, 1, 3, 0, 0, 0, "x1"), DL_OK);
  assert_int_equal(dl_cross_entropy(&d, &x1, &t, &loss, NULL, NULL), DL_ERR_INVALID);
  assert_non_null(strstr(dl_last_error(), "logits must be"));
  assert_int_equal(dl_tensor_f32(&tf, 1, 2, 0, 0, 0, "tf"), DL_OK);
  assert_int_equal(dl_cross_entropy(&d, &x, &tf, &loss, NULL, NULL), DL_ERR_INVALID);
  assert_non_null(strstr(dl_last_error(), "targets must be int32"));
  dl_tensor_free(&x1);
  assert_int_equal(dl_tensor_f32(&x1, 2, 2, 0, 0, 0, "x1"), DL_OK);
  assert_int_equal(dl_cross_entropy(&d, &x1, &t, &loss, NULL, NULL), DL_ERR_INVALID);
  assert_non_null(strstr(dl_last_error(), "no classes"));

  d.row_weight = &tf; /* weights need reduction sum */
  assert_int_equal(dl_cross_entropy(&d, &x, &t, &loss, NULL, NULL), DL_ERR_INVALID);
  assert_non_null(strstr(dl_last_error(), "row_weight needs reduction 'sum'"));
  d.reduction = DL_REDUCTION_SUM;
  assert_int_equal(dl_tensor_f32(&w, 1, 3, 0, 0, 0, "w"), DL_OK);
  d.row_weight = &w;
  assert_int_equal(dl_cross_entropy(&d, &x, &t, &loss, NULL, NULL), DL_ERR_INVALID);
  assert_non_null(strstr(dl_last_error(), "row_weight must be float32 shaped"));

  d = dl_ce_default();
  d.label_smoothing = 1.5f;
  assert_int_equal(dl_cross_entropy(&d, &x, &t, &loss, NULL, NULL), DL_ERR_INVALID);
  assert_non_null(strstr(dl_last_error(), "label_smoothing"));
  d = dl_ce_default();
  d.grad_scale = NAN;
  assert_int_equal(dl_cross_entropy(&d, &x, &t, &loss, NULL, NULL), DL_ERR_INVALID);
  d = dl_ce_default();
  d.half_dtype = 3;
  assert_int_equal(dl_cross_entropy(&d, &x, &t, &loss, NULL, NULL), DL_ERR_INVALID);
  assert_non_null(strstr(dl_last_error(), "half_dtype 3"));
  d = dl_ce_default();
  d.reduction = (dl_reduction)7;
  assert_int_equal(dl_cross_entropy(&d, &x, &t, &loss, NULL, NULL), DL_ERR_INVALID);
  d.reduction = DL_REDUCTION_NONE; /* per_row missing */
  assert_int_equal(dl_cross_entropy(&d, &x, &t, &loss, NULL, NULL), DL_ERR_INVALID);
  assert_non_null(strstr(dl_last_error(), "per_row"));
  d = dl_ce_default();
  assert_int_equal(dl_cross_entropy(&d, &x, &t, &loss, NULL, &w), DL_ERR_INVALID);
  assert_non_null(strstr(dl_last_error(), "dlogits must be an empty tensor"));

  /* An allocation failure leaves nothing allocated. */
  int64_t before = dl_mem_current();
  d.reduction = DL_REDUCTION_NONE;
  for (int n = 1; n <= 2; n++) {
    dl_tensor rows = {0}, dx = {0};
    dl_mem_fail_after(n);
    assert_int_equal(dl_cross_entropy(&d, &x, &t, &loss, &rows, &dx), DL_ERR_NOMEM);
    dl_mem_fail_after(0);
    assert_true(dl_tensor_empty(&rows) && dl_tensor_empty(&dx));
    assert_int_equal(dl_mem_current(), before);
  }
  dl_tensor_free(&x);
  dl_tensor_free(&t);
  dl_tensor_free(&tf);
  dl_tensor_free(&x1);
  dl_tensor_free(&w);
}

static void reduction_names_round_trip(void **state) {
  (void)state;
  dl_reduction r;
  for (int i = 0; i < 3; i++) {
    assert_int_equal(dl_reduction_parse(dl_reduction_name((dl_reduction)i), &r), DL_OK);
    assert_int_equal(r, i);
  }
  assert_int_equal(dl_reduction_parse("avg", &r), DL_ERR_INVALID);
  assert_non_null(strstr(dl_last_error(), "'avg'"));
  assert_int_equal(dl_reduction_parse(NULL, &r), DL_ERR_INVALID);
  assert_string_equal(dl_reduction_name((dl_reduction)9), "unknown");
}

/* MSE by hand: pred [1, 2, 4], target [0, 2, 1]: squares 1, 0, 9;
 * mean 10/3, gradient 2 (p - t) / 3 = [2/3, 0, 2]. Exact up to the final
 * float rounding: 1 ulp. */
static void mse_hand_computed(void **state) {
  (void)state;
  dl_tensor p = {0}, y = {0}, dp = {0}, sq = {0};
  assert_int_equal(dl_tensor_f32(&p, 1, 3, 0, 0, 0, "pred"), DL_OK);
  assert_int_equal(dl_tensor_f32(&y, 1, 3, 0, 0, 0, "target"), DL_OK);
  memcpy(p.data, (const float[]){1, 2, 4}, 3 * sizeof(float));
  memcpy(y.data, (const float[]){0, 2, 1}, 3 * sizeof(float));
  float loss;
  assert_int_equal(dl_mse(DL_REDUCTION_MEAN, 1.0f, &p, &y, &loss, NULL, &dp), DL_OK);
  assert_true(loss == (float)(10.0 / 3.0));
  assert_true(dl_f32(&dp)[0] == (float)(2.0 / 3.0));
  assert_true(dl_f32(&dp)[1] == 0.0f && dl_f32(&dp)[2] == 2.0f);
  dl_tensor_free(&dp);
  assert_int_equal(dl_mse(DL_REDUCTION_SUM, 0.5f, &p, &y, &loss, NULL, &dp), DL_OK);
  assert_true(loss == 10.0f);
  assert_true(dl_f32(&dp)[0] == 1.0f && dl_f32(&dp)[2] == 3.0f);
  assert_int_equal(dl_mse(DL_REDUCTION_NONE, 1.0f, &p, &y, &loss, &sq, NULL), DL_OK);
  assert_true(dl_f32(&sq)[0] == 1.0f && dl_f32(&sq)[1] == 0.0f && dl_f32(&sq)[2] == 9.0f);
  assert_true(loss == 10.0f);
  dl_tensor_free(&p);
  dl_tensor_free(&y);
  dl_tensor_free(&dp);
  dl_tensor_free(&sq);
}

/* Finite differences on random data: mean loss ~ 6, h = 1e-2, rounding
 * error ~ 2 ulp(6)/2e-2 ~ 1e-4; the loss is quadratic so truncation is 0.
 * 5e-4 absolute. */
static void mse_gradient_matches_finite_differences(void **state) {
  (void)state;
  dl_tensor p = {0}, y = {0}, dp = {0};
  assert_int_equal(dl_tensor_f32(&p, 2, 3, 4, 0, 0, "pred"), DL_OK);
  assert_int_equal(dl_tensor_f32(&y, 2, 3, 4, 0, 0, "target"), DL_OK);
  fill(&p, 1);
  fill(&y, 2);
  float loss, lp, lm;
  assert_int_equal(dl_mse(DL_REDUCTION_MEAN, 1.0f, &p, &y, &loss, NULL, &dp), DL_OK);
  for (int i = 0; i < 12; i++) {
    float keep = dl_f32(&p)[i];
    dl_f32(&p)[i] = keep + 1e-2f;
    assert_int_equal(dl_mse(DL_REDUCTION_MEAN, 1.0f, &p, &y, &lp, NULL, NULL), DL_OK);
    dl_f32(&p)[i] = keep - 1e-2f;
    assert_int_equal(dl_mse(DL_REDUCTION_MEAN, 1.0f, &p, &y, &lm, NULL, NULL), DL_OK);
    dl_f32(&p)[i] = keep;
    double fd = ((double)lp - lm) / ((double)(keep + 1e-2f) - (double)(keep - 1e-2f));
    assert_true(fabs(fd - dl_f32(&dp)[i]) <= 5e-4);
  }
  dl_tensor_free(&p);
  dl_tensor_free(&y);
  dl_tensor_free(&dp);
}

static void mse_errors(void **state) {
  (void)state;
  dl_tensor p = {0}, y = {0};
  assert_int_equal(dl_tensor_f32(&p, 1, 3, 0, 0, 0, "pred"), DL_OK);
  assert_int_equal(dl_tensor_f32(&y, 1, 4, 0, 0, 0, "target"), DL_OK);
  float loss;
  assert_int_equal(dl_mse(DL_REDUCTION_MEAN, 1.0f, &p, &y, &loss, NULL, NULL), DL_ERR_INVALID);
  assert_non_null(strstr(dl_last_error(), "[3] float32 and target [4] float32"));
  assert_int_equal(dl_mse((dl_reduction)5, 1.0f, &p, &p, &loss, NULL, NULL), DL_ERR_INVALID);
  assert_int_equal(dl_mse(DL_REDUCTION_MEAN, INFINITY, &p, &p, &loss, NULL, NULL), DL_ERR_INVALID);
  assert_int_equal(dl_mse(DL_REDUCTION_NONE, 1.0f, &p, &p, &loss, NULL, NULL), DL_ERR_INVALID);
  assert_int_equal(dl_mse(DL_REDUCTION_NONE, 1.0f, &p, &p, &loss, &y, NULL), DL_ERR_INVALID);
  assert_int_equal(dl_mse(DL_REDUCTION_SUM, 1.0f, &p, &p, &loss, NULL, &y), DL_ERR_INVALID);
  assert_non_null(strstr(dl_last_error(), "dpred"));
  int64_t before = dl_mem_current();
  for (int n = 1; n <= 2; n++) {
    dl_tensor sq = {0}, dp = {0};
    dl_mem_fail_after(n);
    assert_int_equal(dl_mse(DL_REDUCTION_NONE, 1.0f, &p, &p, &loss, &sq, &dp), DL_ERR_NOMEM);
    dl_mem_fail_after(0);
    assert_int_equal(dl_mem_current(), before);
  }
  dl_tensor_free(&p);
  dl_tensor_free(&y);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(ce_matches_double_reference),
      cmocka_unit_test(ce_wide_rows_maximum),
      cmocka_unit_test(ce_rows_together_equal_rows_alone),
      cmocka_unit_test(ce_matches_pytorch_smoothing_example),
      cmocka_unit_test(ce_hand_computed_smoothing),
      cmocka_unit_test(ce_gradient_matches_finite_differences),
      cmocka_unit_test(ce_sequence_equals_flat_rows),
      cmocka_unit_test(ce_ignore_index),
      cmocka_unit_test(ce_row_weights_and_grad_scale),
      cmocka_unit_test(ce_half_emulation),
      cmocka_unit_test(ce_errors_name_what_is_wrong),
      cmocka_unit_test(reduction_names_round_trip),
      cmocka_unit_test(mse_hand_computed),
      cmocka_unit_test(mse_gradient_matches_finite_differences),
      cmocka_unit_test(mse_errors),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
