/* Multi-head self-attention (engine/nn/kinds/attention.c): gradients against
 * finite differences, the forward against a double-precision reference,
 * the causal mask, dropout streams keyed by sample, init, errors and
 * allocation failures, thread-count and backend independence, autocast
 * emulation, and a tiny GPT (embedding, posembed, two pre-LN blocks as
 * residual layers, LayerNorm, linear) that learns through the engine.
 * PyTorch conformance is in test_conformance.c. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "nn/kinds/kinds.h"
#include "gpt_model.h"
#include "gradcheck.h"
#include "numerics/half.h"
#include "backend/cpu/sgemm.h"
#include "nn/loss.h"
#include "core/mem.h"
#include "nn/model.h"
#include "optim/optim.h"
#include "core/threads.h"

static dl_layer_desc attn_desc(int64_t dim, int heads, bool causal, float p) {
  dl_layer_desc d = dl_layer_default(DL_ATTENTION);
  d.out = dim;
  d.heads = heads;
  d.causal = causal;
  d.p = p;
  return d;
}

static void make_input(dl_tensor *x, int64_t n, int64_t t, int64_t e, uint64_t seed) {
  assert_int_equal(dl_tensor_f32(x, 3, n, t, e, 0, "x"), DL_OK);
  gc_fill_uniform(x, seed, -1.0f, 1.0f);
}

/* Random biases (the default init leaves them 0), so their use shows. */
static void randomize_biases(dl_layer *l) {
  gc_fill_uniform(&l->params[1].value, 41, -0.5f, 0.5f);
  gc_fill_uniform(&l->params[3].value, 42, -0.5f, 0.5f);
}

/* Tolerance 1e-2 as gradcheck.h explains (expected ~1e-5..1e-3, a wrong
 * formula O(1)); with dropout the same ctx gives the same mask each run. */
static void gradients_match_finite_differences(void **state) {
  (void)state;
  struct {
    int64_t n, t, e;
    int heads;
    bool causal, training;
    float p;
  } cases[] = {
      {2, 3, 4, 2, false, true, 0.0f}, {1, 4, 6, 3, true, true, 0.0f},
      {2, 3, 4, 1, true, true, 0.3f},  {2, 3, 4, 2, false, false, 0.3f},
      {1, 1, 2, 2, true, true, 0.0f},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    dl_layer_desc d = attn_desc(cases[i].e, cases[i].heads, cases[i].causal, cases[i].p);
    dl_tensor x = {0};
    make_input(&x, cases[i].n, cases[i].t, cases[i].e, 50 + i);
    double err = gc_layer_max_error_with(&d, &x, cases[i].training, randomize_biases);
    print_message("case %zu: largest error %.3g (%s)\n", i, err, gc_last_report);
    assert_true(err < 1e-2);
    dl_tensor_free(&x);
  }
}

/* The formula of the file's header in double, per (n, h): close(rtol 1e-5,
 * atol 1e-6) - float32 GEMMs of length <= 8 and a softmax on O(1) values
 * round at the 1e-7 level. Causal rows see keys 0..i only. */
