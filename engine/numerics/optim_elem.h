/* One optimizer update of one element: the single definition that optim.c
 * runs on the CPU and engine/backend/cuda/kernels.cu on the GPU (compiled there as
 * __host__ __device__). The scalars come precomputed in dl_optim_coeffs
 * (dl_optim_coeffs_for, optim.h), so both sides do the same float32
 * operations in the same order and agree bit for bit (-ffp-contract=off on
 * the CPU, --fmad=false on the GPU; IEEE division and sqrt on both). */
#ifndef DL_OPTIM_ELEM_H
#define DL_OPTIM_ELEM_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#if defined(__CUDACC__)
#define DL_HOST_DEVICE __host__ __device__
#else
#define DL_HOST_DEVICE
#endif

/* One step of one parameter, as float32 where the scalars meet a tensor. */
typedef struct dl_optim_coeffs {
  bool adam;   /* Adam or AdamW; else SGD */
  bool use_wd; /* SGD, Adam: g += wd p */
  float wd;
  /* SGD */
  bool use_mom, nesterov, first; /* first: the momentum buffer starts as g */
  float mom, keep, neg_lr;       /* keep = 1 - dampening */
  /* Adam, AdamW */
  bool decoupled; /* AdamW: p *= shrink first */
  float shrink, b1, b2, keep1, keep2, bc2_sqrt, eps, neg_step_size;
} dl_optim_coeffs;

/* torch's _single_tensor_sgd on element i (buf: the momentum buffer). */
static inline DL_HOST_DEVICE void dl_sgd_elem(const dl_optim_coeffs *c, int64_t i, float *w,
                                              const float *g, float *buf) {
  float dp = g[i];
  if (c->use_wd) dp = dp + c->wd * w[i];
  if (c->use_mom) {
    buf[i] = c->first ? dp : buf[i] * c->mom + c->keep * dp;
    dp = c->nesterov ? dp + c->mom * buf[i] : buf[i];
  }
  w[i] = w[i] + c->neg_lr * dp;
}

/* torch's _single_tensor_adam(w) on element i (m, v: exp_avg, exp_avg_sq). */
static inline DL_HOST_DEVICE void dl_adam_elem(const dl_optim_coeffs *c, int64_t i, float *w,
                                               const float *g, float *m, float *v) {
  float gi = g[i];
  if (c->decoupled) w[i] = w[i] * c->shrink;
  else if (c->use_wd) gi = gi + c->wd * w[i];
  m[i] = m[i] * c->b1 + c->keep1 * gi;
  v[i] = v[i] * c->b2 + c->keep2 * gi * gi;
  float denom = sqrtf(v[i]) / c->bc2_sqrt + c->eps;
  w[i] = w[i] + c->neg_step_size * m[i] / denom;
}

/* Element i of either: buf0 is SGD's momentum buffer or Adam's m, buf1
 * Adam's v. */
static inline DL_HOST_DEVICE void dl_optim_elem(const dl_optim_coeffs *c, int64_t i, float *w,
                                                const float *g, float *buf0, float *buf1) {
  if (c->adam) dl_adam_elem(c, i, w, g, buf0, buf1);
  else dl_sgd_elem(c, i, w, g, buf0);
}

#endif
