/* The CUDA backend (engine/backend/cuda).
 *
 * Without a GPU (CI, this machine): the E1-E3 checks on a machine without
 * a driver (test_cuda_env.c tests the decisions), dl_cuda_device_count's answer
 * and reason, the refusals of bad arguments, and the host twins of the
 * kernels' element code against the engine (Philox uniforms against
 * dl_stream_uniform, the sum order on known answers). Every GPU test then
 * skips with "no CUDA device: <reason>". The optimizer kernel runs
 * optim_elem.h, the code dl_optim_step runs: no twin needed.
 *
 * With a GPU (ci/gpu-check.sh): each kernel against the CPU on random,
 * never-zero data; cuBLAS GEMMs against dl_sgemm_ref and float64 within a
 * stated bound; TF32 visibly worse than FP32. */
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

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device.h"
#include "backend/cuda/env_checks.h"
#include "backend/cuda/gemm.h"
#include "backend/cuda/kernels.h"
#include "numerics/half.h"
#include "core/mem.h"
#include "optim/optim.h"
#include "numerics/philox.h"
#include "backend/cpu/sgemm.h"

/* ---- helpers ---- */

/* Uniform in [-1, 1), never exactly zero: zeros hide unwritten outputs. */
static void fill(float *x, int64_t n, uint64_t seed) {
  dl_stream s = dl_stream_make(seed, "test_cuda", NULL, 0);
  dl_stream_uniform_range(&s, 0, -1.0f, 1.0f, x, n);
  for (int64_t i = 0; i < n; i++)
    if (x[i] == 0.0f) x[i] = 0.5f;
}

static float *host_floats(int64_t n) {
  float *x = malloc((size_t)(n > 0 ? n : 1) * sizeof *x);
  assert_non_null(x);
  return x;
}

/* Skips the calling test, saying why, when this machine has no GPU. */
static dl_cuda *gpu_or_skip(dl_cuda_math math) {
  int n = 0;
  if (dl_cuda_device_count(&n) != DL_OK) {
    printf("no CUDA device: %s\n", dl_cuda_no_device_reason());
    skip();
  }
  dl_cuda *ctx = NULL;
  dl_status s = dl_cuda_init(0, math, &ctx);
  if (s != DL_OK) fail_msg("dl_cuda_init: %s", dl_last_error());
  return ctx;
}

static void ok(dl_status s) {
  if (s != DL_OK) fail_msg("%s: %s", dl_status_name(s), dl_last_error());
}

static float *to_device(dl_cuda *ctx, const float *x, int64_t n, const char *what) {
  void *d = NULL;
  ok(dl_cuda_alloc(ctx, (size_t)n * sizeof(float), what, &d));
  ok(dl_cuda_upload_bytes(ctx, d, x, (size_t)n * sizeof(float), what));
  return d;
}

static void from_device(dl_cuda *ctx, float *x, const float *d, int64_t n) {
  ok(dl_cuda_download_bytes(ctx, x, d, (size_t)n * sizeof(float), "result"));
}

static bool contains(const char *text, const char *part) { return strstr(text, part) != NULL; }

/* ================= runs everywhere ================= */

static void test_device_count_and_reason(void **state) {
  (void)state;
  int n = -1;
  dl_status s = dl_cuda_device_count(&n);
  if (s == DL_OK) {
    assert_true(n > 0);
    assert_string_equal(dl_cuda_no_device_reason(), "");
    return;
  }
  assert_int_equal(s, DL_ERR_UNSUPPORTED);
  assert_int_equal(n, 0);
  assert_true(contains(dl_last_error(), "no CUDA device: "));
  assert_true(strlen(dl_cuda_no_device_reason()) > 0);
  assert_true(contains(dl_last_error(), dl_cuda_no_device_reason()));
  printf("no CUDA device: %s\n", dl_cuda_no_device_reason());
  dl_cuda *ctx = (dl_cuda *)&n; /* must be reset to NULL on failure */
  assert_int_equal(dl_cuda_init(0, DL_CUDA_MATH_FP32, &ctx), DL_ERR_UNSUPPORTED);
  assert_null(ctx);
}

static void test_env_checks_on_this_machine(void **state) {
  (void)state;
  dl_cuda_check c[3];
  dl_cuda_env_checks(0, c);
  static const char *const ids[] = {"E1", "E2", "E3"};
  for (int i = 0; i < 3; i++) {
    assert_string_equal(c[i].id, ids[i]);
    assert_true(strlen(c[i].message) > 0);
    printf("%s %s%s: %s\n", c[i].id, c[i].applicable ? "" : "not applicable, ",
           c[i].ok ? "ok" : "FAIL", c[i].message);
    if (!c[i].applicable) assert_true(c[i].ok);
  }
  int driver_probe = 0;
  if (dl_cuda_device_count(&driver_probe) != DL_OK && !c[0].applicable) {
    /* no driver: all three say so, and none fails */
    for (int i = 0; i < 3; i++) {
      assert_false(c[i].applicable);
      assert_true(contains(c[i].message, "no CUDA driver: E1-E3 not applicable"));
    }
  }
}

static void test_built_versions(void **state) {
  (void)state;
  dl_cuda_versions v;
  dl_cuda_built_versions(&v);
  assert_true(v.runtime >= 11000);
  assert_true(v.cublas >= 110000);
  const char *archs = dl_cuda_built_archs();
  assert_true(strlen(archs) > 0);
  assert_false(contains(archs, ";")); /* the CMake list arrives ',' separated */
}