static void forward_matches_double_reference(void **state) {
  (void)state;
  enum { N = 2, T = 4, E = 6, H = 2, D = E / H };
  for (int causal = 0; causal < 2; causal++) {
    dl_layer_desc d = attn_desc(E, H, causal, 0.0f);
    dl_layer l;
    assert_int_equal(dl_layer_init(&l, &d, "", 0, 3), DL_OK);
    randomize_biases(&l);
    dl_tensor x = {0}, y = {0};
    make_input(&x, N, T, E, 9);
    dl_ctx ctx = gc_ctx();
    ctx.grad_enabled = false;
    assert_int_equal(l.ops->forward(&l, &ctx, &x, &y), DL_OK);
    assert_true(dl_tensor_empty(&l.saved[0]) && dl_tensor_empty(&l.saved[1]));
    const float *xp = dl_f32(&x), *wi = dl_f32(&l.params[0].value),
                *bi = dl_f32(&l.params[1].value), *wo = dl_f32(&l.params[2].value),
                *bo = dl_f32(&l.params[3].value);
    for (int n = 0; n < N; n++) {
      double qkv[T][3 * E], heads[T][E];
      for (int t = 0; t < T; t++)
        for (int o = 0; o < 3 * E; o++) {
          qkv[t][o] = bi[o];
          for (int i = 0; i < E; i++) qkv[t][o] += (double)xp[(n * T + t) * E + i] * wi[o * E + i];
        }
      for (int h = 0; h < H; h++)
        for (int i = 0; i < T; i++) {
          double s[T], mx = -INFINITY, sum = 0.0;
          int nv = causal ? i + 1 : T;
          for (int j = 0; j < nv; j++) {
            s[j] = 0.0;
            for (int c = 0; c < D; c++) s[j] += qkv[i][h * D + c] * qkv[j][E + h * D + c];
            s[j] /= sqrt((double)D);
            mx = fmax(mx, s[j]);
          }
          for (int j = 0; j < nv; j++) sum += s[j] = exp(s[j] - mx);
          for (int c = 0; c < D; c++) {
            heads[i][h * D + c] = 0.0;
            for (int j = 0; j < nv; j++)
              heads[i][h * D + c] += s[j] / sum * qkv[j][2 * E + h * D + c];
          }
        }
      for (int t = 0; t < T; t++)
        for (int o = 0; o < E; o++) {
          double ref = bo[o];
          for (int i = 0; i < E; i++) ref += heads[t][i] * wo[o * E + i];
          double got = dl_f32(&y)[(n * T + t) * E + o];
          if (!(fabs(got - ref) <= 1e-6 + 1e-5 * fabs(ref)))
            fail_msg("causal %d [%d, %d, %d]: %.9g vs %.9g", causal, n, t, o, got, ref);
        }
    }
    dl_tensor_free(&x);
    dl_tensor_free(&y);
    dl_layer_destroy(&l);
  }
}

/* Causal: changing the last position leaves every earlier output's bits as
 * they were, and moves the last one. */
static void causal_outputs_ignore_later_positions(void **state) {
  (void)state;
  dl_layer_desc d = attn_desc(8, 2, true, 0.0f);
  dl_layer l;
  assert_int_equal(dl_layer_init(&l, &d, "", 0, 5), DL_OK);
  dl_tensor x = {0}, y1 = {0}, y2 = {0};
  make_input(&x, 2, 5, 8, 3);
  dl_ctx ctx = gc_ctx();
  assert_int_equal(l.ops->forward(&l, &ctx, &x, &y1), DL_OK);
  for (int n = 0; n < 2; n++)
    for (int i = 0; i < 8; i++) dl_f32(&x)[(n * 5 + 4) * 8 + i] += 0.5f;
  assert_int_equal(l.ops->forward(&l, &ctx, &x, &y2), DL_OK);
  for (int n = 0; n < 2; n++) {
    assert_memory_equal(dl_f32(&y1) + n * 40, dl_f32(&y2) + n * 40, 32 * sizeof(float));
    assert_memory_not_equal(dl_f32(&y1) + n * 40 + 32, dl_f32(&y2) + n * 40 + 32,
                            8 * sizeof(float));
  }
  dl_tensor_free(&x);
  dl_tensor_free(&y1);
  dl_tensor_free(&y2);
  dl_layer_destroy(&l);
}

/* PyTorch's names and default init: xavier_uniform_ on in_proj_weight
 * (bound sqrt(6 / 4E)), U(+-1/sqrt(E)) on out_proj.weight, zero biases;
 * each drawn from its own stream (seed, "init/" + name). */
