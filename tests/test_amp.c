/* Loss scaling (engine/optim/amp.c) against torch.cuda.amp.GradScaler.
 *
 * fixtures/pytorch/amp_scaler.h5 holds, step by step, what torch's own
 * GradScaler did (fixtures/pytorch/amp_scaler_reference.py; torch 1.13's
 * CUDA-only kernels transliterated to run on the CPU, see there) for five
 * cases: the defaults (2^16, x2 after 2000 finite steps in a row, x0.5 and a
 * skipped step on inf/NaN, the growth tracker reset by a NaN after 1999),
 * growth_interval 3 and 1, factors that are not powers of two (1.1f, 0.3f
 * from 3.0: every product rounds), and growth past the float32 range. Each
 * step: the scale the loss gradient is multiplied by, the gradients after
 * unscaling, whether inf/NaN was found, whether the optimizer stepped, the
 * scale and growth tracker after the update.
 *
 * Tolerance: none; every float is compared to the bit (NaN with NaN). Each
 * is a single IEEE operation on the same float32 inputs on both sides: the
 * scale times a factor (torch: float times double, narrowed once; the
 * factors are float32 values, so the exact product rounds once to the same
 * float as the engine's float product), the reciprocal of the scale in double
 * narrowed to float, a gradient times that reciprocal in float32. Nothing
 * depends on an order of summation, so a difference of even one ulp is a
 * different rule (say, dividing by the scale instead of multiplying by its
 * rounded reciprocal, as the odd_factors case would show).
 *
 * The rest (off and static modes, unscaling once a step) is the engine's own
 * contract from amp.h; torch has no static scaler and raises on a second
 * unscale_. */
#define _POSIX_C_SOURCE 200809L

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <hdf5.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "optim/amp.h"
#include "io/state_dict.h"

#define FIXTURE DL_SOURCE_DIR "/fixtures/pytorch/amp_scaler.h5"

enum { NGRAD = 3 }; /* w0 [2] and w1 [1]; w2 [1] has no gradient */

/* ---- parameters ------------------------------------------------------------ */

typedef struct params {
  dl_param p[3];
  dl_param *ptr[3];
} params;

static void params_init(params *ps) {
  static const int64_t n[3] = {2, 1, 1};
  memset(ps, 0, sizeof *ps);
  for (int i = 0; i < 3; i++) {
    dl_param *p = &ps->p[i];
    snprintf(p->name, sizeof p->name, "w%d", i);
    assert_int_equal(dl_tensor_f32(&p->value, 1, n[i], 0, 0, 0, p->name), DL_OK);
    assert_int_equal(dl_tensor_f32(&p->grad, 1, n[i], 0, 0, 0, p->name), DL_OK);
    p->requires_grad = p->in_optimizer = true;
    ps->ptr[i] = p;
  }
  /* w2 is in no loss: grad None in torch. Its stale gradient is NaN, so
   * unscaling it, or counting it as non-finite, shows. */
  dl_f32(&ps->p[2].grad)[0] = NAN;
}

static void params_free(params *ps) {
  for (int i = 0; i < 3; i++) {
    dl_tensor_free(&ps->p[i].value);
    dl_tensor_free(&ps->p[i].grad);
  }
}

/* The three gradient elements of w0 and w1 in order. */
static float *grad_elem(params *ps, int k) {
  return k < 2 ? &dl_f32(&ps->p[0].grad)[k] : dl_f32(&ps->p[1].grad);
}

/* The same float, or both NaN. */
static bool same_bits(float a, float b) {
  return isnan(a) ? isnan(b) : memcmp(&a, &b, sizeof a) == 0;
}

/* ---- the fixture ----------------------------------------------------------- */

typedef struct ref_case {
  double init_scale, growth_factor, backoff_factor;
  int growth_interval, steps;
  int *kind, *found_inf, *stepped, *growth_tracker;
  float *grad, *scale_used, *grad_unscaled, *scale;
} ref_case;

static double read_attr_double(hid_t g, const char *name) {
  double v = 0;
  hid_t a = H5Aopen(g, name, H5P_DEFAULT);
  assert_true(a >= 0 && H5Aread(a, H5T_NATIVE_DOUBLE, &v) >= 0);
  H5Aclose(a);
  return v;
}

