/* Multi-head self-attention on x [N, T, E], the math of
 * torch.nn.MultiheadAttention(E, heads, dropout=p, batch_first=True) called
 * as mha(x, x, x, attn_mask=causal mask, need_weights=False)[0] (torch 1.13's
 * F.multi_head_attention_forward):
 *
 *   [q k v] = x in_proj_weight^T + in_proj_bias            [N, T, 3E]
 *   per head h (columns h*d .. h*d+d-1 of q, k, v; d = E / heads):
 *     q' = q / sqrt(d)            (a float32 division, as torch's q / sqrt(E))
 *     S  = q' k^T                 (+ -inf above the diagonal when causal)
 *     P  = softmax(S) per row     (max subtracted, sum in double)
 *     P~ = P * mask               (dropout in training, p > 0)
 *     O_h = P~ v
 *   y = [O_1 .. O_H] out_proj.weight^T + out_proj.bias
 *
 * Parameters under PyTorch's names: prefix + "in_proj_weight" [3E, E],
 * "in_proj_bias" [3E], "out_proj.weight" [E, E], "out_proj.bias" [E], with
 * nn.MultiheadAttention's default init (xavier_uniform_ on in_proj_weight,
 * kaiming_uniform_(a=sqrt(5)) on out_proj.weight, zero biases).
 *
 * Dropout on P uses cpu/dropout.c's streams and rule: weight (h, i, j) of
 * sample n (head, query, key) is kept iff word h * 2^42 + i * 2^21 + j of the
 * stream (seed, "dropout", {rng_id, step, sample id}) as a uniform is below
 * 1 - p, and then scaled by 1/(1-p). The word does not depend on T, so a
 * sample keeps its masks whatever length its batch is padded to (with a
 * causal mask, padding after it then changes nothing).
 *
 * Determinism: the projections are dl_sgemm calls (or the backend's) over all
 * N*T rows; the heads are independent jobs (one (n, h) pair each, whole
 * outputs per job) running dl_sgemm on their slices, so no sum is ever split
 * across threads and the bits do not depend on the thread count. With a
 * backend the heads run one after the other on it (a backend serves one
 * thread at a time).
 *
 * Saved for backward: q'|k|v [N, T, 3E], P [N, H, T, T], the dropout mask
 * (when active) and the heads' output [N, T, E] (out_proj's input).
 *
 * AMP emulation (autocast f16/bf16), CUDA autocast's casts in that code:
 * the projections as cpu/linear.c (operands rounded to half, float32
 * accumulation, outputs rounded); q / sqrt(d) and the bmm outputs (S, O,
 * and in backward dP~, dV, dq', dk) rounded to half; the softmax and the
 * dropout run in float32 (softmax is on autocast's float32 list) and P~ is
 * rounded to half where it enters the second bmm; the gradient of S is
 * rounded to half (the backward of the cast to float32). */
#include "nn/kinds/kinds.h"

#include "numerics/cpu.h"
#include "numerics/half.h"
#include "numerics/fmath.h"
#include "numerics/sums.h"
#include "core/mem.h"
#include "numerics/philox.h"
#include "backend/cpu/sgemm.h"
#include "core/threads.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

enum { IN_W, IN_B, OUT_W, OUT_B };                        /* l->params */
enum { SAVED_QKV, SAVED_PROBS, SAVED_MASK, SAVED_HEADS }; /* l->saved */

/* Sequence and head limits of the dropout words (head_mask). */
#define MAX_T (INT64_C(1) << 21)
#define MAX_HEADS (1 << 22)

typedef struct attn_dims {
  int64_t n, t, e, h, d; /* batch, sequence, embed_dim, heads, head_dim */
} attn_dims;

