/* The CUDA dl_backend (engine/backend/cuda/backend.c).
 *
 * Without a GPU (CI, this machine): dl_cuda_backend_create refuses with
 * "no CUDA device: <reason>" and leaves nothing behind, bad options are
 * refused by name, the names and texts that need no device, and the cuDNN
 * failure messages (DL_CUDNN_TRY). Every GPU test then skips with
 * "no CUDA device: <reason>".
 *
 * With a GPU (run through ci/gpu-check.sh or by hand): the backend's sgemm
 * on edge cases (empty sums, gaps between rows that must survive), then
 * Linear and Conv2d layers run with the backend in the dl_ctx against the
 * same layers on the CPU - forward output, input gradient and parameter
 * gradients - within the bounds below; TF32 within 2e-2 and visibly not
 * FP32; the same call twice bitwise equal in deterministic mode; gradient
 * accumulation over two backwards as on the CPU; device memory returned on
 * destroy.
 *
 * Tolerances. CPU and GPU compute the same sums in different orders. Each
 * is within about K u sum|a||b| of the exact sum (u = 2^-24, K terms), so
 * they differ by at most 2 K u sum|a||b|; the tests allow 4 K u sum|a||b|
 * per element. sum|a||b| per element is computed by running the same layer
 * on the CPU with |x|, |W|, |b| and |dy| (the "magnitude" pass). cuDNN may
 * choose FFT or Winograd algorithms, whose rounding errors are not per
 * element but a small multiple of u times the size of the whole output:
 * an absolute floor of 1e-5 times the largest magnitude covers them (far
 * below the O(magnitude) error a wrong index or a missing term gives).
 * TF32 rounds each input to 10 mantissa bits (relative error 2^-11 each,
 * so about 2^-10 per product): 2e-2 relative to the magnitude, with the
 * same floor. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#ifdef DL_HAVE_CUDA

#include "backend/cuda/backend.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device.h"
#include "nn/layer.h"
#include "core/mem.h"
#include "optim/optim.h"
#include "numerics/philox.h"
#include "backend/cpu/sgemm.h"

/* ---- helpers ---- */

/* Uniform in [-1, 1), never exactly zero: zeros hide unwritten outputs. */
static void fill(float *x, int64_t n, uint64_t seed) {
  dl_stream s = dl_stream_make(seed, "test_cuda_backend", NULL, 0);
  dl_stream_uniform_range(&s, 0, -1.0f, 1.0f, x, n);
  for (int64_t i = 0; i < n; i++)
    if (x[i] == 0.0f) x[i] = 0.5f;
}

static void ok(dl_status s) {
  if (s != DL_OK) fail_msg("%s: %s", dl_status_name(s), dl_last_error());
}

static bool contains(const char *text, const char *part) { return strstr(text, part) != NULL; }

static dl_cuda_backend_options options(dl_cuda_math math, dl_cuda_conv_algo conv) {
  dl_cuda_backend_options o = {.device = 0, .math = math, .conv = conv};
  return o;
}

/* Skips the calling test, saying why, when this machine has no GPU. */
static dl_backend *backend_or_skip(dl_cuda_math math, dl_cuda_conv_algo conv) {
  int n = 0;
  if (dl_cuda_device_count(&n) != DL_OK) {
    printf("no CUDA device: %s\n", dl_cuda_no_device_reason());
    skip();
  }
  dl_cuda_backend_options o = options(math, conv);
  dl_backend *b = NULL;
  dl_status s = dl_cuda_backend_create(&o, &b);
  if (s != DL_OK) fail_msg("dl_cuda_backend_create: %s", dl_last_error());
  assert_non_null(b);
  assert_string_equal(b->name, "cuda");
  return b;
}

/* ================= runs everywhere ================= */

static void test_create_without_gpu(void **state) {
  (void)state;
  int n = 0;
  if (dl_cuda_device_count(&n) == DL_OK) {
    printf("this machine has %d GPU(s): the no-GPU refusal is not tested\n", n);
    return;
  }
  dl_backend fake, *b = &fake; /* must be reset to NULL */
  dl_cuda_backend_options o = options(DL_CUDA_MATH_FP32, DL_CUDA_CONV_DETERMINISTIC);
  int64_t held = dl_cuda_mem_current();
  assert_int_equal(dl_cuda_backend_create(&o, &b), DL_ERR_UNSUPPORTED);
  assert_null(b);
  assert_true(contains(dl_last_error(), "no CUDA device: "));
  assert_true(contains(dl_last_error(), dl_cuda_no_device_reason()));
  printf("%s\n", dl_last_error());
  o = options(DL_CUDA_MATH_TF32, DL_CUDA_CONV_FASTEST);
  b = &fake;
  assert_int_equal(dl_cuda_backend_create(&o, &b), DL_ERR_UNSUPPORTED);
  assert_null(b);
  assert_int_equal(dl_cuda_mem_current(), held);
  dl_cuda_backend_destroy(NULL);
}

