/* The backend dispatch (engine/backend/backend.h) and the layers' offload paths
 * (linear.c, conv2d.c), with a test backend that runs on the host: its GEMM
 * is dl_sgemm_ref and its convolutions are direct loops in double,
 * written independently of im2col. Checked: which operations reach the
 * backend, that results agree with the CPU path, that AMP rounds the
 * operands before they leave, that gradient accumulation still holds, and
 * that a backend failure comes back as the layer's error without leaks;
 * and that optimizer steps and dropout masks go there too, with the CPU's
 * bits.
 * The CUDA backend's own tests (test_cuda_backend.c) need a GPU. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "backend/backend.h"
#include "gradcheck.h"
#include "numerics/half.h"
#include "host_backend.h"
#include "optim/optim.h"
#include "backend/cpu/sgemm.h"

/* ---- running a layer with and without the backend ---- */

typedef struct pass {
  dl_tensor y, dx;
  dl_tensor grads[2];
} pass;

static void pass_free(pass *p) {
  dl_tensor_free(&p->y);
  dl_tensor_free(&p->dx);
  for (int i = 0; i < 2; i++) dl_tensor_free(&p->grads[i]);
}

/* Forward, backward with dy = y, `times` backward passes accumulating. */
static dl_status run_pass(const dl_layer_desc *d, const dl_tensor *x, const dl_backend *b,
                          dl_dtype autocast, int times, pass *out) {
  memset(out, 0, sizeof *out);
  dl_layer l;
  assert_int_equal(dl_layer_init(&l, d, "0.", 0, 5), DL_OK);
  dl_ctx ctx = gc_ctx();
  ctx.backend = b;
  ctx.autocast = autocast;
  dl_status s = l.ops->forward(&l, &ctx, x, &out->y);
  for (int t = 0; s == DL_OK && t < times; t++) {
    dl_tensor_free(&out->dx);
    s = l.ops->backward(&l, &ctx, x, &out->y, &out->y, &out->dx);
  }
  for (int i = 0; s == DL_OK && i < l.nparams; i++)
    s = dl_tensor_clone(&out->grads[i], &l.params[i].grad, "grad");
  dl_layer_destroy(&l);
  if (s != DL_OK) pass_free(out);
  return s;
}

/* |a - b| <= 1e-5 + 1e-5 |b|: both are float32 roundings of sums of at
 * most a few hundred products of values in [-1, 1] (the CPU in float32 in
 * im2col order, the test backend in double): each is within ~3e-6 of the
 * exact sum. */
static void assert_close(const dl_tensor *a, const dl_tensor *b, const char *what) {
  assert_int_equal(a->numel, b->numel);
  for (int64_t i = 0; i < a->numel; i++) {
    float u = dl_f32(a)[i], v = dl_f32(b)[i];
    if (!(fabsf(u - v) <= 1e-5f + 1e-5f * fabsf(v)))
      fail_msg("%s[%lld]: backend %.9g vs cpu %.9g", what, (long long)i, u, v);
  }
}

static void assert_same_pass(const pass *a, const pass *b, bool bitwise) {
  const dl_tensor *ta[] = {&a->y, &a->dx, &a->grads[0], &a->grads[1]};
  const dl_tensor *tb[] = {&b->y, &b->dx, &b->grads[0], &b->grads[1]};
  const char *names[] = {"y", "dx", "weight grad", "bias grad"};
  for (int i = 0; i < 4; i++) {
    if (dl_tensor_empty(tb[i])) continue;
    if (bitwise) assert_true(gc_same_bytes(ta[i], tb[i], names[i]));
    else assert_close(ta[i], tb[i], names[i]);
  }
}

static dl_tensor random_input(int ndim, int64_t d0, int64_t d1, int64_t d2, int64_t d3,
                              uint64_t seed) {
  dl_tensor x = {0};
  assert_int_equal(dl_tensor_f32(&x, ndim, d0, d1, d2, d3, "x"), DL_OK);
  gc_fill_uniform(&x, seed, -1.0f, 1.0f);
  return x;
}

/* ---- tests ---- */

