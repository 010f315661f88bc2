#include "optim/clip.h"

#include <math.h>
#include <stddef.h>

/* torch.norm(g) of one gradient: double sum of squares in element order,
 * rounded to float32 as torch's per-tensor norm. */
static float param_grad_norm(const dl_param *p) {
  const float *g = dl_f32(&p->grad);
  double sum = 0.0;
  for (int64_t i = 0; i < p->grad.numel; i++) sum += (double)g[i] * (double)g[i];
  return (float)sqrt(sum);
}

/* The total norm, and the first param whose own norm is not finite. */
static dl_status total_norm(dl_param *const *params, int n, float *total,
                            const dl_param **first_bad) {
  if (n < 0 || (n > 0 && !params))
    return dl_fail(DL_ERR_INVALID, "grad norm: %d params at %p", n, (const void *)params);
  double sum = 0.0;
  *first_bad = NULL;
  for (int i = 0; i < n; i++) {
    const dl_param *p = params[i];
    if (!p) return dl_fail(DL_ERR_INVALID, "grad norm: param %d is NULL", i);
    if (!p->has_grad) continue;
    if (p->grad.dtype != DL_F32 || p->grad.numel != p->value.numel ||
        (p->grad.numel > 0 && !p->grad.data))
      return dl_fail(DL_ERR_INVALID,
                     "grad norm: param %s has has_grad set but no float32 grad of its size",
                     p->name);
    float norm = param_grad_norm(p);
    if (!isfinite(norm) && !*first_bad) *first_bad = p;
    sum += (double)norm * (double)norm;
  }
  *total = (float)sqrt(sum);
  return DL_OK;
}

dl_status dl_grad_norm(dl_param *const *params, int n, float *total_norm_out) {
  const dl_param *bad;
  return total_norm(params, n, total_norm_out, &bad);
}

dl_status dl_clip_grad_norm(dl_param *const *params, int n, float max_norm, bool error_if_nonfinite,
                            float *total_norm_out) {
  if (!(max_norm >= 0.0f))
    return dl_fail(DL_ERR_INVALID, "clip_grad_norm: max_norm %g must be >= 0", (double)max_norm);
  float total;
  const dl_param *bad;
  DL_TRY(total_norm(params, n, &total, &bad));
  if (total_norm_out) *total_norm_out = total;
  if (error_if_nonfinite && !isfinite(total))
    return dl_fail(DL_ERR_NUMERIC,
                   "clip_grad_norm: the total gradient norm is %g (first non-finite: "
                   "%s), so it cannot be clipped; find where the gradient overflows, "
                   "or clip without error_if_nonfinite",
                   (double)total, bad ? bad->name : "none, the sum overflowed");
  /* torch: max_norm / (total + 1e-6) is reciprocal(total + 1e-6) * max_norm. */
  float coef = (1.0f / (total + 1e-6f)) * max_norm;
  if (coef > 1.0f) coef = 1.0f; /* NaN stays NaN, as torch.clamp */
  for (int i = 0; i < n; i++) {
    dl_param *p = params[i];
    if (!p->has_grad) continue;
    float *g = dl_f32(&p->grad);
    for (int64_t k = 0; k < p->grad.numel; k++) g[k] = g[k] * coef;
  }
  return DL_OK;
}
