/* Optimizers with torch.optim's formulas: SGD (momentum, dampening, weight
 * decay, Nesterov), Adam (L2 weight decay added to the gradient) and AdamW
 * (decoupled weight decay), each as torch's single-tensor (foreach=False)
 * code, operation for operation in float32, so that a trace matches
 * PyTorch's to float32 rounding.
 *
 * An optimizer works on an array of dl_param pointers, not on a model. The
 * params it owns are those with in_optimizer set when it is created (a
 * param left out is pitfall F2: it gets gradients and is never updated). At
 * each step it updates the params that still have in_optimizer and have a
 * gradient (has_grad); a param without one is skipped entirely, its state
 * and step count untouched, as PyTorch skips grad None.
 *
 * Scalar hyperparameters are doubles, as PyTorch's Python floats; like
 * PyTorch, derived scalars (1 - beta, lr / bias_correction, ...) are
 * computed in double and rounded to float32 where they meet a tensor. */
#ifndef DL_OPTIM_H
#define DL_OPTIM_H

#include "nn/layer.h"
#include "numerics/optim_elem.h"

#include <stdbool.h>

typedef enum dl_optim_kind {
  DL_OPTIM_SGD = 0,
  DL_OPTIM_ADAM,
  DL_OPTIM_ADAMW,
  DL_OPTIM_KINDS /* the count */
} dl_optim_kind;

/* The kinds' names, indexed by kind, NULL after the last: "sgd", "adam",
 * "adamw" (a scenario's optimizer.type reads them). */
extern const char *const dl_optim_kind_names[DL_OPTIM_KINDS + 1];
const char *dl_optim_kind_name(dl_optim_kind k);
/* Parses "sgd", "adam" or "adamw"; DL_ERR_INVALID naming the text otherwise. */
dl_status dl_optim_kind_parse(const char *name, dl_optim_kind *out);

typedef struct dl_optim_desc {
  dl_optim_kind kind;
  double lr;           /* the base learning rate (torch.optim's lr=), where a
                          schedule starts (dl_schedule.lr); the optimizer
                          never reads it: dl_optim_step takes each step's */
  double weight_decay; /* SGD, Adam: L2 added to the gradient; AdamW:
                          p *= 1 - lr * weight_decay before the update */
  /* SGD */
  double momentum, dampening;
  bool nesterov; /* needs momentum > 0 and dampening == 0 */
  /* Adam, AdamW */
  double beta1, beta2, eps;
} dl_optim_desc;

/* The defaults of `kind`, torch.optim's: SGD momentum 0, dampening 0,
 * weight decay 0, no Nesterov; Adam lr 1e-3, betas (0.9, 0.999), eps 1e-8,
 * weight decay 0; AdamW the same with weight decay 1e-2. SGD's lr is 0.01,
 * dlcheck's own: torch 1.13's SGD has none (lr is required), 2.x's 1e-3.
 * The scenario loader's defaults are these (scenario/config.c). */
dl_optim_desc dl_optim_default(dl_optim_kind kind);

typedef struct dl_optim dl_optim;

/* Creates an optimizer over the params of `params` that have in_optimizer
 * (each float32, with a grad tensor of the same shape; no param twice), with
 * fresh state. Hyperparameters are checked as torch does: momentum,
 * dampening, weight_decay, eps >= 0, betas in [0, 1). DL_ERR_INVALID names
 * the bad value or param. */
dl_status dl_optim_create(dl_optim **out, const dl_optim_desc *d, dl_param *const *params, int n);
void dl_optim_destroy(dl_optim *o); /* NULL allowed */

const dl_optim_desc *dl_optim_get_desc(const dl_optim *o);
int dl_optim_num_params(const dl_optim *o); /* params it owns */

/* One optimizer step with learning rate lr (the schedule decides it; >= 0).
 * Per param with in_optimizer and has_grad (g its gradient, p its value):
 *   SGD:   g = g + wd p; with momentum: buf = clone(g) at its first step,
 *          else buf = momentum buf + (1 - dampening) g; then g = g + momentum
 *          buf (Nesterov) or g = buf; p = p - lr g.
 *   Adam:  step += 1; g = g + wd p; m = beta1 m + (1 - beta1) g;
 *          v = beta2 v + ((1 - beta2) g) g; bc_k = 1 - beta_k^step;
 *          denom = sqrt(v) / sqrt(bc2) + eps; p = p + ((-lr / bc1) m) / denom.
 *   AdamW: as Adam, but without the L2 term and with p = p (1 - lr wd) first.
 * beta^step is computed in double by exponentiation by squaring (exact
 * multiplications in a fixed order, within a few double ulps of Python's
 * beta ** step), so it is the same bits everywhere. */
dl_status dl_optim_step(dl_optim *o, float lr);
/* The same with each param's update on backend b when it runs optimizer
 * steps (backend.h; the same element formulas, optim_elem.h), else on the
 * CPU, where one parallel job updates every param (16 lanes at a time where
 * the CPU has AVX-512: the same bits). A step count that is not one (a
 * wrong checkpoint) refuses the step before any param is updated; a backend
 * failure stops the step at that param (those before it are updated) and is
 * returned naming it. */
dl_status dl_optim_step_on(dl_optim *o, float lr, const dl_backend *b);

/* The scalars of one step (`step`: its count, 1 for the first) as the
 * update formulas above round them; for backends that run the update. */
dl_optim_coeffs dl_optim_coeffs_for(const dl_optim_desc *d, float lr, int64_t step);

/* Forget all state (momentum buffers, moments, step counts), as a freshly
 * created optimizer: what resuming without the optimizer state does
 * (pitfall C1). */
void dl_optim_reset(dl_optim *o);

/* State for checkpoints, PyTorch's names per owned param, in param order:
 *   SGD:        "state.<param>.momentum_buffer" (only with momentum > 0),
 *               "state.<param>.step"
 *   Adam/AdamW: "state.<param>.step", "state.<param>.exp_avg",
 *               "state.<param>.exp_avg_sq"
 * step is a float32 0-d tensor, as torch 1.13 keeps it: the number of steps
 * this param has taken. step == 0 means "no state yet" (PyTorch's empty
 * state): the next step starts fresh, e.g. SGD's momentum buffer becomes a
 * clone of the gradient. (SGD's step is dlcheck's own entry: torch's SGD
 * marks the same thing by the presence of momentum_buffer.) Every tensor
 * exists from creation, shaped like the param for buffers, so that a
 * checkpoint loads by writing into them (dl_tensor_copy_into). The tensors
 * stay owned by the optimizer. i outside [0, dl_optim_num_state) is
 * DL_ERR_INVALID. */
int dl_optim_num_state(const dl_optim *o);
dl_status dl_optim_state(dl_optim *o, int i, const char **name, dl_tensor **t);

#endif