dl_status dl_attention_check(const char *label, const dl_layer_desc *d) {
  DL_TRY(dl_layer_need_positive(label, "embed_dim", d->out));
  DL_TRY(dl_layer_need_positive(label, "num_heads", d->heads));
  if (d->heads > MAX_HEADS)
    return dl_fail(DL_ERR_INVALID, "%s: num_heads must be at most 2^22, got %d", label, d->heads);
  if (d->out % d->heads != 0)
    return dl_fail(DL_ERR_INVALID, "%s: embed_dim must be divisible by num_heads, got %lld and %d",
                   label, (long long)d->out, d->heads);
  if (!(d->p >= 0.0f && d->p < 1.0f))
    return dl_fail(DL_ERR_INVALID, "%s: p must be in [0, 1), got %g", label, (double)d->p);
  return DL_OK;
}

dl_status dl_attention_init(dl_layer *l, uint64_t seed) {
  const int64_t e = l->desc.out;
  DL_TRY(dl_layer_add_param(l, "in_proj_weight", 2, (const int64_t[]){3 * e, e}));
  DL_TRY(dl_layer_add_param(l, "in_proj_bias", 1, (const int64_t[]){3 * e}));
  DL_TRY(dl_layer_add_param(l, "out_proj.weight", 2, (const int64_t[]){e, e}));
  DL_TRY(dl_layer_add_param(l, "out_proj.bias", 1, (const int64_t[]){e}));
  /* xavier_uniform_: fan_in E, fan_out 3E; kaiming_uniform_(a=sqrt(5)):
   * 1/sqrt(fan_in). The biases stay zero (constant_(0)). */
  const float bounds[2] = {(float)sqrt(6.0 / (double)(4 * e)), (float)(1.0 / sqrt((double)e))};
  for (int i = 0; i < 2; i++) {
    dl_param *w = &l->params[i == 0 ? IN_W : OUT_W];
    dl_stream s = dl_param_init_stream(w, seed);
    dl_stream_uniform_range(&s, 0, -bounds[i], bounds[i], dl_f32(&w->value), w->value.numel);
  }
  return DL_OK;
}

static bool dropout_active(const dl_layer *l) { return l->training && l->desc.p > 0.0f; }

static dl_status check_3d(const dl_layer *l, const dl_tensor *x, const char *what, attn_dims *g) {
  char name[128], shape[96];
  if (x->dtype != DL_F32 || x->ndim != 3 || x->shape[0] < 1 || x->shape[1] < 1 ||
      x->shape[1] > MAX_T || x->shape[2] != l->desc.out)
    return dl_fail(DL_ERR_INVALID,
                   "%s: %s is %s; expected float32 [N, T, %lld], N >= 1, 1 <= T <= 2^21",
                   dl_layer_label(l, name, sizeof name), what,
                   dl_tensor_describe(x, shape, sizeof shape), (long long)l->desc.out);
  *g = (attn_dims){.n = x->shape[0],
                   .t = x->shape[1],
                   .e = x->shape[2],
                   .h = l->desc.heads,
                   .d = x->shape[2] / l->desc.heads};
  return DL_OK;
}

/* rows x cols floats at p (leading dimension ld) rounded to half under autocast. */
static void round_block(const dl_ctx *ctx, float *p, int64_t rows, int64_t cols, int64_t ld) {
  if (ctx->autocast == DL_F32) return;
  for (int64_t r = 0; r < rows; r++) dl_round_inplace(p + r * ld, cols, (int)ctx->autocast);
}

/* src itself, or under autocast a half-rounded copy in *copy. */
static dl_status half_operand(const dl_ctx *ctx, const float *src, int64_t n, float **copy,
                              const float **out) {
  *out = src;
  if (ctx->autocast == DL_F32) return DL_OK;
  *copy = dl_mem_alloc_uninit((size_t)n * sizeof(float), "attention autocast operand");
  if (!*copy) return DL_ERR_NOMEM;
  memcpy(*copy, src, (size_t)n * sizeof(float));
  dl_round_inplace(*copy, n, (int)ctx->autocast);
  *out = *copy;
  return DL_OK;
}

/* ---- the projections: y = x W^T + b over `rows` rows, cpu/linear.c's rules ---- */

