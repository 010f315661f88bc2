#include "optim/schedule.h"

#include "numerics/fmath.h"

#include <math.h>
#include <stdbool.h>
#include <string.h>

static const double pi = 3.14159265358979323846;

const char *const dl_schedule_kind_names[DL_SCHEDULE_KINDS + 1] = {[DL_SCHEDULE_CONSTANT] =
                                                                       "constant",
                                                                   [DL_SCHEDULE_STEP] = "step",
                                                                   [DL_SCHEDULE_COSINE] = "cosine",
                                                                   NULL};

const char *dl_schedule_kind_name(dl_schedule_kind k) {
  return (unsigned)k < DL_SCHEDULE_KINDS ? dl_schedule_kind_names[k] : "unknown";
}

dl_status dl_schedule_kind_parse(const char *name, dl_schedule_kind *out) {
  for (int i = 0; name && i < DL_SCHEDULE_KINDS; i++)
    if (strcmp(name, dl_schedule_kind_names[i]) == 0) {
      *out = (dl_schedule_kind)i;
      return DL_OK;
    }
  return dl_fail(DL_ERR_INVALID, "unknown lr schedule '%s': use constant, step or cosine",
                 name ? name : "(null)");
}

dl_schedule dl_schedule_constant(double lr) {
  dl_schedule s = {0};
  s.kind = DL_SCHEDULE_CONSTANT;
  s.lr = lr;
  s.step_size = 1;
  s.gamma = 0.1;
  return s;
}

static bool finite_at_least_zero(double x) { return x >= 0.0 && !isinf(x); }

dl_status dl_schedule_check(const dl_schedule *s) {
  const char *k = dl_schedule_kind_name(s->kind);
  if (s->kind != DL_SCHEDULE_CONSTANT && s->kind != DL_SCHEDULE_STEP &&
      s->kind != DL_SCHEDULE_COSINE)
    return dl_fail(DL_ERR_INVALID, "lr schedule: unknown kind %d", (int)s->kind);
  if (!finite_at_least_zero(s->lr))
    return dl_fail(DL_ERR_INVALID, "lr schedule %s: lr %g must be finite and >= 0", k, s->lr);
  if (s->kind == DL_SCHEDULE_STEP && (s->step_size <= 0 || !(s->gamma > 0.0) || isinf(s->gamma)))
    return dl_fail(DL_ERR_INVALID,
                   "lr schedule step: step_size %lld must be > 0 and gamma %g finite and > 0",
                   (long long)s->step_size, s->gamma);
  if (s->kind != DL_SCHEDULE_COSINE) return DL_OK;
  if (s->warmup_steps < 0 || s->total_steps <= s->warmup_steps)
    return dl_fail(DL_ERR_INVALID,
                   "lr schedule cosine: need 0 <= warmup_steps (%lld) < total_steps (%lld)",
                   (long long)s->warmup_steps, (long long)s->total_steps);
  if (!(s->min_lr >= 0.0 && s->min_lr <= s->lr))
    return dl_fail(DL_ERR_INVALID, "lr schedule cosine: min_lr %g must be in [0, lr = %g]",
                   s->min_lr, s->lr);
  return DL_OK;
}

/* x^n by squaring: a fixed sequence of double multiplications. */
static double pow_int(double x, int64_t n) {
  double r = 1.0;
  while (n > 0) {
    if (n & 1) r *= x;
    x *= x;
    n >>= 1;
  }
  return r;
}

static double cosine_lr(const dl_schedule *s, int64_t step) {
  if (step < s->warmup_steps) return s->lr * (double)(step + 1) / (double)s->warmup_steps;
  if (step >= s->total_steps) return s->min_lr;
  double progress = (double)(step - s->warmup_steps) / (double)(s->total_steps - s->warmup_steps);
  double c = (double)dl_cosf((float)(pi * progress));
  return s->min_lr + 0.5 * (s->lr - s->min_lr) * (1.0 + c);
}

float dl_lr_at(const dl_schedule *s, int64_t step) {
  if (step < 0) step = 0;
  switch (s->kind) {
  case DL_SCHEDULE_CONSTANT: return (float)s->lr;
  case DL_SCHEDULE_STEP: return (float)(s->lr * pow_int(s->gamma, step / s->step_size));
  case DL_SCHEDULE_COSINE: return (float)cosine_lr(s, step);
  case DL_SCHEDULE_KINDS: break; /* not a kind */
  }
  return (float)s->lr;
}