/* No backend and a backend without sgemm both mean dl_sgemm. */
static void dispatch_falls_back_to_the_cpu(void **state) {
  (void)state;
  float a[6] = {1, 2, 3, 4, 5, 6}, b[6] = {1, -1, 2, 0, 3, 1}, c1[4], c2[4], c3[4];
  dl_backend empty = {.name = "empty"};
  assert_int_equal(dl_backend_sgemm(NULL, false, false, 2, 2, 3, a, 3, b, 2, 0, c1, 2), DL_OK);
  assert_int_equal(dl_backend_sgemm(&empty, false, false, 2, 2, 3, a, 3, b, 2, 0, c2, 2), DL_OK);
  dl_sgemm_ref(false, false, 2, 2, 3, a, 3, b, 2, 0, c3, 2);
  assert_memory_equal(c1, c3, sizeof c3);
  assert_memory_equal(c2, c3, sizeof c3);
  assert_false(dl_backend_has_conv2d(NULL));
  assert_false(dl_backend_has_conv2d(&empty));
  host_backend hb;
  dl_backend full = host_backend_table(&hb);
  assert_true(dl_backend_has_conv2d(&full));
  full.conv2d_backward_filter = NULL; /* all three or none */
  assert_false(dl_backend_has_conv2d(&full));
}

/* Linear's three GEMMs reach the backend; dl_sgemm_ref is dl_sgemm's
 * definition, so the results are the CPU's bit for bit. */
static void linear_gemms_go_to_the_backend(void **state) {
  (void)state;
  dl_layer_desc d = dl_layer_default(DL_LINEAR);
  d.in = 7;
  d.out = 5;
  dl_tensor x = random_input(3, 2, 3, 7, 0, 1);
  host_backend hb;
  dl_backend b = host_backend_table(&hb);
  pass cpu, off;
  assert_int_equal(run_pass(&d, &x, NULL, DL_F32, 1, &cpu), DL_OK);
  assert_int_equal(run_pass(&d, &x, &b, DL_F32, 1, &off), DL_OK);
  assert_int_equal(hb.sgemm_calls, 3); /* y, dx, dW; db is a row sum */
  assert_same_pass(&off, &cpu, true);
  pass_free(&cpu);
  pass_free(&off);
  dl_tensor_free(&x);
}

typedef struct conv_case {
  int64_t n, c, h, w, o;
  int k, stride, pad;
  bool bias;
} conv_case;

static const conv_case conv_cases[] = {
    {2, 3, 6, 6, 4, 3, 1, 1, true},
    {2, 2, 7, 9, 3, 5, 1, 2, false},
    {1, 3, 8, 7, 2, 3, 2, 1, true},
    {2, 4, 5, 5, 3, 1, 1, 0, true},
};

static dl_layer_desc conv_desc(const conv_case *c) {
  dl_layer_desc d = dl_layer_default(DL_CONV2D);
  d.in = c->c;
  d.out = c->o;
  d.kernel = c->k;
  d.stride = c->stride;
  d.padding = c->pad;
  d.bias = c->bias;
  return d;
}

/* The whole convolution goes to the backend (one call per operation), the
 * bias stays with the layer, and results agree with im2col. */
static void conv_offload_matches_im2col(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof conv_cases / sizeof conv_cases[0]; i++) {
    const conv_case *c = &conv_cases[i];
    dl_layer_desc d = conv_desc(c);
    dl_tensor x = random_input(4, c->n, c->c, c->h, c->w, 20 + i);
    host_backend hb;
    dl_backend b = host_backend_table(&hb);
    pass cpu, off;
    assert_int_equal(run_pass(&d, &x, NULL, DL_F32, 1, &cpu), DL_OK);
    assert_int_equal(run_pass(&d, &x, &b, DL_F32, 1, &off), DL_OK);
    assert_int_equal(hb.fwd_calls, 1);
    assert_int_equal(hb.data_calls, 1);
    assert_int_equal(hb.filter_calls, 1);
    assert_int_equal(hb.sgemm_calls, 0);
    assert_same_pass(&off, &cpu, false);
    pass_free(&cpu);
    pass_free(&off);
    dl_tensor_free(&x);
  }
}

