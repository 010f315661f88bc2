#include "optim/amp.h"

#include <math.h>

void dl_scaler_init(dl_grad_scaler *s, dl_scaler_mode mode, float init_scale, float growth_factor,
                    float backoff_factor, int growth_interval) {
  s->mode = mode;
  s->scale = init_scale;
  s->growth_factor = growth_factor;
  s->backoff_factor = backoff_factor;
  s->growth_interval = growth_interval;
  s->growth_tracker = 0;
  s->found_inf = false;
  s->unscaled = false;
}

float dl_scaler_factor(const dl_grad_scaler *s) {
  return s->mode == DL_SCALER_OFF ? 1.0f : s->scale;
}

void dl_scaler_unscale(dl_grad_scaler *s, dl_param *const *params, int n) {
  if (s->mode == DL_SCALER_OFF || s->unscaled) return;
  float inv = (float)(1.0 / (double)s->scale);
  bool found = false;
  for (int i = 0; i < n; i++) {
    dl_param *p = params[i];
    if (!p->has_grad) continue;
    float *g = dl_f32(&p->grad);
    for (int64_t j = 0; j < p->grad.numel; j++) {
      if (!isfinite(g[j])) found = true;
      g[j] *= inv;
    }
  }
  s->found_inf = found;
  s->unscaled = true;
}

bool dl_scaler_should_step(const dl_grad_scaler *s) {
  return !(s->mode == DL_SCALER_DYNAMIC && s->found_inf);
}

void dl_scaler_update(dl_grad_scaler *s) {
  if (s->mode == DL_SCALER_DYNAMIC) {
    if (s->found_inf) {
      s->scale *= s->backoff_factor;
      s->growth_tracker = 0;
    } else if (++s->growth_tracker == s->growth_interval) {
      s->scale *= s->growth_factor;
      s->growth_tracker = 0;
    }
  }
  s->found_inf = false;
  s->unscaled = false;
}