static void test_bad_options(void **state) {
  (void)state;
  dl_backend fake, *b = &fake;
  dl_cuda_backend_options o = options(DL_CUDA_MATH_FP32, DL_CUDA_CONV_DETERMINISTIC);
  assert_int_equal(dl_cuda_backend_create(&o, NULL), DL_ERR_INVALID);
  assert_int_equal(dl_cuda_backend_create(NULL, &b), DL_ERR_INVALID);
  assert_null(b);
  assert_true(contains(dl_last_error(), "no options"));
  o.math = (dl_cuda_math)7;
  b = &fake;
  assert_int_equal(dl_cuda_backend_create(&o, &b), DL_ERR_INVALID);
  assert_null(b);
  assert_true(contains(dl_last_error(), "math mode 7"));
  o = options(DL_CUDA_MATH_TF32, (dl_cuda_conv_algo)5);
  assert_int_equal(dl_cuda_backend_create(&o, &b), DL_ERR_INVALID);
  assert_true(contains(dl_last_error(), "convolution algorithm choice 5"));
  /* A device that does not exist: no GPU here, or not that many. */
  o = options(DL_CUDA_MATH_FP32, DL_CUDA_CONV_FASTEST);
  o.device = 1000;
  b = &fake;
  assert_int_not_equal(dl_cuda_backend_create(&o, &b), DL_OK);
  assert_null(b);
}

static void test_names_and_texts(void **state) {
  (void)state;
  assert_string_equal(dl_cuda_conv_algo_name(DL_CUDA_CONV_DETERMINISTIC), "deterministic");
  assert_string_equal(dl_cuda_conv_algo_name(DL_CUDA_CONV_FASTEST), "fastest");
  assert_string_equal(dl_cuda_conv_algo_name((dl_cuda_conv_algo)9), "unknown");
  char buf[64] = "junk";
  assert_ptr_equal(dl_cuda_backend_algorithms(NULL, buf, sizeof buf), buf);
  assert_string_equal(buf, "");
  assert_ptr_equal(dl_cuda_backend_describe(NULL, buf, sizeof buf), buf);
  assert_string_equal(buf, "no CUDA backend");
}

#ifdef DL_CUDA_HAVE_CUDNN
static cudnnStatus_t give(cudnnStatus_t st) { return st; }

static dl_status try_cudnn(cudnnStatus_t st) {
  DL_CUDNN_TRY(give(st));
  return DL_OK;
}
#endif

/* DL_CUDNN_TRY: "file:line: call failed: reason (code)", the status by
 * the kind of failure. Needs cuDNN's library but no GPU. */
static void test_cudnn_failure_messages(void **state) {
  (void)state;
#ifdef DL_CUDA_HAVE_CUDNN
  assert_int_equal(dl_cudnn_fail(CUDNN_STATUS_BAD_PARAM, "c.c", 5, "cudnnX(h, d)"), DL_ERR_INVALID);
  assert_true(contains(dl_last_error(), "c.c:5: cudnnX(h, d) failed: "));
  assert_true(contains(dl_last_error(), "(2000)"));
  printf("%s\n", dl_last_error());
  assert_int_equal(dl_cudnn_fail(CUDNN_STATUS_BAD_PARAM_NULL_POINTER, "c.c", 5, "x"),
                   DL_ERR_INVALID);
  assert_int_equal(dl_cudnn_fail(CUDNN_STATUS_NOT_SUPPORTED, "c.c", 5, "x"), DL_ERR_UNSUPPORTED);
  assert_int_equal(dl_cudnn_fail(CUDNN_STATUS_NOT_SUPPORTED_SHAPE, "c.c", 5, "x"),
                   DL_ERR_UNSUPPORTED);
  assert_int_equal(dl_cudnn_fail(CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED, "c.c", 5, "x"),
                   DL_ERR_NOMEM);
  assert_int_equal(dl_cudnn_fail(CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED, "c.c", 5,
                                 "x"),
                   DL_ERR_NOMEM);
  assert_int_equal(dl_cudnn_fail(CUDNN_STATUS_EXECUTION_FAILED, "c.c", 5, "x"), DL_ERR_IO);
  assert_int_equal(dl_cudnn_fail(CUDNN_STATUS_NOT_INITIALIZED, "c.c", 5, "x"), DL_ERR_IO);
  assert_int_equal(try_cudnn(CUDNN_STATUS_SUCCESS), DL_OK);
  assert_int_equal(try_cudnn(CUDNN_STATUS_BAD_PARAM_OUT_OF_BOUND), DL_ERR_INVALID);
  assert_true(contains(dl_last_error(), "test_cuda_backend.c:"));
  assert_true(contains(dl_last_error(), "give(st) failed: "));
  assert_true(contains(dl_last_error(), "(2005)"));
#else
  printf("this build has no cuDNN: convolutions stay on the CPU\n");
  skip();
#endif
}