static dl_status proj_forward(const dl_ctx *ctx, const dl_param *w, const dl_param *b,
                              const float *x, int64_t rows, float *y) {
  const int64_t out = w->value.shape[0], in = w->value.shape[1];
  float *xc = NULL, *wc = NULL, *bc = NULL;
  const float *xp, *wp, *bp;
  dl_status s = half_operand(ctx, x, rows * in, &xc, &xp);
  if (s == DL_OK) s = half_operand(ctx, dl_f32(&w->value), out * in, &wc, &wp);
  if (s == DL_OK) s = half_operand(ctx, dl_f32(&b->value), out, &bc, &bp);
  if (s == DL_OK) s = dl_layer_affine_forward(ctx, xp, wp, bp, rows, in, out, y);
  dl_mem_free(xc);
  dl_mem_free(wc);
  dl_mem_free(bc);
  return s;
}

/* dW = dy^T x, db = the sum of dy's rows in row order (each rounded under
 * autocast and accumulated into the grads), and dx = dy W unless dx is NULL. */
static dl_status proj_backward(const dl_ctx *ctx, dl_param *w, dl_param *b, const float *x,
                               const float *dy, int64_t rows, float *dx) {
  const int64_t out = w->value.shape[0], in = w->value.shape[1];
  float *xc = NULL, *wc = NULL, *dyc = NULL, *g = NULL;
  const float *xp, *wp, *dyp;
  dl_status s = half_operand(ctx, x, rows * in, &xc, &xp);
  if (s == DL_OK) s = half_operand(ctx, dl_f32(&w->value), out * in, &wc, &wp);
  if (s == DL_OK) s = half_operand(ctx, dy, rows * out, &dyc, &dyp);
  if (s == DL_OK && (w->requires_grad || b->requires_grad)) {
    g = dl_mem_alloc_uninit((size_t)(out * in + out) * sizeof *g, "attention weight gradient");
    if (!g) s = DL_ERR_NOMEM;
  }
  if (s == DL_OK && dx) {
    s = dl_backend_sgemm(ctx->backend, false, false, rows, in, out, dyp, out, wp, in, 0.0f, dx, in);
    dl_round_inplace(dx, rows * in, (int)ctx->autocast);
  }
  if (s == DL_OK && w->requires_grad) {
    s = dl_backend_sgemm(ctx->backend, true, false, out, in, rows, dyp, out, xp, in, 0.0f, g, in);
    dl_round_inplace(g, out * in, (int)ctx->autocast);
    if (s == DL_OK) dl_param_accumulate(w, g);
  }
  if (s == DL_OK && b->requires_grad) {
    float *gb = g + out * in;
    dl_sum_rows(dyp, rows, out, out, gb);
    dl_round_inplace(gb, out, (int)ctx->autocast);
    dl_param_accumulate(b, gb);
  }
  dl_mem_free(g);
  dl_mem_free(xc);
  dl_mem_free(wc);
  dl_mem_free(dyc);
  return s;
}

/* ---- the heads: one job per (sample, head) ---- */

typedef struct attn_job {
  const dl_layer *l;
  const dl_ctx *ctx;
  attn_dims g;
  float sqrt_d;              /* float(sqrt(head_dim)), torch's divisor */
  float *qkv;                /* [N, T, 3E]: q' (scaled), k, v */
  float *probs;              /* [N, H, T, T]: softmax */
  float *mask;               /* [N, H, T, T]: 1/(1-p) or 0; NULL: no dropout */
  float *pd;                 /* [N, H, T, T]: P~ rounded for the bmm; NULL: P itself */
  float *heads;              /* [N, T, E]: forward output of the heads */
  const float *dheads;       /* backward: gradient of the heads' output */
  float *dqkv;               /* backward: [N, T, 3E] */
  float *dp;                 /* backward: [N, H, T, T] scratch */
  const dl_backend *backend; /* for the serial run; NULL in parallel jobs */
  dl_status status;
} attn_job;

