/* The CUDA backend's own kernels: elementwise ops with the CPU's formulas,
 * a sum whose order is fixed in code, and Philox uniforms with the CPU's
 * bits.
 *
 * Every function takes device pointers, queues its kernel on the
 * context's stream and returns at once; a launch failure (no kernel image
 * for this GPU, bad configuration) is reported here, a fault while running
 * at the next dl_cuda_sync or download.
 *
 * Bitwise agreement with the CPU: device code is compiled with
 * --fmad=false (the -ffp-contract=off of docs/design.md rule 2), so a*b+c is two
 * roundings, as on the CPU, and a fused multiply-add happens only where
 * written as fmaf. Division and sqrt are IEEE (no --use_fast_math), and
 * denormals are kept (no -ftz). */
#ifndef DL_CUDA_KERNELS_H
#define DL_CUDA_KERNELS_H

#ifdef __cplusplus
extern "C" {
#endif

#include "backend/cuda/device.h"
#include "numerics/optim_elem.h"
#include "numerics/philox.h"

#include <stdbool.h>
#include <stdint.h>

/* y = x < 0 ? 0 : x (NaN and -0 pass through, as torch.relu), and
 * dx = y > 0 ? dy : 0 from relu's output, as cpu/activations.c. */
dl_status dl_cuda_relu_forward(dl_cuda *ctx, int64_t n, const float *x, float *y);
dl_status dl_cuda_relu_backward(dl_cuda *ctx, int64_t n, const float *dy, const float *y,
                                float *dx);

/* y[r, c] = y[r, c] + bias[c] for a row-major [rows, cols] y. */
dl_status dl_cuda_bias_add(dl_cuda *ctx, int64_t rows, int64_t cols, const float *bias, float *y);

/* x = x * s. */
dl_status dl_cuda_scale(dl_cuda *ctx, int64_t n, float s, float *x);

/* One optimizer step on n elements of one parameter: optim_elem.h's
 * dl_optim_elem with c's scalars (dl_optim_coeffs_for), the very code
 * optim.c runs on the CPU, so the result is dl_optim_step's bit for bit.
 * buf0 (SGD's momentum buffer, Adam's m) may be NULL only for SGD without
 * momentum, buf1 (Adam's v) only for SGD. */
dl_status dl_cuda_optim_step(dl_cuda *ctx, const dl_optim_coeffs *c, int64_t n, float *w,
                             const float *g, float *buf0, float *buf1);

/* ---- the deterministic sum ---- */

/* The order, fixed in code and independent of the GPU: x is cut into slices
 * of DL_CUDA_SUM_SLICE floats, one block each. In a block, thread t adds
 * x[t], x[t + 256], ... of its slice in increasing order from +0.0f; then
 * the 256 lanes are added pairwise, lane t += lane t + s for s = 128, 64,
 * ..., 1, and lane 0 is the slice's sum. One block then sums the slices'
 * partials the same way (thread t: partials t, t + 256, ...). No atomics,
 * no dependence on the SM count: the same bits on every run and GPU. */
enum {
  DL_CUDA_SUM_THREADS = 256,
  DL_CUDA_SUM_PER_THREAD = 16,
  DL_CUDA_SUM_SLICE = DL_CUDA_SUM_THREADS * DL_CUDA_SUM_PER_THREAD
};

/* *out (device, one float) = the sum of x[0..n-1] in the order above. */
dl_status dl_cuda_sum(dl_cuda *ctx, int64_t n, const float *x, float *out);
/* The same order on the host (reduce_ref.c): the definition the kernel is
 * tested against. */
float dl_cuda_sum_ref(const float *x, int64_t n);

/* ---- random numbers ---- */

/* out[i] = dl_stream_uniform's out[i]: word index + i of stream s, as
 * (word >> 8) * 2^-24. Philox4x32-10 runs on the device from the same
 * port of philox.c, so dropout masks can match the CPU bit for bit.
 * index + n must not pass 2^64. */
dl_status dl_cuda_uniform(dl_cuda *ctx, const dl_stream *s, uint64_t index, float *out, int64_t n);
/* The device code's element function run on the host over a host array. */
void dl_cuda_uniform_host(const dl_stream *s, uint64_t index, float *out, int64_t n);

/* ---- dropout masks ---- */

/* mask[r * features + j] = scale if uniform(word j of streams[r]) <
 * keep_prob, else 0: cpu/dropout.c's mask (its rule 1 stream per row)
 * bit for bit. streams (rows of them) and mask are device pointers;
 * keep_prob in (0, 1]. */
dl_status dl_cuda_dropout_mask(dl_cuda *ctx, const dl_stream *streams, int64_t rows,
                               int64_t features, float keep_prob, float scale, float *mask);
/* The kernel's element code on the host over host arrays. */
dl_status dl_cuda_dropout_mask_host(const dl_stream *streams, int64_t rows, int64_t features,
                                    float keep_prob, float scale, float *mask);

#ifdef __cplusplus
}
#endif

#endif