/* ================= needs a GPU ================= */

/* The backend's sgemm on its edges: empty products, C's rows with gaps
 * that are not C's and must survive, transposes, against dl_sgemm_ref. */
static void test_sgemm_edges(void **state) {
  (void)state;
  dl_backend *b = backend_or_skip(DL_CUDA_MATH_FP32, DL_CUDA_CONV_DETERMINISTIC);
  float A[64], B[64], C[64], want[64];
  fill(A, 64, 1);
  fill(B, 64, 2);
  /* K = 0: beta 0 zeroes C (gaps kept), beta 1 leaves it. */
  fill(C, 64, 3);
  memcpy(want, C, sizeof C);
  for (int m = 0; m < 3; m++)
    for (int n = 0; n < 4; n++) want[m * 6 + n] = 0.0f;
  ok(b->sgemm(b->impl, false, false, 3, 4, 0, A, 1, B, 4, 0.0f, C, 6));
  assert_memory_equal(C, want, sizeof C);
  fill(C, 64, 4);
  memcpy(want, C, sizeof C);
  ok(b->sgemm(b->impl, false, false, 3, 4, 0, A, 1, B, 4, 1.0f, C, 6));
  assert_memory_equal(C, want, sizeof C);
  /* M = 0, N = 0: nothing read or written. */
  ok(b->sgemm(b->impl, false, false, 0, 4, 5, NULL, 5, B, 4, 0.0f, C, 4));
  ok(b->sgemm(b->impl, true, true, 3, 0, 5, A, 3, NULL, 5, 1.0f, C, 1));
  assert_memory_equal(C, want, sizeof C);
  /* Every transpose, leading dimensions with gaps, beta 0 and 1. */
  for (int ta = 0; ta < 2; ta++)
    for (int tb = 0; tb < 2; tb++)
      for (int beta = 0; beta < 2; beta++) {
        const int64_t M = 3, N = 5, K = 4;
        const int64_t lda = (ta ? M : K) + 2, ldb = (tb ? K : N) + 1, ldc = N + 3;
        fill(C, 64, 10 + (uint64_t)(ta * 4 + tb * 2 + beta));
        float before[64];
        memcpy(before, C, sizeof C);
        memcpy(want, C, sizeof C);
        dl_sgemm_ref(ta, tb, M, N, K, A, lda, B, ldb, (float)beta, want, ldc);
        ok(b->sgemm(b->impl, ta, tb, M, N, K, A, lda, B, ldb, (float)beta, C, ldc));
        for (int64_t i = 0; i < 64; i++) {
          const bool in_c = i < M * ldc && i % ldc < N;
          if (!in_c) {
            assert_true(C[i] == want[i]); /* untouched, bitwise */
            continue;
          }
          /* |a|, |b| < 1: sum|a||b| < K, plus |C| when accumulating */
          const double mag = (double)K + (beta ? fabs(before[i]) : 0.0);
          if (fabs((double)C[i] - want[i]) > 4.0 * (K + 1) * 0x1p-24 * mag)
            fail_msg("ta %d tb %d beta %d: C[%lld] = %.9g, CPU %.9g", ta, tb, beta, (long long)i,
                     C[i], want[i]);
        }
      }
  /* Refusals name the call. */
  assert_int_equal(b->sgemm(b->impl, false, false, 2, 2, 3, A, 2, B, 2, 0.0f, C, 2),
                   DL_ERR_INVALID);
  assert_true(contains(dl_last_error(), "cuda sgemm NN M=2 N=2 K=3: lda = 2"));
  assert_int_equal(b->sgemm(b->impl, false, false, 2, 2, 2, A, 2, B, 2, 0.0f, NULL, 2),
                   DL_ERR_INVALID);
  assert_true(contains(dl_last_error(), "NULL matrix"));
  char text[512];
  printf("%s\n", dl_cuda_backend_describe(b, text, sizeof text));
  assert_true(contains(text, "cuda:0 ") && contains(text, "math fp32") &&
              contains(text, "conv deterministic") && contains(text, "cuBLAS "));
  /* dl_cuda_init sets :4096:8 unless the environment chose already. */
  const char *wc = getenv("CUBLAS_WORKSPACE_CONFIG");
  char want_wc[128];
  snprintf(want_wc, sizeof want_wc, "CUBLAS_WORKSPACE_CONFIG=%s", wc ? wc : "");
  assert_non_null(wc);
  assert_true(contains(text, want_wc));
  dl_cuda_backend_destroy(b);
}

/* ---- one layer, CPU against GPU ---- */

typedef struct pass {
  dl_tensor y, dx, gw, gb;
} pass;

static void pass_free(pass *p) {
  dl_tensor_free(&p->y);
  dl_tensor_free(&p->dx);
  dl_tensor_free(&p->gw);
  dl_tensor_free(&p->gb);
}

