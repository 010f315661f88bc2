/* Loss scaling for mixed precision, with torch.amp.GradScaler semantics:
 * scale starts at init_scale (2^16); each step the gradients are unscaled
 * (multiplied by 1/scale) and checked; a step with an inf/NaN gradient is
 * skipped and the scale multiplied by backoff_factor (0.5); after
 * growth_interval (2000) good steps in a row it is multiplied by
 * growth_factor (2). A static scaler multiplies and divides by a fixed scale
 * and never skips (what users do by hand: pitfall A3). */
#ifndef DL_AMP_H
#define DL_AMP_H

#include "nn/layer.h"

typedef enum { DL_SCALER_OFF, DL_SCALER_DYNAMIC, DL_SCALER_STATIC } dl_scaler_mode;

typedef struct dl_grad_scaler {
  dl_scaler_mode mode;
  float scale;
  float growth_factor, backoff_factor;
  int growth_interval;
  int growth_tracker; /* good steps in a row since the last change */
  bool found_inf;     /* set by unscale for the current step */
  bool unscaled;      /* unscale already ran this step (it runs once) */
} dl_grad_scaler;

void dl_scaler_init(dl_grad_scaler *s, dl_scaler_mode mode, float init_scale, float growth_factor,
                    float backoff_factor, int growth_interval);
/* Factor the loss gradient is multiplied by: scale, or 1 when off. */
float dl_scaler_factor(const dl_grad_scaler *s);
/* grads *= 1/scale (as torch: the reciprocal of the scale in double,
 * rounded to float) for params with has_grad; records whether any is
 * non-finite. A second call in the same step does nothing. */
void dl_scaler_unscale(dl_grad_scaler *s, dl_param *const *params, int n);
/* Whether the optimizer should step: false only for a dynamic scaler that
 * found inf/NaN. */
bool dl_scaler_should_step(const dl_grad_scaler *s);
/* End of step: adjust the scale (dynamic) and clear the per-step flags. */
void dl_scaler_update(dl_grad_scaler *s);

#endif