/* What this process loaded: the linked runtime and cuBLAS at least. */
static void test_loaded_versions(void **state) {
  (void)state;
  dl_cuda_versions built, loaded;
  dl_cuda_built_versions(&built);
  dl_cuda_loaded_versions(&loaded);
  assert_true(loaded.runtime >= 11000);
  assert_true(loaded.cublas >= 110000);
  dl_cuda_check c;
  dl_cuda_check_built_vs_loaded(&built, &loaded, DL_CUDA_DLCHECK, &c);
  printf("E3 here: %s: %s\n", c.ok ? "ok" : "FAIL", c.message);
  assert_true(contains(c.message, "cuBLAS"));
}

static dl_status set_device(int d) {
  DL_CUDA_TRY(cudaSetDevice(d));
  return DL_OK;
}

static dl_status gemm_without_handle(void) {
  float one = 1.0f;
  DL_CUBLAS_TRY(
      cublasSgemm(NULL, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 1, &one, &one, 1, &one, 1, &one, &one, 1));
  return DL_OK;
}

/* DL_CUDA_TRY / DL_CUBLAS_TRY: "file:line: call failed: reason (code)",
 * with a status that says what kind of failure it was. */
static void test_failure_messages(void **state) {
  (void)state;
  assert_int_equal(dl_cuda_fail(cudaErrorMemoryAllocation, "f.c", 3, "cudaMalloc(&p, n)"),
                   DL_ERR_NOMEM);
  assert_string_equal(dl_last_error(), "f.c:3: cudaMalloc(&p, n) failed: out of memory (2)");
  assert_int_equal(dl_cuda_fail(cudaErrorInvalidValue, "f.c", 1, "x"), DL_ERR_INVALID);
  assert_int_equal(dl_cuda_fail(cudaErrorNoKernelImageForDevice, "f.c", 1, "k<<<>>>"),
                   DL_ERR_UNSUPPORTED);
  assert_true(contains(dl_last_error(), "no kernel image is available"));
  assert_int_equal(dl_cuda_fail(cudaErrorLaunchFailure, "f.c", 1, "k<<<>>>"), DL_ERR_IO);
  assert_int_equal(dl_cublas_fail(CUBLAS_STATUS_ALLOC_FAILED, "g.c", 7, "cublasCreate(&h)"),
                   DL_ERR_NOMEM);
  assert_true(contains(dl_last_error(), "g.c:7: cublasCreate(&h) failed: "));
  assert_true(contains(dl_last_error(), "(3)"));
  assert_int_equal(dl_cublas_fail(CUBLAS_STATUS_INVALID_VALUE, "g.c", 7, "x"), DL_ERR_INVALID);
  assert_int_equal(dl_cublas_fail(CUBLAS_STATUS_NOT_SUPPORTED, "g.c", 7, "x"), DL_ERR_UNSUPPORTED);
  assert_int_equal(dl_cublas_fail(CUBLAS_STATUS_EXECUTION_FAILED, "g.c", 7, "x"), DL_ERR_IO);

  int n = 0;
  bool gpu = dl_cuda_device_count(&n) == DL_OK;
  assert_int_not_equal(set_device(gpu ? -1 : 0), DL_OK); /* no GPU here, or no GPU -1 */
  assert_true(contains(dl_last_error(), "cudaSetDevice(d) failed: "));
  assert_int_not_equal(gemm_without_handle(), DL_OK);
  assert_true(contains(dl_last_error(), "cublasSgemm(NULL, "));
}

/* dl_cuda_sum_ref's order gives exact, order-revealing answers. */
static void test_sum_ref_known_answers(void **state) {
  (void)state;
  assert_true(dl_cuda_sum_ref(NULL, 0) == 0.0f);
  /* Lanes 0 and 2 meet first (1 + 1 = 2), then 2 + 2^24 is exact:
   * 16777218. Left to right gives 2^24 (2^24 + 1 rounds to even twice). */
  const float three[3] = {1.0f, 0x1p24f, 1.0f};
  assert_true(dl_cuda_sum_ref(three, 3) == 16777218.0f);
  /* Integers sum exactly in any order below 2^24. */
  enum { N = 3 * DL_CUDA_SUM_SLICE + 17 };
  float *x = host_floats(N);
  double exact = 0.0;
  for (int i = 0; i < N; i++) exact += x[i] = (float)(i % 7 - 3);
  assert_true((double)dl_cuda_sum_ref(x, N) == exact);
  /* Random data: within n * 2^-24 * sum|x| of the float64 sum. */
  fill(x, N, 5);
  double sum = 0.0, abs_sum = 0.0;
  for (int i = 0; i < N; i++) sum += x[i], abs_sum += fabs(x[i]);
  assert_true(fabs(dl_cuda_sum_ref(x, N) - sum) <= N * 0x1p-24 * abs_sum);
  free(x);
}

/* The device's Philox code, run on the host: the same bits as the CPU's. */
static void test_uniform_host_twin(void **state) {
  (void)state;
  static const uint64_t starts[] = {0, 1, 2, 3, 5, (1ULL << 33) + 1, UINT64_MAX - 4};
  static const int64_t counts[] = {1, 2, 3, 4, 5, 1000, 4099};
  uint64_t idx[3] = {3, 7, 11};
  dl_stream s = dl_stream_make(0x0123456789abcdefULL, "dropout", idx, 3);
  float *want = host_floats(4099), *got = host_floats(4099);
  for (size_t a = 0; a < sizeof starts / sizeof *starts; a++)
    for (size_t b = 0; b < sizeof counts / sizeof *counts; b++) {
      int64_t n = counts[b];
      if (starts[a] > UINT64_MAX - (uint64_t)n) continue;
      dl_stream_uniform(&s, starts[a], want, n);
      memset(got, 0xff, (size_t)n * sizeof *got);
      dl_cuda_uniform_host(&s, starts[a], got, n);
      assert_memory_equal(want, got, (size_t)n * sizeof *got);
    }
  free(want);
  free(got);
}