static void params_named_and_initialised_as_pytorch(void **state) {
  (void)state;
  dl_layer_desc d = attn_desc(16, 4, false, 0.0f);
  assert_true(dl_layer_default(DL_ATTENTION).p == 0.0f);
  dl_layer l;
  assert_int_equal(dl_layer_init(&l, &d, "3.body.1.", 0, 77), DL_OK);
  assert_int_equal(l.nparams, 4);
  const char *names[4] = {"3.body.1.in_proj_weight", "3.body.1.in_proj_bias",
                          "3.body.1.out_proj.weight", "3.body.1.out_proj.bias"};
  const int64_t numel[4] = {48 * 16, 48, 16 * 16, 16};
  const float bounds[4] = {(float)sqrt(6.0 / 64.0), 0.0f, 0.25f, 0.0f};
  for (int p = 0; p < 4; p++) {
    const dl_param *prm = &l.params[p];
    assert_string_equal(prm->name, names[p]);
    assert_int_equal(prm->value.numel, numel[p]);
    float lo = 0.0f, hi = 0.0f;
    for (int64_t i = 0; i < prm->value.numel; i++) {
      lo = fminf(lo, dl_f32(&prm->value)[i]);
      hi = fmaxf(hi, dl_f32(&prm->value)[i]);
    }
    assert_true(lo >= -bounds[p] && hi <= bounds[p]);
    if (bounds[p] > 0.0f) assert_true(hi > 0.9f * bounds[p] && lo < -0.9f * bounds[p]);
  }
  dl_tensor want = {0};
  assert_int_equal(dl_tensor_clone(&want, &l.params[0].value, "want"), DL_OK);
  dl_stream s = dl_param_init_stream(&l.params[0], 77);
  dl_stream_uniform_range(&s, 0, -bounds[0], bounds[0], dl_f32(&want), want.numel);
  assert_memory_equal(want.data, l.params[0].value.data, dl_tensor_bytes(&want));
  dl_tensor_free(&want);
  dl_layer_destroy(&l);
}

/* Dropout on the weights: a sample's mask follows its sample id (not its
 * row), changes with the step, and is off in eval mode. */
static void dropout_is_keyed_by_sample_and_step(void **state) {
  (void)state;
  dl_layer_desc d = attn_desc(8, 2, false, 0.4f);
  dl_layer l;
  assert_int_equal(dl_layer_init(&l, &d, "", 6, 5), DL_OK);
  dl_tensor x = {0}, one = {0}, y2 = {0}, y1 = {0}, y3 = {0}, yeval = {0}, yp0 = {0};
  make_input(&x, 2, 4, 8, 13);
  assert_int_equal(dl_tensor_f32(&one, 3, 1, 4, 8, 0, "one"), DL_OK);
  memcpy(one.data, dl_f32(&x) + 32, 32 * sizeof(float));
  const int64_t ids2[2] = {5, 9}, ids1[1] = {9};
  dl_ctx ctx = gc_ctx();
  ctx.sample_ids = ids2;
  assert_int_equal(l.ops->forward(&l, &ctx, &x, &y2), DL_OK);
  assert_false(dl_tensor_empty(&l.saved[2])); /* the mask */
  ctx.sample_ids = ids1;
  assert_int_equal(l.ops->forward(&l, &ctx, &one, &y1), DL_OK);
  assert_memory_equal(dl_f32(&y2) + 32, y1.data, 32 * sizeof(float));
  ctx.step++;
  assert_int_equal(l.ops->forward(&l, &ctx, &one, &y3), DL_OK);
  assert_memory_not_equal(y1.data, y3.data, 32 * sizeof(float));
  l.training = false;
  assert_int_equal(l.ops->forward(&l, &ctx, &one, &yeval), DL_OK);
  assert_true(dl_tensor_empty(&l.saved[2]));
  l.training = true;
  l.desc.p = 0.0f;
  assert_int_equal(l.ops->forward(&l, &ctx, &one, &yp0), DL_OK);
  assert_memory_equal(yeval.data, yp0.data, 32 * sizeof(float));
  dl_tensor *all[] = {&x, &one, &y2, &y1, &y3, &yeval, &yp0};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) dl_tensor_free(all[i]);
  dl_layer_destroy(&l);
}

/* Causal with dropout: the masks do not depend on T, so padding a batch's
 * sequences with more positions leaves the earlier outputs' bits as they
 * were (the masked keys add exact zeros). */
