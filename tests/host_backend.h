/* A dl_backend that runs on the host, for tests of the backend paths
 * without a GPU: its GEMM is dl_sgemm_ref (dl_sgemm's definition) or, with
 * tf32 set, the same on operands rounded to TF32 as tensor cores do; its
 * convolutions are direct loops accumulating in double, written
 * independently of im2col. It counts calls, can fail on purpose, and can
 * check that operands arrive rounded to half (AMP). */
#ifndef DL_TEST_HOST_BACKEND_H
#define DL_TEST_HOST_BACKEND_H

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cpu/sgemm.h"
#include "numerics/half.h"

typedef struct host_backend {
  int sgemm_calls, fwd_calls, data_calls, filter_calls, optim_calls, dropout_calls;
  bool fail;             /* every call fails with DL_ERR_IO */
  int half;              /* expect operands rounded to this half type (0: any) */
  bool operands_rounded; /* stays true while every operand seen was */
  bool tf32;             /* round every GEMM and convolution operand to TF32 */
} host_backend;

/* float32 -> TF32 (10 explicit mantissa bits), round to nearest even. */
static inline float host_round_tf32(float x) {
  uint32_t u;
  memcpy(&u, &x, sizeof u);
  if ((u & 0x7f800000u) == 0x7f800000u) return x; /* inf, NaN */
  u = (u + 0x0fffu + ((u >> 13) & 1u)) & ~0x1fffu;
  memcpy(&x, &u, sizeof x);
  return x;
}

/* The operand as the backend computes with it: a TF32-rounded copy (to be
 * freed) or the array itself. */
static inline const float *host_operand(const host_backend *hb, const float *x, int64_t n,
                                        float **copy) {
  *copy = NULL;
  if (!hb->tf32) return x;
  *copy = malloc((size_t)(n > 0 ? n : 1) * sizeof **copy);
  if (!*copy) return NULL;
  for (int64_t i = 0; i < n; i++) (*copy)[i] = host_round_tf32(x[i]);
  return *copy;
}

static inline void expect_rounded(host_backend *hb, const float *x, int64_t n) {
  for (int64_t i = 0; hb->half && i < n; i++) {
    float r = hb->half == DL_F16 ? dl_round_f16(x[i]) : dl_round_bf16(x[i]);
    if (r != x[i]) hb->operands_rounded = false;
  }
}

static inline dl_status host_sgemm(void *impl, bool ta, bool tb, int64_t M, int64_t N, int64_t K,
                                   const float *A, int64_t lda, const float *B, int64_t ldb,
                                   float beta, float *C, int64_t ldc) {
  host_backend *hb = impl;
  hb->sgemm_calls++;
  if (hb->fail) return dl_fail(DL_ERR_IO, "host backend: sgemm failed on purpose");
  const int64_t na = ta ? K * lda : M * lda, nb = tb ? N * ldb : K * ldb;
  expect_rounded(hb, A, na);
  expect_rounded(hb, B, nb);
  float *ca, *cb;
  const float *a = host_operand(hb, A, na, &ca), *b = host_operand(hb, B, nb, &cb);
  dl_status s = DL_OK;
  if (a && b) dl_sgemm_ref(ta, tb, M, N, K, a, lda, b, ldb, beta, C, ldc);
  else s = dl_fail(DL_ERR_NOMEM, "host backend: out of memory");
  free(ca);
  free(cb);
  return s;
}

static inline float host_in(const host_backend *hb, float v) {
  return hb->tf32 ? host_round_tf32(v) : v;
}

static inline int64_t x_at(const dl_conv2d_shape *g, int64_t n, int64_t c, int64_t h, int64_t w) {
  return ((n * g->c + c) * g->h + h) * g->w + w;
}
static inline int64_t w_at(const dl_conv2d_shape *g, int64_t o, int64_t c, int64_t i, int64_t j) {
  return ((o * g->c + c) * g->k + i) * g->k + j;
}
static inline int64_t y_at(const dl_conv2d_shape *g, int64_t n, int64_t o, int64_t h, int64_t w) {
  return ((n * g->o + o) * g->oh + h) * g->ow + w;
}

/* Calls f(n, o, c, oh, ow, ih, iw, ki, kj) for every product of the
 * convolution that does not touch padding. */
#define FOR_EACH_TAP(g, body)                                                   \
  for (int64_t n = 0; n < (g)->n; n++)                                          \
    for (int64_t o = 0; o < (g)->o; o++)                                        \
      for (int64_t oh = 0; oh < (g)->oh; oh++)                                  \
        for (int64_t ow = 0; ow < (g)->ow; ow++)                                \
          for (int64_t c = 0; c < (g)->c; c++)                                  \
            for (int64_t ki = 0; ki < (g)->k; ki++)                             \
              for (int64_t kj = 0; kj < (g)->k; kj++) {                         \
                int64_t ih = oh * (g)->stride - (g)->pad + ki;                  \
                int64_t iw = ow * (g)->stride - (g)->pad + kj;                  \
                if (ih < 0 || ih >= (g)->h || iw < 0 || iw >= (g)->w) continue; \
                body;                                                           \
              }

