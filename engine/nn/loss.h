/* Losses with PyTorch's semantics: cross-entropy over class logits
 * (F.cross_entropy with ignore_index and label_smoothing) and mean squared
 * error (F.mse_loss). Each returns the loss and, on request, the gradient
 * with respect to its input, so that a training step needs no autograd.
 *
 * Sums run over rows in row order and over classes in class order, in double;
 * exp/log are the engine's own (fmath.h). The results are therefore the same
 * bits on every machine and thread count. */
#ifndef DL_LOSS_H
#define DL_LOSS_H

#include "core/tensor.h"

#include <stdint.h>

typedef enum dl_reduction {
  DL_REDUCTION_MEAN = 0,
  DL_REDUCTION_SUM,
  DL_REDUCTION_NONE
} dl_reduction;

const char *dl_reduction_name(dl_reduction r); /* "mean", "sum", "none" */
/* Parses "mean", "sum" or "none"; DL_ERR_INVALID naming the text otherwise. */
dl_status dl_reduction_parse(const char *name, dl_reduction *out);

/* Settings of dl_cross_entropy. Start from dl_ce_default(): a zeroed struct
 * has grad_scale 0 and ignore_index 0, which is not PyTorch's default. */
typedef struct dl_ce_desc {
  dl_reduction reduction; /* default mean */
  int32_t ignore_index;   /* default -100 */
  float label_smoothing;  /* in [0, 1]; default 0 */
  /* Optional float32 per-row weights, shaped like the targets ([N] or
   * [N, T]); only with reduction sum (else DL_ERR_INVALID). The loss is then
   * sum_r w[r] * loss_r, the gradient of row r scaled by w[r]: a caller
   * normalising by the token count of a whole accumulated batch (pitfall G4)
   * passes w[r] = 1 / total_tokens. NULL: no weights. */
  const dl_tensor *row_weight;
  /* dlogits is d(loss)/d(logits) * grad_scale: fold in 1/K for gradient
   * accumulation, the AMP loss scale, etc. Default 1. The loss itself is not
   * scaled. */
  float grad_scale;
  /* Emulate computing the loss in half precision (pitfall A4): 0 float32,
   * 1 float16, 2 bfloat16. The logits, each log-probability, each row's
   * loss, the reduced loss and each gradient element are rounded to the half
   * format, as a half-precision log_softmax + nll_loss would store them
   * (sums inside one stage still accumulate in wide precision, as PyTorch's
   * half kernels do). Default 0. */
  int half_dtype;
} dl_ce_desc;

dl_ce_desc dl_ce_default(void);

/* Cross-entropy of logits [N, C] with int32 targets [N], or logits [N, T, C]
 * with targets [N, T] (treated as N*T rows).
 *
 * Per row r with target t (logp = log_softmax(logits[r]), eps = smoothing):
 *   loss_r = (1 - eps) * (-logp[t]) + eps * mean_c(-logp[c])
 * A row whose target is ignore_index has loss_r = 0 and no gradient, and is
 * left out of the mean's denominator: with reduction mean the loss is
 * sum_r loss_r / (number of non-ignored rows), as PyTorch (NaN when every
 * row is ignored, as PyTorch; the gradient is then zero). A target outside
 * [0, C) that is not ignore_index is DL_ERR_INVALID naming the row and value.
 *
 * Outputs:
 *   *loss     the reduced loss, computed in double and rounded to float; for
 *             reduction none, the sum of the per-row losses.
 *   per_row   reduction none only (NULL otherwise): an empty tensor that
 *             receives the float32 per-row losses, shaped like the targets.
 *   dlogits   NULL for no gradient; else an empty tensor that receives
 *             d(loss)/d(logits) * grad_scale, shaped like the logits; for
 *             reduction none, the gradient of the sum of the per-row losses.
 * The caller frees per_row and dlogits. On failure nothing is allocated. */
dl_status dl_cross_entropy(const dl_ce_desc *d, const dl_tensor *logits, const dl_tensor *targets,
                           float *loss, dl_tensor *per_row, dl_tensor *dlogits);

/* Mean squared error of pred and target (float32, same shape):
 *   mean: sum_i (pred_i - target_i)^2 / numel;  sum: the sum;
 *   none: per-element squares into per_elem (an empty tensor; NULL for
 *   mean/sum), *loss = their sum.
 * dpred: NULL, or an empty tensor receiving d(loss)/d(pred) * grad_scale
 * (2 (pred - target) / numel for mean). The caller frees the outputs. */
dl_status dl_mse(dl_reduction reduction, float grad_scale, const dl_tensor *pred,
                 const dl_tensor *target, float *loss, dl_tensor *per_elem, dl_tensor *dpred);

#endif