/* Keys visible to query i: all T, or 0..i when causal. */
static int64_t visible(const attn_job *j, int64_t i) { return j->l->desc.causal ? i + 1 : j->g.t; }

/* Row-wise softmax of S in place, float32, in torch's order: max, exp(s - max),
 * their sum (here in double), times 1/sum. Masked keys get 0. */
static void softmax_rows(const attn_job *j, float *p) {
  const int64_t t = j->g.t;
  for (int64_t i = 0; i < t; i++) {
    float *row = p + i * t;
    const int64_t nv = visible(j, i);
    float mx = row[0];
    for (int64_t k = 1; k < nv; k++) mx = row[k] > mx ? row[k] : mx;
    for (int64_t k = 0; k < nv; k++) row[k] -= mx;
    dl_expf_n(row, row, nv);
    double sum = 0.0;
    for (int64_t k = 0; k < nv; k++) sum += row[k];
    const float inv = 1.0f / (float)sum;
    for (int64_t k = 0; k < nv; k++) row[k] *= inv;
    for (int64_t k = nv; k < t; k++) row[k] = 0.0f;
  }
}

/* This head's dropout mask [T, T]: query i's row from words h*2^42 + i*2^21
 * .. of sample n's stream (check_3d keeps T <= 2^21, heads <= 2^22). */
static void head_mask(const attn_job *j, int64_t n, int64_t h, float *mask) {
  const dl_ctx *ctx = j->ctx;
  const int64_t t = j->g.t;
  const int64_t sample = ctx->sample_ids ? ctx->sample_ids[n] : n;
  const uint64_t idx[3] = {j->l->rng_id, (uint64_t)ctx->step, (uint64_t)sample};
  dl_stream s = dl_stream_make(ctx->seed, "dropout", idx, 3);
  const float keep = 1.0f - j->l->desc.p, scale = 1.0f / keep;
  for (int64_t i = 0; i < t; i++)
    dl_stream_uniform(&s, ((uint64_t)h << 42) | ((uint64_t)i << 21), mask + i * t, t);
  for (int64_t i = 0; i < t * t; i++) mask[i] = mask[i] < keep ? scale : 0.0f;
}

/* P~ of pair i, as the second bmm takes it: P * mask, rounded under autocast. */
static const float *dropped_probs(const attn_job *j, int64_t i) {
  const int64_t tt = j->g.t * j->g.t;
  const float *p = j->probs + i * tt;
  if (!j->pd) return p;
  float *pd = j->pd + i * tt;
  for (int64_t k = 0; k < tt; k++) pd[k] = j->mask ? p[k] * j->mask[i * tt + k] : p[k];
  dl_round_inplace(pd, tt, (int)j->ctx->autocast);
  return pd;
}

DL_AVX512_CLONES static dl_status head_forward(const attn_job *j, int64_t i, const dl_backend *b) {
  const attn_dims g = j->g;
  const int64_t n = i / g.h, h = i % g.h, ld = 3 * g.e, tt = g.t * g.t;
  const float *q = j->qkv + n * g.t * ld + h * g.d, *k = q + g.e, *v = q + 2 * g.e;
  float *p = j->probs + i * tt, *o = j->heads + n * g.t * g.e + h * g.d;
  DL_TRY(dl_backend_sgemm(b, false, true, g.t, g.t, g.d, q, ld, k, ld, 0.0f, p, g.t));
  dl_round_inplace(p, tt, (int)j->ctx->autocast);
  softmax_rows(j, p);
  if (j->mask) head_mask(j, n, h, j->mask + i * tt);
  DL_TRY(dl_backend_sgemm(b, false, false, g.t, g.d, g.t, dropped_probs(j, i), g.t, v, ld, 0.0f, o,
                          g.e));
  round_block(j->ctx, o, g.t, g.d, g.e);
  return DL_OK;
}

#if defined(__x86_64__) && defined(__GNUC__)
#include "numerics/columns8.h"