static void tensor_abs(dl_tensor *t) {
  float *v = dl_f32(t);
  for (int64_t i = 0; i < t->numel; i++) v[i] = fabsf(v[i]);
}

/* Forward, then `backwards` backward passes (gradients accumulate), of a
 * layer built from d with seed 1234; with `absolute`, its parameters are
 * replaced by their absolute values (the magnitude pass). */
static void run_pass(const dl_layer_desc *d, const dl_backend *b, bool absolute, const dl_tensor *x,
                     const dl_tensor *dy, int backwards, pass *out) {
  memset(out, 0, sizeof *out);
  dl_layer l;
  ok(dl_layer_init(&l, d, "", 0, 1234));
  for (int i = 0; absolute && i < l.nparams; i++) tensor_abs(&l.params[i].value);
  dl_ctx ctx;
  memset(&ctx, 0, sizeof ctx);
  ctx.grad_enabled = true;
  ctx.autocast = DL_F32;
  ctx.backend = b;
  ok(l.ops->forward(&l, &ctx, x, &out->y));
  for (int i = 0; i < backwards; i++) {
    dl_tensor dx = {0};
    ok(l.ops->backward(&l, &ctx, x, &out->y, dy, &dx));
    if (i == 0) out->dx = dx;
    else dl_tensor_free(&dx);
  }
  ok(dl_tensor_clone(&out->gw, &l.params[0].grad, "weight grad"));
  if (l.nparams > 1) ok(dl_tensor_clone(&out->gb, &l.params[1].grad, "bias grad"));
  dl_layer_destroy(&l);
}

/* |got - want| <= scale * mag + 1e-5 max(mag) at every element, where
 * scale is 4 K 2^-24 (fp32) or rtol. Returns the largest
 * |got - want| / (K 2^-24 mag): above 4 means outside the fp32 bound. */
static double check_close(const char *what, const dl_tensor *got, const dl_tensor *want,
                          const dl_tensor *mag, int64_t K, double rtol) {
  assert_int_equal(got->numel, want->numel);
  assert_int_equal(got->numel, mag->numel);
  const float *g = dl_f32(got), *w = dl_f32(want), *m = dl_f32(mag);
  double max_mag = 0.0, worst = 0.0;
  for (int64_t i = 0; i < got->numel; i++) max_mag = fmax(max_mag, m[i]);
  const double unit = (double)K * 0x1p-24, scale = rtol > 0 ? rtol : 4.0 * unit;
  for (int64_t i = 0; i < got->numel; i++) {
    const double d = fabs((double)g[i] - w[i]);
    if (!isfinite(g[i]) || d > scale * m[i] + 1e-5 * max_mag)
      fail_msg("%s[%lld]: GPU %.9g, CPU %.9g, |diff| %.3g > %.3g (magnitude %.6g, K %lld)", what,
               (long long)i, g[i], w[i], d, scale * m[i] + 1e-5 * max_mag, m[i], (long long)K);
    worst = fmax(worst, d / (unit * fmax(m[i], 1e-30)));
  }
  return worst;
}

static bool same_bits(const dl_tensor *a, const dl_tensor *b) {
  return a->numel == b->numel && memcmp(a->data, b->data, (size_t)a->numel * sizeof(float)) == 0;
}

/* Sum lengths of y, dx and dW for the layer. */
typedef struct sum_lengths {
  int64_t y, dx, dw;
} sum_lengths;

typedef struct layer_case {
  const char *name;
  dl_layer_desc d;
  int ndim;
  int64_t xshape[4];
  sum_lengths k;
} layer_case;

/* Runs the case on the CPU, on b, and the magnitude pass; checks, and
 * returns the worst ratios (see check_close) in *worst if given. */