enum { OPT_N = 257, OPT_STEPS = 3 };

static void opt_grad(float *g, int step) { fill(g, OPT_N, 100 + (uint64_t)step); }

static dl_optim_desc sgd_desc(double momentum, double dampening, double wd, bool nesterov) {
  dl_optim_desc d = dl_optim_default(DL_OPTIM_SGD);
  d.momentum = momentum;
  d.dampening = dampening;
  d.weight_decay = wd;
  d.nesterov = nesterov;
  return d;
}

static dl_optim_desc adam_desc(dl_optim_kind kind, double wd) {
  dl_optim_desc d = dl_optim_default(kind);
  d.weight_decay = wd;
  return d;
}

/* ---- dropout masks ---- */

enum { DROP_SEED = 31, DROP_LAYER = 4, DROP_STEP = 6 };

/* A dropout layer's mask on the CPU for rows keyed by sample ids 50 + 2r,
 * and the streams it keys them with (cpu/dropout.c's rule 1). */
static void cpu_dropout_mask(int64_t rows, int64_t features, float p, float *mask,
                             dl_stream *streams) {
  dl_layer_desc d = dl_layer_default(DL_DROPOUT);
  d.p = p;
  dl_layer l;
  ok(dl_layer_init(&l, &d, "", DROP_LAYER, DROP_SEED));
  int64_t *ids = malloc((size_t)rows * sizeof *ids);
  assert_non_null(ids);
  for (int64_t r = 0; r < rows; r++) {
    ids[r] = 50 + 2 * r;
    uint64_t idx[3] = {DROP_LAYER, DROP_STEP, (uint64_t)ids[r]};
    streams[r] = dl_stream_make(DROP_SEED, "dropout", idx, 3);
  }
  dl_tensor x = {0}, y = {0};
  ok(dl_tensor_f32(&x, 2, rows, features, 0, 0, "x"));
  dl_ctx ctx = {.grad_enabled = true,
                .autocast = DL_F32,
                .seed = DROP_SEED,
                .step = DROP_STEP,
                .sample_ids = ids};
  ok(l.ops->forward(&l, &ctx, &x, &y));
  memcpy(mask, l.saved[0].data, (size_t)(rows * features) * sizeof *mask);
  dl_tensor_free(&x), dl_tensor_free(&y);
  dl_layer_destroy(&l);
  free(ids);
}

static const int64_t drop_shapes[][2] = {{1, 1}, {3, 5}, {8, 64}, {7, 1023}, {33, 4097}};

/* Shape i of drop_shapes: the CPU's mask in want, the streams, room in got. */
typedef struct drop_case {
  int64_t rows, f;
  float *want, *got;
  dl_stream *streams;
} drop_case;

static drop_case drop_case_make(size_t i) {
  drop_case c = {.rows = drop_shapes[i][0], .f = drop_shapes[i][1]};
  c.want = host_floats(c.rows * c.f);
  c.got = host_floats(c.rows * c.f);
  c.streams = malloc((size_t)c.rows * sizeof *c.streams);
  assert_non_null(c.streams);
  cpu_dropout_mask(c.rows, c.f, 0.25f, c.want, c.streams);
  return c;
}

static void drop_case_check_free(drop_case *c) {
  assert_memory_equal(c->want, c->got, (size_t)(c->rows * c->f) * sizeof *c->got);
  free(c->want), free(c->got), free(c->streams);
}

/* The kernel's element code on the host: cpu/dropout.c's masks bit for bit. */
static void test_dropout_host_twin(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof drop_shapes / sizeof *drop_shapes; i++) {
    drop_case c = drop_case_make(i);
    ok(dl_cuda_dropout_mask_host(c.streams, c.rows, c.f, 0.75f, 1.0f / 0.75f, c.got));
    drop_case_check_free(&c);
  }
  float m[1];
  dl_stream s = dl_stream_make(1, "t", NULL, 0);
  assert_int_equal(dl_cuda_dropout_mask_host(&s, 1, 1, 0.0f, 1.0f, m), DL_ERR_INVALID);
  assert_true(contains(dl_last_error(), "keep probability 0"));
}

/* The same masks made on the GPU. */
static void test_dropout_kernel(void **state) {
  (void)state;
  dl_cuda *ctx = gpu_or_skip(DL_CUDA_MATH_FP32);
  for (size_t i = 0; i < sizeof drop_shapes / sizeof *drop_shapes; i++) {
    drop_case c = drop_case_make(i);
    const size_t stream_bytes = (size_t)c.rows * sizeof *c.streams;
    void *ds = NULL, *dm = NULL;
    ok(dl_cuda_alloc(ctx, stream_bytes, "streams", &ds));
    ok(dl_cuda_alloc(ctx, (size_t)(c.rows * c.f) * sizeof(float), "mask", &dm));
    ok(dl_cuda_upload_bytes(ctx, ds, c.streams, stream_bytes, "streams"));
    ok(dl_cuda_dropout_mask(ctx, ds, c.rows, c.f, 0.75f, 1.0f / 0.75f, dm));
    from_device(ctx, c.got, dm, c.rows * c.f);
    ok(dl_cuda_free(ds)), ok(dl_cuda_free(dm));
    drop_case_check_free(&c);
  }
  dl_cuda_destroy(ctx);
}