__attribute__((target("avx512f,avx512vl"))) static void dp_dot_p8(const float *dp, const float *p,
                                                                  int64_t t, float s[8]) {
  __m256 cd[8], cp[8];
  __m512d sum = _mm512_setzero_pd();
  for (int64_t i = 0; i < t; i += 8) {
    const int cols = dl_columns8(dp, t, i, cd);
    dl_columns8(p, t, i, cp);
    for (int k = 0; k < cols; k++)
      sum = _mm512_add_pd(sum, _mm512_cvtps_pd(_mm256_mul_ps(cd[k], cp[k])));
  }
  _mm256_storeu_ps(s, _mm512_cvtpd_ps(sum));
}
#endif

/* s[k] = sum over c, in order, of (double)(dp * p) of row k, for `rows`
 * <= DS_ROWS rows of t columns: with AVX-512 a block of eight in the lanes
 * of one register (each row's operations and order as alone; one row's
 * chain of double adds is latency-bound, and was the most of
 * head_backward's own time). */
enum { DS_ROWS = 8 };

static inline void dp_dot_p(const float *dp, const float *p, int64_t t, int rows,
                            float s[DS_ROWS]) {
#if defined(__x86_64__) && defined(__GNUC__)
  if (rows == DS_ROWS && dl_cpu_has_avx512f()) {
    dp_dot_p8(dp, p, t, s);
    return;
  }
#endif
  for (int k = 0; k < rows; k++) {
    double sum = 0.0;
    for (int64_t c = 0; c < t; c++) sum += (double)(dp[k * t + c] * p[k * t + c]);
    s[k] = (float)sum;
  }
}

DL_AVX512_CLONES static dl_status head_backward(const attn_job *j, int64_t i, const dl_backend *b) {
  const attn_dims g = j->g;
  const dl_ctx *ctx = j->ctx;
  const int64_t n = i / g.h, h = i % g.h, ld = 3 * g.e, tt = g.t * g.t;
  const int64_t off = n * g.t * ld + h * g.d;
  const float *q = j->qkv + off, *k = q + g.e, *v = q + 2 * g.e;
  float *dq = j->dqkv + off, *dk = dq + g.e, *dv = dq + 2 * g.e;
  const float *dout = j->dheads + n * g.t * g.e + h * g.d, *p = j->probs + i * tt;
  float *dp = j->dp + i * tt;
  /* dP~ = dO v^T, dv = P~^T dO */
  DL_TRY(dl_backend_sgemm(b, false, true, g.t, g.t, g.d, dout, g.e, v, ld, 0.0f, dp, g.t));
  dl_round_inplace(dp, tt, (int)ctx->autocast);
  DL_TRY(dl_backend_sgemm(b, true, false, g.t, g.d, g.t, dropped_probs(j, i), g.t, dout, g.e, 0.0f,
                          dv, ld));
  round_block(ctx, dv, g.t, g.d, ld);
  /* dropout, then softmax: dS = (dP - sum(dP * P)) * P per row */
  if (j->mask)
    for (int64_t k2 = 0; k2 < tt; k2++) dp[k2] *= j->mask[i * tt + k2];
  for (int64_t r = 0; r < g.t; r += DS_ROWS) {
    const int rows = g.t - r < DS_ROWS ? (int)(g.t - r) : DS_ROWS;
    float s[DS_ROWS];
    dp_dot_p(dp + r * g.t, p + r * g.t, g.t, rows, s);
    for (int k2 = 0; k2 < rows; k2++) {
      float *row = dp + (r + k2) * g.t;
      const float *pr = p + (r + k2) * g.t;
      for (int64_t c = 0; c < g.t; c++) row[c] = (row[c] - s[k2]) * pr[c];
    }
  }
  dl_round_inplace(dp, tt, (int)ctx->autocast);
  /* dq' = dS k, then through q / sqrt(d); dk = dS^T q' */
  DL_TRY(dl_backend_sgemm(b, false, false, g.t, g.d, g.t, dp, g.t, k, ld, 0.0f, dq, ld));
  round_block(ctx, dq, g.t, g.d, ld);
  for (int64_t r = 0; r < g.t; r++)
    for (int64_t c = 0; c < g.d; c++) dq[r * ld + c] /= j->sqrt_d;
  round_block(ctx, dq, g.t, g.d, ld);
  DL_TRY(dl_backend_sgemm(b, true, false, g.t, g.d, g.t, dp, g.t, q, ld, 0.0f, dk, ld));
  round_block(ctx, dk, g.t, g.d, ld);
  return DL_OK;
}