static void padding_after_a_causal_sequence_changes_nothing(void **state) {
  (void)state;
  dl_layer_desc d = attn_desc(8, 2, true, 0.3f);
  dl_layer l;
  assert_int_equal(dl_layer_init(&l, &d, "", 2, 5), DL_OK);
  randomize_biases(&l);
  dl_tensor x = {0}, xp = {0}, y = {0}, yp = {0};
  make_input(&x, 2, 4, 8, 31);
  make_input(&xp, 2, 7, 8, 32);
  for (int n = 0; n < 2; n++) memcpy(dl_f32(&xp) + n * 56, dl_f32(&x) + n * 32, 32 * sizeof(float));
  dl_ctx ctx = gc_ctx();
  assert_int_equal(l.ops->forward(&l, &ctx, &x, &y), DL_OK);
  assert_int_equal(l.ops->forward(&l, &ctx, &xp, &yp), DL_OK);
  for (int n = 0; n < 2; n++)
    assert_memory_equal(dl_f32(&y) + n * 32, dl_f32(&yp) + n * 56, 32 * sizeof(float));
  dl_tensor *all[] = {&x, &xp, &y, &yp};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) dl_tensor_free(all[i]);
  dl_layer_destroy(&l);
}

static void bad_descriptions_inputs_and_misuse_are_refused(void **state) {
  (void)state;
  struct {
    int64_t dim;
    int heads;
    float p;
    const char *message;
  } bad[] = {
      {6, 4, 0.0f, "layer 2 (attention): embed_dim must be divisible by num_heads, got 6 and 4"},
      {0, 1, 0.0f, "embed_dim must be > 0, got 0"},
      {8, 0, 0.0f, "num_heads must be > 0, got 0"},
      {8, 2, 1.0f, "p must be in [0, 1), got 1"},
      {1 << 23, 1 << 23, 0.0f, "num_heads must be at most 2^22, got 8388608"},
  };
  dl_layer l;
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    dl_layer_desc d = attn_desc(bad[i].dim, bad[i].heads, false, bad[i].p);
    assert_int_equal(dl_layer_init(&l, &d, "2.", 0, 1), DL_ERR_INVALID);
    assert_non_null(strstr(dl_last_error(), bad[i].message));
  }
  dl_layer_desc d = attn_desc(4, 2, false, 0.0f);
  assert_int_equal(dl_layer_init(&l, &d, "2.", 0, 1), DL_OK);
  dl_ctx ctx = gc_ctx();
  dl_tensor x = {0}, flat = {0}, wide = {0}, y = {0}, dx = {0};
  make_input(&x, 2, 3, 4, 1);
  make_input(&wide, 2, 3, 5, 2);
  assert_int_equal(dl_tensor_f32(&flat, 2, 6, 4, 0, 0, "flat"), DL_OK);
  assert_int_equal(l.ops->forward(&l, &ctx, &flat, &y), DL_ERR_INVALID);
  assert_non_null(strstr(dl_last_error(), "layer 2 (attention): input is [6, 4] float32; "
                                          "expected float32 [N, T, 4], N >= 1, 1 <= T <= 2^21"));
  assert_int_equal(l.ops->forward(&l, &ctx, &wide, &y), DL_ERR_INVALID);
  assert_int_equal(l.ops->backward(&l, &ctx, &x, &x, &x, &dx), DL_ERR_INVALID);
  assert_non_null(strstr(dl_last_error(), "backward without a grad-mode forward"));
  assert_int_equal(l.ops->forward(&l, &ctx, &x, &y), DL_OK);
  assert_int_equal(l.ops->backward(&l, &ctx, &x, &y, &wide, &dx), DL_ERR_INVALID);
  assert_non_null(strstr(dl_last_error(), "output gradient is [2, 3, 5] float32"));
  dl_tensor other = {0};
  make_input(&other, 1, 3, 4, 3);
  assert_int_equal(l.ops->backward(&l, &ctx, &x, &y, &other, &dx), DL_ERR_INVALID);
  assert_non_null(strstr(dl_last_error(), "output gradient is"));
  assert_int_equal(l.ops->backward(&l, &ctx, &other, &other, &other, &dx), DL_ERR_INVALID);
  assert_non_null(strstr(dl_last_error(), "backward without a grad-mode forward"));
  assert_true(dl_tensor_empty(&dx));
  dl_tensor *all[] = {&x, &flat, &wide, &y, &other};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) dl_tensor_free(all[i]);
  dl_layer_destroy(&l);
}