/* Refusals that need no GPU: each names what is wrong. */
static void test_bad_arguments(void **state) {
  (void)state;
  float x[4] = {1, 2, 3, 4};
  assert_int_equal(dl_cuda_init(0, DL_CUDA_MATH_FP32, NULL), DL_ERR_INVALID);
  dl_cuda *ctx = NULL;
  assert_int_equal(dl_cuda_init(0, (dl_cuda_math)7, &ctx), DL_ERR_INVALID);
  assert_true(contains(dl_last_error(), "math mode 7"));
  assert_int_equal(dl_cuda_set_math(NULL, DL_CUDA_MATH_TF32), DL_ERR_INVALID);
  assert_string_equal(dl_cuda_math_name(DL_CUDA_MATH_TF32), "tf32");
  assert_string_equal(dl_cuda_math_name(DL_CUDA_MATH_FP32), "fp32");
  assert_string_equal(dl_cuda_math_name((dl_cuda_math)9), "unknown");

  assert_int_equal(dl_cuda_sgemm(NULL, false, false, 2, 2, 3, x, 2, x, 2, 0.0f, x, 2),
                   DL_ERR_INVALID);
  assert_true(contains(dl_last_error(), "lda = 2 must be at least 3"));
  assert_int_equal(dl_cuda_sgemm(NULL, false, true, 2, 2, 3, x, 3, x, 2, 0.0f, x, 2),
                   DL_ERR_INVALID);
  assert_true(contains(dl_last_error(), "ldb = 2"));
  assert_int_equal(dl_cuda_sgemm(NULL, true, false, 2, 3, 2, x, 2, x, 3, 0.0f, x, 2),
                   DL_ERR_INVALID);
  assert_true(contains(dl_last_error(), "ldc = 2"));
  assert_int_equal(dl_cuda_sgemm(NULL, false, false, -1, 2, 2, x, 2, x, 2, 0.0f, x, 2),
                   DL_ERR_INVALID);
  assert_true(contains(dl_last_error(), "M = -1"));
  assert_int_equal(dl_cuda_sgemm(NULL, false, false, 1LL << 32, 2, 2, x, 2, x, 2, 0.0f, x, 2),
                   DL_ERR_INVALID);
  assert_int_equal(dl_cuda_sgemm(NULL, false, false, 2, 2, 2, NULL, 2, x, 2, 0.0f, x, 2),
                   DL_ERR_INVALID);
  assert_true(contains(dl_last_error(), "NULL matrix"));
  assert_int_equal(dl_cuda_sgemm(NULL, false, false, 2, 2, 2, x, 2, x, 2, 0.0f, x, 2),
                   DL_ERR_INVALID);
  assert_true(contains(dl_last_error(), "no CUDA context"));
  assert_int_equal(dl_cuda_gemm_half(NULL, DL_F32, false, false, 2, 2, 2, x, 2, x, 2, 0.0f, x, 2),
                   DL_ERR_INVALID);
  assert_true(contains(dl_last_error(), "float16 or bfloat16, not float32"));
  assert_int_equal(dl_cuda_gemm_half(NULL, DL_BF16, false, false, 2, 2, 2, x, 1, x, 2, 0.0f, x, 2),
                   DL_ERR_INVALID);

  void *p = &ctx;
  assert_int_equal(dl_cuda_alloc(NULL, 16, "act", NULL), DL_ERR_INVALID);
  assert_int_equal(dl_cuda_alloc(NULL, 16, "act", &p), DL_ERR_INVALID);
  assert_null(p);
  assert_true(contains(dl_last_error(), "act: no CUDA context"));
  assert_int_equal(dl_cuda_free(NULL), DL_OK);
  assert_int_equal(dl_cuda_free(x), DL_ERR_INVALID);
  assert_true(contains(dl_last_error(), "not a device block"));
  assert_int_equal(dl_cuda_upload_bytes(NULL, x, x, sizeof x, "w"), DL_ERR_INVALID);
  assert_true(contains(dl_last_error(), "w: 16 bytes at"));
  assert_int_equal(dl_cuda_download_bytes(NULL, x, NULL, sizeof x, "w"), DL_ERR_INVALID);
  assert_true(contains(dl_last_error(), "NULL"));
  assert_int_equal(dl_cuda_upload_bytes(NULL, x, x, 0, "w"), DL_OK); /* nothing to copy */
  assert_int_equal(dl_cuda_upload(NULL, x, NULL, "w"), DL_ERR_INVALID);
  assert_int_equal(dl_cuda_download(NULL, NULL, x, "w"), DL_ERR_INVALID);
  assert_int_equal(dl_cuda_sync(NULL), DL_ERR_INVALID);
  assert_int_equal(dl_cuda_mem_current(), 0); /* nothing allocated: nothing counted */
  dl_cuda_mem_reset_peak();
  assert_int_equal(dl_cuda_mem_peak(), 0);

  assert_int_equal(dl_cuda_relu_forward(NULL, -1, x, x), DL_ERR_INVALID);
  assert_int_equal(dl_cuda_relu_forward(NULL, 4, NULL, x), DL_ERR_INVALID);
  assert_int_equal(dl_cuda_relu_forward(NULL, 4, x, x), DL_ERR_INVALID);
  assert_true(contains(dl_last_error(), "dl_cuda_relu_forward: no CUDA context"));
  assert_int_equal(dl_cuda_relu_backward(NULL, 4, x, NULL, x), DL_ERR_INVALID);
  assert_int_equal(dl_cuda_bias_add(NULL, -2, 2, x, x), DL_ERR_INVALID);
  assert_true(contains(dl_last_error(), "[-2, 2]"));
  assert_int_equal(dl_cuda_scale(NULL, 4, 2.0f, NULL), DL_ERR_INVALID);
  dl_optim_desc adam = adam_desc(DL_OPTIM_ADAM, 0), sgd = sgd_desc(0.9, 0, 0, false);
  dl_optim_coeffs ca = dl_optim_coeffs_for(&adam, 0.1f, 1), cs = dl_optim_coeffs_for(&sgd, 0.1f, 1);
  assert_int_equal(dl_cuda_optim_step(NULL, NULL, 4, x, x, x, x), DL_ERR_INVALID);
  assert_true(contains(dl_last_error(), "no coefficients"));
  assert_int_equal(dl_cuda_optim_step(NULL, &ca, 4, x, x, x, NULL), DL_ERR_INVALID); /* no v */
  assert_int_equal(dl_cuda_optim_step(NULL, &cs, 4, x, x, NULL, NULL), DL_ERR_INVALID);
  assert_int_equal(dl_cuda_sum(NULL, 4, x, NULL), DL_ERR_INVALID);
  assert_true(contains(dl_last_error(), "no device float"));
  dl_stream s = dl_stream_make(1, "t", NULL, 0);
  assert_int_equal(dl_cuda_uniform(NULL, &s, UINT64_MAX - 1, x, 4), DL_ERR_INVALID);
  assert_true(contains(dl_last_error(), "pass 2^64"));
  assert_int_equal(dl_cuda_uniform(NULL, NULL, 0, x, 4), DL_ERR_INVALID);
}