/* Dataset `name` of g, converted to `type`, with `per_step` values a step. */
static void *read_data(hid_t g, const char *name, hid_t type, size_t size, int steps,
                       int per_step) {
  hid_t d = H5Dopen2(g, name, H5P_DEFAULT);
  assert_true(d >= 0);
  hid_t space = H5Dget_space(d);
  hssize_t n = H5Sget_simple_extent_npoints(space);
  H5Sclose(space);
  assert_int_equal(n, (hssize_t)steps * per_step);
  void *buf = malloc((size_t)n * size);
  assert_non_null(buf);
  assert_true(H5Dread(d, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) >= 0);
  H5Dclose(d);
  return buf;
}

static void read_case(hid_t file, const char *name, ref_case *c) {
  hid_t g = H5Gopen2(file, name, H5P_DEFAULT);
  assert_true(g >= 0);
  c->init_scale = read_attr_double(g, "init_scale");
  c->growth_factor = read_attr_double(g, "growth_factor");
  c->backoff_factor = read_attr_double(g, "backoff_factor");
  c->growth_interval = (int)read_attr_double(g, "growth_interval");
  hid_t d = H5Dopen2(g, "kind", H5P_DEFAULT);
  assert_true(d >= 0);
  hid_t space = H5Dget_space(d);
  c->steps = (int)H5Sget_simple_extent_npoints(space);
  H5Sclose(space);
  H5Dclose(d);
  int n = c->steps;
  c->kind = read_data(g, "kind", H5T_NATIVE_INT, sizeof(int), n, 1);
  c->found_inf = read_data(g, "found_inf", H5T_NATIVE_INT, sizeof(int), n, 1);
  c->stepped = read_data(g, "stepped", H5T_NATIVE_INT, sizeof(int), n, 1);
  c->growth_tracker = read_data(g, "growth_tracker", H5T_NATIVE_INT, sizeof(int), n, 1);
  c->grad = read_data(g, "grad", H5T_NATIVE_FLOAT, sizeof(float), n, NGRAD);
  c->scale_used = read_data(g, "scale_used", H5T_NATIVE_FLOAT, sizeof(float), n, 1);
  c->grad_unscaled = read_data(g, "grad_unscaled", H5T_NATIVE_FLOAT, sizeof(float), n, NGRAD);
  c->scale = read_data(g, "scale", H5T_NATIVE_FLOAT, sizeof(float), n, 1);
  H5Gclose(g);
}

static void free_case(ref_case *c) {
  free(c->kind);
  free(c->found_inf);
  free(c->stepped);
  free(c->growth_tracker);
  free(c->grad);
  free(c->scale_used);
  free(c->grad_unscaled);
  free(c->scale);
}

/* The factors are stored as GradScaler got them (double); the engine takes
 * float. The script chose float32 values, so nothing is lost. */
static float as_float(double v) {
  float f = (float)v;
  assert_true((double)f == v);
  return f;
}

/* ---- against torch --------------------------------------------------------- */

/* Runs the engine through case `name` as the runner does a step (loss
 * gradient times dl_scaler_factor, unscale, should_step, update); the first
 * step that differs from torch fails with everything about it. */