/* Two backward passes: the gradient is the sum of both, as on the CPU. */
static void offloaded_gradients_accumulate(void **state) {
  (void)state;
  const conv_case *c = &conv_cases[0];
  dl_layer_desc d = conv_desc(c);
  dl_tensor x = random_input(4, c->n, c->c, c->h, c->w, 3);
  host_backend hb;
  dl_backend b = host_backend_table(&hb);
  pass once, twice;
  assert_int_equal(run_pass(&d, &x, &b, DL_F32, 1, &once), DL_OK);
  assert_int_equal(run_pass(&d, &x, &b, DL_F32, 2, &twice), DL_OK);
  for (int p = 0; p < 2; p++)
    for (int64_t i = 0; i < once.grads[p].numel; i++)
      assert_true(dl_f32(&twice.grads[p])[i] == 2.0f * dl_f32(&once.grads[p])[i]);
  pass_free(&once);
  pass_free(&twice);
  dl_tensor_free(&x);
}

/* Under autocast the operands leave rounded to half, and the results agree
 * with the CPU's emulation within half precision (2^-11 relative, plus the
 * output rounding of each side). */
static void autocast_rounds_what_the_backend_sees(void **state) {
  (void)state;
  const dl_dtype halves[] = {DL_F16, DL_BF16};
  for (int h = 0; h < 2; h++) {
    const conv_case *c = &conv_cases[2];
    dl_layer_desc d = conv_desc(c);
    dl_tensor x = random_input(4, c->n, c->c, c->h, c->w, 4);
    host_backend hb;
    dl_backend b = host_backend_table(&hb);
    hb.half = halves[h];
    pass cpu, off;
    assert_int_equal(run_pass(&d, &x, NULL, halves[h], 1, &cpu), DL_OK);
    assert_int_equal(run_pass(&d, &x, &b, halves[h], 1, &off), DL_OK);
    assert_true(hb.operands_rounded);
    float tol = halves[h] == DL_F16 ? 2e-3f : 1.6e-2f;
    for (int64_t i = 0; i < cpu.y.numel; i++)
      assert_true(fabsf(dl_f32(&off.y)[i] - dl_f32(&cpu.y)[i]) <=
                  tol * (1 + fabsf(dl_f32(&cpu.y)[i])));
    pass_free(&cpu);
    pass_free(&off);
    dl_tensor_free(&x);

    dl_layer_desc lin = dl_layer_default(DL_LINEAR);
    lin.in = 6;
    lin.out = 3;
    dl_tensor xl = random_input(2, 4, 6, 0, 0, 5);
    assert_int_equal(run_pass(&lin, &xl, &b, halves[h], 1, &off), DL_OK);
    assert_true(hb.operands_rounded);
    pass_free(&off);
    dl_tensor_free(&xl);
  }
}

/* A failing backend: the layer returns its error and message, frees what
 * it allocated (ASan/valgrind see no leak) and leaves grads alone. */
static void backend_failure_is_the_layers_error(void **state) {
  (void)state;
  host_backend hb;
  dl_backend b = host_backend_table(&hb);
  hb.fail = true;
  const conv_case *c = &conv_cases[0];
  dl_layer_desc descs[2] = {conv_desc(c), dl_layer_default(DL_LINEAR)};
  descs[1].in = c->w;
  descs[1].out = 2;
  dl_tensor x = random_input(4, c->n, c->c, c->h, c->w, 6);
  for (int i = 0; i < 2; i++) {
    pass p;
    assert_int_equal(run_pass(&descs[i], &x, &b, DL_F32, 1, &p), DL_ERR_IO);
    assert_non_null(strstr(dl_last_error(), "failed on purpose"));
  }
  /* Forward fine, backward failing: no gradient is marked present. */
  hb.fail = false;
  dl_layer l;
  assert_int_equal(dl_layer_init(&l, &descs[0], "0.", 0, 5), DL_OK);
  dl_ctx ctx = gc_ctx();
  ctx.backend = &b;
  dl_tensor y = {0}, dx = {0};
  assert_int_equal(l.ops->forward(&l, &ctx, &x, &y), DL_OK);
  hb.fail = true;
  assert_int_equal(l.ops->backward(&l, &ctx, &x, &y, &y, &dx), DL_ERR_IO);
  assert_false(l.params[0].has_grad);
  assert_true(dl_tensor_empty(&dx));
  dl_tensor_free(&y);
  dl_layer_destroy(&l);
  dl_tensor_free(&x);
}

