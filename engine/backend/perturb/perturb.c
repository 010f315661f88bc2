/* perturb.h's backend: products gathered per output element, summed in the
 * seed's order. Plain loops: calibration runs are few and small, and the
 * point is the order, not the speed. */
#include "backend/perturb/perturb.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { ORDER_ROTATED, ORDER_BLOCKED, ORDER_PAIRWISE, NORDERS };

typedef struct perturb {
  dl_backend table;
  uint64_t mix;
  int order;
  int64_t block;
  float *p; /* products of one output element */
  int64_t cap;
  char name[160]; /* "perturb (seed 3: ...)": the run's backend note */
} perturb;

/* splitmix64's finaliser: seeds 1, 2, 3 give unrelated rotations. */
static uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/* The block length of blocked and pairwise sums: 2, 4, 8 or 16. */
static int64_t block_of(uint64_t mix) { return (int64_t)2 << (mix % 4); }

static float pairwise(const float *p, int64_t n, int64_t base) {
  if (n <= base) {
    float acc = 0.0f;
    for (int64_t i = 0; i < n; i++) acc += p[i];
    return acc;
  }
  int64_t h = n / 2;
  return pairwise(p, h, base) + pairwise(p + h, n - h, base);
}

static float ordered_sum(const perturb *pt, const float *p, int64_t n) {
  float acc = 0.0f;
  if (n == 0) return acc;
  if (pt->order == ORDER_PAIRWISE) return pairwise(p, n, pt->block);
  if (pt->order == ORDER_BLOCKED) {
    for (int64_t b = 0; b < n; b += pt->block) {
      float part = 0.0f;
      for (int64_t i = b; i < n && i < b + pt->block; i++) part += p[i];
      acc += part;
    }
    return acc;
  }
  int64_t r = (int64_t)(pt->mix % (uint64_t)n);
  for (int64_t i = 0; i < n; i++) acc += p[(r + i) % n];
  return acc;
}

/* Room for n products. */
static dl_status reserve(perturb *pt, int64_t n) {
  if (n <= pt->cap) return DL_OK;
  float *p = realloc(pt->p, (size_t)n * sizeof *p);
  if (!p)
    return dl_fail(DL_ERR_NOMEM, "perturbation backend: out of memory for %lld products",
                   (long long)n);
  pt->p = p;
  pt->cap = n;
  return DL_OK;
}

static dl_status p_sgemm(void *impl, bool ta, bool tb, int64_t M, int64_t N, int64_t K,
                         const float *A, int64_t lda, const float *B, int64_t ldb, float beta,
                         float *C, int64_t ldc) {
  perturb *pt = impl;
  DL_TRY(reserve(pt, K));
  for (int64_t m = 0; m < M; m++)
    for (int64_t n = 0; n < N; n++) {
      for (int64_t k = 0; k < K; k++)
        pt->p[k] = (ta ? A[k * lda + m] : A[m * lda + k]) * (tb ? B[n * ldb + k] : B[k * ldb + n]);
      float s = ordered_sum(pt, pt->p, K);
      C[m * ldc + n] = beta != 0.0f ? C[m * ldc + n] + s : s;
    }
  return DL_OK;
}

static int64_t xi(const dl_conv2d_shape *g, int64_t n, int64_t c, int64_t h, int64_t w) {
  return ((n * g->c + c) * g->h + h) * g->w + w;
}
static int64_t wi(const dl_conv2d_shape *g, int64_t o, int64_t c, int64_t i, int64_t j) {
  return ((o * g->c + c) * g->k + i) * g->k + j;
}
static int64_t yi(const dl_conv2d_shape *g, int64_t n, int64_t o, int64_t h, int64_t w) {
  return ((n * g->o + o) * g->oh + h) * g->ow + w;
}

/* The input pixel a tap reads, or false where it falls on padding. */
static bool tap(const dl_conv2d_shape *g, int64_t oh, int64_t ow, int64_t ki, int64_t kj,
                int64_t *ih, int64_t *iw) {
  *ih = oh * g->stride - g->pad + ki;
  *iw = ow * g->stride - g->pad + kj;
  return *ih >= 0 && *ih < g->h && *iw >= 0 && *iw < g->w;
}

static dl_status p_conv_fwd(void *impl, const dl_conv2d_shape *g, const float *x, const float *w,
                            float *y) {
  perturb *pt = impl;
  DL_TRY(reserve(pt, g->c * g->k * g->k));
  for (int64_t n = 0; n < g->n; n++)
    for (int64_t o = 0; o < g->o; o++)
      for (int64_t oh = 0; oh < g->oh; oh++)
        for (int64_t ow = 0; ow < g->ow; ow++) {
          int64_t np = 0, ih, iw;
          for (int64_t c = 0; c < g->c; c++)
            for (int64_t ki = 0; ki < g->k; ki++)
              for (int64_t kj = 0; kj < g->k; kj++)
                if (tap(g, oh, ow, ki, kj, &ih, &iw))
                  pt->p[np++] = x[xi(g, n, c, ih, iw)] * w[wi(g, o, c, ki, kj)];
          y[yi(g, n, o, oh, ow)] = ordered_sum(pt, pt->p, np);
        }
  return DL_OK;
}