static void run_case(const char *name, int expect_steps) {
  hid_t file;
  assert_int_equal(dl_h5_open_read(FIXTURE, &file), DL_OK);
  ref_case c;
  read_case(file, name, &c);
  H5Fclose(file);
  assert_int_equal(c.steps, expect_steps);

  dl_grad_scaler s;
  dl_scaler_init(&s, DL_SCALER_DYNAMIC, as_float(c.init_scale), as_float(c.growth_factor),
                 as_float(c.backoff_factor), c.growth_interval);
  params ps;
  params_init(&ps);
  ps.p[2].has_grad = false;
  int skipped = 0;
  for (int t = 0; t < c.steps; t++) {
    float factor = dl_scaler_factor(&s);
    if (!same_bits(factor, c.scale_used[t]))
      fail_msg("%s step %d: loss scale %.9g, torch %.9g", name, t, (double)factor,
               (double)c.scale_used[t]);
    for (int k = 0; k < NGRAD; k++) *grad_elem(&ps, k) = c.grad[t * NGRAD + k] * factor;
    ps.p[0].has_grad = ps.p[1].has_grad = true;

    dl_scaler_unscale(&s, ps.ptr, 3);
    for (int k = 0; k < NGRAD; k++) {
      float got = *grad_elem(&ps, k), want = c.grad_unscaled[t * NGRAD + k];
      if (!same_bits(got, want))
        fail_msg("%s step %d: unscaled gradient %d is %.9g, torch %.9g (scale %.9g)", name, t, k,
                 (double)got, (double)want, (double)factor);
    }
    if (s.found_inf != (c.found_inf[t] != 0))
      fail_msg("%s step %d (kind %d): found_inf %d, torch %d", name, t, c.kind[t], s.found_inf,
               c.found_inf[t]);
    bool step = dl_scaler_should_step(&s);
    if (step != (c.stepped[t] != 0))
      fail_msg("%s step %d: optimizer step %s, torch %s", name, t, step ? "taken" : "skipped",
               c.stepped[t] ? "took it" : "skipped it");
    skipped += !step;

    dl_scaler_update(&s);
    if (!same_bits(s.scale, c.scale[t]) || s.growth_tracker != c.growth_tracker[t])
      fail_msg("%s step %d: after update scale %.9g, growth tracker %d; torch %.9g, %d", name, t,
               (double)s.scale, s.growth_tracker, (double)c.scale[t], c.growth_tracker[t]);
    assert_false(s.found_inf || s.unscaled); /* cleared for the next step */
    assert_true(isnan(dl_f32(&ps.p[2].grad)[0]));
  }
  print_message("%s: %d steps (%d skipped) equal to torch's GradScaler to the bit\n", name, c.steps,
                skipped);
  params_free(&ps);
  free_case(&c);
}

/* The cases and their lengths (a truncated fixture fails). In overflow,
 * torch 1.13 grows the scale to inf, where it stays (every scaled gradient
 * is then inf or NaN); torch 2.1 keeps the last finite scale. The engine
 * follows 1.13, the reference version. */
typedef struct case_id {
  const char *name;
  int steps;
} case_id;

static case_id torch_cases[] = {
    {"defaults", 4010}, {"interval3", 20}, {"interval1", 10}, {"odd_factors", 24}, {"overflow", 5},
};

static void against_torch(void **state) {
  const case_id *id = *state;
  run_case(id->name, id->steps);
}

/* ---- the engine's own contract --------------------------------------------- */

/* The stored configuration, nothing found, nothing unscaled yet. */
static void init_state(void **state) {
  (void)state;
  dl_grad_scaler s;
  memset(&s, 0xff, sizeof s);
  dl_scaler_init(&s, DL_SCALER_DYNAMIC, 65536.0f, 2.0f, 0.5f, 2000);
  assert_int_equal(s.mode, DL_SCALER_DYNAMIC);
  assert_true(s.scale == 65536.0f && s.growth_factor == 2.0f && s.backoff_factor == 0.5f);
  assert_int_equal(s.growth_interval, 2000);
  assert_int_equal(s.growth_tracker, 0);
  assert_false(s.found_inf);
  assert_false(s.unscaled);
  assert_true(dl_scaler_factor(&s) == 65536.0f);
  assert_true(dl_scaler_should_step(&s));
}

/* Off: factor 1, gradients untouched (an inf too), every step taken, the
 * scale never moves. */
static void off_mode_does_nothing(void **state) {
  (void)state;
  dl_grad_scaler s;
  dl_scaler_init(&s, DL_SCALER_OFF, 1024.0f, 2.0f, 0.5f, 1);
  params ps;
  params_init(&ps);
  ps.p[0].has_grad = ps.p[1].has_grad = true;
  *grad_elem(&ps, 0) = 3.0f;
  *grad_elem(&ps, 2) = INFINITY;
  for (int t = 0; t < 3; t++) {
    assert_true(dl_scaler_factor(&s) == 1.0f);
    dl_scaler_unscale(&s, ps.ptr, 3);
    assert_true(*grad_elem(&ps, 0) == 3.0f && isinf(*grad_elem(&ps, 2)));
    assert_true(dl_scaler_should_step(&s));
    dl_scaler_update(&s);
    assert_true(s.scale == 1024.0f);
    assert_int_equal(s.growth_tracker, 0);
  }
  params_free(&ps);
}