/* ================= needs a GPU ================= */

static void test_memory(void **state) {
  (void)state;
  dl_cuda *ctx = gpu_or_skip(DL_CUDA_MATH_FP32);
  assert_int_equal(dl_cuda_device(ctx), 0);
  int64_t before = dl_cuda_mem_current();
  dl_cuda_mem_reset_peak();
  void *a = NULL, *b = NULL;
  ok(dl_cuda_alloc(ctx, 1000, "a", &a));
  ok(dl_cuda_alloc(ctx, 24, "b", &b));
  assert_int_equal(dl_cuda_mem_current(), before + 1024);
  ok(dl_cuda_free(a));
  assert_int_equal(dl_cuda_mem_current(), before + 24);
  assert_int_equal(dl_cuda_mem_peak(), before + 1024);
  assert_int_equal(dl_cuda_free(a), DL_ERR_INVALID); /* twice */

  dl_tensor t = {0}, back = {0};
  ok(dl_tensor_f32(&t, 1, 6, 0, 0, 0, "t"));
  ok(dl_tensor_f32(&back, 1, 6, 0, 0, 0, "back"));
  fill(dl_f32(&t), 6, 1);
  ok(dl_cuda_download(ctx, &back, b, "b")); /* fresh blocks are zeroed */
  for (int i = 0; i < 6; i++) assert_true(dl_f32(&back)[i] == 0.0f);
  ok(dl_cuda_upload(ctx, b, &t, "b"));
  ok(dl_cuda_download(ctx, &back, b, "b"));
  assert_memory_equal(t.data, back.data, 24);
  assert_int_equal(dl_cuda_upload_bytes(ctx, (char *)b + 4, t.data, 24, "b+4"), DL_ERR_INVALID);
  assert_true(contains(dl_last_error(), "do not lie inside one device block"));
  ok(dl_cuda_upload_bytes(ctx, (char *)b + 4, t.data, 20, "b+4")); /* inside: fine */
  void *none = &t;
  ok(dl_cuda_alloc(ctx, 0, "empty", &none));
  assert_null(none);
  ok(dl_cuda_set_math(ctx, DL_CUDA_MATH_TF32));
  assert_int_equal(dl_cuda_get_math(ctx), DL_CUDA_MATH_TF32);
  assert_int_equal(dl_cuda_init(99, DL_CUDA_MATH_FP32, &(dl_cuda *){NULL}), DL_ERR_INVALID);
  ok(dl_cuda_free(b));
  assert_int_equal(dl_cuda_mem_current(), before);
  dl_tensor_free(&t);
  dl_tensor_free(&back);
  dl_cuda_destroy(ctx);
}

typedef struct gemm_case {
  bool ta, tb;
  int64_t M, N, K;
  float beta;
} gemm_case;

/* A leading dimension is at least 1, even for an empty row. */
static int64_t leading(int64_t row_length) { return row_length > 1 ? row_length : 1; }

/* Largest |c - exact| / sum_k |a||b| over C, the exact product in float64. */
static double gemm_error(const gemm_case *g, const float *A, const float *B, const float *C0,
                         const float *C) {
  int64_t lda = leading(g->ta ? g->M : g->K), ldb = leading(g->tb ? g->K : g->N);
  double worst = 0.0;
  for (int64_t i = 0; i < g->M; i++)
    for (int64_t j = 0; j < g->N; j++) {
      double exact = g->beta * C0[i * g->N + j], mag = fabs(exact);
      for (int64_t k = 0; k < g->K; k++) {
        double a = g->ta ? A[k * lda + i] : A[i * lda + k];
        double b = g->tb ? B[j * ldb + k] : B[k * ldb + j];
        exact += a * b;
        mag += fabs(a * b);
      }
      double e = fabs(C[i * g->N + j] - exact) / mag;
      if (e > worst) worst = e;
    }
  return worst;
}

/* Runs case g in the context's mode; returns the error as gemm_error, and
 * checks dl_sgemm_ref against the same bound. */