typedef dl_status (*head_fn)(const attn_job *j, int64_t i, const dl_backend *b);

typedef struct head_range {
  attn_job *job;
  head_fn fn;
} head_range;

static void heads_range(void *p, int64_t begin, int64_t end) {
  const head_range *r = p;
  for (int64_t i = begin; i < end; i++) r->fn(r->job, i, NULL); /* the CPU GEMM cannot fail */
}

/* Every (sample, head) pair: in parallel on the CPU, one by one on a backend. */
static dl_status run_heads(attn_job *j, head_fn fn) {
  const int64_t pairs = j->g.n * j->g.h;
  if (j->ctx->backend && j->ctx->backend->sgemm) {
    for (int64_t i = 0; i < pairs; i++) DL_TRY(fn(j, i, j->ctx->backend));
    return DL_OK;
  }
  head_range r = {j, fn};
  dl_parallel_for(pairs, 1, heads_range, &r);
  return DL_OK;
}

/* ---- forward and backward ---- */

static void free_all(dl_tensor *t, int n) {
  for (int i = 0; i < n; i++) dl_tensor_free(&t[i]);
}

static dl_status attention_forward(dl_layer *l, const dl_ctx *ctx, const dl_tensor *x,
                                   dl_tensor *y) {
  char name[128];
  attn_dims g;
  DL_TRY(check_3d(l, x, "input", &g));
  free_all(l->saved, DL_LAYER_MAX_SAVED);
  const bool drop = dropout_active(l);
  /* saved: qkv, probs, mask, heads; then P~ scratch */
  dl_tensor t[5] = {{0}};
  const int64_t rows = g.n * g.t, sq[3] = {g.n, g.t, 3 * g.e}, sp[4] = {g.n, g.h, g.t, g.t};
  dl_status s = dl_tensor_alloc_uninit(&t[0], DL_F32, 3, sq, "attention q, k, v");
  if (s == DL_OK) s = dl_tensor_alloc_uninit(&t[1], DL_F32, 4, sp, "attention weights");
  if (s == DL_OK && drop)
    s = dl_tensor_alloc_uninit(&t[2], DL_F32, 4, sp, "attention dropout mask");
  if (s == DL_OK) s = dl_tensor_alloc_uninit(&t[3], DL_F32, 3, x->shape, "attention heads");
  if (s == DL_OK && (drop || ctx->autocast != DL_F32))
    s = dl_tensor_alloc_uninit(&t[4], DL_F32, 4, sp, "attention dropped weights");
  if (s == DL_OK) s = dl_tensor_alloc_uninit(y, DL_F32, 3, x->shape, "attention output");
  attn_job j = {.l = l,
                .ctx = ctx,
                .g = g,
                .sqrt_d = (float)sqrt((double)g.d),
                .qkv = dl_f32(&t[0]),
                .probs = dl_f32(&t[1]),
                .mask = dl_f32(&t[2]),
                .pd = dl_f32(&t[4]),
                .heads = dl_f32(&t[3])};
  if (s == DL_OK) s = proj_forward(ctx, &l->params[IN_W], &l->params[IN_B], dl_f32(x), rows, j.qkv);
  if (s == DL_OK) {
    /* q' = q / sqrt(d), a float32 division like torch's */
    for (int64_t r = 0; r < rows; r++) {
      float *q = j.qkv + r * 3 * g.e;
      for (int64_t c = 0; c < g.e; c++) q[c] /= j.sqrt_d;
      dl_round_inplace(q, g.e, (int)ctx->autocast);
    }
    s = run_heads(&j, head_forward);
  }
  if (s == DL_OK)
    s = proj_forward(ctx, &l->params[OUT_W], &l->params[OUT_B], j.heads, rows, dl_f32(y));
  dl_tensor_free(&t[4]);
  if (s != DL_OK) {
    free_all(t, 4);
    dl_tensor_free(y);
    return dl_fail_context(s, "%s: ", dl_layer_label(l, name, sizeof name));
  }
  if (ctx->grad_enabled) memcpy(l->saved, t, 4 * sizeof t[0]);
  else free_all(t, 4);
  return DL_OK;
}