/* ---- dropout masks ---- */

/* Dropout [rows, features] with the masks from `b` (or the CPU): rows keyed
 * by global sample ids, as the runner does. */
static dl_status dropout_pass(const dl_backend *b, int64_t rows, int64_t features, dl_tensor *y,
                              dl_tensor *mask) {
  dl_layer_desc d = dl_layer_default(DL_DROPOUT);
  d.p = 0.3f;
  dl_layer l;
  assert_int_equal(dl_layer_init(&l, &d, "2.", 7, 5), DL_OK);
  dl_tensor x = random_input(2, rows, features, 0, 0, 9);
  int64_t ids[16];
  for (int64_t r = 0; r < rows; r++) ids[r] = 100 + 3 * r;
  dl_ctx ctx = gc_ctx();
  ctx.backend = b;
  ctx.step = 4;
  ctx.sample_ids = ids;
  dl_status s = l.ops->forward(&l, &ctx, &x, y);
  if (s == DL_OK) s = dl_tensor_clone(mask, &l.saved[0], "mask");
  dl_layer_destroy(&l);
  dl_tensor_free(&x);
  return s;
}

/* The masks come from the backend, one call per forward, and are the
 * CPU's bit for bit (features not a multiple of Philox's 4 words). */
static void dropout_masks_go_to_the_backend(void **state) {
  (void)state;
  host_backend hb;
  dl_backend b = host_backend_table(&hb);
  dl_tensor y_cpu = {0}, m_cpu = {0}, y_off = {0}, m_off = {0};
  assert_int_equal(dropout_pass(NULL, 11, 13, &y_cpu, &m_cpu), DL_OK);
  assert_int_equal(dropout_pass(&b, 11, 13, &y_off, &m_off), DL_OK);
  assert_int_equal(hb.dropout_calls, 1);
  assert_true(gc_same_bytes(&m_off, &m_cpu, "mask"));
  assert_true(gc_same_bytes(&y_off, &y_cpu, "y"));
  int64_t zeros = 0;
  for (int64_t i = 0; i < m_cpu.numel; i++) zeros += dl_f32(&m_cpu)[i] == 0.0f;
  assert_true(zeros > 0 && zeros < m_cpu.numel); /* a real mask, not all or nothing */
  dl_tensor_free(&y_cpu), dl_tensor_free(&m_cpu), dl_tensor_free(&y_off), dl_tensor_free(&m_off);
  hb.fail = true;
  assert_int_equal(dropout_pass(&b, 11, 13, &y_off, &m_off), DL_ERR_IO);
  assert_non_null(strstr(dl_last_error(), "layer 2 (dropout)"));
  assert_true(dl_tensor_empty(&y_off));
}

/* ---- optimizer steps ---- */

enum { NP = 3, PN = 37 };

typedef struct param_set {
  dl_param p[NP];
  dl_param *ptr[NP];
} param_set;

/* Three params; the middle one has no gradient (skipped, as grad None). */
static void params_make(param_set *ps) {
  memset(ps, 0, sizeof *ps);
  for (int i = 0; i < NP; i++) {
    dl_param *p = &ps->p[i];
    snprintf(p->name, sizeof p->name, "%d.weight", i);
    assert_int_equal(dl_tensor_f32(&p->value, 1, PN, 0, 0, 0, "w"), DL_OK);
    assert_int_equal(dl_tensor_f32(&p->grad, 1, PN, 0, 0, 0, "g"), DL_OK);
    gc_fill_uniform(&p->value, 60 + i, -1.0f, 1.0f);
    p->requires_grad = p->in_optimizer = true;
    p->has_grad = i != 1;
    ps->ptr[i] = p;
  }
}

static void params_free(param_set *ps) {
  for (int i = 0; i < NP; i++) {
    dl_tensor_free(&ps->p[i].value);
    dl_tensor_free(&ps->p[i].grad);
  }
}