static void compare_case(const layer_case *c, const dl_backend *b, double rtol, double *worst) {
  dl_tensor x = {0}, dy = {0}, xa = {0}, dya = {0};
  ok(dl_tensor_alloc(&x, DL_F32, c->ndim, c->xshape, "x"));
  fill(dl_f32(&x), x.numel, 21);
  pass cpu, gpu, mag;
  /* dy has y's shape: take it from a CPU forward. */
  {
    dl_layer l;
    ok(dl_layer_init(&l, &c->d, "", 0, 1234));
    dl_ctx ctx;
    memset(&ctx, 0, sizeof ctx);
    ctx.autocast = DL_F32;
    dl_tensor y = {0};
    ok(l.ops->forward(&l, &ctx, &x, &y));
    ok(dl_tensor_alloc(&dy, DL_F32, y.ndim, y.shape, "dy"));
    dl_tensor_free(&y);
    dl_layer_destroy(&l);
  }
  fill(dl_f32(&dy), dy.numel, 22);
  run_pass(&c->d, NULL, false, &x, &dy, 1, &cpu);
  run_pass(&c->d, b, false, &x, &dy, 1, &gpu);
  ok(dl_tensor_clone(&xa, &x, "|x|"));
  ok(dl_tensor_clone(&dya, &dy, "|dy|"));
  tensor_abs(&xa);
  tensor_abs(&dya);
  run_pass(&c->d, NULL, true, &xa, &dya, 1, &mag);
  char what[128];
  double w[4];
  snprintf(what, sizeof what, "%s y", c->name);
  w[0] = check_close(what, &gpu.y, &cpu.y, &mag.y, c->k.y, rtol);
  snprintf(what, sizeof what, "%s dx", c->name);
  w[1] = check_close(what, &gpu.dx, &cpu.dx, &mag.dx, c->k.dx, rtol);
  snprintf(what, sizeof what, "%s dW", c->name);
  w[2] = check_close(what, &gpu.gw, &cpu.gw, &mag.gw, c->k.dw, rtol);
  w[3] = 0.0;
  if (c->d.bias) /* db is summed on the CPU on both paths: bitwise */
    assert_true(same_bits(&gpu.gb, &cpu.gb));
  printf("%-28s worst |gpu-cpu| / (K 2^-24 sum|a||b|): y %.3g, dx %.3g, dW %.3g\n", c->name, w[0],
         w[1], w[2]);
  if (worst) memcpy(worst, w, sizeof w);
  pass_free(&cpu);
  pass_free(&gpu);
  pass_free(&mag);
  dl_tensor_free(&x);
  dl_tensor_free(&dy);
  dl_tensor_free(&xa);
  dl_tensor_free(&dya);
}

static layer_case linear_case(void) {
  layer_case c = {.name = "linear 64x96 -> 40", .ndim = 2, .xshape = {64, 96}};
  c.d = dl_layer_default(DL_LINEAR);
  c.d.in = 96;
  c.d.out = 40;
  c.k = (sum_lengths){97, 40, 64}; /* y: in + the bias; dx: out; dW: rows */
  return c;
}

typedef struct conv_spec {
  int64_t n, c, h, w, o;
  int k, stride, pad;
  bool bias;
} conv_spec;

static const conv_spec conv_specs[] = {
    {2, 3, 8, 8, 4, 3, 1, 1, true},     /* k3 s1 p1 */
    {8, 3, 28, 28, 16, 5, 1, 2, true},  /* k5 s1 p2, a LeNet-like first layer */
    {3, 4, 9, 9, 6, 3, 2, 1, true},     /* k3 s2 p1 */
    {2, 5, 6, 6, 7, 1, 1, 0, false},    /* k1 s1 p0 */
    {2, 3, 7, 9, 4, 3, 1, 1, true},     /* odd, non-square input */
    {2, 2, 7, 9, 3, 3, 2, 0, true},     /* odd sizes, stride 2, rows left over */
    {4, 16, 12, 12, 32, 3, 1, 1, true}, /* enough channels for tensor cores */
};

/* The case of spec s; its name is written into name[len]. */
static layer_case conv_case(const conv_spec *s, char *name, size_t len) {
  layer_case c = {.ndim = 4, .xshape = {s->n, s->c, s->h, s->w}};
  snprintf(name, len, "conv [%lld,%lld,%lld,%lld] k%d s%d p%d", (long long)s->n, (long long)s->c,
           (long long)s->h, (long long)s->w, s->k, s->stride, s->pad);
  c.name = name;
  c.d = dl_layer_default(DL_CONV2D);
  c.d.in = s->c;
  c.d.out = s->o;
  c.d.kernel = s->k;
  c.d.stride = s->stride;
  c.d.padding = s->pad;
  c.d.bias = s->bias;
  const int64_t oh = (s->h + 2 * s->pad - s->k) / s->stride + 1;
  const int64_t ow = (s->w + 2 * s->pad - s->k) / s->stride + 1;
  /* y: c k k products (the bias is added after, one more rounding);
   * dx: at most o k k; dW: n oh ow. */
  c.k = (sum_lengths){s->c * s->k * s->k + 1, s->o * s->k * s->k, s->n * oh * ow};
  return c;
}

enum { NCONV = sizeof conv_specs / sizeof conv_specs[0] };

static bool have_conv(const dl_backend *b) {
  if (dl_backend_has_conv2d(b)) return true;
#ifdef DL_CUDA_HAVE_CUDNN
  fail_msg("built with cuDNN but the backend runs no convolutions");
#endif
  assert_null(b->conv2d_forward);
  printf("no cuDNN in this build: convolutions stay on the CPU\n");
  return false;
}

static void test_linear_fp32(void **state) {
  (void)state;
  const int64_t before = dl_cuda_mem_current();
  dl_backend *b = backend_or_skip(DL_CUDA_MATH_FP32, DL_CUDA_CONV_DETERMINISTIC);
  layer_case c = linear_case();
  compare_case(&c, b, 0.0, NULL);
  /* The staging buffers hold device memory until destroy. */
  assert_true(dl_cuda_mem_current() > before);
  dl_cuda_backend_destroy(b);
  assert_int_equal(dl_cuda_mem_current(), before);
}