static dl_status attention_backward(dl_layer *l, const dl_ctx *ctx, const dl_tensor *x,
                                    const dl_tensor *y, const dl_tensor *dy, dl_tensor *dx) {
  (void)y;
  char name[128];
  attn_dims g;
  DL_TRY(check_3d(l, x, "input", &g));
  DL_TRY(dl_layer_check_dy(l, dy, x));
  const bool drop = dropout_active(l);
  if (l->saved[SAVED_QKV].numel != g.n * g.t * 3 * g.e ||
      l->saved[SAVED_PROBS].numel != g.n * g.h * g.t * g.t ||
      dl_tensor_empty(&l->saved[SAVED_MASK]) == drop)
    return dl_fail(DL_ERR_INVALID,
                   "%s: backward without a grad-mode forward on this input (and mode); run "
                   "forward with grad_enabled first",
                   dl_layer_label(l, name, sizeof name));
  const int64_t rows = g.n * g.t, sp[4] = {g.n, g.h, g.t, g.t};
  dl_tensor t[4] = {{0}}; /* dheads, dqkv, dP, P~ */
  dl_status s = dl_tensor_alloc_uninit(&t[0], DL_F32, 3, x->shape, "attention heads gradient");
  if (s == DL_OK)
    s = dl_tensor_alloc_uninit(&t[1], DL_F32, 3, l->saved[SAVED_QKV].shape,
                               "attention q, k, v gradient");
  if (s == DL_OK) s = dl_tensor_alloc_uninit(&t[2], DL_F32, 4, sp, "attention weights gradient");
  if (s == DL_OK && (drop || ctx->autocast != DL_F32))
    s = dl_tensor_alloc_uninit(&t[3], DL_F32, 4, sp, "attention dropped weights");
  if (s == DL_OK && dx)
    s = dl_tensor_alloc_uninit(dx, DL_F32, 3, x->shape, "attention input gradient");
  attn_job j = {.l = l,
                .ctx = ctx,
                .g = g,
                .sqrt_d = (float)sqrt((double)g.d),
                .qkv = dl_f32(&l->saved[SAVED_QKV]),
                .probs = dl_f32(&l->saved[SAVED_PROBS]),
                .mask = dl_f32(&l->saved[SAVED_MASK]),
                .pd = dl_f32(&t[3]),
                .dheads = dl_f32(&t[0]),
                .dqkv = dl_f32(&t[1]),
                .dp = dl_f32(&t[2])};
  if (s == DL_OK)
    s = proj_backward(ctx, &l->params[OUT_W], &l->params[OUT_B], dl_f32(&l->saved[SAVED_HEADS]),
                      dl_f32(dy), rows, dl_f32(&t[0]));
  if (s == DL_OK) s = run_heads(&j, head_backward);
  if (s == DL_OK)
    s = proj_backward(ctx, &l->params[IN_W], &l->params[IN_B], dl_f32(x), j.dqkv, rows,
                      dx ? dl_f32(dx) : NULL);
  free_all(t, 4);
  if (s != DL_OK) {
    if (dx) dl_tensor_free(dx);
    return dl_fail_context(s, "%s: ", dl_layer_label(l, name, sizeof name));
  }
  return DL_OK;
}

const dl_layer_ops dl_attention_ops = {.forward = attention_forward,
                                       .backward = attention_backward};