/* Static (loss scaling by hand, pitfall A3): multiplies and divides by the
 * fixed scale, notices an inf but steps anyway, and never changes the
 * scale, however many finite steps. */
static void static_mode_never_skips_or_moves(void **state) {
  (void)state;
  dl_grad_scaler s;
  dl_scaler_init(&s, DL_SCALER_STATIC, 128.0f, 2.0f, 0.5f, 1);
  params ps;
  params_init(&ps);
  ps.p[0].has_grad = ps.p[1].has_grad = true;
  for (int t = 0; t < 4; t++) {
    assert_true(dl_scaler_factor(&s) == 128.0f);
    *grad_elem(&ps, 0) = 256.0f;
    *grad_elem(&ps, 1) = t == 2 ? INFINITY : -64.0f;
    dl_scaler_unscale(&s, ps.ptr, 3);
    assert_true(*grad_elem(&ps, 0) == 2.0f); /* exact: 256 / 2^7 */
    assert_int_equal(s.found_inf, t == 2);
    assert_true(dl_scaler_should_step(&s));
    dl_scaler_update(&s);
    assert_true(s.scale == 128.0f);
    assert_int_equal(s.growth_tracker, 0);
  }
  params_free(&ps);
}

/* Unscaling runs once a step (the runner may call it before clipping and
 * again before the optimizer); update re-arms it. */
static void unscale_once_per_step(void **state) {
  (void)state;
  dl_grad_scaler s;
  dl_scaler_init(&s, DL_SCALER_DYNAMIC, 4.0f, 2.0f, 0.5f, 2000);
  params ps;
  params_init(&ps);
  ps.p[0].has_grad = true;
  *grad_elem(&ps, 0) = 8.0f;
  dl_scaler_unscale(&s, ps.ptr, 3);
  assert_true(*grad_elem(&ps, 0) == 2.0f);
  assert_true(s.unscaled);
  dl_scaler_unscale(&s, ps.ptr, 3);
  assert_true(*grad_elem(&ps, 0) == 2.0f);
  dl_scaler_update(&s);
  assert_false(s.unscaled);
  dl_scaler_unscale(&s, ps.ptr, 3);
  assert_true(*grad_elem(&ps, 0) == 0.5f);
  params_free(&ps);
}

/* The inverse is 1/scale in double rounded to float, and each gradient is
 * multiplied by it (torch's rule), not divided by the scale: for scale 3
 * the two differ at some gradient i/7, found below. 3 * (float)(1/3) is
 * 1.00000003 and rounds to 1. Bitwise. */
static void unscale_multiplies_by_rounded_reciprocal(void **state) {
  (void)state;
  dl_grad_scaler s;
  dl_scaler_init(&s, DL_SCALER_DYNAMIC, 3.0f, 2.0f, 0.5f, 2000);
  const float inv = (float)(1.0 / 3.0);
  float found = NAN;
  for (int i = 1; i < 1000 && isnan(found); i++) { /* a gradient where the rules part */
    float g = (float)i / 7.0f;
    if (g * inv != g / 3.0f) found = g;
  }
  assert_false(isnan(found));
  params ps;
  params_init(&ps);
  ps.p[0].has_grad = true;
  *grad_elem(&ps, 0) = found;
  *grad_elem(&ps, 1) = 3.0f;
  dl_scaler_unscale(&s, ps.ptr, 3);
  assert_true(same_bits(*grad_elem(&ps, 0), found * inv));
  assert_true(*grad_elem(&ps, 1) == 1.0f);
  params_free(&ps);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      {"torch_defaults", against_torch, NULL, NULL, &torch_cases[0]},
      {"torch_interval3", against_torch, NULL, NULL, &torch_cases[1]},
      {"torch_interval1", against_torch, NULL, NULL, &torch_cases[2]},
      {"torch_odd_factors", against_torch, NULL, NULL, &torch_cases[3]},
      {"torch_overflow", against_torch, NULL, NULL, &torch_cases[4]},
      cmocka_unit_test(init_state),
      cmocka_unit_test(off_mode_does_nothing),
      cmocka_unit_test(static_mode_never_skips_or_moves),
      cmocka_unit_test(unscale_once_per_step),
      cmocka_unit_test(unscale_multiplies_by_rounded_reciprocal),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