/* Every geometry of conv_specs within the fp32 bound. */
static void compare_conv_specs(dl_backend *b) {
  for (size_t i = 0; i < NCONV; i++) {
    char name[64];
    layer_case c = conv_case(&conv_specs[i], name, sizeof name);
    compare_case(&c, b, 0.0, NULL);
  }
}

static void test_conv_fp32(void **state) {
  (void)state;
  const int64_t before = dl_cuda_mem_current();
  dl_backend *b = backend_or_skip(DL_CUDA_MATH_FP32, DL_CUDA_CONV_DETERMINISTIC);
  if (have_conv(b)) {
    compare_conv_specs(b);
    char text[1024];
    printf("algorithms: %s\n", dl_cuda_backend_algorithms(b, text, sizeof text));
    assert_true(contains(text, "fwd ") && contains(text, "bwd-data ") &&
                contains(text, "bwd-filter "));
    assert_false(contains(text, "non-deterministic"));
  }
  dl_cuda_backend_destroy(b);
  assert_int_equal(dl_cuda_mem_current(), before);
}

/* More geometries than the backend's plan cache holds, twice over: plans
 * are evicted and rebuilt, results stay within the bound. */
static void test_conv_many_geometries(void **state) {
  (void)state;
  dl_backend *b = backend_or_skip(DL_CUDA_MATH_FP32, DL_CUDA_CONV_DETERMINISTIC);
  if (have_conv(b)) {
    for (int round = 0; round < 2; round++)
      for (int i = 1; i <= 40; i++) { /* 40 distinct geometries */
        const conv_spec s = {i % 5 + 1, 2, 5 + i % 7, 6 + i / 10, 3, 3, 1 + i % 2, 1, i % 2 == 0};
        char name[64];
        layer_case c = conv_case(&s, name, sizeof name);
        compare_case(&c, b, 0.0, NULL);
      }
  }
  dl_cuda_backend_destroy(b);
}

/* TF32: within 2e-2 of the CPU, and the linear layer visibly outside the
 * fp32 bound somewhere (TF32 really is on). Whether cuDNN uses TF32 for a
 * convolution is its choice: printed, not asserted. */
static void test_tf32(void **state) {
  (void)state;
  dl_backend *b = backend_or_skip(DL_CUDA_MATH_TF32, DL_CUDA_CONV_DETERMINISTIC);
  char text[512];
  printf("%s\n", dl_cuda_backend_describe(b, text, sizeof text));
  assert_true(contains(text, "math tf32"));
  layer_case lc = linear_case();
  double w[4];
  compare_case(&lc, b, 2e-2, w);
  assert_true(w[0] > 4.0 || w[1] > 4.0 || w[2] > 4.0);
  if (have_conv(b)) {
    for (size_t i = 0; i < NCONV; i++) {
      char name[64];
      layer_case c = conv_case(&conv_specs[i], name, sizeof name);
      compare_case(&c, b, 2e-2, w);
      printf("  %s under tf32: %s the fp32 bound\n", c.name,
             w[0] > 4.0 || w[1] > 4.0 || w[2] > 4.0 ? "outside" : "within");
    }
  }
  dl_cuda_backend_destroy(b);
}

/* The fastest choice may use atomics: still within the fp32 bound. */
static void test_conv_fastest(void **state) {
  (void)state;
  dl_backend *b = backend_or_skip(DL_CUDA_MATH_FP32, DL_CUDA_CONV_FASTEST);
  if (have_conv(b)) {
    compare_conv_specs(b);
    char text[1024];
    printf("fastest: %s\n", dl_cuda_backend_algorithms(b, text, sizeof text));
  }
  dl_cuda_backend_destroy(b);
}

/* Deterministic mode: the same call twice gives the same bits, on one
 * backend and on a second one; two backwards accumulate grad = g1 + g2
 * (the layer adds on the CPU), bitwise. */