/* Each allocation of init, forward and backward failing in turn: DL_ERR_NOMEM
 * and nothing leaked, with and without dropout, autocast, accumulation. */
static void allocation_failures_leak_nothing(void **state) {
  (void)state;
  dl_tensor x = {0}, dy = {0};
  make_input(&x, 2, 3, 4, 1);
  make_input(&dy, 2, 3, 4, 2);
  for (int c = 0; c < 3; c++) {
    dl_layer_desc d = attn_desc(4, 2, c > 0, c == 1 ? 0.5f : 0.0f);
    int fails = gc_nomem_failures(&d, "1.", &x, &dy, c == 2 ? DL_BF16 : DL_F32, c == 2);
    if (fails < 0) fail_msg("case %d: %s", c, gc_last_report);
    assert_true(fails >= 10);
  }
  dl_tensor_free(&x);
  dl_tensor_free(&dy);
}

/* N 8, T 32, E 64, 4 heads, causal, dropout: projections big enough for the
 * GEMM's threads, 32 (sample, head) jobs split over threads. */
static void bitwise_same_with_one_and_two_threads(void **state) {
  (void)state;
  dl_layer_desc d = attn_desc(64, 4, true, 0.1f);
  dl_tensor x = {0}, dy = {0};
  make_input(&x, 8, 32, 64, 11);
  make_input(&dy, 8, 32, 64, 12);
  dl_ctx ctx = gc_ctx();
  if (!gc_same_bits_1_and_2_threads(&d, "", 1, &ctx, &x, &dy)) fail_msg("%s", gc_last_report);
  ctx.autocast = DL_F16;
  if (!gc_same_bits_1_and_2_threads(&d, "", 1, &ctx, &x, &dy)) fail_msg("%s", gc_last_report);
  dl_tensor_free(&x);
  dl_tensor_free(&dy);
}

/* Forward + backward (dy = y) on the CPU or a backend; y, dx and grads kept. */
typedef struct attn_run {
  dl_tensor y, dx, grads[4];
} attn_run;

static dl_status run_once(const dl_layer_desc *d, const dl_tensor *x, const dl_backend *b,
                          dl_dtype autocast, attn_run *out) {
  memset(out, 0, sizeof *out);
  dl_layer l;
  assert_int_equal(dl_layer_init(&l, d, "0.", 0, 5), DL_OK);
  randomize_biases(&l);
  dl_ctx ctx = gc_ctx();
  ctx.backend = b;
  ctx.autocast = autocast;
  dl_status s = l.ops->forward(&l, &ctx, x, &out->y);
  if (s == DL_OK) s = l.ops->backward(&l, &ctx, x, &out->y, &out->y, &out->dx);
  for (int i = 0; s == DL_OK && i < 4; i++)
    s = dl_tensor_clone(&out->grads[i], &l.params[i].grad, "grad");
  dl_layer_destroy(&l);
  return s;
}

static void run_free(attn_run *r) {
  dl_tensor_free(&r->y);
  dl_tensor_free(&r->dx);
  for (int i = 0; i < 4; i++) dl_tensor_free(&r->grads[i]);
}

static void same_run(const attn_run *a, const attn_run *b) {
  assert_memory_equal(a->y.data, b->y.data, dl_tensor_bytes(&a->y));
  assert_memory_equal(a->dx.data, b->dx.data, dl_tensor_bytes(&a->dx));
  for (int i = 0; i < 4; i++)
    assert_memory_equal(a->grads[i].data, b->grads[i].data, dl_tensor_bytes(&a->grads[i]));
}

/* A GEMM-only backend: dl_sgemm_ref (dl_sgemm's definition), counting calls,
 * failing on request, and checking that every operand element it reads
 * (op(A) is M x K, op(B) K x N, strided by lda/ldb: the heads' slices of
 * q|k|v) is a value of the half type `half` (0: any). tests/host_backend.h
 * checks M*lda elements from A, past the end of a strided slice, so it
 * cannot serve here. */