static double run_sgemm(dl_cuda *ctx, const gemm_case *g, float *out) {
  int64_t na = g->M * g->K, nb = g->K * g->N, nc = g->M * g->N;
  float *A = host_floats(na), *B = host_floats(nb), *C0 = host_floats(nc), *ref = host_floats(nc);
  fill(A, na, 11);
  fill(B, nb, 12);
  fill(C0, nc, 13);
  float *dA = to_device(ctx, A, na, "A"), *dB = to_device(ctx, B, nb, "B");
  float *dC = to_device(ctx, C0, nc, "C");
  int64_t lda = leading(g->ta ? g->M : g->K), ldb = leading(g->tb ? g->K : g->N);
  ok(dl_cuda_sgemm(ctx, g->ta, g->tb, g->M, g->N, g->K, dA, lda, dB, ldb, g->beta, dC, g->N));
  from_device(ctx, out, dC, nc);
  memcpy(ref, C0, (size_t)nc * sizeof *ref);
  dl_sgemm_ref(g->ta, g->tb, g->M, g->N, g->K, A, lda, B, ldb, g->beta, ref, g->N);
  /* float32 summation of K terms: |error| <= K u / (1 - K u) sum|a||b|,
   * u = 2^-24; 2 K u covers it for K u < 1/2. */
  assert_true(gemm_error(g, A, B, C0, ref) <= 2.0 * (double)g->K * 0x1p-24);
  double e = gemm_error(g, A, B, C0, out);
  ok(dl_cuda_free(dA));
  ok(dl_cuda_free(dB));
  ok(dl_cuda_free(dC));
  free(A), free(B), free(C0), free(ref);
  return e;
}

static const gemm_case gemm_cases[] = {
    {false, false, 37, 53, 129, 0.0f}, {false, true, 64, 31, 70, 1.0f},
    {true, false, 17, 40, 256, 0.0f},  {true, true, 33, 65, 97, 1.0f},
    {false, false, 1, 1, 1, 0.0f},     {false, false, 8, 8, 0, 1.0f},
};

static void test_sgemm_fp32(void **state) {
  (void)state;
  dl_cuda *ctx = gpu_or_skip(DL_CUDA_MATH_FP32);
  for (size_t i = 0; i < sizeof gemm_cases / sizeof *gemm_cases; i++) {
    const gemm_case *g = &gemm_cases[i];
    float *out = host_floats(g->M * g->N);
    double e = run_sgemm(ctx, g, out);
    /* The same bound as dl_sgemm_ref: both are float32 sums, in their own
     * orders, so GPU and CPU differ by at most twice it. */
    if (e > 2.0 * (double)(g->K > 0 ? g->K : 1) * 0x1p-24)
      fail_msg("case %zu: error %.3g over the float32 bound", i, e);
    free(out);
  }
  dl_cuda_destroy(ctx);
}

/* TF32 rounds inputs to 10 mantissa bits: far over float32's error, under
 * 2^-10 of sum|a||b| (two inputs each within 2^-11, plus the sum). */
static void test_sgemm_tf32_differs(void **state) {
  (void)state;
  dl_cuda *ctx = gpu_or_skip(DL_CUDA_MATH_FP32);
  const gemm_case g = {false, false, 64, 64, 256, 0.0f};
  float *fp32 = host_floats(64 * 64), *tf32 = host_floats(64 * 64);
  double e32 = run_sgemm(ctx, &g, fp32);
  ok(dl_cuda_set_math(ctx, DL_CUDA_MATH_TF32));
  double etf = run_sgemm(ctx, &g, tf32);
  printf("sgemm 64x64x256: fp32 error %.3g, tf32 error %.3g (of sum|a||b|)\n", e32, etf);
  assert_true(memcmp(fp32, tf32, 64 * 64 * sizeof(float)) != 0);
  assert_true(etf > 16.0 * e32 && etf > 0x1p-20);
  assert_true(etf < 0x1p-10 + 2.0 * 256 * 0x1p-24);
  free(fp32);
  free(tf32);
  dl_cuda_destroy(ctx);
}

/* fp16/bf16 inputs: their products are exact in float32; the sum is
 * float32 on the tensor cores, whose adds may round less carefully than
 * IEEE: bound 4 K 2^-24 of sum|a||b|. */
static void half_gemm(dl_cuda *ctx, dl_dtype dt) {
  const gemm_case g = {false, true, 48, 40, 200, 0.0f};
  int64_t na = g.M * g.K, nb = g.N * g.K, nc = g.M * g.N;
  float *A = host_floats(na), *B = host_floats(nb), *C0 = host_floats(nc), *C = host_floats(nc);
  uint16_t *hA = malloc((size_t)na * 2), *hB = malloc((size_t)nb * 2);
  assert_non_null(hA);
  assert_non_null(hB);
  fill(A, na, 21);
  fill(B, nb, 22);
  fill(C0, nc, 23);
  for (int64_t i = 0; i < na; i++) {
    hA[i] = dt == DL_F16 ? dl_f32_to_f16(A[i]) : dl_f32_to_bf16(A[i]);
    A[i] = dt == DL_F16 ? dl_f16_to_f32(hA[i]) : dl_bf16_to_f32(hA[i]);
  }
  for (int64_t i = 0; i < nb; i++) {
    hB[i] = dt == DL_F16 ? dl_f32_to_f16(B[i]) : dl_f32_to_bf16(B[i]);
    B[i] = dt == DL_F16 ? dl_f16_to_f32(hB[i]) : dl_bf16_to_f32(hB[i]);
  }
  void *dA = NULL, *dB = NULL;
  ok(dl_cuda_alloc(ctx, (size_t)na * 2, "A16", &dA));
  ok(dl_cuda_alloc(ctx, (size_t)nb * 2, "B16", &dB));
  ok(dl_cuda_upload_bytes(ctx, dA, hA, (size_t)na * 2, "A16"));
  ok(dl_cuda_upload_bytes(ctx, dB, hB, (size_t)nb * 2, "B16"));
  float *dC = to_device(ctx, C0, nc, "C");
  ok(dl_cuda_gemm_half(ctx, dt, g.ta, g.tb, g.M, g.N, g.K, dA, g.K, dB, g.K, 0.0f, dC, g.N));
  from_device(ctx, C, dC, nc);
  double e = gemm_error(&g, A, B, C0, C);
  printf("%s gemm: error %.3g of sum|a||b|\n", dl_dtype_name(dt), e);
  assert_true(e <= 4.0 * g.K * 0x1p-24);
  ok(dl_cuda_free(dA));
  ok(dl_cuda_free(dB));
  ok(dl_cuda_free(dC));
  free(A), free(B), free(C0), free(C), free(hA), free(hB);
}