/* Every update reaches the backend, one call per param with a gradient,
 * and the values and state are the CPU's bit for bit (the host backend
 * runs optim_elem.h as optim.c does; on a GPU, test_cuda_backend.c). */
static void optimizer_steps_go_to_the_backend(void **state) {
  (void)state;
  dl_optim_desc descs[] = {dl_optim_default(DL_OPTIM_SGD), dl_optim_default(DL_OPTIM_ADAM),
                           dl_optim_default(DL_OPTIM_ADAMW)};
  descs[0].momentum = 0.9;
  descs[0].nesterov = true;
  descs[1].weight_decay = 1e-2;
  for (size_t d = 0; d < sizeof descs / sizeof *descs; d++) {
    param_set cpu, off;
    params_make(&cpu);
    params_make(&off);
    dl_optim *oc = NULL, *oo = NULL;
    assert_int_equal(dl_optim_create(&oc, &descs[d], cpu.ptr, NP), DL_OK);
    assert_int_equal(dl_optim_create(&oo, &descs[d], off.ptr, NP), DL_OK);
    host_backend hb;
    dl_backend b = host_backend_table(&hb);
    for (int step = 0; step < 3; step++) {
      for (int i = 0; i < NP; i++) {
        gc_fill_uniform(&cpu.p[i].grad, 70 + 10 * step + i, -1.0f, 1.0f);
        assert_true(dl_tensor_copy_into(&off.p[i].grad, &cpu.p[i].grad, "g") == DL_OK);
      }
      assert_int_equal(dl_optim_step(oc, 0.1f), DL_OK);
      assert_int_equal(dl_optim_step_on(oo, 0.1f, &b), DL_OK);
    }
    assert_int_equal(hb.optim_calls, 3 * (NP - 1));
    for (int i = 0; i < NP; i++) assert_true(gc_same_bytes(&off.p[i].value, &cpu.p[i].value, "w"));
    for (int i = 0; i < dl_optim_num_state(oc); i++) {
      const char *na, *nb;
      dl_tensor *ta, *tb;
      assert_int_equal(dl_optim_state(oc, i, &na, &ta), DL_OK);
      assert_int_equal(dl_optim_state(oo, i, &nb, &tb), DL_OK);
      assert_true(gc_same_bytes(tb, ta, na));
    }
    dl_optim_destroy(oc);
    dl_optim_destroy(oo);
    params_free(&cpu);
    params_free(&off);
  }
}

/* A failing backend: the step stops at the first param, says which, and
 * its step count does not advance. */
static void optimizer_backend_failure_names_the_param(void **state) {
  (void)state;
  param_set ps;
  params_make(&ps);
  dl_optim *o = NULL;
  dl_optim_desc d = dl_optim_default(DL_OPTIM_ADAM);
  assert_int_equal(dl_optim_create(&o, &d, ps.ptr, NP), DL_OK);
  host_backend hb;
  dl_backend b = host_backend_table(&hb);
  hb.fail = true;
  assert_int_equal(dl_optim_step_on(o, 0.1f, &b), DL_ERR_IO);
  assert_non_null(strstr(dl_last_error(), "0.weight"));
  assert_non_null(strstr(dl_last_error(), "failed on purpose"));
  const char *name;
  dl_tensor *t;
  assert_int_equal(dl_optim_state(o, 0, &name, &t), DL_OK);
  assert_non_null(strstr(name, "step"));
  assert_true(dl_f32(t)[0] == 0.0f);
  dl_optim_destroy(o);
  params_free(&ps);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(dispatch_falls_back_to_the_cpu),
      cmocka_unit_test(linear_gemms_go_to_the_backend),
      cmocka_unit_test(conv_offload_matches_im2col),
      cmocka_unit_test(offloaded_gradients_accumulate),
      cmocka_unit_test(autocast_rounds_what_the_backend_sees),
      cmocka_unit_test(backend_failure_is_the_layers_error),
      cmocka_unit_test(dropout_masks_go_to_the_backend),
      cmocka_unit_test(optimizer_steps_go_to_the_backend),
      cmocka_unit_test(optimizer_backend_failure_names_the_param),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