typedef struct gemm_backend {
  int calls, half;
  bool fail, rounded;
} gemm_backend;

static void check_rounded(gemm_backend *gb, bool trans, int64_t rows, int64_t cols, const float *a,
                          int64_t ld) {
  for (int64_t i = 0; gb->half && i < rows; i++)
    for (int64_t k = 0; k < cols; k++) {
      float v = trans ? a[k * ld + i] : a[i * ld + k];
      if (v != (gb->half == DL_F16 ? dl_round_f16(v) : dl_round_bf16(v))) gb->rounded = false;
    }
}

static dl_status gemm_backend_sgemm(void *impl, bool ta, bool tb, int64_t M, int64_t N, int64_t K,
                                    const float *A, int64_t lda, const float *B, int64_t ldb,
                                    float beta, float *C, int64_t ldc) {
  gemm_backend *gb = impl;
  gb->calls++;
  if (gb->fail) return dl_fail(DL_ERR_IO, "test backend: sgemm failed on purpose");
  check_rounded(gb, ta, M, K, A, lda);
  check_rounded(gb, !tb, K, N, B, ldb); /* op(B) is K x N */
  dl_sgemm_ref(ta, tb, M, N, K, A, lda, B, ldb, beta, C, ldc);
  return DL_OK;
}

/* A backend with only a GEMM gets every product, the heads one by one; the
 * results are the CPU's bits. Under autocast every operand it receives is
 * half-rounded (the AMP emulation's contract). Its failure is reported
 * naming the layer. */
static void backend_runs_every_gemm(void **state) {
  (void)state;
  dl_layer_desc d = attn_desc(8, 2, true, 0.2f);
  dl_tensor x = {0};
  make_input(&x, 2, 5, 8, 21);
  gemm_backend hb;
  dl_backend b = {.name = "test", .impl = &hb, .sgemm = gemm_backend_sgemm};
  attn_run cpu, dev;
  for (int amp = 0; amp < 3; amp++) {
    dl_dtype ac = amp == 0 ? DL_F32 : amp == 1 ? DL_F16 : DL_BF16;
    hb = (gemm_backend){.half = amp ? (int)ac : 0, .rounded = true};
    assert_int_equal(run_once(&d, &x, NULL, ac, &cpu), DL_OK);
    assert_int_equal(run_once(&d, &x, &b, ac, &dev), DL_OK);
    /* forward: 2 projections + 2 per (sample, head); backward: 2 per
     * projection (dx, dW) + 4 per (sample, head); 4 pairs */
    assert_int_equal(hb.calls, 2 + 2 * 4 + 4 + 4 * 4);
    assert_true(hb.rounded);
    same_run(&cpu, &dev);
    run_free(&dev);
    run_free(&cpu);
  }
  hb.fail = true;
  dl_layer l;
  dl_tensor y = {0};
  assert_int_equal(dl_layer_init(&l, &d, "4.", 0, 5), DL_OK);
  dl_ctx ctx = gc_ctx();
  ctx.backend = &b;
  assert_int_equal(l.ops->forward(&l, &ctx, &x, &y), DL_ERR_IO);
  assert_non_null(strstr(dl_last_error(), "layer 4 (attention): "));
  assert_true(dl_tensor_empty(&y) && dl_tensor_empty(&l.saved[0]));
  dl_layer_destroy(&l);
  dl_tensor_free(&x);
}

/* Autocast f16/bf16: outputs and gradients are half values, within the half
 * format's rounding of the float32 results (tolerance: a few half ulps of
 * the largest value, 2^-8 relative for f16 and 2^-5 for bf16: the error of
 * rounding every operand and output once, through two projections and the
 * heads); the float32 run is untouched by it. */