static void test_gemm_half(void **state) {
  (void)state;
  dl_cuda *ctx = gpu_or_skip(DL_CUDA_MATH_FP32);
  half_gemm(ctx, DL_F16);
  half_gemm(ctx, DL_BF16);
  dl_cuda_destroy(ctx);
}

/* Elementwise kernels: the CPU's formulas, so bitwise equal. */
static void test_elementwise(void **state) {
  (void)state;
  dl_cuda *ctx = gpu_or_skip(DL_CUDA_MATH_FP32);
  enum { ROWS = 37, COLS = 53, N = ROWS * COLS };
  float *x = host_floats(N), *dy = host_floats(N), *bias = host_floats(COLS);
  float *want = host_floats(N), *got = host_floats(N);
  fill(x, N, 31);
  fill(dy, N, 32);
  fill(bias, COLS, 33);
  x[5] = -0.0f, x[6] = NAN; /* torch.relu passes both through */
  float *dx = to_device(ctx, x, N, "x"), *ddy = to_device(ctx, dy, N, "dy");
  float *dout = to_device(ctx, x, N, "out"), *db = to_device(ctx, bias, COLS, "bias");

  ok(dl_cuda_relu_forward(ctx, N, dx, dout));
  from_device(ctx, got, dout, N);
  for (int i = 0; i < N; i++) want[i] = x[i] < 0.0f ? 0.0f : x[i];
  assert_memory_equal(want, got, sizeof(float) * N);

  ok(dl_cuda_relu_backward(ctx, N, ddy, dout, dx)); /* y = relu(x) as saved */
  float *y = host_floats(N);
  memcpy(y, want, sizeof(float) * N);
  from_device(ctx, got, dx, N);
  for (int i = 0; i < N; i++) want[i] = y[i] > 0.0f ? dy[i] : 0.0f;
  assert_memory_equal(want, got, sizeof(float) * N);

  ok(dl_cuda_upload_bytes(ctx, dout, dy, sizeof(float) * N, "out"));
  ok(dl_cuda_bias_add(ctx, ROWS, COLS, db, dout));
  from_device(ctx, got, dout, N);
  for (int i = 0; i < N; i++) want[i] = dy[i] + bias[i % COLS];
  assert_memory_equal(want, got, sizeof(float) * N);

  ok(dl_cuda_scale(ctx, N, 0.37f, dout));
  from_device(ctx, y, dout, N);
  for (int i = 0; i < N; i++) want[i] = got[i] * 0.37f;
  assert_memory_equal(want, y, sizeof(float) * N);
  ok(dl_cuda_relu_forward(ctx, 0, dx, dout)); /* nothing to do */
  ok(dl_cuda_sync(ctx));

  ok(dl_cuda_free(dx)), ok(dl_cuda_free(ddy)), ok(dl_cuda_free(dout)), ok(dl_cuda_free(db));
  free(x), free(dy), free(bias), free(want), free(got), free(y);
  dl_cuda_destroy(ctx);
}

/* The optimizer kernel against dl_optim_step on the CPU (the same element
 * code, optim_elem.h): bitwise for w and every state buffer, over three
 * steps of SGD (plain, momentum with dampening and weight decay, Nesterov),
 * Adam with L2 and AdamW. */
static void optim_kernel_case(dl_cuda *ctx, const dl_optim_desc *d) {
  dl_param p;
  memset(&p, 0, sizeof p);
  snprintf(p.name, sizeof p.name, "w");
  ok(dl_tensor_f32(&p.value, 1, OPT_N, 0, 0, 0, "w"));
  ok(dl_tensor_f32(&p.grad, 1, OPT_N, 0, 0, 0, "w.grad"));
  p.requires_grad = p.in_optimizer = p.has_grad = true;
  fill(dl_f32(&p.value), OPT_N, 99);
  float zeros[OPT_N] = {0}, g[OPT_N], got[OPT_N];
  float *dw = to_device(ctx, dl_f32(&p.value), OPT_N, "w"), *dg = to_device(ctx, zeros, OPT_N, "g");
  float *db0 = to_device(ctx, zeros, OPT_N, "buf0"), *db1 = to_device(ctx, zeros, OPT_N, "buf1");
  dl_param *ps[1] = {&p};
  dl_optim *o = NULL;
  ok(dl_optim_create(&o, d, ps, 1));
  const float lrs[OPT_STEPS] = {0.1f, 0.05f, 0.3f};
  for (int k = 0; k < OPT_STEPS; k++) {
    opt_grad(g, k);
    memcpy(p.grad.data, g, sizeof g);
    ok(dl_cuda_upload_bytes(ctx, dg, g, sizeof g, "g"));
    ok(dl_optim_step(o, lrs[k]));
    const dl_optim_coeffs c = dl_optim_coeffs_for(d, lrs[k], k + 1);
    ok(dl_cuda_optim_step(ctx, &c, OPT_N, dw, dg, db0, db1));
    from_device(ctx, got, dw, OPT_N);
    assert_memory_equal(got, p.value.data, sizeof got);
  }
  for (int i = 0; i < dl_optim_num_state(o); i++) {
    const char *name;
    dl_tensor *t;
    ok(dl_optim_state(o, i, &name, &t));
    float *dev = contains(name, "exp_avg_sq")                                     ? db1
                 : contains(name, "momentum_buffer") || contains(name, "exp_avg") ? db0
                                                                                  : NULL;
    if (!dev) continue; /* the step count */
    from_device(ctx, got, dev, OPT_N);
    assert_memory_equal(got, t->data, sizeof got);
  }
  dl_optim_destroy(o);
  dl_tensor_free(&p.value);
  dl_tensor_free(&p.grad);
  ok(dl_cuda_free(dw)), ok(dl_cuda_free(dg)), ok(dl_cuda_free(db0)), ok(dl_cuda_free(db1));
}