/* dx: every (o, ki, kj) whose output pixel reads input (ih, iw). */
static dl_status p_conv_data(void *impl, const dl_conv2d_shape *g, const float *dy, const float *w,
                             float *dx) {
  perturb *pt = impl;
  DL_TRY(reserve(pt, g->o * g->k * g->k));
  for (int64_t n = 0; n < g->n; n++)
    for (int64_t c = 0; c < g->c; c++)
      for (int64_t ih = 0; ih < g->h; ih++)
        for (int64_t iw = 0; iw < g->w; iw++) {
          int64_t np = 0;
          for (int64_t o = 0; o < g->o; o++)
            for (int64_t ki = 0; ki < g->k; ki++)
              for (int64_t kj = 0; kj < g->k; kj++) {
                int64_t sh = ih + g->pad - ki, sw = iw + g->pad - kj;
                if (sh < 0 || sw < 0 || sh % g->stride || sw % g->stride) continue;
                int64_t oh = sh / g->stride, ow = sw / g->stride;
                if (oh >= g->oh || ow >= g->ow) continue;
                pt->p[np++] = dy[yi(g, n, o, oh, ow)] * w[wi(g, o, c, ki, kj)];
              }
          dx[xi(g, n, c, ih, iw)] = ordered_sum(pt, pt->p, np);
        }
  return DL_OK;
}

static dl_status p_conv_filter(void *impl, const dl_conv2d_shape *g, const float *x,
                               const float *dy, float *dw) {
  perturb *pt = impl;
  DL_TRY(reserve(pt, g->n * g->oh * g->ow));
  for (int64_t o = 0; o < g->o; o++)
    for (int64_t c = 0; c < g->c; c++)
      for (int64_t ki = 0; ki < g->k; ki++)
        for (int64_t kj = 0; kj < g->k; kj++) {
          int64_t np = 0, ih, iw;
          for (int64_t n = 0; n < g->n; n++)
            for (int64_t oh = 0; oh < g->oh; oh++)
              for (int64_t ow = 0; ow < g->ow; ow++)
                if (tap(g, oh, ow, ki, kj, &ih, &iw))
                  pt->p[np++] = dy[yi(g, n, o, oh, ow)] * x[xi(g, n, c, ih, iw)];
          dw[wi(g, o, c, ki, kj)] = ordered_sum(pt, pt->p, np);
        }
  return DL_OK;
}

dl_status dl_perturb_backend_create(uint64_t seed, dl_backend **out) {
  *out = NULL;
  if (seed == 0)
    return dl_fail(DL_ERR_INVALID, "perturbation backend: seed 0 means no perturbation; "
                                   "give a seed >= 1");
  perturb *pt = calloc(1, sizeof *pt);
  if (!pt) return dl_fail(DL_ERR_NOMEM, "perturbation backend: out of memory");
  pt->mix = mix64(seed);
  pt->order = (int)(seed % NORDERS);
  pt->block = block_of(pt->mix);
  char what[128];
  snprintf(pt->name, sizeof pt->name, "perturb (%s)", dl_perturb_describe(seed, what, sizeof what));
  pt->table = (dl_backend){.name = pt->name,
                           .impl = pt,
                           .sgemm = p_sgemm,
                           .conv2d_forward = p_conv_fwd,
                           .conv2d_backward_data = p_conv_data,
                           .conv2d_backward_filter = p_conv_filter};
  *out = &pt->table; /* the table is the struct's first member */
  return DL_OK;
}

void dl_perturb_backend_destroy(dl_backend *b) {
  if (!b) return;
  perturb *pt = b->impl;
  free(pt->p);
  free(pt);
}

const char *dl_perturb_describe(uint64_t seed, char *buf, size_t len) {
  uint64_t m = mix64(seed);
  switch (seed % NORDERS) {
  case ORDER_ROTATED:
    snprintf(buf, len, "seed %llu: products in float, summed from k = %016llx mod K around",
             (unsigned long long)seed, (unsigned long long)m);
    break;
  case ORDER_BLOCKED:
    snprintf(buf, len, "seed %llu: products in float, summed in blocks of %lld",
             (unsigned long long)seed, (long long)block_of(m));
    break;
  default:
    snprintf(buf, len, "seed %llu: products in float, summed pairwise down to runs of %lld",
             (unsigned long long)seed, (long long)block_of(m));
  }
  return buf;
}
