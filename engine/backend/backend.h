/* Where a layer's heavy arithmetic runs: matrix multiplies and
 * convolutions, the optimizer's element updates and dropout masks. A dl_ctx with backend == NULL runs everything on the CPU
 * (dl_sgemm, im2col). A backend takes over the operations it provides
 * (a NULL function pointer leaves that one on the CPU); the layers keep
 * everything else - bias, AMP rounding, gradient accumulation - so a
 * backend changes only the summation order of these operations, which is
 * exactly the difference a CPU-vs-GPU comparison has to measure.
 *
 * All arrays are host arrays: the backend moves them where it computes
 * (engine/backend/cuda/backend.c uploads to the GPU, runs cuBLAS or cuDNN and
 * downloads). A backend is used by one thread at a time: give each rank
 * thread its own. */
#ifndef DL_BACKEND_H
#define DL_BACKEND_H

#include "numerics/optim_elem.h"
#include "numerics/philox.h"
#include "core/status.h"

#include <stdbool.h>
#include <stdint.h>

/* One 2-D convolution: input [n, c, h, w], weight [o, c, k, k], output
 * [n, o, oh, ow], stride and zero padding the same in both directions.
 * Cross-correlation, as torch.nn.Conv2d; no bias (the layer adds it). */
typedef struct dl_conv2d_shape {
  int64_t n, c, h, w;
  int64_t o, k, stride, pad;
  int64_t oh, ow;
} dl_conv2d_shape;

typedef struct dl_backend {
  const char *name; /* "cuda": names the backend in messages */
  void *impl;       /* the backend's state, passed back to each function */
  /* dl_sgemm's contract (sgemm.h): C = beta C + op(A) op(B), row-major,
   * beta 0 or 1; only the summation order is the backend's. */
  dl_status (*sgemm)(void *impl, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                     const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C,
                     int64_t ldc);
  /* y = conv(x, w); dx = the gradient w.r.t. x given dy; dw = the gradient
   * w.r.t. w given x and dy. Each overwrites its output. */
  dl_status (*conv2d_forward)(void *impl, const dl_conv2d_shape *g, const float *x, const float *w,
                              float *y);
  dl_status (*conv2d_backward_data)(void *impl, const dl_conv2d_shape *g, const float *dy,
                                    const float *w, float *dx);
  dl_status (*conv2d_backward_filter)(void *impl, const dl_conv2d_shape *g, const float *x,
                                      const float *dy, float *dw);
  /* One optimizer step of one parameter of n elements: dl_optim_elem
   * (optim_elem.h) with c's scalars on every element, w, buf0 and buf1 in
   * place (buf0: SGD's momentum buffer or Adam's m, buf1: Adam's v; NULL
   * where the optimizer keeps none). */
  dl_status (*optim_step)(void *impl, const dl_optim_coeffs *c, int64_t n, float *w, const float *g,
                          float *buf0, float *buf1);
  /* Dropout masks, cpu/dropout.c's rule: mask[r * features + j] = scale
   * where word j of streams[r] as a uniform is below keep_prob, else 0. */
  dl_status (*dropout_mask)(void *impl, const dl_stream *streams, int64_t rows, int64_t features,
                            float keep_prob, float scale, float *mask);
} dl_backend;

/* dl_sgemm on `b` when it provides sgemm, else on the CPU (DL_OK). */
dl_status dl_backend_sgemm(const dl_backend *b, bool trans_a, bool trans_b, int64_t M, int64_t N,
                           int64_t K, const float *A, int64_t lda, const float *B, int64_t ldb,
                           float beta, float *C, int64_t ldc);

/* dl_sgemm_bias (sgemm.h) on the CPU; on `b` when it provides sgemm, as
 * every row of C filled with bias and b's sgemm with beta 1. */
dl_status dl_backend_sgemm_bias(const dl_backend *b, bool trans_a, bool trans_b, int64_t M,
                                int64_t N, int64_t K, const float *A, int64_t lda, const float *B,
                                int64_t ldb, const float *bias, float *C, int64_t ldc);

/* Whether b runs convolutions (all three operations). */
bool dl_backend_has_conv2d(const dl_backend *b);

#endif