static void autocast_rounds_to_half(void **state) {
  (void)state;
  dl_layer_desc d = attn_desc(8, 2, true, 0.0f);
  dl_tensor x = {0};
  make_input(&x, 2, 5, 8, 23);
  attn_run full, half;
  assert_int_equal(run_once(&d, &x, NULL, DL_F32, &full), DL_OK);
  for (int h = 0; h < 2; h++) {
    dl_dtype ac = h ? DL_BF16 : DL_F16;
    const double tol = h ? 1.0 / 32 : 1.0 / 256;
    assert_int_equal(run_once(&d, &x, NULL, ac, &half), DL_OK);
    const dl_tensor *got[6] = {&half.y,        &half.dx,       &half.grads[0],
                               &half.grads[1], &half.grads[2], &half.grads[3]};
    const dl_tensor *want[6] = {&full.y,        &full.dx,       &full.grads[0],
                                &full.grads[1], &full.grads[2], &full.grads[3]};
    for (int t = 0; t < 6; t++) {
      double scale = 0.0;
      for (int64_t i = 0; i < want[t]->numel; i++) scale = fmax(scale, fabs(dl_f32(want[t])[i]));
      for (int64_t i = 0; i < got[t]->numel; i++) {
        float g = dl_f32(got[t])[i];
        assert_true(g == (h ? dl_round_bf16(g) : dl_round_f16(g)));
        if (!(fabs(g - dl_f32(want[t])[i]) <= tol * scale))
          fail_msg("%s tensor %d [%lld]: %g vs %g", h ? "bf16" : "f16", t, (long long)i, g,
                   dl_f32(want[t])[i]);
      }
    }
    run_free(&half);
  }
  run_free(&full);
  dl_tensor_free(&x);
}

/* Frozen parameters get no gradient; no dx asked, none made. */
static void frozen_params_and_no_input_gradient(void **state) {
  (void)state;
  dl_layer_desc d = attn_desc(4, 2, false, 0.0f);
  dl_layer l;
  assert_int_equal(dl_layer_init(&l, &d, "", 0, 1), DL_OK);
  for (int i = 0; i < 4; i++) l.params[i].requires_grad = i == 3;
  dl_tensor x = {0}, y = {0};
  make_input(&x, 2, 3, 4, 1);
  dl_ctx ctx = gc_ctx();
  assert_int_equal(l.ops->forward(&l, &ctx, &x, &y), DL_OK);
  assert_int_equal(l.ops->backward(&l, &ctx, &x, &y, &y, NULL), DL_OK);
  for (int i = 0; i < 4; i++) assert_int_equal(l.params[i].has_grad, i == 3);
  /* db of out_proj is the sum of dy over rows */
  for (int o = 0; o < 4; o++) {
    float sum = 0.0f;
    for (int r = 0; r < 6; r++) sum += dl_f32(&y)[r * 4 + o];
    assert_true(dl_f32(&l.params[3].grad)[o] == sum);
  }
  dl_tensor_free(&x);
  dl_tensor_free(&y);
  dl_layer_destroy(&l);
}

/* ---- a tiny GPT (tests/gpt_model.h) trains ---- */

enum { VOCAB = 12, DIM = 32, HEADS = 4, CTX = 16, BATCH = 16 };

/* Sequences of CTX + 1 tokens repeating a random pattern of 4 (drawn per
 * sample from a Philox stream): from the fifth token on, the next token is
 * the one 4 positions back, which only attention can look up. */
static void make_batch(int64_t step, dl_tensor *in, dl_tensor *target) {
  for (int n = 0; n < BATCH; n++) {
    const uint64_t idx[2] = {(uint64_t)step, (uint64_t)n};
    dl_stream s = dl_stream_make(17, "tiny_gpt/data", idx, 2);
    int32_t pat[4];
    for (int i = 0; i < 4; i++) pat[i] = (int32_t)dl_stream_below(&s, 2 * (uint64_t)i, VOCAB);
    for (int t = 0; t < CTX; t++) {
      dl_i32(in)[n * CTX + t] = pat[t % 4];
      dl_i32(target)[n * CTX + t] = t < 3 ? -100 : pat[(t + 1) % 4];
    }
  }
}