static void deterministic_case(const layer_case *c, dl_backend *b, dl_backend *b2) {
  dl_tensor x = {0}, dy = {0};
  ok(dl_tensor_alloc(&x, DL_F32, c->ndim, c->xshape, "x"));
  fill(dl_f32(&x), x.numel, 31);
  pass p1, p2, p3, acc;
  run_pass(&c->d, b, false, &x, NULL, 0, &p1); /* y's shape for dy */
  ok(dl_tensor_alloc(&dy, DL_F32, p1.y.ndim, p1.y.shape, "dy"));
  fill(dl_f32(&dy), dy.numel, 32);
  pass_free(&p1);
  run_pass(&c->d, b, false, &x, &dy, 1, &p1);
  run_pass(&c->d, b, false, &x, &dy, 1, &p2);
  run_pass(&c->d, b2, false, &x, &dy, 1, &p3);
  run_pass(&c->d, b, false, &x, &dy, 2, &acc);
  const pass *others[2] = {&p2, &p3};
  for (int i = 0; i < 2; i++) {
    if (!same_bits(&p1.y, &others[i]->y) || !same_bits(&p1.dx, &others[i]->dx) ||
        !same_bits(&p1.gw, &others[i]->gw))
      fail_msg("%s: not bitwise the same %s", c->name,
               i == 0 ? "twice on one backend" : "on a second backend");
  }
  const float *g = dl_f32(&p1.gw), *a = dl_f32(&acc.gw);
  for (int64_t i = 0; i < p1.gw.numel; i++)
    if (!(a[i] == g[i] + g[i]))
      fail_msg("%s: dW after two backwards [%lld] = %.9g, not g1 + g2 = %.9g", c->name,
               (long long)i, a[i], g[i] + g[i]);
  if (c->d.bias) {
    const float *gb = dl_f32(&p1.gb), *ab = dl_f32(&acc.gb);
    for (int64_t i = 0; i < p1.gb.numel; i++) assert_true(ab[i] == gb[i] + gb[i]);
  }
  pass_free(&p1);
  pass_free(&p2);
  pass_free(&p3);
  pass_free(&acc);
  dl_tensor_free(&x);
  dl_tensor_free(&dy);
}

static void test_deterministic_and_accumulation(void **state) {
  (void)state;
  dl_backend *b = backend_or_skip(DL_CUDA_MATH_FP32, DL_CUDA_CONV_DETERMINISTIC);
  dl_backend *b2 = backend_or_skip(DL_CUDA_MATH_FP32, DL_CUDA_CONV_DETERMINISTIC);
  layer_case lc = linear_case();
  deterministic_case(&lc, b, b2);
  if (have_conv(b))
    for (size_t i = 0; i < NCONV; i++) {
      char name[64];
      layer_case c = conv_case(&conv_specs[i], name, sizeof name);
      deterministic_case(&c, b, b2);
    }
  dl_cuda_backend_destroy(b);
  dl_cuda_backend_destroy(b2);
}

/* Optimizer steps through the backend (kernels.cu runs optim_elem.h, the
 * code dl_optim_step runs): values and state bitwise equal to the CPU's
 * over three steps, for SGD with Nesterov momentum, Adam and AdamW. */
static void optim_case(dl_backend *b, const dl_optim_desc *d) {
  enum { N = 1000 };
  dl_param cpu, gpu;
  dl_param *pc = &cpu, *pg = &gpu;
  dl_param *ps[2] = {&cpu, &gpu};
  for (int k = 0; k < 2; k++) {
    memset(ps[k], 0, sizeof cpu);
    snprintf(ps[k]->name, sizeof ps[k]->name, "w");
    ok(dl_tensor_f32(&ps[k]->value, 1, N, 0, 0, 0, "w"));
    ok(dl_tensor_f32(&ps[k]->grad, 1, N, 0, 0, 0, "g"));
    fill(dl_f32(&ps[k]->value), N, 70);
    ps[k]->requires_grad = ps[k]->in_optimizer = ps[k]->has_grad = true;
  }
  dl_optim *oc = NULL, *og = NULL;
  ok(dl_optim_create(&oc, d, &pc, 1));
  ok(dl_optim_create(&og, d, &pg, 1));
  for (int step = 0; step < 3; step++) {
    fill(dl_f32(&cpu.grad), N, 80 + (uint64_t)step);
    memcpy(gpu.grad.data, cpu.grad.data, N * sizeof(float));
    ok(dl_optim_step(oc, 0.05f));
    ok(dl_optim_step_on(og, 0.05f, b));
  }
  assert_memory_equal(gpu.value.data, cpu.value.data, N * sizeof(float));
  for (int i = 0; i < dl_optim_num_state(oc); i++) {
    const char *name;
    dl_tensor *tc, *tg;
    ok(dl_optim_state(oc, i, &name, &tc));
    ok(dl_optim_state(og, i, &name, &tg));
    assert_memory_equal(tg->data, tc->data, dl_tensor_bytes(tc));
  }
  dl_optim_destroy(oc);
  dl_optim_destroy(og);
  for (int k = 0; k < 2; k++) {
    dl_tensor_free(&ps[k]->value);
    dl_tensor_free(&ps[k]->grad);
  }
}

static void test_optim_bitwise(void **state) {
  (void)state;
  dl_backend *b = backend_or_skip(DL_CUDA_MATH_FP32, DL_CUDA_CONV_DETERMINISTIC);
  dl_optim_desc d[3] = {dl_optim_default(DL_OPTIM_SGD), dl_optim_default(DL_OPTIM_ADAM),
                        dl_optim_default(DL_OPTIM_ADAMW)};
  d[0].momentum = 0.9;
  d[0].nesterov = true;
  d[0].weight_decay = 1e-4;
  d[1].weight_decay = 1e-2;
  for (int i = 0; i < 3; i++) optim_case(b, &d[i]);
  dl_cuda_backend_destroy(b);
}