static inline double *zeros(int64_t n) {
  double *d = calloc((size_t)n, sizeof *d);
  if (!d) abort(); /* a test helper: no recovery */
  return d;
}

static inline void store(float *dst, double *src, int64_t n) {
  for (int64_t i = 0; i < n; i++) dst[i] = (float)src[i];
  free(src);
}

static inline dl_status host_conv_fwd(void *impl, const dl_conv2d_shape *g, const float *x,
                                      const float *w, float *y) {
  host_backend *hb = impl;
  hb->fwd_calls++;
  if (hb->fail) return dl_fail(DL_ERR_IO, "host backend: conv forward failed on purpose");
  expect_rounded(hb, x, g->n * g->c * g->h * g->w);
  expect_rounded(hb, w, g->o * g->c * g->k * g->k);
  double *acc = zeros(g->n * g->o * g->oh * g->ow);
  FOR_EACH_TAP(g, acc[y_at(g, n, o, oh, ow)] += (double)host_in(hb, x[x_at(g, n, c, ih, iw)]) *
                                                host_in(hb, w[w_at(g, o, c, ki, kj)]));
  store(y, acc, g->n * g->o * g->oh * g->ow);
  return DL_OK;
}

static inline dl_status host_conv_data(void *impl, const dl_conv2d_shape *g, const float *dy,
                                       const float *w, float *dx) {
  host_backend *hb = impl;
  hb->data_calls++;
  if (hb->fail) return dl_fail(DL_ERR_IO, "host backend: conv data failed on purpose");
  double *acc = zeros(g->n * g->c * g->h * g->w);
  FOR_EACH_TAP(g, acc[x_at(g, n, c, ih, iw)] += (double)host_in(hb, dy[y_at(g, n, o, oh, ow)]) *
                                                host_in(hb, w[w_at(g, o, c, ki, kj)]));
  store(dx, acc, g->n * g->c * g->h * g->w);
  return DL_OK;
}

static inline dl_status host_conv_filter(void *impl, const dl_conv2d_shape *g, const float *x,
                                         const float *dy, float *dw) {
  host_backend *hb = impl;
  hb->filter_calls++;
  if (hb->fail) return dl_fail(DL_ERR_IO, "host backend: conv filter failed on purpose");
  double *acc = zeros(g->o * g->c * g->k * g->k);
  FOR_EACH_TAP(g, acc[w_at(g, o, c, ki, kj)] += (double)host_in(hb, dy[y_at(g, n, o, oh, ow)]) *
                                                host_in(hb, x[x_at(g, n, c, ih, iw)]));
  store(dw, acc, g->o * g->c * g->k * g->k);
  return DL_OK;
}

static inline dl_status host_optim_step(void *impl, const dl_optim_coeffs *c, int64_t n, float *w,
                                        const float *g, float *buf0, float *buf1) {
  host_backend *hb = impl;
  hb->optim_calls++;
  if (hb->fail) return dl_fail(DL_ERR_IO, "host backend: optimizer step failed on purpose");
  for (int64_t i = 0; i < n; i++) dl_optim_elem(c, i, w, g, buf0, buf1);
  return DL_OK;
}

/* Dropout masks from each row's uniforms (dl_stream_uniform), the rule of
 * backend.h written out independently of cpu/dropout.c. */
static inline dl_status host_dropout_mask(void *impl, const dl_stream *streams, int64_t rows,
                                          int64_t features, float keep_prob, float scale,
                                          float *mask) {
  host_backend *hb = impl;
  hb->dropout_calls++;
  if (hb->fail) return dl_fail(DL_ERR_IO, "host backend: dropout mask failed on purpose");
  for (int64_t r = 0; r < rows; r++) {
    float *row = mask + r * features;
    dl_stream_uniform(&streams[r], 0, row, features);
    for (int64_t j = 0; j < features; j++) row[j] = row[j] < keep_prob ? scale : 0.0f;
  }
  return DL_OK;
}

static inline dl_backend host_backend_table(host_backend *hb) {
  *hb = (host_backend){.operands_rounded = true};
  return (dl_backend){.name = "host",
                      .impl = hb,
                      .sgemm = host_sgemm,
                      .conv2d_forward = host_conv_fwd,
                      .conv2d_backward_data = host_conv_data,
                      .conv2d_backward_filter = host_conv_filter,
                      .optim_step = host_optim_step,
                      .dropout_mask = host_dropout_mask};
}

#endif