static void test_optim_kernel(void **state) {
  (void)state;
  dl_cuda *ctx = gpu_or_skip(DL_CUDA_MATH_FP32);
  const dl_optim_desc cases[] = {sgd_desc(0.0, 0.0, 0.0, false), sgd_desc(0.9, 0.1, 1e-2, false),
                                 sgd_desc(0.8, 0.0, 5e-4, true), adam_desc(DL_OPTIM_ADAM, 1e-2),
                                 adam_desc(DL_OPTIM_ADAMW, 1e-2)};
  for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) optim_kernel_case(ctx, &cases[c]);
  dl_cuda_destroy(ctx);
}

/* The sum: the order of dl_cuda_sum_ref, bitwise, the same twice. */
static void test_sum_kernel(void **state) {
  (void)state;
  dl_cuda *ctx = gpu_or_skip(DL_CUDA_MATH_FP32);
  static const int64_t sizes[] = {
      0, 1, 255, 4096, 4097, 100003, (1 << 20) + 5, (int64_t)DL_CUDA_SUM_SLICE * 300 + 1};
  void *dout = NULL;
  ok(dl_cuda_alloc(ctx, sizeof(float), "sum", &dout));
  for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
    int64_t n = sizes[i];
    float *x = host_floats(n);
    fill(x, n, 40 + i);
    float *dx = n ? to_device(ctx, x, n, "x") : NULL;
    float first = NAN, second = NAN, want = dl_cuda_sum_ref(x, n);
    ok(dl_cuda_sum(ctx, n, dx ? dx : (float *)dout, dout));
    from_device(ctx, &first, dout, 1);
    ok(dl_cuda_sum(ctx, n, dx ? dx : (float *)dout, dout));
    from_device(ctx, &second, dout, 1);
    if (memcmp(&first, &want, sizeof want) != 0 || memcmp(&first, &second, sizeof want) != 0)
      fail_msg("n = %lld: GPU %a then %a, host order %a", (long long)n, first, second, want);
    ok(dl_cuda_free(dx));
    free(x);
  }
  ok(dl_cuda_free(dout));
  dl_cuda_destroy(ctx);
}

/* Philox on the device: dl_stream_uniform's bits at any offset. */
static void test_uniform_kernel(void **state) {
  (void)state;
  dl_cuda *ctx = gpu_or_skip(DL_CUDA_MATH_FP32);
  static const uint64_t starts[] = {0, 1, 3, 6, (1ULL << 35) + 2};
  enum { N = 100003 };
  float *want = host_floats(N), *got = host_floats(N);
  void *d = NULL;
  ok(dl_cuda_alloc(ctx, N * sizeof(float), "uniform", &d));
  uint64_t idx[2] = {2, 9};
  dl_stream s = dl_stream_make(0xfedcba9876543210ULL, "dropout", idx, 2);
  for (size_t i = 0; i < sizeof starts / sizeof *starts; i++)
    for (int64_t n = 1; n <= N; n = n * 7 + 3) {
      dl_stream_uniform(&s, starts[i], want, n);
      ok(dl_cuda_uniform(ctx, &s, starts[i], d, n));
      from_device(ctx, got, d, n);
      assert_memory_equal(want, got, (size_t)n * sizeof(float));
    }
  ok(dl_cuda_free(d));
  free(want), free(got);
  dl_cuda_destroy(ctx);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_device_count_and_reason),
      cmocka_unit_test(test_env_checks_on_this_machine),
      cmocka_unit_test(test_built_versions),
      cmocka_unit_test(test_loaded_versions),
      cmocka_unit_test(test_failure_messages),
      cmocka_unit_test(test_sum_ref_known_answers),
      cmocka_unit_test(test_uniform_host_twin),
      cmocka_unit_test(test_dropout_host_twin),
      cmocka_unit_test(test_bad_arguments),
      cmocka_unit_test(test_memory),
      cmocka_unit_test(test_sgemm_fp32),
      cmocka_unit_test(test_sgemm_tf32_differs),
      cmocka_unit_test(test_gemm_half),
      cmocka_unit_test(test_elementwise),
      cmocka_unit_test(test_optim_kernel),
      cmocka_unit_test(test_sum_kernel),
      cmocka_unit_test(test_uniform_kernel),
      cmocka_unit_test(test_dropout_kernel),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

#else /* built without CUDA */

static void test_cuda_not_built(void **state) {
  (void)state;
  printf("no CUDA device: this build has no CUDA backend (CMake found no nvcc)\n");
  skip();
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_cuda_not_built)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}

#endif