/* Dropout masks from the device Philox through the layer: the CPU's
 * output and mask bit for bit (rows keyed by sample ids, odd widths). */
static void test_dropout_bitwise(void **state) {
  (void)state;
  dl_backend *b = backend_or_skip(DL_CUDA_MATH_FP32, DL_CUDA_CONV_DETERMINISTIC);
  dl_layer_desc d = dl_layer_default(DL_DROPOUT);
  d.p = 0.4f;
  int64_t ids[17];
  for (int i = 0; i < 17; i++) ids[i] = 1000 + 7 * i;
  dl_tensor x = {0}, y[2] = {{0}}, mask[2] = {{0}};
  ok(dl_tensor_f32(&x, 2, 17, 301, 0, 0, "x"));
  fill(dl_f32(&x), x.numel, 90);
  for (int k = 0; k < 2; k++) {
    dl_layer l;
    ok(dl_layer_init(&l, &d, "3.", 5, 11));
    dl_ctx ctx = {.grad_enabled = true,
                  .autocast = DL_F32,
                  .seed = 11,
                  .step = 2,
                  .sample_ids = ids,
                  .backend = k ? b : NULL};
    ok(l.ops->forward(&l, &ctx, &x, &y[k]));
    ok(dl_tensor_clone(&mask[k], &l.saved[0], "mask"));
    dl_layer_destroy(&l);
  }
  assert_memory_equal(y[1].data, y[0].data, dl_tensor_bytes(&y[0]));
  assert_memory_equal(mask[1].data, mask[0].data, dl_tensor_bytes(&mask[0]));
  for (int k = 0; k < 2; k++) dl_tensor_free(&y[k]), dl_tensor_free(&mask[k]);
  dl_tensor_free(&x);
  dl_cuda_backend_destroy(b);
}

/* The backend's own refusals name the operation and the geometry. */
static void test_conv_refusals(void **state) {
  (void)state;
  dl_backend *b = backend_or_skip(DL_CUDA_MATH_FP32, DL_CUDA_CONV_DETERMINISTIC);
  if (have_conv(b)) {
    float x[2 * 3 * 8 * 8], w[4 * 3 * 3 * 3], y[2 * 4 * 8 * 8];
    fill(x, 2 * 3 * 8 * 8, 41);
    fill(w, 4 * 3 * 3 * 3, 42);
    dl_conv2d_shape g = {.n = 2,
                         .c = 3,
                         .h = 8,
                         .w = 8,
                         .o = 4,
                         .k = 3,
                         .stride = 1,
                         .pad = 1,
                         .oh = 7,
                         .ow = 8}; /* oh should be 8 */
    assert_int_equal(b->conv2d_forward(b->impl, &g, x, w, y), DL_ERR_INVALID);
    printf("%s\n", dl_last_error());
    assert_true(contains(dl_last_error(), "conv2d forward [2,3,8,8] k3 s1 p1"));
    g.oh = 8;
    g.k = 0;
    assert_int_equal(b->conv2d_backward_filter(b->impl, &g, x, y, w), DL_ERR_INVALID);
    assert_true(contains(dl_last_error(), "conv2d backward filter [2,3,8,8] k0 s1 p1"));
    g.k = 3;
    assert_int_equal(b->conv2d_backward_data(b->impl, &g, y, NULL, x), DL_ERR_INVALID);
    assert_true(contains(dl_last_error(), "conv2d backward data [2,3,8,8] k3 s1 p1"));
    /* An empty batch: dW is zero, the rest has nothing to write. */
    g.n = 0;
    ok(b->conv2d_backward_filter(b->impl, &g, NULL, NULL, w));
    for (int i = 0; i < 4 * 3 * 3 * 3; i++) assert_true(w[i] == 0.0f);
    ok(b->conv2d_forward(b->impl, &g, NULL, w, NULL));
  }
  dl_cuda_backend_destroy(b);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_create_without_gpu),
      cmocka_unit_test(test_bad_options),
      cmocka_unit_test(test_names_and_texts),
      cmocka_unit_test(test_cudnn_failure_messages),
      cmocka_unit_test(test_sgemm_edges),
      cmocka_unit_test(test_linear_fp32),
      cmocka_unit_test(test_conv_fp32),
      cmocka_unit_test(test_conv_many_geometries),
      cmocka_unit_test(test_tf32),
      cmocka_unit_test(test_conv_fastest),
      cmocka_unit_test(test_deterministic_and_accumulation),
      cmocka_unit_test(test_conv_refusals),
      cmocka_unit_test(test_optim_bitwise),
      cmocka_unit_test(test_dropout_bitwise),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

#else /* built without CUDA */

static void test_cuda_backend_not_built(void **state) {
  (void)state;
  printf("no CUDA device: this build has no CUDA backend (CMake found no nvcc)\n");
  skip();
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_cuda_backend_not_built)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}

#endif