/* 150 Adam steps (lr 1e-2) on fresh batches: the loss of the predictable
 * tokens falls from about log(12) = 2.5 (measured 2.70 at step 0) to 0.0013
 * at step 149. The bound 0.5 sits far above that and far below what a model
 * without working attention can reach: the four pattern tokens are drawn
 * independently, so the current token and the position say nothing about
 * the next one, and without looking back the loss stays near log(12).
 * State-dict names are PyTorch's (make_reference.py's tiny_gpt, the same
 * keys, is loaded strictly in test_conformance.c). */
static void tiny_gpt_learns(void **state) {
  (void)state;
  dl_layer_desc d[16];
  int nl = gpt_model(d, VOCAB, DIM, HEADS, CTX, 2);
  dl_model *m;
  assert_int_equal(dl_model_create(&m, d, nl, 2024), DL_OK);
  assert_non_null(dl_model_find_param(m, "1.weight"));
  assert_non_null(dl_model_find_param(m, "2.body.1.in_proj_weight"));
  assert_non_null(dl_model_find_param(m, "4.body.1.out_proj.bias"));
  assert_non_null(dl_model_find_param(m, "5.body.3.weight"));
  int np = dl_model_num_params(m);
  assert_int_equal(np, 2 + 2 * (2 + 4 + 2 + 4) + 2 + 2);
  dl_param *params[64];
  for (int i = 0; i < np; i++) params[i] = dl_model_param(m, i);
  dl_optim_desc od = dl_optim_default(DL_OPTIM_ADAM);
  dl_optim *o;
  assert_int_equal(dl_optim_create(&o, &od, params, np), DL_OK);
  dl_tensor in = {0}, target = {0}, dlogits = {0};
  const int64_t shape[2] = {BATCH, CTX};
  assert_int_equal(dl_tensor_alloc(&in, DL_I32, 2, shape, "tokens"), DL_OK);
  assert_int_equal(dl_tensor_alloc(&target, DL_I32, 2, shape, "targets"), DL_OK);
  dl_ce_desc ce = dl_ce_default();
  float first = 0.0f, last = 0.0f;
  for (int64_t step = 0; step < 150; step++) {
    make_batch(step, &in, &target);
    dl_ctx ctx = {.grad_enabled = true, .autocast = DL_F32, .seed = 3, .step = step};
    const dl_tensor *logits;
    dl_model_zero_grad(m);
    assert_int_equal(dl_model_forward(m, &ctx, &in, &logits), DL_OK);
    float loss;
    assert_int_equal(dl_cross_entropy(&ce, logits, &target, &loss, NULL, &dlogits), DL_OK);
    assert_int_equal(dl_model_backward(m, &ctx, &dlogits), DL_OK);
    assert_int_equal(dl_optim_step(o, 1e-2f), DL_OK);
    dl_tensor_free(&dlogits);
    dl_model_release(m);
    if (step == 0) first = loss;
    last = loss;
  }
  print_message("tiny GPT: loss %.4f at step 0, %.4f at step 149\n", first, last);
  assert_true(first > 2.0f);
  assert_true(last < 0.5f);
  dl_tensor_free(&in);
  dl_tensor_free(&target);
  dl_optim_destroy(o);
  dl_model_destroy(m);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(gradients_match_finite_differences),
      cmocka_unit_test(forward_matches_double_reference),
      cmocka_unit_test(causal_outputs_ignore_later_positions),
      cmocka_unit_test(params_named_and_initialised_as_pytorch),
      cmocka_unit_test(dropout_is_keyed_by_sample_and_step),
      cmocka_unit_test(padding_after_a_causal_sequence_changes_nothing),
      cmocka_unit_test(bad_descriptions_inputs_and_misuse_are_refused),
      cmocka_unit_test(allocation_failures_leak_nothing),
      cmocka_unit_test(bitwise_same_with_one_and_two_threads),
      cmocka_unit_test(backend_runs_every_gemm),
      cmocka_unit_test(autocast_rounds_to_half),
      cmocka_unit_test(frozen_params_and_no_input_gradient),
      cmocka_unit_test(tiny_gpt_learns),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
