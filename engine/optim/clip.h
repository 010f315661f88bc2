/* Gradient norm and clipping, as torch.nn.utils.clip_grad_norm_ (norm type
 * 2, foreach=False, torch 1.13): over the params that have a gradient
 * (has_grad; in_optimizer plays no part, as clip_grad_norm_ is usually given
 * model.parameters()), whatever their requires_grad or optimizer flags.
 *
 * The total norm is the L2 norm of the per-param L2 norms. Each per-param
 * norm sums the squares of its gradient in double in element order and is
 * rounded to float32, as torch keeps per-tensor norms in float32; the total
 * sums their squares in double in param order and is rounded to float32.
 * So the result is the same bits on every machine. */
#ifndef DL_CLIP_H
#define DL_CLIP_H

#include "nn/layer.h"

#include <stdbool.h>

/* *total_norm_out := the total norm defined above (0 when no param has a
 * gradient). Nothing is modified. */
dl_status dl_grad_norm(dl_param *const *params, int n, float *total_norm_out);

/* Computes the total norm (returned in *total_norm_out, may be NULL), then
 * multiplies every gradient by
 *   clip_coef = min(1, (1 / (total + 1e-6)) * max_norm)   (in float32)
 * always, even when clip_coef is 1, as torch does. A non-finite total norm
 * is DL_ERR_NUMERIC (naming the first param with a non-finite norm, grads
 * untouched) if error_if_nonfinite; otherwise it proceeds as torch: an
 * infinite norm gives coefficient 0, a NaN norm NaN. max_norm must be >= 0
 * (inf allowed: the gradients are then multiplied by 1). */
dl_status dl_clip_grad_norm(dl_param *const *params, int n, float max_norm, bool error_if_nonfinite,
                            float *total_norm_out);

#endif
